/* SPDX-License-Identifier: MIT */
/* A reference model of tw_cache, shared by the randomized model test
 * (tests/test_cache_model.c) and the fuzz target (fuzz/fuzz_cache.c).
 *
 * The model is a plain array over a handful of keys: for each, whether it
 * is stored (expired keys stay stored until an advance collects them, as in
 * the cache), its value, its expiry tick and its last-use stamp. Operations
 * (set, set_ttl, a refresh: set_ttl of the value a key holds, invalid set,
 * get, del, take with a loader that succeeds or fails, advance, set_now)
 * are applied to a manual-clock cache (jitter off, so expiries are exact;
 * with bit 3 of byte 0 the expiry timers have slack) and to the model;
 * every answer is compared:
 *   - get/take hit exactly when the key is stored and now < expiry, with the
 *     value last stored; misses leave the LRU alone;
 *   - advance expires exactly the stored keys with expiry <= now (with
 *     slack: each at some advance in [expiry, expiry + slack]);
 *   - with a limit, a new key beyond it evicts the stored key least recently
 *     set or hit (expired-but-uncollected keys included);
 *   - each value is freed exactly once, when the model drops it, and every
 *     stored value is freed by tw_cache_free;
 *   - the entry count matches.
 * get and set also go through the batched calls (get_many, and set_many of
 * 1-5 keys, a key repeated among 5) for some operations. With `concurrent`
 * (cm_run_ex; no limit then, since the reader's hits would move the LRU), a
 * second thread reads every key without
 * pause while the model runs: its reads are not checked against the model
 * (they race with it), but every pointer it is handed must not have been
 * freed yet (checked in retain_value), and frees, which a running reader may
 * defer, are checked as "at most once" during the run and "exactly once"
 * after tw_cache_free.
 * On a mismatch the model prints it and calls abort().
 *
 * Input layout: byte 0 shards and lock flavour, byte 1 limit (and in its
 * top bit the hash), byte 2 default TTL, then two bytes per operation. */
#ifndef TWHEEL_CACHE_MODEL_H
#define TWHEEL_CACHE_MODEL_H

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/cache.h"

#define CM_KEYS 12
#define CM_MAX_VALUES 8192

struct cm_value {
    int id;
    _Atomic int freed;
};

struct cm_key {
    bool stored;
    struct cm_value *value;
    uint64_t expiry;
    uint64_t slack; /* the timer may collect it until expiry + slack */
    uint64_t stamp;
};

struct cmodel {
    struct tw_cache *c;
    uint64_t now;
    uint64_t seq;
    size_t limit;
    int64_t ttl;
    size_t count;
    unsigned shift; /* expiry_slack_shift; 0 = exact */
    struct cm_key k[CM_KEYS];
    struct cm_value values[CM_MAX_VALUES];
    int nvalues;
    int loader_calls;
    bool concurrent;
    _Atomic bool reader_stop;
    _Atomic long reader_hits;
    _Atomic long reader_rounds;
};

#define CM_FAIL(...)                                                                 \
    do {                                                                             \
        fprintf(stderr, "cache model mismatch at %s:%d: ", __FILE__, __LINE__);      \
        fprintf(stderr, __VA_ARGS__);                                                \
        fputc('\n', stderr);                                                         \
        abort();                                                                     \
    } while (0)

static void cm_free(void *ctx, void *value)
{
    (void)ctx;
    struct cm_value *v = value;
    if (v->freed++ != 0)
        CM_FAIL("value %d freed twice", v->id);
}

static struct cm_value *cm_new_value(struct cmodel *m)
{
    if (m->nvalues >= CM_MAX_VALUES)
        return NULL;
    struct cm_value *v = &m->values[m->nvalues];
    v->id = m->nvalues++;
    atomic_store(&v->freed, 0);
    return v;
}

static void cm_key_name(int i, char out[16])
{
    /* keys of different lengths, one of them empty */
    static const char *names[CM_KEYS] = {"", "a", "b", "ab", "ba", "key", "kez", "long-key-1",
                                         "long-key-2", "\x01\x02", "x", "yy"};
    snprintf(out, 16, "%s", names[i]);
}

