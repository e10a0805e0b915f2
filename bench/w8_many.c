/* SPDX-License-Identifier: MIT */
/* W8, many instances: 1,000 runners and 1,000 caches in one process on one
 * shared clock (twheel/clock.h) and one executor pool, against 1,000
 * runners that each start their own tick thread (the way before
 * tw_runner_config.clock).
 *
 *   w8_many [--n N] [--pool-threads T] [--idle-seconds S] [--csv FILE]
 *
 * Reports, for each setup: threads in the process (/proc/self/task, the
 * main thread included), RSS added per idle runner and per idle cache (each
 * holding 10 tasks / 10 keys, due in an hour / a minute), the CPU that the
 * idle process burns over S seconds (the clock thread sleeps until the
 * earliest deadline of all members), then an active phase on the shared
 * clock: every runner fires 100 tasks spread over one second (N * 100 fires)
 * while the caches expire 10 keys each, with the runners' worst lateness and
 * the CPU of the clock's and the pool's threads per fired task. Runners use shards = 1 (many small
 * runners), then the default shard count for the memory figure. Each setup
 * runs in a process of its own (fork), so that one's freed memory does not
 * hide the other's RSS. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "twheel.h"

static long threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    long n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    fclose(f);
    return kb;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

static double thread_cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_THREAD, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static atomic_long fired;

static void on_fire(void *ctx, const struct tw_task *t)
{
    (void)ctx;
    (void)t;
    atomic_fetch_add_explicit(&fired, 1, memory_order_relaxed);
}

static struct tw_runner *make_runner(struct tw_clock *clk, struct tw_pool *pool,
                                     unsigned shards)
{
    struct tw_runner_config cfg = {.execute = on_fire,
                                   .tick_ns = 1000000,
                                   .key_kind = TW_TASKS_KEY_INT,
                                   .shards = shards,
                                   .clock = clk,
                                   .pool = pool};
    struct tw_runner *r;
    if (tw_runner_new(&r, &cfg) != 0) {
        fprintf(stderr, "tw_runner_new failed\n");
        exit(1);
    }
    for (uint64_t k = 0; k < 10; k++)
        tw_runner_set_int(r, k, NULL, INT64_C(3600000000000));
    return r;
}

static struct tw_cache *make_cache(struct tw_clock *clk)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 60000;
    cfg.shards = 1;
    cfg.clock = clk;
    struct tw_cache *c;
    if (tw_cache_new(&c, &cfg) != 0) {
        fprintf(stderr, "tw_cache_new failed\n");
        exit(1);
    }
    for (int k = 0; k < 10; k++) {
        char key[16];
        snprintf(key, sizeof key, "key:%d", k);
        tw_cache_set(c, key, strlen(key), (void *)(uintptr_t)(k + 1));
    }
    return c;
}

/* Each runner fires 100 tasks spread over one second from 300 ms on (set
 * by this thread before the first is due), beside the caches (cs may be NULL), whose 10 keys each are
 * set again with a 1 s TTL. Reports the CPU of every thread but this one
 * (clock, pool or tick threads) per fired task. */
static void active_phase(struct tw_runner **rs, struct tw_cache **cs, int n, const char *label,
                         FILE *csv)
{
    for (int i = 0; i < n; i++)
        tw_runner_drain(rs[i], NULL, NULL); /* the idle tasks go */
    atomic_store(&fired, 0);
    uint64_t seed = 12345;
    double c0 = cpu_s(), m0 = thread_cpu_s();
    for (int i = 0; i < n; i++) {
        for (uint64_t k = 0; k < 100; k++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            /* due from 300 ms on, when the sets are done, over one second */
            tw_runner_set_int(rs[i], 100 + k, NULL,
                              300000000 + (int64_t)((seed >> 33) % 1000000000u));
        }
        for (int k = 0; cs && k < 10; k++) {
            char key[16];
            snprintf(key, sizeof key, "key:%d", k);
            tw_cache_set_ttl(cs[i], key, strlen(key), (void *)(uintptr_t)(k + 1), 1000);
        }
    }
    long want = 100L * n;
    for (int w = 0; w < 1000 && atomic_load(&fired) < want; w++)
        sleep_s(0.01);
    if (cs)
        sleep_s(0.5); /* the caches' keys: 1 s TTL + 1/8 slack */
    double active_cpu = (cpu_s() - c0) - (thread_cpu_s() - m0);
    uint64_t worst = 0, late = 0, left = 0;
    for (int i = 0; i < n; i++) {
        struct tw_runner_stats st;
        tw_runner_stats(rs[i], &st);
        if (st.worst_lateness_ns > worst)
            worst = st.worst_lateness_ns;
        late += st.late;
    }
    for (int i = 0; cs && i < n; i++) {
        struct tw_cache_stats st;
        tw_cache_stats(cs[i], &st);
        left += st.entries;
    }
    printf("%s, active: %ld of %ld tasks fired, %llu late by more than a tick, worst lateness "
           "%.2f ms; cache keys left after TTL + slack: %llu; CPU of the other threads %.0f ns "
           "per fired task; threads %ld\n",
           label, atomic_load(&fired), want, (unsigned long long)late, (double)worst / 1e6,
           (unsigned long long)left, active_cpu * 1e9 / (double)want, threads_now());
    if (csv)
        fprintf(csv, "%s,fired,%ld\n%s,worst_late_ms,%.2f\n%s,cpu_ns_per_fire,%.0f\n", label,
                atomic_load(&fired), label, (double)worst / 1e6, label,
                active_cpu * 1e9 / (double)want);
}

