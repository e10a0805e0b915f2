/* SPDX-License-Identifier: MIT */
/* Operating a queue (twheel/redis.h): get, list, counts, pause and resume,
 * drop, the adopted partition count, the Prometheus rendering; against a
 * real redis-server started by the fixture. Each case has its own queue.
 * Waits are bounded polls; nothing asserts speed, only states, order,
 * counts, what the server holds, and how many commands a listing costs. */
#define _GNU_SOURCE
#include "fixture.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    return TW_REDIS_DONE;
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
    CHECK(in.due_ms >= in.now_ms + 2400 && in.due_ms <= in.now_ms + 2501);
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
    /* bounded: a page of 10 reads at most 10 tasks + 2 buckets per partition */
    CHECK_EQ_INT(rfx_command(&srv, "CONFIG RESETSTAT"), 0);
    CHECK_EQ_INT(tw_redis_list(c, 0, UINT64_MAX, NULL, 10, &pg), 0);
    tw_redis_page_free(pg);
    long long zr = cmd_calls("zrange"), zb = cmd_calls("zrangebyscore");
    CHECK(zr >= 1 && zr <= 4 * 12);
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
    CHECK_EQ_INT(tw_redis_pause(c), 0);
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
    CHECK_EQ_INT(tw_redis_resume(c), 0);
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
        meta += strcmp(left[i], "{ins_drop:meta}:partitions") == 0;
    }
    CHECK(seq >= 1 && seq <= 2); /* the token counters of the partitions used */
    CHECK_EQ_U64(meta, 1);
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
    free(buf);
    /* a worker's: its counters and histogram, one delivery in it */
    struct rec R;
    struct tw_redis *w = open_q("ins_metrics", 2, &R);
    uint64_t end = rfx_mono_ms() + 5000;
    while (w && rfx_mono_ms() < end && rec_count(&R) < 1)
        rfx_sleep_ms(10);
    rfx_sleep_ms(300); /* its acknowledgement */
    char big[32768];
    CHECK_EQ_INT(w ? tw_redis_metrics(w, 1000, big, sizeof big, &len) : -1, 0);
    CHECK(strstr(big, "# TYPE twheel_redis_lateness_seconds histogram\n") != NULL);
    CHECK(strstr(big, "twheel_redis_lateness_seconds_count{queue=\"ins_metrics\"} 1\n"));
    CHECK(strstr(big, "twheel_redis_lateness_seconds_bucket{queue=\"ins_metrics\",le=\"+Inf\"} 1\n"));
    CHECK(strstr(big, "twheel_redis_delivered_total{queue=\"ins_metrics\"} 1\n"));
    /* the worker's text as Prometheus reads it (the tool's test checks a client's) */
    if (system("command -v promtool >/dev/null") != 0) {
        printf("SKIP promtool check: promtool is not installed (Debian package prometheus)\n");
    } else {
        char path[] = "/tmp/tw_metrics_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0 && write(fd, big, len) == (ssize_t)len);
        if (fd >= 0)
            close(fd);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "promtool check metrics < %s", path);
        CHECK_EQ_INT(system(cmd), 0);
        unlink(path);
    }
    tw_redis_free(w);
    pthread_mutex_destroy(&R.mu);
    CHECK_EQ_INT(tw_redis_drop(c, true), 0); /* the worker's holds live on for seconds */
    tw_redis_free(c);
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
    CHECK_EQ_INT(tw_redis_drop(c, false), 0);
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
    RUN(test_list_pages);
    RUN(test_counts_lag);
    RUN(test_pause_resume);
    RUN(test_drop);
    RUN(test_adopt);
    RUN(test_metrics);
    RUN(test_cluster);
    rfx_stop(&srv);
    return test_summary();
}
