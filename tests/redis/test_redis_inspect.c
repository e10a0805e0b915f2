/* SPDX-License-Identifier: MIT */
/* Operating a queue (twheel/redis.h): get, list, counts, pause and resume,
 * drop (dead letters and schedules included), a pause while leases expire,
 * the adopted partition count, the Prometheus rendering; against a
 * real redis-server started by the fixture. Each case has its own queue.
 * Waits are bounded polls; nothing asserts speed, only states, order,
 * counts, what the server holds, and how many commands a listing costs. */
#define _GNU_SOURCE
#include "fixture.h"
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "twheel/redis.h"

static struct rfx_server srv;
static const char *srv_addr[1];

/* ---- a recording worker ------------------------------------------------------ */

#define REC_MAX 256
struct rec {
    pthread_mutex_t mu;
    size_t n;
    char key[REC_MAX][32];
    uint64_t due[REC_MAX];
    unsigned slow_ms;
    atomic_int running;
    bool fail_f; /* keys starting with 'f' answer FAILED */
};

static enum tw_redis_result rec_exec(void *arg, const struct tw_redis_task *t)
{
    struct rec *R = arg;
    atomic_fetch_add(&R->running, 1);
    pthread_mutex_lock(&R->mu);
    if (R->n < REC_MAX) {
        snprintf(R->key[R->n], sizeof R->key[0], "%.*s", (int)t->key_len, t->key);
        R->due[R->n++] = t->due_ms;
    }
    unsigned slow = R->slow_ms;
    pthread_mutex_unlock(&R->mu);
    if (slow)
        rfx_sleep_ms(slow);
    atomic_fetch_sub(&R->running, 1);
    return R->fail_f && t->key_len && t->key[0] == 'f' ? TW_REDIS_FAILED : TW_REDIS_DONE;
}

static size_t rec_count(struct rec *R)
{
    pthread_mutex_lock(&R->mu);
    size_t n = R->n;
    pthread_mutex_unlock(&R->mu);
    return n;
}

static void cfg_for(struct tw_redis_config *c, const char *queue, uint32_t parts, struct rec *R)
{
    tw_redis_config_init(c);
    srv_addr[0] = rfx_addr(&srv);
    c->servers = srv_addr;
    c->nservers = 1;
    c->queue = queue;
    c->partitions = parts;
    c->lease_ms = 3000;
    c->window_ms = 1000;
    c->connect_timeout_ms = 500;
    c->command_timeout_ms = 2000;
    if (R) {
        memset(R, 0, sizeof *R);
        pthread_mutex_init(&R->mu, NULL);
        c->execute = rec_exec;
        c->arg = R;
        c->threads = 1; /* one executor: deliveries in start order */
    }
}

static struct tw_redis *open_q(const char *queue, uint32_t parts, struct rec *R)
{
    struct tw_redis_config c;
    cfg_for(&c, queue, parts, R);
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    return r;
}

/* Keys of the server matching pattern (SCAN), counted; names into out (may be NULL). */
static size_t scan_keys(const char *pattern, char out[][64], size_t max)
{
    redisContext *c = rfx_connect(&srv);
    size_t n = 0;
    unsigned long long cur = 0;
    if (!c)
        return SIZE_MAX;
    do {
        redisReply *x = redisCommand(c, "SCAN %llu MATCH %s COUNT 1000", cur, pattern);
        if (!x || x->type != REDIS_REPLY_ARRAY || x->elements != 2) {
            if (x)
                freeReplyObject(x);
            break;
        }
        cur = strtoull(x->element[0]->str, NULL, 10);
        for (size_t i = 0; i < x->element[1]->elements; i++, n++)
            if (out && n < max)
                snprintf(out[n], 64, "%s", x->element[1]->element[i]->str);
        freeReplyObject(x);
    } while (cur != 0);
    redisFree(c);
    return n;
}

/* INFO commandstats: calls of one command ("zrange"). */
static long long cmd_calls(const char *cmd)
{
    redisContext *c = rfx_connect(&srv);
    long long v = 0;
    if (!c)
        return -1;
    redisReply *x = redisCommand(c, "INFO commandstats");
    char pat[64];
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
    const char *p = x && x->type == REDIS_REPLY_STRING ? strstr(x->str, pat) : NULL;
    if (p)
        v = strtoll(p + strlen(pat), NULL, 10);
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return v;
}

/* ---- get ---------------------------------------------------------------------- */

/* A task's states as a worker takes it: waiting, held (claimed before its due
 * time), running (started: attempt counted, lease to lease_ms), then gone. */
