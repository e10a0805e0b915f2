/* SPDX-License-Identifier: MIT */
/* What a delivered task costs Redis in the START and acknowledgement path
 * (src/redis/ack.c, start.c, scripts.c: START).
 *
 * test_ack_batches: a worker on one partition delivers 300 tasks due over
 * 1.5 s. Its acknowledgements go in batches, once the oldest pending one
 * has waited the acknowledgement delay (100 ms): the HDELs in Redis's
 * commandstats number about one per batch (<= 40 here), not one per START
 * round; no group reads a lease (no ZMSCORE: START groups never do, and
 * acknowledgements sent well within their leases need not); every task
 * delivered once, none early, and nothing pending at the end.
 *
 * test_start_script: the START script run by the test, against a record
 * and a hold written by hand: a start marks the hold started and lengthens
 * it to max(due, now) + lease_ms + 0.5, answers 1; a start redone finds
 * the mark (still 1, the score not shortened); a stale token is refused
 * (-1) and changes nothing; a token whose lease member is gone is refused
 * and adds no member (ZADD XX); a start too early answers 0 and writes
 * nothing; an acknowledgement deletes only for its token with its lease
 * running (1), is stale otherwise (0), absent after the deletion (2).
 *
 * test_big_bucket: 20,000 tasks set at once with one delay on one
 * partition, so that one due bucket holds 10,000 or more (Lua's unpack
 * passes at most ~8000 values to a command: a claim that handed a whole
 * bucket to HMGET failed on every try, and those tasks never ran). Twice:
 * a worker started once they are due (its catch-up claims the bucket
 * whole, in due order), and a worker running while they are set 1.5 s
 * ahead (its claims split the bucket at their batch, 256 or 1024 tasks:
 * >= 10 calls, where the catch-up takes 2 or 3).
 * Each time every task is delivered once, none early, nothing left.
 *
 * test_share: two workers of 2 executors whose execute sleeps 4 ms (about
 * 450 tasks a second each) on one partition. Each first times its execute
 * on a warm-up (a worker takes whole buckets until it has); then 8,400
 * tasks come due over 3-15 s (350 a 500 ms bucket: more than one worker
 * runs, less than two). Each claims its share of every bucket a window
 * ahead of its own window (claim.c: Sharing), so both run part of each
 * bucket: judged by the server's buckets (a share is a bucket's first
 * tasks, so 500 ms spans that straddle two buckets may hold one worker's
 * run of due times), at most a quarter may be run >= 90% by one worker
 * (without shares: 21 of 24). Every task once, none early. It runs alone
 * (timing) and is not judged when the executors, at the execute time and
 * the run-queue wait measured in the same run, would have been busy more
 * than 90% of the load's time: workers that far behind lose their holds to
 * each other and split buckets by that instead.
 *
 * test_share_script: CLAIM's shares, by the script alone (below).
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "machine_stall.h"
#include "test.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h" /* the START script (test_start_script) */
#include "twheel/redis.h"

/* ---- acknowledgements in batches ------------------------------------------- */

#define BATCH_N 300
#define BATCH_SPREAD_MS 1500

/* Deliveries of tasks "<2 chars><id>", id < n: runs per id, early ones
 * (by the server's clock), the total. */
struct brec {
    _Atomic uint32_t *runs;
    size_t n;
    _Atomic uint64_t total, early;
    redisContext *tc; /* the test's connection, for the server's clock */
    pthread_mutex_t mu;
};

static enum tw_redis_result brec_exec(void *arg, const struct tw_redis_task *t)
{
    struct brec *R = arg;
    char k[16];
    size_t l = t->key_len < sizeof k - 1 ? t->key_len : sizeof k - 1;
    memcpy(k, t->key, l);
    k[l] = 0;
    unsigned long id = strtoul(k + 2, NULL, 10);
    if (id < R->n)
        atomic_fetch_add(&R->runs[id], 1);
    pthread_mutex_lock(&R->mu);
    uint64_t now = rw_redis_ms(R->tc);
    pthread_mutex_unlock(&R->mu);
    if (now && now < t->due_ms)
        atomic_fetch_add(&R->early, 1);
    atomic_fetch_add(&R->total, 1);
    return TW_REDIS_DONE;
}

