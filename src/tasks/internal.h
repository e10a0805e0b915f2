/* SPDX-License-Identifier: MIT */
/* What the keyed layer's files share: the instance, its entries and index,
 * a key being looked up, and the hot paths of set, move, remove, get and the
 * tick, inline. The design (layout, invariants, memory, re-entrancy) is at
 * the top of tasks/tasks.c. */
#ifndef TWHEEL_TASKS_INTERNAL_H
#define TWHEEL_TASKS_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "common/bigmem.h"
#include "common/hash.h"
#include "twheel/tasks.h"
#include "twheel/wheel.h"

#define TASKS_CHUNK TW_TASKS_CHUNK
#define TASKS_NIL UINT32_MAX
#define TASKS_SLOT_EMPTY 0u
#define TASKS_SLOT_TOMB 1u
#define TASKS_MIN_CAP 16u
#define TASKS_MAX_POOL (UINT32_C(1) << 31)

_Static_assert((TASKS_CHUNK & (TASKS_CHUNK - 1)) == 0, "chunk size: a power of two");

/* Strings up to this long are kept in the entry itself. */
#define TASKS_KEY_INLINE 15
#define TASKS_KEY_OUTSIDE 0xffu

/* A key as an entry keeps it. Integer keys: num. String keys: b[KEY_INLINE]
 * is the length when it is <= KEY_INLINE, the bytes in b[0..len); else it is
 * KEY_OUTSIDE and `block` points at a block: u16 length (little-endian), then
 * the bytes. */
union tasks_key {
    uint64_t num;
    unsigned char *block;
    unsigned char b[TASKS_KEY_INLINE + 1];
    uint64_t w[2]; /* an inline key as two words: b[] zero-padded, so equal
                      keys have equal words (compared and copied as such) */
};

struct tasks_entry {
    union {
        struct tw_node node;   /* while the task is pending */
        struct {               /* while free, or detached by drain */
            uint32_t next;     /* next free / detached entry, NIL at the end */
            uint64_t deadline; /* drain: the tick it was due at */
        } idle;
    } u;
    void *value;
    union tasks_key key;
};
/* (TWHEEL_DEBUG builds add 8 bytes to every node: see twheel/wheel.h.) */
_Static_assert(sizeof(struct tasks_entry) == 48 || sizeof(void *) != 8 || TW_NODE_DEBUG_BYTES != 0,
               "48-byte entries on LP64");

/* A chunk: CHUNK entries, then their CHUNK home words (see tasks_hi_at). */
#define TASKS_CHUNK_BYTES (TASKS_CHUNK * (sizeof(struct tasks_entry) + sizeof(uint32_t)))
/* Chunks per group: a big block of them (tasks/pool.c). */
#define TASKS_GROUP ((uint32_t)(TW_BIG_MIN / TASKS_CHUNK_BYTES))
_Static_assert(TW_BIG_MIN / TASKS_CHUNK_BYTES >= 2, "a group holds chunks");

/* A block of TASKS_GROUP chunks (tasks/pool.c). */
struct tasks_group {
    char *p;
    uint32_t filled; /* chunks ever handed out (default allocator: pages touched) */
};

struct tw_tasks {
    struct tw_wheel wheel;
    tw_tasks_fn *execute;
    void *ctx;
    struct tw_allocator alloc;
    uint64_t k0, k1; /* hash seed */
    size_t max_pending;
    size_t bytes; /* every byte allocated through `alloc` */
    int int_keys;
    int depth;            /* callbacks running (execute or drain's fn) */
    unsigned slack_shift; /* config.slack_shift: 0 = exact, else slack = delay >> it */
    int eager;            /* config.eager_rearm: exact arms relocate at once */
    int not_lazy;         /* slack_shift != 0 or eager: not every arm is exact and lazy */
    int user_alloc;       /* config.allocator given: no big blocks of our own */
    /* pool */
    struct tasks_entry **chunks; /* chunks[0..nchunks) allocated */
    uint32_t nchunks, chunks_cap;
    struct tasks_group *groups; /* chunks GROUP*(g+1) .. GROUP*(g+2)-1 live in groups[g] */
    uint32_t groups_cap;
    uint32_t free_head; /* first free entry, NIL if none */
    /* index */
    uint32_t *slots;
    uint32_t cap;  /* slots; >= MIN_CAP */
    uint32_t used; /* live + tombstones; <= 0.75 cap */
    uint32_t tombs;
    uint32_t live; /* pending tasks */
    uint32_t bits; /* low bits of a slot holding index + 2 */
    uint32_t mask; /* (1 << bits) - 1 */
    /* config.capacity: floors */
    uint32_t floor_cap;    /* the index never shrinks below it (MIN_CAP: no hint) */
    uint32_t floor_chunks; /* compaction keeps at least this many chunks */
};

