/* SPDX-License-Identifier: MIT */
/* The pool of task entries: chunks of TASKS_CHUNK entries, the first ones
 * allocated one by one, the rest carved from big blocks (groups); growing it
 * by a chunk, and freeing chunks when compaction (tasks/compact.c) has
 * emptied them. */
#include "tasks/internal.h"

/* The first TASKS_GROUP chunks are allocated one by one (a small pool stays
 * small); beyond, TASKS_GROUP chunks at a time in one block (a group), so that the
 * entries of a big pool are covered by few TLB entries. With the default
 * allocator a group is a 2 MB aligned mapping of TW_BIG_MIN bytes (bigmem.h):
 * see TASKS_GROUPS_LAZY for when it becomes a huge page. With the user's
 * allocator it is one block of TASKS_GROUP chunks. A group is freed when the pool
 * shrinks below its first chunk. */
/* The first TASKS_GROUPS_LAZY groups are filled in small pages and collapsed
 * into a huge page when full (MADV_COLLAPSE: a 2 MB copy, too dear to make
 * for every group: see tasks/tasks.c, Memory); later ones, in a pool already
 * 10 MB big, are advised at once (one 2 MB page from the first touch: at
 * most one partly used group, under 2 MB, is resident beyond need). */
#ifndef TASKS_GROUPS_LAZY
#define TASKS_GROUPS_LAZY 4
#endif
/* Bytes a group holds (counted in t->bytes). */
static inline size_t tasks_group_bytes(const struct tw_tasks *t, const struct tasks_group *g)
{
    if (t->user_alloc)
        return (size_t)TASKS_GROUP * TASKS_CHUNK_BYTES;
    return g->filled == TASKS_GROUP ? TW_BIG_MIN : (size_t)g->filled * TASKS_CHUNK_BYTES;
}

static void tasks_group_free(struct tw_tasks *t, struct tasks_group *g)
{
    size_t b = tasks_group_bytes(t, g);
    if (t->user_alloc) {
        tasks_mem(t, g->p, b, 0);
    } else {
        tw_big_unmap_(g->p, TW_BIG_MIN);
        t->bytes -= b;
    }
    g->p = NULL;
    g->filled = 0;
}

/* Chunk k of a new or partly used group g (allocated if k == 0), or NULL. */
static struct tasks_entry *tasks_group_chunk(struct tw_tasks *t, uint32_t g, uint32_t k)
{
    if (k == 0) { /* the first chunk of a new group */
        if (g >= t->groups_cap) {
            uint32_t ncap = t->groups_cap ? t->groups_cap * 2 : 4;
            struct tasks_group *gs =
                tasks_mem(t, t->groups, t->groups_cap * sizeof *gs, ncap * sizeof *gs);
            if (!gs)
                return NULL;
            t->groups = gs;
            t->groups_cap = ncap;
        }
        struct tasks_group *gr = &t->groups[g];
        gr->filled = 0;
        if (t->user_alloc) {
            gr->p = tasks_mem(t, NULL, 0, (size_t)TASKS_GROUP * TASKS_CHUNK_BYTES);
        } else if (g + 1 > TASKS_GROUPS_LAZY || t->floor_chunks >= TASKS_GROUP * (g + 2)) {
            /* (config.capacity says this group will be filled) */
            gr->p = tw_big_alloc_(TW_BIG_MIN);
            gr->filled = TASKS_GROUP; /* one huge page from its first touch */
            if (gr->p)
                t->bytes += TW_BIG_MIN;
        } else {
            gr->p = tw_big_map_(TW_BIG_MIN);
        }
        if (!gr->p)
            return NULL;
    }
    struct tasks_group *gr = &t->groups[g];
    if (k >= gr->filled) { /* new pages (default allocator): count them */
        gr->filled = k + 1;
        if (!t->user_alloc) {
            t->bytes += TASKS_CHUNK_BYTES;
            if (gr->filled == TASKS_GROUP) {
                t->bytes += TW_BIG_MIN - (size_t)TASKS_GROUP * TASKS_CHUNK_BYTES;
                tw_big_hugify_(gr->p, TW_BIG_MIN);
            }
        }
    }
    return (struct tasks_entry *)(void *)(gr->p + (size_t)k * TASKS_CHUNK_BYTES);
}

/* Groups allocated while the pool has nchunks chunks. */
static inline uint32_t tasks_groups_for(uint32_t nchunks)
{
    return nchunks > TASKS_GROUP ? (nchunks - TASKS_GROUP + TASKS_GROUP - 1) / TASKS_GROUP : 0;
}

/* Free the chunks from `keep` on (and the groups wholly above it). */
void tw_tasks_pool_release_(struct tw_tasks *t, uint32_t keep)
{
    for (uint32_t c = keep; c < t->nchunks && c < TASKS_GROUP; c++)
        tasks_mem(t, t->chunks[c], TASKS_CHUNK_BYTES, 0);
    for (uint32_t g = tasks_groups_for(keep); g < tasks_groups_for(t->nchunks); g++)
        tasks_group_free(t, &t->groups[g]);
    t->nchunks = keep;
}

/* Add one chunk of free entries. Widens the index's entry field first if the
 * pool outgrows it. Returns 0 or TW_ENOMEM (nothing changed). */
int tw_tasks_add_chunk_(struct tw_tasks *t)
{
    uint64_t pool = (uint64_t)t->nchunks * TASKS_CHUNK;
    if (pool + TASKS_CHUNK > TASKS_MAX_POOL)
        return TW_ENOMEM;
    if (pool + TASKS_CHUNK + 2 > (uint64_t)t->mask + 1) {
        if (tw_tasks_rehash_(t, t->cap, t->bits + 1))
            return TW_ENOMEM;
    }
    if (t->nchunks == t->chunks_cap) {
        uint32_t ncap = t->chunks_cap ? t->chunks_cap * 2 : 4;
        struct tasks_entry **c =
            tasks_mem(t, t->chunks, t->chunks_cap * sizeof *c, ncap * sizeof *c);
        if (!c)
            return TW_ENOMEM;
        t->chunks = c;
        t->chunks_cap = ncap;
    }
    struct tasks_entry *chunk;
    uint32_t c = t->nchunks;
    if (c < TASKS_GROUP) {
        chunk = tasks_mem(t, NULL, 0, TASKS_CHUNK_BYTES);
        if (!chunk)
            return TW_ENOMEM;
    } else {
        chunk =
            tasks_group_chunk(t, (c - TASKS_GROUP) / TASKS_GROUP, (c - TASKS_GROUP) % TASKS_GROUP);
        if (!chunk)
            return TW_ENOMEM;
    }
    uint32_t base = t->nchunks * TASKS_CHUNK;
    t->chunks[t->nchunks++] = chunk;
    for (uint32_t i = TASKS_CHUNK; i-- > 0;) {
        chunk[i].u.idle.next = t->free_head;
        t->free_head = base + i;
    }
    return 0;
}
