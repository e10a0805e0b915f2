/* SPDX-License-Identifier: MIT */
/* twheel cache: entry memory. Each shard carves its entries out of chunks
 * of its own (a slab of size classes) instead of one malloc each:
 *
 *  - Chunks grow with the shard: the first is 1 KB, each next one as big as
 *    all before it, until the shard holds SLAB_BIG_FROM (256 KB); from then
 *    on every chunk is TW_BIG_MIN (2 MB). With the default allocator the
 *    2 MB chunks are 2 MB aligned mappings (bigmem.h), filled in small pages
 *    (only what is carved is resident) and turned into one huge page once
 *    half carved (the other half then becomes resident too: at most 1 MB a
 *    shard, only in shards past 1.25 MB of entries), so a big cache's
 *    entries are covered by few TLB entries (at 10^6 keys the entries are
 *    ~64 MB read in random order: with 4 KB pages nearly every read misses
 *    the TLB too). Chunks that doubled all the way to 2 MB, or became huge
 *    only when full, would leave a shard's first 2 MB and its last, partly
 *    carved chunk in small pages: a quarter of the entries at 10^6 keys,
 *    and gets about 6% dearer in CPU. A small cache stays small: a shard
 *    with a few keys holds one 1 KB chunk. With a user's allocator every
 *    chunk comes from it (no madvise: the memory is the user's), and they
 *    keep doubling up to 2 MB.
 *  - Blocks (LRU links, entry, key and copy-mode value bytes) are rounded up
 *    to 16 bytes; 64-byte blocks (entries with keys of up to 10 bytes) are
 *    carved on a 64-byte boundary, 16 at a time (the 16-48 bytes skipped
 *    go on their class's list: one gap per run even when entries of other
 *    sizes are carved in between), so that such an entry is one cache
 *    line; blocks of up to CACHE_SLAB_MAX bytes are carved from the
 *    chunks, bigger ones allocated alone.
 *  - Allocation runs under the shard lock: from the class's free list, else
 *    from what was given back meanwhile, else carved from the chunk.
 *  - A block is given back by whoever frees the entry (after the epochs made
 *    it unreachable, see cache/epoch.c; that thread holds no lock): it is
 *    pushed on its shard's `returned` stack with one atomic exchange loop.
 *    The shard is the entry's (the top bits of its stored hash, see
 *    cache_shard_of). The allocator takes the whole stack at once
 *    (atomic_exchange), so the stack has no ABA problem.
 *  - Memory goes back to the system when the cache empties: whoever gives
 *    back blocks while the cache's count is zero and its slabs hold
 *    CACHE_SLAB_TRIM bytes or more trims every shard whose blocks have all
 *    come back (the others when their last blocks come back); and at
 *    tw_cache_free. A cache that shrank but still holds keys keeps its
 *    chunks for new keys, as malloc's arenas would; a small cache that
 *    empties keeps its few KB (no lock round trip for each emptying).
 *
 * Bytes per entry are the block's (a 64-byte entry takes 64, where malloc
 * would take 80 with its 8-byte header), plus at most one 2 MB chunk per
 * shard partly carved and the alignment gaps in front of 64-byte blocks
 * (none when all entries have one size).
 */
#include <stdlib.h>
#include <string.h>

#include "common/bigmem.h"
#include "cache/internal.h"

/* Under AddressSanitizer a free block is poisoned but for its link (the
 * first 16 bytes), so that a read of an entry after it was given back (an
 * epoch bug) is reported as a use after free, as for malloc'ed blocks. */
#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
void __asan_poison_memory_region(void const volatile *addr, size_t size);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#define SLAB_POISON(p, n) __asan_poison_memory_region((p), (n))
#define SLAB_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define SLAB_POISON(p, n) ((void)(p), (void)(n))
#define SLAB_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* A block while free: the link, and its class. */
struct cache_free {
    struct cache_free *next;
    size_t cls;
};

static inline size_t slab_cls(size_t bytes)
{
    return (bytes + 15) / 16; /* 1 .. CACHE_SLAB_CLASSES - 1 */
}

bool tw_cache_slab_fits_(size_t bytes)
{
    return bytes <= CACHE_SLAB_MAX;
}

/* Take the returned stack into the class lists. */
static void slab_drain(struct cache_slab *sl)
{
    struct cache_free *f = atomic_exchange_explicit(&sl->returned, NULL, memory_order_acquire);
    while (f) {
        struct cache_free *next = f->next;
        f->next = sl->free[f->cls];
        sl->free[f->cls] = f;
        sl->out--;
        f = next;
    }
}

static void slab_chunk_free(struct tw_cache *c, struct cache_chunk *ch)
{
    if (!c->alloc.fn && ch->bytes >= TW_BIG_MIN)
        tw_big_unmap_(ch, ch->bytes);
    else
        tw_mem_free_(&c->alloc, ch, ch->bytes);
}

/* Shard slab bytes from which every new chunk is 2 MB (default allocator). */
#define SLAB_BIG_FROM ((size_t)256 << 10)