/* A key being looked up: checked and hashed once per call (tasks_key_str,
 * tasks_key_int), then handed to the calls below. */
struct tasks_keyref {
    const unsigned char *p; /* bytes (string keys) */
    size_t len;
    uint64_t num; /* integer key */
    uint64_t h;
    union tasks_key in; /* string keys up to KEY_INLINE bytes: as stored */
};

/* ---- shared out of line ------------------------------------------------------ */

/* tasks/index.c: rebuild the index with new_cap slots and new_bits entry
 * bits (0 or TW_ENOMEM, the old index kept); shrink it to its load (a
 * failure keeps the larger one). */
int tw_tasks_rehash_(struct tw_tasks *t, uint32_t new_cap, uint32_t new_bits);
void tw_tasks_shrink_index_(struct tw_tasks *t);
/* tasks/pool.c: add a chunk of free entries (0 or TW_ENOMEM, nothing
 * changed); free the chunks from `keep` on. */
int tw_tasks_add_chunk_(struct tw_tasks *t);
void tw_tasks_pool_release_(struct tw_tasks *t, uint32_t keep);
/* tasks/compact.c: give chunks back if under a quarter of the pool is live,
 * outside callbacks (else nothing). */
void tw_tasks_compact_(struct tw_tasks *t);
/* tasks/keyed.c: the seam of every set, compiled twice: any arm, and the
 * exact lazy arm of the default instance (see tasks_set_in); the arms that
 * are not exact and lazy (see tasks_arm). */
int tw_tasks_set_at_(struct tw_tasks *t, const struct tasks_keyref *k, void *value,
                     uint64_t deadline, uint64_t slack);
int tw_tasks_set_lazy_at_(struct tw_tasks *t, const struct tasks_keyref *k, void *value,
                          uint64_t deadline);
void tw_tasks_arm_other_(struct tw_tasks *t, struct tasks_entry *e, uint64_t deadline,
                         uint64_t slack);

/* ---- memory ------------------------------------------------------------------ */

/* Memory through the instance's allocator, counted in t->bytes. */
static inline void *tasks_mem(struct tw_tasks *t, void *ptr, size_t old_size, size_t new_size)
{
    void *r = tw_mem_(&t->alloc, ptr, old_size, new_size);
    if (new_size == 0) {
        t->bytes -= old_size;
        return NULL;
    }
    if (r)
        t->bytes = t->bytes - old_size + new_size;
    return r;
}

/* Big blocks (the index, pool groups): with the default allocator they come
 * from bigmem.c (2 MB aligned with huge-page advice from TW_BIG_MIN bytes
 * on), else from the user's allocator. Allocate or free only, no resize. */
static inline void *tasks_big(struct tw_tasks *t, void *ptr, size_t old_size, size_t new_size)
{
    if (t->user_alloc)
        return tasks_mem(t, ptr, old_size, new_size);
    if (new_size == 0) {
        tw_big_free_(ptr, old_size);
        t->bytes -= old_size;
        return NULL;
    }
    void *r = tw_big_alloc_(new_size);
    if (r)
        t->bytes += new_size;
    return r;
}

/* ---- entries ----------------------------------------------------------------- */

static inline struct tasks_entry *tasks_entry_at(const struct tw_tasks *t, uint32_t idx)
{
    return &t->chunks[idx / TASKS_CHUNK][idx % TASKS_CHUNK];
}

/* The home word of entry idx: its key's hash >> 32, which alone places it
 * in an index of any size (tw_hash_home), kept after the chunk's entries so
 * that a rehash reads 4 bytes per task, sequential in index order, instead
 * of the 48-byte entry and a SipHash (see tw_tasks_rehash_). Written by
 * every set that takes an entry, copied by compaction. */
static inline uint32_t *tasks_hi_at(const struct tw_tasks *t, uint32_t idx)
{
    return (uint32_t *)(void *)(t->chunks[idx / TASKS_CHUNK] + TASKS_CHUNK) + idx % TASKS_CHUNK;
}

/* Prefetch (for writing) all of an entry. Entries are 48 bytes, so half of
 * them straddle two cache lines (those at 32 and 48 bytes into a line):
 * their key, which a lookup compares, is then on the second line, which a
 * prefetch of the entry's address alone would leave to miss. */
