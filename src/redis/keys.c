/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: key names and records. Which partition a task key
 * belongs to (FNV-1a-64 of the key, the same in every client), the names of
 * a partition's keys and channel, and the numeric fields that begin a
 * task record, a dead letter or a schedule (the schema in redis.c). */
#define _GNU_SOURCE
#include <stdio.h>

#include "redis/internal.h"

const char *const tw_rr_suffix[6] = {":d", ":leases", ":task", ":seq", ":hold", ":ch"};

uint64_t tw_rr_hash_of(const void *key, size_t len)
{
    const unsigned char *k = key;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= k[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint32_t tw_rr_part_of(const struct tw_redis *r, const void *key, size_t len)
{
    uint64_t h = tw_rr_hash_of(key, len);
    return (uint32_t)(h % r->cfg.partitions);
}

int tw_rr_parse_fields(const char *s, size_t len, int n, uint64_t *num, size_t *rest)
{
    size_t i = 0;
    for (int f = 0; f < n; f++) {
        uint64_t x = 0;
        size_t i0 = i;
        for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
            unsigned d = (unsigned)(s[i] - '0');
            if (x > (UINT64_MAX - d) / 10)
                return -1;
            x = x * 10 + d;
        }
        if (i == i0 || i >= len || s[i] != ' ')
            return -1;
        num[f] = x;
        i++;
    }
    *rest = i;
    return 0;
}

/* The five keys and the channel of partition p, into buf. */
void tw_rr_keys(const struct tw_redis *r, uint32_t p, char buf[6][TW_RR_KEYBUF],
                    const char **argv, size_t *lens)
{
    for (int i = 0; i < 6; i++) {
        int n = snprintf(buf[i], TW_RR_KEYBUF, "{%s:%u}%s", r->queue, (unsigned)p, tw_rr_suffix[i]);
        argv[i] = buf[i];
        lens[i] = (size_t)n;
    }
}
