/* SPDX-License-Identifier: MIT */
/* Sentinel: a master, two replicas and three Sentinels (fixture.h), the
 * layer given only the Sentinels and the master's name.
 *  - discovery: tasks set through the master the Sentinels name are
 *    delivered; a master name no Sentinel knows fails tw_redis_new with
 *    TW_EINVAL, the Sentinel's words in errbuf; the replica wait: WAIT for
 *    the two replicas answers 0, for three (there are two) TW_EREPLICAS with
 *    the task stored all the same; a user WAIT is denied to fails
 *    tw_redis_new (TW_EAUTH naming it), and one denied it later gets
 *    TW_EREPLICAS with the refusal's words; wait_replicas without
 *    wait_timeout_ms is TW_EINVAL.
 *  - auth: master and replicas with requirepass (and masterauth), Sentinels
 *    with a password of their own: sentinel_password reaches the Sentinels
 *    (without it: TW_EAUTH, NOAUTH), the URL's password the master found
 *    through them; a wrong one is TW_EAUTH.
 *  - demoted: SENTINEL FAILOVER while a client and a worker run; the old
 *    master, now a replica, is left: what is set before and after is
 *    delivered.
 *  - failover: 1e4 tasks ($TWHEEL_REDIS_TEST_N; a fifth under sanitizers)
 *    set in batches over ~3 s (set_many, and one batch in four by single
 *    sets) with wait_replicas 1, due 1.5-4 s after their set, two
 *    redis_worker processes; the master SIGKILLed 2 s in (while deliveries
 *    are under way), a replica promoted by the Sentinels. Every set
 *    acknowledged (answered 0, or set_many every item) is delivered at least
 *    once, none before its due time (the servers share this machine's
 *    clock), nothing stays pending; the producer reached the new master
 *    (every set acknowledged), and each worker started tasks there.
 *    Lateness is not judged: tasks due during the failover wait for it.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/redis.h"

#ifndef RFX_WORKER_PATH
#error "RFX_WORKER_PATH: the redis_worker binary"
#endif

static atomic_uint delivered;

static enum tw_redis_result count(void *arg, const struct tw_redis_task *t)
{
    (void)arg;
    (void)t;
    atomic_fetch_add(&delivered, 1);
    return TW_REDIS_DONE;
}

/* The defaults with one servers entry; tw_redis_new's errbuf when err. */
static void config(struct tw_redis_config *cfg, const char *const *servers, const char *queue,
                   char err[256])
{
    tw_redis_config_init(cfg);
    cfg->servers = servers;
    cfg->nservers = 1;
    cfg->queue = queue;
    cfg->errbuf = err;
    cfg->errbuf_len = err ? 256 : 0;
}

static bool started(struct rfx_sentinels *s, const char *password)
{
    if (rfx_sentinels_start(s, password) == 0)
        return true;
    CHECK(!"sentinels started");
    rfx_sentinels_stop(s);
    return false;
}

static bool wait_delivered(unsigned n, unsigned ms)
{
    uint64_t end = rfx_mono_ms() + ms;
    while (atomic_load(&delivered) < n && rfx_mono_ms() < end)
        rfx_sleep_ms(20);
    return atomic_load(&delivered) >= n;
}

/* n tasks set on worker w, due in delay_ms: each acknowledged, all delivered. */
static void set_delivered(struct tw_redis *w, int n, int64_t delay_ms)
{
    atomic_store(&delivered, 0);
    for (int i = 0; w && i < n; i++) {
        char k[16];
        int kl = snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(tw_redis_set(w, k, (size_t)kl, "p", 1, delay_ms), 0);
    }
    CHECK(wait_delivered((unsigned)n, 10000));
}

