/* SPDX-License-Identifier: MIT */
/* twheel cache: expiry. The clock service runs tw_cache_clock_run_: every
 * shard's due timers are pulled off its wheel, CACHE_EXPIRE_BATCH per hold
 * of the shard lock, and their entries retired; the run returns the
 * earliest next work (tw_wheel_next_work: a deadline, or a step of the
 * walks that move the timers refreshes pushed back, so that no run makes
 * them all at once). Under the manual clock tw_cache_advance does the
 * same pass. Reads never depend on it (they compare expiries with the
 * clock), so it never shrinks a table (a shrink relinks chains under
 * readers) and a late run only holds memory longer. */
#include "cache/internal.h"

/* Expire s's entries due by now_tick, a batch per lock hold, and collect its
 * limbo. Returns how many expired and sets *next to the shard's next work.
 * Tables are not shrunk here: readers would have to distrust their misses
 * while a shrink relinks, and a read must not wait on expiry. */
static uint64_t cache_expire_shard(struct tw_cache *c, struct cache_shard *s, uint64_t now_tick,
                                   uint64_t *next, uint64_t *budget)
{
    uint64_t total = 0;
    for (;;) {
        if (budget && *budget == 0) { /* more may be due: run again at once */
            *next = now_tick;
            return total;
        }
        struct cache_garbage g = {0};
        unsigned n = 0, rearmed = 0;
        cache_lock(c, s);
        struct tw_node *t;
        while (n + rearmed < CACHE_EXPIRE_BATCH &&
               (t = tw_wheel_expire_next_node(&s->wheel, now_tick))) {
            struct cache_entry *e = tw_container_of(t, struct cache_entry, timer);
            uint64_t exp = atomic_load_explicit(&e->expires, memory_order_relaxed);
            if (exp > now_tick) {
                /* refreshed since it was armed (tw_cache_store_at_locked_ left
                 * the timer early): arm it for its expiry now */
                cache_arm(c, s, e, exp, now_tick * CACHE_NS_PER_TICK);
                rearmed++;
                continue;
            }
            tw_cache_map_remove_(c, s, e, false, &g);
            if (c->limit)
                tw_cache_lru_unlink_(s, e);
            tw_cache_garbage_add_(&g, e);
            n++;
        }
        if (n + rearmed < CACHE_EXPIRE_BATCH)
            *next = tw_wheel_next_work(&s->wheel);
        if (n) {
            atomic_fetch_sub_explicit(&c->count, n, memory_order_relaxed);
            cache_bump(&s->expirations, n);
        }
        if (g.n)
            tw_cache_retire_locked_(c, s, &g);
        else
            tw_cache_limbo_collect_(c, s, &g, false);
        cache_unlock(c, s);
        tw_cache_garbage_release_(c, &g);
        total += n;
        if (budget)
            *budget -= *budget < n + rearmed + 1 ? *budget : n + rearmed + 1;
        if (n + rearmed < CACHE_EXPIRE_BATCH)
            return total;
    }
}

/* One expiry pass over every shard; *next = the earliest next work, or
 * 10 ms from now while some shard still holds limbo. */
static uint64_t cache_expire_all(struct tw_cache *c, uint64_t now_tick, uint64_t *next,
                                 uint64_t *budget)
{
    uint64_t total = 0, earliest = TW_NEVER;
    size_t limbo = 0;
    for (unsigned i = 0; i < c->nshards; i++)
        limbo += atomic_load_explicit(&c->shards[i].limbo_n, memory_order_relaxed);
    if (limbo) {
        tw_cache_epoch_advance_(c);
        tw_cache_epoch_advance_(c);
    }
    limbo = 0;
    for (unsigned i = 0; i < c->nshards; i++) {
        uint64_t n = TW_NEVER;
        total += cache_expire_shard(c, &c->shards[i], now_tick, &n, budget);
        if (n < earliest)
            earliest = n;
        limbo += atomic_load_explicit(&c->shards[i].limbo_n, memory_order_relaxed);
    }
    if (limbo && now_tick + 10 < earliest)
        earliest = now_tick + 10;
    *next = earliest;
    return total;
}

#define CACHE_RUN_BUDGET 4096 /* keys expired per run on the clock (tw_cache_clock_run_) */

uint64_t tw_cache_clock_run_(void *ctx, uint64_t now_ns)
{
    struct tw_cache *c = ctx;
    uint64_t now = now_ns > c->epoch_ns ? (now_ns - c->epoch_ns) / CACHE_NS_PER_TICK : 0;
    uint64_t next = TW_NEVER;
    /* Bounded, as the clock's members share its thread: at most
     * CACHE_RUN_BUDGET keys (and a unit per batch) per run; a run that
     * stops early asks to be called again at once. */
    uint64_t budget = CACHE_RUN_BUDGET;
    cache_expire_all(c, now, &next, &budget);
    pthread_mutex_lock(&c->log_mu);
    cache_maybe_log(c, now);
    if (c->log && c->log_due < next)
        next = c->log_due;
    pthread_mutex_unlock(&c->log_mu);
    return next == TW_NEVER ? TW_CLOCK_NEVER : c->epoch_ns + next * CACHE_NS_PER_TICK;
}

int tw_cache_set_now(struct tw_cache *c, uint64_t now_ms)
{
    if (!c || !c->manual || now_ms >= (UINT64_C(1) << 44))
        return TW_EINVAL;
    uint64_t cur = atomic_load(&c->manual_now);
    while (now_ms > cur && !atomic_compare_exchange_weak(&c->manual_now, &cur, now_ms)) {
    }
    return 0;
}

int64_t tw_cache_advance(struct tw_cache *c, uint64_t now_ms)
{
    if (tw_cache_set_now(c, now_ms))
        return TW_EINVAL;
    uint64_t now = atomic_load(&c->manual_now), next;
    uint64_t n = cache_expire_all(c, now, &next, NULL);
    pthread_mutex_lock(&c->log_mu);
    cache_maybe_log(c, now);
    pthread_mutex_unlock(&c->log_mu);
    return (int64_t)n;
}

uint64_t tw_cache_now(const struct tw_cache *c)
{
    return c ? cache_now_ns(c) / CACHE_NS_PER_TICK : 0;
}
