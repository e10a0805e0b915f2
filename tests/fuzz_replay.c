/* SPDX-License-Identifier: MIT */
/* Replays inputs through a fuzz target's LLVMFuzzerTestOneInput, so that the
 * seed corpus and every crash ever found (fuzz/corpus/<name>/) run in every
 * build, with any compiler, as an ordinary test.
 *
 * Usage: fuzz_replay_<name> FILE-OR-DIR...   */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *grown = realloc(buf, cap);
            if (!grown) {
                free(buf);
                fclose(f);
                return 1;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, errors = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            errors += replay_file(argv[i]);
            files++;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        struct dirent *e;
        while (dir && (e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            errors += replay_file(path);
            files++;
        }
        if (dir)
            closedir(dir);
    }
    printf("replayed %d inputs\n%d passed, %d failed\n", files, files - errors, errors);
    return errors || files == 0;
}
