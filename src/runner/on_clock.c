/* SPDX-License-Identifier: MIT */
/* twheel runner: the runner as a member of a shared clock (design: runner.c).
 *
 * The clock's thread calls rn_clock_run_, which does what one round of
 * rn_tick_main_ does, but bounded (RN_CLOCK_BUDGET tasks; then it asks to
 * run again at once, so the clock's other members get their turn) and
 * without ever waiting: fired tasks go
 * straight into ring slots reserved under q (no batch copy); when the ring
 * is full the run stops, sets q_blocked, and the pool thread that frees a
 * slot wakes the member (rn_pool_work_). Due tasks then stay in the wheel,
 * still removable, as with a tick thread that waits for its workers. A run
 * that stopped half way recomputes the earliest expiry next time, so ticks
 * are still processed in order across shards. */
#include "runner/internal.h"

enum { RN_RUN_DONE, RN_RUN_BUDGET, RN_RUN_BLOCKED };

static int rn_clock_advance_shard(struct tw_runner *r, struct rn_shard *s, uint64_t to,
                                  unsigned *budget)
{
    for (;;) {
        if (*budget == 0)
            return RN_RUN_BUDGET;
        pthread_mutex_lock(&r->q);
        size_t room = r->qcap - r->qcount;
        r->collect_tail = (r->qhead + r->qcount) % r->qcap;
        if (room == 0)
            r->q_blocked = 1;
        pthread_mutex_unlock(&r->q);
        if (room == 0)
            return RN_RUN_BLOCKED;
        unsigned max = RN_BATCH < *budget ? RN_BATCH : *budget;
        if (room < max)
            max = (unsigned)room;
        rn_lock(s);
        r->collect_off = s->off;
        r->collect_shard = s;
        r->nbatch = 0;
        int64_t n = tw_tasks_advance_max(s->tasks, to + s->off, max);
        rn_unlock(s);
        if (r->nbatch) { /* publish the slots written past the tail */
            pthread_mutex_lock(&r->q);
            r->qcount += r->nbatch;
            tw_pool_post_(r->pool, &r->client);
            pthread_mutex_unlock(&r->q);
            r->nbatch = 0;
        }
        /* an advance that fires nothing still costs a unit (its lock, its
         * cascades): a run's work is bounded whatever the wheel holds */
        *budget -= n ? (unsigned)n : 1;
        if (n < (int64_t)max)
            return RN_RUN_DONE;
    }
}

static uint64_t rn_clock_pass(struct tw_runner *r, uint64_t now_ns)
{
    uint64_t now_tick = now_ns > r->start_ns ? (now_ns - r->start_ns) / r->tick_ns : 0;
    /* While the run reads the shards, a lazy move wakes the member for its
     * walks (rn_work_kick): the scan may have read that shard already, and
     * the clock keeps the earlier of that wake-up and what the run asks. */
    atomic_store_explicit(&r->clock_next, UINT64_MAX, memory_order_relaxed);
    /* Room for one round over every shard and the final pass even when
     * nothing fires, so a run that fires nothing always finishes. */
    unsigned budget = RN_CLOCK_BUDGET + 2 * r->nshards;
    uint64_t next, work;
    int rc;
    for (;;) {
        next = rn_next_expiry_(r, &work);
        if (next > now_tick)
            break;
        for (unsigned i = 0; i < r->nshards; i++)
            if ((rc = rn_clock_advance_shard(r, &r->shards[i], next, &budget)) != RN_RUN_DONE)
                goto out;
    }
    for (unsigned i = 0; i < r->nshards; i++) /* move time on; fires what raced in */
        if ((rc = rn_clock_advance_shard(r, &r->shards[i], now_tick, &budget)) != RN_RUN_DONE)
            goto out;
    atomic_store_explicit(&r->tick, now_tick, memory_order_relaxed);
    /* A set after the scan above lowers our deadline itself (tw_clock_wake). */
    /* work was read before the shards moved to now_tick, which may have
     * done it: then the next tick at the earliest (the next run reads it
     * again). */
    if (work <= now_tick)
        work = now_tick + 1;
    atomic_store_explicit(&r->clock_next, work, memory_order_relaxed);
    return work == TW_NEVER ? TW_CLOCK_NEVER : r->start_ns + work * r->tick_ns;
out:
    /* Out of budget: again at once. Blocked: a pool thread wakes us (and
     * no producer needs to, for walks: clock_next 0). */
    atomic_store_explicit(&r->clock_next, 0, memory_order_relaxed);
    return rc == RN_RUN_BUDGET ? now_ns : TW_CLOCK_NEVER;
}

uint64_t rn_clock_run_(void *ctx, uint64_t now_ns)
{
    struct tw_runner *r = ctx;
    uint64_t cpu = rn_cpu_ns(), next = rn_clock_pass(r, now_ns);
    rn_pass_done(r, cpu);
    return next;
}
