/* SPDX-License-Identifier: MIT */
/* twheel cache internals, shared by the files of src/cache/: the design
 * and the lifetime (cache.c), single reads (get.c), writes of one key
 * (set.c), the batched calls (batch.c), take's single flight (take.c), the
 * LRU and eviction (lru.c), expiry (expire.c), the figures (stats.c), a
 * shard's setup (shard.c), the table (map.c), read sections and reclamation
 * (epoch.c), entry memory (slab.c). Each file includes this header and no
 * other of the layer's; what a file offers the others is declared here, in
 * its section, and what the hot paths of get, set and expiry need from
 * several files is defined here, inline.
 *
 * Layout: a cache is an array of shards; a key's shard is the top bits of
 * the low 32 bits of its 64-bit keyed hash (tw_hash_mum, or SipHash-1-3 with
 * cfg.siphash: cache_hash), its bucket the low bits, its
 * link tag the top 14 bits. A shard holds, under its lock: a hash table
 * (buckets of 8 tagged links), an LRU list (only maintained when the cache
 * has a limit), a core wheel with 1 ms ticks, and the entries' timers in it.
 *
 * Readers (get, and the hit path of take) take no lock: see the design
 * comment of cache.c. Writers (set, del, expiry, eviction) still take the
 * shard lock and publish every change with release stores.
 *
 * Invariant (what makes the races of docs/contracts.md impossible): an entry is
 * in its shard's table  <=>  its timer is pending on its shard's wheel, and
 * the timer's deadline is the entry's expiry tick (with expiry slack: at most
 * slack after it, or, after a refresh of the same pointer, at or before it:
 * the expiry pass re-arms such a timer for the entry's expiry instead of
 * expiring it). They change together, under the shard lock, and nowhere else.
 */
#ifndef TWHEEL_CACHE_INTERNAL_H
#define TWHEEL_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "common/hash.h"
#include "common/time.h"
#include "twheel/cache.h"
#include "twheel/clock.h"
#include "twheel/wheel.h"

#define CACHE_NS_PER_TICK UINT64_C(1000000) /* one wheel tick = 1 ms */
#define CACHE_EXPIRE_BATCH 64   /* entries expired per hold of a shard lock */
#define CACHE_MIN_BUCKETS 16u
#define CACHE_MAX_SHARDS 4096u
#define CACHE_MAX_STRIPES 1024u
#define CACHE_LIMBO_ADVANCE 64  /* limbo entries in a shard that make a writer advance the epoch */
#define CACHE_LRU_WALK 64       /* longest walk of an LRU re-insertion */
#define CACHE_LRU_SETTLE_MOVES 1024 /* most LRU re-insertions per eviction */
#define CACHE_SLAB_MAX 512      /* entry blocks up to this size come from the shard's slab */
#define CACHE_SLAB_CLASSES (CACHE_SLAB_MAX / 16 + 1)
#define CACHE_SLAB_TRIM ((size_t)256 << 10) /* slab bytes that an emptied cache returns */

/* One key: a 54-byte header on LP64 (value pointer included), then the key
 * bytes (and in copy mode the value bytes), allocated as one block. A cache
 * with an LRU limit puts a struct cache_lru just before each entry in the
 * same block (86 bytes then); a cache without one does not pay for it.
 *
 * Layout for the reader: everything a hit reads (hnext, value, expires,
 * hash, key_len, the key) is contiguous after the wheel node, and the header
 * is 54 bytes rather than 56 (a 16-bit key_len), so an entry with a key of up
 * to 10 bytes ("key:999999", a decimal id, a short token) is a 64-byte block,
 * which the slab carves 64-byte aligned: a hit then reads one cache line of
 * the entry (with a 56-byte header such an entry took an 80-byte block whose
 * hash-to-key bytes straddled two lines in 2 blocks of 4). Keys are compared
 * without libc's memcmp up to 16 bytes (cache/map.c: its vector load read
 * past the key into the next block's line). Keys of 0xFFFF
 * bytes or more store key_len = CACHE_KEY_LEN_LONG and their real length in 4
 * bytes at key[0], the key bytes after them (cache_ekey/cache_ekey_len).
 *
 * Readers walk chains and read entries without any lock (see cache.c), so
 * every field a reader looks at is either immutable once the entry is
 * published (hash, key_len, key and copy-mode value bytes, value.len) or an
 * atomic (hnext, value.ptr, expires, the LRU stamp). An entry that leaves
 * the table keeps its hnext, so a reader standing on it walks on; its memory
 * is reclaimed only after every reader that could see it has left (epochs). */
struct cache_entry {
    struct tw_node timer;        /* pending on the shard's wheel; deadline = expiry tick.
                                  * Once unlinked, timer.next links it in garbage lists. */
    _Atomic uintptr_t hnext;     /* link to the next in the bucket's chain (cache_link) */
    union {
        _Atomic(void *) ptr; /* pointer mode: the value */
        size_t len;          /* copy mode: bytes after the key (immutable) */
    } value;
    _Atomic uint64_t expires;    /* the expiry tick (= the timer's deadline), for readers */
    uint32_t hash;               /* low 32 bits of the key's hash */
    uint16_t key_len;            /* key length, or CACHE_KEY_LEN_LONG */
    unsigned char key[];         /* key_len bytes, then the value bytes in copy mode */
};