static inline void tasks_prefetch_entry(const struct tasks_entry *e)
{
    __builtin_prefetch(e, 1);
    __builtin_prefetch((const char *)e + sizeof *e - 1, 1);
}

static inline size_t tasks_block_len(const unsigned char *b)
{
    return (size_t)b[0] | (size_t)b[1] << 8;
}

/* A string key's bytes and length. */
static inline const unsigned char *tasks_key_bytes(const union tasks_key *k, size_t *len)
{
    if (k->b[TASKS_KEY_INLINE] != TASKS_KEY_OUTSIDE) {
        *len = k->b[TASKS_KEY_INLINE];
        return k->b;
    }
    *len = tasks_block_len(k->block);
    return k->block + 2;
}

static inline void tasks_free_entry(struct tw_tasks *t, uint32_t idx)
{
    struct tasks_entry *e = tasks_entry_at(t, idx);
    e->u.idle.next = t->free_head;
    t->free_head = idx;
}

static inline void tasks_free_key(struct tw_tasks *t, const union tasks_key *k)
{
    if (!t->int_keys && k->b[TASKS_KEY_INLINE] == TASKS_KEY_OUTSIDE)
        tasks_mem(t, k->block, tasks_block_len(k->block) + 2, 0);
}

/* ---- keys and hashes ----------------------------------------------------------- */

/* SipHash-1-3 of a key of len <= KEY_INLINE bytes in its stored form (an
 * entry's key, or a lookup's keyref.in): equal to tw_siphash13 of its bytes
 * (as the flooding test computes it), since SipHash reads the key as
 * little-endian words and its last word is the tail bytes with the length in
 * the top byte, which is what w[] hold. No byte loop, no tail switch. */
static inline uint64_t tasks_siphash13_inline(const union tasks_key *in, size_t len, uint64_t k0,
                                              uint64_t k1)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ k1;
    uint64_t b = in->w[1];
    if (len >= 8) {
        uint64_t m = in->w[0];
        v3 ^= m;
        TW_SIPROUND_(v0, v1, v2, v3);
        v0 ^= m;
    } else {
        b |= in->w[0]; /* w[1] holds only the length */
    }
    return tw_siphash13_end_(v0, v1, v2, v3, b);
#else
    return tw_siphash13(in->b, len, k0, k1);
#endif
}

static inline uint64_t tasks_hash_entry(const struct tw_tasks *t, const struct tasks_entry *e)
{
    if (t->int_keys)
        return tw_hash_int(e->key.num, t->k0, t->k1);
    if (e->key.b[TASKS_KEY_INLINE] != TASKS_KEY_OUTSIDE)
        return tasks_siphash13_inline(&e->key, e->key.b[TASKS_KEY_INLINE], t->k0, t->k1);
    return tw_siphash13(e->key.block + 2, tasks_block_len(e->key.block), t->k0, t->k1);
}

static inline uint32_t tasks_load32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* k->in for a key of len <= KEY_INLINE bytes: its bytes, zeroes, and len in
 * the last byte, as a set stores it (little-endian: two to three loads, no
 * byte loop and no memcpy call). */
static inline void tasks_inline_form(struct tasks_keyref *k, const unsigned char *p, size_t len)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t lo = 0, hi = 0;
    if (len >= 8) {
        lo = tw_hash_load64le_(p);
        if (len > 8) /* bytes 8..len-1 from the word that ends the key */
            hi = tw_hash_load64le_(p + len - 8) >> (8 * (16 - len));
    } else if (len >= 4) { /* two overlapping 4-byte loads */
        lo = tasks_load32(p) | (uint64_t)tasks_load32(p + len - 4) << (8 * (len - 4));
    } else if (len) {
        lo = (uint64_t)p[0] | (uint64_t)p[len / 2] << (8 * (len / 2)) |
             (uint64_t)p[len - 1] << (8 * (len - 1));
    }
    k->in.w[0] = lo;
    k->in.w[1] = hi | (uint64_t)len << 56;
#else
    memset(&k->in, 0, sizeof k->in);
    if (len)
        memcpy(k->in.b, p, len);
    k->in.b[TASKS_KEY_INLINE] = (unsigned char)len;
#endif
}

/* Fill k for a checked string key: its one hash of the call, with the seed
 * (k0, k1). The runner fills its keys so, with its own seed, which it gives
 * its shards' instances (config.seed): one hash picks the shard and serves
 * that shard's index. */