/* A recorder of n ids on server srv (its own connection), or NULL. */
static struct brec *brec_new(const struct rfx_server *srv, size_t n)
{
    struct brec *R = calloc(1, sizeof *R);
    if (!R)
        return NULL;
    R->runs = calloc(n, sizeof *R->runs);
    R->n = n;
    R->tc = rfx_connect(srv);
    pthread_mutex_init(&R->mu, NULL);
    if (!R->runs || !R->tc) {
        if (R->tc)
            redisFree(R->tc);
        free(R->runs);
        free(R);
        return NULL;
    }
    return R;
}

static void brec_free(struct brec *R)
{
    if (!R)
        return;
    redisFree(R->tc);
    pthread_mutex_destroy(&R->mu);
    free(R->runs);
    free(R);
}

/* How many ids ran exactly once. */
static size_t brec_once(const struct brec *R)
{
    size_t once = 0;
    for (size_t i = 0; i < R->n; i++)
        once += atomic_load(&R->runs[i]) == 1;
    return once;
}

/* A queue of one partition on servers[0]; with R, a worker of 2 executors
 * recording into R. */
static void one_partition(struct tw_redis_config *cfg, const char *const *servers, const char *q,
                          struct brec *R)
{
    tw_redis_config_init(cfg);
    cfg->servers = servers;
    cfg->nservers = 1;
    cfg->queue = q;
    cfg->partitions = 1;
    if (R) {
        cfg->execute = brec_exec;
        cfg->arg = R;
        cfg->threads = 2;
    }
}

/* The calls of command `name` in INFO commandstats (0: none yet). */
static uint64_t cmd_calls(redisContext *c, const char *name)
{
    uint64_t n = 0;
    redisReply *x = redisCommand(c, "INFO commandstats");
    if (x && x->type == REDIS_REPLY_STRING) {
        char pat[64];
        snprintf(pat, sizeof pat, "cmdstat_%s:calls=", name);
        const char *p = strstr(x->str, pat);
        if (p)
            n = strtoull(p + strlen(pat), NULL, 10);
    }
    if (x)
        freeReplyObject(x);
    return n;
}

static void test_ack_batches(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    struct brec *R = brec_new(&srv, BATCH_N);
    redisContext *c = rfx_connect(&srv);
    struct tw_redis *client = NULL, *worker = NULL;
    CHECK(R && c);
    if (!R || !c)
        goto out;
    struct tw_redis_config cfg;
    one_partition(&cfg, servers, "ab", NULL);
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    one_partition(&cfg, servers, "ab", R);
    CHECK_EQ_INT(tw_redis_new(&worker, &cfg), 0);
    if (!client || !worker)
        goto out;
    int64_t delays[BATCH_N];
    for (size_t i = 0; i < BATCH_N; i++)
        delays[i] = 1000 + (int64_t)(i * BATCH_SPREAD_MS / BATCH_N);
    redisReply *x = redisCommand(c, "CONFIG RESETSTAT");
    if (x)
        freeReplyObject(x);
    CHECK_EQ_INT(rw_set_range(client, c, "b:", 0, BATCH_N, delays, NULL), BATCH_N);
    struct tw_redis_stats st =
        rw_wait_drained(client, rfx_mono_ms() + 1000 + BATCH_SPREAD_MS + 10000);
    CHECK_EQ_U64(st.pending, 0);
    uint64_t hdel = cmd_calls(c, "hdel"), zrem = cmd_calls(c, "zrem");
    uint64_t zmscore = cmd_calls(c, "zmscore"), hmget = cmd_calls(c, "hmget");
    printf("ack batches: %" PRIu64 " tasks: hdel %" PRIu64 ", zrem %" PRIu64 ", zmscore %" PRIu64
           ", hmget %" PRIu64 "\n",
           (uint64_t)atomic_load(&R->total), hdel, zrem, zmscore, hmget);
    /* about one batch per 100 ms over 1.5 s, and the last at the end */
    CHECK_(hdel >= 1 && hdel <= 40, "hdel calls %" PRIu64, hdel);
    /* the acknowledgements came well within their leases: none read */
    CHECK_(zmscore == 0, "zmscore %" PRIu64 ", hdel %" PRIu64, zmscore, hdel);
    CHECK_EQ_U64(brec_once(R), BATCH_N);
    CHECK_EQ_U64(atomic_load(&R->early), 0);
    CHECK_EQ_INT(tw_redis_stats(worker, &st), 0);
    CHECK_EQ_U64(st.delivered, BATCH_N);
    CHECK_EQ_U64(st.stale_acks, 0);
out:
    tw_redis_free(worker);
    tw_redis_free(client);
    brec_free(R);
    if (c)
        redisFree(c);
    rfx_stop(&srv);
}

