/* SPDX-License-Identifier: MIT */
/* twheel cache: the per-shard map. Keys hashed by tw_hash_mum (or
 * SipHash-1-3 on request; hash.h, cache_hash) under a random per-instance key,
 * a table of buckets of 8 tagged links (see cache/internal.h) that doubles
 * above half a key per slot and halves below 1/16 (the LRU list is in
 * cache/lru.c). Every function here runs under the shard lock, except
 * tw_cache_map_find_rcu_ (readers, no lock). */
#include <stdlib.h>
#include <string.h>

#include "common/bigmem.h"
#include "cache/internal.h"

/* ---- hash table -------------------------------------------------------- */

#define RLX memory_order_relaxed
#define ACQ memory_order_acquire
#define REL memory_order_release

/* Bucket arrays of CACHE_TABLE_HUGE bytes or more (with the default
 * allocator) are 2 MB aligned mappings, advised huge: every read starts with
 * a random bucket, and in 4 KB pages those are TLB misses that even the
 * batched calls' prefetches stall on (a prefetch that misses the TLB walks
 * the page table first). A table of 1-2 MB is rounded up to 2 MB (one huge
 * page: at most 1 MB more per shard, only while its table is that size), and
 * a growth into it takes the 2^18 links the page holds (tw_cache_map_insert_),
 * so a shard of 32,769 to 131,072 keys has a 2 MB table; from 2 MB on a
 * table is rounded only to a page (the tail past the last whole 2 MB stays
 * small). Where a shard holds 32,769 to 65,536 keys that is memory traded
 * for speed: the design comment of cache/cache.c gives the trade. */
#define CACHE_TABLE_HUGE ((size_t)1 << 20)

static size_t cache_table_bytes(const struct tw_cache *c, size_t n)
{
    size_t b = sizeof(struct cache_table) + n * sizeof(void *);
    if (!c->alloc.fn && b >= CACHE_TABLE_HUGE && b < TW_BIG_ALIGN)
        b = TW_BIG_ALIGN;
    return b;
}

struct cache_table *tw_cache_table_new_(struct tw_cache *c, size_t n)
{
    if (n > (SIZE_MAX - sizeof(struct cache_table) - TW_BIG_ALIGN) / sizeof(void *))
        return NULL;
    size_t bytes = cache_table_bytes(c, n);
    struct cache_table *t = !c->alloc.fn && bytes >= CACHE_TABLE_HUGE
                                ? tw_big_alloc_(bytes)
                                : tw_mem_alloc_(&c->alloc, bytes);
    if (!t)
        return NULL;
    t->mask = n - 1;
    t->free_next = NULL;
    for (size_t i = 0; i < n; i++)
        atomic_init(&t->b[i], 0);
    return t;
}

void tw_cache_table_free_(struct tw_cache *c, struct cache_table *t)
{
    size_t bytes = cache_table_bytes(c, t->mask + 1);
    if (!c->alloc.fn && bytes >= CACHE_TABLE_HUGE)
        tw_big_free_(t, bytes);
    else
        tw_mem_free_(&c->alloc, t, bytes);
}

struct cache_entry *tw_cache_map_find_(const struct cache_shard *s, const void *key, size_t key_len,
                                       uint64_t hash)
{
    uint32_t h = (uint32_t)hash;
    uintptr_t tag = cache_tag_of(hash);
    const struct cache_table *t = atomic_load_explicit(&s->table, RLX);
    const _Atomic uintptr_t *bk = &t->b[cache_bucket_of(t, hash)];
    unsigned j0 = cache_slot_start(tag);
    for (unsigned k = 0; k < CACHE_SLOTS; k++) {
        unsigned j = (j0 + k) & (CACHE_SLOTS - 1);
        for (uintptr_t l = atomic_load_explicit(&bk[j], RLX); l;) {
            struct cache_entry *e = cache_link_entry(l);
            if (cache_link_may_match(l, tag) && cache_key_eq(e, key, key_len, h))
                return e;
            if (!cache_link_may_continue(l))
                break;
            l = atomic_load_explicit(&e->hnext, RLX);
        }
    }
    return NULL;
}

struct cache_entry *tw_cache_map_find_rcu_(const struct cache_shard *s, const void *key,
                                           size_t key_len, uint64_t hash, bool *torn)
{
    return tw_cache_map_find_rcu_inline_(s, key, key_len, hash, torn);
}

/* Link e (e->hash set; tag its link tag) into table t: into a free slot of
 * its bucket, else in front of one slot's chain. The last store, with
 * `mo`, publishes e (release when t is the live table). */
