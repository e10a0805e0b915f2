/* SPDX-License-Identifier: MIT */
/* Monotonic time and sleeps for the threaded tests (bounded waits). */
#ifndef TWHEEL_TEST_TIME_H
#define TWHEEL_TEST_TIME_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

#endif
