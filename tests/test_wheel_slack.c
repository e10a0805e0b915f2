/* SPDX-License-Identifier: MIT */
/* Unit tests of per-timer slack (include/twheel/wheel.h, "Slack"): never
 * early, never later than deadline + slack, planned on a slot boundary so
 * that nothing moves, fired together, re-arm and cancel, periodic phase, the
 * poller's lower bound, bare nodes, bad arguments and the end of time. The
 * randomized rules (windows, next expiry, mixing with exact timers) are in
 * the model test and the fuzz target (tests/wheel_model.h). */
#include <stdlib.h>

#include "test.h"
#include "twheel.h"

#include "wheel_rec.h"

static void rec_init(struct rec *r, struct tw_wheel *w)
{
    memset(r, 0, sizeof *r);
    r->wheel = w;
    CHECK_EQ_INT(tw_timer_init(&r->timer, rec_fire, r), 0);
}

static void test_bad_arguments_and_end_of_time(void)
{
    struct tw_wheel w;
    struct rec r;
    struct tw_node n;
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm(NULL, &r.timer, tw_deadline_in(tw_wheel_now(NULL), 1), 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_timer *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 1, 0),
                 TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &r.timer, 1, 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_timer *)NULL, 1, 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &n, tw_deadline_in(tw_wheel_now(NULL), 1), 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_node *)NULL, 1, 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_periodic_start(NULL, NULL, tw_deadline_in(tw_wheel_now(NULL), 1), 1, 0),
                 TW_EINVAL);
    struct tw_timer raw;
    memset(&raw, 0, sizeof raw); /* never initialised: no callback */
    CHECK_EQ_INT(tw_arm(&w, &raw, tw_deadline_in(tw_wheel_now(&w), 1), 1, 0), TW_EINVAL);

    /* The end of time: no later tick exists. */
    tw_wheel_init(&w, UINT64_MAX);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 5), 100, 0), TW_ERANGE);
    CHECK(!tw_pending(&r.timer));
    /* A window past UINT64_MAX saturates. */
    tw_wheel_init(&w, UINT64_MAX - 10);
    CHECK_EQ_INT(
        tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 5), UINT64_MAX, TW_ARM_SLACK), 0);
    uint64_t p = tw_deadline(&r.timer);
    CHECK(p >= UINT64_MAX - 5);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 1);
    CHECK_EQ_U64(r.fired_at, p);
}

/* A 30 s timeout at 1 ms ticks with 1/8 slack is planned on a multiple of
 * 4096 ticks, fires there with every other timer of that window, and is never
 * moved; delay 0 with slack is still due no earlier than the next tick. */