static void test_get_states(void)
{
    struct rec R;
    struct tw_redis *c = open_q("ins_get", 1, NULL);
    if (!c)
        return;
    struct tw_redis_info in;
    char pay[8];
    CHECK_EQ_INT(tw_redis_get(c, "nope", 4, &in, NULL, 0), TW_ENOENT);
    char big[TW_REDIS_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    CHECK_EQ_INT(tw_redis_get(c, big, sizeof big, &in, NULL, 0), TW_E2BIG);
    CHECK_EQ_INT(tw_redis_get(c, "k", 1, NULL, NULL, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_redis_set(c, "sp", 2, "  two blanks", 12, 60000), 0);
    char sp[16];
    CHECK_EQ_INT(tw_redis_get(c, "sp", 2, &in, sp, sizeof sp), 0);
    CHECK(in.payload_len == 12 && memcmp(sp, "  two blanks", 12) == 0);
    CHECK_EQ_INT(tw_redis_set(c, "e", 1, "", 0, 60000), 0); /* an empty payload */
    CHECK_EQ_INT(tw_redis_get(c, "e", 1, &in, sp, sizeof sp), 0);
    CHECK_EQ_U64(in.payload_len, 0);
    CHECK_EQ_INT(tw_redis_remove(c, "sp", 2), 0);
    CHECK_EQ_INT(tw_redis_remove(c, "e", 1), 0);
    CHECK_EQ_INT(tw_redis_set(c, "k", 1, "payload-long", 12, 2500), 0);
    CHECK_EQ_INT(tw_redis_get(c, "k", 1, &in, pay, sizeof pay), 0);
    CHECK_EQ_INT(in.state, TW_REDIS_WAITING);
    CHECK_EQ_U64(in.payload_len, 12);
    CHECK(memcmp(pay, "payload-", 8) == 0); /* cut at cap */
    CHECK_EQ_U64(in.attempt, 0);
    CHECK_EQ_U64(in.token, 0);
    /* set 2500 ms ahead, read at most a second later even on a busy machine */
    CHECK(in.due_ms >= in.now_ms + 1500 && in.due_ms <= in.now_ms + 2501);
    uint64_t due = in.due_ms;

    struct tw_redis *w = open_q("ins_get", 1, &R);
    if (!w) {
        tw_redis_free(c);
        return;
    }
    R.slow_ms = 1500;
    bool held = false, running = false;
    uint64_t end = rfx_mono_ms() + 8000;
    while (rfx_mono_ms() < end && !running) {
        int rc = tw_redis_get(c, "k", 1, &in, NULL, 0);
        if (rc == 0 && in.state == TW_REDIS_HELD) {
            held = true;
            CHECK(in.token > 0);
            CHECK(in.lease_end_ms >= due && in.lease_end_ms < due + 3000);
            CHECK_EQ_U64(in.attempt, 0);
        }
        if (rc == 0 && in.state == TW_REDIS_RUNNING && atomic_load(&R.running)) {
            running = true;
            CHECK_EQ_U64(in.attempt, 1);
            CHECK(in.lease_end_ms >= due + 3000);
            CHECK_EQ_U64(in.due_ms, due);
        }
        rfx_sleep_ms(20);
    }
    CHECK(held);
    CHECK(running);
    end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && tw_redis_get(c, "k", 1, &in, NULL, 0) != TW_ENOENT)
        rfx_sleep_ms(20);
    CHECK_EQ_INT(tw_redis_get(c, "k", 1, &in, NULL, 0), TW_ENOENT);
    tw_redis_free(w);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* Held or running by START's mark, whatever the lease lengths: a getter
 * whose lease_ms equals the workers' hold (1 s) still reads a held task as
 * held (a length test would call its hold a started lease), then running
 * with its start counted once START marked the lease. */
static void test_get_mark(void)
{
    struct rec R;
    struct tw_redis_config cc;
    cfg_for(&cc, "ins_mark", 1, NULL);
    cc.lease_ms = 1000;
    struct tw_redis *c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cc), 0);
    if (!c)
        return;
    struct tw_redis *w = open_q("ins_mark", 1, &R);
    if (!w) {
        tw_redis_free(c);
        return;
    }
    R.slow_ms = 1500;
    struct tw_redis_info in;
    CHECK_EQ_INT(tw_redis_set(c, "m", 1, "p", 1, 2500), 0);
    bool held = false, running = false;
    uint64_t end = rfx_mono_ms() + 8000;
    while (rfx_mono_ms() < end && !running) {
        int rc = tw_redis_get(c, "m", 1, &in, NULL, 0);
        if (rc == 0 && in.state == TW_REDIS_HELD) {
            held = true;
            CHECK(in.lease_end_ms >= in.due_ms + 1000); /* the hold: as long as cc's lease */
            CHECK_EQ_U64(in.attempt, 0);
        }
        if (rc == 0 && in.state == TW_REDIS_RUNNING) {
            /* START grants a task start_ahead_ms (10) before its due time at most */
            CHECK(in.now_ms + 100 >= in.due_ms);
            CHECK_EQ_U64(in.attempt, 1);
            running = atomic_load(&R.running) != 0;
        }
        rfx_sleep_ms(20);
    }
    CHECK(held);
    CHECK(running);
    tw_redis_free(w);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* A hold_ms longer than lease_ms is cut to lease_ms. START marks a start by
 * lengthening the lease (ZADD GT to max(due, now) + lease_ms + 0.5); a hold
 * that ended later would refuse that write, and the task would run with its
 * start uncounted (held, attempt 0, to get and to max_attempts). */
static void test_get_mark_long_hold(void)
{
    struct rec R;
    struct tw_redis *c = open_q("ins_hold", 1, NULL);
    if (!c)
        return;
    struct tw_redis_config wc;
    cfg_for(&wc, "ins_hold", 1, &R);
    wc.lease_ms = 2000;
    wc.hold_ms = 6000;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), 0);
    if (!w) {
        tw_redis_free(c);
        return;
    }
    R.slow_ms = 1000; /* within the lease: one delivery */
    struct tw_redis_info in;
    CHECK_EQ_INT(tw_redis_set(c, "h", 1, "p", 1, 2500), 0);
    bool running = false;
    uint64_t end = rfx_mono_ms() + 8000;
    while (rfx_mono_ms() < end && !running) {
        int rc = tw_redis_get(c, "h", 1, &in, NULL, 0);
        if (rc == 0 && in.state == TW_REDIS_HELD) {
            /* the hold is the lease's length, not the 6 s asked */
            uint64_t from = in.due_ms > in.now_ms ? in.due_ms : in.now_ms;
            CHECK(in.lease_end_ms <= from + 2000);
            CHECK_EQ_U64(in.attempt, 0);
        }
        if (rc == 0 && in.state == TW_REDIS_RUNNING) {
            CHECK_EQ_U64(in.attempt, 1);
            running = atomic_load(&R.running) != 0;
        }
        rfx_sleep_ms(20);
    }
    CHECK(running);
    end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && tw_redis_get(c, "h", 1, &in, NULL, 0) != TW_ENOENT)
        rfx_sleep_ms(20);
    CHECK_EQ_INT(tw_redis_get(c, "h", 1, &in, NULL, 0), TW_ENOENT);
    CHECK_EQ_U64(rec_count(&R), 1);
    tw_redis_free(w);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* ---- list --------------------------------------------------------------------- */

struct seen {
    char key[32];
    uint64_t due;
};

