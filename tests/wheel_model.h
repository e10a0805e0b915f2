/* SPDX-License-Identifier: MIT */
/* A reference model of the core wheel, shared by the randomized model test
 * (tests/test_wheel_model.c) and the fuzz target (fuzz/fuzz_wheel.c).
 *
 * The model keeps, for every timer, whether it is armed, its deadline D and
 * its slack S (0 for exact arms; a plain array: the "sorted list" is
 * implicit, since the checks below look for the minimum). About one arming in
 * four has slack, and one exact arming in two is eager (TW_ARM_EAGER: a
 * pending timer relocated at once); of the other armings of an idle timer,
 * exact or with slack, one in two takes TW_ARM_IDLE (the arm of a timer
 * known idle). Every operation is applied to the real
 * wheel and to the model, and each fire is checked as it happens:
 *   - the timer was armed in the model (so it fires at most once per arming,
 *     and never after a cancel or a re-arm that moved it);
 *   - the wheel's time at the fire is in [D, D + S] (never early, never
 *     late: tick exact when S is 0);
 *   - fire ticks never go back within an advance (deadline order);
 * and after each advance, no armed timer is left with D + S <= target
 * (nothing missed), and the advance moved no more timers than wheel.h
 * allows (model_moves_allowed: tw_wheel_lazy_moves_max for the ticks it
 * covered, plus the descents of each timer toward its own deadline, plus
 * what its callbacks armed); at any time each pending timer's planned tick
 * (tw_deadline) is in [D, D + S] and tw_wheel_next_expiry is no later
 * than the earliest of them (a poller may sleep on it). Callbacks perform
 * random operations on other timers and on themselves, so re-entrancy is
 * part of every run. With `cluster` set, armings are `cluster` ticks ahead
 * give or take 64, exact and lazy but for one in 64 with slack, so that
 * timers share a few slots and re-arms push them back past them: the
 * heartbeats whose moves wheel.h bounds.
 *
 * On a mismatch the model prints what it saw and calls abort(): a test or a
 * fuzzer run fails loudly at the first wrong answer.
 */
#ifndef TWHEEL_WHEEL_MODEL_H
#define TWHEEL_WHEEL_MODEL_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "twheel/wheel.h"

#define MODEL_MAX_TIMERS 4096

struct model;

struct model_timer {
    struct tw_timer timer;
    struct model *model;
    uint64_t deadline; /* model's deadline when armed */
    uint64_t last;     /* deadline + slack (saturating): the latest fire */
    uint64_t armed_at; /* the wheel's time when it was last armed */
    int armed;
};

struct model {
    struct tw_wheel wheel;
    struct model_timer timers[MODEL_MAX_TIMERS];
    size_t n;           /* timers in use */
    size_t armed;       /* model's pending count */
    uint64_t target;    /* target of the running advance */
    uint64_t last_fire; /* tick of the last fire in this advance */
    uint64_t fires;     /* fires seen in the running advance */
    uint64_t total_fires;
    uint64_t rng;          /* drives callback actions */
    unsigned callback_ops; /* operations a callback performs, at most */
    int pulling;           /* fires come from tw_wheel_expire_next */
    uint64_t cluster;      /* 0, or the delay armings cluster around */
    size_t most_armed;     /* the most timers pending at once */
    int advancing;         /* inside model_advance */
    uint64_t allowed;      /* moves the running advance may add for its callbacks */
    uint64_t most_moves;   /* the most moves one advance made */
    uint64_t rearm_moves;  /* moves made by exact lazy arms (their walk steps) */
    uint64_t most_rearm;   /* the most moves one of them made */
};

#define MODEL_REQUIRE(m, cond, ...)                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "model mismatch at %s:%d: %s (now %" PRIu64 ")\n  ", \
                    __FILE__, __LINE__, #cond, (m)->wheel.now);              \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            abort();                                                         \
        }                                                                    \
    } while (0)

