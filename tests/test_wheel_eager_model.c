/* SPDX-License-Identifier: MIT */
/* Adversarial randomized test of the eager re-arm against the reference
 * model (tests/wheel_model.h): where the general model test draws deadlines
 * at random (so a re-arm rarely lands in the slot its timer is in, the case
 * in_place_for decides), this one re-arms pending timers near their current
 * deadline (a few ticks either way), at and next to the slot boundaries of
 * every level around it and around now, at the end of time, and mixes
 * eager, lazy and slack arms of one timer in every order, with advances that
 * stop just before, on and just after level boundaries. Callbacks do the same
 * to themselves and their neighbours. The model aborts at the first fire
 * that is early or late, a missed timer, a wrong pending count, a next
 * expiry after the earliest deadline, or an eager arm that counted a move.
 *
 * Usage: test_wheel_eager_model [ops] [seed]   (defaults: 1200000, fixed seed)
 */
#include <stdio.h>
#include <stdlib.h>

#include "wheel_model.h"

static struct model m; /* large: keep it off the stack */
static uint64_t near_rng;

/* A tick near `base`: a few ticks either way, or at / next to a slot
 * boundary of a random level (the start of base's slot there, the start of
 * the next one, the last tick of base's slot). Wraps are fine: the arm takes
 * a past deadline as the next tick, and a huge one saturates in the model as
 * in the wheel. */
static uint64_t near_tick(uint64_t base, uint64_t r)
{
    /* levels 0..3 mostly, any level now and then */
    unsigned level = (unsigned)((r >> 8) % 8 ? (r >> 11) % 4 : (r >> 11) % TW_WHEEL_LEVELS);
    unsigned shift = level * TW_WHEEL_SLOT_BITS;
    uint64_t width = shift >= 64 ? 0 : UINT64_C(1) << shift;
    uint64_t start = base & ~(width - 1);
    uint64_t small = (r >> 16) % 5;
    switch (r % 8) {
    case 0:
        return base + small;
    case 1:
        return base - small;
    case 2:
        return start + small;
    case 3:
        return start - 1 - small;
    case 4:
        return start + width + small;
    case 5:
        return start + width - 1 - small;
    case 6: /* the end of time, now and then */
        return (r >> 24) % 16 ? base + width + small : UINT64_MAX - small;
    default:
        return base + (r >> 20) % 200;
    }
}

/* Arm timer id at deadline d: eager, lazy, or with slack (small, or to the
 * end of time), and record it in the model as model_op does. */
static void near_arm(size_t id, uint64_t d, uint64_t r)
{
    struct model_timer *mt = &m.timers[id];
    uint64_t now = m.wheel.now;
    unsigned kind = (unsigned)(r % 8);
    uint64_t slack = kind == 6 ? (r >> 8) % 70 : kind == 7 ? UINT64_MAX - (r >> 8) % 3 : 0;
    uint64_t moves = tw_wheel_moves(&m.wheel);
    int rc;
    if (kind < 4)
        rc = tw_arm(&m.wheel, &mt->timer, d, 0, TW_ARM_EAGER);
    else if (kind < 6)
        rc = tw_arm(&m.wheel, &mt->timer, d, 0, 0);
    else
        rc = tw_arm(&m.wheel, &mt->timer, d, slack, TW_ARM_SLACK);
    MODEL_REQUIRE(&m, kind >= 4 || tw_wheel_moves(&m.wheel) == moves,
                  "an eager arm of timer %zu counted a move", id);
    if (now == UINT64_MAX) {
        MODEL_REQUIRE(&m, rc == TW_ERANGE, "arm at the end of time returned %d", rc);
        return;
    }
    MODEL_REQUIRE(&m, rc == 0, "arm returned %d", rc);
    if (!mt->armed)
        m.armed++;
    mt->armed = 1;
    mt->deadline = model_due(now, d);
    mt->last = mt->deadline > UINT64_MAX - slack ? UINT64_MAX : mt->deadline + slack;
    model_armed(&m, mt);
    uint64_t planned = tw_deadline(&mt->timer);
    MODEL_REQUIRE(&m, mt->deadline <= planned && planned <= mt->last,
                  "timer %zu planned at %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]", id,
                  planned, mt->deadline, mt->last);
}

