/* SPDX-License-Identifier: MIT */
/* twheel cache: the layer's design, and its lifetime (the configuration,
 * tw_cache_new, tw_cache_free).
 *
 * The files of src/cache/, each of one job:
 *
 *   | file       | job                                                        |
 *   |------------|------------------------------------------------------------|
 *   | cache.c    | this design; configuration, new, free                      |
 *   | get.c      | single reads: get, get_copy (the hit path is inline)       |
 *   | set.c      | writes of one key: set, set_copy, del; the locked store    |
 *   | batch.c    | get_many, set_many: the prefetch pipeline                  |
 *   | take.c     | take: get or load, with single flight                      |
 *   | lru.c      | the LRU lists and eviction                                 |
 *   | expire.c   | expiry: the clock service's run, the manual clock's calls  |
 *   | stats.c    | tw_cache_stats and the log line                            |
 *   | shard.c    | a shard's setup and teardown, the default shard count      |
 *   | map.c      | the per-shard table: buckets of tagged links               |
 *   | epoch.c    | read sections, the safe reclamation of what writers unlink |
 *   | slab.c     | entry memory: chunks carved per shard                      |
 *   | internal.h | the structs, and the hot paths' inline helpers             |
 *
 * Reads (get, and take's hit path) take no lock and write no cache line that
 * a reader on another CPU writes. A read: hashes the key (cache_hash),
 * enters a read section (its CPU's stripe, see cache/epoch.c), looks at the
 * 8 links of its bucket (one cache line) from the slot its tag names,
 * reading only the entry whose link carries its tag (cache/internal.h; a
 * bucket's rare overflow chains are walked), compares the entry's expiry
 * tick with the clock, retains the value (retain_value, inside the read
 * section, so the value cannot be freed under it), raises the entry's LRU
 * stamp if the cache has a limit and the stamp is older than the current
 * tick, and leaves the section with one atomic add that also counts the
 * hit in its stripe (cache/internal.h, struct cache_stripe). Per hit, with
 * C CPUs and T threads:
 *
 *   | what                         | locks | lines written, shared with other readers |
 *   |------------------------------|-------|-------------------------------------------|
 *   | stripe: active[], hits       | 0     | 0 (one stripe per CPU; two threads on one |
 *   |                              |       |   CPU never run at once)                   |
 *   | epoch, table, bucket, entry  | 0     | 0 (read only)                             |
 *   | entry's LRU stamp (limit>0)  | 0     | at most once per key per 1 ms tick, by    |
 *   |                              |       |   whichever reader sees it stale           |
 *   | manual clock, limit > 0      | 0     | the stamp counter on every hit (tests)     |
 *
 * None of these grows with T. A miss is the same with its own counter. If
 * a resize relinked the shard's chains during the walk (seq changed), a miss
 * is not trusted: the read retries (once in a batch, twice in a single get,
 * whose inline path made the first try), then looks under the shard lock.
 *
 * What a hit costs at 10^6 keys: up to three missed lines, the caller's key
 * bytes, the bucket's line and the entry's line, in that dependent order,
 * and about 250 instructions: the hash (tw_hash_mum, about 30 for a short
 * key; SipHash-1-3, 107, stays behind cfg.siphash), the slot scan and key
 * compare (~70), entering and leaving the section (sched_getcpu from
 * glibc's rseq area, 2 locked adds, the second counting the hit, 2 loads of
 * the epoch), the coarse clock, the public call's checks. A hit is one
 * inline path (cache_get; whatever is not a hit proven live by the coarse
 * clock goes to tw_cache_get_rest_), and the bucket is prefetched before the
 * section is entered (cache_prefetch_early_): entering's locked add (a load
 * cannot pass it on x86) would hold the bucket's load back.
 *
 * Writers take the shard lock. Entries never change in place except for
 * their expiry, their LRU stamp and their links: a set of a new value (or,
 * in copy mode, of any value) allocates a new entry and swaps it into the
 * chain; the old one is retired. A set of the same pointer keeps the entry
 * and stores its new expiry (a reader sees the old or the new one: either is
 * a state the key had). With expiry slack, such a refresh leaves the timer
 * where it is when it is planned at or before the new expiry (one store
 * instead of relinking the timer between two other entries): the expiry
 * pass then finds the entry's expiry still ahead and re-arms it instead of
 * expiring it. Unlinked entries keep their hnext, so a reader on one
 * walks on. Retired entries, their values and replaced bucket arrays are
 * freed by the epoch scheme of cache/epoch.c: at once when no reader is
 * inside, else once every reader that could see them has left. free_value
 * then runs on the thread that frees (a writer, or the expiry pass).
 *
 * LRU with lock-free reads: a hit only raises the entry's stamp (ticks of
 * the real clock, or a counter under the manual clock); the list stays
 * ordered by the stamp each entry was placed with, and eviction moves a
 * tail whose stamp has passed to where it belongs before taking the tail.
 * So eviction order is exact by last use (up to the 1 ms tick with the real
 * clock), except that a move walks at most CACHE_LRU_WALK entries from the
 * head and an eviction makes at most CACHE_LRU_SETTLE_MOVES moves (cache/lru.c).
 *
 * Locks, in the only order they are ever nested:
 *   shard flight_mu  ->  shard lock          (take: join or finish a flight)
 *   cache evict_mu   ->  shard lock          (eviction, one shard at a time)
 *   cache log_mu                             (never held with another lock)
 * Values are freed, and entries released, after the shard lock is dropped.
 *
 * Expiry: each shard's entries carry a timer on the shard's wheel (1 ms
 * ticks). The cache is a member of a clock service (twheel/clock.h: the
 * one in cfg.clock, shared with other caches, or one of its own): its run
 * pulls due timers with tw_wheel_expire_next_node, CACHE_EXPIRE_BATCH at a
 * time per lock hold, and returns the earliest next deadline of all shards.
 * The service sleeps until the earliest deadline (no wake-ups for empty
 * ticks). Timers are armed with slack (cfg.expiry_slack_shift, cache_arm):
 * a read never trusts a timer, so a late one only holds memory a little
 * longer, and the wheel plans it where it fires without cascading: with
 * the default slack (1/8 of the TTL) expiry costs 0.5-0.6x the CPU of
 * exact timers at 10^6 keys. A set whose deadline is earlier wakes the
 * service (tw_clock_wake). Expiry never shrinks a table (a shrink would
 * relink chains while readers look): del and set do. Reads never depend on
 * expiry: they compare the entry's expiry with the clock, and never wait
 * for the expiring thread.
 *
 * Memory (twheel/cache.h gives the cost per key): entries of up to
 * CACHE_SLAB_MAX bytes are carved from chunks of their shard (cache/slab.c:
 * no malloc header; an entry with a key of up to 10 bytes is one 64-byte
 * line), bigger ones allocated alone. With the default allocator the 2 MB
 * chunks and the tables of 1 MB or more are 2 MB aligned and advised huge,
 * so that the TLB covers them (on Linux 6.1+ a set then copies 1 MB under
 * its shard's lock about once per 25,000 entries: common/bigmem.h). A
 * table of 1-2 MB is rounded up to a 2 MB page (cache/map.c), so at 10^6
 * keys in 16 shards a key takes about 107 bytes of RSS where a 1 MB table
 * in 4 KB pages would take 17 bytes less, for get_many 8% and set_many 14%
 * slower (TLB misses; single calls and the Zipf mix within the noise), and
 * a table grown at one key per link (512 KB) 25 bytes less, for get_many
 * 54% and set_many 66% slower (bench/README.md, W8).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/internal.h"
#include "common/random.h"

/* The margin of cache_surely_live (cache/internal.h): 0 when the coarse
 * clock is missing or too coarse. */
