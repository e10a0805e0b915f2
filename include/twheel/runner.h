/* SPDX-License-Identifier: MIT */
/** @file
 * twheel runner: thread-safe keyed tasks (go-zero's TimingWheel, made exact
 * and non-blocking). A tw_runner holds keyed tasks in shards, each a
 * tw_tasks under its own lock, a tick thread on CLOCK_MONOTONIC (or a seat
 * on a shared clock, twheel/clock.h) and executor threads (or a shared
 * pool). Every function may be called from any thread.
 *
 * Time: tick k is the instant start + k * tick_ns, start being the
 * creation. A task set or moved with delay d at instant c is due at the
 * first tick at or after c + d (below one tick, 0 included: the next tick),
 * never earlier, and runs once unless removed, replaced or drained first;
 * after a stall no tick is dropped and the overdue tasks run in deadline
 * order. With config.slack_shift it may run up to
 * floor((d >> slack_shift) / tick_ns) ticks late, and task->deadline is the
 * tick it was planned at. docs/contracts.md states every rule; the design
 * and what a call costs other threads are at the top of
 * src/runner/runner.c.
 *
 * Threads: set, move and remove (single or batched) hold one shard lock
 * for one keyed operation and never wait for the tick thread, the clock or
 * a callback; a call that returns has been applied, after every earlier
 * call of its thread. Callbacks (execute, drain's fn) may call set, move,
 * remove, drain and stats, not stop or free (TW_EBUSY).
 */
#ifndef TWHEEL_RUNNER_H
#define TWHEEL_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "twheel/clock.h"
#include "twheel/common.h"
#include "twheel/tasks.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest string key a runner accepts (a fired task carries a copy of its
 * key to the executor, so that firing never allocates). */
#define TW_RUNNER_KEY_MAX 256

/** Most executor threads (config.workers). */
#define TW_RUNNER_WORKERS_MAX 4096u

/** Longest queue of fired tasks (config.queue): each slot holds a task and
 * its key (sizeof(struct tw_task) + TW_RUNNER_KEY_MAX bytes), and the ring
 * may take at most half the address space. */
#define TW_RUNNER_QUEUE_MAX (SIZE_MAX / 2 / (sizeof(struct tw_task) + TW_RUNNER_KEY_MAX))

struct tw_runner;

/** What tw_runner_new needs; zero every field you do not set. */
struct tw_runner_config {
    tw_tasks_fn *execute;            /**< required: runs each due task; task->deadline in ticks */
    void *ctx;                       /**< passed to execute and release */
    uint64_t tick_ns;                /**< required: tick length, >= 1000 ns */
    unsigned workers;                /**< executor threads; 0 = run on the tick thread */
    enum tw_tasks_key_kind key_kind; /**< TW_TASKS_KEY_BYTES (default) or _INT */
    /** 0 = no limit; else never more tasks pending, and a set of a new key
     * beyond it returns TW_EFULL (with concurrent producers, possibly a
     * little before it: docs/contracts.md). */
    size_t max_pending;
    unsigned shards;                      /**< 0 = 8 per online CPU, 16 to 1024; at most 1024 */
    size_t queue;                         /**< fired tasks waiting for an executor; 0 = 1024
                                             (64 with a pool or a clock) */
    const struct tw_allocator *allocator; /**< NULL = realloc/free */
    /** Optional: gets each pending task that stop (without
     * TW_RUNNER_STOP_DRAIN) or free drops unrun, once, with ctx, on the
     * stopping thread, no lock held (typically frees task->value); it must
     * not call the runner. So every value a set took (it returned 1 or 0)
     * goes to execute, to drain's fn or here, once; a value a set replaced
     * goes nowhere (remove hands it back). NULL: dropped tasks are
     * forgotten. */
    tw_tasks_fn *release;
    /** Slack of every set and move, batched too: a task with delay d ns may
     * run up to (d >> slack_shift) / tick_ns ticks late, never early (3 =
     * 1/8 of the delay). 0 = exact (the default); at most
     * TW_TASKS_SLACK_SHIFT_MAX. */
    unsigned slack_shift;
    /** Optional: a shared clock (twheel/clock.h) to join instead of starting
     * a tick thread. Must outlive the runner. Callbacks then run on `pool`,
     * or, if it is NULL, on a pool of `workers` (>= 1) threads of the
     * runner's own. */
    struct tw_clock *clock;
    /** Optional: a shared executor pool (tw_pool_new) to run the callbacks;
     * workers must be 0. Must outlive the runner. */
    struct tw_pool *pool;
    /** Nonzero: a move, or a set of a present key, relocates the task in
     * its shard's wheel at once (tw_tasks_config.eager_rearm): moves cost
     * more, the tick thread holds each shard lock for less; when tasks run
     * does not change. 0 (the default): lazy. */
    int eager_rearm;
};

