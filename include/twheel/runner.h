/* SPDX-License-Identifier: MIT */
/** @file
 * twheel runner: a thread-safe keyed timing wheel service (go-zero's
 * TimingWheel, made exact and non-blocking).
 *
 * A tw_runner owns a tick thread on CLOCK_MONOTONIC, an optional pool of
 * executor threads, and keyed tasks (tw_tasks) split into shards by a seeded
 * hash of the key. Any thread may call set / move / remove / drain / stop.
 *
 * Time: tick k is the instant start + k * tick_ns, start being the creation
 * time. A task set or moved with delay d at instant c is due at the first tick
 * at or after c + d (never earlier; a delay below one tick, 0 included, is due
 * at the next tick boundary) and runs exactly once unless it is removed,
 * replaced or drained first. The tick thread sleeps until the next tick that
 * has work (a set that makes an earlier deadline wakes it) and, after a
 * stall, catches up: no tick is dropped, and the tasks due during the stall
 * run at once in deadline order.
 *
 * Slack (opt-in, config.slack_shift; 0 = exact, the default, whose paths pay
 * one branch for it): a task set or moved with delay d (ns), single or
 * batched, may be run late by up to S = floor((d >> slack_shift) / tick_ns)
 * ticks: it is planned at some tick P in [due, due + S], `due` being the
 * tick the exact rule above gives, never earlier, and runs when the tick
 * thread reaches P; task->deadline is P. The core wheel uses the freedom to
 * fire neighbours together without cascading (twheel/wheel.h, "Slack"), so
 * the tick thread does less work per task and wakes less often. With slack,
 * a batched set or move takes its items one by one under each shard lock
 * (no prefetching ahead).
 *
 * Producers: each call takes one shard's mutex for the length of one tw_tasks
 * operation (a fraction of a microsecond; longer when it resizes that
 * shard's index, amortised O(1)) and never waits for the tick thread to run:
 * the tick thread holds a shard's mutex for one bounded step (at most 64 due
 * tasks, the wheel's cascades on the way and, now and then, the shard's
 * housekeeping, amortised O(1) per removal; see twheel/tasks.h, Memory),
 * never while a callback runs. More shards make these pauses shorter.
 * A call that returns success has been applied, with its true result
 * (TW_ENOENT, TW_EFULL, replaced or new): its effect is ordered after every
 * earlier call of the same thread.
 *
 * Many producers: the shards are independent (own lock, own tw_tasks), a
 * call takes exactly one shard lock and writes only that shard's lines, and
 * the default shard count is 8 per online CPU (at least 16, at most 1024:
 * 16 on a 2-core machine, 128 on 16 cores; each empty shard allocates
 * about 31 KB, its tw_tasks instance), so that with one producer per core
 * a call meets another thread on its shard less than one time in eight; a
 * thread that does spins briefly before sleeping. tw_runner_stats counts
 * those waits (`contended`). Set config.shards to override. src/runner/runner.c's
 * design comment counts the locks and shared cache lines of a call;
 * bench/README.md has the figures.
 * With max_pending, each shard reserves room for new keys from one
 * runner-wide counter a chunk at a time (max_pending / (2 * shards), 1 to
 * 64 tasks), so that counter is written about once per chunk of calls, not
 * on every call (tw_runner_stats.shared_writes counts it). Never more than
 * max_pending tasks are pending. A single set that finds the counter full
 * takes back the unused room of every shard and tries again, so its TW_EFULL
 * is exact with one producer; with concurrent producers it may come while
 * room they reserved meanwhile (up to 2 chunks per shard) is unused. A
 * batched set only takes back the room of shards whose lock is free at
 * that moment (it holds a shard lock), so the same holds for it with "busy
 * shards", the tick thread's included.
 *
 * On a shared clock (config.clock, twheel/clock.h): the runner starts no
 * tick thread; it is a member of the clock, whose one thread also drives
 * other runners and caches. The rules above hold unchanged: never early, no
 * tick dropped after a stall (of the clock thread, or of another member,
 * which delays this runner as a stalled tick thread would), tasks due at
 * earlier ticks dispatched first, set/move/remove never wait for the clock.
 * A turn of the runner on the clock fires at most 256 tasks (plus one unit
 * of work per shard advanced) and then lets the other members run before it
 * goes on, so a burst of due tasks makes them a few microseconds late, not a
 * burst long. Callbacks never run on the clock's thread: they run on
 * config.pool, or on a pool of `workers` threads of the runner's own. A
 * producer's set/move of a deadline earlier than the clock's wake-up signals
 * the clock (one atomic load otherwise). Memory: a runner on a clock with
 * shards = 1 allocates about 50 KB empty (the shard's tw_tasks instance,
 * 31 KB, and the queue of 64 fired tasks, 19 KB), each more shard about
 * 31 KB, and the first set of a shard allocates its index and first chunk
 * of entries (56 KB): about 88 KB of RSS with 10 tasks pending. The default
 * shard count (16 on 2 cores: about 760 KB of RSS with 10 tasks) multiplies
 * the per-shard part, so give many small runners shards = 1.
 *
 * Executor pools (config.pool, struct tw_pool of twheel/clock.h): the pool's
 * threads run the callbacks of every runner that uses it. Each runner keeps
 * its own queue of fired tasks (config.queue, 64 by default with a pool), and
 * the pool serves the runners with work in turn, one task each, so one
 * runner's callbacks start in the order its tasks fired (deadline order), at
 * most the pool's thread count of them at once, as with `workers` threads.
 * What changes with a shared pool: a callback that blocks holds a pool thread
 * and delays the callbacks of every runner on the pool, not only its own;
 * and stop/free are refused (TW_EBUSY) on any pool thread, not only in this
 * runner's callbacks, since stop waits for the pool to run this runner's
 * queue. When a runner's queue is full, its due tasks stay in the wheel
 * (still removable) until a pool thread frees a slot, without holding up
 * the clock's other members.
 *
 * Callbacks: execute runs on one of `workers` executor threads (so at most
 * `workers` callbacks run at once, and a callback that blocks delays only its
 * own worker), on config.pool's threads, or on the tick thread itself when
 * workers is 0 and there is neither a pool nor a clock (for cheap
 * callbacks). Fired tasks wait in a bounded queue for a worker; when it is
 * full the tick thread waits (due tasks then stay in the wheel, still
 * removable). Callbacks may call set/move/remove/drain on the runner; they
 * must not call stop or free (stop returns TW_EBUSY from a runner thread).
 * The same holds for drain's fn: see tw_runner_drain.
 *
 * Figures (tw_runner_stats): pending tasks, fired, late fires (callback
 * started more than one tick after its due instant; with slack, after its
 * planned tick P), worst lateness.
 *
 * Errors: TW_EINVAL (bad argument, negative delay, NULL key, key of the other
 * kind), TW_E2BIG (key longer than TW_RUNNER_KEY_MAX), TW_ENOENT (move/remove
 * of an absent key), TW_EFULL (max_pending reached), TW_ENOMEM, TW_ECLOSED
 * (after stop), TW_ESYS (a thread or lock could not be created), TW_EBUSY.
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

/** Longest string key a runner accepts (fired tasks carry a copy of the key
 * to the worker, inline, so that firing never allocates). */
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
    tw_tasks_fn *execute;                 /**< required; task->deadline is in ticks */
    void *ctx;                            /**< passed to execute */
    uint64_t tick_ns;                     /**< required: tick length, >= 1000 ns */
    unsigned workers;                     /**< executor threads; 0 = run on the tick thread */
    enum tw_tasks_key_kind key_kind;      /**< TW_TASKS_KEY_BYTES (default) or _INT */
    size_t max_pending;                   /**< 0 = no limit; beyond it set -> TW_EFULL
                                             (never more pending; see Many
                                             producers for when it refuses) */
    unsigned shards;                      /**< 0 = 8 per online CPU, at least 16 (see
                                             Producers); at most 1024 */
    size_t queue;                         /**< fired tasks waiting for a worker; 0 = 1024 */
    const struct tw_allocator *allocator; /**< NULL = realloc/free */
    /** Optional: called once for every pending task that tw_runner_stop
     * without TW_RUNNER_STOP_DRAIN (or tw_runner_free) drops without running
     * it, with ctx, on the stopping thread, with no lock held, before stop
     * returns; typically frees task->value. So with heap values nothing
     * leaks, whatever sets race the stop: a set that returned success before
     * the runner closed is either run (execute), handed to drain's fn, or
     * dropped here, exactly once; a set that returned TW_ECLOSED did not
     * take its value. It must not call the runner. (A value replaced by a
     * set of the same key is not passed here: remove the key first, which
     * hands the old value back, if the runner is to own it.) NULL: dropped
     * tasks are forgotten. */
    tw_tasks_fn *release;
    /** Slack of every set and move (batched too): a task with delay d ns may
     * run up to (d >> slack_shift) / tick_ns ticks late, never early (see
     * Slack above; 3 = 1/8 of the delay, as Linux's timer wheel). 0 = exact
     * (the default); at most TW_TASKS_SLACK_SHIFT_MAX. */
    unsigned slack_shift;
    /** Optional: a clock service (twheel/clock.h) to join instead of
     * starting a tick thread; many runners and caches then share its one
     * thread (see "On a shared clock" above). Must outlive the runner. With
     * a clock, callbacks run on `pool`, or, if pool is NULL, on a pool of
     * `workers` threads of the runner's own (workers >= 1 then). */
    struct tw_clock *clock;
    /** Optional: an executor pool (tw_pool_new) whose threads run this
     * runner's callbacks, shared with other runners; workers must be 0.
     * Must outlive the runner. With a pool, queue defaults to 64. */
    struct tw_pool *pool;
    /** Nonzero: every shard's tw_tasks re-arms eagerly (tw_tasks_config's
     * eager_rearm): a move, or a set of a present key, relocates the task in
     * its shard's wheel at once, under the shard lock the call holds
     * anyway, so the tick thread never moves it for that re-arm and holds
     * each shard lock for less (twheel/tasks.h). Moves cost more; when
     * tasks run does not change. 0 (the default): lazy. */
    int eager_rearm;
};

