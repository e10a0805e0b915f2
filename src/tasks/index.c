/* SPDX-License-Identifier: MIT */
/* The keyed index's rebuilds: growing it for inserts, widening its entry
 * field for a bigger pool, shrinking it when it empties (the slot format and
 * the probes are in tasks/internal.h). */
#include "tasks/internal.h"

/* Rebuild the index with new_cap slots and new_bits entry bits (never fewer
 * than now), dropping the tombstones. Nothing is hashed and no entry is
 * read: an entry's home in any index comes from its home word (tasks_hi_at), and
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
#ifndef TASKS_REHASH_AHEAD
#define TASKS_REHASH_AHEAD 32 /* a power of two */
#endif
int tw_tasks_rehash_(struct tw_tasks *t, uint32_t new_cap, uint32_t new_bits)
{
    if (new_cap < TASKS_MIN_CAP)
        new_cap = TASKS_MIN_CAP;
    /* Wide enough for every pool this index can hold without growing (the
     * pool grows by a chunk only when it is all live, and live <= 0.75 cap):
     * tw_tasks_add_chunk_ then never has to rehash just to widen the entry field,
     * which would cost a rehash of every task at each power of two on the way up
     * (about one more rehash per task on a fill). */
    uint32_t need = tasks_bits_for((uint64_t)new_cap * 3 / 4 + TASKS_CHUNK);
    if (need > new_bits)
        new_bits = need;
    if (new_bits < t->bits) /* the tags below need it (callers never ask) */
        new_bits = t->bits;
    size_t ns_size = (size_t)new_cap * sizeof(uint32_t);
    uint32_t *ns = tasks_big(t, NULL, 0, ns_size);
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
    enum { Q = TASKS_REHASH_AHEAD };
    uint32_t q[Q];
    uint32_t head = 0, tail = 0, scan = 0;
    for (;;) {
        while (tail - head < Q && scan < cap) {
            uint32_t s = os[scan++];
            if (s <= TASKS_SLOT_TOMB)
                continue;
            __builtin_prefetch(tasks_hi_at(t, (s & mask) - 2));
            q[tail++ % Q] = s;
        }
        if (head == tail)
            break;
        uint32_t s = q[head++ % Q];
        uint32_t idx = (s & mask) - 2;
        uint32_t pos = tw_hash_home((uint64_t)*tasks_hi_at(t, idx) << 32, new_cap);
        while (ns[pos] != TASKS_SLOT_EMPTY) {
            if (++pos == new_cap)
                pos = 0;
        }
        ns[pos] = (s & ~new_mask) | (idx + 2);
    }
    tasks_big(t, t->slots, (size_t)t->cap * sizeof *t->slots, 0);
    t->slots = ns;
    t->cap = new_cap;
    t->used = t->live;
    t->tombs = 0;
    t->bits = new_bits;
    t->mask = new_mask;
    return 0;
}

void tw_tasks_shrink_index_(struct tw_tasks *t)
{
    uint32_t c = tasks_cap_for(t->live);
    /* on failure keep the larger one */
    (void)tw_tasks_rehash_(t, c > t->floor_cap ? c : t->floor_cap, t->bits);
}

void tw_tasks_clear_slot_(struct tw_tasks *t, uint32_t pos)
{
    tasks_clear_slot(t, pos);
}
