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
 *
 * Before that, on the same cluster, test_bucket_keys checks what Redis 7.0
 * really does with the keys the scripts touch without declaring them (the
 * due buckets "{q:p}:d:<b>", see src/redis/redis.c): a script may use a key
 * of its declared keys' slot on the node serving it (and not a key of
 * another slot); while that slot migrates, every bucket script answers
 * TRYAGAIN without writing, both on the source (all declared keys still
 * there) and on the target (declared keys moved, a bucket not yet), so no
 * bucket is ever written on the wrong node; once the slot has moved, the
 * tasks are all there and the calls work again.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <inttypes.h>
#include <stdarg.h>
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

static redisReply *node_cmd(const struct rfx_server *s, const char *fmt, ...)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* The integer reply of one command on node s (ASKING first: an importing
 * node serves its keys of the slot then), or -1. */
static long long node_int(const struct rfx_server *s, const char *fmt, const char *a)
{
    redisContext *c = rfx_connect(s);
    redisReply *r = c ? redisCommand(c, "ASKING") : NULL;
    if (r)
        freeReplyObject(r);
    r = c ? redisCommand(c, fmt, a) : NULL;
    if (c)
        redisFree(c);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return v;
}

/* Keys of the queue "uk" (one partition) matching pattern on node s. */
static size_t node_keys(const struct rfx_server *s, const char *pattern, char out[][64], size_t cap)
{
    redisReply *r = node_cmd(s, "KEYS %s", pattern);
    size_t n = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++, n++)
        if (n < cap)
            snprintf(out[n], 64, "%s", r->element[i]->str);
    if (r)
        freeReplyObject(r);
    return n;
}

static int migrate_keys(const struct rfx_server *src, const struct rfx_server *dst, char keys[][64],
                        size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rfx_command(src, "MIGRATE 127.0.0.1 %d %b 0 5000 REPLACE KEYS %s", dst->port, "",
                        (size_t)0, keys[i]) != 0)
            return -1;
    return 0;
}

