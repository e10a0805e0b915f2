/* SPDX-License-Identifier: MIT */
/* twheel on a libuv loop: one uv_timer_t drives a wheel of 1 ms ticks on
 * CLOCK_MONOTONIC, however many timers the wheel holds.
 *
 * The pattern:
 *   - arm anywhere with tw_arm_in(&wheel, t, tick_ceil(clock_ns()), d)
 *     (the wheel's own time is stale while the loop sleeps), then aim();
 *   - aim(): uv_timer_start(driver, timeout) with the timeout from
 *     tw_wheel_timeout(&wheel, tick_floor(clock_ns())), or stop it
 *     when the wheel is empty;
 *   - the driver's callback advances the wheel to tick_floor(clock_ns())
 *     (its timers' callbacks run there) and aims again.
 *
 * The program: three rounds, 500 ms apart, each arming 20 timers with delays
 * of 1..300 ms from an unrelated uv timer (so the wheel has not been advanced
 * for 100 ms or more when they are armed); each timer, when it fires, arms
 * itself once more for 1..100 ms from its callback. It checks, on
 * CLOCK_MONOTONIC, that no timer fires before its delay and that all 120
 * fire, within 3 s. Exit status 0 on PASS, 1 on FAIL.
 *
 * `uv_timers --naive` arms from the wheel's time (tw_wheel_now) and aims
 * with tw_wheel_timeout from the wheel's time instead: the stale wheel then
 * fires timers early and the check says FAIL.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <uv.h>

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

static struct tw_wheel wheel;
static uv_timer_t driver, rounds, watchdog;
static struct job jobs[ROUNDS * PER_ROUND];
static struct fire_check check;
static int naive, round_no;
static uint64_t rng = 42;

static uint64_t rnd(uint64_t lo, uint64_t hi)
{
    rng = rng * 6364136223846793005u + 1442695040888963407u;
    return lo + (rng >> 33) % (hi - lo + 1);
}

static void on_driver(uv_timer_t *h);

/* Aim the driver at the wheel's next expiry, measured from the clock. */
static void aim(void)
{
    uint64_t now = tick_floor(clock_ns());
    uint64_t ticks =
        naive ? tw_wheel_timeout(&wheel, tw_wheel_now(&wheel)) : tw_wheel_timeout(&wheel, now);
    if (ticks == TW_NEVER) {
        uv_timer_stop(&driver);
        return;
    }
    /* uv_timer_start counts from the loop's cached time: refresh it first,
     * or the timer may fire early (harmless: advancing then fires nothing
     * and we aim again, but it is a wasted wake-up). */
    uv_update_time(driver.loop);
    uv_timer_start(&driver, on_driver, (uint64_t)timeout_ms(ticks), 0);
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

static void on_driver(uv_timer_t *h)
{
    (void)h;
    tw_wheel_advance(&wheel, tick_floor(clock_ns()));
    aim();
    if (round_no == ROUNDS && tw_wheel_pending(&wheel) == 0) {
        uv_timer_stop(&rounds);
        uv_timer_stop(&watchdog);
    }
}

static void on_round(uv_timer_t *h)
{
    for (int i = 0; i < PER_ROUND; i++) {
        struct job *j = &jobs[round_no * PER_ROUND + i];
        tw_timer_init(&j->timer, on_job, NULL);
        arm(j, rnd(1, 300));
    }
    if (++round_no == ROUNDS)
        uv_timer_stop(h);
    aim();
}

static void on_watchdog(uv_timer_t *h)
{
    (void)h;
    fprintf(stderr, "uv_timers: still %zu timers pending after %d ms\n",
            tw_wheel_pending(&wheel), LIMIT_MS);
    uv_stop(h->loop);
}

int main(int argc, char **argv)
{
    naive = argc > 1 && strcmp(argv[1], "--naive") == 0;
    uv_loop_t *loop = uv_default_loop();
    int64_t t0 = clock_ns();
    tw_wheel_init(&wheel, tick_floor(t0));
    uv_timer_init(loop, &driver);
    uv_timer_init(loop, &rounds);
    uv_timer_init(loop, &watchdog);
    uv_timer_start(&rounds, on_round, 0, ROUND_MS);
    uv_timer_start(&watchdog, on_watchdog, LIMIT_MS, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    int rc = check_report(naive ? "uv_timers --naive" : "uv_timers", &check,
                          (double)(clock_ns() - t0) / 1e9);
    tw_wheel_destroy(&wheel);
    uv_close((uv_handle_t *)&driver, NULL);
    uv_close((uv_handle_t *)&rounds, NULL);
    uv_close((uv_handle_t *)&watchdog, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return rc;
}