static void test_planned_on_a_boundary_fired_together(void)
{
    enum { N = 300 };
    struct tw_wheel w;
    struct rec *r = calloc(N, sizeof *r);
    CHECK(r != NULL);
    if (!r)
        return;
    tw_wheel_init(&w, 0);
    for (int i = 0; i < N; i++) {
        rec_init(&r[i], &w);
        tw_wheel_advance(&w, (uint64_t)i * 7); /* armed at different times */
        uint64_t now = tw_wheel_now(&w);
        CHECK_EQ_INT(tw_arm(&w, &r[i].timer, tw_deadline_in(tw_wheel_now(&w), 30000), (30000 >> 3),
                            TW_ARM_SLACK),
                     0);
        uint64_t p = tw_deadline(&r[i].timer);
        CHECK(p >= now + 30000 && p <= now + 33750);
        CHECK_EQ_U64(p % 4096, 0);
    }
    int64_t fired = 0;
    int advances = 0;
    while (tw_wheel_pending(&w) && advances < 1000) {
        uint64_t next = tw_wheel_next_expiry(&w);
        CHECK_EQ_INT(tw_wheel_advance(&w, next - 1), 0); /* a lower bound */
        fired += tw_wheel_advance(&w, next);
        advances++;
    }
    CHECK_EQ_INT(fired, N);
    CHECK(advances <= 2); /* 300 timers, two fire ticks (32768 and 36864) */
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(r[i].fires, 1);
        CHECK(r[i].fired_at >= (uint64_t)i * 7 + 30000 && r[i].fired_at <= (uint64_t)i * 7 + 33750);
    }

    /* Delay 0 and slack: the window is [now + 1, now + 1 + slack]. */
    tw_wheel_init(&w, 100);
    rec_init(&r[0], &w);
    rec_init(&r[1], &w);
    CHECK_EQ_INT(tw_arm(&w, &r[0].timer, tw_deadline_in(tw_wheel_now(&w), 0), 27, 0), 0);
    CHECK(tw_deadline(&r[0].timer) >= 101 && tw_deadline(&r[0].timer) <= 128);
    CHECK_EQ_U64(tw_deadline(&r[0].timer), 128);                   /* the level-1 boundary in it */
    CHECK_EQ_INT(tw_arm(&w, &r[1].timer, 50, 0, TW_ARM_SLACK), 0); /* in the past, exact */
    CHECK_EQ_U64(tw_deadline(&r[1].timer), 101);
    CHECK_EQ_INT(tw_wheel_advance(&w, 127), 1);
    CHECK_EQ_INT(r[0].fires, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 128), 1);
    CHECK_EQ_INT(r[0].fires, 1);
    CHECK_EQ_U64(r[0].fired_at, 128);
    free(r);
}

/* The rounding is to the highest level boundary inside the window, and no
 * further: a window holding no boundary of level 1 stays tick exact. */
static void test_highest_boundary_in_window(void)
{
    struct tw_wheel w;
    struct rec r;
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    const struct {
        uint64_t deadline, slack, planned;
    } cases[] = {
        {100, 0, 100},                      /* exact */
        {100, 28, 128},                     /* level 1 */
        {100, 10, 100},                     /* no multiple of 64 in [100, 110] */
        {4000, 200, 4096},                  /* level 2 */
        {4097, 4094, 4097 + 63},            /* level 1: 4160 */
        {4097, 4095, 8192},                 /* level 2 */
        {(UINT64_C(1) << 40) - 5, 1000, UINT64_C(1) << 40},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ_INT(tw_arm(&w, &r.timer, cases[i].deadline, cases[i].slack, TW_ARM_SLACK), 0);
        CHECK_EQ_U64(tw_deadline(&r.timer), cases[i].planned);
        tw_cancel(&w, &r.timer);
    }
}

/* A timer pushed back while pending is planned at the latest boundary of
 * the level below the highest one in its window, so that the next re-arms
 * (heartbeats) find it inside their windows longer and cost nothing. */
static void test_pushed_back_planned_late(void)
{
    struct tw_wheel w;
    struct rec r;
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 30000), 3750, 0), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), 32768); /* fresh: the level-2 boundary */
    tw_wheel_advance(&w, 3500);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 30000), 3750, 0),
                 0);                            /* [33500, 37250] */
    CHECK_EQ_U64(tw_deadline(&r.timer), 37248); /* latest multiple of 64, not 36864 */
    tw_wheel_advance(&w, 7000);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 30000), 3750, 0),
                 0);                            /* [37000, 40750] */
    CHECK_EQ_U64(tw_deadline(&r.timer), 37248); /* kept: free */
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    /* It fires at its planned tick, never early; one move on the way (its
     * level-2 slot hands it to level 1). */
    CHECK_EQ_INT(tw_wheel_advance(&w, 37247), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 37248), 1);
    CHECK_EQ_U64(r.fired_at, 37248);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2);
}

/* A window with no multiple of 64 but a multiple of 16 is planned on that
 * sub-slot boundary; at level 1 such timers wait on the slot's sub-list and
 * go down to level 0 as one list when the slot comes due: no timer of it is
 * moved one by one. Cancel, exact and lazy re-arms, relocation and destroy
 * work on them as on any timer. */
