/* SPDX-License-Identifier: MIT */
/* Helpers shared by the cache tests: counted values, a failing allocator. */
#ifndef TWHEEL_CACHE_UTIL_H
#define TWHEEL_CACHE_UTIL_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/cache.h"

/* A value whose frees are counted: each must be freed exactly once. */
struct counted {
    int id;
    _Atomic int freed;
    _Atomic int refs; /* retains */
};

struct counter {
    _Atomic long frees;
    _Atomic long double_frees;
    _Atomic long retains;
};

static inline void counted_free(void *ctx, void *value)
{
    struct counter *k = ctx;
    struct counted *v = value;
    if (atomic_fetch_add(&v->freed, 1) != 0)
        atomic_fetch_add(&k->double_frees, 1);
    atomic_fetch_add(&k->frees, 1);
}

static inline void counted_retain(void *ctx, void *value)
{
    struct counter *k = ctx;
    struct counted *v = value;
    atomic_fetch_add(&v->refs, 1);
    atomic_fetch_add(&k->retains, 1);
}

/* An allocator that fails the n-th call that allocates (0-based; -1 never),
 * and tracks live bytes so that a test can check nothing is left. */
struct failing_alloc {
    long countdown; /* allocations left before the failure; < 0: never fail */
    long allocs;
    long live_blocks;
    size_t live_bytes;
};

static inline void *failing_alloc_fn(void *ctx, void *ptr, size_t old_size, size_t new_size)
{
    struct failing_alloc *a = ctx;
    if (new_size == 0) {
        if (ptr) {
            a->live_blocks--;
            a->live_bytes -= old_size;
        }
        free(ptr);
        return NULL;
    }
    if (a->countdown == 0)
        return NULL;
    if (a->countdown > 0)
        a->countdown--;
    void *p = realloc(ptr, new_size);
    if (!p)
        return NULL;
    a->allocs++;
    if (!ptr)
        a->live_blocks++;
    a->live_bytes += new_size - old_size;
    return p;
}

static inline size_t key_len(const char *k)
{
    return strlen(k);
}

#endif /* TWHEEL_CACHE_UTIL_H */
