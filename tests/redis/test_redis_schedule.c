/* SPDX-License-Identifier: MIT */
/* Recurring schedules against a real redis-server: an every-1000-ms schedule
 * served by two worker processes, one SIGKILLed and started again mid-way,
 * gives each period's occurrence once (a second delivery only as a retry,
 * attempt > 1), none missing, none early by the server's clock (the same
 * machine's realtime clock); after a downtime with no worker each missed-run
 * policy (skip, once, all) gives what it promises, the missed ones of "all"
 * in due order; upsert keeps or restarts next, remove, list, cron's next,
 * bad schedules refused; an idle worker does not poll for schedules, and a
 * schedule set wakes it. */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/redis.h"

#ifndef RFX_WORKER_PATH
#error "RFX_WORKER_PATH: the redis_worker binary"
#endif

static uint64_t server_ms(const struct rfx_server *s)
{
    uint64_t us = 0;
    return rfx_time_us(s, &us) == 0 ? us / 1000u : 0;
}

static void client_config(struct tw_redis_config *cfg, const char *const *servers, const char *q)
{
    tw_redis_config_init(cfg);
    cfg->servers = servers;
    cfg->nservers = 1;
    cfg->queue = q;
    cfg->partitions = 4;
    cfg->window_ms = 300;
    cfg->lease_ms = 1000;
    cfg->hold_ms = 300;
}

/* ---- two worker processes and a restart ---- */

struct rec {
    char key[64];
    uint32_t attempt;
    uint64_t due_ms, start_us;
};

static size_t load(const char *path, struct rec *v, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = 0;
    if (!f)
        return 0;
    char line[256];
    while (n < cap && fgets(line, sizeof line, f)) {
        struct rec *r = &v[n];
        unsigned long long due, st;
        if (sscanf(line, "%63s %" SCNu32 " %llu %llu", r->key, &r->attempt, &due, &st) == 4) {
            r->due_ms = due;
            r->start_us = st;
            n++;
        }
    }
    fclose(f);
    return n;
}

static void test_two_workers_restart(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    char out[300];
    snprintf(out, sizeof out, "%s/deliveries", srv.dir);
    struct tw_redis_config cfg;
    client_config(&cfg, servers, "sw");
    struct tw_redis *c = NULL;
    pid_t a = 0, b = 0;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    if (!c)
        goto out;
    struct rw_opts o = {.servers = rfx_addr(&srv), .queue = "sw", .out = out, .threads = 2,
                        .partitions = 4, .lease_ms = 1000, .window_ms = 300, .hold_ms = 300};
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &a, NULL), 0);
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &b, NULL), 0);
    uint64_t anchor = server_ms(&srv) + 1500, next = 0;
    struct tw_redis_schedule s = {.every_ms = 1000, .anchor_ms = anchor};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "s", 1, "tick", 4, &s, &next), 0);
    CHECK_EQ_U64(next, anchor);
    rfx_sleep_ms(4000);
    rfx_signal(a, SIGKILL); /* one worker dies mid-way ... */
    rfx_reap(a);
    a = 0;
    rfx_sleep_ms(1500);
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &a, NULL), 0); /* ... and comes back */
    rfx_sleep_ms(4500);
    uint64_t end = server_ms(&srv);
    rw_stop(a, 5000);
    rw_stop(b, 5000);
    a = b = 0;
    static struct rec v[1000];
    size_t n = load(out, v, 1000);
    /* every period from the anchor to 1.5 s before the end: one occurrence */
    unsigned periods = 0;
    for (uint64_t t = anchor; t + 1500 < end; t += 1000, periods++) {
        char key[64];
        snprintf(key, sizeof key, "s@%" PRIu64, t);
        unsigned first = 0, again = 0;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(v[i].key, key)) {
                if (v[i].attempt == 1)
                    first++;
                else
                    again++;
                CHECK_EQ_U64(v[i].due_ms, t);
            }
        CHECK_(first + again >= 1, "occurrence %" PRIu64 " delivered", t);
        CHECK_(first <= 1, "occurrence %" PRIu64 " delivered once as attempt 1 (%u)", t, first);
    }
    CHECK(periods >= 8);
    for (size_t i = 0; i < n; i++) {
        CHECK_(v[i].start_us >= v[i].due_ms * 1000u, "%s started %" PRIu64 " us early", v[i].key,
               v[i].due_ms * 1000u - v[i].start_us);
        unsigned long long t = strtoull(v[i].key + 2, NULL, 10);
        CHECK_(strncmp(v[i].key, "s@", 2) == 0 && t >= anchor && (t - anchor) % 1000 == 0,
               "an occurrence of the schedule: %s", v[i].key);
    }
