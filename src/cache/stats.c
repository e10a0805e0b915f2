/* SPDX-License-Identifier: MIT */
/* twheel cache: the figures. tw_cache_stats sums the stripes' hit and miss
 * counts (written by readers, one stripe per CPU) and the shards' eviction
 * and expiry counts (written under the shard locks), without stopping the
 * cache; the periodic log line reports them per interval. */
#include <stdio.h>
#include <string.h>

#include "cache/internal.h"

int tw_cache_stats(const struct tw_cache *c, struct tw_cache_stats *out)
{
    if (!c || !out)
        return TW_EINVAL;
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i <= c->stripe_mask; i++) {
        struct cache_stripe *st = &c->stripes[i];
        out->hits += tw_cache_stripe_hits_(st);
        out->misses += atomic_load_explicit(&st->misses, memory_order_relaxed);
    }
    for (unsigned i = 0; i < c->nshards; i++) {
        struct cache_shard *s = &c->shards[i];
        out->evictions += atomic_load_explicit(&s->evictions, memory_order_relaxed);
        out->expirations += atomic_load_explicit(&s->expirations, memory_order_relaxed);
    }
    out->entries = atomic_load_explicit(&c->count, memory_order_relaxed);
    uint64_t total = out->hits + out->misses;
    out->hit_ratio = total ? (double)out->hits / (double)total : 0.0;
    return 0;
}

void tw_cache_log_line_(struct tw_cache *c, uint64_t now_tick)
{
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    /* Every count is for the interval since the previous line; qpm is a
     * true rate (per minute of the interval's real length); elements is the
     * one figure of now. */
    uint64_t dh = st.hits - c->log_hits, dm = st.misses - c->log_misses;
    uint64_t dev = st.evictions - c->log_evictions, dex = st.expirations - c->log_expirations;
    uint64_t span = now_tick > c->log_at ? now_tick - c->log_at : 1; /* ms */
    char line[320];
    snprintf(line, sizeof line,
             "cache(%s) - last %.1f s: queries: %llu (qpm: %.0f), hits: %llu, misses: %llu, "
             "hit_ratio: %.1f%%, evictions: %llu, expirations: %llu; elements now: %llu",
             c->name, (double)span / 1000.0, (unsigned long long)(dh + dm),
             (double)(dh + dm) * 60000.0 / (double)span, (unsigned long long)dh,
             (unsigned long long)dm, dh + dm ? 100.0 * (double)dh / (double)(dh + dm) : 0.0,
             (unsigned long long)dev, (unsigned long long)dex, (unsigned long long)st.entries);
    c->log_hits = st.hits;
    c->log_misses = st.misses;
    c->log_evictions = st.evictions;
    c->log_expirations = st.expirations;
    c->log_at = now_tick;
    while (c->log_due <= now_tick)
        c->log_due += c->log_interval;
    c->log(c->log_ctx, line);
}