static void test_sub_slots(void)
{
    struct tw_wheel w;
    struct rec r[4];
    tw_wheel_init(&w, 0);
    for (int i = 0; i < 4; i++)
        rec_init(&r[i], &w);
    CHECK_EQ_INT(tw_arm(&w, &r[0].timer, 200, 20, 0), 0); /* [200, 220] */
    CHECK_EQ_INT(tw_arm(&w, &r[1].timer, 195, 30, 0), 0); /* [195, 225] */
    CHECK_EQ_INT(tw_arm(&w, &r[2].timer, 208, 0, 0), 0);  /* exact */
    CHECK_EQ_U64(tw_deadline(&r[0].timer), 208);
    CHECK_EQ_U64(tw_deadline(&r[1].timer), 208);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 192); /* their level-1 slot */
    CHECK_EQ_INT(tw_wheel_advance(&w, 207), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1); /* the exact one; the sub-list went down whole */
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 208);
    CHECK_EQ_INT(tw_wheel_advance(&w, 208), 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ_U64(r[i].fired_at, 208);

    /* Cancel from a sub-list empties the slot. */
    CHECK_EQ_INT(tw_arm(&w, &r[0].timer, tw_deadline_in(tw_wheel_now(&w), 200), 20, 0),
                 0); /* [408, 428] */
    CHECK_EQ_U64(tw_deadline(&r[0].timer), 416);
    CHECK_EQ_INT(tw_cancel(&w, &r[0].timer), 1);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);

    /* An exact later re-arm is lazy there too; an earlier one relocates. */
    CHECK_EQ_INT(tw_arm(&w, &r[0].timer, tw_deadline_in(tw_wheel_now(&w), 200), 20, 0),
                 0); /* 416 */
    CHECK_EQ_INT(tw_arm(&w, &r[0].timer, 430, 0, 0), 0);
    CHECK_EQ_U64(tw_deadline(&r[0].timer), 430);
    CHECK_EQ_INT(tw_arm(&w, &r[1].timer, tw_deadline_in(tw_wheel_now(&w), 200), 20, 0),
                 0); /* 416 */
    CHECK_EQ_INT(tw_arm(&w, &r[1].timer, 300, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r[2].timer, tw_deadline_in(tw_wheel_now(&w), 200), 20, 0),
                 0); /* 416 */
    CHECK_EQ_INT(tw_arm(&w, &r[2].timer, tw_deadline_in(tw_wheel_now(&w), 300), 40, 0),
                 0); /* pushed back */
    CHECK(tw_deadline(&r[2].timer) >= 508 && tw_deadline(&r[2].timer) <= 548);
    CHECK_EQ_INT(tw_wheel_advance(&w, 299), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 300), 1);
    CHECK_EQ_U64(r[1].fired_at, 300);
    CHECK_EQ_INT(tw_wheel_advance(&w, 429), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 430), 1);
    CHECK_EQ_U64(r[0].fired_at, 430);
    CHECK_EQ_INT(tw_wheel_advance(&w, 600), 1);
    CHECK(r[2].fired_at >= 508 && r[2].fired_at <= 548);

    /* Destroy detaches sub-list timers too. */
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(tw_arm(&w, &r[i].timer, tw_deadline_in(tw_wheel_now(&w), 200), 20, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r[3].timer, tw_wheel_now(&w) + 5000, 0, TW_ARM_SLACK), 0);
    CHECK_EQ_INT((int)tw_wheel_destroy(&w), 4);
    for (int i = 0; i < 4; i++)
        CHECK(!tw_pending(&r[i].timer));
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);
}

/* The sub-lists' chains and the level-1 slot's sub-list 0 (a multiple of 64
 * planned with slack): many timers on one sub-slot use every chain, a
 * cancel from the middle of one leaves the rest, a later exact re-arm of a
 * sub-list timer is lazy and is moved (not fired) when its list comes due,
 * and the pull interface hands out sub-list 0's timers at their tick even
 * when asked for exactly that tick. */
