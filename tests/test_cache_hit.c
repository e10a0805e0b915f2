/* SPDX-License-Identifier: MIT */
/* The cache's hit path (white-box, src/cache/internal.h and src/common/hash.h):
 *  - tw_hash_mum, the table's hash: reads no byte outside the key (exact
 *    size heap buffers, so ASan sees any over-read), every byte and the
 *    length change the hash, the seed changes it, its 32-bit multiply
 *    fallback equals the 128-bit one, and it spreads "key:<i>" keys evenly
 *    over the bits the cache uses (bucket, shard, tag);
 *  - cfg.siphash: a cache hashing with SipHash-1-3 stores and finds keys
 *    (the model test and the fuzz target run both hashes too);
 *  - the hit count packed into the read section's exit: stats count every
 *    hit exactly when a stripe's word drains into its 64-bit counter (the
 *    words are preset just below the drain point), single-threaded and
 *    with two threads, and writers still see "no reader inside" (a del
 *    frees its value before it returns) whatever the hit bits hold;
 *  - the slab's chunk schedule: 2 MB chunks from 256 KB on, huge pages
 *    once half carved.
 * Bounded: a few hundred thousand hashes and gets, well under a second. */
#define _POSIX_C_SOURCE 200809L
#define TW_HASH_MUM64_TEST /* hash.h: the 32-bit multiply fallback, to test it */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* cache/internal.h: this file's own copy of a stripe word's drain calls
 * this between moving the hits out of the word and adding them to the
 * stripe's counter (test_hit_count_stats_during_drain). */
struct cache_stripe;
static void drain_paused(struct cache_stripe *st);
#define CACHE_DRAIN_TEST_HOOK(st) drain_paused(st)

#include "cache/internal.h"
#include "test.h"

static uint64_t rng = UINT64_C(0x243f6a8885a308d3);

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_hash_bounds_and_bytes(void)
{
    uint64_t seed[2] = {next(), next()}, k[2];
    tw_hash_mum_seed(seed, k);
    int changed = 0, tried = 0;
    for (size_t len = 0; len <= 80; len++) {
        unsigned char *p = malloc(len ? len : 1);
        if (!p)
            abort();
        for (size_t i = 0; i < len; i++)
            p[i] = (unsigned char)next();
        uint64_t h = tw_hash_mum(p, len, k);
        CHECK_EQ_U64(tw_hash_mum(p, len, k), h); /* deterministic */
        for (size_t i = 0; i < len; i++) {
            for (unsigned bit = 0; bit < 8; bit += 7) {
                p[i] ^= (unsigned char)(1u << bit);
                tried++;
                changed += tw_hash_mum(p, len, k) != h;
                p[i] ^= (unsigned char)(1u << bit);
            }
        }
        if (len) /* the length counts: a prefix hashes differently */
            CHECK(tw_hash_mum(p, len - 1, k) != h);
        free(p);
    }
    CHECK_EQ_INT(changed, tried);
}

/* Any alignment: the key at every offset 0..15 in a heap block that ends
 * where the key ends (ASan sees a read past it, UBSan a misaligned load
 * through a cast) hashes as the same bytes at the block's start. */
static void test_hash_alignment(void)
{
    uint64_t seed[2] = {next(), next()}, k[2];
    tw_hash_mum_seed(seed, k);
    unsigned char key[64];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (unsigned char)next();
    int same = 0, tried = 0;
    for (size_t len = 0; len <= sizeof key; len++) {
        unsigned char *a = malloc(len ? len : 1);
        if (!a)
            abort();
        memcpy(a, key, len);
        uint64_t h = tw_hash_mum(a, len, k);
        free(a);
        for (size_t off = 1; off < 16; off++) {
            unsigned char *b = malloc(off + len);
            if (!b)
                abort();
            memcpy(b + off, key, len);
            tried++;
            same += tw_hash_mum(b + off, len, k) == h;
            free(b);
        }
    }
    CHECK_EQ_INT(same, tried);
}