static bool cm_concurrent_; /* set while a concurrent run is going */

static void cm_expect_freed(struct cm_value *v, int want, const char *what)
{
    int f = atomic_load(&v->freed);
    if (cm_concurrent_ && want == 1 ? f > 1 : f != want)
        CM_FAIL("%s: value %d freed %d times, want %d", what, v->id, f, want);
}

static void cm_retain(void *ctx, void *value)
{
    (void)ctx;
    struct cm_value *v = value;
    if (atomic_load(&v->freed) != 0)
        CM_FAIL("value %d handed out after it was freed", v->id);
}

/* The model's LRU victim among stored keys. */
static void cm_evict(struct cmodel *m)
{
    while (m->limit && m->count > m->limit) {
        int victim = -1;
        for (int i = 0; i < CM_KEYS; i++)
            if (m->k[i].stored && (victim < 0 || m->k[i].stamp < m->k[victim].stamp))
                victim = i;
        m->k[victim].stored = false;
        m->count--;
        cm_expect_freed(m->k[victim].value, 1, "eviction");
    }
}

/* Model side of a successful store of v under key i with ttl; `batch`: v
 * came in a batch, whose later keys may have dropped it already (the
 * caller checks v's frees after the batch). */
static void cm_store_ex(struct cmodel *m, int i, struct cm_value *v, int64_t ttl, bool batch);
static void cm_store(struct cmodel *m, int i, struct cm_value *v, int64_t ttl)
{
    cm_store_ex(m, i, v, ttl, false);
}

static void cm_store_ex(struct cmodel *m, int i, struct cm_value *v, int64_t ttl, bool batch)
{
    struct cm_key *k = &m->k[i];
    if (k->stored) {
        cm_expect_freed(k->value, 1, "overwrite");
    } else {
        k->stored = true;
        m->count++;
    }
    k->value = v;
    k->expiry = m->now + (uint64_t)ttl;
    k->slack = m->shift ? (uint64_t)ttl >> m->shift : 0;
    k->stamp = ++m->seq;
    if (!batch)
        cm_expect_freed(v, 0, "store");
    cm_evict(m);
}

static bool cm_live(const struct cmodel *m, int i)
{
    return m->k[i].stored && m->now < m->k[i].expiry;
}

static int cm_loader(void *ctx, const void *key, size_t klen, void **value, size_t *vlen)
{
    struct cmodel *m = ctx;
    (void)key;
    (void)klen;
    (void)vlen;
    m->loader_calls++;
    struct cm_value *v = cm_new_value(m);
    if (!v)
        return -1000;
    *value = v;
    return 0;
}

static int cm_fail_loader(void *ctx, const void *key, size_t klen, void **value, size_t *vlen)
{
    struct cmodel *m = ctx;
    (void)key;
    (void)klen;
    (void)value;
    (void)vlen;
    m->loader_calls++;
    return -99;
}

static void cm_collect(struct cmodel *m, int64_t got)
{
    int64_t want = 0;
    for (int i = 0; i < CM_KEYS; i++) {
        if (m->shift && m->k[i].stored) {
            /* With slack the timer collects a key at some advance in
             * [expiry, expiry + slack]: never before, never after. (Not
             * concurrent, so a collected value is freed at once.) */
            struct cm_key *k = &m->k[i];
            int f = atomic_load(&k->value->freed);
            if (m->now < k->expiry && f)
                CM_FAIL("key %d collected at %" PRIu64 " before its expiry %" PRIu64, i,
                        m->now, k->expiry);
            if (!f && m->now >= k->expiry + k->slack)
                CM_FAIL("key %d not collected at %" PRIu64 " (expiry %" PRIu64 " slack %" PRIu64
                        ")",
                        i, m->now, k->expiry, k->slack);
            if (f) {
                k->stored = false;
                m->count--;
                want++;
                cm_expect_freed(k->value, 1, "expiry");
            }
            continue;
        }
        if (m->k[i].stored && m->k[i].expiry <= m->now) {
            m->k[i].stored = false;
            m->count--;
            want++;
            cm_expect_freed(m->k[i].value, 1, "expiry");
        }
    }
    if (got != want)
        CM_FAIL("advance to %" PRIu64 " expired %lld, want %lld", m->now, (long long)got,
                (long long)want);
}