/* ---- a due bucket of more tasks than one Lua call can pass ------------------ */

#define BIG_N 20000
#define BIG_DELAY_MS 1500

/* The length of the longest due bucket of partition 0 of queue q. */
static long long longest_bucket(redisContext *c, const char *q)
{
    long long most = 0;
    redisReply *x = redisCommand(c, "ZRANGE {%s:0}:d 0 -1", q);
    for (size_t i = 0; x && x->type == REDIS_REPLY_ARRAY && i < x->elements; i++) {
        redisReply *y = redisCommand(c, "LLEN {%s:0}:d:%s", q, x->element[i]->str);
        if (y && y->type == REDIS_REPLY_INTEGER && y->integer > most)
            most = y->integer;
        if (y)
            freeReplyObject(y);
    }
    if (x)
        freeReplyObject(x);
    return most;
}

/* One round of test_big_bucket on queue q: the worker started before the
 * sets (running) or once the tasks are due. */
static void big_bucket_round(const struct rfx_server *srv, const char *q, bool running)
{
    const char *servers[] = {rfx_addr(srv)};
    struct brec *R = brec_new(srv, BIG_N);
    int64_t *delays = malloc(BIG_N * sizeof *delays);
    redisContext *c = rfx_connect(srv);
    struct tw_redis *client = NULL, *worker = NULL;
    CHECK(R && delays && c);
    if (!R || !delays || !c)
        goto out;
    struct tw_redis_config cfg;
    one_partition(&cfg, servers, q, NULL);
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    one_partition(&cfg, servers, q, R);
    if (running)
        CHECK_EQ_INT(tw_redis_new(&worker, &cfg), 0);
    if (!client || (running && !worker))
        goto out;
    for (size_t i = 0; i < BIG_N; i++)
        delays[i] = BIG_DELAY_MS;
    uint64_t set0 = rw_redis_ms(c);
    CHECK_EQ_INT(rw_set_range(client, c, "g:", 0, BIG_N, delays, NULL), BIG_N);
    uint64_t set1 = rw_redis_ms(c);
    long long most = longest_bucket(c, q);
    if (!running) {
        /* two buckets at most (one is this long), unless a busy machine
         * spread the set over three */
        if ((set1 + BIG_DELAY_MS) / 500 - (set0 + BIG_DELAY_MS) / 500 <= 1)
            CHECK_(most >= BIG_N / 2, "longest bucket %lld", most);
        else
            printf("big bucket: the set took %" PRIu64 " ms, over three buckets\n",
                   set1 - set0);
        rfx_sleep_ms(BIG_DELAY_MS + 100);
        CHECK_EQ_INT(tw_redis_new(&worker, &cfg), 0);
        if (!worker)
            goto out;
    }
    struct tw_redis_stats st = rw_wait_drained(client, rfx_mono_ms() + BIG_DELAY_MS + 60000);
    CHECK_EQ_U64(st.pending, 0);
    uint64_t once = brec_once(R);
    CHECK_EQ_INT(tw_redis_stats(worker, &st), 0);
    printf("big bucket, %s: longest bucket %lld; %" PRIu64 " of %d delivered once; %" PRIu64
           " claim calls\n",
           running ? "worker running" : "catch-up", most, once, BIG_N, st.claims);
    CHECK_EQ_U64(once, BIG_N);
    CHECK_EQ_U64(atomic_load(&R->early), 0);
    if (running)
        CHECK_(st.claims >= 10, "claims %" PRIu64, st.claims);
out:
    tw_redis_free(worker);
    tw_redis_free(client);
    brec_free(R);
    if (c)
        redisFree(c);
    free(delays);
}

static void test_big_bucket(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    big_bucket_round(&srv, "bb", false);
    big_bucket_round(&srv, "bs", true);
    rfx_stop(&srv);
}

/* ---- workers with a slow execute share the buckets ------------------------- */

/* A worker knows its share once it has timed its executes (before that it
 * takes whole buckets: README, Sharing), so each first runs a warm-up due at
 * once: worker 0 alone, then worker 1 while worker 0 is still at its fill
 * with the first (so claims none of it). The load, due from SHARE_FIRST_MS
 * after that, lies beyond every window claimed before. */
#define SHARE_WARM0_N 1000
#define SHARE_WARM1_N 200
#define SHARE_N 8400          /* due over 3-15 s: 700 a second, 350 a bucket */
#define SHARE_FIRST_MS 3000
#define SHARE_LAST_MS 15000
#define SHARE_EXEC_MS 4       /* 2 executors: about 450 tasks a second a worker */
#define SHARE_BUSY_MAX 0.9    /* executors this busy fall behind: not judged */

