/* SPDX-License-Identifier: MIT */
/* The wheel built as in a debug build (TWHEEL_DEBUG, see twheel/wheel.h):
 * arming or cancelling a timer or node that is pending on another wheel is
 * refused with TW_EINVAL and leaves both wheels as they were. This file
 * compiles the sources of src/core/ itself with TWHEEL_DEBUG, so the check
 * runs in every test stage whatever the build type of the library. */
#define TWHEEL_DEBUG 1
/* The core's sources, compiled here (src/ is on this test's include path). */
#include "core/advance.c"
#include "core/arm.c"
#include "core/periodic.c"
#include "core/wheel.c"

#include "test.h"

static int fired;

static void on_fire(struct tw_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    fired++;
}

static void test_debug_layout(void)
{
    CHECK_EQ_INT(sizeof(struct tw_node), 3 * sizeof(void *) + TW_NODE_DEBUG_BYTES);
    CHECK(TW_NODE_DEBUG_BYTES == sizeof(void *));
}

static void test_timer_on_two_wheels(void)
{
    static struct tw_wheel a, b;
    struct tw_timer t, u;
    tw_wheel_init(&a, 0);
    tw_wheel_init(&b, 100);
    tw_timer_init(&t, on_fire, NULL);
    tw_timer_init(&u, on_fire, NULL);
    CHECK_EQ_INT(tw_arm_in(&a, &t, tw_wheel_now(&a), 10), 0);
    CHECK_EQ_INT(tw_arm_in(&a, &u, tw_wheel_now(&a), 20), 0); /* t is not alone in its wheel */
    /* Pending on a: every arm and cancel through b is refused. */
    CHECK_EQ_INT(tw_arm_in(&b, &t, tw_wheel_now(&b), 5), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&b, &t, 500, 0, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_arm_in(&b, &t, 100, 5), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&b, &t, tw_deadline_in(tw_wheel_now(&b), 5), 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&b, &t, 500, 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&b, &t), TW_EINVAL);
    CHECK_EQ_U64(tw_wheel_pending(&a), 2);
    CHECK_EQ_U64(tw_wheel_pending(&b), 0);
    CHECK_EQ_U64(tw_deadline(&t), 10);
    /* Re-arming on its own wheel is fine. */
    CHECK_EQ_INT(tw_arm_in(&a, &t, tw_wheel_now(&a), 15), 0);
    fired = 0;
    CHECK_EQ_INT(tw_wheel_advance(&a, 15), 1);
    /* Idle again: it may go to b. */
    CHECK_EQ_INT(tw_arm_in(&b, &t, tw_wheel_now(&b), 5), 0);
    CHECK_EQ_U64(tw_wheel_pending(&b), 1);
    CHECK_EQ_INT(tw_arm_in(&a, &t, tw_wheel_now(&a), 5), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&a, &t), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&b, &t), 1);
    CHECK_EQ_INT(tw_arm_in(&a, &t, tw_wheel_now(&a), 5), 0);
    CHECK_EQ_INT(tw_wheel_advance(&a, 100), 2);
    CHECK_EQ_U64(tw_wheel_pending(&a), 0);
    CHECK_EQ_U64(tw_wheel_pending(&b), 0);
}

