/* SPDX-License-Identifier: MIT */
/* twheel keyed layer: tw_tasks, go-zero's key -> task API over the core wheel.
 *
 * Layout
 * ------
 *   entries  a pool of 48-byte entries in chunks of TW_TASKS_CHUNK, addressed
 *            by a 32-bit index (chunk = idx / CHUNK). Chunks never move, so the
 *            wheel node embedded in each entry can stay linked in the wheel.
 *            Free entries form a LIFO list through the entry itself. An entry
 *            holds its key: an integer, a string of up to KEY_INLINE bytes in
 *            place (zero-padded, its length in the last byte: a lookup builds
 *            that form once, see inline_form, then compares, copies and
 *            hashes two words), or a pointer to a block for a longer string.
 *            After a chunk's entries come their home words (4 bytes each:
 *            the key's hash >> 32), all that a rehash reads of a task (see
 *            rehash): 52 bytes of pool per task.
 *   index    open addressing with linear probing over 32-bit slots:
 *                0 = empty, 1 = tombstone,
 *                else (tag << bits) | (entry index + 2),
 *            where `bits` is just wide enough for the pool and the tag is the
 *            hash's low 32 bits above `bits` (12 bits at 10^6 tasks). A probe
 *            compares tags first and touches an entry only on a tag match
 *            (false match rate 2^-(32-bits)), so a miss costs no entry load.
 *            Slot positions come from the hash's high 32 bits by fast range
 *            reduction, so the capacity need not be a power of two. The
 *            index is rehashed past a load of 0.75, counting tombstones (near
 *            0.8 an insert scans 13 slots on average for the empty one), to
 *            a load of 0.4 (a shrink: 0.55): 5.3..10 bytes per task. Growing
 *            to 0.4 rather than 0.55 trades bytes for fewer rehashes of a
 *            fill (twheel/tasks.h gives the trade).
 *            Deletion writes a tombstone, or an empty slot (clearing the
 *            tombstones before it too) when the next slot is empty. The
 *            entry field is sized at each rehash for the largest pool the new
 *            index can hold before it grows again, so the pool's growth never
 *            forces a rehash of its own.
 *   wheel    the core wheel holding bare 24-byte nodes (no callback), driven
 *            through its pull interface (tw_wheel_expire_next_node); each due
 *            entry is taken out of the index before execute runs, so execute
 *            sees a table in which its task is gone.
 *
 * Memory returned: the index shrinks (rehash) when under 1/8 full. When fewer
 * than a quarter of the pool's entries are live, outside callbacks, the next
 * set, advance or drain moves the live entries above the first
 * ceil(2 * live / CHUNK) chunks into free entries below (cancel + re-arm at
 * the same deadline, one index slot rewritten), and frees the emptied
 * chunks: O(pool + index) after at least pool/2 removals, amortised O(1).
 * Remove itself never compacts: a run of removals (every key, say) would
 * relocate a quarter of its tasks on the way down, step by step, four or
 * five cache misses each; deferred, only what is left when the run ends
 * moves, once. The pool thus holds at most four times the live entries,
 * plus what a run of removals freed since the last set, advance or drain.
 *
 * config.capacity (a hint): the index starts at cap_for(capacity) slots (a
 * load of 0.55 when that many are pending) with an entry field wide enough
 * for them, and neither shrinking (floor_cap) nor compaction (floor_chunks)
 * goes below it; pool groups the hint will fill are advised huge at once.
 *
 * The keyed calls: a public call checks its key and hashes it once (struct
 * keyref), checks its delay and works out, once, the absolute deadline
 * (now + delay, saturating) and the slack (the *_slack call's, else delay >>
 * config.slack_shift). A set hands them, as arguments, to set_at (every set,
 * batched ones too); a move to arm(), after its lookup. No per-call value
 * passes through the instance. set_at checks the limits (max_pending, the
 * pool's size) and makes room (index, chunk, key block) before it inserts
 * anything, each step leaving a valid instance if a later one fails, so a
 * failing set changes nothing.
 *
 * Slack and eager re-arm: `not_lazy` (set by tw_tasks_new, never changed)
 * says whether the instance has a slack_shift or config.eager_rearm. A call
 * of the default instance without a slack of its own arms exact and lazy
 * (do_set_lazy, arm with lazy = 1): the core's exact lazy arm, no test. The
 * others test for slack or eager in arm() and call arm_other(): with slack,
 * the core's slack arm; with slack 0, its eager exact arm (a slack arm
 * relocates at once already). So the default path pays one test (of
 * not_lazy) for both. Compaction re-arms a relocated task exactly at its
 * planned tick, which is inside its window (a fresh node: lazy and eager are
 * the same arm there).
 *
 * Re-entrancy: `depth` counts the callbacks running. Everything a callback
 * may do keeps the invariants between two calls of it: the firing loop holds
 * no index position across a callback, and drain detaches its whole batch
 * before the first call. Only compaction (which moves entries) waits for
 * depth 0.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include "twheel/tasks.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/bigmem.h"
#include "common/hash.h"
#include "twheel/wheel.h"

#define CHUNK TW_TASKS_CHUNK
#define NIL UINT32_MAX
#define SLOT_EMPTY 0u
#define SLOT_TOMB 1u
#define MIN_CAP 16u
#define MAX_POOL (UINT32_C(1) << 31)

_Static_assert((CHUNK & (CHUNK - 1)) == 0, "chunk size: a power of two");

/* Strings up to this long are kept in the entry itself. */
#define KEY_INLINE 15
#define KEY_OUTSIDE 0xffu

/* A key as an entry keeps it. Integer keys: num. String keys: b[KEY_INLINE]
 * is the length when it is <= KEY_INLINE, the bytes in b[0..len); else it is
 * KEY_OUTSIDE and `block` points at a block: u16 length (little-endian), then
 * the bytes. */
union stored_key {
    uint64_t num;
    unsigned char *block;
    unsigned char b[KEY_INLINE + 1];
    uint64_t w[2]; /* an inline key as two words: b[] zero-padded, so equal
                      keys have equal words (compared and copied as such) */
};

struct entry {
    union {
        struct tw_node node;   /* while the task is pending */
        struct {               /* while free, or detached by drain */
            uint32_t next;     /* next free / detached entry, NIL at the end */
            uint64_t deadline; /* drain: the tick it was due at */
        } idle;
    } u;
    void *value;
    union stored_key key;
};
/* (TWHEEL_DEBUG builds add 8 bytes to every node: see twheel/wheel.h.) */
_Static_assert(sizeof(struct entry) == 48 || sizeof(void *) != 8 || TW_NODE_DEBUG_BYTES != 0,
               "48-byte entries on LP64");

/* A block of GROUP chunks (see "pool"). */
struct group {
    char *p;
    uint32_t filled; /* chunks ever handed out (default allocator: pages touched) */
};

struct tw_tasks {
    struct tw_wheel wheel;
    tw_tasks_fn *execute;
    void *ctx;
    struct tw_allocator alloc;
    uint64_t k0, k1;        /* hash seed */
    size_t max_pending;
    size_t bytes;           /* every byte allocated through `alloc` */
    int int_keys;
    int depth;              /* callbacks running (execute or drain's fn) */
    unsigned slack_shift;   /* config.slack_shift: 0 = exact, else slack = delay >> it */
    int eager;              /* config.eager_rearm: exact arms relocate at once */
    int not_lazy;           /* slack_shift != 0 or eager: not every arm is exact and lazy */
    int user_alloc;         /* config.allocator given: no big blocks of our own */
    /* pool */
    struct entry **chunks;  /* chunks[0..nchunks) allocated */
    uint32_t nchunks, chunks_cap;
    struct group *groups;   /* chunks GROUP*(g+1) .. GROUP*(g+2)-1 live in groups[g] */
    uint32_t groups_cap;
    uint32_t free_head;     /* first free entry, NIL if none */
    /* index */
    uint32_t *slots;
    uint32_t cap;           /* slots; >= MIN_CAP */
    uint32_t used;          /* live + tombstones; <= 0.75 cap */
    uint32_t tombs;
    uint32_t live;          /* pending tasks */
    uint32_t bits;          /* low bits of a slot holding index + 2 */
    uint32_t mask;          /* (1 << bits) - 1 */
    /* config.capacity: floors */
    uint32_t floor_cap;     /* the index never shrinks below it (MIN_CAP: no hint) */
    uint32_t floor_chunks;  /* compaction keeps at least this many chunks */
};