static inline void tasks_keyref_str_seeded(uint64_t k0, uint64_t k1, const void *key, size_t len,
                                           struct tasks_keyref *k)
{
    k->p = key;
    k->len = len;
    k->num = 0;
    if (len <= TASKS_KEY_INLINE) {
        tasks_inline_form(k, key, len);
        k->h = tasks_siphash13_inline(&k->in, len, k0, k1);
    } else {
        k->h = tw_siphash13(key, len, k0, k1);
    }
}

/* Fill k for a checked string key whose hash h the caller computed as
 * tasks_keyref_str_seeded does (the runner's batched calls): no hash. */
static inline void tasks_keyref_str_hashed(const void *key, size_t len, uint64_t h,
                                           struct tasks_keyref *k)
{
    k->p = key;
    k->len = len;
    k->num = 0;
    k->h = h;
    if (len <= TASKS_KEY_INLINE)
        tasks_inline_form(k, key, len);
}

/* Fill k for an integer key: its one hash of the call, with the seed. */
static inline void tasks_keyref_int_seeded(uint64_t k0, uint64_t k1, uint64_t key,
                                           struct tasks_keyref *k)
{
    k->p = NULL;
    k->len = 0;
    k->num = key;
    k->h = tw_hash_int(key, k0, k1);
}

/* The same, with the instance's seed. */
static inline void tasks_keyref_str(const struct tw_tasks *t, const void *key, size_t len,
                                    struct tasks_keyref *k)
{
    tasks_keyref_str_seeded(t->k0, t->k1, key, len, k);
}

static inline void tasks_keyref_int(const struct tw_tasks *t, uint64_t key, struct tasks_keyref *k)
{
    tasks_keyref_int_seeded(t->k0, t->k1, key, k);
}

/* ---- index ------------------------------------------------------------------- */

static inline int tasks_key_eq(const struct tw_tasks *t, const struct tasks_entry *e,
                               const struct tasks_keyref *k)
{
    if (t->int_keys)
        return e->key.num == k->num;
    if (k->len <= TASKS_KEY_INLINE) /* the length is in w[1]'s last byte */
        return ((e->key.w[0] ^ k->in.w[0]) | (e->key.w[1] ^ k->in.w[1])) == 0;
    return e->key.b[TASKS_KEY_INLINE] == TASKS_KEY_OUTSIDE &&
           tasks_block_len(e->key.block) == k->len && memcmp(e->key.block + 2, k->p, k->len) == 0;
}

static inline uint32_t tasks_tag_of(uint64_t h, uint32_t mask)
{
    return (uint32_t)h & ~mask;
}

/* The slot holding key k, or NIL. With insert_at, also the slot where k
 * would be inserted (the first tombstone or the empty slot that ended the
 * probe). */
static inline __attribute__((always_inline)) uint32_t
tasks_probe(const struct tw_tasks *t, const struct tasks_keyref *k, uint32_t *insert_at)
{
    uint32_t mask = t->mask, tag = tasks_tag_of(k->h, mask);
    uint32_t pos = tw_hash_home(k->h, t->cap), tomb = TASKS_NIL;
    for (;;) {
        uint32_t s = t->slots[pos];
        if (s == TASKS_SLOT_EMPTY) {
            if (insert_at)
                *insert_at = tomb != TASKS_NIL ? tomb : pos;
            return TASKS_NIL;
        }
        if (s == TASKS_SLOT_TOMB) {
            if (tomb == TASKS_NIL)
                tomb = pos;
        } else if ((s & ~mask) == tag && tasks_key_eq(t, tasks_entry_at(t, (s & mask) - 2), k)) {
            return pos;
        }
        if (++pos == t->cap)
            pos = 0;
    }
}

/* The slot holding key k, or NIL: probe without an insert position, for
 * move, remove and get, inlined into them (a call of probe costs ~35
 * instructions of prologue and epilogue, as many as its loop on a hit). */
static inline __attribute__((always_inline)) uint32_t tasks_find_key(const struct tw_tasks *t,
                                                                     const struct tasks_keyref *k)
{
    uint32_t mask = t->mask, tag = tasks_tag_of(k->h, mask), cap = t->cap;
    const uint32_t *slots = t->slots;
    uint32_t pos = tw_hash_home(k->h, cap);
    for (;;) {
        uint32_t s = slots[pos];
        if (s == TASKS_SLOT_EMPTY)
            return TASKS_NIL;
        /* (a tombstone's tag bits are 0: tested after the tag) */
        if ((s & ~mask) == tag && s != TASKS_SLOT_TOMB &&
            tasks_key_eq(t, tasks_entry_at(t, (s & mask) - 2), k))
            return pos;
        if (++pos == cap)
            pos = 0;
    }
}