static void test_hash_seeded(void)
{
    uint64_t s1[2] = {1, 2}, s2[2] = {1, 3}, k1[2], k2[2];
    tw_hash_mum_seed(s1, k1);
    tw_hash_mum_seed(s2, k2);
    int differ = 0;
    for (int i = 0; i < 1000; i++) {
        char key[32];
        int n = snprintf(key, sizeof key, "key:%d", i);
        differ += tw_hash_mum(key, (size_t)n, k1) != tw_hash_mum(key, (size_t)n, k2);
    }
    CHECK_EQ_INT(differ, 1000);
}

static void test_hash_mum_fallback(void)
{
    for (int i = 0; i < 100000; i++) {
        uint64_t a = next(), b = next();
        if (i % 7 == 0)
            a = UINT64_MAX - (uint64_t)i;
        if (i % 11 == 0)
            b = UINT64_MAX;
        uint64_t a1 = a, b1 = b, a2 = a, b2 = b;
        tw_hash_mum_(&a1, &b1);
        tw_hash_mum64_(&a2, &b2);
        if (a1 != a2 || b1 != b2) {
            CHECK_EQ_U64(a1, a2);
            CHECK_EQ_U64(b1, b2);
            break;
        }
    }
}

/* 2^16 keys "key:<i>" over 256 cells by three slices of the hash (the
 * bucket's low bits, the shard's bits 24-31, the tag's top bits): every
 * cell within 6 standard deviations of the mean (256 +- 96). */
static void test_hash_spread(void)
{
    uint64_t seed[2] = {next(), next()}, k[2];
    tw_hash_mum_seed(seed, k);
    static unsigned cells[3][256];
    memset(cells, 0, sizeof cells);
    for (int i = 0; i < 65536; i++) {
        char key[32];
        int n = snprintf(key, sizeof key, "key:%d", i);
        uint64_t h = tw_hash_mum(key, (size_t)n, k);
        cells[0][h & 0xff]++;
        cells[1][(h >> 24) & 0xff]++;
        cells[2][h >> 56]++;
    }
    int bad = 0;
    for (int s = 0; s < 3; s++)
        for (int c = 0; c < 256; c++)
            bad += cells[s][c] < 160 || cells[s][c] > 352;
    CHECK_EQ_INT(bad, 0);
}

static struct tw_cache *new_cache(bool siphash, tw_cache_free_fn *fr, void *ctx)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 60000;
    cfg.siphash = siphash;
    cfg.free_value = fr;
    cfg.value_ctx = ctx;
    struct tw_cache *c = NULL;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    return c;
}

static void test_siphash_cache(void)
{
    for (int sip = 0; sip < 2; sip++) {
        struct tw_cache *c = new_cache(sip, NULL, NULL);
        if (!c)
            return;
        CHECK_EQ_INT(c->siphash, sip);
        char key[40];
        for (int i = 0; i < 5000; i++) {
            int n = snprintf(key, sizeof key, "%s:%d", i % 2 ? "key" : "a longer key, past 16", i);
            CHECK_EQ_INT(tw_cache_set(c, key, (size_t)n, (void *)(uintptr_t)(i + 1)), 0);
        }
        int found = 0;
        for (int i = 0; i < 5000; i++) {
            int n = snprintf(key, sizeof key, "%s:%d", i % 2 ? "key" : "a longer key, past 16", i);
            void *v = NULL;
            found += tw_cache_get(c, key, (size_t)n, &v) == 0 && v == (void *)(uintptr_t)(i + 1);
            if (i % 3 == 0)
                CHECK_EQ_INT(tw_cache_del(c, key, (size_t)n), 0);
        }
        CHECK_EQ_INT(found, 5000);
        for (int i = 0; i < 5000; i++) {
            int n = snprintf(key, sizeof key, "%s:%d", i % 2 ? "key" : "a longer key, past 16", i);
            void *v = NULL;
            CHECK_EQ_INT(tw_cache_get(c, key, (size_t)n, &v), i % 3 == 0 ? TW_ENOENT : 0);
        }
        tw_cache_free(c);
    }
}

static void count_free(void *ctx, void *v)
{
    (void)v;
    (*(int *)ctx)++;
}

