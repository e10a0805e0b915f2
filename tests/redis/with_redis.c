/* SPDX-License-Identifier: MIT */
/* Runs a program against a redis-server of its own, for the tests of
 * programs that take a server's address (examples/redis_reminders.c):
 *
 *   with_redis PROGRAM [ARGS...]
 *
 * starts a plain redis-server with the fixture (127.0.0.1, a free port, a
 * new temporary directory), runs PROGRAM ARGS... 127.0.0.1:PORT, then stops
 * the server and removes its directory. Exit status: the program's (1 if it
 * died of a signal or ran over 60 s, then it is killed), 2 if the server
 * could not be started. The fixture kills the server and the program if
 * this process is killed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "fixture.h"

#define RUN_MS 60000

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: with_redis PROGRAM [ARGS...] (the address is appended)\n");
        return 2;
    }
    rfx_cleanup_on_signals();
    struct rfx_server server;
    struct rfx_options opts = {0};
    if (rfx_start(&server, &opts) != 0) {
        fprintf(stderr, "with_redis: could not start redis-server\n");
        return 2;
    }
    printf("with_redis: redis-server on %s (in %s)\n", rfx_addr(&server), server.dir);
    fflush(stdout);
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        rfx_stop(&server);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        args[i - 1] = argv[i];
    args[argc - 1] = server.addr;
    pid_t pid;
    int status = 0, rc = 1;
    if (rfx_spawn(&pid, args, NULL) == 0) {
        if (rfx_wait(pid, RUN_MS, &status) == 0) {
            if (WIFEXITED(status))
                rc = WEXITSTATUS(status);
            else
                fprintf(stderr, "with_redis: %s died of signal %d\n", argv[1], WTERMSIG(status));
        } else {
            fprintf(stderr, "with_redis: %s still running after %d ms: killed\n", argv[1], RUN_MS);
            rfx_reap(pid);
        }
    }
    free(args);
    rfx_stop(&server);
    return rc;
}