out:
    if (a > 0) {
        rfx_signal(a, SIGKILL);
        rfx_reap(a);
    }
    if (b > 0) {
        rfx_signal(b, SIGKILL);
        rfx_reap(b);
    }
    tw_redis_free(c);
    rfx_stop(&srv);
}

/* ---- missed runs after a downtime (an in-process worker) ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct rec got[256];
static size_t ngot;

static enum tw_redis_result record(void *arg, const struct tw_redis_task *t)
{
    (void)arg;
    uint64_t now = rfx_realtime_us();
    pthread_mutex_lock(&mu);
    if (ngot < 256) {
        snprintf(got[ngot].key, sizeof got[ngot].key, "%.*s", (int)t->key_len, t->key);
        got[ngot].attempt = t->attempt;
        got[ngot].due_ms = t->due_ms;
        got[ngot].start_us = now;
        ngot++;
    }
    pthread_mutex_unlock(&mu);
    return TW_REDIS_DONE;
}

/* The occurrences of schedule `name` delivered, in delivery order, into o. */
static size_t occurrences(const char *name, uint64_t *o, size_t cap)
{
    size_t n = 0, l = strlen(name);
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < ngot && n < cap; i++)
        if (!strncmp(got[i].key, name, l) && got[i].key[l] == '@') {
            o[n++] = strtoull(got[i].key + l + 1, NULL, 10);
            CHECK_EQ_U64(got[i].due_ms, o[n - 1]);
            CHECK_(got[i].start_us >= got[i].due_ms * 1000u, "%s early", got[i].key);
        }
    pthread_mutex_unlock(&mu);
    return n;
}

static void test_missed_policies(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    struct tw_redis_config cfg;
    client_config(&cfg, servers, "sm");
    struct tw_redis *c = NULL, *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    if (!c)
        goto out;
    uint64_t A = server_ms(&srv) + 300;
    const char *names[3] = {"skip", "once", "all"};
    for (int p = 0; p < 3; p++) {
        struct tw_redis_schedule s = {.every_ms = 1000, .anchor_ms = A,
                                      .missed = (enum tw_redis_missed)p};
        CHECK_EQ_INT(tw_redis_schedule_set(c, names[p], strlen(names[p]), "", 0, &s, NULL), 0);
    }
    /* no worker until A + 4800: A .. A + 4000 are missed (more than the
     * worker's window, 600 ms, past when it comes), A + 5000 is not (unless
     * the worker took 800 ms to make its first round) */
    while (server_ms(&srv) < A + 4800)
        rfx_sleep_ms(10);
    cfg.execute = record;
    cfg.threads = 1; /* one executor: the recorded order is the start order */
    cfg.window_ms = 600;
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), 0);
    if (!w)
        goto out;
    while (server_ms(&srv) < A + 7700)
        rfx_sleep_ms(20);
    tw_redis_free(w);
    w = NULL;
    uint64_t o[64];
    size_t n = occurrences("skip", o, 64);
    CHECK_EQ_INT((int)n, 3);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_U64(o[i], A + 5000 + 1000 * i);
    n = occurrences("once", o, 64);
    CHECK_EQ_INT((int)n, 4);
    if (n == 4) {
        CHECK_EQ_U64(o[0], A);
        for (size_t i = 1; i < n; i++)
            CHECK_EQ_U64(o[i], A + 4000 + 1000 * i);
    }
    n = occurrences("all", o, 64);
    CHECK_EQ_INT((int)n, 8);
    for (size_t i = 0; i < n; i++) /* each one, in due order */
        CHECK_EQ_U64(o[i], A + 1000 * i);
