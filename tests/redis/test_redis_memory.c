/* SPDX-License-Identifier: MIT */
/* The Redis layer under memory pressure and its configuration checks
 * (twheel/redis.h, tw_redis_new), against real redis-server processes:
 *  - a server whose maxmemory-policy may evict the queue's keys (allkeys-*)
 *    is refused with TW_ECONFLICT unless the config accepts the risk, which
 *    stats then show; volatile-* is accepted; the policy is read from INFO
 *    where CONFIG is renamed; a server turned evicting after new is refused
 *    at its next connection; in a cluster, one evicting master refuses new;
 *  - at maxmemory under noeviction, set, set_many and move give TW_EOOM
 *    (counted), pause too and pauses no partition of a 4-partition queue,
 *    remove still works, a worker drains every pending task, and a set (and
 *    a pause and resume) works again afterwards;
 *  - a lease below TW_REDIS_LEASE_MIN_MS (or 4 ticks) is TW_EINVAL;
 *  - the partition count is stored with the queue: another count is refused;
 *    the default makes 1 on one server, and takes a stored count.
 * Waits are bounded polls; nothing asserts speed.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "twheel/redis.h"

/* ---- helpers ----------------------------------------------------------------- */

static const char *one[1];

static void cfg_on(struct tw_redis_config *c, const struct rfx_server *s, const char *queue)
{
    tw_redis_config_init(c);
    one[0] = rfx_addr(s);
    c->servers = one;
    c->nservers = 1;
    c->queue = queue;
    c->connect_timeout_ms = 500;
    c->command_timeout_ms = 1000;
}

/* A reply of one command on a fresh connection, as an integer (a string
 * reply parsed, nil -1, error -2). */
static long long srv_int(const struct rfx_server *s, const char *fmt, const char *a)
{
    redisContext *c = rfx_connect(s);
    long long v = -3;
    if (!c)
        return v;
    redisReply *x = redisCommand(c, fmt, a);
    if (x && x->type == REDIS_REPLY_INTEGER)
        v = x->integer;
    else if (x && x->type == REDIS_REPLY_STRING)
        v = strtoll(x->str, NULL, 10);
    else if (x && x->type == REDIS_REPLY_NIL)
        v = -1;
    else if (x && x->type == REDIS_REPLY_ERROR)
        v = -2;
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return v;
}

/* Deliveries counted per task index (keys "t<i>"). */
#define DRAIN_MAX 20000

struct drain {
    atomic_uint_fast32_t runs;
    atomic_uchar seen[DRAIN_MAX];
};

static enum tw_redis_result drain_exec(void *arg, const struct tw_redis_task *t)
{
    struct drain *d = arg;
    char k[16];
    snprintf(k, sizeof k, "%.*s", (int)(t->key_len < 15 ? t->key_len : 15), t->key);
    long i = k[0] == 't' ? strtol(k + 1, NULL, 10) : -1;
    if (i >= 0 && i < DRAIN_MAX)
        atomic_store(&d->seen[i], 1);
    atomic_fetch_add(&d->runs, 1);
    return TW_REDIS_DONE;
}

static enum tw_redis_result noop_exec(void *arg, const struct tw_redis_task *t)
{
    (void)t;
    atomic_fetch_add((atomic_uint_fast32_t *)arg, 1);
    return TW_REDIS_DONE;
}

/* Start a server with these extra arguments (NULL: none); false (checked) if
 * it cannot start. */
static bool start(struct rfx_server *s, const char *const *extra)
{
    struct rfx_options o = {.extra = extra};
    if (rfx_start(s, &o) == 0)
        return true;
    CHECK(!"cannot start redis-server");
    return false;
}

/* Wait (bounded) until *runs reaches n. */
static void wait_runs(atomic_uint_fast32_t *runs, uint32_t n, unsigned ms)
{
    uint64_t end = rfx_mono_ms() + ms;
    while (atomic_load(runs) < n && rfx_mono_ms() < end)
        rfx_sleep_ms(10);
}

/* ---- eviction policy ---------------------------------------------------------- */

/* allkeys-lru: refused (client and worker), nothing written; accepted with
 * the config field, and stats say so; volatile-lru and noeviction accepted
 * without it. */
