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
 * call rn_pool_work without the pool's lock.
 *
 * Without a tick thread (config.clock): rn_clock_run, below, does one
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
 *
 * Order across shards: each round finds the earliest next expiry over all
 * shards and advances every shard to it, so tasks due at earlier ticks are
 * dispatched before later ones even while catching up after a stall.
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
 * (room_chunk = max_pending / (2 * shards), 1 to 64; see rn_admit), so that
 * line is written about once per chunk of calls of a shard, whatever the
 * number of producers. tw_runner_stats.shared_writes counts those writes
 * (test_runner_clock checks the bound). The price is TW_EFULL's precision
 * under concurrency, documented in runner.h.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthread_condattr_setclock */
#endif
#include "twheel/runner.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock/internal.h"
#include "common/alloc.h"
#include "common/hash.h"
#include "common/time.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif
#include "twheel/wheel.h"

#define RN_BATCH 64
#define RN_MIN_DEFAULT_SHARDS 16
#define RN_SHARDS_PER_CPU 8
#define RN_MAX_SHARDS 1024
#define RN_SPIN 128 /* tries of a held shard lock before sleeping on it */
#define RN_DEFAULT_QUEUE 1024
#define RN_POOLED_QUEUE 64   /* default queue of a runner on a pool */
#define RN_CLOCK_BUDGET 256  /* most tasks fired per run on a shared clock */

/* A fired task on its way to a callback: the key travels inline. */
struct rn_job {
    struct tw_task task;
    unsigned char key[TW_RUNNER_KEY_MAX];
};
/* TW_RUNNER_QUEUE_MAX is documented in these terms: the ring's bytes must not
 * wrap round. */
_Static_assert(sizeof(struct rn_job) == sizeof(struct tw_task) + TW_RUNNER_KEY_MAX,
               "TW_RUNNER_QUEUE_MAX counts a job's bytes right");

/* A thread inside tw_runner_drain (the record lives on its stack). */
struct rn_drainer {
    pthread_t thread;
    struct rn_drainer *next;
};

/* Bits of tw_runner.ready: which locks and conditions were initialised, so
 * that a failing tw_runner_new tears down only those. */
enum {
    RN_CTL = 1u << 0,
    RN_TICK_CV = 1u << 1,
    RN_Q = 1u << 2,
    RN_Q_NONEMPTY = 1u << 3,
    RN_Q_NONFULL = 1u << 4,
    RN_STOP_LOCK = 1u << 5,
    RN_DRAIN_LOCK = 1u << 6,
    RN_DRAIN_DONE = 1u << 7,
};

struct rn_shard {
    pthread_mutex_t lock;
    struct tw_tasks *tasks; /* under lock */
    uint64_t off;           /* under lock: tasks' tick = the runner's tick + off */
    int closed;             /* under lock */
    int lock_ready;         /* lock initialised (for teardown) */
    uint64_t contended;     /* under lock: acquisitions that found it held */
    size_t room;            /* under lock: max_pending room this shard reserved
                               from r->pending and has not used (rn_admit) */
    uint64_t room_moves;    /* under lock: writes of r->pending by this shard */
    char pad[64];           /* keep neighbours' locks off this cache line */
};

struct tw_runner {
    tw_tasks_fn *execute;
    void *ctx;
    tw_tasks_fn *release; /* optional: gets what stop drops (config.release) */
    uint64_t tick_ns;
    uint64_t start_ns;
    size_t max_pending;
    int int_keys;
    unsigned slack_shift; /* config.slack_shift: 0 = exact */
    uint64_t k0, k1; /* shard hash seed */
    struct tw_allocator alloc;
    struct tw_tasks_config tcfg; /* for the shards' instances */

    struct rn_shard *shards;
    unsigned nshards;

    /* Thread ids: written by tw_runner_new only (read by any thread). */
    pthread_t tick_thread;
    int tick_started;
    pthread_t *workers;
    unsigned nworkers, workers_started;
    int joined; /* under stop_lock */

    /* On a shared clock (config.clock) and/or a pool (config.pool, or a
     * private one for config.workers on a clock): written by tw_runner_new
     * (member: also by stop, after the shards are closed). */
    struct tw_clock *clock;
    struct tw_clock_member *member;
    struct tw_pool *pool;
    int own_pool, pool_attached; /* own_pool: freed by rn_destroy, not by stop */

