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
 * Then, on the same cluster, test_master_away: one master is SIGKILLed while
 * tasks of every partition come due, and restarted 3 s later (its AOF, turned
 * on for the test, brings its tasks and leases back). An in-process worker
 * (2 executors, lease 10 s) holds every task when the master goes; the tasks
 * of the healthy masters must start on time (within AWAY_BOUND_MS = 2 s of
 * their due time, where a START round that waited for the away master's
 * answers held them up to lease_ms / 2 = 5 s), the away master's after it
 * is back; none early, none lost, none twice. A second run does the same
 * with 20,000 tasks, most of them on the master that goes, and checks that
 * the healthy masters' tasks due while it is away start within 300 ms
 * (AWAY_OUTAGE_BOUND_MS): the away master's held tasks, retried round after
 * round, must not take the executors' time. A third run (2,000 tasks) has
 * the worker claim only 500 ms ahead, so the tasks due during the outage
 * are claimed during it: claim rounds must not wait command_timeout_ms for
 * the away master on every round, and the same 300 ms bound holds.
 * Each bound is judged beyond what the machine explains in the same run
 * (machine_stall.h: the run-queue wait of this process's threads and of the
 * masters, a control sleeper): on a busy machine a task late by the
 * machine's stall alone is reported, not failed.
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
#include "machine_stall.h"
#include "test.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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
    CHECK_EQ_INT(tw_redis_new(&r, &cfg), 0);
    if (!r)
        return;
    CHECK_EQ_INT(tw_redis_set(r, "a", 1, "pa", 2, 60000), 0);
    CHECK_EQ_INT(tw_redis_set(r, "b", 1, "pb", 2, 61000), 0);
    CHECK_EQ_INT(tw_redis_set(r, "c", 1, "pc", 2, 120000), 0);
    /* every declared key present (a worker's claim would create seq, hold and
     * lease), so that the scripts themselves run during the migration */
    CHECK_EQ_INT(rfx_command(src, "SET {uk:0}:seq 100"), 0);
    CHECK_EQ_INT(rfx_command(src, "SET {uk:0}:hold 0"), 0);
    CHECK_EQ_INT(rfx_command(src, "ZADD {uk:0}:leases 1 gone:1"), 0);
    char buckets[8][64], declared[5][64] = {"{uk:0}:d", "{uk:0}:leases", "{uk:0}:task",
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

static void test_cluster_migrate_midrun(struct rfx_cluster *c)
{
    const uint64_t n = rw_test_size(30000);
    test_bucket_keys(c);
    char seeds[3 * 32];
    snprintf(seeds, sizeof seeds, "%s,%s,%s", c->addrs[0], c->addrs[1], c->addrs[2]);
    char out[NWORKERS][300];
    pid_t pid[NWORKERS] = {0};
    for (int w = 0; w < NWORKERS; w++) {
        snprintf(out[w], sizeof out[w], "%s/deliveries.%d", c->node[0].dir, w);
        struct rw_opts o = {.servers = seeds, .queue = "cl", .out = out[w], .threads = 2,
                            .partitions = 16, .lease_ms = LEASE_MS, .window_ms = WINDOW_MS};
        CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid[w], NULL), 0);
    }
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = c->addrs;
    cfg.nservers = 3;
    cfg.queue = "cl";
    cfg.partitions = 16;
    cfg.command_timeout_ms = 30000; /* a busy machine: see the setter below */
    struct tw_redis *client = NULL;
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
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
                CHECK_EQ_INT(rfx_dbsize(&c->node[m], &keys), 0);
                printf("master %zu (%s) holds %" PRIu64 " keys\n", m, c->addrs[m], keys);
                CHECK(keys > 0);
            }
        }
        if (!migrated && rfx_mono_ms() - start >= 1000) {
            migrated = true;
            slot = rfx_cluster_busy_slot(c, 0);
            CHECK(slot >= 0);
            if (slot >= 0) {
                uint64_t t = rfx_mono_ms();
                CHECK_EQ_INT(rfx_cluster_migrate_slot(c, (unsigned)slot, 1), 0);
                CHECK_EQ_INT(rfx_cluster_owner(c, (unsigned)slot), 1);
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
}

/* ---- one master away ------------------------------------------------------ */
#define AWAY_MAX 20000 /* tasks, due AWAY_FIRST_MS .. + AWAY_SPREAD_MS after the set */
#define AWAY_FIRST_MS 1000
#define AWAY_SPREAD_MS 4000
#define AWAY_KILL_MS 1800 /* after the set: the master goes */
#define AWAY_DOWN_MS 3000 /* ... and is back this much later (< cluster-node-timeout) */
#define AWAY_LEASE_MS 10000
#define AWAY_BOUND_MS 2000 /* a healthy master's task starts this soon after its due time */
/* ... and, in the run with many tasks, one due while the master is away this
 * soon: the away master's held tasks, retried round after round, must not
 * take the executors from them */
#define AWAY_OUTAGE_BOUND_MS 300
#define AWAY_PARTS 16

struct away_rec {
    pthread_mutex_t mu;
    size_t n;
    uint32_t count[AWAY_MAX];
    uint64_t first_us[AWAY_MAX], due_ms[AWAY_MAX];
    uint64_t twice; /* a second start before the first one's lease could end */
    uint64_t bad;   /* keys not of this test */
};

static enum tw_redis_result away_exec(void *arg, const struct tw_redis_task *t)
{
    struct away_rec *a = arg;
    uint64_t now = rfx_realtime_us();
    char buf[16];
    size_t l = t->key_len < sizeof buf - 1 ? t->key_len : sizeof buf - 1;
    memcpy(buf, t->key, l);
    buf[l] = 0;
    char *end;
    unsigned long id = strtoul(buf + 2, &end, 10);
    pthread_mutex_lock(&a->mu);
    if (strncmp(buf, "a:", 2) != 0 || *end || id >= a->n) {
        a->bad++;
    } else if (a->count[id]++ == 0) {
        a->first_us[id] = now;
        a->due_ms[id] = t->due_ms;
    } else if (now < a->first_us[id] + (uint64_t)AWAY_LEASE_MS * 1000u - 200000u) {
        a->twice++;
    }
    pthread_mutex_unlock(&a->mu);
    return TW_REDIS_DONE;
}

/* The partition of a key: FNV-1a-64 % partitions, as every client computes it. */
static unsigned away_part(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = key; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return (unsigned)(h % AWAY_PARTS);
}

/* n tasks on queue `queue`, the worker claiming window_ms ahead; outage_bound_ms > 0: also check the healthy
 * masters' tasks due while the master is away against it. */
static void away_run(struct rfx_cluster *c, const char *queue, size_t n, uint32_t window_ms,
                     uint64_t outage_bound_ms)
{
    /* the master holding the most partitions goes; every master holds some */
    int owner[AWAY_PARTS], held[RFX_CLUSTER_MAX] = {0};
    for (unsigned p = 0; p < AWAY_PARTS; p++) {
        char tag[48];
        int l = snprintf(tag, sizeof tag, "{%s:%u}", queue, p);
        owner[p] = rfx_cluster_owner(c, rfx_key_slot(tag, (size_t)l));
        CHECK(owner[p] >= 0);
        if (owner[p] < 0)
            return;
        held[owner[p]]++;
    }
    size_t victim = 0;
    for (size_t i = 0; i < c->n; i++) {
        CHECK(held[i] > 0);
        if (held[i] > held[victim])
            victim = i;
    }
    struct rfx_server *vs = &c->node[victim];
    /* its writes survive the kill: AOF, fsync always (rfx_restart starts it so) */
    CHECK_EQ_INT(rfx_command(vs, "CONFIG SET appendfsync always"), 0);
    CHECK_EQ_INT(rfx_command(vs, "CONFIG SET appendonly yes"), 0);
    vs->opts.appendonly = true;
    vs->opts.appendfsync = "always";
    for (int t = 0; t < 100; t++) { /* the rewrite that turning AOF on starts */
        double busy = 1, on = 0;
        if (rfx_info_double(vs, "aof_rewrite_in_progress", &busy) == 0 &&
            rfx_info_double(vs, "aof_enabled", &on) == 0 && busy == 0 && on == 1)
            break;
        rfx_sleep_ms(50);
    }

    static struct away_rec rec; /* large: not on the stack */
    static int64_t delays[AWAY_MAX];
    memset(&rec, 0, sizeof rec);
    pthread_mutex_init(&rec.mu, NULL);
    rec.n = n;
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = c->addrs;
    cfg.nservers = c->n;
    cfg.queue = queue;
    cfg.partitions = AWAY_PARTS;
    struct tw_redis *client = NULL, *worker = NULL;
    /* The setter's calls wait longer than the default 2 s: on a busy machine
     * (three masters, other tests, other work) a node's share of a 20,000
     * set_many took longer, and its TW_EUNKNOWN left the rest unset. The
     * worker keeps the default: its waits on the away master are judged. */
    uint32_t timeout_ms = cfg.command_timeout_ms;
    cfg.command_timeout_ms = 30000;
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    cfg.command_timeout_ms = timeout_ms;
    cfg.execute = away_exec;
    cfg.arg = &rec;
    cfg.threads = 2;
    cfg.lease_ms = AWAY_LEASE_MS;
    cfg.window_ms = window_ms;
    CHECK_EQ_INT(tw_redis_new(&worker, &cfg), 0);
    if (!client || !worker)
        goto out;

    for (size_t i = 0; i < n; i++)
        delays[i] = AWAY_FIRST_MS + (int64_t)i * AWAY_SPREAD_MS / (int64_t)n;
    pid_t peers[RFX_CLUSTER_MAX];
    for (size_t i = 0; i < c->n; i++)
        peers[i] = c->node[i].pid;
    struct mstall machine;
    mstall_start(&machine, peers, (int)c->n);
    uint64_t t0 = rfx_mono_ms(), set_ms = rfx_realtime_us() / 1000u;
    CHECK_EQ_INT(rw_set_range(client, NULL, "a:", 0, n, delays, NULL), (int)n);
    uint64_t now = rfx_mono_ms();
    if (now < t0 + AWAY_KILL_MS)
        rfx_sleep_ms((unsigned)(t0 + AWAY_KILL_MS - now));
    CHECK_EQ_INT(rfx_kill(vs), 0);
    uint64_t kill_ms = rfx_realtime_us() / 1000u;
    rfx_sleep_ms(AWAY_DOWN_MS);
    CHECK_EQ_INT(rfx_restart(vs), 0);
    uint64_t back_ms = rfx_realtime_us() / 1000u;
    printf("%zu tasks: master %zu (%d of %d partitions) away from +%" PRIu64 " to +%" PRIu64
           " ms\n",
           n, victim, held[victim], AWAY_PARTS, kill_ms - set_ms, back_ms - set_ms);

    /* every task started once (bounded wait) */
    uint64_t deadline = rfx_mono_ms() + 30000;
    for (;;) {
        size_t got = 0;
        pthread_mutex_lock(&rec.mu);
        for (size_t i = 0; i < n; i++)
            got += rec.count[i] > 0;
        pthread_mutex_unlock(&rec.mu);
        if (got == n || rfx_mono_ms() > deadline)
            break;
        rfx_sleep_ms(100);
    }
    mstall_stop(&machine);
    CHECK_EQ_INT(tw_redis_stop(worker), 0);
    /* A bound is judged beyond what the machine explains (machine_stall.h). */
    uint64_t slack_ms = (uint64_t)machine.explained_ms;
    uint64_t explained_healthy = 0, explained_outage = 0;

    uint64_t missing = 0, early = 0, healthy = 0, away = 0, late_healthy = 0, max_late = 0;
    uint64_t away_before_back = 0, outage = 0, outage_late = 0, outage_max = 0;
    for (size_t i = 0; i < n; i++) {
        char key[24];
        snprintf(key, sizeof key, "a:%zu", i);
        if (rec.count[i] == 0) {
            missing++;
            continue;
        }
        uint64_t start = rec.first_us[i], due_us = rec.due_ms[i] * 1000u;
        early += start < due_us;
        if ((size_t)owner[away_part(key)] == victim) {
            away++;
            /* due while it was away: it can only have run once it was back */
            if (rec.due_ms[i] > kill_ms + 100 && start < back_ms * 1000u - 100000u)
                away_before_back++;
            continue;
        }
        healthy++;
        uint64_t late = start > due_us ? (start - due_us) / 1000u : 0;
        if (late > max_late)
            max_late = late;
        late_healthy += late >= AWAY_BOUND_MS + slack_ms;
        explained_healthy += late >= AWAY_BOUND_MS && late < AWAY_BOUND_MS + slack_ms;
        if (rec.due_ms[i] > kill_ms + 200 && rec.due_ms[i] < back_ms) {
            outage++;
            outage_late += outage_bound_ms && late >= outage_bound_ms + slack_ms;
            explained_outage +=
                outage_bound_ms && late >= outage_bound_ms && late < outage_bound_ms + slack_ms;
            if (late > outage_max)
                outage_max = late;
        }
    }
    printf("healthy masters: %" PRIu64 " tasks, latest %" PRIu64
           " ms after due; away master: %" PRIu64 " tasks; missing %" PRIu64 ", early %" PRIu64
           ", twice %" PRIu64 "\n",
           healthy, max_late, away, missing, early, rec.twice);
    printf("healthy tasks due while it was away: %" PRIu64 ", latest %" PRIu64 " ms after due\n",
           outage, outage_max);
    mstall_print(&machine, "this run");
    if (explained_healthy || explained_outage)
        printf("over a bound by less than the machine explains (not failed): %" PRIu64
               " healthy tasks over %d ms, %" PRIu64 " due while it was away over %" PRIu64
               " ms\n",
               explained_healthy, AWAY_BOUND_MS, explained_outage, outage_bound_ms);
    CHECK_EQ_U64(missing, 0);
    CHECK_EQ_U64(early, 0);
    CHECK_EQ_U64(rec.twice, 0);
    CHECK_EQ_U64(rec.bad, 0);
    CHECK_EQ_U64(away_before_back, 0);
    CHECK(healthy > 0 && away > 0);
    CHECK_EQ_U64(late_healthy, 0);
    CHECK(outage > 0);
    CHECK_EQ_U64(outage_late, 0);
out:
    tw_redis_free(worker);
    tw_redis_free(client);
    pthread_mutex_destroy(&rec.mu);
    /* Its AOF off again: in the next run it may be a healthy master, and
     * with appendfsync always every START and claim it answers waits for an
     * fsync, which on a shared VM disk took up to ~600 ms now and then (the
     * third run's healthy tasks started 100-600 ms late in 3 of 8 runs; 0-1
     * ms in 6 of 6 with this). */
    CHECK_EQ_INT(rfx_command(vs, "CONFIG SET appendonly no"), 0);
    CHECK_EQ_INT(rfx_command(vs, "CONFIG SET appendfsync everysec"), 0);
    vs->opts.appendonly = false;
    vs->opts.appendfsync = NULL;
}

static void test_master_away(struct rfx_cluster *c)
{
    /* window 8 s: every task is held before the master goes (START rounds are tested) */
    away_run(c, "pa", 600, 8000, 0);
    /* Many held tasks on the away master: of 20,000 (a fifth under
     * sanitizers), 11,248 are on it (queue "pb": 9 of the 16 partitions),
     * ~9,000 held while it is away, each retried in a START round every few
     * hundred ms. Each such round used to spend the router's whole 5 ms
     * retry budget sleeping for a node whose connect backoff ended later
     * (with queue "pa", 20,000 tasks: ~1,500 rounds in the 3 s, 8.9 s of the
     * two executors' time), and of the ~6,300 healthy tasks due while it was
     * away 2,319 and 3,442 (two runs) started over 200 ms late, the latest
     * 530 and 620 ms; 32 and 84 ms once such a round gives up at once. */
    uint64_t n = rw_test_size(AWAY_MAX);
    away_run(c, "pb", n > AWAY_MAX ? AWAY_MAX : (size_t)n, 8000, AWAY_OUTAGE_BOUND_MS);
    /* A window of 500 ms: the healthy masters' tasks due while the master is
     * away are claimed during the outage, by claim rounds that must not wait
     * for it (a round's TIME and claims on the away master each waited
     * command_timeout_ms, 2 s, so those tasks started up to ~2 s late). */
    away_run(c, "pc", 2000, 500, AWAY_OUTAGE_BOUND_MS);
}

static struct rfx_cluster cluster;

static void test_cluster(void)
{
    CHECK_EQ_INT(rfx_cluster_start(&cluster, 3), 0);
    if (cluster.n != 3)
        return;
    test_cluster_migrate_midrun(&cluster);
    test_master_away(&cluster);
    rfx_cluster_stop(&cluster);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* a write to a killed master's connection */
    RUN(test_cluster);
    return test_summary();
}
