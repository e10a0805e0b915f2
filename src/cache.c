/* SPDX-License-Identifier: MIT */
/* twheel cache: the public calls, expiry, single flight, eviction, stats.
 *
 * Locks, in the only order they are ever nested:
 *   shard flight_mu  ->  shard lock          (take: join or finish a flight)
 *   cache evict_mu   ->  shard lock          (eviction, one shard at a time)
 *   cache thread_mu                          (never held with another lock)
 * Values are freed, and entries released, after the shard lock is dropped.
 *
 * Expiry: each shard's entries carry a timer on the shard's wheel (1 ms
 * ticks). The expiry thread (none under the manual clock) pulls due timers
 * with tw_wheel_expire_next_node, CACHE_EXPIRE_BATCH at a time per lock hold, then
 * sleeps on a CLOCK_MONOTONIC condition until the earliest next deadline of
 * all shards. A set whose deadline is earlier than that wakes it (see
 * cache_note_deadline for the handshake). Reads never depend on the thread:
 * they compare the entry's deadline with the clock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache_internal.h"

/* ---- clock ------------------------------------------------------------- */

static uint64_t cache_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds on the cache's time line (tick = ns / CACHE_NS_PER_TICK). */
static inline uint64_t cache_now_ns(const struct tw_cache *c)
{
    if (c->manual)
        return atomic_load_explicit(&c->manual_now, memory_order_acquire) * CACHE_NS_PER_TICK;
    return cache_mono_ns() - c->epoch_ns;
}

/* The LRU stamp for an access at now_ns, under the shard lock. */
static inline uint64_t cache_stamp(struct tw_cache *c, uint64_t now_ns)
{
    if (c->manual)
        return atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed);
    return now_ns;
}

/* ---- locks ------------------------------------------------------------- */

static inline void cache_lock(struct tw_cache *c, struct cache_shard *s)
{
    if (c->rwlock)
        pthread_rwlock_wrlock(&s->lock.rw);
    else
        pthread_mutex_lock(&s->lock.mu);
}

/* Lock for a read: shared when the read writes nothing (rwlock, no limit). */
static inline void cache_lock_read(struct tw_cache *c, struct cache_shard *s)
{
    if (!c->rwlock)
        pthread_mutex_lock(&s->lock.mu);
    else if (c->limit)
        pthread_rwlock_wrlock(&s->lock.rw);
    else
        pthread_rwlock_rdlock(&s->lock.rw);
}

static inline void cache_unlock(struct tw_cache *c, struct cache_shard *s)
{
    if (c->rwlock)
        pthread_rwlock_unlock(&s->lock.rw);
    else
        pthread_mutex_unlock(&s->lock.mu);
}

/* Bump a shard counter. Under an exclusive shard lock a plain relaxed
 * load+store suffices (no locked instruction; stats readers see a value that
 * is at most a little old); readers sharing an rwlock need the atomic add. */
static inline void cache_bump(_Atomic uint64_t *x, uint64_t n, bool shared)
{
    if (shared)
        atomic_fetch_add_explicit(x, n, memory_order_relaxed);
    else
        atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + n,
                              memory_order_relaxed);
}

/* Whether a read holds its shard lock shared (see cache_lock_read). */
static inline bool cache_read_shared(const struct tw_cache *c)
{
    return c->rwlock && !c->limit;
}

/* ---- entries ----------------------------------------------------------- */

static inline uint64_t cache_hash(const struct tw_cache *c, const void *key, size_t klen)
{
    return tw_siphash13(key, klen, c->seed[0], c->seed[1]);
}

static inline struct cache_shard *cache_shard_of(struct tw_cache *c, uint64_t hash)
{
    return &c->shards[c->shard_shift >= 64 ? 0 : hash >> c->shard_shift];
}

/* Bytes in front of each entry: its LRU links when there is a limit. */
static inline size_t cache_pre(const struct tw_cache *c)
{
    return c->limit ? sizeof(struct cache_lru) : 0;
}

/* The size of an entry's block (LRU links, entry, key, value bytes). */
static inline size_t cache_entry_size(const struct tw_cache *c, size_t klen, size_t vlen)
{
    return cache_pre(c) + sizeof(struct cache_entry) + klen + (c->copy_values ? vlen : 0);
}

static inline void cache_entry_release(struct tw_cache *c, struct cache_entry *e, size_t bytes)
{
    tw_cache_mem_free_(&c->alloc, (char *)e - cache_pre(c), bytes);
}

static inline size_t cache_entry_bytes(const struct tw_cache *c, const struct cache_entry *e)
{
    return cache_entry_size(c, e->klen, c->copy_values ? e->value.len : 0);
}

/* Entries (and pointer-mode values) dropped under a lock, released after. */
struct cache_garbage {
    struct cache_entry *entries; /* linked through hnext */
    void *value;                 /* one value replaced by a set */
    bool has_value;
};