    /* Every group written after tw_runner_new starts on a line of its own,
     * so that the fields above, which every producer call reads, stay
     * shared in every core's cache (see the design comment's table). */
    char pad_config[64];
    pthread_mutex_t ctl;
    pthread_cond_t tick_cv;
    int stopping; /* under ctl */
    _Atomic uint64_t sleep_until;

    /* tick thread only (written for every fired task: off the line of
     * sleep_until, which producers read on every set and move) */
    char pad_tick[64];
    struct rn_job *batch;
    unsigned nbatch;
    uint64_t collect_off; /* off of the shard being advanced */
    struct rn_shard *collect_shard; /* ... and the shard itself */

    pthread_mutex_t q;
    pthread_cond_t q_nonempty, q_nonfull;
    struct rn_job *ring; /* under q */
    size_t qcap, qhead, qcount;
    int q_quit;
    size_t inflight;  /* under q: jobs taken by pool threads, not finished */
    int q_blocked;    /* under q: the clock run stopped on a full ring */
    int clock_left;   /* under q: stop has left (or is leaving) the clock */
    size_t collect_tail; /* clock run only: ring slot of the next fired job */
    struct tw_pool_client client; /* written by pool threads: off the config line */

    pthread_mutex_t stop_lock;
    atomic_int stopped; /* written under stop_lock; read without it by stop */
    pthread_t stopper;        /* the thread inside tw_runner_stop, ... */
    atomic_int stopper_set;   /* ... valid when set (release/acquire) */

    pthread_mutex_t drain_lock;
    pthread_cond_t drain_done;    /* signalled when drainers becomes NULL */
    struct rn_drainer *drainers;  /* under drain_lock: threads inside drain */

    unsigned ready; /* RN_* bits; written by tw_runner_new only */

    char pad_pending[64];
    _Atomic size_t pending; /* max_pending only: tasks + every shard's room */
    size_t room_chunk;      /* room a shard reserves at a time (rn_admit) */
    char pad_figures[64];   /* pending: producers; these: workers and the tick thread */
    _Atomic uint64_t fired, late, worst_ns, drained, tick;
};

/* ---- shard locks ---------------------------------------------------------------- */