static void test_evicting_policy(void)
{
    static const char *const extra[] = {"--maxmemory-policy", "allkeys-lru", NULL};
    struct rfx_server s;
    if (!start(&s, extra))
        return;
    atomic_uint_fast32_t runs = 0;
    struct tw_redis_config c;
    struct tw_redis *r = NULL;
    cfg_on(&c, &s, "ev");
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_ECONFLICT);
    CHECK(r == NULL);
    c.execute = noop_exec;
    c.arg = &runs;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_ECONFLICT);
    CHECK_EQ_INT(srv_int(&s, "EXISTS %s", "{ev:meta}:partitions"), 0); /* refused before writing */

    c.accept_evicting_policy = true;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (r) {
        struct tw_redis_stats st;
        CHECK_EQ_INT(tw_redis_stats(r, &st), 0);
        CHECK_EQ_U64(st.evicting_nodes, 1);
        CHECK_EQ_INT(tw_redis_set(r, "a", 1, "p", 1, 0), 0);
        wait_runs(&runs, 1, 5000);
        CHECK_EQ_INT(atomic_load(&runs), 1);
        tw_redis_free(r);
        r = NULL;
    }

    /* volatile-*: only keys with a TTL are evicted, and the queue's only one
     * is the hold hint: accepted without the field, no risk shown */
    static const char *const vol[] = {"volatile-lru", "volatile-lfu", "volatile-random",
                                      "volatile-ttl", "noeviction"};
    c.accept_evicting_policy = false;
    for (size_t i = 0; i < sizeof vol / sizeof vol[0]; i++) {
        CHECK_EQ_INT(rfx_command(&s, "CONFIG SET maxmemory-policy %s", vol[i]), 0);
        CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
        if (r) {
            struct tw_redis_stats st;
            CHECK_EQ_INT(tw_redis_stats(r, &st), 0);
            CHECK_EQ_U64(st.evicting_nodes, 0);
            tw_redis_free(r);
            r = NULL;
        }
    }
    /* the other allkeys policies are refused too */
    static const char *const all[] = {"allkeys-lfu", "allkeys-random"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        CHECK_EQ_INT(rfx_command(&s, "CONFIG SET maxmemory-policy %s", all[i]), 0);
        CHECK_EQ_INT(tw_redis_new(&r, &c), TW_ECONFLICT);
    }
    rfx_stop(&s);
}

/* CONFIG renamed (as managed services do): the policy comes from INFO
 * memory. */
static void test_policy_from_info(void)
{
    static const char *const extra[] = {"--maxmemory-policy",   "allkeys-lru",
                                        "--rename-command",     "CONFIG",
                                        "twheel-hidden-config", NULL};
    struct rfx_server s;
    if (!start(&s, extra))
        return;
    CHECK(rfx_command(&s, "CONFIG GET maxmemory-policy") != 0); /* refused */
    struct tw_redis_config c;
    struct tw_redis *r = NULL;
    cfg_on(&c, &s, "info");
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_ECONFLICT);
    CHECK_EQ_INT(rfx_command(&s, "twheel-hidden-config SET maxmemory-policy volatile-ttl"), 0);
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (r) {
        CHECK_EQ_INT(tw_redis_set(r, "a", 1, "p", 1, 1000), 0);
        tw_redis_free(r);
    }
    rfx_stop(&s);
}

/* A server turned evicting after new is refused at the client's next
 * connection to it (nothing written), each call checking it again, and
 * taken again once it is reconfigured. */