static void test_discovery(void)
{
    struct rfx_sentinels s;
    if (!started(&s, NULL))
        return;
    const char *servers[] = {s.url};
    char err[256];
    struct tw_redis_config cfg;
    config(&cfg, servers, "sd", err);
    cfg.execute = count;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), 0);
    set_delivered(w, 100, 100);
    /* the tasks went to the master: its replicas hold what it held */
    uint64_t keys = 0;
    CHECK_EQ_INT(rfx_dbsize(&s.data[0], &keys), 0);
    CHECK(keys > 0); /* {sd:meta}:partitions at least */

    /* the replica wait: both replicas confirm; three cannot */
    struct tw_redis *c = NULL;
    config(&cfg, servers, "sd", err);
    cfg.wait_replicas = 2;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), TW_EINVAL); /* no wait_timeout_ms */
    CHECK(strstr(err, "wait_timeout_ms") != NULL);
    cfg.wait_timeout_ms = 1000;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    if (c) {
        CHECK_EQ_INT(tw_redis_set(c, "w1", 2, "p", 1, 60000), 0);
        CHECK_EQ_INT(tw_redis_last_error(c, err, sizeof err), 0);
        struct tw_redis_item it[2] = {{"w2", 2, "p", 1, 60000}, {"w3", 2, "p", 1, 60000}};
        CHECK_EQ_INT(tw_redis_set_many(c, it, 2), 2);
        CHECK_EQ_INT(tw_redis_move(c, "w1", 2, 50000), 0);
        CHECK_EQ_INT(tw_redis_remove(c, "w3", 2), 0);
        tw_redis_free(c);
    }
    c = NULL;
    cfg.wait_replicas = 3;
    cfg.wait_timeout_ms = 100;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    if (c) {
        CHECK_EQ_INT(tw_redis_set(c, "w4", 2, "p", 1, 60000), TW_EREPLICAS);
        CHECK_EQ_INT(tw_redis_last_error(c, err, sizeof err), TW_EREPLICAS);
        CHECK(strstr(err, "2 of 3 replicas") != NULL);
        struct tw_redis_item it[1] = {{"w5", 2, "p", 1, 60000}};
        CHECK_EQ_INT(tw_redis_set_many(c, it, 1), TW_EREPLICAS);
        CHECK_EQ_INT(tw_redis_move(c, "w4", 2, 50000), TW_EREPLICAS); /* it was stored */
        CHECK_EQ_INT(tw_redis_move(c, "nope", 4, 50000), TW_ENOENT);
        CHECK_EQ_INT(tw_redis_remove(c, "w5", 2), TW_EREPLICAS); /* stored too */
        struct tw_redis_stats st;
        CHECK_EQ_INT(tw_redis_stats(c, &st), 0);
        CHECK_EQ_U64(st.pending, 3); /* w1, w2, w4 (w6 below makes 4) */
        tw_redis_free(c);
    }

    /* a user WAIT is denied to: refused by new's permission check, naming
     * it; denied after new (the rule changed): written, not confirmed, the
     * refusal's words */
    CHECK_EQ_INT(rfx_command(&s.data[0], "ACL SETUSER nowait on >pw ~* &* +@all -wait"), 0);
    char nw[sizeof s.url + 16];
    CHECK(snprintf(nw, sizeof nw, "redis+sentinel://nowait:pw@%s",
                   s.url + strlen("redis+sentinel://")) < (int)sizeof nw);
    const char *nws[] = {nw};
    config(&cfg, nws, "sd", err);
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 100;
    c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), TW_EAUTH);
    CHECK_(strstr(err, "'wait 0 0'") != NULL, "'wait' named in: %s", err);
    tw_redis_free(c);
    c = NULL;
    CHECK_EQ_INT(rfx_command(&s.data[0], "ACL SETUSER nowait +wait"), 0);
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    CHECK_EQ_INT(rfx_command(&s.data[0], "ACL SETUSER nowait -wait"), 0);
    if (c) {
        CHECK_EQ_INT(tw_redis_set(c, "w6", 2, "p", 1, 60000), TW_EREPLICAS);
        CHECK_EQ_INT(tw_redis_last_error(c, err, sizeof err), TW_EREPLICAS);
        CHECK(strstr(err, "WAIT refused: NOPERM") != NULL);
        printf("WAIT denied: %s\n", err);
        tw_redis_free(c);
    }

    /* a master no Sentinel knows */
    char bad[600];
    snprintf(bad, sizeof bad, "%.*s/nosuch", (int)(strrchr(s.url, '/') - s.url), s.url);
    const char *bads[] = {bad};
    config(&cfg, bads, "sd", err);
    c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), TW_EINVAL);
    CHECK(strstr(err, "no master named \"nosuch\"") != NULL);
    printf("unknown master: %s\n", err);
    /* Sentinels that do not answer */
    const char *dead[] = {"redis+sentinel://127.0.0.1:1/mymaster"};
    config(&cfg, dead, "sd", err);
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), TW_EIO);
    tw_redis_free(w);
    rfx_sentinels_stop(&s);
}

static void test_auth(void)
{
    struct rfx_sentinels s;
    if (rfx_sentinels_start_auth(&s, "s3cret", "sentpw") != 0) {
        CHECK(!"sentinels started");
        rfx_sentinels_stop(&s);
        return;
    }
    const char *servers[] = {s.url};
    char err[256];
    struct tw_redis_config cfg;
    config(&cfg, servers, "sa", err);
    cfg.execute = count;
    cfg.wait_replicas = 2;
    cfg.wait_timeout_ms = 1000;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), TW_EAUTH); /* the Sentinels want theirs */
    CHECK(strstr(err, "NOAUTH") != NULL);
    printf("no Sentinel password: %s\n", err);
    cfg.sentinel_password = "sentpw";
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), 0);
    set_delivered(w, 50, 50);
    tw_redis_free(w);
    /* the wrong password, in the URL and in the field */
    char bad[600];
    snprintf(bad, sizeof bad, "redis+sentinel://:wrong@%s", strchr(s.url, '@') + 1);
    const char *bads[] = {bad};
    config(&cfg, bads, "sa", err);
    cfg.sentinel_password = "sentpw";
    struct tw_redis *c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), TW_EAUTH);
    CHECK(strstr(err, "WRONGPASS") != NULL && strstr(err, "wrong") == NULL);
    printf("wrong password: %s\n", err);
    rfx_sentinels_stop(&s);
}

