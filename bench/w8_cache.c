/* SPDX-License-Identifier: MIT */
/* W8, the cache half (bench/README.md, "W8 cache"): tw_cache with its
 * defaults at 1e6 keys, Zipf(0.99) keys, 90% get / 10% set and 100% get, T
 * threads; then batched against single calls at 1e6 keys (uniform keys, so
 * each call waits on DRAM), and the cost of 1,000 caches sharing one clock
 * service (threads, memory, idle CPU).
 *
 *   w8_cache [--keys N] [--seconds S] [--reps R] [--threads 1,2,4,8,16]
 *            [--shards N] [--csv FILE] [--skip-mix] [--skip-batch] [--skip-many]
 *
 * --shards sets the caches' shard count (default: the library's, by CPUs),
 * so that a run on 2 cores can measure what a bigger machine's default
 * does. The batched section's cache is made first, and the RSS it and its
 * preload added is printed per key (entries, keys, buckets, timers: all).
 *
 * Keys are "key:<i>"; values are opaque pointers (i + 1, no free function),
 * so a set of a live key stores the same pointer again (a TTL refresh, as in
 * the peers, which store the same boxed value). Every thread has its own
 * precomputed stream of 2^20 samples drawn before timing (xorshift64 and an
 * inverted Zipf CDF, the same generator as the peers in bench/peers), mapped to keys
 * through a random permutation. Medians of R runs. The same program text
 * drives the peers in bench/peers/ (CaffeineW8.java, gozero_w8.go).
 * CSV rows: impl,mix,threads,ops_per_s,cpu_ns_per_op (mix "90/10" or "100/0";
 * the process's CPU time per op, all its threads, meanwhile), then
 * batch,<what>,ns_per_op and many,<what>,<value>. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "twheel/cache.h"
#include "twheel/clock.h"
#include "bench_util.h"

static long proc_status(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    long v = -1;
    char line[256];
    size_t n = strlen(field);
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            v = atol(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

/* The driver's own arrays that every op reads at a random place (keys,
 * their lengths, 24 MB at 1e6 keys) on transparent huge pages, as the Go
 * driver's are (Go's heap is THP-backed): else the C driver alone would pay
 * a TLB miss or two per op that the Go driver does not, and the comparison
 * would measure the drivers. (Java's heap is on THP only with
 * -XX:+UseTransparentHugePages, which scripts/bench-w8-cache passes.) */
static void *driver_array(size_t bytes)
{
#ifdef W8_SMALL_PAGES
    return malloc(bytes);
#else
    size_t align = (size_t)2 << 20, len = (bytes + align - 1) / align * align;
    char *p = mmap(NULL, len + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "w8_cache: mmap of %zu bytes failed\n", bytes);
        exit(1);
    }
    char *a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    madvise(a, len, MADV_HUGEPAGE);
    return a; /* never freed: the process's lifetime */
#endif
}

#define MAXT 16
#define SAMPLES (1u << 20)
static size_t nkeys = 1000000;
static char (*keys)[16];
static size_t *klens;
static uint32_t *perm;
static uint32_t *samples[MAXT]; /* key index, high bit = write */

static void make_keys(void)
{
    uint64_t s = 88172645463325252u;
    keys = driver_array(nkeys * sizeof *keys);
    klens = driver_array(nkeys * sizeof *klens);
    perm = malloc(nkeys * sizeof *perm);
    for (size_t i = 0; i < nkeys; i++) {
        klens[i] = (size_t)snprintf(keys[i], sizeof keys[i], "key:%zu", i);
        perm[i] = (uint32_t)i;
    }
    shuffle_u32(perm, nkeys, &s);
}

static int nstreams = MAXT;

static void make_samples(int write_pct)
{
    double sum;
    double *cdf = zipf_cdf(nkeys, 0.99, &sum);
    for (int t = 0; t < nstreams; t++) {
        uint64_t s = 0x9e3779b97f4a7c15u * (uint64_t)(t + 1);
        if (!samples[t])
            samples[t] = malloc(SAMPLES * sizeof(uint32_t));
        for (size_t k = 0; k < SAMPLES; k++) {
            size_t lo = zipf_draw(cdf, nkeys, sum, &s);
            uint32_t w = (int)(xorshift64(&s) % 100) < write_pct ? 0x80000000u : 0;
            samples[t][k] = perm[lo] | w;
        }
    }
    free(cdf);
}

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
    const uint32_t *smp = samples[w->id];
    size_t pos = 0;
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