static void test_sub_slot_chains(void)
{
    enum { N = 11 };
    struct tw_wheel w;
    struct rec r[N];
    tw_wheel_init(&w, 0);
    for (int i = 0; i < N; i++)
        rec_init(&r[i], &w);
    /* [200, 220] and [250, 270]: planned at 208 (sub-list 1 of slot 3) and
     * 256 (sub-list 0 of slot 4). */
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(tw_arm(&w, &r[i].timer, 200, 20, 0), 0);
    for (int i = 5; i < 10; i++)
        CHECK_EQ_INT(tw_arm(&w, &r[i].timer, 250, 20, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r[10].timer, 256, 0, 0), 0); /* exact, same tick */
    for (int i = 0; i < 5; i++)
        CHECK_EQ_U64(tw_deadline(&r[i].timer), 208);
    for (int i = 5; i < 10; i++)
        CHECK_EQ_U64(tw_deadline(&r[i].timer), 256);
    CHECK_EQ_INT(tw_cancel(&w, &r[2].timer), 1);
    CHECK_EQ_INT(tw_cancel(&w, &r[7].timer), 1);
    CHECK_EQ_INT(tw_arm(&w, &r[3].timer, 300, 0, 0), 0); /* lazy: stays on its list */
    CHECK_EQ_INT(tw_arm(&w, &r[8].timer, 301, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 9);
    CHECK_EQ_INT(tw_wheel_advance(&w, 207), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 208), 3); /* 0, 1, 4 */
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(r[i].fires, i == 0 || i == 1 || i == 4);
    CHECK_EQ_U64(tw_deadline(&r[3].timer), 300);
    /* Pull exactly at 256: sub-list 0's three and the exact one. */
    CHECK(tw_wheel_expire_next(&w, 255) == NULL);
    int got = 0;
    for (struct tw_timer *t; (t = tw_wheel_expire_next(&w, 256)) != NULL; got++) {
        CHECK_EQ_U64(tw_wheel_now(&w), 256);
        CHECK(t != &r[7].timer && t != &r[8].timer);
    }
    CHECK_EQ_INT(got, 4);
    CHECK_EQ_U64(tw_wheel_pending(&w), 2);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w) <= 300, 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 299), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 300), 1);
    CHECK_EQ_U64(r[3].fired_at, 300);
    CHECK_EQ_INT(tw_wheel_advance(&w, 301), 1);
    CHECK_EQ_U64(r[8].fired_at, 301);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);
    /* A lazily re-armed exact timer at level 0 is moved, not fired. */
    CHECK_EQ_INT(tw_arm(&w, &r[0].timer, 310, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r[1].timer, 310, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r[1].timer, 315, 0, 0), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 310), 1);
    CHECK_EQ_INT(r[1].fires, 1); /* still its first fire, at 208 */
    CHECK_EQ_INT(tw_wheel_advance(&w, 314), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 315), 1);
    CHECK_EQ_U64(r[1].fired_at, 315);
}

/* Re-arming with slack is free while the planned tick is inside the new
 * window, and relocates at once otherwise (no lazy move for a later advance);
 * an exact re-arm makes the timer exact again; cancel works as ever. */