static void cache_garbage_add(struct cache_garbage *g, struct cache_entry *e)
{
    e->hnext = g->entries;
    g->entries = e;
}

static void cache_garbage_release(struct tw_cache *c, struct cache_garbage *g)
{
    if (g->has_value && c->free_value)
        c->free_value(c->value_ctx, g->value);
    struct cache_entry *e = g->entries;
    while (e) {
        struct cache_entry *next = e->hnext;
        if (!c->copy_values && c->free_value)
            c->free_value(c->value_ctx, e->value.ptr);
        cache_entry_release(c, e, cache_entry_bytes(c, e));
        e = next;
    }
    g->entries = NULL;
    g->has_value = false;
}

/* Take e out of the shard (table, LRU, wheel) into the garbage. */
static void cache_unlink(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                         struct cache_garbage *g)
{
    tw_node_cancel(&s->wheel, &e->timer);
    tw_cache_map_remove_(c, s, e);
    if (c->limit)
        tw_cache_lru_unlink_(s, e);
    atomic_fetch_sub_explicit(&c->count, 1, memory_order_relaxed);
    cache_garbage_add(g, e);
}

static inline bool cache_live(const struct cache_entry *e, uint64_t now_ns)
{
    return now_ns / CACHE_NS_PER_TICK < tw_node_deadline(&e->timer);
}

/* xorshift64*: uniform double in [0, 1). */
static inline double cache_uniform(struct cache_shard *s)
{
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return (double)((x * UINT64_C(0x2545f4914f6cdd1d)) >> 11) * (1.0 / 9007199254740992.0);
}

/* The expiry tick of a key stored at now_ns with ttl_ms (> 0), jittered:
 * the instant now + ttl * factor rounded up to a whole tick, at least the
 * next tick, saturating far below TW_NEVER. */
static uint64_t cache_deadline(struct tw_cache *c, struct cache_shard *s, uint64_t now_ns,
                               int64_t ttl_ms)
{
    /* The documented cap (cache.h): just under 2^62 ns, far from overflow. */
    const uint64_t max_ns = (uint64_t)TW_CACHE_TTL_MAX_MS * CACHE_NS_PER_TICK;
    uint64_t ttl_ns;
    if (c->jitter > 0) {
        double f = 1.0 - c->jitter + 2.0 * c->jitter * cache_uniform(s);
        double ns = (double)ttl_ms * f * (double)CACHE_NS_PER_TICK;
        ttl_ns = ns >= (double)max_ns ? max_ns : (uint64_t)ns;
        if (ttl_ns == 0)
            ttl_ns = 1;
    } else {
        ttl_ns = (uint64_t)ttl_ms > max_ns / CACHE_NS_PER_TICK ? max_ns
                                                                : (uint64_t)ttl_ms * CACHE_NS_PER_TICK;
    }
    uint64_t at = now_ns > UINT64_MAX - ttl_ns ? UINT64_MAX : now_ns + ttl_ns;
    uint64_t tick = at / CACHE_NS_PER_TICK + (at % CACHE_NS_PER_TICK != 0);
    uint64_t now_tick = now_ns / CACHE_NS_PER_TICK;
    return tick > now_tick ? tick : now_tick + 1;
}

/* Tell the expiry thread about a deadline just armed. Handshake (seq_cst on
 * both sides, Dekker style): we lower `earliest`, then read `sleep_until`;
 * the thread publishes `sleep_until`, then reads `earliest`. Either the
 * thread sees our deadline, or we see that it sleeps past it and wake it. */
static void cache_note_deadline(struct tw_cache *c, uint64_t tick)
{
    if (c->manual)
        return;
    uint64_t cur = atomic_load(&c->earliest);
    while (tick < cur && !atomic_compare_exchange_weak(&c->earliest, &cur, tick)) {
    }
    if (tick < atomic_load(&c->sleep_until)) {
        pthread_mutex_lock(&c->thread_mu);
        pthread_cond_signal(&c->thread_cv);
        pthread_mutex_unlock(&c->thread_mu);
    }
}

/* Key bytes as given by the caller. */
struct cache_key {
    const void *p;
    size_t len;
    uint64_t hash;
};

/* A value to store: a pointer, or bytes to copy. */
struct cache_val {
    void *ptr;
    const void *bytes;
    size_t len;
};

/* Store under the shard lock (held). On success *deadline is the armed tick
 * and anything displaced is in g. TW_ENOMEM leaves everything unchanged. */