#define CACHE_KEY_LEN_LONG 0xFFFFu
/* Bytes of an entry before its key (sizeof would round 54 up to 56). */
#define CACHE_ENTRY_HDR offsetof(struct cache_entry, key)
/* A link's bit 0 tells a tagged link from a plain address (cache_link). */
_Static_assert(alignof(struct cache_entry) >= 2, "entry addresses have bit 0 clear");

/* Bytes an entry needs for a key of key_len bytes (its length prefix if long). */
static inline size_t cache_key_bytes(size_t key_len)
{
    return key_len >= CACHE_KEY_LEN_LONG ? key_len + sizeof(uint32_t) : key_len;
}

static inline size_t cache_ekey_len(const struct cache_entry *e)
{
    if (e->key_len != CACHE_KEY_LEN_LONG)
        return e->key_len;
    uint32_t n;
    memcpy(&n, e->key, sizeof n);
    return n;
}

static inline const unsigned char *cache_ekey(const struct cache_entry *e)
{
    return e->key_len != CACHE_KEY_LEN_LONG ? e->key : e->key + sizeof(uint32_t);
}

/* Store key_len and the key bytes into a new entry; returns where the value
 * bytes (copy mode) go. */
static inline unsigned char *cache_eset_key(struct cache_entry *e, const void *key, size_t key_len)
{
    unsigned char *p = e->key;
    if (key_len >= CACHE_KEY_LEN_LONG) {
        uint32_t n = (uint32_t)key_len;
        e->key_len = CACHE_KEY_LEN_LONG;
        memcpy(p, &n, sizeof n);
        p += sizeof n;
    } else {
        e->key_len = (uint16_t)key_len;
    }
    if (key_len)
        memcpy(p, key, key_len);
    return p + key_len;
}

/* LRU links, in front of the entry (limit > 0 only). The list is ordered by
 * pos (head = largest); stamp >= pos is the last use, which a reader raises
 * without a lock. Eviction re-inserts a tail whose stamp passed its pos. */
struct cache_lru {
    struct cache_entry *prev;    /* toward the most recently used */
    struct cache_entry *next;    /* toward the least recently used */
    uint64_t pos;                /* the stamp the entry was placed with */
    _Atomic uint64_t stamp;      /* last set or hit: tick (real clock) or a counter (manual) */
};

static inline struct cache_lru *cache_lru_of(const struct cache_entry *e)
{
    return (struct cache_lru *)(void *)((char *)(uintptr_t)e - sizeof(struct cache_lru));
}

/* The table is an array of buckets of CACHE_SLOTS links on one cache line
 * (when the array is 64-byte aligned: always for the huge tables of large
 * caches); each slot heads a chain through the entries' hnext. A key's
 * bucket is fixed by its hash; a new key takes a free slot of its bucket,
 * else goes in front of one slot's chain (rare below a load of 1).
 *
 * A link (a slot, or an entry's hnext) holds the next entry's address and,
 * where that address leaves bits 48-63 clear (x86-64, AArch64), a tag:
 * bit 0 set (entries are at least 8-byte aligned, so an address never has
 * it), bits 48-61 = 14 bits of the entry's key hash that neither the
 * bucket nor the shard uses, bit 62 = "that entry had a successor when the
 * link was written" (never clear while it has one: a successor is only ever
 * added by linking a new entry in front, which writes a fresh link). So a
 * read of a hit loads its bucket's line and then only the entry whose tag
 * matches (a wrong tag matches 1 time in 16,384), and a miss usually reads
 * no entry at all; it reads a non-matching entry only to walk past it to
 * a successor. An address with any of bits 48-63 set is linked untagged,
 * as the plain address (bit 0 clear): 5-level paging (user addresses up to
 * 2^56) and AArch64 top-byte tags (Android's heap tag 0xb4, HWASan, MTE)
 * give such addresses, and the flag is the low bit rather than bit 63 so
 * that a plain address with bit 63 set is never mistaken for a tagged link
 * (test_cache_map: test_link_high_addresses). The walk then reads and
 * compares such an entry as without tags. A link is one atomic word: a
 * reader never sees a tag with another entry's address. */
#define CACHE_SLOTS 8
/* -DCACHE_LINK_TAGS=0 builds the untagged links of other targets (32-bit,
 * other 64-bit architectures) on x86-64 or AArch64, to test them there. */
#ifndef CACHE_LINK_TAGS
#if (defined(__x86_64__) || defined(__aarch64__)) && UINTPTR_MAX == UINT64_MAX
#define CACHE_LINK_TAGS 1
#else
#define CACHE_LINK_TAGS 0
#endif
#endif
#if CACHE_LINK_TAGS
#define CACHE_LINK_TAGGED UINT64_C(1)
#define CACHE_LINK_LOW48 ((UINT64_C(1) << 48) - 1)
#define CACHE_LINK_ADDR (CACHE_LINK_LOW48 & ~CACHE_LINK_TAGGED)
#define CACHE_LINK_NEXT (UINT64_C(1) << 62)
#define CACHE_LINK_TAG (UINT64_C(0x3fff) << 48)
#endif

/* The tag of a key's 64-bit hash (bits 50-63 of it; 0 without tags). */
static inline uintptr_t cache_tag_of(uint64_t hash)
{
#if CACHE_LINK_TAGS
    return (uintptr_t)((hash >> 50) << 48);
#else
    (void)hash;
    return 0;
#endif
}

/* The link to e (NULL: 0) whose key has tag `tag`, and whose hnext is
 * `next` (the link e holds, to know whether e has a successor). */