static void test_rearm_and_cancel(void)
{
    struct tw_wheel w;
    struct rec r;
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 30000), 3750, 0), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), 32768);
    tw_wheel_advance(&w, 2000);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 30000), 3750, 0),
                 0);                            /* [32000, 35750] */
    CHECK_EQ_U64(tw_deadline(&r.timer), 32768); /* kept */
    tw_wheel_advance(&w, 3000);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 30000), 3750, 0),
                 0); /* [33000, 36750] */
    uint64_t p = tw_deadline(&r.timer);
    /* Pushed back: planned late. The window holds no multiple of 4096, so
     * the latest multiple of 64 in it. */
    CHECK_EQ_U64(p, 36736);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1); /* relocated at once, and counted */
    /* Nothing is due at the old tick; the one move there is its level-2
     * slot handing it to level 1 (36736 is not a multiple of 4096). */
    CHECK_EQ_INT(tw_wheel_advance(&w, 32768), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2);
    CHECK_EQ_INT(tw_wheel_advance(&w, p - 1), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, p), 1);
    CHECK_EQ_U64(r.fired_at, p);

    /* Earlier with slack relocates too. */
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 5000), 600, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 100), 10, 0), 0);
    p = tw_deadline(&r.timer);
    CHECK(p >= tw_wheel_now(&w) + 100 && p <= tw_wheel_now(&w) + 110);

    /* An exact re-arm: exact again. */
    CHECK_EQ_INT(tw_arm_in(&w, &r.timer, tw_wheel_now(&w), 1234), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), tw_wheel_now(&w) + 1234);
    /* Cancel. */
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 777), 100, 0), 0);
    CHECK_EQ_INT(tw_cancel(&w, &r.timer), 1);
    CHECK_EQ_INT(tw_cancel(&w, &r.timer), 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, tw_wheel_now(&w) + 100000), 0);
    CHECK_EQ_INT(r.fires, 1);
}

struct ticker {
    struct tw_periodic periodic;
    uint64_t at[64];
    int n;
};

static void ticker_fire(struct tw_periodic *p, void *arg)
{
    struct ticker *k = arg;
    if (k->n < 64)
        k->at[k->n] = tw_wheel_now(p->wheel);
    k->n++;
}

/* A periodic timer with slack keeps its phase: fire n is in
 * [first + n * period, first + n * period + slack], catching up or skipping. */
static void test_periodic_keeps_phase(void)
{
    struct tw_wheel w;
    struct ticker k = {0};
    tw_wheel_init(&w, 5);
    CHECK_EQ_INT(tw_periodic_init(&k.periodic, ticker_fire, &k, TW_MISSED_CATCH_UP), 0);
    CHECK_EQ_INT(
        tw_periodic_start(&w, &k.periodic, tw_deadline_in(tw_wheel_now(&w), 1000), 1000, 125), 0);
    for (uint64_t t = 5; t <= 40000; t += 37)
        tw_wheel_advance(&w, t);
    CHECK(k.n >= 39 && k.n <= 40);
    int late = 0;
    for (int i = 0; i < k.n && i < 64; i++) {
        uint64_t nominal = 1005 + 1000 * (uint64_t)i;
        CHECK(k.at[i] >= nominal && k.at[i] <= nominal + 125);
        late += k.at[i] != nominal;
    }
    CHECK(late > 0); /* the slack was used */

    /* Catch-up over many periods in one advance, slack >= period capped. */
    struct ticker c = {0};
    tw_wheel_init(&w, 0);
    tw_periodic_init(&c.periodic, ticker_fire, &c, TW_MISSED_CATCH_UP);
    CHECK_EQ_INT(tw_periodic_start(&w, &c.periodic, tw_deadline_in(tw_wheel_now(&w), 0), 10, 1000),
                 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 300), 30);
    for (int i = 0; i < c.n && i < 64; i++)
        CHECK(c.at[i] >= 1 + 10 * (uint64_t)i && c.at[i] <= 10 + 10 * (uint64_t)i);

    /* Skip: one fire, then the next nominal deadline of the phase. */
    struct ticker s = {0};
    tw_wheel_init(&w, 0);
    tw_periodic_init(&s.periodic, ticker_fire, &s, TW_MISSED_SKIP);
    CHECK_EQ_INT(tw_periodic_start(&w, &s.periodic, tw_deadline_in(tw_wheel_now(&w), 100), 100, 12),
                 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 950), 1);
    uint64_t p = tw_deadline(&s.periodic.timer);
    CHECK(p >= 1000 && p <= 1012);
    CHECK_EQ_INT(tw_periodic_stop(&s.periodic), 1);
}