static void cm_check_count(struct cmodel *m)
{
    struct tw_cache_stats st;
    tw_cache_stats(m->c, &st);
    if (st.entries != m->count)
        CM_FAIL("entries %" PRIu64 ", want %zu", st.entries, m->count);
}

static void cm_op(struct cmodel *m, uint8_t op, uint8_t arg)
{
#ifdef CM_TRACE
    fprintf(stderr, "op %d key %d arg %d now %llu\n", op % 10, arg % CM_KEYS, arg,
            (unsigned long long)m->now);
#endif
    int i = arg % CM_KEYS;
    char name[16];
    cm_key_name(i, name);
    size_t kl = strlen(name);
    int64_t ttl = 1 + (arg / CM_KEYS) % 24;
    void *got = NULL;
    int rc;
    switch (op % 10) {
    case 1:
        if (m->k[i].stored) { /* set_ttl of the value it holds: a refresh */
            struct cm_key *k = &m->k[i];
            rc = tw_cache_set_ttl(m->c, name, kl, k->value, ttl);
            if (rc != 0)
                CM_FAIL("refresh: %d", rc);
            k->expiry = m->now + (uint64_t)ttl;
            k->slack = m->shift ? (uint64_t)ttl >> m->shift : 0;
            k->stamp = ++m->seq;
            cm_expect_freed(k->value, 0, "refresh");
            break;
        }
        /* fall through */
    case 0: { /* set_ttl */
        struct cm_value *v = cm_new_value(m);
        if (!v)
            return;
        rc = tw_cache_set_ttl(m->c, name, kl, v, ttl);
        if (rc != 0)
            CM_FAIL("set_ttl: %d", rc);
        cm_store(m, i, v, ttl);
        break;
    }
    case 2: { /* set with the default TTL */
        struct cm_value *v = cm_new_value(m);
        if (!v)
            return;
        if (arg & 0x80) {
            /* A batch of 1-5 keys starting with key i (5 keys repeat one:
             * the later value wins), stored as single sets in batch order. */
            int nb = 1 + (arg / CM_KEYS) % 5, idx[5];
            char names[5][16];
            const void *keys[5];
            size_t kls[5];
            void *vals[5];
            int rcs[5];
            if (m->nvalues + nb - 1 > CM_MAX_VALUES) {
                atomic_store(&v->freed, 1); /* never stored */
                return;
            }
            for (int j = 0; j < nb; j++) {
                idx[j] = (i + 5 * j * j) % CM_KEYS;
                cm_key_name(idx[j], names[j]);
                keys[j] = names[j];
                kls[j] = strlen(names[j]);
                vals[j] = j ? (void *)cm_new_value(m) : (void *)v;
                rcs[j] = -1;
            }
            int got_n = tw_cache_set_many(m->c, (size_t)nb, keys, kls, vals, rcs);
            if (got_n != nb)
                CM_FAIL("set_many of %d keys: %d stored", nb, got_n);
            for (int j = 0; j < nb; j++) {
                if (rcs[j] != 0)
                    CM_FAIL("set_many key %d: %d", idx[j], rcs[j]);
                cm_store_ex(m, idx[j], vals[j], m->ttl, true);
            }
            /* each value of the batch is freed iff the model dropped it
             * (a later repeat of its key, or an eviction by a later key) */
            for (int j = 0; j < nb; j++) {
                bool held = m->k[idx[j]].stored && m->k[idx[j]].value == vals[j];
                cm_expect_freed(vals[j], held ? 0 : 1, "set_many");
            }
            break;
        } else {
            rc = tw_cache_set(m->c, name, kl, v);
        }
        if (rc != 0)
            CM_FAIL("set: %d", rc);
        cm_store(m, i, v, m->ttl);
        break;
    }
    case 3: { /* invalid TTL: nothing changes */
        struct cm_value *v = cm_new_value(m);
        if (!v)
            return;
        rc = tw_cache_set_ttl(m->c, name, kl, v, -(int64_t)(arg % 3));
        if (rc != TW_EINVAL)
            CM_FAIL("set_ttl(<= 0): %d", rc);
        atomic_store(&v->freed, 1); /* never stored; marked done for the final check */
        break;
    }
    case 4:
    case 5: /* get, or a batched get of this key and an absent one */
        if (arg & 0x80) {
            const void *keys[2] = {name, "absent-key"};
            size_t kls[2] = {kl, 10};
            void *vals[2];
            int rcs[2];
            int hits = tw_cache_get_many(m->c, 2, keys, kls, vals, rcs);
            if (rcs[1] != TW_ENOENT || vals[1] != NULL || hits != (rcs[0] == 0))
                CM_FAIL("get_many: hits %d rcs %d %d", hits, rcs[0], rcs[1]);
            rc = rcs[0];
            got = vals[0];
        } else {
            rc = tw_cache_get(m->c, name, kl, &got);
        }
        if (cm_live(m, i)) {
            if (rc != 0 || got != m->k[i].value)
                CM_FAIL("get key %d at %" PRIu64 ": rc %d, want hit", i, m->now, rc);
            m->k[i].stamp = ++m->seq;
        } else if (rc != TW_ENOENT) {
            CM_FAIL("get key %d at %" PRIu64 ": rc %d, want miss (stored %d expiry %" PRIu64 ")",
                    i, m->now, rc, m->k[i].stored, m->k[i].expiry);
        }
        break;
    case 6: /* del */
        rc = tw_cache_del(m->c, name, kl);
        if (m->k[i].stored) {
            if (rc != 0)
                CM_FAIL("del key %d: %d, want 0", i, rc);
            m->k[i].stored = false;
            m->count--;
            cm_expect_freed(m->k[i].value, 1, "del");
        } else if (rc != TW_ENOENT) {
            CM_FAIL("del absent key %d: %d", i, rc);
        }
        break;
    case 7: { /* take, with a loader that succeeds or fails */
        bool fail = arg & 0x80;
        int calls = m->loader_calls;
        bool live = cm_live(m, i);
        struct cm_value *expect = live ? m->k[i].value : NULL;
        if (!live && !fail && m->nvalues >= CM_MAX_VALUES)
            return;
        rc = (arg & 0x40) ? tw_cache_take_ttl(m->c, name, kl, fail ? cm_fail_loader : cm_loader,
                                              m, &got, ttl)
                          : tw_cache_take(m->c, name, kl, fail ? cm_fail_loader : cm_loader, m,
                                          &got);
        if (live) {
            if (rc != 0 || got != expect || m->loader_calls != calls)
                CM_FAIL("take hit key %d: rc %d", i, rc);
            m->k[i].stamp = ++m->seq;
        } else if (fail) {
            if (rc != -99 || m->loader_calls != calls + 1)
                CM_FAIL("take failing key %d: rc %d", i, rc);
        } else {
            if (rc != 0 || m->loader_calls != calls + 1 || got != &m->values[m->nvalues - 1])
                CM_FAIL("take load key %d: rc %d", i, rc);
            cm_store(m, i, got, (arg & 0x40) ? ttl : m->ttl);
        }
        break;
    }
    case 8: /* advance: expire what is due */
        m->now += arg % 40;
        cm_collect(m, tw_cache_advance(m->c, m->now));
        break;
    default: /* time moves, nothing expires; then check the count */
        m->now += arg % 8;
        if (tw_cache_set_now(m->c, m->now) != 0)
            CM_FAIL("set_now");
        cm_check_count(m);
        break;
    }
}

