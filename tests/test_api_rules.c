/* SPDX-License-Identifier: MIT */
/* The event-loop rules of twheel/wheel.h (tw_arm_in and
 * tw_periodic_start_in from the caller's now, tw_wheel_timeout), the
 * flags of the one arm call, the timeout at the end of the tick range, and
 * the NULL rule of twheel/common.h for every layer's getters. */
#include <stdlib.h>

#include "test.h"
#include "twheel.h"

static int fired;
static uint64_t fired_at;

static void on_fire(struct tw_timer *t, void *arg)
{
    (void)t;
    fired++;
    fired_at = tw_wheel_now(arg);
}

/* A wheel left alone while the loop slept: tw_arm_in counts from the
 * now it is given, so the caller's clock is right and tw_wheel_now, the
 * wheel's stale time, is early (the first event-loop bug). */
static void test_arm_from_stale_wheel(void)
{
    struct tw_wheel w;
    struct tw_timer t, old;
    tw_wheel_init(&w, 0);
    tw_timer_init(&t, on_fire, &w);
    tw_timer_init(&old, on_fire, &w);
    CHECK_EQ_INT(tw_arm_in(&w, &t, 1000, 300), 0);
    CHECK_EQ_U64(tw_deadline(&t), 1300);
    CHECK_EQ_INT(tw_arm_in(&w, &old, tw_wheel_now(&w), 300), 0);
    CHECK_EQ_U64(tw_deadline(&old), 300); /* what arm does: 700 ticks early */
    tw_cancel(&w, &old);
    /* So do the idle arms given the wheel's time, with slack or not. */
    CHECK_EQ_INT(tw_arm(&w, &old, tw_deadline_in(tw_wheel_now(&w), 300), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_U64(tw_deadline(&old), 300);
    tw_cancel(&w, &old);
    CHECK_EQ_INT(
        tw_arm(&w, &old, tw_deadline_in(tw_wheel_now(&w), 300), 0, TW_ARM_IDLE | TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_deadline(&old), 300);
    tw_cancel(&w, &old);
    fired = 0;
    CHECK_EQ_INT(tw_wheel_advance(&w, 1299), 0);
    CHECK_EQ_INT(fired, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1300), 1);
    CHECK_EQ_U64(fired_at, 1300);
    /* A caller's now behind the wheel's: the deadline is the wheel's next
     * tick, still >= now + delay. */
    CHECK_EQ_INT(tw_arm_in(&w, &t, 100, 10), 0);
    CHECK_EQ_U64(tw_deadline(&t), 1301);
    /* Re-arming later through arm_from is the lazy store, earlier relocates. */
    CHECK_EQ_INT(tw_arm_in(&w, &t, 1300, 5000), 0);
    CHECK_EQ_U64(tw_deadline(&t), 6300);
    CHECK_EQ_INT(tw_arm_in(&w, &t, 1300, 50), 0);
    CHECK_EQ_U64(tw_deadline(&t), 1350);
    /* Saturation. */
    CHECK_EQ_INT(tw_arm_in(&w, &t, UINT64_MAX - 5, 100), 0);
    CHECK_EQ_U64(tw_deadline(&t), UINT64_MAX);
    CHECK_EQ_INT(tw_arm_in(NULL, &t, 0, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_arm_in(&w, (struct tw_timer *)NULL, 0, 1), TW_EINVAL);
    tw_wheel_destroy(&w);

    /* Nodes, on a pull-only wheel. */
    struct tw_node n;
    tw_wheel_init(&w, 0);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm_in(&w, &n, 5000, 20), 0);
    CHECK_EQ_U64(tw_deadline(&n), 5020);
    CHECK(tw_wheel_expire_next_node(&w, 5019) == NULL);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 5020), &n);
    CHECK_EQ_INT(tw_arm_in(NULL, &n, 0, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_arm_in(&w, (struct tw_node *)NULL, 0, 1), TW_EINVAL);
}

static void test_timeout_from(void)
{
    struct tw_wheel w;
    struct tw_timer t;
    tw_wheel_init(&w, 0);
    tw_timer_init(&t, on_fire, &w);
    CHECK_EQ_U64(tw_wheel_timeout(&w, 123), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_timeout(NULL, 123), TW_NEVER);
    tw_arm_in(&w, &t, 1000, 300);
    /* Measured from the caller's now, not from the wheel's time 0. */
    uint64_t first = tw_wheel_timeout(&w, 1000);
    CHECK(first > 0 && first <= 300); /* (it may wake earlier to move timers) */
    CHECK(tw_wheel_timeout(&w, 1299) <= 1);
    CHECK_EQ_U64(tw_wheel_timeout(&w, 1300), 0);
    /* A loop that sleeps exactly the timeout each turn fires it at 1300. */
    uint64_t now = 1000;
    fired = 0;
    for (int turn = 0; turn < 10 && !fired; turn++) {
        uint64_t to = tw_wheel_timeout(&w, now);
        CHECK(to != TW_NEVER && now + to <= 1300);
        now += to;
        tw_wheel_advance(&w, now);
    }
    CHECK_EQ_INT(fired, 1);
    CHECK_EQ_U64(fired_at, 1300);
    tw_arm_in(&w, &t, 1000, 300);                /* idle again: overdue from 5000 */
    CHECK_EQ_U64(tw_wheel_timeout(&w, 5000), 0); /* overdue: advance now */
    /* A deadline on a higher level: the wheel may ask to be woken earlier
     * (to move timers down), never later. */
    tw_arm_in(&w, &t, 1000, 100000);
    uint64_t to = tw_wheel_timeout(&w, 1000);
    CHECK(to <= 100000 && to > 0);
    tw_wheel_destroy(&w);
}

/* An event loop in ticks whose clock jumps by random amounts, arming with
 * arm_from and sleeping with timeout_from: no timer fires before now + delay
 * of its arming, each fires at the first advance that reaches its deadline,
 * and a sleep never overshoots the earliest deadline. */
struct loop_timer {
    struct tw_timer t;
    uint64_t due; /* the caller's now + delay at arming: the earliest allowed */
    int fired;
};

static uint64_t loop_now;
static int loop_early, loop_late;

static void loop_fire(struct tw_timer *t, void *arg)
{
    (void)arg;
    struct loop_timer *lt = tw_container_of(t, struct loop_timer, t);
    lt->fired++;
    if (loop_now < lt->due)
        loop_early++;
}

static void test_event_loop_model(void)
{
    enum { N = 200, STEPS = 5000 };
    struct tw_wheel w;
    struct loop_timer *lt = calloc(N, sizeof *lt);
    CHECK(lt != NULL);
    if (!lt)
        return;
    uint64_t rng = 12345;
    loop_now = 1000000;
    loop_early = loop_late = 0;
    tw_wheel_init(&w, 0); /* stale from the start */
    for (int i = 0; i < N; i++)
        tw_timer_init(&lt[i].t, loop_fire, NULL);
    for (int step = 0; step < STEPS; step++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        unsigned r = (unsigned)(rng >> 33);
        struct loop_timer *x = &lt[r % N];
        uint64_t delay = (r >> 8) % 5000;
        if ((r & 3) == 0) {
            CHECK_EQ_INT(tw_arm_in(&w, &x->t, loop_now, delay), 0);
            x->due = loop_now + delay;
            CHECK(tw_deadline(&x->t) >= x->due);
            x->fired = 0;
        }
        /* The loop sleeps for the timeout (or wakes early for I/O), then
         * advances to its clock. */
        uint64_t to = tw_wheel_timeout(&w, loop_now);
        uint64_t sleep = (r >> 20) % 4000;
        if (to != TW_NEVER && sleep > to && (r & 4))
            sleep = to; /* woken by the timeout */
        uint64_t earliest = TW_NEVER;
        for (int i = 0; i < N; i++)
            if (tw_pending(&lt[i].t) && tw_deadline(&lt[i].t) < earliest)
                earliest = tw_deadline(&lt[i].t);
        if (earliest != TW_NEVER)
            CHECK(to != TW_NEVER && loop_now + to <= (earliest > loop_now ? earliest : loop_now));
        loop_now += sleep;
        tw_wheel_advance(&w, loop_now);
        for (int i = 0; i < N; i++)
            if (tw_pending(&lt[i].t) && tw_deadline(&lt[i].t) <= loop_now)
                loop_late++;
    }
    CHECK_EQ_INT(loop_early, 0);
    CHECK_EQ_INT(loop_late, 0);
    tw_wheel_destroy(&w);
    free(lt);
}

/* The last tick: time 2^64-2, a timer due at 2^64-1 is 1 tick away. */
static void test_timeout_at_the_end(void)
{
    struct tw_wheel w;
    struct tw_timer t;
    tw_wheel_init(&w, UINT64_MAX - 1);
    tw_timer_init(&t, on_fire, &w);
    CHECK_EQ_U64(tw_wheel_timeout(&w, tw_wheel_now(&w)), TW_NEVER);
    CHECK_EQ_INT(tw_arm_in(&w, &t, tw_wheel_now(&w), 1), 0);
    CHECK_EQ_U64(tw_deadline(&t), UINT64_MAX);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), UINT64_MAX);
    CHECK_EQ_U64(tw_wheel_timeout(&w, tw_wheel_now(&w)), 1);
    CHECK_EQ_U64(tw_wheel_timeout(&w, UINT64_MAX - 1), 1);
    CHECK_EQ_U64(tw_wheel_timeout(&w, UINT64_MAX), 0);
    fired = 0;
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 1);
    CHECK_EQ_U64(tw_wheel_timeout(&w, tw_wheel_now(&w)), TW_NEVER);
    /* A timer due at the last tick, seen from far away, is also 2^64-1 - now. */
    tw_wheel_init(&w, 10);
    tw_timer_init(&t, on_fire, &w);
    tw_arm(&w, &t, UINT64_MAX, 0, 0);
    CHECK(tw_wheel_timeout(&w, tw_wheel_now(&w)) <= UINT64_MAX - 10);
    tw_wheel_destroy(&w);
}

