/* SPDX-License-Identifier: MIT */
/* The TTL cache: go-zero's collection.Cache with its races fixed. A loader
 * fills misses once per key however many threads ask (single flight); keys
 * expire on their own (jittered TTL) or by the LRU limit; values are freed
 * exactly once by the free function; tw_cache_free joins the expiry thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <twheel.h>

struct user {
    char name[32];
};

static void free_user(void *ctx, void *value)
{
    (void)ctx;
    free(value);
}

/* Called on a miss, once for all concurrent callers of that key. */
static int load_user(void *ctx, const void *key, size_t key_len, void **value, size_t *value_len)
{
    (void)value_len;
    int *loads = ctx;
    struct user *u = malloc(sizeof *u);
    if (!u)
        return TW_ENOMEM;
    snprintf(u->name, sizeof u->name, "user %.*s", (int)key_len, (const char *)key);
    (*loads)++;
    *value = u;
    return 0;
}

int main(void)
{
    struct tw_cache_config cfg;
    tw_cache_config_init(&cfg);  /* jitter 0.05, shards by CPUs; no log until cfg.log is set */
    cfg.default_ttl_ms = 60000;  /* one minute, +-5% */
    cfg.limit = 10000;           /* LRU cap */
    cfg.name = "users";
    cfg.free_value = free_user;  /* the cache owns stored values */
    struct tw_cache *users;
    int rc = tw_cache_new(&users, &cfg);
    if (rc) {
        fprintf(stderr, "tw_cache_new: %s\n", tw_strerror(rc));
        return 1;
    }
    int loads = 0;
    void *v;
    for (int i = 0; i < 3; i++) {  /* one load, then two hits */
        if (tw_cache_take(users, "42", 2, load_user, &loads, &v) == 0)
            printf("%s\n", ((struct user *)v)->name);
    }
    struct user *u = malloc(sizeof *u);
    if (!u)
        return 1;
    strcpy(u->name, "short-lived");
    tw_cache_set_ttl(users, "tmp", 3, u, 50);  /* 50 ms (+-5%) */
    struct tw_cache_stats st;
    tw_cache_stats(users, &st);
    printf("loads %d, hits %llu, misses %llu, entries %llu\n", loads,
           (unsigned long long)st.hits, (unsigned long long)st.misses,
           (unsigned long long)st.entries);
    tw_cache_free(users);  /* frees both values, joins the expiry thread */
    return loads == 1 && st.hits == 2 ? 0 : 1;
}