/* Every stripe word of both parities set just below the drain point. */
static uint64_t preset_stripes(struct tw_cache *c)
{
    uint64_t preset = 0;
    for (unsigned i = 0; i <= c->stripe_mask; i++)
        for (int p = 0; p < 2; p++) {
            uint64_t x = atomic_load(&c->stripes[i].active[p]);
            atomic_store(&c->stripes[i].active[p], x + (CACHE_HIT_DRAIN - 1) * CACHE_HIT_UNIT);
            preset += CACHE_HIT_DRAIN - 1;
        }
    return preset;
}

static void test_hit_count_drain(void)
{
    int freed = 0;
    struct tw_cache *c = new_cache(false, count_free, &freed);
    if (!c)
        return;
    int obj;
    CHECK_EQ_INT(tw_cache_set(c, "k", 1, &obj), 0);
    uint64_t preset = preset_stripes(c);
    void *v = NULL;
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(tw_cache_get(c, "k", 1, &v), 0);
    CHECK_EQ_INT(tw_cache_get(c, "nope", 4, &v), TW_ENOENT);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.hits, preset + 5);
    CHECK_EQ_U64(st.misses, 1);
    /* the word that counted the hits drained once it passed the mark */
    uint64_t drained = 0;
    int over = 0;
    for (unsigned i = 0; i <= c->stripe_mask; i++) {
        drained += atomic_load(&c->stripes[i].hits);
        for (int p = 0; p < 2; p++) {
            uint64_t x = atomic_load(&c->stripes[i].active[p]);
            over += (x >> CACHE_RD_BITS) > CACHE_HIT_DRAIN;
            CHECK_EQ_U64(x & CACHE_RD_INSIDE, 0); /* nobody inside */
        }
    }
    CHECK(drained >= CACHE_HIT_DRAIN);
    CHECK_EQ_INT(over, 0);
    /* writers mask the hit bits: no reader inside, so a del frees at once */
    CHECK_EQ_INT(tw_cache_del(c, "k", 1), 0);
    CHECK_EQ_INT(freed, 1);
    CHECK(tw_cache_epoch_advance_(c));
    tw_cache_free(c);
    CHECK_EQ_INT(freed, 1);
}

struct hitter {
    struct tw_cache *c;
    long hits;
};

static void *hitter_main(void *p)
{
    struct hitter *h = p;
    void *v;
    for (int i = 0; i < 200000; i++)
        h->hits += tw_cache_get(h->c, "hot", 3, &v) == 0;
    return NULL;
}