static int cache_store_locked(struct tw_cache *c, struct cache_shard *s,
                              const struct cache_key *k, const struct cache_val *v,
                              int64_t ttl_ms, uint64_t now_ns, uint64_t *deadline,
                              struct cache_garbage *g)
{
    struct cache_entry *e = tw_cache_map_find_(s, k->p, k->len, k->hash);
    uint64_t tick = cache_deadline(c, s, now_ns, ttl_ms);
    if (e && (!c->copy_values || e->value.len == v->len)) {
        /* Same entry: new value, new stamp, timer re-armed to the new
         * expiry (lazy when later, relocated when earlier). */
        if (c->copy_values) {
            if (v->len)
                memcpy(e->key + e->klen, v->bytes, v->len);
        } else if (e->value.ptr != v->ptr) {
            g->value = e->value.ptr;
            g->has_value = true;
            e->value.ptr = v->ptr;
        }
        if (c->limit) {
            cache_lru_of(e)->stamp = cache_stamp(c, now_ns);
            tw_cache_lru_touch_(s, e);
        }
        tw_node_arm_at(&s->wheel, &e->timer, tick);
        *deadline = tick;
        return 0;
    }
    if (v->len > SIZE_MAX - cache_entry_size(c, k->len, 0))
        return TW_ENOMEM; /* no block that large can exist */
    size_t bytes = cache_entry_size(c, k->len, v->len);
    char *block = tw_cache_mem_alloc_(&c->alloc, bytes);
    if (!block)
        return TW_ENOMEM;
    struct cache_entry *n = (struct cache_entry *)(void *)(block + cache_pre(c));
    tw_node_init(&n->timer);
    n->hnext = NULL;
    if (c->limit) {
        struct cache_lru *l = cache_lru_of(n);
        l->prev = l->next = NULL;
        l->stamp = cache_stamp(c, now_ns);
    }
    n->hash = (uint32_t)k->hash;
    n->klen = (uint32_t)k->len;
    if (k->len)
        memcpy(n->key, k->p, k->len);
    if (c->copy_values) {
        n->value.len = v->len;
        if (v->len)
            memcpy(n->key + k->len, v->bytes, v->len);
    } else {
        n->value.ptr = v->ptr;
    }
    if (e) {
        /* Copy mode, new size: the new entry takes the old one's place. */
        tw_node_cancel(&s->wheel, &e->timer);
        tw_cache_map_replace_(s, e, n);
        if (c->limit)
            tw_cache_lru_unlink_(s, e);
        cache_garbage_add(g, e);
    } else {
        tw_cache_map_insert_(c, s, n);
        atomic_fetch_add_explicit(&c->count, 1, memory_order_relaxed);
    }
    if (c->limit)
        tw_cache_lru_push_(s, n);
    tw_node_arm_at(&s->wheel, &n->timer, tick);
    *deadline = tick;
    return 0;
}

/* While the cache holds more than `limit` entries, evict the least recently
 * used: the tail of the shard whose tail is oldest. */
static void cache_evict(struct tw_cache *c)
{
    if (!c->limit || atomic_load_explicit(&c->count, memory_order_relaxed) <= c->limit)
        return;
    /* Victims are freed after evict_mu is released: free_value may call the
     * cache (a set evicts in turn) and must never run under a cache lock. */
    struct cache_garbage g = {0};
    pthread_mutex_lock(&c->evict_mu);
    while (atomic_load_explicit(&c->count, memory_order_relaxed) > c->limit) {
        struct cache_shard *best = NULL;
        uint64_t oldest = UINT64_MAX;
        for (unsigned i = 0; i < c->nshards; i++) {
            uint64_t o = atomic_load_explicit(&c->shards[i].oldest, memory_order_relaxed);
            if (o < oldest) {
                oldest = o;
                best = &c->shards[i];
            }
        }
        if (!best)
            break;
        cache_lock(c, best);
        struct cache_entry *e = best->lru_tail;
        if (e) {
            cache_unlink(c, best, e, &g);
            cache_bump(&best->evictions, 1, false);
        }
        cache_unlock(c, best);
    }
    pthread_mutex_unlock(&c->evict_mu);
    cache_garbage_release(c, &g);
}

/* ---- argument checks --------------------------------------------------- */

/* Checks a key; the empty key may be NULL, and becomes "" (no pointer
 * arithmetic or memcmp on NULL). */
static int cache_check_key(const struct tw_cache *c, const void **key, size_t klen)
{
    if (!c || (!*key && klen))
        return TW_EINVAL;
    if (klen > UINT32_MAX)
        return TW_E2BIG;
    if (!*key)
        *key = "";
    return 0;
}

/* ---- set --------------------------------------------------------------- */

static int cache_set(struct tw_cache *c, const void *key, size_t klen, const struct cache_val *v,
                     int64_t ttl_ms)
{
    if (ttl_ms <= 0)
        return TW_EINVAL;
    struct cache_key k = {key, klen, cache_hash(c, key, klen)};
    struct cache_shard *s = cache_shard_of(c, k.hash);
    struct cache_garbage g = {0};
    uint64_t tick = 0;
    cache_lock(c, s);
    int rc = cache_store_locked(c, s, &k, v, ttl_ms, cache_now_ns(c), &tick, &g);
    cache_unlock(c, s);
    if (rc)
        return rc;
    cache_note_deadline(c, tick);
    cache_garbage_release(c, &g);
    cache_evict(c);
    return 0;
}