struct share_arg {
    struct brec *R;
    _Atomic uint8_t *who; /* per id: 1 + the worker that ran it */
    _Atomic uint64_t *due; /* per id of the load: its due time, ms */
    _Atomic uint64_t *exec_ns, *execs; /* execute's wall time, summed over both */
    uint8_t id;
};

static enum tw_redis_result share_exec(void *arg, const struct tw_redis_task *t)
{
    struct share_arg *a = arg;
    uint64_t t0 = mstall_now_ns();
    (void)brec_exec(a->R, t);
    char k[16]; /* "s:<id>", not NUL-terminated */
    size_t l = t->key_len < sizeof k - 1 ? t->key_len : sizeof k - 1;
    memcpy(k, t->key, l);
    k[l] = 0;
    unsigned long id = strtoul(k + 2, NULL, 10);
    if (id < SHARE_N + SHARE_WARM0_N + SHARE_WARM1_N)
        atomic_store(&a->who[id], (uint8_t)(1 + a->id));
    if (id < SHARE_N)
        atomic_store(&a->due[id], t->due_ms);
    rfx_sleep_ms(SHARE_EXEC_MS);
    atomic_fetch_add(a->exec_ns, mstall_now_ns() - t0);
    atomic_fetch_add(a->execs, 1);
    return TW_REDIS_DONE;
}

