/* SPDX-License-Identifier: MIT */
/* Unit tests of the core wheel: one test per rule of include/twheel/wheel.h,
 * and the edge cases (delay 0, huge delays, the end of the tick range,
 * re-arming from inside a callback, cancelling the firing timer or its
 * neighbour in the same slot). */
#include <stdlib.h>

#include "test.h"
#include "twheel.h"

/* A timer that records when it fired, and can act on others when it does. */
struct probe {
    struct tw_timer timer;
    struct tw_wheel *wheel;
    int fires;
    uint64_t fired_at;
    int order; /* position in the global firing order */
    void (*action)(struct probe *self);
    struct probe *other;
    uint64_t value;
};

static int fire_counter;

static void probe_fire(struct tw_timer *t, void *arg)
{
    struct probe *p = arg;
    CHECK_EQ_PTR(t, &p->timer);
    p->fires++;
    p->fired_at = tw_wheel_now(p->wheel);
    p->order = ++fire_counter;
    if (p->action)
        p->action(p);
}

static void probe_init(struct probe *p, struct tw_wheel *w)
{
    memset(p, 0, sizeof *p);
    p->wheel = w;
    CHECK_EQ_INT(tw_timer_init(&p->timer, probe_fire, p), 0);
}

static void test_sizes(void)
{
    CHECK(sizeof(struct tw_timer) <= 40 + TW_NODE_DEBUG_BYTES);
    CHECK_EQ_INT(TW_WHEEL_LEVELS, 11);
}

static void test_bad_arguments(void)
{
    struct tw_wheel w;
    struct tw_timer t;
    CHECK_EQ_INT(tw_wheel_init(NULL, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_wheel_init(&w, 0), 0);
    CHECK_EQ_INT(tw_timer_init(NULL, probe_fire, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_timer_init(&t, NULL, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_arm_in(NULL, &t, tw_wheel_now(NULL), 1), TW_EINVAL);
    CHECK_EQ_INT(tw_arm_in(&w, (struct tw_timer *)NULL, tw_wheel_now(&w), 1), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_timer *)NULL, 1, 0, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(NULL, &t), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&w, (struct tw_timer *)NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_wheel_advance(NULL, 5), TW_EINVAL);
    CHECK_EQ_INT(tw_wheel_destroy(NULL), TW_EINVAL);
    CHECK(tw_wheel_expire_next(NULL, 5) == NULL);
    CHECK_EQ_INT(tw_periodic_init(NULL, NULL, NULL, TW_MISSED_CATCH_UP), TW_EINVAL);
    CHECK_EQ_INT(tw_periodic_stop(NULL), TW_EINVAL);
}

static void test_error_strings(void)
{
    CHECK_EQ_STR(tw_err_name(TW_EINVAL), "TW_EINVAL");
    CHECK_EQ_STR(tw_err_name(TW_ERANGE), "TW_ERANGE");
    CHECK_EQ_STR(tw_err_name(0), "TW_OK");
    CHECK_EQ_STR(tw_err_name(-999), "TW_UNKNOWN");
    CHECK_EQ_STR(tw_strerror(TW_EBUSY), "not allowed now: from a callback, or while still in use");
    CHECK_EQ_STR(tw_strerror(12345), "unknown error");
    CHECK_EQ_STR(tw_version_string(), "0.1.0");
    CHECK_EQ_INT(tw_version(), TW_VERSION_HEX);
}

static void test_never_early_tick_exact(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 1000);
    probe_init(&p, &w);
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 500), 0);
    CHECK(tw_pending(&p.timer));
    CHECK_EQ_U64(tw_deadline(&p.timer), 1500);
    /* A far timer sits in a level-1 slot: the wheel names that slot's first
     * tick (a lower bound) and fires nothing there. */
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 1472);
    CHECK_EQ_U64(tw_wheel_timeout(&w, tw_wheel_now(&w)), 472);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1472), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 1500); /* now at level 0: exact */
    CHECK_EQ_INT(tw_wheel_advance(&w, 1499), 0);
    CHECK_EQ_INT(p.fires, 0);
    CHECK_EQ_U64(tw_wheel_now(&w), 1499);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1500), 1);
    CHECK_EQ_INT(p.fires, 1);
    CHECK_EQ_U64(p.fired_at, 1500);
    CHECK(!tw_pending(&p.timer));
    CHECK_EQ_U64(tw_deadline(&p.timer), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_timeout(&w, tw_wheel_now(&w)), TW_NEVER);
}

/* An advance that passes many deadlines fires them tick by tick, each with the
 * wheel's time equal to its deadline, across every level. */
static void test_deadline_order_across_levels(void)
{
    enum { N = 40 };
    struct tw_wheel w;
    struct probe p[N];
    tw_wheel_init(&w, 7);
    fire_counter = 0;
    for (int i = 0; i < N; i++) {
        probe_init(&p[i], &w);
        /* Delays spread over 1 tick .. 2^39 ticks, armed in shuffled order. */
        int k = (i * 17) % N;
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), (UINT64_C(1) << k) + (uint64_t)k);
    }
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_C(1) << 41), N);
    for (int i = 0; i < N; i++) {
        int k = (i * 17) % N;
        CHECK_EQ_U64(p[i].fired_at, 7 + (UINT64_C(1) << k) + (uint64_t)k);
        CHECK_EQ_INT(p[i].order, k + 1);
    }
    CHECK_EQ_U64(tw_wheel_now(&w), UINT64_C(1) << 41);
}

static void test_delay_zero_is_next_tick(void)
{
    struct tw_wheel w;
    struct probe p, q;
    tw_wheel_init(&w, 50);
    probe_init(&p, &w);
    probe_init(&q, &w);
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 0);
    tw_arm(&w, &q.timer, 10, 0, 0); /* in the past */
    CHECK_EQ_U64(tw_deadline(&p.timer), 51);
    CHECK_EQ_U64(tw_deadline(&q.timer), 51);
    CHECK_EQ_INT(tw_wheel_advance(&w, 50), 0); /* same time: nothing */
    CHECK_EQ_INT(tw_wheel_advance(&w, 51), 2);
    CHECK_EQ_U64(p.fired_at, 51);
    CHECK_EQ_U64(q.fired_at, 51);
    CHECK_EQ_INT(p.fires + q.fires, 2);
}

static void test_saturating_deadline(void)
{
    struct tw_wheel w;
    struct probe p, q;
    /* Unlike timeout.c, a delay past 2^64-1 must not wrap round and fire now. */
    tw_wheel_init(&w, UINT64_MAX - 10);
    probe_init(&p, &w);
    probe_init(&q, &w);
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 100), 0);
    CHECK_EQ_U64(tw_deadline(&p.timer), UINT64_MAX);
    CHECK_EQ_INT(tw_arm_in(&w, &q.timer, tw_wheel_now(&w), UINT64_MAX), 0);
    CHECK_EQ_U64(tw_deadline(&q.timer), UINT64_MAX);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX - 9), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX - 1), 0);
    CHECK_EQ_INT(p.fires, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 2);
    CHECK_EQ_U64(p.fired_at, UINT64_MAX);
    /* At the end of time no later tick exists: arming is refused, unchanged. */
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 0), TW_ERANGE);
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 5, 0, 0), TW_ERANGE);
    CHECK(!tw_pending(&p.timer));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    /* From time 0, the longest delay lands on the last tick, at the top level. */
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), UINT64_MAX);
    CHECK_EQ_U64(tw_deadline(&p.timer), UINT64_MAX);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX - 1), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 1);
    CHECK(tw_wheel_moves(&w) <= TW_WHEEL_LEVELS);
}

