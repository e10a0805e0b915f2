/* SPDX-License-Identifier: MIT */
/* twheel runner: tw_runner, the thread-safe service around keyed tasks.
 *
 * Threads and locks
 * -----------------
 *   shard[i].lock  guards shard[i].tasks and shard[i].closed. Held by a
 *                  producer for one tw_tasks call, by the tick thread for one
 *                  tw_tasks_advance_max(..., BATCH) (it pops at most BATCH
 *                  due tasks, copied out, but also does the wheel's cascades
 *                  on the way and, now and then, the index shrink and pool
 *                  compaction: O(that shard's tasks), amortised O(1)) or to
 *                  read the next expiry. Never held while user code runs.
 *   ctl            guards `stopping` and is the tick thread's sleep mutex
 *                  (tick_cv, CLOCK_MONOTONIC).
 *   q              guards the ring of fired tasks waiting for a worker.
 *   stop_lock      serialises stop/free.
 *   drain_lock     guards the list of threads inside tw_runner_drain
 *                  (drain_done: signalled when it becomes empty).
 * Lock order: stop_lock -> shard -> (nothing); stop_lock -> drain_lock;
 * ctl, q and drain_lock are leaves.
 * On a shared clock or pool (twheel/clock.h) three more edges, all into
 * the other objects' leaf locks: shard -> clock (a producer's
 * tw_clock_wake, under the shard lock so that stop, which closes the
 * shards before it leaves the clock, never frees the member under it),
 * q -> clock (a pool thread waking a run that stopped on a full ring) and
 * q -> pool (posting the runner to the pool). The clock run takes shard
 * and q locks one at a time, never with the clock's lock; pool threads
 * call rn_pool_work_ (execute.c) without the pool's lock.
 *
 * Without a tick thread (config.clock): rn_clock_run_ (on_clock.c) does one
 * bounded round of the tick thread's loop per turn on the clock's thread
 * and returns its next deadline; sleep_until stays 0, and producers wake
 * the clock instead of kicking tick_cv.
 *
 * Drains in progress: each tw_runner_drain links a record of its thread, on
 * its own stack, into `drainers` for its whole length. stop and free from a
 * listed thread (from drain's fn, which runs on it) are refused with
 * TW_EBUSY, since that drain still uses the runner after fn returns; a stop
 * from any other thread closes the shards (so no drain takes more tasks) and
 * then waits for the list to empty, so that free after it is safe.
 *
 * Waking the tick thread: `sleep_until` (atomic) is the tick it will sleep
 * until: 0 while it is awake or has been kicked, UINT64_MAX while it is
 * computing its next deadline. A producer that arms a deadline earlier than
 * sleep_until (read under the shard lock) swaps it to 0 and, if it won the
 * swap, signals tick_cv under ctl. The tick thread stores UINT64_MAX before
 * reading the shards' next expiries and installs the result with a CAS from
 * UINT64_MAX, so an arming either is seen by that scan or sees a value that
 * makes it kick; the sleep loop re-checks sleep_until under ctl, so no kick
 * is lost. While the thread is awake (0) producers do not touch ctl at all.
 * The tick it sleeps until is the shards' next work (tw_tasks_next_work),
 * not only their next expiry: once moves have pushed tasks back lazily,
 * the walks that move them (twheel/wheel.h, "Moves per advance") step at
 * least every 64 ticks, and a thread that slept until the next expiry
 * would make all their moves in the one pass that reaches the walked slot
 * (milliseconds at 10^6 keys, under each shard's lock in turn). The first
 * lazy move while the thread sleeps further than that kicks it
 * (rn_work_kick); tw_runner_stats.worst_tick_cpu_ns reports the dearest
 * pass. On a shared clock the same: clock_next is the tick the last run
 * asked for (UINT64_MAX while a run reads the shards, as sleep_until is
 * while the tick thread does), and such a move lowers the member's due
 * (tw_clock_wake) instead of kicking.
 *
 * Order across shards: each round finds the earliest next expiry over all
 * shards and advances every shard to it, so tasks due at earlier ticks are
 * dispatched before later ones even while catching up after a stall.
 *
 * One hash a call: a keyed call hashes its key once (keyed.c, rn_key), with
 * the runner's seed, which every shard's tw_tasks instance shares; the
 * shard comes from that hash times an odd constant (rn_shard_index) and the
 * hash goes down to the shard's index with the call (tasks/internal.h), as
 * does its due tick, absolute on the runner's clock from the start (due +
 * the shard's off), and its slack. Every set, single or batched, goes
 * through rn_set_in_shard, which admits a new key (max_pending) before
 * anything is inserted. The batched calls' prefetching path (tw_tasks'
 * *_many) hashes each key a second time, in its look-ahead stage.
 *
 * Many producers
 * --------------
 * A producer call cannot be deferred (it returns its true result, and its
 * effect must be ordered after the same thread's earlier calls), so producers
 * do not buffer: each call does its tw_tasks operation at once, under the one
 * shard lock its key hashes to. (A command queue drained by one owner thread
 * applies no more calls than this with two producers; with one it applies
 * more, but its saturated owner fires late and spins a core, and no call
 * could return its result.) What a call costs other threads, with the
 * default max_pending = 0 (counted from the code; `contended` in
 * tw_runner_stats counts the waits):
 *
 *   per set / move / remove         count  written by other threads too?
 *   locks taken                       1    the key's shard lock only
 *   shard line (lock, tasks, off)     1    yes, by calls on keys of that shard
 *   tw_tasks header (free list,       1    yes, same shard only (set of a new
 *     live/used counts)                      key, remove; move writes none)
 *   index slot line of the key        1    same shard only (set new, remove)
 *   the key's entry                  1-2   calls on the same key only
 *   wheel: slot head + bookkeeping    2    same shard only
 *   wheel neighbours (un)linked      0-3   same shard only (entries of
 *                                          other keys in the same list)
 *   runner config (shards, seed,      2    never written after tw_runner_new
 *     clock origin, tick): read only       (padded off the written fields)
 *   sleep_until: read only            1    by the tick thread, <= 3 times a tick
 *   ctl (the tick thread's mutex)     0    only by the first call, per sleep
 *                                          of the tick thread, that arms a
 *                                          deadline earlier than its wake-up
 *   runner-wide counters              0    (fired/late/worst: written by the
 *                                          thread that runs the callback, not
 *                                          by producers; contended: the
 *                                          shard's own line)
 *   max_pending counter (pending)     0    with max_pending: one CAS or add
 *                                          per room_chunk calls of a shard
 *                                          (see below), never per call
 *   the clock member's `due`          1    on a shared clock only: read (one
 *     (config.clock): read only            atomic load) by a set/move; written
 *                                          by the clock thread per run and by
 *                                          the first set per sleep that arms
 *                                          an earlier deadline
 *
 * So a call writes at most ~10 lines, all of one shard (plus the key's own
 * entry), and none that every call writes: the count does not depend on the
 * number of producers. What grows with producers P over S shards is only the
 * chance that a call meets another thread on its shard: about
 * (P - 1) * u / S, u being the share of a producer's time spent inside the
 * lock (< 1). The default S is 8 per online CPU (16 at least), so with up to
 * one producer per core that chance stays below 1/8 whatever the core count,
 * and a meeting costs a short spin (rn_lock: RN_SPIN tries before a futex
 * sleep), not a sleep and a wake-up. The shard lines a call writes move from
 * the core that touched that shard last, as the keys themselves do: one
 * transfer per line per call, whatever P is.
 *
 * Batched calls (tw_runner_*_many) take each shard's lock once per group of
 * up to RN_GROUP items: a group of m items on S shards takes at most
 * min(m, S) locks, not m, and writes each shard's lock line and tw_tasks
 * header once per group; the per-key lines are as above.
 *
 * The one runner-wide line a producer may write: with max_pending != 0, the
 * admission counter `pending`. A set of a new key takes a unit of its
 * shard's reserved room and a leaving task gives one back, under the shard
 * lock; the shard moves room to or from `pending` only a chunk at a time
 * (room_chunk = max_pending / (2 * shards), 1 to 64; see admission.c), so that
 * line is written about once per chunk of calls of a shard, whatever the
 * number of producers. tw_runner_stats.shared_writes counts those writes
 * (test_runner_clock checks the bound). The price is TW_EFULL's precision
 * under concurrency, documented in docs/contracts.md.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_condattr_setclock */