static void test_hit_count_threads(void)
{
    struct tw_cache *c = new_cache(false, NULL, NULL);
    if (!c)
        return;
    int obj;
    CHECK_EQ_INT(tw_cache_set(c, "hot", 3, &obj), 0);
    uint64_t preset = preset_stripes(c);
    struct hitter h[2] = {{c, 0}, {c, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(pthread_create(&th[i], NULL, hitter_main, &h[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(h[0].hits + h[1].hits, 400000);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.hits, preset + 400000);
    tw_cache_free(c);
}

/* A stats call that runs while a reader is draining its stripe's word
 * (between the compare-and-swap that takes 2^38 hits out of the word and
 * the add that puts them into the stripe's counter) still counts every hit
 * exactly once: it used to miss the batch (or count it twice), so a
 * periodic log line's "hits" went backwards by 2^38 and printed ~2^64.
 * The drain here is this file's copy of the inline exit (the library's
 * gets drain the same way); the hook starts a stats thread mid-drain and
 * gives it up to 20 ms before the drain goes on. */
static struct {
    struct tw_cache *c;
    _Atomic int armed, done;
    int started;
    pthread_t th;
    uint64_t hits;
} race;

static void *race_stats_main(void *p)
{
    (void)p;
    struct tw_cache_stats st;
    tw_cache_stats(race.c, &st);
    race.hits = st.hits;
    atomic_store(&race.done, 1);
    return NULL;
}

static void drain_paused(struct cache_stripe *st)
{
    (void)st;
    if (!atomic_exchange(&race.armed, 0))
        return;
    race.started = pthread_create(&race.th, NULL, race_stats_main, NULL) == 0;
    for (int i = 0; i < 20 && race.started && !atomic_load(&race.done); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
}

static void test_hit_count_stats_during_drain(void)
{
    struct tw_cache *c = new_cache(false, NULL, NULL);
    if (!c)
        return;
    race.c = c;
    struct cache_rd rd;
    tw_cache_rd_enter_(c, &rd);
    /* as if 2^38 hits had left through this word: the next hit drains it */
    atomic_fetch_add(&rd.st->active[rd.idx], CACHE_HIT_DRAIN * CACHE_HIT_UNIT);
    atomic_store(&race.armed, 1);
    tw_cache_rd_exit_hit_(&rd);
    CHECK(race.started);
    if (race.started)
        pthread_join(race.th, NULL);
    CHECK_EQ_U64(race.hits, CACHE_HIT_DRAIN + 1);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.hits, CACHE_HIT_DRAIN + 1);
    CHECK_EQ_U64(atomic_load(&rd.st->hits), CACHE_HIT_DRAIN + 1);
    tw_cache_free(c);
}

/* The slab's chunks (src/cache/slab.c): doubling up to 256 KB, then 2 MB
 * mappings given huge pages once half carved; every key stays readable,
 * and the chunks go back when the cache empties. One shard, 64-byte
 * entries: 50,000 keys are 3.2 MB, so a second 2 MB chunk is half carved. */
static void test_slab_chunks(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 60000;
    cfg.shards = 1;
    struct tw_cache *c = NULL;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    if (!c)
        return;
    struct cache_slab *sl = &c->shards[0].slab;
    char key[16];
    int big_seen = 0, huge_seen = 0;
    for (int i = 0; i < 50000; i++) {
        int n = snprintf(key, sizeof key, "key:%d", i);
        CHECK_EQ_INT(tw_cache_set(c, key, (size_t)n, (void *)(uintptr_t)(i + 1)), 0);
        if (sl->chunks->bytes == ((size_t)2 << 20)) {
            big_seen++;
            huge_seen += sl->hugified;
            /* huge pages once half carved, not before */
            CHECK_EQ_INT(sl->hugified,
                         (size_t)(sl->bump - (char *)sl->chunks) >= ((size_t)1 << 20));
        }
    }
    CHECK(big_seen > 0);
    CHECK(huge_seen > 0);
    size_t small = 0;
    for (struct cache_chunk *ch = sl->chunks; ch; ch = ch->next)
        if (ch->bytes < ((size_t)2 << 20))
            small += ch->bytes;
    CHECK(small <= ((size_t)256 << 10) * 2); /* doubling stops at 256 KB */
    int found = 0;
    for (int i = 0; i < 50000; i++) {
        int n = snprintf(key, sizeof key, "key:%d", i);
        void *v = NULL;
        found += tw_cache_get(c, key, (size_t)n, &v) == 0 && v == (void *)(uintptr_t)(i + 1);
    }
    CHECK_EQ_INT(found, 50000);
    for (int i = 0; i < 50000; i++) {
        int n = snprintf(key, sizeof key, "key:%d", i);
        CHECK_EQ_INT(tw_cache_del(c, key, (size_t)n), 0);
    }
    CHECK(sl->chunks == NULL); /* an emptied cache gives its chunks back */
    tw_cache_free(c);
}

/* Fault test of the 2 MB chunks (default allocator: mmap, which a user's
 * allocator cannot fail for us): with the address space capped just above
 * what the process maps, the grow at 256 KB of slab and the grow after a
 * full (already huge) 2 MB chunk both fail; every set then returns
 * TW_ENOMEM and changes nothing, every stored key stays readable, and once
 * the cap is lifted the same keys store. Not under a sanitizer (their
 * runtimes map memory of their own and die when they cannot). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HIT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HIT_SANITIZED 1
#endif
#endif
#ifndef HIT_SANITIZED
#include <sys/resource.h>
#include <unistd.h>

/* Cap the address space at what is mapped now plus 1 MB (a 2 MB chunk's
 * mapping needs 4 MB); false if that cannot be done here. */
static bool cap_address_space(struct rlimit *old)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f)
        return false;
    int got = fscanf(f, "%lu", &pages);
    fclose(f);
    if (got != 1 || getrlimit(RLIMIT_AS, old) != 0)
        return false;
    struct rlimit cap = *old;
    cap.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 20);
    if (old->rlim_cur != RLIM_INFINITY && old->rlim_cur < cap.rlim_cur)
        return false;
    return setrlimit(RLIMIT_AS, &cap) == 0;
}

/* Set keys "f:<i>" from *next on until one fails (at most `most`): each
 * returns 0 or TW_ENOMEM; true when one failed. */
static bool set_until_enomem(struct tw_cache *c, int *next, int most)
{
    char key[16];
    for (int i = 0; i < most; i++, (*next)++) {
        int n = snprintf(key, sizeof key, "f:%d", *next);
        int rc = tw_cache_set(c, key, (size_t)n, (void *)(uintptr_t)(*next + 1));
        if (rc == TW_ENOMEM) {
            void *v;
            CHECK_EQ_INT(tw_cache_get(c, key, (size_t)n, &v), TW_ENOENT);
            return true;
        }
        CHECK_EQ_INT(rc, 0);
    }
    return false;
}

static void test_slab_big_chunk_fails(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 60000;
    cfg.shards = 1;
    cfg.manual_clock = true;
    struct tw_cache *c = NULL;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    if (!c)
        return;
    struct cache_slab *sl = &c->shards[0].slab;
    int next = 0, failed = 0;
    char key[16];
    /* up to 256 KB of slab: the next chunk is a 2 MB mapping */
    while (sl->total < ((size_t)256 << 10) && next < 100000) {
        int n = snprintf(key, sizeof key, "f:%d", next);
        CHECK_EQ_INT(tw_cache_set(c, key, (size_t)n, (void *)(uintptr_t)(next + 1)), 0);
        next++;
    }
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1) /* a 2 MB chunk, full but for a run of 64-byte blocks */
            while (next < 200000 && (sl->chunks->bytes < ((size_t)2 << 20) ||
                                     (size_t)(sl->end - sl->bump) >= 64 * 64)) {
                int n = snprintf(key, sizeof key, "f:%d", next);
                CHECK_EQ_INT(tw_cache_set(c, key, (size_t)n, (void *)(uintptr_t)(next + 1)), 0);
                next++;
            }
        struct rlimit old;
        if (!cap_address_space(&old)) {
            printf("  (skipped: cannot cap the address space)\n");
            break;
        }
        size_t total = sl->total;
        bool hit = set_until_enomem(c, &next, 20000);
        int again = next; /* fails again: no chunk came meanwhile */
        hit = hit && set_until_enomem(c, &again, 1);
        CHECK_EQ_INT(setrlimit(RLIMIT_AS, &old), 0);
        CHECK(hit);
        CHECK_EQ_U64(sl->total, total);
        failed += hit;
        /* the cap is gone: the key that failed stores now */
        int n = snprintf(key, sizeof key, "f:%d", next);
        CHECK_EQ_INT(tw_cache_set(c, key, (size_t)n, (void *)(uintptr_t)(next + 1)), 0);
        next++;
        CHECK(sl->total > total);
    }
    int found = 0;
    for (int i = 0; i < next; i++) {
        int n = snprintf(key, sizeof key, "f:%d", i);
        void *v = NULL;
        found += tw_cache_get(c, key, (size_t)n, &v) == 0 && v == (void *)(uintptr_t)(i + 1);
    }
    CHECK_EQ_INT(found, next);
    CHECK(failed == 0 || failed == 2);
    tw_cache_free(c);
}
#endif

int main(void)
{
    RUN(test_hash_bounds_and_bytes);
    RUN(test_hash_alignment);
    RUN(test_hash_seeded);
    RUN(test_hash_mum_fallback);
    RUN(test_hash_spread);
    RUN(test_siphash_cache);
    RUN(test_hit_count_drain);
    RUN(test_hit_count_threads);
    RUN(test_hit_count_stats_during_drain);
    RUN(test_slab_chunks);
#ifndef HIT_SANITIZED
    RUN(test_slab_big_chunk_fails);
#endif
    return test_summary();
}
