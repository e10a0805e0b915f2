/* SPDX-License-Identifier: MIT */
/** @file
 * twheel cache: a thread-safe TTL cache whose keys expire through timing
 * wheels (go-zero's collection.Cache, made correct and complete).
 *
 * @code
 *   struct tw_cache_config cfg;
 *   tw_cache_config_init(&cfg);          // defaults: jitter 0.05, shards by CPUs
 *   cfg.default_ttl_ms = 60000;
 *   cfg.limit = 100000;                  // LRU cap; 0 = unbounded
 *   cfg.free_value = my_free;            // optional
 *   struct tw_cache *c;
 *   if (tw_cache_new(&c, &cfg) == 0) {
 *       tw_cache_set(c, "k", 1, obj);
 *       void *v;
 *       if (tw_cache_get(c, "k", 1, &v) == 0) use(v);
 *       tw_cache_free(c);                // frees every value, joins the thread
 *   }
 * @endcode
 *
 * Keys are byte strings (any bytes, up to UINT32_MAX of them), copied into
 * the cache. Values come in one of two modes, fixed at creation:
 *  - pointer mode (the default): a value is an opaque pointer. The cache owns
 *    each stored pointer from a successful set until it drops it (overwrite,
 *    del, expiry, eviction, tw_cache_free), and then calls cfg.free_value on
 *    it exactly once, if set (never while holding a lock, never on a pointer
 *    that a set replaced with itself). A set that fails has not taken the
 *    pointer: it is still the caller's.
 *    What tw_cache_get hands back is the stored pointer. Another thread may
 *    drop it (and free it) at any moment; if that can happen, set
 *    cfg.retain_value (e.g. a reference-count increment): it is called on
 *    every pointer that get/take return, at a moment the cache guarantees the
 *    value is not freed (inside the read's epoch section, or under the shard
 *    lock), and the caller then releases that reference itself. Without
 *    free_value, values are never freed by the cache and the question does
 *    not arise.
 *    When free_value runs: reads take no lock, so a dropped value may still
 *    be in a reader's hands. If no get/take is running at that moment (for
 *    instance single-threaded use), it is freed before the call that dropped
 *    it returns; otherwise it is freed later, once every read that could have
 *    seen it has finished (epoch-based reclamation), on the thread of a later
 *    set/del/expiry pass, or by tw_cache_free at the latest.
 *  - copy mode (cfg.copy_values): set copies the value bytes into the entry,
 *    the *_copy calls copy them back out into the caller's buffer, and the
 *    cache owns nothing of the caller's. free_value, if set, is only used to
 *    dispose of the buffers that loaders return (see tw_cache_loader_fn).
 *
 * Rules (tests/test_cache_*.c pin each of them):
 *  - TTLs are in milliseconds, > 0 (ttl <= 0 is TW_EINVAL; there is no
 *    "forever"), capped at TW_CACHE_TTL_MAX_MS (about 2^62 ns, 146 years):
 *    a longer one is stored as that, silently. Each stored TTL is scaled by
 *    a factor uniform in [1 - jitter, 1 + jitter] (cfg.jitter, default 0.05;
 *    0 turns it off), so keys set together do not all expire in the same
 *    tick. The expiry instant is kept in the entry, rounded up to the next
 *    whole millisecond.
 *  - A key is never returned at or after its expiry instant, whether or not
 *    its timer has run: every read compares the expiry with the clock.
 *  - get does not extend a TTL. It touches the key for the LRU.
 *  - When limit > 0 and a set of a new key makes the cache hold more than
 *    limit entries, the least recently used key (set or read longest ago) is
 *    evicted: its timer is cancelled and its value freed. Recency is one
 *    timestamp per entry, in 1 ms ticks of the real clock (a counter under
 *    the manual clock), raised by reads without a lock; eviction takes the
 *    oldest of the shards' oldest. So the order is exact under the manual
 *    clock and exact up to the 1 ms tick otherwise, with one relaxation
 *    under heavy writes: a key read since it was placed is re-placed by
 *    eviction walking at most 64 keys from the most recent end, so one that
 *    is older than 64 newer keys of its shard lands a little early. A read
 *    racing with the eviction of its key may return it and not save it.
 *  - take/take_*: a hit returns the value; on a miss the loader runs once for
 *    all concurrent callers of that key (single flight). Its success is
 *    stored with the TTL and handed to every caller; its error (any non-zero
 *    return) is handed to every caller and not cached.
 *  - Races are ruled out by construction: an entry, its timer and its expiry
 *    change together under the shard lock, so an expiry cannot delete a value
 *    set after it was due, and no key is ever stored without an armed timer.
 *
 * Threads: every call is thread-safe except tw_cache_free, which must be the
 * last call. Keys are spread over cfg.shards shards (a power of two; 0 =
 * tw_cache_default_shards(), 4 per CPU online, 8 to 256) by a keyed hash of
 * the key under a per-instance random seed (see cfg.siphash for what it
 * resists); each shard has a writers' lock, a hash table, an LRU list and a
 * core wheel (twheel/wheel.h) with 1 ms ticks.
 * Reads take no lock and write no cache line that readers on other CPUs
 * write: get and the hit path of take scale with the cores; only a table
 * resize (growth by a set) makes readers of that one shard look under its
 * lock. Writes (set, del, take's store, expiry, eviction) lock their shard.
 * Expiry: a clock service (twheel/clock.h) sleeps until the earliest
 * deadline of any shard (no wake-ups for empty ticks) and expires keys in
 * batches of 64 per lock hold; reads never wait for it. Pass one service in
 * cfg.clock to many caches and they share its single thread; without it
 * each cache starts a service of its own.
 * Since reads compare every expiry with the clock, the expiry timers only
 * reclaim memory, so they are armed with slack by default
 * (cfg.expiry_slack_shift = 3: a key with TTL t is reclaimed within t/8 after
 * its expiry, never before), which lets the wheel fire them without moving
 * them down: expiry then costs 0.5-0.6x the CPU of exact timers at 10^6 keys.
 * Set it to 0 for exact reclaim (memory freed at the expiry tick).
 * With cfg.manual_clock there is no thread and no real clock: time is what the
 * last tw_cache_advance said (for tests, simulations and event loops).
 *
 * Memory: an entry is a 54-byte header (86 with a limit), the key (plus 4
 * bytes if it is 65,535 bytes or longer) and in copy mode the value, rounded
 * up to 16 bytes: 64 bytes for a key of up to 10 bytes without a limit, 80
 * up to 26 bytes, 96 with a limit and a 10-byte key; a 64-byte entry is one
 * cache line. Entries of up to 512 bytes are carved from chunks of their
 * shard (no malloc header), bigger ones allocated alone; a shard keeps its
 * chunks while the cache holds keys, and they all go back when the cache
 * empties (once its chunks hold 256 KB or more) or at tw_cache_free. A
 * shard's hash table takes 8 bytes a link and 2 to 16 links a key. With the
 * default allocator the big chunks and tables are 2 MB aligned and advised
 * huge, so that the TLB covers them (on Linux 6.1+ a set then copies 1 MB
 * under its shard's lock about once per 25,000 entries); with cfg.allocator
 * everything comes from it and nothing is madvised.
 * At 10^6 keys that is about 87 bytes of RSS a key in 8 shards (the default
 * up to 2 CPUs) and 107 in 16 (3-4 CPUs), where a shard of 32,769 to 65,536
 * keys has its table rounded up to a whole 2 MB page: bytes traded for
 * speed (bench/README.md has the figures). A 1 MB table in 4 KB pages would
 * take 17 bytes a key less there, for get_many 8% and set_many 14% slower
 * (TLB misses; single calls and the Zipf mix within the noise); growing at
 * one key per link instead, in 512 KB, 25 bytes less, for get_many 54% and
 * set_many 66% slower. Where those bytes matter more, cfg.shards can move
 * the shards out of that band.
 * tw_cache_get_many/set_many hide most of the memory latency when the
 * caller has many keys at once.
 */