/* Set keys [from, from + n) due in delay_ms, each retried while the calls
 * fail (a failover under way) for up to 20 s. How many were acknowledged. */
static int set_retried(struct tw_redis *c, int from, int n, int64_t delay_ms)
{
    int ok = 0;
    uint64_t end = rfx_mono_ms() + 20000;
    for (int i = from; i < from + n; i++) {
        char k[16];
        int kl = snprintf(k, sizeof k, "m%d", i);
        while (tw_redis_set(c, k, (size_t)kl, "p", 1, delay_ms) != 0 && rfx_mono_ms() < end)
            rfx_sleep_ms(20);
        ok += rfx_mono_ms() < end;
    }
    return ok;
}

/* A manual failover (SENTINEL FAILOVER): the old master lives on as a
 * replica, answering writes READONLY; the client and the worker move to the
 * new master, and what was set before and after is delivered. */
static void test_demoted(void)
{
    struct rfx_sentinels s;
    if (!started(&s, NULL))
        return;
    const char *servers[] = {s.url};
    struct tw_redis_config cfg;
    config(&cfg, servers, "sm", NULL);
    cfg.execute = count;
    struct tw_redis *w = NULL, *c = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), 0);
    config(&cfg, servers, "sm", NULL);
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    atomic_store(&delivered, 0);
    if (w && c) {
        CHECK_EQ_INT(set_retried(c, 0, 200, 3000), 200);
        CHECK_EQ_INT(rfx_command(&s.sentinel[0], "SENTINEL FAILOVER mymaster"), 0);
        int m = rfx_sentinels_master(&s, 0, 20000);
        CHECK(m > 0);
        CHECK_EQ_INT(set_retried(c, 200, 200, 100), 200);
        CHECK(wait_delivered(400, 20000));
        printf("delivered %u of 400 across a manual failover to data[%d]\n",
               atomic_load(&delivered), m);
        /* the old master becomes a replica (the Sentinels tell it to) */
        bool replica = false;
        for (uint64_t end = rfx_mono_ms() + 15000; !replica && rfx_mono_ms() < end;) {
            redisContext *old = rfx_connect(&s.data[0]);
            redisReply *x = old ? redisCommand(old, "ROLE") : NULL;
            replica = x && x->type == REDIS_REPLY_ARRAY && strcmp(x->element[0]->str, "slave") == 0;
            if (x)
                freeReplyObject(x);
            if (old)
                redisFree(old);
            rfx_sleep_ms(100);
        }
        CHECK(replica);
        /* and the layer keeps to the new master */
        atomic_store(&delivered, 0);
        CHECK_EQ_INT(set_retried(c, 400, 100, 50), 100);
        CHECK(wait_delivered(100, 10000));
    }
    tw_redis_free(w);
    tw_redis_free(c);
    rfx_sentinels_stop(&s);
}

#define BATCH 100
#define LEASE_MS 2000
#define WINDOW_MS 1000

static uint64_t load_all(struct rdel_set *d, char out[][300], uint64_t n)
{
    rdel_free(d);
    for (int w = 0; w < 2; w++)
        rdel_load(d, out[w], "f:", n);
    return rdel_count_ids(d, n);
}