/* Every page of [from, to) of c, limit per page; into v (max); count, or SIZE_MAX. */
static size_t list_all(struct tw_redis *c, uint64_t from, uint64_t to, size_t limit,
                       struct seen *v, size_t max, const char *remove_between)
{
    size_t n = 0;
    struct tw_redis_cursor cur;
    bool have = false;
    for (int pages = 0; pages < 1000; pages++) {
        struct tw_redis_page *pg;
        int rc = tw_redis_list(c, from, to, have ? &cur : NULL, limit, &pg);
        CHECK_EQ_INT(rc, 0);
        if (rc)
            return SIZE_MAX;
        CHECK(pg->n <= limit);
        for (size_t i = 0; i < pg->n && n < max; i++, n++) {
            snprintf(v[n].key, sizeof v[n].key, "%.*s", (int)pg->items[i].key_len,
                     pg->items[i].key);
            v[n].due = pg->items[i].due_ms;
        }
        bool more = pg->more && pg->n;
        if (more) {
            cur = pg->next;
            have = true;
            if (remove_between && pages == 0) /* the cursor's own task gone */
                CHECK_EQ_INT(tw_redis_remove(c, cur.key, cur.key_len), 0);
        }
        tw_redis_page_free(pg);
        if (!more)
            return n;
    }
    return SIZE_MAX;
}

static int seen_cmp(const struct seen *a, const struct seen *b)
{
    if (a->due != b->due)
        return a->due < b->due ? -1 : 1;
    return strcmp(a->key, b->key);
}

/* Pages in due order across partitions (ties by key bytes), a cursor that
 * survives its own task's removal, ranges, and bounded work per call. */
static void test_list_pages(void)
{
    enum { N = 300 };
    struct tw_redis *c = open_q("ins_list", 4, NULL);
    if (!c)
        return;
    static struct tw_redis_item it[N];
    static char keys[N][16];
    for (int i = 0; i < N; i++) {
        int l = snprintf(keys[i], sizeof keys[i], "t%03d", i);
        /* ties: 100 tasks with one delay (set together: one due ms per partition call) */
        it[i] = (struct tw_redis_item){keys[i], (size_t)l, "p", 1,
                                       i < 100 ? 60000 : 60000 + (int64_t)(i * 137 % 50000)};
    }
    CHECK_EQ_INT(tw_redis_set_many(c, it, N), N);
    static struct seen all[N + 10], part[N + 10];
    size_t n = list_all(c, 0, UINT64_MAX, 7, all, N + 10, NULL);
    CHECK_EQ_U64(n, N);
    for (size_t i = 1; i < n && n != SIZE_MAX; i++)
        CHECK(seen_cmp(&all[i - 1], &all[i]) < 0);
    struct tw_redis_info in;
    for (size_t i = 0; i < n && n != SIZE_MAX; i += 37) {
        CHECK_EQ_INT(tw_redis_get(c, all[i].key, strlen(all[i].key), &in, NULL, 0), 0);
        CHECK_EQ_U64(in.due_ms, all[i].due);
    }
    /* one page of everything equals the pages */
    struct tw_redis_page *pg;
    CHECK_EQ_INT(tw_redis_list(c, 0, UINT64_MAX, NULL, 1000, &pg), 0);
    if (pg) {
        CHECK_EQ_U64(pg->n, N);
        CHECK(!pg->more);
        for (size_t i = 0; i < pg->n && i < n; i++)
            CHECK(strncmp(pg->items[i].key, all[i].key, pg->items[i].key_len) == 0);
        tw_redis_page_free(pg);
    }
    /* a range: exactly the tasks of [from, to) */
    uint64_t from = all[120].due, to = all[200].due;
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        want += all[i].due >= from && all[i].due < to;
    size_t m = list_all(c, from, to, 5, part, N + 10, NULL);
    CHECK_EQ_U64(m, want);
    for (size_t i = 0; i < m && m != SIZE_MAX; i++)
        CHECK(part[i].due >= from && part[i].due < to);
    /* bounded: a page of 10 reads at most 10 + 2 buckets per partition (each whole:
     * one LRANGE and one HMGET per 512 tasks, these hold fewer) */
    CHECK_EQ_INT(rfx_command(&srv, "CONFIG RESETSTAT"), 0);
    CHECK_EQ_INT(tw_redis_list(c, 0, UINT64_MAX, NULL, 10, &pg), 0);
    tw_redis_page_free(pg);
    long long lr = cmd_calls("lrange"), hm = cmd_calls("hmget");
    long long zb = cmd_calls("zrangebyscore");
    CHECK(lr >= 1 && lr <= 4 * 12);
    CHECK_EQ_INT(hm, lr);
    CHECK(zb >= 4 && zb <= 4 * 2);
    /* the cursor's task removed between pages: the listing goes on after it */
    size_t k = list_all(c, 0, UINT64_MAX, 30, part, N + 10, "remove");
    CHECK_EQ_U64(k, N); /* listed on the first page, then removed: none twice */
    for (size_t i = 1; i < k && k != SIZE_MAX; i++)
        CHECK(seen_cmp(&part[i - 1], &part[i]) < 0);
    /* bad arguments */
    CHECK_EQ_INT(tw_redis_list(c, 0, 10, NULL, 0, &pg), TW_EINVAL);
    CHECK_EQ_INT(tw_redis_list(c, 0, 10, NULL, TW_REDIS_PAGE_MAX + 1, &pg), TW_EINVAL);
    CHECK_EQ_INT(tw_redis_list(c, 11, 10, NULL, 5, &pg), TW_EINVAL);
    CHECK_EQ_INT(tw_redis_drop(c, false), 0);
    tw_redis_free(c);
}

/* Tasks of one bucket listed in due order whatever order they were put in
 * (a bucket is a LIST of keys), over more than one 512-key read of it. */
