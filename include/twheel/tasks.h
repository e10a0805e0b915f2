/* SPDX-License-Identifier: MIT */
/** @file
 * twheel keyed layer: go-zero's TimingWheel API over the core wheel.
 *
 * A tw_tasks maps keys to tasks: set(key, value, delay) inserts or replaces a
 * task due `delay` ticks from now, move(key, delay) re-arms it, remove(key)
 * forgets it, drain(fn) hands every pending task to fn at once, and advancing
 * time runs execute(task) for each task as it comes due. Time is in core ticks:
 * the caller says what time it is (tw_tasks_advance), as with tw_wheel.
 *
 * Keys: an instance uses either byte-string keys (copied into the instance,
 * 0..TW_TASKS_KEY_MAX bytes, equal when their bytes are equal) or 64-bit
 * integer keys (the fast path), chosen at creation. Calling the functions of
 * the other kind returns TW_EINVAL. Values are opaque pointers, never touched.
 *
 * Rules (tests/test_tasks_rules.c pins each one, docs/contracts.md states the contract):
 *  - Exact: a task (re-)armed with delay d at time now fires during the first
 *    advance that reaches now + d, never before and never later (unless it
 *    was given slack, see below).
 *  - Delay 0 means the next tick; a task fires at most once per arming.
 *  - Each arming fires exactly once unless it is removed, replaced (set on a
 *    present key), moved (re-armed), or drained first; never twice.
 *  - Order: tasks due at earlier ticks run before tasks due at later ones;
 *    tasks due at the same tick run in an unspecified order.
 *  - When a task runs it has already left the instance: its key is free again,
 *    tw_tasks_remove() of it returns TW_ENOENT, set() of it arms a new task.
 *  - Re-entrancy: execute and drain's fn may call set, move, remove, get and
 *    drain on the same instance (any key, their own included). They may not
 *    call tw_tasks_advance (TW_EBUSY) or tw_tasks_free.
 *  - Drain leaves nothing behind: a key set after (or during) drain is a new
 *    task that fires normally.
 *
 * Slack (opt-in; exact is the default and its paths pay one branch for it):
 * a task may be allowed to fire late, by at most S ticks, so that the core
 * wheel can fire it with its neighbours without cascading (twheel/wheel.h,
 * "Slack"). A task (re-)armed with delay d and slack S at time now fires
 * during the first advance that reaches its planned tick P, some tick in
 * [now + d, now + d + S] (delay 0: [now + 1, now + 1 + S]; saturating),
 * never before now + d. P is the deadline that tw_tasks_get and
 * task->deadline report. S comes from the instance's config.slack_shift
 * (S = d >> slack_shift for every set and move, batched ones included;
 * 0 = exact) or from a *_slack call, whose explicit S (0 = exact) overrides
 * it. Every other rule holds as written: move and set re-arm with their own
 * S, remove forgets, order is by planned tick.
 *
 * Eager re-arm (opt-in, config.eager_rearm; lazy is the default and its
 * paths pay the same one branch as for slack): move and set of a present
 * key relocate the task's wheel node at once instead of leaving the move to
 * a later advance. It changes what an operation costs, never when a task
 * fires.
 *
 * Memory: one allocation for the instance (about 31 KB, mostly the core
 * wheel), a pool of task entries in chunks of TW_TASKS_CHUNK entries, an
 * index, and for string keys longer than 15 bytes one block per key
 * (length + 2 bytes). Per task: a 48-byte entry (an integer key, or a string
 * key of up to 15 bytes, in place), a 4-byte home word and 5.3..10 bytes of
 * index, so <= 62 bytes (1% more past 39 chunks), plus the block of a longer
 * string key, plus, with the default allocator past 195 chunks (199,680
 * tasks), the unfilled rest of the newest 2 MB group of entries (about 10
 * bytes a task just past that size, 2.0 at 10^6). At 10^6 integer keys that
 * is 60.7 bytes a task (tw_tasks_stats): 48 of entry, 4 of home word, 6.1 of
 * index, 2.0 of unfilled group, 0.5 of the groups' unused tails. Three of
 * those are bytes traded for speed (bench/README.md has the figures):
 *  - the home word, 4 bytes a task, lets a rehash read it instead of every
 *    entry and key: without it batched remove takes about 20% longer and a
 *    batched fill from empty 5-12%, though a single set of an integer key
 *    is 7% faster (one line less written);
 *  - growing the index to a load of 0.4, not 0.55, costs up to 2.5 bytes a
 *    task (0.1 at 10^6): a fill rehashes each task 1.3-2 times instead of
 *    about 3 (at 0.55 sets from empty take 23-39% longer);
 *  - pool groups past the fourth are huge pages from their first touch,
 *    not collapsed when full: up to 2 MB of unfilled group (collapsing
 *    each, a 2 MB copy, makes sets from empty take 24-35% longer).
 * With the default allocator an index of 2 MB or more and the groups of
 * entries are 2 MB aligned and advised huge, so that the TLB covers them;
 * with config.allocator everything comes from it and nothing is madvised.
 * config.capacity sizes the index at once, so a fill up to it rehashes
 * nothing. Memory is returned: the index shrinks when it falls below 1/8
 * full, and when fewer than a quarter of the pool's entries are live the
 * next set, advance or drain moves the live ones down and frees the emptied
 * chunks (outside callbacks; amortised O(1) per removal), but never below
 * config.capacity's size. Remove itself moves no entry, so a run of removals
 * (every key, say) pays for no relocation and what is left moves once; until
 * then the pool keeps what the run freed.
 *
 * Hashing: the index is keyed by a per-instance random seed (getrandom), so
 * keys chosen by an adversary who does not know it cannot be made to collide:
 * SipHash-1-3 for string keys, a seeded 64-bit mixer for integer keys. The
 * mixer is not a PRF: if integer keys come from an attacker who can also time
 * your calls, use string keys.
 *
 * Costs: set, move, remove and get are O(1) expected (one hash, a few index
 * slots on one or two cache lines, one entry); an insert that grows the index
 * rehashes it (amortised O(1): a fill from empty rehashes each task 1.3 to 2
 * times; config.capacity avoids it up to that many tasks). Advancing costs
 * the core's cost plus O(1) per task run. Drain is O(pending + index size).
 *
 * Thread safety: none; one thread at a time. tw_runner (twheel/runner.h) is the
 * thread-safe service around a tw_tasks.
 */