static void test_evicting_later(void)
{
    struct rfx_server s;
    if (!start(&s, NULL))
        return;
    struct tw_redis_config c;
    struct tw_redis *r = NULL;
    cfg_on(&c, &s, "later");
    c.partitions = 1;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (!r) {
        rfx_stop(&s);
        return;
    }
    CHECK_EQ_INT(tw_redis_set(r, "a", 1, "p", 1, 60000), 0);
    CHECK_EQ_INT(rfx_command(&s, "CONFIG SET maxmemory-policy allkeys-lru"), 0);
    CHECK_EQ_INT(tw_redis_set(r, "b", 1, "p", 1, 60000), 0); /* still the old connection */
    CHECK_EQ_INT(rfx_command(&s, "CLIENT KILL TYPE normal"), 0);
    CHECK_EQ_INT(tw_redis_set(r, "c", 1, "p", 1, 60000), TW_ECONFLICT);
    CHECK_EQ_INT(tw_redis_remove(r, "a", 1), TW_ECONFLICT);
    CHECK_EQ_INT(srv_int(&s, "HLEN %s", "{later:0}:task"), 2);          /* a and b only */
    CHECK_EQ_INT(tw_redis_set(r, "c", 1, "p", 1, 60000), TW_ECONFLICT); /* checked again */
    CHECK_EQ_INT(rfx_command(&s, "CONFIG SET maxmemory-policy noeviction"), 0);
    CHECK_EQ_INT(tw_redis_set(r, "c", 1, "p", 1, 60000), 0);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(r, &st), 0);
    CHECK_EQ_U64(st.pending, 3);
    CHECK_EQ_U64(st.evicting_nodes, 0);
    tw_redis_free(r);
    rfx_stop(&s);
}

/* ---- at maxmemory ------------------------------------------------------------- */

#define OOM_PAYLOAD 1000
#define OOM_BATCH 100

/* noeviction with a small maxmemory, filled until set refuses: set,
 * set_many and move give TW_EOOM, counted; remove works; a worker then
 * delivers every pending task and a set works again. */
static void test_oom_drains(void)
{
    static const char *const extra[] = {"--maxmemory", "6mb", "--maxmemory-policy", "noeviction",
                                        NULL};
    struct rfx_server s;
    if (!start(&s, extra))
        return;
    struct tw_redis_config c;
    struct tw_redis *cl = NULL, *w = NULL, *pq = NULL;
    /* a queue of 4 partitions, made before the server fills, for pause */
    cfg_on(&c, &s, "oomp");
    c.partitions = 4;
    CHECK_EQ_INT(tw_redis_new(&pq, &c), 0);
    cfg_on(&c, &s, "oom");
    CHECK_EQ_INT(tw_redis_new(&cl, &c), 0);
    struct drain *d = calloc(1, sizeof *d);
    struct tw_redis_item *items = calloc(OOM_BATCH, sizeof *items);
    char(*keys)[16] = calloc(OOM_BATCH, 16);
    char *payload = malloc(OOM_PAYLOAD);
    CHECK(pq && cl && d && items && keys && payload);
    if (!pq || !cl || !d || !items || !keys || !payload)
        goto out;
    memset(payload, 'x', OOM_PAYLOAD);

    /* fill: batches until one is refused, then single sets until refused */
    size_t next = 0;
    int rc = 0;
    while (next + OOM_BATCH <= DRAIN_MAX) {
        for (size_t j = 0; j < OOM_BATCH; j++) {
            int n = snprintf(keys[j], 16, "t%zu", next + j);
            items[j] = (struct tw_redis_item){keys[j], (size_t)n, payload, OOM_PAYLOAD,
                                              (int64_t)(j % 10) * 50};
        }
        rc = tw_redis_set_many(cl, items, OOM_BATCH);
        next += OOM_BATCH;
        if (rc != OOM_BATCH)
            break;
    }
    CHECK_EQ_INT(rc, TW_EOOM);
    /* set_many's refusal closed its connections, which frees their buffers:
     * single sets until one is refused again */
    rc = 0;
    for (int i = 0; i < 1000 && rc != TW_EOOM; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "t%zu", next++);
        rc = tw_redis_set(cl, k, (size_t)n, payload, OOM_PAYLOAD, 0);
    }
    CHECK_EQ_INT(rc, TW_EOOM);
    /* filled: the refusal came once used_memory, buffers of the moment
     * included, passed maxmemory; maxmemory lowered below what the tasks
     * hold keeps the server full whatever its buffers do */
    double used = 0, maxm = 0;
    (void)rfx_info_double(&s, "used_memory", &used);
    CHECK_EQ_INT(rfx_command(&s, "CONFIG SET maxmemory %lld", (long long)used - (512 << 10)), 0);
    (void)rfx_info_double(&s, "maxmemory", &maxm);
    CHECK_EQ_INT(tw_redis_set(cl, "extra", 5, payload, OOM_PAYLOAD, 0), TW_EOOM);
    CHECK_EQ_INT(tw_redis_move(cl, "t0", 2, 10), TW_EOOM);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(cl, &st), 0);
    CHECK(st.oom_refusals >= 3);
    uint64_t filled = st.pending;
    printf("  filled: %" PRIu64 " tasks of %d B, used_memory %.0f of maxmemory %.0f, "
           "%" PRIu64 " OOM refusals\n",
           filled, OOM_PAYLOAD, used, maxm, st.oom_refusals);
    CHECK(filled > 1000);
    /* pause at maxmemory: refused, and no partition paused (one script
     * for every flag on one server: all or nothing) */
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_pause(pq), TW_EOOM);
    CHECK_EQ_INT(tw_redis_counts(pq, 0, &q), 0);
    CHECK_EQ_U64(q.paused, 0);
    /* remove frees memory: a server at maxmemory takes it */
    CHECK_EQ_INT(tw_redis_remove(cl, "t1", 2), 0);
    atomic_store(&d->seen[1], 1);
    filled--;

    /* a worker drains it all (claims, starts and acknowledgements at maxmemory) */
    struct tw_redis_config wc;
    cfg_on(&wc, &s, "oom");
    wc.execute = drain_exec;
    wc.arg = d;
    wc.threads = 4;
    uint64_t t0 = rfx_mono_ms();
    CHECK_EQ_INT(tw_redis_new(&w, &wc), 0);
    if (!w)
        goto out;
    uint64_t end = rfx_mono_ms() + 30000;
    for (;;) {
        CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
        if ((st.delivered >= filled && st.pending == 0) || rfx_mono_ms() > end)
            break;
        rfx_sleep_ms(20);
    }
    size_t seen = 0;
    for (size_t i = 0; i < DRAIN_MAX; i++)
        seen += atomic_load(&d->seen[i]);
    printf("  drained: %" PRIu64 " delivered, %zu distinct (of %" PRIu64 " + 1 removed), "
           "pending %" PRIu64 ", %" PRIu64 " ms\n",
           st.delivered, seen, filled, st.pending, rfx_mono_ms() - t0);
    CHECK_EQ_U64(st.pending, 0);
    CHECK(st.delivered >= filled);
    CHECK_EQ_U64(seen, filled + 1);
    CHECK_EQ_U64(st.oom_refusals, 0); /* the worker's own calls were never refused */
    /* memory freed: new work is taken again */
    CHECK_EQ_INT(tw_redis_set(cl, "after", 5, payload, OOM_PAYLOAD, 0), 0);
    CHECK_EQ_INT(tw_redis_move(cl, "after", 5, 60000), 0);
    CHECK_EQ_INT(tw_redis_pause(pq), 0);
    CHECK_EQ_INT(tw_redis_counts(pq, 0, &q), 0);
    CHECK_EQ_U64(q.paused, 4);
    CHECK_EQ_INT(tw_redis_resume(pq), 0);
    CHECK_EQ_INT(tw_redis_counts(pq, 0, &q), 0);
    CHECK_EQ_U64(q.paused, 0);