static inline void rn_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Take a shard's lock. A shard is held for a fraction of a microsecond (one
 * tw_tasks call, or one bounded advance of the tick thread), so a thread that
 * finds it held tries again RN_SPIN times, pausing in between, before it
 * sleeps in the kernel: a futex sleep and wake-up would cost ten times the
 * wait. Acquisitions that found the lock held are counted (under the lock,
 * on the shard's own line) for tw_runner_stats. */
static inline void rn_lock(struct rn_shard *s)
{
    if (pthread_mutex_trylock(&s->lock) == 0)
        return;
    for (unsigned i = 0; i < RN_SPIN; i++) {
        rn_cpu_relax();
        if (pthread_mutex_trylock(&s->lock) == 0)
            goto won;
    }
    pthread_mutex_lock(&s->lock);
won:
    s->contended++;
}

static inline void rn_unlock(struct rn_shard *s)
{
    pthread_mutex_unlock(&s->lock);
}

/* Shards by default: RN_SHARDS_PER_CPU per online CPU, at
 * least RN_MIN_DEFAULT_SHARDS, at most RN_MAX_SHARDS (see runner.h). */
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

/* ---- small helpers ----------------------------------------------------------- */

static inline void *rn_mem(struct tw_runner *r, void *p, size_t old_size, size_t new_size)
{
    return tw_mem_(&r->alloc, p, old_size, new_size);
}

/* The first tick at or after now + delay_ns. */
static inline uint64_t rn_due_tick(const struct tw_runner *r, int64_t delay_ns)
{
    return tw_ticks_up_(tw_mono_ns_() - r->start_ns + (uint64_t)delay_ns, r->tick_ns);
}

/* Slack (config.slack_shift): a task set or moved with delay_ns may run up
 * to (delay_ns >> slack_shift) / tick_ns ticks after its due tick. It is
 * computed here from the caller's delay, and given to the shard's tw_tasks by
 * its *_slack calls, because the delay a shard sees is counted from the
 * shard's time, which lags the clock while the tick thread sleeps: a fraction
 * of that would be too large. */
static inline uint64_t rn_slack_ticks(const struct tw_runner *r, int64_t delay_ns)
{
    return ((uint64_t)delay_ns >> r->slack_shift) / r->tick_ns;
}

static inline struct rn_shard *rn_shard_of(const struct tw_runner *r, uint64_t h)
{
    return &r->shards[tw_hash_home(h, r->nshards)];
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

/* A shard's time on the runner's clock (shard lock held). */
static inline uint64_t rn_shard_now(const struct rn_shard *s)
{
    return tw_tasks_now(s->tasks) - s->off;
}

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

static int64_t rn_drain_instance(struct tw_tasks *t, uint64_t off, tw_tasks_fn *fn, void *ctx)
{
    struct rn_relay d = {fn, ctx, off};
    return tw_tasks_drain(t, rn_relay_task, &d);
}

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

/* A producer armed `deadline`; `sleeping` is sleep_until as read under the
 * shard lock. */
static void rn_kick(struct tw_runner *r, uint64_t deadline, uint64_t sleeping)
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

/* On a shared clock: a producer armed runner tick `deadline`. Called under
 * the shard lock, so that stop, which closes every shard before it leaves
 * the clock, never frees the member under a waker. One atomic load when the
 * clock already runs us by then (tw_clock_wake). */
static void rn_clock_wake(struct tw_runner *r, uint64_t deadline)
{
    tw_clock_wake(r->clock, r->member, r->start_ns + deadline * r->tick_ns);
}

/* ---- max_pending: admission room reserved per shard --------------------------------
 * r->pending counts the tasks pending plus the room the shards have reserved
 * and not used, and never exceeds max_pending. A set of a new key takes one
 * unit of its shard's room (under the shard lock, no shared write); only when
 * the shard has none does it reserve a chunk (room_chunk, at most
 * max_pending / (2 * shards), 1 to 64) from r->pending with a CAS. A task
 * that leaves (fired, removed, drained) gives its unit back to its shard's
 * room, and a shard holding more than two chunks returns the excess. So the
 * shared line is written about once per chunk of calls of a shard, not per
 * call. When r->pending is full, the set first takes back the room of every
 * other shard whose lock is free at that moment (trylock: never waits, no
 * lock order issue) and tries once more; a single call that is still
 * refused then drops its lock, takes back every shard's room one lock at a
 * time (rn_room_sweep) and tries a last time. So a single set's TW_EFULL
 * means the limit was reached at some instant of the call, counting the
 * room that concurrent sets reserved meanwhile (exact with one producer);
 * a batched set (rn_set_limited, under its group's lock) only does the
 * trylock pass, so it may be refused while up to 2 * room_chunk units per
 * busy shard are reserved and unused. */

static void rn_room_take_back(struct tw_runner *r, struct rn_shard *o)
{
    if (o->room) {
        atomic_fetch_sub_explicit(&r->pending, o->room, memory_order_relaxed);
        o->room = 0;
        o->room_moves++;
    }
}

/* With mine's lock held: the other shards whose lock is free now. */
static void rn_room_reclaim(struct tw_runner *r, struct rn_shard *mine)
{
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *o = &r->shards[i];
        if (o == mine || pthread_mutex_trylock(&o->lock) != 0)
            continue;
        rn_room_take_back(r, o);
        pthread_mutex_unlock(&o->lock);
    }
}

/* With no lock held: every shard, one lock at a time. */
static void rn_room_sweep(struct tw_runner *r)
{
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *o = &r->shards[i];
        rn_lock(o);
        rn_room_take_back(r, o);
        rn_unlock(o);
    }
}