static void test_share(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    struct brec *R = brec_new(&srv, SHARE_N);
    enum { WHO_N = SHARE_N + SHARE_WARM0_N + SHARE_WARM1_N };
    _Atomic uint8_t *who = calloc(WHO_N, sizeof *who);
    _Atomic uint64_t *due = calloc(SHARE_N, sizeof *due);
    int64_t *delays = calloc(SHARE_N, sizeof *delays);
    redisContext *c = rfx_connect(&srv);
    struct tw_redis *client = NULL, *worker[2] = {NULL, NULL};
    struct share_arg arg[2];
    _Atomic uint64_t exec_ns = 0, execs = 0;
    CHECK(R && who && due && delays && c);
    if (!R || !who || !due || !delays || !c)
        goto out;
    struct tw_redis_config cfg;
    one_partition(&cfg, servers, "sh", NULL);
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    if (!client)
        goto out;
    /* the warm-ups: ids past SHARE_N, which the recorder does not count */
    for (int w = 0; w < 2; w++) {
        arg[w] = (struct share_arg){R, who, due, &exec_ns, &execs, (uint8_t)w};
        one_partition(&cfg, servers, "sh", R);
        cfg.execute = share_exec;
        cfg.arg = &arg[w];
        CHECK_EQ_INT(tw_redis_new(&worker[w], &cfg), 0);
        if (!worker[w])
            goto out;
        size_t first = w ? SHARE_N + SHARE_WARM0_N : SHARE_N;
        size_t n = w ? SHARE_WARM1_N : SHARE_WARM0_N;
        CHECK_EQ_INT(rw_set_range(client, c, "s:", first, n, delays, NULL), (int)n);
        if (!w)
            rfx_sleep_ms(300); /* worker 0 has claimed its warm-up */
    }
    struct tw_redis_stats st = rw_wait_drained(client, rfx_mono_ms() + 30000);
    CHECK_EQ_U64(st.pending, 0);
    unsigned warm[2] = {0, 0};
    for (size_t i = SHARE_N; i < WHO_N; i++)
        if (atomic_load(&who[i]))
            warm[atomic_load(&who[i]) - 1]++;
    printf("share: warm-up tasks run per worker: %u/%u\n", warm[0], warm[1]);
    CHECK(warm[0] && warm[1]);
    for (size_t i = 0; i < SHARE_N; i++)
        delays[i] = SHARE_FIRST_MS + (int64_t)(i * (SHARE_LAST_MS - SHARE_FIRST_MS) / SHARE_N);
    pid_t peers[1] = {srv.pid};
    struct mstall machine;
    mstall_start(&machine, peers, 1);
    atomic_store(&exec_ns, 0);
    atomic_store(&execs, 0);
    uint64_t t0 = rfx_mono_ms();
    CHECK_EQ_INT(rw_set_range(client, c, "s:", 0, SHARE_N, delays, NULL), SHARE_N);
    st = rw_wait_drained(client, rfx_mono_ms() + SHARE_LAST_MS + 60000);
    uint64_t span = rfx_mono_ms() - t0 - SHARE_FIRST_MS;
    mstall_stop(&machine);
    mstall_print(&machine, "test_share");
    CHECK_EQ_U64(st.pending, 0);
    CHECK_EQ_U64(brec_once(R), SHARE_N);
    CHECK_EQ_U64(atomic_load(&R->early), 0);
    /* per due bucket (the server's 500 ms buckets, which the shares split):
     * how many one worker ran (nearly) alone. A share is a bucket's first
     * tasks, so within a bucket each worker runs a run of due times. */
    uint64_t b0 = UINT64_MAX;
    for (size_t i = 0; i < SHARE_N; i++)
        if (atomic_load(&due[i]) && atomic_load(&due[i]) / 500 < b0)
            b0 = atomic_load(&due[i]) / 500;
    enum { NB = (SHARE_LAST_MS - SHARE_FIRST_MS) / 500 + 1 };
    unsigned ran[NB][2] = {{0}}, alone = 0, judged = 0;
    for (size_t i = 0; i < SHARE_N; i++) {
        uint8_t w = atomic_load(&who[i]);
        uint64_t b = atomic_load(&due[i]) / 500 - b0;
        if (w && b < NB)
            ran[b][w - 1]++;
    }
    printf("share: tasks a bucket per worker:");
    for (size_t b = 0; b < NB; b++) {
        unsigned t = ran[b][0] + ran[b][1];
        if (t < 300) /* the first and last: part of a bucket */
            continue;
        judged++;
        alone += ran[b][0] * 10 >= t * 9 || ran[b][1] * 10 >= t * 9;
        printf(" %u/%u", ran[b][0], ran[b][1]);
    }
    printf("; one worker alone in %u of %u\n", alone, judged);
    /* What the machine explains: the executors' share of the time they were
     * busy or waiting for a CPU. Near 1 the workers cannot keep up however
     * they split the load; a task a worker cannot start within its hold is
     * claimed back by the other, and buckets are split by that instead. */
    uint64_t n_ex = atomic_load(&execs);
    double mean_ms = n_ex ? (double)atomic_load(&exec_ns) / 1e6 / (double)n_ex : 0;
    double load_ms = SHARE_LAST_MS - SHARE_FIRST_MS;
    double busy = (double)SHARE_N * mean_ms / 4.0 / load_ms + machine.rq_self_ms / load_ms;
    printf("share: execute %.2f ms on average; executors busy %.2f of the load's %.0f ms "
           "(drained %" PRIu64 " ms after it)\n",
           mean_ms, busy, load_ms, span > load_ms ? span - (uint64_t)load_ms : 0);
    if (busy > SHARE_BUSY_MAX) {
        printf("share: not judged: the machine gave the executors too little time\n");
        goto out;
    }
    /* each worker takes about what it runs in a bucket's time: both in each */
    CHECK(judged >= NB - 2);
    CHECK_(alone * 4 <= judged, "one worker ran alone %u of %u buckets", alone, judged);
out:
    tw_redis_free(worker[0]);
    tw_redis_free(worker[1]);
    tw_redis_free(client);
    brec_free(R);
    free(who);
    free(due);
    free(delays);
    if (c)
        redisFree(c);
    rfx_stop(&srv);
}

/* ---- the CLAIM script's shares ---------------------------------------------- */

/* CLAIM of queue "sz" partition 0: window 1000 ms, n 1024, the zone 3000 ms
 * past the window; share, taken ("bucket:count ...") and shares_only as
 * given. Counts the tasks it took per bucket into got[] (bucket - base),
 * and those due within the window (before base) into *win. -1: an error. */
static int share_claim(redisContext *c, unsigned share, const char *taken, bool only,
                       uint64_t base, unsigned got[8], unsigned *win)
{
    char sh[16];
    snprintf(sh, sizeof sh, "%u", share);
    const char *av[] = {"EVAL", tw_rr_scripts[TW_RR_CLAIM], "5", "{sz:0}:d", "{sz:0}:leases",
                        "{sz:0}:task", "{sz:0}:seq", "{sz:0}:hold", "1000", "1024", "30000",
                        "4194304", "1000", "0", sh, taken, only ? "1" : "0", "3000"};
    size_t al[sizeof av / sizeof *av];
    for (size_t i = 0; i < sizeof av / sizeof *av; i++)
        al[i] = strlen(av[i]);
    redisReply *x = redisCommandArgv(c, (int)(sizeof av / sizeof *av), av, al);
    if (!x || x->type != REDIS_REPLY_ARRAY || x->elements < 3 || (x->elements - 3) % 2) {
        fprintf(stderr, "share_claim: %s\n", x && x->type == REDIS_REPLY_ERROR ? x->str : "?");
        if (x)
            freeReplyObject(x);
        return -1;
    }
    memset(got, 0, 8 * sizeof *got);
    *win = 0;
    for (size_t i = 2; i + 1 < x->elements; i += 2) { /* key, "token attempt due payload" */
        unsigned long long tok, att, due = 0;
        if (sscanf(x->element[i + 1]->str, "%llu %llu %llu", &tok, &att, &due) != 3)
            due = 0; /* counted in the window: the test fails there */
        uint64_t b = (uint64_t)due / 500;
        if (b < base)
            ++*win;
        else if (b - base < 8)
            got[b - base]++;
    }
    freeReplyObject(x);
    return 0;
}