#ifndef TWHEEL_CACHE_H
#define TWHEEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "twheel/clock.h"
#include "twheel/common.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tw_cache;

/** Frees (or releases) a value the cache drops; called exactly once per
 * stored pointer, outside any cache lock, so it may call the cache (on any
 * thread, the expiry thread included), except tw_cache_free, and except
 * while tw_cache_free runs (no call may be made then). */
typedef void tw_cache_free_fn(void *ctx, void *value);
/** Takes a reference on a value being returned to a caller (pointer mode);
 * called under a shard lock, so it must not call into the cache. */
typedef void tw_cache_retain_fn(void *ctx, void *value);

/** Produces the value of a missing key for take. Return 0 and set *value
 * (and, in copy mode, *value_len: the cache copies *value_len bytes from *value and
 * then passes *value to free_value if set), or return a non-zero error code
 * (negative by convention) that every waiting caller receives. In pointer
 * mode the cache owns *value once the loader succeeded, as after a set.
 * Runs without any cache lock held: it may call the cache, but a take of the
 * same key from inside its own loader would wait for itself forever. */
typedef int tw_cache_loader_fn(void *ctx, const void *key, size_t key_len, void **value,
                               size_t *value_len);

/** Receives the periodic statistics line (no trailing newline), e.g.
 *   cache(users) - last 60.0 s: queries: 1200 (qpm: 1200), hits: 1100,
 *   misses: 100, hit_ratio: 91.7%, evictions: 3, expirations: 40;
 *   elements now: 5000
 * (one line). Every count is for the interval since the previous line (its
 * real length is printed: the first interval starts at creation); qpm is
 * the queries (get and take calls) of that interval per minute of it, a
 * true rate whatever log_interval_ms is; hit_ratio is the interval's;
 * "elements now" is the only figure that is not per interval. Cumulative
 * counters are in tw_cache_stats. Called with
 * the cache's clock lock held (on the expiry thread, or in tw_cache_advance):
 * it may call tw_cache_stats and the get calls, nothing else (a set may
 * need that lock to wake the thread). */
