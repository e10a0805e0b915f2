/* SPDX-License-Identifier: MIT */
/* twheel cache: the LRU of a cache with a limit. Each shard keeps its
 * entries in a list ordered by the stamp each was placed with (head: the
 * most recent); a hit only raises the entry's stamp, without a lock, and
 * eviction moves a tail whose stamp has passed to where it belongs before
 * taking the tail (tw_cache_lru_settle_). Eviction takes the oldest of the
 * shards' tails, one shard lock at a time under the cache's evict_mu.
 * So eviction order is exact by last use (up to the 1 ms tick with the real
 * clock, exact under the manual clock's counter), except that a move walks
 * at most CACHE_LRU_WALK entries from the head and an eviction makes at
 * most CACHE_LRU_SETTLE_MOVES moves (twheel/cache.h states both). Every
 * list function runs under the shard lock. */
#include <pthread.h>

#include "cache/internal.h"

/* ---- LRU list: head = most recently used (largest pos), tail = least ---- */

static inline void cache_lru_oldest(struct cache_shard *s)
{
    atomic_store_explicit(&s->oldest, s->lru_tail ? cache_lru_of(s->lru_tail)->pos : UINT64_MAX,
                          memory_order_relaxed);
}

/* Link e before `at` (NULL: at the tail). */
static void cache_lru_link_before(struct cache_shard *s, struct cache_entry *e,
                                  struct cache_entry *at)
{
    struct cache_lru *l = cache_lru_of(e);
    struct cache_entry *prev = at ? cache_lru_of(at)->prev : s->lru_tail;
    l->prev = prev;
    l->next = at;
    if (prev)
        cache_lru_of(prev)->next = e;
    else
        s->lru_head = e;
    if (at)
        cache_lru_of(at)->prev = e;
    else
        s->lru_tail = e;
}

void tw_cache_lru_push_(struct cache_shard *s, struct cache_entry *e, uint64_t stamp)
{
    struct cache_lru *l = cache_lru_of(e);
    l->pos = stamp;
    atomic_store_explicit(&l->stamp, stamp, memory_order_relaxed);
    cache_lru_link_before(s, e, s->lru_head);
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

/* Readers only raise an entry's stamp; the list is ordered by pos, and
 * stamp >= pos. So a tail whose stamp equals its pos is the least recently
 * used key of the shard; a tail read since it was placed is moved to where
 * its stamp belongs (walking from the head, at most CACHE_LRU_WALK entries:
 * beyond that it goes there, nearer the head than it belongs, and the keys
 * used after it that lie behind it are evicted first). Each read causes at
 * most one such move; at most CACHE_LRU_SETTLE_MOVES moves per call, so
 * readers raising stamps meanwhile cannot keep an evictor here (the tail
 * left then may be a key read since it was placed). */
void tw_cache_lru_settle_(struct cache_shard *s)
{
    struct cache_entry *t;
    unsigned moves = 0;
    while ((t = s->lru_tail) != NULL && moves++ < CACHE_LRU_SETTLE_MOVES) {
        struct cache_lru *l = cache_lru_of(t);
        uint64_t st = atomic_load_explicit(&l->stamp, memory_order_relaxed);
        if (st <= l->pos)
            break;
        tw_cache_lru_unlink_(s, t);
        l->pos = st;
        struct cache_entry *at = s->lru_head;
        unsigned walk = 0;
        while (at && cache_lru_of(at)->pos > st && walk++ < CACHE_LRU_WALK)
            at = cache_lru_of(at)->next;
        cache_lru_link_before(s, t, at);
    }
    cache_lru_oldest(s);
}

/* ---- eviction ---------------------------------------------------------- */

/* The shard with the smallest `oldest` (a lower bound of its least recent
 * use); NULL when all are empty. */
static struct cache_shard *cache_oldest_shard(struct tw_cache *c, uint64_t *oldest)
{
    struct cache_shard *best = NULL;
    uint64_t o = UINT64_MAX;
    for (unsigned i = 0; i < c->nshards; i++) {
        uint64_t x = atomic_load_explicit(&c->shards[i].oldest, memory_order_relaxed);
        if (x < o) {
            o = x;
            best = &c->shards[i];
        }
    }
    *oldest = o;
    return best;
}

/* While the cache holds more than `limit` entries, evict the least recently
 * used: settle the tail of the shard whose tail looks oldest (reads may have
 * made it younger); if another shard's tail is now older, look there. */
void tw_cache_evict_(struct tw_cache *c)
{
    /* Victims are freed after evict_mu is released: free_value may call the
     * cache (a set evicts in turn) and must never run under a cache lock. */
    struct cache_garbage g = {0};
    bool advance = false;
    unsigned repicks = 0;
    pthread_mutex_lock(&c->evict_mu);
    while (atomic_load_explicit(&c->count, memory_order_relaxed) > c->limit) {
        uint64_t oldest;
        struct cache_shard *best = cache_oldest_shard(c, &oldest);
        if (!best)
            break;
        cache_lock(c, best);
        tw_cache_lru_settle_(best);
        struct cache_entry *e = best->lru_tail;
        if (e && repicks < c->nshards) {
            uint64_t other;
            cache_oldest_shard(c, &other);
            if (other < cache_lru_of(e)->pos) {
                repicks++;
                cache_unlock(c, best);
                continue;
            }
        }
        if (e) {
            cache_unlink(c, best, e, &g);
            cache_bump(&best->evictions, 1);
            advance |= tw_cache_retire_locked_(c, best, &g);
        }
        cache_unlock(c, best);
    }
    pthread_mutex_unlock(&c->evict_mu);
    cache_after_write(c, &g, advance);
}
