/* SPDX-License-Identifier: MIT */
/* W6 cache (docs/workloads.md): tw_cache with 1e6 keys and a 60 s TTL,
 * Zipf reads (s = 0.99) with 10% writes from 1 and 2 threads: ops/s and hit
 * ratio; then a mass expiry of every key: time from due to gone, and read
 * latency (p50/p99/max) during it. Also bytes per entry beyond key and value,
 * and the shard-lock comparison (mutex vs rwlock, read-only and 10% writes).
 *
 *   w6_cache [--keys N] [--seconds S] [--reps R] [--mass-ttl-ms T] [--csv FILE]
 *            [--slack-shift K] [--expiry-only]
 *
 * --slack-shift sets tw_cache_config.expiry_slack_shift of every cache (the
 * default is the library's; 0 = exact expiry timers). --expiry-only runs the
 * expiry figures alone: the expiry cost under the manual clock (1e6 keys set
 * over 5,000 ms of manual time with a 60 s TTL and the jitter on, then expired
 * in 1 ms steps: expiry-thread CPU ns per key, exact and with slack 1/8 and
 * 1/16, back to back), then the real-clock mass expiry.
 *
 * Keys are "key:<i>" (10-11 bytes); values are opaque pointers (8 bytes, no
 * free function). Zipf ranks are mapped to keys through a random permutation
 * so that hot keys land in random shards. Samples are drawn before timing.
 * Medians of R repetitions. The mass expiry uses a shorter TTL (default 5 s;
 * the wheel's cost does not depend on the TTL) and jitter 0, so that all keys
 * fall due within the preload's span: the worst case. */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "twheel/cache.h"
#include "bench_util.h"

static long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

static uint64_t rng_state = 88172645463325252u;
/* xorshift64 on one sequence for the whole program. */
static uint64_t rnd(void)
{
    return xorshift64(&rng_state);
}

/* ---- keys and Zipf samples --------------------------------------------- */

static size_t nkeys = 1000000;
static char (*keys)[16];
static uint8_t *klens;
static uint32_t *perm; /* rank -> key */

#define SAMPLES (1u << 22)
static uint32_t *samples[2]; /* per thread: key index, high bit = write */

static void make_keys(void)
{
    keys = malloc(nkeys * sizeof *keys);
    klens = malloc(nkeys);
    perm = malloc(nkeys * sizeof *perm);
    for (size_t i = 0; i < nkeys; i++) {
        klens[i] = (uint8_t)snprintf(keys[i], sizeof keys[i], "key:%zu", i);
        perm[i] = (uint32_t)i;
    }
    shuffle_u32(perm, nkeys, &rng_state);
}

/* Samples of a Zipf(s) over nkeys by inverting the CDF; write_pct percent
 * of them flagged as writes. */
static void make_samples(double s, int write_pct)
{
    double sum;
    double *cdf = zipf_cdf(nkeys, s, &sum);
    for (int t = 0; t < 2; t++) {
        if (!samples[t])
            samples[t] = malloc(SAMPLES * sizeof(uint32_t));
        for (size_t k = 0; k < SAMPLES; k++) {
            size_t lo = zipf_draw(cdf, nkeys, sum, &rng_state);
            uint32_t w = (int)(rnd() % 100) < write_pct ? 0x80000000u : 0;
            samples[t][k] = perm[lo] | w;
        }
    }
    free(cdf);
}

/* ---- throughput --------------------------------------------------------- */

struct worker {
    struct tw_cache *c;
    int id;
    _Atomic int *stop;
    uint64_t ops;
    pthread_barrier_t *start;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    const uint32_t *smp = samples[w->id & 1];
    size_t pos = (size_t)w->id * 7919;
    uint64_t ops = 0;
    void *v;
    pthread_barrier_wait(w->start);
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        for (int i = 0; i < 1024; i++) {
            uint32_t s = smp[pos++ & (SAMPLES - 1)];
            uint32_t k = s & 0x7fffffffu;
            if (s & 0x80000000u)
                tw_cache_set(w->c, keys[k], klens[k], (void *)(uintptr_t)(k + 1));
            else
                tw_cache_get(w->c, keys[k], klens[k], &v);
        }
        ops += 1024;
    }
    w->ops = ops;
    return NULL;
}

