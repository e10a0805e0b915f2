/* SPDX-License-Identifier: MIT */
/* redis-server (appendonly yes, appendfsync always) is SIGKILLed and
 * restarted on the same port and directory while tasks are pending and being
 * set.
 *
 * Timeline (ms): a batch of seeded tasks due at 2000-3800 (inside the
 * downtime, beyond the worker's 300 ms window at the kill); from the end of
 * that batch:
 * 0-6000 single sets one after the other, due 0-1500 ms after their set;
 * 1500 SIGKILL; 4000 restart. One worker with one executor thread records
 * its deliveries. Then:
 *  - every set that returned 0 is delivered (nothing acknowledged is lost),
 *    none early, duplicates only after a lease could have run out;
 *  - the tasks due during the downtime (past the window held at the kill,
 *    the window more that a worker with a slow execute takes shares of,
 *    and the one due bucket a claim may take past those)
 *    are delivered after the restart, in due order: not one inversion (they
 *    are printed). Tasks the worker held at the kill (due within its window)
 *    are the exception redis.h states: they come back as their STARTs are
 *    retried or their leases end, so they are left out.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <inttypes.h>
#include <stdlib.h>

#include "twheel/redis.h"

#ifndef RFX_WORKER_PATH
#error "RFX_WORKER_PATH: the redis_worker binary"
#endif

#define LEASE_MS 2000
#define WINDOW_MS 300
#define BUCKET_MS 500 /* src/redis/internal.h: TW_RR_BUCKET_MS */
#define KILL_AT 1500
#define RESTART_AT 4000
#define SET_UNTIL 6000
#define DEADLINE_MS 40000

static uint64_t now_ms(void)
{
    return rfx_realtime_us() / 1000u;
}