typedef void tw_cache_log_fn(void *ctx, const char *line);

/** Which lock guards a shard's writers. Reads take no lock (they fall back to
 * the lock, shared when it is an rwlock, only while a resize relinks the
 * shard's table), so the choice matters little. */
enum tw_cache_lock {
    TW_CACHE_LOCK_MUTEX = 0, /**< default (bench/README.md, W6, compares the two) */
    /** a read-write lock for the writers (reads take no lock) */
    TW_CACHE_LOCK_RWLOCK = 1,
};

/** What tw_cache_new needs: fill it with tw_cache_config_init, then set
 * default_ttl_ms and whatever else you need. */
struct tw_cache_config {
    int64_t default_ttl_ms;     /**< > 0: TTL of set and take */
    size_t limit;               /**< LRU cap on entries; 0 = unbounded */
    const char *name;           /**< for the log line; copied; NULL = "cache" */
    double jitter;              /**< TTL factor in [1-jitter, 1+jitter]; 0 = off; < 1 */
    unsigned shards;            /**< power of two in [1, 4096]; 0 (default) = by CPUs */
    enum tw_cache_lock lock;    /**< default TW_CACHE_LOCK_MUTEX */
    bool copy_values;           /**< copy mode (see above) instead of pointers */
    /** frees the values the cache drops (pointer mode), or the buffers that
     * loaders return (copy mode); NULL = nothing is freed */
    tw_cache_free_fn *free_value;
    tw_cache_retain_fn *retain_value; /**< pointer mode only */
    void *value_ctx;            /**< first argument of free_value/retain_value */
    tw_cache_log_fn *log;       /**< optional statistics line ... */
    /** first argument of log */
    void *log_ctx;
    uint64_t log_interval_ms;   /**< ... every this often; default 60000 */
    bool manual_clock;          /**< no thread: time moves by tw_cache_advance */
    uint64_t start_ms;          /**< manual clock: the time at creation (< 2^44) */
    const struct tw_allocator *allocator; /**< NULL = realloc/free; copied */
    struct tw_clock *clock;     /**< shared expiry service; NULL = one of its own.
                                 * Must outlive the cache. Not with manual_clock. */
    /** Slack of the expiry timers: a key stored with TTL t (after jitter)
     * may stay in memory up to t >> expiry_slack_shift after its expiry
     * before its timer removes it (it is never returned at or after its
     * expiry: reads compare with the clock). The wheel uses the freedom to
     * plan timers where they fire without cascading, so expiry costs less
     * (see Expiry above). 0 = exact timers; default
     * TW_CACHE_SLACK_SHIFT_DEFAULT; at most TW_CACHE_SLACK_SHIFT_MAX. */
    unsigned expiry_slack_shift;
    /** Hash keys with SipHash-1-3 instead of the default seeded
     * multiply-mix hash. Both are keyed by a random per-instance seed. The
     * default (~30 instructions for a key of up to 16 bytes, against ~110)
     * resists hash flooding as Go's maps do: without the seed an attacker
     * has no known way to build colliding keys, but it is not a PRF, so
     * one who can time many lookups may learn more than SipHash would let
     * him. Set this when keys come from untrusted clients that can also
     * measure the cache's response times finely. */
    bool siphash;
};

/** Default tw_cache_config.expiry_slack_shift (set by tw_cache_config_init):
 * expired keys are reclaimed at most 1/8 of their TTL late. */
#define TW_CACHE_SLACK_SHIFT_DEFAULT 3u
/** Largest tw_cache_config.expiry_slack_shift (1/2^16 of the TTL). */
#define TW_CACHE_SLACK_SHIFT_MAX 16u

