/* SPDX-License-Identifier: MIT */
/* twheel runner: what its source files share (not installed). The design
 * (threads, locks, what a call costs other threads) is at the top of
 * runner.c.
 *
 * runner.c     - the design comment; tw_runner_new and the teardown of what
 *                it built.
 * keyed.c      - the single calls: set, move, remove of one key.
 * many.c       - the batched calls: items grouped by shard, one lock each.
 * admission.c  - max_pending: the room each shard reserves for new keys.
 * tick.c       - the tick thread, and the producers' kick that wakes it.
 * on_clock.c   - the runner as a member of a shared clock: bounded runs.
 * execute.c    - fired tasks to callbacks: batch, ring, workers, pool turns.
 * drain.c      - tw_runner_drain, and the list of threads inside it.
 * stop.c       - tw_runner_stop and tw_runner_free: closing, joining.
 * stats.c      - tw_runner_stats.
 */
#ifndef TWHEEL_RUNNER_INTERNAL_H
#define TWHEEL_RUNNER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "clock/internal.h"
#include "common/alloc.h"
#include "common/hash.h"
#include "common/time.h"
#include "tasks/internal.h"
#include "twheel/runner.h"

#define RN_BATCH 64 /* most due tasks one advance of a shard pops */
#define RN_MIN_DEFAULT_SHARDS 16
#define RN_SHARDS_PER_CPU 8
#define RN_MAX_SHARDS 1024
#define RN_SPIN 128 /* tries of a held shard lock before sleeping on it */
#define RN_DEFAULT_QUEUE 1024
#define RN_POOLED_QUEUE 64  /* default queue of a runner on a pool */
#define RN_CLOCK_BUDGET 256 /* most tasks fired per run on a shared clock */
#define RN_GROUP 256        /* items of a batched call per round of locks */

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
                               from r->pending and has not used (admission.c) */
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
    int lazy;             /* neither slack_shift nor eager_rearm: exact lazy arms */
    uint64_t k0, k1;      /* hash seed: of the shards, and of their instances' indexes */
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
    int own_pool, pool_attached; /* own_pool: freed by rn_destroy_, not by stop */

    /* Every group written after tw_runner_new starts on a line of its own,
     * so that the fields above, which every producer call reads, stay
     * shared in every core's cache (see the design comment's table). */
    char pad_config[64];
    pthread_mutex_t ctl;
    pthread_cond_t tick_cv;
    int stopping; /* under ctl */
    _Atomic uint64_t sleep_until;
    /* On a shared clock: the tick the last run asked to run again at
     * (rn_clock_run_; producers may have lowered the member's due since;
     * UINT64_MAX before the first run and while one runs, 0 when no
     * producer need wake it) */
    _Atomic uint64_t clock_next;

    /* tick thread only (written for every fired task: off the line of
     * sleep_until, which producers read on every set and move) */
    char pad_tick[64];
    struct rn_job *batch;
    unsigned nbatch;
    uint64_t collect_off;           /* off of the shard being advanced */
    struct rn_shard *collect_shard; /* ... and the shard itself */

    pthread_mutex_t q;
    pthread_cond_t q_nonempty, q_nonfull;
    struct rn_job *ring; /* under q */
    size_t qcap, qhead, qcount;
    int q_quit;
    size_t inflight;              /* under q: jobs taken by pool threads, not finished */
    int q_blocked;                /* under q: the clock run stopped on a full ring */
    int clock_left;               /* under q: stop has left (or is leaving) the clock */
    size_t collect_tail;          /* clock run only: ring slot of the next fired job */
    struct tw_pool_client client; /* written by pool threads: off the config line */

    pthread_mutex_t stop_lock;
    atomic_int stopped;     /* written under stop_lock; read without it by stop */
    pthread_t stopper;      /* the thread inside tw_runner_stop, ... */
    atomic_int stopper_set; /* ... valid when set (release/acquire) */

    pthread_mutex_t drain_lock;
    pthread_cond_t drain_done;   /* signalled when drainers becomes NULL */
    struct rn_drainer *drainers; /* under drain_lock: threads inside drain */

    unsigned ready; /* RN_* bits; written by tw_runner_new only */

    char pad_pending[64];
    _Atomic size_t pending; /* max_pending only: tasks + every shard's room */
    size_t room_chunk;      /* room a shard reserves at a time (admission.c) */
    char pad_figures[64];   /* pending: producers; these: workers and the tick thread */
    _Atomic uint64_t fired, late, worst_ns, drained, tick;
    _Atomic uint64_t worst_tick_cpu; /* written by the tick thread or clock run only */
};