static int slack_shift = -1; /* --slack-shift; -1 = the library's default */

static struct tw_cache *make_cache(enum tw_cache_lock lock, int64_t ttl, double jitter)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    if (slack_shift >= 0)
        cfg.expiry_slack_shift = (unsigned)slack_shift;
    cfg.default_ttl_ms = ttl;
    cfg.jitter = jitter;
    cfg.lock = lock;
    cfg.shards = 64;
    struct tw_cache *c = NULL;
    if (tw_cache_new(&c, &cfg) != 0) {
        fprintf(stderr, "tw_cache_new failed\n");
        exit(1);
    }
    return c;
}

static void preload(struct tw_cache *c)
{
    for (size_t i = 0; i < nkeys; i++)
        tw_cache_set(c, keys[i], klens[i], (void *)(uintptr_t)(i + 1));
}

/* ops/s of `threads` workers for `seconds`; hit ratio of the run. */
static double run_mix(struct tw_cache *c, int threads, double seconds, double *hit_ratio)
{
    _Atomic int stop = 0;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    struct worker w[2];
    pthread_t th[2];
    struct tw_cache_stats a, b;
    tw_cache_stats(c, &a);
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){c, i, &stop, 0, &start};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = now_ns();
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, 1);
    uint64_t ops = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        ops += w[i].ops;
    }
    uint64_t t1 = now_ns();
    pthread_barrier_destroy(&start);
    tw_cache_stats(c, &b);
    uint64_t h = b.hits - a.hits, m = b.misses - a.misses;
    *hit_ratio = h + m ? (double)h / (double)(h + m) : 0;
    return (double)ops / ((double)(t1 - t0) / 1e9);
}

/* ---- mass expiry --------------------------------------------------------- */

/* Log-linear latency histogram: 1 ns .. ~1 s, 16 sub-buckets per octave. */
#define HBUCKETS (64 * 16)
struct hist {
    uint64_t n[HBUCKETS];
    uint64_t count, max;
};

static unsigned hbucket(uint64_t ns)
{
    if (ns < 16)
        return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns);
    unsigned sub = (unsigned)(ns >> (e - 4)) & 15u;
    return (e - 3) * 16 + sub;
}

static uint64_t hbucket_upper(unsigned b)
{
    if (b < 16)
        return b;
    unsigned e = b / 16 + 3, sub = b % 16;
    return ((uint64_t)(16 + sub + 1) << (e - 4)) - 1;
}

static uint64_t hpct(const struct hist *h, double p)
{
    uint64_t want = (uint64_t)ceil(p * (double)h->count), seen = 0;
    for (unsigned b = 0; b < HBUCKETS; b++) {
        seen += h->n[b];
        if (seen >= want && want)
            return hbucket_upper(b);
    }
    return h->max;
}

struct reader {
    struct tw_cache *c;
    _Atomic int *stop;
    uint64_t from_ns; /* record latencies from then on */
    struct hist h;
    long preempted;   /* involuntary context switches of the reader meanwhile */
};

static void *reader_main(void *p)
{
    struct reader *r = p;
    const uint32_t *smp = samples[1];
    size_t pos = 0;
    void *v;
    struct rusage ru0, ru1;
    int started = 0;
    getrusage(RUSAGE_THREAD, &ru0);
    while (!atomic_load_explicit(r->stop, memory_order_relaxed)) {
        uint32_t k = smp[pos++ & (SAMPLES - 1)] & 0x7fffffffu;
        uint64_t t0 = now_ns();
        tw_cache_get(r->c, keys[k], klens[k], &v);
        uint64_t t1 = now_ns();
        if (t0 >= r->from_ns) {
            if (!started) {
                getrusage(RUSAGE_THREAD, &ru0);
                started = 1;
            }
            uint64_t d = t1 - t0;
            r->h.n[hbucket(d) < HBUCKETS ? hbucket(d) : HBUCKETS - 1]++;
            r->h.count++;
            if (d > r->h.max)
                r->h.max = d;
        }
    }
    getrusage(RUSAGE_THREAD, &ru1);
    r->preempted = ru1.ru_nivcsw - ru0.ru_nivcsw;
    return NULL;
}