#endif
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "runner/internal.h"
#include "common/random.h"
#include "twheel/wheel.h"

/* Shards by default: RN_SHARDS_PER_CPU per online CPU, at
 * least RN_MIN_DEFAULT_SHARDS, at most RN_MAX_SHARDS (the design comment
 * above gives the reasons). */
static unsigned rn_default_shards(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        cpus = 1;
    uint64_t n = (uint64_t)cpus * RN_SHARDS_PER_CPU;
    if (n < RN_MIN_DEFAULT_SHARDS)
        n = RN_MIN_DEFAULT_SHARDS;
    if (n > RN_MAX_SHARDS)
        n = RN_MAX_SHARDS;
    return (unsigned)n;
}

/* Staggered shard clocks. When a wheel reaches the first tick of an upper
 * level's slot it moves that whole slot down at once (tens of thousands of
 * tasks with 10^6 pending), and fires due at that tick wait for it. Were all
 * shards on the runner's clock, their slots would come due at the same tick
 * and those moves would add up into one long stall (over 10 ms with 10^6
 * tasks over 16 shards). So shard i counts ticks from its own origin, `off`
 * ticks ahead, whose digit at each of the first RN_STAGGER_LEVELS levels is
 * i * 64 / nshards: the shards' boundaries at those levels fall on different
 * ticks and the moves are spread out. Exactness is untouched: a task due at
 * runner tick d is armed at d + off and fires when its shard reaches it. */
