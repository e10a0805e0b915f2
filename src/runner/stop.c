/* SPDX-License-Identifier: MIT */
/* twheel runner: tw_runner_stop and tw_runner_free: closing the shards,
 * joining the threads (design: runner.c). */
#include "runner/internal.h"

static int rn_self_is_runner_thread(const struct tw_runner *r)
{
    pthread_t self = pthread_self();
    if (r->tick_started && pthread_equal(self, r->tick_thread))
        return 1;
    /* A pool thread (ours or shared: a stop would wait for the pool to run
     * this runner's queue) or the clock's thread (leave would wait for
     * itself). */
    if ((r->pool && tw_pool_is_self_(r->pool)) || (r->clock && tw_clock_is_self_(r->clock)))
        return 1;
    for (unsigned i = 0; i < r->workers_started; i++)
        if (pthread_equal(self, r->workers[i]))
            return 1;
    return 0;
}

static void rn_noop(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
}

/* Join the threads that were started. Threads start only once every lock
 * and condition exists, so ctl and q are touched only if a thread uses them
 * (a tw_runner_new that failed before may not have them). */
void rn_join_all_(struct tw_runner *r)
{
    if (r->joined)
        return;
    r->joined = 1;
    if (r->member) { /* no run is going on after leave returns */
        pthread_mutex_lock(&r->q);
        r->clock_left = 1;
        pthread_mutex_unlock(&r->q);
        tw_clock_leave(r->clock, r->member);
        r->member = NULL;
    }
    if (r->tick_started) {
        pthread_mutex_lock(&r->ctl);
        r->stopping = 1;
        pthread_cond_signal(&r->tick_cv);
        pthread_mutex_unlock(&r->ctl);
        pthread_join(r->tick_thread, NULL);
    }
    if (r->pool_attached) { /* queued tasks still run; then let go of the pool */
        pthread_mutex_lock(&r->q);
        while (r->qcount || r->inflight) {
            if (r->qcount)
                tw_pool_post_(r->pool, &r->client);
            pthread_cond_wait(&r->q_nonfull, &r->q);
        }
        pthread_mutex_unlock(&r->q);
        tw_pool_detach_(r->pool, &r->client);
        r->pool_attached = 0;
    }
    /* A pool of our own: its threads are joined here, its memory stays
     * until rn_destroy_. Every stop reads r->pool before it takes stop_lock
     * (rn_self_is_runner_thread), and a stop on another thread may be doing
     * that right now: freeing the pool here, or clearing the pointer, would
     * let it read freed memory, or race on the pointer. */
    if (r->own_pool)
        tw_pool_join_(r->pool);
    if (!r->workers_started)
        return;
    pthread_mutex_lock(&r->q);
    r->q_quit = 1;
    pthread_cond_broadcast(&r->q_nonempty);
    pthread_mutex_unlock(&r->q);
    for (unsigned i = 0; i < r->workers_started; i++)
        pthread_join(r->workers[i], NULL);
}

int tw_runner_stop(struct tw_runner *r, unsigned flags)
{
    if (!r || (flags & ~TW_RUNNER_STOP_DRAIN))
        return TW_EINVAL;
    /* Stopped already: every thread of the runner is joined and no drain's
     * fn can run (drains meet closed shards), so the checks below have
     * nothing to find; and they would compare with the ids of joined
     * threads, which a new thread may reuse (a false TW_EBUSY, after which
     * free would leak the runner). */
    if (atomic_load_explicit(&r->stopped, memory_order_acquire))
        return 0;
    /* From a callback (it would join its own thread) or from drain's fn
     * (that drain goes on using the runner when fn returns). */
    if (rn_self_is_runner_thread(r) || rn_self_is_drainer_(r))
        return TW_EBUSY;
    /* A callback of the drain that this very thread's stop is running: it
     * would wait for the stop_lock it holds. */
    if (atomic_load_explicit(&r->stopper_set, memory_order_acquire) &&
        pthread_equal(r->stopper, pthread_self()))
        return TW_EBUSY;
    pthread_mutex_lock(&r->stop_lock);
    if (atomic_load_explicit(&r->stopped, memory_order_relaxed)) {
        pthread_mutex_unlock(&r->stop_lock);
        return 0;
    }
    /* Close every shard: from here on calls return TW_ECLOSED and nobody but
     * us touches the shards' tasks. */
    for (unsigned i = 0; i < r->nshards; i++) {
        pthread_mutex_lock(&r->shards[i].lock);
        r->shards[i].closed = 1;
        pthread_mutex_unlock(&r->shards[i].lock);
    }
    rn_join_all_(r);    /* tick thread, then workers once the queue is empty */
    rn_wait_drains_(r); /* drains of user threads: they meet closed shards */
    r->stopper = pthread_self();
    atomic_store_explicit(&r->stopper_set, 1, memory_order_release);
    for (unsigned i = 0; i < r->nshards; i++) {
        /* Detach the shard's tasks under its lock (tw_runner_stats may be
         * reading), then release or drain them with no lock held. */
        pthread_mutex_lock(&r->shards[i].lock);
        struct tw_tasks *t = r->shards[i].tasks;
        r->shards[i].tasks = NULL;
        pthread_mutex_unlock(&r->shards[i].lock);
        size_t n = tw_tasks_pending(t); /* (r->pending no longer matters) */
        if (flags & TW_RUNNER_STOP_DRAIN) {
            atomic_fetch_add_explicit(&r->drained, n, memory_order_relaxed);
            rn_drain_instance_(t, r->shards[i].off, r->execute, r->ctx);
        } else {
            /* Dropped without running: handed to release (no lock held). */
            tw_tasks_drain(t, r->release ? r->release : rn_noop, r->ctx);
        }
        tw_tasks_free(t);
    }
    atomic_store_explicit(&r->stopper_set, 0, memory_order_release);
    atomic_store_explicit(&r->stopped, 1, memory_order_release);
    pthread_mutex_unlock(&r->stop_lock);
    return 0;
}

int tw_runner_free(struct tw_runner *r)
{
    if (!r)
        return 0;
    int rc = tw_runner_stop(r, 0);
    if (rc != 0)
        return rc; /* from a callback or drain's fn: refuse rather than free under our feet */
    rn_destroy_(r);
    return 0;
}