static void test_restart_under_load(void)
{
    const uint64_t seeds = rw_test_size(10000) / 5; /* 2000, 400 under sanitizers */
    const uint64_t cap = seeds + 30000;              /* ids: seeds, then single sets */
    struct rfx_server srv;
    struct rfx_options so = {.appendonly = true, .appendfsync = "always"};
    CHECK_EQ_INT(rfx_start(&srv, &so), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    char out[300];
    snprintf(out, sizeof out, "%s/deliveries", srv.dir);
    pid_t pid = 0;
    struct rw_opts o = {.servers = rfx_addr(&srv), .queue = "rs", .out = out, .threads = 1,
                        .lease_ms = LEASE_MS, .window_ms = WINDOW_MS};
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid, NULL), 0);

    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.queue = "rs";
    cfg.connect_timeout_ms = 200;
    cfg.command_timeout_ms = 300;
    struct tw_redis *client = NULL;
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    uint64_t *due_lo = calloc(cap, sizeof *due_lo);
    bool *acked = calloc(cap, sizeof *acked);
    int64_t *delays = malloc(seeds * sizeof *delays);
    CHECK(client && due_lo && acked && delays);
    if (!client || !due_lo || !acked || !delays)
        goto out;

    srand(11);
    for (uint64_t i = 0; i < seeds; i++)
        delays[i] = 2000 + rand() % 1800;
    uint64_t t0 = now_ms();
    CHECK_EQ_INT(rw_set_range(client, NULL, "t:", 0, (size_t)seeds, delays, NULL), (int)seeds);
    /* the timeline counts from the end of the seeding (a few ms) */
    uint64_t start = rfx_mono_ms();
    for (uint64_t i = 0; i < seeds; i++) {
        due_lo[i] = t0 + (uint64_t)delays[i]; /* Redis TIME is this clock */
        acked[i] = true;
    }

    uint64_t id = seeds, ok = 0, failed = 0, kill_ms = 0, restart_ms = 0;
    bool killed = false, restarted = false;
    while (id < cap && rfx_mono_ms() - start < SET_UNTIL) {
        uint64_t el = rfx_mono_ms() - start;
        if (!killed && el >= KILL_AT) {
            kill_ms = now_ms();
            CHECK_EQ_INT(rfx_kill(&srv), 0);
            killed = true;
        }
        if (killed && !restarted && el >= RESTART_AT) {
            restart_ms = now_ms();
            CHECK_EQ_INT(rfx_restart(&srv), 0);
            restarted = true;
        }
        char key[32];
        int kl = snprintf(key, sizeof key, "t:%" PRIu64, id);
        int64_t delay = rand() % 1500;
        uint64_t before = now_ms();
        int rc = tw_redis_set(client, key, (size_t)kl, "0123456789abcdef0123456789abcdef", 32,
                              delay);
        due_lo[id] = before + (uint64_t)delay;
        if (rc == 0) {
            acked[id] = true;
            ok++;
        } else {
            CHECK(rc == TW_EIO);
            failed++;
            rfx_sleep_ms(20);
        }
        id++;
        rfx_sleep_ms(1);
    }
    CHECK(killed && restarted);
    printf("seeded %" PRIu64 "; single sets: %" PRIu64 " acknowledged, %" PRIu64
           " refused (TW_EIO) while Redis was down %" PRIu64 " ms\n",
           seeds, ok, failed, restart_ms - kill_ms);
    CHECK(failed > 0);

    struct rdel_set d = {0};
    uint64_t deadline = rfx_mono_ms() + DEADLINE_MS;
    for (;;) {
        rdel_free(&d);
        rdel_load(&d, out, "t:", id);
        struct rverdict v;
        if (rverdict_compute(&d, id, acked, NULL, LEASE_MS, WINDOW_MS, &v) == 0 &&
            v.missing == 0)
            break;
        if (rfx_mono_ms() > deadline)
            break;
        rfx_sleep_ms(300);
    }
    struct tw_redis_stats st = rw_wait_drained(client, deadline);
    CHECK_EQ_U64(st.pending, 0);
    CHECK_EQ_INT(rw_stop(pid, 10000), 0);
    pid = 0;
    rdel_free(&d);
    rdel_load(&d, out, "t:", id);
    CHECK_EQ_U64(d.bad_lines, 0);
    struct rverdict v;
    CHECK_EQ_INT(rverdict_compute(&d, id, acked, due_lo, LEASE_MS, WINDOW_MS, &v), 0);
    rverdict_print(&v, "restart");
    CHECK_EQ_U64(v.missing, 0);
    CHECK_EQ_U64(v.early, 0);
    CHECK_EQ_U64(v.unexplained, 0);

    /* Catch-up: first deliveries of tasks due during the downtime, beyond the
     * window held at the kill (a claim takes whole due buckets: up to one
     * bucket, TW_RR_BUCKET_MS, past the window; and a worker whose execute
     * is slow, as a busy machine can make this one's, shares of the buckets
     * up to one more window past it: src/redis/claim.c, Sharing), in the
     * order the single executor started them. */
    struct rdel *cu = malloc((d.n ? d.n : 1) * sizeof *cu);
    CHECK(cu != NULL);
    size_t ncu = 0;
    for (size_t i = 0; cu && i < d.n; i++) {
        bool first = i == 0 || d.v[i - 1].id != d.v[i].id;
        if (first && d.v[i].due_ms >= kill_ms + 2 * WINDOW_MS + BUCKET_MS + 100 &&
            d.v[i].due_ms < restart_ms)
            cu[ncu++] = d.v[i];
    }
    uint64_t before_restart = 0, inversions = 0;
    for (size_t i = 0; i < ncu; i++)
        if (cu[i].start_us < restart_ms * 1000u)
            before_restart++;
    /* order by start (the file's order for one executor thread) */
    for (size_t i = 1; i < ncu; i++) {
        struct rdel x = cu[i];
        size_t j = i;
        while (j > 0 && cu[j - 1].seq > x.seq) {
            cu[j] = cu[j - 1];
            j--;
        }
        cu[j] = x;
    }
    for (size_t i = 1; i < ncu; i++)
        if (cu[i].due_ms < cu[i - 1].due_ms && inversions++ < 5)
            printf("  out of order: t:%" PRIu64 " due %" PRIu64 " started %+.1f ms after the"
                   " restart, after t:%" PRIu64 " due %" PRIu64 " (+%" PRIu64 " ms)\n",
                   cu[i].id, cu[i].due_ms, cu[i].start_us / 1000.0 - (double)restart_ms,
                   cu[i - 1].id, cu[i - 1].due_ms, cu[i - 1].due_ms - cu[i].due_ms);
    printf("catch-up: %zu tasks due during the downtime; %" PRIu64
           " started before the restart, %" PRIu64 " out of due order\n",
           ncu, before_restart, inversions);
    /* not empty: about 60% of the seeds are due past the held zone, and some sets */
    CHECK(ncu >= seeds / 4);
    CHECK_EQ_U64(before_restart, 0);
    /* Due order, strictly. (It used to fail 1 run in 2-6 with one block of
     * a few partitions' tasks late: a claim round that straddled the
     * restart; see "Catch-up after Redis comes back" in src/redis/claim.c.) */
    CHECK_EQ_U64(inversions, 0);
    free(cu);
    rdel_free(&d);
out:
    if (pid > 0)
        rfx_reap(pid);
    free(due_lo);
    free(acked);
    free(delays);
    tw_redis_free(client);
    rfx_stop(&srv);
}

int main(void)
{
    RUN(test_restart_under_load);
    return test_summary();
}