out:
    tw_redis_free(w);
    tw_redis_free(cl);
    tw_redis_free(pq);
    free(payload);
    free(keys);
    free(items);
    free(d);
    rfx_stop(&s);
}

/* ---- config checks ------------------------------------------------------------ */

/* A lease below TW_REDIS_LEASE_MIN_MS, or below 4 ticks, is refused. */
static void test_lease_min(void)
{
    struct rfx_server s;
    if (!start(&s, NULL))
        return;
    atomic_uint_fast32_t runs = 0;
    struct tw_redis_config c;
    struct tw_redis *r = NULL;
    cfg_on(&c, &s, "lease");
    c.execute = noop_exec;
    c.arg = &runs;
    c.lease_ms = 1;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
    c.lease_ms = TW_REDIS_LEASE_MIN_MS - 1;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
    c.tick_ms = 100;
    c.lease_ms = 399;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
    c.lease_ms = 400;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    tw_redis_free(r);
    r = NULL;
    c.tick_ms = 1;
    c.lease_ms = TW_REDIS_LEASE_MIN_MS;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (r) { /* and it delivers */
        CHECK_EQ_INT(tw_redis_set(r, "a", 1, "p", 1, 0), 0);
        wait_runs(&runs, 1, 5000);
        CHECK_EQ_INT(atomic_load(&runs), 1);
        tw_redis_free(r);
    }
    rfx_stop(&s);
}