/** The runner's figures (see Figures above), filled by tw_runner_stats. */
struct tw_runner_stats {
    size_t pending;              /**< tasks armed */
    uint64_t fired;              /**< callbacks started by ticks */
    uint64_t late;               /**< ... more than one tick after their due instant */
    uint64_t worst_lateness_ns;  /**< the worst of them */
    uint64_t drained;            /**< tasks handed to drain (or to stop's drain) */
    uint64_t tick;               /**< the last tick processed */
    uint64_t contended;          /**< shard lock acquisitions that found the lock held
                                    (producers' and the tick thread's), ever */
    unsigned shards;             /**< shards in use (config.shards or the default) */
    /** Writes of the one runner-wide line that producer calls may write: the
     * max_pending counter, which each shard updates only a chunk of room
     * at a time (see Many producers). 0 without max_pending; about
     * 2 * calls / chunk with it. A figure for checking that producers share no line. */
    uint64_t shared_writes;
};

/** Start a runner (its threads run from here on). Returns 0 and sets *out, or
 * TW_EINVAL (NULL out/cfg/execute, tick_ns < 1000, bad key_kind, shards >
 * 1024, workers > TW_RUNNER_WORKERS_MAX, queue > TW_RUNNER_QUEUE_MAX, an
 * allocator whose fn is NULL, slack_shift > TW_TASKS_SLACK_SHIFT_MAX, both
 * pool and workers, a clock with neither pool nor workers), TW_ENOMEM,
 * TW_ESYS; *out is NULL then and nothing is left behind. */
