/* SPDX-License-Identifier: MIT */
/* William Ahern's timeout.c (4 levels x 64 slots, bitmaps, intrusive timers,
 * re-arm = del + sched) behind the benchmark interface: one struct timeout
 * per id, absolute deadlines (TIMEOUT_ABS), advance = timeouts_update then
 * timeouts_get until empty, firing each. Built only with
 * -DTWHEEL_BENCH_TIMEOUTC=DIR, DIR holding timeout.c and its headers (the
 * library is not vendored: bring your own copy). W2 and W3 only: its
 * updates fire everything due by the new time at once, not tick by tick. */
#include <stdlib.h>
#include "bench.h"
#include "timeout.h"

struct tcs {
    struct timeouts *T;
    struct timeout *to;
    size_t capacity;
    uint64_t now; /* the time given to timeouts_update last */
    bench_fire_fn *fire;
    void *ctx;
};

static void *tc_create(const struct bench_setup *setup)
{
    struct tcs *s = calloc(1, sizeof *s);
    int err = 0;
    if (!s)
        return NULL;
    s->T = timeouts_open(0, &err);
    size_t bytes = (setup->capacity * sizeof *s->to + 63) & ~(size_t)63;
    s->to = aligned_alloc(64, bytes ? bytes : 64);
    if (!s->T || !s->to) {
        free(s->to);
        free(s);
        return NULL;
    }
    for (size_t i = 0; i < setup->capacity; i++)
        timeout_init(&s->to[i], TIMEOUT_ABS);
    timeouts_update(s->T, setup->now);
    s->now = setup->now;
    s->capacity = setup->capacity;
    s->fire = setup->fire;
    s->ctx = setup->ctx;
    return s;
}

static void tc_destroy(void *p)
{
    struct tcs *s = p;
    timeouts_close(s->T);
    free(s->to);
    free(s);
}

static void tc_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct tcs *s = p;
    timeouts_add(s->T, &s->to[id], deadline);
}

static void tc_cancel(void *p, uint32_t id)
{
    struct tcs *s = p;
    timeouts_del(s->T, &s->to[id]);
}

static void tc_advance_to(void *p, uint64_t now)
{
    struct tcs *s = p;
    timeouts_update(s->T, now);
    if (now > s->now)
        s->now = now;
    struct timeout *t;
    while ((t = timeouts_get(s->T)) != NULL)
        s->fire(s->ctx, (uint32_t)(t - s->to));
}

static uint64_t tc_next_deadline(void *p)
{
    struct tcs *s = p;
    if (!timeouts_pending(s->T) && !timeouts_expired(s->T))
        return BENCH_NEVER;
    return s->now + timeouts_timeout(s->T); /* a lower bound, as bench.h allows */
}

static size_t tc_bytes(void *p)
{
    struct tcs *s = p;
    /* the timeouts and 4 x 64 list heads (two pointers each) */
    return s->capacity * sizeof(struct timeout) + 4 * 64 * 2 * sizeof(void *);
}

const struct bench_impl bench_impl_timeoutc = {
    .name = "timeout.c",
    .what = "William Ahern's timeout.c: 4 levels x 64 slots, re-arm = del + sched",
    .workloads = BENCH_W2 | BENCH_W3,
    .create = tc_create,
    .destroy = tc_destroy,
    .arm = tc_arm,
    .reset = tc_arm,
    .cancel = tc_cancel,
    .advance_to = tc_advance_to,
    .next_deadline = tc_next_deadline,
    .bytes = tc_bytes,
};