/* The partition count is stored with the queue: a client of 32 partitions
 * sets 200 tasks; a worker (or client) of 16 is refused; the 32 one drains. */
static void test_partitions_stored(void)
{
    struct rfx_server s;
    if (!start(&s, NULL))
        return;
    struct drain *d = calloc(1, sizeof *d);
    struct tw_redis_config c;
    struct tw_redis *cl = NULL, *w = NULL;
    cfg_on(&c, &s, "parts");
    c.partitions = 32;
    CHECK_EQ_INT(tw_redis_new(&cl, &c), 0);
    CHECK(d != NULL);
    if (!cl || !d)
        goto out;
    CHECK_EQ_INT(srv_int(&s, "GET %s", "{parts:meta}:partitions"), 32);
    enum { N = 200 };
    for (int i = 0; i < N; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "t%d", i);
        CHECK_EQ_INT(tw_redis_set(cl, k, (size_t)n, "p", 1, 100), 0);
    }
    struct tw_redis_config wc = c;
    wc.partitions = 16;
    wc.execute = drain_exec;
    wc.arg = d;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), TW_ECONFLICT);
    CHECK(w == NULL);
    wc.execute = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), TW_ECONFLICT);
    wc.partitions = 64;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), TW_ECONFLICT);
    CHECK_EQ_INT(srv_int(&s, "GET %s", "{parts:meta}:partitions"), 32); /* unchanged */
    /* the same count: taken, and it delivers all */
    wc.partitions = 32;
    wc.execute = drain_exec;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), 0);
    if (!w)
        goto out;
    struct tw_redis_stats st;
    uint64_t end = rfx_mono_ms() + 10000;
    while (tw_redis_stats(w, &st) == 0 && (st.delivered < N || st.pending) && rfx_mono_ms() < end)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(st.delivered, N);
    CHECK_EQ_U64(st.pending, 0);
    /* a value that is no count (written by something else) is a conflict too */
    CHECK_EQ_INT(rfx_command(&s, "SET {other:meta}:partitions banana"), 0);
    struct tw_redis *x = NULL;
    cfg_on(&c, &s, "other");
    CHECK_EQ_INT(tw_redis_new(&x, &c), TW_ECONFLICT);
    /* the documented renumbering of an empty queue: DEL the key */
    tw_redis_free(w);
    w = NULL;
    tw_redis_free(cl);
    cl = NULL;
    CHECK_EQ_INT(srv_int(&s, "DEL %s", "{parts:meta}:partitions"), 1);
    cfg_on(&c, &s, "parts");
    c.partitions = 64;
    CHECK_EQ_INT(tw_redis_new(&cl, &c), 0);
    CHECK_EQ_INT(srv_int(&s, "GET %s", "{parts:meta}:partitions"), 64);
out:
    tw_redis_free(w);
    tw_redis_free(cl);
    free(d);
    rfx_stop(&s);
}

/* The default count (TW_REDIS_PARTITIONS_AUTO) on one server: a default
 * client creates a queue of 1 partition; a client of 16 is then refused; a
 * default worker of a queue stored with 64 takes 64 (it delivers all the
 * tasks a client of 64 spread over them); a count above the most but AUTO
 * is refused as before. (On a cluster the default makes 16, spread over the
 * masters: test_redis_isolation and test_redis_cluster run on it.) */