static inline uint64_t model_rand(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A delay drawn from four classes: next few ticks, within 2^20, beyond 2^40,
 * and so large that the deadline saturates. */
static inline uint64_t model_delay(uint64_t r)
{
    uint64_t v = r >> 2;
    switch (r & 3) {
    case 0:
        return v % 70;
    case 1:
        return v % (UINT64_C(1) << 20);
    case 2:
        return v % (UINT64_C(1) << 42);
    default:
        return UINT64_MAX - v % 1000;
    }
}

static inline uint64_t model_due(uint64_t now, uint64_t deadline)
{
    return deadline <= now ? now + 1 : deadline;
}

/* The ticks in (lo, hi] at which a timer placed at `from` for the tick d
 * may be moved a level down toward d: the distinct values of d with its
 * digits below level l cleared (l >= 1) strictly between from and d. An
 * exact timer armed at `from` and not re-armed moves at exactly these. */
static inline uint64_t model_descents(uint64_t from, uint64_t d, uint64_t lo, uint64_t hi)
{
    uint64_t n = 0, prev = d;
    for (unsigned l = 1; l < TW_WHEEL_LEVELS; l++) {
        unsigned shift = l * TW_WHEEL_SLOT_BITS;
        uint64_t t = shift >= 64 ? 0 : d & ~((UINT64_C(1) << shift) - 1);
        if (t == prev)
            continue;
        prev = t;
        n += t > from && t > lo && t <= hi;
    }
    return n;
}

/* A timer was armed (or re-armed) at the wheel's time: remember when, and
 * inside an advance allow the moves that arming may add to it (a relocation
 * with slack, and its descents within the advance). */
static inline void model_armed(struct model *m, struct model_timer *mt)
{
    uint64_t now = m->wheel.now;
    mt->armed_at = now;
    if (m->armed > m->most_armed)
        m->most_armed = m->armed;
    if (m->advancing)
        m->allowed += 1 + model_descents(now, tw_deadline(&mt->timer), now, m->target);
}

static void model_op(struct model *m, uint64_t r);

static void model_fire(struct tw_timer *t, void *arg)
{
    struct model_timer *mt = arg;
    struct model *m = mt->model;
    uint64_t now = m->wheel.now;
    size_t id = (size_t)(mt - m->timers);
    MODEL_REQUIRE(m, !m->pulling, "callback %zu ran during a pull", id);
    MODEL_REQUIRE(m, &mt->timer == t, "callback got a foreign timer");
    MODEL_REQUIRE(m, mt->armed, "timer %zu fired but is not armed", id);
    MODEL_REQUIRE(m, mt->deadline <= now && now <= mt->last,
                  "timer %zu due in [%" PRIu64 ", %" PRIu64 "] fired at %" PRIu64, id,
                  mt->deadline, mt->last, now);
    MODEL_REQUIRE(m, now >= m->last_fire, "fire order went back from %" PRIu64, m->last_fire);
    MODEL_REQUIRE(m, now <= m->target, "fired past the target %" PRIu64, m->target);
    MODEL_REQUIRE(m, !tw_pending(t), "timer %zu still pending in its callback", id);
    mt->armed = 0;
    m->armed--;
    m->last_fire = now;
    m->fires++;
    m->total_fires++;
    unsigned ops = m->callback_ops ? (unsigned)(model_rand(&m->rng) % (m->callback_ops + 1)) : 0;
    for (unsigned i = 0; i < ops; i++) {
        /* Half of the callback's actions touch itself or a neighbour id. */
        uint64_t r = model_rand(&m->rng);
        if (r & 1)
            r = (r & ~(UINT64_C(0xfff) << 4)) | ((uint64_t)((id + (r >> 60) % 3) % m->n) << 4);
        /* arm, arm_at or cancel: a callback never advances the wheel */
        model_op(m, (r & ~UINT64_C(0xc)) | (((r >> 40) % 3) << 2));
    }
}

static inline void model_init(struct model *m, size_t n, uint64_t start, uint64_t seed,
                              unsigned callback_ops)
{
    if (n > MODEL_MAX_TIMERS)
        n = MODEL_MAX_TIMERS;
    if (n == 0)
        n = 1;
    tw_wheel_init(&m->wheel, start);
    m->n = n;
    m->armed = 0;
    m->target = start;
    m->last_fire = start;
    m->fires = m->total_fires = 0;
    m->rng = seed;
    m->callback_ops = callback_ops;
    m->pulling = 0;
    m->cluster = 0;
    m->most_armed = 0;
    m->advancing = 0;
    m->allowed = 0;
    m->most_moves = 0;
    m->rearm_moves = 0;
    m->most_rearm = 0;
    for (size_t i = 0; i < n; i++) {
        m->timers[i].model = m;
        m->timers[i].armed = 0;
        m->timers[i].deadline = 0;
        m->timers[i].last = 0;
        m->timers[i].armed_at = start;
        tw_timer_init(&m->timers[i].timer, model_fire, &m->timers[i]);
    }
}

/* The earliest planned tick of a pending timer. */
static inline uint64_t model_min_deadline(const struct model *m)
{
    uint64_t min = TW_NEVER;
    for (size_t i = 0; i < m->n; i++)
        if (m->timers[i].armed && tw_deadline(&m->timers[i].timer) < min)
            min = tw_deadline(&m->timers[i].timer);
    return min;
}

/* The wheel and the model agree on every timer's state and the count. */
static inline void model_check_all(struct model *m)
{
    MODEL_REQUIRE(m, tw_wheel_pending(&m->wheel) == m->armed, "pending %zu, model %zu",
                  tw_wheel_pending(&m->wheel), m->armed);
    for (size_t i = 0; i < m->n; i++) {
        const struct model_timer *mt = &m->timers[i];
        MODEL_REQUIRE(m, tw_pending(&mt->timer) == (mt->armed != 0), "timer %zu pending", i);
        uint64_t planned = tw_deadline(&mt->timer);
        MODEL_REQUIRE(m, mt->armed ? mt->deadline <= planned && planned <= mt->last
                                   : planned == TW_NEVER,
                      "timer %zu deadline %" PRIu64 ", model [%" PRIu64 ", %" PRIu64 "]", i,
                      planned, mt->deadline, mt->last);
    }
    uint64_t next = tw_wheel_next_expiry(&m->wheel);
    uint64_t min = model_min_deadline(m);
    MODEL_REQUIRE(m, next <= min, "next expiry %" PRIu64 " after earliest deadline %" PRIu64,
                  next, min);
    /* TW_NEVER is also the last tick: only "nothing pending" forces it. */
    MODEL_REQUIRE(m, m->armed || next == TW_NEVER, "next expiry %" PRIu64 " with none armed", next);
}

static void model_advance(struct model *m, uint64_t target, int pull)
{
    uint64_t before = m->wheel.now;
    m->target = target > before ? target : before;
    m->last_fire = before;
    m->fires = 0;
    /* The moves wheel.h allows this advance: the lazy re-arms' bound for
     * the ticks it covers, the descents of each pending timer toward its
     * planned tick since it was armed, and (model_armed) what callbacks
     * arm. */
    uint64_t allowed = tw_wheel_lazy_moves_max(m->most_armed, m->target - before), more = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->timers[i].armed)
            more += model_descents(m->timers[i].armed_at, tw_deadline(&m->timers[i].timer), before,
                                   m->target);
    allowed = allowed + more < allowed ? UINT64_MAX : allowed + more;
    uint64_t moves = tw_wheel_moves(&m->wheel);
    m->allowed = 0;
    m->advancing = 1;
    int64_t fired;
    if (pull) {
        fired = 0;
        struct tw_timer *t;
        m->pulling = 1;
        while ((t = tw_wheel_expire_next(&m->wheel, target)) != NULL) {
            m->pulling = 0;
            model_fire(t, t->arg); /* run the model's callback by hand */
            m->pulling = 1;
            fired++;
        }
        m->pulling = 0;
    } else {
        fired = tw_wheel_advance(&m->wheel, target);
    }
    m->advancing = 0;
    moves = tw_wheel_moves(&m->wheel) - moves;
    if (moves > m->most_moves)
        m->most_moves = moves;
    allowed = allowed + m->allowed < allowed ? UINT64_MAX : allowed + m->allowed;
    MODEL_REQUIRE(m, moves <= allowed,
                  "advance to %" PRIu64 " from %" PRIu64 " moved %" PRIu64
                  " timers, wheel.h allows %" PRIu64 " (%zu pending at most)",
                  m->target, before, moves, allowed, m->most_armed);
    MODEL_REQUIRE(m, fired == (int64_t)m->fires, "advance returned %" PRId64 ", saw %" PRIu64,
                  fired, m->fires);
    MODEL_REQUIRE(m, m->wheel.now == m->target, "now %" PRIu64 " after advancing to %" PRIu64,
                  m->wheel.now, m->target);
    for (size_t i = 0; i < m->n; i++)
        MODEL_REQUIRE(m, !m->timers[i].armed || m->timers[i].last > m->target,
                      "timer %zu due by %" PRIu64 " was missed by %" PRIu64, i,
                      m->timers[i].last, m->target);
}