/* Empty slot pos. If the next slot is empty no probe needs pos (nor the
 * tombstones just before it) to go on: they become empty; else a tombstone. */
static inline void tasks_clear_slot(struct tw_tasks *t, uint32_t pos)
{
    uint32_t next = pos + 1 == t->cap ? 0 : pos + 1;
    t->live--;
    if (t->slots[next] != TASKS_SLOT_EMPTY) {
        t->slots[pos] = TASKS_SLOT_TOMB;
        t->tombs++;
        return;
    }
    t->slots[pos] = TASKS_SLOT_EMPTY;
    t->used--;
    for (;;) {
        pos = pos == 0 ? t->cap - 1 : pos - 1;
        if (t->slots[pos] != TASKS_SLOT_TOMB)
            break;
        t->slots[pos] = TASKS_SLOT_EMPTY;
        t->used--;
        t->tombs--;
    }
}

/* Entry bits for a pool of n entries: index + 2 < 2^bits, at least 11. */
static inline uint32_t tasks_bits_for(uint64_t n)
{
    uint32_t b = 11;
    while (b < 32 && ((uint64_t)1 << b) < n + 2)
        b++;
    return b;
}

/* Capacity for n keys at load den / num, within [MIN_CAP, UINT32_MAX]. */
static inline uint32_t tasks_cap_at_load(uint64_t n, uint64_t num, uint64_t den)
{
    uint64_t c = n * num / den + 1;
    if (c < TASKS_MIN_CAP)
        c = TASKS_MIN_CAP;
    if (c > UINT32_MAX)
        c = UINT32_MAX;
    return (uint32_t)c;
}

/* Capacity for n keys at a load of 0.4, when the index grows. */
static inline uint32_t tasks_grow_cap_for(uint64_t n)
{
    return tasks_cap_at_load(n, 5, 2);
}

/* Capacity for n keys at a load of 0.55 (a shrink, config.capacity). */
static inline uint32_t tasks_cap_for(uint64_t n)
{
    return tasks_cap_at_load(n, 20, 11);
}

/* (The test inline, on every remove's path; the rehash out of line.) */
static inline void tasks_maybe_shrink(struct tw_tasks *t)
{
    if (__builtin_expect(t->cap > t->floor_cap && (uint64_t)t->live * 8 < t->cap, 0))
        tw_tasks_shrink_index_(t);
}

/* Under a quarter of the pool live, above the capacity floor: a set
 * compacts first (one test on its path). */
static inline int tasks_compact_wanted(const struct tw_tasks *t)
{
    return (uint64_t)t->live * 4 < (uint64_t)t->nchunks * TASKS_CHUNK && t->nchunks > 1 &&
           t->nchunks > t->floor_chunks;
}

/* ---- the keyed calls ------------------------------------------------------------ */
/* A public call checks its key and hashes it once (a tasks_keyref), then
 * runs one of these (tasks/tasks.c, "The keyed calls"). */

/* Arm e at the absolute tick `deadline` with `slack`. `lazy`, a constant,
 * says the call arms exact and lazy (the instance has neither slack_shift
 * nor eager_rearm, and the call gives no slack): the core's exact lazy arm,
 * without a test. Else one test sends slack and eager arms out of line. */
static inline __attribute__((always_inline)) void
tasks_arm(struct tw_tasks *t, struct tasks_entry *e, uint64_t deadline, uint64_t slack, int lazy)
{
    if (!lazy && __builtin_expect(slack != 0 || t->eager, 0))
        tw_tasks_arm_other_(t, e, deadline, slack);
    else
        tw_arm(&t->wheel, &e->u.node, deadline, 0, 0);
}

/* The slack config.slack_shift gives a delay (>= 0): 0 when exact. */
static inline uint64_t tasks_config_slack(const struct tw_tasks *t, int64_t delay)
{
    return t->slack_shift ? (uint64_t)delay >> t->slack_shift : 0;
}

/* A set whose key check gave rc (0: k is filled): its delay checked and made
 * an absolute deadline, once, and its slack the call's (`slack`, of a
 * *_slack call) or config.slack_shift's (NULL), then the seam; the default
 * instance (exact, lazy) is told apart by one test of not_lazy. */
