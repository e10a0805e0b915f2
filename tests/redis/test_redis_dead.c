/* SPDX-License-Identifier: MIT */
/* The retry limit and the dead letters, and the events hook, against a real
 * redis-server: a task that answers FAILED max_attempts times moves to the
 * dead letters with its attempt, time and execute's error text, once; a
 * per-task limit overrides the queue's; a task whose worker is SIGKILLed
 * mid-execute counts that lost lease as an attempt (dead with "lease lost"
 * when it was the last); list (paged), get, requeue (one, all, and a live
 * task's key refused), purge (one, all), count; the hook hears delivered,
 * failed, dead and lease-lost on a thread that is no executor; all of it in
 * a Redis Cluster too. */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/redis.h"

#ifndef RFX_WORKER_PATH
#error "RFX_WORKER_PATH: the redis_worker binary"
#endif

/* ---- what the in-process worker and its hook saw ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int accept_prefix;   /* keys starting with this byte answer DONE */
static atomic_uint runs, ev_n[4];
static atomic_uint ev_on_executor;  /* events told on an executor thread (must stay 0) */
static char last_key[64];
static uint32_t last_attempt;
static pthread_t exec_tid[8];
static unsigned nexec;

static void note_exec_thread(void)
{
    pthread_mutex_lock(&mu);
    bool seen = false;
    for (unsigned i = 0; i < nexec; i++)
        seen |= pthread_equal(exec_tid[i], pthread_self());
    if (!seen && nexec < 8)
        exec_tid[nexec++] = pthread_self();
    pthread_mutex_unlock(&mu);
}

static enum tw_redis_result execute(void *arg, const struct tw_redis_task *t)
{
    (void)arg;
    note_exec_thread();
    atomic_fetch_add(&runs, 1);
    pthread_mutex_lock(&mu);
    snprintf(last_key, sizeof last_key, "%.*s", (int)t->key_len, t->key);
    last_attempt = t->attempt;
    pthread_mutex_unlock(&mu);
    if (t->key_len && t->key[0] == (char)atomic_load(&accept_prefix))
        return TW_REDIS_DONE;
    char text[64];
    int n = snprintf(text, sizeof text, "boom %u", (unsigned)t->attempt);
    tw_redis_fail_text(text, (size_t)n);
    return TW_REDIS_FAILED;
}

static void on_event(void *arg, const struct tw_redis_event *ev)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (unsigned i = 0; i < nexec; i++)
        if (pthread_equal(exec_tid[i], pthread_self()))
            atomic_fetch_add(&ev_on_executor, 1);
    pthread_mutex_unlock(&mu);
    if ((unsigned)ev->kind < 4)
        atomic_fetch_add(&ev_n[ev->kind], 1);
}

static void reset(void)
{
    atomic_store(&runs, 0);
    for (int i = 0; i < 4; i++)
        atomic_store(&ev_n[i], 0);
    atomic_store(&ev_on_executor, 0);
    atomic_store(&accept_prefix, 0);
}

static void config(struct tw_redis_config *cfg, const char *const *servers, const char *queue)
{
    tw_redis_config_init(cfg);
    cfg->servers = servers;
    cfg->nservers = 1;
    cfg->queue = queue;
    cfg->partitions = 4;
    cfg->threads = 2;
    cfg->window_ms = 300;
    cfg->retry_base_ms = 100;
    cfg->retry_max_ms = 100;
    cfg->lease_ms = 1000;
    cfg->hold_ms = 300;
}

/* A test's server, started, and a configuration of it for queue q. */
struct env {
    struct rfx_server srv;
    const char *servers[1];
    struct tw_redis_config cfg;
};

static bool env_start(struct env *e, const char *q)
{
    reset();
    CHECK_EQ_INT(rfx_start(&e->srv, NULL), 0);
    if (e->srv.pid <= 0)
        return false;
    e->servers[0] = rfx_addr(&e->srv);
    config(&e->cfg, e->servers, q);
    return true;
}

static uint64_t dead_count(struct tw_redis *c)
{
    uint64_t n = UINT64_MAX;
    return tw_redis_dead_count(c, &n) == 0 ? n : UINT64_MAX;
}

static bool wait_dead(struct tw_redis *c, uint64_t n, uint64_t ms)
{
    uint64_t until = rfx_mono_ms() + ms;
    while (rfx_mono_ms() < until) {
        if (dead_count(c) == n)
            return true;
        rfx_sleep_ms(50);
    }
    return dead_count(c) == n;
}

struct got {
    char key[64], err[TW_REDIS_ERROR_MAX + 1], payload[64];
    uint32_t attempt, max;
    uint64_t dead_ms, due_ms;
    unsigned n;
};

