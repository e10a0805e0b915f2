/* SPDX-License-Identifier: MIT */
/* A worker's execute that records the keys it ran, and the round trip the
 * connection tests (test_redis_auth, test_redis_tls) run over each way of
 * connecting. Included after test.h: its checks count in the including
 * test's own tally (test.h's counters are per file). */
#ifndef TWHEEL_TESTS_REDIS_RECORDER_H
#define TWHEEL_TESTS_REDIS_RECORDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "twheel/redis.h"

#define GOT_MAX 256

/* The keys run, in order (the first GOT_MAX); initialise with GOT_INIT. */
struct got {
    pthread_mutex_t mu;
    size_t n;
    char key[GOT_MAX][32];
};
#define GOT_INIT {.mu = PTHREAD_MUTEX_INITIALIZER}

static inline enum tw_redis_result got_exec(void *arg, const struct tw_redis_task *t)
{
    struct got *g = arg;
    pthread_mutex_lock(&g->mu);
    if (g->n < GOT_MAX)
        snprintf(g->key[g->n], sizeof g->key[0], "%.*s", (int)t->key_len, t->key);
    g->n++;
    pthread_mutex_unlock(&g->mu);
    return TW_REDIS_DONE;
}

static inline size_t got_count(struct got *g)
{
    pthread_mutex_lock(&g->mu);
    size_t n = g->n;
    pthread_mutex_unlock(&g->mu);
    return n;
}

static inline bool got_has(struct got *g, const char *key)
{
    bool yes = false;
    pthread_mutex_lock(&g->mu);
    for (size_t i = 0; i < g->n && i < GOT_MAX && !yes; i++)
        yes = strcmp(g->key[i], key) == 0;
    pthread_mutex_unlock(&g->mu);
    return yes;
}

/* Whether n keys were run within ms (polled every 10 ms). */
static inline bool got_wait(struct got *g, size_t n, unsigned ms)
{
    uint64_t end = rfx_mono_ms() + ms;
    while (got_count(g) < n && rfx_mono_ms() < end)
        rfx_sleep_ms(10);
    return got_count(g) >= n;
}

/* The client sets n (<= 64) tasks "<p>0".."<p>n-1" due in 50..250 ms (half
 * of them through set_many), but "<p>1" and "<p>2" in 2 s, so that a stall
 * of the test's thread cannot let them start first; removes "<p>1" and
 * moves "<p>2" to 20 ms; the worker delivers the other n - 1 and not
 * "<p>1" (nor later: delivered counts it); then the worker's stats: nothing
 * pending, n - 1 more delivered, no worker error. *st holds them. */
static inline void round_trip_stats(struct tw_redis *client, struct tw_redis *worker,
                                    struct got *g, const char *p, size_t n,
                                    struct tw_redis_stats *st)
{
    char keys[64][16];
    struct tw_redis_item items[64];
    size_t m = 0, before = got_count(g);
    for (size_t i = 0; i < n && i < 64; i++) {
        snprintf(keys[i], sizeof keys[i], "%s%zu", p, i);
        int64_t delay = i == 1 || i == 2 ? 2000 : 50 + (int64_t)(i * 200 / n);
        if (i % 2)
            items[m++] = (struct tw_redis_item){keys[i], strlen(keys[i]), "x", 1, delay};
        else
            CHECK_EQ_INT(tw_redis_set(client, keys[i], strlen(keys[i]), "x", 1, delay), 0);
    }
    CHECK_EQ_INT(tw_redis_set_many(client, items, m), (int)m);
    CHECK_EQ_INT(tw_redis_remove(client, keys[1], strlen(keys[1])), 0);
    CHECK_EQ_INT(tw_redis_move(client, keys[2], strlen(keys[2]), 20), 0);
    CHECK(got_wait(g, before + n - 1, 10000));
    CHECK(!got_has(g, keys[1]));
    uint64_t end = rfx_mono_ms() + 5000;
    do {
        rfx_sleep_ms(20);
        CHECK_EQ_INT(tw_redis_stats(worker, st), 0);
    } while ((st->pending != 0 || st->delivered < before + n - 1) && rfx_mono_ms() < end);
    CHECK_EQ_U64(st->pending, 0);
    CHECK_EQ_U64(st->delivered, before + n - 1);
    CHECK_EQ_U64(st->worker_errors, 0);
}

#endif /* TWHEEL_TESTS_REDIS_RECORDER_H */
