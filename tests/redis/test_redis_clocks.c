/* SPDX-License-Identifier: MIT */
/* Clocks: the lateness the stats report, and never early with a worker
 * clock that runs fast.
 *
 * test_stats_lateness: an in-process worker runs 1,500 tasks (1,000 under
 * sanitizers) due over 3 s; execute reads CLOCK_REALTIME and subtracts the
 * due time (the server runs on this host, so its TIME is this clock). The
 * median and p99 that tw_redis_stats reports must match what execute saw
 * within LATE_TOL: an eighth of the value (the histogram's buckets are an
 * eighth of a power of two wide, and report their top) plus LATE_TOL_US,
 * plus what the machine explains in the same run (machine_stall.h): the
 * layer estimates the server's clock at execute from its START round's send
 * and reply, and a thread kept from a CPU around them widens that estimate.
 * Once on a plain server, once on one with `appendfsync always`, where a
 * reply waits for the fsync after the script read the server's clock.
 *
 * test_fast_clock: a redis_worker process whose clocks run 0.1% fast
 * (libfaketime, FAKETIME="+0 x1.001", CLOCK_MONOTONIC faked too, so its
 * waits end early by 0.1% of their length), starting tasks 250 ms ahead (the
 * longest wait after START it may take); 1,000 tasks due over 3 s. None may
 * start before its due time by the real clock (the worker records the
 * kernel's CLOCK_REALTIME through the raw system call, which libfaketime does
 * not fake). The worker reports how fast its CLOCK_MONOTONIC really ran, so
 * a libfaketime that did not speed it up fails the test rather than passing
 * it unseen. Skipped (77) when libfaketime is not installed (Debian:
 * faketime; scripts/test-all installs it), and in ASan and TSan builds:
 * libfaketime's constructor calls dlsym before the sanitizer's statically
 * linked runtime is set up, whose interceptors then wait for that set-up
 * forever (a sanitized hello-world hangs the same way); the gcc build runs
 * it. $TW_FAST_CLOCK_RATE sets another rate (1.05: a clock outside the
 * contract, to see the test catch it).
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "machine_stall.h"
#include "test.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "twheel/redis.h"

#ifndef RFX_WORKER_PATH
#error "RFX_WORKER_PATH: the redis_worker binary"
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CLOCKS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CLOCKS_SANITIZED 1
#endif
#endif
#ifndef CLOCKS_SANITIZED
#define CLOCKS_SANITIZED 0
#endif

static int skipped;

/* ---- the lateness in stats ------------------------------------------------------ */

#define LATE_N 1500
#define LATE_FIRST_MS 1500
#define LATE_SPREAD_MS 3000
#define LATE_TOL_US 50

struct lrec {
    pthread_mutex_t mu;
    size_t n, cap;
    int64_t *late_us; /* CLOCK_REALTIME in execute - due */
};