static int rn_room_reserve(struct tw_runner *r, struct rn_shard *s)
{
    size_t cur = atomic_load_explicit(&r->pending, memory_order_relaxed);
    while (cur < r->max_pending) {
        size_t grab = r->max_pending - cur;
        if (grab > r->room_chunk)
            grab = r->room_chunk;
        if (atomic_compare_exchange_weak_explicit(&r->pending, &cur, cur + grab,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            s->room += grab;
            s->room_moves++;
            return 1;
        }
    }
    return 0;
}

/* A set made key new in shard s (lock held): 1 if it may stay, 0 if
 * max_pending is reached (the caller takes the key out: TW_EFULL). */
static int rn_admit(struct tw_runner *r, struct rn_shard *s)
{
    if (!s->room && !rn_room_reserve(r, s)) {
        rn_room_reclaim(r, s);
        if (!rn_room_reserve(r, s))
            return 0;
    }
    s->room--;
    return 1;
}

/* n tasks left shard s (lock held): their room goes back to it. */
static void rn_pending_sub(struct tw_runner *r, struct rn_shard *s, size_t n)
{
    if (!r->max_pending || !n)
        return;
    s->room += n;
    if (s->room > 2 * r->room_chunk) {
        size_t give = s->room - r->room_chunk;
        s->room -= give;
        s->room_moves++;
        atomic_fetch_sub_explicit(&r->pending, give, memory_order_relaxed);
    }
}

/* ---- running callbacks -------------------------------------------------------- */

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
           !atomic_compare_exchange_weak_explicit(&r->worst_ns, &worst, late,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    r->execute(r->ctx, &job->task);
}

static void *rn_worker(void *arg)
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
static void rn_dispatch(struct tw_runner *r)
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
static void rn_pool_work(struct tw_pool_client *c)
{
    struct tw_runner *r = (struct tw_runner *)(void *)((char *)c - offsetof(struct tw_runner, client));
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
static void rn_collect(void *ctx, const struct tw_task *task)
{
    struct tw_runner *r = ctx;
    /* On a clock the run reserved ring slots from collect_tail on (see
     * rn_clock_advance_shard); else the tick thread's batch. */
    struct rn_job *job = r->clock ? &r->ring[(r->collect_tail + r->nbatch++) % r->qcap]
                                  : &r->batch[r->nbatch++];
    job->task = *task;
    job->task.deadline -= r->collect_off;
    if (task->key) {
        memcpy(job->key, task->key, task->key_len);
        job->task.key = job->key;
    }
    rn_pending_sub(r, r->collect_shard, 1);
}

/* ---- the tick thread ----------------------------------------------------------- */

static uint64_t rn_next_expiry(struct tw_runner *r)
{
    uint64_t next = TW_NEVER;
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *s = &r->shards[i];
        rn_lock(s);
        uint64_t e = tw_tasks_next_expiry(s->tasks);
        if (e != TW_NEVER)
            e -= s->off;
        rn_unlock(s);
        if (e < next)
            next = e;
    }
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
            rn_dispatch(r);
    } while (n == RN_BATCH);
}

/* Run everything due by tick `target`, earliest ticks first across shards. */
static void rn_run_due(struct tw_runner *r, uint64_t target)
{
    for (;;) {
        uint64_t t = rn_next_expiry(r);
        if (t > target)
            break;
        for (unsigned i = 0; i < r->nshards; i++)
            rn_advance_shard(r, &r->shards[i], t);
    }
    for (unsigned i = 0; i < r->nshards; i++) /* move time on; fires what raced in */
        rn_advance_shard(r, &r->shards[i], target);
    atomic_store_explicit(&r->tick, target, memory_order_relaxed);
}

