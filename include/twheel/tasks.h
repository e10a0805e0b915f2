/* SPDX-License-Identifier: MIT */
/** @file
 * twheel keyed layer: go-zero's TimingWheel API over the core wheel.
 *
 * A tw_tasks maps keys to tasks: set(key, value, delay) arms a task due
 * `delay` ticks from now, move re-arms it, remove forgets it, drain hands
 * every pending task over at once, and tw_tasks_advance runs execute(task)
 * for each task as it comes due. Time is in core ticks, moved by the caller
 * (tw_tasks_advance), as with tw_wheel. The rules (exact firing, order,
 * exactly once, re-entrancy, slack, eager re-arm) are in docs/contracts.md,
 * "Keyed tasks"; tests/test_tasks_rules.c pins each one.
 *
 * Keys are byte strings (copied, 0..TW_TASKS_KEY_MAX bytes, equal when their
 * bytes are) or 64-bit integers, chosen at creation; the calls of the other
 * kind return TW_EINVAL. Values are the caller's pointers, never touched.
 * Keys are hashed with a per-instance random seed, so that keys an adversary
 * chooses cannot be made to collide (integer keys: a seeded mixer, not a
 * PRF; against an attacker who can also time your calls, use string keys).
 *
 * Threads: none; one thread at a time. tw_runner (twheel/runner.h) is the
 * thread-safe service around a tw_tasks.
 *
 * Memory: an empty instance is one allocation of about 31 KB, mostly the
 * core wheel. A task takes at most 64 bytes of entry and index, plus a
 * block of its length + 2 bytes for a string key longer than 15 bytes (with
 * the default allocator, in a large pool, the newest 2 MB block of entries
 * counts whole before it fills). Memory is given back: the index
 * shrinks as tasks leave, and once under a quarter of the entries are live
 * the next set, advance or drain moves the live ones down and frees the
 * rest (amortised O(1) per removal; remove itself moves nothing), never
 * below config.capacity. With config.allocator every byte comes from it.
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
     * delay >> slack_shift ticks (3 = 1/8 of the delay). 0 = exact (the
     * default); at most TW_TASKS_SLACK_SHIFT_MAX. */
    unsigned slack_shift;
    /** How many tasks the instance is expected to hold (0 = no hint): the
     * index is made for that many at creation, so that a fill up to it
     * never rehashes, and neither the index nor the entries shrink below
     * it: memory for `capacity` tasks stays allocated while the instance
     * lives (the index at once, entries as tasks arrive). Past the hint the
     * instance grows and shrinks back to it. Hints beyond 2^31 - 1 are
     * clamped to it; an index that cannot be allocated makes tw_tasks_new
     * fail with TW_ENOMEM. Not a limit: see max_pending. */
    size_t capacity;
    /** Nonzero: every exact re-arm of a pending task (move, set of a present
     * key, and their batched forms) relocates its wheel node at once
     * (tw_arm with TW_ARM_EAGER): a re-arm costs more, the advances
     * after it less. 0 (the default): lazy, a re-arm to a later tick is one
     * store, and the task is moved later by a walk of its slot, which later
     * lazy re-arms (up to TW_WHEEL_REARM_MOVES_MAX tasks, one in eight) and
     * advances take steps of (twheel/wheel.h). When tasks fire does not
     * change. Arms with slack relocate at once either way. */
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

/** Create an instance; the caller owns it (tw_tasks_free). Returns 0 and
 * sets *out, or TW_EINVAL (NULL out or cfg, no execute, bad key_kind,
 * allocator without fn, slack_shift too large) or TW_ENOMEM; *out is then
 * NULL and nothing is allocated. O(config.capacity). The seed comes from
 * getrandom, else /dev/urandom, else the clock and an address, which an
 * attacker may guess: where neither answers, pass cfg.seed. */
TW_API int tw_tasks_new(struct tw_tasks **out, const struct tw_tasks_config *cfg);

/** Free the instance and every pending task without running them.
 * O(pending). Returns 0 (NULL included: a no-op), or TW_EBUSY from execute or
 * drain's fn of this instance, which still use it: nothing is freed then
 * (the free rule of twheel/common.h). */
TW_API int tw_tasks_free(struct tw_tasks *t);

/* ---- operations ---------------------------------------------------------- */
/** @name Operations
 * Keys: `key`/`key_len` for string-key instances (key not NULL, key_len <=
 * TW_TASKS_KEY_MAX, else TW_EINVAL or TW_E2BIG), `key` for integer-key
 * instances (the *_int calls). Delays are in ticks from tw_tasks_now(); 0 =
 * the next tick; negative: TW_EINVAL. Every failing call changes nothing.
 * A keyed call costs O(1) expected: one hash, a few index slots, one entry;
 * an insert that grows the index rehashes it (amortised O(1)). All may be
 * called from execute and drain's fn, on any key.
 * @{ */

/** Arm `key` to run `delay` ticks from now with `value` (a string key is
 * copied). Returns 1 if the key was new, 0 if it was present (its value
 * replaced, re-armed; its previous arming will not run), or TW_EINVAL,
 * TW_E2BIG, TW_EFULL (max_pending reached and the key is new), TW_ENOMEM,
 * TW_ERANGE (time is at UINT64_MAX: no later tick exists). */
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
 * task fires at some tick in [now + delay, now + delay + slack] (0 = exact).
 * Same results as tw_tasks_set. */
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
/* For a caller with many keys at once: exactly the single call on each item
 * in array order (duplicates included; each item sees the effects of the
 * ones before it), each item's result in item->result; a bad item gets its
 * error and the others go on. Cost: that of the single calls, less the
 * cache misses a batch overlaps (with many tasks, most of a single call's).
 * Like the single calls they may be made from execute or drain's fn. */

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
 * drained, or TW_EINVAL. O(pending + index size). It may allocate (to give
 * memory back afterwards) but never fails for want of memory. */
TW_API int64_t tw_tasks_drain(struct tw_tasks *t, tw_tasks_fn *fn, void *ctx);

/** Advance time to `now`, running each task due by then in deadline order;
 * each has left the instance when execute runs. Returns the number of tasks
 * run, TW_EINVAL, or TW_EBUSY from inside execute or drain's fn. An earlier
 * `now` is a no-op. Costs the core's advance plus O(1) per task run. */
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
/** The earliest tick at which advancing has work: the next expiry, or a
 * step of the walks that move lazily moved tasks (see tw_wheel_next_work).
 * A loop that sleeps between advances sleeps until this to keep each
 * advance's moves bounded. TW_NEVER when nothing is pending or t is NULL.
 * O(1). */
TW_API uint64_t tw_tasks_next_work(const struct tw_tasks *t);
/** Fill *out. O(index size) because of max_probe. Returns 0, or TW_EINVAL
 * for a NULL t or out (*out untouched; the stats rule of twheel/common.h). */
TW_API int tw_tasks_stats(const struct tw_tasks *t, struct tw_tasks_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_TASKS_H */
