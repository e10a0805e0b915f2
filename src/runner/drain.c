/* SPDX-License-Identifier: MIT */
/* twheel runner: tw_runner_drain, and the list of threads inside it (design:
 * runner.c). */
#include "runner/internal.h"

/* Hands tasks to a user's fn with deadlines on the runner's clock. */
struct rn_relay {
    tw_tasks_fn *fn;
    void *ctx;
    uint64_t off;
};

static void rn_relay_task(void *ctx, const struct tw_task *task)
{
    const struct rn_relay *d = ctx;
    struct tw_task t = *task;
    t.deadline -= d->off;
    d->fn(d->ctx, &t);
}

int64_t rn_drain_instance_(struct tw_tasks *t, uint64_t off, tw_tasks_fn *fn, void *ctx)
{
    struct rn_relay d = {fn, ctx, off};
    return tw_tasks_drain(t, rn_relay_task, &d);
}

static void rn_drain_enter(struct tw_runner *r, struct rn_drainer *me)
{
    me->thread = pthread_self();
    pthread_mutex_lock(&r->drain_lock);
    me->next = r->drainers;
    r->drainers = me;
    pthread_mutex_unlock(&r->drain_lock);
}

/* The last touch of r by a drain: a stop waiting in rn_wait_drains_ may free
 * the runner as soon as drain_lock is released. */
static void rn_drain_leave(struct tw_runner *r, struct rn_drainer *me)
{
    pthread_mutex_lock(&r->drain_lock);
    struct rn_drainer **p = &r->drainers;
    while (*p != me)
        p = &(*p)->next;
    *p = me->next;
    if (!r->drainers)
        pthread_cond_broadcast(&r->drain_done);
    pthread_mutex_unlock(&r->drain_lock);
}

/* Is the calling thread inside a drain of r (so, in drain's fn)? */
int rn_self_is_drainer_(struct tw_runner *r)
{
    pthread_t self = pthread_self();
    int found = 0;
    pthread_mutex_lock(&r->drain_lock);
    for (struct rn_drainer *d = r->drainers; d && !found; d = d->next)
        found = pthread_equal(d->thread, self);
    pthread_mutex_unlock(&r->drain_lock);
    return found;
}

/* For stop, with the shards closed: drains on other threads take no more
 * tasks; wait until they have handed theirs to fn and returned. */
void rn_wait_drains_(struct tw_runner *r)
{
    pthread_mutex_lock(&r->drain_lock);
    while (r->drainers)
        pthread_cond_wait(&r->drain_done, &r->drain_lock);
    pthread_mutex_unlock(&r->drain_lock);
}

/* Drain the shards one by one. *spare is an empty instance: it replaces the
 * shard's, and the shard's, drained with no lock held (fn may call back in,
 * nothing is copied), is empty afterwards (fn cannot reach it) and becomes
 * the spare for the next shard. So the only allocation that can fail a
 * drain is the first spare (tw_tasks_drain's shrink and compaction of each
 * drained shard may allocate too, but carry on when that fails). */
static int64_t rn_drain_shards(struct tw_runner *r, struct tw_tasks **spare, tw_tasks_fn *fn,
                               void *ctx)
{
    int64_t total = 0;
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *s = &r->shards[i];
        rn_lock(s);
        if (s->closed) {
            rn_unlock(s);
            return total ? total : TW_ECLOSED;
        }
        struct tw_tasks *old = s->tasks;
        /* Empty: this only sets its time (on the shard's own clock: the
         * shards' offsets never decrease with i, so the spare, made at
         * shard 0's origin or taken from the shard before, only moves
         * forward). If it is already later (the spare came from a shard the
         * tick thread had advanced further), it stays so: shard times differ
         * only while the tick thread goes round the shards and none is past
         * its last tick, so sets here are armed as in a shard it has already
         * advanced. */
        tw_tasks_advance(*spare, tw_tasks_now(old));
        s->tasks = *spare;
        rn_pending_sub(r, s, tw_tasks_pending(old));
        rn_unlock(s);
        int64_t n = rn_drain_instance_(old, s->off, fn, ctx);
        *spare = old;
        atomic_fetch_add_explicit(&r->drained, (uint64_t)n, memory_order_relaxed);
        total += n;
    }
    return total;
}

int64_t tw_runner_drain(struct tw_runner *r, tw_tasks_fn *fn, void *ctx)
{
    if (!r)
        return TW_EINVAL;
    if (!fn) {
        fn = r->execute;
        ctx = r->ctx;
    }
    struct rn_drainer me;
    rn_drain_enter(r, &me);
    /* The only allocation that can fail the drain, made before anything
     * is drained: when it fails the runner is left as it was (TW_ENOMEM). */
    struct tw_tasks *spare;
    int64_t total = tw_tasks_new(&spare, &r->tcfg);
    if (total == 0) {
        total = rn_drain_shards(r, &spare, fn, ctx);
        tw_tasks_free(spare);
    }
    rn_drain_leave(r, &me);
    return total;
}
