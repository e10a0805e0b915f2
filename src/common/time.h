/* SPDX-License-Identifier: MIT */
/* Internal: monotonic time for the layers that keep time themselves (the
 * runner, the clock service, the cache): a clock read in nanoseconds.
 *
 * Deadlines are instants on CLOCK_MONOTONIC in nanoseconds, so a change of
 * the wall clock moves none of them. The calls are inline: the reads are
 * on hot paths.
 */
#ifndef TWHEEL_TIME_H
#define TWHEEL_TIME_H

#include <stdint.h>
#include <time.h>

#define TW_NS_PER_SEC UINT64_C(1000000000)

/* Now on clock id (CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE), in ns. */
static inline uint64_t tw_time_ns_(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * TW_NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* Now on CLOCK_MONOTONIC, in ns. */
static inline uint64_t tw_mono_ns_(void)
{
    return tw_time_ns_(CLOCK_MONOTONIC);
}

#endif /* TWHEEL_TIME_H */
