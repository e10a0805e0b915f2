/* SPDX-License-Identifier: MIT */
/* The rules of docs/contracts.md (TTL cache), one test each (single-threaded, manual clock).
 * Each test is written to fail if its rule is broken; the comment above it
 * says which rule. */
#define _POSIX_C_SOURCE 200809L /* alarm */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_util.h"
#include "test.h"
#include "twheel/cache.h"

#define K(s) (s), strlen(s)

static struct counter ctr;

static struct tw_cache *make(int64_t ttl, size_t limit, unsigned shards, double jitter)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = ttl;
    cfg.limit = limit;
    cfg.shards = shards;
    cfg.jitter = jitter;
    cfg.expiry_slack_shift = 0; /* these tests pin the exact reclaim tick */
    cfg.manual_clock = true;
    cfg.free_value = counted_free;
    cfg.value_ctx = &ctr;
    struct tw_cache *c = NULL;
    int rc = tw_cache_new(&c, &cfg);
    CHECK_EQ_INT(rc, 0);
    memset(&ctr, 0, sizeof ctr);
    return c;
}

static struct counted *val(int id)
{
    static struct counted pool[4096];
    static int next;
    struct counted *v = &pool[next++ % 4096];
    v->id = id;
    atomic_store(&v->freed, 0);
    atomic_store(&v->refs, 0);
    return v;
}

static int hit(struct tw_cache *c, const char *k, void *want)
{
    void *got = NULL;
    int rc = tw_cache_get(c, k, strlen(k), &got);
    if (rc == 0 && want && got != want)
        return -100;
    return rc == 0;
}

/* create: bad arguments are a clear error; limit 0 is unbounded. */
static void test_create_arguments(void)
{
    struct tw_cache_config cfg;
    struct tw_cache *c = NULL;
    tw_cache_config_init(&cfg);
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL); /* ttl 0 */
    cfg.default_ttl_ms = -5;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    cfg.default_ttl_ms = 1000;
    CHECK_EQ_INT(tw_cache_new(NULL, &cfg), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_new(&c, NULL), TW_EINVAL);
    cfg.jitter = -0.01;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    cfg.jitter = 1.0;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    cfg.jitter = 0.05;
    unsigned bad_shards[] = {3, 12, 8192}; /* 0 is valid: by the CPUs */
    for (unsigned i = 0; i < 3; i++) {
        cfg.shards = bad_shards[i];
        CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    }
    cfg.shards = 16;
    cfg.copy_values = true;
    cfg.retain_value = counted_retain;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    cfg.copy_values = false;
    cfg.retain_value = NULL;
    cfg.lock = (enum tw_cache_lock)7;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    cfg.lock = TW_CACHE_LOCK_MUTEX;
    CHECK_EQ_PTR(c, NULL);

    c = make(1000, 0, 4, 0);
    for (int i = 0; i < 5000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(tw_cache_set(c, K(k), val(i)), 0);
    }
    struct tw_cache_stats st;
    CHECK_EQ_INT(tw_cache_stats(c, &st), 0);
    CHECK_EQ_U64(st.entries, 5000);
    CHECK_EQ_U64(st.evictions, 0);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 5000);
}

/* Bad arguments on every call. */
static void test_call_arguments(void)
{
    struct tw_cache *c = make(1000, 0, 1, 0);
    void *v;
    size_t n;
    char buf[4];
    CHECK_EQ_INT(tw_cache_set(NULL, K("a"), NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_set(c, NULL, 3, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_set(c, "x", (size_t)UINT32_MAX + 1, NULL), TW_E2BIG);
    CHECK_EQ_INT(tw_cache_get(c, K("a"), NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_get(NULL, K("a"), &v), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_del(c, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_take(c, K("a"), NULL, NULL, &v), TW_EINVAL);
    /* copy calls on a pointer cache */
    CHECK_EQ_INT(tw_cache_set_copy(c, K("a"), "v", 1), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_get_copy(c, K("a"), buf, sizeof buf, &n), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_stats(c, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_stats(NULL, NULL), TW_EINVAL);
    /* the empty key is a key */
    CHECK_EQ_INT(tw_cache_set(c, NULL, 0, val(1)), 0);
    CHECK_EQ_INT(tw_cache_get(c, "", 0, &v), 0);
    CHECK_EQ_INT(tw_cache_del(c, NULL, 0), 0);
    CHECK_EQ_INT(tw_cache_del(c, NULL, 0), TW_ENOENT);
    CHECK_EQ_INT(tw_cache_free(NULL), 0);
    tw_cache_free(c);
    /* advance on a real-clock cache */
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 1000;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 5), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_set_now(c, 5), TW_EINVAL);
    tw_cache_free(c);
}

/* set stores with the default TTL; ttl <= 0 is an error and stores nothing
 * (go-zero stores forever). */
static void test_set_default_ttl_and_bad_ttl(void)
{
    struct tw_cache *c = make(1000, 0, 4, 0);
    struct counted *a = val(1);
    CHECK_EQ_INT(tw_cache_set(c, K("a"), a), 0);
    CHECK_EQ_INT(tw_cache_set_now(c, 999), 0);
    CHECK_EQ_INT(hit(c, "a", a), 1);
    CHECK_EQ_INT(tw_cache_set_now(c, 1000), 0);
    CHECK_EQ_INT(hit(c, "a", a), 0);

    struct counted *b = val(2);
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("b"), b, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("b"), b, -1), TW_EINVAL);
    CHECK_EQ_INT(hit(c, "b", NULL), 0);
    CHECK_EQ_INT(atomic_load(&b->freed), 0); /* still the caller's */
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("b"), b, 50), 0);
    CHECK_EQ_INT(hit(c, "b", b), 1);
    CHECK_EQ_INT(tw_cache_set_now(c, 1050), 0);
    CHECK_EQ_INT(hit(c, "b", b), 0);
    tw_cache_free(c);
}

/* take: a hit does not call the loader; a miss calls it once and stores
 * the result with the default TTL; an error reaches the caller and is not
 * cached; take_ttl stores with its TTL; ttl <= 0 is an error. */
struct loader_state {
    int calls;
    int fail; /* return this if non-zero */
    struct counted *value;
};

static int test_loader(void *ctx, const void *key, size_t klen, void **value, size_t *vlen)
{
    struct loader_state *ls = ctx;
    (void)key;
    (void)klen;
    (void)vlen;
    ls->calls++;
    if (ls->fail)
        return ls->fail;
    *value = ls->value;
    return 0;
}

