/* SPDX-License-Identifier: MIT */
/* Internal: memory through a struct tw_allocator (twheel/common.h), for
 * every layer that allocates (tasks, runner, clock and pool, cache).
 *
 * A layer keeps a copy of the allocator its configuration named; when none
 * was named the copy has no function, and the C library serves instead
 * (realloc/free, malloc for a new block). The calls are inline so that the
 * one test on the function pointer is all a hot path pays.
 */
#ifndef TWHEEL_ALLOC_H
#define TWHEEL_ALLOC_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/common.h"

/* The allocator a configuration names: a copy of *a, or, for NULL, the one
 * with no function (the C library). */
static inline struct tw_allocator tw_allocator_of_(const struct tw_allocator *a)
{
    return a ? *a : (struct tw_allocator){0};
}

/* Allocate, resize or free (new_size 0) as the hook does: through a's
 * function, or realloc/free when it has none. */
static inline void *tw_mem_(const struct tw_allocator *a, void *p, size_t old_size, size_t new_size)
{
    if (a->fn)
        return a->fn(a->ctx, p, old_size, new_size);
    if (!new_size) {
        free(p);
        return NULL;
    }
    return realloc(p, new_size);
}

/* A new block of size bytes (not zeroed), or NULL. */
static inline void *tw_mem_alloc_(const struct tw_allocator *a, size_t size)
{
    if (a->fn)
        return a->fn(a->ctx, NULL, 0, size);
    return malloc(size);
}

/* A new block of size bytes, zero-filled, or NULL. */
static inline void *tw_mem_zalloc_(const struct tw_allocator *a, size_t size)
{
    void *p = tw_mem_alloc_(a, size);
    if (p)
        memset(p, 0, size);
    return p;
}

/* Free p, a block of size bytes; for NULL nothing is called. a may lie in
 * p (an object that frees itself through the allocator it holds). */
static inline void tw_mem_free_(const struct tw_allocator *a, void *p, size_t size)
{
    if (!p)
        return;
    struct tw_allocator m = *a;
    if (m.fn)
        m.fn(m.ctx, p, size, 0);
    else
        free(p);
}

/* A new object of size bytes, zero-filled, through the allocator a
 * configuration names (tw_allocator_of_), holding a copy of that allocator
 * at byte alloc_at (offsetof(TYPE, alloc)): each layer's object keeps the
 * allocator it came from. NULL when the allocator fails. */
static inline void *tw_mem_new_(const struct tw_allocator *named, size_t size, size_t alloc_at)
{
    struct tw_allocator a = tw_allocator_of_(named);
    unsigned char *p = tw_mem_zalloc_(&a, size);
    if (p)
        memcpy(p + alloc_at, &a, sizeof a);
    return p;
}

#endif /* TWHEEL_ALLOC_H */
