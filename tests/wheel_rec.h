/* SPDX-License-Identifier: MIT */
/* A timer that records its fires: how many, and the wheel's time of the last.
 * Include it after the wheel's header (twheel.h, or the core's sources). */
#ifndef TWHEEL_TESTS_WHEEL_REC_H
#define TWHEEL_TESTS_WHEEL_REC_H

struct rec {
    struct tw_timer timer;
    struct tw_wheel *wheel;
    int fires;
    uint64_t fired_at;
};

static inline void rec_fire(struct tw_timer *t, void *arg)
{
    struct rec *r = arg;
    (void)t;
    r->fires++;
    r->fired_at = tw_wheel_now(r->wheel);
}

#endif
