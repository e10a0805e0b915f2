/* SPDX-License-Identifier: MIT */
/* The public headers from C++: every one compiles (twheel.h includes them
 * all), and the calls that C gets as _Generic macros (tw_arm, tw_arm_in,
 * tw_cancel, tw_pending, tw_deadline) are overloads that arm, cancel and
 * read a timer and a bare node as the C calls do. Built only when CMake
 * finds a C++ compiler. */
#include "test.h"
#include "twheel.h"

static int fired;

static void on_fire(struct tw_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    fired++;
}

static void test_timer(void)
{
    struct tw_wheel w;
    struct tw_timer t;
    CHECK_EQ_INT(tw_wheel_init(&w, 100), 0);
    CHECK_EQ_INT(tw_timer_init(&t, on_fire, nullptr), 0);
    CHECK_EQ_INT(tw_arm(&w, &t, 110, 0, 0), 0);
    CHECK(tw_pending(&t));
    CHECK_EQ_U64(tw_deadline(&t), 110);
    const struct tw_timer *ct = &t;
    CHECK(tw_pending(ct));
    CHECK_EQ_INT(tw_arm_in(&w, &t, 100, 5), 0); /* earlier: relocated */
    CHECK_EQ_U64(tw_deadline(&t), 105);
    CHECK_EQ_INT(tw_arm(&w, &t, 120, 0, TW_ARM_EAGER | 0x80u), TW_EINVAL);
    CHECK_EQ_INT(tw_wheel_advance(&w, 104), 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, 105), 1);
    CHECK_EQ_INT(fired, 1);
    CHECK(!tw_pending(&t));
    CHECK_EQ_INT(tw_arm(&w, &t, 200, 10, TW_ARM_IDLE), 0);
    CHECK_EQ_INT(tw_cancel(&w, &t), 1);
    CHECK_EQ_INT(tw_cancel(&w, &t), 0);
    CHECK_EQ_U64(tw_deadline(&t), TW_NEVER);
    CHECK_EQ_INT(tw_cancel(&w, static_cast<struct tw_timer *>(nullptr)), TW_EINVAL);
    CHECK_EQ_U64(tw_wheel_timeout(&w, tw_wheel_now(&w)), TW_NEVER);
}

static void test_node(void)
{
    struct tw_wheel w;
    struct tw_node n;
    CHECK_EQ_INT(tw_wheel_init(&w, 0), 0);
    CHECK_EQ_INT(tw_node_init(&n), 0);
    CHECK_EQ_INT(tw_arm_in(&w, &n, 0, 7), 0);
    CHECK(tw_pending(&n));
    CHECK_EQ_U64(tw_deadline(&n), 7);
    CHECK_EQ_U64(tw_wheel_timeout(&w, 3), 4);
    CHECK_EQ_INT(tw_wheel_advance(&w, 10), TW_EINVAL); /* pull-only now */
    CHECK_EQ_PTR(tw_wheel_expire_next_node(&w, 10), &n);
    CHECK(!tw_pending(&n));
    CHECK_EQ_INT(tw_arm(&w, &n, 20, 0, TW_ARM_EAGER), 0);
    CHECK_EQ_INT(tw_cancel(&w, &n), 1);
    CHECK(!tw_pending(static_cast<const struct tw_node *>(nullptr)));
}

int main(void)
{
    RUN(test_timer);
    RUN(test_node);
    return test_summary();
}
