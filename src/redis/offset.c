/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the Redis clock offset. Lower bounds of (server
 * clock - local monotonic clock) per partition, from the replies that carry
 * the server's TIME, and the local time at which a due time has surely come
 * on the server ("Never early" in redis.c). The claim thread forgets
 * samples older than 5-10 s (claim.c). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>

#include "redis/internal.h"

/* A clock sample: the server read `server_us` before the reply that carried it
 * reached us at local `local_ns`, so server_us - local_us is a lower bound of
 * the offset between the two clocks; the largest such bound is the best. */
void tw_rr_clock_sample(struct tw_redis *r, uint32_t p, uint64_t server_us, uint64_t local_ns)
{
    int_fast64_t off = (int_fast64_t)server_us - (int_fast64_t)(local_ns / 1000u);
    int_fast64_t cur = atomic_load(&r->off_cur[p]);
    while (off > cur && !atomic_compare_exchange_weak(&r->off_cur[p], &cur, off)) {
    }
}

/* Local monotonic ns at which the server's clock has surely reached due_ms. */
uint64_t tw_rr_local_due(struct tw_redis *r, uint32_t p, uint64_t due_ms)
{
    int_fast64_t a = atomic_load(&r->off_cur[p]), b = atomic_load(&r->off_prev[p]);
    int_fast64_t off = a > b ? a : b;
    if (off == INT64_MIN)
        return 0; /* no sample yet: start will tell how long to wait */
    int_fast64_t us = (int_fast64_t)(due_ms * 1000u) - off;
    return us > 0 ? (uint64_t)us * 1000u : 0;
}
