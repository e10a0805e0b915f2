/* SPDX-License-Identifier: MIT */
/* Small helpers the stand-alone bench programs (w5_keyed, batch_keyed,
 * w6_cache, w8_cache, w8_runner) share: clocks, seeded generators, a
 * median and a Zipf sampler. Header-only (static inline) so that each
 * program stays one file to build; nothing here keeps state.
 *
 * The two clocks are distinct on purpose: now_ns() is wall time
 * (CLOCK_MONOTONIC), cpu_now_ns() is the calling thread's CPU time, which
 * other processes on a shared machine cannot inflate. */
#ifndef TWHEEL_BENCH_UTIL_H
#define TWHEEL_BENCH_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Monotonic wall time in ns. */
static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The calling thread's CPU time in ns. */
static inline uint64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: the next value of the sequence seeded by *s. */
static inline uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* xorshift64 (13, 7, 17): the Go peers use the same generator and seeds. */
static inline uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* qsort comparator for doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v in place); n > 0. */
static inline double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The smallest rank i with cdf[i] >= u, for a non-decreasing cdf[0..n),
 * n > 0: inverts a cumulative distribution such as a Zipf's. */
static inline size_t cdf_rank(const double *cdf, size_t n, double u)
{
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Fisher-Yates shuffle of a[0..n), n > 0, drawing from xorshift64(s). */
static inline void shuffle_u32(uint32_t *a, size_t n, uint64_t *s)
{
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = xorshift64(s) % (i + 1);
        uint32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* The unnormalised CDF of a Zipf(s) over ranks 0..n): cdf[i] = sum of
 * 1/(k+1)^s for k <= i; *sum = cdf[n-1]. NULL if out of memory. */
static inline double *zipf_cdf(size_t n, double s, double *sum)
{
    double *cdf = malloc(n * sizeof *cdf);
    double acc = 0;
    if (cdf)
        for (size_t i = 0; i < n; i++) {
            acc += 1.0 / pow((double)(i + 1), s);
            cdf[i] = acc;
        }
    *sum = acc;
    return cdf;
}

/* One Zipf rank from a zipf_cdf() table, drawing one xorshift64(s). */
static inline size_t zipf_draw(const double *cdf, size_t n, double sum, uint64_t *s)
{
    double u = (double)(xorshift64(s) >> 11) / 9007199254740992.0 * sum;
    return cdf_rank(cdf, n, u);
}

#endif