/* test_share_script: the shares, by the script alone. 10 tasks due within
 * the window, 60 in each of two buckets past it, and a lease that ran out.
 * A claim of shares only (share 30) takes 30 of each zone bucket and
 * nothing of the window, sets no hold, recovers nothing; again with what
 * it took counted: nothing; with 10 counted in the first, 20 more there; a
 * plain claim without a share: the window's 10 and the recovered one
 * only, the zone's buckets left as they were. */
static void test_share_script(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    redisContext *c = rfx_connect(&srv);
    struct tw_redis *client = NULL;
    struct tw_redis_config cfg;
    one_partition(&cfg, servers, "sz", NULL);
    CHECK_EQ_INT(tw_redis_new(&client, &cfg), 0);
    if (!client || !c)
        goto out;
    /* due 20 ms into their buckets: the sets run after `now` is read, never
     * before, so a stall of up to 480 ms keeps them there */
    uint64_t now = rw_redis_ms(c), b1 = (now + 2200) / 500, b2 = b1 + 2;
    uint64_t base = (now + 1000) / 500 + 1; /* the zone's first bucket */
    int64_t delays[130];
    for (size_t i = 0; i < 130; i++)
        delays[i] = i < 10 ? 300 : (int64_t)((i < 70 ? b1 : b2) * 500 + 20 - now);
    CHECK_EQ_INT(rw_set_range(client, c, "z:", 0, 130, delays, NULL), 130);
    /* and a lease that ran out (a task due a second ago, its holder gone) */
    redisReply *x = redisCommand(c, "HSET {sz:0}:task z:lost %s", "7 0 1000 p");
    if (x)
        freeReplyObject(x);
    x = redisCommand(c, "ZADD {sz:0}:leases 2000 z:lost:7");
    if (x)
        freeReplyObject(x);
    unsigned got[8], win;
    char taken[128];
    CHECK_EQ_INT(share_claim(c, 30, "", true, base, got, &win), 0);
    CHECK_EQ_INT(win, 0);
    CHECK_EQ_INT(got[b1 - base], 30);
    CHECK_EQ_INT(got[b2 - base], 30);
    x = redisCommand(c, "EXISTS {sz:0}:hold");
    CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == 0);
    if (x)
        freeReplyObject(x);
    x = redisCommand(c, "ZSCORE {sz:0}:leases z:lost:7"); /* not recovered by shares only */
    CHECK(x && x->type == REDIS_REPLY_STRING && strcmp(x->str, "2000") == 0);
    if (x)
        freeReplyObject(x);
    snprintf(taken, sizeof taken, "%" PRIu64 ":30 %" PRIu64 ":30", b1, b2);
    CHECK_EQ_INT(share_claim(c, 30, taken, true, base, got, &win), 0);
    CHECK_EQ_INT(got[b1 - base] + got[b2 - base] + win, 0);
    snprintf(taken, sizeof taken, "%" PRIu64 ":10 %" PRIu64 ":30", b1, b2);
    CHECK_EQ_INT(share_claim(c, 30, taken, true, base, got, &win), 0);
    CHECK_EQ_INT(got[b1 - base], 20);
    CHECK_EQ_INT(got[b2 - base], 0);
    CHECK_EQ_INT(share_claim(c, 0, "", false, base, got, &win), 0);
    CHECK_EQ_INT(win, 11); /* and the lost one, recovered and leased again */
    CHECK_EQ_INT(got[b1 - base] + got[b2 - base], 0);
    x = redisCommand(c, "LLEN {sz:0}:d:%" PRIu64, b1);
    CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == 10);
    if (x)
        freeReplyObject(x);
    x = redisCommand(c, "LLEN {sz:0}:d:%" PRIu64, b2);
    CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == 30);
    if (x)
        freeReplyObject(x);
