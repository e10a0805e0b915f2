/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the Redis clock offset. Lower bounds of (server clock
 * - local monotonic clock) per partition in a cluster (its master's clock),
 * one for all on one server (tw_rr_clock_slot: bounds kept apart there
 * differed by the jitter of the replies that sampled each, and two tasks of
 * two partitions due within that difference could start in the wrong
 * order), from the replies that carry the server's TIME, and the local time
 * at which a due time has surely come on the server ("Never early" in
 * redis.c). Upper bounds too, from the instant each such request was sent:
 * the middle of the two is the best estimate of the server's clock, which
 * the lateness figure uses (and only it: a wait uses the lower bound alone,
 * which never runs ahead of the server). The claim thread forgets samples
 * older than 5-10 s (claim.c). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>

#include "redis/internal.h"

/* A clock sample: the server read `server_us` before the reply that carried it
 * reached us at local `local_ns`, so server_us - local_us is a lower bound of
 * the offset between the two clocks; the largest such bound is the best. */
void tw_rr_clock_sample(struct tw_redis *r, uint32_t p, uint64_t server_us, uint64_t local_ns)
{
    p = tw_rr_clock_slot(r, p);
    int_fast64_t off = (int_fast64_t)server_us - (int_fast64_t)(local_ns / 1000u);
    int_fast64_t cur = atomic_load(&r->off_cur[p]);
    while (off > cur && !atomic_compare_exchange_weak(&r->off_cur[p], &cur, off)) {
    }
}

/* The server read `server_us` after the request that carried it left at local
 * `sent_ns`, so server_us - sent_us is an upper bound of the offset; the
 * smallest is the best. */
void tw_rr_clock_sample_hi(struct tw_redis *r, uint32_t p, uint64_t server_us, uint64_t sent_ns)
{
    p = tw_rr_clock_slot(r, p);
    int_fast64_t off = (int_fast64_t)server_us - (int_fast64_t)(sent_ns / 1000u);
    int_fast64_t cur = atomic_load(&r->off_hi_cur[p]);
    while (off < cur && !atomic_compare_exchange_weak(&r->off_hi_cur[p], &cur, off)) {
    }
}

/* The lateness execute sees needs the server's clock at the call, not a
 * bound of it: a START reply's TIME was read before the script's work, the
 * reply and (with `appendfsync always`) an fsync, so the lower bound alone
 * runs behind by all of that. The tightest samples (TIME round trips)
 * bracket the offset within one round trip; the middle is off by at most
 * half of it. Clocks drifting apart since the samples could make the two
 * bounds cross: then the lower one, and the caller's bounds keep it within
 * what its own round trip proves. */
uint64_t tw_rr_server_us(struct tw_redis *r, uint32_t p, uint64_t now_ns, uint64_t lo_us,
                         uint64_t hi_us)
{
    p = tw_rr_clock_slot(r, p);
    int_fast64_t a = atomic_load(&r->off_cur[p]), b = atomic_load(&r->off_prev[p]);
    int_fast64_t lo = a > b ? a : b;
    if (lo == INT64_MIN)
        return lo_us;
    a = atomic_load(&r->off_hi_cur[p]);
    b = atomic_load(&r->off_hi_prev[p]);
    int_fast64_t hi = a < b ? a : b, off = lo;
    if (hi != INT64_MAX && hi > lo)
        off = lo + (hi - lo) / 2;
    int_fast64_t us = (int_fast64_t)(now_ns / 1000u) + off;
    uint64_t v = us > 0 ? (uint64_t)us : 0;
    return v < lo_us ? lo_us : v > hi_us ? hi_us : v;
}

/* Local monotonic ns at which the server's clock has surely reached due_ms. */
uint64_t tw_rr_local_due(struct tw_redis *r, uint32_t p, uint64_t due_ms)
{
    p = tw_rr_clock_slot(r, p);
    int_fast64_t a = atomic_load(&r->off_cur[p]), b = atomic_load(&r->off_prev[p]);
    int_fast64_t off = a > b ? a : b;
    if (off == INT64_MIN)
        return 0; /* no sample yet: start will tell how long to wait */
    int_fast64_t us = (int_fast64_t)(due_ms * 1000u) - off;
    return us > 0 ? (uint64_t)us * 1000u : 0;
}
