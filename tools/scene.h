/* SPDX-License-Identifier: MIT */
/* Shared bits of the connection scene (twheel-idled and twheel-load).
 *
 * Header-only and static: each tool is one translation unit plus this file.
 * Everything here is small and boring on purpose: a monotonic clock in
 * nanoseconds, the open-file limit, an fd count, a latency histogram that
 * reports percentiles without storing every sample, option parsing, and a
 * seeded PRNG so that a scene can be replayed.
 */
#ifndef TWHEEL_TOOLS_SCENE_H
#define TWHEEL_TOOLS_SCENE_H

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define NS_PER_US INT64_C(1000)
#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)

/* CLOCK_MONOTONIC in ns: both tools read the same clock, so a time taken by
 * one process can be compared with one taken by the other. */
static inline int64_t scene_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* User + system CPU time of this process so far, in ns. */
static inline int64_t scene_cpu_ns(int64_t *user, int64_t *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    int64_t u = (int64_t)ru.ru_utime.tv_sec * NS_PER_S + (int64_t)ru.ru_utime.tv_usec * NS_PER_US;
    int64_t s = (int64_t)ru.ru_stime.tv_sec * NS_PER_S + (int64_t)ru.ru_stime.tv_usec * NS_PER_US;
    if (user)
        *user = u;
    if (sys)
        *sys = s;
    return u + s;
}

/* The cost of one clock_gettime call (median of consecutive readings), to
 * subtract from the timing of short batches. */
static inline int64_t scene_clock_cost_ns(void)
{
    enum { SAMPLES = 1001 };
    int64_t d[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        int64_t a = scene_now_ns();
        int64_t b = scene_now_ns();
        d[i] = b - a;
    }
    /* insertion sort: small, and only once per process */
    for (int i = 1; i < SAMPLES; i++) {
        int64_t v = d[i];
        int j = i - 1;
        while (j >= 0 && d[j] > v) {
            d[j + 1] = d[j];
            j--;
        }
        d[j + 1] = v;
    }
    return d[SAMPLES / 2];
}

/* ---- how busy the machine is ------------------------------------------------ */

/* The 1-minute load average from /proc/loadavg, or -1 if unreadable. */
static inline double scene_loadavg(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double v = -1;
    if (f) {
        if (fscanf(f, "%lf", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* CPU counters of the whole machine from /proc/stat's "cpu" line, in clock
 * ticks: all of them, and the steal (time a hypervisor gave this VM's CPUs
 * to someone else). 0 if unreadable. */
struct scene_cpu_sample {
    unsigned long long total, steal;
};

static inline struct scene_cpu_sample scene_cpu_sample(void)
{
    struct scene_cpu_sample s = {0, 0};
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return s;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return s;
    for (int i = 0; i < n; i++)
        s.total += v[i];
    s.steal = n >= 8 ? v[7] : 0;
    return s;
}

/* Steal between two samples, in % of all CPU time; -1 if not visible. */
static inline double scene_steal_pct(struct scene_cpu_sample a, struct scene_cpu_sample b)
{
    if (b.total <= a.total)
        return -1;
    return 100.0 * (double)(b.steal - a.steal) / (double)(b.total - a.total);
}

/* Raise the soft open-file limit to the hard one; say so on `out` when it
 * changes. Returns the soft limit now in force. */
static inline long scene_raise_nofile(const char *prog, FILE *out)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t old = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
            fprintf(out, "%s: raised the open-file soft limit from %llu to the hard limit %llu\n",
                    prog, (unsigned long long)old, (unsigned long long)rl.rlim_max);
        } else {
            rl.rlim_cur = old;
            fprintf(out, "%s: could not raise the open-file soft limit %llu to %llu: %s\n", prog,
                    (unsigned long long)old, (unsigned long long)rl.rlim_max, strerror(errno));
        }
    }
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT_MAX ? INT_MAX : (long)rl.rlim_cur;
}

/* Open file descriptors of this process (the directory's own fd excluded),
 * or -1 if /proc is not there. */
static inline int scene_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.')
            n++;
    }
    closedir(d);
    return n - 1;
}

/* ---- latency histogram ------------------------------------------------------
 * 10 us buckets up to 100 ms, then 1 ms buckets up to 10 s, one overflow
 * bucket, exact min and max, and a separate count of negative samples (an
 * early close is a bug, not a bucket). A percentile is reported as the upper
 * edge of its bucket: "p99 0.43 ms" means "99% of samples were at most
 * 0.43 ms" (or the exact max, when that is lower). */
