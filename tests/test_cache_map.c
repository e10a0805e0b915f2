/* SPDX-License-Identifier: MIT */
/* White-box model test of the cache's table (src/cache/map.c): buckets of
 * tagged links with overflow chains. Keys get forged hashes so that they
 * all fall in one bucket whatever the table's size (deep overflow chains)
 * and share a handful of tags (tag collisions decided by the key compare);
 * random inserts, removals and replacements (which grow and shrink the
 * table) are checked against a presence array after every step, through
 * both the locked lookup and the lock-free one. A second run spreads the
 * keys over the buckets. A threaded run (labelled "threads": TSan) has
 * lock-free readers look up keys that are always present while a writer
 * inserts, replaces and removes other keys of the same bucket (and so
 * grows, shrinks and relinks the table): a present key must never be
 * missed unless the reader was told the walk was torn. Removed entries and
 * tables are kept until the end there, so no reader can touch freed
 * memory (the epochs that free them in the cache are tested elsewhere). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/internal.h"
#include "test.h"

enum { N = 300, STEPS = 20000 };

static struct cache_entry *ents[N];
static uint64_t hashes[N];
static char names[N][8];

static struct cache_entry *make_entry(int i)
{
    struct cache_entry *e = calloc(1, CACHE_ENTRY_HDR + 16);
    if (!e)
        abort();
    atomic_init(&e->hnext, 0);
    e->hash = (uint32_t)hashes[i];
    cache_eset_key(e, names[i], strlen(names[i]));
    return e;
}

static void release(struct tw_cache *c, struct cache_garbage *g)
{
    while (g->tables) {
        struct cache_table *t = g->tables;
        g->tables = t->free_next;
        tw_cache_table_free_(c, t);
    }
    g->n = 0;
}

static void check_all(struct cache_shard *s)
{
    for (int i = 0; i < N; i++) {
        size_t kl = strlen(names[i]);
        struct cache_entry *e = tw_cache_map_find_(s, names[i], kl, hashes[i]);
        bool torn = true;
        struct cache_entry *r = tw_cache_map_find_rcu_(s, names[i], kl, hashes[i], &torn);
        CHECK_EQ_PTR(e, ents[i]);
        CHECK_EQ_PTR(r, ents[i]);
        if (!ents[i])
            CHECK(!torn);
    }
}

static void run(bool one_bucket, uint64_t seed)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 1000;
    cfg.shards = 1;
    struct tw_cache *c;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    struct cache_shard *s = &c->shards[0];
    uint64_t x = seed;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "m%d", i);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* 4 tags in all; one bucket: the same low 32 bits for every key */
        uint64_t hi = (x % 4) << 60;
        uint64_t lo = one_bucket ? 0x5a5a0005u : (uint32_t)(x >> 13);
        hashes[i] = hi | lo;
        ents[i] = NULL;
    }
    struct cache_garbage g = {0};
    size_t count = 0;
    pthread_mutex_lock(&s->lock.mu);
    for (int step = 0; step < STEPS; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int i = (int)(x % N);
        /* drift between filling and emptying so that tables grow and shrink */
        bool fill = (step / 2000) % 2 == 0;
        unsigned op = (unsigned)(x >> 32) % 10;
        if (!ents[i] && (fill ? op < 8 : op < 3)) {
            ents[i] = make_entry(i);
            tw_cache_map_insert_(c, s, ents[i], hashes[i], &g);
            count++;
        } else if (ents[i] && op < 3) {
            struct cache_entry *n = make_entry(i);
            tw_cache_map_replace_(s, ents[i], n, hashes[i]);
            free(ents[i]);
            ents[i] = n;
        } else if (ents[i]) {
            tw_cache_map_remove_(c, s, ents[i], true, &g);
            free(ents[i]);
            ents[i] = NULL;
            count--;
        }
        release(c, &g);
        CHECK_EQ_U64(s->count, count);
        if (step % 16 == 0 || step > STEPS - 50)
            check_all(s);
    }
    for (int i = 0; i < N; i++) {
        if (ents[i]) {
            tw_cache_map_remove_(c, s, ents[i], true, &g);
            free(ents[i]);
            ents[i] = NULL;
        }
    }
    release(c, &g);
    check_all(s);
    pthread_mutex_unlock(&s->lock.mu);
    tw_cache_free(c);
}

static void test_one_bucket(void)
{
    run(true, UINT64_C(0x9e3779b97f4a7c15));
}

static void test_spread(void)
{
    run(false, UINT64_C(0x2545f4914f6cdd1d));
}

/* ---- links to addresses with high bits set ---------------------------- */

/* Heap addresses need not leave bits 48-63 clear: AArch64 top-byte-ignore
 * allocators hand out pointers tagged in the top byte (Android's Scudo: 0xb4,
 * HWASan: any byte, MTE: bits 56-59), and 5-level paging gives user
 * addresses up to 2^56. A link to such an address must lead back to exactly
 * that address and never hide its entry (no false tag mismatch, no false "no
 * successor"). The addresses are forged and never dereferenced. */