/* A key is never returned after its expiry even if no timer has run: the
 * clock moves with set_now (no expiry), and the read still misses. Then
 * advance collects it: entries drop, expirations count, value freed once. */
static void test_expired_key_never_returned(void)
{
    struct tw_cache *c = make(100, 0, 2, 0);
    struct counted *a = val(1), *t_old = val(2), *t_new = val(3);
    CHECK_EQ_INT(tw_cache_set(c, K("a"), a), 0);
    CHECK_EQ_INT(tw_cache_set(c, K("t"), t_old), 0);
    CHECK_EQ_INT(tw_cache_set_now(c, 100), 0);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 2); /* not collected yet */
    CHECK_EQ_INT(hit(c, "a", NULL), 0);
    /* take sees the expired key as a miss: the loader runs, its value wins. */
    struct loader_state ls = {0, 0, t_new};
    void *v = NULL;
    CHECK_EQ_INT(tw_cache_take(c, K("t"), test_loader, &ls, &v), 0);
    CHECK_EQ_INT(ls.calls, 1);
    CHECK(v == t_new);
    CHECK_EQ_INT(atomic_load(&t_old->freed), 1); /* replaced: freed once */
    CHECK_EQ_INT(atomic_load(&a->freed), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 100), 1); /* only a: t was stored anew */
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 1);
    CHECK_EQ_U64(st.expirations, 1);
    CHECK_EQ_INT(atomic_load(&a->freed), 1);
    CHECK_EQ_INT(hit(c, "t", t_new), 1);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 3);
}

/* The longest TTL at the latest time the manual clock allows still lies in
 * the future: the deadline saturates, it never wraps round to "now". */
static void test_huge_ttl_late_clock(void)
{
    struct tw_cache *c = make(1000, 0, 1, 0.05);
    uint64_t late = (UINT64_C(1) << 44) - 2;
    CHECK_EQ_INT(tw_cache_set_now(c, late), 0);
    struct counted *a = val(1);
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("a"), a, INT64_MAX), 0);
    CHECK_EQ_INT(tw_cache_advance(c, late + 1), 0);
    CHECK_EQ_INT(hit(c, "a", a), 1);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&a->freed), 1);
}

/* Expiry with slack (cfg.expiry_slack_shift): a key with TTL t is collected
 * at some tick in [t, t + (t >> shift)], never before, never after; reads
 * miss from its expiry on, collected or not. Also the config's bounds. */
static void test_expiry_slack(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    CHECK_EQ_INT(cfg.expiry_slack_shift, TW_CACHE_SLACK_SHIFT_DEFAULT);
    cfg.default_ttl_ms = 1000;
    cfg.manual_clock = true;
    cfg.jitter = 0;
    cfg.free_value = counted_free;
    cfg.value_ctx = &ctr;
    struct tw_cache *c = NULL;
    cfg.expiry_slack_shift = TW_CACHE_SLACK_SHIFT_MAX + 1;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
    cfg.expiry_slack_shift = 3;
    cfg.shards = 4;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    int frees0 = atomic_load(&ctr.frees);
    enum { N = 2000 };
    static uint64_t collected_at[N];
    struct counted *v[N];
    for (int i = 0; i < N; i++) {
        char k[16];
        snprintf(k, sizeof k, "s%d", i);
        v[i] = val(i);
        collected_at[i] = 0;
        CHECK_EQ_INT(tw_cache_set_ttl(c, K(k), v[i], 10 + i * 37), 0);
    }
    int64_t total = 0;
    for (uint64_t t = 1; t <= 10 + (N - 1) * 37 + ((10 + (N - 1) * 37) >> 3) + 1; t++) {
        int64_t n = tw_cache_advance(c, t);
        CHECK(n >= 0);
        total += n;
        for (int i = 0; i < N; i++) {
            if (!collected_at[i] && atomic_load(&v[i]->freed))
                collected_at[i] = t;
        }
        /* reads: the key whose expiry is t misses now, the next one hits */
        if (t >= 10 && (t - 10) % 37 == 0 && (t - 10) / 37 < N) {
            int i = (int)((t - 10) / 37);
            char k[16];
            snprintf(k, sizeof k, "s%d", i);
            void *got;
            CHECK_EQ_INT(tw_cache_get(c, K(k), &got), TW_ENOENT);
            if (i + 1 < N) {
                snprintf(k, sizeof k, "s%d", i + 1);
                CHECK_EQ_INT(tw_cache_get(c, K(k), &got), 0);
            }
        }
    }
    CHECK_EQ_INT(total, N);
    int late = 0;
    for (int i = 0; i < N; i++) {
        uint64_t ttl = 10 + (uint64_t)i * 37;
        CHECK(collected_at[i] >= ttl);
        CHECK(collected_at[i] <= ttl + (ttl >> 3));
        late += collected_at[i] > ttl;
    }
    CHECK(late > N / 2); /* the slack is used: most keys go on a later boundary */
    CHECK_EQ_INT(atomic_load(&ctr.frees) - frees0, N);
    tw_cache_free(c);
}

/* Expiry by the wheel: exactly at the TTL, not a tick before. */
static void test_expiry_exact(void)
{
    struct tw_cache *c = make(1000, 0, 8, 0);
    for (int i = 0; i < 1000; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(tw_cache_set_ttl(c, K(k), val(i), 10 + i), 0);
    }
    for (uint64_t t = 1; t <= 1010; t++) {
        int64_t n = tw_cache_advance(c, t);
        if (t >= 10 && t < 1010) {
            CHECK_EQ_INT(n, 1);
        } else {
            CHECK_EQ_INT(n, 0);
        }
    }
    CHECK_EQ_INT(atomic_load(&ctr.frees), 1000);
    /* a long jump expires everything in one advance */
    for (int i = 0; i < 1000; i++) {
        char k[16];
        snprintf(k, sizeof k, "j%d", i);
        CHECK_EQ_INT(tw_cache_set_ttl(c, K(k), val(i), 1 + i * 1000), 0);
    }
    CHECK_EQ_INT(tw_cache_advance(c, 1010 + 1000000), 1000);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 2000);
}