/** Longest TTL in milliseconds: 2^62 ns rounded down to whole ms, about 146
 * years. A longer TTL (INT64_MAX included) is not an error: it is silently
 * stored as this one, after jitter (no key lives longer). */
#define TW_CACHE_TTL_MAX_MS INT64_C(4611686018427)

/** Counters since creation. */
struct tw_cache_stats {
    uint64_t hits;        /**< get/take calls that found a live key */
    uint64_t misses;      /**< get/take calls that did not */
    double hit_ratio;     /**< hits / (hits + misses); 0 when both are 0 */
    uint64_t entries;     /**< keys stored now (expired ones not yet removed included) */
    uint64_t evictions;   /**< keys dropped by the LRU limit */
    uint64_t expirations; /**< keys dropped by their timer */
};

/** Fill *cfg with the defaults (every field zero except jitter 0.05,
 * expiry_slack_shift TW_CACHE_SLACK_SHIFT_DEFAULT and
 * log_interval_ms 60000; shards 0 = by CPUs). default_ttl_ms must still be set. */
TW_API void tw_cache_config_init(struct tw_cache_config *cfg);

/** The shard count used when cfg.shards is 0: 4 per CPU online, rounded up
 * to a power of two, at least 8 and at most 256 (8 on 2 CPUs, 64 on 16).
 * Shards only spread writers: reads take no lock. */
TW_API unsigned tw_cache_default_shards(void);

/** Create a cache and, unless cfg->manual_clock, join cfg->clock (or start a
 * clock service of its own). Returns 0
 * and sets *out, or TW_EINVAL (NULL argument, ttl <= 0, jitter outside
 * [0, 1), shards not 0 nor a power of two in range, retain_value in copy
 * mode, a clock with manual_clock),
 * TW_ENOMEM, TW_ESYS (thread or lock creation failed). On failure nothing is
 * left allocated and *out is untouched. */
TW_API int tw_cache_new(struct tw_cache **out, const struct tw_cache_config *cfg);

/** Leave the clock service (stopping and joining its thread if it is the
 * cache's own), free every entry (free_value once per stored pointer) and
 * the cache. Returns 0 (NULL included: a no-op); it has no error to report,
 * and returns int as every free of twheel/common.h. No other call may be
 * running or made afterwards (takes in flight included). */
TW_API int tw_cache_free(struct tw_cache *c);

/** Store value under key with the default TTL (jittered), replacing any old
 * value (freed, unless it is the same pointer) and re-arming the key's timer.
 * Pointer mode only. Returns 0, TW_EINVAL (NULL cache, NULL key with key_len >
 * 0, copy mode), TW_E2BIG (key_len > UINT32_MAX) or TW_ENOMEM (nothing changed;
 * value still the caller's). May evict the least recently used key. */
TW_API int tw_cache_set(struct tw_cache *c, const void *key, size_t key_len, void *value);
/** As tw_cache_set with this TTL; ttl_ms <= 0 is TW_EINVAL. */
TW_API int tw_cache_set_ttl(struct tw_cache *c, const void *key, size_t key_len, void *value,
                            int64_t ttl_ms);
/** Copy mode: store a copy of value_len bytes (value may be NULL if value_len is 0). */
TW_API int tw_cache_set_copy(struct tw_cache *c, const void *key, size_t key_len, const void *value,
                             size_t value_len);
/** Copy mode, as tw_cache_set_copy with this TTL; ttl_ms <= 0 is TW_EINVAL. */
TW_API int tw_cache_set_copy_ttl(struct tw_cache *c, const void *key, size_t key_len,
                                 const void *value, size_t value_len, int64_t ttl_ms);

/** Look key up. Hit: 0, *value set (retained if retain_value is set), the key
 * becomes the most recently used; its TTL is unchanged. Miss (absent or
 * expired): TW_ENOENT. TW_EINVAL for bad arguments or copy mode. */
TW_API int tw_cache_get(struct tw_cache *c, const void *key, size_t key_len, void **value);
/** Copy mode: copy up to cap bytes of the value into buf and set *value_len to its
 * full length (a shorter cap truncates: compare). 0, TW_ENOENT or TW_EINVAL. */
TW_API int tw_cache_get_copy(struct tw_cache *c, const void *key, size_t key_len, void *buf,
                             size_t cap, size_t *value_len);

