/* SPDX-License-Identifier: MIT */
/* A simulated clock for libuv and libevent.
 *
 * Both libraries read time from clock_gettime(CLOCK_MONOTONIC[_COARSE]) and
 * wait in epoll_wait; neither lets the caller set its time. Without help they
 * could only be benchmarked against the real clock, i.e. by sleeping through
 * the workloads' simulated minutes and days. So this executable defines
 * clock_gettime, epoll_wait and epoll_pwait itself. The dynamic linker binds
 * the libraries' calls to these definitions (an executable's symbols come
 * first in the lookup order), and:
 *
 *  - clock_gettime on a monotonic clock returns the simulated tick (1 tick =
 *    1 ms, plus a base); other clocks go to the C library;
 *  - epoll_wait/epoll_pwait report no events at once. The benchmark's loops
 *    have no file descriptors that could become ready (only the libraries'
 *    own internal pipes), so "no events" is exactly what the kernel would say;
 *    a positive timeout is a sleep, and sleeping means the simulated time
 *    moves on by that many milliseconds, as the real one would have.
 *
 * The libraries themselves are unchanged: libuv's uv_run and libevent's
 * event_base_loop run their real timer code (heap, due check, callbacks); only
 * the kernel's part of a loop iteration (the poll system call, ~0.3-1 us) is
 * skipped, for them as for everybody else, since twheel's figures do not
 * include a poll either.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "bench.h"

#define EXPORTED __attribute__((visibility("default")))

static uint64_t fake_ms = BENCH_CLOCK_BASE_MS;

typedef int clock_gettime_fn(clockid_t, struct timespec *);
static clock_gettime_fn *real_clock_gettime;

static clock_gettime_fn *real_clock(void)
{
    if (!real_clock_gettime) {
        void *sym = dlsym(RTLD_NEXT, "clock_gettime");
        /* dlsym returns a function as an object pointer (POSIX allows it). */
        memcpy(&real_clock_gettime, &sym, sizeof sym);
    }
    return real_clock_gettime;
}

void bench_fake_set(uint64_t tick)
{
    fake_ms = BENCH_CLOCK_BASE_MS + tick;
}

uint64_t bench_fake_get(void)
{
    return fake_ms - BENCH_CLOCK_BASE_MS;
}

/* BENCH_CLOCK=cpu in the environment times sections with the thread's CPU
 * clock instead of CLOCK_MONOTONIC: on a machine shared with other busy
 * processes, the time slices they take are then not counted (their effect on
 * the caches still is). Read once. */
static clockid_t section_clock(void)
{
    static int chosen = -1;
    if (chosen < 0) {
        const char *v = getenv("BENCH_CLOCK");
        chosen = v && strcmp(v, "cpu") == 0;
    }
    return chosen ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
}

uint64_t bench_real_ns(void)
{
    struct timespec ts;
    real_clock()(section_clock(), &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bench_cpu_ns(void)
{
    struct timespec ts;
    real_clock()(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

EXPORTED int clock_gettime(clockid_t id, struct timespec *ts)
{
    switch (id) {
    case CLOCK_MONOTONIC:
    case CLOCK_MONOTONIC_COARSE:
    case CLOCK_MONOTONIC_RAW:
    case CLOCK_BOOTTIME:
        ts->tv_sec = (time_t)(fake_ms / 1000);
        ts->tv_nsec = (long)(fake_ms % 1000) * 1000000L;
        return 0;
    default:
        return real_clock()(id, ts);
    }
}

static int fake_poll(int timeout_ms)
{
    if (timeout_ms > 0)
        fake_ms += (uint64_t)timeout_ms; /* slept until the library's next timer */
    return 0;
}

EXPORTED int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    (void)epfd, (void)events, (void)maxevents;
    return fake_poll(timeout);
}

EXPORTED int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
                         const sigset_t *sigmask)
{
    (void)epfd, (void)events, (void)maxevents, (void)sigmask;
    return fake_poll(timeout);
}