static void test_release_sizes(void)
{
#ifndef TWHEEL_DEBUG
    if (sizeof(void *) == 8) {
        CHECK_EQ_INT(sizeof(struct tw_node), 24);
        CHECK_EQ_INT(sizeof(struct tw_timer), 40);
    }
#endif
    CHECK_EQ_INT(sizeof(struct tw_node), 3 * 8 + TW_NODE_DEBUG_BYTES);
}

static void noop_task(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
}

/* The NULL rule (twheel/common.h) for every getter of every layer. */
static void test_null_getters(void)
{
    CHECK_EQ_U64(tw_wheel_now(NULL), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(NULL), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_next_work(NULL), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_timeout(NULL, tw_wheel_now(NULL)), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_timeout(NULL, 5), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_pending(NULL), 0);
    CHECK_EQ_U64(tw_wheel_moves(NULL), 0);
    CHECK(!tw_pending((struct tw_timer *)NULL));
    CHECK_EQ_U64(tw_deadline((struct tw_timer *)NULL), TW_NEVER);
    CHECK(!tw_pending((struct tw_node *)NULL));
    CHECK_EQ_U64(tw_deadline((struct tw_node *)NULL), TW_NEVER);

    CHECK_EQ_U64(tw_tasks_pending(NULL), 0);
    CHECK_EQ_U64(tw_tasks_now(NULL), 0);
    CHECK_EQ_U64(tw_tasks_next_expiry(NULL), TW_NEVER);
    CHECK_EQ_U64(tw_tasks_next_work(NULL), TW_NEVER);
    /* Stats calls can fail: TW_EINVAL for a NULL object, *out untouched. */
    struct tw_tasks_stats ts;
    memset(&ts, 0xab, sizeof ts);
    CHECK_EQ_INT(tw_tasks_stats(NULL, &ts), TW_EINVAL);
    CHECK_EQ_U64(ts.pending, UINT64_C(0xabababababababab) & SIZE_MAX);
    CHECK_EQ_INT(tw_tasks_stats(NULL, NULL), TW_EINVAL);

    struct tw_runner_stats rs;
    memset(&rs, 0xab, sizeof rs);
    CHECK_EQ_INT(tw_runner_stats(NULL, &rs), TW_EINVAL);
    CHECK_EQ_U64(rs.fired, UINT64_C(0xabababababababab));
    CHECK_EQ_INT(tw_runner_stats(NULL, NULL), TW_EINVAL);

    CHECK_EQ_U64(tw_cache_now(NULL), 0);
    struct tw_cache_stats cs;
    CHECK_EQ_INT(tw_cache_stats(NULL, &cs), TW_EINVAL);

    /* With a real object and a NULL out, TW_EINVAL too. */
    struct tw_tasks_config tc;
    memset(&tc, 0, sizeof tc);
    tc.execute = noop_task;
    struct tw_tasks *t = NULL;
    CHECK_EQ_INT(tw_tasks_new(&t, &tc), 0);
    CHECK_EQ_INT(tw_tasks_stats(t, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_stats(t, &ts), 0);
    CHECK_EQ_U64(ts.pending, 0);
    CHECK_EQ_INT(tw_tasks_free(t), 0);
    struct tw_runner_config rc;
    memset(&rc, 0, sizeof rc);
    rc.execute = noop_task;
    rc.tick_ns = 1000000;
    rc.shards = 1;
    struct tw_runner *r = NULL;
    CHECK_EQ_INT(tw_runner_new(&r, &rc), 0);
    CHECK_EQ_INT(tw_runner_stats(r, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_stats(r, &rs), 0);
    CHECK_EQ_U64(rs.fired, 0);
    CHECK_EQ_INT(tw_runner_free(r), 0);
    /* Free calls ignore NULL and return 0; config_init calls ignore NULL. */
    tw_cache_config_init(NULL);
    CHECK_EQ_INT(tw_wheel_destroy(NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_free(NULL), 0);
    CHECK_EQ_INT(tw_runner_free(NULL), 0);
    CHECK_EQ_INT(tw_cache_free(NULL), 0);
    CHECK_EQ_INT(tw_clock_free(NULL), 0);
    CHECK_EQ_INT(tw_pool_free(NULL), 0);
}

static int periodic_fired;
static uint64_t periodic_at;

static void on_periodic(struct tw_periodic *p, void *arg)
{
    (void)p;
    periodic_fired++;
    periodic_at = tw_wheel_now(arg);
}

/* tw_periodic_start_in counts the first deadline from the caller's now,
 * tw_periodic_start takes it absolute; both keep the phase after. */
static void test_periodic_from_caller_now(void)
{
    struct tw_wheel w;
    struct tw_periodic p;
    tw_wheel_init(&w, 0);
    CHECK_EQ_INT(tw_periodic_init(&p, on_periodic, &w, TW_MISSED_CATCH_UP), 0);
    periodic_fired = 0;
    CHECK_EQ_INT(tw_periodic_start_in(&w, &p, 1000, 100, 50), 0);
    CHECK_EQ_U64(tw_deadline(&p.timer), 1100); /* not 100: the wheel is stale */
    CHECK_EQ_INT(tw_wheel_advance(&w, 1099), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1100), 1);
    CHECK_EQ_U64(periodic_at, 1100);
    CHECK_EQ_U64(tw_deadline(&p.timer), 1150);
    /* Absolute, a past first deadline: the next tick. */
    CHECK_EQ_INT(tw_periodic_start(&w, &p, 7, 10, 0), 0);
    CHECK_EQ_U64(tw_deadline(&p.timer), 1101);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1111), 2);
    CHECK_EQ_U64(periodic_at, 1111);
    /* Saturated: a delay past the end of time is the last tick. */
    CHECK_EQ_INT(tw_periodic_start_in(&w, &p, UINT64_MAX - 5, 100, 7), 0);
    CHECK_EQ_U64(tw_deadline(&p.timer), UINT64_MAX);
    CHECK_EQ_INT(tw_periodic_start(NULL, &p, 5, 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_periodic_start_in(&w, &p, 0, 5, 0), TW_EINVAL); /* period 0 */
    CHECK_EQ_INT(tw_periodic_stop(&p), 1);
}

/* The flags of tw_arm: an unknown bit is refused
 * with nothing changed; TW_ARM_EAGER gives way to slack (a slack re-arm
 * relocates at once anyway, counted) and to TW_ARM_IDLE; TW_ARM_SLACK
 * makes a slack of 0 a slack arm (a re-arm relocates and is counted),
 * without it slack 0 is the exact arm (a later re-arm is one store). */
static void test_arm_flags(void)
{
    struct tw_wheel w;
    struct tw_timer t;
    struct tw_node n;
    CHECK_EQ_U64(tw_deadline_in(5, 7), 12);
    CHECK_EQ_U64(tw_deadline_in(UINT64_MAX - 1, 7), UINT64_MAX);
    tw_wheel_init(&w, 0);
    tw_timer_init(&t, on_fire, &w);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm(&w, &t, 10, 0, 0x8u), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, &t, 10, 5, ~0u), TW_EINVAL);
    CHECK(!tw_pending(&t));
    CHECK_EQ_INT(tw_arm(&w, &n, 10, 0, 0x100u), TW_EINVAL);
    CHECK(!tw_pending(&n));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    /* Exact and lazy: a later re-arm stores the deadline, no move. */
    CHECK_EQ_INT(tw_arm(&w, &t, 10, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &t, 20, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    /* Slack 0 with TW_ARM_SLACK: relocated now, and counted. */
    CHECK_EQ_INT(tw_arm(&w, &t, 30, 0, TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_deadline(&t), 30);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    /* Eager with slack: the slack re-arm (relocated, counted). */
    CHECK_EQ_INT(tw_arm(&w, &t, 40, 2, TW_ARM_EAGER), 0);
    CHECK(tw_deadline(&t) >= 40 && tw_deadline(&t) <= 42);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2);
    /* Eager and exact: relocated, not counted. */
    CHECK_EQ_INT(tw_arm(&w, &t, 50, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_deadline(&t), 50);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2);
    CHECK_EQ_INT(tw_cancel(&w, &t), 1);
    /* Idle with eager: the idle arm. */
    CHECK_EQ_INT(tw_arm(&w, &t, 60, 0, TW_ARM_IDLE | TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_deadline(&t), 60);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 60), 1);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    /* A node takes the same flags; it makes the wheel pull-only. */
    CHECK_EQ_INT(tw_arm_in(&w, &n, 100, 5), 0);
    CHECK_EQ_U64(tw_deadline(&n), 105);
    CHECK_EQ_INT(tw_arm(&w, &n, 200, 0, TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 3);
    CHECK_EQ_INT(tw_wheel_advance(&w, 300), TW_EINVAL);
    CHECK(tw_wheel_expire_next_node(&w, 300) == &n);
}

int main(void)
{
    RUN(test_arm_from_stale_wheel);
    RUN(test_timeout_from);
    RUN(test_periodic_from_caller_now);
    RUN(test_arm_flags);
    RUN(test_event_loop_model);
    RUN(test_timeout_at_the_end);
    RUN(test_release_sizes);
    RUN(test_null_getters);
    return test_summary();
}
