/* SPDX-License-Identifier: MIT */
/* twheel cache: read sections and the safe reclamation of what writers
 * unlink (epoch-based, after Fraser's EBR, with per-CPU reader counts).
 *
 * Readers take no lock, so an entry (and its pointer-mode value) that a
 * writer unlinks may still be under a reader's eyes. A reader therefore runs
 * inside a read section:
 *
 *   enter: e = epoch; active[e & 1] += 1 (seq_cst); if epoch != e, undo, retry
 *   exit:  active[idx] -= 1 (release)
 *
 * where `active` lives in the reader's stripe, chosen by the CPU it runs on
 * (sched_getcpu, cheap with glibc's rseq), so readers on different CPUs
 * write different cache lines and no line is written by two readers at
 * once. The epoch counter is only read by readers.
 *
 * Writers retire what they unlink (entries, replaced bucket arrays):
 *  - at once, if after the unlink (and a seq_cst fence) every stripe's two
 *    counts are zero: no reader is inside, and any reader that enters later
 *    cannot see the unlinked object (the store-buffer pattern, seq_cst on
 *    both sides). This keeps single-threaded use synchronous: free_value
 *    runs before del/set returns when no get runs at the same time;
 *  - else into their shard's limbo, tagged with the epoch read after the
 *    unlink, and freed once the epoch has reached tag + 2.
 * The epoch moves from e to e + 1 only when no reader that entered with
 * e - 1 is still inside (all stripes' active[(e + 1) & 1] are zero), so when
 * it reaches tag + 2 every reader that entered at tag or before has left,
 * and readers that entered later saw the unlink. A reader that read a stale
 * epoch re-checks it after counting itself, so it never runs counted under
 * the wrong parity. Writers advance the epoch when their shard's limbo holds
 * CACHE_LIMBO_ADVANCE items; the expiry pass advances and collects every
 * shard's limbo, and keeps waking every 10 ms while some is left.
 *
 * So values are freed exactly once (they leave the table once, under the
 * shard lock) and never while a reader may still hand them out: retain_value
 * runs inside the read section.
 *
 * The hit counts share the words (cache/internal.h, struct cache_stripe):
 * active[p] = (hits << CACHE_RD_BITS) + readers inside. Entering adds 1 as
 * above; a miss leaves by subtracting 1; a hit leaves by adding
 * CACHE_HIT_UNIT - 1, the same release RMW on the same word, which takes
 * its 1 off the low bits (no borrow: it counted itself there) and adds a
 * hit above them. Every test of "readers inside" (cache_epoch_quiet,
 * tw_cache_epoch_advance_) looks at the low bits only, with the same
 * seq_cst loads, so the argument above holds word for word: the low bits
 * of a word are exactly the old counter at every instant. The drain (a
 * word's hits past CACHE_HIT_DRAIN = 2^38 move to the stripe's `hits`)
 * is a compare-and-swap that subtracts h << CACHE_RD_BITS, h the hits it
 * read, so it never changes the low bits either. Bounds: < 2^24 readers
 * inside one stripe at once (threads on one CPU, plus migrations); hits
 * in a word stay below 2^38 plus the exits racing with one drain, far
 * below the 2^40 above the low bits. The stripe's hits are its `hits`
 * plus both words' high bits (tw_cache_stripe_hits_). A drain holds the
 * stripe's `draining` flag from before its compare-and-swap to after its
 * add, and stats holds it while it reads the three counts (acquire when
 * taken, release when given back), so a stats call sees a drain whole or
 * not at all: the total is exact and never goes down (a stats call between
 * the two steps would miss the 2^38 hits, or count them twice). A reader
 * that finds the flag held skips its drain (the next hit's exit
 * drains), so readers never wait; stats waits only for a drain in
 * progress. While a stats caller holds the flag the words keep counting:
 * 2^40 - 2^38 more hits fit before a word's count would wrap.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/internal.h"

static unsigned cache_epoch_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_CONF);
    return n < 1 ? 1u : n > (long)CACHE_MAX_STRIPES ? CACHE_MAX_STRIPES : (unsigned)n;
}

static unsigned cache_epoch_pow2(unsigned n)
{
    unsigned p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

unsigned tw_cache_stripes_default_(void)
{
    return cache_epoch_pow2(cache_epoch_cpus());
}

uint64_t tw_cache_stripe_hits_(struct cache_stripe *st)
{
    /* Held by a drain for a few instructions (unless its thread is
     * preempted there): spin briefly, then yield. */
    for (unsigned spins = 0; atomic_exchange_explicit(&st->draining, 1, memory_order_acquire);
         spins++)
        if (spins >= 64)
            sched_yield();
    uint64_t n = atomic_load_explicit(&st->hits, memory_order_relaxed) +
                 (atomic_load_explicit(&st->active[0], memory_order_relaxed) >> CACHE_RD_BITS) +
                 (atomic_load_explicit(&st->active[1], memory_order_relaxed) >> CACHE_RD_BITS);
    atomic_store_explicit(&st->draining, 0, memory_order_release);
    return n;
}

/* Whether no reader is inside a read section of either parity. */
static bool cache_epoch_quiet(const struct tw_cache *c)
{
    for (unsigned i = 0; i <= c->stripe_mask; i++) {
        const struct cache_stripe *st = &c->stripes[i];
        if ((atomic_load_explicit(&st->active[0], memory_order_seq_cst) & CACHE_RD_INSIDE) ||
            (atomic_load_explicit(&st->active[1], memory_order_seq_cst) & CACHE_RD_INSIDE))
            return false;
    }
    return true;
}