/* Time crossing 2^63 and other high carries (the "overflow" of lower digits
 * up the levels) keeps every deadline exact. */
static void test_high_bit_carries(void)
{
    struct tw_wheel w;
    struct probe p[6];
    const uint64_t start = (UINT64_C(1) << 63) - 3;
    const uint64_t delays[6] = {1, 3, 4, 64, UINT64_C(1) << 36, (UINT64_C(1) << 62) + 5};
    tw_wheel_init(&w, start);
    for (int i = 0; i < 6; i++) {
        probe_init(&p[i], &w);
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), delays[i]);
    }
    while (tw_wheel_pending(&w))
        tw_wheel_advance(&w, tw_wheel_next_expiry(&w));
    for (int i = 0; i < 6; i++) {
        CHECK_EQ_INT(p[i].fires, 1);
        CHECK_EQ_U64(p[i].fired_at, start + delays[i]);
    }
}

static void test_rearm_later_is_lazy_and_exact(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 100);
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 5000), 0); /* re-arm a pending timer */
    CHECK_EQ_U64(tw_deadline(&p.timer), 5000);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);
    /* The wheel may stop at the old slot (a lower bound) but fires nothing. */
    CHECK(tw_wheel_next_expiry(&w) <= 5000);
    CHECK_EQ_INT(tw_wheel_advance(&w, 4999), 0);
    CHECK_EQ_INT(p.fires, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5000), 1);
    CHECK_EQ_U64(p.fired_at, 5000);
}

static void test_rearm_earlier_is_immediate(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 1 << 20);
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 70);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 64); /* level-1 slot of tick 70 */
    CHECK_EQ_INT(tw_wheel_advance(&w, 69), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 70), 1);
    CHECK_EQ_U64(p.fired_at, 70);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1 << 21), 0); /* the old deadline is gone */
    CHECK_EQ_INT(p.fires, 1);
}

static void test_cancel(void)
{
    struct tw_wheel w;
    struct probe p, q;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    probe_init(&q, &w);
    CHECK_EQ_INT(tw_cancel(&w, &p.timer), 0); /* idle: a no-op */
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 10);
    tw_arm_in(&w, &q.timer, tw_wheel_now(&w), 10);
    CHECK_EQ_U64(tw_wheel_pending(&w), 2);
    CHECK_EQ_INT(tw_cancel(&w, &p.timer), 1);
    CHECK_EQ_INT(tw_cancel(&w, &p.timer), 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 10); /* q still holds the slot */
    CHECK_EQ_INT(tw_cancel(&w, &q.timer), 1);
    /* The slot emptied: nothing is left to wake up for. */
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);
    CHECK_EQ_INT(tw_wheel_advance(&w, 100), 0);
    CHECK_EQ_INT(p.fires + q.fires, 0);
}

static void test_advance_backwards_is_noop(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 1000);
    probe_init(&p, &w);
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 5);
    CHECK_EQ_INT(tw_wheel_advance(&w, 10), 0);
    CHECK_EQ_U64(tw_wheel_now(&w), 1000);
    CHECK_EQ_U64(tw_deadline(&p.timer), 1005);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1005), 1);
}

static void test_destroy_with_armed_timers(void)
{
    struct tw_wheel w;
    struct probe p[5];
    tw_wheel_init(&w, 0);
    for (int i = 0; i < 5; i++) {
        probe_init(&p[i], &w);
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), (uint64_t)1 << (i * 9));
    }
    CHECK_EQ_INT(tw_wheel_destroy(&w), 5);
    for (int i = 0; i < 5; i++)
        CHECK(!tw_pending(&p[i].timer));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_C(1) << 40), 0);
    /* The timers are reusable, on this wheel or another. */
    CHECK_EQ_INT(tw_arm_in(&w, &p[0].timer, tw_wheel_now(&w), 1), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 1);
}

/* ---- callbacks acting on the wheel ------------------------------------------ */

static void act_rearm_self(struct probe *self)
{
    if (self->fires < 5)
        CHECK_EQ_INT(tw_arm_in(self->wheel, &self->timer, tw_wheel_now(self->wheel), self->value),
                     0);
}

static void test_callback_rearms_itself(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    p.action = act_rearm_self;
    p.value = 0; /* every next tick: must not livelock one advance */
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 3);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5), 3); /* ticks 3, 4, 5 */
    CHECK_EQ_U64(p.fired_at, 5);
    CHECK_EQ_INT(tw_wheel_advance(&w, 100), 2);
    CHECK_EQ_U64(p.fired_at, 7);
    CHECK(!tw_pending(&p.timer));
}

static void act_cancel_self(struct probe *self)
{
    /* The firing timer is already idle: cancelling it is a no-op. */
    CHECK_EQ_INT(tw_cancel(self->wheel, &self->timer), 0);
}

static void test_cancel_the_firing_timer(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    p.action = act_cancel_self;
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 9);
    CHECK_EQ_INT(tw_wheel_advance(&w, 20), 1);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
}

static void act_cancel_other(struct probe *self)
{
    if (self->other->fires == 0)
        CHECK_EQ_INT(tw_cancel(self->wheel, &self->other->timer), 1);
}

/* Two timers due at the same tick share a slot; whichever fires first cancels
 * the other, which then must not fire. */
static void test_cancel_neighbour_in_same_slot(void)
{
    struct tw_wheel w;
    struct probe a, b;
    tw_wheel_init(&w, 0);
    probe_init(&a, &w);
    probe_init(&b, &w);
    a.action = b.action = act_cancel_other;
    a.other = &b;
    b.other = &a;
    tw_arm_in(&w, &a.timer, tw_wheel_now(&w), 300);
    tw_arm_in(&w, &b.timer, tw_wheel_now(&w), 300);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1000), 1);
    CHECK_EQ_INT(a.fires + b.fires, 1);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
}

static void act_rearm_other(struct probe *self)
{
    if (self->other->fires == 0)
        CHECK_EQ_INT(
            tw_arm_in(self->wheel, &self->other->timer, tw_wheel_now(self->wheel), self->value), 0);
}

/* Re-arming a same-tick neighbour (already on the ready list) later, or to
 * the next tick, takes effect at once. */
static void test_rearm_neighbour_in_same_slot(void)
{
    for (uint64_t delay = 0; delay <= 100; delay += 100) {
        struct tw_wheel w;
        struct probe a, b;
        tw_wheel_init(&w, 0);
        probe_init(&a, &w);
        probe_init(&b, &w);
        a.action = b.action = act_rearm_other;
        a.other = &b;
        b.other = &a;
        a.value = b.value = delay;
        tw_arm_in(&w, &a.timer, tw_wheel_now(&w), 40);
        tw_arm_in(&w, &b.timer, tw_wheel_now(&w), 40);
        CHECK_EQ_INT(tw_wheel_advance(&w, 40), 1);
        struct probe *first = a.fires ? &a : &b, *second = a.fires ? &b : &a;
        CHECK_EQ_INT(second->fires, 0);
        CHECK_EQ_U64(tw_deadline(&second->timer), 40 + (delay ? delay : 1));
        CHECK_EQ_INT(tw_wheel_advance(&w, 1000), 1);
        CHECK_EQ_U64(second->fired_at, 40 + (delay ? delay : 1));
        CHECK_EQ_INT(first->fires, 1);
    }
}

static void act_arm_other_soon(struct probe *self)
{
    tw_arm_in(self->wheel, &self->other->timer, tw_wheel_now(self->wheel), self->value);
}

