/* SPDX-License-Identifier: MIT */
/* twheel cache: the batched calls, tw_cache_get_many and
 * tw_cache_set_many: a software pipeline of prefetches over the keys, and
 * set_many's runs of keys stored per shard under one lock hold. */
#include <string.h>

#include "cache/internal.h"

/* Batched calls hide the memory latency of many keys with a software
 * pipeline of D = CACHE_STAGE keys per stage: while key i is looked up, the
 * first entry of key i + D (its bucket is in cache by then), the bucket of
 * key i + 2D (hashed now; its key bytes were fetched a stage ago) and the
 * key bytes of key i + 3D are being fetched (the entry is the one whose
 * tag matches in the bucket's line). The prefetches read the shards' tables
 * and buckets, so they run inside a read section (a table may be replaced
 * and freed meanwhile). A key's shard lock (set) or read section (get) is
 * taken per key or per batch as for single calls. */
#ifndef CACHE_STAGE
#define CACHE_STAGE 4
#endif
#define CACHE_RING (4 * CACHE_STAGE) /* > 2 * CACHE_STAGE, a power of two */
/* set_many reads the clock once per this many keys (~30 ns saved on each
 * other key): a key's TTL then counts from a reading at most a few
 * microseconds older than its own store, so it expires no later than a
 * single set would make it, and earlier by far less than the 1 ms tick
 * (or the default 5% jitter). */
#define CACHE_SET_CLOCK 16

static inline bool cache_key_ok(const void *const *keys, const size_t *key_lens, size_t j)
{
    return (keys[j] || !key_lens[j]) && key_lens[j] <= UINT32_MAX;
}

static inline void cache_prefetch_bucket(struct tw_cache *c, uint64_t hash)
{
    struct cache_shard *s = cache_shard_of(c, hash);
    struct cache_table *t = atomic_load_explicit(&s->table, memory_order_acquire);
    __builtin_prefetch(&t->b[cache_bucket_of(t, hash)]);
}

/* The bucket is in cache by now: prefetch the entry whose tag matches (the
 * first two that may, without tags). */
static inline void cache_prefetch_entry(struct tw_cache *c, uint64_t hash)
{
    struct cache_shard *s = cache_shard_of(c, hash);
    struct cache_table *t = atomic_load_explicit(&s->table, memory_order_acquire);
    const _Atomic uintptr_t *bk = &t->b[cache_bucket_of(t, hash)];
    uintptr_t tag = cache_tag_of(hash);
    unsigned sent = 0, j0 = cache_slot_start(tag);
    for (unsigned k = 0; k < CACHE_SLOTS && sent < 2; k++) {
        uintptr_t l = atomic_load_explicit(&bk[(j0 + k) & (CACHE_SLOTS - 1)], memory_order_relaxed);
        if (l && cache_link_may_match(l, tag)) {
            struct cache_entry *e = cache_link_entry(l);
            __builtin_prefetch(e);
            __builtin_prefetch((char *)e + 63);
            sent++;
        }
    }
}

/* One step of the pipeline before key i is worked on: hashes land in ring.
 * Reads the shards' tables: inside a read section only. */
static inline void cache_pipeline(struct tw_cache *c, size_t n, const void *const *keys,
                                  const size_t *key_lens, size_t i, uint64_t *ring)
{
    size_t j = i + 3 * CACHE_STAGE;
    if (j < n && keys[j])
        __builtin_prefetch(keys[j]);
    j = i + 2 * CACHE_STAGE;
    if (j < n && cache_key_ok(keys, key_lens, j)) {
        ring[j % CACHE_RING] = cache_hash(c, keys[j] ? keys[j] : "", key_lens[j]);
        cache_prefetch_bucket(c, ring[j % CACHE_RING]);
    }
    j = i + CACHE_STAGE;
    if (j < n && cache_key_ok(keys, key_lens, j))
        cache_prefetch_entry(c, ring[j % CACHE_RING]);
}

/* Fill the pipeline: the first 2D keys hashed, their buckets and the first
 * D keys' entries on their way, the next keys' bytes too (in a read
 * section). */