#ifndef TWHEEL_TASKS_H
#define TWHEEL_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "twheel/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest byte-string key accepted; longer ones give TW_E2BIG. */
#define TW_TASKS_KEY_MAX 65535
/** Entries per pool chunk (the unit in which task memory is allocated/freed). */
#define TW_TASKS_CHUNK 1024

struct tw_tasks;

/** A task handed to execute or to drain's fn. Valid during the call only (copy
 * the key if you keep it). */
struct tw_task {
    const void *key;   /**< string keys: the key's bytes; integer keys: NULL */
    size_t key_len;    /**< string keys: its length; integer keys: 0 */
    uint64_t key_int;  /**< integer keys: the key; string keys: 0 */
    void *value;       /**< the value given to set */
    uint64_t deadline; /**< the tick the task was due at (with slack: its planned
                          tick, in [armed deadline, armed deadline + slack]) */
};

/** Runs a task: `ctx` is the config's ctx (or drain's ctx). */
typedef void tw_tasks_fn(void *ctx, const struct tw_task *task);

/** The kind of key an instance takes, fixed at creation. */
enum tw_tasks_key_kind {
    TW_TASKS_KEY_BYTES = 0, /**< byte-string keys, copied */
    TW_TASKS_KEY_INT = 1,   /**< 64-bit integer keys */
};