out:
    tw_redis_free(client);
    if (c)
        redisFree(c);
    rfx_stop(&srv);
}

/* ---- the START script ------------------------------------------------------ */

#define LK "{ss:0}:leases"
#define TK "{ss:0}:task"
#define LEASE_MS 30000

/* START of one group: na acknowledgements (lease member, key pairs) then ns starts
 * (lease member key:token, due pairs) as ARGV words, until_ms the earliest lease
 * end of the acknowledged as a worker knows it (0: none known, the script
 * reads the leases); the reply (NULL on error). */
static redisReply *start_call(redisContext *c, unsigned ahead_ms, uint64_t until_ms, int na,
                              int ns, const char *const *words)
{
    const char *av[32];
    size_t al[32];
    char lease[16], ahead[24], cna[8], cns[8], until[24];
    snprintf(lease, sizeof lease, "%d", LEASE_MS);
    snprintf(ahead, sizeof ahead, "%u", ahead_ms * 1000u);
    snprintf(cna, sizeof cna, "%d", na);
    snprintf(cns, sizeof cns, "%d", ns);
    snprintf(until, sizeof until, "%" PRIu64, until_ms);
    int n = 0;
    av[n++] = "EVAL";
    av[n++] = tw_rr_scripts[TW_RR_START];
    av[n++] = "0";
    av[n++] = lease;
    av[n++] = ahead;
    av[n++] = LK;
    av[n++] = TK;
    av[n++] = cna;
    av[n++] = cns;
    av[n++] = until;
    for (int i = 0; i < 2 * na + 2 * ns; i++)
        av[n++] = words[i];
    for (int i = 0; i < n; i++)
        al[i] = strlen(av[i]);
    redisReply *x = redisCommandArgv(c, n, av, al);
    if (x && x->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "start_call: %s\n", x->type == REDIS_REPLY_ERROR ? x->str : "?");
        freeReplyObject(x);
        return NULL;
    }
    return x;
}

/* The score of lease member m (key:token), -1 when absent. */
static double zscore(redisContext *c, const char *m)
{
    redisReply *x = redisCommand(c, "ZSCORE " LK " %s", m);
    double v = x && x->type == REDIS_REPLY_STRING ? strtod(x->str, NULL) : -1;
    if (x)
        freeReplyObject(x);
    return v;
}

