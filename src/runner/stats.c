/* SPDX-License-Identifier: MIT */
/* twheel runner: tw_runner_stats. */
#include <string.h>

#include "runner/internal.h"

int tw_runner_stats(const struct tw_runner *r, struct tw_runner_stats *st)
{
    if (!r || !st)
        return TW_EINVAL;
    memset(st, 0, sizeof *st);
    for (unsigned i = 0; i < r->nshards; i++) {
        rn_lock(&r->shards[i]);
        if (r->shards[i].tasks) /* NULL once stopped */
            st->pending += tw_tasks_pending(r->shards[i].tasks);
        st->contended += r->shards[i].contended;
        st->shared_writes += r->shards[i].room_moves;
        rn_unlock(&r->shards[i]);
    }
    st->fired = atomic_load_explicit(&r->fired, memory_order_relaxed);
    st->late = atomic_load_explicit(&r->late, memory_order_relaxed);
    st->worst_lateness_ns = atomic_load_explicit(&r->worst_ns, memory_order_relaxed);
    st->drained = atomic_load_explicit(&r->drained, memory_order_relaxed);
    st->tick = atomic_load_explicit(&r->tick, memory_order_relaxed);
    st->worst_tick_cpu_ns = atomic_load_explicit(&r->worst_tick_cpu, memory_order_relaxed);
    st->shards = r->nshards;
    return 0;
}