static void test_list_bucket_order(void)
{
    enum { N = 1200 };
    struct tw_redis *c = open_q("ins_lorder", 1, NULL);
    if (!c)
        return;
    static struct tw_redis_item it[N];
    static char keys[N][16];
    /* two calls: the later due times first, so each bucket holds them out of order */
    for (int half = 0; half < 2; half++) {
        for (int i = 0; i < N / 2; i++) {
            int j = half * (N / 2) + i;
            int l = snprintf(keys[j], sizeof keys[j], "o%04d", j);
            it[i] = (struct tw_redis_item){keys[j], (size_t)l, "p", 1,
                                           (half ? 600000 : 600200) + (int64_t)(i * 7 % 200)};
        }
        CHECK_EQ_INT(tw_redis_set_many(c, it, N / 2), N / 2);
    }
    static struct seen all[N + 10];
    size_t n = list_all(c, 0, UINT64_MAX, 7, all, N + 10, NULL);
    CHECK_EQ_U64(n, N);
    for (size_t i = 1; i < n && n != SIZE_MAX; i++)
        CHECK(seen_cmp(&all[i - 1], &all[i]) < 0);
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_counts(c, 600100, &q), 0);
    CHECK_EQ_U64(q.waiting, N);
    size_t want = 0; /* the bucket across now + within counted by its tasks' due times */
    for (size_t i = 0; i < n && n != SIZE_MAX; i++)
        want += all[i].due < q.now_ms + 600100;
    CHECK_EQ_U64(q.due_within, want);
    CHECK_EQ_INT(tw_redis_counts(c, 700000, &q), 0);
    CHECK_EQ_U64(q.due_within, N);
    CHECK_EQ_INT(tw_redis_drop(c, false), 0);
    tw_redis_free(c);
}

/* ---- counts -------------------------------------------------------------------- */

static void test_counts_lag(void)
{
    struct tw_redis *c = open_q("ins_counts", 4, NULL);
    if (!c)
        return;
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_counts(c, 1000, &q), 0);
    CHECK_EQ_U64(q.pending, 0);
    CHECK_EQ_U64(q.lag_ms, 0);
    CHECK_EQ_U64(q.partitions, 4);
    CHECK_EQ_INT(tw_redis_set(c, "a", 1, "", 0, 0), 0);
    CHECK_EQ_INT(tw_redis_set(c, "b", 1, "", 0, 100), 0);
    CHECK_EQ_INT(tw_redis_set(c, "c", 1, "", 0, 5000), 0);
    CHECK_EQ_INT(tw_redis_set(c, "d", 1, "", 0, 600000), 0);
    rfx_sleep_ms(700);
    CHECK_EQ_INT(tw_redis_counts(c, 1000, &q), 0);
    CHECK_EQ_U64(q.pending, 4);
    CHECK_EQ_U64(q.waiting, 4);
    CHECK_EQ_U64(q.held + q.running, 0);
    CHECK_EQ_U64(q.due_within, 2); /* a, b overdue; c in 4.3 s, d in 10 min */
    CHECK(!q.due_capped);
    CHECK(q.lag_ms >= 650 && q.lag_ms < 5000);
    CHECK_EQ_INT(tw_redis_counts(c, 10000, &q), 0);
    CHECK_EQ_U64(q.due_within, 3);
    CHECK_EQ_U64(q.paused, 0);
    CHECK_EQ_INT(tw_redis_drop(c, false), 0);
    tw_redis_free(c);
}

/* ---- pause and resume ------------------------------------------------------------ */

/* Paused: nothing claimed (sets accepted, lag grows); what a worker held
 * before the pause still runs; resumed: what came due runs, in due order. */
static void test_pause_resume(void)
{
    struct rec R;
    struct tw_redis *c = open_q("ins_pause", 4, NULL);
    struct tw_redis *w = c ? open_q("ins_pause", 4, &R) : NULL;
    if (!w) {
        tw_redis_free(c);
        return;
    }
    /* held before the pause: it still runs */
    CHECK_EQ_INT(tw_redis_set(c, "early", 5, "", 0, 1500), 0);
    struct tw_redis_info in;
    uint64_t end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && tw_redis_get(c, "early", 5, &in, NULL, 0) == 0 &&
           in.state == TW_REDIS_WAITING)
        rfx_sleep_ms(10);
    CHECK(in.state != TW_REDIS_WAITING);
    long long ev0 = cmd_calls("eval");
    CHECK_EQ_INT(tw_redis_pause(c), 0);
    /* one script flags every partition at once (one server) */
    CHECK_EQ_INT((int)(cmd_calls("eval") - ev0), 1);
    CHECK_EQ_INT(tw_redis_pause(c), 0); /* idempotent */
    end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && rec_count(&R) < 1)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(rec_count(&R), 1);
    /* paused: sets accepted, nothing delivered */
    char keys[20][8];
    for (int i = 0; i < 20; i++) {
        int l = snprintf(keys[i], sizeof keys[i], "k%02d", i);
        CHECK_EQ_INT(tw_redis_set(c, keys[i], (size_t)l, "", 0, 100 + (19 - i) * 20), 0);
    }
    rfx_sleep_ms(2000);
    CHECK_EQ_U64(rec_count(&R), 1);
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_counts(c, 0, &q), 0);
    CHECK_EQ_U64(q.paused, 4);
    CHECK_EQ_U64(q.waiting, 20);
    CHECK(q.lag_ms >= 1000);
    ev0 = cmd_calls("eval");
    CHECK_EQ_INT(tw_redis_resume(c), 0);
    CHECK_EQ_INT((int)(cmd_calls("eval") - ev0), 1); /* and clears them at once */
    end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && rec_count(&R) < 21)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(rec_count(&R), 21);
    pthread_mutex_lock(&R.mu);
    for (size_t i = 2; i < R.n; i++) /* the catch-up in due order */
        CHECK(R.due[i - 1] <= R.due[i]);
    CHECK_EQ_STR(R.key[1], "k19"); /* the earliest due */
    pthread_mutex_unlock(&R.mu);
    CHECK_EQ_INT(tw_redis_counts(c, 0, &q), 0);
    CHECK_EQ_U64(q.paused, 0);
    tw_redis_free(w);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* Wait until worker w has begun k more refill rounds (a round claims every
 * partition: the first of them has ended once the k-th begins, k >= 2);
 * bounded by 10 s. */