/** The runner's figures, filled by tw_runner_stats. */
struct tw_runner_stats {
    size_t pending;             /**< tasks armed */
    uint64_t fired;             /**< callbacks started by ticks */
    uint64_t late;              /**< ... more than one tick after their due (or planned) tick */
    uint64_t worst_lateness_ns; /**< the worst of them */
    uint64_t drained;           /**< tasks handed to drain (or to stop's drain) */
    uint64_t tick;              /**< the last tick processed */
    uint64_t contended;         /**< shard lock acquisitions that found the lock held
                                   (producers' and the tick thread's), ever */
    unsigned shards;            /**< shards in use (config.shards or the default) */
    /** Writes of the max_pending counter, the one runner-wide line producer
     * calls write (a shard moves room to or from it a chunk at a time): 0
     * without max_pending. */
    uint64_t shared_writes;
    /** The most CPU time the tick thread (or one run on the shared clock)
     * spent in one pass: advancing every shard to the tick, under each
     * shard's lock in turn, and handing what fired to the executors. CPU
     * time, so that neither a stall of the machine nor a wait for a full
     * queue counts. */
    uint64_t worst_tick_cpu_ns;
};

/** Start a runner: its threads (or its seat on the clock) run from here on.
 * Allocates a tw_tasks instance per shard (about 31 KB each, and 56 KB more
 * at a shard's first set) and the queue (config.queue slots of
 * sizeof(struct tw_task) + TW_RUNNER_KEY_MAX bytes: 19 KB for 64): with
 * many small runners, give each shards = 1. Returns 0 and sets *out, or TW_EINVAL
 * (NULL out/cfg/execute, tick_ns < 1000, bad key_kind, shards > 1024,
 * workers > TW_RUNNER_WORKERS_MAX, queue > TW_RUNNER_QUEUE_MAX, an allocator
 * whose fn is NULL, slack_shift > TW_TASKS_SLACK_SHIFT_MAX, both pool and
 * workers, a clock with neither pool nor workers), TW_ENOMEM, TW_ESYS;
 * *out is NULL then and nothing is left behind. */
TW_API int tw_runner_new(struct tw_runner **out, const struct tw_runner_config *cfg);

/** Arm `key` to run `delay_ns` nanoseconds from now with `value` (see Time),
 * replacing a pending task of the key (whose arming will not run unless it
 * already started). The key is copied; value is handed to execute, drain's
 * fn or config.release. Returns 1 (new key), 0 (replaced), or TW_EINVAL (r
 * or key NULL, negative delay, a runner of integer keys), TW_E2BIG (key_len
 * > TW_RUNNER_KEY_MAX), TW_EFULL (max_pending reached), TW_ENOMEM,
 * TW_ECLOSED (stopped), changing nothing then. O(1): one hash, one shard
 * lock. */
TW_API int tw_runner_set(struct tw_runner *r, const void *key, size_t key_len, void *value,
                         int64_t delay_ns);
/** As tw_runner_set, for an integer key (TW_EINVAL on a runner of string keys). */
TW_API int tw_runner_set_int(struct tw_runner *r, uint64_t key, void *value, int64_t delay_ns);

/** Re-arm a pending key to `delay_ns` from now, keeping its value. Returns 0,
 * TW_ENOENT (absent, or already fired), or set's TW_EINVAL, TW_E2BIG,
 * TW_ECLOSED. O(1), as set. */
TW_API int tw_runner_move(struct tw_runner *r, const void *key, size_t key_len, int64_t delay_ns);
/** As tw_runner_move, for an integer key. */
TW_API int tw_runner_move_int(struct tw_runner *r, uint64_t key, int64_t delay_ns);

/** Forget a pending key: its callback will not run, and its value goes back
 * to the caller (*value, if value is not NULL). Returns 0, TW_ENOENT
 * (absent, or already fired: its callback runs or has run), or set's
 * TW_EINVAL, TW_E2BIG, TW_ECLOSED. O(1), as set. */
TW_API int tw_runner_remove(struct tw_runner *r, const void *key, size_t key_len, void **value);
/** As tw_runner_remove, for an integer key. */
TW_API int tw_runner_remove_int(struct tw_runner *r, uint64_t key, void **value);

