/* SPDX-License-Identifier: MIT */
/* Unit tests of the eager re-arm (include/twheel/wheel.h, "Lazy or eager
 * re-arm"): exact and never early as every arm, a pending timer relocated at
 * once unless it is in the slot of its new deadline already (so a heartbeat
 * leaves no move to the advances, and the poller's next expiry follows the
 * new deadline), earlier and equal re-arms, out of a slack sub-list, cancel
 * after an eager re-arm, re-arm of a ready timer from a callback, lazy and eager
 * mixed on one timer, bare nodes, bad arguments and the end of time. The
 * randomized rules are in the model test and the fuzz target
 * (tests/wheel_model.h: one exact arming in two there is eager). */
#include <stdlib.h>

#include "test.h"
#include "twheel.h"

struct rec {
    struct tw_timer timer;
    struct tw_wheel *wheel;
    int fires;
    uint64_t fired_at;
    struct rec *other; /* re-armed eagerly by this one's callback, if set */
    uint64_t other_deadline;
    int rc;
};

static void rec_fire(struct tw_timer *t, void *arg)
{
    struct rec *r = arg;
    (void)t;
    r->fires++;
    r->fired_at = tw_wheel_now(r->wheel);
    if (r->other)
        r->rc = tw_arm(r->wheel, &r->other->timer, r->other_deadline, 0, TW_ARM_EAGER);
}

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
    CHECK_EQ_INT(tw_arm(NULL, &r.timer, tw_deadline_in(tw_wheel_now(NULL), 1), 0, TW_ARM_EAGER),
                 TW_EINVAL);
    CHECK_EQ_INT(
        tw_arm(&w, (struct tw_timer *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_EAGER),
        TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &r.timer, 1, 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_timer *)NULL, 1, 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &n, tw_deadline_in(tw_wheel_now(NULL), 1), 0, TW_ARM_EAGER),
                 TW_EINVAL);
    CHECK_EQ_INT(
        tw_arm(&w, (struct tw_node *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_EAGER),
        TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &n, 1, 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_node *)NULL, 1, 0, TW_ARM_EAGER), TW_EINVAL);
    struct tw_timer raw;
    memset(&raw, 0, sizeof raw); /* never initialised: no callback */
    CHECK_EQ_INT(tw_arm(&w, &raw, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK(!tw_pending(&raw));

    /* Delay 0 and a past deadline: the next tick. */
    tw_wheel_init(&w, 100);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 0), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), 101);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 7, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), 101);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 101), 1);
    CHECK_EQ_U64(r.fired_at, 101);

    /* The end of time: no later tick exists, t is left as it was. */
    tw_wheel_init(&w, UINT64_MAX);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 5), 0, TW_ARM_EAGER),
                 TW_ERANGE);
    CHECK_EQ_INT(tw_arm(&w, &n, 5, 0, TW_ARM_EAGER), TW_ERANGE);
    CHECK(!tw_pending(&r.timer));
    /* Deadlines saturate; a pending timer re-armed past the end stays due at
     * UINT64_MAX. */
    tw_wheel_init(&w, UINT64_MAX - 10);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 3), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(
        tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), UINT64_MAX), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), UINT64_MAX);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX - 1), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 1);
    CHECK_EQ_U64(r.fired_at, UINT64_MAX);
}

/* Eager arms at deadlines on every level fire at their tick exactly, in
 * order, whatever the advance steps. */
static void test_exact_on_every_level(void)
{
    enum { N = 12 };
    struct tw_wheel w;
    struct rec r[N];
    tw_wheel_init(&w, 1000);
    uint64_t due[N];
    for (unsigned i = 0; i < N; i++) {
        rec_init(&r[i], &w);
        due[i] = 1000 + (UINT64_C(1) << (2 * i)) + i; /* 1 tick .. 2^22 ahead */
        CHECK_EQ_INT(tw_arm(&w, &r[i].timer, due[i], 0, TW_ARM_EAGER), 0);
        CHECK_EQ_U64(tw_deadline(&r[i].timer), due[i]);
    }
    /* Odd steps: each advance stops short of, on, or past deadlines. */
    for (uint64_t now = 1000; tw_wheel_pending(&w) > 0;) {
        uint64_t next = tw_wheel_next_expiry(&w);
        now = next + (now % 3 == 0 ? 0 : 2);
        tw_wheel_advance(&w, now);
        for (unsigned i = 0; i < N; i++)
            if (r[i].fires)
                CHECK(r[i].fired_at >= due[i]);
    }
    for (unsigned i = 0; i < N; i++) { /* fired at its tick, whatever the step */
        CHECK_EQ_INT(r[i].fires, 1);
        CHECK_EQ_U64(r[i].fired_at, due[i]);
    }
}