/* Jitter: each TTL scaled by a factor uniform in [1-j, 1+j]; 0 = off. */
static void jitter_run(double jitter, int64_t ttl, uint64_t *min_out, uint64_t *max_out,
                       int *distinct_out)
{
    struct tw_cache *c = make(ttl, 0, 16, jitter);
    const int n = 2000;
    for (int i = 0; i < n; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(tw_cache_set(c, K(k), val(i)), 0);
    }
    uint64_t mn = UINT64_MAX, mx = 0;
    int distinct = 0, seen = 0, below_mid = 0;
    for (uint64_t t = 1; seen < n && t < (uint64_t)ttl * 3; t++) {
        int64_t e = tw_cache_advance(c, t);
        if (e > 0) {
            distinct++;
            seen += (int)e;
            if (t < mn)
                mn = t;
            mx = t;
            if (t < (uint64_t)ttl)
                below_mid += (int)e;
        }
    }
    CHECK_EQ_INT(seen, n);
    if (jitter > 0) { /* roughly half below the TTL, half above */
        CHECK(below_mid > n / 2 - n / 10 && below_mid < n / 2 + n / 10);
    }
    *min_out = mn;
    *max_out = mx;
    *distinct_out = distinct;
    tw_cache_free(c);
}

static void test_jitter(void)
{
    uint64_t mn, mx;
    int distinct;
    jitter_run(0.05, 10000, &mn, &mx, &distinct);
    CHECK(mn >= 9500 && mx <= 10500);
    CHECK(mn < 9550 && mx > 10450); /* spread over the whole range */
    CHECK(distinct > 500);
    jitter_run(0, 10000, &mn, &mx, &distinct); /* off: all at the TTL */
    CHECK_EQ_U64(mn, 10000);
    CHECK_EQ_U64(mx, 10000);
    jitter_run(0.2, 1000, &mn, &mx, &distinct); /* configurable */
    CHECK(mn >= 800 && mx <= 1200 && mn < 820 && mx > 1180);
    /* the default configuration jitters by 0.05 */
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    CHECK(cfg.jitter == 0.05);
}

/* get: hit returns the value and does not extend the TTL. */
static void test_get_does_not_extend(void)
{
    struct tw_cache *c = make(100, 0, 1, 0);
    struct counted *a = val(1);
    tw_cache_set(c, K("a"), a);
    for (uint64_t t = 10; t < 100; t += 10) {
        tw_cache_advance(c, t);
        CHECK_EQ_INT(hit(c, "a", a), 1);
    }
    CHECK_EQ_INT(tw_cache_advance(c, 100), 1);
    CHECK_EQ_INT(hit(c, "a", NULL), 0);
    tw_cache_free(c);
}

/* set of an existing key: the old value is freed once (not when the same
 * pointer is set again), the TTL restarts, later or earlier. */
static void test_overwrite(void)
{
    struct tw_cache *c = make(100, 0, 4, 0);
    struct counted *a = val(1), *b = val(2);
    tw_cache_set(c, K("k"), a);
    tw_cache_advance(c, 80);
    CHECK_EQ_INT(tw_cache_set(c, K("k"), b), 0);
    CHECK_EQ_INT(atomic_load(&a->freed), 1);
    CHECK_EQ_INT(tw_cache_set(c, K("k"), b), 0); /* same pointer: kept */
    CHECK_EQ_INT(atomic_load(&b->freed), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 150), 0);
    CHECK_EQ_INT(hit(c, "k", b), 1);
    CHECK_EQ_INT(tw_cache_advance(c, 180), 1); /* 80 + 100 */
    CHECK_EQ_INT(atomic_load(&b->freed), 1);
    /* re-set with a shorter TTL moves the expiry earlier */
    struct counted *d = val(3);
    tw_cache_set_ttl(c, K("e"), d, 100000);
    tw_cache_set_ttl(c, K("e"), d, 5);
    CHECK_EQ_INT(tw_cache_advance(c, 184), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 185), 1);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 0);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 3);
    CHECK_EQ_INT(atomic_load(&ctr.double_frees), 0);
}

/* del: removed, its timer removed, its value freed once. */
static void test_del(void)
{
    struct tw_cache *c = make(100, 0, 4, 0);
    struct counted *a = val(1);
    tw_cache_set(c, K("a"), a);
    CHECK_EQ_INT(tw_cache_del(c, K("a")), 0);
    CHECK_EQ_INT(atomic_load(&a->freed), 1);
    CHECK_EQ_INT(hit(c, "a", NULL), 0);
    CHECK_EQ_INT(tw_cache_del(c, K("a")), TW_ENOENT);
    CHECK_EQ_INT(tw_cache_advance(c, 1000), 0); /* no timer left */
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 0);
    CHECK_EQ_U64(st.expirations, 0);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 1);
}

/* LRU: with limit > 0, a set that would exceed it evicts the least recently
 * used key (sets and hits count as uses); its value is freed, its timer
 * removed. Exact with one shard and across shards. */
static void lru_run(unsigned shards)
{
    struct tw_cache *c = make(1000, 3, shards, 0);
    struct counted *a = val(1), *b = val(2), *cc = val(3), *d = val(4), *e = val(5);
    tw_cache_set(c, K("a"), a);
    tw_cache_set(c, K("b"), b);
    tw_cache_set(c, K("c"), cc);
    CHECK_EQ_INT(hit(c, "a", a), 1); /* order now (old -> new): b c a */
    CHECK_EQ_INT(tw_cache_set(c, K("d"), d), 0);
    CHECK_EQ_INT(hit(c, "b", NULL), 0);
    CHECK_EQ_INT(atomic_load(&b->freed), 1);
    CHECK_EQ_INT(tw_cache_set(c, K("c"), cc), 0); /* re-set is a use: a d c */
    CHECK_EQ_INT(tw_cache_set(c, K("e"), e), 0);
    CHECK_EQ_INT(hit(c, "a", NULL), 0);
    CHECK_EQ_INT(atomic_load(&a->freed), 1);
    CHECK_EQ_INT(hit(c, "c", cc), 1);
    CHECK_EQ_INT(hit(c, "d", d), 1);
    CHECK_EQ_INT(hit(c, "e", e), 1);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 3);
    CHECK_EQ_U64(st.evictions, 2);
    /* evicted keys' timers are gone: only c, d, e expire */
    CHECK_EQ_INT(tw_cache_advance(c, 1000), 3);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 5);
    CHECK_EQ_INT(atomic_load(&ctr.double_frees), 0);
}