static void test_failover(void)
{
    const uint64_t n = rw_test_size(10000);
    struct rfx_sentinels s;
    if (!started(&s, NULL))
        return;
    char out[2][300];
    pid_t pid[2] = {0};
    for (int w = 0; w < 2; w++) {
        snprintf(out[w], sizeof out[w], "%s/deliveries.%d", s.data[0].dir, w);
        /* 16 partitions, claimed by both workers: on one (the default on one
         * server) the worker whose claims come first may take every task,
         * and the other would start none on the new master */
        struct rw_opts o = {.servers = s.url, .queue = "sf", .out = out[w], .threads = 2,
                            .partitions = 16, .lease_ms = LEASE_MS, .window_ms = WINDOW_MS};
        CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid[w], NULL), 0);
    }
    const pid_t wpid[2] = {pid[0], pid[1]};
    const char *servers[] = {s.url};
    struct tw_redis_config cfg;
    config(&cfg, servers, "sf", NULL);
    cfg.partitions = 16;
    cfg.wait_replicas = 1;
    cfg.wait_timeout_ms = 1000;
    struct tw_redis *c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    uint64_t *due_lo = calloc(n, sizeof *due_lo);
    struct tw_redis_item *items = calloc(BATCH, sizeof *items);
    char (*keys)[16] = calloc(BATCH, sizeof *keys);
    if (!c || !due_lo || !items || !keys) {
        CHECK(!"setup");
        goto out;
    }
    srand(11);
    uint64_t start = rfx_mono_ms(), acked = 0, refused = 0, kill_us = 0;
    bool killed = false;
    for (uint64_t i = 0; i < n; i += BATCH) {
        size_t k = n - i < BATCH ? (size_t)(n - i) : BATCH;
        uint64_t now_ms = rfx_realtime_us() / 1000; /* the servers' clock: this machine's */
        for (size_t j = 0; j < k; j++) {
            int kl = snprintf(keys[j], sizeof keys[j], "f:%" PRIu64, i + j);
            int64_t delay = 1500 + rand() % 2500;
            items[j] = (struct tw_redis_item){keys[j], (size_t)kl, "payload", 7, delay};
            due_lo[i + j] = now_ms + (uint64_t)delay; /* the first try's: the earliest */
        }
        /* retried until every item is acknowledged (the failover's calls
         * fail); one batch in four by single sets (WAIT in the same write) */
        int rc = 0;
        if ((i / BATCH) % 4 == 3) {
            for (size_t j = 0; j < k; j++) {
                int one;
                while ((one = tw_redis_set(c, items[j].key, items[j].key_len, "payload", 7,
                                           items[j].delay_ms)) != 0 &&
                       rfx_mono_ms() - start < 40000)
                    refused++;
                rc += one == 0;
            }
        } else {
            while ((rc = tw_redis_set_many(c, items, k)) != (int)k &&
                   rfx_mono_ms() - start < 40000)
                refused++;
        }
        CHECK_EQ_INT(rc, (int)k);
        if (rc == (int)k)
            acked += k;
        if (!killed && rfx_mono_ms() - start >= 2000) {
            kill_us = rfx_realtime_us();
            CHECK_EQ_INT(rfx_kill(&s.data[0]), 0);
            printf("master SIGKILLed %" PRIu64 " ms in\n", rfx_mono_ms() - start);
            killed = true;
        }
        uint64_t target = start + (i + k) * 3000 / n, now = rfx_mono_ms();
        if (now < target)
            rfx_sleep_ms((unsigned)(target - now));
    }
    if (!killed) {
        kill_us = rfx_realtime_us();
        CHECK_EQ_INT(rfx_kill(&s.data[0]), 0);
    }
    int m = rfx_sentinels_master(&s, 0, 20000);
    CHECK(m > 0);
    printf("%" PRIu64 " sets acknowledged in %" PRIu64 " ms (%" PRIu64
           " calls refused during the failover); master now data[%d]\n",
           acked, rfx_mono_ms() - start, refused, m);
    CHECK_EQ_U64(acked, n);

    struct rdel_set d = {0};
    uint64_t got, deadline = rfx_mono_ms() + 40000;
    while ((got = load_all(&d, out, n)) < n && rfx_mono_ms() < deadline)
        rfx_sleep_ms(250);
    CHECK_EQ_U64(rw_wait_drained(c, deadline).pending, 0);
    for (int w = 0; w < 2; w++) {
        CHECK_EQ_INT(rw_stop(pid[w], 10000), 0);
        pid[w] = 0;
    }
    got = load_all(&d, out, n);
    CHECK_EQ_U64(d.bad_lines, 0);
    struct rverdict v;
    CHECK_EQ_INT(rverdict_compute(&d, n, NULL, due_lo, LEASE_MS, WINDOW_MS, &v), 0);
    rverdict_print(&v, "failover");
    CHECK_EQ_U64(v.missing, 0);
    CHECK_EQ_U64(v.early, 0);
    /* each worker reached the new master: it started tasks there */
    for (int w = 0; w < 2; w++) {
        uint64_t before = 0, after = 0;
        for (size_t i = 0; i < d.n; i++)
            if (d.v[i].pid == (int)wpid[w]) {
                before += d.v[i].start_us <= kill_us;
                after += d.v[i].start_us > kill_us;
            }
        printf("worker %d: %" PRIu64 " deliveries before the kill, %" PRIu64 " after\n", w,
               before, after);
        CHECK(after > 0);
    }
    rdel_free(&d);
out:
    for (int w = 0; w < 2; w++)
        if (pid[w] > 0)
            rfx_reap(pid[w]);
    free(due_lo);
    free(items);
    free(keys);
    tw_redis_free(c);
    rfx_sentinels_stop(&s);
}

int main(void)
{
    RUN(test_discovery);
    RUN(test_auth);
    RUN(test_demoted);
    RUN(test_failover);
    return test_summary();
}