out:
    tw_redis_free(w);
    tw_redis_free(c);
    rfx_stop(&srv);
}

/* ---- not polled ---- */

/* EVALSHA calls s has served (INFO commandstats); 0 when unread. */
static uint64_t evalsha_calls(const struct rfx_server *s)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return 0;
    redisReply *x = redisCommand(c, "INFO commandstats");
    uint64_t n = 0;
    const char *p = x && x->type == REDIS_REPLY_STRING ? strstr(x->str, "cmdstat_evalsha:calls=")
                                                        : NULL;
    if (p)
        n = strtoull(p + strlen("cmdstat_evalsha:calls="), NULL, 10);
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return n;
}

/* An idle worker asks its partitions for schedules once, then not while
 * none nears (its script calls are its refill's claims alone); a schedule
 * set then wakes it (SCHED_SET's "sched"), and its occurrences come on
 * time from the first. */
static void test_idle_then_woken(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    pthread_mutex_lock(&mu);
    ngot = 0;
    pthread_mutex_unlock(&mu);
    const char *servers[] = {rfx_addr(&srv)};
    struct tw_redis_config cfg;
    client_config(&cfg, servers, "si");
    struct tw_redis *c = NULL, *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    cfg.execute = record;
    cfg.threads = 1;
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), 0);
    if (!c || !w)
        goto out;
    rfx_sleep_ms(500); /* the first asks are done */
    struct tw_redis_stats s0, s1;
    CHECK_EQ_INT(tw_redis_stats(w, &s0), 0);
    uint64_t e0 = evalsha_calls(&srv);
    rfx_sleep_ms(3000); /* 20 windows of 300 ms: 80 asks of 4 partitions if polled */
    CHECK_EQ_INT(tw_redis_stats(w, &s1), 0);
    /* signed: a claim counted by the worker before s0 but run by the server
     * after e0 is read makes the difference -1 */
    uint64_t e1 = evalsha_calls(&srv);
    int64_t other = (int64_t)(e1 - e0) - (int64_t)(s1.claims - s0.claims);
    printf("idle 3 s: %" PRIu64 " script calls, %" PRIu64 " of them claims\n", e1 - e0,
           s1.claims - s0.claims);
    CHECK(e1 > e0 && other <= 2);
    uint64_t A = server_ms(&srv) + 1000;
    struct tw_redis_schedule s = {.every_ms = 1000, .anchor_ms = A};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "wk", 2, "", 0, &s, NULL), 0);
    while (server_ms(&srv) < A + 2300)
        rfx_sleep_ms(20);
    uint64_t o[16];
    size_t n = occurrences("wk", o, 16);
    CHECK_EQ_INT((int)n, 3);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_U64(o[i], A + 1000 * i);
out:
    tw_redis_free(w);
    tw_redis_free(c);
    rfx_stop(&srv);
}

/* ---- upsert, remove, list, cron ---- */

struct listed {
    unsigned n;
    char spec[3][300];
    char key[3][16];
};

static void list_one(void *arg, const struct tw_redis_schedule_info *s)
{
    struct listed *l = arg;
    if (l->n < 3) {
        snprintf(l->spec[l->n], sizeof l->spec[0], "%.*s", (int)s->spec_len, s->spec);
        snprintf(l->key[l->n], sizeof l->key[0], "%.*s", (int)s->key_len, s->key);
    }
    l->n++;
}

