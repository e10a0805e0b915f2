/* SPDX-License-Identifier: MIT */
/* The cache's statistics line (every count per interval, qpm a true rate
 * per minute, elements the one figure of now) and the TTL cap
 * (TW_CACHE_TTL_MAX_MS), on the manual clock. */
#include <stdlib.h>

#include "test.h"
#include "twheel.h"

#define K(s) (s), strlen(s)

struct sink {
    int lines;
    char last[512];
};

static void on_line(void *ctx, const char *line)
{
    struct sink *s = ctx;
    s->lines++;
    snprintf(s->last, sizeof s->last, "%s", line);
}

static void get(struct tw_cache *c, const char *k)
{
    void *v;
    tw_cache_get(c, k, strlen(k), &v);
}

static void test_log_line_per_interval(void)
{
    struct sink s = {0, ""};
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 15000;
    cfg.jitter = 0;
    cfg.limit = 3;
    cfg.manual_clock = true;
    cfg.name = "users";
    cfg.log = on_line;
    cfg.log_ctx = &s;
    cfg.log_interval_ms = 10000; /* 10 s: qpm is 6 x the queries */
    struct tw_cache *c;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    if (!c)
        return;
    /* Interval 1: 4 sets (one eviction), 3 hits, 2 misses. */
    tw_cache_set(c, K("a"), NULL);
    tw_cache_set(c, K("b"), NULL);
    tw_cache_set(c, K("c"), NULL);
    tw_cache_set(c, K("d"), NULL); /* evicts a */
    get(c, "b");
    get(c, "c");
    get(c, "d");
    get(c, "a");
    get(c, "x");
    tw_cache_advance(c, 10000);
    CHECK_EQ_INT(s.lines, 1);
    CHECK_EQ_STR(s.last, "cache(users) - last 10.0 s: queries: 5 (qpm: 30), hits: 3, misses: 2, "
                         "hit_ratio: 60.0%, evictions: 1, expirations: 0; elements now: 3");
    /* Interval 2: the three keys expire at 15 s; one miss; no eviction. The
     * counts are this interval's, not totals. */
    get(c, "zz");
    tw_cache_advance(c, 20000);
    CHECK_EQ_INT(s.lines, 2);
    CHECK_EQ_STR(s.last, "cache(users) - last 10.0 s: queries: 1 (qpm: 6), hits: 0, misses: 1, "
                         "hit_ratio: 0.0%, evictions: 0, expirations: 3; elements now: 0");
    /* A late line (the clock jumped 2.5 intervals): its real span is
     * printed, and qpm is per minute of it. */
    for (int i = 0; i < 25; i++)
        get(c, "q");
    tw_cache_advance(c, 45000);
    CHECK_EQ_INT(s.lines, 3);
    CHECK_EQ_STR(s.last, "cache(users) - last 25.0 s: queries: 25 (qpm: 60), hits: 0, misses: 25, "
                         "hit_ratio: 0.0%, evictions: 0, expirations: 0; elements now: 0");
    /* The cumulative counters stay in tw_cache_stats. */
    struct tw_cache_stats st;
    CHECK_EQ_INT(tw_cache_stats(c, &st), 0);
    CHECK_EQ_U64(st.hits, 3);
    CHECK_EQ_U64(st.misses, 28);
    CHECK_EQ_U64(st.evictions, 1);
    CHECK_EQ_U64(st.expirations, 3);
    tw_cache_free(c);
}

/* TTLs are capped at TW_CACHE_TTL_MAX_MS, silently: a longer one is stored
 * as that one. */
static void test_ttl_cap(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 1000;
    cfg.jitter = 0;
    cfg.expiry_slack_shift = 0; /* pins the exact reclaim tick */
    cfg.manual_clock = true;
    cfg.start_ms = 5;
    struct tw_cache *c;
    CHECK_EQ_INT(tw_cache_new(&c, &cfg), 0);
    if (!c)
        return;
    CHECK_EQ_U64(TW_CACHE_TTL_MAX_MS, ((UINT64_C(1) << 62) / 1000000));
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("max"), NULL, TW_CACHE_TTL_MAX_MS), 0);
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("more"), NULL, TW_CACHE_TTL_MAX_MS + 1), 0);
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("huge"), NULL, INT64_MAX), 0);
    CHECK_EQ_INT(tw_cache_set_ttl(c, K("less"), NULL, TW_CACHE_TTL_MAX_MS - 1), 0);
    uint64_t end = 5 + (uint64_t)TW_CACHE_TTL_MAX_MS;
    CHECK_EQ_INT(tw_cache_advance(c, end - 2), 0);
    CHECK_EQ_INT(tw_cache_advance(c, end - 1), 1); /* "less" */
    struct tw_cache_stats st;
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 3);
    CHECK_EQ_INT(tw_cache_advance(c, end), 3); /* the three capped ones, together */
    tw_cache_stats(c, &st);
    CHECK_EQ_U64(st.entries, 0);
    tw_cache_free(c);
}

int main(void)
{
    RUN(test_log_line_per_interval);
    RUN(test_ttl_cap);
    return test_summary();
}