static void got_one(void *arg, const struct tw_redis_dead *d)
{
    struct got *g = arg;
    snprintf(g->key, sizeof g->key, "%.*s", (int)d->key_len, d->key);
    snprintf(g->err, sizeof g->err, "%.*s", (int)d->error_len, d->error);
    snprintf(g->payload, sizeof g->payload, "%.*s", (int)d->payload_len, (const char *)d->payload);
    g->attempt = d->attempt;
    g->max = d->max_attempts;
    g->dead_ms = d->dead_ms;
    g->due_ms = d->due_ms;
    g->n++;
}

/* FAILED every time: dead after exactly max_attempts runs, whole, once. */
static void test_dead_after_max_attempts(void)
{
    struct env e;
    if (!env_start(&e, "dm"))
        return;
    e.cfg.max_attempts = 3;
    e.cfg.execute = execute;
    e.cfg.on_event = on_event;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &e.cfg), 0);
    if (!w)
        goto out;
    uint64_t t0 = rfx_realtime_us() / 1000u;
    CHECK_EQ_INT(tw_redis_set(w, "k1", 2, "payload-1", 9, 0), 0);
    CHECK(wait_dead(w, 1, 15000));
    rfx_sleep_ms(500); /* no fourth run follows */
    CHECK_EQ_INT((int)atomic_load(&runs), 3);
    struct got g = {0};
    CHECK_EQ_INT(tw_redis_dead_get(w, "k1", 2, got_one, &g), 0);
    CHECK_EQ_STR(g.key, "k1");
    CHECK_EQ_STR(g.err, "boom 3");
    CHECK_EQ_STR(g.payload, "payload-1");
    CHECK_EQ_INT((int)g.attempt, 3);
    CHECK_EQ_INT((int)g.max, 0);
    CHECK(g.dead_ms >= t0 && g.dead_ms >= g.due_ms);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
    CHECK_EQ_U64(st.pending, 0);
    CHECK_EQ_U64(st.dead, 1);
    CHECK_EQ_U64(st.failed, 3);
    CHECK_EQ_INT(tw_redis_dead_get(w, "k2", 2, got_one, &g), TW_ENOENT);
    tw_redis_free(w); /* stop gives every queued event to the hook */
    w = NULL;
    CHECK_EQ_INT((int)atomic_load(&ev_n[TW_REDIS_EVENT_FAILED]), 3);
    CHECK_EQ_INT((int)atomic_load(&ev_n[TW_REDIS_EVENT_DEAD]), 1);
    CHECK_EQ_INT((int)atomic_load(&ev_n[TW_REDIS_EVENT_DELIVERED]), 0);
    CHECK_EQ_INT((int)atomic_load(&ev_on_executor), 0);
out:
    tw_redis_free(w);
    rfx_stop(&e.srv);
}

/* A per-task limit wins over the queue's (unlimited here); a plain set
 * keeps retrying past it. */
static void test_per_task_limit(void)
{
    struct env e;
    if (!env_start(&e, "dp"))
        return;
    e.cfg.execute = execute;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &e.cfg), 0);
    if (!w)
        goto out;
    struct tw_redis_set_opts o = {.max_attempts = 2};
    CHECK_EQ_INT(tw_redis_set_opts(w, "a", 1, "x", 1, 0, &o), 0);
    CHECK_EQ_INT(tw_redis_set(w, "b", 1, "y", 1, 0), 0);
    struct tw_redis_set_opts bad = {.max_attempts = 1u << 21};
    CHECK_EQ_INT(tw_redis_set_opts(w, "c", 1, "z", 1, 0, &bad), TW_EINVAL);
    CHECK(wait_dead(w, 1, 15000));
    struct got g = {0};
    CHECK_EQ_INT(tw_redis_dead_get(w, "a", 1, got_one, &g), 0);
    CHECK_EQ_INT((int)g.attempt, 2);
    CHECK_EQ_INT((int)g.max, 2);
    CHECK_EQ_STR(g.err, "boom 2");
    rfx_sleep_ms(800); /* "b" has had more than 2 attempts and is still live */
    CHECK_EQ_INT(tw_redis_dead_get(w, "b", 1, got_one, &g), TW_ENOENT);
    CHECK_EQ_U64(dead_count(w), 1);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
    CHECK_EQ_U64(st.pending, 1);
    CHECK(st.failed >= 5);
out:
    tw_redis_free(w);
    rfx_stop(&e.srv);
}

/* Fails each task once: "e" with an error text that starts with a blank,
 * any other with none. */
