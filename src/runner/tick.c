/* SPDX-License-Identifier: MIT */
/* twheel runner: the tick thread, and the kick of a producer that wakes it
 * (design: runner.c). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_condattr_setclock */
#endif
#include <errno.h>
#include <pthread.h>

#include "runner/internal.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

/* A producer armed `deadline`; `sleeping` is sleep_until as read under the
 * shard lock. */
void rn_kick_(struct tw_runner *r, uint64_t deadline, uint64_t sleeping)
{
    while (deadline < sleeping) {
        if (atomic_compare_exchange_weak(&r->sleep_until, &sleeping, 0)) {
            pthread_mutex_lock(&r->ctl);
            pthread_cond_signal(&r->tick_cv);
            pthread_mutex_unlock(&r->ctl);
            return;
        }
    }
}

uint64_t rn_next_expiry_(struct tw_runner *r, uint64_t *work)
{
    uint64_t next = TW_NEVER, first_work = TW_NEVER;
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *s = &r->shards[i];
        rn_lock(s);
        uint64_t e = tw_tasks_next_expiry(s->tasks);
        uint64_t k = work ? tw_tasks_next_work(s->tasks) : TW_NEVER;
        rn_unlock(s);
        if (e != TW_NEVER)
            e -= s->off;
        if (k != TW_NEVER)
            k -= s->off;
        next = e < next ? e : next;
        first_work = k < first_work ? k : first_work;
    }
    if (work)
        *work = first_work < next ? first_work : next;
    return next;
}

/* Advance one shard to `to`, dispatching batch by batch. */
static void rn_advance_shard(struct tw_runner *r, struct rn_shard *s, uint64_t to)
{
    int64_t n;
    do {
        rn_lock(s);
        r->collect_off = s->off;
        r->collect_shard = s;
        n = tw_tasks_advance_max(s->tasks, to + s->off, RN_BATCH);
        rn_unlock(s);
        if (r->nbatch)
            rn_dispatch_(r);
    } while (n == RN_BATCH);
}

/* Run everything due by tick `target`, earliest ticks first across shards. */
static void rn_run_due(struct tw_runner *r, uint64_t target)
{
    for (;;) {
        uint64_t t = rn_next_expiry_(r, NULL);
        if (t > target)
            break;
        for (unsigned i = 0; i < r->nshards; i++)
            rn_advance_shard(r, &r->shards[i], t);
    }
    for (unsigned i = 0; i < r->nshards; i++) /* move time on; fires what raced in */
        rn_advance_shard(r, &r->shards[i], target);
    atomic_store_explicit(&r->tick, target, memory_order_relaxed);
}

void *rn_tick_main_(void *arg)
{
    struct tw_runner *r = arg;
#if defined(PR_SET_TIMERSLACK)
    /* Linux lets a sleep of an ordinary thread end up to 50 us late (timer
     * slack), to batch wake-ups; the tick thread sleeps to a tick boundary
     * and every task due then waits for it, so it asks for none. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    for (;;) {
        uint64_t now_tick = (tw_mono_ns_() - r->start_ns) / r->tick_ns, cpu = rn_cpu_ns();
        rn_run_due(r, now_tick);
        rn_pass_done(r, cpu);

        atomic_store(&r->sleep_until, UINT64_MAX);
        uint64_t next;
        rn_next_expiry_(r, &next); /* the walks' next steps too */
        uint64_t expect = UINT64_MAX;
        if (next <= now_tick || !atomic_compare_exchange_strong(&r->sleep_until, &expect, next)) {
            atomic_store(&r->sleep_until, 0); /* kicked, or due already */
            pthread_mutex_lock(&r->ctl);
            int stop = r->stopping;
            pthread_mutex_unlock(&r->ctl);
            if (stop)
                break;
            continue;
        }
        pthread_mutex_lock(&r->ctl);
        while (!r->stopping && atomic_load(&r->sleep_until) != 0) {
            if (next == TW_NEVER) {
                pthread_cond_wait(&r->tick_cv, &r->ctl);
                continue;
            }
            uint64_t at = r->start_ns + next * r->tick_ns;
            if (tw_mono_ns_() >= at)
                break;
            if (tw_cond_wait_until_(&r->tick_cv, &r->ctl, at) == ETIMEDOUT)
                break;
        }
        int stop = r->stopping;
        pthread_mutex_unlock(&r->ctl);
        atomic_store(&r->sleep_until, 0);
        if (stop)
            break;
    }
    return NULL;
}