#define RN_STAGGER_LEVELS 4
static uint64_t rn_stagger(unsigned i, unsigned nshards)
{
    uint64_t digit = (uint64_t)i * TW_WHEEL_SLOTS / nshards % TW_WHEEL_SLOTS, off = 0;
    for (unsigned l = 0; l < RN_STAGGER_LEVELS; l++)
        off = off * TW_WHEEL_SLOTS + digit;
    return off;
}

/* ---- lifetime -------------------------------------------------------------------- */

/* Free what tw_runner_new built (threads already joined). */
void rn_destroy_(struct tw_runner *r)
{
    if (r->own_pool) /* joined by rn_join_all_; no user, not one of its threads */
        tw_pool_destroy_(r->pool);
    if (r->shards) {
        for (unsigned i = 0; i < r->nshards; i++) {
            tw_tasks_free(r->shards[i].tasks); /* NULL after stop: a no-op */
            if (r->shards[i].lock_ready)
                pthread_mutex_destroy(&r->shards[i].lock);
        }
        rn_mem(r, r->shards, r->nshards * sizeof *r->shards, 0);
    }
    if (r->ring)
        rn_mem(r, r->ring, r->qcap * sizeof *r->ring, 0);
    if (r->batch)
        rn_mem(r, r->batch, RN_BATCH * sizeof *r->batch, 0);
    if (r->workers)
        rn_mem(r, r->workers, r->nworkers * sizeof *r->workers, 0);
    if (r->ready & RN_CTL)
        pthread_mutex_destroy(&r->ctl);
    if (r->ready & RN_TICK_CV)
        pthread_cond_destroy(&r->tick_cv);
    if (r->ready & RN_Q)
        pthread_mutex_destroy(&r->q);
    if (r->ready & RN_Q_NONEMPTY)
        pthread_cond_destroy(&r->q_nonempty);
    if (r->ready & RN_Q_NONFULL)
        pthread_cond_destroy(&r->q_nonfull);
    if (r->ready & RN_STOP_LOCK)
        pthread_mutex_destroy(&r->stop_lock);
    if (r->ready & RN_DRAIN_LOCK)
        pthread_mutex_destroy(&r->drain_lock);
    if (r->ready & RN_DRAIN_DONE)
        pthread_cond_destroy(&r->drain_done);
    tw_mem_free_(&r->alloc, r, sizeof *r);
}

