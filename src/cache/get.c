/* SPDX-License-Identifier: MIT */
/* twheel cache: single reads, tw_cache_get and tw_cache_get_copy. A hit
 * proven live by the coarse clock runs inline to the end (cache_get,
 * cache/internal.h); what is left (the precise clock, misses, torn walks,
 * the LRU touch) is here, out of line. The read path is described in the
 * design comment of cache/cache.c. */
#include <string.h>

#include "cache/internal.h"

/* A hit raises the entry's LRU stamp, writing only when it is stale (once
 * per tick under the real clock), so hot keys read by many threads do not
 * bounce their line. */
static inline void cache_touch(struct tw_cache *c, struct cache_entry *e, uint64_t now_ns)
{
    _Atomic uint64_t *st = &cache_lru_of(e)->stamp;
    if (c->manual) {
        atomic_store_explicit(st, cache_stamp(c, now_ns), memory_order_relaxed);
        return;
    }
    uint64_t t = now_ns / CACHE_NS_PER_TICK;
    if (atomic_load_explicit(st, memory_order_relaxed) < t)
        atomic_store_explicit(st, t, memory_order_relaxed);
}

int tw_cache_get_found_(struct tw_cache *c, struct cache_entry *e, const struct cache_out *out)
{
    if (!e)
        return TW_ENOENT;
    if (cache_surely_live(c, e)) { /* no limit: nothing to touch */
        cache_output(c, e, out);
        return 0;
    }
    uint64_t now_ns = cache_now_ns(c);
    if (!cache_live(e, now_ns))
        return TW_ENOENT;
    cache_output(c, e, out);
    if (c->limit)
        cache_touch(c, e, now_ns);
    return 0;
}

int tw_cache_get_rest_(struct tw_cache *c, struct cache_shard *s, const struct cache_key *k,
                       const struct cache_out *out, bool count_miss, struct cache_rd *rd,
                       struct cache_entry *e, bool torn)
{
    if (!e && torn)
        e = cache_find_read(c, s, k);
    int rc = tw_cache_get_found_(c, e, out);
    if (rc == 0) {
        tw_cache_rd_exit_hit_(rd);
        return 0;
    }
    if (count_miss)
        atomic_fetch_add_explicit(&rd->st->misses, 1, memory_order_relaxed);
    tw_cache_rd_exit_(rd);
    return rc;
}

int tw_cache_get(struct tw_cache *c, const void *key, size_t key_len, void **value)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (c->copy_values || !value)
        return TW_EINVAL;
    struct cache_key k = {key, key_len, cache_hash(c, key, key_len)};
    struct cache_out out = {value, NULL, 0, NULL};
    return cache_get(c, &k, &out, true);
}

int tw_cache_get_copy(struct tw_cache *c, const void *key, size_t key_len, void *buf, size_t cap,
                      size_t *value_len)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (!c->copy_values || !value_len || (!buf && cap))
        return TW_EINVAL;
    struct cache_key k = {key, key_len, cache_hash(c, key, key_len)};
    struct cache_out out = {NULL, buf, cap, value_len};
    return cache_get(c, &k, &out, true);
}