/* The concurrent reader: every key, over and over, single and batched. */
static void *cm_reader(void *arg)
{
    struct cmodel *m = arg;
    char names[CM_KEYS][16];
    const void *keys[CM_KEYS];
    size_t kls[CM_KEYS];
    for (int i = 0; i < CM_KEYS; i++) {
        cm_key_name(i, names[i]);
        keys[i] = names[i];
        kls[i] = strlen(names[i]);
    }
    long hits = 0;
    for (unsigned round = 0; round < 1000000 && !atomic_load(&m->reader_stop); round++) {
        void *got[CM_KEYS];
        atomic_fetch_add(&m->reader_rounds, 1);
        if (round & 1) {
            int h = tw_cache_get_many(m->c, CM_KEYS, keys, kls, got, NULL);
            hits += h > 0 ? h : 0;
        } else {
            for (int i = 0; i < CM_KEYS; i++)
                hits += tw_cache_get(m->c, keys[i], kls[i], &got[i]) == 0;
        }
    }
    atomic_store(&m->reader_hits, hits);
    return NULL;
}

/* Run one input through a fresh cache and model; with concurrent, a reader
 * thread reads all along (see the top comment). */
static void cm_run_ex(struct cmodel *m, const uint8_t *data, size_t size, bool concurrent)
{
    if (size < 3)
        return;
    static const unsigned shard_choices[4] = {1, 2, 4, 16};
    memset(m, 0, sizeof *m);
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.shards = shard_choices[data[0] % 4];
    cfg.lock = (data[0] & 4) ? TW_CACHE_LOCK_RWLOCK : TW_CACHE_LOCK_MUTEX;
    cfg.limit = data[1] % 3 == 0 ? 0 : 1 + data[1] % 9;
    cfg.default_ttl_ms = 1 + data[2] % 32;
    cfg.jitter = 0;
    /* bit 3: expiry timers with slack (1/2 .. 1/8 of the TTL); keys are
     * still never returned at or after their expiry */
    cfg.expiry_slack_shift = (data[0] & 8) && !concurrent ? 1 + (data[0] >> 4) % 3 : 0;
    cfg.manual_clock = true;
    /* byte 1's top bit: keys hashed with SipHash-1-3 instead of tw_hash_mum */
    cfg.siphash = (data[1] & 0x80) != 0;
    cfg.free_value = cm_free;
    cfg.retain_value = cm_retain;
    if (concurrent)
        cfg.limit = 0;
    m->concurrent = cm_concurrent_ = concurrent;
    m->limit = cfg.limit;
    m->shift = cfg.expiry_slack_shift;
    m->ttl = cfg.default_ttl_ms;
#ifdef CM_TRACE
    fprintf(stderr, "run: shards %u lock %d limit %zu ttl %lld\n", cfg.shards, (int)cfg.lock,
            cfg.limit, (long long)cfg.default_ttl_ms);
#endif
    if (tw_cache_new(&m->c, &cfg) != 0)
        CM_FAIL("tw_cache_new");
    pthread_t reader;
    if (concurrent && pthread_create(&reader, NULL, cm_reader, m) != 0)
        CM_FAIL("pthread_create");
    if (concurrent) /* let the reader start, so that it overlaps the run */
        for (int spin = 0; spin < 1000000 && !atomic_load(&m->reader_rounds); spin++)
            sched_yield();
    for (size_t p = 3; p + 2 <= size; p += 2)
        cm_op(m, data[p], data[p + 1]);
    cm_check_count(m);
    m->now += 100;
    cm_collect(m, tw_cache_advance(m->c, m->now));
    cm_check_count(m);
    if (concurrent) {
        atomic_store(&m->reader_stop, true);
        pthread_join(reader, NULL);
    }
    tw_cache_free(m->c);
    cm_concurrent_ = false;
    for (int v = 0; v < m->nvalues; v++)
        cm_expect_freed(&m->values[v], 1, "final");
}

static inline void cm_run(struct cmodel *m, const uint8_t *data, size_t size)
{
    cm_run_ex(m, data, size, false);
}

#endif /* TWHEEL_CACHE_MODEL_H */