/* A heartbeat: a 500-tick timeout re-armed every 10 ticks, inside one block
 * of 4096 ticks (so every deadline is at level 0 or 1, in a slot that starts
 * at most 63 ticks before it). Eager, the advances never move it and the
 * poller's next expiry is never earlier than that slot; lazy, the advances
 * move it whenever the slot of an older deadline comes due. Both fire
 * exactly 500 ticks after the last beat. (Across a 4096 boundary an eager
 * deadline may wait in a level-2 slot that starts before the next beat and
 * be moved once: eager leaves no move for the re-arm itself.) */
static void test_heartbeat_leaves_no_move(void)
{
    for (int eager = 0; eager <= 1; eager++) {
        struct tw_wheel w;
        struct rec r;
        tw_wheel_init(&w, 0);
        rec_init(&r, &w);
        uint64_t last = 0;
        for (uint64_t now = 0; now <= 3000; now += 10) {
            tw_wheel_advance(&w, now);
            CHECK_EQ_INT(
                eager ? tw_arm(&w, &r.timer, tw_deadline_in(tw_wheel_now(&w), 500), 0, TW_ARM_EAGER)
                      : tw_arm_in(&w, &r.timer, tw_wheel_now(&w), 500),
                0);
            last = now + 500;
            if (eager) /* its slot starts at most 63 ticks before it */
                CHECK(tw_wheel_next_expiry(&w) + 63 >= last);
        }
        if (eager)
            CHECK_EQ_U64(tw_wheel_moves(&w), 0);
        else
            CHECK(tw_wheel_moves(&w) > 0);
        uint64_t moves = tw_wheel_moves(&w);
        CHECK_EQ_INT(tw_wheel_advance(&w, last - 1), 0);
        CHECK_EQ_INT(r.fires, 0);
        CHECK_EQ_INT(tw_wheel_advance(&w, last + 500), 1);
        CHECK_EQ_U64(r.fired_at, last);
        /* Eager: from its level-1 slot to level 0 once, at most. */
        if (eager)
            CHECK(tw_wheel_moves(&w) - moves <= 1);
    }
}

/* Re-arms: later, earlier and equal deadlines, after a lazy re-arm of the
 * same timer, and a cancel afterwards. */
static void test_rearm_and_cancel(void)
{
    struct tw_wheel w;
    struct rec a, b;
    tw_wheel_init(&w, 0);
    rec_init(&a, &w);
    rec_init(&b, &w);

    /* Lazy later re-arm leaves a in the slot of 200 (the poller stops
     * there; a slot not yet near: the next level-1 slot, that of 64-127,
     * would be relocated at once). An eager re-arm into the slot of the
     * stored deadline (9000 and 8500: level 2, ticks 8192-12287) is one
     * store and keeps that lazy move; one into another slot relocates it. */
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 200, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 9000, 0, 0), 0);
    CHECK(tw_wheel_next_expiry(&w) <= 200);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 8500, 0, TW_ARM_EAGER), 0);
    CHECK(tw_wheel_next_expiry(&w) <= 200);
    CHECK_EQ_U64(tw_deadline(&a.timer), 8500);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 13000, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 12288); /* its level-2 slot */
    CHECK_EQ_U64(tw_deadline(&a.timer), 13000);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);
    /* An eager re-arm within its own slot: one store, no move, exact. */
    uint64_t moves = tw_wheel_moves(&w);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 12300, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), moves);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 12288);

    /* Earlier, then equal, then later again. */
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 50, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 50, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 50);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, tw_deadline_in(tw_wheel_now(&w), 60), 0, TW_ARM_EAGER),
                 0); /* level 0: its tick */
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 60);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);

    /* b shares a's slot and chain neighbourhood; a leaves, b stays. */
    CHECK_EQ_INT(tw_arm(&w, &b.timer, 60, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 300, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 299), 1);
    CHECK_EQ_INT(b.fires, 1);
    CHECK_EQ_U64(b.fired_at, 60);
    CHECK_EQ_INT(a.fires, 0);

    /* Cancel after an eager re-arm: it never fires. */
    CHECK_EQ_INT(tw_arm(&w, &a.timer, tw_deadline_in(tw_wheel_now(&w), 40), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_cancel(&w, &a.timer), 1);
    CHECK_EQ_INT(tw_cancel(&w, &a.timer), 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);
    CHECK_EQ_INT(tw_wheel_advance(&w, 100000), 0);
    CHECK_EQ_INT(a.fires, 0);
}

/* A timer planned with slack on a level-1 sub-list (tick 96: sub-list 2 of
 * slot 64-127, handed down to tick 96), lazily pushed to 100, then re-armed
 * eagerly to 70, in the same slot: it must be relocated (the sub-list starts
 * at 96, after 70), and fires at 70. Without sub-lists in the slot, the same
 * re-arm is one store and still exact (the slot starts at 64). */
