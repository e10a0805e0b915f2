/* twheel cache: the per-shard map. SipHash-1-3 under a random per-instance
 * key, a chained hash table that doubles at load 1 and halves below 1/8, and
 * an intrusive LRU list. Every function here runs under the shard lock. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

#include "cache_internal.h"

/* ---- SipHash-1-3 (Aumasson & Bernstein; the variant Rust's HashMap and
 * Redis use: one compression round, three finalisation rounds) ------------ */

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND(v0, v1, v2, v3)                                              \
    do {                                                                       \
        v0 += v1;                                                              \
        v1 = SIP_ROTL(v1, 13);                                                 \
        v1 ^= v0;                                                              \
        v0 = SIP_ROTL(v0, 32);                                                 \
        v2 += v3;                                                              \
        v3 = SIP_ROTL(v3, 16);                                                 \
        v3 ^= v2;                                                              \
        v0 += v3;                                                              \
        v3 = SIP_ROTL(v3, 21);                                                 \
        v3 ^= v0;                                                              \
        v2 += v1;                                                              \
        v1 = SIP_ROTL(v1, 17);                                                 \
        v1 ^= v2;                                                              \
        v2 = SIP_ROTL(v2, 32);                                                 \
    } while (0)

static inline uint64_t sip_load64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
           (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
           (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

uint64_t tw_cache_siphash13_(const uint64_t key[2], const void *data, size_t len)
{
    const unsigned char *in = data;
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ key[0];
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ key[1];
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ key[0];
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ key[1];
    const unsigned char *end = in + (len & ~(size_t)7);
    for (; in != end; in += 8) {
        uint64_t m = sip_load64(in);
        v3 ^= m;
        SIP_ROUND(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)in[6] << 48; /* fall through */
    case 6: b |= (uint64_t)in[5] << 40; /* fall through */
    case 5: b |= (uint64_t)in[4] << 32; /* fall through */
    case 4: b |= (uint64_t)in[3] << 24; /* fall through */
    case 3: b |= (uint64_t)in[2] << 16; /* fall through */
    case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)in[0]; break;
    default: break;
    }
    v3 ^= b;
    SIP_ROUND(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    SIP_ROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* 128 random bits: getrandom, else /dev/urandom, else the clock and an
 * address (weak, but only when the kernel offers nothing better). */
void tw_cache_random_seed_(uint64_t out[2])
{
    unsigned char *p = (unsigned char *)out;
    size_t got = 0;
#if defined(__linux__)
    while (got < 16) {
        ssize_t n = getrandom(p + got, 16 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
#endif
    if (got < 16) {
        int fd = open("/dev/urandom", O_RDONLY);
        if (fd >= 0) {
            while (got < 16) {
                ssize_t n = read(fd, p + got, 16 - got);
                if (n <= 0)
                    break;
                got += (size_t)n;
            }
            close(fd);
        }
    }
    if (got < 16) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        out[0] = (uint64_t)ts.tv_nsec * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)ts.tv_sec;
        out[1] = (uint64_t)(uintptr_t)out * UINT64_C(0xbf58476d1ce4e5b9) ^ out[0];
    }
}

/* ---- allocation -------------------------------------------------------- */

void *tw_cache_mem_alloc_(const struct tw_allocator *a, size_t size)
{
    if (a->fn)
        return a->fn(a->ctx, NULL, 0, size);
    return malloc(size);
}

void tw_cache_mem_free_(const struct tw_allocator *a, void *p, size_t size)
{
    if (!p)
        return;
    if (a->fn)
        a->fn(a->ctx, p, size, 0);
    else
        free(p);
}

/* ---- hash table -------------------------------------------------------- */

struct cache_entry *tw_cache_map_find_(const struct cache_shard *s, const void *key,
                                       size_t klen, uint64_t hash)
{
    uint32_t h = (uint32_t)hash;
    for (struct cache_entry *e = s->buckets[h & s->mask]; e; e = e->hnext)
        if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0)
            return e;
    return NULL;
}

/* Rehash into `n` buckets (a power of two). On allocation failure the table
 * stays as it is: still correct, only slower. */
static void cache_map_resize(struct tw_cache *c, struct cache_shard *s, size_t n)
{
    struct cache_entry **nb = tw_cache_mem_alloc_(&c->alloc, n * sizeof *nb);
    if (!nb)
        return;
    memset(nb, 0, n * sizeof *nb);
    size_t old_n = s->mask + 1;
    for (size_t i = 0; i < old_n; i++) {
        struct cache_entry *e = s->buckets[i];
        while (e) {
            struct cache_entry *next = e->hnext;
            struct cache_entry **head = &nb[e->hash & (n - 1)];
            e->hnext = *head;
            *head = e;
            e = next;
        }
    }
    tw_cache_mem_free_(&c->alloc, s->buckets, old_n * sizeof *s->buckets);
    s->buckets = nb;
    s->mask = n - 1;
}

void tw_cache_map_insert_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e)
{
    struct cache_entry **head = &s->buckets[e->hash & s->mask];
    e->hnext = *head;
    *head = e;
    s->count++;
    size_t n = s->mask + 1;
    if (s->count > n && n <= (SIZE_MAX / sizeof(void *)) / 2 && n < (UINT64_C(1) << 32))
        cache_map_resize(c, s, n * 2);
}

void tw_cache_map_remove_(struct tw_cache *c, struct cache_shard *s, struct cache_entry *e)
{
    struct cache_entry **link = &s->buckets[e->hash & s->mask];
    while (*link != e)
        link = &(*link)->hnext;
    *link = e->hnext;
    e->hnext = NULL;
    s->count--;
    size_t n = s->mask + 1;
    if (n > CACHE_MIN_BUCKETS && s->count < n / 8)
        cache_map_resize(c, s, n / 2);
}

void tw_cache_map_replace_(struct cache_shard *s, struct cache_entry *old,
                           struct cache_entry *e)
{
    struct cache_entry **link = &s->buckets[old->hash & s->mask];
    while (*link != old)
        link = &(*link)->hnext;
    e->hnext = old->hnext;
    *link = e;
    old->hnext = NULL;
}

/* ---- LRU list: head = most recently used, tail = least ------------------ */

static inline void cache_lru_oldest(struct cache_shard *s)
{
    atomic_store_explicit(&s->oldest, s->lru_tail ? cache_lru_of(s->lru_tail)->stamp : UINT64_MAX,
                          memory_order_relaxed);
}

void tw_cache_lru_push_(struct cache_shard *s, struct cache_entry *e)
{
    struct cache_lru *l = cache_lru_of(e);
    l->prev = NULL;
    l->next = s->lru_head;
    if (s->lru_head)
        cache_lru_of(s->lru_head)->prev = e;
    else
        s->lru_tail = e;
    s->lru_head = e;
    cache_lru_oldest(s);
}

void tw_cache_lru_unlink_(struct cache_shard *s, struct cache_entry *e)
{
    struct cache_lru *l = cache_lru_of(e);
    if (l->prev)
        cache_lru_of(l->prev)->next = l->next;
    else
        s->lru_head = l->next;
    if (l->next)
        cache_lru_of(l->next)->prev = l->prev;
    else
        s->lru_tail = l->prev;
    l->prev = l->next = NULL;
    cache_lru_oldest(s);
}

void tw_cache_lru_touch_(struct cache_shard *s, struct cache_entry *e)
{
    if (s->lru_head == e) {
        if (s->lru_tail == e)
            cache_lru_oldest(s);
        return;
    }
    tw_cache_lru_unlink_(s, e);
    tw_cache_lru_push_(s, e);
}
