/* SPDX-License-Identifier: MIT */
/* libevent's timers behind the benchmark interface, driven by its real loop;
 * two variants:
 *
 *  - libevent: event_add(ev, &tv) on pure timer events: its min-heap;
 *  - libevent-common: event_add(ev, common) with the magic timevals of
 *    event_base_init_common_timeout, one per distinct delay: a FIFO list per
 *    duration, O(1) when the durations repeat (W2: one 30 s timeout; W3: the
 *    81 durations of 160..240 ms). Only where the workload's delays repeat.
 *
 * libevent reads its time from clock_gettime and sleeps in epoll_wait; both
 * are simulated by fakeclock.c. advance_to(t) sets the fake clock to t and
 * runs one event_base_loop(EVLOOP_NONBLOCK) iteration (timeout_process moves
 * the due events to the active queue, then their callbacks run).
 * advance_next runs event_base_loop(EVLOOP_ONCE): libevent computes its next
 * timeout from its heap, "sleeps" that long in the fake epoll_wait (the fake
 * clock moves on by exactly that), then fires what is due: one real loop
 * iteration per step, as in an application. Event structs come from one array
 * (event_assign), so libevent allocates nothing per timer. The base is
 * created with EVENT_BASE_FLAG_NOLOCK (single-threaded, like the others). */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "bench.h"

struct evs {
    struct event_base *base;
    char *events; /* capacity * event_size bytes */
    size_t event_size, capacity;
    const struct timeval **common; /* common[d - common_lo], or NULL */
    uint64_t common_lo, common_hi;
    bench_fire_fn *fire;
    void *ctx;
    uint64_t *target;
};

/* libevent passes one pointer to a callback; the adapter's state is found
 * through this (one benchmark cell per process, one adapter at a time). */
static struct evs *current;

static inline struct event *ev_of(struct evs *s, uint32_t id)
{
    return (struct event *)(void *)(s->events + (size_t)id * s->event_size);
}

static void evs_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct evs *s = current;
    *s->target = bench_fake_get(); /* the loop's time: the tick it fires at */
    s->fire(s->ctx, (uint32_t)(uintptr_t)arg);
}

static void *evs_create_common(const struct bench_setup *setup, int use_common)
{
    struct evs *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    bench_fake_set(setup->now);
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        s->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    s->event_size = event_get_struct_event_size();
    s->events = malloc(setup->capacity * s->event_size);
    if (!s->base || !s->events)
        goto fail;
    for (size_t i = 0; i < setup->capacity; i++)
        if (event_assign(ev_of(s, (uint32_t)i), s->base, -1, 0, evs_cb, (void *)(uintptr_t)i))
            goto fail;
    if (use_common && setup->common_hi) {
        s->common_lo = setup->common_lo;
        s->common_hi = setup->common_hi;
        size_t n = (size_t)(s->common_hi - s->common_lo + 1);
        s->common = calloc(n, sizeof *s->common);
        if (!s->common)
            goto fail;
        for (size_t i = 0; i < n; i++) {
            uint64_t ms = s->common_lo + i;
            struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
            if (!(s->common[i] = event_base_init_common_timeout(s->base, &tv)))
                goto fail;
        }
    }
    s->capacity = setup->capacity;
    s->fire = setup->fire;
    s->ctx = setup->ctx;
    s->target = setup->target;
    current = s;
    return s;
fail:
    if (s->base)
        event_base_free(s->base);
    free(s->events);
    free(s->common);
    free(s);
    return NULL;
}

static void *evs_create(const struct bench_setup *setup)
{
    return evs_create_common(setup, 0);
}

static void *evs_create_c(const struct bench_setup *setup)
{
    return evs_create_common(setup, 1);
}

static void evs_destroy(void *p)
{
    struct evs *s = p;
    for (size_t i = 0; i < s->capacity; i++)
        event_del(ev_of(s, (uint32_t)i));
    event_base_free(s->base);
    free(s->events);
    free(s->common);
    free(s);
    current = NULL;
}

static void evs_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct evs *s = p;
    uint64_t delay = deadline - bench_fake_get();
    if (s->common && delay >= s->common_lo && delay <= s->common_hi) {
        event_add(ev_of(s, id), s->common[delay - s->common_lo]);
    } else {
        struct timeval tv = {.tv_sec = (time_t)(delay / 1000), .tv_usec = (suseconds_t)(delay % 1000) * 1000};
        event_add(ev_of(s, id), &tv);
    }
}

static void evs_cancel(void *p, uint32_t id)
{
    struct evs *s = p;
    event_del(ev_of(s, id));
}

static void evs_advance_to(void *p, uint64_t now)
{
    struct evs *s = p;
    bench_fake_set(now);
    event_base_loop(s->base, EVLOOP_NONBLOCK);
}

/* libevent has no public call for its earliest timeout (its loop computes it
 * internally, in timeout_next): the drivers use advance_next, which lets the
 * loop do exactly that. */
static uint64_t evs_next_deadline(void *p)
{
    (void)p;
    return BENCH_NEVER;
}

static uint64_t evs_advance_next(void *p)
{
    struct evs *s = p;
    if (event_base_get_num_events(s->base, EVENT_BASE_COUNT_ADDED) == 0)
        return BENCH_NEVER;
    *s->target = bench_fake_get();
    event_base_loop(s->base, EVLOOP_ONCE);
    return bench_fake_get();
}

static size_t evs_bytes(void *p)
{
    struct evs *s = p;
    /* Each event, plus one heap slot (a pointer) each for the plain variant;
     * common-timeout lists link through the event itself. */
    return s->capacity * (s->event_size + (s->common ? 0 : sizeof(void *)));
}

const struct bench_impl bench_impl_libevent = {
    .name = "libevent",
    .what = "libevent 2.1 event_add with a timeout: min-heap, real event_base_loop",
    .workloads = BENCH_ALL,
    .create = evs_create,
    .destroy = evs_destroy,
    .arm = evs_arm,
    .reset = evs_arm,
    .cancel = evs_cancel,
    .advance_to = evs_advance_to,
    .next_deadline = evs_next_deadline,
    .advance_next = evs_advance_next,
    .bytes = evs_bytes,
};

const struct bench_impl bench_impl_libevent_common = {
    .name = "libev-common",
    .what = "libevent 2.1 common timeouts: a FIFO per repeating duration (W2, W3)",
    .workloads = BENCH_W2 | BENCH_W3,
    .create = evs_create_c,
    .destroy = evs_destroy,
    .arm = evs_arm,
    .reset = evs_arm,
    .cancel = evs_cancel,
    .advance_to = evs_advance_to,
    .next_deadline = evs_next_deadline,
    .advance_next = evs_advance_next,
    .bytes = evs_bytes,
};