/** What tw_tasks_new needs; zero every field you do not set. */
struct tw_tasks_config {
    tw_tasks_fn *execute;                  /**< required: runs each due task */
    void *ctx;                             /**< passed to execute */
    enum tw_tasks_key_kind key_kind;       /**< TW_TASKS_KEY_BYTES (default) or _INT */
    uint64_t now;                          /**< starting tick */
    size_t max_pending;                    /**< 0 = no limit; else set of a new key
                                              beyond it gives TW_EFULL */
    const struct tw_allocator *allocator;  /**< NULL = realloc/free; copied */
    uint64_t seed[2];                      /**< hash seed; {0, 0} = random */
    /** Slack of every set and move (batched too) that gives none itself:
     * delay >> slack_shift ticks (3 = 1/8 of the delay, as Linux's timer
     * wheel). 0 = exact (the default); at most TW_TASKS_SLACK_SHIFT_MAX. */
    unsigned slack_shift;
    /** How many tasks the instance is expected to hold (0 = no hint). The
     * index is created large enough for that many keys (a load of 0.55), so
     * that filling it up does not rehash (a batched fill from empty then costs
     * half to two thirds as much), and neither it nor the pool is ever
     * shrunk below that size: memory for `capacity` tasks (7.3 bytes each
     * of index at once, 52 each of pool as tasks arrive) stays allocated
     * while the instance lives, however few tasks are pending. With the default
     * allocator the pool groups the hint covers are huge pages from their
     * first touch. Past the hint the instance grows (and shrinks back to it)
     * as without one. Hints beyond 2^31 - 1 tasks are clamped to it; an
     * index that cannot be allocated makes tw_tasks_new fail with
     * TW_ENOMEM. Not a limit: see max_pending. */
    size_t capacity;
    /** Nonzero: every exact re-arm of a pending task (move, set of a present
     * key, and their batched forms) relocates its wheel node at once, as
     * tw_arm with TW_ARM_EAGER does (twheel/wheel.h, "Lazy or eager
     * re-arm"), so no advance moves it for that re-arm; a re-arm costs more (it touches the
     * node's old neighbours) and the advances that follow less. 0 (the
     * default): lazy, a re-arm to a later tick is one store and the advance
     * that reaches the old tick moves the task. Firing is the same either
     * way (every rule above holds as written). Arms with slack are not
     * affected: they relocate at once already. */
    int eager_rearm;
};

/** Largest config.slack_shift (1/2^63 of a delay); larger ones give TW_EINVAL. */
#define TW_TASKS_SLACK_SHIFT_MAX 63u

/** Figures, for tuning and for the benchmarks. */
struct tw_tasks_stats {
    size_t pending;        /**< tasks armed */
    size_t index_slots;    /**< capacity of the hash index */
    size_t index_tombs;    /**< deleted slots awaiting a rehash */
    size_t pool_entries;   /**< entries allocated (live + free), a multiple of the chunk */
    size_t bytes;          /**< every byte allocated by this instance, key blocks included */
    size_t max_probe;      /**< longest probe sequence of a pending key (O(n) to compute) */
};

/* ---- lifetime ------------------------------------------------------------ */

/** Create an instance. Returns 0 and sets *out, or TW_EINVAL (NULL out or cfg,
 * no execute, bad key_kind, allocator without fn, slack_shift too large) or TW_ENOMEM; *out is then
 * NULL and nothing is allocated. The seed comes from getrandom, else
 * /dev/urandom; where neither answers it falls back to the clock and an
 * address, which an attacker may guess: pass cfg.seed there. */
TW_API int tw_tasks_new(struct tw_tasks **out, const struct tw_tasks_config *cfg);

/** Free the instance and every pending task without running them.
 * O(pending). Returns 0 (NULL included: a no-op), or TW_EBUSY from execute or
 * drain's fn of this instance, which still use it: nothing is freed then
 * (the free rule of twheel/common.h). */
TW_API int tw_tasks_free(struct tw_tasks *t);

/* ---- operations ---------------------------------------------------------- */
/** @name Operations
 * Keys: `key`/`key_len` for string-key instances (key may not be NULL, key_len <=
 * TW_TASKS_KEY_MAX), `key` for integer-key instances (the *_int calls).
 * Delays are in ticks from tw_tasks_now(); 0 = the next tick; negative ->
 * TW_EINVAL. Every failing call changes nothing.
 * @{ */