static void wait_rounds(struct tw_redis *w, uint64_t k)
{
    struct tw_redis_stats st;
    if (tw_redis_stats(w, &st) != 0)
        return;
    uint64_t want = st.refills + k, end = rfx_mono_ms() + 10000;
    while (rfx_mono_ms() < end && tw_redis_stats(w, &st) == 0 && st.refills < want)
        rfx_sleep_ms(10);
    CHECK(st.refills >= want);
}

/* A catch-up bigger than a worker's fill (65,536 held). After a resume (or
 * a reconnect) every partition is unknown and nothing claimed is handed
 * over until each has been claimed again; a claim takes an overdue bucket
 * whole. Here each of two partitions holds 70,000 tasks in one overdue
 * bucket: the first claim filled the carry past the fill, the fill check
 * then refused the second partition's claim in every round, and the worker
 * delivered nothing, for good. Found by a review. The tasks are written
 * straight into Redis (records and one bucket each, as SET writes them:
 * the schema in src/redis/redis.c, buckets of 500 ms), due 300 ms ago. */
static void test_catch_up_past_the_fill(void)
{
    struct rec R;
    struct tw_redis *c = open_q("ins_fill", 2, NULL);
    struct tw_redis *w = c ? open_q("ins_fill", 2, &R) : NULL;
    if (!w) {
        tw_redis_free(c);
        return;
    }
    CHECK_EQ_INT(tw_redis_pause(c), 0);
    wait_rounds(w, 2);
    redisContext *rc = rfx_connect(&srv);
    CHECK(rc != NULL);
    for (int p = 0; rc && p < 2; p++) {
        redisReply *x = redisCommand(
            rc, "EVAL %s 0 %s %d",
            "local q, n = ARGV[1], tonumber(ARGV[2]) local t = redis.call('TIME') "
            "local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - 300 "
            "local b = math.floor(due / 500) local bk = q .. ':d:' .. b "
            "for i = 1, n do local k = 'c' .. i "
            "redis.call('HSET', q .. ':task', k, '0 0 ' .. due .. ' ') "
            "redis.call('RPUSH', bk, k) end "
            "redis.call('ZADD', q .. ':d', b, b) return n",
            p ? "{ins_fill:1}" : "{ins_fill:0}", 70000);
        CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == 70000);
        if (x)
            freeReplyObject(x);
    }
    if (rc)
        redisFree(rc);
    CHECK_EQ_INT(tw_redis_resume(c), 0);
    struct tw_redis_stats st;
    uint64_t end = rfx_mono_ms() + 20000;
    while (rfx_mono_ms() < end && tw_redis_stats(w, &st) == 0 && st.delivered < 1000)
        rfx_sleep_ms(20);
    CHECK_(st.delivered >= 1000, "%llu of 140000 delivered in 20 s after the resume",
           (unsigned long long)st.delivered);
    tw_redis_free(w);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* ---- drop, and what an empty queue leaves ----------------------------------------- */