static void test_start_script(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    redisContext *c = rfx_connect(&srv);
    CHECK(c != NULL);
    if (!c) {
        rfx_stop(&srv);
        return;
    }
    uint64_t now = rw_redis_ms(c);
    uint64_t due = now + 2000, hold = due + 1000;
    redisReply *x;
    /* k1 held by token 5 (a claim's hold), k2 by token 9 with no lease
     * member, k3 due later than any start ahead, k4 held and running */
    char r1[64], r2[64], r3[64], r4[64];
    snprintf(r1, sizeof r1, "5 0 %" PRIu64 " p1", due);
    snprintf(r2, sizeof r2, "9 0 %" PRIu64 " p2", due);
    snprintf(r3, sizeof r3, "7 0 %" PRIu64 " p3", due + 60000);
    snprintf(r4, sizeof r4, "8 1 %" PRIu64 " p4", now);
    CHECK_EQ_INT(rfx_command(&srv, "HSET " TK " k1 %s k2 %s k3 %s k4 %s", r1, r2, r3, r4), 0);
    char d1[24], d3[24];
    snprintf(d1, sizeof d1, "%" PRIu64, due);
    snprintf(d3, sizeof d3, "%" PRIu64, due + 60000);
    CHECK_EQ_INT(rfx_command(&srv, "ZADD " LK " %" PRIu64 " k1:5 %" PRIu64 " k3:7 %" PRIu64 ".5 k4:8",
                             hold, due + 61000, now + LEASE_MS),
                 0);
    /* k1 started 3 s ahead: marked, lengthened to due + lease_ms (due is
     * after now), answered 1, 0 */
    x = start_call(c, 3000, 0, 0, 1, (const char *[]){"k1:5", d1});
    CHECK(x && x->elements == 3);
    if (x && x->elements == 3) {
        CHECK_EQ_INT(x->element[1]->integer, 1);
        CHECK_EQ_INT(x->element[2]->integer, 0);
    }
    if (x)
        freeReplyObject(x);
    double s1 = zscore(c, "k1:5");
    CHECK_(s1 == (double)(due + LEASE_MS) + 0.5, "k1 lease %.1f, due %" PRIu64, s1, due);
    /* redone: started again, the mark kept, never shortened */
    x = start_call(c, 3000, 0, 0, 1, (const char *[]){"k1:5", d1});
    CHECK(x && x->elements == 3 && x->element[1]->integer == 1);
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k1:5") == s1);
    /* a stale token: refused, nothing written */
    x = start_call(c, 3000, 0, 0, 1, (const char *[]){"k1:4", d1});
    CHECK(x && x->elements == 3 && x->element[1]->integer == -1);
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k1:5") == s1);
    /* the token with no lease member: refused, no member added */
    x = start_call(c, 3000, 0, 0, 1, (const char *[]){"k2:9", d1});
    CHECK(x && x->elements == 3 && x->element[1]->integer == -1);
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k2:9") == -1);
    /* not due within ahead: 0 and the us until due, the hold unchanged */
    x = start_call(c, 3000, 0, 0, 1, (const char *[]){"k3:7", d3});
    CHECK(x && x->elements == 3 && x->element[1]->integer == 0 &&
          x->element[2]->integer > 50000000);
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k3:7") == (double)(due + 61000));
    /* acknowledgements: a stale token (0), k4's (1: deleted with its lease),
     * then k4 again (2: absent); until ahead: the leases are not read */
    x = start_call(c, 0, now + LEASE_MS, 2, 0, (const char *[]){"k1:4", "k1", "k4:8", "k4"});
    CHECK(x && x->elements == 3);
    if (x && x->elements == 3) {
        CHECK_EQ_INT(x->element[1]->integer, 0);
        CHECK_EQ_INT(x->element[2]->integer, 1);
    }
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k4:8") == -1);
    CHECK(zscore(c, "k1:5") == s1);
    x = start_call(c, 0, now + LEASE_MS, 1, 0, (const char *[]){"k4:8", "k4"});
    CHECK(x && x->elements == 2 && x->element[1]->integer == 2);
    if (x)
        freeReplyObject(x);
    /* until ahead, the leases are not read: a matching token deletes even
     * where the score says the lease ended (a worker's until is never past
     * its lease's end unless that START's write was lost, a failover: the
     * token still says no one else holds the task) */
    char r6[64];
    snprintf(r6, sizeof r6, "3 1 %" PRIu64 " p6", now);
    CHECK_EQ_INT(rfx_command(&srv, "HSET " TK " k6 %s", r6), 0);
    CHECK_EQ_INT(rfx_command(&srv, "ZADD " LK " %" PRIu64 " k6:3", now - 1), 0);
    x = start_call(c, 0, now + LEASE_MS, 1, 0, (const char *[]){"k6:3", "k6"});
    CHECK(x && x->elements == 2 && x->element[1]->integer == 1);
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k6:3") == -1);
    /* until not ahead: the leases are read, and a running one's task is
     * deleted as before (k5); one whose lease has run out deletes nothing
     * (k1) */
    char r5[64];
    snprintf(r5, sizeof r5, "6 1 %" PRIu64 " p5", now);
    CHECK_EQ_INT(rfx_command(&srv, "HSET " TK " k5 %s", r5), 0);
    CHECK_EQ_INT(rfx_command(&srv, "ZADD " LK " %" PRIu64 ".5 k1:5 %" PRIu64 ".5 k5:6", now - 1,
                             now + LEASE_MS),
                 0);
    x = start_call(c, 0, now - 1, 2, 0, (const char *[]){"k5:6", "k5", "k1:5", "k1"});
    CHECK(x && x->elements == 3);
    if (x && x->elements == 3) {
        CHECK_EQ_INT(x->element[1]->integer, 1);
        CHECK_EQ_INT(x->element[2]->integer, 0);
    }
    if (x)
        freeReplyObject(x);
    CHECK(zscore(c, "k5:6") == -1);
    x = start_call(c, 0, 0, 1, 0, (const char *[]){"k1:5", "k1"});
    CHECK(x && x->elements == 2 && x->element[1]->integer == 0);
    if (x)
        freeReplyObject(x);
    x = redisCommand(c, "HEXISTS " TK " k1");
    CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == 1);
    if (x)
        freeReplyObject(x);
    redisFree(c);
    rfx_stop(&srv);
}

int main(void)
{
    RUN(test_ack_batches);
    RUN(test_start_script);
    RUN(test_big_bucket);
    RUN(test_share);
    RUN(test_share_script);
    return test_summary();
}