static void cache_pipeline_start(struct tw_cache *c, size_t n, const void *const *keys,
                                 const size_t *key_lens, uint64_t *ring)
{
    for (size_t j = 0; j < n && j < 3 * CACHE_STAGE; j++)
        if (keys[j])
            __builtin_prefetch(keys[j]);
    for (size_t j = 0; j < n && j < 2 * CACHE_STAGE; j++) {
        if (cache_key_ok(keys, key_lens, j)) {
            ring[j % CACHE_RING] = cache_hash(c, keys[j] ? keys[j] : "", key_lens[j]);
            cache_prefetch_bucket(c, ring[j % CACHE_RING]);
        }
    }
    for (size_t j = 0; j < n && j < CACHE_STAGE; j++)
        if (cache_key_ok(keys, key_lens, j))
            cache_prefetch_entry(c, ring[j % CACHE_RING]);
}

static int cache_check_keys(const struct tw_cache *c, size_t n, const void *const *keys,
                            const size_t *key_lens)
{
    if (!c || (n && (!keys || !key_lens)))
        return TW_EINVAL;
    return 0;
}

/* Hits and misses a batch counts locally, added to its stripe once. */
struct cache_tally {
    uint64_t hits, misses;
};

/* Look k up and output it (caller inside a read section). Counts the hit or,
 * if count_miss, the miss, in *tl. */
static int cache_get_in(struct tw_cache *c, const struct cache_key *k, const struct cache_out *out,
                        bool count_miss, struct cache_tally *tl)
{
    struct cache_shard *s = cache_shard_of(c, k->hash);
    int rc = tw_cache_get_found_(c, cache_find_read(c, s, k), out);
    if (rc == 0)
        tl->hits++;
    else if (count_miss)
        tl->misses++;
    return rc;
}

int tw_cache_get_many(struct tw_cache *c, size_t n, const void *const *keys, const size_t *key_lens,
                      void **values, int *results)
{
    if (cache_check_keys(c, n, keys, key_lens) || c->copy_values || (n && !values))
        return TW_EINVAL;
    uint64_t ring[CACHE_RING] = {0};
    int hits = 0;
    struct cache_tally tl = {0, 0};
    struct cache_rd rd;
    tw_cache_rd_enter_(c, &rd);
    cache_pipeline_start(c, n, keys, key_lens, ring);
    for (size_t i = 0; i < n; i++) {
        cache_pipeline(c, n, keys, key_lens, i, ring);
        const void *kp = keys[i];
        int rc = cache_check_key(c, &kp, key_lens[i]);
        if (rc == 0) {
            struct cache_key k = {kp, key_lens[i], ring[i % CACHE_RING]};
            struct cache_out out = {&values[i], NULL, 0, NULL};
            rc = cache_get_in(c, &k, &out, true, &tl);
        }
        if (rc)
            values[i] = NULL;
        else
            hits++;
        if (results)
            results[i] = rc;
    }
    if (tl.hits)
        atomic_fetch_add_explicit(&rd.st->hits, tl.hits, memory_order_relaxed);
    if (tl.misses)
        atomic_fetch_add_explicit(&rd.st->misses, tl.misses, memory_order_relaxed);
    tw_cache_rd_exit_(&rd);
    return hits;
}

/* set_many on a cache without a limit: the batch is taken in chunks of up
 * to CACHE_SET_CHUNK keys. For a chunk, inside a short read section (so that
 * no bucket array is freed under the prefetches): every key is hashed and
 * its bucket prefetched, and the entry of the key hashed 8 keys before (its
 * bucket has arrived by then: the entry its tag names); the keys are
 * ordered by shard (stably: a key's repeats keep their order, so the later
 * value wins), the clock is read once, and each run of keys of one shard is
 * stored under one hold of the shard lock, with one retire, one wake of the
 * clock service (with the run's earliest deadline) and one release of
 * garbage per run. A cache with a limit stores key by key in batch order
 * (cache_set_many_ordered), so that LRU order and eviction are exactly those
 * of n single sets. */
#define CACHE_SET_CHUNK 64

/* The jittered TTL of a chunk, precomputed: a key's TTL is lo + span * u
 * with u uniform in [0, 1) from the shard's xorshift64* (integer only). */
struct cache_ttl {
    uint64_t lo, span;
};