/* A callback arming a timer due within the same advance sees it fire in that
 * advance, after every timer due earlier and before every one due later. */
static void test_callback_arms_timer_due_in_same_advance(void)
{
    struct tw_wheel w;
    struct probe a, b, c;
    tw_wheel_init(&w, 0);
    fire_counter = 0;
    probe_init(&a, &w);
    probe_init(&b, &w);
    probe_init(&c, &w);
    a.action = act_arm_other_soon;
    a.other = &b;
    a.value = 5; /* a fires at 10, arms b for 15 */
    tw_arm_in(&w, &a.timer, tw_wheel_now(&w), 10);
    tw_arm_in(&w, &c.timer, tw_wheel_now(&w), 16);
    CHECK_EQ_INT(tw_wheel_advance(&w, 100), 3);
    CHECK_EQ_U64(b.fired_at, 15);
    CHECK_EQ_INT(a.order, 1);
    CHECK_EQ_INT(b.order, 2);
    CHECK_EQ_INT(c.order, 3);
}

static void act_nested_calls(struct probe *self)
{
    CHECK_EQ_INT(tw_wheel_advance(self->wheel, 1000), TW_EBUSY);
    CHECK_EQ_INT(tw_wheel_destroy(self->wheel), TW_EBUSY);
    CHECK(tw_wheel_expire_next(self->wheel, 1000) == NULL);
}

static void test_nested_advance_refused(void)
{
    struct tw_wheel w;
    struct probe p, q;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    probe_init(&q, &w);
    p.action = act_nested_calls;
    tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 1);
    tw_arm_in(&w, &q.timer, tw_wheel_now(&w), 500);
    CHECK_EQ_INT(tw_wheel_advance(&w, 10), 1);
    CHECK_EQ_U64(tw_wheel_now(&w), 10);
    CHECK(tw_pending(&q.timer));
}

/* ---- pull interface ----------------------------------------------------------- */

static void test_expire_next_pulls_in_order(void)
{
    struct tw_wheel w;
    struct probe p[4];
    tw_wheel_init(&w, 0);
    const uint64_t delays[4] = {300, 2, 70000, 2};
    for (int i = 0; i < 4; i++) {
        probe_init(&p[i], &w);
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), delays[i]);
    }
    struct tw_timer *t1 = tw_wheel_expire_next(&w, 100000);
    struct tw_timer *t2 = tw_wheel_expire_next(&w, 100000);
    CHECK((t1 == &p[1].timer && t2 == &p[3].timer) || (t1 == &p[3].timer && t2 == &p[1].timer));
    CHECK_EQ_U64(tw_wheel_now(&w), 2);
    CHECK(!tw_pending(t1));
    /* Between pulls the caller may change anything: push p[0] past p[2]. */
    tw_arm_in(&w, &p[0].timer, tw_wheel_now(&w), 80000);
    CHECK_EQ_PTR(tw_wheel_expire_next(&w, 100000), &p[2].timer);
    CHECK_EQ_U64(tw_wheel_now(&w), 70000);
    CHECK_EQ_PTR(tw_wheel_expire_next(&w, 100000), &p[0].timer);
    CHECK_EQ_U64(tw_wheel_now(&w), 80002);
    CHECK(tw_wheel_expire_next(&w, 100000) == NULL);
    CHECK_EQ_U64(tw_wheel_now(&w), 100000);
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(p[i].fires, 0); /* no callback ran */
}

/* Timers a pull left due at the current tick: an advance to an earlier time
 * fires them (at that tick, time does not go back) and nothing else; destroy
 * detaches them like any other pending timer. */
static void test_timers_left_ready_by_a_pull(void)
{
    struct tw_wheel w;
    struct probe p[5];
    tw_wheel_init(&w, 0);
    for (int i = 0; i < 5; i++) {
        probe_init(&p[i], &w);
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), i < 3 ? 10 : 20);
    }
    CHECK(tw_wheel_expire_next(&w, 10) != NULL); /* two more are left due at 10 */
    CHECK_EQ_U64(tw_wheel_pending(&w), 4);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5), 2);
    CHECK_EQ_U64(tw_wheel_now(&w), 10);
    for (int i = 0; i < 3; i++)
        CHECK(p[i].fires == 0 || p[i].fired_at == 10);
    CHECK_EQ_INT(p[3].fires + p[4].fires, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5), 0); /* now nothing is left */
    CHECK(tw_wheel_expire_next(&w, 20) != NULL);
    CHECK_EQ_INT(tw_wheel_destroy(&w), 1);
    CHECK(!tw_pending(&p[3].timer) && !tw_pending(&p[4].timer));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), TW_NEVER);
    CHECK_EQ_INT(tw_wheel_advance(&w, 1000), 0);
}

/* Bare nodes: the timer rules without a callback. Arming one makes the wheel
 * pull-only (advance and expire_next refuse, since a node has nothing to
 * call) until destroy; whole timers on it come out as nodes too. */
struct node_from_callback {
    struct tw_timer timer;
    struct tw_wheel *wheel;
    struct tw_node node;
    int rc;
};

static void arm_node_from_callback(struct tw_timer *t, void *arg)
{
    struct node_from_callback *x = arg;
    (void)t;
    x->rc = tw_arm_in(x->wheel, &x->node, tw_wheel_now(x->wheel), 0);
}

static void test_bare_nodes(void)
{
    /* Not from a callback: that advance would take the node for a timer. */
    struct tw_wheel w0;
    struct node_from_callback x = {.wheel = &w0, .rc = 1};
    tw_wheel_init(&w0, 0);
    tw_node_init(&x.node);
    tw_timer_init(&x.timer, arm_node_from_callback, &x);
    tw_arm_in(&w0, &x.timer, tw_wheel_now(&w0), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w0, 10), 1);
    CHECK_EQ_INT(x.rc, TW_EBUSY);
    CHECK(!tw_pending(&x.node));
    tw_arm_in(&w0, &x.timer, tw_wheel_now(&w0), 1); /* still a wheel that calls back */
    CHECK_EQ_INT(tw_wheel_advance(&w0, 20), 1);
    /* A failed arm (no later tick exists) leaves the wheel as it was. */
    tw_wheel_init(&w0, UINT64_MAX);
    CHECK_EQ_INT(tw_arm_in(&w0, &x.node, tw_wheel_now(&w0), 5), TW_ERANGE);
    CHECK_EQ_INT(tw_wheel_advance(&w0, UINT64_MAX), 0);

    struct tw_wheel w;
    struct tw_node a, b, c;
    struct probe p;
    tw_wheel_init(&w, 100);
    CHECK_EQ_INT(tw_node_init(NULL), TW_EINVAL);
    tw_node_init(&a);
    tw_node_init(&b);
    tw_node_init(&c);
    CHECK(!tw_pending(&a));
    CHECK_EQ_U64(tw_deadline(&a), TW_NEVER);
    CHECK_EQ_INT(tw_arm_in(NULL, &a, tw_wheel_now(NULL), 1), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_node *)NULL, 1, 0, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&w, &a), 0); /* idle: no-op */
    probe_init(&p, &w);
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 5), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 101), 0);              /* not pull-only yet */
    CHECK_EQ_INT(tw_arm_in(&w, &a, tw_wheel_now(&w), 0), 0); /* delay 0: next tick */
    CHECK_EQ_U64(tw_deadline(&a), 102);
    CHECK_EQ_INT(tw_arm_in(&w, &b, tw_wheel_now(&w), 3000), 0);
    CHECK_EQ_INT(tw_arm_in(&w, &b, tw_wheel_now(&w), 5000), 0); /* later: lazy */
    CHECK_EQ_INT(tw_arm(&w, &c, UINT64_MAX - 1, 0, 0), 0);
    CHECK_EQ_INT(tw_arm_in(&w, &c, tw_wheel_now(&w), UINT64_MAX), 0); /* saturates */
    CHECK_EQ_U64(tw_deadline(&c), UINT64_MAX);
    CHECK_EQ_U64(tw_wheel_pending(&w), 4);
    CHECK_EQ_INT(tw_wheel_advance(&w, 200), TW_EINVAL); /* pull-only now */
    CHECK(tw_wheel_expire_next(&w, 200) == NULL);
    CHECK_EQ_U64(tw_wheel_pending(&w), 4);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 200), &a);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 200), &p.timer.node); /* due at 105 */
    CHECK_EQ_U64(tw_wheel_now(&w), 105);
    CHECK_EQ_INT(p.fires, 0);
    CHECK(tw_wheel_expire_next_node(&w, 5100) == NULL); /* b is due at 5101 */
    CHECK_EQ_U64(tw_wheel_now(&w), 5100);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 5101), &b);
    CHECK_EQ_INT(tw_cancel(&w, &c), 1);
    CHECK(!tw_pending(&c));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    CHECK_EQ_INT(tw_arm_in(&w, &a, tw_wheel_now(&w), 10), 0);
    CHECK_EQ_INT(tw_wheel_destroy(&w), 1); /* back to a wheel that calls back */
    CHECK(!tw_pending(&a));
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 1), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 6000), 1);
    CHECK_EQ_INT(p.fires, 1);
}