static uint64_t proc_cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* ops/s; *cpu_per_op = the process's CPU ns per op meanwhile (every thread:
 * a figure other processes on the machine cannot inflate). */
static double run_mix(struct tw_cache *c, int threads, double seconds, double *cpu_per_op)
{
    _Atomic int stop = 0;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    struct worker w[MAXT];
    pthread_t th[MAXT];
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){c, i, &stop, 0, &start};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = now_ns(), c0 = proc_cpu_ns();
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&stop, 1);
    uint64_t ops = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        ops += w[i].ops;
    }
    uint64_t t1 = now_ns();
    *cpu_per_op = (double)(proc_cpu_ns() - c0) / (double)(ops ? ops : 1);
    pthread_barrier_destroy(&start);
    return (double)ops / ((double)(t1 - t0) / 1e9);
}

static unsigned cache_shards; /* 0: the default */

static struct tw_cache *make_cache(struct tw_clock *clk)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 60000;
    cfg.clock = clk;
    cfg.shards = cache_shards;
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

/* A new cache preloaded with every key; prints (and writes to csv) the RSS
 * the cache and its preload added, per key. */
static struct tw_cache *make_preloaded_measured(FILE *csv)
{
    long kb0 = proc_status("VmRSS");
    struct tw_cache *c = make_cache(NULL);
    preload(c);
    long kb1 = proc_status("VmRSS");
    double per = (double)(kb1 - kb0) * 1024.0 / (double)nkeys;
    printf("%zu keys in %u shards: %.1f bytes of RSS per key (cache and preload)\n", nkeys,
           cache_shards ? cache_shards : tw_cache_default_shards(), per);
    if (csv)
        fprintf(csv, "bytes,rss_per_key,%.1f\n", per);
    return c;
}

/* ---- a hot key set, read-only ----------------------------------------- */

/* 1,000 hot keys (in cache), 100% get, T threads for `seconds`: ops/s, and
 * each thread's CPU ns per get (a get that bounced a shared line or spun on
 * a lock would cost more CPU with 2 threads than with 1; this holds even on
 * a machine other processes share, where wall-clock ops/s cannot show it). */
struct hot {
    struct tw_cache *c;
    _Atomic int *stop;
    pthread_barrier_t *start;
    uint64_t ops, cpu;
    int id;
};

static void *hot_main(void *p)
{
    struct hot *h = p;
    uint64_t s = 0x12345u + (uint64_t)h->id, ops = 0;
    void *v;
    pthread_barrier_wait(h->start);
    uint64_t c0 = cpu_now_ns();
    while (!atomic_load_explicit(h->stop, memory_order_relaxed)) {
        for (int i = 0; i < 256; i++) {
            size_t k = xorshift64(&s) % 1000;
            tw_cache_get(h->c, keys[k], klens[k], &v);
        }
        ops += 256;
    }
    h->cpu = cpu_now_ns() - c0;
    h->ops = ops;
    return NULL;
}

static void hot_set(int reps, double seconds, FILE *csv)
{
    struct tw_cache *c = make_cache(NULL);
    for (size_t i = 0; i < 1000; i++)
        tw_cache_set(c, keys[i], klens[i], (void *)(uintptr_t)(i + 1));
    for (int threads = 1; threads <= 2; threads++) {
        double ops[15], cpu[15];
        for (int r = 0; r < reps; r++) {
            _Atomic int stop = 0;
            pthread_barrier_t start;
            pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
            struct hot h[2];
            pthread_t th[2];
            for (int i = 0; i < threads; i++) {
                h[i] = (struct hot){c, &stop, &start, 0, 0, i};
                pthread_create(&th[i], NULL, hot_main, &h[i]);
            }
            pthread_barrier_wait(&start);
            uint64_t t0 = now_ns();
            struct timespec ts = {(time_t)seconds,
                                  (long)((seconds - (double)(time_t)seconds) * 1e9)};
            nanosleep(&ts, NULL);
            atomic_store(&stop, 1);
            uint64_t n = 0, cn = 0;
            for (int i = 0; i < threads; i++) {
                pthread_join(th[i], NULL);
                n += h[i].ops;
                cn += h[i].cpu;
            }
            ops[r] = (double)n / ((double)(now_ns() - t0) / 1e9);
            cpu[r] = (double)cn / (double)n;
            pthread_barrier_destroy(&start);
        }
        double m = median(ops, reps), cm = median(cpu, reps);
        printf("hot set (1,000 keys), 100%% get, %d thread%s: %6.2f M ops/s, %.1f CPU ns per get\n",
               threads, threads > 1 ? "s" : " ", m / 1e6, cm);
        if (csv)
            fprintf(csv, "hot,%d,%.0f,%.1f\n", threads, m, cm);
    }
    tw_cache_free(c);
}

