/* SPDX-License-Identifier: MIT */
/* twheel benchmark suite: the adapter interface every implementation sits
 * behind, and the few helpers the workloads and adapters share.
 *
 * One adapter per file (impl_*.c). A workload (workloads.c) drives an adapter
 * through this interface only, with the same operation sequence (same seed)
 * for every implementation, and checks what fired. Timers are named by a
 * dense id in [0, capacity); every adapter keeps its own per-id storage, laid
 * out the way its library wants it (intrusive struct, heap entry, ...).
 *
 * Time is in ticks and simulated: the workload says what time it is. libuv and
 * libevent read a real clock, so fakeclock.c interposes clock_gettime and
 * epoll_wait for them (see there).
 */
#ifndef TWHEEL_BENCH_H
#define TWHEEL_BENCH_H

#include <stddef.h>
#include <stdint.h>

#define BENCH_NEVER UINT64_MAX

/* Workload bits for bench_impl.workloads. */
#define BENCH_W1 (1u << 1)
#define BENCH_W2 (1u << 2)
#define BENCH_W3 (1u << 3)
#define BENCH_W4 (1u << 4)
#define BENCH_ALL (BENCH_W1 | BENCH_W2 | BENCH_W3 | BENCH_W4)

/* Called by an adapter for each timer that fires. */
typedef void bench_fire_fn(void *ctx, uint32_t id);

struct bench_setup {
    size_t capacity;     /* ids are 0..capacity-1 */
    uint64_t now;        /* the starting tick */
    bench_fire_fn *fire; /* called once per fired timer */
    void *ctx;           /* its first argument */
    uint64_t *target;    /* advance_next writes the tick it goes to here */
    /* Delays that repeat, [lo, hi] inclusive, for libraries that can exploit
     * it (libevent's common timeouts); 0/0 when delays are arbitrary. */
    uint64_t common_lo, common_hi;
};

struct bench_impl {
    const char *name;   /* short, for tables and CSV */
    const char *what;   /* one line for the legend */
    unsigned workloads; /* BENCH_W* bits: where it takes part */

    /* NULL on failure (out of memory, or a library call failed). */
    void *(*create)(const struct bench_setup *setup);
    void (*destroy)(void *s);
    /* Arm an idle id at an absolute deadline > now. */
    void (*arm)(void *s, uint32_t id, uint64_t deadline);
    /* Re-arm a pending id (deadline > now; earlier or later). */
    void (*reset)(void *s, uint32_t id, uint64_t deadline);
    /* Disarm a pending id. */
    void (*cancel)(void *s, uint32_t id);
    /* Set the time to `now`, firing every timer due by then, in deadline
     * order at tick granularity. */
    void (*advance_to)(void *s, uint64_t now);
    /* The earliest tick at which there may be work: never later than the
     * earliest deadline (it may be earlier, e.g. a cascade or "every tick");
     * BENCH_NEVER when nothing is pending. */
    uint64_t (*next_deadline)(void *s);
    /* Optional: advance to the earliest tick with work and do it, writing that
     * tick to *setup->target before firing anything; returns it, or
     * BENCH_NEVER (and does nothing) when nothing is pending. Adapters whose
     * library finds that tick itself inside its loop (libevent) provide it;
     * the others get next_deadline + advance_to. */
    uint64_t (*advance_next)(void *s);
    /* Bytes the structure holds now for its timers: per-timer nodes and the
     * arrays/tables around them (not the process's allocator overhead). */
    size_t (*bytes)(void *s);
    /* Optional: a work counter per timer, for tuning (twheel: moves between
     * slots; single-level wheel: entries visited without firing). */
    uint64_t (*moves)(void *s);
    /* Slack: 0 for exact implementations. Otherwise a timer armed at time t
     * for deadline d may fire at any tick in [d, d + ((d - t) >> slack_shift)]
     * and the workloads check that window instead of the exact tick (W2 and
     * W3 only; see README.md). */
    unsigned slack_shift;
};

/* The implementations (impl_*.c), in table order. bench_impls[0] is twheel,
 * the reference of every ratio. */
extern const struct bench_impl bench_impl_twheel;
extern const struct bench_impl bench_impl_twheel_slack;
extern const struct bench_impl bench_impl_twheel_eager;
extern const struct bench_impl bench_impl_libuv;
extern const struct bench_impl bench_impl_libevent;
extern const struct bench_impl bench_impl_libevent_common;
extern const struct bench_impl bench_impl_timeoutc;
extern const struct bench_impl bench_impl_heap4;
extern const struct bench_impl bench_impl_rounds;
extern const struct bench_impl bench_impl_scan;

/* ---- fake clock (fakeclock.c) ------------------------------------------- */

/* The simulated time as libuv and libevent see it through clock_gettime:
 * BENCH_CLOCK_BASE_MS + tick milliseconds (1 tick = 1 ms). The base keeps
 * libevent's "is the time cache set" test (tv_sec != 0) meaningful. */
#define BENCH_CLOCK_BASE_MS UINT64_C(1000000)
void bench_fake_set(uint64_t tick);
uint64_t bench_fake_get(void);
/* Real CLOCK_MONOTONIC in ns, and process CPU time in ns (never faked). */
uint64_t bench_real_ns(void);
uint64_t bench_cpu_ns(void);

/* ---- small shared helpers ------------------------------------------------ */

/* splitmix64: a fast, well-mixed generator; the same seed gives the same
 * operation sequence for every implementation. */
static inline uint64_t bench_rand(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

__extension__ typedef unsigned __int128 bench_u128;

/* Uniform in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64). */
static inline uint64_t bench_below(uint64_t *state, uint64_t n)
{
    return (uint64_t)(((bench_u128)bench_rand(state) * n) >> 64);
}

#endif /* TWHEEL_BENCH_H */