static uint64_t cache_coarse_margin(void)
{
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec r, t;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &r) || clock_gettime(CLOCK_MONOTONIC_COARSE, &t) ||
        r.tv_sec != 0 || r.tv_nsec > 10000000)
        return 0;
    uint64_t m = 64 * (uint64_t)r.tv_nsec;
    return m > CACHE_COARSE_MARGIN_NS ? m : CACHE_COARSE_MARGIN_NS;
#else
    return 0;
#endif
}

void tw_cache_config_init(struct tw_cache_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->jitter = 0.05;
    cfg->expiry_slack_shift = TW_CACHE_SLACK_SHIFT_DEFAULT;
    cfg->shards = 0; /* by the CPUs: see tw_cache_default_shards */
    cfg->log_interval_ms = 60000;
}

static bool cache_config_valid(const struct tw_cache_config *cfg)
{
    unsigned n = cfg->shards;
    return cfg->default_ttl_ms > 0 && cfg->jitter >= 0.0 && cfg->jitter < 1.0 &&
           cfg->expiry_slack_shift <= TW_CACHE_SLACK_SHIFT_MAX &&
           n <= CACHE_MAX_SHARDS && (n & (n - 1)) == 0 &&
           (cfg->lock == TW_CACHE_LOCK_MUTEX || cfg->lock == TW_CACHE_LOCK_RWLOCK) &&
           !(cfg->copy_values && cfg->retain_value) && cfg->start_ms < (UINT64_C(1) << 44) &&
           (!cfg->log || cfg->log_interval_ms > 0) &&
           (!cfg->allocator || cfg->allocator->fn) && !(cfg->manual_clock && cfg->clock);
}