static inline uintptr_t cache_link(const struct cache_entry *e, uintptr_t tag, uintptr_t next)
{
    uintptr_t a = (uintptr_t)e;
#if CACHE_LINK_TAGS
    if (!e || (a & ~(uintptr_t)CACHE_LINK_ADDR))
        return a; /* untaggable address: plain (bit 0 clear: entries are aligned) */
    return a | CACHE_LINK_TAGGED | tag | (next ? CACHE_LINK_NEXT : 0);
#else
    (void)tag;
    (void)next;
    return a;
#endif
}

/* The entry a link points to. */
static inline struct cache_entry *cache_link_entry(uintptr_t l)
{
#if CACHE_LINK_TAGS
    if (l & CACHE_LINK_TAGGED)
        l &= CACHE_LINK_ADDR;
#endif
    return (struct cache_entry *)l;
}

/* The tag a link carries for its entry, to write another link to it. */
static inline uintptr_t cache_link_tag(uintptr_t l)
{
#if CACHE_LINK_TAGS
    return (l & CACHE_LINK_TAGGED) ? l & CACHE_LINK_TAG : 0;
#else
    (void)l;
    return 0;
#endif
}

/* Whether the entry behind link l may hold a key of tag `tag`. */
static inline bool cache_link_may_match(uintptr_t l, uintptr_t tag)
{
#if CACHE_LINK_TAGS
    return !(l & CACHE_LINK_TAGGED) || (l & CACHE_LINK_TAG) == tag;
#else
    (void)l;
    (void)tag;
    return true;
#endif
}

/* Whether the entry behind link l may have a successor in its chain. */
static inline bool cache_link_may_continue(uintptr_t l)
{
#if CACHE_LINK_TAGS
    return !(l & CACHE_LINK_TAGGED) || (l & CACHE_LINK_NEXT);
#else
    (void)l;
    return true;
#endif
}

/* A bucket array; replaced whole when the table grows or shrinks. b[] starts
 * 64 bytes in, so that a 64-byte aligned array has one bucket per line. */
struct cache_table {
    size_t mask;                   /* slots - 1 (slots: a power of two >= CACHE_SLOTS) */
    struct cache_table *free_next; /* garbage link once replaced */
    char pad[64 - sizeof(size_t) - sizeof(void *)];
    _Atomic uintptr_t b[];         /* CACHE_SLOTS links per bucket */
};

/* Where in its bucket a key of tag `tag` is looked for first: inserts take
 * the first free slot from there on, so a hit is usually the first slot a
 * read looks at (3 bits of the tag; 0 without tags). */
static inline unsigned cache_slot_start(uintptr_t tag)
{
#if CACHE_LINK_TAGS
    return (unsigned)(tag >> 48) & (CACHE_SLOTS - 1);
#else
    (void)tag;
    return 0;
#endif
}

/* The first slot of the bucket of a stored (low 32 bits) or full hash. */
static inline size_t cache_bucket_of(const struct cache_table *t, uint64_t hash)
{
    return ((size_t)(uint32_t)hash * CACHE_SLOTS) & t->mask;
}

/* Unlinked entries and replaced tables, freed once no reader can see them. */
struct cache_garbage {
    struct tw_node *entries;     /* linked through the entries' timer.next */
    struct cache_table *tables;  /* linked through free_next */
    size_t n;
};

/* A shard's garbage retired at epoch `tag`: freed once the epoch is tag + 2. */
struct cache_limbo {
    struct cache_garbage g;
    uint64_t tag;
};

/* One stripe of the readers' epoch counters and hit counters, on a cache
 * line of its own. Readers pick it by CPU, so two readers running at once
 * write the same stripe only if the thread moved between CPUs mid-call.
 *
 * active[p] packs two counts into one word, so that a get's hit is counted
 * by the same atomic add that leaves the read section (one locked
 * instruction instead of two): the low CACHE_RD_BITS bits are the readers
 * inside with epoch parity p (enter adds 1, leaving subtracts 1), the bits
 * above count the hits of the sections that left with a hit (they leave by
 * adding CACHE_HIT_UNIT - 1). Before the hit count can reach the top of the
 * word, the first hit's exit that finds it at CACHE_HIT_DRAIN or past moves
 * it into `hits` (a compare-and-swap that subtracts exactly what it adds
 * there), holding `draining` so that stats never sees half a move. */
struct cache_stripe {
    _Alignas(64) _Atomic uint64_t active[2]; /* readers inside + hits, by epoch parity */
    _Atomic uint64_t hits, misses;
    _Atomic uint32_t draining; /* 1 while a drain or a stats call holds the three hit counts */
};
#define CACHE_RD_BITS 24 /* < 2^24 readers inside one stripe at once */
#define CACHE_RD_INSIDE ((UINT64_C(1) << CACHE_RD_BITS) - 1)
#define CACHE_HIT_UNIT (UINT64_C(1) << CACHE_RD_BITS)
#define CACHE_HIT_DRAIN (UINT64_C(1) << 38) /* hits kept in a word: far below 2^40 */

/* A caller waiting on another caller's load of the same key (single flight).
 * Lives on the waiter's stack; the leader fills it in and sets done. */
struct cache_waiter {
    struct cache_waiter *next;
    void **value;       /* pointer mode output */
    void *buf;          /* copy mode output */
    size_t cap;
    size_t *value_len;
    int err;
    bool done;
};

/* A load in progress; lives on the leader's stack, listed in its shard while
 * the loader runs. Guarded by the shard's flight_mu. */
struct cache_flight {
    struct cache_flight *next;
    const void *key; /* the leader's key: valid while the flight is listed */
    size_t key_len;
    uint32_t hash;
    struct cache_waiter *waiters;
};