static int rn_mutex_init(struct tw_runner *r, pthread_mutex_t *m, unsigned bit)
{
    if (pthread_mutex_init(m, NULL))
        return 0;
    r->ready |= bit;
    return 1;
}

static int rn_cond_init(struct tw_runner *r, pthread_cond_t *c, unsigned bit)
{
    if (pthread_cond_init(c, NULL))
        return 0;
    r->ready |= bit;
    return 1;
}

/* tick_cv waits on CLOCK_MONOTONIC (tick instants are on that clock). */
static int rn_tick_cv_init(struct tw_runner *r)
{
    if (tw_cond_init_mono_(&r->tick_cv))
        return 0;
    r->ready |= RN_TICK_CV;
    return 1;
}

/* Every lock and condition, one at a time, each noted in r->ready. */
static int rn_init_sync(struct tw_runner *r)
{
    return rn_mutex_init(r, &r->ctl, RN_CTL) && rn_tick_cv_init(r) &&
           rn_mutex_init(r, &r->q, RN_Q) && rn_cond_init(r, &r->q_nonempty, RN_Q_NONEMPTY) &&
           rn_cond_init(r, &r->q_nonfull, RN_Q_NONFULL) &&
           rn_mutex_init(r, &r->stop_lock, RN_STOP_LOCK) &&
           rn_mutex_init(r, &r->drain_lock, RN_DRAIN_LOCK) &&
           rn_cond_init(r, &r->drain_done, RN_DRAIN_DONE);
}