int tw_cache_new(struct tw_cache **out, const struct tw_cache_config *cfg)
{
    if (!out || !cfg || !cache_config_valid(cfg))
        return TW_EINVAL;
    struct tw_cache *c = tw_mem_new_(cfg->allocator, sizeof *c, offsetof(struct tw_cache, alloc));
    if (!c)
        return TW_ENOMEM;
    c->default_ttl_ms = cfg->default_ttl_ms;
    c->limit = cfg->limit;
    c->jitter = cfg->jitter;
    c->slack_shift = cfg->expiry_slack_shift;
    c->rwlock = cfg->lock == TW_CACHE_LOCK_RWLOCK;
    c->copy_values = cfg->copy_values;
    c->manual = cfg->manual_clock;
    c->free_value = cfg->free_value;
    c->retain_value = cfg->retain_value;
    c->value_ctx = cfg->value_ctx;
    c->log = cfg->log;
    c->log_ctx = cfg->log_ctx;
    c->log_interval = cfg->log_interval_ms;
    atomic_init(&c->epoch, 2);
    atomic_init(&c->manual_now, c->manual ? cfg->start_ms : 0);
    atomic_init(&c->seq, 0);
    atomic_init(&c->count, 0);
    atomic_init(&c->slab_bytes, 0);
    c->epoch_ns = tw_mono_ns_();
    c->coarse_margin_ns = c->manual || c->limit ? 0 : cache_coarse_margin();
    tw_random_seed_(c->seed);
    tw_hash_mum_seed(c->seed, c->mum);
    c->siphash = cfg->siphash;
    c->log_due = atomic_load(&c->manual_now) + c->log_interval;
    c->log_at = c->log_due - c->log_interval;

    int rc = TW_ENOMEM;
    const char *name = cfg->name ? cfg->name : "cache";
    c->name_bytes = strlen(name) + 1;
    c->name = tw_mem_alloc_(&c->alloc, c->name_bytes);
    if (!c->name)
        goto fail_cache;
    memcpy(c->name, name, c->name_bytes);

    unsigned nst = tw_cache_stripes_default_();
    c->stripe_mask = nst - 1;
    c->stripes_bytes = (size_t)nst * sizeof(struct cache_stripe) + 64;
    c->stripes_block = tw_mem_alloc_(&c->alloc, c->stripes_bytes);
    if (!c->stripes_block)
        goto fail_name;
    c->stripes = (struct cache_stripe *)(((uintptr_t)c->stripes_block + 63) & ~(uintptr_t)63);
    for (unsigned i = 0; i < nst; i++) {
        atomic_init(&c->stripes[i].active[0], 0);
        atomic_init(&c->stripes[i].active[1], 0);
        atomic_init(&c->stripes[i].hits, 0);
        atomic_init(&c->stripes[i].misses, 0);
        atomic_init(&c->stripes[i].draining, 0);
    }

    c->nshards = cfg->shards ? cfg->shards : tw_cache_default_shards();
    unsigned bits = 0;
    while ((1u << bits) < c->nshards)
        bits++;
    c->shard_shift = 32 - bits;
    c->shards_bytes = (size_t)c->nshards * sizeof(struct cache_shard) + 64;
    c->shards_block = tw_mem_alloc_(&c->alloc, c->shards_bytes);
    if (!c->shards_block)
        goto fail_stripes;
    c->shards = (struct cache_shard *)(((uintptr_t)c->shards_block + 63) & ~(uintptr_t)63);
    unsigned inited = 0;
    for (; inited < c->nshards; inited++) {
        rc = tw_cache_shard_init_(c, &c->shards[inited],
                                  c->seed[0] ^ (UINT64_C(0x9e3779b97f4a7c15) * (inited + 1)));
        if (rc)
            goto fail_shards;
    }
    rc = TW_ESYS;
    if (pthread_mutex_init(&c->evict_mu, NULL))
        goto fail_shards;
    if (pthread_mutex_init(&c->log_mu, NULL))
        goto fail_evict;
    if (!c->manual) {
        c->clock = cfg->clock;
        if (!c->clock) {
            rc = tw_clock_new(&c->clock, cfg->allocator);
            if (rc)
                goto fail_log_mu;
            c->own_clock = true;
        }
        rc = tw_clock_join(c->clock, tw_cache_clock_run_, c, TW_CLOCK_NEVER, &c->member);
        if (rc)
            goto fail_clock;
    }
    *out = c;
    return 0;

fail_clock:
    if (c->own_clock)
        tw_clock_free(c->clock);
fail_log_mu:
    pthread_mutex_destroy(&c->log_mu);
fail_evict:
    pthread_mutex_destroy(&c->evict_mu);
fail_shards:
    tw_cache_shards_free_(c, inited);
fail_stripes:
    tw_mem_free_(&c->alloc, c->stripes_block, c->stripes_bytes);
fail_name:
    tw_mem_free_(&c->alloc, c->name, c->name_bytes);
fail_cache:
    tw_mem_free_(&c->alloc, c, sizeof *c);
    return rc;
}

int tw_cache_free(struct tw_cache *c)
{
    if (!c)
        return 0;
    if (c->member)
        tw_clock_leave(c->clock, c->member);
    if (c->own_clock)
        tw_clock_free(c->clock);
    pthread_mutex_destroy(&c->log_mu);
    pthread_mutex_destroy(&c->evict_mu);
    tw_cache_shards_free_(c, c->nshards);
    struct tw_allocator alloc = c->alloc;
    tw_mem_free_(&alloc, c->stripes_block, c->stripes_bytes);
    tw_mem_free_(&alloc, c->name, c->name_bytes);
    tw_mem_free_(&alloc, c, sizeof *c);
    return 0;
}