/* A slab chunk's header, at its start. */
struct cache_chunk {
    struct cache_chunk *next;
    size_t bytes;
};

/* A shard's entry memory (src/cache/slab.c). Everything but `returned` is
 * guarded by the shard lock. */
struct cache_slab {
    struct cache_free *free[CACHE_SLAB_CLASSES]; /* free blocks by size / 16 */
    _Atomic(struct cache_free *) returned; /* given back without the lock */
    struct cache_chunk *chunks;  /* newest first; carving from the newest */
    char *bump, *end;            /* the newest chunk's uncarved bytes */
    bool hugified;               /* the newest chunk was given huge pages */
    size_t total;                /* bytes in chunks */
    size_t out;                  /* blocks handed out and not drained back */
};

struct cache_shard {
    /* Read by readers without the lock; written (rarely) under it. */
    _Alignas(64) _Atomic(struct cache_table *) table;
    _Atomic uint32_t seq; /* odd while a resize relinks the chains */
    /* table's mask, for cache_prefetch_early_ only (a hint read outside
     * any read section: never used to read memory) */
    _Atomic size_t tmask;

    /* Everything below is the writers' and guarded by the lock. */
    _Alignas(64) union {
        pthread_mutex_t mu;
        pthread_rwlock_t rw;
    } lock;
    size_t count;                 /* entries in the table */
    struct cache_entry *lru_head; /* most recently used (limit > 0 only) */
    struct cache_entry *lru_tail; /* least recently used */
    uint64_t rng;                 /* jitter state (xorshift64*) */
    /* Read without the lock by eviction to pick a shard: lru_tail's pos, or
     * UINT64_MAX when the LRU list is empty. Written under the lock. */
    _Atomic uint64_t oldest;
    /* Counters written under the lock, read by stats without it. */
    _Atomic uint64_t evictions, expirations;
    struct cache_limbo limbo[3];  /* by tag % 3 */
    _Atomic size_t limbo_n;       /* entries and tables in limbo; written under the lock */
    /* Single flight: flights and the condition waiters sleep on. flight_mu is
     * taken before the shard lock, never after. */
    pthread_mutex_t flight_mu;
    pthread_cond_t flight_cv;
    struct cache_flight *flights;
    struct cache_slab slab;
    struct tw_wheel wheel;
};

struct tw_clock;
struct tw_clock_member;

struct tw_cache {
    /* Read by every reader, written only by an epoch advance: alone on its
     * cache line whatever the block's alignment (malloc gives 16). */
    char pad_epoch0[64];
    _Atomic uint64_t epoch;
    char pad_epoch1[64 - sizeof(uint64_t)];

    struct cache_shard *shards; /* nshards of them, 64-byte aligned */
    void *shards_block;         /* what was allocated for them */
    size_t shards_bytes;
    unsigned nshards;
    unsigned shard_shift;       /* 32 - log2(nshards): a key's shard is the top bits of
                                 * its hash's low 32 bits (so an entry's stored hash
                                 * names its shard); 32 when one shard */
    struct cache_stripe *stripes; /* stripe_mask + 1 of them */
    void *stripes_block;
    size_t stripes_bytes;
    unsigned stripe_mask;
    uint64_t seed[2];           /* hash key, random per instance */
    uint64_t mum[2];            /* tw_hash_mum's secret words, from seed */

    /* Configuration, fixed after creation. */
    int64_t default_ttl_ms;
    size_t limit;
    double jitter;
    unsigned slack_shift;       /* expiry_slack_shift: 0 = exact timers */
    bool rwlock;
    bool copy_values;
    bool manual;
    bool siphash;               /* cfg.siphash: SipHash-1-3 instead of tw_hash_mum */
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
    uint64_t coarse_margin_ns;  /* reads' fast liveness proof (cache_surely_live); 0 = off */
    _Atomic uint64_t manual_now; /* ticks (manual clock) */
    _Atomic uint64_t seq;       /* LRU stamps under the manual clock */

    _Atomic uint64_t count;     /* entries in all shards */
    pthread_mutex_t evict_mu;   /* one evictor at a time; taken before shard locks */

    /* Expiry: a member of a clock service (cfg.clock, or one of our own). */
    struct tw_clock *clock;
    struct tw_clock_member *member;
    bool own_clock;
    bool freeing;               /* tw_cache_free is tearing the shards down */
    _Atomic size_t slab_bytes;  /* all shards' slab chunks (cache/slab.c) */
    pthread_mutex_t log_mu;     /* guards the log fields; the "clock lock" of the log callback */
    uint64_t log_due;           /* next log tick */
    uint64_t log_hits, log_misses; /* totals at the previous log line */
    uint64_t log_evictions, log_expirations; /* ... likewise */
    uint64_t log_at;            /* tick of the previous line (creation at first) */
};

/* ---- src/cache/map.c -------------------------------------------------- */


/* Find key in s under the shard lock (hash is the full 64-bit hash). */
struct cache_entry *tw_cache_map_find_(const struct cache_shard *s, const void *key, size_t key_len,
                                       uint64_t hash);
/* Find key without the lock (inside a read section): *torn is set when a
 * resize ran meanwhile, so that a miss cannot be trusted. */
struct cache_entry *tw_cache_map_find_rcu_(const struct cache_shard *s, const void *key,
                                           size_t key_len, uint64_t hash, bool *torn);
/* Key compares and the lock-free lookup, inline here so that a get's hit
 * path is one function (cache_get). */
