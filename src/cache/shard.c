/* SPDX-License-Identifier: MIT */
/* twheel cache: a shard's setup and teardown (its table, writers' lock,
 * single-flight lock and condition, wheel and slab) and the default shard
 * count. What a shard holds and which lock guards what is in
 * cache/internal.h (struct cache_shard). */
#include <string.h>
#include <unistd.h>

#include "cache/internal.h"

/* Shards only spread writers (readers take no lock): 4 per CPU online
 * keeps two writers on one shard unlikely (P writers meet with probability
 * about P/(4*CPUs)) and costs one 31 KB wheel each. 8 to 256. */
unsigned tw_cache_default_shards(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned cpus = n < 1 ? 1u : n > 64 ? 64u : (unsigned)n;
    unsigned s = 8;
    while (s < 4 * cpus && s < 256)
        s <<= 1;
    return s;
}

int tw_cache_shard_init_(struct tw_cache *c, struct cache_shard *s, uint64_t rng)
{
    memset(s, 0, sizeof *s);
    struct cache_table *t = tw_cache_table_new_(c, CACHE_MIN_BUCKETS);
    if (!t)
        return TW_ENOMEM;
    atomic_init(&s->table, t);
    atomic_init(&s->tmask, t->mask);
    atomic_init(&s->seq, 0);
    atomic_init(&s->limbo_n, 0);
    atomic_init(&s->slab.returned, NULL);
    s->rng = rng ? rng : 1;
    atomic_init(&s->oldest, UINT64_MAX);
    int rc =
        c->rwlock ? pthread_rwlock_init(&s->lock.rw, NULL) : pthread_mutex_init(&s->lock.mu, NULL);
    if (rc)
        goto fail_table;
    if (pthread_mutex_init(&s->flight_mu, NULL))
        goto fail_lock;
    if (pthread_cond_init(&s->flight_cv, NULL))
        goto fail_flight_mu;
    tw_wheel_init(&s->wheel, atomic_load(&c->manual_now));
    return 0;
fail_flight_mu:
    pthread_mutex_destroy(&s->flight_mu);
fail_lock:
    if (c->rwlock)
        pthread_rwlock_destroy(&s->lock.rw);
    else
        pthread_mutex_destroy(&s->lock.mu);
fail_table:
    tw_cache_table_free_(c, t);
    return TW_ESYS;
}

void tw_cache_shards_free_(struct tw_cache *c, unsigned inited)
{
    c->freeing = true; /* no slab trims: the shards' locks are going */
    for (unsigned i = 0; i < inited; i++) {
        struct cache_shard *s = &c->shards[i];
        tw_wheel_destroy(&s->wheel);
        struct cache_garbage g = {0};
        tw_cache_limbo_collect_(c, s, &g, true);
        struct cache_table *t = atomic_load_explicit(&s->table, memory_order_relaxed);
        for (size_t b = 0; b <= t->mask; b++) {
            uintptr_t l = atomic_load_explicit(&t->b[b], memory_order_relaxed);
            while (l) {
                struct cache_entry *e = cache_link_entry(l);
                l = atomic_load_explicit(&e->hnext, memory_order_relaxed);
                tw_cache_garbage_add_(&g, e);
            }
        }
        t->free_next = g.tables;
        g.tables = t;
        tw_cache_garbage_release_(c, &g);
        if (c->rwlock)
            pthread_rwlock_destroy(&s->lock.rw);
        else
            pthread_mutex_destroy(&s->lock.mu);
        pthread_cond_destroy(&s->flight_cv);
        pthread_mutex_destroy(&s->flight_mu);
    }
    for (unsigned i = 0; i < inited; i++)
        tw_cache_slab_destroy_(c, &c->shards[i].slab);
    tw_mem_free_(&c->alloc, c->shards_block, c->shards_bytes);
}