static void test_bucket_keys(struct rfx_cluster *c)
{
    const unsigned slot = rfx_key_slot("{uk:0}", 6);
    const int from = rfx_cluster_owner(c, slot);
    CHECK(from >= 0);
    if (from < 0)
        return;
    const size_t to = ((size_t)from + 1) % c->n;
    struct rfx_server *src = &c->node[from], *dst = &c->node[to];

    /* Redis 7.0, plain EVAL on the owner: an undeclared key of the declared
     * keys' slot is served; a key of another slot is refused. */
    redisReply *x = node_cmd(src, "EVAL %s 1 %s", "return redis.call('SET', KEYS[1] .. ':x', 1)",
                             "{uk:0}:probe");
    CHECK(x && x->type == REDIS_REPLY_STATUS);
    if (x)
        freeReplyObject(x);
    x = node_cmd(src, "EVAL %s 1 %s", "return redis.call('SET', 'no-tag-key-1', 1)",
                 "{uk:0}:probe");
    CHECK(x && x->type == REDIS_REPLY_ERROR);
    if (x) {
        printf("7.0, undeclared key of another slot: %s\n", x->str);
        freeReplyObject(x);
    }
    CHECK_EQ_INT(node_int(src, "DEL %s", "{uk:0}:probe:x"), 1);

    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = c->addrs;
    cfg.nservers = c->n;
    cfg.queue = "uk";
    cfg.partitions = 1;
    cfg.command_timeout_ms = 300; /* a TRYAGAIN answer turns into TW_EIO soon */
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(tw_redis_new(&cfg, &r), 0);
    if (!r)
        return;
    CHECK_EQ_INT(tw_redis_set(r, "a", 1, "pa", 2, 60000), 0);
    CHECK_EQ_INT(tw_redis_set(r, "b", 1, "pb", 2, 61000), 0);
    CHECK_EQ_INT(tw_redis_set(r, "c", 1, "pc", 2, 120000), 0);
    /* every declared key present (a worker's claim would create seq, hold and
     * lease), so that the scripts themselves run during the migration */
    CHECK_EQ_INT(rfx_command(src, "SET {uk:0}:seq 100"), 0);
    CHECK_EQ_INT(rfx_command(src, "SET {uk:0}:hold 0"), 0);
    CHECK_EQ_INT(rfx_command(src, "ZADD {uk:0}:lease 1 gone"), 0);
    char buckets[8][64], declared[5][64] = {"{uk:0}:d", "{uk:0}:lease", "{uk:0}:task",
                                            "{uk:0}:seq", "{uk:0}:hold"};
    size_t nb = node_keys(src, "{uk:0}:d:*", buckets, 8);
    CHECK(nb >= 2 && nb <= 8);
    if (nb < 2 || nb > 8)
        goto out;
    char slotstr[8];
    snprintf(slotstr, sizeof slotstr, "%u", slot);
    const long long nkeys = node_int(src, "CLUSTER COUNTKEYSINSLOT %s", slotstr);
    CHECK_EQ_INT(nkeys, (long long)(5 + nb));

    /* open the migration; nothing moved yet: the source runs the scripts,
     * which see the slot migrating and refuse */
    CHECK_EQ_INT(rfx_command(dst, "CLUSTER SETSLOT %u IMPORTING %s", slot, c->id[from]), 0);
    CHECK_EQ_INT(rfx_command(src, "CLUSTER SETSLOT %u MIGRATING %s", slot, c->id[to]), 0);
    x = node_cmd(src, "EVAL %s 1 %s",
                 "return redis.pcall('EXISTS', KEYS[1] .. ':-', KEYS[1] .. ':+')", "{uk:0}:d");
    CHECK(x && x->type == REDIS_REPLY_ERROR);
    if (x) {
        printf("7.0, migrating source, two absent keys through redis.pcall: %s\n", x->str);
        freeReplyObject(x);
    }
    CHECK_EQ_INT(tw_redis_set(r, "d", 1, "pd", 2, 60000), TW_EIO);
    CHECK_EQ_INT(tw_redis_remove(r, "a", 1), TW_EIO);
    CHECK_EQ_INT(tw_redis_move(r, "b", 1, 90000), TW_EIO);
    CHECK_EQ_INT(node_int(src, "HLEN %s", "{uk:0}:task"), 3);
    CHECK_EQ_INT(node_int(src, "CLUSTER COUNTKEYSINSLOT %s", slotstr), nkeys);

    /* the declared keys moved, the buckets not: the source answers ASK, the
     * target runs the scripts (every declared key is there), which refuse */
    CHECK_EQ_INT(migrate_keys(src, dst, declared, 5), 0);
    CHECK_EQ_INT(tw_redis_set(r, "d", 1, "pd", 2, 60000), TW_EIO);
    CHECK_EQ_INT(tw_redis_remove(r, "a", 1), TW_EIO);
    CHECK_EQ_INT(tw_redis_move(r, "b", 1, 90000), TW_EIO);
    CHECK_EQ_INT(node_int(dst, "HLEN %s", "{uk:0}:task"), 3);
    CHECK_EQ_INT(node_int(src, "CLUSTER COUNTKEYSINSLOT %s", slotstr), (long long)nb);
    CHECK_EQ_INT(node_int(dst, "CLUSTER COUNTKEYSINSLOT %s", slotstr), 5);

    /* finish: buckets moved, slot assigned to the target everywhere */
    CHECK_EQ_INT(migrate_keys(src, dst, buckets, nb), 0);
    for (size_t i = 0; i < c->n; i++)
        CHECK_EQ_INT(rfx_command(&c->node[i], "CLUSTER SETSLOT %u NODE %s", slot, c->id[to]), 0);
    CHECK_EQ_INT(tw_redis_set(r, "d", 1, "pd", 2, 60000), 0);
    CHECK_EQ_INT(tw_redis_remove(r, "a", 1), 0);
    CHECK_EQ_INT(tw_redis_move(r, "b", 1, 90000), 0);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(r, &st), 0);
    CHECK_EQ_U64(st.pending, 3);
    CHECK_EQ_INT(tw_redis_remove(r, "b", 1), 0);
    CHECK_EQ_INT(tw_redis_remove(r, "c", 1), 0);
    CHECK_EQ_INT(tw_redis_remove(r, "d", 1), 0);
    CHECK_EQ_INT(tw_redis_remove(r, "a", 1), TW_ENOENT);
    /* every bucket emptied and deleted, the index too: nothing misplaced */
    CHECK_EQ_U64(node_keys(dst, "{uk:0}:d*", buckets, 8), 0);
    CHECK_EQ_U64(node_keys(src, "{uk:0}*", buckets, 8), 0);
out:
    tw_redis_free(r);
}

static void test_cluster_migrate_midrun(void)
{
    const uint64_t n = rw_test_size(30000);
    struct rfx_cluster c;
    CHECK_EQ_INT(rfx_cluster_start(&c, 3), 0);
    if (c.n != 3)
        return;
    test_bucket_keys(&c);
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
