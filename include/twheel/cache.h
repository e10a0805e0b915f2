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
 *  - pointer mode (the default): the cache owns each stored pointer from a
 *    successful set until it drops it (overwrite by another pointer, del,
 *    expiry, eviction, tw_cache_free) and then calls cfg.free_value on it
 *    exactly once, never under a lock; a set that fails leaves the pointer
 *    the caller's. A pointer that get or take returns may be dropped by
 *    another thread at any moment: if that matters, set cfg.retain_value
 *    (e.g. a reference-count increment), called on each pointer handed out
 *    while it cannot be freed; the caller releases that reference. Reads
 *    take no lock, so a dropped value is freed once no read that could have
 *    seen it still runs: before the dropping call returns if no get or take
 *    runs meanwhile, else on the thread of a later write or expiry pass, or
 *    in tw_cache_free at the latest.
 *  - copy mode (cfg.copy_values): the *_copy calls copy the value bytes in
 *    and out; the cache owns nothing of the caller's, and free_value only
 *    disposes of the buffers loaders return.
 *
 * Rules (tests/test_cache_*.c pin each of them):
 *  - TTLs are milliseconds, > 0, at most TW_CACHE_TTL_MAX_MS, scaled by a
 *    factor uniform in [1 - jitter, 1 + jitter] (cfg.jitter, default 0.05)
 *    so that keys set together do not expire in the same tick; the expiry
 *    instant is rounded up to a whole millisecond.
 *  - A key is never returned at or after its expiry, whether or not its
 *    timer has run. get does not extend a TTL; it counts as a use for the
 *    LRU.
 *  - LRU (limit > 0): a set of a new key that makes the cache hold more
 *    than limit keys evicts the least recently used one (set or read
 *    longest ago): exactly under the manual clock, up to the 1 ms tick
 *    under the real clock, whatever the number of shards, but for two
 *    bounds on an eviction's work. It re-places a key read since it was
 *    placed at most 64 keys from its shard's most recent end (if more than
 *    64 keys of the shard were used after that read, some of them may be
 *    evicted before it), and re-places at most 1,024 such keys (if more of
 *    a shard's least recently placed keys were read since, one of them may
 *    be evicted). A read racing with the eviction of its key may return it
 *    and not save it.
 *  - take: on a miss the loader runs once for all concurrent callers of
 *    the key (single flight); its value is stored and handed to every
 *    caller, its error handed to every caller and not cached.
 *  - An entry, its timer and its expiry change together under one lock: an
 *    expiry never deletes a value set after it was due, and no key is ever
 *    stored without an armed timer.
 *
 * Threads: every call is thread-safe except tw_cache_free, which must be
 * the last. Reads (get, get_many, take's hits) take no lock and write no
 * cache line that readers on other CPUs write, and never wait for expiry;
 * writes lock one of cfg.shards shards. Expiry runs on a clock service
 * (twheel/clock.h): cfg.clock, which many caches may share (one thread for
 * all), or one per cache. With cfg.manual_clock there is no thread: time is
 * what tw_cache_advance last said.
 *
 * Cost: a get hit is about 250 instructions and, at 10^6 keys, up to three
 * missed cache lines (the key, the bucket, the entry); a set locks one
 * shard and may grow its table (a rehash of that shard). get_many and
 * set_many hide most of the memory latency when there are many keys at
 * once. An expired key's memory is reclaimed within t >> expiry_slack_shift
 * of its expiry (t its TTL); expiry with the default slack costs about half
 * the CPU of exact timers. Memory: an entry is a 54-byte header (86 with a
 * limit), the key (4 bytes more from 65,535 bytes on) and in copy mode the
 * value, rounded up to 16 bytes (64 for a key of up to 10 bytes, one cache
 * line); a shard's table adds 2 to 16 links of 8 bytes a key. At 10^6 keys
 * that is about 87 bytes of RSS a key in 8 shards (the default up to 2
 * CPUs) and 107 in 16 (3-4 CPUs), where a shard's table of 1-2 MB is
 * rounded up to a 2 MB huge page: bytes traded for speed (bench/README.md,
 * W8); where they matter more, cfg.shards moves the shards out of that
 * band. With cfg.allocator every byte comes from it.
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
 * called inside a read or under a shard lock: it must not call into the
 * cache. */
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

/** Receives the periodic statistics line (one line, no trailing newline):
 *   cache(users) - last 60.0 s: queries: 1200 (qpm: 1200), hits: 1100,
 *   misses: 100, hit_ratio: 91.7%, evictions: 3, expirations: 40;
 *   elements now: 5000
 * Every figure but "elements now" is for the interval since the previous
 * line (the first starts at creation), whose real length is printed; qpm
 * is the interval's get and take calls per minute of it. Cumulative counts
 * are in tw_cache_stats. Called on the expiry thread (or in
 * tw_cache_advance) with the cache's log lock held: it may call
 * tw_cache_stats and the get calls, nothing else. */
typedef void tw_cache_log_fn(void *ctx, const char *line);

/** Which lock guards a shard's writers. Reads take no lock (but while a
 * set's resize relinks the shard's table, when they take it, shared if it
 * is an rwlock), so the choice matters little. */
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
     * (it is never returned from its expiry on), for cheaper expiry (see
     * Cost above). 0 = exact timers; default TW_CACHE_SLACK_SHIFT_DEFAULT;
     * at most TW_CACHE_SLACK_SHIFT_MAX. */
    unsigned expiry_slack_shift;
    /** Hash keys with SipHash-1-3 (about 110 instructions for a key of up
     * to 16 bytes) instead of the default seeded multiply-mix hash (about
     * 30). Both take a random per-instance seed, so that without it no
     * known way builds colliding keys; only SipHash is a PRF, which the
     * default is not: set this when untrusted clients choose keys and can
     * also time many lookups finely. */
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
 * Shards spread the writers (reads take no lock). Reads sysconf. */
TW_API unsigned tw_cache_default_shards(void);

/** Create a cache: its shards (a table, a wheel and locks each) and, unless
 * cfg->manual_clock, a membership of cfg->clock or a clock service of its
 * own (a thread). Returns 0 and sets *out, or TW_EINVAL (NULL argument,
 * ttl <= 0, jitter outside [0, 1), shards not 0 nor a power of two in
 * range, retain_value in copy mode, a clock with manual_clock), TW_ENOMEM,
 * TW_ESYS (thread or lock creation failed). On failure nothing is left
 * allocated and *out is untouched. cfg is copied (name included). */
TW_API int tw_cache_new(struct tw_cache **out, const struct tw_cache_config *cfg);

/** Leave the clock service (stopping and joining its thread if it is the
 * cache's own), free every entry (free_value once per stored pointer) and
 * the cache. Returns 0 (NULL included: a no-op); it has no error to report,
 * and returns int as every free of twheel/common.h. No other call may be
 * running or made afterwards (takes in flight included). */
TW_API int tw_cache_free(struct tw_cache *c);

/** Store value under key with the default TTL (jittered), replacing any old
 * value (freed, unless it is the same pointer) and re-arming the key's timer.
 * Pointer mode. Locks the key's shard; with a limit, may evict the least
 * recently used key. Returns 0 (the cache owns value), TW_EINVAL (NULL
 * cache, NULL key with key_len > 0, copy mode), TW_E2BIG (key_len >
 * UINT32_MAX) or TW_ENOMEM (nothing changed; value still the caller's). */
TW_API int tw_cache_set(struct tw_cache *c, const void *key, size_t key_len, void *value);
/** As tw_cache_set with this TTL; ttl_ms <= 0 is TW_EINVAL. */
TW_API int tw_cache_set_ttl(struct tw_cache *c, const void *key, size_t key_len, void *value,
                            int64_t ttl_ms);
/** Copy mode: store a copy of value_len bytes (value may be NULL if
 * value_len is 0); the errors of tw_cache_set, TW_E2BIG also for a
 * value_len no entry can hold. */
TW_API int tw_cache_set_copy(struct tw_cache *c, const void *key, size_t key_len, const void *value,
                             size_t value_len);
/** Copy mode, as tw_cache_set_copy with this TTL; ttl_ms <= 0 is TW_EINVAL. */
TW_API int tw_cache_set_copy_ttl(struct tw_cache *c, const void *key, size_t key_len,
                                 const void *value, size_t value_len, int64_t ttl_ms);

/** Look key up, without a lock. Hit: 0, *value set (retained if
 * retain_value is set), the key becomes the most recently used; its TTL is
 * unchanged. Miss (absent or expired): TW_ENOENT. TW_EINVAL for bad
 * arguments or copy mode, TW_E2BIG for key_len > UINT32_MAX. */
TW_API int tw_cache_get(struct tw_cache *c, const void *key, size_t key_len, void **value);
/** Copy mode: copy up to cap bytes of the value into buf and set
 * *value_len to its full length (a shorter cap truncates: compare). 0,
 * TW_ENOENT, TW_EINVAL or TW_E2BIG. */
TW_API int tw_cache_get_copy(struct tw_cache *c, const void *key, size_t key_len, void *buf,
                             size_t cap, size_t *value_len);

/** Batched get (pointer mode): n keys (keys[i], key_lens[i] bytes) looked
 * up as by n tw_cache_get calls, each on its own (not atomic as a whole),
 * with the next keys' buckets and entries fetched from memory meanwhile.
 * values[i] gets the value (retained as by get) or NULL; results, if not
 * NULL, gets each key's 0, TW_ENOENT, TW_EINVAL or TW_E2BIG. Returns the
 * number of hits, or TW_EINVAL (NULL cache, keys, key_lens or values with
 * n > 0, copy mode). */
TW_API int tw_cache_get_many(struct tw_cache *c, size_t n, const void *const *keys,
                             const size_t *key_lens, void **values, int *results);

/** Batched set (pointer mode) with the default TTL: as n tw_cache_set
 * calls, with the keys' buckets and entries prefetched. results, if not
 * NULL, gets each key's return code (a failed key's value is still the
 * caller's). Returns the number of keys stored, or TW_EINVAL as get_many.
 * A key set twice in one batch keeps the later value (the earlier is freed
 * as by an overwrite). With a limit the keys are stored one by one in
 * batch order (LRU order and evictions as for n sets); without one, each
 * run of up to 64 keys is stored grouped by shard, one lock hold per shard:
 * other threads may see a later key of the batch stored before an earlier
 * one of another shard. */
TW_API int tw_cache_set_many(struct tw_cache *c, size_t n, const void *const *keys,
                             const size_t *key_lens, void *const *values, int *results);

/** Remove key: its timer is cancelled and its value freed (once). Locks
 * the key's shard. Returns 0, TW_ENOENT if it was not stored (an expired
 * key not yet collected counts as stored: it is removed), TW_EINVAL or
 * TW_E2BIG. */
TW_API int tw_cache_del(struct tw_cache *c, const void *key, size_t key_len);

/** Get, or on a miss load with single flight (see tw_cache_loader_fn) and
 * store with the default TTL. A hit costs what a get does; a miss waits for
 * the key's loader (its own or another caller's). Returns 0 with *value set
 * (retained as by get), the loader's error, TW_ENOMEM (the loaded value
 * could not be stored: it was freed, and every waiter gets TW_ENOMEM),
 * TW_EINVAL or TW_E2BIG. Pointer mode. */
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
 * current time), expire every key due by then (each shard locked in turn)
 * and, if a log callback is set and an interval has passed, log. Returns
 * the number of keys expired, or TW_EINVAL (NULL, a cache with a real
 * clock, now_ms >= 2^44). Any thread may call it. */
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