/* Bare nodes take slack too, under the same rules; arming one from inside a
 * callback is refused as for an exact tw_arm. */
static struct tw_node cb_node;
static int cb_rc;
static void arm_node_from_callback(struct tw_timer *t, void *arg)
{
    struct rec *r = arg;
    (void)t;
    cb_rc = tw_arm(r->wheel, &cb_node, tw_deadline_in(tw_wheel_now(r->wheel), 10), 5, 0);
}

static void test_bare_nodes(void)
{
    struct tw_wheel w;
    struct tw_node n;
    tw_wheel_init(&w, 0);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 200), 30, 0), 0);
    uint64_t p = tw_deadline(&n);
    CHECK(p >= 200 && p <= 230);
    CHECK(tw_wheel_expire_next_node(&w, p - 1) == NULL);
    CHECK(tw_wheel_expire_next_node(&w, p) == &n);
    CHECK_EQ_INT(tw_arm(&w, &n, 1000, 0, TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_deadline(&n), 1000);
    CHECK_EQ_INT(tw_cancel(&w, &n), 1);

    struct rec r;
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    tw_node_init(&cb_node);
    CHECK_EQ_INT(tw_timer_init(&r.timer, arm_node_from_callback, &r), 0);
    tw_arm_in(&w, &r.timer, tw_wheel_now(&w), 3);
    CHECK_EQ_INT(tw_wheel_advance(&w, 3), 1);
    CHECK_EQ_INT(cb_rc, TW_EBUSY);
    CHECK(!tw_pending(&cb_node));
}

/* The store-only arm with slack (TW_ARM_IDLE with slack) of an idle timer or
 * node: the planned tick of the slack arm for the same window in every case
 * (boundaries of each level, sub-slots, exact, the past, saturation), the
 * wheel's count kept, fired at the planned tick without a move, idle again
 * after firing or cancelling, TW_ERANGE at the end of time, from a callback
 * (a timer: yes; a node: TW_EBUSY), and bad arguments. */
static struct tw_node start_cb_node;
static int start_cb_rc, start_cb_node_rc;
static void start_from_callback(struct tw_timer *t, void *arg)
{
    struct rec *r = arg;
    r->fires++;
    r->fired_at = tw_wheel_now(r->wheel);
    if (r->fires < 3)
        start_cb_rc =
            tw_arm(r->wheel, t, tw_deadline_in(tw_wheel_now(r->wheel), 100), 12, TW_ARM_IDLE);
    start_cb_node_rc = tw_arm(r->wheel, &start_cb_node, tw_deadline_in(tw_wheel_now(r->wheel), 10),
                              5, TW_ARM_IDLE);
}