/** Arm `key` to run `delay` ticks from now with `value`. Returns 1 if the key
 * was new, 0 if it was present (its value replaced, re-armed; its previous
 * arming will not run), or TW_EINVAL, TW_E2BIG, TW_EFULL (max_pending reached
 * and the key is new), TW_ENOMEM, TW_ERANGE (time is at UINT64_MAX: no later
 * tick exists). */
TW_API int tw_tasks_set(struct tw_tasks *t, const void *key, size_t key_len, void *value,
                        int64_t delay);
/** As tw_tasks_set, for an integer key. */
TW_API int tw_tasks_set_int(struct tw_tasks *t, uint64_t key, void *value, int64_t delay);

/** Re-arm a present key to `delay` ticks from now, keeping its value. Returns
 * 0, TW_ENOENT (absent: nothing happens), TW_EINVAL, TW_E2BIG, TW_ERANGE (as
 * set). */
TW_API int tw_tasks_move(struct tw_tasks *t, const void *key, size_t key_len, int64_t delay);
/** As tw_tasks_move, for an integer key. */
TW_API int tw_tasks_move_int(struct tw_tasks *t, uint64_t key, int64_t delay);

/** As tw_tasks_set, with an explicit slack whatever config.slack_shift: the
 * task fires at some tick in [now + delay, now + delay + slack] (see
 * "Slack" above; 0 = exact). Same results as tw_tasks_set. */
TW_API int tw_tasks_set_slack(struct tw_tasks *t, const void *key, size_t key_len, void *value,
                              int64_t delay, uint64_t slack);
/** As tw_tasks_set_slack, for an integer key. */
TW_API int tw_tasks_set_slack_int(struct tw_tasks *t, uint64_t key, void *value, int64_t delay,
                                  uint64_t slack);
/** As tw_tasks_move, with an explicit slack whatever config.slack_shift: the
 * task fires at some tick in [now + delay, now + delay + slack] (0 = exact).
 * Same results as tw_tasks_move. */
TW_API int tw_tasks_move_slack(struct tw_tasks *t, const void *key, size_t key_len, int64_t delay,
                               uint64_t slack);
/** As tw_tasks_move_slack, for an integer key. */
TW_API int tw_tasks_move_slack_int(struct tw_tasks *t, uint64_t key, int64_t delay,
                                   uint64_t slack);

/** Forget a key: its task will not run. Returns 0, TW_ENOENT, TW_EINVAL,
 * TW_E2BIG. If `value` is not NULL it receives the task's value. Never
 * allocates. */
TW_API int tw_tasks_remove(struct tw_tasks *t, const void *key, size_t key_len, void **value);
/** As tw_tasks_remove, for an integer key. */
TW_API int tw_tasks_remove_int(struct tw_tasks *t, uint64_t key, void **value);

/** Look a key up without changing anything. Returns 0 (filling *value and
 * *deadline, the tick it is due at (with slack: its planned tick), where not
 * NULL), TW_ENOENT, TW_EINVAL, TW_E2BIG. */
TW_API int tw_tasks_get(const struct tw_tasks *t, const void *key, size_t key_len, void **value,
                        uint64_t *deadline);
/** As tw_tasks_get, for an integer key. */
TW_API int tw_tasks_get_int(const struct tw_tasks *t, uint64_t key, void **value,
                            uint64_t *deadline);

/* ---- batched keyed calls ------------------------------------------------- */
/* For a caller with many keys at once. With millions of tasks every keyed
 * call waits on DRAM two to five times (the index slot, the entry, the wheel
 * neighbours it unlinks from; with string keys the caller's key bytes too);
 * a batched call overlaps those waits by prefetching a few groups of items
 * ahead (bench/README.md, "Batched keyed calls", has the figures).
 *
 * Semantics: exactly those of calling the single function on each item in
 * array order (duplicates included; each item sees the effects of the ones
 * before it), with each item's result stored in item->result. Items may mix
 * valid and invalid keys or delays: a bad item gets its error and the others
 * go on. Like the single calls they may be made from execute or drain's fn. */