static void test_lru(void)
{
    lru_run(1);
    lru_run(16);
    /* a longer sequence: the oldest of many shards goes first */
    struct tw_cache *c = make(1000, 100, 16, 0);
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        tw_cache_set(c, K(k), val(i));
    }
    for (int i = 0; i < 100; i += 2) { /* touch the even keys */
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(hit(c, k, NULL), 1);
    }
    for (int i = 0; i < 50; i++) { /* 50 new keys evict the 50 odd ones */
        char k[16];
        snprintf(k, sizeof k, "n%d", i);
        tw_cache_set(c, K(k), val(1000 + i));
    }
    for (int i = 0; i < 100; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%d", i);
        CHECK_EQ_INT(hit(c, k, NULL), i % 2 == 0);
    }
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 150);
}

static void test_take(void)
{
    struct tw_cache *c = make(100, 0, 4, 0);
    struct loader_state ls = {0, 0, val(1)};
    void *v = NULL;
    CHECK_EQ_INT(tw_cache_take(c, K("a"), test_loader, &ls, &v), 0);
    CHECK_EQ_PTR(v, ls.value);
    CHECK_EQ_INT(ls.calls, 1);
    CHECK_EQ_INT(tw_cache_take(c, K("a"), test_loader, &ls, &v), 0); /* hit */
    CHECK_EQ_INT(ls.calls, 1);
    CHECK_EQ_INT(hit(c, "a", ls.value), 1);
    CHECK_EQ_INT(tw_cache_advance(c, 99), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 100), 1); /* stored with the default TTL */

    struct loader_state bad = {0, -42, NULL};
    CHECK_EQ_INT(tw_cache_take(c, K("b"), test_loader, &bad, &v), -42);
    CHECK_EQ_INT(tw_cache_take(c, K("b"), test_loader, &bad, &v), -42);
    CHECK_EQ_INT(bad.calls, 2); /* not cached */
    CHECK_EQ_INT(hit(c, "b", NULL), 0);

    struct loader_state t = {0, 0, val(2)};
    CHECK_EQ_INT(tw_cache_take_ttl(c, K("t"), test_loader, &t, &v, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_take_ttl(c, K("t"), test_loader, &t, &v, -3), TW_EINVAL);
    CHECK_EQ_INT(t.calls, 0);
    CHECK_EQ_INT(tw_cache_take_ttl(c, K("t"), test_loader, &t, &v, 7), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 106), 0);
    CHECK_EQ_INT(tw_cache_advance(c, 107), 1);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.hits, 2); /* take hit + get */
    CHECK_EQ_U64(st.misses, 5); /* a, b, b, get b, t */
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 2);
}

/* stats: hits, misses, hit ratio, entries, evictions, expirations. */
static void test_stats(void)
{
    struct tw_cache *c = make(100, 2, 4, 0);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK(st.hit_ratio == 0.0);
    tw_cache_set(c, K("a"), val(1));
    tw_cache_set(c, K("b"), val(2));
    tw_cache_set(c, K("c"), val(3)); /* evicts a */
    hit(c, "b", NULL);
    hit(c, "c", NULL);
    hit(c, "c", NULL);
    hit(c, "a", NULL);
    tw_cache_advance(c, 100);
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.hits, 3);
    CHECK_EQ_U64(st.misses, 1);
    CHECK(st.hit_ratio == 0.75);
    CHECK_EQ_U64(st.entries, 0);
    CHECK_EQ_U64(st.evictions, 1);
    CHECK_EQ_U64(st.expirations, 2);
    tw_cache_free(c);
}

/* The statistics line, once per interval (a minute by default). */
struct log_sink {
    int lines;
    char last[256];
};

static void sink(void *ctx, const char *line)
{
    struct log_sink *s = ctx;
    s->lines++;
    snprintf(s->last, sizeof s->last, "%s", line);
}

static void test_log_line(void)
{
    struct log_sink ls = {0, ""};
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    CHECK_EQ_U64(cfg.log_interval_ms, 60000);
    cfg.default_ttl_ms = 1000000;
    cfg.manual_clock = true;
    cfg.name = "users";
    cfg.log = sink;
    cfg.log_ctx = &ls;
    struct tw_cache *c;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    tw_cache_set(c, K("a"), NULL);
    hit(c, "a", NULL);
    hit(c, "x", NULL);
    tw_cache_advance(c, 59999);
    CHECK_EQ_INT(ls.lines, 0);
    tw_cache_advance(c, 60000);
    CHECK_EQ_INT(ls.lines, 1);
    CHECK(strstr(ls.last, "cache(users)") != NULL);
    CHECK(strstr(ls.last, "hit_ratio: 50.0%") != NULL);
    CHECK(strstr(ls.last, "elements now: 1") != NULL);
    tw_cache_advance(c, 119999);
    CHECK_EQ_INT(ls.lines, 1);
    tw_cache_advance(c, 120000);
    CHECK_EQ_INT(ls.lines, 2);
    CHECK(strstr(ls.last, "qpm: 0") != NULL); /* counts per interval */
    tw_cache_free(c);
    cfg.log_interval_ms = 0;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), TW_EINVAL);
}

/* Batched calls answer as the single calls would, key by key, including
 * bad keys in the middle of a batch, duplicates and expired keys. */
static void batches_in(unsigned shards)
{
    struct tw_cache *c = make(100, 0, shards, 0);
    enum { N = 40 };
    static struct counted vals[N + 1];
    memset(vals, 0, sizeof vals);
    char names[N][8];
    const void *keys[N];
    size_t kls[N];
    void *vs[N];
    int rcs[N];
    for (int i = 0; i < N; i++) {
        kls[i] = (size_t)snprintf(names[i], sizeof names[i], "b%d", i);
        keys[i] = names[i];
        vs[i] = &vals[i];
    }
    keys[7] = NULL; /* NULL with klen > 0: TW_EINVAL for this key only */
    keys[9] = keys[8]; /* a duplicate: the later value wins, the earlier is freed */
    kls[9] = kls[8];
    CHECK_EQ_INT(tw_cache_set_many(c, N, keys, kls, vs, rcs), N - 1);
    CHECK_EQ_INT(rcs[7], TW_EINVAL);
    CHECK_EQ_INT(atomic_load(&vals[8].freed), 1);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 1);
    void *got[N];
    CHECK_EQ_INT(tw_cache_get_many(c, N, keys, kls, got, rcs), N - 1);
    for (int i = 0; i < N; i++) {
        if (i == 7) {
            CHECK_EQ_INT(rcs[i], TW_EINVAL);
            CHECK_EQ_PTR(got[i], NULL);
            continue;
        }
        CHECK_EQ_INT(rcs[i], 0);
        CHECK_EQ_PTR(got[i], i == 8 ? (void *)&vals[9] : (void *)&vals[i]);
        void *one;
        CHECK_EQ_INT(tw_cache_get(c, keys[i], kls[i], &one), 0);
        CHECK_EQ_PTR(one, got[i]);
    }
    /* time passes: every key expired, reads miss (results may be NULL) */
    tw_cache_set_now(c, 100);
    CHECK_EQ_INT(tw_cache_get_many(c, N, keys, kls, got, NULL), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ_PTR(got[i], NULL);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.hits, 2 * (N - 1));
    CHECK_EQ_U64(st.misses, N - 1);
    CHECK_EQ_INT(tw_cache_get_many(c, 0, NULL, NULL, NULL, NULL), 0);
    CHECK_EQ_INT(tw_cache_get_many(NULL, 1, keys, kls, got, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_get_many(c, 1, NULL, kls, got, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_set_many(c, 1, keys, kls, NULL, NULL), TW_EINVAL);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), N - 1);
    CHECK_EQ_INT(atomic_load(&ctr.double_frees), 0);
}