/* ---- periodic timers ---------------------------------------------------------- */

struct ticker {
    struct tw_periodic periodic;
    uint64_t at[64];
    int n;
    int stop_after;
};

static void ticker_fire(struct tw_periodic *p, void *arg)
{
    struct ticker *k = arg;
    if (k->n < 64)
        k->at[k->n] = tw_wheel_now(p->wheel);
    k->n++;
    if (k->stop_after && k->n == k->stop_after)
        CHECK_EQ_INT(tw_periodic_stop(p), 1);
}

/* tw_arm with TW_ARM_IDLE: the arm of an idle timer,
 * with every rule of the arm without the flag (next tick for a
 * past deadline or delay 0, saturation, TW_ERANGE at the end of time,
 * callable from a callback), the wheel's count kept, and a timer started
 * again after it fired or was cancelled. */
static void restart_self(struct probe *p)
{
    if (p->fires < 3)
        CHECK_EQ_INT(tw_arm(p->wheel, &p->timer, tw_deadline_in(tw_wheel_now(p->wheel), p->value),
                            0, TW_ARM_IDLE),
                     0);
}

static void test_start_idle_timers(void)
{
    static struct tw_wheel w;
    struct probe a, b, c, d, e;
    tw_wheel_init(&w, 100);
    probe_init(&a, &w);
    probe_init(&b, &w);
    probe_init(&c, &w);
    probe_init(&d, &w);
    probe_init(&e, &w);
    CHECK_EQ_INT(tw_arm(NULL, &a.timer, tw_deadline_in(tw_wheel_now(NULL), 1), 0, TW_ARM_IDLE),
                 TW_EINVAL);
    CHECK_EQ_INT(
        tw_arm(&w, (struct tw_timer *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_IDLE),
        TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &a.timer, 1, 0, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_timer *)NULL, 1, 0, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    CHECK_EQ_INT(tw_arm(&w, &a.timer, tw_deadline_in(tw_wheel_now(&w), 0), 0, TW_ARM_IDLE),
                 0);                                             /* next tick */
    CHECK_EQ_INT(tw_arm(&w, &b.timer, 50, 0, TW_ARM_IDLE), 0);   /* past: next tick */
    CHECK_EQ_INT(tw_arm(&w, &c.timer, 5000, 0, TW_ARM_IDLE), 0); /* level 2 */
    CHECK_EQ_INT(tw_arm(&w, &d.timer, tw_deadline_in(tw_wheel_now(&w), UINT64_MAX), 0, TW_ARM_IDLE),
                 0); /* saturates */
    CHECK_EQ_U64(tw_deadline(&a.timer), 101);
    CHECK_EQ_U64(tw_deadline(&b.timer), 101);
    CHECK_EQ_U64(tw_deadline(&c.timer), 5000);
    CHECK_EQ_U64(tw_deadline(&d.timer), UINT64_MAX);
    CHECK_EQ_U64(tw_wheel_pending(&w), 4);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 101);
    /* A started timer is an ordinary pending one: re-armed, cancelled. */
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 4999, 0, 0), 0);
    CHECK_EQ_INT(tw_cancel(&w, &d.timer), 1);
    CHECK_EQ_U64(tw_wheel_pending(&w), 3);
    CHECK_EQ_INT(tw_wheel_advance(&w, 4998), 1);
    CHECK_EQ_U64(b.fired_at, 101);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5000), 2);
    CHECK_EQ_U64(a.fired_at, 4999);
    CHECK_EQ_U64(c.fired_at, 5000);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
    /* Idle again after firing or cancelling: started again. */
    CHECK_EQ_INT(tw_arm(&w, &a.timer, tw_deadline_in(tw_wheel_now(&w), 10), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_arm(&w, &d.timer, tw_deadline_in(tw_wheel_now(&w), 10), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5010), 2);
    CHECK_EQ_INT(a.fires, 2);
    CHECK_EQ_INT(d.fires, 1);
    /* From its own callback (it is idle there): restarts itself. */
    e.action = restart_self;
    e.value = 7;
    CHECK_EQ_INT(tw_arm(&w, &e.timer, tw_deadline_in(tw_wheel_now(&w), 7), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 6000), 3);
    CHECK_EQ_INT(e.fires, 3);
    CHECK_EQ_U64(e.fired_at, 5031);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);

    /* At the end of time no later tick exists: TW_ERANGE, left idle. */
    tw_wheel_init(&w, UINT64_MAX);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_IDLE),
                 TW_ERANGE);
    CHECK_EQ_INT(tw_arm(&w, &a.timer, 5, 0, TW_ARM_IDLE), TW_ERANGE);
    CHECK(!tw_pending(&a.timer));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
}

static void test_start_idle_nodes(void)
{
    static struct tw_wheel w;
    struct tw_node n, m;
    struct probe p;
    tw_wheel_init(&w, 0);
    tw_node_init(&n);
    tw_node_init(&m);
    probe_init(&p, &w);
    CHECK_EQ_INT(tw_arm(NULL, &n, tw_deadline_in(tw_wheel_now(NULL), 1), 0, TW_ARM_IDLE),
                 TW_EINVAL);
    CHECK_EQ_INT(
        tw_arm(&w, (struct tw_node *)NULL, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_IDLE),
        TW_EINVAL);
    CHECK_EQ_INT(tw_arm(NULL, &n, 1, 0, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, (struct tw_node *)NULL, 1, 0, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_wheel_advance(&w, 0), 0); /* not pull-only yet */
    CHECK_EQ_INT(tw_arm(&w, &p.timer, tw_deadline_in(tw_wheel_now(&w), 30), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 20), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_arm(&w, &m, 10, 0, TW_ARM_IDLE), 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 3);
    CHECK_EQ_INT(tw_wheel_advance(&w, 5), TW_EINVAL); /* pull-only now */
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100), &m);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100), &n);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 100), &p.timer.node);
    CHECK(tw_wheel_expire_next_node(&w, 100) == NULL);
    CHECK_EQ_INT(p.fires, 0); /* pulled: no callback */
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 0), 0, TW_ARM_IDLE),
                 0); /* idle after the pull */
    CHECK_EQ_U64(tw_deadline(&n), 101);
    CHECK_EQ_INT(tw_cancel(&w, &n), 1);
    tw_wheel_init(&w, UINT64_MAX);
    CHECK_EQ_INT(tw_arm(&w, &n, tw_deadline_in(tw_wheel_now(&w), 1), 0, TW_ARM_IDLE), TW_ERANGE);
    CHECK(!tw_pending(&n));
}