/* A new chunk to carve from; false when the allocator fails. */
static bool slab_grow(struct tw_cache *c, struct cache_slab *sl)
{
    size_t bytes = sl->total < 1024 ? 1024 : sl->total > TW_BIG_MIN ? TW_BIG_MIN : sl->total;
    if (!c->alloc.fn && sl->total >= SLAB_BIG_FROM)
        bytes = TW_BIG_MIN;
    struct cache_chunk *ch;
    if (!c->alloc.fn && bytes >= TW_BIG_MIN)
        ch = tw_big_map_(bytes);
    else
        ch = tw_mem_alloc_(&c->alloc, bytes);
    if (!ch)
        return false;
    /* What is left of the old chunk is too small for this block: put what
     * fits a class on its list rather than lose it. */
    size_t left = (size_t)(sl->end - sl->bump);
    if (left >= 16) {
        struct cache_free *f = (struct cache_free *)(void *)sl->bump;
        f->cls = slab_cls(left > CACHE_SLAB_MAX ? CACHE_SLAB_MAX : left);
        if (f->cls * 16 > left)
            f->cls--;
        if (f->cls == 4 && ((uintptr_t)f & 63))
            f->cls = 3; /* the 64-byte class holds aligned blocks only */
        f->next = sl->free[f->cls];
        sl->free[f->cls] = f;
    }
    ch->bytes = bytes;
    ch->next = sl->chunks;
    sl->chunks = ch;
    sl->hugified = false;
    sl->total += bytes;
    atomic_fetch_add_explicit(&c->slab_bytes, bytes, memory_order_relaxed);
    sl->bump = (char *)(ch + 1);
    sl->end = (char *)ch + bytes;
    return true;
}

/* Bytes to skip before carving a block of `need` bytes: a 64-byte block
 * (an entry with a short key, see cache/internal.h) starts on a cache line,
 * so that a reader touches one line of it; other sizes are packed. Freed
 * 64-byte blocks keep their alignment on their class list. */
#define SLAB_RUN64 16 /* 64-byte blocks carved together */

static inline size_t slab_gap(const struct cache_slab *sl, size_t need)
{
    return need == 64 ? (size_t)(-(uintptr_t)sl->bump & 63) : 0;
}

void *tw_cache_slab_alloc_(struct tw_cache *c, struct cache_slab *sl, size_t bytes)
{
    size_t cls = slab_cls(bytes);
    struct cache_free *f = sl->free[cls];
    if (!f && atomic_load_explicit(&sl->returned, memory_order_relaxed)) {
        slab_drain(sl);
        f = sl->free[cls];
    }
    if (f) {
        sl->free[cls] = f->next;
        sl->out++;
        SLAB_UNPOISON(f, cls * 16);
        return f;
    }
    size_t need = cls * 16;
    if (slab_gap(sl, need) + need > (size_t)(sl->end - sl->bump)) {
        /* A full 2 MB mapping becomes one huge page now (if half did not). */
        if (sl->chunks && !c->alloc.fn && sl->chunks->bytes >= TW_BIG_MIN && !sl->hugified)
            tw_big_hugify_(sl->chunks, sl->chunks->bytes);
        if (!slab_grow(c, sl))
            return NULL;
    }
    size_t gap = slab_gap(sl, need);
    if (gap) { /* 16 to 48 bytes: kept on their class's list */
        struct cache_free *g = (struct cache_free *)(void *)sl->bump;
        g->cls = gap / 16;
        g->next = sl->free[g->cls];
        sl->free[g->cls] = g;
        sl->bump += gap;
    }
    void *p = sl->bump;
    sl->bump += need;
    sl->out++;
    if (need == 64) {
        /* Carve a run of aligned 64-byte blocks at once (the rest go on the
         * class's list, lowest address first), so that entries of other
         * sizes carved in between cost one gap per run, not one per block. */
        size_t more = (size_t)(sl->end - sl->bump) / 64;
        if (more > SLAB_RUN64 - 1)
            more = SLAB_RUN64 - 1;
        for (size_t i = more; i > 0; i--) {
            struct cache_free *b = (struct cache_free *)(void *)(sl->bump + (i - 1) * 64);
            b->cls = 4;
            b->next = sl->free[4];
            sl->free[4] = b;
        }
        sl->bump += more * 64;
    }
    if (!sl->hugified && !c->alloc.fn && sl->chunks->bytes >= TW_BIG_MIN &&
        (size_t)(sl->bump - (char *)sl->chunks) >= sl->chunks->bytes / 2) {
        /* Half carved: one huge page now (a copy of 1 MB, once a chunk). */
        tw_big_hugify_(sl->chunks, sl->chunks->bytes);
        sl->hugified = true;
    }
    return p;
}

void tw_cache_slab_give_(struct cache_slab *sl, void *block, size_t bytes)
{
    struct cache_free *f = block;
    f->cls = slab_cls(bytes);
    SLAB_POISON((char *)block + sizeof *f, f->cls * 16 - sizeof *f);
    struct cache_free *head = atomic_load_explicit(&sl->returned, memory_order_relaxed);
    do
        f->next = head;
    while (!atomic_compare_exchange_weak_explicit(&sl->returned, &head, f, memory_order_release,
                                                  memory_order_relaxed));
}

void tw_cache_slab_trim_(struct tw_cache *c, struct cache_slab *sl)
{
    slab_drain(sl);
    if (sl->out)
        return;
    tw_cache_slab_destroy_(c, sl);
}

void tw_cache_slab_destroy_(struct tw_cache *c, struct cache_slab *sl)
{
    struct cache_chunk *ch = sl->chunks;
    while (ch) {
        struct cache_chunk *next = ch->next;
        SLAB_UNPOISON(ch, ch->bytes);
        slab_chunk_free(c, ch);
        ch = next;
    }
    atomic_fetch_sub_explicit(&c->slab_bytes, sl->total, memory_order_relaxed);
    memset(sl->free, 0, sizeof sl->free);
    atomic_store_explicit(&sl->returned, NULL, memory_order_relaxed);
    sl->chunks = NULL;
    sl->bump = sl->end = NULL;
    sl->total = 0;
    sl->out = 0;
}