static inline uint64_t cache_ld8(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t cache_ld4(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Whether n bytes at a and b are equal, reading no byte outside them: the
 * libc memcmp compares short keys with a 32-byte vector load, which in a
 * 64-byte entry reaches into the next block's cache line (about 0.8 extra
 * missed lines per hit at 10^6 keys). Short keys are
 * compared with two overlapping loads of each side instead. */
static inline bool cache_mem_eq(const unsigned char *a, const unsigned char *b, size_t n)
{
    if (n >= 8) {
        if (n > 16)
            return memcmp(a, b, n) == 0;
        return cache_ld8(a) == cache_ld8(b) && cache_ld8(a + n - 8) == cache_ld8(b + n - 8);
    }
    if (n >= 4)
        return cache_ld4(a) == cache_ld4(b) && cache_ld4(a + n - 4) == cache_ld4(b + n - 4);
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

static inline bool cache_key_eq(const struct cache_entry *e, const void *key, size_t key_len,
                                uint32_t h)
{
    if (e->hash != h)
        return false;
    if (key_len < CACHE_KEY_LEN_LONG)
        return e->key_len == key_len && cache_mem_eq(e->key, key, key_len);
    return cache_ekey_len(e) == key_len && memcmp(cache_ekey(e), key, key_len) == 0;
}

/* Lock-free lookup. A hit is always a true hit: the entry's key bytes never
 * change, and the entry was in the table at some instant of the walk (entries
 * leave a chain keeping their hnext). A miss is only trusted if no resize
 * relinked chains meanwhile (seq unchanged and even): a resize may move an
 * entry behind a link whose "successor" bit was clear when read. The walk
 * is bounded, so a chain relinked under our feet cannot keep us forever.
 * Entries are read only behind a matching tag or to walk on to a successor:
 * a hit at the head of a slot reads its bucket's line and its own entry. */
static inline struct cache_entry *tw_cache_map_find_rcu_inline_(const struct cache_shard *s,
                                                                const void *key, size_t key_len,
                                                                uint64_t hash, bool *torn)
{
    uint32_t h = (uint32_t)hash;
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (seq & 1) {
        *torn = true;
        return NULL;
    }
    /* seq_cst loads (plain moves on x86, ldar on Arm, as acquire would be):
     * with the reader's seq_cst entry into its read section and the
     * writer's seq_cst fence after an unlink, C11 then guarantees that a
     * reader the writer did not see as inside sees the unlink (cache/epoch.c). */
    const struct cache_table *t = atomic_load_explicit(&s->table, memory_order_seq_cst);
    const _Atomic uintptr_t *bk = &t->b[cache_bucket_of(t, hash)];
    uintptr_t tag = cache_tag_of(hash);
    unsigned j0 = cache_slot_start(tag);
    size_t steps = 0;
    for (unsigned k = 0; k < CACHE_SLOTS; k++) {
        unsigned j = (j0 + k) & (CACHE_SLOTS - 1);
        for (uintptr_t l = atomic_load_explicit(&bk[j], memory_order_seq_cst); l;) {
            struct cache_entry *e = cache_link_entry(l);
            if (cache_link_may_match(l, tag) && cache_key_eq(e, key, key_len, h))
                return e;
            if (!cache_link_may_continue(l) || ++steps > 4096)
                break;
            l = atomic_load_explicit(&e->hnext, memory_order_seq_cst);
        }
    }
    atomic_thread_fence(memory_order_acquire);
    *torn = atomic_load_explicit(&s->seq, memory_order_relaxed) != seq || steps > 4096;
    return NULL;
}

/* Prefetch the bucket of `hash` in s before entering the read section, so
 * that the bucket's miss runs while the section is entered (its locked add
 * would otherwise hold the bucket's load back). Outside a section the
 * table may be replaced and freed at any time, so nothing is read from it:
 * the address comes from the shard's table pointer and tmask, as an
 * integer, and a prefetch of an address that is no longer mapped is a
 * no-op on the targets that have one (no fault). */
static inline void cache_prefetch_early_(const struct cache_shard *s, uint64_t hash)
{
    uintptr_t t = (uintptr_t)atomic_load_explicit(&s->table, memory_order_relaxed);
    size_t mask = atomic_load_explicit(&s->tmask, memory_order_relaxed);
    size_t slot = ((size_t)(uint32_t)hash * CACHE_SLOTS) & mask;
    __builtin_prefetch((const void *)(t + offsetof(struct cache_table, b) +
                                      slot * sizeof(uintptr_t)));
}

/* Link e into the table (e->hash set, hash its key's full hash; the key is
 * absent). May grow the table
 * (the old bucket array goes to g); a failed growth is ignored. */
void tw_cache_map_insert_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                          uint64_t hash, struct cache_garbage *g);
/* Unlink e (present) from the table; e keeps its hnext for readers on it.
 * With may_shrink, a table below 1/16 key per link is halved (old array
 * to g). */
void tw_cache_map_remove_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                          bool may_shrink, struct cache_garbage *g);
/* Replace old (present) by e with the same key (full hash `hash`), in place
 * in its chain. */
void tw_cache_map_replace_(struct cache_shard *s, struct cache_entry *old,
                           struct cache_entry *e, uint64_t hash);
/* Allocate an empty table of n buckets (a power of two). */
struct cache_table *tw_cache_table_new_(struct tw_cache *c, size_t n);
void tw_cache_table_free_(struct tw_cache *c, struct cache_table *t);

/* ---- src/cache/lru.c -------------------------------------------------- */