static void test_link_high_addresses(void)
{
#if UINTPTR_MAX == UINT64_MAX
    static const uint64_t addrs[] = {
        UINT64_C(0x00007f1234567890), /* 4-level paging: taggable */
        UINT64_C(0x0000000000001000),
        UINT64_C(0x00ff7f1234567890), /* 5-level paging (LA57) */
        UINT64_C(0x0100000000000040),
        UINT64_C(0xb400007f12345670), /* Android TBI heap tag */
        UINT64_C(0xff00007f12345670), /* HWASan tag */
        UINT64_C(0x0f00007f12345670), /* MTE tag */
        UINT64_C(0x8000000000000010),
        UINT64_C(0xc0007f1234567890),
    };
    const uint64_t hashes_[] = {0, UINT64_MAX, UINT64_C(0x9e3779b97f4a7c15),
                                UINT64_C(0x4000000000000000)};
    for (size_t i = 0; i < sizeof addrs / sizeof addrs[0]; i++) {
        const struct cache_entry *e = (const struct cache_entry *)(uintptr_t)addrs[i];
        for (size_t h = 0; h < sizeof hashes_ / sizeof hashes_[0]; h++) {
            uintptr_t tag = cache_tag_of(hashes_[h]);
            for (uintptr_t next = 0; next < 2; next++) {
                uintptr_t l = cache_link(e, tag, next);
                CHECK(l != 0);
                CHECK_EQ_PTR(cache_link_entry(l), e);
                CHECK(cache_link_may_match(l, tag));
                if (next)
                    CHECK(cache_link_may_continue(l));
                /* a link rewritten from this one's tag (resize) too */
                uintptr_t l2 = cache_link(e, cache_link_tag(l), next);
                CHECK_EQ_PTR(cache_link_entry(l2), e);
                CHECK(cache_link_may_match(l2, tag));
            }
        }
    }
    CHECK(cache_link(NULL, cache_tag_of(UINT64_MAX), 1) == 0);
#endif
}

/* ---- threaded: stable keys found while the bucket changes ---------- */

enum { STABLE = 16, MOVING = 200, ROUNDS = 30000 };

struct mt {
    struct tw_cache *c;
    struct cache_shard *s;
    _Atomic int stop, started;
    _Atomic long misses, lookups;
};

static void *mt_reader(void *p)
{
    struct mt *m = p;
    uint64_t x = (uint64_t)(uintptr_t)&x | 1;
    long lookups = 0, misses = 0;
    atomic_fetch_add(&m->started, 1);
    do { /* at least one lookup, however late the thread runs */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int i = (int)(x % STABLE);
        bool torn = false;
        struct cache_entry *e =
            tw_cache_map_find_rcu_(m->s, names[i], strlen(names[i]), hashes[i], &torn);
        if (!e && !torn)
            misses++;
        lookups++;
    } while (!atomic_load(&m->stop) && lookups < 300000);
    atomic_fetch_add(&m->misses, misses);
    atomic_fetch_add(&m->lookups, lookups);
    return NULL;
}

static void test_threads_stable_keys(void)
{
    static struct mt m;
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 1000;
    cfg.shards = 1;
    memset(&m, 0, sizeof m);
    CHECK_EQ_INT(tw_cache_new(&m.c, &cfg), 0);
    m.s = &m.c->shards[0];
    uint64_t x = UINT64_C(0x1234567887654321);
    for (int i = 0; i < STABLE + MOVING; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        hashes[i] = (x % 4) << 60 | 0x5a5a0005u; /* one bucket, 4 tags */
        ents[i] = NULL;
    }
    /* removed entries and replaced tables stay allocated until the end */
    struct cache_entry **dead = calloc(ROUNDS, sizeof *dead);
    CHECK(dead != NULL);
    size_t ndead = 0;
    struct cache_garbage g = {0};
    pthread_mutex_lock(&m.s->lock.mu);
    for (int i = 0; i < STABLE; i++) {
        ents[i] = make_entry(i);
        tw_cache_map_insert_(m.c, m.s, ents[i], hashes[i], &g);
    }
    pthread_mutex_unlock(&m.s->lock.mu);
    pthread_t rt[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&rt[t], NULL, mt_reader, &m);
    /* the writes race the readers only if the readers run: wait (bounded)
     * until both have started, which a loaded machine may delay */
    for (int w = 0; w < 5000 && atomic_load(&m.started) < 2; w++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    for (int r = 0; r < ROUNDS; r++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int i = STABLE + (int)(x % MOVING);
        bool fill = (r / 3000) % 2 == 0;
        unsigned op = (unsigned)(x >> 32) % 10;
        pthread_mutex_lock(&m.s->lock.mu);
        if (!ents[i] && (fill ? op < 8 : op < 3)) {
            ents[i] = make_entry(i);
            tw_cache_map_insert_(m.c, m.s, ents[i], hashes[i], &g);
        } else if (ents[i] && op < 3) {
            struct cache_entry *n = make_entry(i);
            tw_cache_map_replace_(m.s, ents[i], n, hashes[i]);
            dead[ndead++] = ents[i];
            ents[i] = n;
        } else if (ents[i]) {
            tw_cache_map_remove_(m.c, m.s, ents[i], true, &g);
            dead[ndead++] = ents[i];
            ents[i] = NULL;
        }
        pthread_mutex_unlock(&m.s->lock.mu);
    }
    atomic_store(&m.stop, 1);
    for (int t = 0; t < 2; t++)
        pthread_join(rt[t], NULL);
    CHECK_EQ_INT(atomic_load(&m.misses), 0);
    CHECK(atomic_load(&m.lookups) > 0);
    pthread_mutex_lock(&m.s->lock.mu);
    for (int i = 0; i < STABLE + MOVING; i++) {
        if (ents[i]) {
            tw_cache_map_remove_(m.c, m.s, ents[i], true, &g);
            free(ents[i]);
            ents[i] = NULL;
        }
    }
    pthread_mutex_unlock(&m.s->lock.mu);
    release(m.c, &g);
    for (size_t k = 0; k < ndead; k++)
        free(dead[k]);
    free(dead);
    tw_cache_free(m.c);
}

int main(void)
{
    RUN(test_one_bucket);
    RUN(test_spread);
    RUN(test_link_high_addresses);
    RUN(test_threads_stable_keys);
    return test_summary();
}