#define SCENE_HIST_FINE_NS (10 * NS_PER_US)
#define SCENE_HIST_FINE 10000 /* up to 100 ms */
#define SCENE_HIST_COARSE_NS NS_PER_MS
#define SCENE_HIST_COARSE 9900 /* then up to 10 s */
#define SCENE_HIST_BUCKETS (SCENE_HIST_FINE + SCENE_HIST_COARSE)

struct scene_hist {
    uint64_t count;    /* samples >= 0 */
    uint64_t negative; /* samples < 0 */
    int64_t min, max;  /* over every sample, negative ones included */
    uint32_t bucket[SCENE_HIST_BUCKETS + 1];
};

static inline void scene_hist_init(struct scene_hist *h)
{
    memset(h, 0, sizeof *h);
    h->min = INT64_MAX;
    h->max = INT64_MIN;
}

static inline int64_t scene_hist_index(int64_t ns) /* ns >= 0 */
{
    int64_t fine_end = SCENE_HIST_FINE * SCENE_HIST_FINE_NS;
    if (ns < fine_end)
        return ns / SCENE_HIST_FINE_NS;
    int64_t b = SCENE_HIST_FINE + (ns - fine_end) / SCENE_HIST_COARSE_NS;
    return b > SCENE_HIST_BUCKETS ? SCENE_HIST_BUCKETS : b;
}

/* The first value above bucket b. */
static inline int64_t scene_hist_edge(int64_t b)
{
    if (b < SCENE_HIST_FINE)
        return (b + 1) * SCENE_HIST_FINE_NS;
    return SCENE_HIST_FINE * SCENE_HIST_FINE_NS + (b - SCENE_HIST_FINE + 1) * SCENE_HIST_COARSE_NS;
}

static inline void scene_hist_add(struct scene_hist *h, int64_t ns)
{
    if (ns < h->min)
        h->min = ns;
    if (ns > h->max)
        h->max = ns;
    if (ns < 0) {
        h->negative++;
        return;
    }
    h->bucket[scene_hist_index(ns)]++;
    h->count++;
}

/* Upper bound of the q-quantile (0 < q <= 1) of the non-negative samples, in
 * ns (never above the max); -1 if there are none. */
static inline int64_t scene_hist_quantile(const struct scene_hist *h, double q)
{
    if (h->count == 0)
        return -1;
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (int64_t b = 0; b < SCENE_HIST_BUCKETS; b++) {
        seen += h->bucket[b];
        if (seen >= rank) {
            int64_t edge = scene_hist_edge(b);
            return edge < h->max ? edge : h->max;
        }
    }
    return h->max;
}

/* Non-negative samples at most `ns`, counted by whole buckets: exact when ns
 * is a bucket edge (any multiple of 10 us below 100 ms, of 1 ms above). */
static inline uint64_t scene_hist_at_most(const struct scene_hist *h, int64_t ns)
{
    if (ns < 0)
        return 0;
    if (ns >= h->max)
        return h->count;
    uint64_t n = 0;
    for (int64_t b = 0; b < SCENE_HIST_BUCKETS && scene_hist_edge(b) <= ns + 1; b++)
        n += h->bucket[b];
    return n;
}

/* "min 0.010  p50 0.210  p90 0.400  p99 0.820  max 1.930 ms". */
static inline void scene_hist_print(const struct scene_hist *h, FILE *out)
{
    if (h->count + h->negative == 0) {
        fprintf(out, "(no samples)");
        return;
    }
    fprintf(out, "min %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f ms", (double)h->min / 1e6,
            (double)scene_hist_quantile(h, 0.50) / 1e6, (double)scene_hist_quantile(h, 0.90) / 1e6,
            (double)scene_hist_quantile(h, 0.99) / 1e6, (double)h->max / 1e6);
}

/* ---- options -------------------------------------------------------------------
 * "--name value" or "--name=value". scene_opt returns the value when argv[*i]
 * is that option (advancing *i past a separate value), else NULL. */
static inline const char *scene_opt(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", name);
        exit(2);
    }
    return argv[++*i];
}

/* A number, or exit(2) with a message naming the option. */
static inline double scene_num(const char *name, const char *value, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (errno || end == value || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: '%s' is not a number in [%g, %g]\n", name, value, lo, hi);
        exit(2);
    }
    return v;
}

/* ---- PRNG: splitmix64, seeded, so a scene can be replayed ----------------------- */
static inline uint64_t scene_rand(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double scene_rand01(uint64_t *state)
{
    return (double)(scene_rand(state) >> 11) * (1.0 / 9007199254740992.0);
}

#endif /* TWHEEL_TOOLS_SCENE_H */