TW_API int tw_runner_new(struct tw_runner **out, const struct tw_runner_config *cfg);

/** Arm `key` to run `delay_ns` nanoseconds from now with `value` (see Time).
 * Returns 1 if the key was new, 0 if it was replaced (its previous arming
 * will not run unless it already started), or an error. O(1). */
TW_API int tw_runner_set(struct tw_runner *r, const void *key, size_t key_len, void *value,
                         int64_t delay_ns);
/** As tw_runner_set, for an integer key. */
TW_API int tw_runner_set_int(struct tw_runner *r, uint64_t key, void *value, int64_t delay_ns);

/** Re-arm a pending key to `delay_ns` from now, keeping its value. 0 or
 * TW_ENOENT (absent, or already fired). O(1). */
TW_API int tw_runner_move(struct tw_runner *r, const void *key, size_t key_len, int64_t delay_ns);
/** As tw_runner_move, for an integer key. */
TW_API int tw_runner_move_int(struct tw_runner *r, uint64_t key, int64_t delay_ns);

/** Forget a pending key: its callback will not run. 0 (with *value if not
 * NULL) or TW_ENOENT (absent, or already fired: then its callback runs or
 * has run). O(1). */
TW_API int tw_runner_remove(struct tw_runner *r, const void *key, size_t key_len, void **value);
/** As tw_runner_remove, for an integer key. */
TW_API int tw_runner_remove_int(struct tw_runner *r, uint64_t key, void **value);

/** One key of a batched call (tw_runner_set_many and friends): fill the key
 * fields of the runner's key kind and the inputs of the call; the call fills
 * the outputs. The runner's own item, not tw_tasks_item, because its delay
 * is in nanoseconds where a tw_tasks delay is in ticks. */
struct tw_runner_item {
    const void *key;  /**< in, string keys: the key's bytes (NULL -> TW_EINVAL) */
    size_t key_len;   /**< in, string keys: its length (> TW_RUNNER_KEY_MAX -> TW_E2BIG) */
    uint64_t key_int; /**< in, integer keys: the key */
    void *value;      /**< set: in, the value; remove: out, the removed task's value */
    int64_t delay_ns; /**< set and move: in, nanoseconds from now (as the single calls) */
    int result;       /**< out: what the single call returns for this item */
};