/* ---- batched vs single at 1e6 keys -------------------------------------- */

#define BATCH 32
static double batch_ns(struct tw_cache *c, int what, int reps)
{
    /* what: 0 get, 1 get_many, 2 set, 3 set_many; uniform keys */
    enum { N = 1 << 20 };
    static const void *kp[N];
    static size_t kl[N];
    static void *vals[N];
    uint64_t s = 12345;
    for (size_t i = 0; i < N; i++) {
        size_t k = xorshift64(&s) % nkeys;
        kp[i] = keys[k];
        kl[i] = klens[k];
        vals[i] = (void *)(uintptr_t)(k + 1);
    }
    double r[15];
    for (int rep = 0; rep < reps; rep++) {
        uint64_t t0 = cpu_now_ns();
        void *out[BATCH];
        switch (what) {
        case 0:
            for (size_t i = 0; i < N; i++)
                tw_cache_get(c, kp[i], kl[i], &out[0]);
            break;
        case 1:
            for (size_t i = 0; i < N; i += BATCH)
                tw_cache_get_many(c, BATCH, &kp[i], &kl[i], out, NULL);
            break;
        case 2:
            for (size_t i = 0; i < N; i++)
                tw_cache_set(c, kp[i], kl[i], vals[i]);
            break;
        default:
            for (size_t i = 0; i < N; i += BATCH)
                tw_cache_set_many(c, BATCH, &kp[i], &kl[i], &vals[i], NULL);
            break;
        }
        r[rep] = (double)(cpu_now_ns() - t0) / N;
    }
    return median(r, reps);
}

/* ---- 1,000 caches on one clock ------------------------------------------ */

static void many_caches(FILE *csv, unsigned shards)
{
    cache_shards = shards;
    enum { NC = 1000 };
    long th0 = proc_status("Threads"), rss0 = proc_status("VmRSS");
    struct tw_clock *clk;
    if (tw_clock_new(&clk, NULL) != 0)
        exit(1);
    static struct tw_cache *cs[NC];
    for (int i = 0; i < NC; i++) {
        cs[i] = make_cache(clk);
        for (int k = 0; k < 10; k++)
            tw_cache_set(cs[i], keys[k], klens[k], (void *)(uintptr_t)(k + 1));
    }
    long th1 = proc_status("Threads"), rss1 = proc_status("VmRSS");
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
    getrusage(RUSAGE_SELF, &b);
    double cpu = (double)(b.ru_utime.tv_sec - a.ru_utime.tv_sec + b.ru_stime.tv_sec -
                          a.ru_stime.tv_sec) +
                 (double)(b.ru_utime.tv_usec - a.ru_utime.tv_usec + b.ru_stime.tv_usec -
                          a.ru_stime.tv_usec) / 1e6;
    printf("1,000 caches on one clock (%u shards each, 10 keys each): %ld threads added, "
           "%.1f MB RSS (%.1f KB per cache), idle CPU %.3f%% of a core over 2 s\n",
           shards ? shards : tw_cache_default_shards(), th1 - th0, (double)(rss1 - rss0) / 1024.0,
           (double)(rss1 - rss0) / NC, 100.0 * cpu / 2.0);
    if (csv)
        fprintf(csv, "many,%u,threads_added,%ld\nmany,%u,rss_kb_per_cache,%.1f\n"
                     "many,%u,idle_cpu_pct,%.3f\n",
                shards, th1 - th0, shards, (double)(rss1 - rss0) / NC, shards,
                100.0 * cpu / 2.0);
    for (int i = 0; i < NC; i++)
        tw_cache_free(cs[i]);
    tw_clock_free(clk);
    cache_shards = 0;
}