/* One operation, chosen and parametrised by the bits of r:
 *   bits 0-1 class of delay, bits 2-3 operation, bits 4-15 timer id, rest value. */
static void model_op(struct model *m, uint64_t r)
{
    unsigned op = (unsigned)(r >> 2) & 3;
    if (m->cluster && !m->advancing) /* heartbeats: an advance in 16 ops, a cancel in 16 */
        op = (r >> 56) % 16 == 0 ? 3 : (r >> 56) % 16 == 1 ? 2 : 0;
    size_t id = (size_t)((r >> 4) & 0xfff) % m->n;
    struct model_timer *mt = &m->timers[id];
    uint64_t now = m->wheel.now;
    uint64_t value =
        m->cluster ? m->cluster - 64 + (r >> 16) % 128 : model_delay((r & 3) | ((r >> 16) << 2));
    switch (op) {
    case 0: /* arm relative */
    case 1: { /* arm absolute */
        uint64_t deadline = op == 0 || m->cluster
                                ? (value > UINT64_MAX - now ? UINT64_MAX : now + value)
                                : (value & 1 ? now - (value >> 1) % 8 : value);
        /* One arming in four has slack: a little, 1/8 of the delay, a lot,
         * or so much that the window reaches the end of time. */
        uint64_t slack = 0;
        if ((r >> 60) % 4 == 0 && (!m->cluster || (r >> 58) % 4 == 0)) {
            uint64_t sv = r >> 24;
            switch ((r >> 62) & 3) {
            case 0:
                slack = sv % 100;
                break;
            case 1:
                slack = (value >> 3);
                break;
            case 2:
                slack = sv % (UINT64_C(1) << 30);
                break;
            default:
                slack = UINT64_MAX - sv % 1000;
                break;
            }
        }
        /* One exact arming in two is eager: it relocates a pending timer at
         * once, and leaves tw_wheel_moves as it was. */
        int eager = slack == 0 && (r >> 59) & 1 && !m->cluster; /* heartbeats: lazy */
        /* One other arming in two of an idle timer, exact or with slack,
         * is a start, the arm that takes the caller's word that the timer
         * is idle. */
        int start = !eager && !mt->armed && (r >> 58) & 1;
        uint64_t moves = tw_wheel_moves(&m->wheel);
        unsigned flags = (eager ? TW_ARM_EAGER : 0u) | (start ? TW_ARM_IDLE : 0u);
        /* A relative exact lazy arm goes through tw_arm_in, the others
         * through tw_arm with the deadline above (for op 0 the
         * saturated now + value, which is what tw_arm_in computes). */
        int rc = op == 0 && flags == 0 && slack == 0
                     ? tw_arm_in(&m->wheel, &mt->timer, now, value)
                     : tw_arm(&m->wheel, &mt->timer, deadline, slack, flags);
        MODEL_REQUIRE(m, !eager || tw_wheel_moves(&m->wheel) == moves,
                      "an eager arm of timer %zu counted a move", id);
        /* an exact lazy arm moves only what its walk step takes (none from
         * an advance's callback), TW_WHEEL_REARM_MOVES_MAX at most */
        if (!eager && slack == 0) {
            uint64_t moved = tw_wheel_moves(&m->wheel) - moves;
            MODEL_REQUIRE(m, moved <= TW_WHEEL_REARM_MOVES_MAX,
                          "a lazy arm of timer %zu moved %" PRIu64 " timers", id, moved);
            if (m->advancing) /* a pull's callback: its step, not the advance's */
                m->allowed += moved;
            m->rearm_moves += moved;
            m->most_rearm = moved > m->most_rearm ? moved : m->most_rearm;
        }
        if (now == UINT64_MAX) {
            MODEL_REQUIRE(m, rc == TW_ERANGE, "arm at the end of time returned %d", rc);
            break;
        }
        MODEL_REQUIRE(m, rc == 0, "arm returned %d", rc);
        if (!mt->armed)
            m->armed++;
        mt->armed = 1;
        mt->deadline = model_due(now, deadline);
        mt->last = mt->deadline > UINT64_MAX - slack ? UINT64_MAX : mt->deadline + slack;
        model_armed(m, mt);
        uint64_t planned = tw_deadline(&mt->timer);
        MODEL_REQUIRE(m, mt->deadline <= planned && planned <= mt->last,
                      "deadline %" PRIu64 " after arm in [%" PRIu64 ", %" PRIu64 "]", planned,
                      mt->deadline, mt->last);
        MODEL_REQUIRE(m, tw_wheel_pending(&m->wheel) == m->armed,
                      "pending %zu after an arm (start %d, slack %" PRIu64 "), model %zu",
                      tw_wheel_pending(&m->wheel), start, slack, m->armed);
        break;
    }
    case 2: { /* cancel */
        int rc = tw_cancel(&m->wheel, &mt->timer);
        MODEL_REQUIRE(m, rc == mt->armed, "cancel of timer %zu returned %d, model %d", id, rc,
                      mt->armed);
        if (mt->armed)
            m->armed--;
        mt->armed = 0;
        break;
    }
    default: { /* advance: a few ticks, to the next expiry, or far */
        uint64_t step;
        switch (m->cluster ? (r >> 16) % 8 != 0 : (r >> 16) & 3) {
        case 0:
            step = m->cluster ? 1 : (r >> 20) % 8; /* heartbeats: tick by tick */
            break;
        case 1: {
            uint64_t next = tw_wheel_next_expiry(&m->wheel);
            step = next == TW_NEVER ? 1 : next - now;
            break;
        }
        case 2:
            step = (r >> 20) % 5000;
            break;
        default:
            step = (r >> 20) % (UINT64_C(1) << 36);
            break;
        }
        uint64_t target = step > UINT64_MAX - now ? UINT64_MAX : now + step;
        if ((r >> 18) % 16 == 0) /* now and then, go back in time: a no-op */
            target = now - (now > 0);
        model_advance(m, target, (r >> 19) % 8 == 0);
        break;
    }
    }
}

#endif /* TWHEEL_WHEEL_MODEL_H */