static enum tw_redis_result lrec_exec(void *arg, const struct tw_redis_task *t)
{
    uint64_t now = rfx_realtime_us();
    struct lrec *R = arg;
    pthread_mutex_lock(&R->mu);
    if (R->n < R->cap)
        R->late_us[R->n++] = (int64_t)now - (int64_t)(t->due_ms * 1000u);
    pthread_mutex_unlock(&R->mu);
    return TW_REDIS_DONE;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile as tw_redis_stats ranks it: the ceil(n * q)-th smallest. */
static int64_t rank_of(const int64_t *v, size_t n, double q)
{
    size_t want = (size_t)((double)n * q + 0.999999);
    return v[(want ? want : 1) - 1];
}

static bool within(uint64_t stat, int64_t seen, uint64_t explained_us)
{
    uint64_t e = seen > 0 ? (uint64_t)seen : 0;
    uint64_t d = stat > e ? stat - e : e - stat;
    return d <= e / 8 + LATE_TOL_US + explained_us;
}

static void late_run(const char *label, const struct rfx_options *so)
{
    const uint64_t n = rw_test_size(LATE_N);
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, so), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    struct lrec R = {.cap = n};
    pthread_mutex_init(&R.mu, NULL);
    R.late_us = calloc(n, sizeof *R.late_us);
    int64_t *delays = malloc(n * sizeof *delays);
    struct tw_redis *worker = NULL;
    CHECK(R.late_us && delays);
    if (!R.late_us || !delays)
        goto out;
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.queue = "ls";
    cfg.execute = lrec_exec;
    cfg.arg = &R;
    cfg.threads = 2;
    CHECK_EQ_INT(tw_redis_new(&worker, &cfg), 0);
    if (!worker)
        goto out;
    for (uint64_t i = 0; i < n; i++)
        delays[i] = LATE_FIRST_MS + (int64_t)(i * LATE_SPREAD_MS / n);
    pid_t peers[1] = {srv.pid};
    struct mstall machine;
    mstall_start(&machine, peers, 1);
    CHECK_EQ_INT(rw_set_range(worker, NULL, "s:", 0, n, delays, NULL), (int)n);
    uint64_t end = rfx_mono_ms() + LATE_FIRST_MS + LATE_SPREAD_MS + 20000;
    for (;;) {
        pthread_mutex_lock(&R.mu);
        size_t got = R.n;
        pthread_mutex_unlock(&R.mu);
        if (got == n || rfx_mono_ms() > end)
            break;
        rfx_sleep_ms(50);
    }
    mstall_stop(&machine);
    mstall_print(&machine, label);
    uint64_t explained_us = (uint64_t)(machine.explained_ms * 1000.0);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(worker, &st), 0);
    CHECK_EQ_INT(tw_redis_stop(worker), 0);
    CHECK_EQ_U64(R.n, n);
    if (R.n == 0)
        goto out;
    qsort(R.late_us, R.n, sizeof *R.late_us, cmp_i64);
    int64_t e50 = rank_of(R.late_us, R.n, 0.5), e99 = rank_of(R.late_us, R.n, 0.99);
    printf("%s: lateness in execute p50 %.3f ms p99 %.3f ms (min %.3f); tw_redis_stats p50 %.3f "
           "ms p99 %.3f ms (tolerance an eighth + %d us)\n",
           label, (double)e50 / 1000.0, (double)e99 / 1000.0, (double)R.late_us[0] / 1000.0,
           (double)st.late_p50_us / 1000.0, (double)st.late_p99_us / 1000.0, LATE_TOL_US);
    CHECK(R.late_us[0] >= 0); /* never early, by this host's clock */
    CHECK(within(st.late_p50_us, e50, explained_us));
    CHECK(within(st.late_p99_us, e99, explained_us));
out:
    tw_redis_free(worker);
    pthread_mutex_destroy(&R.mu);
    free(R.late_us);
    free(delays);
    rfx_stop(&srv);
}

static void test_stats_lateness(void)
{
    late_run("plain server", NULL);
    struct rfx_options aof = {.appendonly = true, .appendfsync = "always"};
    late_run("appendfsync always", &aof);
}

/* ---- a worker clock running fast ---------------------------------------------------- */

#define FAST_N 1000
#define FAST_FIRST_MS 1500
#define FAST_SPREAD_MS 3000
#define FAST_AHEAD_MS 250

static const char *faketime_lib(void)
{
    static const char *const paths[] = {
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/lib64/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    };
    const char *e = getenv("TW_LIBFAKETIME");
    if (e && *e)
        return access(e, R_OK) == 0 ? e : NULL;
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if (access(paths[i], R_OK) == 0)
            return paths[i];
    return NULL;
}

static double stats_double(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char k[64];
    double v, found = -1;
    while (fscanf(f, "%63s %lf", k, &v) == 2)
        if (!strcmp(k, name))
            found = v;
    fclose(f);
    return found;
}

