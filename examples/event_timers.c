/* SPDX-License-Identifier: MIT */
/* twheel on a libevent loop: one timer event drives a wheel of 1 ms ticks on
 * CLOCK_MONOTONIC, however many timers the wheel holds.
 *
 * The pattern:
 *   - arm anywhere with tw_arm_in(&wheel, t, tick_ceil(clock_ns()), d)
 *     (the wheel's own time is stale while the loop sleeps), then aim();
 *   - aim(): evtimer_add(driver, timeout) with the timeout from
 *     tw_wheel_timeout(&wheel, tick_floor(clock_ns())), or evtimer_del
 *     when the wheel is empty;
 *   - the driver's callback advances the wheel to tick_floor(clock_ns())
 *     (its timers' callbacks run there) and aims again.
 *
 * The program: three rounds, 500 ms apart, each arming 20 timers with delays
 * of 1..300 ms from an unrelated libevent timer (so the wheel has not been
 * advanced for 100 ms or more when they are armed); each timer, when it
 * fires, arms itself once more for 1..100 ms from its callback. It checks,
 * on CLOCK_MONOTONIC, that no timer fires before its delay and that all 120
 * fire, within 3 s. Exit status 0 on PASS, 1 on FAIL (or 2 if libevent
 * cannot start).
 *
 * `event_timers --naive` arms from the wheel's time (tw_wheel_now) and aims
 * with tw_wheel_timeout from the wheel's time instead: the stale wheel then
 * fires timers early and the check says FAIL.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/event.h>

#include "loop_clock.h"

#define ROUNDS 3
#define PER_ROUND 20
#define ROUND_MS 500
#define LIMIT_MS 3000

struct job {
    struct tw_timer timer;
    int64_t armed_ns;
    uint64_t delay_ms;
    int round_trip; /* 0: first arming, 1: re-armed by its callback */
};

static struct event_base *base;
static struct tw_wheel wheel;
static struct event *driver, *rounds, *watchdog;
static struct job jobs[ROUNDS * PER_ROUND];
static struct fire_check check;
static int naive, round_no;
static uint64_t rng = 42;

static uint64_t rnd(uint64_t lo, uint64_t hi)
{
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return lo + (rng >> 33) % (hi - lo + 1);
}

static struct timeval ms_tv(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return tv;
}

/* Aim the driver at the wheel's next expiry, measured from the clock. */
static void aim(void)
{
    uint64_t now = tick_floor(clock_ns());
    uint64_t ticks =
        naive ? tw_wheel_timeout(&wheel, tw_wheel_now(&wheel)) : tw_wheel_timeout(&wheel, now);
    if (ticks == TW_NEVER) {
        evtimer_del(driver);
        return;
    }
    /* evtimer_add counts from the loop's cached time: refresh it first. */
    event_base_update_cache_time(base);
    struct timeval tv = ms_tv(timeout_ms(ticks));
    evtimer_add(driver, &tv);
}

static void arm(struct job *j, uint64_t delay_ms)
{
    int64_t now_ns = clock_ns();
    j->armed_ns = now_ns;
    j->delay_ms = delay_ms;
    if (naive)
        tw_arm_in(&wheel, &j->timer, tw_wheel_now(&wheel), delay_ms);
    else
        tw_arm_in(&wheel, &j->timer, tick_ceil(now_ns), delay_ms);
    check.armed++;
}

static void on_job(struct tw_timer *t, void *arg)
{
    (void)arg;
    struct job *j = tw_container_of(t, struct job, timer);
    check_fired(&check, j->round_trip ? "a re-armed timer" : "a timer", j->armed_ns,
                j->delay_ms);
    if (!j->round_trip++)
        arm(j, rnd(1, 100)); /* from its own callback */
}

static void on_driver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    tw_wheel_advance(&wheel, tick_floor(clock_ns()));
    aim();
    if (round_no == ROUNDS && tw_wheel_pending(&wheel) == 0) {
        evtimer_del(rounds);
        evtimer_del(watchdog);
    }
}

static void on_round(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    for (int i = 0; i < PER_ROUND; i++) {
        struct job *j = &jobs[round_no * PER_ROUND + i];
        tw_timer_init(&j->timer, on_job, NULL);
        arm(j, rnd(1, 300));
    }
    if (++round_no == ROUNDS)
        evtimer_del(rounds);
    aim();
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    fprintf(stderr, "event_timers: still %zu timers pending after %d ms\n",
            tw_wheel_pending(&wheel), LIMIT_MS);
    event_base_loopbreak(base);
}

int main(int argc, char **argv)
{
    naive = argc > 1 && strcmp(argv[1], "--naive") == 0;
    /* PRECISE_TIMER: libevent's timers on CLOCK_MONOTONIC itself, not the
     * coarse clock (a few ms of grain: the driver would wake early). */
    struct event_config *cfg = event_config_new();
    if (cfg)
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    base = cfg ? event_base_new_with_config(cfg) : NULL;
    if (cfg)
        event_config_free(cfg);
    if (!base) {
        fprintf(stderr, "event_timers: event_base_new failed\n");
        return 2;
    }
    int64_t t0 = clock_ns();
    tw_wheel_init(&wheel, tick_floor(t0));
    driver = evtimer_new(base, on_driver, NULL);
    rounds = event_new(base, -1, EV_PERSIST, on_round, NULL);
    watchdog = evtimer_new(base, on_watchdog, NULL);
    if (!driver || !rounds || !watchdog) {
        fprintf(stderr, "event_timers: event_new failed\n");
        return 2;
    }
    struct timeval period = ms_tv(ROUND_MS), limit = ms_tv(LIMIT_MS);
    evtimer_add(rounds, &period);
    evtimer_add(watchdog, &limit);
    event_active(rounds, EV_TIMEOUT, 0); /* the first round at once */
    event_base_dispatch(base);
    int rc = check_report(naive ? "event_timers --naive" : "event_timers", &check,
                          (double)(clock_ns() - t0) / 1e9);
    tw_wheel_destroy(&wheel);
    event_free(driver);
    event_free(rounds);
    event_free(watchdog);
    event_base_free(base);
    return rc;
}
