/* SPDX-License-Identifier: MIT */
/* Probe lengths of tw_tasks' index: grown from empty against sized up front
 * (config.capacity), measured by walking the index itself (white-box: this
 * file includes src/tasks/internal.h and builds on the sources, not the
 * library).
 *
 * For N in {1e4, 3e4, 1e5, 3e5, 1e6}, integer and "conn:<k>" string keys,
 * several seeds, it fills three instances with the same keys in the same
 * order and reports, over the pending keys, the mean and the longest probe
 * (slots from the key's home to its slot, + 1: what a successful lookup
 * scans):
 *   grown   no hint: the index grew by rehashes (each places a task from its
 *           home word, walking the old index in order);
 *   fresh   an empty index of the grown one's size, filled by inserts only:
 *           what the grown index should look like if the rehash is sound
 *           (linear probing fills the same slots whatever the order, so the
 *           mean must match exactly; the longest may differ);
 *   hinted  config.capacity = N (load 0.55).
 * and the textbook mean for linear probing at the load a, (1 + 1/(1-a)) / 2.
 *
 * Usage: tasks_probe [--seq]   (--seq: keys 0..N-1, only N = 1e6, 6 seeds)
 */
#include "tasks/internal.h"

#include <stdio.h>

static void nop(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
}

struct probes {
    double mean;
    uint32_t max;
    double load;
    uint32_t cap;
};

static struct probes measure(const struct tw_tasks *t)
{
    struct probes m = {0};
    uint64_t sum = 0;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t sl = t->slots[pos];
        if (sl <= TASKS_SLOT_TOMB)
            continue;
        uint32_t home = tw_hash_home((uint64_t)*tasks_hi_at(t, (sl & t->mask) - 2) << 32, t->cap);
        uint32_t d = (pos >= home ? pos - home : pos + t->cap - home) + 1;
        sum += d;
        if (d > m.max)
            m.max = d;
    }
    m.mean = (double)sum / t->live;
    m.cap = t->cap;
    m.load = (double)t->live / t->cap;
    return m;
}

static struct tw_tasks *make(int ints, uint64_t seed, size_t hint)
{
    struct tw_tasks_config c = {.execute = nop,
                                .key_kind = ints ? TW_TASKS_KEY_INT : TW_TASKS_KEY_BYTES,
                                .seed = {seed, seed * 7 + 1},
                                .capacity = hint};
    struct tw_tasks *t;
    if (tw_tasks_new(&t, &c))
        abort();
    return t;
}

static int seq;

static void fill(struct tw_tasks *t, int ints, size_t n, uint64_t seed)
{
    char b[32];
    for (size_t i = 0; i < n; i++) {
        uint64_t k = seq ? i : (i * UINT64_C(0x9e3779b97f4a7c15) ^ seed);
        int rc;
        if (ints) {
            rc = tw_tasks_set_int(t, k, NULL, 100);
        } else {
            int l = snprintf(b, sizeof b, "conn:%llu", (unsigned long long)k);
            rc = tw_tasks_set(t, b, (size_t)l, NULL, 100);
        }
        if (rc != 1)
            abort();
    }
}

static double textbook(double a)
{
    return (1 + 1 / (1 - a)) / 2;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {10000, 30000, 100000, 300000, 1000000};
    seq = argc > 1 && strcmp(argv[1], "--seq") == 0;
    size_t first = seq ? 4 : 0;
    uint64_t seeds = seq ? 6 : 3;
    printf("keys  N        seed | grown: slots load mean (textbook) max | fresh, same slots: mean "
           "max | hinted: load mean (textbook) max\n");
    for (int ints = 1; ints >= 0; ints--)
        for (size_t si = first; si < 5; si++)
            for (uint64_t seed = 1; seed <= seeds; seed++) {
                size_t n = sizes[si];
                struct tw_tasks *g = make(ints, seed, 0);
                fill(g, ints, n, seed);
                struct probes pg = measure(g);
                struct tw_tasks *f = make(ints, seed, 0);
                if (tw_tasks_rehash_(f, g->cap, g->bits)) /* an empty index of the same size */
                    abort();
                fill(f, ints, n, seed);
                struct probes pf = measure(f);
                struct tw_tasks *h = make(ints, seed, n);
                fill(h, ints, n, seed);
                struct probes ph = measure(h);
                printf("%-5s %-8zu %llu    | %8u %.3f %.3f (%.3f) %3u | %.3f %3u%s | %.3f %.3f "
                       "(%.3f) %3u\n",
                       ints ? "int" : "str", n, (unsigned long long)seed, pg.cap, pg.load,
                       pg.mean, textbook(pg.load), pg.max, pf.mean, pf.max,
                       f->cap != g->cap ? " (size differs!)" : "", ph.load, ph.mean,
                       textbook(ph.load), ph.max);
                fflush(stdout);
                tw_tasks_free(g);
                tw_tasks_free(f);
                tw_tasks_free(h);
            }
    return 0;
}
