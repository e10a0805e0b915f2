/* SPDX-License-Identifier: MIT */
/* twheel cache: the public calls, expiry, single flight, eviction, stats.
 *
 * Reads (get, and take's hit path) take no lock and write no cache line that
 * a reader on another CPU writes. A read: hashes the key (cache_hash),
 * enters a read section (its CPU's stripe, see cache/epoch.c), looks at the
 * 8 links of its bucket (one cache line) from the slot its tag names,
 * reading only the entry whose link carries its tag (cache/internal.h; a
 * bucket's rare overflow chains are walked), compares the entry's expiry
 * tick with the clock, retains the value (retain_value, inside the read
 * section, so the value cannot be freed under it), raises the entry's LRU
 * stamp if the cache has a limit and the stamp is older than the current
 * tick, and leaves the section with one atomic add that also counts the
 * hit in its stripe (cache/internal.h, struct cache_stripe). Per hit, with
 * C CPUs and T threads:
 *
 *   | what                         | locks | lines written, shared with other readers |
 *   |------------------------------|-------|-------------------------------------------|
 *   | stripe: active[], hits       | 0     | 0 (one stripe per CPU; two threads on one |
 *   |                              |       |   CPU never run at once)                   |
 *   | epoch, table, bucket, entry  | 0     | 0 (read only)                             |
 *   | entry's LRU stamp (limit>0)  | 0     | at most once per key per 1 ms tick, by    |
 *   |                              |       |   whichever reader sees it stale           |
 *   | manual clock, limit > 0      | 0     | the stamp counter on every hit (tests)     |
 *
 * None of these grows with T. A miss is the same with its own counter. If
 * a resize relinked the shard's chains during the walk (seq changed), a miss
 * is not trusted: the read retries (once in a batch, twice in a single get,
 * whose inline path made the first try), then looks under the shard lock.
 *
 * What a hit costs at 10^6 keys: up to three missed lines, the caller's key
 * bytes, the bucket's line and the entry's line, in that dependent order,
 * and about 250 instructions: the hash (tw_hash_mum, about 30 for a short
 * key; SipHash-1-3, 107, stays behind cfg.siphash), the slot scan and key
 * compare (~70), entering and leaving the section (sched_getcpu from
 * glibc's rseq area, 2 locked adds, the second counting the hit, 2 loads of
 * the epoch), the coarse clock, the public call's checks. A hit is one
 * inline path (cache_get; whatever is not a hit proven live by the coarse
 * clock goes to cache_get_rest), and the bucket is prefetched before the
 * section is entered (cache_prefetch_early_): entering's locked add (a load
 * cannot pass it on x86) would hold the bucket's load back.
 *
 * Writers take the shard lock. Entries never change in place except for
 * their expiry, their LRU stamp and their links: a set of a new value (or,
 * in copy mode, of any value) allocates a new entry and swaps it into the
 * chain; the old one is retired. A set of the same pointer keeps the entry
 * and stores its new expiry (a reader sees the old or the new one: either is
 * a state the key had). With expiry slack, such a refresh leaves the timer
 * where it is when it is planned at or before the new expiry (one store
 * instead of relinking the timer between two other entries): the expiry
 * pass then finds the entry's expiry still ahead and re-arms it instead of
 * expiring it. Unlinked entries keep their hnext, so a reader on one
 * walks on. Retired entries, their values and replaced bucket arrays are
 * freed by the epoch scheme of cache/epoch.c: at once when no reader is
 * inside, else once every reader that could see them has left. free_value
 * then runs on the thread that frees (a writer, or the expiry pass).
 *
 * LRU with lock-free reads: a hit only raises the entry's stamp (ticks of
 * the real clock, or a counter under the manual clock); the list stays
 * ordered by the stamp each entry was placed with, and eviction moves a
 * tail whose stamp has passed to where it belongs before taking the tail.
 * So eviction order is exact by last use (up to the 1 ms tick with the real
 * clock), except that a move walks at most 64 entries from the head.
 *
 * Locks, in the only order they are ever nested:
 *   shard flight_mu  ->  shard lock          (take: join or finish a flight)
 *   cache evict_mu   ->  shard lock          (eviction, one shard at a time)
 *   cache log_mu                             (never held with another lock)
 * Values are freed, and entries released, after the shard lock is dropped.
 *
 * Expiry: each shard's entries carry a timer on the shard's wheel (1 ms
 * ticks). The cache is a member of a clock service (twheel/clock.h: the
 * one in cfg.clock, shared with other caches, or one of its own): its run
 * pulls due timers with tw_wheel_expire_next_node, CACHE_EXPIRE_BATCH at a
 * time per lock hold, and returns the earliest next deadline of all shards.
 * Timers are armed with slack (cfg.expiry_slack_shift, cache_arm): a read
 * never trusts a timer, so a late one only holds memory a little longer,
 * and the wheel plans it where it fires without cascading.
 * A set whose deadline is earlier wakes the service (tw_clock_wake). Expiry
 * never shrinks a table (a shrink would relink chains while readers look):
 * del and set do. Reads never depend on expiry: they compare the entry's
 * expiry with the clock, and never wait for the expiring thread.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/internal.h"
#include "common/time.h"
#include "twheel/clock.h"

/* ---- clock ------------------------------------------------------------- */

/* Nanoseconds on the cache's time line (tick = ns / CACHE_NS_PER_TICK). */
static inline uint64_t cache_now_ns(const struct tw_cache *c)
{
    if (c->manual)
        return atomic_load_explicit(&c->manual_now, memory_order_acquire) * CACHE_NS_PER_TICK;
    return tw_mono_ns_() - c->epoch_ns;
}

/* The LRU stamp for an access at now_ns: the tick, or a counter under the
 * manual clock (so that tests see exact order). */
static inline uint64_t cache_stamp(struct tw_cache *c, uint64_t now_ns)
{
    if (c->manual)
        return atomic_fetch_add_explicit(&c->seq, 1, memory_order_relaxed) + 1;
    return now_ns / CACHE_NS_PER_TICK;
}