static void test_partitions_auto(void)
{
    struct rfx_server s;
    if (!start(&s, NULL))
        return;
    struct drain *d = calloc(1, sizeof *d);
    struct tw_redis_config c;
    struct tw_redis *cl = NULL, *w = NULL;
    CHECK(d != NULL);
    if (!d)
        goto out;
    cfg_on(&c, &s, "auto");
    CHECK_EQ_U64(c.partitions, TW_REDIS_PARTITIONS_AUTO);
    CHECK_EQ_INT(tw_redis_new(&cl, &c), 0);
    CHECK_EQ_INT(srv_int(&s, "GET %s", "{auto:meta}:partitions"), 1);
    tw_redis_free(cl);
    cl = NULL;
    c.partitions = 16;
    CHECK_EQ_INT(tw_redis_new(&cl, &c), TW_ECONFLICT);
    c.partitions = TW_REDIS_PARTITIONS_MAX + 1;
    CHECK_EQ_INT(tw_redis_new(&cl, &c), TW_EINVAL);
    /* a queue of 64: a default worker takes the count and finds every task */
    cfg_on(&c, &s, "auto64");
    c.partitions = 64;
    CHECK_EQ_INT(tw_redis_new(&cl, &c), 0);
    if (!cl)
        goto out;
    enum { N = 300 };
    for (int i = 0; i < N; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "t%d", i);
        CHECK_EQ_INT(tw_redis_set(cl, k, (size_t)n, "p", 1, 100), 0);
    }
    struct tw_redis_config wc;
    cfg_on(&wc, &s, "auto64");
    wc.execute = drain_exec;
    wc.arg = d;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), 0);
    if (!w)
        goto out;
    struct tw_redis_stats st;
    uint64_t end = rfx_mono_ms() + 10000;
    while (tw_redis_stats(w, &st) == 0 && (st.delivered < N || st.pending) && rfx_mono_ms() < end)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(st.delivered, N);
    CHECK_EQ_U64(st.pending, 0);
    size_t seen = 0;
    for (int i = 0; i < N; i++)
        seen += atomic_load(&d->seen[i]);
    CHECK_EQ_U64(seen, N);
    CHECK_EQ_INT(srv_int(&s, "GET %s", "{auto64:meta}:partitions"), 64); /* unchanged */
out:
    tw_redis_free(w);
    tw_redis_free(cl);
    free(d);
    rfx_stop(&s);
}

/* ---- cluster ------------------------------------------------------------------ */

/* Every master is checked: one evicting master of three refuses new (seeded
 * with another master only); accepted, stats show it. Then, all
 * noeviction, the flagged scripts deliver across the masters. */
static void test_cluster_masters(void)
{
    struct rfx_cluster cs;
    if (rfx_cluster_start(&cs, 3) != 0) {
        CHECK(!"cannot start a cluster");
        return;
    }
    atomic_uint_fast32_t runs = 0;
    struct tw_redis_config c;
    struct tw_redis *r = NULL, *w = NULL;
    tw_redis_config_init(&c);
    c.servers = cs.addrs;
    c.nservers = 1; /* the seed: master 0; master 2 is learnt from the slot map */
    c.queue = "cm";
    CHECK_EQ_INT(rfx_command(&cs.node[2], "CONFIG SET maxmemory-policy allkeys-lfu"), 0);
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_ECONFLICT);
    c.accept_evicting_policy = true;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (r) {
        struct tw_redis_stats st;
        CHECK_EQ_INT(tw_redis_stats(r, &st), 0);
        CHECK_EQ_U64(st.evicting_nodes, 1);
        tw_redis_free(r);
        r = NULL;
    }
    CHECK_EQ_INT(rfx_command(&cs.node[2], "CONFIG SET maxmemory-policy noeviction"), 0);
    c.accept_evicting_policy = false;
    c.nservers = 3;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    struct tw_redis_config wc = c;
    wc.execute = noop_exec;
    wc.arg = &runs;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), 0);
    enum { N = 300 };
    for (int i = 0; r && i < N; i++) {
        char k[16];
        int n = snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(tw_redis_set(r, k, (size_t)n, "p", 1, i % 7 * 100), 0);
    }
    struct tw_redis_stats st = {0};
    uint64_t end = rfx_mono_ms() + 15000;
    while (w && tw_redis_stats(w, &st) == 0 && (st.delivered < N || st.pending) &&
           rfx_mono_ms() < end)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(st.delivered, N);
    CHECK_EQ_U64(st.pending, 0);
    CHECK_EQ_INT(atomic_load(&runs), N);
    tw_redis_free(w);
    tw_redis_free(r);
    rfx_cluster_stop(&cs);
}

int main(void)
{
    RUN(test_evicting_policy);
    RUN(test_policy_from_info);
    RUN(test_evicting_later);
    RUN(test_oom_drains);
    RUN(test_lease_min);
    RUN(test_partitions_stored);
    RUN(test_partitions_auto);
    RUN(test_cluster_masters);
    return test_summary();
}