/* A node start from a callback of tw_wheel_advance is refused, as every
 * node arm is (that advance would take the node for a timer). */
static struct tw_node start_from_callback_node;
static void start_node_from_callback(struct probe *p)
{
    CHECK_EQ_INT(tw_arm(p->wheel, &start_from_callback_node,
                        tw_deadline_in(tw_wheel_now(p->wheel), 5), 0, TW_ARM_IDLE),
                 TW_EBUSY);
    CHECK_EQ_INT(tw_arm(p->wheel, &start_from_callback_node, 500, 0, TW_ARM_IDLE), TW_EBUSY);
}

static void test_start_node_from_callback_refused(void)
{
    static struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_node_init(&start_from_callback_node);
    p.action = start_node_from_callback;
    CHECK_EQ_INT(tw_arm(&w, &p.timer, tw_deadline_in(tw_wheel_now(&w), 3), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 3), 1);
    CHECK(!tw_pending(&start_from_callback_node));
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
}

static void test_periodic_no_drift_catch_up(void)
{
    struct tw_wheel w;
    struct ticker k = {0};
    tw_wheel_init(&w, 3);
    CHECK_EQ_INT(tw_periodic_init(&k.periodic, ticker_fire, &k, TW_MISSED_CATCH_UP), 0);
    CHECK_EQ_INT(tw_periodic_start_in(&w, &k.periodic, tw_wheel_now(&w), 0, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_periodic_start_in(&w, &k.periodic, tw_wheel_now(&w), 10, 7), 0);
    /* Advance in uneven steps, one of which passes several periods. */
    const uint64_t steps[] = {5, 13, 14, 60, 61, 62, 200};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        tw_wheel_advance(&w, steps[i]);
    CHECK_EQ_INT(k.n, 27); /* 13, 20, ..., 195 */
    for (int i = 0; i < k.n && i < 64; i++)
        CHECK_EQ_U64(k.at[i], 13 + 7 * (uint64_t)i);
    CHECK_EQ_U64(tw_deadline(&k.periodic.timer), 202);
    CHECK_EQ_INT(tw_periodic_stop(&k.periodic), 1);
    CHECK_EQ_INT(tw_periodic_stop(&k.periodic), 0);
}

static void test_periodic_skip_missed(void)
{
    struct tw_wheel w;
    struct ticker k = {0};
    tw_wheel_init(&w, 0);
    tw_periodic_init(&k.periodic, ticker_fire, &k, TW_MISSED_SKIP);
    tw_periodic_start_in(&w, &k.periodic, tw_wheel_now(&w), 10, 10);
    CHECK_EQ_INT(tw_wheel_advance(&w, 95), 1); /* fires once, at 10 */
    CHECK_EQ_U64(k.at[0], 10);
    CHECK_EQ_U64(tw_deadline(&k.periodic.timer), 100); /* phase kept */
    CHECK_EQ_INT(tw_wheel_advance(&w, 100), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 110), 1);
    CHECK_EQ_U64(k.at[2], 110);
}

static void test_periodic_stopped_by_its_callback(void)
{
    struct tw_wheel w;
    struct ticker k = {0};
    tw_wheel_init(&w, 0);
    tw_periodic_init(&k.periodic, ticker_fire, &k, TW_MISSED_CATCH_UP);
    k.stop_after = 3;
    tw_periodic_start_in(&w, &k.periodic, tw_wheel_now(&w), 0, 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 100), 3);
    CHECK_EQ_U64(tw_wheel_pending(&w), 0);
}

/* ---- cost, counted rather than timed ------------------------------------------ */

/* Each timer moves at most once per level it starts above level 0, and
 * advancing over idle time moves nothing and fires nothing. */
static void test_moves_bounded_by_levels(void)
{
    enum { N = 20000 };
    struct tw_wheel w;
    struct probe *p = calloc(N, sizeof *p);
    CHECK(p != NULL);
    if (!p)
        return;
    tw_wheel_init(&w, 0);
    uint64_t s = 42;
    for (int i = 0; i < N; i++) {
        probe_init(&p[i], &w);
        s = s * 6364136223846793005u + 1442695040888963407u;
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), (s >> 33) % (UINT64_C(1) << 20) + 1);
    }
    int64_t fired = 0;
    while (tw_wheel_pending(&w))
        fired += tw_wheel_advance(&w, tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(fired, N);
    /* Delays < 2^20 start at level <= 3: at most 3 moves each. */
    CHECK(tw_wheel_moves(&w) <= 3 * (uint64_t)N);

    /* One idle hour at 1 ms ticks with timers a week away: no moves. */
    tw_wheel_init(&w, 0);
    for (int i = 0; i < N; i++) {
        probe_init(&p[i], &w);
        tw_arm_in(&w, &p[i].timer, tw_wheel_now(&w), UINT64_C(604800000) - (uint64_t)i);
    }
    CHECK_EQ_INT(tw_wheel_advance(&w, 3600000), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    tw_wheel_destroy(&w);
    free(p);
}

/* The moves of one exact timer, not re-armed: it is placed at level L0, the
 * level of the highest bit in which its deadline d and now differ; each
 * move happens when now reaches the first tick of its slot (d with the bits
 * below its level cleared) and puts it at the level of d's highest nonzero
 * 6-bit digit below; it fires from the slot whose tick is d. So it moves
 * once for each nonzero digit of d below level L0. */
static unsigned moves_of(uint64_t now, uint64_t d)
{
    uint64_t x = now ^ d;
    unsigned l0 = x ? (unsigned)(63 - __builtin_clzll(x)) / TW_WHEEL_SLOT_BITS : 0, n = 0;
    for (unsigned l = 0; l < l0; l++)
        n += (d >> (l * TW_WHEEL_SLOT_BITS) & (TW_WHEEL_SLOTS - 1)) != 0;
    return n;
}

/* The bound wheel.h states: a delay below 64^k ticks moves at most k times
 * (below 2^18: three, not two). A deadline past a boundary of a level at or
 * above k starts at that level however near it is, and only the digits
 * below level k can be nonzero then (d - that boundary < the delay), so it
 * moves once from there and once per nonzero digit below k. Checked per
 * timer with tw_wheel_moves over random times and delays (one in eight
 * times just below a boundary of level 2 to 6, where the carries are), the
 * count equal to moves_of, and the bound reached; and the report's example:
 * time 71188, delay 255883 (deadline 327071 = 0x4fd9f, past 2^18) moves
 * from level 3 to 2, 1 and 0. */
static void test_moves_per_timer_bound(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 71188);
    probe_init(&p, &w);
    CHECK_EQ_INT(tw_arm_in(&w, &p.timer, tw_wheel_now(&w), 255883), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 71188 + 255883), 1);
    CHECK_EQ_U64(tw_wheel_moves(&w), 3);
    CHECK_EQ_U64(moves_of(71188, 71188 + 255883), 3);

    enum { N = 200000 };
    unsigned most[4] = {0}; /* most moves seen with a delay below 64^k */
    uint64_t s = 7, now = 0;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        uint64_t r = s >> 11;
        if (r % 8 == 0) { /* just below a boundary of level 2..6 */
            unsigned b = (unsigned)(2 + r / 8 % 5) * TW_WHEEL_SLOT_BITS;
            uint64_t next = (now >> b) + 2; /* the result is past now */
            now = (next << b) - 1 - (r >> 20) % 64;
        } else {
            now += (r >> 20) % (UINT64_C(1) << 20);
        }
        tw_wheel_advance(&w, now); /* nothing pending: only moves time */
        s = s * 6364136223846793005u + 1442695040888963407u;
        unsigned k = 1 + (unsigned)(s >> 62) % 3; /* delays below 64^1..64^3 */
        uint64_t delay = 1 + (s >> 11) % ((UINT64_C(1) << (k * TW_WHEEL_SLOT_BITS)) - 1);
        uint64_t before = tw_wheel_moves(&w);
        tw_arm_in(&w, &p.timer, tw_wheel_now(&w), delay);
        CHECK_EQ_INT(tw_wheel_advance(&w, now + delay), 1);
        unsigned m = (unsigned)(tw_wheel_moves(&w) - before);
        if (m != moves_of(now, now + delay) || m > k) {
            CHECK_(0, "now %" PRIu64 " delay %" PRIu64 ": %u moves, predicted %u, bound %u", now,
                   delay, m, moves_of(now, now + delay), k);
            break;
        }
        if (m > most[k])
            most[k] = m;
        now += delay;
    }
    CHECK_EQ_INT(most[1], 1); /* the bound is reached at each k */
    CHECK_EQ_INT(most[2], 2);
    CHECK_EQ_INT(most[3], 3);
}