static void test_node_on_two_wheels(void)
{
    static struct tw_wheel a, b;
    struct tw_node n;
    tw_wheel_init(&a, 0);
    tw_wheel_init(&b, 0);
    tw_node_init(&n);
    CHECK_EQ_INT(tw_arm_in(&a, &n, tw_wheel_now(&a), 7), 0);
    CHECK_EQ_INT(tw_arm_in(&b, &n, tw_wheel_now(&b), 7), TW_EINVAL);
    CHECK_EQ_INT(tw_arm_in(&b, &n, 0, 7), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&b, &n), TW_EINVAL);
    CHECK_EQ_U64(tw_wheel_pending(&a), 1);
    CHECK_EQ_U64(tw_wheel_pending(&b), 0);
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&a, 7), &n);
    CHECK_EQ_INT(tw_arm_in(&b, &n, tw_wheel_now(&b), 7), 0); /* idle after the pull */
    CHECK_EQ_INT(tw_cancel(&b, &n), 1);
    /* The eager arms: an idle node armed eagerly belongs to its wheel, and
     * neither eager arm goes through another (a re-arm within its slot is
     * one store: still refused). */
    CHECK_EQ_INT(tw_arm(&a, &n, tw_deadline_in(tw_wheel_now(&a), 100), 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_arm(&b, &n, tw_deadline_in(tw_wheel_now(&b), 100), 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&b, &n, 101, 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&b, &n), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&a, &n, 101, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_U64(tw_deadline(&n), 101);
    CHECK_EQ_U64(tw_wheel_pending(&a), 1);
    CHECK_EQ_U64(tw_wheel_pending(&b), 0);
    CHECK_EQ_INT(tw_cancel(&a, &n), 1);
}

/* Arms with TW_ARM_IDLE take the caller's word that the timer or node is idle:
 * debug builds check it (TW_EBUSY for a pending one, on its own wheel or
 * another; TW_EINVAL for an uninitialised timer) and change nothing. */
static void test_start_checks(void)
{
    static struct tw_wheel a, b;
    struct tw_timer t, raw;
    struct tw_node n;
    tw_wheel_init(&a, 0);
    tw_wheel_init(&b, 0);
    tw_timer_init(&t, on_fire, NULL);
    tw_node_init(&n);
    memset(&raw, 0, sizeof raw); /* never initialised: no callback */
    CHECK_EQ_INT(tw_arm(&a, &raw, tw_deadline_in(tw_wheel_now(&a), 5), 0, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&a, &raw, 5, 0, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&a, &t, tw_deadline_in(tw_wheel_now(&a), 10), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_arm(&a, &t, tw_deadline_in(tw_wheel_now(&a), 20), 0, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&a, &t, 20, 0, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&b, &t, tw_deadline_in(tw_wheel_now(&b), 20), 0, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&a, &n, tw_deadline_in(tw_wheel_now(&a), 10), 0, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_arm(&a, &n, tw_deadline_in(tw_wheel_now(&a), 30), 0, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&b, &n, 30, 0, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_U64(tw_wheel_pending(&a), 2);
    CHECK_EQ_U64(tw_wheel_pending(&b), 0);
    CHECK_EQ_U64(tw_deadline(&t), 10);
    CHECK_EQ_U64(tw_deadline(&n), 10);
    /* Started on a, it belongs to a: b may not cancel it. */
    CHECK_EQ_INT(tw_cancel(&b, &t), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&a, &t), 1);
    CHECK_EQ_INT(tw_cancel(&a, &n), 1);
    CHECK_EQ_INT(tw_arm(&b, &t, tw_deadline_in(tw_wheel_now(&b), 1), 0, TW_ARM_IDLE),
                 0); /* idle: any wheel */
    CHECK_EQ_INT(tw_cancel(&b, &t), 1);

    /* The same for the forms with slack. */
    CHECK_EQ_INT(tw_arm(&a, &raw, tw_deadline_in(tw_wheel_now(&a), 5), 2, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&a, &raw, 5, 2, TW_ARM_IDLE), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&a, &t, tw_deadline_in(tw_wheel_now(&a), 100), 28, TW_ARM_IDLE), 0);
    CHECK_EQ_U64(tw_deadline(&t), 128);
    CHECK_EQ_INT(tw_arm(&a, &t, tw_deadline_in(tw_wheel_now(&a), 20), 5, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&a, &t, 20, 5, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&b, &t, 20, 5, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&a, &n, tw_deadline_in(tw_wheel_now(&a), 100), 28, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_arm(&a, &n, tw_deadline_in(tw_wheel_now(&a), 30), 2, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_INT(tw_arm(&b, &n, 30, 2, TW_ARM_IDLE), TW_EBUSY);
    CHECK_EQ_U64(tw_wheel_pending(&a), 2);
    CHECK_EQ_U64(tw_wheel_pending(&b), 0);
    CHECK_EQ_U64(tw_deadline(&t), 128);
    CHECK_EQ_U64(tw_deadline(&n), 128);
    CHECK_EQ_INT(tw_cancel(&b, &t), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&b, &n), TW_EINVAL);
    CHECK_EQ_INT(tw_cancel(&a, &t), 1);
    CHECK_EQ_INT(tw_cancel(&a, &n), 1);
    CHECK_EQ_U64(tw_wheel_pending(&a), 0);
}

/* A periodic timer moved from one wheel to another is stopped on the first. */
static void on_periodic(struct tw_periodic *p, void *arg)
{
    (void)p;
    (void)arg;
}

static void test_periodic_changes_wheel(void)
{
    static struct tw_wheel a, b;
    struct tw_periodic p;
    tw_wheel_init(&a, 0);
    tw_wheel_init(&b, 0);
    tw_periodic_init(&p, on_periodic, NULL, TW_MISSED_CATCH_UP);
    CHECK_EQ_INT(tw_periodic_start_in(&a, &p, tw_wheel_now(&a), 5, 5), 0);
    CHECK_EQ_INT(tw_periodic_start_in(&b, &p, tw_wheel_now(&b), 5, 5), 0);
    CHECK_EQ_U64(tw_wheel_pending(&a), 0);
    CHECK_EQ_U64(tw_wheel_pending(&b), 1);
    CHECK_EQ_INT(tw_periodic_stop(&p), 1);
}

int main(void)
{
    RUN(test_debug_layout);
    RUN(test_timer_on_two_wheels);
    RUN(test_node_on_two_wheels);
    RUN(test_start_checks);
    RUN(test_periodic_changes_wheel);
    return test_summary();
}