/** One key of a batched call (tw_tasks_set_many and friends). Fill the key
 * fields of the instance's kind and the inputs of the call; the call fills
 * the outputs. */
struct tw_tasks_item {
    const void *key;     /**< in, string keys: the key's bytes (NULL -> TW_EINVAL) */
    size_t key_len;      /**< in, string keys: its length (> TW_TASKS_KEY_MAX -> TW_E2BIG) */
    uint64_t key_int;    /**< in, integer keys: the key */
    void *value;         /**< set: in, the value; remove and get: out, the task's value */
    int64_t delay_ticks; /**< set and move: in, ticks from now (as the single calls; the
                              runner's batched calls take tw_runner_item, in ns) */
    uint64_t deadline;   /**< get: out, the tick the task is due at */
    int result;          /**< out: what the single call returns for this item */
};

/** tw_tasks_set / tw_tasks_set_int on each of items[0..n) in order (see
 * "batched keyed calls"). Returns how many items succeeded (result >= 0), or
 * TW_EINVAL (t NULL, or items NULL with n > 0) having done nothing. */
TW_API int64_t tw_tasks_set_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n);
/** tw_tasks_move / tw_tasks_move_int on each item in order; as set_many. */
TW_API int64_t tw_tasks_move_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n);
/** tw_tasks_remove / tw_tasks_remove_int on each item in order (each found
 * task's value goes to item->value); as set_many. */
TW_API int64_t tw_tasks_remove_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n);
/** tw_tasks_get / tw_tasks_get_int on each item (filling value and deadline
 * of the found ones); as set_many. Changes nothing. */
TW_API int64_t tw_tasks_get_many(const struct tw_tasks *t, struct tw_tasks_item *items,
                                 size_t n);

/** Remove every pending task, then call fn(ctx, task) once for each (fn NULL:
 * the config's execute and ctx), in an unspecified order. Tasks that fn sets
 * are new tasks, not drained by this call. Returns the number of tasks
 * drained, or TW_EINVAL. Never fails for want of memory, though it may
 * allocate: afterwards it shrinks the index (a new, smaller one) and
 * compacts the pool (a bitmap of the entries in use), and when such an
 * allocation fails the larger index stays, or the free list is walked
 * instead. */
TW_API int64_t tw_tasks_drain(struct tw_tasks *t, tw_tasks_fn *fn, void *ctx);

/** Advance time to `now`, running each task due by then in deadline order.
 * Returns the number of tasks run, TW_EINVAL, or TW_EBUSY from inside execute
 * or drain's fn. An earlier `now` is a no-op. */
TW_API int64_t tw_tasks_advance(struct tw_tasks *t, uint64_t now);

/** As tw_tasks_advance, but run at most `max` tasks (0 = no limit). When it
 * stops at the limit, time is the deadline of the last task run and the
 * remaining due tasks run on the next call. For callers that must not hold
 * on for long (tw_runner). */
TW_API int64_t tw_tasks_advance_max(struct tw_tasks *t, uint64_t now, size_t max);
/** @} */

/* ---- figures --------------------------------------------------------------- */
/* Getters and NULL (the rule of twheel/common.h): pending and now return 0,
 * next_expiry TW_NEVER; stats returns TW_EINVAL. */

/** Tasks armed. O(1). 0 for NULL. */
TW_API size_t tw_tasks_pending(const struct tw_tasks *t);
/** The instance's current tick. O(1). 0 for NULL. */
TW_API uint64_t tw_tasks_now(const struct tw_tasks *t);
/** The earliest tick at which something may be due (see tw_wheel_next_expiry),
 * TW_NEVER when nothing is pending or t is NULL. O(1). */
TW_API uint64_t tw_tasks_next_expiry(const struct tw_tasks *t);
/** Fill *out. O(index size) because of max_probe. Returns 0, or TW_EINVAL
 * for a NULL t or out (*out untouched; the stats rule of twheel/common.h). */
TW_API int tw_tasks_stats(const struct tw_tasks *t, struct tw_tasks_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_TASKS_H */