/* LRU list, ordered by pos; each keeps s->oldest up to date. */
void tw_cache_lru_push_(struct cache_shard *s, struct cache_entry *e, uint64_t stamp);
void tw_cache_lru_unlink_(struct cache_shard *s, struct cache_entry *e);
/* Re-insert tails whose stamp passed their pos, until the tail is the least
 * recently used of the shard (up to clock resolution). */
void tw_cache_lru_settle_(struct cache_shard *s);
/* Evict least recently used keys while the cache holds more than its limit
 * (src/cache/lru.c); the test is inline, so a cache without a limit pays
 * no call. */
void tw_cache_evict_(struct tw_cache *c);
static inline void cache_evict(struct tw_cache *c)
{
    if (c->limit && atomic_load_explicit(&c->count, memory_order_relaxed) > c->limit)
        tw_cache_evict_(c);
}

/* ---- src/cache/epoch.c ------------------------------------------------ */

/* A read section: readers of the same stripe and epoch parity. Entering
 * and leaving are inline (a get's whole hit path is one function): see
 * cache/epoch.c for the argument. */
struct cache_rd {
    struct cache_stripe *st;
    unsigned idx;
};

#if defined(__linux__)
/* glibc and musl both have it (glibc reads it from the thread's rseq area);
 * declared here too so that a strict _POSIX_C_SOURCE build (the
 * amalgamation) still sees it. */
extern int sched_getcpu(void);
#endif

static inline struct cache_stripe *tw_cache_stripe_(struct tw_cache *c)
{
    int cpu = -1;
#if defined(__linux__)
    cpu = sched_getcpu();
#endif
    if (cpu < 0) {
        /* No CPU number: spread threads by their stack's address. */
        char probe;
        uintptr_t a = (uintptr_t)&probe >> 16;
        cpu = (int)((a * UINT64_C(0x9e3779b97f4a7c15)) >> 40);
    }
    return &c->stripes[(unsigned)cpu & c->stripe_mask];
}

static inline void tw_cache_rd_enter_(struct tw_cache *c, struct cache_rd *rd)
{
    struct cache_stripe *st = tw_cache_stripe_(c);
    for (;;) {
        uint64_t e = atomic_load_explicit(&c->epoch, memory_order_seq_cst);
        atomic_fetch_add_explicit(&st->active[e & 1], 1, memory_order_seq_cst);
        if (atomic_load_explicit(&c->epoch, memory_order_seq_cst) == e) {
            rd->st = st;
            rd->idx = (unsigned)(e & 1);
            return;
        }
        atomic_fetch_sub_explicit(&st->active[e & 1], 1, memory_order_relaxed);
    }
}

static inline void tw_cache_rd_exit_(struct cache_rd *rd)
{
    atomic_fetch_sub_explicit(&rd->st->active[rd->idx], 1, memory_order_release);
}

#ifndef CACHE_DRAIN_TEST_HOOK
/* test_cache_hit defines it to pause a drain between its two steps. */
#define CACHE_DRAIN_TEST_HOOK(st) ((void)(st))
#endif

/* Move a stripe word's hits into st->hits (rare: once per 2^38 hits). */
/* The hits are in neither place between the compare-and-swap and the add,
 * so the move holds st->draining, which stats holds too while it reads the
 * three counts (tw_cache_stripe_hits_): a stats call then sees the move
 * whole or not at all. A reader that finds it held (another drain, or a
 * stats call reading) leaves its hits in the word: the next hit's exit
 * drains them. Cold and out of line: the hit path only calls it. */
static __attribute__((noinline, cold, unused)) void tw_cache_rd_drain_(struct cache_stripe *st,
                                                                      unsigned idx)
{
    if (atomic_exchange_explicit(&st->draining, 1, memory_order_acquire))
        return;
    uint64_t x = atomic_load_explicit(&st->active[idx], memory_order_relaxed);
    while ((x >> CACHE_RD_BITS) >= CACHE_HIT_DRAIN) {
        uint64_t h = x >> CACHE_RD_BITS;
        if (atomic_compare_exchange_weak_explicit(&st->active[idx], &x, x - h * CACHE_HIT_UNIT,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed)) {
            CACHE_DRAIN_TEST_HOOK(st);
            atomic_fetch_add_explicit(&st->hits, h, memory_order_relaxed);
            break;
        }
    }
    atomic_store_explicit(&st->draining, 0, memory_order_release);
}

/* Leave the read section and count one hit, with one atomic add. */
static inline void tw_cache_rd_exit_hit_(struct cache_rd *rd)
{
    uint64_t old = atomic_fetch_add_explicit(&rd->st->active[rd->idx], CACHE_HIT_UNIT - 1,
                                             memory_order_release);
    if (__builtin_expect(old >= CACHE_HIT_DRAIN * CACHE_HIT_UNIT, 0))
        tw_cache_rd_drain_(rd->st, rd->idx);
}

/* Hits counted in a stripe: its `hits` plus both words' high bits, read
 * holding st->draining (no drain half done; src/cache/epoch.c). Exact and,
 * from one caller to the next, never decreasing. */
uint64_t tw_cache_stripe_hits_(struct cache_stripe *st);
/* Garbage g was just unlinked under s's lock (held): keep it in g to be
 * freed at once when no reader is inside any read section, else move it to
 * s's limbo (and take out of limbo into g whatever has become safe).
 * Returns whether the writer should try to advance the epoch afterwards. */
bool tw_cache_retire_locked_(struct tw_cache *c, struct cache_shard *s,
                             struct cache_garbage *g);