static void test_drop(void)
{
    struct rec R;
    struct tw_redis *c = open_q("ins_drop", 2, NULL);
    if (!c)
        return;
    /* 1500 buckets on 2 partitions: several drop calls each */
    enum { N = 3000 };
    static struct tw_redis_item it[N];
    static char keys[N][16];
    for (int i = 0; i < N; i++) {
        int l = snprintf(keys[i], sizeof keys[i], "d%d", i);
        it[i] = (struct tw_redis_item){keys[i], (size_t)l, "x", 1, 60000 + (int64_t)i * 500};
    }
    CHECK_EQ_INT(tw_redis_set_many(c, it, N), N);
    CHECK_EQ_INT(tw_redis_pause(c), 0);
    CHECK(scan_keys("{ins_drop:*", NULL, 0) > 1000);
    CHECK_EQ_INT(tw_redis_drop(c, false), 0);
    CHECK_EQ_U64(scan_keys("{ins_drop:*", NULL, 0), 0);
    tw_redis_free(c);

    /* an emptied queue: what it leaves once its workers stopped */
    c = open_q("ins_drop", 2, NULL);
    struct tw_redis *w = c ? open_q("ins_drop", 2, &R) : NULL;
    if (!w) {
        tw_redis_free(c);
        return;
    }
    CHECK_EQ_INT(tw_redis_set(c, "a", 1, "", 0, 10), 0);
    CHECK_EQ_INT(tw_redis_set(c, "b", 1, "", 0, 10), 0);
    uint64_t end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && rec_count(&R) < 2)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(rec_count(&R), 2);
    /* a worker running: refused, nothing deleted */
    CHECK_EQ_INT(tw_redis_drop(c, false), TW_EBUSY);
    CHECK(scan_keys("{ins_drop:meta}:partitions", NULL, 0) == 1);
    tw_redis_free(w);
    /* the holds expire 2 * window + 1 s after the last claim */
    end = rfx_mono_ms() + 8000;
    while (rfx_mono_ms() < end && scan_keys("{ins_drop:*}:hold", NULL, 0) > 0)
        rfx_sleep_ms(100);
    char left[16][64];
    size_t nl = scan_keys("{ins_drop:*", left, 16);
    size_t seq = 0, meta = 0;
    for (size_t i = 0; i < nl && i < 16; i++) {
        seq += strstr(left[i], "}:seq") != NULL;
        meta += strcmp(left[i], "{ins_drop:meta}:partitions") == 0 ||
                strcmp(left[i], "{ins_drop:meta}:schema") == 0;
    }
    CHECK(seq >= 1 && seq <= 2); /* the token counters of the partitions used */
    CHECK_EQ_U64(meta, 2);
    CHECK_EQ_U64(nl, seq + meta); /* nothing else */
    CHECK_EQ_INT(tw_redis_drop(c, false), 0);
    CHECK_EQ_U64(scan_keys("{ins_drop:*", NULL, 0), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* ---- partitions 0: the stored count --------------------------------------------- */

static void test_adopt(void)
{
    struct tw_redis_config cf;
    struct tw_redis *r = NULL;
    cfg_for(&cf, "ins_adopt", 0, NULL);
    CHECK_EQ_INT(tw_redis_new(&r, &cf), TW_ENOENT);
    CHECK_EQ_U64(scan_keys("{ins_adopt:*", NULL, 0), 0); /* nothing created */
    struct tw_redis *c = open_q("ins_adopt", 5, NULL);
    CHECK_EQ_INT(tw_redis_new(&r, &cf), 0);
    struct tw_redis_counts q;
    if (r) {
        CHECK_EQ_INT(tw_redis_set(r, "x", 1, "", 0, 60000), 0);
        CHECK_EQ_INT(tw_redis_counts(r, 0, &q), 0);
        CHECK_EQ_U64(q.partitions, 5);
        CHECK_EQ_U64(q.pending, 1);
        tw_redis_free(r);
    }
    struct rec R;
    cfg_for(&cf, "ins_adopt", 0, &R);
    CHECK_EQ_INT(tw_redis_new(&r, &cf), TW_EINVAL); /* a worker must name its count */
    pthread_mutex_destroy(&R.mu);
    if (c) {
        CHECK_EQ_INT(tw_redis_drop(c, false), 0);
        tw_redis_free(c);
    }
}

/* ---- metrics ---------------------------------------------------------------------- */

/* The text as Prometheus reads it: promtool check metrics (skipped, with a
 * message, when promtool is missing). */
static void promcheck(const char *text, size_t len)
{
    if (system("command -v promtool >/dev/null") != 0) {
        printf("SKIP promtool check: promtool is not installed (Debian package prometheus)\n");
        return;
    }
    char path[] = "/tmp/tw_metrics_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, text, len) == (ssize_t)len);
    if (fd >= 0)
        close(fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
    CHECK_EQ_INT(system(cmd), 0);
    unlink(path);
}

static void test_metrics(void)
{
    struct tw_redis *c = open_q("ins_metrics", 2, NULL);
    if (!c)
        return;
    CHECK_EQ_INT(tw_redis_set(c, "m", 1, "", 0, 0), 0);
    char small[64];
    size_t need = 0;
    CHECK_EQ_INT(tw_redis_metrics(c, 1000, small, sizeof small, &need), TW_E2BIG);
    CHECK(need > sizeof small);
    char *buf = malloc(need + 1);
    size_t len = 0;
    CHECK_EQ_INT(tw_redis_metrics(c, 1000, buf, need + 1, &len), 0);
    CHECK_EQ_U64(len, need);
    CHECK(strstr(buf, "twheel_redis_tasks{queue=\"ins_metrics\",state=\"waiting\"} 1\n") != NULL);
    CHECK(strstr(buf, "twheel_redis_queue_up{queue=\"ins_metrics\"} 1\n") != NULL);
    CHECK(strstr(buf, "lateness") == NULL); /* a client: no worker's figures */
    CHECK(strstr(buf, "delivered") == NULL);
    CHECK_EQ_INT(tw_redis_metrics(NULL, 0, buf, need, &len), TW_EINVAL);
    /* NULL buf: with cap 0 a query of the length, with a cap a mistake */
    size_t asked = 0;
    CHECK_EQ_INT(tw_redis_metrics(c, 1000, NULL, 0, &asked), TW_E2BIG);
    CHECK_EQ_U64(asked, need);
    CHECK_EQ_INT(tw_redis_metrics(c, 1000, NULL, 16, &asked), TW_EINVAL);
    free(buf);
    /* a worker's: its counters and histogram, one delivery in it */
    struct rec R;
    struct tw_redis *w = open_q("ins_metrics", 2, &R);
    uint64_t end = rfx_mono_ms() + 5000;
    while (w && rfx_mono_ms() < end && rec_count(&R) < 1)
        rfx_sleep_ms(10);
    /* its acknowledgement (delivered counts it) */
    char big[32768];
    int mrc = -1;
    end = rfx_mono_ms() + 5000;
    do {
        rfx_sleep_ms(20);
        mrc = w ? tw_redis_metrics(w, 1000, big, sizeof big, &len) : -1;
    } while (mrc == 0 && rfx_mono_ms() < end &&
             !strstr(big, "twheel_redis_delivered_total{queue=\"ins_metrics\"} 1\n"));
    CHECK_EQ_INT(mrc, 0);
    CHECK(strstr(big, "# TYPE twheel_redis_lateness_seconds histogram\n") != NULL);
    CHECK(strstr(big, "twheel_redis_lateness_seconds_count{queue=\"ins_metrics\"} 1\n"));
    CHECK(strstr(big, "twheel_redis_lateness_seconds_bucket{queue=\"ins_metrics\",le=\"+Inf\"} 1\n"));
    CHECK(strstr(big, "twheel_redis_delivered_total{queue=\"ins_metrics\"} 1\n"));
    promcheck(big, len); /* the worker's text (the tool's test checks a client's) */
    tw_redis_free(w);
    pthread_mutex_destroy(&R.mu);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0); /* the worker's holds live on for seconds */
    tw_redis_free(c);
}

/* ---- dead letters and schedules: get, counts, metrics, drop ------------------------ */

static uint64_t dead_n(struct tw_redis *c)
{
    uint64_t n = UINT64_MAX;
    CHECK_EQ_INT(tw_redis_dead_count(c, &n), 0);
    return n;
}

/* Keys of the server matching pattern, but the move and remove markers
 * ({q:p}:r:<id>, which expire by themselves). */
static size_t keys_left(const char *pattern)
{
    static char names[256][64];
    size_t n = scan_keys(pattern, names, 256), left = 0;
    for (size_t i = 0; i < n && i < 256; i++)
        left += strstr(names[i], "}:r:") == NULL;
    return n == SIZE_MAX ? n : left + (n > 256 ? n - 256 : 0);
}

/* Wait up to ms for the queue's dead letters to reach n; their count. */
static uint64_t wait_dead_n(struct tw_redis *c, uint64_t n, unsigned ms)
{
    uint64_t end = rfx_mono_ms() + ms, d = dead_n(c);
    while (rfx_mono_ms() < end && d < n) {
        rfx_sleep_ms(20);
        d = dead_n(c);
    }
    return d;
}

/* A worker of queue q (parts partitions) whose tasks "f..." answer FAILED,
 * retry limit 1 for the queue; servers: the fixture's (NULL) or these. */
static struct tw_redis *open_failing(const char *q, uint32_t parts, struct rec *R,
                                     const char *const *servers, size_t n)
{
    struct tw_redis_config cf;
    cfg_for(&cf, q, parts, R);
    R->fail_f = true;
    cf.max_attempts = 1;
    if (servers) {
        cf.servers = servers;
        cf.nservers = n;
    }
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &cf), 0);
    return w;
}