static enum tw_redis_result execute_blank(void *arg, const struct tw_redis_task *t)
{
    (void)arg;
    if (t->key_len == 1 && t->key[0] == 'e')
        tw_redis_fail_text(" lead", 5);
    return TW_REDIS_FAILED;
}

/* A dead letter's error and payload come back byte for byte, their own
 * leading blanks included: an error that starts with one, and an empty
 * error before a payload that does (its record is "... errlen " error
 * payload: a parser that skips blanks after errlen moved them). */
static void test_blank_edges(void)
{
    struct env e;
    if (!env_start(&e, "db"))
        return;
    e.cfg.execute = execute_blank;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &e.cfg), 0);
    if (!w)
        goto out;
    struct tw_redis_set_opts o = {.max_attempts = 1};
    CHECK_EQ_INT(tw_redis_set_opts(w, "e", 1, "p", 1, 0, &o), 0);
    CHECK_EQ_INT(tw_redis_set_opts(w, "n", 1, "  pay", 5, 0, &o), 0);
    CHECK(wait_dead(w, 2, 15000));
    struct got g = {0};
    CHECK_EQ_INT(tw_redis_dead_get(w, "e", 1, got_one, &g), 0);
    CHECK_EQ_STR(g.err, " lead");
    CHECK_EQ_STR(g.payload, "p");
    CHECK_EQ_INT(tw_redis_dead_get(w, "n", 1, got_one, &g), 0);
    CHECK_EQ_STR(g.err, "");
    CHECK_EQ_STR(g.payload, "  pay");
out:
    tw_redis_free(w);
    rfx_stop(&e.srv);
}

struct seen {
    bool key[64];
    unsigned n;
};

static void seen_one(void *arg, const struct tw_redis_dead *d)
{
    struct seen *s = arg;
    s->n++;
    if (d->key_len >= 2 && d->key[0] == 'f') {
        int id = atoi(d->key + 1);
        if (id >= 0 && id < 64)
            s->key[id] = true;
    }
}

/* list (paged), get, requeue one / all (a live key refused), purge, count */
static void test_list_requeue_purge(void)
{
    struct env e;
    if (!env_start(&e, "dl"))
        return;
    e.cfg.max_attempts = 1;
    e.cfg.execute = execute;
    e.cfg.on_event = on_event;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &e.cfg), 0);
    if (!w)
        goto out;
    char k[16];
    for (int i = 0; i < 50; i++) {
        int n = snprintf(k, sizeof k, "f%d", i);
        CHECK_EQ_INT(tw_redis_set(w, k, (size_t)n, "p", 1, 0), 0);
    }
    CHECK(wait_dead(w, 50, 15000));
    struct seen s = {0};
    struct tw_redis_scan_cursor cur = {0};
    unsigned calls = 0;
    while (!cur.done && calls < 1000) {
        int n = tw_redis_dead_list(w, &cur, 10, seen_one, &s);
        CHECK(n >= 0);
        if (n < 0)
            break;
        calls++;
    }
    CHECK(cur.done);
    CHECK(calls >= 2);
    unsigned covered = 0;
    for (int i = 0; i < 50; i++)
        covered += s.key[i];
    CHECK_EQ_INT((int)covered, 50);
    CHECK_EQ_INT(tw_redis_dead_list(w, &cur, 0, seen_one, &s), TW_EINVAL);

    /* back into the queue: they now answer DONE */
    atomic_store(&accept_prefix, 'f');
    unsigned runs0 = atomic_load(&runs);
    CHECK_EQ_INT(tw_redis_dead_requeue(w, "f7", 2, 0), 0);
    CHECK_EQ_INT(tw_redis_dead_requeue(w, "f7", 2, 0), TW_ENOENT);
    CHECK_EQ_INT(tw_redis_dead_requeue(w, "nope", 4, 0), TW_ENOENT);
    CHECK_EQ_INT(tw_redis_set(w, "f8", 2, "live", 4, 600000), 0);
    CHECK_EQ_INT(tw_redis_dead_requeue(w, "f8", 2, 0), TW_ECONFLICT);
    uint64_t moved = 0;
    CHECK_EQ_INT(tw_redis_dead_requeue_all(w, 0, &moved), 0);
    CHECK_EQ_U64(moved, 48);
    CHECK_EQ_U64(dead_count(w), 1); /* f8's: a live task holds the key */
    struct tw_redis_stats st = rw_wait_pending(w, 1, rfx_mono_ms() + 15000);
    CHECK_EQ_U64(st.pending, 1);
    CHECK(atomic_load(&runs) - runs0 >= 49);
    pthread_mutex_lock(&mu);
    CHECK_EQ_INT((int)last_attempt, 1); /* a requeued task starts its attempts anew */
    pthread_mutex_unlock(&mu);
    CHECK(atomic_load(&ev_n[TW_REDIS_EVENT_DELIVERED]) >= 49);

    /* purge one, then all */
    atomic_store(&accept_prefix, 0);
    for (int i = 0; i < 5; i++) {
        int n = snprintf(k, sizeof k, "g%d", i);
        CHECK_EQ_INT(tw_redis_set(w, k, (size_t)n, "p", 1, 0), 0);
    }
    CHECK(wait_dead(w, 6, 15000));
    CHECK_EQ_INT(tw_redis_dead_purge(w, "g0", 2), 0);
    CHECK_EQ_INT(tw_redis_dead_purge(w, "g0", 2), TW_ENOENT);
    CHECK_EQ_U64(dead_count(w), 5);
    CHECK_EQ_INT(tw_redis_dead_purge(w, NULL, 0), 0);
    CHECK_EQ_U64(dead_count(w), 0);