int tw_cache_set_ttl(struct tw_cache *c, const void *key, size_t klen, void *value,
                     int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    if (c->copy_values)
        return TW_EINVAL;
    struct cache_val v = {value, NULL, 0};
    return cache_set(c, key, klen, &v, ttl_ms);
}

int tw_cache_set(struct tw_cache *c, const void *key, size_t klen, void *value)
{
    return tw_cache_set_ttl(c, key, klen, value, c ? c->default_ttl_ms : 0);
}

int tw_cache_set_copy_ttl(struct tw_cache *c, const void *key, size_t klen, const void *value,
                          size_t vlen, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    if (!c->copy_values || (!value && vlen))
        return TW_EINVAL;
    if (vlen > SIZE_MAX - sizeof(struct cache_entry) - klen)
        return TW_E2BIG;
    struct cache_val v = {NULL, value, vlen};
    return cache_set(c, key, klen, &v, ttl_ms);
}

int tw_cache_set_copy(struct tw_cache *c, const void *key, size_t klen, const void *value,
                      size_t vlen)
{
    return tw_cache_set_copy_ttl(c, key, klen, value, vlen, c ? c->default_ttl_ms : 0);
}

/* ---- get --------------------------------------------------------------- */

/* Where a read puts the value: a pointer, or a buffer (copy mode). */
struct cache_out {
    void **value;
    void *buf;
    size_t cap;
    size_t *vlen;
};

/* Hand e's value to out (shard lock held). */
static void cache_output(struct tw_cache *c, const struct cache_entry *e,
                         const struct cache_out *out)
{
    if (c->copy_values) {
        size_t n = e->value.len < out->cap ? e->value.len : out->cap;
        if (n)
            memcpy(out->buf, e->key + e->klen, n);
        *out->vlen = e->value.len;
    } else {
        if (c->retain_value)
            c->retain_value(c->value_ctx, e->value.ptr);
        *out->value = e->value.ptr;
    }
}

/* Look k up and output it. Counts the hit or, if count_miss, the miss. */
static int cache_get(struct tw_cache *c, const struct cache_key *k, const struct cache_out *out,
                     bool count_miss)
{
    struct cache_shard *s = cache_shard_of(c, k->hash);
    cache_lock_read(c, s);
    uint64_t now_ns = cache_now_ns(c);
    struct cache_entry *e = tw_cache_map_find_(s, k->p, k->len, k->hash);
    int rc = TW_ENOENT;
    if (e && cache_live(e, now_ns)) {
        cache_output(c, e, out);
        if (c->limit) {
            cache_lru_of(e)->stamp = cache_stamp(c, now_ns);
            tw_cache_lru_touch_(s, e);
        }
        cache_bump(&s->hits, 1, cache_read_shared(c));
        rc = 0;
    } else if (count_miss) {
        cache_bump(&s->misses, 1, cache_read_shared(c));
    }
    cache_unlock(c, s);
    return rc;
}

int tw_cache_get(struct tw_cache *c, const void *key, size_t klen, void **value)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    if (c->copy_values || !value)
        return TW_EINVAL;
    struct cache_key k = {key, klen, cache_hash(c, key, klen)};
    struct cache_out out = {value, NULL, 0, NULL};
    return cache_get(c, &k, &out, true);
}

int tw_cache_get_copy(struct tw_cache *c, const void *key, size_t klen, void *buf, size_t cap,
                      size_t *vlen)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    if (!c->copy_values || !vlen || (!buf && cap))
        return TW_EINVAL;
    struct cache_key k = {key, klen, cache_hash(c, key, klen)};
    struct cache_out out = {NULL, buf, cap, vlen};
    return cache_get(c, &k, &out, true);
}

/* ---- del --------------------------------------------------------------- */

int tw_cache_del(struct tw_cache *c, const void *key, size_t klen)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    uint64_t hash = cache_hash(c, key, klen);
    struct cache_shard *s = cache_shard_of(c, hash);
    struct cache_garbage g = {0};
    cache_lock(c, s);
    struct cache_entry *e = tw_cache_map_find_(s, key, klen, hash);
    if (e)
        cache_unlink(c, s, e, &g);
    cache_unlock(c, s);
    cache_garbage_release(c, &g);
    return e ? 0 : TW_ENOENT;
}

/* ---- take: get or load with single flight ------------------------------ */

static struct cache_flight *cache_flight_find(struct cache_shard *s, const struct cache_key *k)
{
    for (struct cache_flight *f = s->flights; f; f = f->next)
        if (f->hash == (uint32_t)k->hash && f->klen == k->len &&
            memcmp(f->key, k->p, k->len) == 0)
            return f;
    return NULL;
}

