/* SPDX-License-Identifier: MIT */
/* Several worker processes share one queue on a real redis-server; one of them
 * is SIGKILLed mid-run.
 *
 * N tasks (1e5; $TWHEEL_REDIS_TEST_N, a fifth under sanitizers) are set in
 * pipelined batches over about two seconds, due 0.2-8.2 s after their set;
 * three redis_worker processes (2 executor threads each, 2 s leases, 0.2 ms
 * in execute, so a kill finds work in flight) record every delivery; worker 0 is SIGKILLed 1.5 s in. Then:
 *  - every task is delivered (none lost), none before its due time by the
 *    Redis clock, none reported with a due time earlier than it was set for;
 *  - a task delivered twice was delivered again only once its lease could
 *    have run out (counted and printed, with how many of them the killed
 *    worker had started);
 *  - nothing stays pending; the surviving workers stop cleanly (exit 0).
 * And the verdict's own rule for a duplicate, on records written by hand.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "twheel/redis.h"

#ifndef RFX_WORKER_PATH
#error "RFX_WORKER_PATH: the redis_worker binary"
#endif

#define NWORKERS 3
#define LEASE_MS 2000
#define WINDOW_MS 1000
#define BATCH 500
#define DEADLINE_MS 50000

static uint64_t load_all(struct rdel_set *s, char out[][300], uint64_t n)
{
    rdel_free(s);
    for (int w = 0; w < NWORKERS; w++)
        rdel_load(s, out[w], "t:", n);
    return rdel_count_ids(s, n);
}

static void test_kill_one_worker(void)
{
    const uint64_t n = rw_test_size(100000);
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    char out[NWORKERS][300];
    pid_t pid[NWORKERS] = {0};
    for (int w = 0; w < NWORKERS; w++) {
        snprintf(out[w], sizeof out[w], "%s/deliveries.%d", srv.dir, w);
        struct rw_opts o = {.servers = rfx_addr(&srv), .queue = "wk", .out = out[w],
                            .threads = 2, .lease_ms = LEASE_MS, .window_ms = WINDOW_MS,
                            .exec_us = 200};
        CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid[w], NULL), 0);
    }

    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.queue = "wk";
    struct tw_redis *client = NULL;
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    redisContext *tc = rfx_connect(&srv);
    uint64_t *due_lo = calloc(n, sizeof *due_lo);
    int64_t *delays = malloc(n * sizeof *delays);
    CHECK(client && tc && due_lo && delays);
    if (!client || !tc || !due_lo || !delays)
        goto out;

    srand(7);
    for (uint64_t i = 0; i < n; i++)
        delays[i] = 200 + rand() % 8000;
    uint64_t start = rfx_mono_ms(), set_ok = 0;
    const pid_t victim = pid[0];
    bool killed = false;
    /* spread the sets over ~2 s */
    for (uint64_t i = 0; i < n; i += BATCH) {
        size_t k = n - i < BATCH ? (size_t)(n - i) : BATCH;
        int rc = rw_set_range(client, tc, "t:", i, k, delays + i, due_lo);
        CHECK_EQ_INT(rc, (int)k);
        if (rc == (int)k)
            set_ok += k;
        uint64_t target = start + (i + k) * 2000 / n;
        uint64_t now = rfx_mono_ms();
        if (now < target)
            rfx_sleep_ms((unsigned)(target - now));
        if (!killed && rfx_mono_ms() - start >= 1500) {
            CHECK_EQ_INT(rfx_signal(victim, SIGKILL), 0);
            CHECK_EQ_INT(rfx_wait(victim, 5000, NULL), 0);
            pid[0] = 0;
            killed = true;
        }
    }
    if (!killed) {
        CHECK_EQ_INT(rfx_signal(victim, SIGKILL), 0);
        CHECK_EQ_INT(rfx_wait(victim, 5000, NULL), 0);
        pid[0] = 0;
    }
    CHECK_EQ_U64(set_ok, n);
    printf("set %" PRIu64 " tasks in %" PRIu64 " ms; worker %d SIGKILLed\n", n,
           rfx_mono_ms() - start, (int)victim);

    struct rdel_set d = {0};
    uint64_t got = 0, deadline = rfx_mono_ms() + DEADLINE_MS;
    uint64_t last_print = rfx_mono_ms();
    while ((got = load_all(&d, out, n)) < n && rfx_mono_ms() < deadline) {
        if (rfx_mono_ms() - last_print >= 5000) {
            last_print = rfx_mono_ms();
            printf("  %" PRIu64 " ms: %" PRIu64 " of %" PRIu64 " delivered\n",
                   last_print - start, got, n);
            fflush(stdout);
        }
        rfx_sleep_ms(500);
    }
    struct tw_redis_stats st = {0};
    do {
        CHECK_EQ_INT(tw_redis_stats(client, &st), 0);
        if (st.pending == 0)
            break;
        rfx_sleep_ms(100);
    } while (rfx_mono_ms() < deadline);
    CHECK_EQ_U64(st.pending, 0);
    printf("all delivered after %" PRIu64 " ms\n", rfx_mono_ms() - start);
    for (int w = 1; w < NWORKERS; w++) {
        CHECK_EQ_INT(rw_stop(pid[w], 10000), 0);
        pid[w] = 0;
    }
    got = load_all(&d, out, n);
    CHECK_EQ_U64(d.bad_lines, 0);

    struct rverdict v;
    CHECK_EQ_INT(rverdict_compute(&d, n, NULL, due_lo, LEASE_MS, WINDOW_MS, &v), 0);
    rverdict_print(&v, "workers");
    CHECK_EQ_U64(v.missing, 0);
    CHECK_EQ_U64(v.early, 0);
    CHECK_EQ_U64(v.unexplained, 0);
    /* a duplicate's first delivery was the killed worker's */
    uint64_t dup_not_killed = 0, by_killed = 0;
    for (size_t i = 0; i < d.n; i++) {
        by_killed += d.v[i].pid == victim;
        bool first = i == 0 || d.v[i - 1].id != d.v[i].id;
        bool has_dup = i + 1 < d.n && d.v[i + 1].id == d.v[i].id;
        if (first && has_dup && d.v[i].pid != victim)
            dup_not_killed++;
    }
    /* A survivor's lease can run out too on a loaded machine (a start or an
     * ack held up past lease_ms): allowed, as long as the lease had run out
     * (v.unexplained above); counted apart. */
    printf("killed worker delivered %" PRIu64 " before it died; %" PRIu64
           " delivered twice (%" PRIu64 " first by a surviving worker)\n", by_killed,
           v.duplicates, dup_not_killed);
    rdel_free(&d);