/* A heartbeat (a lazy re-arm to a later deadline) of a timer whose slot is
 * not near stays one store: the timer stays in its slot (the poller still
 * stops there) and nothing moves. One whose slot is near (the next level-1
 * slot, or any at level 0) is relocated at once. A slot's walk then moves
 * the pushed-back timer in the ticks before the slot comes due, not when it
 * does. */
static void test_heartbeat_stays_one_store(void)
{
    struct tw_wheel w;
    struct probe p;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm(&w, &p.timer, 200, 0, 0); /* level-1 slot of ticks 192-255: not near */
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 5000, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 192);
    CHECK_EQ_U64(tw_deadline(&p.timer), 5000);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);

    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm(&w, &p.timer, 100, 0, 0); /* the next level-1 slot (64-127): near */
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 5000, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 4096); /* the level-2 slot of 5000 */
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm(&w, &p.timer, 10, 0, 0); /* level 0 */
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 5000, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 4096);

    /* Level 2: 30000 waits in the slot of 28672-32767, walked in the 1024
     * ticks before it comes due; pushed back to 50000, it is moved there
     * (the slot of 49152) by then, and fires exactly. */
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    tw_arm(&w, &p.timer, 30000, 0, 0);
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 50000, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 28672);
    CHECK_EQ_INT(tw_wheel_advance(&w, 28672 - 4097), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    uint64_t moved_at = 0;
    for (uint64_t t = 28672 - 4096; t < 28672 && !moved_at; t++) {
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
        if (tw_wheel_moves(&w))
            moved_at = t;
    }
    CHECK(moved_at != 0); /* before its old slot came due */
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 49152);
    CHECK_EQ_INT(tw_wheel_advance(&w, 49999), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 50000), 1);
    CHECK_EQ_U64(p.fired_at, 50000);
}

/* A level-2 slot X may be walked twice. A lazy re-arm's step in the first
 * half of the slot before X opens a first pass: it moves the timers pushed
 * back past X and puts back the timers due in X whose level-1 slot has not
 * passed yet. The second pass, over X's last 1,024 ticks, walks those again
 * and takes down, ahead of X, the ones whose level-1 slot has passed by
 * then. Timers due later in X still go down when X comes due. Without a
 * re-arm in that half, only the second pass walks X. Each fires exactly. */
enum { REARMS_A_STEP = 8 }; /* one lazy push in eight takes a step */
static void test_walk_level2_two_passes(void)
{
    enum { X = 7 * 4096, FIRST = X - 4096, SECOND = X - 1024 };
    struct tw_wheel w;
    struct probe p, q, r;
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    probe_init(&q, &w);
    probe_init(&r, &w);
    tw_arm(&w, &p.timer, X + 100, 0, 0);
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 60000, 0, 0), 0); /* pushed back past X */
    tw_arm(&w, &q.timer, X + 30 * 64 + 3, 0, 0); /* level-1 digit 30 */
    tw_arm(&w, &r.timer, X + 60 * 64 + 1, 0, 0); /* level-1 digit 60 */
    CHECK_EQ_INT(tw_wheel_advance(&w, FIRST + 10), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0); /* no first pass without a re-arm */
    for (unsigned k = 1; k <= REARMS_A_STEP; k++) /* a step: the first pass opens */
        CHECK_EQ_INT(tw_arm(&w, &p.timer, 60000 + k, 0, 0), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1); /* p moved, q and r put back */
    for (uint64_t t = FIRST + 11; t < SECOND; t++)
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    for (uint64_t t = SECOND; t < X; t++)
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2); /* q went down ahead of X, r back */
    CHECK_EQ_INT(tw_wheel_advance(&w, X), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 3); /* r goes down as X comes due */
    CHECK_EQ_INT(tw_wheel_advance(&w, 70000), 3);
    CHECK_EQ_U64(q.fired_at, X + 30 * 64 + 3);
    CHECK_EQ_U64(r.fired_at, X + 60 * 64 + 1);
    CHECK_EQ_U64(p.fired_at, 60000 + REARMS_A_STEP);

    /* the same without the re-arms: only the second pass walks X, taking
     * q down */
    tw_wheel_init(&w, 0);
    probe_init(&p, &w);
    probe_init(&q, &w);
    tw_arm(&w, &p.timer, X + 100, 0, 0);
    CHECK_EQ_INT(tw_arm(&w, &p.timer, 60000, 0, 0), 0);
    tw_arm(&w, &q.timer, X + 30 * 64 + 3, 0, 0);
    for (uint64_t t = 1; t < SECOND; t++)
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    for (uint64_t t = SECOND; t < X; t++)
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 2); /* p moved, q down ahead of X */
    CHECK_EQ_INT(tw_wheel_advance(&w, 70000), 2);
    CHECK_EQ_U64(q.fired_at, X + 30 * 64 + 3);
}

/* tw_wheel_next_work: the next expiry while no lazy re-arm pushed a timer
 * back (an idle poller keeps sleeping long); after pushes, the walks'
 * steps too, so that a poller that sleeps until it gets the walks' moves
 * spread over its wake-ups, none over the bound, none all at once. */