bool tw_cache_epoch_advance_(struct tw_cache *c)
{
    atomic_thread_fence(memory_order_seq_cst);
    uint64_t e = atomic_load_explicit(&c->epoch, memory_order_seq_cst);
    unsigned old = (unsigned)((e + 1) & 1);
    for (unsigned i = 0; i <= c->stripe_mask; i++)
        if (atomic_load_explicit(&c->stripes[i].active[old], memory_order_seq_cst) &
            CACHE_RD_INSIDE)
            return false;
    return atomic_compare_exchange_strong(&c->epoch, &e, e + 1);
}

static void cache_garbage_splice(struct cache_garbage *to, struct cache_garbage *from)
{
    if (from->entries) {
        struct tw_node *last = from->entries;
        while (last->next)
            last = last->next;
        last->next = to->entries;
        to->entries = from->entries;
    }
    if (from->tables) {
        struct cache_table *last = from->tables;
        while (last->free_next)
            last = last->free_next;
        last->free_next = to->tables;
        to->tables = from->tables;
    }
    to->n += from->n;
    memset(from, 0, sizeof *from);
}

void tw_cache_limbo_collect_(struct tw_cache *c, struct cache_shard *s, struct cache_garbage *g,
                             bool all)
{
    if (!atomic_load_explicit(&s->limbo_n, memory_order_relaxed))
        return;
    uint64_t e = atomic_load_explicit(&c->epoch, memory_order_seq_cst);
    for (unsigned i = 0; i < 3; i++) {
        struct cache_limbo *l = &s->limbo[i];
        if (l->g.n && (all || l->tag + 2 <= e)) {
            s->limbo_n -= l->g.n;
            cache_garbage_splice(g, &l->g);
        }
    }
}

bool tw_cache_retire_locked_(struct tw_cache *c, struct cache_shard *s, struct cache_garbage *g)
{
    if (!g->n)
        return false;
    atomic_thread_fence(memory_order_seq_cst);
    if (cache_epoch_quiet(c)) {
        tw_cache_limbo_collect_(c, s, g, false);
        return false;
    }
    uint64_t tag = atomic_load_explicit(&c->epoch, memory_order_seq_cst);
    struct cache_garbage keep = *g;
    memset(g, 0, sizeof *g);
    /* Whatever was safe goes out; the slot for `tag` is then either empty
     * or already holds `tag` (an older tag in it would be <= tag - 3). */
    tw_cache_limbo_collect_(c, s, g, false);
    struct cache_limbo *l = &s->limbo[tag % 3];
    l->tag = tag;
    s->limbo_n += keep.n;
    cache_garbage_splice(&l->g, &keep);
    return atomic_load_explicit(&s->limbo_n, memory_order_relaxed) >= CACHE_LIMBO_ADVANCE;
}

/* After entries went back to a slab: if the cache is now empty and its
 * slabs are big, let every shard whose blocks have all come back return its
 * chunks (the count is 0 only once every key left; a racing set just makes
 * a trim keep its shard's chunks). */
static void cache_slab_maybe_trim(struct tw_cache *c)
{
    if (atomic_load_explicit(&c->count, memory_order_relaxed) != 0 ||
        atomic_load_explicit(&c->slab_bytes, memory_order_relaxed) < CACHE_SLAB_TRIM)
        return;
    for (unsigned i = 0; i < c->nshards; i++) {
        struct cache_shard *s = &c->shards[i];
        cache_lock(c, s);
        tw_cache_slab_trim_(c, &s->slab);
        cache_unlock(c, s);
    }
}

void tw_cache_garbage_release_(struct tw_cache *c, struct cache_garbage *g)
{
    struct tw_node *n = g->entries;
    bool gave = false;
    while (n) {
        struct tw_node *next = n->next;
        struct cache_entry *e = tw_container_of(n, struct cache_entry, timer);
        size_t value_len = c->copy_values ? e->value.len : 0;
        if (!c->copy_values && c->free_value)
            c->free_value(c->value_ctx, atomic_load_explicit(&e->value.ptr, memory_order_relaxed));
        size_t pre = cache_pre(c);
        size_t bytes = pre + CACHE_ENTRY_HDR + cache_key_bytes(cache_ekey_len(e)) + value_len;
        if (tw_cache_slab_fits_(bytes)) {
            struct cache_shard *s = cache_shard_of(c, e->hash);
            tw_cache_slab_give_(&s->slab, (char *)e - pre, bytes);
            gave = true;
        } else {
            tw_mem_free_(&c->alloc, (char *)e - pre, bytes);
        }
        n = next;
    }
    if (gave && !c->freeing)
        cache_slab_maybe_trim(c);
    struct cache_table *t = g->tables;
    while (t) {
        struct cache_table *next = t->free_next;
        tw_cache_table_free_(c, t);
        t = next;
    }
    memset(g, 0, sizeof *g);
}

size_t tw_cache_reclaim_(struct tw_cache *c)
{
    size_t left = 0;
    bool any = false;
    for (unsigned i = 0; i < c->nshards && !any; i++)
        any = atomic_load_explicit(&c->shards[i].limbo_n, memory_order_relaxed) != 0;
    if (!any)
        return 0;
    tw_cache_epoch_advance_(c);
    tw_cache_epoch_advance_(c);
    for (unsigned i = 0; i < c->nshards; i++) {
        struct cache_shard *s = &c->shards[i];
        struct cache_garbage g = {0};
        cache_lock(c, s);
        tw_cache_limbo_collect_(c, s, &g, false);
        left += s->limbo_n;
        cache_unlock(c, s);
        tw_cache_garbage_release_(c, &g);
    }
    return left;
}