static int cache_take(struct tw_cache *c, const void *key, size_t klen,
                      tw_cache_loader_fn *loader, void *loader_ctx, const struct cache_out *out,
                      int64_t ttl_ms)
{
    if (!loader || ttl_ms <= 0)
        return TW_EINVAL;
    struct cache_key k = {key, klen, cache_hash(c, key, klen)};
    if (cache_get(c, &k, out, false) == 0)
        return 0;
    struct cache_shard *s = cache_shard_of(c, k.hash);

    pthread_mutex_lock(&s->flight_mu);
    /* Look again: a load may have finished since. */
    if (cache_get(c, &k, out, true) == 0) {
        pthread_mutex_unlock(&s->flight_mu);
        return 0;
    }
    struct cache_flight *f = cache_flight_find(s, &k);
    if (f) {
        /* Someone is loading this key: wait for its result. */
        struct cache_waiter w = {.value = out->value, .buf = out->buf, .cap = out->cap,
                                 .vlen = out->vlen};
        w.next = f->waiters;
        f->waiters = &w;
        while (!w.done)
            pthread_cond_wait(&s->flight_cv, &s->flight_mu);
        pthread_mutex_unlock(&s->flight_mu);
        return w.err;
    }
    struct cache_flight me = {s->flights, key, klen, (uint32_t)k.hash, NULL};
    s->flights = &me;
    pthread_mutex_unlock(&s->flight_mu);

    void *loaded = NULL;
    size_t loaded_len = 0;
    int err = loader(loader_ctx, key, klen, &loaded, &loaded_len);
    bool loaded_ok = err == 0;
    if (err == 0 && c->copy_values && !loaded && loaded_len)
        err = TW_EINVAL;

    struct cache_garbage g = {0};
    uint64_t tick = TW_NEVER;
    bool stored = false;
    pthread_mutex_lock(&s->flight_mu);
    if (err == 0) {
        struct cache_val v = {loaded, loaded, loaded_len};
        cache_lock(c, s);
        err = cache_store_locked(c, s, &k, &v, ttl_ms, cache_now_ns(c), &tick, &g);
        if (err == 0) {
            stored = true;
            /* Every caller gets the value; retain/copy it while it is
             * certainly alive (under the shard lock). */
            struct cache_entry *e = tw_cache_map_find_(s, key, klen, k.hash);
            cache_output(c, e, out);
            for (struct cache_waiter *w = me.waiters; w; w = w->next) {
                struct cache_out wo = {w->value, w->buf, w->cap, w->vlen};
                cache_output(c, e, &wo);
            }
        }
        cache_unlock(c, s);
    }
    for (struct cache_waiter *w = me.waiters; w; w = w->next) {
        w->err = err;
        w->done = true;
    }
    struct cache_flight **link = &s->flights;
    while (*link != &me)
        link = &(*link)->next;
    *link = me.next;
    if (me.waiters)
        pthread_cond_broadcast(&s->flight_cv);
    pthread_mutex_unlock(&s->flight_mu);

    /* The loader's value: owned by the cache once stored (pointer mode);
     * freed if it could not be stored; in copy mode the buffer is done. */
    if (loaded_ok && loaded && (c->copy_values || !stored) && c->free_value)
        c->free_value(c->value_ctx, loaded);
    if (stored) {
        cache_note_deadline(c, tick);
        cache_garbage_release(c, &g);
        cache_evict(c);
    }
    return err;
}

int tw_cache_take_ttl(struct tw_cache *c, const void *key, size_t klen,
                      tw_cache_loader_fn *loader, void *loader_ctx, void **value, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    if (c->copy_values || !value)
        return TW_EINVAL;
    struct cache_out out = {value, NULL, 0, NULL};
    return cache_take(c, key, klen, loader, loader_ctx, &out, ttl_ms);
}

int tw_cache_take(struct tw_cache *c, const void *key, size_t klen, tw_cache_loader_fn *loader,
                  void *loader_ctx, void **value)
{
    return tw_cache_take_ttl(c, key, klen, loader, loader_ctx, value, c ? c->default_ttl_ms : 0);
}

int tw_cache_take_copy_ttl(struct tw_cache *c, const void *key, size_t klen,
                           tw_cache_loader_fn *loader, void *loader_ctx, void *buf, size_t cap,
                           size_t *vlen, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, klen);
    if (rc)
        return rc;
    if (!c->copy_values || !vlen || (!buf && cap))
        return TW_EINVAL;
    struct cache_out out = {NULL, buf, cap, vlen};
    return cache_take(c, key, klen, loader, loader_ctx, &out, ttl_ms);
}

int tw_cache_take_copy(struct tw_cache *c, const void *key, size_t klen,
                       tw_cache_loader_fn *loader, void *loader_ctx, void *buf, size_t cap,
                       size_t *vlen)
{
    return tw_cache_take_copy_ttl(c, key, klen, loader, loader_ctx, buf, cap, vlen,
                                  c ? c->default_ttl_ms : 0);
}

/* ---- expiry ------------------------------------------------------------ */

/* Expire s's entries due by now_tick, a batch per lock hold. Returns how many
 * and sets *next to the shard's next expiry. */