/* A key being looked up. */
struct keyref {
    const unsigned char *p; /* bytes (string keys) */
    size_t len;
    uint64_t num; /* integer key */
    uint64_t h;
    union stored_key in; /* string keys up to KEY_INLINE bytes: as stored */
};

/* ---- memory ----------------------------------------------------------------- */

static void *mem(struct tw_tasks *t, void *ptr, size_t old_size, size_t new_size)
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
static void *big(struct tw_tasks *t, void *ptr, size_t old_size, size_t new_size)
{
    if (t->user_alloc)
        return mem(t, ptr, old_size, new_size);
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

/* ---- pool ------------------------------------------------------------------- */

/* The first GROUP chunks are allocated one by one (a small pool stays
 * small); beyond, GROUP chunks at a time in one block (a group), so that the
 * entries of a big pool are covered by few TLB entries. With the default
 * allocator a group is a 2 MB aligned mapping of TW_BIG_MIN bytes (bigmem.h):
 * see GROUPS_LAZY for when it becomes a huge page. With the user's
 * allocator it is one block of GROUP chunks. A group is freed when the pool
 * shrinks below its first chunk. */
/* The first GROUPS_LAZY groups are filled in small pages and collapsed
 * into a huge page when full (MADV_COLLAPSE: a 2 MB copy, too dear to make
 * for every group: see twheel/tasks.h, Memory); later ones, in a pool already
 * 10 MB big, are advised at once (one 2 MB page from the first touch: at
 * most one partly used group, under 2 MB, is resident beyond need). */
#ifndef GROUPS_LAZY
#define GROUPS_LAZY 4
#endif
/* A chunk: CHUNK entries, then their CHUNK home words (see hi_at). */
#define CHUNK_BYTES (CHUNK * (sizeof(struct entry) + sizeof(uint32_t)))
#define GROUP ((uint32_t)(TW_BIG_MIN / CHUNK_BYTES))
_Static_assert(TW_BIG_MIN / CHUNK_BYTES >= 2, "a group holds chunks");

/* Bytes a group holds (counted in t->bytes). */
static inline size_t group_bytes(const struct tw_tasks *t, const struct group *g)
{
    if (t->user_alloc)
        return (size_t)GROUP * CHUNK_BYTES;
    return g->filled == GROUP ? TW_BIG_MIN : (size_t)g->filled * CHUNK_BYTES;
}

static void group_free(struct tw_tasks *t, struct group *g)
{
    size_t b = group_bytes(t, g);
    if (t->user_alloc) {
        mem(t, g->p, b, 0);
    } else {
        tw_big_unmap_(g->p, TW_BIG_MIN);
        t->bytes -= b;
    }
    g->p = NULL;
    g->filled = 0;
}

/* Chunk k of a new or partly used group g (allocated if k == 0), or NULL. */
static struct entry *group_chunk(struct tw_tasks *t, uint32_t g, uint32_t k)
{
    if (k == 0) { /* the first chunk of a new group */
        if (g >= t->groups_cap) {
            uint32_t ncap = t->groups_cap ? t->groups_cap * 2 : 4;
            struct group *gs =
                mem(t, t->groups, t->groups_cap * sizeof *gs, ncap * sizeof *gs);
            if (!gs)
                return NULL;
            t->groups = gs;
            t->groups_cap = ncap;
        }
        struct group *gr = &t->groups[g];
        gr->filled = 0;
        if (t->user_alloc) {
            gr->p = mem(t, NULL, 0, (size_t)GROUP * CHUNK_BYTES);
        } else if (g + 1 > GROUPS_LAZY || t->floor_chunks >= GROUP * (g + 2)) {
            /* (config.capacity says this group will be filled) */
            gr->p = tw_big_alloc_(TW_BIG_MIN);
            gr->filled = GROUP; /* one huge page from its first touch */
            if (gr->p)
                t->bytes += TW_BIG_MIN;
        } else {
            gr->p = tw_big_map_(TW_BIG_MIN);
        }
        if (!gr->p)
            return NULL;
    }
    struct group *gr = &t->groups[g];
    if (k >= gr->filled) { /* new pages (default allocator): count them */
        gr->filled = k + 1;
        if (!t->user_alloc) {
            t->bytes += CHUNK_BYTES;
            if (gr->filled == GROUP) {
                t->bytes += TW_BIG_MIN - (size_t)GROUP * CHUNK_BYTES;
                tw_big_hugify_(gr->p, TW_BIG_MIN);
            }
        }
    }
    return (struct entry *)(void *)(gr->p + (size_t)k * CHUNK_BYTES);
}

/* Groups allocated while the pool has nchunks chunks. */
static inline uint32_t groups_for(uint32_t nchunks)
{
    return nchunks > GROUP ? (nchunks - GROUP + GROUP - 1) / GROUP : 0;
}

/* Free the chunks from `keep` on (and the groups wholly above it). */
static void pool_release(struct tw_tasks *t, uint32_t keep)
{
    for (uint32_t c = keep; c < t->nchunks && c < GROUP; c++)
        mem(t, t->chunks[c], CHUNK_BYTES, 0);
    for (uint32_t g = groups_for(keep); g < groups_for(t->nchunks); g++)
        group_free(t, &t->groups[g]);
    t->nchunks = keep;
}

static inline struct entry *entry_at(const struct tw_tasks *t, uint32_t idx)
{
    return &t->chunks[idx / CHUNK][idx % CHUNK];
}

/* The home word of entry idx: its key's hash >> 32, which alone places it
 * in an index of any size (tw_hash_home), kept after the chunk's entries so
 * that a rehash reads 4 bytes per task, sequential in index order, instead
 * of the 48-byte entry and a SipHash (see rehash). Written by every set
 * that takes an entry, copied by compaction. */
static inline uint32_t *hi_at(const struct tw_tasks *t, uint32_t idx)
{
    return (uint32_t *)(void *)(t->chunks[idx / CHUNK] + CHUNK) + idx % CHUNK;
}

/* Prefetch (for writing) all of an entry. Entries are 48 bytes, so half of
 * them straddle two cache lines (those at 32 and 48 bytes into a line):
 * their key, which a lookup compares, is then on the second line, which a
 * prefetch of the entry's address alone would leave to miss. */
static inline void prefetch_entry(const struct entry *e)
{
    __builtin_prefetch(e, 1);
    __builtin_prefetch((const char *)e + sizeof *e - 1, 1);
}

static inline size_t block_len(const unsigned char *b)
{
    return (size_t)b[0] | (size_t)b[1] << 8;
}

/* A string key's bytes and length. */
static inline const unsigned char *key_bytes(const union stored_key *k, size_t *len)
{
    if (k->b[KEY_INLINE] != KEY_OUTSIDE) {
        *len = k->b[KEY_INLINE];
        return k->b;
    }
    *len = block_len(k->block);
    return k->block + 2;
}

static inline void free_entry(struct tw_tasks *t, uint32_t idx)
{
    struct entry *e = entry_at(t, idx);
    e->u.idle.next = t->free_head;
    t->free_head = idx;
}

static void free_key(struct tw_tasks *t, const union stored_key *k)
{
    if (!t->int_keys && k->b[KEY_INLINE] == KEY_OUTSIDE)
        mem(t, k->block, block_len(k->block) + 2, 0);
}

static int rehash(struct tw_tasks *t, uint32_t new_cap, uint32_t new_bits);

/* Add one chunk of free entries. Widens the index's entry field first if the
 * pool outgrows it. Returns 0 or TW_ENOMEM (nothing changed). */
static int add_chunk(struct tw_tasks *t)
{
    uint64_t pool = (uint64_t)t->nchunks * CHUNK;
    if (pool + CHUNK > MAX_POOL)
        return TW_ENOMEM;
    if (pool + CHUNK + 2 > (uint64_t)t->mask + 1) {
        if (rehash(t, t->cap, t->bits + 1))
            return TW_ENOMEM;
    }
    if (t->nchunks == t->chunks_cap) {
        uint32_t ncap = t->chunks_cap ? t->chunks_cap * 2 : 4;
        struct entry **c = mem(t, t->chunks, t->chunks_cap * sizeof *c, ncap * sizeof *c);
        if (!c)
            return TW_ENOMEM;
        t->chunks = c;
        t->chunks_cap = ncap;
    }
    struct entry *chunk;
    uint32_t c = t->nchunks;
    if (c < GROUP) {
        chunk = mem(t, NULL, 0, CHUNK_BYTES);
        if (!chunk)
            return TW_ENOMEM;
    } else {
        chunk = group_chunk(t, (c - GROUP) / GROUP, (c - GROUP) % GROUP);
        if (!chunk)
            return TW_ENOMEM;
    }
    uint32_t base = t->nchunks * CHUNK;
    t->chunks[t->nchunks++] = chunk;
    for (uint32_t i = CHUNK; i-- > 0;) {
        chunk[i].u.idle.next = t->free_head;
        t->free_head = base + i;
    }
    return 0;
}

/* ---- index ------------------------------------------------------------------ */

/* SipHash-1-3 of a key of len <= KEY_INLINE bytes in its stored form (an
 * entry's key, or a lookup's keyref.in): equal to tw_siphash13 of its bytes
 * (as the flooding test computes it), since SipHash reads the key as
 * little-endian words and its last word is the tail bytes with the length in
 * the top byte, which is what w[] hold. No byte loop, no tail switch. */
static inline uint64_t siphash13_inline(const union stored_key *in, size_t len, uint64_t k0,
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

static inline uint64_t hash_entry(const struct tw_tasks *t, const struct entry *e)
{
    if (t->int_keys)
        return tw_hash_int(e->key.num, t->k0, t->k1);
    if (e->key.b[KEY_INLINE] != KEY_OUTSIDE)
        return siphash13_inline(&e->key, e->key.b[KEY_INLINE], t->k0, t->k1);
    return tw_siphash13(e->key.block + 2, block_len(e->key.block), t->k0, t->k1);
}

static inline int key_eq(const struct tw_tasks *t, const struct entry *e, const struct keyref *k)
{
    if (t->int_keys)
        return e->key.num == k->num;
    if (k->len <= KEY_INLINE) /* the length is in w[1]'s last byte */
        return ((e->key.w[0] ^ k->in.w[0]) | (e->key.w[1] ^ k->in.w[1])) == 0;
    return e->key.b[KEY_INLINE] == KEY_OUTSIDE && block_len(e->key.block) == k->len &&
           memcmp(e->key.block + 2, k->p, k->len) == 0;
}

static inline uint32_t tag_of(uint64_t h, uint32_t mask)
{
    return (uint32_t)h & ~mask;
}

/* The slot holding key k, or NIL. With insert_at, also the slot where k
 * would be inserted (the first tombstone or the empty slot that ended the
 * probe). */
static inline __attribute__((always_inline)) uint32_t probe(const struct tw_tasks *t,
                                                            const struct keyref *k,
                                                            uint32_t *insert_at)
{
    uint32_t mask = t->mask, tag = tag_of(k->h, mask);
    uint32_t pos = tw_hash_home(k->h, t->cap), tomb = NIL;
    for (;;) {
        uint32_t s = t->slots[pos];
        if (s == SLOT_EMPTY) {
            if (insert_at)
                *insert_at = tomb != NIL ? tomb : pos;
            return NIL;
        }
        if (s == SLOT_TOMB) {
            if (tomb == NIL)
                tomb = pos;
        } else if ((s & ~mask) == tag && key_eq(t, entry_at(t, (s & mask) - 2), k)) {
            return pos;
        }
        if (++pos == t->cap)
            pos = 0;
    }
}

/* The slot holding key k, or NIL: probe without an insert position, for
 * move, remove and get, inlined into them (a call of probe costs ~35
 * instructions of prologue and epilogue, as many as its loop on a hit). */
static inline __attribute__((always_inline)) uint32_t find_key(const struct tw_tasks *t,
                                                               const struct keyref *k)
{
    uint32_t mask = t->mask, tag = tag_of(k->h, mask), cap = t->cap;
    const uint32_t *slots = t->slots;
    uint32_t pos = tw_hash_home(k->h, cap);
    for (;;) {
        uint32_t s = slots[pos];
        if (s == SLOT_EMPTY)
            return NIL;
        /* (a tombstone's tag bits are 0: tested after the tag) */
        if ((s & ~mask) == tag && s != SLOT_TOMB && key_eq(t, entry_at(t, (s & mask) - 2), k))
            return pos;
        if (++pos == cap)
            pos = 0;
    }
}

/* The slot pointing at entry e (which is in the index). */
static uint32_t slot_of_entry(const struct tw_tasks *t, const struct entry *e)
{
    uint64_t h = hash_entry(t, e);
    uint32_t pos = tw_hash_home(h, t->cap), tag = tag_of(h, t->mask);
    for (;; pos = pos + 1 == t->cap ? 0 : pos + 1) {
        uint32_t s = t->slots[pos];
        if (s > SLOT_TOMB && (s & ~t->mask) == tag && entry_at(t, (s & t->mask) - 2) == e)
            return pos;
    }
}

/* Empty slot pos. If the next slot is empty no probe needs pos (nor the
 * tombstones just before it) to go on: they become empty; else a tombstone. */
static void clear_slot(struct tw_tasks *t, uint32_t pos)
{
    uint32_t next = pos + 1 == t->cap ? 0 : pos + 1;
    t->live--;
    if (t->slots[next] != SLOT_EMPTY) {
        t->slots[pos] = SLOT_TOMB;
        t->tombs++;
        return;
    }
    t->slots[pos] = SLOT_EMPTY;
    t->used--;
    for (;;) {
        pos = pos == 0 ? t->cap - 1 : pos - 1;
        if (t->slots[pos] != SLOT_TOMB)
            break;
        t->slots[pos] = SLOT_EMPTY;
        t->used--;
        t->tombs--;
    }
}

/* Entry bits for a pool of n entries: index + 2 < 2^bits, at least 11. */
static uint32_t bits_for(uint64_t n)
{
    uint32_t b = 11;
    while (b < 32 && ((uint64_t)1 << b) < n + 2)
        b++;
    return b;
}

/* Capacity for n keys at load den / num, within [MIN_CAP, UINT32_MAX]. */
static uint32_t cap_at_load(uint64_t n, uint64_t num, uint64_t den)
{
    uint64_t c = n * num / den + 1;
    if (c < MIN_CAP)
        c = MIN_CAP;
    if (c > UINT32_MAX)
        c = UINT32_MAX;
    return (uint32_t)c;
}

/* Capacity for n keys at a load of 0.4, when the index grows. */
static uint32_t grow_cap_for(uint64_t n)
{
    return cap_at_load(n, 5, 2);
}

/* Capacity for n keys at a load of 0.55 (a shrink, config.capacity). */
static uint32_t cap_for(uint64_t n)
{
    return cap_at_load(n, 20, 11);
}

/* Rebuild the index with new_cap slots and new_bits entry bits (never fewer
 * than now), dropping the tombstones. Nothing is hashed and no entry is
 * read: an entry's home in any index comes from its home word (hi_at), and
 * its new tag is its old tag with the bits the entry field takes over
 * cleared (a tag is the hash's low 32 bits above `bits`, and bits only
 * grow here). So the walk reads the old index in order (sequential) and
 * one home word per task (4 bytes, 16 to a line, prefetched Q tasks
 * ahead), and writes the new index in nearly ascending order: a position
 * comes from the hash's high bits by fast range reduction, monotonic in
 * them, and the old index holds its tasks in the same order but for the
 * few displaced by probing, so the writes stream too. (Reading each entry
 * and hashing its key again would cost a cache miss per task, and so would
 * writing the new slots in random order.) Returns 0 or TW_ENOMEM (the old
 * index stays). */
#ifndef REHASH_AHEAD
#define REHASH_AHEAD 32 /* a power of two */
#endif
static int rehash(struct tw_tasks *t, uint32_t new_cap, uint32_t new_bits)
{
    if (new_cap < MIN_CAP)
        new_cap = MIN_CAP;
    /* Wide enough for every pool this index can hold without growing (the
     * pool grows by a chunk only when it is all live, and live <= 0.75 cap):
     * add_chunk then never has to rehash just to widen the entry field,
     * which cost a rehash of every task at each power of two on the way up
     * (about one more rehash per task on a fill). */
    uint32_t need = bits_for((uint64_t)new_cap * 3 / 4 + CHUNK);
    if (need > new_bits)
        new_bits = need;
    if (new_bits < t->bits) /* the tags below need it (callers never ask) */
        new_bits = t->bits;
    size_t ns_size = (size_t)new_cap * sizeof(uint32_t);
    uint32_t *ns = big(t, NULL, 0, ns_size);
    if (!ns)
        return TW_ENOMEM;
    if (t->user_alloc || ns_size < TW_BIG_MIN) /* else a fresh mapping: zero-filled */
        memset(ns, 0, ns_size);
    uint32_t new_mask = new_bits >= 32 ? UINT32_MAX : (UINT32_C(1) << new_bits) - 1;
    const uint32_t *os = t->slots;
    uint32_t cap = t->cap, mask = t->mask;
    /* A ring of the next Q live slots, each one's home word prefetched as it
     * is queued: the look-ahead counts tasks, not slots, so it stays as far
     * ahead in a sparse index (a shrink) as in a full one. */
    enum { Q = REHASH_AHEAD };
    uint32_t q[Q];
    uint32_t head = 0, tail = 0, scan = 0;
    for (;;) {
        while (tail - head < Q && scan < cap) {
            uint32_t s = os[scan++];
            if (s <= SLOT_TOMB)
                continue;
            __builtin_prefetch(hi_at(t, (s & mask) - 2));
            q[tail++ % Q] = s;
        }
        if (head == tail)
            break;
        uint32_t s = q[head++ % Q];
        uint32_t idx = (s & mask) - 2;
        uint32_t pos = tw_hash_home((uint64_t)*hi_at(t, idx) << 32, new_cap);
        while (ns[pos] != SLOT_EMPTY) {
            if (++pos == new_cap)
                pos = 0;
        }
        ns[pos] = (s & ~new_mask) | (idx + 2);
    }
    big(t, t->slots, (size_t)t->cap * sizeof *t->slots, 0);
    t->slots = ns;
    t->cap = new_cap;
    t->used = t->live;
    t->tombs = 0;
    t->bits = new_bits;
    t->mask = new_mask;
    return 0;
}

__attribute__((noinline)) static void shrink_index(struct tw_tasks *t)
{
    uint32_t c = cap_for(t->live);
    /* on failure keep the larger one */
    (void)rehash(t, c > t->floor_cap ? c : t->floor_cap, t->bits);
}

/* (The test inline, on every remove's path; the rehash out of line.) */
static inline void maybe_shrink(struct tw_tasks *t)
{
    if (__builtin_expect(t->cap > t->floor_cap && (uint64_t)t->live * 8 < t->cap, 0))
        shrink_index(t);
}

/* Move an entry's task to another (free) entry. */
static void relocate(struct tw_tasks *t, struct entry *from, struct entry *to)
{
    uint64_t deadline = tw_node_deadline(&from->u.node);
    tw_node_cancel(&t->wheel, &from->u.node);
    tw_node_init(&to->u.node);
    to->value = from->value;
    to->key = from->key;
    tw_node_arm(&t->wheel, &to->u.node, deadline, 0, 0);
}

/* Under a quarter of the pool live, above the capacity floor: a set
 * compacts first (one test on its path). */
static inline int compact_wanted(const struct tw_tasks *t)
{
    return (uint64_t)t->live * 4 < (uint64_t)t->nchunks * CHUNK && t->nchunks > 1 &&
           t->nchunks > t->floor_chunks;
}

/* Give chunks back when under a quarter of the pool is live (see the top). */
static void maybe_compact(struct tw_tasks *t)
{
    if (t->depth || t->nchunks <= 1 || t->nchunks <= t->floor_chunks ||
        (uint64_t)t->live * 4 >= (uint64_t)t->nchunks * CHUNK)
        return;
    /* Tasks left due by tw_tasks_advance_max (deadline == now) would be
     * re-armed to now + 1 by relocation: wait until they have run. */
    if (tw_wheel_next_expiry(&t->wheel) <= tw_wheel_now(&t->wheel))
        return;
    uint32_t keep = (uint32_t)(((uint64_t)t->live * 2 + CHUNK - 1) / CHUNK);
    if (keep < t->floor_chunks)
        keep = t->floor_chunks;
    if (keep == 0)
        keep = 1;
    if (keep >= t->nchunks)
        return;
    uint32_t limit = keep * CHUNK;
    /* The free entries below the limit: enough for every live one above it,
     * since limit >= 2 * live. */
    uint32_t holes = NIL;
    size_t words = ((size_t)limit + 63) / 64;
    uint64_t *live = mem(t, NULL, 0, words * sizeof *live);
    if (live) {
        /* Outside callbacks every entry is in the index or on the free list,
         * so the free ones below the limit are those the index does not
         * point at: one sequential pass over the index marks them in a
         * bitmap (limit / 8 bytes: it stays in cache), and a sequential pass
         * over the chunks lists them, lowest first. (Walking the free list
         * instead is a chain of dependent loads in random order: a cache miss
         * per free entry, most of the cost of a compaction at 10^6 tasks.) */
        memset(live, 0, words * sizeof *live);
        for (uint32_t pos = 0; pos < t->cap; pos++) {
            uint32_t s = t->slots[pos];
            if (s > SLOT_TOMB && (s & t->mask) - 2 < limit) {
                uint32_t i = (s & t->mask) - 2;
                live[i / 64] |= UINT64_C(1) << (i % 64);
            }
        }
        for (uint32_t i = limit; i-- > 0;) {
            if (!(live[i / 64] >> (i % 64) & 1)) {
                entry_at(t, i)->u.idle.next = holes;
                holes = i;
            }
        }
        mem(t, live, words * sizeof *live, 0);
    } else { /* no memory for the bitmap: walk the free list */
        for (uint32_t i = t->free_head; i != NIL;) {
            uint32_t next = entry_at(t, i)->u.idle.next;
            if (i < limit) {
                entry_at(t, i)->u.idle.next = holes;
                holes = i;
            }
            i = next;
        }
    }
    /* Relocate the live entries above the limit, in index order. Few
     * slots hold one (an eighth of them, at a quarter live and half of those
     * below the limit), so the look-ahead counts relocations, not slots:
     * the scan keeps Q of them queued, prefetching each one's entry as it
     * is queued and the wheel neighbours (which unlinking writes) of the
     * one NEAR places ahead. Relocating one rewrites its own slot only, so
     * the queued positions stay valid; a neighbour address read ahead may
     * be stale by then, which costs a useless prefetch, nothing more. */
    enum { Q = 16, NEAR = 8 }; /* Q a power of two */
    uint32_t queue[Q];
    uint32_t head = 0, tail = 0, scan = 0;
    for (;;) {
        while (tail - head < Q && scan < t->cap) {
            uint32_t s = t->slots[scan++];
            if (s <= SLOT_TOMB || (s & t->mask) - 2 < limit)
                continue;
            prefetch_entry(entry_at(t, (s & t->mask) - 2));
            __builtin_prefetch(hi_at(t, (s & t->mask) - 2));
            queue[tail++ % Q] = scan - 1;
        }
        if (head == tail)
            break;
        if (tail - head > NEAR) {
            uint32_t sn = t->slots[queue[(head + NEAR) % Q]];
            const struct tw_node *n = &entry_at(t, (sn & t->mask) - 2)->u.node;
            if (n->pprev)
                __builtin_prefetch(n->pprev, 1);
            if (n->next)
                __builtin_prefetch(n->next, 1);
        }
        uint32_t pos = queue[head++ % Q];
        uint32_t s = t->slots[pos];
        uint32_t to = holes;
        holes = entry_at(t, to)->u.idle.next;
        relocate(t, entry_at(t, (s & t->mask) - 2), entry_at(t, to));
        *hi_at(t, to) = *hi_at(t, (s & t->mask) - 2);
        t->slots[pos] = (s & ~t->mask) | (to + 2);
    }
    pool_release(t, keep);
    t->free_head = holes;
}

/* ---- lifetime ----------------------------------------------------------------- */

int tw_tasks_new(struct tw_tasks **out, const struct tw_tasks_config *cfg)
{
    if (!out)
        return TW_EINVAL;
    *out = NULL;
    if (!cfg || !cfg->execute ||
        (cfg->key_kind != TW_TASKS_KEY_BYTES && cfg->key_kind != TW_TASKS_KEY_INT) ||
        (cfg->allocator && !cfg->allocator->fn) || cfg->slack_shift > TW_TASKS_SLACK_SHIFT_MAX)
        return TW_EINVAL;
    struct tw_tasks *t = tw_mem_new_(cfg->allocator, sizeof *t, offsetof(struct tw_tasks, alloc));
    if (!t)
        return TW_ENOMEM;
    t->user_alloc = cfg->allocator != NULL;
    t->bytes = sizeof *t;
    tw_wheel_init(&t->wheel, cfg->now);
    t->execute = cfg->execute;
    t->ctx = cfg->ctx;
    t->int_keys = cfg->key_kind == TW_TASKS_KEY_INT;
    t->max_pending = cfg->max_pending;
    t->slack_shift = cfg->slack_shift;
    t->eager = cfg->eager_rearm != 0;
    t->not_lazy = cfg->slack_shift != 0 || t->eager;
    uint64_t seed[2] = {cfg->seed[0], cfg->seed[1]};
    if (!seed[0] && !seed[1])
        tw_random_seed_(seed);
    t->k0 = seed[0];
    t->k1 = seed[1];
    t->free_head = NIL;
    t->bits = 11; /* room for the first two chunks */
    t->floor_cap = MIN_CAP;
    if (cfg->capacity) {
        /* Sized so that `capacity` tasks neither grow the index nor widen
         * its entry field (add_chunk): bits cover the pool they need. */
        uint64_t want = cfg->capacity < MAX_POOL - 1 ? cfg->capacity : MAX_POOL - 1;
        uint64_t pool = (want + CHUNK - 1) / CHUNK * CHUNK;
        t->floor_cap = cap_for(want);
        t->bits = bits_for(pool > (uint64_t)t->floor_cap * 3 / 4 + CHUNK
                               ? pool
                               : (uint64_t)t->floor_cap * 3 / 4 + CHUNK);
        t->floor_chunks = (uint32_t)(pool / CHUNK);
    }
    t->mask = t->bits >= 32 ? UINT32_MAX : (UINT32_C(1) << t->bits) - 1;
    size_t sz = (size_t)t->floor_cap * sizeof *t->slots;
    t->slots = big(t, NULL, 0, sz);
    if (!t->slots) {
        tw_mem_free_(&t->alloc, t, sizeof *t);
        return TW_ENOMEM;
    }
    if (t->user_alloc || sz < TW_BIG_MIN) /* else a fresh mapping: zero-filled */
        memset(t->slots, 0, sz);
    t->cap = t->floor_cap;
    *out = t;
    return 0;
}

int tw_tasks_free(struct tw_tasks *t)
{
    if (!t)
        return 0;
    if (t->depth) /* inside execute or drain's fn: the caller still uses t */
        return TW_EBUSY;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t s = t->slots[pos];
        if (s > SLOT_TOMB)
            free_key(t, &entry_at(t, (s & t->mask) - 2)->key);
    }
    pool_release(t, 0);
    mem(t, t->groups, t->groups_cap * sizeof *t->groups, 0);
    mem(t, t->chunks, t->chunks_cap * sizeof *t->chunks, 0);
    big(t, t->slots, (size_t)t->cap * sizeof *t->slots, 0);
    tw_mem_free_(&t->alloc, t, sizeof *t);
    return 0;
}

/* ---- operations --------------------------------------------------------------- */

static inline uint32_t load32_(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* k->in for a key of len <= KEY_INLINE bytes: its bytes, zeroes, and len in
 * the last byte, as do_set stores it (little-endian: two to three loads, no
 * byte loop and no memcpy call). */
static inline void inline_form(struct keyref *k, const unsigned char *p, size_t len)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t lo = 0, hi = 0;
    if (len >= 8) {
        lo = tw_hash_load64le_(p);
        if (len > 8) /* bytes 8..len-1 from the word that ends the key */
            hi = tw_hash_load64le_(p + len - 8) >> (8 * (16 - len));
    } else if (len >= 4) { /* two overlapping 4-byte loads */
        lo = load32_(p) | (uint64_t)load32_(p + len - 4) << (8 * (len - 4));
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
    k->in.b[KEY_INLINE] = (unsigned char)len;
#endif
}

/* Fill k for a checked string key. */
static inline void str_keyref(const struct tw_tasks *t, const void *key, size_t len,
                              struct keyref *k)
{
    k->p = key;
    k->len = len;
    k->num = 0;
    if (len <= KEY_INLINE) {
        inline_form(k, key, len);
        k->h = siphash13_inline(&k->in, len, t->k0, t->k1);
    } else {
        k->h = tw_siphash13(key, len, t->k0, t->k1);
    }
}

/* Check a string key; fill k. */
static int bytes_key(const struct tw_tasks *t, const void *key, size_t len, struct keyref *k)
{
    if (!t || !key || t->int_keys)
        return TW_EINVAL;
    if (len > TW_TASKS_KEY_MAX)
        return TW_E2BIG;
    str_keyref(t, key, len, k);
    return 0;
}

static int int_key(const struct tw_tasks *t, uint64_t key, struct keyref *k)
{
    if (!t || !t->int_keys)
        return TW_EINVAL;
    k->p = NULL;
    k->len = 0;
    k->num = key;
    k->h = tw_hash_int(key, t->k0, t->k1);
    return 0;
}

/* An arm that is not exact and lazy: with slack, or exact and eager if
 * config.eager_rearm says so (a slack arm is not: it relocates at once
 * anyway). Out of line: the default path only tests for it. */
__attribute__((noinline)) static void arm_other(struct tw_tasks *t, struct entry *e,
                                                uint64_t deadline, uint64_t slack)
{
    if (slack)
        tw_node_arm(&t->wheel, &e->u.node, deadline, slack, 0);
    else if (t->eager)
        tw_node_arm(&t->wheel, &e->u.node, deadline, 0, TW_ARM_EAGER);
    else
        tw_node_arm(&t->wheel, &e->u.node, deadline, 0, 0);
}

/* Arm e at the absolute tick `deadline` with `slack`. `lazy`, a constant,
 * says the call arms exact and lazy (the instance has neither slack_shift
 * nor eager_rearm, and the call gives no slack): the core's exact lazy arm,
 * without a test. Else one test sends slack and eager arms out of line. */
static inline __attribute__((always_inline)) void arm(struct tw_tasks *t, struct entry *e,
                                                      uint64_t deadline, uint64_t slack, int lazy)
{
    if (!lazy && __builtin_expect(slack != 0 || t->eager, 0))
        arm_other(t, e, deadline, slack);
    else
        tw_node_arm(&t->wheel, &e->u.node, deadline, 0, 0);
}

/* The slack config.slack_shift gives a delay (>= 0): 0 when exact. */
static inline uint64_t config_slack(const struct tw_tasks *t, int64_t delay)
{
    return t->slack_shift ? (uint64_t)delay >> t->slack_shift : 0;
}

/* The seam of every set: key k (checked and hashed once by the caller) to
 * run at the absolute tick `deadline` with `slack` (`lazy`: see arm).
 * Returns 1 if new, 0 if present (re-armed, value replaced), TW_ERANGE,
 * TW_EFULL or TW_ENOMEM, changing nothing then. */
static inline __attribute__((always_inline)) int set_at(struct tw_tasks *t, const struct keyref *k,
                                                        void *value, uint64_t deadline,
                                                        uint64_t slack, int lazy)
{
    /* (Time at UINT64_MAX saturates every deadline to it: one test of the
     * deadline on the path, the time read only then.) */
    if (__builtin_expect(deadline == UINT64_MAX, 0) && tw_wheel_now(&t->wheel) == UINT64_MAX)
        return TW_ERANGE;
    if (__builtin_expect(compact_wanted(t), 0)) /* removals left the pool sparse */
        maybe_compact(t);
    uint32_t ins = 0; /* (set by probe whenever it returns NIL) */
    uint32_t pos = probe(t, k, &ins);
    if (pos != NIL) {
        struct entry *e = entry_at(t, (t->slots[pos] & t->mask) - 2);
        e->value = value;
        arm(t, e, deadline, slack, lazy);
        return 0;
    }
    if (t->max_pending && t->live >= t->max_pending)
        return TW_EFULL;
    if (t->live >= MAX_POOL - 1)
        return TW_ENOMEM;
    /* Make room first (each step leaves a valid instance if a later one fails),
     * then commit. */
    int moved = 0;
    if ((uint64_t)(t->used + 1) * 4 > (uint64_t)t->cap * 3) {
        if (rehash(t, grow_cap_for((uint64_t)t->live + 1), t->bits))
            return TW_ENOMEM;
        moved = 1;
    }
    if (t->free_head == NIL) {
        uint32_t bits = t->bits;
        if (add_chunk(t))
            return TW_ENOMEM;
        moved |= bits != t->bits;
    }
    union stored_key key;
    memset(&key, 0, sizeof key);
    if (t->int_keys) {
        key.num = k->num;
    } else if (k->len <= KEY_INLINE) {
        key = k->in;
    } else {
        unsigned char *b = mem(t, NULL, 0, k->len + 2);
        if (!b)
            return TW_ENOMEM;
        b[0] = (unsigned char)(k->len & 0xff);
        b[1] = (unsigned char)(k->len >> 8);
        memcpy(b + 2, k->p, k->len);
        key.block = b;
        key.b[KEY_INLINE] = KEY_OUTSIDE;
    }
    if (moved) /* the same hash, in the new index */
        (void)probe(t, k, &ins);
    uint32_t idx = t->free_head;
    struct entry *e = entry_at(t, idx);
    t->free_head = e->u.idle.next;
    tw_node_init(&e->u.node);
    e->value = value;
    e->key = key;
    *hi_at(t, idx) = (uint32_t)(k->h >> 32);
    if (t->slots[ins] == SLOT_EMPTY)
        t->used++;
    else
        t->tombs--;
    t->slots[ins] = tag_of(k->h, t->mask) | (idx + 2);
    t->live++;
    arm(t, e, deadline, slack, lazy);
    return 1;
}

/* set_at out of line: any arm, and the exact lazy arm of the default
 * instance (no test on its path). */
__attribute__((noinline)) static int do_set(struct tw_tasks *t, const struct keyref *k,
                                            void *value, uint64_t deadline, uint64_t slack)
{
    return set_at(t, k, value, deadline, slack, 0);
}

__attribute__((noinline)) static int do_set_lazy(struct tw_tasks *t, const struct keyref *k,
                                                 void *value, uint64_t deadline)
{
    return set_at(t, k, value, deadline, 0, 1);
}

static inline int do_remove(struct tw_tasks *t, const struct keyref *k, void **value)
{
    uint32_t pos = find_key(t, k);
    if (pos == NIL)
        return TW_ENOENT;
    uint32_t idx = (t->slots[pos] & t->mask) - 2;
    struct entry *e = entry_at(t, idx);
    tw_node_cancel(&t->wheel, &e->u.node);
    if (value)
        *value = e->value;
    free_key(t, &e->key);
    clear_slot(t, pos);
    free_entry(t, idx);
    maybe_shrink(t);
    /* No compaction here: the next set, advance or drain does it (see the
     * top), so a run of removals moves nothing. */
    return 0;
}

static inline int do_get(const struct tw_tasks *t, const struct keyref *k, void **value,
                         uint64_t *deadline)
{
    uint32_t pos = find_key(t, k);
    if (pos == NIL)
        return TW_ENOENT;
    const struct entry *e = entry_at(t, (t->slots[pos] & t->mask) - 2);
    if (value)
        *value = e->value;
    if (deadline)
        *deadline = tw_node_deadline(&e->u.node);
    return 0;
}

/* A set or move whose key check gave rc (0: k is filled): its delay checked
 * and made an absolute deadline, once, and its slack the call's (`slack`, of
 * a *_slack call) or config.slack_shift's (NULL); the default instance
 * (exact, lazy) is told apart by one test of not_lazy. */
static inline int set_in(struct tw_tasks *t, int rc, const struct keyref *k, void *value,
                         int64_t delay, const uint64_t *slack)
{
    if (rc)
        return rc;
    if (delay < 0)
        return TW_EINVAL;
    uint64_t deadline = tw_deadline_in(tw_wheel_now(&t->wheel), (uint64_t)delay);
    if (slack)
        return do_set(t, k, value, deadline, *slack);
    if (__builtin_expect(t->not_lazy, 0))
        return do_set(t, k, value, deadline, config_slack(t, delay));
    return do_set_lazy(t, k, value, deadline);
}

/* Every move: the lookup, then the deadline (after it, so that only the
 * delay waits in a register through the probe), then the arm. */
static inline int move_in(struct tw_tasks *t, int rc, const struct keyref *k, int64_t delay,
                          const uint64_t *slack)
{
    if (rc || delay < 0)
        return rc ? rc : TW_EINVAL;
    uint32_t pos = find_key(t, k);
    if (pos == NIL)
        return TW_ENOENT;
    uint64_t now = tw_wheel_now(&t->wheel);
    if (now == UINT64_MAX)
        return TW_ERANGE;
    struct entry *e = entry_at(t, (t->slots[pos] & t->mask) - 2);
    uint64_t deadline = tw_deadline_in(now, (uint64_t)delay);
    if (slack)
        arm(t, e, deadline, *slack, 0);
    else if (__builtin_expect(t->not_lazy, 0))
        arm(t, e, deadline, config_slack(t, delay), 0);
    else
        arm(t, e, deadline, 0, 1);
    return 0;
}

int tw_tasks_set(struct tw_tasks *t, const void *key, size_t key_len, void *value, int64_t delay)
{
    struct keyref k;
    return set_in(t, bytes_key(t, key, key_len, &k), &k, value, delay, NULL);
}

int tw_tasks_set_int(struct tw_tasks *t, uint64_t key, void *value, int64_t delay)
{
    struct keyref k;
    return set_in(t, int_key(t, key, &k), &k, value, delay, NULL);
}

int tw_tasks_set_slack(struct tw_tasks *t, const void *key, size_t key_len, void *value,
                       int64_t delay, uint64_t slack)
{
    struct keyref k;
    return set_in(t, bytes_key(t, key, key_len, &k), &k, value, delay, &slack);
}

int tw_tasks_set_slack_int(struct tw_tasks *t, uint64_t key, void *value, int64_t delay,
                           uint64_t slack)
{
    struct keyref k;
    return set_in(t, int_key(t, key, &k), &k, value, delay, &slack);
}

int tw_tasks_move(struct tw_tasks *t, const void *key, size_t key_len, int64_t delay)
{
    struct keyref k;
    return move_in(t, bytes_key(t, key, key_len, &k), &k, delay, NULL);
}

int tw_tasks_move_int(struct tw_tasks *t, uint64_t key, int64_t delay)
{
    struct keyref k;
    return move_in(t, int_key(t, key, &k), &k, delay, NULL);
}

int tw_tasks_move_slack(struct tw_tasks *t, const void *key, size_t key_len, int64_t delay,
                        uint64_t slack)
{
    struct keyref k;
    return move_in(t, bytes_key(t, key, key_len, &k), &k, delay, &slack);
}

int tw_tasks_move_slack_int(struct tw_tasks *t, uint64_t key, int64_t delay, uint64_t slack)
{
    struct keyref k;
    return move_in(t, int_key(t, key, &k), &k, delay, &slack);
}

int tw_tasks_remove(struct tw_tasks *t, const void *key, size_t key_len, void **value)
{
    struct keyref k;
    int rc = bytes_key(t, key, key_len, &k);
    return rc ? rc : do_remove(t, &k, value);
}

int tw_tasks_remove_int(struct tw_tasks *t, uint64_t key, void **value)
{
    struct keyref k;
    int rc = int_key(t, key, &k);
    return rc ? rc : do_remove(t, &k, value);
}

int tw_tasks_get(const struct tw_tasks *t, const void *key, size_t key_len, void **value,
                 uint64_t *deadline)
{
    struct keyref k;
    int rc = bytes_key(t, key, key_len, &k);
    return rc ? rc : do_get(t, &k, value, deadline);
}

int tw_tasks_get_int(const struct tw_tasks *t, uint64_t key, void **value, uint64_t *deadline)
{
    struct keyref k;
    int rc = int_key(t, key, &k);
    return rc ? rc : do_get(t, &k, value, deadline);
}

/* ---- batched keyed calls ------------------------------------------------------ */
/* A software pipeline over groups of B_GROUP items (see twheel/tasks.h).
 * Each step runs the calls of one group while the groups after it pass
 * through the look-ahead stages, each stage doing its group's items back to
 * back:
 *   group + 4  string keys: the caller's key bytes prefetched
 *   group + 3  keys checked and hashed, home slots prefetched
 *   group + 2  slots read (a tag match: the entry prefetched, both lines)
 *   group + 1  move and remove: entries read, the wheel neighbours that
 *              unlinking writes prefetched
 *   group      the calls, in item order.
 * Grouping is what makes the prefetches overlap: a prefetch that misses
 * holds up retirement until its line (or its page walk) arrives, so
 * prefetches one item apart, with a call's worth of work between them,
 * mostly waited one after the other; issued B_GROUP at a time, their waits
 * overlap, and a stage's group is a whole step (B_GROUP calls) ahead of the
 * next stage, time for its lines to arrive.
 * The look-ahead stages only read (slots by tag, never a key compare) and
 * only prefetch: the real call on an item starts from its hash alone, so an
 * earlier item that rehashes the index, compacts the pool or frees an entry
 * cannot make a stage read freed memory (a stale prefetch address is
 * harmless: prefetches do not fault) nor change a result. Results are those
 * of the single calls in array order. */

#ifndef B_GROUP
#define B_GROUP 8 /* items per group */
#endif
#define B_RING (B_GROUP * 4) /* items hashed but not yet called: 4 groups */

enum batch_op { B_SET, B_MOVE, B_REMOVE, B_GET };

/* Validate item's key as the single calls do; fill k (hash included). */
static inline int item_key(const struct tw_tasks *t, const struct tw_tasks_item *it,
                           struct keyref *k)
{
    if (t->int_keys) {
        k->p = NULL;
        k->len = 0;
        k->num = it->key_int;
        k->h = tw_hash_int(it->key_int, t->k0, t->k1);
        return 0;
    }
    if (!it->key)
        return TW_EINVAL;
    if (it->key_len > TW_TASKS_KEY_MAX)
        return TW_E2BIG;
    str_keyref(t, it->key, it->key_len, k);
    return 0;
}

/* The entry a slot scan from h's home finds by tag alone (no key compare:
 * for prefetching only), or NULL. Looks at most 8 slots. */
static inline const struct entry *entry_by_tag(const struct tw_tasks *t, uint64_t h)
{
    uint32_t mask = t->mask, tag = tag_of(h, mask);
    uint32_t pos = tw_hash_home(h, t->cap);
    for (unsigned n = 0; n < 8; n++) {
        uint32_t s = t->slots[pos];
        if (s == SLOT_EMPTY)
            return NULL;
        if (s != SLOT_TOMB && (s & ~mask) == tag)
            return entry_at(t, (s & mask) - 2);
        if (++pos == t->cap)
            pos = 0;
    }
    return NULL;
}

static inline __attribute__((always_inline)) int64_t
run_batch(struct tw_tasks *t, struct tw_tasks_item *items, size_t n, enum batch_op op)
{
    if (!t || (!items && n))
        return TW_EINVAL;
    struct keyref ring[B_RING];
    int bad[B_RING];
    /* Stage 2's entry for stage 1 (move, remove), a step later: between the
     * two only move and remove calls run, which free no pool memory (only
     * compaction does, from set, advance and drain), so the entry, freed or
     * reused by then or not, is still mapped; what stage 1 reads in it only
     * feeds prefetches. */
    const struct entry *ent[B_RING];
    size_t groups = (n + B_GROUP - 1) / B_GROUP;
    int64_t ok = 0;
    /* Step s calls group s - 4; its stages work on groups s - 3 .. s. */
    for (size_t s = 0; s < groups + 4; s++) {
        size_t g, j, end;
        /* Stage 4: the caller's key bytes (hashed a step later). */
        g = s;
        if (!t->int_keys && g < groups) {
            for (j = g * B_GROUP, end = j + B_GROUP < n ? j + B_GROUP : n; j < end; j++)
                if (items[j].key)
                    __builtin_prefetch(items[j].key);
        }
        if (s < 1)
            continue;
        /* Stage 3: check and hash, prefetch the home slots. */
        g = s - 1;
        if (g < groups) {
            for (j = g * B_GROUP, end = j + B_GROUP < n ? j + B_GROUP : n; j < end; j++) {
                struct keyref *k = &ring[j % B_RING];
                bad[j % B_RING] = item_key(t, &items[j], k);
                if (!bad[j % B_RING])
                    __builtin_prefetch(&t->slots[tw_hash_home(k->h, t->cap)]);
            }
        }
        if (s < 2)
            continue;
        /* Stage 2: the entries a tag matches. */
        g = s - 2;
        if (g < groups) {
            for (j = g * B_GROUP, end = j + B_GROUP < n ? j + B_GROUP : n; j < end; j++) {
                ent[j % B_RING] = NULL;
                if (bad[j % B_RING])
                    continue;
                const struct entry *e = entry_by_tag(t, ring[j % B_RING].h);
                ent[j % B_RING] = e;
                if (e)
                    prefetch_entry(e); /* get only reads it: no matter */
            }
        }
        if (s < 3)
            continue;
        /* Stage 1: the wheel neighbours (move, remove). */
        g = s - 3;
        if ((op == B_MOVE || op == B_REMOVE) && g < groups) {
            for (j = g * B_GROUP, end = j + B_GROUP < n ? j + B_GROUP : n; j < end; j++) {
                const struct entry *e = ent[j % B_RING];
                if (e && e->u.node.pprev) {
                    __builtin_prefetch(e->u.node.pprev, 1);
                    if (e->u.node.next)
                        __builtin_prefetch(e->u.node.next, 1);
                }
            }
        }
        if (s < 4)
            continue;
        /* The calls. */
        g = s - 4;
        for (j = g * B_GROUP, end = j + B_GROUP < n ? j + B_GROUP : n; j < end; j++) {
            if (op == B_SET && t->free_head != NIL) {
                prefetch_entry(entry_at(t, t->free_head));
                __builtin_prefetch(hi_at(t, t->free_head), 1);
            }
            struct tw_tasks_item *it = &items[j];
            const struct keyref *k = &ring[j % B_RING];
            int rc = bad[j % B_RING];
            if (!rc) {
                switch (op) {
                case B_SET: rc = set_in(t, 0, k, it->value, it->delay_ticks, NULL); break;
                case B_MOVE: rc = move_in(t, 0, k, it->delay_ticks, NULL); break;
                case B_REMOVE: rc = do_remove(t, k, &it->value); break;
                default: rc = do_get(t, k, &it->value, &it->deadline); break;
                }
            }
            it->result = rc;
            ok += rc >= 0;
        }
    }
    return ok;
}

int64_t tw_tasks_set_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    return run_batch(t, items, n, B_SET);
}

int64_t tw_tasks_move_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    return run_batch(t, items, n, B_MOVE);
}

