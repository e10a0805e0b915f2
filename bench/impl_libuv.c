/* SPDX-License-Identifier: MIT */
/* libuv's timers (a binary heap of intrusive uv_timer_t handles) behind the
 * benchmark interface, driven by its real loop.
 *
 * libuv takes its time from clock_gettime and has no way to set it, so the
 * simulated time reaches it through fakeclock.c: advance_to(t) sets the fake
 * clock to t and runs one uv_run(UV_RUN_NOWAIT) iteration, which updates the
 * loop time (uv__update_time), runs the due timers (uv__run_timers: heap min,
 * uv_timer_stop, callback) and polls (epoll_wait, answered at once with "no
 * events" by fakeclock.c). next_deadline asks the loop (uv_backend_timeout,
 * what uv_run itself uses to decide how long to sleep).
 *
 * Arming is uv_timer_start(handle, cb, deadline - uv_now(loop), 0); re-arming
 * an active handle is the same call (libuv stops and restarts it). A
 * uv_timer_t is the user's handle: libuv keeps nothing else per timer. */
#include <stdlib.h>
#include <uv.h>

#include "bench.h"

struct uvs {
    uv_loop_t loop;
    uv_timer_t *timers;
    size_t capacity;
    bench_fire_fn *fire;
    void *ctx;
};

static void uvs_cb(uv_timer_t *h)
{
    struct uvs *s = h->loop->data;
    s->fire(s->ctx, (uint32_t)(h - s->timers));
}

static void *uvs_create(const struct bench_setup *setup)
{
    struct uvs *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->timers = malloc(setup->capacity * sizeof *s->timers);
    bench_fake_set(setup->now);
    if (!s->timers || uv_loop_init(&s->loop) != 0) {
        free(s->timers);
        free(s);
        return NULL;
    }
    s->loop.data = s;
    for (size_t i = 0; i < setup->capacity; i++)
        uv_timer_init(&s->loop, &s->timers[i]);
    s->capacity = setup->capacity;
    s->fire = setup->fire;
    s->ctx = setup->ctx;
    return s;
}

static void uvs_destroy(void *p)
{
    struct uvs *s = p;
    for (size_t i = 0; i < s->capacity; i++)
        uv_close((uv_handle_t *)&s->timers[i], NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT); /* finishes the closes */
    uv_loop_close(&s->loop);
    free(s->timers);
    free(s);
}

static inline uint64_t uvs_tick(const struct uvs *s)
{
    return uv_now(&s->loop) - BENCH_CLOCK_BASE_MS;
}

static void uvs_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct uvs *s = p;
    uv_timer_start(&s->timers[id], uvs_cb, deadline - uvs_tick(s), 0);
}

static void uvs_cancel(void *p, uint32_t id)
{
    struct uvs *s = p;
    uv_timer_stop(&s->timers[id]);
}

static void uvs_advance_to(void *p, uint64_t now)
{
    struct uvs *s = p;
    bench_fake_set(now);
    uv_run(&s->loop, UV_RUN_NOWAIT);
}

static uint64_t uvs_next_deadline(void *p)
{
    struct uvs *s = p;
    if (s->loop.timer_heap.nelts == 0) /* (uv_backend_timeout says 0 then) */
        return BENCH_NEVER;
    int timeout = uv_backend_timeout(&s->loop); /* ms to the heap's minimum, capped */
    return uvs_tick(s) + (uint64_t)(timeout > 0 ? timeout : 1);
}

static size_t uvs_bytes(void *p)
{
    struct uvs *s = p;
    return s->capacity * sizeof(uv_timer_t) + sizeof *s;
}

const struct bench_impl bench_impl_libuv = {
    .name = "libuv",
    .what = "libuv 1.x uv_timer_start/stop: binary heap of intrusive handles, real uv_run",
    .workloads = BENCH_ALL,
    .create = uvs_create,
    .destroy = uvs_destroy,
    .arm = uvs_arm,
    .reset = uvs_arm,
    .cancel = uvs_cancel,
    .advance_to = uvs_advance_to,
    .next_deadline = uvs_next_deadline,
    .bytes = uvs_bytes,
};