static struct cache_ttl cache_ttl_of(const struct tw_cache *c, int64_t ttl_ms)
{
    const uint64_t max_ns = (uint64_t)TW_CACHE_TTL_MAX_MS * CACHE_NS_PER_TICK;
    struct cache_ttl t = {0, 0};
    if (c->jitter > 0) {
        /* as cache_deadline: ttl * f, f uniform in [1 - jitter, 1 + jitter) */
        double ttl = (double)ttl_ms * (double)CACHE_NS_PER_TICK;
        double lo = ttl * (1.0 - c->jitter), span = ttl * 2.0 * c->jitter;
        t.lo = lo >= (double)max_ns ? max_ns : (uint64_t)lo;
        t.span = span >= (double)max_ns ? max_ns : (uint64_t)span;
    } else {
        t.lo = (uint64_t)ttl_ms > max_ns / CACHE_NS_PER_TICK ? max_ns
                                                             : (uint64_t)ttl_ms * CACHE_NS_PER_TICK;
    }
    return t;
}

/* The expiry tick of a key stored at now_ns with t (cache_deadline's rules:
 * at least the next tick, capped at the documented maximum TTL). */
static inline uint64_t cache_deadline_fast(struct cache_shard *s, const struct cache_ttl *t,
                                           uint64_t now_ns)
{
    const uint64_t max_ns = (uint64_t)TW_CACHE_TTL_MAX_MS * CACHE_NS_PER_TICK;
    uint64_t ttl_ns = t->lo;
    if (t->span) {
        uint64_t x = s->rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s->rng = x;
        uint64_t u = x * UINT64_C(0x2545f4914f6cdd1d);
        /* span * u / 2^64 from 32-bit halves (no 128-bit type in C11):
         * span <= the TTL cap < 2^62, so no product overflows, and the
         * dropped low terms make it at most 2 ns short. */
        uint64_t sh = t->span >> 32, sl = t->span & 0xffffffffu;
        uint64_t uh = u >> 32, ul = u & 0xffffffffu;
        ttl_ns += sh * uh + ((sh * ul) >> 32) + ((sl * uh) >> 32);
        if (ttl_ns > max_ns)
            ttl_ns = max_ns;
    }
    if (ttl_ns == 0)
        ttl_ns = 1;
    uint64_t at = now_ns > UINT64_MAX - ttl_ns ? UINT64_MAX : now_ns + ttl_ns;
    uint64_t tick = tw_ticks_up_(at, CACHE_NS_PER_TICK);
    uint64_t now_tick = now_ns / CACHE_NS_PER_TICK;
    return tick > now_tick ? tick : now_tick + 1;
}

static int cache_set_many_ordered(struct tw_cache *c, size_t n, const void *const *keys,
                                  const size_t *key_lens, void *const *values, int *results)
{
    uint64_t ring[CACHE_RING] = {0};
    int stored = 0;
    uint64_t now_ns = 0;
    struct cache_rd rd;
    tw_cache_rd_enter_(c, &rd);
    cache_pipeline_start(c, n, keys, key_lens, ring);
    tw_cache_rd_exit_(&rd);
    for (size_t i = 0; i < n; i++) {
        tw_cache_rd_enter_(c, &rd);
        cache_pipeline(c, n, keys, key_lens, i, ring);
        tw_cache_rd_exit_(&rd);
        if (i % CACHE_SET_CLOCK == 0)
            now_ns = cache_now_ns(c);
        const void *kp = keys[i];
        int rc = cache_check_key(c, &kp, key_lens[i]);
        if (rc == 0) {
            struct cache_key k = {kp, key_lens[i], ring[i % CACHE_RING]};
            struct cache_val v = {values[i], NULL, 0};
            rc = tw_cache_set_at_(c, &k, &v, c->default_ttl_ms, now_ns);
        }
        if (rc == 0)
            stored++;
        if (results)
            results[i] = rc;
    }
    return stored;
}

/* ord = key (shard << 8 | position, positions increasing) ordered by
 * shard, stably: a counting sort when the shards are few (the default: 4
 * per CPU), else an insertion sort. */
static void cache_order_by_shard(const struct tw_cache *c, const uint32_t *key, uint32_t *ord,
                                 size_t m)
{
    if (c->nshards <= 256) {
        unsigned char at[257];
        memset(at, 0, c->nshards + 1);
        for (size_t q = 0; q < m; q++)
            at[(key[q] >> 8) + 1]++;
        for (unsigned i = 1; i <= c->nshards; i++)
            at[i] = (unsigned char)(at[i] + at[i - 1]);
        for (size_t q = 0; q < m; q++)
            ord[at[key[q] >> 8]++] = key[q];
        return;
    }
    for (size_t q = 0; q < m; q++) {
        size_t p = q;
        while (p > 0 && ord[p - 1] > key[q]) {
            ord[p] = ord[p - 1];
            p--;
        }
        ord[p] = key[q];
    }
}