/* Re-arm timer id near its planned tick (or near now if it is idle). */
static void near_op(size_t id, uint64_t r)
{
    const struct model_timer *mt = &m.timers[id];
    uint64_t now = m.wheel.now;
    uint64_t base = mt->armed && (r >> 40) % 4 ? tw_deadline(&mt->timer) : now;
    if ((r >> 42) % 8 == 0) {
        int rc = tw_cancel(&m.wheel, &m.timers[id].timer);
        MODEL_REQUIRE(&m, rc == mt->armed, "cancel of timer %zu returned %d", id, rc);
        if (mt->armed)
            m.armed--;
        m.timers[id].armed = 0;
        return;
    }
    near_arm(id, near_tick(base, r), model_rand(&near_rng));
}

/* The model's callback, then a few near re-arms of itself and neighbours. */
static void near_fire(struct tw_timer *t, void *arg)
{
    struct model_timer *mt = arg;
    size_t id = (size_t)(mt - m.timers);
    model_fire(t, arg);
    unsigned ops = (unsigned)(model_rand(&near_rng) % 3);
    for (unsigned i = 0; i < ops; i++) {
        uint64_t r = model_rand(&near_rng);
        near_op((id + (size_t)(r >> 50) % 3) % m.n, r);
    }
}

/* Advance to just before, on or after a boundary near now or the next
 * expiry, a few ticks, or far; now and then by pulling. */
static void near_advance(uint64_t r)
{
    uint64_t now = m.wheel.now, target;
    uint64_t next = tw_wheel_next_expiry(&m.wheel);
    switch ((r >> 4) % 8) {
    case 0:
    case 1:
        target = now + (r >> 8) % 8;
        break;
    case 2:
    case 3:
    case 4:
        target = (next == TW_NEVER ? now : next) + (r >> 8) % 3;
        break;
    case 5:
    case 6:
        target = near_tick(next == TW_NEVER ? now : next, r >> 8);
        break;
    default:
        target = near_tick(now, r >> 8);
        break;
    }
    if (target < now) /* no going back, and no wrap past the end of time */
        target = now;
    /* Time creeps (so that a run does not reach the end of time at once;
     * the last runs start near it). */
    if (target - now > (UINT64_C(1) << 30))
        target = now + (r >> 8) % 64;
    model_advance(&m, target, (r >> 60) % 8 == 0);
}

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 1200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261123;
    const struct {
        uint64_t start;
        size_t timers;
        unsigned callback_ops;
    } runs[] = {
        {0, 8, 0},
        {4000, 64, 1},
        {(UINT64_C(1) << 36) - 70, 200, 1},
        {(UINT64_C(1) << 60) - 5000, 64, 1},
        {UINT64_MAX - (UINT64_C(1) << 40), 64, 1},
        {UINT64_MAX - 20000, 16, 0},
    };
    size_t nruns = sizeof runs / sizeof runs[0];
    uint64_t total_fires = 0;
    for (size_t k = 0; k < nruns; k++) {
        uint64_t rng = seed * 1000003 + k;
        near_rng = model_rand(&rng);
        model_init(&m, runs[k].timers, runs[k].start, model_rand(&rng), runs[k].callback_ops);
        for (size_t i = 0; i < m.n; i++)
            tw_timer_init(&m.timers[i].timer, near_fire, &m.timers[i]);
        uint64_t per_run = ops / nruns;
        for (uint64_t i = 0; i < per_run; i++) {
            uint64_t r = model_rand(&rng);
            if (r % 4 == 0)
                near_advance(r >> 2);
            else
                near_op((size_t)(r >> 32) % m.n, r >> 2);
            if (i % 256 == 0)
                model_check_all(&m);
        }
        model_check_all(&m);
        model_advance(&m, UINT64_MAX, 0);
        model_check_all(&m);
        printf("run %zu: start %llu, %zu timers, %llu fires, %llu moves\n", k,
               (unsigned long long)runs[k].start, m.n, (unsigned long long)m.total_fires,
               (unsigned long long)tw_wheel_moves(&m.wheel));
        total_fires += m.total_fires;
    }
    printf("%llu operations, %llu fires checked against the model\n", (unsigned long long)ops,
           (unsigned long long)total_fires);
    printf("%zu passed, 0 failed\n", nruns); /* any mismatch aborts before this */
    return 0;
}