static void mass_expiry(int64_t ttl_ms, FILE *csv)
{
    struct tw_cache *c = make_cache(TW_CACHE_LOCK_MUTEX, ttl_ms, 0);
    uint64_t first = now_ns();
    preload(c);
    uint64_t last = now_ns();
    uint64_t first_due = first + (uint64_t)ttl_ms * 1000000u;
    uint64_t last_due = last + (uint64_t)ttl_ms * 1000000u + 1000000u; /* ms rounding */
    _Atomic int stop = 0;
    struct reader *r = calloc(1, sizeof *r);
    r->c = c;
    r->stop = &stop;
    r->from_ns = first_due;
    pthread_t th;
    pthread_create(&th, NULL, reader_main, r);
    struct tw_cache_stats st;
    uint64_t gone = 0;
    for (;;) {
        tw_cache_stats(c, &st);
        uint64_t t = now_ns();
        if (st.entries == 0) {
            gone = t;
            break;
        }
        if (t > last_due + 30000000000u)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    double after_last = gone ? ((double)gone - (double)last_due) / 1e9 : -1;
    double span = ((double)gone - (double)first_due) / 1e9;
    printf("mass expiry (expiry_slack_shift %s): %zu keys due over %.3f s (preload span); gone %.3f s after the last "
           "was due (%.3f s after the first)\n",
           slack_shift >= 0 ? (slack_shift ? "set" : "0, exact") : "default", nkeys,
           (double)(last - first) / 1e9, after_last, span);
    printf("reads during it: %llu, p50 %.2f us, p99 %.2f us, p99.9 %.2f us, p99.99 %.1f us, "
           "max %.1f us; the reader was preempted %ld times meanwhile (a read takes no lock: "
           "its outliers are preemptions)\n",
           (unsigned long long)r->h.count, (double)hpct(&r->h, 0.50) / 1e3,
           (double)hpct(&r->h, 0.99) / 1e3, (double)hpct(&r->h, 0.999) / 1e3,
           (double)hpct(&r->h, 0.9999) / 1e3, (double)r->h.max / 1e3, r->preempted);
    if (csv)
        fprintf(csv, "mass_expiry,%zu,%.3f,%.3f,%.2f,%.2f,%.1f\n", nkeys, after_last, span,
                (double)hpct(&r->h, 0.50) / 1e3, (double)hpct(&r->h, 0.99) / 1e3,
                (double)r->h.max / 1e3);
    free(r);
    tw_cache_free(c);
}

/* Expiry cost under the manual clock: CPU ns per key of expiring nkeys keys
 * (set over 5,000 ms with a 60 s TTL, jitter 0.05), advancing 1 ms at a
 * time as the expiry thread does when it is never late. */
static double expiry_cost(unsigned shift, double *passes_out)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 60000;
    cfg.shards = 64;
    cfg.manual_clock = true;
    cfg.expiry_slack_shift = shift;
    struct tw_cache *c = NULL;
    if (tw_cache_new(&c, &cfg) != 0) {
        fprintf(stderr, "tw_cache_new failed\n");
        exit(1);
    }
    uint64_t now = 0;
    size_t per_ms = nkeys / 5000 ? nkeys / 5000 : 1;
    for (size_t i = 0; i < nkeys; i++) {
        if (i % per_ms == 0)
            tw_cache_set_now(c, ++now);
        tw_cache_set(c, keys[i], klens[i], (void *)(uintptr_t)(i + 1));
    }
    struct tw_cache_stats st;
    uint64_t cpu = 0, passes = 0;
    for (;;) {
        tw_cache_stats(c, &st);
        if (st.entries == 0 || now > 200000)
            break;
        now++;
        uint64_t t0 = cpu_now_ns();
        tw_cache_advance(c, now);
        cpu += cpu_now_ns() - t0;
        passes++;
    }
    tw_cache_free(c);
    *passes_out = (double)passes;
    return (double)cpu / (double)nkeys;
}