static void cache_map_place(struct cache_table *t, struct cache_entry *e, uintptr_t tag,
                            memory_order mo)
{
    _Atomic uintptr_t *bk = &t->b[cache_bucket_of(t, e->hash)];
    unsigned j0 = cache_slot_start(tag);
    for (unsigned k = 0; k < CACHE_SLOTS; k++) {
        unsigned j = (j0 + k) & (CACHE_SLOTS - 1);
        if (!atomic_load_explicit(&bk[j], RLX)) {
            atomic_store_explicit(&e->hnext, 0, REL);
            atomic_store_explicit(&bk[j], cache_link(e, tag, 0), mo);
            return;
        }
    }
    _Atomic uintptr_t *head = &bk[j0];
    uintptr_t next = atomic_load_explicit(head, RLX);
    atomic_store_explicit(&e->hnext, next, REL);
    atomic_store_explicit(head, cache_link(e, tag, next), mo);
}

/* Rehash into `n` slots (a power of two), with seq odd meanwhile so that
 * readers distrust their misses. On allocation failure the table stays as
 * it is: still correct, only slower. The old array goes to g (readers may
 * still be reading it). Each entry keeps the tag of the link that led to it. */
static void cache_map_resize(struct tw_cache *c, struct cache_shard *s, size_t n,
                             struct cache_garbage *g)
{
    struct cache_table *nt = tw_cache_table_new_(c, n);
    if (!nt)
        return;
    struct cache_table *ot = atomic_load_explicit(&s->table, RLX);
    uint32_t seq = atomic_load_explicit(&s->seq, RLX);
    atomic_store_explicit(&s->seq, seq + 1, RLX);
    atomic_thread_fence(REL);
    for (size_t i = 0; i <= ot->mask; i++) {
        uintptr_t l = atomic_load_explicit(&ot->b[i], RLX);
        while (l) {
            struct cache_entry *e = cache_link_entry(l);
            uintptr_t next = atomic_load_explicit(&e->hnext, RLX);
            cache_map_place(nt, e, cache_link_tag(l), RLX);
            l = next;
        }
    }
    atomic_store_explicit(&s->table, nt, REL);
    atomic_store_explicit(&s->tmask, nt->mask, RLX);
    atomic_store_explicit(&s->seq, seq + 2, REL);
    ot->free_next = g->tables;
    g->tables = ot;
    g->n++;
}

void tw_cache_map_insert_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                          uint64_t hash, struct cache_garbage *g)
{
    struct cache_table *t = atomic_load_explicit(&s->table, RLX);
    cache_map_place(t, e, cache_tag_of(hash), REL); /* publishes the entry's fields */
    s->count++;
    size_t n = t->mask + 1;
    /* grow at half a key per slot (4 per bucket of 8): few buckets overflow */
    if (s->count > n / 2 && n <= (SIZE_MAX / sizeof(void *)) / 8 && n < (UINT64_C(1) << 31)) {
        /* A table that would be rounded up to a 2 MB page anyway gets the
         * slots that page holds (fewer keys per bucket at no cost in memory). */
        size_t nn = n * 2, b = sizeof *t + nn * sizeof(void *);
        if (!c->alloc.fn && b >= CACHE_TABLE_HUGE && b < TW_BIG_ALIGN)
            nn *= 2;
        cache_map_resize(c, s, nn, g);
    }
}

/* The link that points at e (present); *cur = its value. */
static _Atomic uintptr_t *cache_map_link(struct cache_shard *s, const struct cache_entry *e,
                                         uintptr_t *cur)
{
    struct cache_table *t = atomic_load_explicit(&s->table, RLX);
    _Atomic uintptr_t *bk = &t->b[cache_bucket_of(t, e->hash)];
    for (unsigned j = 0; j < CACHE_SLOTS; j++) {
        _Atomic uintptr_t *link = &bk[j];
        uintptr_t l;
        while ((l = atomic_load_explicit(link, RLX)) != 0) {
            if (cache_link_entry(l) == e) {
                *cur = l;
                return link;
            }
            link = &cache_link_entry(l)->hnext;
        }
    }
    return NULL; /* not reached: e is present */
}

void tw_cache_map_remove_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                          bool may_shrink, struct cache_garbage *g)
{
    uintptr_t cur;
    _Atomic uintptr_t *link = cache_map_link(s, e, &cur);
    atomic_store_explicit(link, atomic_load_explicit(&e->hnext, RLX), REL);
    s->count--;
    size_t n = atomic_load_explicit(&s->table, RLX)->mask + 1;
    if (may_shrink && n > CACHE_MIN_BUCKETS && s->count < n / 16)
        cache_map_resize(c, s, n / 2, g);
}

void tw_cache_map_replace_(struct cache_shard *s, struct cache_entry *old,
                           struct cache_entry *e, uint64_t hash)
{
    uintptr_t cur;
    _Atomic uintptr_t *link = cache_map_link(s, old, &cur);
    uintptr_t next = atomic_load_explicit(&old->hnext, RLX);
    atomic_store_explicit(&e->hnext, next, RLX);
    atomic_store_explicit(link, cache_link(e, cache_tag_of(hash), next), REL);
}