static void test_upsert_remove_list(void)
{
    struct rfx_server srv;
    CHECK_EQ_INT(rfx_start(&srv, NULL), 0);
    if (srv.pid <= 0)
        return;
    const char *servers[] = {rfx_addr(&srv)};
    struct tw_redis_config cfg;
    client_config(&cfg, servers, "su");
    struct tw_redis *c = NULL;
    CHECK_EQ_INT(tw_redis_new(&c, &cfg), 0);
    if (!c)
        goto out;
    uint64_t now = server_ms(&srv), n1 = 0, n2 = 0, n3 = 0;
    struct tw_redis_schedule e = {.every_ms = 60000}; /* anchor 0: the upsert's time */
    CHECK_EQ_INT(tw_redis_schedule_set(c, "e", 1, "p", 1, &e, &n1), 0);
    CHECK(n1 >= now && n1 <= now + 1000);
    rfx_sleep_ms(50);
    CHECK_EQ_INT(tw_redis_schedule_set(c, "e", 1, "p2", 2, &e, &n2), 0);
    CHECK_EQ_U64(n2, n1); /* the same schedule: next kept */
    e.every_ms = 30000;
    CHECK_EQ_INT(tw_redis_schedule_set(c, "e", 1, "p", 1, &e, &n3), 0);
    CHECK(n3 >= n1 + 50 && n3 <= n1 + 2000); /* another: from now */
    struct tw_redis_schedule cr = {.cron = "*/5 * * * *"};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "c", 1, "", 0, &cr, &n1), 0);
    CHECK(n1 > now && n1 % 300000 == 0 && n1 <= now + 300000);
    struct tw_redis_schedule bad = {.cron = "61 * * * *"};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "b", 1, "", 0, &bad, NULL), TW_EINVAL);
    bad.cron = "0 0 30 2 *";
    CHECK_EQ_INT(tw_redis_schedule_set(c, "b", 1, "", 0, &bad, NULL), TW_EINVAL);
    struct tw_redis_schedule fast = {.every_ms = 10};
    CHECK_EQ_INT(tw_redis_schedule_set(c, "b", 1, "", 0, &fast, NULL), TW_EINVAL);
    fast.every_ms = 1000;
    fast.missed = (enum tw_redis_missed)3;
    CHECK_EQ_INT(tw_redis_schedule_set(c, "b", 1, "", 0, &fast, NULL), TW_EINVAL);
    struct listed l = {0};
    struct tw_redis_scan_cursor cur = {0};
    while (!cur.done)
        if (tw_redis_schedule_list(c, &cur, 100, list_one, &l) < 0)
            break;
    CHECK_EQ_INT((int)l.n, 2);
    uint64_t count = 0;
    CHECK_EQ_INT(tw_redis_schedule_count(c, &count), 0);
    CHECK_EQ_U64(count, 2);
    for (unsigned i = 0; i < 2 && i < l.n; i++)
        CHECK(!strcmp(l.key[i], "c") ? !strcmp(l.spec[i], "cron */5 * * * *")
                                      : !strncmp(l.spec[i], "every 30000 ", 12));
    CHECK_EQ_INT(tw_redis_schedule_remove(c, "e", 1), 0);
    CHECK_EQ_INT(tw_redis_schedule_remove(c, "e", 1), TW_ENOENT);
    memset(&l, 0, sizeof l);
    memset(&cur, 0, sizeof cur);
    while (!cur.done)
        if (tw_redis_schedule_list(c, &cur, 100, list_one, &l) < 0)
            break;
    CHECK_EQ_INT((int)l.n, 1);
out:
    tw_redis_free(c);
    rfx_stop(&srv);
}

int main(void)
{
    rfx_cleanup_on_signals();
    RUN(test_two_workers_restart);
    RUN(test_missed_policies);
    RUN(test_upsert_remove_list);
    RUN(test_idle_then_woken);
    return test_summary();
}