/* A task's own max_attempts as get reads it (above bit 32 of the record's
 * attempt field; its starts below), before and after a start; the dead
 * letters and schedules in counts and in the worker's metrics (promtool
 * checked); drop deletes their keys too. */
static void test_dead_sched(void)
{
    struct rec R;
    struct tw_redis *c = open_q("ins_ds", 2, NULL);
    struct tw_redis *w = c ? open_failing("ins_ds", 2, &R, NULL, 0) : NULL;
    if (!w) {
        tw_redis_free(c);
        return;
    }
    struct tw_redis_set_opts three = {.max_attempts = 3};
    struct tw_redis_info in;
    CHECK_EQ_INT(tw_redis_set_opts(c, "own", 3, "p", 1, 600000, &three), 0);
    CHECK_EQ_INT(tw_redis_set(c, "none", 4, "", 0, 600000), 0);
    CHECK_EQ_INT(tw_redis_get(c, "own", 3, &in, NULL, 0), 0);
    CHECK_EQ_INT(in.state, TW_REDIS_WAITING);
    CHECK_EQ_U64(in.attempt, 0);
    CHECK_EQ_U64(in.max_attempts, 3);
    CHECK_EQ_U64(in.payload_len, 1);
    CHECK_EQ_INT(tw_redis_get(c, "none", 4, &in, NULL, 0), 0);
    CHECK_EQ_U64(in.max_attempts, 0);
    /* "fm" fails once of its own 3; "f1" once of the queue's 1: a dead letter */
    CHECK_EQ_INT(tw_redis_set_opts(c, "fm", 2, "", 0, 0, &three), 0);
    CHECK_EQ_INT(tw_redis_set(c, "f1", 2, "x", 1, 0), 0);
    CHECK_EQ_U64(wait_dead_n(c, 1, 5000), 1);
    uint64_t end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end && rec_count(&R) < 2)
        rfx_sleep_ms(10);
    CHECK_EQ_INT(tw_redis_get(c, "fm", 2, &in, NULL, 0), 0);
    CHECK(in.attempt >= 1 && in.attempt <= 2); /* retried after 1 s, then 2 s */
    CHECK_EQ_U64(in.max_attempts, 3);           /* kept by the scripts that copied it */
    CHECK_EQ_INT(tw_redis_remove(c, "fm", 2), 0);
    struct tw_redis_schedule sc = {.every_ms = 3600000};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "sch", 3, "s", 1, &sc, NULL), 0);
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_counts(c, 0, &q), 0);
    CHECK_EQ_U64(q.dead, 1);
    CHECK_EQ_U64(q.schedules, 1);
    static char big[32768];
    size_t len = 0;
    CHECK_EQ_INT(tw_redis_metrics(w, 1000, big, sizeof big, &len), 0);
    CHECK(strstr(big, "twheel_redis_dead_total{queue=\"ins_ds\"} 1\n") != NULL);
    CHECK(strstr(big, "twheel_redis_events_dropped_total{queue=\"ins_ds\"} 0\n") != NULL);
    CHECK(strstr(big, "# TYPE twheel_redis_schedule_fires_total counter\n") != NULL);
    CHECK(strstr(big, "twheel_redis_dead_letters{queue=\"ins_ds\"} 1\n") != NULL);
    CHECK(strstr(big, "twheel_redis_schedules{queue=\"ins_ds\"} 1\n") != NULL);
    promcheck(big, len);
    CHECK_EQ_U64(scan_keys("{ins_ds:*}:dead", NULL, 0), 1);
    CHECK_EQ_U64(scan_keys("{ins_ds:*}:sched", NULL, 0), 1);
    CHECK_EQ_U64(scan_keys("{ins_ds:*}:sched:n", NULL, 0), 1);
    tw_redis_free(w);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0); /* the worker's holds live on for seconds */
    CHECK_EQ_U64(keys_left("{ins_ds:*"), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* ---- a pause while leases expire ------------------------------------------------ */

struct dead_seen {
    char err[64];
    uint32_t attempt;
};
static void dead_seen_fn(void *arg, const struct tw_redis_dead *d)
{
    struct dead_seen *s = arg;
    snprintf(s->err, sizeof s->err, "%.*s", (int)d->error_len, d->error);
    s->attempt = d->attempt;
}

/* A paused queue's claims return before recovering expired leases: a worker
 * process killed during the pause while it runs "x0" and "x1" leaves both
 * leased past their end, no dead letter, while another worker claims. After
 * the resume the claims recover "x0" (run again) and bury "x1" (its own
 * max_attempts 1: dead, "lease lost"). */
static void test_pause_expiry(void)
{
    struct tw_redis *c = open_q("ins_pexp", 4, NULL);
    if (!c)
        return;
    char out[300];
    snprintf(out, sizeof out, "%s/ins_pexp.deliveries", srv.dir);
    struct tw_redis_set_opts one = {.max_attempts = 1};
    CHECK_EQ_INT(tw_redis_set(c, "x0", 2, "a", 1, 0), 0);
    CHECK_EQ_INT(tw_redis_set_opts(c, "x1", 2, "b", 1, 0, &one), 0);
    struct rw_opts o = {.servers = rfx_addr(&srv), .queue = "ins_pexp", .out = out, .threads = 2,
                        .partitions = 4, .lease_ms = 1000, .window_ms = 300, .hold_ms = 300,
                        .exec_us = 60000000};
    pid_t pid = 0;
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid, NULL), 0);
    uint64_t end = rfx_mono_ms() + 15000, running = 0;
    while (pid > 0 && rfx_mono_ms() < end && running < 2) {
        struct rdel_set s = {0};
        rdel_load(&s, out, "x", 2);
        running = rdel_count_ids(&s, 2);
        rdel_free(&s);
        rfx_sleep_ms(20);
    }
    CHECK_EQ_U64(running, 2); /* both running in the worker */
    CHECK_EQ_INT(tw_redis_pause(c), 0);
    if (pid > 0) {
        rfx_signal(pid, SIGKILL);
        rfx_reap(pid);
    }
    struct rec R;
    struct tw_redis *w = open_q("ins_pexp", 4, &R); /* claims, paused */
    rfx_sleep_ms(2500); /* the leases end 1 s after the starts */
    struct tw_redis_info in;
    CHECK_EQ_INT(tw_redis_get(c, "x1", 2, &in, NULL, 0), 0);
    CHECK(in.state != TW_REDIS_WAITING);
    CHECK(in.lease_end_ms < in.now_ms); /* expired, not recovered */
    CHECK_EQ_U64(in.attempt, 1);
    CHECK_EQ_U64(in.max_attempts, 1);
    CHECK_EQ_U64(dead_n(c), 0);
    CHECK_EQ_U64(rec_count(&R), 0);
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_counts(c, 0, &q), 0);
    CHECK_EQ_U64(q.held + q.running, 2);
    CHECK_EQ_U64(q.waiting, 0);
    CHECK_EQ_INT(tw_redis_resume(c), 0);
    CHECK_EQ_U64(wait_dead_n(c, 1, 10000), 1);
    end = rfx_mono_ms() + 10000;
    while (w && rfx_mono_ms() < end && rec_count(&R) < 1)
        rfx_sleep_ms(10);
    CHECK_EQ_U64(rec_count(&R), 1);
    if (rec_count(&R) >= 1)
        CHECK_EQ_STR(R.key[0], "x0");
    struct dead_seen d = {{0}, 0};
    CHECK_EQ_INT(tw_redis_dead_get(c, "x1", 2, dead_seen_fn, &d), 0);
    CHECK_EQ_STR(d.err, "lease lost");
    CHECK_EQ_U64(d.attempt, 1);
    tw_redis_free(w);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0);
    tw_redis_free(c);
    pthread_mutex_destroy(&R.mu);
}