int main(int argc, char **argv)
{
    int n = 1000;
    unsigned pool_threads = 2;
    double idle = 2;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pool-threads") && i + 1 < argc)
            pool_threads = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--idle-seconds") && i + 1 < argc)
            idle = atof(argv[++i]);
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv_path = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--n N] [--pool-threads T] [--idle-seconds S] "
                            "[--csv FILE]\n", argv[0]);
            return 2;
        }
    }
    if (n < 1 || n > 100000 || pool_threads < 1)
        return 2;
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv)
        fprintf(csv, "setup,figure,value\n");
    struct tw_runner **rs = calloc((size_t)n, sizeof *rs);
    struct tw_cache **cs = calloc((size_t)n, sizeof *cs);
    if (!rs || !cs)
        return 1;

    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0) { /* the parent runs "before" once the child is done */
        int status;
        waitpid(pid, &status, 0);
        goto own;
    }
    /* ---- shared: one clock, one pool ---- */
    long th0 = threads_now(), kb0 = rss_kb();
    struct tw_clock *clk;
    struct tw_pool *pool;
    if (tw_clock_new(&clk, NULL) || tw_pool_new(&pool, pool_threads, NULL))
        return 1;
    long kb1 = rss_kb();
    for (int i = 0; i < n; i++)
        rs[i] = make_runner(clk, pool, 1);
    long kb2 = rss_kb();
    for (int i = 0; i < n; i++)
        cs[i] = make_cache(clk);
    long kb3 = rss_kb(), th1 = threads_now();
    double c0 = cpu_s();
    sleep_s(idle);
    double idle_cpu = (cpu_s() - c0) / idle;
    printf("shared clock: %d runners (shards 1) + %d caches (shards 1), pool of %u: %ld threads "
           "in the process (%ld before: main), %.1f KB RSS per idle runner, %.1f KB per idle "
           "cache, idle CPU %.4f%% of a core over %.0f s\n",
           n, n, pool_threads, th1, th0, (double)(kb2 - kb1) / n, (double)(kb3 - kb2) / n,
           100.0 * idle_cpu, idle);
    if (csv)
        fprintf(csv, "shared,threads,%ld\nshared,kb_per_runner,%.1f\nshared,kb_per_cache,%.1f\n"
                     "shared,idle_cpu_pct,%.4f\n",
                th1, (double)(kb2 - kb1) / n, (double)(kb3 - kb2) / n, 100.0 * idle_cpu);

    active_phase(rs, cs, n, "shared", csv);
    for (int i = 0; i < n; i++) {
        tw_runner_free(rs[i]);
        tw_cache_free(cs[i]);
    }

    /* default shard count, for the memory figure */
    long kb4 = rss_kb();
    for (int i = 0; i < n; i++)
        rs[i] = make_runner(clk, pool, 0);
    long kb5 = rss_kb();
    struct tw_runner_stats st;
    tw_runner_stats(rs[0], &st);
    printf("shared clock, runners with the default %u shards: %.1f KB RSS per idle runner\n",
           st.shards, (double)(kb5 - kb4) / n);
    if (csv)
        fprintf(csv, "shared,kb_per_runner_default_shards,%.1f\n", (double)(kb5 - kb4) / n);
    for (int i = 0; i < n; i++)
        tw_runner_free(rs[i]);
    tw_pool_free(pool);
    tw_clock_free(clk);
    (void)kb0;
    if (csv)
        fclose(csv);
    fflush(stdout);
    _exit(0);
own:
    if (csv)
        csv = fopen(csv_path, "a");

    /* ---- before: each runner with its own tick thread ---- */
    long th2 = threads_now(), kb6 = rss_kb();
    for (int i = 0; i < n; i++) {
        struct tw_runner_config cfg = {.execute = on_fire,
                                       .tick_ns = 1000000,
                                       .key_kind = TW_TASKS_KEY_INT,
                                       .shards = 1};
        if (tw_runner_new(&rs[i], &cfg) != 0) {
            printf("own threads: runner %d failed (thread limit?)\n", i);
            n = i;
            break;
        }
        for (uint64_t k = 0; k < 10; k++)
            tw_runner_set_int(rs[i], k, NULL, INT64_C(3600000000000));
    }
    long kb7 = rss_kb(), th3 = threads_now();
    c0 = cpu_s();
    sleep_s(idle);
    idle_cpu = (cpu_s() - c0) / idle;
    printf("own tick threads: %d runners (shards 1, workers 0): %ld threads (%ld before), "
           "%.1f KB RSS per idle runner, idle CPU %.4f%% of a core\n",
           n, th3, th2, n ? (double)(kb7 - kb6) / n : 0.0, 100.0 * idle_cpu);
    if (csv)
        fprintf(csv, "own,threads,%ld\nown,kb_per_runner,%.1f\nown,idle_cpu_pct,%.4f\n", th3,
                n ? (double)(kb7 - kb6) / n : 0.0, 100.0 * idle_cpu);
    active_phase(rs, NULL, n, "own tick threads", csv);
    for (int i = 0; i < n; i++)
        tw_runner_free(rs[i]);
    free(rs);
    free(cs);
    if (csv)
        fclose(csv);
    return 0;
}