static uint64_t cache_expire_shard(struct tw_cache *c, struct cache_shard *s, uint64_t now_tick,
                                   uint64_t *next)
{
    uint64_t total = 0;
    for (;;) {
        struct cache_garbage g = {0};
        unsigned n = 0;
        cache_lock(c, s);
        struct tw_node *t;
        while (n < CACHE_EXPIRE_BATCH && (t = tw_wheel_expire_next_node(&s->wheel, now_tick))) {
            struct cache_entry *e = tw_container_of(t, struct cache_entry, timer);
            tw_cache_map_remove_(c, s, e);
            if (c->limit)
                tw_cache_lru_unlink_(s, e);
            cache_garbage_add(&g, e);
            n++;
        }
        if (n < CACHE_EXPIRE_BATCH)
            *next = tw_wheel_next_expiry(&s->wheel);
        if (n) {
            atomic_fetch_sub_explicit(&c->count, n, memory_order_relaxed);
            cache_bump(&s->expirations, n, false);
        }
        cache_unlock(c, s);
        cache_garbage_release(c, &g);
        total += n;
        if (n < CACHE_EXPIRE_BATCH)
            return total;
    }
}

static uint64_t cache_expire_all(struct tw_cache *c, uint64_t now_tick, uint64_t *next)
{
    uint64_t total = 0, earliest = TW_NEVER;
    for (unsigned i = 0; i < c->nshards; i++) {
        uint64_t n = TW_NEVER;
        total += cache_expire_shard(c, &c->shards[i], now_tick, &n);
        if (n < earliest)
            earliest = n;
    }
    *next = earliest;
    return total;
}

/* Log a line if one is due at now_tick (thread_mu held). */
static void cache_maybe_log(struct tw_cache *c, uint64_t now_tick)
{
    if (!c->log || now_tick < c->log_due)
        return;
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    /* Every count is for the interval since the previous line; qpm is a
     * true rate (per minute of the interval's real length); elements is the
     * one figure of now. */
    uint64_t dh = st.hits - c->log_hits, dm = st.misses - c->log_misses;
    uint64_t dev = st.evictions - c->log_evictions, dex = st.expirations - c->log_expirations;
    uint64_t span = now_tick > c->log_at ? now_tick - c->log_at : 1; /* ms */
    char line[320];
    snprintf(line, sizeof line,
             "cache(%s) - last %.1f s: queries: %llu (qpm: %.0f), hits: %llu, misses: %llu, "
             "hit_ratio: %.1f%%, evictions: %llu, expirations: %llu; elements now: %llu",
             c->name, (double)span / 1000.0, (unsigned long long)(dh + dm),
             (double)(dh + dm) * 60000.0 / (double)span, (unsigned long long)dh,
             (unsigned long long)dm, dh + dm ? 100.0 * (double)dh / (double)(dh + dm) : 0.0,
             (unsigned long long)dev, (unsigned long long)dex, (unsigned long long)st.entries);
    c->log_hits = st.hits;
    c->log_misses = st.misses;
    c->log_evictions = st.evictions;
    c->log_expirations = st.expirations;
    c->log_at = now_tick;
    while (c->log_due <= now_tick)
        c->log_due += c->log_interval;
    c->log(c->log_ctx, line);
}

static void cache_abs_time(const struct tw_cache *c, uint64_t tick, struct timespec *ts)
{
    uint64_t ns = c->epoch_ns + tick * CACHE_NS_PER_TICK;
    ts->tv_sec = (time_t)(ns / UINT64_C(1000000000));
    ts->tv_nsec = (long)(ns % UINT64_C(1000000000));
}

static void *cache_thread_main(void *arg)
{
    struct tw_cache *c = arg;
    pthread_mutex_lock(&c->thread_mu);
    while (!c->stop) {
        atomic_store(&c->sleep_until, 0);
        pthread_mutex_unlock(&c->thread_mu);

        atomic_store(&c->earliest, TW_NEVER);
        uint64_t now = cache_now_ns(c) / CACHE_NS_PER_TICK;
        uint64_t next = TW_NEVER;
        cache_expire_all(c, now, &next);

        pthread_mutex_lock(&c->thread_mu);
        if (c->stop)
            break;
        cache_maybe_log(c, now);
        if (c->log && c->log_due < next)
            next = c->log_due;
        atomic_store(&c->sleep_until, next);
        uint64_t e = atomic_load(&c->earliest);
        uint64_t wake = e < next ? e : next;
        if (wake == TW_NEVER) {
            pthread_cond_wait(&c->thread_cv, &c->thread_mu);
        } else if (wake > cache_now_ns(c) / CACHE_NS_PER_TICK) {
            struct timespec ts;
            cache_abs_time(c, wake, &ts);
            pthread_cond_timedwait(&c->thread_cv, &c->thread_mu, &ts);
        }
    }
    pthread_mutex_unlock(&c->thread_mu);
    return NULL;
}