int64_t tw_tasks_remove_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    return run_batch(t, items, n, B_REMOVE);
}

int64_t tw_tasks_get_many(const struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    /* get never writes the instance: run_batch's B_GET path only reads it. */
    return run_batch((struct tw_tasks *)t, items, n, B_GET);
}

/* ---- running tasks ------------------------------------------------------------ */

/* `key` is the caller's copy of the entry's key: the entry itself may be
 * reused by a set in the callback. */
static inline void fill_task(const struct tw_tasks *t, struct tw_task *task,
                             const union stored_key *key, void *value, uint64_t deadline)
{
    if (t->int_keys) {
        task->key = NULL;
        task->key_len = 0;
        task->key_int = key->num;
    } else {
        task->key = key_bytes(key, &task->key_len);
        task->key_int = 0;
    }
    task->value = value;
    task->deadline = deadline;
}

int64_t tw_tasks_drain(struct tw_tasks *t, tw_tasks_fn *fn, void *ctx)
{
    if (!t)
        return TW_EINVAL;
    if (!fn) {
        fn = t->execute;
        ctx = t->ctx;
    }
    /* Detach the whole batch first: the index is then empty, and whatever fn
     * does lands in it as new tasks. */
    uint32_t head = NIL;
    int64_t n = 0;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t s = t->slots[pos];
        if (s <= SLOT_TOMB)
            continue;
        uint32_t idx = (s & t->mask) - 2;
        struct entry *e = entry_at(t, idx);
        uint64_t deadline = tw_node_deadline(&e->u.node);
        tw_node_cancel(&t->wheel, &e->u.node);
        e->u.idle.deadline = deadline;
        e->u.idle.next = head;
        head = idx;
        n++;
    }
    memset(t->slots, 0, (size_t)t->cap * sizeof *t->slots);
    t->used = t->tombs = t->live = 0;
    maybe_shrink(t);
    t->depth++;
    while (head != NIL) {
        uint32_t idx = head;
        struct entry *e = entry_at(t, idx);
        head = e->u.idle.next;
        struct tw_task task;
        union stored_key key = e->key;
        fill_task(t, &task, &key, e->value, e->u.idle.deadline);
        free_entry(t, idx);
        fn(ctx, &task);
        free_key(t, &key);
    }
    t->depth--;
    maybe_compact(t);
    return n;
}