/* Take what has become safe out of s's limbo into g (lock held). */
void tw_cache_limbo_collect_(struct tw_cache *c, struct cache_shard *s,
                             struct cache_garbage *g, bool all);
/* Advance the epoch if no reader is still inside the one before. */
bool tw_cache_epoch_advance_(struct tw_cache *c);
/* Free g's entries (free_value on pointer-mode values) and tables. */
void tw_cache_garbage_release_(struct tw_cache *c, struct cache_garbage *g);
static inline void tw_cache_garbage_add_(struct cache_garbage *g, struct cache_entry *e)
{
    e->timer.next = g->entries;
    g->entries = &e->timer;
    g->n++;
}
/* Limbo: reclaim every shard's (expiry pass, advance); returns entries left. */
size_t tw_cache_reclaim_(struct tw_cache *c);
/* Stripes for this machine: a power of two >= the CPUs configured. */
unsigned tw_cache_stripes_default_(void);

/* ---- src/cache/slab.c ------------------------------------------------- */

/* Whether a block of `bytes` comes from the slab (else the allocator). */
bool tw_cache_slab_fits_(size_t bytes);
/* A block of `bytes` (<= CACHE_SLAB_MAX) under the shard lock, or NULL. */
void *tw_cache_slab_alloc_(struct tw_cache *c, struct cache_slab *sl, size_t bytes);
/* Give a block back (no lock needed; the block's contents are dead). */
void tw_cache_slab_give_(struct cache_slab *sl, void *block, size_t bytes);
/* Under the shard lock: free every chunk if every block has come back. */
void tw_cache_slab_trim_(struct tw_cache *c, struct cache_slab *sl);
/* Free every chunk (the cache is being freed). */
void tw_cache_slab_destroy_(struct tw_cache *c, struct cache_slab *sl);

/* ---- what the calls share: the clock ---------------------------------- */
/* Everything from here on is inline: the hot paths of get, set and expiry
 * run through these helpers, from several files. */

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

static inline bool cache_live(const struct cache_entry *e, uint64_t now_ns)
{
    return now_ns / CACHE_NS_PER_TICK < atomic_load_explicit(&e->expires, memory_order_relaxed);
}

/* ---- locks and counters ----------------------------------------------- */

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

/* ---- keys and entries ------------------------------------------------- */

/* The shard of a stored (low 32 bits) or full hash. */
static inline struct cache_shard *cache_shard_of(struct tw_cache *c, uint64_t hash)
{
    return &c->shards[(uint64_t)(uint32_t)hash >> c->shard_shift];
}

/* The table's hash of a key: tw_hash_mum (hash.h: a seeded multiply-mix,
 * ~30 instructions for a key of up to 16 bytes, against ~110 for
 * SipHash-1-3), or SipHash-1-3 with cfg.siphash. Both are keyed by the
 * instance's random seed; what each resists is said in hash.h and cache.h. */
static inline uint64_t cache_hash(const struct tw_cache *c, const void *key, size_t key_len)
{
    if (c->siphash)
        return tw_siphash13(key, key_len, c->seed[0], c->seed[1]);
    return tw_hash_mum(key, key_len, c->mum);
}

/* Bytes in front of each entry: its LRU links when there is a limit. */
static inline size_t cache_pre(const struct tw_cache *c)
{
    return c->limit ? sizeof(struct cache_lru) : 0;
}

/* The size of an entry's block (LRU links, entry, key, value bytes). */
static inline size_t cache_entry_size(const struct tw_cache *c, size_t key_len, size_t value_len)
{
    return cache_pre(c) + CACHE_ENTRY_HDR + cache_key_bytes(key_len) +
           (c->copy_values ? value_len : 0);
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

/* Checks a key; the empty key may be NULL, and becomes "" (no pointer
 * arithmetic or memcmp on NULL). */
static inline int cache_check_key(const struct tw_cache *c, const void **key, size_t key_len)
{
    if (!c || (!*key && key_len))
        return TW_EINVAL;
    if (key_len > UINT32_MAX)
        return TW_E2BIG;
    if (!*key)
        *key = "";
    return 0;
}

/* ---- writes ----------------------------------------------------------- */

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
static inline void cache_unlink(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                                struct cache_garbage *g)
{
    tw_cancel(&s->wheel, &e->timer);
    tw_cache_map_remove_(c, s, e, true, g);
    if (c->limit)
        tw_cache_lru_unlink_(s, e);
    atomic_fetch_sub_explicit(&c->count, 1, memory_order_relaxed);
    tw_cache_garbage_add_(g, e);
}

/* Arm an entry's timer for expiry tick `tick` (stored at now_ns). Reads
 * compare the entry's expiry with the clock, so the timer only reclaims the
 * entry's memory: with expiry_slack_shift it may fire up to
 * (tick - now) >> shift ticks late, and the wheel uses that freedom to plan
 * it on a slot boundary from which it fires without cascading (twheel/wheel.h,
 * "Slack"). Returns the tick it is planned at (>= tick). */
static inline uint64_t cache_arm(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e,
                                 uint64_t tick, uint64_t now_ns)
{
    if (!c->slack_shift) {
        tw_arm(&s->wheel, &e->timer, tick, 0, 0);
        return tick;
    }
    uint64_t now_tick = now_ns / CACHE_NS_PER_TICK;
    tw_arm(&s->wheel, &e->timer, tick,
                ((tick > now_tick ? tick - now_tick : 0) >> c->slack_shift),
                TW_ARM_SLACK);
    return tw_deadline(&e->timer);
}

/* Tell the clock service about a deadline just armed (cheap when the
 * cache is already due by then; see tw_clock_wake). */
static inline void cache_note_deadline(struct tw_cache *c, uint64_t tick)
{
    if (c->manual)
        return;
    tw_clock_wake(c->clock, c->member, c->epoch_ns + tick * CACHE_NS_PER_TICK);
}

/* ---- src/cache/set.c: the store under the shard lock ------------------ */

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
static inline uint64_t cache_deadline(struct tw_cache *c, struct cache_shard *s, uint64_t now_ns,
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
        ttl_ns = (uint64_t)ttl_ms > max_ns / CACHE_NS_PER_TICK
                     ? max_ns
                     : (uint64_t)ttl_ms * CACHE_NS_PER_TICK;
    }
    uint64_t at = now_ns > UINT64_MAX - ttl_ns ? UINT64_MAX : now_ns + ttl_ns;
    uint64_t tick = tw_ticks_up_(at, CACHE_NS_PER_TICK);
    uint64_t now_tick = now_ns / CACHE_NS_PER_TICK;
    return tick > now_tick ? tick : now_tick + 1;
}