out:
    tw_redis_free(w);
    rfx_stop(&e.srv);
}

/* A worker process SIGKILLed while it runs two tasks: its lost lease is an
 * attempt. "y" (max 1) is dead at once with "lease lost"; "x" (max 2) runs
 * again here, answers FAILED, and is dead with attempt 2 and its text. */
static void test_dead_after_kill(void)
{
    struct env e;
    if (!env_start(&e, "dk"))
        return;
    char out[300];
    snprintf(out, sizeof out, "%s/deliveries", e.srv.dir);
    struct tw_redis *c = NULL, *w = NULL;
    pid_t pid = 0;
    CHECK_EQ_INT(tw_redis_new(&c, &e.cfg), 0);
    if (!c)
        goto out;
    struct tw_redis_set_opts two = {.max_attempts = 2}, one = {.max_attempts = 1};
    CHECK_EQ_INT(tw_redis_set_opts(c, "x0", 2, "px", 2, 0, &two), 0);
    CHECK_EQ_INT(tw_redis_set_opts(c, "x1", 2, "py", 2, 0, &one), 0);
    struct rw_opts o = {.servers = rfx_addr(&e.srv), .queue = "dk", .out = out, .threads = 2,
                        .partitions = 4, .lease_ms = 1000, .window_ms = 300, .hold_ms = 300,
                        .exec_us = 60000000};
    CHECK_EQ_INT(rw_spawn(RFX_WORKER_PATH, &o, &pid, NULL), 0);
    uint64_t until = rfx_mono_ms() + 15000;
    struct rdel_set s = {0};
    while (rfx_mono_ms() < until) {
        rdel_free(&s);
        memset(&s, 0, sizeof s);
        rdel_load(&s, out, "x", 2);
        if (rdel_count_ids(&s, 2) == 2)
            break;
        rfx_sleep_ms(20);
    }
    CHECK_EQ_U64(rdel_count_ids(&s, 2), 2); /* both running in the worker */
    rdel_free(&s);
    rfx_signal(pid, SIGKILL);
    rfx_reap(pid);
    pid = 0;
    e.cfg.execute = execute;
    e.cfg.on_event = on_event;
    CHECK_EQ_INT(tw_redis_new(&w, &e.cfg), 0);
    if (!w)
        goto out;
    CHECK(wait_dead(c, 2, 15000));
    struct got g = {0};
    CHECK_EQ_INT(tw_redis_dead_get(c, "x1", 2, got_one, &g), 0);
    CHECK_EQ_INT((int)g.attempt, 1);
    CHECK_EQ_STR(g.err, "lease lost");
    CHECK_EQ_STR(g.payload, "py");
    memset(&g, 0, sizeof g);
    CHECK_EQ_INT(tw_redis_dead_get(c, "x0", 2, got_one, &g), 0);
    CHECK_EQ_INT((int)g.attempt, 2);
    CHECK_EQ_STR(g.err, "boom 2");
    CHECK_EQ_INT((int)atomic_load(&runs), 1); /* x0's second attempt only */
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(c, &st), 0);
    CHECK_EQ_U64(st.pending, 0);
    tw_redis_free(w);
    w = NULL;
    CHECK_EQ_INT((int)atomic_load(&ev_n[TW_REDIS_EVENT_DEAD]), 2);
out:
    if (pid > 0) {
        rfx_signal(pid, SIGKILL);
        rfx_reap(pid);
    }
    tw_redis_free(w);
    tw_redis_free(c);
    rfx_stop(&e.srv);
}