static void test_next_work(void)
{
    enum { N = 20000 };
    struct tw_wheel w;
    tw_wheel_init(&w, 0);
    CHECK_EQ_U64(tw_wheel_next_work(NULL), TW_NEVER);
    CHECK_EQ_U64(tw_wheel_next_work(&w), TW_NEVER);
    /* exact timers only: the next expiry, in the slot before theirs too
     * (where a push could open a first pass) */
    struct probe x;
    probe_init(&x, &w);
    tw_arm(&w, &x.timer, 30000, 0, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 25000), 0);
    CHECK_EQ_U64(tw_wheel_next_work(&w), tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(tw_wheel_advance(&w, 30000), 1);
    tw_wheel_init(&w, 0);
    struct probe *p = calloc(N, sizeof *p);
    CHECK(p != NULL);
    if (!p)
        return;
    for (size_t i = 0; i < N; i++) {
        probe_init(&p[i], &w);
        tw_arm(&w, &p[i].timer, 30000, 0, 0);
    }
    CHECK_EQ_U64(tw_wheel_next_work(&w), tw_wheel_next_expiry(&w));
    for (size_t i = 0; i < N; i++) /* pushed back: the slot of 28672 is walked */
        tw_arm(&w, &p[i].timer, 60000 + i % 1000, 0, 0);
    uint64_t wakes = 0, worst = 0;
    while (tw_wheel_now(&w) < 30000) {
        uint64_t from = tw_wheel_now(&w), next = tw_wheel_next_work(&w);
        CHECK(next > from && next <= from + TW_WHEEL_SLOTS);
        uint64_t before = tw_wheel_moves(&w);
        CHECK_EQ_INT(tw_wheel_advance(&w, next), 0);
        uint64_t moved = tw_wheel_moves(&w) - before;
        CHECK(moved <= tw_wheel_lazy_moves_max(N, next - from));
        worst = moved > worst ? moved : worst;
        if (++wakes > 30000)
            break;
    }
    CHECK_EQ_U64(tw_wheel_moves(&w), N); /* every pushed timer moved once */
    CHECK(worst < N / 50);               /* a few dozen at a time */
    int64_t fired = 0;
    while (tw_wheel_pending(&w))
        fired += tw_wheel_advance(&w, tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(fired, N);
    /* once time has left the level-3 block of the last push, no walk can
     * begin: back to the next expiry */
    struct probe late;
    probe_init(&late, &w);
    tw_arm(&w, &late.timer, 300000, 0, 0);
    CHECK(tw_wheel_next_work(&w) < tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(tw_wheel_advance(&w, 270000), 0);
    CHECK_EQ_U64(tw_wheel_next_work(&w), tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(tw_wheel_advance(&w, 300000), 1);
    for (size_t i = 0; i < N; i++)
        if (p[i].fired_at != 60000 + i % 1000) {
            CHECK_EQ_U64(p[i].fired_at, 60000 + i % 1000);
            break;
        }
    free(p);
}

/* A walk of a level >= 3 slot takes the timers due in it too: those due
 * past its first level-2 slot go down a level there and then (staged into
 * the level-2 slots, all past in the window), and when the slot comes due
 * they are in place, so nothing of them moves in that advance and each is
 * read once, not twice. Staged timers still fire exactly when re-armed
 * eagerly to an earlier tick of the slot (then they relocate), cancelled,
 * or detached by destroy. */
static void test_walk_stages_due_timers(void)
{
    enum { T = 1 << 18, OPEN = T - 4096, W2 = 4096 }; /* level-3 slot 1 */
    struct tw_wheel w;
    struct probe a, b, c, d, pusher;
    tw_wheel_init(&w, 0);
    struct probe *all[] = {&a, &b, &c, &d, &pusher};
    for (size_t i = 0; i < 5; i++)
        probe_init(all[i], &w);
    tw_arm(&w, &a.timer, T + 5 * W2 + 7, 0, 0);  /* level-2 digit 5 of the slot */
    tw_arm(&w, &b.timer, T + 20 * W2 + 3, 0, 0); /* digit 20 */
    tw_arm(&w, &c.timer, T + 30 * W2, 0, 0);     /* digit 30 */
    tw_arm(&w, &d.timer, T + 10, 0, 0);          /* digit 0: stays in the slot */
    tw_arm(&w, &pusher.timer, T + 100, 0, 0);    /* pushed back: the slot is walked */
    CHECK_EQ_INT(tw_arm(&w, &pusher.timer, 2 * T + 5, 0, 0), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, OPEN - 1), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w), 0);
    for (uint64_t t = OPEN; t < T; t++)
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
    /* the pusher moved, a, b and c went down: all before the slot came due */
    CHECK_EQ_U64(tw_wheel_moves(&w), 4);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), T);
    /* b re-armed eagerly to digit 3 of the same slot: relocated, never left
     * to come due at digit 20 */
    CHECK_EQ_INT(tw_arm(&w, &b.timer, T + 3 * W2, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_cancel(&w, &c.timer), 1);
    CHECK(!tw_pending(&c.timer));
    uint64_t before = tw_wheel_moves(&w);
    CHECK_EQ_INT(tw_wheel_advance(&w, T), 0);
    CHECK_EQ_U64(tw_wheel_moves(&w) - before, 2); /* d and b (armed into the slot) go down */
    CHECK_EQ_INT(tw_wheel_advance(&w, 3 * T), 4);
    CHECK_EQ_U64(d.fired_at, T + 10);
    CHECK_EQ_U64(b.fired_at, T + 3 * W2);
    CHECK_EQ_U64(a.fired_at, T + 5 * W2 + 7);
    CHECK_EQ_U64(pusher.fired_at, 2 * T + 5);
    CHECK_EQ_INT(a.fires + b.fires + c.fires + d.fires + pusher.fires, 4);

    /* Every staged timer cancelled: the slot comes due empty, nothing
     * fires; staged timers detached by destroy are idle. */
    tw_wheel_init(&w, 0);
    for (size_t i = 0; i < 5; i++)
        probe_init(all[i], &w);
    tw_arm(&w, &a.timer, T + 5 * W2, 0, 0);
    tw_arm(&w, &b.timer, T + 6 * W2, 0, 0);
    tw_arm(&w, &pusher.timer, T + 100, 0, 0);
    tw_arm(&w, &pusher.timer, 2 * T + 5, 0, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, T - 1), 0);
    CHECK_EQ_INT(tw_cancel(&w, &a.timer), 1);
    CHECK_EQ_INT(tw_cancel(&w, &b.timer), 1);
    CHECK_EQ_INT(tw_wheel_advance(&w, 2 * T), 0);
    CHECK_EQ_U64(tw_wheel_pending(&w), 1);
    CHECK_EQ_U64(tw_wheel_next_expiry(&w), 2 * T + 5);
    tw_wheel_init(&w, 0);
    for (size_t i = 0; i < 5; i++)
        probe_init(all[i], &w);
    tw_arm(&w, &a.timer, T + 5 * W2, 0, 0);
    tw_arm(&w, &pusher.timer, T + 100, 0, 0);
    tw_arm(&w, &pusher.timer, 2 * T + 5, 0, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, T - 1), 0);
    CHECK_EQ_INT(tw_wheel_destroy(&w), 2);
    CHECK(!tw_pending(&a.timer));
    CHECK(!tw_pending(&pusher.timer));
}

/* W2's shape, the worst case of the lazy re-arm: N timers armed together
 * 30000 ticks ahead, each re-armed 30000 ticks ahead about every 300 ticks
 * (so none fires), advanced tick by tick over two timeouts. Their deadlines
 * leave their slots behind again and again; no advance may move more than
 * tw_wheel_lazy_moves_max(N, 1) of them (no timer here goes down a level
 * toward its own deadline: each is re-armed long before), where moving them
 * when their shared slot came due took all N in one advance. No re-arm
 * moves more than TW_WHEEL_REARM_MOVES_MAX, and the re-arms' steps take
 * most of the walks' moves off the ticks (each eighth re-arm while a walk
 * has timers left: eight a re-arm, ahead of any walk's pace here). */