static void test_rearm_out_of_a_sub_list(void)
{
    struct tw_wheel w;
    struct rec a, b;
    tw_wheel_init(&w, 0);
    rec_init(&a, &w);
    rec_init(&b, &w);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 90, 10, 0), 0);
    CHECK_EQ_U64(tw_deadline(&a.timer), 96);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 100, 0, 0), 0); /* lazy: stays at 96 */
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 70, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 69), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 200), 1);
    CHECK_EQ_U64(a.fired_at, 70);

    tw_wheel_init(&w, 0);
    CHECK_EQ_INT(tw_arm(&w, &b.timer, 100, 0, 0), 0);
    uint64_t moves = tw_wheel_moves(&w);
    CHECK_EQ_INT(tw_arm(&w, &b.timer, 70, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), moves);
    CHECK_EQ_INT(tw_wheel_advance(&w, 69), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 200), 1);
    CHECK_EQ_U64(b.fired_at, 70);
}

/* A callback re-arms, eagerly, a timer due at the same tick and already on
 * the ready list: it obeys its new deadline at once. */
static void test_rearm_ready_from_callback(void)
{
    struct tw_wheel w;
    struct rec a, b;
    tw_wheel_init(&w, 0);
    rec_init(&a, &w);
    rec_init(&b, &w);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 10, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &b.timer, 10, 0, 0), 0);
    /* Whichever fires first pushes the other back by 5 ticks. */
    a.other = &b;
    a.other_deadline = 15;
    b.other = &a;
    b.other_deadline = 15;
    CHECK_EQ_INT(tw_wheel_advance(&w, 12), 1);
    CHECK_EQ_INT(a.fires + b.fires, 1);
    struct rec *first = a.fires ? &a : &b, *second = a.fires ? &b : &a;
    CHECK_EQ_INT(first->rc, 0);
    CHECK_EQ_U64(first->fired_at, 10);
    CHECK(tw_pending(&second->timer));
    CHECK_EQ_U64(tw_deadline(&second->timer), 15);
    first->other = NULL;
    second->other = NULL;
    CHECK_EQ_INT(tw_wheel_advance(&w, 14), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 15), 1);
    CHECK_EQ_U64(second->fired_at, 15);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    /* A callback re-arming itself eagerly fires again later, not twice now. */
    a.other = &a;
    a.other_deadline = 20; /* <= now when it runs at 30: the next tick */
    a.fires = 0;
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 30, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 30), 1);
    CHECK_EQ_U64(tw_deadline(&a.timer), 31);
    a.other = NULL;
    CHECK_EQ_INT(tw_wheel_advance(&w, 31), 1);
    CHECK_EQ_INT(a.fires, 2);
    CHECK_EQ_U64(a.fired_at, 31);
}

static struct tw_wheel busy_wheel;
static struct tw_node busy_node;
static int busy_rc;

static void busy_fire(struct tw_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    busy_rc = tw_arm(&busy_wheel, &busy_node, tw_deadline_in(tw_wheel_now(&busy_wheel), 5), 0,
                     TW_ARM_EAGER);
}

/* Bare nodes: eager arms and re-arms, pulled in deadline order; from a
 * callback of advance the node arm is refused. */
static void test_bare_nodes(void)
{
    struct tw_wheel w;
    struct tw_node n[3];
    tw_wheel_init(&w, 0);
    for (unsigned i = 0; i < 3; i++)
        tw_node_init(&n[i]);
    CHECK_EQ_INT(tw_arm(&w, &n[0], 500, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_arm(&w, &n[1], tw_deadline_in(tw_wheel_now(&w), 20), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_arm(&w, &n[2], 30, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &n[2], 7000, 0, 0), 0);           /* lazy */
    CHECK_EQ_INT(tw_arm(&w, &n[0], 10, 0, TW_ARM_EAGER), 0);  /* earlier */
    CHECK_EQ_INT(tw_arm(&w, &n[1], 600, 0, TW_ARM_EAGER), 0); /* later */
    CHECK_EQ_U64(tw_deadline(&n[1]), 600);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5), TW_EINVAL); /* pull-only now */
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100000), &n[0]);
    CHECK_EQ_U64(tw_wheel_now(&w), 10);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100000), &n[1]);
    CHECK_EQ_U64(tw_wheel_now(&w), 600);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100000), &n[2]);
    CHECK_EQ_U64(tw_wheel_now(&w), 7000);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100000), NULL);

    struct tw_timer t;
    tw_wheel_init(&busy_wheel, 0);
    tw_node_init(&busy_node);
    tw_timer_init(&t, busy_fire, NULL);
    CHECK_EQ_INT(
        tw_arm(&busy_wheel, &t, tw_deadline_in(tw_wheel_now(&busy_wheel), 1), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_wheel_advance(&busy_wheel, 1), 1);
    CHECK_EQ_INT(busy_rc, TW_EBUSY);
    CHECK(!tw_pending(&busy_node));
}

int main(void)
{
    RUN(test_bad_arguments_and_end_of_time);
    RUN(test_exact_on_every_level);
    RUN(test_heartbeat_leaves_no_move);
    RUN(test_rearm_and_cancel);
    RUN(test_rearm_out_of_a_sub_list);
    RUN(test_rearm_ready_from_callback);
    RUN(test_bare_nodes);
    return test_summary();
}
