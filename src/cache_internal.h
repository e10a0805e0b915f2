/* SPDX-License-Identifier: MIT */
/* twheel cache internals, shared by src/cache.c and src/cache_map.c.
 *
 * Layout: a cache is an array of shards; a key's shard is the top bits of
 * its 64-bit SipHash-1-3, its bucket the low bits. A shard holds, under its
 * lock: a chained hash table, an LRU list (only maintained when the cache has
 * a limit), a core wheel with 1 ms ticks, and the entries' timers in it.
 *
 * Invariant (what makes the races of docs/contracts.md impossible): an entry is
 * in its shard's table  <=>  its timer is pending on its shard's wheel, and
 * the timer's deadline is the entry's expiry tick. The three change together,
 * under the shard lock, and nowhere else.
 */
#ifndef TWHEEL_CACHE_INTERNAL_H
#define TWHEEL_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hash.h"
#include "twheel/cache.h"
#include "twheel/wheel.h"

#define CACHE_NS_PER_TICK UINT64_C(1000000) /* one wheel tick = 1 ms */
#define CACHE_EXPIRE_BATCH 64   /* entries expired per hold of a shard lock */
#define CACHE_MIN_BUCKETS 16u
#define CACHE_MAX_SHARDS 4096u

/* One key: 48 bytes on LP64 before the key bytes (value pointer included),
 * allocated as one block with the key (and in copy mode the value) bytes.
 * A cache with an LRU limit puts a struct cache_lru just before each entry
 * in the same block (72 bytes then); a cache without one does not pay for it. */
struct cache_entry {
    struct tw_node timer;        /* pending on the shard's wheel; deadline = expiry tick */
    struct cache_entry *hnext;   /* next in the bucket's chain */
    uint32_t hash;               /* low 32 bits of the key's hash */
    uint32_t klen;
    union {
        void *ptr;  /* pointer mode: the value */
        size_t len; /* copy mode: bytes after the key */
    } value;
    unsigned char key[];         /* klen bytes, then the value bytes in copy mode */
};

/* LRU links, in front of the entry (limit > 0 only). */
struct cache_lru {
    struct cache_entry *prev;    /* toward the most recently used */
    struct cache_entry *next;    /* toward the least recently used */
    uint64_t stamp;              /* last set or hit: clock ns, or a counter (manual clock) */
};

static inline struct cache_lru *cache_lru_of(const struct cache_entry *e)
{
    return (struct cache_lru *)(void *)((char *)(uintptr_t)e - sizeof(struct cache_lru));
}

/* A caller waiting on another caller's load of the same key (single flight).
 * Lives on the waiter's stack; the leader fills it in and sets done. */
struct cache_waiter {
    struct cache_waiter *next;
    void **value;       /* pointer mode output */
    void *buf;          /* copy mode output */
    size_t cap;
    size_t *vlen;
    int err;
    bool done;
};

/* A load in progress; lives on the leader's stack, listed in its shard while
 * the loader runs. Guarded by the shard's flight_mu. */
struct cache_flight {
    struct cache_flight *next;
    const void *key; /* the leader's key: valid while the flight is listed */
    size_t klen;
    uint32_t hash;
    struct cache_waiter *waiters;
};

struct cache_shard {
    /* Guards everything below down to `wheel`, entries and their timers. */
    union {
        pthread_mutex_t mu;
        pthread_rwlock_t rw;
    } lock;
    struct cache_entry **buckets; /* mask + 1 chains */
    size_t mask;
    size_t count;                 /* entries in the table */
    struct cache_entry *lru_head; /* most recently used (limit > 0 only) */
    struct cache_entry *lru_tail; /* least recently used */
    uint64_t rng;                 /* jitter state (xorshift64*) */
    /* Read without the lock by eviction to pick a shard: lru_tail's stamp, or
     * UINT64_MAX when the LRU list is empty. Written under the lock. */
    _Atomic uint64_t oldest;
    /* Counters: relaxed atomics, since readers under a shared rwlock bump
     * them concurrently. */
    _Atomic uint64_t hits, misses, evictions, expirations;
    /* Single flight: flights and the condition waiters sleep on. flight_mu is
     * taken before the shard lock, never after. */
    pthread_mutex_t flight_mu;
    pthread_cond_t flight_cv;
    struct cache_flight *flights;
    struct tw_wheel wheel;
};

struct tw_cache {
    struct cache_shard *shards; /* nshards of them, 64-byte aligned */
    void *shards_block;         /* what was allocated for them */
    size_t shards_bytes;
    unsigned nshards;
    unsigned shard_shift;       /* 64 - log2(nshards), 64 when one shard */
    uint64_t seed[2];           /* SipHash key, random per instance */

    /* Configuration, fixed after creation. */
    int64_t default_ttl_ms;
    size_t limit;
    double jitter;
    bool rwlock;
    bool copy_values;
    bool manual;
    tw_cache_free_fn *free_value;
    tw_cache_retain_fn *retain_value;
    void *value_ctx;
    tw_cache_log_fn *log;
    void *log_ctx;
    uint64_t log_interval;      /* ticks */
    char *name;
    size_t name_bytes;
    struct tw_allocator alloc;

    /* Clock. */
    uint64_t epoch_ns;          /* CLOCK_MONOTONIC at creation (real clock) */
    _Atomic uint64_t manual_now; /* ticks (manual clock) */
    _Atomic uint64_t seq;       /* LRU stamps under the manual clock */

    _Atomic uint64_t count;     /* entries in all shards */
    pthread_mutex_t evict_mu;   /* one evictor at a time; taken before shard locks */

    /* Expiry thread. thread_mu guards stop, the log fields and the wait. */
    pthread_mutex_t thread_mu;
    pthread_cond_t thread_cv;   /* on CLOCK_MONOTONIC */
    pthread_t thread;
    bool thread_started;
    bool stop;
    /* The tick the thread sleeps until, 0 while it is scanning; a set that
     * arms an earlier deadline wakes it. */
    _Atomic uint64_t sleep_until;
    /* The earliest deadline armed since the thread's last scan began. */
    _Atomic uint64_t earliest;
    uint64_t log_due;           /* next log tick */
    uint64_t log_hits, log_misses; /* totals at the previous log line */
    uint64_t log_evictions, log_expirations; /* ... likewise */
    uint64_t log_at;            /* tick of the previous line (creation at first) */
};

/* ---- src/cache_map.c -------------------------------------------------- */


/* Find key in s (hash is the full 64-bit hash). NULL if absent. */
struct cache_entry *tw_cache_map_find_(const struct cache_shard *s, const void *key,
                                       size_t klen, uint64_t hash);
/* Link e into the table (e->hash set; the key is absent). May grow the table;
 * a failed growth is ignored (chains get longer). */
void tw_cache_map_insert_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e);
/* Unlink e (present) from the table. May shrink it. */
void tw_cache_map_remove_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e);
/* Replace old (present) by e with the same key, in place in its chain. */
void tw_cache_map_replace_(struct cache_shard *s, struct cache_entry *old,
                           struct cache_entry *e);

/* LRU list; each keeps s->oldest up to date. */
void tw_cache_lru_push_(struct cache_shard *s, struct cache_entry *e);
void tw_cache_lru_unlink_(struct cache_shard *s, struct cache_entry *e);
void tw_cache_lru_touch_(struct cache_shard *s, struct cache_entry *e);

/* Allocator hook wrappers. */
void *tw_cache_mem_alloc_(const struct tw_allocator *a, size_t size);
void tw_cache_mem_free_(const struct tw_allocator *a, void *p, size_t size);

#endif /* TWHEEL_CACHE_INTERNAL_H */