static void test_lazy_rearm_moves_spread(void)
{
    enum { N = 20000, TIMEOUT = 30000, TICKS = 2 * TIMEOUT + 1000 };
    struct tw_wheel w;
    struct probe *p = calloc(N, sizeof *p);
    CHECK(p != NULL);
    if (!p)
        return;
    tw_wheel_init(&w, 0);
    for (int i = 0; i < N; i++) {
        probe_init(&p[i], &w);
        tw_arm(&w, &p[i].timer, TIMEOUT, 0, 0);
        p[i].value = TIMEOUT; /* its deadline */
    }
    uint64_t s = 28, most = 0, bound = tw_wheel_lazy_moves_max(N, 1);
    uint64_t rearm_moves = 0, rearm_most = 0;
    for (uint64_t t = 1; t <= TICKS; t++) {
        uint64_t before = tw_wheel_moves(&w);
        CHECK_EQ_INT(tw_wheel_advance(&w, t), 0);
        uint64_t moved = tw_wheel_moves(&w) - before;
        most = moved > most ? moved : most;
        for (int k = 0; k < N / 300; k++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            struct probe *x = &p[(s >> 33) % N];
            before = tw_wheel_moves(&w);
            tw_arm(&w, &x->timer, t + TIMEOUT, 0, 0);
            moved = tw_wheel_moves(&w) - before;
            rearm_moves += moved;
            rearm_most = moved > rearm_most ? moved : rearm_most;
            x->value = t + TIMEOUT;
        }
    }
    printf("  most moves in one advance %llu (bound %llu), in one re-arm %llu (bound %d), "
           "%.2f moves a timer, %.0f%% of them by re-arms\n",
           (unsigned long long)most, (unsigned long long)bound, (unsigned long long)rearm_most,
           TW_WHEEL_REARM_MOVES_MAX, (double)tw_wheel_moves(&w) / N,
           100.0 * (double)rearm_moves / (double)tw_wheel_moves(&w));
    CHECK(most <= bound);
    CHECK(most < N / 4);
    CHECK(rearm_most <= TW_WHEEL_REARM_MOVES_MAX);
    CHECK(rearm_moves * 2 > tw_wheel_moves(&w)); /* most of them off the ticks */
    CHECK(tw_wheel_moves(&w) >= N); /* the moves were made, spread */
    int64_t fired = 0;
    while (tw_wheel_pending(&w))
        fired += tw_wheel_advance(&w, tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(fired, N);
    for (int i = 0; i < N; i++)
        if (p[i].fires != 1 || p[i].fired_at != p[i].value) { /* exact, once */
            CHECK_EQ_INT(p[i].fires, 1);
            CHECK_EQ_U64(p[i].fired_at, p[i].value);
            break;
        }
    tw_wheel_destroy(&w);
    free(p);
}

/* A re-arm from a callback of tw_wheel_advance takes no step of a walk
 * (the advance running walks at its pace); the same re-arms outside it do.
 * Group a (2,000 timers at 30000, pushed back once) leaves the level-2 slot
 * of 28672 to be walked; group b (1,024 timers at 60000, in a slot not
 * near) is pushed back from a callback at 24629 (the callback's steps open
 * no first pass), then again from outside (their steps open it and take
 * from it). */
enum { STEP_A = 2000, STEP_B = 1024 };
static struct probe *step_b;
static uint64_t step_moves_in_callback;

static void push_group_b(struct probe *self)
{
    for (size_t i = 0; i < STEP_B; i++) {
        uint64_t before = tw_wheel_moves(self->wheel);
        CHECK_EQ_INT(tw_arm(self->wheel, &step_b[i].timer, 61000 + i, 0, 0), 0);
        step_moves_in_callback += tw_wheel_moves(self->wheel) - before;
    }
}

static void test_rearm_steps_not_from_callbacks(void)
{
    struct tw_wheel w;
    struct probe *a = calloc(STEP_A, sizeof *a), *b = calloc(STEP_B, sizeof *b), trigger;
    CHECK(a != NULL && b != NULL);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    tw_wheel_init(&w, 0);
    for (size_t i = 0; i < STEP_A; i++) {
        probe_init(&a[i], &w);
        tw_arm(&w, &a[i].timer, 30000, 0, 0);
    }
    for (size_t i = 0; i < STEP_B; i++) {
        probe_init(&b[i], &w);
        tw_arm(&w, &b[i].timer, 60000, 0, 0);
    }
    CHECK_EQ_INT(tw_wheel_advance(&w, 1), 0);
    for (size_t i = 0; i < STEP_A; i++) /* lazy pushes: the slot of 28672 is walked */
        tw_arm(&w, &a[i].timer, 50000, 0, 0);
    probe_init(&trigger, &w);
    trigger.action = push_group_b;
    step_b = b;
    step_moves_in_callback = 0;
    tw_arm(&w, &trigger.timer, 24629, 0, 0);
    for (uint64_t t = 2; t <= 24629; t++)
        tw_wheel_advance(&w, t);
    CHECK_EQ_INT(trigger.fires, 1);
    CHECK_EQ_U64(step_moves_in_callback, 0);
    uint64_t outside = 0; /* the same pushes from outside, the walk still running */
    for (size_t i = 0; i < STEP_B; i++) {
        uint64_t before = tw_wheel_moves(&w);
        CHECK_EQ_INT(tw_arm(&w, &b[i].timer, 62000 + i, 0, 0), 0);
        outside += tw_wheel_moves(&w) - before;
    }
    CHECK(outside > 0);
    int64_t fired = 0; /* and everything still fires exactly */
    while (tw_wheel_pending(&w))
        fired += tw_wheel_advance(&w, tw_wheel_next_expiry(&w));
    CHECK_EQ_INT(fired, STEP_A + STEP_B);
    for (size_t i = 0; i < STEP_A; i++)
        if (a[i].fired_at != 50000) {
            CHECK_EQ_U64(a[i].fired_at, 50000);
            break;
        }
    for (size_t i = 0; i < STEP_B; i++)
        if (b[i].fired_at != 62000 + i) {
            CHECK_EQ_U64(b[i].fired_at, 62000 + i);
            break;
        }
    free(a);
    free(b);
}

int main(void)
{
    RUN(test_sizes);
    RUN(test_bad_arguments);
    RUN(test_error_strings);
    RUN(test_never_early_tick_exact);
    RUN(test_deadline_order_across_levels);
    RUN(test_delay_zero_is_next_tick);
    RUN(test_saturating_deadline);
    RUN(test_high_bit_carries);
    RUN(test_rearm_later_is_lazy_and_exact);
    RUN(test_rearm_earlier_is_immediate);
    RUN(test_cancel);
    RUN(test_advance_backwards_is_noop);
    RUN(test_destroy_with_armed_timers);
    RUN(test_callback_rearms_itself);
    RUN(test_cancel_the_firing_timer);
    RUN(test_cancel_neighbour_in_same_slot);
    RUN(test_rearm_neighbour_in_same_slot);
    RUN(test_callback_arms_timer_due_in_same_advance);
    RUN(test_nested_advance_refused);
    RUN(test_expire_next_pulls_in_order);
    RUN(test_timers_left_ready_by_a_pull);
    RUN(test_bare_nodes);
    RUN(test_start_idle_timers);
    RUN(test_start_idle_nodes);
    RUN(test_start_node_from_callback_refused);
    RUN(test_periodic_no_drift_catch_up);
    RUN(test_periodic_skip_missed);
    RUN(test_periodic_stopped_by_its_callback);
    RUN(test_moves_bounded_by_levels);
    RUN(test_moves_per_timer_bound);
    RUN(test_heartbeat_stays_one_store);
    RUN(test_lazy_rearm_moves_spread);
    RUN(test_rearm_steps_not_from_callbacks);
    RUN(test_walk_stages_due_timers);
    RUN(test_walk_level2_two_passes);
    RUN(test_next_work);
    return test_summary();
}