out:
    for (int w = 0; w < NWORKERS; w++)
        if (pid[w] > 0)
            rfx_reap(pid[w]);
    free(due_lo);
    free(delays);
    if (tc)
        redisFree(tc);
    tw_redis_free(client);
    rfx_stop(&srv);
}

/* A redelivery is explained by the end of the lease the previous START
 * granted (the record's lease_end_ms), not by that delivery's execute start
 * + lease_ms: an execute that began 500 ms after its START makes the second
 * delivery, correct at the lease's end, look early by the start's rule.
 * Records without the field (the poll mode's, or older files) keep that rule. */
static void test_verdict_lease_end(void)
{
    char path[] = "/tmp/twheel-verdict-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    /* "a": START at 10,000 ms granted a lease to 12,000, execute began at
     * 10,500; the next holder started at 12,100. "b": the same records
     * without lease_end_ms. */
    const char *text = "a0 1 10000 10500000 7 12000\n"
                       "a0 2 10000 12100000 8 12100\n"
                       "b0 1 10000 10500000 7\n"
                       "b0 2 10000 12100000 8\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    struct rdel_set a = {0}, b = {0};
    CHECK_EQ_INT(rdel_load(&a, path, "a", 1), 0);
    CHECK_EQ_INT(rdel_load(&b, path, "b", 1), 0);
    unlink(path);
    CHECK_EQ_U64(a.n, 2);
    CHECK_EQ_U64(b.n, 2);
    struct rverdict v;
    /* by the lease's end, less 200 ms of slack (11,800): explained */
    CHECK_EQ_INT(rverdict_compute(&a, 1, NULL, NULL, 2000, 2000, &v), 0);
    CHECK_EQ_U64(v.duplicates, 1);
    CHECK_EQ_U64(v.unexplained, 0);
    /* by execute's start + lease_ms, less the slack (12,300): unexplained */
    CHECK_EQ_INT(rverdict_compute(&b, 1, NULL, NULL, 2000, 2000, &v), 0);
    CHECK_EQ_U64(v.duplicates, 1);
    CHECK_EQ_U64(v.unexplained, 1);
    rdel_free(&a);
    rdel_free(&b);
}

int main(void)
{
    RUN(test_verdict_lease_end);
    RUN(test_kill_one_worker);
    return test_summary();
}
