/* SPDX-License-Identifier: MIT */
/* A three-master Redis Cluster, three worker processes, one slot migrated
 * mid-run.
 *
 * N tasks (3e4; $TWHEEL_REDIS_TEST_N, a fifth under sanitizers) are set in
 * pipelined batches over two seconds, due 0.3-4.3 s after their set, through
 * a client seeded with every node. Once the first batches are in, every
 * master must hold keys of the queue (the partitions' hash tags spread it).
 * One second in, a slot of master 0 that holds queue keys is migrated to
 * master 1 (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while the
 * workers claim and the client sets: the layer must follow MOVED/ASK. Then:
 * every task delivered, none early, duplicates only after an expired lease,
 * nothing pending, the workers stop cleanly.
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

#define NWORKERS 3
#define LEASE_MS 2000
#define WINDOW_MS 1000
#define BATCH 250
#define DEADLINE_MS 45000

static void test_cluster_migrate_midrun(void)
{
    const uint64_t n = rw_test_size(30000);
    struct rfx_cluster c;
    CHECK_EQ_INT(rfx_cluster_start(&c, 3), 0);
    if (c.n != 3)
        return;
    char seeds[3 * 32];
    snprintf(seeds, sizeof seeds, "%s,%s,%s", c.addrs[0], c.addrs[1], c.addrs[2]);
    char out[NWORKERS][300];
    pid_t pid[NWORKERS] = {0};
    for (int w = 0; w < NWORKERS; w++) {
        snprintf(out[w], sizeof out[w], "%s/deliveries.%d", c.node[0].dir, w);
        struct rw_opts o = {.servers = seeds, .queue = "cl", .out = out[w], .threads = 2,
                            .partitions = 16, .lease_ms = LEASE_MS, .window_ms = WINDOW_MS};
        CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid[w], NULL), 0);
    }
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = c.addrs;
    cfg.nservers = 3;
    cfg.queue = "cl";
    cfg.partitions = 16;
    struct tw_redis *client = NULL;
    CHECK_EQ_INT(tw_redis_new(&cfg, &client), 0);
    uint64_t *due_lo = calloc(n, sizeof *due_lo);
    int64_t *delays = malloc(n * sizeof *delays);
    CHECK(client && due_lo && delays);
    if (!client || !due_lo || !delays)
        goto out;

    srand(5);
    for (uint64_t i = 0; i < n; i++)
        delays[i] = 300 + rand() % 4000;
    uint64_t start = rfx_mono_ms(), set_ok = 0;
    bool spread_checked = false, migrated = false;
    int slot = -1;
    for (uint64_t i = 0; i < n; i += BATCH) {
        size_t k = n - i < BATCH ? (size_t)(n - i) : BATCH;
        uint64_t t0 = rfx_realtime_us() / 1000u;
        int rc = rw_set_range(client, NULL, "t:", i, k, delays + i, NULL);
        for (size_t j = 0; j < k; j++)
            due_lo[i + j] = t0 + (uint64_t)delays[i + j];
        CHECK_EQ_INT(rc, (int)k);
        if (rc == (int)k)
            set_ok += k;
        if (!spread_checked && i + k >= 4 * BATCH) {
            spread_checked = true;
            for (size_t m = 0; m < 3; m++) {
                uint64_t keys = 0;
                CHECK_EQ_INT(rfx_dbsize(&c.node[m], &keys), 0);
                printf("master %zu (%s) holds %" PRIu64 " keys\n", m, c.addrs[m], keys);
                CHECK(keys > 0);
            }
        }
        if (!migrated && rfx_mono_ms() - start >= 1000) {
            migrated = true;
            slot = rfx_cluster_busy_slot(&c, 0);
            CHECK(slot >= 0);
            if (slot >= 0) {
                uint64_t t = rfx_mono_ms();
                CHECK_EQ_INT(rfx_cluster_migrate_slot(&c, (unsigned)slot, 1), 0);
                CHECK_EQ_INT(rfx_cluster_owner(&c, (unsigned)slot), 1);
                printf("slot %d migrated from master 0 to master 1 in %" PRIu64 " ms\n", slot,
                       rfx_mono_ms() - t);
            }
        }
        uint64_t target = start + (i + k) * 2000 / n, now = rfx_mono_ms();
        if (now < target)
            rfx_sleep_ms((unsigned)(target - now));
    }
    CHECK(migrated);
    CHECK_EQ_U64(set_ok, n);

    struct rdel_set d = {0};
    uint64_t deadline = rfx_mono_ms() + DEADLINE_MS;
    for (;;) {
        rdel_free(&d);
        for (int w = 0; w < NWORKERS; w++)
            rdel_load(&d, out[w], "t:", n);
        if (rdel_count_ids(&d, n) == n || rfx_mono_ms() > deadline)
            break;
        rfx_sleep_ms(300);
    }
    struct tw_redis_stats st = rw_wait_drained(client, deadline);
    CHECK_EQ_U64(st.pending, 0);
    for (int w = 0; w < NWORKERS; w++) {
        CHECK_EQ_INT(rw_stop(pid[w], 10000), 0);
        pid[w] = 0;
    }
    rdel_free(&d);
    for (int w = 0; w < NWORKERS; w++)
        rdel_load(&d, out[w], "t:", n);
    CHECK_EQ_U64(d.bad_lines, 0);
    struct rverdict v;
    CHECK_EQ_INT(rverdict_compute(&d, n, NULL, due_lo, LEASE_MS, WINDOW_MS, &v), 0);
    rverdict_print(&v, "cluster");
    CHECK_EQ_U64(v.missing, 0);
    CHECK_EQ_U64(v.early, 0);
    CHECK_EQ_U64(v.unexplained, 0);
    rdel_free(&d);
out:
    for (int w = 0; w < NWORKERS; w++)
        if (pid[w] > 0)
            rfx_reap(pid[w]);
    free(due_lo);
    free(delays);
    tw_redis_free(client);
    rfx_cluster_stop(&c);
}

int main(void)
{
    RUN(test_cluster_migrate_midrun);
    return test_summary();
}