/* A hit's liveness without the precise clock (which costs about three times
 * the coarse one, a third of a hot read) when it can be proven with the
 * vDSO's CLOCK_MONOTONIC_COARSE:
 *
 *   The coarse clock is the same timekeeper's monotonic time as of its last
 *   update, so coarse <= now. Linux updates it every tick (res = one jiffy,
 *   4 ms at HZ=250); a CPU that wakes from tickless idle updates it before
 *   running anything; on a tickless busy CPU the housekeeping CPU does; and
 *   when the CPU in charge stalls (a hypervisor preempted its vCPU), any
 *   ticking CPU takes over after a few jiffies. So now < coarse + margin
 *   with margin = max(1 s, 64 * res) holds unless the kernel's timekeeping
 *   is stalled for that long, far past its own stall recovery.
 *
 * A hit is then certainly live when the tick of coarse + margin is still
 * before the entry's expiry tick (now's tick is no later): no key is ever
 * returned at or after its expiry. Otherwise (a key within about a second
 * of expiry, no coarse clock, or its resolution too coarse) the read takes
 * the precise clock. Only for caches without a limit: a limit's
 * LRU stamp needs the precise tick anyway. */
#define CACHE_COARSE_MARGIN_NS UINT64_C(1000000000)

static uint64_t cache_coarse_margin(void)
{
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec r, t;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &r) || clock_gettime(CLOCK_MONOTONIC_COARSE, &t) ||
        r.tv_sec != 0 || r.tv_nsec > 10000000)
        return 0;
    uint64_t m = 64 * (uint64_t)r.tv_nsec;
    return m > CACHE_COARSE_MARGIN_NS ? m : CACHE_COARSE_MARGIN_NS;
#else
    return 0;
#endif
}

/* Whether e is certainly live now, from the coarse clock alone. */
static inline bool cache_surely_live(const struct tw_cache *c, const struct cache_entry *e)
{
#ifdef CLOCK_MONOTONIC_COARSE
    if (!c->coarse_margin_ns)
        return false;
    uint64_t bound = tw_time_ns_(CLOCK_MONOTONIC_COARSE) + c->coarse_margin_ns;
    if (bound < c->epoch_ns)
        return false;
    return (bound - c->epoch_ns) / CACHE_NS_PER_TICK <
           atomic_load_explicit(&e->expires, memory_order_relaxed);
#else
    (void)c;
    (void)e;
    return false;
#endif
}

/* ---- locks ------------------------------------------------------------- */

static inline void cache_lock(struct tw_cache *c, struct cache_shard *s)
{
    if (c->rwlock)
        pthread_rwlock_wrlock(&s->lock.rw);
    else
        pthread_mutex_lock(&s->lock.mu);
}

/* Lock for a read: shared when the read writes nothing (rwlock, no limit). */
static inline void cache_lock_read(struct tw_cache *c, struct cache_shard *s)
{
    if (!c->rwlock)
        pthread_mutex_lock(&s->lock.mu);
    else if (c->limit)
        pthread_rwlock_wrlock(&s->lock.rw);
    else
        pthread_rwlock_rdlock(&s->lock.rw);
}

static inline void cache_unlock(struct tw_cache *c, struct cache_shard *s)
{
    if (c->rwlock)
        pthread_rwlock_unlock(&s->lock.rw);
    else
        pthread_mutex_unlock(&s->lock.mu);
}

/* Bump a counter only written under the shard lock: a plain relaxed
 * load+store (no locked instruction); stats readers see it a little old. */
