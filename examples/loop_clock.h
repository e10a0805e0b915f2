/* SPDX-License-Identifier: MIT */
/* What the event-loop examples share: 1 ms ticks on CLOCK_MONOTONIC, and
 * the check that no timer fires before its delay.
 *
 * The rule of twheel/wheel.h, in four lines:
 *   tick_floor(ns)  the loop's "now" in ticks: advance and timeouts use it;
 *   tick_ceil(ns)   the "now" to arm from when a delay is a minimum: a
 *                   deadline of tick_ceil(t) + d ticks is never reached
 *                   before t + d ms, as tick_floor(t') >= tick_ceil(t) + d
 *                   means t' >= t + d ms;
 *   tw_arm_in(w, t, tick_ceil(clock), delay) to arm, anywhere;
 *   tw_wheel_timeout(w, tick_floor(clock)) to aim the loop's timer.
 */
#ifndef TWHEEL_EXAMPLES_LOOP_CLOCK_H
#define TWHEEL_EXAMPLES_LOOP_CLOCK_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <twheel.h>

#define NS_PER_TICK 1000000LL /* one tick = 1 ms */

static inline int64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline uint64_t tick_floor(int64_t ns)
{
    return (uint64_t)(ns / NS_PER_TICK);
}

static inline uint64_t tick_ceil(int64_t ns)
{
    return (uint64_t)((ns + NS_PER_TICK - 1) / NS_PER_TICK);
}

/* A wheel timeout in ticks as a poll timeout in ms: -1 for "none". */
static inline int timeout_ms(uint64_t ticks)
{
    if (ticks == TW_NEVER)
        return -1;
    return ticks > INT_MAX ? INT_MAX : (int)ticks;
}

/* The check: every timer records when it was armed and its delay; when it
 * fires, the time elapsed on CLOCK_MONOTONIC must be at least the delay. */
struct fire_check {
    long armed, fired, early;
    int64_t worst_early_ns, worst_late_ns;
};

static inline void check_fired(struct fire_check *c, const char *what, int64_t armed_ns,
                               uint64_t delay_ms)
{
    int64_t elapsed = clock_ns() - armed_ns;
    int64_t want = (int64_t)delay_ms * NS_PER_TICK;
    c->fired++;
    if (elapsed < want) {
        c->early++;
        if (want - elapsed > c->worst_early_ns)
            c->worst_early_ns = want - elapsed;
        fprintf(stderr, "EARLY: %s fired %.3f ms after arming with a delay of %llu ms\n", what,
                (double)elapsed / 1e6, (unsigned long long)delay_ms);
    } else if (elapsed - want > c->worst_late_ns) {
        c->worst_late_ns = elapsed - want;
    }
}

/* Print the verdict; 0 if every timer armed fired, none early. */
static inline int check_report(const char *prog, const struct fire_check *c, double run_s)
{
    printf("%s: %ld armed, %ld fired, %ld early (worst %.3f ms); latest fire %.3f ms after "
           "its delay (timeliness only: not judged); %.2f s\n",
           prog, c->armed, c->fired, c->early, (double)c->worst_early_ns / 1e6,
           (double)c->worst_late_ns / 1e6, run_s);
    if (c->early == 0 && c->fired == c->armed) {
        printf("%s: PASS\n", prog);
        return 0;
    }
    printf("%s: FAIL (%s)\n", prog, c->early ? "a timer fired before its delay"
                                              : "not every timer fired in time");
    return 1;
}

#endif /* TWHEEL_EXAMPLES_LOOP_CLOCK_H */
