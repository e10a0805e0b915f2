/* SPDX-License-Identifier: MIT */
/* Scan: a deadline per timer, and every tick a pass over all of them (the
 * approach a timing wheel replaces: "for each connection, if idle too long,
 * close"). Exact only if the pass runs every tick, which W2 demands (lateness
 * 0), so it does; a coarser pass would be cheaper and late. W2 only. */
#include <stdlib.h>

#include "bench.h"

struct scan {
    uint64_t *deadline; /* BENCH_NEVER when idle */
    size_t capacity, pending;
    uint64_t now;
    bench_fire_fn *fire;
    void *ctx;
};

static void *scan_create(const struct bench_setup *setup)
{
    struct scan *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->deadline = malloc(setup->capacity * sizeof *s->deadline);
    if (!s->deadline) {
        free(s);
        return NULL;
    }
    for (size_t i = 0; i < setup->capacity; i++)
        s->deadline[i] = BENCH_NEVER;
    s->capacity = setup->capacity;
    s->now = setup->now;
    s->fire = setup->fire;
    s->ctx = setup->ctx;
    return s;
}

static void scan_destroy(void *p)
{
    struct scan *s = p;
    free(s->deadline);
    free(s);
}

static void scan_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct scan *s = p;
    s->deadline[id] = deadline;
    s->pending++;
}

static void scan_reset(void *p, uint32_t id, uint64_t deadline)
{
    struct scan *s = p;
    s->deadline[id] = deadline;
}

static void scan_cancel(void *p, uint32_t id)
{
    struct scan *s = p;
    s->deadline[id] = BENCH_NEVER;
    s->pending--;
}

static void scan_advance_to(void *p, uint64_t now)
{
    struct scan *s = p;
    while (s->now < now) {
        uint64_t tick = ++s->now;
        uint64_t *d = s->deadline;
        for (size_t i = 0, n = s->capacity; i < n; i++) {
            if (d[i] <= tick) {
                d[i] = BENCH_NEVER;
                s->pending--;
                s->fire(s->ctx, (uint32_t)i);
            }
        }
    }
}

static uint64_t scan_next_deadline(void *p)
{
    struct scan *s = p;
    return s->pending ? s->now + 1 : BENCH_NEVER; /* it looks every tick */
}

static size_t scan_bytes(void *p)
{
    struct scan *s = p;
    return s->capacity * sizeof *s->deadline + sizeof *s;
}

const struct bench_impl bench_impl_scan = {
    .name = "scan",
    .what = "a deadline per timer, all of them scanned every tick (W2 only)",
    .workloads = BENCH_W2,
    .create = scan_create,
    .destroy = scan_destroy,
    .arm = scan_arm,
    .reset = scan_reset,
    .cancel = scan_cancel,
    .advance_to = scan_advance_to,
    .next_deadline = scan_next_deadline,
    .bytes = scan_bytes,
};