/* Store under the shard lock (held), src/cache/set.c: at expiry tick
 * `tick`, or (cache_store_locked) ttl_ms from now_ns, jittered. On
 * success *deadline is the armed tick and anything displaced is in g.
 * TW_ENOMEM leaves everything unchanged. */
int tw_cache_store_at_locked_(struct tw_cache *c, struct cache_shard *s, const struct cache_key *k,
                              const struct cache_val *v, uint64_t tick, uint64_t now_ns,
                              uint64_t *deadline, struct cache_garbage *g);
static inline int cache_store_locked(struct tw_cache *c, struct cache_shard *s,
                                     const struct cache_key *k, const struct cache_val *v,
                                     int64_t ttl_ms, uint64_t now_ns, uint64_t *deadline,
                                     struct cache_garbage *g)
{
    return tw_cache_store_at_locked_(c, s, k, v, cache_deadline(c, s, now_ns, ttl_ms), now_ns,
                                     deadline, g);
}
/* A whole set of k at now_ns: lock, store, retire, wake the clock, free,
 * evict (src/cache/set.c). */
int tw_cache_set_at_(struct tw_cache *c, const struct cache_key *k, const struct cache_val *v,
                     int64_t ttl_ms, uint64_t now_ns);

/* ---- src/cache/get.c: reads ------------------------------------------- */

/* Where a read puts the value: a pointer, or a buffer (copy mode). */
struct cache_out {
    void **value;
    void *buf;
    size_t cap;
    size_t *value_len;
};

/* Hand e's value to out (inside a read section or under the shard lock:
 * e and its value cannot be freed meanwhile). */
static inline void cache_output_copy(const struct cache_entry *e, const struct cache_out *out)
{
    size_t n = e->value.len < out->cap ? e->value.len : out->cap;
    if (n)
        memcpy(out->buf, cache_ekey(e) + cache_ekey_len(e), n);
    *out->value_len = e->value.len;
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

/* Find k without the lock; a torn miss is retried once, then looked up
 * under the shard lock (a resize is relinking that shard right now). */
static inline struct cache_entry *cache_find_read(struct tw_cache *c, struct cache_shard *s,
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

/* Output e (found inside the caller's read section, or NULL) if it is live:
 * 0, or TW_ENOENT. Touches e for the LRU. Counts nothing (src/cache/get.c). */
int tw_cache_get_found_(struct tw_cache *c, struct cache_entry *e, const struct cache_out *out);
/* Everything but a hit proven live by the coarse clock: e and torn are
 * what the first lock-free lookup found. Leaves the read section
 * (src/cache/get.c; out of line, so that the hit path stays small). */
__attribute__((noinline)) int tw_cache_get_rest_(struct tw_cache *c, struct cache_shard *s,
                                                 const struct cache_key *k,
                                                 const struct cache_out *out, bool count_miss,
                                                 struct cache_rd *rd, struct cache_entry *e,
                                                 bool torn);

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
    return tw_cache_get_rest_(c, s, k, out, count_miss, &rd, e, torn);
}

/* ---- src/cache/expire.c, stats.c, shard.c ----------------------------- */

/* The cache's work as a member of its clock service: expire what is due,
 * log if a line is due; returns when to run next (src/cache/expire.c). */
uint64_t tw_cache_clock_run_(void *ctx, uint64_t now_ns);

/* Write the statistics line (log_mu held; src/cache/stats.c). */
void tw_cache_log_line_(struct tw_cache *c, uint64_t now_tick);
/* Log a line if one is due at now_tick (log_mu held). */
static inline void cache_maybe_log(struct tw_cache *c, uint64_t now_tick)
{
    if (c->log && now_tick >= c->log_due)
        tw_cache_log_line_(c, now_tick);
}

/* Set up shard s (its table, locks, wheel; rng seeds its jitter):
 * 0, TW_ENOMEM or TW_ESYS, nothing left allocated on failure
 * (src/cache/shard.c). */
int tw_cache_shard_init_(struct tw_cache *c, struct cache_shard *s, uint64_t rng);
/* Tear down the first `inited` shards, free their entries (and values),
 * limbo and tables, and the shard block. No reader may be inside any more. */
void tw_cache_shards_free_(struct tw_cache *c, unsigned inited);

#endif /* TWHEEL_CACHE_INTERNAL_H */