/* lease-lost events: a held task replaced before its start */
static enum tw_redis_result slow(void *arg, const struct tw_redis_task *t)
{
    (void)arg;
    (void)t;
    rfx_sleep_ms(1500);
    return TW_REDIS_DONE;
}

static void test_lease_lost_event(void)
{
    struct env e;
    if (!env_start(&e, "de"))
        return;
    e.cfg.threads = 1;
    e.cfg.execute = slow;
    e.cfg.on_event = on_event;
    e.cfg.window_ms = 2000;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &e.cfg), 0);
    if (!w)
        goto out;
    /* the first keeps the one executor busy (1.5 s) while the second, held
     * (claimed within 250 ms of its set even on a busy machine), is replaced */
    CHECK_EQ_INT(tw_redis_set(w, "busy", 4, "", 0, 0), 0);
    CHECK_EQ_INT(tw_redis_set(w, "held", 4, "", 0, 100), 0);
    rfx_sleep_ms(250);
    CHECK_EQ_INT(tw_redis_set(w, "held", 4, "", 0, 100000), 0);
    uint64_t until = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < until && (atomic_load(&ev_n[TW_REDIS_EVENT_LEASE_LOST]) == 0 ||
                                     atomic_load(&ev_n[TW_REDIS_EVENT_DELIVERED]) == 0))
        rfx_sleep_ms(20);
    CHECK(atomic_load(&ev_n[TW_REDIS_EVENT_LEASE_LOST]) >= 1);
    CHECK(atomic_load(&ev_n[TW_REDIS_EVENT_DELIVERED]) >= 1);
out:
    tw_redis_free(w);
    rfx_stop(&e.srv);
}

/* In a Redis Cluster: the dead letters and the schedules' keys sit in
 * their partition's slot (scripts touch them undeclared, as the buckets):
 * dead letters made, listed, requeued; a schedule's occurrences delivered. */
static atomic_uint ticks;

static enum tw_redis_result count_ticks(void *arg, const struct tw_redis_task *t)
{
    if (t->key_len > 5 && memcmp(t->key, "tick@", 5) == 0) {
        atomic_fetch_add(&ticks, 1);
        return TW_REDIS_DONE;
    }
    return execute(arg, t);
}

static void test_cluster(void)
{
    reset();
    struct rfx_cluster cl;
    CHECK_EQ_INT(rfx_cluster_start(&cl, 3), 0);
    if (cl.n == 0)
        return;
    struct tw_redis_config cfg;
    config(&cfg, cl.addrs, "dc");
    cfg.nservers = cl.n;
    cfg.partitions = 8;
    cfg.max_attempts = 1;
    cfg.execute = count_ticks;
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &cfg), 0);
    if (!w)
        goto out;
    char k[16];
    for (int i = 0; i < 20; i++) {
        int n = snprintf(k, sizeof k, "f%d", i);
        CHECK_EQ_INT(tw_redis_set(w, k, (size_t)n, "p", 1, 0), 0);
    }
    struct tw_redis_schedule s = {.every_ms = 1000};
    uint64_t next = 0;
    CHECK_EQ_INT(tw_redis_schedule_set(w, "tick", 4, "", 0, &s, &next), 0);
    CHECK(wait_dead(w, 20, 15000));
    struct seen sn = {0};
    struct tw_redis_scan_cursor cur = {0};
    while (!cur.done)
        if (tw_redis_dead_list(w, &cur, 100, seen_one, &sn) < 0)
            break;
    unsigned covered = 0;
    for (int i = 0; i < 20; i++)
        covered += sn.key[i];
    CHECK_EQ_INT((int)covered, 20);
    atomic_store(&accept_prefix, 'f');
    uint64_t moved = 0;
    CHECK_EQ_INT(tw_redis_dead_requeue_all(w, 0, &moved), 0);
    CHECK_EQ_U64(moved, 20);
    uint64_t until = rfx_mono_ms() + 10000;
    while (rfx_mono_ms() < until && atomic_load(&ticks) < 3)
        rfx_sleep_ms(50);
    CHECK(atomic_load(&ticks) >= 3);
    CHECK_EQ_U64(dead_count(w), 0);
    CHECK_EQ_INT(tw_redis_schedule_remove(w, "tick", 4), 0);
out:
    tw_redis_free(w);
    rfx_cluster_stop(&cl);
}

int main(void)
{
    rfx_cleanup_on_signals();
    RUN(test_dead_after_max_attempts);
    RUN(test_per_task_limit);
    RUN(test_blank_edges);
    RUN(test_list_requeue_purge);
    RUN(test_dead_after_kill);
    RUN(test_lease_lost_event);
    RUN(test_cluster);
    return test_summary();
}
