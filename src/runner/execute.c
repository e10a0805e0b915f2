/* SPDX-License-Identifier: MIT */
/* twheel runner: fired tasks to callbacks: the tick thread's batch, the ring,
 * executor threads and pool turns (design: runner.c). */
#include <string.h>

#include "runner/internal.h"

static void rn_run_job(struct tw_runner *r, struct rn_job *job)
{
    if (job->task.key)
        job->task.key = job->key; /* the job may have been copied */
    uint64_t now = tw_mono_ns_();
    uint64_t due = r->start_ns + job->task.deadline * r->tick_ns;
    uint64_t late = now > due ? now - due : 0;
    atomic_fetch_add_explicit(&r->fired, 1, memory_order_relaxed);
    if (late > r->tick_ns)
        atomic_fetch_add_explicit(&r->late, 1, memory_order_relaxed);
    uint64_t worst = atomic_load_explicit(&r->worst_ns, memory_order_relaxed);
    while (late > worst &&
           !atomic_compare_exchange_weak_explicit(&r->worst_ns, &worst, late, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
    r->execute(r->ctx, &job->task);
}

void *rn_worker_(void *arg)
{
    struct tw_runner *r = arg;
    struct rn_job job;
    for (;;) {
        pthread_mutex_lock(&r->q);
        while (r->qcount == 0 && !r->q_quit)
            pthread_cond_wait(&r->q_nonempty, &r->q);
        if (r->qcount == 0) { /* quitting and nothing left */
            pthread_mutex_unlock(&r->q);
            return NULL;
        }
        job = r->ring[r->qhead];
        r->qhead = (r->qhead + 1) % r->qcap;
        r->qcount--;
        pthread_cond_signal(&r->q_nonfull);
        pthread_mutex_unlock(&r->q);
        rn_run_job(r, &job);
    }
}

/* Hand the tick thread's batch to the workers (or run it, with none). */
void rn_dispatch_(struct tw_runner *r)
{
    unsigned n = r->nbatch;
    r->nbatch = 0;
    if (!r->nworkers && !r->pool) {
        for (unsigned i = 0; i < n; i++)
            rn_run_job(r, &r->batch[i]);
        return;
    }
    pthread_mutex_lock(&r->q);
    for (unsigned i = 0; i < n; i++) {
        while (r->qcount == r->qcap) {
            if (r->pool) /* the pool must know before we wait for it */
                tw_pool_post_(r->pool, &r->client);
            pthread_cond_wait(&r->q_nonfull, &r->q);
        }
        r->ring[(r->qhead + r->qcount) % r->qcap] = r->batch[i];
        r->qcount++;
        if (!r->pool)
            pthread_cond_signal(&r->q_nonempty);
    }
    if (r->pool && n)
        tw_pool_post_(r->pool, &r->client);
    pthread_mutex_unlock(&r->q);
}

/* A pool thread's turn on this runner (struct tw_pool_client.work): take the
 * first fired task, let the pool give the rest to other threads (post),
 * wake the clock run if it stopped on a full ring, run the task with no
 * lock held. inflight counts tasks taken and not finished, for stop. */
void rn_pool_work_(struct tw_pool_client *c)
{
    struct tw_runner *r =
        (struct tw_runner *)(void *)((char *)c - offsetof(struct tw_runner, client));
    struct rn_job job;
    pthread_mutex_lock(&r->q);
    if (r->qcount == 0) {
        pthread_mutex_unlock(&r->q);
        return;
    }
    job = r->ring[r->qhead];
    r->qhead = (r->qhead + 1) % r->qcap;
    r->qcount--;
    r->inflight++;
    if (r->qcount)
        tw_pool_post_(r->pool, c);
    if (r->q_blocked && !r->clock_left) {
        /* Under q, so that stop cannot leave the clock meanwhile. */
        r->q_blocked = 0;
        tw_clock_wake(r->clock, r->member, 0);
    }
    pthread_cond_signal(&r->q_nonfull);
    pthread_mutex_unlock(&r->q);
    rn_run_job(r, &job);
    pthread_mutex_lock(&r->q);
    if (--r->inflight == 0 && r->qcount == 0)
        pthread_cond_broadcast(&r->q_nonfull); /* stop waits for this */
    pthread_mutex_unlock(&r->q);
}

/* The shards' execute: runs on the tick thread under a shard lock, inside
 * tw_tasks_advance_max(..., RN_BATCH): copy the task into the batch. */
void rn_collect_(void *ctx, const struct tw_task *task)
{
    struct tw_runner *r = ctx;
    /* On a clock the run reserved ring slots from collect_tail on (see
     * rn_clock_advance_shard); else the tick thread's batch. */
    struct rn_job *job =
        r->clock ? &r->ring[(r->collect_tail + r->nbatch++) % r->qcap] : &r->batch[r->nbatch++];
    job->task = *task;
    job->task.deadline -= r->collect_off;
    if (task->key) {
        memcpy(job->key, task->key, task->key_len);
        job->task.key = job->key;
    }
    rn_pending_sub(r, r->collect_shard, 1);
}