static void test_fast_clock(void)
{
    const char *lib = faketime_lib();
    if (!lib || CLOCKS_SANITIZED) {
        printf("%s: skipped\n", lib ? "libfaketime hangs a sanitized worker (see the top)"
                                    : "libfaketime not found (Debian package faketime)");
        skipped = 1;
        return;
    }
    const char *rate = getenv("TW_FAST_CLOCK_RATE");
    if (!rate || !*rate)
        rate = "1.001";
    const uint64_t n = rw_test_size(FAST_N);
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    char preload[300], faketime[64], out[300], stats[300];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib);
    snprintf(faketime, sizeof faketime, "FAKETIME=+0 x%s", rate);
    const char *prefix[] = {"/usr/bin/env", "-u",     "FAKETIME_DONT_FAKE_MONOTONIC",
                            preload,        faketime, NULL};
    snprintf(out, sizeof out, "%s/deliveries", srv.dir);
    snprintf(stats, sizeof stats, "%s/stats", srv.dir);
    struct rw_opts o = {.servers = rfx_addr(&srv),
                        .queue = "fc",
                        .out = out,
                        .stats = stats,
                        .threads = 2,
                        .ahead_ms = FAST_AHEAD_MS,
                        .prefix = prefix};
    pid_t pid = 0;
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid, NULL), 0);
    const char *servers[] = {rfx_addr(&srv)};
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.queue = "fc";
    struct tw_redis *client = NULL;
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    redisContext *tc = rfx_connect(&srv);
    int64_t *delays = malloc(n * sizeof *delays);
    uint64_t *due_lo = calloc(n, sizeof *due_lo);
    struct rdel_set d = {0};
    CHECK(client && tc && delays && due_lo);
    if (!client || !tc || !delays || !due_lo)
        goto out;
    rfx_sleep_ms(500); /* the worker connects */
    for (uint64_t i = 0; i < n; i++)
        delays[i] = FAST_FIRST_MS + (int64_t)(i * FAST_SPREAD_MS / n);
    CHECK_EQ_INT(rw_set_range(client, tc, "c:", 0, n, delays, due_lo), (int)n);
    uint64_t end = rfx_mono_ms() + FAST_FIRST_MS + FAST_SPREAD_MS + 20000;
    for (;;) {
        rdel_free(&d);
        rdel_load(&d, out, "c:", n);
        if (rdel_count_ids(&d, n) == n || rfx_mono_ms() > end)
            break;
        rfx_sleep_ms(100);
    }
    CHECK_EQ_INT(rw_stop(pid, 10000), 0);
    pid = 0;
    rdel_free(&d);
    rdel_load(&d, out, "c:", n);
    int64_t closest = INT64_MAX;
    for (size_t i = 0; i < d.n; i++) {
        int64_t m = (int64_t)d.v[i].start_us - (int64_t)(d.v[i].due_ms * 1000u);
        if (m < closest)
            closest = m;
    }
    double seen = stats_double(stats, "clock_rate");
    struct rverdict v;
    CHECK_EQ_INT(rverdict_compute(&d, n, NULL, due_lo, 30000, 2000, &v), 0);
    rverdict_print(&v, "fast clock");
    printf("worker clock ran x%.6f against the kernel's (asked: x%s); the earliest start was "
           "%.3f ms after its due time\n",
           seen, rate, (double)closest / 1000.0);
    CHECK(seen >= strtod(rate, NULL) - 0.0002); /* libfaketime did speed its clock up */
    CHECK_EQ_U64(v.missing, 0);
    CHECK_EQ_U64(v.early, 0);
out:
    rdel_free(&d);
    if (pid > 0)
        rfx_reap(pid);
    free(delays);
    free(due_lo);
    if (tc)
        redisFree(tc);
    tw_redis_free(client);
    rfx_stop(&srv);
}

int main(void)
{
    RUN(test_stats_lateness);
    RUN(test_fast_clock);
    int rc = test_summary();
    return rc == 0 && skipped ? TEST_SKIPPED : rc;
}
