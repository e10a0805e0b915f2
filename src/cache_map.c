/* SPDX-License-Identifier: MIT */
/* twheel cache: the per-shard map. Keys hashed by SipHash-1-3 (hash.h) under
 * a random per-instance key, a chained hash table that doubles at load 1 and
 * halves below 1/8, and an intrusive LRU list. Every function here runs under
 * the shard lock. */
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"

/* ---- allocation -------------------------------------------------------- */

void *tw_cache_mem_alloc_(const struct tw_allocator *a, size_t size)
{
    if (a->fn)
        return a->fn(a->ctx, NULL, 0, size);
    return malloc(size);
}

void tw_cache_mem_free_(const struct tw_allocator *a, void *p, size_t size)
{
    if (!p)
        return;
    if (a->fn)
        a->fn(a->ctx, p, size, 0);
    else
        free(p);
}

/* ---- hash table -------------------------------------------------------- */

struct cache_entry *tw_cache_map_find_(const struct cache_shard *s, const void *key,
                                       size_t klen, uint64_t hash)
{
    uint32_t h = (uint32_t)hash;
    for (struct cache_entry *e = s->buckets[h & s->mask]; e; e = e->hnext)
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
            return e;
    return NULL;
}

/* Rehash into `n` buckets (a power of two). On allocation failure the table
 * stays as it is: still correct, only slower. */
static void cache_map_resize(struct tw_cache *c, struct cache_shard *s, size_t n)
{
    struct cache_entry **nb = tw_cache_mem_alloc_(&c->alloc, n * sizeof *nb);
    if (!nb)
        return;
    memset(nb, 0, n * sizeof *nb);
    size_t old_n = s->mask + 1;
    for (size_t i = 0; i < old_n; i++) {
        struct cache_entry *e = s->buckets[i];
        while (e) {
            struct cache_entry *next = e->hnext;
            struct cache_entry **head = &nb[e->hash & (n - 1)];
            e->hnext = *head;
            *head = e;
            e = next;
        }
    }
    tw_cache_mem_free_(&c->alloc, s->buckets, old_n * sizeof *s->buckets);
    s->buckets = nb;
    s->mask = n - 1;
}

void tw_cache_map_insert_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e)
{
    struct cache_entry **head = &s->buckets[e->hash & s->mask];
    e->hnext = *head;
    *head = e;
    s->count++;
    size_t n = s->mask + 1;
    if (s->count > n && n <= (SIZE_MAX / sizeof(void *)) / 2 && n < (UINT64_C(1) << 32))
        cache_map_resize(c, s, n * 2);
}

void tw_cache_map_remove_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e)
{
    struct cache_entry **link = &s->buckets[e->hash & s->mask];
    while (*link != e)
        link = &(*link)->hnext;
    *link = e->hnext;
    e->hnext = NULL;
    s->count--;
    size_t n = s->mask + 1;
    if (n > CACHE_MIN_BUCKETS && s->count < n / 8)
        cache_map_resize(c, s, n / 2);
}

void tw_cache_map_replace_(struct cache_shard *s, struct cache_entry *old,
                           struct cache_entry *e)
{
    struct cache_entry **link = &s->buckets[old->hash & s->mask];
    while (*link != old)
        link = &(*link)->hnext;
    e->hnext = old->hnext;
    *link = e;
    old->hnext = NULL;
}

/* ---- LRU list: head = most recently used, tail = least ------------------ */

static inline void cache_lru_oldest(struct cache_shard *s)
{
    atomic_store_explicit(&s->oldest, s->lru_tail ? cache_lru_of(s->lru_tail)->stamp : UINT64_MAX,
                          memory_order_relaxed);
}

void tw_cache_lru_push_(struct cache_shard *s, struct cache_entry *e)
{
    struct cache_lru *l = cache_lru_of(e);
    l->prev = NULL;
    l->next = s->lru_head;
    if (s->lru_head)
        cache_lru_of(s->lru_head)->prev = e;
    else
        s->lru_tail = e;
    s->lru_head = e;
    cache_lru_oldest(s);
}

void tw_cache_lru_unlink_(struct cache_shard *s, struct cache_entry *e)
{
    struct cache_lru *l = cache_lru_of(e);
    if (l->prev)
        cache_lru_of(l->prev)->next = l->next;
    else
        s->lru_head = l->next;
    if (l->next)
        cache_lru_of(l->next)->prev = l->prev;
    else
        s->lru_tail = l->prev;
    l->prev = l->next = NULL;
    cache_lru_oldest(s);
}

void tw_cache_lru_touch_(struct cache_shard *s, struct cache_entry *e)
{
    if (s->lru_head == e) {
        if (s->lru_tail == e)
            cache_lru_oldest(s);
        return;
    }
    tw_cache_lru_unlink_(s, e);
    tw_cache_lru_push_(s, e);
}