static void expiry_costs(int reps, FILE *csv)
{
    static const unsigned shifts[3] = {0, 3, 4};
    double ns[3][15], passes = 0;
    for (int r = 0; r < reps; r++) /* back to back, alternating */
        for (int k = 0; k < 3; k++)
            ns[k][r] = expiry_cost(shifts[k], &passes);
    for (int k = 0; k < 3; k++) {
        double m = median(ns[k], reps);
        printf("expiry cost (manual clock, 1 ms steps), slack shift %u%s: %.1f ns per key "
               "(median of %d; ratio to exact %.2f)\n",
               shifts[k], shifts[k] ? "" : " (exact)", m, reps, m / median(ns[0], reps));
        if (csv)
            fprintf(csv, "expiry_cost,%zu,%u,%.1f,,,\n", nkeys, shifts[k], m);
    }
}

/* ---- main ----------------------------------------------------------------- */

int main(int argc, char **argv)
{
    double seconds = 2;
    int reps = 3;
    int64_t mass_ttl = 5000;
    const char *csv_path = NULL;
    int expiry_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keys") && i + 1 < argc)
            nkeys = (size_t)atof(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mass-ttl-ms") && i + 1 < argc)
            mass_ttl = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(argv[i], "--slack-shift") && i + 1 < argc)
            slack_shift = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--expiry-only"))
            expiry_only = 1;
        else {
            fprintf(stderr, "usage: %s [--keys N] [--seconds S] [--reps R] [--mass-ttl-ms T] "
                            "[--csv FILE] [--slack-shift K] [--expiry-only]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 15)
        reps = 3;
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv)
        fprintf(csv, "figure,keys,a,b,c,d,e\n");
    make_keys();
    if (expiry_only) {
        expiry_costs(reps, csv);
        make_samples(0.99, 0); /* the mass expiry's reader */
        mass_expiry(mass_ttl, csv);
        if (csv)
            fclose(csv);
        return 0;
    }

    /* bytes per entry: RSS growth of a preload, minus the key bytes */
    double klen_avg = 0;
    for (size_t i = 0; i < nkeys; i++)
        klen_avg += klens[i];
    klen_avg /= (double)nkeys;
    long rss0 = rss_bytes();
    struct tw_cache *c = make_cache(TW_CACHE_LOCK_MUTEX, 60000, 0.05);
    preload(c);
    long rss1 = rss_bytes();
    double per_entry = (double)(rss1 - rss0) / (double)nkeys;
    printf("W6 tw_cache: %zu keys (avg key %.1f B), 64 shards, 60 s TTL, jitter 0.05\n", nkeys,
           klen_avg);
    printf("memory: %.1f B per entry (RSS); beyond the key: %.1f B, of which the 8-byte value "
           "pointer; beyond key and value: %.1f B\n",
           per_entry, per_entry - klen_avg, per_entry - klen_avg - 8);
    if (csv)
        fprintf(csv, "bytes_per_entry,%zu,%.1f,%.1f,,,\n", nkeys, per_entry,
                per_entry - klen_avg - 8);
    tw_cache_free(c);

    static const char *lock_names[2] = {"mutex", "rwlock"};
    for (int writes = 10; writes >= 0; writes -= 10) {
        make_samples(0.99, writes);
        for (int lock = 0; lock < 2; lock++) {
            c = make_cache((enum tw_cache_lock)lock, 60000, 0.05);
            preload(c);
            for (int threads = 1; threads <= 2; threads++) {
                double ops[15], hr[15];
                for (int r = 0; r < reps; r++)
                    ops[r] = run_mix(c, threads, seconds, &hr[r]);
                double m = median(ops, reps), h = median(hr, reps);
                printf("zipf 0.99, %2d%% writes, %-6s, %d thread%s: %6.2f M ops/s, hit ratio "
                       "%.4f (median of %d)\n",
                       writes, lock_names[lock], threads, threads > 1 ? "s" : " ", m / 1e6, h,
                       reps);
                if (csv)
                    fprintf(csv, "ops_per_s,%zu,%d,%s,%d,%.0f,%.4f\n", nkeys, writes,
                            lock_names[lock], threads, m, h);
            }
            tw_cache_free(c);
        }
    }
    expiry_costs(reps, csv);
    mass_expiry(mass_ttl, csv);
    if (csv)
        fclose(csv);
    return 0;
}