/* ---- a cluster: the same calls, each partition on its own master ------------------ */

static void test_cluster(void)
{
    struct rfx_cluster cl;
    if (rfx_cluster_start(&cl, 3) != 0) {
        CHECK(!"cluster started");
        return;
    }
    struct tw_redis_config cf;
    cfg_for(&cf, "ins_cl", 6, NULL);
    cf.servers = cl.addrs;
    cf.nservers = cl.n;
    struct tw_redis *c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cf), 0);
    if (!c) {
        rfx_cluster_stop(&cl);
        return;
    }
    enum { N = 200 };
    static struct tw_redis_item it[N];
    static char keys[N][16];
    for (int i = 0; i < N; i++) {
        int l = snprintf(keys[i], sizeof keys[i], "c%03d", i);
        it[i] = (struct tw_redis_item){keys[i], (size_t)l, "p", 1, 60000 + (int64_t)i * 700};
    }
    CHECK_EQ_INT(tw_redis_set_many(c, it, N), N);
    static struct seen all[N + 10];
    size_t n = list_all(c, 0, UINT64_MAX, 9, all, N + 10, NULL);
    CHECK_EQ_U64(n, N);
    for (size_t i = 1; i < n && n != SIZE_MAX; i++)
        CHECK(seen_cmp(&all[i - 1], &all[i]) < 0);
    struct tw_redis_info in;
    CHECK_EQ_INT(tw_redis_get(c, "c007", 4, &in, NULL, 0), 0);
    CHECK_EQ_INT(in.state, TW_REDIS_WAITING);
    struct tw_redis_counts q;
    CHECK_EQ_INT(tw_redis_pause(c), 0);
    CHECK_EQ_INT(tw_redis_counts(c, 61000, &q), 0);
    CHECK_EQ_U64(q.pending, N);
    CHECK_EQ_U64(q.paused, 6);
    CHECK(q.due_within >= 1 && q.due_within <= 3);
    CHECK_EQ_INT(tw_redis_resume(c), 0);
    /* a dead letter and a schedule: drop deletes their keys on their masters too */
    struct rec R;
    struct tw_redis *w = open_failing("ins_cl", 6, &R, cl.addrs, cl.n);
    CHECK_EQ_INT(tw_redis_set(c, "fc", 2, "", 0, 0), 0);
    struct tw_redis_schedule sc = {.every_ms = 3600000};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "csch", 4, "", 0, &sc, NULL), 0);
    CHECK_EQ_U64(wait_dead_n(c, 1, 10000), 1);
    tw_redis_free(w);
    pthread_mutex_destroy(&R.mu);
    CHECK_EQ_INT(tw_redis_counts(c, 0, &q), 0);
    CHECK_EQ_U64(q.dead, 1);
    CHECK_EQ_U64(q.schedules, 1);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0); /* the worker's holds live on for seconds */
    uint64_t total = 0;
    for (size_t i = 0; i < cl.n; i++) {
        uint64_t k = 0;
        CHECK_EQ_INT(rfx_dbsize(&cl.node[i], &k), 0);
        total += k;
    }
    CHECK_EQ_U64(total, 0); /* every key of every partition, on every master */
    tw_redis_free(c);
    rfx_cluster_stop(&cl);
}

int main(void)
{
    if (rfx_start(&srv, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server\n");
        return 1;
    }
    RUN(test_get_states);
    RUN(test_get_mark);
    RUN(test_get_mark_long_hold);
    RUN(test_list_pages);
    RUN(test_list_bucket_order);
    RUN(test_counts_lag);
    RUN(test_pause_resume);
    RUN(test_catch_up_past_the_fill);
    RUN(test_drop);
    RUN(test_adopt);
    RUN(test_metrics);
    RUN(test_dead_sched);
    RUN(test_pause_expiry);
    RUN(test_cluster);
    rfx_stop(&srv);
    return test_summary();
}