static inline int tasks_set_in(struct tw_tasks *t, int rc, const struct tasks_keyref *k,
                               void *value, int64_t delay, const uint64_t *slack)
{
    if (rc)
        return rc;
    if (delay < 0)
        return TW_EINVAL;
    uint64_t deadline = tw_deadline_in(tw_wheel_now(&t->wheel), (uint64_t)delay);
    if (slack)
        return tw_tasks_set_at_(t, k, value, deadline, *slack);
    if (__builtin_expect(t->not_lazy, 0))
        return tw_tasks_set_at_(t, k, value, deadline, tasks_config_slack(t, delay));
    return tw_tasks_set_lazy_at_(t, k, value, deadline);
}

/* A move, as tasks_set_in: the lookup, then the deadline (after it, so that
 * only the delay waits in a register through the probe), then the arm. */
static inline int tasks_move_in(struct tw_tasks *t, int rc, const struct tasks_keyref *k,
                                int64_t delay, const uint64_t *slack)
{
    if (rc || delay < 0)
        return rc ? rc : TW_EINVAL;
    uint32_t pos = tasks_find_key(t, k);
    if (pos == TASKS_NIL)
        return TW_ENOENT;
    uint64_t now = tw_wheel_now(&t->wheel);
    if (now == UINT64_MAX)
        return TW_ERANGE;
    struct tasks_entry *e = tasks_entry_at(t, (t->slots[pos] & t->mask) - 2);
    uint64_t deadline = tw_deadline_in(now, (uint64_t)delay);
    if (slack)
        tasks_arm(t, e, deadline, *slack, 0);
    else if (__builtin_expect(t->not_lazy, 0))
        tasks_arm(t, e, deadline, tasks_config_slack(t, delay), 0);
    else
        tasks_arm(t, e, deadline, 0, 1);
    return 0;
}

/* A move to an absolute tick with the caller's slack (the runner's: its
 * deadlines are absolute from the start): 0, TW_ENOENT or TW_ERANGE, as
 * tasks_move_in from the lookup on; `lazy` as for tasks_arm. */
static inline int tasks_move_at(struct tw_tasks *t, const struct tasks_keyref *k, uint64_t deadline,
                                uint64_t slack, int lazy)
{
    uint32_t pos = tasks_find_key(t, k);
    if (pos == TASKS_NIL)
        return TW_ENOENT;
    if (tw_wheel_now(&t->wheel) == UINT64_MAX)
        return TW_ERANGE;
    tasks_arm(t, tasks_entry_at(t, (t->slots[pos] & t->mask) - 2), deadline, slack, lazy);
    return 0;
}

void tw_tasks_clear_slot_(struct tw_tasks *t, uint32_t pos);

/* Remove key k. `batch`, a constant: the batched pipeline calls the slot's
 * clearing out of line (tw_tasks_clear_slot_), which keeps the pipeline's
 * loop small enough for its prefetched keys to stay in registers; a single
 * remove inlines it. */
static inline int tasks_remove_key_(struct tw_tasks *t, const struct tasks_keyref *k, void **value,
                                    bool batch)
{
    uint32_t pos = tasks_find_key(t, k);
    if (pos == TASKS_NIL)
        return TW_ENOENT;
    uint32_t idx = (t->slots[pos] & t->mask) - 2;
    struct tasks_entry *e = tasks_entry_at(t, idx);
    tw_cancel(&t->wheel, &e->u.node);
    if (value)
        *value = e->value;
    tasks_free_key(t, &e->key);
    if (batch)
        tw_tasks_clear_slot_(t, pos);
    else
        tasks_clear_slot(t, pos);
    tasks_free_entry(t, idx);
    tasks_maybe_shrink(t);
    /* No compaction here: the next set, advance or drain does it (see
     * tasks/tasks.c), so a run of removals moves nothing. */
    return 0;
}

static inline int tasks_remove_key(struct tw_tasks *t, const struct tasks_keyref *k, void **value)
{
    return tasks_remove_key_(t, k, value, false);
}

static inline int tasks_get_key(const struct tw_tasks *t, const struct tasks_keyref *k,
                                void **value, uint64_t *deadline)
{
    uint32_t pos = tasks_find_key(t, k);
    if (pos == TASKS_NIL)
        return TW_ENOENT;
    const struct tasks_entry *e = tasks_entry_at(t, (t->slots[pos] & t->mask) - 2);
    if (value)
        *value = e->value;
    if (deadline)
        *deadline = tw_deadline(&e->u.node);
    return 0;
}

#endif /* TWHEEL_TASKS_INTERNAL_H */