int tw_runner_new(struct tw_runner **out, const struct tw_runner_config *cfg)
{
    if (!out)
        return TW_EINVAL;
    *out = NULL;
    if (!cfg || !cfg->execute || cfg->tick_ns < 1000 || cfg->shards > RN_MAX_SHARDS ||
        (cfg->key_kind != TW_TASKS_KEY_BYTES && cfg->key_kind != TW_TASKS_KEY_INT) ||
        (cfg->allocator && !cfg->allocator->fn) || cfg->workers > TW_RUNNER_WORKERS_MAX ||
        cfg->queue > TW_RUNNER_QUEUE_MAX || cfg->slack_shift > TW_TASKS_SLACK_SHIFT_MAX ||
        (cfg->pool && cfg->workers) || (cfg->clock && !cfg->pool && !cfg->workers))
        return TW_EINVAL;
    struct tw_runner *r = tw_mem_new_(cfg->allocator, sizeof *r, offsetof(struct tw_runner, alloc));
    if (!r)
        return TW_ENOMEM;
    r->execute = cfg->execute;
    r->ctx = cfg->ctx;
    r->release = cfg->release;
    r->tick_ns = cfg->tick_ns;
    r->max_pending = cfg->max_pending;
    r->slack_shift = cfg->slack_shift;
    r->lazy = !cfg->slack_shift && !cfg->eager_rearm;
    r->int_keys = cfg->key_kind == TW_TASKS_KEY_INT;
    r->nshards = cfg->shards ? cfg->shards : rn_default_shards();
    r->room_chunk = r->max_pending / (2 * (size_t)r->nshards);
    r->room_chunk = r->room_chunk < 1 ? 1 : r->room_chunk > 64 ? 64 : r->room_chunk;
    r->clock = cfg->clock;
    r->pool = cfg->pool;
    r->qcap = cfg->queue ? cfg->queue : r->pool || r->clock ? RN_POOLED_QUEUE : RN_DEFAULT_QUEUE;
    /* On a clock, config.workers are the threads of a pool of the runner's
     * own (so the clock run never waits: see rn_clock_run_). */
    r->nworkers = r->clock ? 0 : cfg->workers;
    uint64_t seed[2];
    tw_random_seed_(seed);
    r->k0 = seed[0] | !(seed[0] | seed[1]); /* {0, 0} would make the shards draw their own */
    r->k1 = seed[1];
    atomic_init(&r->sleep_until, 0);
    atomic_init(&r->clock_next, UINT64_MAX); /* no run yet: any lazy move may wake it */
    atomic_init(&r->pending, 0);
    atomic_init(&r->fired, 0);
    atomic_init(&r->late, 0);
    atomic_init(&r->worst_ns, 0);
    atomic_init(&r->drained, 0);
    atomic_init(&r->tick, 0);
    atomic_init(&r->stopper_set, 0);
    atomic_init(&r->stopped, 0);

    int rc = TW_ESYS;
    if (!rn_init_sync(r))
        goto fail;

    rc = TW_ENOMEM;
    /* The batch: the tick thread's (a clock run writes into the ring). */
    r->batch = r->clock ? NULL : rn_mem(r, NULL, 0, RN_BATCH * sizeof *r->batch);
    int ring = r->nworkers || r->pool || r->clock;
    r->ring = ring ? rn_mem(r, NULL, 0, r->qcap * sizeof *r->ring) : NULL;
    r->workers = r->nworkers ? rn_mem(r, NULL, 0, r->nworkers * sizeof *r->workers) : NULL;
    r->shards = rn_mem(r, NULL, 0, r->nshards * sizeof *r->shards);
    if (r->shards)
        memset(r->shards, 0, r->nshards * sizeof *r->shards);
    if ((!r->clock && !r->batch) || !r->shards || (ring && !r->ring) ||
        (r->nworkers && !r->workers))
        goto fail;
    r->tcfg = (struct tw_tasks_config){
        .execute = rn_collect_,
        .ctx = r,
        .key_kind = cfg->key_kind,
        .eager_rearm = cfg->eager_rearm,
        /* The runner's: a call hashes its key once, for its shard and for
         * that shard's index (tasks/internal.h). */
        .seed = {r->k0, r->k1},
        /* Our copy: drain makes new instances long after cfg is gone. */
        .allocator = cfg->allocator ? &r->alloc : NULL,
    };
    for (unsigned i = 0; i < r->nshards; i++) {
        struct tw_tasks_config tc = r->tcfg;
        tc.now = r->shards[i].off = rn_stagger(i, r->nshards);
        int e = tw_tasks_new(&r->shards[i].tasks, &tc);
        if (e) {
            rc = e;
            goto fail;
        }
        if (pthread_mutex_init(&r->shards[i].lock, NULL)) {
            rc = TW_ESYS;
            goto fail;
        }
        r->shards[i].lock_ready = 1;
    }
    r->start_ns = tw_mono_ns_();
    if (r->clock && !r->pool) {
        rc = tw_pool_new(&r->pool, cfg->workers, cfg->allocator ? &r->alloc : NULL);
        if (rc) {
            r->pool = NULL;
            goto fail;
        }
        r->own_pool = 1;
    }
    if (r->pool) {
        r->client.work = rn_pool_work_;
        tw_pool_attach_(r->pool, &r->client);
        r->pool_attached = 1;
    }
    if (r->clock) { /* the last step: from here on it may run */
        rc = tw_clock_join(r->clock, rn_clock_run_, r, TW_CLOCK_NEVER, &r->member);
        if (rc) {
            r->member = NULL;
            goto fail;
        }
        *out = r;
        return 0;
    }
    rc = TW_ESYS;
    for (unsigned i = 0; i < r->nworkers; i++) {
        if (pthread_create(&r->workers[i], NULL, rn_worker_, r))
            goto fail;
        r->workers_started++;
    }
    if (pthread_create(&r->tick_thread, NULL, rn_tick_main_, r))
        goto fail;
    r->tick_started = 1;
    *out = r;
    return 0;
fail:
    rn_join_all_(r);
    rn_destroy_(r);
    return rc;
}