/** One key of a batched call (tw_runner_set_many and friends): fill the key
 * fields of the runner's key kind and the inputs; the call fills the
 * outputs. (Not tw_tasks_item: this delay is in nanoseconds.) */
struct tw_runner_item {
    const void *key;  /**< in, string keys: the key's bytes (NULL -> TW_EINVAL) */
    size_t key_len;   /**< in, string keys: its length (> TW_RUNNER_KEY_MAX -> TW_E2BIG) */
    uint64_t key_int; /**< in, integer keys: the key */
    void *value;      /**< set: in, the value; remove: out, the removed task's value */
    int64_t delay_ns; /**< set and move: in, nanoseconds from now (as the single calls) */
    int result;       /**< out: what the single call returns for this item */
};

/** Batched set: tw_runner_set / _int on each of items[0..n), each result in
 * item->result, as if by single calls at one instant (the clock is read
 * once per 256 items); items of one key in array order, of different keys
 * in any order (so the items TW_ECLOSED or TW_EFULL refuses are not
 * necessarily the last). Takes each shard's lock once per group of up to
 * 256 items, and prefetches ahead without slack or max_pending
 * (tw_tasks_set_many). About 20 KB of stack; allocates only what the single
 * calls would. Returns how many items succeeded, or TW_EINVAL (r NULL, or
 * items NULL with n > 0). */
TW_API int64_t tw_runner_set_many(struct tw_runner *r, struct tw_runner_item *items, size_t n);
/** Batched move (tw_runner_move / _int on each item); as
 * tw_runner_set_many. */
TW_API int64_t tw_runner_move_many(struct tw_runner *r, struct tw_runner_item *items, size_t n);
/** Batched remove (tw_runner_remove / _int on each item; a removed task's
 * value goes to item->value); as tw_runner_set_many. */
TW_API int64_t tw_runner_remove_many(struct tw_runner *r, struct tw_runner_item *items, size_t n);

/** Remove every pending task and call fn(ctx, task) for each (fn NULL: the
 * config's execute and ctx) on the calling thread, with no lock held: fn
 * owns task->value and may call set, move, remove, drain and stats. Shard
 * by shard: a set into a shard already drained stays pending; if the
 * runner is stopped meanwhile, the shards drained so far are counted and
 * the others' tasks go to stop. Returns the number drained, TW_ECLOSED
 * (stopped before any shard), TW_ENOMEM (nothing drained) or TW_EINVAL.
 * O(pending).
 *
 * On the draining thread (in fn, or in a drain in fn) stop returns TW_EBUSY
 * and free does nothing. A stop on another thread waits for the drain to
 * return, so fn must not wait for another thread's stop. */
TW_API int64_t tw_runner_drain(struct tw_runner *r, tw_tasks_fn *fn, void *ctx);

/** Stop flag (tw_runner_stop): run every pending task (execute, on the
 * calling thread) instead of releasing it. */
#define TW_RUNNER_STOP_DRAIN 1u

/** Stop: later calls return TW_ECLOSED; the tick thread is joined (or the
 * clock left); fired tasks already queued still run, then the executors
 * are joined (a shared pool is let go of); drains on other threads are
 * waited for; pending tasks are dropped, each passed to config.release (or
 * run, with TW_RUNNER_STOP_DRAIN). When it returns, no callback and no
 * drain's fn of the runner is running. Once a stop has returned 0, later
 * ones return 0 at once, from any thread. Returns 0, TW_EINVAL, or
 * TW_EBUSY, doing nothing, from a callback of the runner (stop's drain
 * included), a drain's fn, a thread of its pool or its clock's thread.
 * O(pending), plus the wait for queued callbacks. */
TW_API int tw_runner_stop(struct tw_runner *r, unsigned flags);

/** Stop (if not stopped) and free everything. Returns 0 (NULL: a no-op), or
 * TW_EBUSY where stop returns it, doing nothing (free it later from
 * elsewhere). No call of another thread may overlap free, but a drain that
 * was running when the runner was stopped (stop waited for it). */
TW_API int tw_runner_free(struct tw_runner *r);

/** Fill *out with the figures, consistent per shard (it takes each shard's
 * lock in turn: O(shards)). Returns 0, or TW_EINVAL for a NULL r or out
 * (*out untouched). */
TW_API int tw_runner_stats(const struct tw_runner *r, struct tw_runner_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_RUNNER_H */