/* Store one chunk (n <= CACHE_SET_CHUNK) of a cache without a limit. */
static int cache_set_chunk(struct tw_cache *c, size_t n, const void *const *keys,
                           const size_t *key_lens, void *const *values, int *results,
                           const struct cache_ttl *ttl)
{
    uint64_t hash[CACHE_SET_CHUNK];
    uint32_t key[CACHE_SET_CHUNK]; /* shard index << 8 | position, in batch order */
    uint32_t ord[CACHE_SET_CHUNK]; /* the same, ordered by shard */
    size_t m = 0;
    for (size_t j = 0; j < n && j < 8; j++)
        if (keys[j])
            __builtin_prefetch(keys[j]);
    struct cache_rd rd;
    tw_cache_rd_enter_(c, &rd);
    for (size_t j = 0; j < n; j++) {
        if (j + 8 < n && keys[j + 8])
            __builtin_prefetch(keys[j + 8]);
        const void *kp = keys[j];
        int rc = cache_check_key(c, &kp, key_lens[j]);
        if (rc) {
            if (results)
                results[j] = rc;
            continue;
        }
        hash[j] = cache_hash(c, kp, key_lens[j]);
        cache_prefetch_bucket(c, hash[j]);
        uint32_t si = (uint32_t)(cache_shard_of(c, hash[j]) - c->shards);
        key[m++] = si << 8 | (uint32_t)j;
        /* the bucket of the key hashed 8 keys ago has arrived by now */
        if (m > 8)
            cache_prefetch_entry(c, hash[key[m - 9] & 0xff]);
    }
    for (size_t q = m > 8 ? m - 8 : 0; q < m; q++)
        cache_prefetch_entry(c, hash[key[q] & 0xff]);
    cache_order_by_shard(c, key, ord, m);
    tw_cache_rd_exit_(&rd);

    int stored = 0;
    uint64_t now_ns = cache_now_ns(c);
    size_t q = 0;
    while (q < m) {
        uint32_t si = ord[q] >> 8;
        struct cache_shard *s = &c->shards[si];
        struct cache_garbage g = {0};
        uint64_t first = UINT64_MAX;
        cache_lock(c, s);
        for (; q < m && ord[q] >> 8 == si; q++) {
            size_t j = ord[q] & 0xff;
            const void *kp = keys[j] ? keys[j] : "";
            struct cache_key k = {kp, key_lens[j], hash[j]};
            struct cache_val v = {values[j], NULL, 0};
            uint64_t tick = cache_deadline_fast(s, ttl, now_ns);
            uint64_t planned = 0;
            int rc = tw_cache_store_at_locked_(c, s, &k, &v, tick, now_ns, &planned, &g);
            if (rc == 0) {
                stored++;
                if (planned < first)
                    first = planned;
            }
            if (results)
                results[j] = rc;
        }
        bool advance = cache_retire(c, s, &g);
        cache_unlock(c, s);
        if (first != UINT64_MAX)
            cache_note_deadline(c, first);
        cache_after_write(c, &g, advance);
    }
    return stored;
}

int tw_cache_set_many(struct tw_cache *c, size_t n, const void *const *keys, const size_t *key_lens,
                      void *const *values, int *results)
{
    if (cache_check_keys(c, n, keys, key_lens) || c->copy_values || (n && !values))
        return TW_EINVAL;
    if (c->limit)
        return cache_set_many_ordered(c, n, keys, key_lens, values, results);
    struct cache_ttl ttl = cache_ttl_of(c, c->default_ttl_ms);
    int stored = 0;
    for (size_t i = 0; i < n; i += CACHE_SET_CHUNK) {
        size_t k = n - i < CACHE_SET_CHUNK ? n - i : CACHE_SET_CHUNK;
        stored += cache_set_chunk(c, k, keys + i, key_lens + i, values + i,
                                  results ? results + i : NULL, &ttl);
    }
    return stored;
}