static inline void cache_bump(_Atomic uint64_t *x, uint64_t n)
{
    atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* ---- entries ----------------------------------------------------------- */

/* The table's hash of a key: tw_hash_mum (hash.h: a seeded multiply-mix,
 * ~30 instructions for a key of up to 16 bytes, against ~110 for
 * SipHash-1-3), or SipHash-1-3 with cfg.siphash. Both are keyed by the
 * instance's random seed; what each resists is said in hash.h and cache.h. */
static inline uint64_t cache_hash(const struct tw_cache *c, const void *key, size_t klen)
{
    if (c->siphash)
        return tw_siphash13(key, klen, c->seed[0], c->seed[1]);
    return tw_hash_mum(key, klen, c->mum);
}

static inline struct cache_shard *cache_shard_of(struct tw_cache *c, uint64_t hash)
{
    return tw_cache_shard_of_(c, hash);
}

/* Bytes in front of each entry: its LRU links when there is a limit. */
static inline size_t cache_pre(const struct tw_cache *c)
{
    return c->limit ? sizeof(struct cache_lru) : 0;
}

/* The size of an entry's block (LRU links, entry, key, value bytes). */
static inline size_t cache_entry_size(const struct tw_cache *c, size_t klen, size_t vlen)
{
    return cache_pre(c) + CACHE_ENTRY_HDR + cache_key_bytes(klen) + (c->copy_values ? vlen : 0);
}

/* After writers dropped the shard lock: free what is safe, and move the
 * epoch on when a shard's limbo has grown. */
static inline void cache_after_write(struct tw_cache *c, struct cache_garbage *g, bool advance)
{
    if (g->n)
        tw_cache_garbage_release_(c, g);
    if (advance)
        tw_cache_epoch_advance_(c);
}

/* tw_cache_retire_locked_, skipping the call when there is nothing. */
static inline bool cache_retire(struct tw_cache *c, struct cache_shard *s, struct cache_garbage *g)
{
    return g->n ? tw_cache_retire_locked_(c, s, g) : false;
}

/* Take e out of the shard (table, LRU, wheel) into the garbage. */
static void cache_unlink(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                         struct cache_garbage *g)
{
    tw_cancel(&s->wheel, &e->timer);
    tw_cache_map_remove_(c, s, e, true, g);
    if (c->limit)
        tw_cache_lru_unlink_(s, e);
    atomic_fetch_sub_explicit(&c->count, 1, memory_order_relaxed);
    tw_cache_garbage_add_(g, e);
}

static inline bool cache_live(const struct cache_entry *e, uint64_t now_ns)
{
    return now_ns / CACHE_NS_PER_TICK <
           atomic_load_explicit(&e->expires, memory_order_relaxed);
}

/* xorshift64*: uniform double in [0, 1). */
static inline double cache_uniform(struct cache_shard *s)
{
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return (double)((x * UINT64_C(0x2545f4914f6cdd1d)) >> 11) * (1.0 / 9007199254740992.0);
}

/* The expiry tick of a key stored at now_ns with ttl_ms (> 0), jittered:
 * the instant now + ttl * factor rounded up to a whole tick, at least the
 * next tick, saturating far below TW_NEVER. */
static uint64_t cache_deadline(struct tw_cache *c, struct cache_shard *s, uint64_t now_ns,
                               int64_t ttl_ms)
{
    /* The documented cap (cache.h): just under 2^62 ns, far from overflow. */
    const uint64_t max_ns = (uint64_t)TW_CACHE_TTL_MAX_MS * CACHE_NS_PER_TICK;
    uint64_t ttl_ns;
    if (c->jitter > 0) {
        double f = 1.0 - c->jitter + 2.0 * c->jitter * cache_uniform(s);
        double ns = (double)ttl_ms * f * (double)CACHE_NS_PER_TICK;
        ttl_ns = ns >= (double)max_ns ? max_ns : (uint64_t)ns;
        if (ttl_ns == 0)
            ttl_ns = 1;
    } else {
        ttl_ns = (uint64_t)ttl_ms > max_ns / CACHE_NS_PER_TICK ? max_ns
                                                                : (uint64_t)ttl_ms * CACHE_NS_PER_TICK;
    }
    uint64_t at = now_ns > UINT64_MAX - ttl_ns ? UINT64_MAX : now_ns + ttl_ns;
    uint64_t tick = tw_ticks_up_(at, CACHE_NS_PER_TICK);
    uint64_t now_tick = now_ns / CACHE_NS_PER_TICK;
    return tick > now_tick ? tick : now_tick + 1;
}

/* Arm an entry's timer for expiry tick `tick` (stored at now_ns). Reads
 * compare the entry's expiry with the clock, so the timer only reclaims the
 * entry's memory: with expiry_slack_shift it may fire up to
 * (tick - now) >> shift ticks late, and the wheel uses that freedom to plan
 * it on a slot boundary from which it fires without cascading (twheel/wheel.h,
 * "Slack"). Returns the tick it is planned at (>= tick). */
static uint64_t cache_arm(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                          uint64_t tick, uint64_t now_ns)
{
    if (!c->slack_shift) {
        tw_arm(&s->wheel, &e->timer, tick, 0, 0);
        return tick;
    }
    uint64_t now_tick = now_ns / CACHE_NS_PER_TICK;
    tw_arm(&s->wheel, &e->timer, tick, ((tick > now_tick ? tick - now_tick : 0) >> c->slack_shift),
           TW_ARM_SLACK);
    return tw_deadline(&e->timer);
}

/* Tell the clock service about a deadline just armed (cheap when the
 * cache is already due by then; see tw_clock_wake). */
static void cache_note_deadline(struct tw_cache *c, uint64_t tick)
{
    if (c->manual)
        return;
    tw_clock_wake(c->clock, c->member, c->epoch_ns + tick * CACHE_NS_PER_TICK);
}

/* Key bytes as given by the caller. */
struct cache_key {
    const void *p;
    size_t len;
    uint64_t hash;
};

/* A value to store: a pointer, or bytes to copy. */
struct cache_val {
    void *ptr;
    const void *bytes;
    size_t len;
};

/* Store under the shard lock (held). On success *deadline is the armed tick
 * and anything displaced is in g. TW_ENOMEM leaves everything unchanged.
 * Entries readers may see are not changed in place except for the expiry of
 * a set of the same pointer: a new value comes in a new entry. */
static int cache_store_at_locked(struct tw_cache *c, struct cache_shard *s,
                                 const struct cache_key *k, const struct cache_val *v,
                                 uint64_t tick, uint64_t now_ns, uint64_t *deadline,
                                 struct cache_garbage *g)
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

/* cache_store_at_locked with the expiry tick of ttl_ms from now_ns. */
static int cache_store_locked(struct tw_cache *c, struct cache_shard *s,
                              const struct cache_key *k, const struct cache_val *v,
                              int64_t ttl_ms, uint64_t now_ns, uint64_t *deadline,
                              struct cache_garbage *g)
{
    return cache_store_at_locked(c, s, k, v, cache_deadline(c, s, now_ns, ttl_ms), now_ns,
                                 deadline, g);
}

/* The shard with the smallest `oldest` (a lower bound of its least recent
 * use), skipping `skip`; NULL when all are empty. */
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
static void cache_evict(struct tw_cache *c)
{
    if (!c->limit || atomic_load_explicit(&c->count, memory_order_relaxed) <= c->limit)
        return;
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

/* ---- argument checks --------------------------------------------------- */

/* Checks a key; the empty key may be NULL, and becomes "" (no pointer
 * arithmetic or memcmp on NULL). */
static int cache_check_key(const struct tw_cache *c, const void **key, size_t klen)
{
    if (!c || (!*key && klen))
        return TW_EINVAL;
    if (klen > UINT32_MAX)
        return TW_E2BIG;
    if (!*key)
        *key = "";
    return 0;
}

/* ---- set --------------------------------------------------------------- */

/* Store k at now_ns (the cache's time line; a batch passes one reading for
 * several keys). */
static int cache_set_at(struct tw_cache *c, const struct cache_key *kp,
                        const struct cache_val *v, int64_t ttl_ms, uint64_t now_ns)
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

static int cache_set(struct tw_cache *c, const void *key, size_t klen, const struct cache_val *v,
                     int64_t ttl_ms)
{
    if (ttl_ms <= 0)
        return TW_EINVAL;
    struct cache_key k = {key, klen, cache_hash(c, key, klen)};
    return cache_set_at(c, &k, v, ttl_ms, cache_now_ns(c));
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
                          size_t vlen, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (!c->copy_values || (!value && vlen))
        return TW_EINVAL;
    if (vlen > SIZE_MAX - sizeof(struct cache_lru) - CACHE_ENTRY_HDR - cache_key_bytes(key_len))
        return TW_E2BIG;
    struct cache_val v = {NULL, value, vlen};
    return cache_set(c, key, key_len, &v, ttl_ms);
}

int tw_cache_set_copy(struct tw_cache *c, const void *key, size_t key_len, const void *value,
                      size_t vlen)
{
    return tw_cache_set_copy_ttl(c, key, key_len, value, vlen, c ? c->default_ttl_ms : 0);
}

/* ---- get --------------------------------------------------------------- */

/* Where a read puts the value: a pointer, or a buffer (copy mode). */
struct cache_out {
    void **value;
    void *buf;
    size_t cap;
    size_t *vlen;
};

/* Hand e's value to out (inside a read section or under the shard lock:
 * e and its value cannot be freed meanwhile). */
static void cache_output_copy(const struct cache_entry *e, const struct cache_out *out)
{
    size_t n = e->value.len < out->cap ? e->value.len : out->cap;
    if (n)
        memcpy(out->buf, cache_ekey(e) + cache_eklen(e), n);
    *out->vlen = e->value.len;
}

static inline void cache_output(struct tw_cache *c, const struct cache_entry *e,
                                const struct cache_out *out)
{
    if (c->copy_values) {
        cache_output_copy(e, out);
    } else {
        void *p = atomic_load_explicit(&((struct cache_entry *)(uintptr_t)e)->value.ptr,
                                       memory_order_acquire);
        if (c->retain_value)
            c->retain_value(c->value_ctx, p);
        *out->value = p;
    }
}

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

/* Find k without the lock; a torn miss is retried once, then looked up
 * under the shard lock (a resize is relinking that shard right now). */
static struct cache_entry *cache_find_read(struct tw_cache *c, struct cache_shard *s,
                                           const struct cache_key *k)
{
    bool torn = false;
    struct cache_entry *e = tw_cache_map_find_rcu_inline_(s, k->p, k->len, k->hash, &torn);
    if (e || !torn)
        return e;
    e = tw_cache_map_find_rcu_inline_(s, k->p, k->len, k->hash, &torn);
    if (e || !torn)
        return e;
    cache_lock_read(c, s);
    e = tw_cache_map_find_(s, k->p, k->len, k->hash);
    cache_unlock(c, s);
    return e; /* still inside the read section: safe to use after unlock */
}

/* Hits and misses a batch counts locally, added to its stripe once. */
struct cache_tally {
    uint64_t hits, misses;
};

/* Output e (found inside the caller's read section, or NULL) if it is live:
 * 0, or TW_ENOENT. Touches e for the LRU. Counts nothing. */
static int cache_get_found(struct tw_cache *c, struct cache_entry *e,
                           const struct cache_out *out)
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

/* Look k up and output it (caller inside a read section). Counts the hit or,
 * if count_miss, the miss, in *tl. */
static int cache_get_in(struct tw_cache *c, const struct cache_key *k,
                        const struct cache_out *out, bool count_miss, struct cache_tally *tl)
{
    struct cache_shard *s = cache_shard_of(c, k->hash);
    int rc = cache_get_found(c, cache_find_read(c, s, k), out);
    if (rc == 0)
        tl->hits++;
    else if (count_miss)
        tl->misses++;
    return rc;
}

/* Everything but a hit proven live by the coarse clock: e and torn are
 * what the first lock-free lookup found. Leaves the read section. */
static __attribute__((noinline)) int cache_get_rest(struct tw_cache *c, struct cache_shard *s,
                                                    const struct cache_key *k,
                                                    const struct cache_out *out,
                                                    bool count_miss, struct cache_rd *rd,
                                                    struct cache_entry *e, bool torn)
{
    if (!e && torn)
        e = cache_find_read(c, s, k);
    int rc = cache_get_found(c, e, out);
    if (rc == 0) {
        tw_cache_rd_exit_hit_(rd);
        return 0;
    }
    if (count_miss)
        atomic_fetch_add_explicit(&rd->st->misses, 1, memory_order_relaxed);
    tw_cache_rd_exit_(rd);
    return rc;
}

/* A single get: the hit of a key proven live by the coarse clock (a cache
 * without a limit, the key more than a second from expiry) runs inline to
 * the end: the bucket's prefetch, enter, the lock-free lookup, the output,
 * and one atomic add that leaves the read section and counts the hit. */
static inline __attribute__((always_inline)) int cache_get(struct tw_cache *c,
                                                           const struct cache_key *k,
                                                           const struct cache_out *out,
                                                           bool count_miss)
{
    struct cache_shard *s = cache_shard_of(c, k->hash);
    cache_prefetch_early_(s, k->hash);
    struct cache_rd rd;
    tw_cache_rd_enter_(c, &rd);
    bool torn = false;
    struct cache_entry *e = tw_cache_map_find_rcu_inline_(s, k->p, k->len, k->hash, &torn);
    if (__builtin_expect(e != NULL, 1) && cache_surely_live(c, e)) {
        cache_output(c, e, out);
        tw_cache_rd_exit_hit_(&rd);
        return 0;
    }
    return cache_get_rest(c, s, k, out, count_miss, &rd, e, torn);
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
                      size_t *vlen)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (!c->copy_values || !vlen || (!buf && cap))
        return TW_EINVAL;
    struct cache_key k = {key, key_len, cache_hash(c, key, key_len)};
    struct cache_out out = {NULL, buf, cap, vlen};
    return cache_get(c, &k, &out, true);
}

/* ---- batches ----------------------------------------------------------- */

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

static inline bool cache_key_ok(const void *const *keys, const size_t *klens, size_t j)
{
    return (keys[j] || !klens[j]) && klens[j] <= UINT32_MAX;
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
        uintptr_t l =
            atomic_load_explicit(&bk[(j0 + k) & (CACHE_SLOTS - 1)], memory_order_relaxed);
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
                                  const size_t *klens, size_t i, uint64_t *ring)
{
    size_t j = i + 3 * CACHE_STAGE;
    if (j < n && keys[j])
        __builtin_prefetch(keys[j]);
    j = i + 2 * CACHE_STAGE;
    if (j < n && cache_key_ok(keys, klens, j)) {
        ring[j % CACHE_RING] = cache_hash(c, keys[j] ? keys[j] : "", klens[j]);
        cache_prefetch_bucket(c, ring[j % CACHE_RING]);
    }
    j = i + CACHE_STAGE;
    if (j < n && cache_key_ok(keys, klens, j))
        cache_prefetch_entry(c, ring[j % CACHE_RING]);
}

/* Fill the pipeline: the first 2D keys hashed, their buckets and the first
 * D keys' entries on their way, the next keys' bytes too (in a read
 * section). */
static void cache_pipeline_start(struct tw_cache *c, size_t n, const void *const *keys,
                                 const size_t *klens, uint64_t *ring)
{
    for (size_t j = 0; j < n && j < 3 * CACHE_STAGE; j++)
        if (keys[j])
            __builtin_prefetch(keys[j]);
    for (size_t j = 0; j < n && j < 2 * CACHE_STAGE; j++) {
        if (cache_key_ok(keys, klens, j)) {
            ring[j % CACHE_RING] = cache_hash(c, keys[j] ? keys[j] : "", klens[j]);
            cache_prefetch_bucket(c, ring[j % CACHE_RING]);
        }
    }
    for (size_t j = 0; j < n && j < CACHE_STAGE; j++)
        if (cache_key_ok(keys, klens, j))
            cache_prefetch_entry(c, ring[j % CACHE_RING]);
}

static int cache_check_keys(const struct tw_cache *c, size_t n, const void *const *keys,
                            const size_t *klens)
{
    if (!c || (n && (!keys || !klens)))
        return TW_EINVAL;
    return 0;
}

int tw_cache_get_many(struct tw_cache *c, size_t n, const void *const *keys,
                      const size_t *key_lens, void **values, int *results)
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
                                  const size_t *klens, void *const *values, int *results)
{
    uint64_t ring[CACHE_RING] = {0};
    int stored = 0;
    uint64_t now_ns = 0;
    struct cache_rd rd;
    tw_cache_rd_enter_(c, &rd);
    cache_pipeline_start(c, n, keys, klens, ring);
    tw_cache_rd_exit_(&rd);
    for (size_t i = 0; i < n; i++) {
        tw_cache_rd_enter_(c, &rd);
        cache_pipeline(c, n, keys, klens, i, ring);
        tw_cache_rd_exit_(&rd);
        if (i % CACHE_SET_CLOCK == 0)
            now_ns = cache_now_ns(c);
        const void *kp = keys[i];
        int rc = cache_check_key(c, &kp, klens[i]);
        if (rc == 0) {
            struct cache_key k = {kp, klens[i], ring[i % CACHE_RING]};
            struct cache_val v = {values[i], NULL, 0};
            rc = cache_set_at(c, &k, &v, c->default_ttl_ms, now_ns);
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
                           const size_t *klens, void *const *values, int *results,
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
        int rc = cache_check_key(c, &kp, klens[j]);
        if (rc) {
            if (results)
                results[j] = rc;
            continue;
        }
        hash[j] = cache_hash(c, kp, klens[j]);
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
            struct cache_key k = {kp, klens[j], hash[j]};
            struct cache_val v = {values[j], NULL, 0};
            uint64_t tick = cache_deadline_fast(s, ttl, now_ns);
            uint64_t planned = 0;
            int rc = cache_store_at_locked(c, s, &k, &v, tick, now_ns, &planned, &g);
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

/* ---- del --------------------------------------------------------------- */

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

/* ---- take: get or load with single flight ------------------------------ */

static struct cache_flight *cache_flight_find(struct cache_shard *s, const struct cache_key *k)
{
    for (struct cache_flight *f = s->flights; f; f = f->next)
        if (f->hash == (uint32_t)k->hash && f->klen == k->len &&
            memcmp(f->key, k->p, k->len) == 0)
            return f;
    return NULL;
}

static int cache_take(struct tw_cache *c, const void *key, size_t klen,
                      tw_cache_loader_fn *loader, void *loader_ctx, const struct cache_out *out,
                      int64_t ttl_ms)
{
    if (!loader || ttl_ms <= 0)
        return TW_EINVAL;
    struct cache_key k = {key, klen, cache_hash(c, key, klen)};
    if (cache_get(c, &k, out, false) == 0)
        return 0;
    struct cache_shard *s = cache_shard_of(c, k.hash);

    pthread_mutex_lock(&s->flight_mu);
    /* Look again: a load may have finished since. */
    if (cache_get(c, &k, out, true) == 0) {
        pthread_mutex_unlock(&s->flight_mu);
        return 0;
    }
    struct cache_flight *f = cache_flight_find(s, &k);
    if (f) {
        /* Someone is loading this key: wait for its result. */
        struct cache_waiter w = {.value = out->value, .buf = out->buf, .cap = out->cap,
                                 .vlen = out->vlen};
        w.next = f->waiters;
        f->waiters = &w;
        while (!w.done)
            pthread_cond_wait(&s->flight_cv, &s->flight_mu);
        pthread_mutex_unlock(&s->flight_mu);
        return w.err;
    }
    struct cache_flight me = {s->flights, key, klen, (uint32_t)k.hash, NULL};
    s->flights = &me;
    pthread_mutex_unlock(&s->flight_mu);

    void *loaded = NULL;
    size_t loaded_len = 0;
    int err = loader(loader_ctx, key, klen, &loaded, &loaded_len);
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
        err = cache_store_locked(c, s, &k, &v, ttl_ms, cache_now_ns(c), &tick, &g);
        advance = cache_retire(c, s, &g);
        if (err == 0) {
            stored = true;
            /* Every caller gets the value; retain/copy it while it is
             * certainly alive (under the shard lock). */
            struct cache_entry *e = tw_cache_map_find_(s, key, klen, k.hash);
            cache_output(c, e, out);
            for (struct cache_waiter *w = me.waiters; w; w = w->next) {
                struct cache_out wo = {w->value, w->buf, w->cap, w->vlen};
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
                           size_t *vlen, int64_t ttl_ms)
{
    int rc = cache_check_key(c, &key, key_len);
    if (rc)
        return rc;
    if (!c->copy_values || !vlen || (!buf && cap))
        return TW_EINVAL;
    struct cache_out out = {NULL, buf, cap, vlen};
    return cache_take(c, key, key_len, loader, loader_ctx, &out, ttl_ms);
}

int tw_cache_take_copy(struct tw_cache *c, const void *key, size_t key_len,
                       tw_cache_loader_fn *loader, void *loader_ctx, void *buf, size_t cap,
                       size_t *vlen)
{
    return tw_cache_take_copy_ttl(c, key, key_len, loader, loader_ctx, buf, cap, vlen,
                                  c ? c->default_ttl_ms : 0);
}

/* ---- expiry ------------------------------------------------------------ */

/* Expire s's entries due by now_tick, a batch per lock hold, and collect its
 * limbo. Returns how many expired and sets *next to the shard's next expiry.
 * Tables are not shrunk here: readers would have to distrust their misses
 * while a shrink relinks, and a read must not wait on expiry. */
static uint64_t cache_expire_shard(struct tw_cache *c, struct cache_shard *s, uint64_t now_tick,
                                   uint64_t *next, uint64_t *budget)
{
    uint64_t total = 0;
    for (;;) {
        if (budget && *budget == 0) { /* more may be due: run again at once */
            *next = now_tick;
            return total;
        }
        struct cache_garbage g = {0};
        unsigned n = 0, rearmed = 0;
        cache_lock(c, s);
        struct tw_node *t;
        while (n + rearmed < CACHE_EXPIRE_BATCH &&
               (t = tw_wheel_expire_next_node(&s->wheel, now_tick))) {
            struct cache_entry *e = tw_container_of(t, struct cache_entry, timer);
            uint64_t exp = atomic_load_explicit(&e->expires, memory_order_relaxed);
            if (exp > now_tick) {
                /* refreshed since it was armed (cache_store_at_locked left
                 * the timer early): arm it for its expiry now */
                cache_arm(c, s, e, exp, now_tick * CACHE_NS_PER_TICK);
                rearmed++;
                continue;
            }
            tw_cache_map_remove_(c, s, e, false, &g);
            if (c->limit)
                tw_cache_lru_unlink_(s, e);
            tw_cache_garbage_add_(&g, e);
            n++;
        }
        if (n + rearmed < CACHE_EXPIRE_BATCH)
            *next = tw_wheel_next_expiry(&s->wheel);
        if (n) {
            atomic_fetch_sub_explicit(&c->count, n, memory_order_relaxed);
            cache_bump(&s->expirations, n);
        }
        if (g.n)
            tw_cache_retire_locked_(c, s, &g);
        else
            tw_cache_limbo_collect_(c, s, &g, false);
        cache_unlock(c, s);
        tw_cache_garbage_release_(c, &g);
        total += n;
        if (budget)
            *budget -= *budget < n + rearmed + 1 ? *budget : n + rearmed + 1;
        if (n + rearmed < CACHE_EXPIRE_BATCH)
            return total;
    }
}

/* One expiry pass over every shard; *next = the earliest next expiry, or
 * 10 ms from now while some shard still holds limbo. */
static uint64_t cache_expire_all(struct tw_cache *c, uint64_t now_tick, uint64_t *next,
                                 uint64_t *budget)
{
    uint64_t total = 0, earliest = TW_NEVER;
    size_t limbo = 0;
    for (unsigned i = 0; i < c->nshards; i++)
        limbo += atomic_load_explicit(&c->shards[i].limbo_n, memory_order_relaxed);
    if (limbo) {
        tw_cache_epoch_advance_(c);
        tw_cache_epoch_advance_(c);
    }
    limbo = 0;
    for (unsigned i = 0; i < c->nshards; i++) {
        uint64_t n = TW_NEVER;
        total += cache_expire_shard(c, &c->shards[i], now_tick, &n, budget);
        if (n < earliest)
            earliest = n;
        limbo += atomic_load_explicit(&c->shards[i].limbo_n, memory_order_relaxed);
    }
    if (limbo && now_tick + 10 < earliest)
        earliest = now_tick + 10;
    *next = earliest;
    return total;
}

/* Log a line if one is due at now_tick (log_mu held). */
static void cache_maybe_log(struct tw_cache *c, uint64_t now_tick)
{
    if (!c->log || now_tick < c->log_due)
        return;
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    /* Every count is for the interval since the previous line; qpm is a
     * true rate (per minute of the interval's real length); elements is the
     * one figure of now. */
    uint64_t dh = st.hits - c->log_hits, dm = st.misses - c->log_misses;
    uint64_t dev = st.evictions - c->log_evictions, dex = st.expirations - c->log_expirations;
    uint64_t span = now_tick > c->log_at ? now_tick - c->log_at : 1; /* ms */
    char line[320];
    snprintf(line, sizeof line,
             "cache(%s) - last %.1f s: queries: %llu (qpm: %.0f), hits: %llu, misses: %llu, "
             "hit_ratio: %.1f%%, evictions: %llu, expirations: %llu; elements now: %llu",
             c->name, (double)span / 1000.0, (unsigned long long)(dh + dm),
             (double)(dh + dm) * 60000.0 / (double)span, (unsigned long long)dh,
             (unsigned long long)dm, dh + dm ? 100.0 * (double)dh / (double)(dh + dm) : 0.0,
             (unsigned long long)dev, (unsigned long long)dex, (unsigned long long)st.entries);
    c->log_hits = st.hits;
    c->log_misses = st.misses;
    c->log_evictions = st.evictions;
    c->log_expirations = st.expirations;
    c->log_at = now_tick;
    while (c->log_due <= now_tick)
        c->log_due += c->log_interval;
    c->log(c->log_ctx, line);
}

#define CACHE_RUN_BUDGET 4096 /* keys expired per run on the clock (cache_clock_run) */

/* The cache's work as a member of its clock service. */
static uint64_t cache_clock_run(void *ctx, uint64_t now_ns)
{
    struct tw_cache *c = ctx;
    uint64_t now = now_ns > c->epoch_ns ? (now_ns - c->epoch_ns) / CACHE_NS_PER_TICK : 0;
    uint64_t next = TW_NEVER;
    /* Bounded, as the clock's members share its thread: at most
     * CACHE_RUN_BUDGET keys (and a unit per batch) per run; a run that
     * stops early asks to be called again at once. */
    uint64_t budget = CACHE_RUN_BUDGET;
    cache_expire_all(c, now, &next, &budget);
    pthread_mutex_lock(&c->log_mu);
    cache_maybe_log(c, now);
    if (c->log && c->log_due < next)
        next = c->log_due;
    pthread_mutex_unlock(&c->log_mu);
    return next == TW_NEVER ? TW_CLOCK_NEVER : c->epoch_ns + next * CACHE_NS_PER_TICK;
}

int tw_cache_set_now(struct tw_cache *c, uint64_t now_ms)
{
    if (!c || !c->manual || now_ms >= (UINT64_C(1) << 44))
        return TW_EINVAL;
    uint64_t cur = atomic_load(&c->manual_now);
    while (now_ms > cur && !atomic_compare_exchange_weak(&c->manual_now, &cur, now_ms)) {
    }
    return 0;
}

int64_t tw_cache_advance(struct tw_cache *c, uint64_t now_ms)
{
    if (tw_cache_set_now(c, now_ms))
        return TW_EINVAL;
    uint64_t now = atomic_load(&c->manual_now), next;
    uint64_t n = cache_expire_all(c, now, &next, NULL);
    pthread_mutex_lock(&c->log_mu);
    cache_maybe_log(c, now);
    pthread_mutex_unlock(&c->log_mu);
    return (int64_t)n;
}

uint64_t tw_cache_now(const struct tw_cache *c)
{
    return c ? cache_now_ns(c) / CACHE_NS_PER_TICK : 0;
}

/* ---- stats ------------------------------------------------------------- */

int tw_cache_stats(const struct tw_cache *c, struct tw_cache_stats *out)
{
    if (!c || !out)
        return TW_EINVAL;
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i <= c->stripe_mask; i++) {
        struct cache_stripe *st = &c->stripes[i];
        out->hits += tw_cache_stripe_hits_(st);
        out->misses += atomic_load_explicit(&st->misses, memory_order_relaxed);
    }
    for (unsigned i = 0; i < c->nshards; i++) {
        struct cache_shard *s = &c->shards[i];
        out->evictions += atomic_load_explicit(&s->evictions, memory_order_relaxed);
        out->expirations += atomic_load_explicit(&s->expirations, memory_order_relaxed);
    }
    out->entries = atomic_load_explicit(&c->count, memory_order_relaxed);
    uint64_t total = out->hits + out->misses;
    out->hit_ratio = total ? (double)out->hits / (double)total : 0.0;
    return 0;
}

/* ---- create / free ----------------------------------------------------- */

void tw_cache_config_init(struct tw_cache_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->jitter = 0.05;
    cfg->expiry_slack_shift = TW_CACHE_SLACK_SHIFT_DEFAULT;
    cfg->shards = 0; /* by the CPUs: see tw_cache_default_shards */
    cfg->log_interval_ms = 60000;
}

unsigned tw_cache_default_shards(void)
{
    return tw_cache_shards_default_();
}

/* Tear down the first `inited` shards' locks and wheels, free their
 * entries (and values), limbo and tables, and the shard block. No reader
 * may be inside any more. */
static void cache_free_shards(struct tw_cache *c, unsigned inited)
{
    c->freeing = true; /* no slab trims: the shards' locks are going */
    for (unsigned i = 0; i < inited; i++) {
        struct cache_shard *s = &c->shards[i];
        tw_wheel_destroy(&s->wheel);
        struct cache_garbage g = {0};
        tw_cache_limbo_collect_(c, s, &g, true);
        struct cache_table *t = atomic_load_explicit(&s->table, memory_order_relaxed);
        for (size_t b = 0; b <= t->mask; b++) {
            uintptr_t l = atomic_load_explicit(&t->b[b], memory_order_relaxed);
            while (l) {
                struct cache_entry *e = cache_link_entry(l);
                l = atomic_load_explicit(&e->hnext, memory_order_relaxed);
                tw_cache_garbage_add_(&g, e);
            }
        }
        t->free_next = g.tables;
        g.tables = t;
        tw_cache_garbage_release_(c, &g);
        if (c->rwlock)
            pthread_rwlock_destroy(&s->lock.rw);
        else
            pthread_mutex_destroy(&s->lock.mu);
        pthread_cond_destroy(&s->flight_cv);
        pthread_mutex_destroy(&s->flight_mu);
    }
    for (unsigned i = 0; i < inited; i++)
        tw_cache_slab_destroy_(c, &c->shards[i].slab);
    tw_mem_free_(&c->alloc, c->shards_block, c->shards_bytes);
}

static int cache_init_shard(struct tw_cache *c, struct cache_shard *s, uint64_t rng)
{
    memset(s, 0, sizeof *s);
    struct cache_table *t = tw_cache_table_new_(c, CACHE_MIN_BUCKETS);
    if (!t)
        return TW_ENOMEM;
    atomic_init(&s->table, t);
    atomic_init(&s->tmask, t->mask);
    atomic_init(&s->seq, 0);
    atomic_init(&s->limbo_n, 0);
    atomic_init(&s->slab.returned, NULL);
    s->rng = rng ? rng : 1;
    atomic_init(&s->oldest, UINT64_MAX);
    int rc = c->rwlock ? pthread_rwlock_init(&s->lock.rw, NULL)
                       : pthread_mutex_init(&s->lock.mu, NULL);
    if (rc)
        goto fail_table;
    if (pthread_mutex_init(&s->flight_mu, NULL))
        goto fail_lock;
    if (pthread_cond_init(&s->flight_cv, NULL))
        goto fail_flight_mu;
    tw_wheel_init(&s->wheel, atomic_load(&c->manual_now));
    return 0;
fail_flight_mu:
    pthread_mutex_destroy(&s->flight_mu);
fail_lock:
    if (c->rwlock)
        pthread_rwlock_destroy(&s->lock.rw);
    else
        pthread_mutex_destroy(&s->lock.mu);
fail_table:
    tw_cache_table_free_(c, t);
    return TW_ESYS;
}

static bool cache_config_valid(const struct tw_cache_config *cfg)
{
    unsigned n = cfg->shards;
    return cfg->default_ttl_ms > 0 && cfg->jitter >= 0.0 && cfg->jitter < 1.0 &&
           cfg->expiry_slack_shift <= TW_CACHE_SLACK_SHIFT_MAX &&
           n <= CACHE_MAX_SHARDS && (n & (n - 1)) == 0 &&
           (cfg->lock == TW_CACHE_LOCK_MUTEX || cfg->lock == TW_CACHE_LOCK_RWLOCK) &&
           !(cfg->copy_values && cfg->retain_value) && cfg->start_ms < (UINT64_C(1) << 44) &&
           (!cfg->log || cfg->log_interval_ms > 0) &&
           (!cfg->allocator || cfg->allocator->fn) && !(cfg->manual_clock && cfg->clock);
}

int tw_cache_new(struct tw_cache **out, const struct tw_cache_config *cfg)
{
    if (!out || !cfg || !cache_config_valid(cfg))
        return TW_EINVAL;
    struct tw_cache *c = tw_mem_new_(cfg->allocator, sizeof *c, offsetof(struct tw_cache, alloc));
    if (!c)
        return TW_ENOMEM;
    c->default_ttl_ms = cfg->default_ttl_ms;
    c->limit = cfg->limit;
    c->jitter = cfg->jitter;
    c->slack_shift = cfg->expiry_slack_shift;
    c->rwlock = cfg->lock == TW_CACHE_LOCK_RWLOCK;
    c->copy_values = cfg->copy_values;
    c->manual = cfg->manual_clock;
    c->free_value = cfg->free_value;
    c->retain_value = cfg->retain_value;
    c->value_ctx = cfg->value_ctx;
    c->log = cfg->log;
    c->log_ctx = cfg->log_ctx;
    c->log_interval = cfg->log_interval_ms;
    atomic_init(&c->epoch, 2);
    atomic_init(&c->manual_now, c->manual ? cfg->start_ms : 0);
    atomic_init(&c->seq, 0);
    atomic_init(&c->count, 0);
    atomic_init(&c->slab_bytes, 0);
    c->epoch_ns = tw_mono_ns_();
    c->coarse_margin_ns = c->manual || c->limit ? 0 : cache_coarse_margin();
    tw_random_seed_(c->seed);
    tw_hash_mum_seed(c->seed, c->mum);
    c->siphash = cfg->siphash;
    c->log_due = atomic_load(&c->manual_now) + c->log_interval;
    c->log_at = c->log_due - c->log_interval;

    int rc = TW_ENOMEM;
    const char *name = cfg->name ? cfg->name : "cache";
    c->name_bytes = strlen(name) + 1;
    c->name = tw_mem_alloc_(&c->alloc, c->name_bytes);
    if (!c->name)
        goto fail_cache;
    memcpy(c->name, name, c->name_bytes);

    unsigned nst = tw_cache_stripes_default_();
    c->stripe_mask = nst - 1;
    c->stripes_bytes = (size_t)nst * sizeof(struct cache_stripe) + 64;
    c->stripes_block = tw_mem_alloc_(&c->alloc, c->stripes_bytes);
    if (!c->stripes_block)
        goto fail_name;
    c->stripes = (struct cache_stripe *)(((uintptr_t)c->stripes_block + 63) & ~(uintptr_t)63);
    for (unsigned i = 0; i < nst; i++) {
        atomic_init(&c->stripes[i].active[0], 0);
        atomic_init(&c->stripes[i].active[1], 0);
        atomic_init(&c->stripes[i].hits, 0);
        atomic_init(&c->stripes[i].misses, 0);
        atomic_init(&c->stripes[i].draining, 0);
    }

    c->nshards = cfg->shards ? cfg->shards : tw_cache_shards_default_();
    unsigned bits = 0;
    while ((1u << bits) < c->nshards)
        bits++;
    c->shard_shift = 32 - bits;
    c->shards_bytes = (size_t)c->nshards * sizeof(struct cache_shard) + 64;
    c->shards_block = tw_mem_alloc_(&c->alloc, c->shards_bytes);
    if (!c->shards_block)
        goto fail_stripes;
    c->shards = (struct cache_shard *)(((uintptr_t)c->shards_block + 63) & ~(uintptr_t)63);
    unsigned inited = 0;
    for (; inited < c->nshards; inited++) {
        rc = cache_init_shard(c, &c->shards[inited],
                              c->seed[0] ^ (UINT64_C(0x9e3779b97f4a7c15) * (inited + 1)));
        if (rc)
            goto fail_shards;
    }
    rc = TW_ESYS;
    if (pthread_mutex_init(&c->evict_mu, NULL))
        goto fail_shards;
    if (pthread_mutex_init(&c->log_mu, NULL))
        goto fail_evict;
    if (!c->manual) {
        c->clock = cfg->clock;
        if (!c->clock) {
            rc = tw_clock_new(&c->clock, cfg->allocator);
            if (rc)
                goto fail_log_mu;
            c->own_clock = true;
        }
        rc = tw_clock_join(c->clock, cache_clock_run, c, TW_CLOCK_NEVER, &c->member);
        if (rc)
            goto fail_clock;
    }
    *out = c;
    return 0;

fail_clock:
    if (c->own_clock)
        tw_clock_free(c->clock);
fail_log_mu:
    pthread_mutex_destroy(&c->log_mu);
fail_evict:
    pthread_mutex_destroy(&c->evict_mu);
fail_shards:
    cache_free_shards(c, inited);
fail_stripes:
    tw_mem_free_(&c->alloc, c->stripes_block, c->stripes_bytes);
fail_name:
    tw_mem_free_(&c->alloc, c->name, c->name_bytes);
fail_cache:
    tw_mem_free_(&c->alloc, c, sizeof *c);
    return rc;
}

int tw_cache_free(struct tw_cache *c)
{
    if (!c)
        return 0;
    if (c->member)
        tw_clock_leave(c->clock, c->member);
    if (c->own_clock)
        tw_clock_free(c->clock);
    pthread_mutex_destroy(&c->log_mu);
    pthread_mutex_destroy(&c->evict_mu);
    cache_free_shards(c, c->nshards);
    struct tw_allocator alloc = c->alloc;
    tw_mem_free_(&alloc, c->stripes_block, c->stripes_bytes);
    tw_mem_free_(&alloc, c->name, c->name_bytes);
    tw_mem_free_(&alloc, c, sizeof *c);
    return 0;
}