int64_t tw_tasks_advance_max(struct tw_tasks *t, uint64_t now, size_t max)
{
    if (!t)
        return TW_EINVAL;
    if (t->depth) /* inside execute or drain's fn */
        return TW_EBUSY;
    t->depth++;
    int64_t n = 0;
    struct tw_node *node;
    while ((max == 0 || (size_t)n < max) && (node = tw_wheel_expire_next_node(&t->wheel, now))) {
        struct entry *e = tw_container_of(node, struct entry, u.node);
        /* Entries do not store their index: their slot has it. */
        uint32_t pos = slot_of_entry(t, e);
        uint32_t idx = (t->slots[pos] & t->mask) - 2;
        struct tw_task task;
        union stored_key key = e->key;
        fill_task(t, &task, &key, e->value, tw_wheel_now(&t->wheel));
        clear_slot(t, pos);
        free_entry(t, idx);
        n++;
        t->execute(t->ctx, &task);
        free_key(t, &key);
    }
    t->depth--;
    maybe_shrink(t);
    maybe_compact(t);
    return n;
}

int64_t tw_tasks_advance(struct tw_tasks *t, uint64_t now)
{
    return tw_tasks_advance_max(t, now, 0);
}

/* ---- figures ------------------------------------------------------------------ */

size_t tw_tasks_pending(const struct tw_tasks *t)
{
    return t ? t->live : 0;
}

uint64_t tw_tasks_now(const struct tw_tasks *t)
{
    return t ? tw_wheel_now(&t->wheel) : 0;
}

uint64_t tw_tasks_next_expiry(const struct tw_tasks *t)
{
    return t ? tw_wheel_next_expiry(&t->wheel) : TW_NEVER;
}

int tw_tasks_stats(const struct tw_tasks *t, struct tw_tasks_stats *s)
{
    if (!t || !s)
        return TW_EINVAL;
    memset(s, 0, sizeof *s);
    s->pending = t->live;
    s->index_slots = t->cap;
    s->index_tombs = t->tombs;
    s->pool_entries = (size_t)t->nchunks * CHUNK;
    s->bytes = t->bytes;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t sl = t->slots[pos];
        if (sl <= SLOT_TOMB)
            continue;
        uint32_t home = tw_hash_home((uint64_t)*hi_at(t, (sl & t->mask) - 2) << 32, t->cap);
        size_t dist = (size_t)(pos >= home ? pos - home : pos + t->cap - home) + 1;
        if (dist > s->max_probe)
            s->max_probe = dist;
    }
    return 0;
}