int tw_cache_set_now(struct tw_cache *c, uint64_t now_ms)
{
    if (!c || !c->manual || now_ms >= (UINT64_C(1) << 44))
        return TW_EINVAL;
    uint64_t cur = atomic_load(&c->manual_now);
    while (now_ms > cur && !atomic_compare_exchange_weak(&c->manual_now, &cur, now_ms)) {
    }
    return 0;
}

int64_t tw_cache_advance(struct tw_cache *c, uint64_t now_ms)
{
    if (tw_cache_set_now(c, now_ms))
        return TW_EINVAL;
    uint64_t now = atomic_load(&c->manual_now), next;
    uint64_t n = cache_expire_all(c, now, &next);
    pthread_mutex_lock(&c->thread_mu);
    cache_maybe_log(c, now);
    pthread_mutex_unlock(&c->thread_mu);
    return (int64_t)n;
}

uint64_t tw_cache_now(const struct tw_cache *c)
{
    return c ? cache_now_ns(c) / CACHE_NS_PER_TICK : 0;
}

/* ---- stats ------------------------------------------------------------- */

int tw_cache_stats(struct tw_cache *c, struct tw_cache_stats *out)
{
    if (!c || !out)
        return TW_EINVAL;
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < c->nshards; i++) {
        struct cache_shard *s = &c->shards[i];
        out->hits += atomic_load_explicit(&s->hits, memory_order_relaxed);
        out->misses += atomic_load_explicit(&s->misses, memory_order_relaxed);
        out->evictions += atomic_load_explicit(&s->evictions, memory_order_relaxed);
        out->expirations += atomic_load_explicit(&s->expirations, memory_order_relaxed);
    }
    out->entries = atomic_load_explicit(&c->count, memory_order_relaxed);
    uint64_t total = out->hits + out->misses;
    out->hit_ratio = total ? (double)out->hits / (double)total : 0.0;
    return 0;
}

/* ---- create / free ----------------------------------------------------- */

void tw_cache_config_init(struct tw_cache_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->jitter = 0.05;
    cfg->shards = 16;
    cfg->log_interval_ms = 60000;
}

/* Tear down the first `inited` shards' locks and wheels, free their
 * entries (and values), and the shard block. */
static void cache_free_shards(struct tw_cache *c, unsigned inited)
{
    for (unsigned i = 0; i < inited; i++) {
        struct cache_shard *s = &c->shards[i];
        tw_wheel_destroy(&s->wheel);
        struct cache_garbage g = {0};
        for (size_t b = 0; b <= s->mask; b++) {
            struct cache_entry *e = s->buckets[b];
            while (e) {
                struct cache_entry *next = e->hnext;
                cache_garbage_add(&g, e);
                e = next;
            }
        }
        cache_garbage_release(c, &g);
        tw_cache_mem_free_(&c->alloc, s->buckets, (s->mask + 1) * sizeof *s->buckets);
        if (c->rwlock)
            pthread_rwlock_destroy(&s->lock.rw);
        else
            pthread_mutex_destroy(&s->lock.mu);
        pthread_cond_destroy(&s->flight_cv);
        pthread_mutex_destroy(&s->flight_mu);
    }
    tw_cache_mem_free_(&c->alloc, c->shards_block, c->shards_bytes);
}

static int cache_init_shard(struct tw_cache *c, struct cache_shard *s, uint64_t rng)
{
    memset(s, 0, sizeof *s);
    s->buckets = tw_cache_mem_alloc_(&c->alloc, CACHE_MIN_BUCKETS * sizeof *s->buckets);
    if (!s->buckets)
        return TW_ENOMEM;
    memset(s->buckets, 0, CACHE_MIN_BUCKETS * sizeof *s->buckets);
    s->mask = CACHE_MIN_BUCKETS - 1;
    s->rng = rng ? rng : 1;
    atomic_init(&s->oldest, UINT64_MAX);
    int rc = c->rwlock ? pthread_rwlock_init(&s->lock.rw, NULL)
                       : pthread_mutex_init(&s->lock.mu, NULL);
    if (rc)
        goto fail_buckets;
    if (pthread_mutex_init(&s->flight_mu, NULL))
        goto fail_lock;
    if (pthread_cond_init(&s->flight_cv, NULL))
        goto fail_flight_mu;
    tw_wheel_init(&s->wheel, atomic_load(&c->manual_now));
    return 0;
fail_flight_mu:
    pthread_mutex_destroy(&s->flight_mu);
fail_lock:
    if (c->rwlock)
        pthread_rwlock_destroy(&s->lock.rw);
    else
        pthread_mutex_destroy(&s->lock.mu);
fail_buckets:
    tw_cache_mem_free_(&c->alloc, s->buckets, CACHE_MIN_BUCKETS * sizeof *s->buckets);
    return TW_ESYS;
}