/* set_many with jitter: every key's TTL within [ttl (1 - j), ttl (1 + j)]
 * (rounded up to a whole tick), as for single sets. */
static void batch_jitter(unsigned shards)
{
    struct tw_cache *c = make(1000, 0, shards, 0.5);
    enum { N = 200 };
    static struct counted vals[N];
    memset(vals, 0, sizeof vals);
    char names[N][8];
    const void *keys[N];
    size_t kls[N];
    void *vs[N];
    for (int i = 0; i < N; i++) {
        kls[i] = (size_t)snprintf(names[i], sizeof names[i], "j%d", i);
        keys[i] = names[i];
        vs[i] = &vals[i];
    }
    CHECK_EQ_INT(tw_cache_set_many(c, N, keys, kls, vs, NULL), N);
    tw_cache_advance(c, 499);
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, N);
    tw_cache_advance(c, 1200);
    tw_cache_stats(c, &st);
    CHECK(st.entries > 0 && st.entries < N); /* spread, not all at one tick */
    tw_cache_advance(c, 1500);
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 0);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), N);
}

/* 4 shards: grouped by a counting sort; 512: by an insertion sort. */
static void test_batches(void)
{
    batches_in(4);
    batches_in(512);
    batch_jitter(4);
    batch_jitter(512);
}

/* Values: retain_value is called for every pointer handed out. */
static void test_retain(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 100;
    cfg.manual_clock = true;
    cfg.free_value = counted_free;
    cfg.retain_value = counted_retain;
    cfg.value_ctx = &ctr;
    memset(&ctr, 0, sizeof ctr);
    struct tw_cache *c;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    struct counted *a = val(1);
    tw_cache_set(c, K("a"), a);
    void *v;
    tw_cache_get(c, K("a"), &v);
    tw_cache_get(c, K("a"), &v);
    struct loader_state ls = {0, 0, val(2)};
    tw_cache_take(c, K("b"), test_loader, &ls, &v);
    CHECK_EQ_INT(atomic_load(&a->refs), 2);
    CHECK_EQ_INT(atomic_load(&ls.value->refs), 1);
    tw_cache_get(c, K("zz"), &v); /* miss: nothing retained */
    CHECK_EQ_INT(atomic_load(&ctr.retains), 3);
    tw_cache_free(c);
    CHECK_EQ_INT(atomic_load(&ctr.frees), 2);
}

/* Copy mode: bytes copied in and out; the cache owns its copies; loader
 * buffers are handed to free_value after the copy. */
static int copy_frees;
static void copy_free(void *ctx, void *p)
{
    (void)ctx;
    copy_frees++;
    free(p);
}

static int copy_loader(void *ctx, const void *key, size_t klen, void **value, size_t *vlen)
{
    (void)ctx;
    char *p = malloc(klen + 2);
    memcpy(p, "L:", 2);
    memcpy(p + 2, key, klen);
    *value = p;
    *vlen = klen + 2;
    return 0;
}

