/* SPDX-License-Identifier: MIT */
/* twheel cache: take, a get that on a miss loads the key with single
 * flight: one loader runs per key at a time, its callers wait on their
 * shard's flight_mu and flight_cv, and the leader stores the value and hands
 * it to every waiter under the shard lock (flight_mu -> shard lock, the
 * lock order of cache/cache.c). */
#include <pthread.h>
#include <string.h>

#include "cache/internal.h"

static struct cache_flight *cache_flight_find(struct cache_shard *s, const struct cache_key *k)
{
    for (struct cache_flight *f = s->flights; f; f = f->next)
        if (f->hash == (uint32_t)k->hash && f->key_len == k->len &&
            memcmp(f->key, k->p, k->len) == 0)
            return f;
    return NULL;
}

/* A miss of take's first look: look again under the shard's flight_mu,
 * then wait for the key's flight or lead one (load, store, hand out). Out
 * of line, so that take's hit path is as small as a get's. */
static __attribute__((noinline)) int cache_take_miss(struct tw_cache *c, const struct cache_key *kp,
                                                     tw_cache_loader_fn *loader, void *loader_ctx,
                                                     const struct cache_out *out, int64_t ttl_ms)
{
    const void *key = kp->p;
    size_t key_len = kp->len;
    struct cache_shard *s = cache_shard_of(c, kp->hash);

    pthread_mutex_lock(&s->flight_mu);
    /* Look again: a load may have finished since. */
    if (cache_get(c, kp, out, true) == 0) {
        pthread_mutex_unlock(&s->flight_mu);
        return 0;
    }
    struct cache_flight *f = cache_flight_find(s, kp);
    if (f) {
        /* Someone is loading this key: wait for its result. */
        struct cache_waiter w = {
            .value = out->value, .buf = out->buf, .cap = out->cap, .value_len = out->value_len};
        w.next = f->waiters;
        f->waiters = &w;
        while (!w.done)
            pthread_cond_wait(&s->flight_cv, &s->flight_mu);
        pthread_mutex_unlock(&s->flight_mu);
        return w.err;
    }
    struct cache_flight me = {s->flights, key, key_len, (uint32_t)kp->hash, NULL};
    s->flights = &me;
    pthread_mutex_unlock(&s->flight_mu);

    void *loaded = NULL;
    size_t loaded_len = 0;
    int err = loader(loader_ctx, key, key_len, &loaded, &loaded_len);
    bool loaded_ok = err == 0;
    if (err == 0 && c->copy_values && !loaded && loaded_len)
        err = TW_EINVAL;

    struct cache_garbage g = {0};
    uint64_t tick = TW_NEVER;
    bool stored = false, advance = false;
    pthread_mutex_lock(&s->flight_mu);
    if (err == 0) {
        struct cache_val v = {loaded, loaded, loaded_len};
        cache_lock(c, s);
        err = cache_store_locked(c, s, kp, &v, ttl_ms, cache_now_ns(c), &tick, &g);
        advance = cache_retire(c, s, &g);
        if (err == 0) {
            stored = true;
            /* Every caller gets the value; retain/copy it while it is
             * certainly alive (under the shard lock). */
            struct cache_entry *e = tw_cache_map_find_(s, key, key_len, kp->hash);
            cache_output(c, e, out);
            for (struct cache_waiter *w = me.waiters; w; w = w->next) {
                struct cache_out wo = {w->value, w->buf, w->cap, w->value_len};
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
        cache_after_write(c, &g, advance);
        cache_evict(c);
    }
    return err;
}

/* Take: a hit returns as a get does (inline); a miss loads. */
static inline __attribute__((always_inline)) int
cache_take(struct tw_cache *c, const void *key, size_t key_len, tw_cache_loader_fn *loader,
           void *loader_ctx, const struct cache_out *out, int64_t ttl_ms)
{
    if (!loader || ttl_ms <= 0)
        return TW_EINVAL;
    struct cache_key k = {key, key_len, cache_hash(c, key, key_len)};
    if (cache_get(c, &k, out, false) == 0)
        return 0;
    return cache_take_miss(c, &k, loader, loader_ctx, out, ttl_ms);
}

int tw_cache_take_ttl(struct tw_cache *c, const void *key, size_t key_len,
                      tw_cache_loader_fn *loader, void *loader_ctx, void **value, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (c->copy_values || !value)
        return TW_EINVAL;
    struct cache_out out = {value, NULL, 0, NULL};
    return cache_take(c, key, key_len, loader, loader_ctx, &out, ttl_ms);
}

int tw_cache_take(struct tw_cache *c, const void *key, size_t key_len, tw_cache_loader_fn *loader,
                  void *loader_ctx, void **value)
{
    return tw_cache_take_ttl(c, key, key_len, loader, loader_ctx, value, c ? c->default_ttl_ms : 0);
}

int tw_cache_take_copy_ttl(struct tw_cache *c, const void *key, size_t key_len,
                           tw_cache_loader_fn *loader, void *loader_ctx, void *buf, size_t cap,
                           size_t *value_len, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (!c->copy_values || !value_len || (!buf && cap))
        return TW_EINVAL;
    struct cache_out out = {NULL, buf, cap, value_len};
    return cache_take(c, key, key_len, loader, loader_ctx, &out, ttl_ms);
}

int tw_cache_take_copy(struct tw_cache *c, const void *key, size_t key_len,
                       tw_cache_loader_fn *loader, void *loader_ctx, void *buf, size_t cap,
                       size_t *value_len)
{
    return tw_cache_take_copy_ttl(c, key, key_len, loader, loader_ctx, buf, cap, value_len,
                                  c ? c->default_ttl_ms : 0);
}