int main(int argc, char **argv)
{
    double seconds = 2;
    int reps = 3;
    int tlist[8] = {1, 2, 4, 8, 16}, nt = 5;
    const char *csv_path = NULL;
    int skip_mix = 0, skip_batch = 0, skip_many = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--keys") && i + 1 < argc)
            nkeys = (size_t)atof(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nt = 0;
            for (char *p = strtok(argv[++i], ","); p && nt < 8; p = strtok(NULL, ","))
                if (atoi(p) >= 1 && atoi(p) <= MAXT)
                    tlist[nt++] = atoi(p);
        } else if (!strcmp(argv[i], "--shards") && i + 1 < argc)
            cache_shards = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else if (!strcmp(argv[i], "--skip-mix"))
            skip_mix = 1;
        else if (!strcmp(argv[i], "--skip-batch"))
            skip_batch = 1;
        else if (!strcmp(argv[i], "--skip-many"))
            skip_many = 1;
        else {
            fprintf(stderr, "usage: %s [--keys N] [--seconds S] [--reps R] [--threads 1,2,...] "
                            "[--shards N] [--csv FILE] [--skip-mix] [--skip-batch] [--skip-many]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 15)
        reps = 3;
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    nstreams = 1;
    for (int i = 0; i < nt; i++)
        if (tlist[i] > nstreams)
            nstreams = tlist[i];
    make_keys();
    printf("W8 tw_cache: %zu keys, %s (%u shards, no limit), 60 s TTL, %d CPUs online\n", nkeys,
           cache_shards ? "defaults but --shards" : "defaults",
           cache_shards ? cache_shards : tw_cache_default_shards(),
           (int)sysconf(_SC_NPROCESSORS_ONLN));
    /* The batched section's cache, made first: the RSS it adds is then not
     * blurred by the memory of caches freed before it. */
    struct tw_cache *bc = skip_batch ? NULL : make_preloaded_measured(csv);
    if (!skip_mix) {
        for (int writes = 10; writes >= 0; writes -= 10) {
            make_samples(writes);
            struct tw_cache *c = make_cache(NULL);
            preload(c);
            for (int ti = 0; ti < nt; ti++) {
                double ops[15], cpu[15];
                for (int r = 0; r < reps; r++)
                    ops[r] = run_mix(c, tlist[ti], seconds, &cpu[r]);
                double m = median(ops, reps), cm = median(cpu, reps);
                printf("zipf 0.99, %s, %2d thread%s: %7.2f M ops/s, %6.1f CPU ns/op%s\n",
                       writes ? "90/10" : "100/0", tlist[ti], tlist[ti] > 1 ? "s" : " ", m / 1e6,
                       cm,
                       tlist[ti] > (int)sysconf(_SC_NPROCESSORS_ONLN) ? " (oversubscribed)" : "");
                if (csv)
                    fprintf(csv, "twheel,%s,%d,%.0f,%.1f\n", writes ? "90/10" : "100/0",
                            tlist[ti], m, cm);
                fflush(stdout);
            }
            tw_cache_free(c);
        }
    }
    if (!skip_batch) {
        hot_set(reps, seconds, csv);
        struct tw_cache *c = bc;
        static const char *names[4] = {"get", "get_many", "set", "set_many"};
        for (int w = 0; w < 4; w++) {
            double ns = batch_ns(c, w, reps);
            printf("%zu keys, uniform: %-8s %6.1f ns/op of thread CPU time%s\n", nkeys, names[w],
                   ns, w & 1 ? " (batches of 32)" : "");
            if (csv)
                fprintf(csv, "batch,%s,%.1f\n", names[w], ns);
        }
        tw_cache_free(c);
    }
    if (!skip_many) {
        many_caches(csv, 0);
        many_caches(csv, 1);
    }
    if (csv)
        fclose(csv);
    return 0;
}
