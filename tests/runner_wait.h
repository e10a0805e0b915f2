/* SPDX-License-Identifier: MIT */
/* A bounded wait on a runner's time, for the threaded runner tests. */
#ifndef TWHEEL_TEST_RUNNER_WAIT_H
#define TWHEEL_TEST_RUNNER_WAIT_H

#include "test_time.h"
#include "twheel/runner.h"

/* Wait until runner r has processed tick `tick` (tw_runner_stats.tick),
 * at most 10 s; returns its figures as last read. */
static inline struct tw_runner_stats runner_wait_tick(struct tw_runner *r, uint64_t tick)
{
    struct tw_runner_stats st = {0};
    for (int i = 0; i < 10000; i++) {
        if (tw_runner_stats(r, &st) != 0 || st.tick >= tick)
            break;
        sleep_ms(1);
    }
    return st;
}

#endif