/** Batched set: tw_runner_set / tw_runner_set_int on each of items[0..n),
 * each item's result in item->result. A producer with many keys takes each
 * shard's lock once per group of up to 256 items instead of once per key, and
 * the shard's index slots and entries are prefetched ahead (see
 * tw_tasks_set_many). The items are applied as if by single calls at one
 * instant (the clock is read once per 256 items), items of one key in array
 * order; items of different keys may be applied in any order, so that when
 * the runner is stopped meanwhile (TW_ECLOSED) or max_pending is reached
 * (TW_EFULL) the items refused are not necessarily the last ones. Allocates
 * nothing of its own (about 18 KB of stack); what the single calls would
 * allocate, it allocates. Returns how many items succeeded, or TW_EINVAL (r
 * NULL, or items NULL with n > 0). */
TW_API int64_t tw_runner_set_many(struct tw_runner *r, struct tw_runner_item *items, size_t n);
/** Batched move (tw_runner_move / _int on each item); as
 * tw_runner_set_many. */
TW_API int64_t tw_runner_move_many(struct tw_runner *r, struct tw_runner_item *items, size_t n);
/** Batched remove (tw_runner_remove / _int on each item; a removed task's
 * value goes to item->value); as tw_runner_set_many. */
TW_API int64_t tw_runner_remove_many(struct tw_runner *r, struct tw_runner_item *items, size_t n);

/** Remove every pending task and call fn(ctx, task) for each on the calling
 * thread (fn NULL: the config's execute and ctx), without holding any lock:
 * fn may call set/move/remove/drain/stats on the runner. Returns the number
 * drained, TW_ECLOSED (stopped: nothing drained), TW_ENOMEM (then nothing
 * is drained: the one allocation that can fail it comes first; the
 * shrinking and compaction of drained shards may allocate too, but carry on
 * without), or TW_EINVAL. Shard by shard: a task set into an already drained shard
 * meanwhile stays pending, and if the runner is stopped meanwhile the count
 * of the shards drained before is returned (the others' tasks go to stop).
 *
 * Stop and free from fn are refused: stop returns TW_EBUSY and free does
 * nothing, on the thread running the drain (at any depth: a drain in fn,
 * or a drain in a callback), since the drain still uses the runner after fn
 * returns. Drains on other threads refuse nothing: a stop from elsewhere
 * closes the runner, then waits for every drain in progress to return (they
 * take no more tasks, but finish running fn on those they took), so free may
 * follow it safely. Hence fn must not wait for another thread's stop. */
TW_API int64_t tw_runner_drain(struct tw_runner *r, tw_tasks_fn *fn, void *ctx);

/** Stop flag (tw_runner_stop): run every pending task (execute, on the
 * calling thread) instead of releasing it. */
#define TW_RUNNER_STOP_DRAIN 1u /* run every pending task (execute, on this thread) */

/** Stop: every later call returns TW_ECLOSED; the tick thread is joined; fired
 * tasks already queued still run, then the workers are joined; drains in
 * progress on other threads are waited for (see tw_runner_drain); pending
 * tasks are dropped without running, each passed to config.release if set
 * (or run, with TW_RUNNER_STOP_DRAIN).
 * When it returns no callback and no drain's fn of this runner is running.
 * On a clock, stop leaves it (after it returns the clock no longer runs
 * this runner); with a pool, it waits until the pool has run this runner's
 * queued tasks, then lets go of the pool (a pool of its own is joined).
 * Idempotent: once a stop has returned 0, a later stop (free's included)
 * returns 0 at once, from any thread. Returns 0, TW_EINVAL, or
 * TW_EBUSY when called from a callback of this runner (stop's own drain
 * included), from a drain's fn (see tw_runner_drain), from any thread of
 * the runner's pool or from its clock's thread; nothing is done then. */
TW_API int tw_runner_stop(struct tw_runner *r, unsigned flags);

/** Stop (if not stopped) and free everything. Returns 0 (NULL included: a
 * no-op), or TW_EBUSY where stop returns it (from a callback, a drain's fn,
 * a thread of the runner's pool or its clock's thread): nothing is done
 * then, the runner stays usable; free it later from another place (the free
 * rule of twheel/common.h). No call of another thread may overlap free,
 * except a drain that was in progress when the runner was stopped (stop
 * waited for it). */
TW_API int tw_runner_free(struct tw_runner *r);

/** Fill *out with the figures, consistent per shard. Returns 0, or TW_EINVAL
 * for a NULL r or out (*out untouched; the stats rule of twheel/common.h). */
TW_API int tw_runner_stats(const struct tw_runner *r, struct tw_runner_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_RUNNER_H */