static void test_start_slack(void)
{
    struct tw_wheel w, v;
    struct rec r, q;
    struct tw_node n;
    tw_wheel_init(&w, 0);
    tw_wheel_init(&v, 0);
    rec_init(&r, &w);
    rec_init(&q, &v);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm(NULL, &r.timer, tw_deadline_in(tw_wheel_now(NULL), 1), 1, TW_ARM_IDLE),
                 TW_EINVAL);
    CHECK_EQ_INT(
        tw_arm(&w, (struct tw_timer *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 1, TW_ARM_IDLE),
        TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &r.timer, 1, 1, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_timer *)NULL, 1, 1, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &n, tw_deadline_in(tw_wheel_now(NULL), 1), 1, TW_ARM_IDLE),
                 TW_EINVAL);
    CHECK_EQ_INT(
        tw_arm(&w, (struct tw_node *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 1, TW_ARM_IDLE),
        TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &n, 1, 1, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_node *)NULL, 1, 1, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    /* Planned as the slack arm plans an idle timer, on a second wheel. */
    const struct {
        uint64_t now, deadline, slack;
    } cases[] = {
        {0, 100, 0},     {0, 100, 28},   {0, 100, 10},    {0, 4000, 200},
        {0, 4097, 4094}, {0, 4097, 4095}, {0, 170, 21},   {0, 200, 25},
        {0, 239, 29},    {77, 50, 40},   {77, 0, 0},      {1000, 1160, 20},
        {1000, UINT64_MAX - 3, 100},     {0, (UINT64_C(1) << 40) - 5, 1000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tw_wheel_init(&w, cases[i].now);
        tw_wheel_init(&v, cases[i].now);
        rec_init(&r, &w);
        rec_init(&q, &v);
        CHECK_EQ_INT(
            tw_arm(&w, &r.timer, cases[i].deadline, cases[i].slack, TW_ARM_IDLE | TW_ARM_SLACK), 0);
        CHECK_EQ_INT(tw_arm(&v, &q.timer, cases[i].deadline, cases[i].slack, TW_ARM_SLACK), 0);
        uint64_t p = tw_deadline(&r.timer);
        CHECK_EQ_U64(p, tw_deadline(&q.timer));
        CHECK_EQ_U64(tw_wheel_pending(&w), 1);
        CHECK_EQ_U64(tw_wheel_next_expiry(&w), tw_wheel_next_expiry(&v));
        CHECK_EQ_INT(tw_wheel_advance(&w, p - 1), 0);
        CHECK_EQ_INT(tw_wheel_advance(&w, p), 1);
        CHECK_EQ_U64(r.fired_at, p);
        CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    }

    /* The delay form; a started timer is an ordinary pending one. */
    tw_wheel_init(&w, 100);
    rec_init(&r, &w);
    rec_init(&q, &w);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 0), 27, TW_ARM_IDLE), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), 128);
    CHECK_EQ_INT(tw_arm(&w, &q.timer, tw_deadline_in(tw_wheel_now(&w), 30000), (30000 >> 3),
                        TW_ARM_IDLE | TW_ARM_SLACK),
                 0);
    CHECK_EQ_U64(tw_deadline(&q.timer) % 4096, 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 2);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 120, 10, 0), 0); /* stays at 128 */
    CHECK_EQ_U64(tw_deadline(&r.timer), 128);
    CHECK_EQ_INT(tw_cancel(&w, &q.timer), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 40000), 1);
    CHECK_EQ_U64(r.fired_at, 128);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    CHECK_EQ_INT(
        tw_arm(&w, &q.timer, tw_deadline_in(tw_wheel_now(&w), 5), 0, TW_ARM_IDLE | TW_ARM_SLACK),
        0); /* idle after cancel */
    CHECK_EQ_U64(tw_deadline(&q.timer), 40005);
    CHECK_EQ_INT(tw_cancel(&w, &q.timer), 1);

    /* From a callback: a timer restarts itself; a node is refused. */
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    tw_node_init(&start_cb_node);
    CHECK_EQ_INT(tw_timer_init(&r.timer, start_from_callback, &r), 0);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 100), 12, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1000), 3);
    CHECK_EQ_INT(r.fires, 3);
    CHECK_EQ_INT(start_cb_rc, 0);
    CHECK_EQ_INT(start_cb_node_rc, TW_EBUSY);
    CHECK(!tw_pending(&start_cb_node));
    CHECK(r.fired_at >= 300 && r.fired_at <= 336);

    /* Nodes: the wheel becomes pull-only; pulled at the planned tick. */
    tw_wheel_init(&w, 0);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 200), 30, TW_ARM_IDLE), 0);
    CHECK_EQ_U64(tw_deadline(&n), 208); /* a multiple of 16 (none of 64) in [200, 230] */
    CHECK_EQ_INT(tw_wheel_advance(&w, 5), TW_EINVAL);
    CHECK(tw_wheel_expire_next_node(&w, 207) == NULL);
    CHECK(tw_wheel_expire_next_node(&w, 208) == &n);
    CHECK_EQ_INT(tw_arm(&w, &n, 1000, 0, TW_ARM_IDLE | TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_deadline(&n), 1000);
    CHECK_EQ_INT(tw_cancel(&w, &n), 1);

    /* The end of time: TW_ERANGE, left idle. */
    tw_wheel_init(&w, UINT64_MAX);
    rec_init(&r, &w);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 5), 100, TW_ARM_IDLE),
                 TW_ERANGE);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 5, 100, TW_ARM_IDLE), TW_ERANGE);
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 5), 100, TW_ARM_IDLE), TW_ERANGE);
    CHECK(!tw_pending(&r.timer));
    CHECK(!tw_pending(&n));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
}

