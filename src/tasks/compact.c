/* SPDX-License-Identifier: MIT */
/* Compaction: when under a quarter of the pool is live, the live entries
 * above the chunks to keep move into free entries below them and the
 * emptied chunks are freed (when, and why not on remove: tasks/tasks.c,
 * "Memory returned"). */
#include "tasks/internal.h"

/* Move an entry's task to another (free) entry. */
static void tasks_relocate(struct tw_tasks *t, struct tasks_entry *from, struct tasks_entry *to)
{
    uint64_t deadline = tw_deadline(&from->u.node);
    tw_cancel(&t->wheel, &from->u.node);
    tw_node_init(&to->u.node);
    to->value = from->value;
    to->key = from->key;
    tw_arm(&t->wheel, &to->u.node, deadline, 0, 0);
}

/* Give chunks back when under a quarter of the pool is live (see tasks/tasks.c). */
void tw_tasks_compact_(struct tw_tasks *t)
{
    if (t->depth || t->nchunks <= 1 || t->nchunks <= t->floor_chunks ||
        (uint64_t)t->live * 4 >= (uint64_t)t->nchunks * TASKS_CHUNK)
        return;
    /* Tasks left due by tw_tasks_advance_max (deadline == now) would be
     * re-armed to now + 1 by relocation: wait until they have run. */
    if (tw_wheel_next_expiry(&t->wheel) <= tw_wheel_now(&t->wheel))
        return;
    uint32_t keep = (uint32_t)(((uint64_t)t->live * 2 + TASKS_CHUNK - 1) / TASKS_CHUNK);
    if (keep < t->floor_chunks)
        keep = t->floor_chunks;
    if (keep == 0)
        keep = 1;
    if (keep >= t->nchunks)
        return;
    uint32_t limit = keep * TASKS_CHUNK;
    /* The free entries below the limit: enough for every live one above it,
     * since limit >= 2 * live. */
    uint32_t holes = TASKS_NIL;
    size_t words = ((size_t)limit + 63) / 64;
    uint64_t *live = tasks_mem(t, NULL, 0, words * sizeof *live);
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
            if (s > TASKS_SLOT_TOMB && (s & t->mask) - 2 < limit) {
                uint32_t i = (s & t->mask) - 2;
                live[i / 64] |= UINT64_C(1) << (i % 64);
            }
        }
        for (uint32_t i = limit; i-- > 0;) {
            if (!(live[i / 64] >> (i % 64) & 1)) {
                tasks_entry_at(t, i)->u.idle.next = holes;
                holes = i;
            }
        }
        tasks_mem(t, live, words * sizeof *live, 0);
    } else { /* no memory for the bitmap: walk the free list */
        for (uint32_t i = t->free_head; i != TASKS_NIL;) {
            uint32_t next = tasks_entry_at(t, i)->u.idle.next;
            if (i < limit) {
                tasks_entry_at(t, i)->u.idle.next = holes;
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
            if (s <= TASKS_SLOT_TOMB || (s & t->mask) - 2 < limit)
                continue;
            tasks_prefetch_entry(tasks_entry_at(t, (s & t->mask) - 2));
            __builtin_prefetch(tasks_hi_at(t, (s & t->mask) - 2));
            queue[tail++ % Q] = scan - 1;
        }
        if (head == tail)
            break;
        if (tail - head > NEAR) {
            uint32_t sn = t->slots[queue[(head + NEAR) % Q]];
            const struct tw_node *n = &tasks_entry_at(t, (sn & t->mask) - 2)->u.node;
            if (n->pprev)
                __builtin_prefetch(n->pprev, 1);
            if (n->next)
                __builtin_prefetch(n->next, 1);
        }
        uint32_t pos = queue[head++ % Q];
        uint32_t s = t->slots[pos];
        uint32_t to = holes;
        holes = tasks_entry_at(t, to)->u.idle.next;
        tasks_relocate(t, tasks_entry_at(t, (s & t->mask) - 2), tasks_entry_at(t, to));
        *tasks_hi_at(t, to) = *tasks_hi_at(t, (s & t->mask) - 2);
        t->slots[pos] = (s & ~t->mask) | (to + 2);
    }
    tw_tasks_pool_release_(t, keep);
    t->free_head = holes;
}
