/* SPDX-License-Identifier: MIT */
/* twheel's core wheel behind the benchmark interface: one struct tw_timer
 * (40 bytes) per id in one array; an id is the timer's index.
 *
 * Three entries, every arm by tw_arm: "twheel", exact (idle ids armed
 * with TW_ARM_IDLE, the arm that only stores into the timer; re-arms with no
 * flag: later re-arms are lazy),
 * "twheel-eager", exact with eager re-arms (idle ids with TW_ARM_IDLE,
 * re-arms with TW_ARM_EAGER; W2 only), and "twheel-slack", every timer armed
 * with slack = 1/8 of its delay (delay >> 3) and
 * TW_ARM_SLACK (the slack rules for a delay too short to give any): idle ids
 * with TW_ARM_IDLE too, re-arms without it.
 * For all three, moves are tw_wheel_moves: the wheel's moves in advancing plus, with slack,
 * the re-arms that relocated a pending timer (a re-arm with slack relocates
 * at once instead of lazily; eager relocations are not counted). */
#include <stdlib.h>

#include "bench.h"
#include "twheel/wheel.h"

struct tws {
    struct tw_wheel wheel;
    struct tw_timer *timers;
    size_t capacity;
    bench_fire_fn *fire;
    void *ctx;
    uint64_t *target;
    uint64_t now; /* the wheel's time, kept here: what a caller knows anyway */
};

static void tws_fire(struct tw_timer *t, void *arg)
{
    struct tws *s = arg;
    s->fire(s->ctx, (uint32_t)(t - s->timers));
}

static void *tws_create(const struct bench_setup *setup)
{
    struct tws *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    /* line-aligned, as the peers' arrays (heap4, rounds) */
    size_t bytes = (setup->capacity * sizeof *s->timers + 63) & ~(size_t)63;
    s->timers = aligned_alloc(64, bytes ? bytes : 64);
    if (!s->timers) {
        free(s);
        return NULL;
    }
    tw_wheel_init(&s->wheel, setup->now);
    for (size_t i = 0; i < setup->capacity; i++)
        tw_timer_init(&s->timers[i], tws_fire, s);
    s->capacity = setup->capacity;
    s->fire = setup->fire;
    s->ctx = setup->ctx;
    s->target = setup->target;
    s->now = setup->now;
    return s;
}

static void tws_destroy(void *p)
{
    struct tws *s = p;
    tw_wheel_destroy(&s->wheel);
    free(s->timers);
    free(s);
}

/* .arm is only ever given an idle id (bench.h): TW_ARM_IDLE, the arm that
 * only stores into the timer. Re-arms (.reset) take no flag: lazy. */
static void tws_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct tws *s = p;
    tw_arm(&s->wheel, &s->timers[id], deadline, 0, TW_ARM_IDLE);
}

static void tws_reset(void *p, uint32_t id, uint64_t deadline)
{
    struct tws *s = p;
    tw_arm(&s->wheel, &s->timers[id], deadline, 0, 0);
}

#define TWS_SLACK_SHIFT 3

/* With slack: idle ids with TW_ARM_IDLE (store-only, as tws_arm), re-arms
 * without it. */
static void tws_start_slack(void *p, uint32_t id, uint64_t deadline)
{
    struct tws *s = p;
    uint64_t delay = deadline - s->now;
    tw_arm(&s->wheel, &s->timers[id], deadline, (delay >> TWS_SLACK_SHIFT),
           TW_ARM_IDLE | TW_ARM_SLACK);
}

static void tws_arm_slack(void *p, uint32_t id, uint64_t deadline)
{
    struct tws *s = p;
    uint64_t delay = deadline - s->now;
    tw_arm(&s->wheel, &s->timers[id], deadline, (delay >> TWS_SLACK_SHIFT), TW_ARM_SLACK);
}

/* Exact, eager: TW_ARM_EAGER relocates a pending timer at once
 * (unless it is in the slot of its new deadline already) instead of lazily. */
static void tws_arm_eager(void *p, uint32_t id, uint64_t deadline)
{
    struct tws *s = p;
    tw_arm(&s->wheel, &s->timers[id], deadline, 0, TW_ARM_EAGER);
}

static void tws_cancel(void *p, uint32_t id)
{
    struct tws *s = p;
    tw_cancel(&s->wheel, &s->timers[id]);
}

static void tws_advance_to(void *p, uint64_t now)
{
    struct tws *s = p;
    tw_wheel_advance(&s->wheel, now);
    if (now > s->now)
        s->now = now;
}

static uint64_t tws_next_deadline(void *p)
{
    struct tws *s = p;
    return tw_wheel_next_expiry(&s->wheel); /* TW_NEVER == BENCH_NEVER */
}

static size_t tws_bytes(void *p)
{
    struct tws *s = p;
    return s->capacity * sizeof(struct tw_timer) + sizeof(struct tw_wheel);
}

static uint64_t tws_moves(void *p)
{
    struct tws *s = p;
    return tw_wheel_moves(&s->wheel);
}

const struct bench_impl bench_impl_twheel = {
    .name = "twheel",
    .what = "twheel core: hierarchical wheel, 11 levels x 64 slots, intrusive 40-byte timers",
    .workloads = BENCH_ALL,
    .create = tws_create,
    .destroy = tws_destroy,
    .arm = tws_arm,
    .reset = tws_reset, /* lazy when later */
    .cancel = tws_cancel,
    .advance_to = tws_advance_to,
    .next_deadline = tws_next_deadline,
    .bytes = tws_bytes,
    .moves = tws_moves,
};

const struct bench_impl bench_impl_twheel_slack = {
    .name = "twheel-slack",
    .what = "twheel core, every timer armed with slack = 1/8 of its delay (tw_arm with "
            "TW_ARM_SLACK)",
    .workloads = BENCH_W2 | BENCH_W3,
    .create = tws_create,
    .destroy = tws_destroy,
    .arm = tws_start_slack,
    .reset = tws_arm_slack,
    .cancel = tws_cancel,
    .advance_to = tws_advance_to,
    .next_deadline = tws_next_deadline,
    .bytes = tws_bytes,
    .moves = tws_moves,
    .slack_shift = TWS_SLACK_SHIFT,
};

const struct bench_impl bench_impl_twheel_eager = {
    .name = "twheel-eager",
    .what = "twheel core, exact, re-arms relocate at once (tw_arm with TW_ARM_EAGER), W2 only",
    .workloads = BENCH_W2, /* W3 arms idle timers only: the same as twheel */
    .create = tws_create,
    .destroy = tws_destroy,
    .arm = tws_arm, /* idle ids: TW_ARM_IDLE, as twheel */
    .reset = tws_arm_eager,
    .cancel = tws_cancel,
    .advance_to = tws_advance_to,
    .next_deadline = tws_next_deadline,
    .bytes = tws_bytes,
    .moves = tws_moves,
};