static void *rn_tick_main(void *arg)
{
    struct tw_runner *r = arg;
#if defined(PR_SET_TIMERSLACK)
    /* Linux lets a sleep of an ordinary thread end up to 50 us late (timer
     * slack), to batch wake-ups; the tick thread sleeps to a tick boundary
     * and every task due then waits for it, so it asks for none. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    for (;;) {
        uint64_t now_tick = (tw_mono_ns_() - r->start_ns) / r->tick_ns;
        rn_run_due(r, now_tick);

        atomic_store(&r->sleep_until, UINT64_MAX);
        uint64_t next = rn_next_expiry(r);
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

/* ---- on a shared clock ------------------------------------------------------------ */
/* The runner as a member of a tw_clock: the clock's thread calls
 * rn_clock_run, which does what one round of rn_tick_main does, but bounded
 * (RN_CLOCK_BUDGET tasks; then it asks to run again at once, so the clock's
 * other members get their turn) and without ever waiting: fired tasks go
 * straight into ring slots reserved under q (no batch copy); when the ring
 * is full the run stops, sets q_blocked, and the pool thread that frees a
 * slot wakes the member (rn_pool_work). Due tasks then stay in the wheel,
 * still removable, as with a tick thread that waits for its workers. A run
 * that stopped half way recomputes the earliest expiry next time, so ticks
 * are still processed in order across shards. */

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

static uint64_t rn_clock_run(void *ctx, uint64_t now_ns)
{
    struct tw_runner *r = ctx;
    uint64_t now_tick = now_ns > r->start_ns ? (now_ns - r->start_ns) / r->tick_ns : 0;
    /* Room for one round over every shard and the final pass even when
     * nothing fires, so a run that fires nothing always finishes. */
    unsigned budget = RN_CLOCK_BUDGET + 2 * r->nshards;
    uint64_t next;
    int rc;
    for (;;) {
        next = rn_next_expiry(r);
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
    return next == TW_NEVER ? TW_CLOCK_NEVER : r->start_ns + next * r->tick_ns;
out:
    /* Out of budget: again at once. Blocked: a pool thread wakes us. */
    return rc == RN_RUN_BUDGET ? now_ns : TW_CLOCK_NEVER;
}

/* ---- lifetime -------------------------------------------------------------------- */

static void rn_noop(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
}

/* Free what tw_runner_new built (threads already joined). */
static void rn_destroy(struct tw_runner *r)
{
    if (r->own_pool) /* joined by rn_join_all; no user, not one of its threads */
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

/* Join the threads that were started. Threads start only once every lock
 * and condition exists, so ctl and q are touched only if a thread uses them
 * (a tw_runner_new that failed before may not have them). */
static void rn_join_all(struct tw_runner *r)
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
     * until rn_destroy. Every stop reads r->pool before it takes stop_lock
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
    r->int_keys = cfg->key_kind == TW_TASKS_KEY_INT;
    r->nshards = cfg->shards ? cfg->shards : rn_default_shards();
    r->room_chunk = r->max_pending / (2 * (size_t)r->nshards);
    r->room_chunk = r->room_chunk < 1 ? 1 : r->room_chunk > 64 ? 64 : r->room_chunk;
    r->clock = cfg->clock;
    r->pool = cfg->pool;
    r->qcap = cfg->queue ? cfg->queue : r->pool || r->clock ? RN_POOLED_QUEUE : RN_DEFAULT_QUEUE;
    /* On a clock, config.workers are the threads of a pool of the runner's
     * own (so the clock run never waits: see rn_clock_run). */
    r->nworkers = r->clock ? 0 : cfg->workers;
    uint64_t seed[2];
    tw_random_seed_(seed);
    r->k0 = seed[0];
    r->k1 = seed[1];
    atomic_init(&r->sleep_until, 0);
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
        .execute = rn_collect,
        .ctx = r,
        .key_kind = cfg->key_kind,
        .eager_rearm = cfg->eager_rearm,
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
        r->client.work = rn_pool_work;
        tw_pool_attach_(r->pool, &r->client);
        r->pool_attached = 1;
    }
    if (r->clock) { /* the last step: from here on it may run */
        rc = tw_clock_join(r->clock, rn_clock_run, r, TW_CLOCK_NEVER, &r->member);
        if (rc) {
            r->member = NULL;
            goto fail;
        }
        *out = r;
        return 0;
    }
    rc = TW_ESYS;
    for (unsigned i = 0; i < r->nworkers; i++) {
        if (pthread_create(&r->workers[i], NULL, rn_worker, r))
            goto fail;
        r->workers_started++;
    }
    if (pthread_create(&r->tick_thread, NULL, rn_tick_main, r))
        goto fail;
    r->tick_started = 1;
    *out = r;
    return 0;
fail:
    rn_join_all(r);
    rn_destroy(r);
    return rc;
}

/* ---- operations ------------------------------------------------------------------ */

/* A validated key and its shard. */
struct rn_key {
    const void *p;
    size_t len;
    uint64_t num;
    struct rn_shard *shard;
};

static int rn_key_bytes(const struct tw_runner *r, const void *key, size_t len, struct rn_key *k)
{
    if (!r || !key || r->int_keys)
        return TW_EINVAL;
    if (len > TW_RUNNER_KEY_MAX)
        return TW_E2BIG;
    k->p = key;
    k->len = len;
    k->num = 0;
    k->shard = rn_shard_of(r, tw_siphash13(key, len, r->k0, r->k1));
    return 0;
}

static int rn_key_int(const struct tw_runner *r, uint64_t key, struct rn_key *k)
{
    if (!r || !r->int_keys)
        return TW_EINVAL;
    k->p = NULL;
    k->len = 0;
    k->num = key;
    k->shard = rn_shard_of(r, tw_hash_int(key, r->k0, r->k1));
    return 0;
}

enum rn_op { RN_SET, RN_MOVE, RN_REMOVE };

static int rn_apply(struct tw_runner *r, const struct rn_key *k, enum rn_op op, void *value,
                    void **out_value, int64_t delay_ns)
{
    if (op != RN_REMOVE && delay_ns < 0)
        return TW_EINVAL;
    uint64_t due = op == RN_REMOVE ? 0 : rn_due_tick(r, delay_ns);
    struct rn_shard *s = k->shard;
    int swept = 0;
again:
    rn_lock(s);
    if (s->closed) {
        rn_unlock(s);
        return TW_ECLOSED;
    }
    struct tw_tasks *t = s->tasks;
    uint64_t now = rn_shard_now(s);
    int64_t delay = due > now ? (int64_t)(due - now) : 0;
    uint64_t deadline = now + (delay ? (uint64_t)delay : 1);
    int rc;
    switch (op) {
    case RN_SET:
        if (__builtin_expect(r->slack_shift != 0, 0)) {
            uint64_t slack = rn_slack_ticks(r, delay_ns);
            rc = r->int_keys ? tw_tasks_set_slack_int(t, k->num, value, delay, slack)
                             : tw_tasks_set_slack(t, k->p, k->len, value, delay, slack);
        } else {
            rc = r->int_keys ? tw_tasks_set_int(t, k->num, value, delay)
                             : tw_tasks_set(t, k->p, k->len, value, delay);
        }
        if (rc == 1 && r->max_pending && !rn_admit(r, s)) {
            if (r->int_keys)
                tw_tasks_remove_int(t, k->num, NULL);
            else
                tw_tasks_remove(t, k->p, k->len, NULL);
            rc = TW_EFULL;
        }
        break;
    case RN_MOVE:
        if (__builtin_expect(r->slack_shift != 0, 0)) {
            uint64_t slack = rn_slack_ticks(r, delay_ns);
            rc = r->int_keys ? tw_tasks_move_slack_int(t, k->num, delay, slack)
                             : tw_tasks_move_slack(t, k->p, k->len, delay, slack);
        } else {
            rc = r->int_keys ? tw_tasks_move_int(t, k->num, delay)
                             : tw_tasks_move(t, k->p, k->len, delay);
        }
        break;
    default:
        rc = r->int_keys ? tw_tasks_remove_int(t, k->num, out_value)
                         : tw_tasks_remove(t, k->p, k->len, out_value);
        if (rc == 0)
            rn_pending_sub(r, s, 1);
        break;
    }
    if (r->clock && rc >= 0 && op != RN_REMOVE) /* under the lock: see rn_clock_wake */
        rn_clock_wake(r, deadline);
    if (rc == TW_EFULL && !swept) {
        /* Nothing changed (the key was taken out again). Take back every
         * shard's spare room, each lock alone, and try once more: so a
         * refusal means the limit was reached at some instant of the call
         * (exact for one producer). */
        rn_unlock(s);
        rn_room_sweep(r);
        swept = 1;
        goto again;
    }
    uint64_t sleeping = atomic_load_explicit(&r->sleep_until, memory_order_relaxed);
    rn_unlock(s);
    if (rc >= 0 && op != RN_REMOVE && deadline < sleeping)
        rn_kick(r, deadline, sleeping);
    return rc;
}

int tw_runner_set(struct tw_runner *r, const void *key, size_t key_len, void *value,
                  int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_bytes(r, key, key_len, &k);
    return rc ? rc : rn_apply(r, &k, RN_SET, value, NULL, delay_ns);
}

int tw_runner_set_int(struct tw_runner *r, uint64_t key, void *value, int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_int(r, key, &k);
    return rc ? rc : rn_apply(r, &k, RN_SET, value, NULL, delay_ns);
}

int tw_runner_move(struct tw_runner *r, const void *key, size_t key_len, int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_bytes(r, key, key_len, &k);
    return rc ? rc : rn_apply(r, &k, RN_MOVE, NULL, NULL, delay_ns);
}

int tw_runner_move_int(struct tw_runner *r, uint64_t key, int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_int(r, key, &k);
    return rc ? rc : rn_apply(r, &k, RN_MOVE, NULL, NULL, delay_ns);
}

int tw_runner_remove(struct tw_runner *r, const void *key, size_t key_len, void **value)
{
    struct rn_key k;
    int rc = rn_key_bytes(r, key, key_len, &k);
    return rc ? rc : rn_apply(r, &k, RN_REMOVE, NULL, value, 0);
}

int tw_runner_remove_int(struct tw_runner *r, uint64_t key, void **value)
{
    struct rn_key k;
    int rc = rn_key_int(r, key, &k);
    return rc ? rc : rn_apply(r, &k, RN_REMOVE, NULL, value, 0);
}

/* ---- batched calls ---------------------------------------------------------------- */
/* Items are taken RN_GROUP at a time: validated, their due ticks computed
 * from one clock read, grouped by shard (a stable counting sort, so items
 * of one key keep their order), and each shard's group applied under one
 * acquisition of its lock with tw_tasks' batched call (which prefetches the
 * next keys' slots and entries). With max_pending, sets go one by one under
 * that lock, since a refused new key must be taken out before the next item
 * of the same key is applied. */
#define RN_GROUP 256

static uint64_t rn_item_shard(const struct tw_runner *r, const struct tw_runner_item *it)
{
    uint64_t h = r->int_keys ? tw_hash_int(it->key_int, r->k0, r->k1)
                             : tw_siphash13(it->key, it->key_len, r->k0, r->k1);
    return tw_hash_home(h, r->nshards);
}

/* Sets of one shard's group one by one, as rn_apply does (max_pending, or
 * slack: each item's slack in ticks is in its `deadline` field, unused by a
 * set). */
static void rn_set_limited(struct tw_runner *r, struct rn_shard *s, struct tw_tasks_item *it,
                           size_t m)
{
    struct tw_tasks *t = s->tasks;
    for (size_t i = 0; i < m; i++) {
        int rc;
        if (r->slack_shift)
            rc = r->int_keys ? tw_tasks_set_slack_int(t, it[i].key_int, it[i].value,
                                                      it[i].delay_ticks, it[i].deadline)
                             : tw_tasks_set_slack(t, it[i].key, it[i].key_len, it[i].value,
                                                  it[i].delay_ticks, it[i].deadline);
        else
            rc = r->int_keys
                     ? tw_tasks_set_int(t, it[i].key_int, it[i].value, it[i].delay_ticks)
                     : tw_tasks_set(t, it[i].key, it[i].key_len, it[i].value, it[i].delay_ticks);
        if (rc == 1 && r->max_pending && !rn_admit(r, s)) {
            if (r->int_keys)
                tw_tasks_remove_int(t, it[i].key_int, NULL);
            else
                tw_tasks_remove(t, it[i].key, it[i].key_len, NULL);
            rc = TW_EFULL;
        }
        it[i].result = rc;
    }
}

/* One shard's group, copied into tmp[0..m) with `delay_ticks` holding due ticks. */
static void rn_apply_group(struct tw_runner *r, struct rn_shard *s, struct tw_tasks_item *tmp,
                           size_t m, enum rn_op op)
{
    rn_lock(s);
    if (s->closed) {
        rn_unlock(s);
        for (size_t i = 0; i < m; i++)
            tmp[i].result = TW_ECLOSED;
        return;
    }
    struct tw_tasks *t = s->tasks;
    uint64_t now = rn_shard_now(s), earliest = UINT64_MAX;
    for (size_t i = 0; i < m; i++) { /* due tick -> delay from the shard's now */
        uint64_t due = (uint64_t)tmp[i].delay_ticks;
        tmp[i].delay_ticks = due > now ? (int64_t)(due - now) : 0;
        uint64_t deadline = now + (tmp[i].delay_ticks ? (uint64_t)tmp[i].delay_ticks : 1);
        if (deadline < earliest)
            earliest = deadline;
    }
    switch (op) {
    case RN_SET:
        if (r->max_pending || r->slack_shift)
            rn_set_limited(r, s, tmp, m);
        else
            (void)tw_tasks_set_many(t, tmp, m);
        break;
    case RN_MOVE:
        if (r->slack_shift) /* one by one, each with its slack (in `deadline`) */
            for (size_t i = 0; i < m; i++)
                tmp[i].result = r->int_keys
                                    ? tw_tasks_move_slack_int(t, tmp[i].key_int, tmp[i].delay_ticks,
                                                              tmp[i].deadline)
                                    : tw_tasks_move_slack(t, tmp[i].key, tmp[i].key_len,
                                                          tmp[i].delay_ticks, tmp[i].deadline);
        else
            (void)tw_tasks_move_many(t, tmp, m);
        break;
    default:
        (void)tw_tasks_remove_many(t, tmp, m);
        for (size_t i = 0; i < m; i++)
            if (tmp[i].result == 0)
                rn_pending_sub(r, s, 1);
        break;
    }
    if (r->clock && op != RN_REMOVE && earliest != UINT64_MAX)
        rn_clock_wake(r, earliest);
    uint64_t sleeping = atomic_load_explicit(&r->sleep_until, memory_order_relaxed);
    rn_unlock(s);
    if (op != RN_REMOVE && earliest < sleeping)
        rn_kick(r, earliest, sleeping);
}

static int64_t rn_many_group(struct tw_runner *r, struct tw_runner_item *items, size_t m,
                             enum rn_op op)
{
    struct tw_tasks_item tmp[RN_GROUP];
    uint16_t shard_of[RN_GROUP], order[RN_GROUP];
    uint16_t count[RN_MAX_SHARDS + 1];
    memset(count, 0, (r->nshards + 1) * sizeof count[0]);
    uint64_t now_ns = tw_mono_ns_() - r->start_ns;
    size_t good = 0;
    for (size_t i = 0; i < m; i++) {
        struct tw_runner_item *it = &items[i];
        int rc = 0;
        if (!r->int_keys && !it->key)
            rc = TW_EINVAL;
        else if (!r->int_keys && it->key_len > TW_RUNNER_KEY_MAX)
            rc = TW_E2BIG;
        else if (op != RN_REMOVE && it->delay_ns < 0)
            rc = TW_EINVAL;
        it->result = rc;
        if (rc) {
            shard_of[i] = UINT16_MAX;
            continue;
        }
        shard_of[i] = (uint16_t)rn_item_shard(r, it);
        count[shard_of[i] + 1]++;
        good++;
    }
    for (unsigned sh = 0; sh < r->nshards; sh++) /* count[sh] = start of shard sh */
        count[sh + 1] += count[sh];
    for (size_t i = 0; i < m; i++) {
        if (shard_of[i] == UINT16_MAX)
            continue;
        uint16_t at = count[shard_of[i]]++;
        order[at] = (uint16_t)i;
        tmp[at] = (struct tw_tasks_item){.key = items[i].key,
                                         .key_len = items[i].key_len,
                                         .key_int = items[i].key_int,
                                         .value = items[i].value};
        if (op != RN_REMOVE) { /* the due tick, as rn_due_tick, from one clock read */
            tmp[at].delay_ticks =
                (int64_t)tw_ticks_up_(now_ns + (uint64_t)items[i].delay_ns, r->tick_ns);
            if (r->slack_shift) /* the slack rides in `deadline` (rn_set_limited) */
                tmp[at].deadline = rn_slack_ticks(r, items[i].delay_ns);
        }
    }
    /* count[sh] is now the end of shard sh's run. */
    for (size_t lo = 0; lo < good;) {
        unsigned sh = shard_of[order[lo]];
        size_t hi = count[sh];
        rn_apply_group(r, &r->shards[sh], tmp + lo, hi - lo, op);
        lo = hi;
    }
    int64_t ok = 0;
    for (size_t j = 0; j < good; j++) {
        struct tw_runner_item *it = &items[order[j]];
        it->result = tmp[j].result;
        if (op == RN_REMOVE && tmp[j].result == 0)
            it->value = tmp[j].value;
    }
    for (size_t i = 0; i < m; i++)
        ok += items[i].result >= 0;
    return ok;
}

static int64_t rn_many(struct tw_runner *r, struct tw_runner_item *items, size_t n,
                       enum rn_op op)
{
    if (!r || (!items && n))
        return TW_EINVAL;
    int64_t ok = 0;
    for (size_t base = 0; base < n; base += RN_GROUP)
        ok += rn_many_group(r, items + base, n - base < RN_GROUP ? n - base : RN_GROUP, op);
    return ok;
}

int64_t tw_runner_set_many(struct tw_runner *r, struct tw_runner_item *items, size_t n)
{
    return rn_many(r, items, n, RN_SET);
}

int64_t tw_runner_move_many(struct tw_runner *r, struct tw_runner_item *items, size_t n)
{
    return rn_many(r, items, n, RN_MOVE);
}

int64_t tw_runner_remove_many(struct tw_runner *r, struct tw_runner_item *items, size_t n)
{
    return rn_many(r, items, n, RN_REMOVE);
}

/* ---- drain, stop, free ------------------------------------------------------------ */

static void rn_drain_enter(struct tw_runner *r, struct rn_drainer *me)
{
    me->thread = pthread_self();
    pthread_mutex_lock(&r->drain_lock);
    me->next = r->drainers;
    r->drainers = me;
    pthread_mutex_unlock(&r->drain_lock);
}

/* The last touch of r by a drain: a stop waiting in rn_wait_drains may free
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
static int rn_self_is_drainer(struct tw_runner *r)
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
static void rn_wait_drains(struct tw_runner *r)
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
        int64_t n = rn_drain_instance(old, s->off, fn, ctx);
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
    if (rn_self_is_runner_thread(r) || rn_self_is_drainer(r))
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
    rn_join_all(r); /* tick thread, then workers once the queue is empty */
    rn_wait_drains(r); /* drains of user threads: they meet closed shards */
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
            rn_drain_instance(t, r->shards[i].off, r->execute, r->ctx);
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
    rn_destroy(r);
    return 0;
}

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
    st->shards = r->nshards;
    return 0;
}
