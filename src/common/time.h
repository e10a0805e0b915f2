/* SPDX-License-Identifier: MIT */
/* Internal: monotonic time for the layers that keep time themselves (the
 * runner, the clock service, the cache): a clock read in nanoseconds, a
 * condition variable that waits on CLOCK_MONOTONIC, and nanoseconds rounded
 * up to whole ticks.
 *
 * Deadlines are instants on CLOCK_MONOTONIC in nanoseconds, so a change of
 * the wall clock moves none of them, and a condition variable waits for one
 * only if it was set up on that clock (tw_cond_init_mono_). The calls are
 * inline: the reads and the rounding are on hot paths.
 */
#ifndef TWHEEL_TIME_H
#define TWHEEL_TIME_H

#include <pthread.h>
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

/* Initialize cv to wait on CLOCK_MONOTONIC (for tw_cond_wait_until_):
 * 0, or the error number of the call that failed. */
static inline int tw_cond_init_mono_(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int e = pthread_condattr_init(&ca);
    if (e)
        return e;
    e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!e)
        e = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return e;
}

/* Wait on cv (set up by tw_cond_init_mono_; mu held) until signalled or
 * at_ns on CLOCK_MONOTONIC: what pthread_cond_timedwait returns
 * (ETIMEDOUT once at_ns has passed). */
static inline int tw_cond_wait_until_(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t at_ns)
{
    struct timespec ts = {(time_t)(at_ns / TW_NS_PER_SEC), (long)(at_ns % TW_NS_PER_SEC)};
    return pthread_cond_timedwait(cv, mu, &ts);
}

/* ns in whole ticks of tick_ns (> 0), rounded up: the first tick at or
 * after ns. Divides rather than adds tick_ns - 1 first, so no ns overflows. */
static inline uint64_t tw_ticks_up_(uint64_t ns, uint64_t tick_ns)
{
    return ns / tick_ns + (ns % tick_ns != 0);
}

#endif /* TWHEEL_TIME_H */