/** Batched get (pointer mode): look up n keys (keys[i], key_lens[i] bytes) at
 * once, as n tw_cache_get calls would, but fetching the buckets and entries
 * of the next keys from memory while working on the current one (at 1e6
 * keys most single gets wait on DRAM). values[i] gets the value (retained as
 * by get) or NULL; results, if not NULL, gets each key's 0, TW_ENOENT,
 * TW_EINVAL or TW_E2BIG. Returns the number of hits, or TW_EINVAL (NULL
 * cache, keys, key_lens or values with n > 0, copy mode). Not atomic as a
 * whole: each key is read as by its own get. */
TW_API int tw_cache_get_many(struct tw_cache *c, size_t n, const void *const *keys,
                             const size_t *key_lens, void **values, int *results);

/** Batched set (pointer mode) with the default TTL: as n tw_cache_set calls,
 * with the keys' buckets and entries prefetched. results, if not NULL, gets
 * each key's return code (a failed key's value is still the caller's).
 * Returns the number of keys stored, or TW_EINVAL as get_many. Setting the
 * same key twice in one batch stores the later value (the earlier one is
 * freed as by an overwrite). A cache with a limit stores the keys in batch
 * order, one by one (LRU order and evictions as for n sets). Without a
 * limit, each run of up to 64 keys is stored grouped by shard (one lock
 * hold per shard, the clock read once for the run): other threads may see
 * a later key of the batch stored before an earlier one of another shard,
 * and free_value runs on the values a run displaced after that shard's
 * group is stored. */
TW_API int tw_cache_set_many(struct tw_cache *c, size_t n, const void *const *keys,
                             const size_t *key_lens, void *const *values, int *results);

/** Remove key: its timer is cancelled and its value freed (once). Returns 0,
 * TW_ENOENT if it was not stored (an expired key not yet collected counts as
 * stored: it is removed), or TW_EINVAL. */
TW_API int tw_cache_del(struct tw_cache *c, const void *key, size_t key_len);

/** Get, or on a miss load with single flight (see tw_cache_loader_fn) and
 * store with the default TTL. Returns 0 with *value set (retained as by get),
 * the loader's error, TW_ENOMEM (the loaded value could not be stored: it was
 * freed, and every waiter gets TW_ENOMEM), or TW_EINVAL. Pointer mode. */
TW_API int tw_cache_take(struct tw_cache *c, const void *key, size_t key_len,
                         tw_cache_loader_fn *loader, void *loader_ctx, void **value);
/** As tw_cache_take, storing a loaded value with this TTL; ttl_ms <= 0 is
 * TW_EINVAL. */
TW_API int tw_cache_take_ttl(struct tw_cache *c, const void *key, size_t key_len,
                             tw_cache_loader_fn *loader, void *loader_ctx, void **value,
                             int64_t ttl_ms);
/** Copy mode take: the value is copied out as by tw_cache_get_copy. */
TW_API int tw_cache_take_copy(struct tw_cache *c, const void *key, size_t key_len,
                              tw_cache_loader_fn *loader, void *loader_ctx, void *buf, size_t cap,
                              size_t *value_len);
/** Copy mode, as tw_cache_take_copy with this TTL; ttl_ms <= 0 is TW_EINVAL. */
TW_API int tw_cache_take_copy_ttl(struct tw_cache *c, const void *key, size_t key_len,
                                  tw_cache_loader_fn *loader, void *loader_ctx, void *buf,
                                  size_t cap, size_t *value_len, int64_t ttl_ms);

/** Fill *out with the counters (each read without stopping the cache, so a
 * snapshot under load is not atomic as a whole). Returns 0, or TW_EINVAL for
 * a NULL c or out (*out untouched; the stats rule of twheel/common.h). */
TW_API int tw_cache_stats(const struct tw_cache *c, struct tw_cache_stats *out);

/** Manual clock only: set the time to now_ms (ignored if earlier than the
 * current time), expire every key due by then and, if a log callback is set
 * and an interval has passed, log. Returns the number of keys expired, or
 * TW_EINVAL (NULL, a cache with a real clock, now_ms >= 2^44). Any thread
 * may call it. */
TW_API int64_t tw_cache_advance(struct tw_cache *c, uint64_t now_ms);

/** Manual clock only: set the time to now_ms (ignored if earlier) without
 * expiring anything, as if the expiry were running late: reads still miss
 * keys whose expiry has passed. For tests. Returns 0 or TW_EINVAL. */
TW_API int tw_cache_set_now(struct tw_cache *c, uint64_t now_ms);

/** The cache's time in milliseconds: the manual clock, or CLOCK_MONOTONIC
 * since creation. 0 for NULL (the getter rule of twheel/common.h; calls that
 * can fail, tw_cache_stats included, return TW_EINVAL for NULL). */
TW_API uint64_t tw_cache_now(const struct tw_cache *c);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_CACHE_H */
