/* SPDX-License-Identifier: MIT */
/* twheel cache: writes of one key. tw_cache_set, _set_ttl, _set_copy,
 * _set_copy_ttl and tw_cache_del; the store under the shard lock that set,
 * set_many and take share (a new value comes in a new entry, swapped into
 * the chain; a set of the same pointer only moves the expiry: see the
 * design comment of cache/cache.c). The jittered expiry tick
 * (cache_deadline) is inline in cache/internal.h, for take's store too. */
#include <string.h>

#include "cache/internal.h"

/* Entries readers may see are not changed in place except for the expiry of
 * a set of the same pointer: a new value comes in a new entry. */
int tw_cache_store_at_locked_(struct tw_cache *c, struct cache_shard *s, const struct cache_key *k,
                              const struct cache_val *v, uint64_t tick, uint64_t now_ns,
                              uint64_t *deadline, struct cache_garbage *g)
{
    struct cache_entry *e = tw_cache_map_find_(s, k->p, k->len, k->hash);
    if (e && !c->copy_values &&
        atomic_load_explicit(&e->value.ptr, memory_order_relaxed) == v->ptr) {
        /* Same pointer: new expiry, new stamp, timer re-armed to the new
         * expiry (lazy when later, relocated when earlier). With slack, a
         * timer planned at or before the new expiry stays where it is: it
         * fires early, and the expiry pass re-arms it then (a refresh is
         * then one store instead of an unlink and a link, which wrote two
         * other entries' lines: 1.75 missed lines per refresh at 1e6 keys). */
        atomic_store_explicit(&e->expires, tick, memory_order_release);
        if (c->limit) {
            tw_cache_lru_unlink_(s, e);
            tw_cache_lru_push_(s, e, cache_stamp(c, now_ns));
        }
        uint64_t planned = tw_deadline(&e->timer);
        if (c->slack_shift && planned <= tick)
            *deadline = planned;
        else
            *deadline = cache_arm(c, s, e, tick, now_ns);
        return 0;
    }
    if (v->len > SIZE_MAX - cache_entry_size(c, k->len, 0))
        return TW_ENOMEM; /* no block that large can exist */
    size_t bytes = cache_entry_size(c, k->len, v->len);
    char *block = tw_cache_slab_fits_(bytes) ? tw_cache_slab_alloc_(c, &s->slab, bytes)
                                             : tw_mem_alloc_(&c->alloc, bytes);
    if (!block)
        return TW_ENOMEM;
    struct cache_entry *n = (struct cache_entry *)(void *)(block + cache_pre(c));
    tw_node_init(&n->timer);
    atomic_init(&n->hnext, 0);
    if (c->limit) {
        struct cache_lru *l = cache_lru_of(n);
        l->prev = l->next = NULL;
        l->pos = 0;
        atomic_init(&l->stamp, 0);
    }
    n->hash = (uint32_t)k->hash;
    unsigned char *vbytes = cache_eset_key(n, k->p, k->len);
    if (c->copy_values) {
        n->value.len = v->len;
        if (v->len)
            memcpy(vbytes, v->bytes, v->len);
    } else {
        atomic_init(&n->value.ptr, v->ptr);
    }
    atomic_init(&n->expires, tick);
    uint64_t planned = cache_arm(c, s, n, tick, now_ns);
    if (e) {
        /* The new entry takes the old one's place in its chain (a release
         * store publishes it); the old one is retired. */
        tw_cancel(&s->wheel, &e->timer);
        tw_cache_map_replace_(s, e, n, k->hash);
        if (c->limit)
            tw_cache_lru_unlink_(s, e);
        tw_cache_garbage_add_(g, e);
    } else {
        tw_cache_map_insert_(c, s, n, k->hash, g);
        atomic_fetch_add_explicit(&c->count, 1, memory_order_relaxed);
    }
    if (c->limit)
        tw_cache_lru_push_(s, n, cache_stamp(c, now_ns));
    *deadline = planned;
    return 0;
}

/* now_ns is the cache's time line; a batch passes one reading for several
 * keys. */
int tw_cache_set_at_(struct tw_cache *c, const struct cache_key *kp, const struct cache_val *v,
                     int64_t ttl_ms, uint64_t now_ns)
{
    struct cache_key k = *kp;
    struct cache_shard *s = cache_shard_of(c, k.hash);
    struct cache_garbage g = {0};
    uint64_t tick = 0;
    cache_lock(c, s);
    int rc = cache_store_locked(c, s, &k, v, ttl_ms, now_ns, &tick, &g);
    bool advance = cache_retire(c, s, &g);
    cache_unlock(c, s);
    if (rc)
        return rc;
    cache_note_deadline(c, tick);
    cache_after_write(c, &g, advance);
    cache_evict(c);
    return 0;
}

/* A single set from its public call: hash, read the clock, store. Inline
 * into each public call, so that a set is one call to tw_cache_set_at_. */
static inline __attribute__((always_inline)) int cache_set(struct tw_cache *c, const void *key,
                                                           size_t key_len,
                                                           const struct cache_val *v,
                                                           int64_t ttl_ms)
{
    if (ttl_ms <= 0)
        return TW_EINVAL;
    struct cache_key k = {key, key_len, cache_hash(c, key, key_len)};
    return tw_cache_set_at_(c, &k, v, ttl_ms, cache_now_ns(c));
}

int tw_cache_set_ttl(struct tw_cache *c, const void *key, size_t key_len, void *value,
                     int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (c->copy_values)
        return TW_EINVAL;
    struct cache_val v = {value, NULL, 0};
    return cache_set(c, key, key_len, &v, ttl_ms);
}

int tw_cache_set(struct tw_cache *c, const void *key, size_t key_len, void *value)
{
    return tw_cache_set_ttl(c, key, key_len, value, c ? c->default_ttl_ms : 0);
}

int tw_cache_set_copy_ttl(struct tw_cache *c, const void *key, size_t key_len, const void *value,
                          size_t value_len, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (!c->copy_values || (!value && value_len))
        return TW_EINVAL;
    if (value_len >
        SIZE_MAX - sizeof(struct cache_lru) - CACHE_ENTRY_HDR - cache_key_bytes(key_len))
        return TW_E2BIG;
    struct cache_val v = {NULL, value, value_len};
    return cache_set(c, key, key_len, &v, ttl_ms);
}

int tw_cache_set_copy(struct tw_cache *c, const void *key, size_t key_len, const void *value,
                      size_t value_len)
{
    return tw_cache_set_copy_ttl(c, key, key_len, value, value_len, c ? c->default_ttl_ms : 0);
}

int tw_cache_del(struct tw_cache *c, const void *key, size_t key_len)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    uint64_t hash = cache_hash(c, key, key_len);
    struct cache_shard *s = cache_shard_of(c, hash);
    struct cache_garbage g = {0};
    cache_lock(c, s);
    struct cache_entry *e = tw_cache_map_find_(s, key, key_len, hash);
    if (e)
        cache_unlink(c, s, e, &g);
    bool advance = cache_retire(c, s, &g);
    cache_unlock(c, s);
    cache_after_write(c, &g, advance);
    return e ? 0 : TW_ENOENT;
}