/* Slack 0 is exact as to when a timer fires, and a re-arm with slack 0
 * and TW_ARM_SLACK is still a re-arm with slack: a pending timer whose planned tick
 * is not the new deadline is relocated at once (later or earlier, never
 * lazily), and tw_wheel_moves counts that, as it counts every slack
 * relocation; one planned at the new deadline already stays, and nothing is
 * counted. An idle timer armed so counts nothing. For comparison, the exact
 * re-arm to a later deadline is lazy: nothing at the re-arm, one move when
 * the old slot comes due. */
static void test_slack_zero_rearm(void)
{
    struct tw_wheel w;
    struct rec r;
    struct tw_node n;
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 1000), 0, TW_ARM_SLACK),
                 0); /* idle: no move */
    CHECK_EQ_U64(tw_deadline(&r.timer), 1000);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 5000), 0, TW_ARM_SLACK),
                 0); /* later: relocated */
    CHECK_EQ_U64(tw_deadline(&r.timer), 5000);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 5000, 0, TW_ARM_SLACK), 0); /* planned there: stays */
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 3000, 0, TW_ARM_SLACK), 0); /* earlier: relocated */
    CHECK_EQ_U64(tw_deadline(&r.timer), 3000);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2);
    CHECK_EQ_INT(tw_wheel_advance(&w, 2999), 0); /* exact: not early ... */
    CHECK_EQ_INT(tw_wheel_advance(&w, 3000), 1); /* ... nor late */
    CHECK_EQ_U64(r.fired_at, 3000);
    /* 3000 = 46 * 64 + 56: from level 1 to level 0 at tick 2944 */
    CHECK_EQ_U64(tw_wheel_moves(&w), 3);

    /* The same for a bare node. */
    tw_wheel_init(&w, 0);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm(&w, &n, 1000, 0, 0), 0); /* exact */
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 5000), 0, TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_deadline(&n), 5000);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    tw_wheel_destroy(&w);

    /* The exact re-arm: lazy, its move left to the advance. */
    tw_wheel_init(&w, 0);
    rec_init(&r, &w);
    CHECK_EQ_INT(tw_arm_in(&w, &r.timer, tw_wheel_now(&w), 1000), 0);
    CHECK_EQ_INT(tw_arm_in(&w, &r.timer, tw_wheel_now(&w), 5000), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 960), 0); /* 1000's level-1 slot: 960..1023 */
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5000), 1);
    CHECK_EQ_U64(r.fired_at, 5000);
}

int main(void)
{
    RUN(test_bad_arguments_and_end_of_time);
    RUN(test_planned_on_a_boundary_fired_together);
    RUN(test_highest_boundary_in_window);
    RUN(test_rearm_and_cancel);
    RUN(test_pushed_back_planned_late);
    RUN(test_sub_slots);
    RUN(test_sub_slot_chains);
    RUN(test_periodic_keeps_phase);
    RUN(test_bare_nodes);
    RUN(test_start_slack);
    RUN(test_slack_zero_rearm);
    return test_summary();
}