static void test_copy_mode(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 100;
    cfg.manual_clock = true;
    cfg.copy_values = true;
    cfg.jitter = 0;
    cfg.free_value = copy_free;
    cfg.limit = 2;
    cfg.expiry_slack_shift = 0; /* pins the exact reclaim tick below */
    struct tw_cache *c;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    char buf[64];
    size_t n = 0;
    char value[32] = "hello";
    CHECK_EQ_INT(tw_cache_set_copy(c, K("a"), value, 5), 0);
    memcpy(value, "XXXXX", 5); /* the cache kept its own copy */
    CHECK_EQ_INT(tw_cache_get_copy(c, K("a"), buf, sizeof buf, &n), 0);
    CHECK_EQ_U64(n, 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_EQ_INT(tw_cache_get_copy(c, K("a"), buf, 2, &n), 0); /* truncated */
    CHECK_EQ_U64(n, 5);
    CHECK_EQ_INT(tw_cache_set_copy(c, K("a"), "a much longer value", 19), 0);
    CHECK_EQ_INT(tw_cache_get_copy(c, K("a"), buf, sizeof buf, &n), 0);
    CHECK_EQ_U64(n, 19);
    CHECK(memcmp(buf, "a much longer value", 19) == 0);
    CHECK_EQ_INT(tw_cache_set_copy(c, K("a"), "short", 5), 0);
    CHECK_EQ_INT(tw_cache_set_copy(c, K("e"), NULL, 0), 0);
    CHECK_EQ_INT(tw_cache_get_copy(c, K("e"), NULL, 0, &n), 0);
    CHECK_EQ_U64(n, 0);
    CHECK_EQ_INT(tw_cache_take_copy(c, K("k1"), copy_loader, NULL, buf, sizeof buf, &n), 0);
    CHECK_EQ_U64(n, 4);
    CHECK(memcmp(buf, "L:k1", 4) == 0);
    CHECK_EQ_INT(copy_frees, 1);
    CHECK_EQ_INT(tw_cache_get_copy(c, K("k1"), buf, sizeof buf, &n), 0);
    CHECK_EQ_INT(tw_cache_get_copy(c, K("a"), buf, sizeof buf, &n), TW_ENOENT); /* evicted */
    void *v;
    CHECK_EQ_INT(tw_cache_set(c, K("p"), NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_get(c, K("k1"), &v), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_take(c, K("k1"), test_loader, NULL, &v), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_set_copy_ttl(c, K("t"), "x", 1, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_cache_advance(c, 100), 2);
    tw_cache_free(c);
    CHECK_EQ_INT(copy_frees, 1);
}

/* set_many without a limit (a chunk grouped by shard) under allocation
 * failures: for each k, the k-th allocation and all later ones fail. Each
 * key's result is 0 or TW_ENOMEM, the count returned is that of the zeros,
 * a failed key's value is still the caller's, every key holds the value of
 * its last stored set in batch order (repeats included), displaced values
 * are freed once, and nothing leaks. Long keys (past the slab) allocate an
 * entry each; 2 shards sort by counting, 512 by insertion. */
/* A manual-clock cache (100 ms TTL, values freed through counted_free, the
 * counters reset) whose allocations go through al; limit 0: none. */
static int counted_cache_new(struct tw_cache **c, struct tw_allocator *al, unsigned shards,
                             size_t limit)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 100;
    cfg.manual_clock = true;
    cfg.shards = shards;
    if (limit)
        cfg.limit = limit;
    cfg.free_value = counted_free;
    cfg.value_ctx = &ctr;
    cfg.allocator = al;
    memset(&ctr, 0, sizeof ctr);
    return tw_cache_new(c, &cfg);
}

static void set_many_enomem_in(unsigned shards)
{
    enum { N = 150, KEYS = 70 };
    int completed = 0, mixed = 0; /* mixed: batches with stored and failed keys */
    /* start just before the allocations of tw_cache_new end (512 shards
     * take over 1,000): the batch's failures are what is tested here */
    long base = 0;
    {
        struct failing_alloc fa = {-1, 0, 0, 0};
        struct tw_allocator al = {failing_alloc_fn, &fa};
        struct tw_cache_config cfg;
        tw_cache_config_init(&cfg);
        cfg.default_ttl_ms = 100;
        cfg.manual_clock = true;
        cfg.shards = shards;
        cfg.allocator = &al;
        struct tw_cache *c = NULL;
        CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
        base = fa.allocs > 2 ? fa.allocs - 2 : 0;
        tw_cache_free(c);
    }
    for (long k = base; k < base + 400 && !completed; k++) {
        struct failing_alloc fa = {k, 0, 0, 0};
        struct tw_allocator al = {failing_alloc_fn, &fa};
        struct tw_cache *c = NULL;
        int rc = counted_cache_new(&c, &al, shards, 0);
        if (rc) {
            CHECK_EQ_INT(rc, TW_ENOMEM);
            CHECK_EQ_INT(fa.live_blocks, 0);
            continue;
        }
        static struct counted vals[N];
        static char names[N][700];
        const void *keys[N];
        size_t kls[N];
        void *vs[N];
        int rcs[N], last[KEYS];
        for (int i = 0; i < KEYS; i++)
            last[i] = -1;
        for (int i = 0; i < N; i++) {
            int id = (i * 7) % KEYS; /* every key twice or more, spread out */
            /* keys 0-9 are 600 bytes long: entries from the allocator */
            memset(names[i], 'x', 600);
            int n = snprintf(names[i], 16, "sm-%d", id);
            names[i][n] = id < 10 ? 'x' : '\0';
            names[i][600] = '\0';
            atomic_store(&vals[i].freed, 0);
            vals[i].id = id;
            keys[i] = names[i];
            kls[i] = strlen(names[i]);
            vs[i] = &vals[i];
            rcs[i] = 1;
        }
        int got = tw_cache_set_many(c, N, keys, kls, vs, rcs);
        int ok = 0, enomem = 0;
        for (int i = 0; i < N; i++) {
            if (rcs[i] == 0) {
                ok++;
                last[vals[i].id] = i;
            } else {
                CHECK_EQ_INT(rcs[i], TW_ENOMEM);
                CHECK_EQ_INT(atomic_load(&vals[i].freed), 0);
                enomem++;
            }
        }
        CHECK_EQ_INT(got, ok);
        size_t distinct = 0;
        for (int i = 0; i < N; i++) {
            int id = vals[i].id;
            bool held = rcs[i] == 0 && last[id] == i;
            CHECK_EQ_INT(atomic_load(&vals[i].freed), rcs[i] == 0 && !held ? 1 : 0);
            distinct += held;
            void *v = NULL;
            rc = tw_cache_get(c, keys[i], kls[i], &v);
            if (last[id] < 0) {
                CHECK_EQ_INT(rc, TW_ENOENT);
            } else {
                CHECK_EQ_INT(rc, 0);
                CHECK_EQ_PTR(v, &vals[last[id]]);
            }
        }
        struct tw_cache_stats st;
        tw_cache_stats(c, &st);
        CHECK_EQ_U64(st.entries, distinct);
        tw_cache_advance(c, 1000);
        tw_cache_free(c);
        CHECK_EQ_INT(fa.live_blocks, 0);
        CHECK_EQ_U64(fa.live_bytes, 0);
        CHECK_EQ_INT(atomic_load(&ctr.double_frees), 0);
        CHECK_EQ_INT(atomic_load(&ctr.frees), ok);
        mixed += ok && enomem;
        if (enomem == 0 && fa.countdown > 0)
            completed = 1; /* the failure point is past the scenario */
    }
    CHECK(completed);
    CHECK(mixed > 2);
}

static void test_set_many_allocation_failures(void)
{
    set_many_enomem_in(2);
    set_many_enomem_in(512);
}

/* Every allocation failure is handled: for each k, fail the k-th allocation
 * of a fixed scenario; every call either succeeds or returns TW_ENOMEM with
 * nothing changed, values are freed exactly once, and nothing leaks. */
static int enomem_loader(void *ctx, const void *key, size_t klen, void **value, size_t *vlen)
{
    (void)key;
    (void)klen;
    (void)vlen;
    *value = ctx;
    return 0;
}

static void test_allocation_failures(void)
{
    int completed = 0;
    for (long k = 0; k < 400 && !completed; k++) {
        struct failing_alloc fa = {k, 0, 0, 0};
        struct tw_allocator al = {failing_alloc_fn, &fa};
        struct tw_cache *c = NULL;
        int rc = counted_cache_new(&c, &al, 2, 40);
        if (rc) {
            CHECK_EQ_INT(rc, TW_ENOMEM);
            CHECK_EQ_INT(fa.live_blocks, 0);
            continue;
        }
        static struct counted vals[200];
        int stored = 0, enomem = 0;
        for (int i = 0; i < 100; i++) {
            char key[16];
            snprintf(key, sizeof key, "key-%d", i % 60);
            atomic_store(&vals[i].freed, 0);
            rc = tw_cache_set(c, K(key), &vals[i]);
            if (rc == 0) {
                stored++;
            } else {
                CHECK_EQ_INT(rc, TW_ENOMEM);
                CHECK_EQ_INT(atomic_load(&vals[i].freed), 0);
                enomem++;
            }
        }
        for (int i = 100; i < 130; i++) {
            char key[16];
            snprintf(key, sizeof key, "take-%d", i);
            atomic_store(&vals[i].freed, 0);
            void *v = NULL;
            rc = tw_cache_take(c, K(key), enomem_loader, &vals[i], &v);
            if (rc == 0) {
                stored++;
                CHECK_EQ_PTR(v, &vals[i]);
            } else {
                CHECK_EQ_INT(rc, TW_ENOMEM); /* freed by the cache */
                CHECK_EQ_INT(atomic_load(&vals[i].freed), 1);
                stored++;
                enomem++;
            }
        }
        for (int i = 0; i < 60; i += 3) {
            char key[16];
            snprintf(key, sizeof key, "key-%d", i);
            tw_cache_del(c, K(key));
        }
        tw_cache_advance(c, 1000);
        tw_cache_free(c);
        CHECK_EQ_INT(fa.live_blocks, 0);
        CHECK_EQ_U64(fa.live_bytes, 0);
        CHECK_EQ_INT(atomic_load(&ctr.double_frees), 0);
        CHECK_EQ_INT(atomic_load(&ctr.frees), stored);
        if (enomem == 0 && fa.countdown > 0)
            completed = 1; /* the failure point is past the scenario */
    }
    CHECK(completed);
}

/* Entry memory (src/cache/slab.c): a shard grows from 1 KB chunks to 2 MB
 * ones; the allocator refusing the first 2 MB chunk fails that one set
 * cleanly (TW_ENOMEM, nothing stored) and the next set retries; every key
 * stored is found; when the cache empties every chunk goes back; and the
 * default allocator (2 MB mappings that become huge pages) holds the same. */
struct big_fail {
    struct failing_alloc fa;
    int refused; /* big requests refused so far */
};

static void *big_fail_fn(void *ctx, void *ptr, size_t old_size, size_t new_size)
{
    struct big_fail *b = ctx;
    if (new_size >= ((size_t)2 << 20) && b->refused == 0) {
        b->refused++;
        return NULL;
    }
    return failing_alloc_fn(&b->fa, ptr, old_size, new_size);
}

static void test_slab_big(void)
{
    enum { N = 40000 }; /* 40,000 entries of 80 bytes: 3 MB in one shard */
    static signed char in[N];
    /* mode 0: one shard, the first 2 MB chunk refused; 1: the default
     * allocator; 2: four shards (every one gives its chunks back). */
    for (int mode = 0; mode < 3; mode++) {
        struct big_fail bf = {{-1, 0, 0, 0}, mode == 2};
        struct tw_allocator al = {big_fail_fn, &bf};
        struct tw_cache_config cfg;
        tw_cache_config_init(&cfg);
        cfg.default_ttl_ms = 1000000;
        cfg.manual_clock = true;
        cfg.shards = mode == 2 ? 4 : 1;
        cfg.allocator = mode == 1 ? NULL : &al;
        struct tw_cache *c = NULL;
        CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
        size_t base = bf.fa.live_bytes;
        for (int round = 0; round < 2; round++) {
            int enomem = 0;
            for (int i = 0; i < N; i++) {
                char key[24];
                snprintf(key, sizeof key, "slab-key-%06d", i);
                int rc = tw_cache_set(c, K(key), (void *)(uintptr_t)(i + 1));
                in[i] = rc == 0;
                if (rc) {
                    CHECK_EQ_INT(rc, TW_ENOMEM);
                    enomem++;
                }
            }
            CHECK_EQ_INT(enomem, mode == 0 && round == 0 ? 1 : 0);
            for (int i = 0; i < N; i++) {
                char key[24];
                snprintf(key, sizeof key, "slab-key-%06d", i);
                void *v = NULL;
                int rc = tw_cache_get(c, K(key), &v);
                CHECK_EQ_INT(rc, in[i] ? 0 : TW_ENOENT);
                if (in[i])
                    CHECK_EQ_PTR(v, (void *)(uintptr_t)(i + 1));
            }
            if (mode != 1)
                CHECK(bf.fa.live_bytes > base + ((size_t)2 << 20));
            for (int i = 0; i < N; i++) {
                char key[24];
                snprintf(key, sizeof key, "slab-key-%06d", i);
                CHECK_EQ_INT(tw_cache_del(c, K(key)), in[i] ? 0 : TW_ENOENT);
            }
            if (mode != 1)
                CHECK_EQ_U64(bf.fa.live_bytes, base); /* every chunk given back */
        }
        for (int i = 0; i < 1000; i++) { /* and a few left for free to find */
            char key[24];
            snprintf(key, sizeof key, "slab-key-%06d", i);
            CHECK_EQ_INT(tw_cache_set(c, K(key), NULL), 0);
        }
        tw_cache_free(c);
        CHECK_EQ_INT(bf.fa.live_blocks, 0);
    }
}

/* Destroy frees every value exactly once, whatever state entries are in. */
static void test_destroy_frees_all(void)
{
    struct tw_cache *c = make(100, 500, 8, 0.05);
    static struct counted vals[2000];
    for (int i = 0; i < 2000; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i % 700);
        CHECK_EQ_INT(tw_cache_set_ttl(c, K(key), &vals[i], 1 + i % 200), 0);
        if (i % 5 == 0)
            tw_cache_advance(c, (uint64_t)i / 20);
        if (i % 7 == 0)
            tw_cache_del(c, K(key));
    }
    tw_cache_free(c);
    for (int i = 0; i < 2000; i++)
        CHECK_EQ_INT(atomic_load(&vals[i].freed), 1);
    CHECK_EQ_INT(atomic_load(&ctr.double_frees), 0);
}

/* The rwlock flavour behaves the same (reads share the lock when there is
 * no limit, and take it exclusively with one). */
static void test_rwlock_flavour(void)
{
    for (int limit = 0; limit <= 2; limit += 2) {
        struct tw_cache_config cfg;
        tw_cache_config_init(&cfg);
        cfg.default_ttl_ms = 100;
        cfg.manual_clock = true;
        cfg.jitter = 0;
        cfg.lock = TW_CACHE_LOCK_RWLOCK;
        cfg.limit = (size_t)limit;
        cfg.expiry_slack_shift = 0; /* pins the exact reclaim tick below */
        struct tw_cache *c;
        CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
        tw_cache_set(c, K("a"), &cfg);
        tw_cache_set(c, K("b"), &cfg);
        CHECK_EQ_INT(hit(c, "a", &cfg), 1);
        tw_cache_set(c, K("c"), &cfg);
        CHECK_EQ_INT(hit(c, "b", NULL), limit ? 0 : 1);
        CHECK_EQ_INT(tw_cache_advance(c, 100), limit ? 2 : 3);
        tw_cache_free(c);
    }
}

/* free_value may call the cache (the header promises it runs outside any
 * cache lock): here evicting a key re-inserts a key, which evicts in turn. */
struct reenter {
    struct tw_cache *cache;
    int frees;
    int depth;
    int closing; /* tw_cache_free has begun: no more calls */
};

static void reenter_free(void *ctx, void *value)
{
    struct reenter *re = ctx;
    (void)value;
    re->frees++;
    if (re->closing || re->depth >= 3)
        return;
    re->depth++;
    CHECK_EQ_INT(tw_cache_set(re->cache, "again", 5, (void *)(uintptr_t)re->frees), 0);
    re->depth--;
}

static void test_free_value_may_call_the_cache(void)
{
    struct reenter re = {0};
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 1000;
    cfg.limit = 2;
    cfg.shards = 1;
    cfg.manual_clock = true;
    cfg.free_value = reenter_free;
    cfg.value_ctx = &re;
    CHECK_EQ_INT(tw_cache_new(&re.cache, &cfg), 0);
    CHECK_EQ_INT(tw_cache_set(re.cache, "a", 1, (void *)1), 0);
    CHECK_EQ_INT(tw_cache_set(re.cache, "b", 1, (void *)2), 0);
    CHECK_EQ_INT(tw_cache_set(re.cache, "c", 1, (void *)3), 0); /* evicts a */
    CHECK(re.frees >= 1);
    struct tw_cache_stats st;
    tw_cache_stats(re.cache, &st);
    CHECK(st.entries <= 2);
    re.closing = 1;
    tw_cache_free(re.cache);
}

/* Key lengths around the entry layout's edges (cache/internal.h): up to 10
 * bytes an entry is one 64-byte block; from 0xFFFF bytes on, the length is
 * stored in front of the key. Keys that share a prefix and differ only in
 * length or in their last byte stay distinct; copy-mode values come back
 * intact after a key of any length; every key goes at expiry. */
static void test_key_lengths(void)
{
    static const size_t lens[] = {0, 1, 9, 10, 11, 24, 65534, 65535, 65536, 70001};
    const size_t nl = sizeof lens / sizeof lens[0];
    unsigned char *kb = malloc(70002);
    CHECK(kb != NULL);
    if (!kb)
        return;
    for (size_t i = 0; i < 70002; i++)
        kb[i] = (unsigned char)('a' + i % 26);
    for (int copy = 0; copy <= 1; copy++) {
        for (int limit = 0; limit <= 1; limit++) {
            struct tw_cache_config cfg;
            tw_cache_config_init(&cfg);
            cfg.default_ttl_ms = 100;
            cfg.manual_clock = true;
            cfg.jitter = 0;
            cfg.expiry_slack_shift = 0;
            cfg.copy_values = copy;
            cfg.limit = limit ? 1000 : 0;
            cfg.shards = 2;
            struct tw_cache *c;
            CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
            for (size_t i = 0; i < nl; i++) {
                size_t v = i + 1;
                if (copy)
                    CHECK_EQ_INT(tw_cache_set_copy(c, kb, lens[i], &v, sizeof v), 0);
                else
                    CHECK_EQ_INT(tw_cache_set(c, kb, lens[i], (void *)(uintptr_t)v), 0);
            }
            for (size_t i = 0; i < nl; i++) {
                size_t got = 0, n = 0;
                void *p = NULL;
                if (copy) {
                    CHECK_EQ_INT(tw_cache_get_copy(c, kb, lens[i], &got, sizeof got, &n), 0);
                    CHECK_EQ_U64(n, sizeof got);
                } else {
                    CHECK_EQ_INT(tw_cache_get(c, kb, lens[i], &p), 0);
                    got = (size_t)(uintptr_t)p;
                }
                CHECK_EQ_U64(got, i + 1);
            }
            /* Same length, last byte changed: a miss. */
            for (size_t i = 1; i < nl; i++) {
                kb[lens[i] - 1] ^= 0x40;
                size_t got, n;
                void *p;
                if (copy)
                    CHECK_EQ_INT(tw_cache_get_copy(c, kb, lens[i], &got, sizeof got, &n),
                                 TW_ENOENT);
                else
                    CHECK_EQ_INT(tw_cache_get(c, kb, lens[i], &p), TW_ENOENT);
                kb[lens[i] - 1] ^= 0x40;
            }
            CHECK_EQ_INT(tw_cache_del(c, kb, lens[8]), 0);
            CHECK_EQ_INT(tw_cache_del(c, kb, lens[8]), TW_ENOENT);
            CHECK_EQ_INT(tw_cache_advance(c, 100), (int64_t)nl - 1);
            struct tw_cache_stats st;
            tw_cache_stats(c, &st);
            CHECK_EQ_U64(st.entries, 0);
            tw_cache_free(c);
        }
    }
    free(kb);
}

int main(void)
{
    alarm(120); /* a deadlock fails the test instead of hanging CI */
    RUN(test_create_arguments);
    RUN(test_call_arguments);
    RUN(test_set_default_ttl_and_bad_ttl);
    RUN(test_expired_key_never_returned);
    RUN(test_huge_ttl_late_clock);
    RUN(test_expiry_exact);
    RUN(test_expiry_slack);
    RUN(test_jitter);
    RUN(test_get_does_not_extend);
    RUN(test_overwrite);
    RUN(test_del);
    RUN(test_lru);
    RUN(test_take);
    RUN(test_stats);
    RUN(test_log_line);
    RUN(test_retain);
    RUN(test_batches);
    RUN(test_copy_mode);
    RUN(test_key_lengths);
    RUN(test_allocation_failures);
    RUN(test_set_many_allocation_failures);
    RUN(test_slab_big);
    RUN(test_destroy_frees_all);
    RUN(test_rwlock_flavour);
    RUN(test_free_value_may_call_the_cache);
    return test_summary();
}