/* The CPU time of the calling thread, in ns: a pass of the tick thread is
 * timed by it (tw_runner_stats' worst_tick_cpu_ns). */
static inline uint64_t rn_cpu_ns(void)
{
    return tw_time_ns_(CLOCK_THREAD_CPUTIME_ID);
}

/* A pass that began at CPU time `since` ended: keep the dearest. */
static inline void rn_pass_done(struct tw_runner *r, uint64_t since)
{
    uint64_t spent = rn_cpu_ns() - since;
    if (spent > atomic_load_explicit(&r->worst_tick_cpu, memory_order_relaxed))
        atomic_store_explicit(&r->worst_tick_cpu, spent, memory_order_relaxed);
}

/* The calls of the single and batched paths. */
enum rn_op { RN_SET, RN_MOVE, RN_REMOVE };

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
 * computed here from the caller's delay and handed to the shard's tw_tasks
 * as an argument (the shards' instances have no slack_shift of their own),
 * because the delay a shard would see is counted from the shard's time,
 * which lags the clock while the tick thread sleeps: a fraction of that
 * would be too large. */
static inline uint64_t rn_slack_ticks(const struct tw_runner *r, int64_t delay_ns)
{
    return ((uint64_t)delay_ns >> r->slack_shift) / r->tick_ns;
}

/* A key's shard, from the hash that its shard's index uses too (one hash a
 * call). The index takes a key's slot from the hash's high 32 bits and its
 * tag from the low ones, so the shard comes from the hash times an odd
 * constant: a bijection whose high bits spread each shard's keys evenly
 * over its index's slots and tags. (From the high bits themselves, every
 * key of shard i would have its slot in the i-th nshards-th of the index.) */
#define RN_SHARD_MIX UINT64_C(0x9e3779b97f4a7c15)
static inline unsigned rn_shard_index(const struct tw_runner *r, uint64_t h)
{
    return tw_hash_home(h * RN_SHARD_MIX, r->nshards);
}

static inline struct rn_shard *rn_shard_of(const struct tw_runner *r, uint64_t h)
{
    return &r->shards[rn_shard_index(r, h)];
}

/* A shard's time on the runner's clock (shard lock held). */
static inline uint64_t rn_shard_now(const struct rn_shard *s)
{
    return tw_tasks_now(s->tasks) - s->off;
}

/* On a shared clock: a producer armed runner tick `deadline`. Called under
 * the shard lock, so that stop, which closes every shard before it leaves
 * the clock, never frees the member under a waker. One atomic load when the
 * clock already runs us by then (tw_clock_wake). */
static inline void rn_clock_wake(struct tw_runner *r, uint64_t deadline)
{
    tw_clock_wake(r->clock, r->member, r->start_ns + deadline * r->tick_ns);
}

/* After a lazy arm in shard s (locked): the tick to wake the tick thread
 * for, `at` (0: none) or earlier if the shard's wheel now has walk work
 * (tw_tasks_next_work) before `sleeping`, the tick the thread sleeps
 * until. Asked only while it sleeps more than a level-1 slot ahead: once
 * a shard pushed a task back its next work is never further, so this is
 * the first push after a quiet spell, and the walks get their steps from
 * it on instead of all at once when the thread wakes. On a shared clock
 * the same for the tick its last run asked for (clock_next): the member
 * is woken then. */
static inline uint64_t rn_work_kick(struct tw_runner *r, const struct rn_shard *s,
                                    uint64_t sleeping, uint64_t at)
{
    if (!r->lazy)
        return at;
    uint64_t far = rn_shard_now(s) + TW_WHEEL_SLOTS;
    if (r->clock)
        sleeping = atomic_load_explicit(&r->clock_next, memory_order_relaxed);
    if (sleeping <= far)
        return at;
    uint64_t work = tw_tasks_next_work(s->tasks);
    if (work == TW_NEVER)
        return at;
    work -= s->off;
    if (r->clock) { /* under the lock: see rn_clock_wake */
        if (work < sleeping)
            rn_clock_wake(r, work);
        return at;
    }
    return work < sleeping && (!at || work < at) ? work : at;
}

/* n tasks left shard s (lock held): their max_pending room goes back to it,
 * and a shard holding more than two chunks returns the excess (admission.c). */
static inline void rn_pending_sub(struct tw_runner *r, struct rn_shard *s, size_t n)
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

/* ---- shared between the files ------------------------------------------------ */

/* runner.c: free what tw_runner_new built (threads already joined). */
void rn_destroy_(struct tw_runner *r);

/* admission.c: shard s (lock held) has no max_pending room: reserve some,
 * taking back the spare room of shards whose lock is free if need be. 1 if
 * it has room now, 0 if max_pending is reached. */
int rn_room_ensure_(struct tw_runner *r, struct rn_shard *s);
/* admission.c: with no lock held, take back every shard's unused room. */
void rn_room_sweep_(struct tw_runner *r);

/* tick.c: the tick thread's body. */
void *rn_tick_main_(void *arg);
/* tick.c: a producer armed runner tick `deadline` earlier than `sleeping`,
 * sleep_until as read under the shard lock: wake the tick thread. */
void rn_kick_(struct tw_runner *r, uint64_t deadline, uint64_t sleeping);
/* tick.c: the earliest next expiry over the shards, on the runner's clock;
 * with `work`, also the earliest tick at which a shard's wheel has work
 * (tw_tasks_next_work: the walks of lazily moved tasks move on), the one
 * to sleep until so that no advance makes a walk's moves all at once. */
uint64_t rn_next_expiry_(struct tw_runner *r, uint64_t *work);

/* on_clock.c: the clock's run of this runner (tw_clock_run_fn). */
uint64_t rn_clock_run_(void *ctx, uint64_t now_ns);

/* execute.c: the shards' execute, copying a due task into the batch or ring. */
void rn_collect_(void *ctx, const struct tw_task *task);
/* execute.c: hand the tick thread's batch to the workers (or run it). */
void rn_dispatch_(struct tw_runner *r);
/* execute.c: an executor thread's body. */
void *rn_worker_(void *arg);
/* execute.c: a pool thread's turn on this runner (tw_pool_client.work). */
void rn_pool_work_(struct tw_pool_client *c);

/* drain.c: drain instance t, handing fn deadlines on the runner's clock. */
int64_t rn_drain_instance_(struct tw_tasks *t, uint64_t off, tw_tasks_fn *fn, void *ctx);
/* drain.c: whether the calling thread is inside a drain of r. */
int rn_self_is_drainer_(struct tw_runner *r);
/* drain.c: for stop, with the shards closed: wait for the drains in progress. */
void rn_wait_drains_(struct tw_runner *r);

/* stop.c: join the threads that were started (and leave the clock, let go
 * of the pool), once. */
void rn_join_all_(struct tw_runner *r);

/* ---- the set of one key ------------------------------------------------------ */

/* Set key k in shard s (lock held), the seam of every set of the runner,
 * single or batched: k hashed once by the caller (rn_shard_of), `deadline`
 * on the shard's clock, `slack` an argument (0: exact). With max_pending,
 * admission comes first, so a refused set inserts nothing: a shard with no
 * room left reserves some (rn_room_ensure_), and if none is to be had only
 * a key already present may be set (it replaces). A key made new takes a
 * unit of the shard's room. 1 (new), 0 (replaced), or TW_EFULL, TW_ERANGE,
 * TW_ENOMEM, changing nothing. */
static inline int rn_set_in_shard(struct tw_runner *r, struct rn_shard *s,
                                  const struct tasks_keyref *k, void *value, uint64_t deadline,
                                  uint64_t slack)
{
    if (r->max_pending && !s->room && !rn_room_ensure_(r, s) &&
        tasks_find_key(s->tasks, k) == TASKS_NIL)
        return TW_EFULL;
    int rc = r->lazy ? tw_tasks_set_lazy_at_(s->tasks, k, value, deadline)
                     : tw_tasks_set_at_(s->tasks, k, value, deadline, slack);
    if (rc == 1 && r->max_pending)
        s->room--;
    return rc;
}

#endif /* TWHEEL_RUNNER_INTERNAL_H */