static bool cache_config_valid(const struct tw_cache_config *cfg)
{
    unsigned n = cfg->shards;
    return cfg->default_ttl_ms > 0 && cfg->jitter >= 0.0 && cfg->jitter < 1.0 && n >= 1 &&
           n <= CACHE_MAX_SHARDS && (n & (n - 1)) == 0 &&
           (cfg->lock == TW_CACHE_LOCK_MUTEX || cfg->lock == TW_CACHE_LOCK_RWLOCK) &&
           !(cfg->copy_values && cfg->retain_value) && cfg->start_ms < (UINT64_C(1) << 44) &&
           (!cfg->log || cfg->log_interval_ms > 0) &&
           (!cfg->allocator || cfg->allocator->fn);
}

int tw_cache_new(struct tw_cache **out, const struct tw_cache_config *cfg)
{
    if (!out || !cfg || !cache_config_valid(cfg))
        return TW_EINVAL;
    struct tw_allocator alloc = cfg->allocator ? *cfg->allocator : (struct tw_allocator){0};
    struct tw_cache *c = tw_cache_mem_alloc_(&alloc, sizeof *c);
    if (!c)
        return TW_ENOMEM;
    memset(c, 0, sizeof *c);
    c->alloc = alloc;
    c->default_ttl_ms = cfg->default_ttl_ms;
    c->limit = cfg->limit;
    c->jitter = cfg->jitter;
    c->rwlock = cfg->lock == TW_CACHE_LOCK_RWLOCK;
    c->copy_values = cfg->copy_values;
    c->manual = cfg->manual_clock;
    c->free_value = cfg->free_value;
    c->retain_value = cfg->retain_value;
    c->value_ctx = cfg->value_ctx;
    c->log = cfg->log;
    c->log_ctx = cfg->log_ctx;
    c->log_interval = cfg->log_interval_ms;
    atomic_init(&c->manual_now, c->manual ? cfg->start_ms : 0);
    atomic_init(&c->seq, 0);
    atomic_init(&c->count, 0);
    atomic_init(&c->sleep_until, 0);
    atomic_init(&c->earliest, TW_NEVER);
    c->epoch_ns = cache_mono_ns();
    tw_random_seed_(c->seed);
    c->log_due = atomic_load(&c->manual_now) + c->log_interval;
    c->log_at = c->log_due - c->log_interval;

    int rc = TW_ENOMEM;
    const char *name = cfg->name ? cfg->name : "cache";
    c->name_bytes = strlen(name) + 1;
    c->name = tw_cache_mem_alloc_(&alloc, c->name_bytes);
    if (!c->name)
        goto fail_cache;
    memcpy(c->name, name, c->name_bytes);

    c->nshards = cfg->shards;
    unsigned bits = 0;
    while ((1u << bits) < c->nshards)
        bits++;
    c->shard_shift = 64 - bits;
    c->shards_bytes = (size_t)c->nshards * sizeof(struct cache_shard) + 64;
    c->shards_block = tw_cache_mem_alloc_(&alloc, c->shards_bytes);
    if (!c->shards_block)
        goto fail_name;
    c->shards = (struct cache_shard *)(((uintptr_t)c->shards_block + 63) & ~(uintptr_t)63);
    unsigned inited = 0;
    for (; inited < c->nshards; inited++) {
        rc = cache_init_shard(c, &c->shards[inited],
                              c->seed[0] ^ (UINT64_C(0x9e3779b97f4a7c15) * (inited + 1)));
        if (rc)
            goto fail_shards;
    }
    rc = TW_ESYS;
    if (pthread_mutex_init(&c->evict_mu, NULL))
        goto fail_shards;
    if (pthread_mutex_init(&c->thread_mu, NULL))
        goto fail_evict;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca))
        goto fail_thread_mu;
    int crc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    crc = crc ? crc : pthread_cond_init(&c->thread_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (crc)
        goto fail_thread_mu;
    if (!c->manual) {
        if (pthread_create(&c->thread, NULL, cache_thread_main, c))
            goto fail_cv;
        c->thread_started = true;
    }
    *out = c;
    return 0;

fail_cv:
    pthread_cond_destroy(&c->thread_cv);
fail_thread_mu:
    pthread_mutex_destroy(&c->thread_mu);
fail_evict:
    pthread_mutex_destroy(&c->evict_mu);
fail_shards:
    cache_free_shards(c, inited);
fail_name:
    tw_cache_mem_free_(&alloc, c->name, c->name_bytes);
fail_cache:
    tw_cache_mem_free_(&alloc, c, sizeof *c);
    return rc;
}

void tw_cache_free(struct tw_cache *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->thread_mu);
        c->stop = true;
        pthread_cond_signal(&c->thread_cv);
        pthread_mutex_unlock(&c->thread_mu);
        pthread_join(c->thread, NULL);
    }
    pthread_cond_destroy(&c->thread_cv);
    pthread_mutex_destroy(&c->thread_mu);
    pthread_mutex_destroy(&c->evict_mu);
    cache_free_shards(c, c->nshards);
    struct tw_allocator alloc = c->alloc;
    tw_cache_mem_free_(&alloc, c->name, c->name_bytes);
    tw_cache_mem_free_(&alloc, c, sizeof *c);
}
