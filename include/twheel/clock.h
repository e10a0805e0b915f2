/* SPDX-License-Identifier: MIT */
/** @file
 * twheel clock service: one thread that drives the expiry of many instances.
 *
 * A process with 100 caches should not run 100 expiry threads. Create one
 * tw_clock, pass it in each cache's config (tw_cache_config.clock), and all
 * of them share its single thread:
 *
 *   struct tw_clock *clk;
 *   if (tw_clock_new(&clk, NULL) == 0) {
 *       cfg.clock = clk;                  // for every cache
 *       ...
 *       // free every cache first, then:
 *       tw_clock_free(clk);
 *   }
 *
 * The thread sleeps on CLOCK_MONOTONIC until the earliest deadline among its
 * members (no wake-ups for empty ticks), runs every member that is due, one
 * after the other, and sleeps again. A member that arms an earlier deadline
 * wakes it (tw_clock_wake). Members are anything with a run function:
 * caches join by themselves; another component (a runner, your own timers)
 * joins with tw_clock_join. Members' run functions share the thread, so one
 * slow member delays the others: keep them short (a cache expires at most
 * 4096 keys per run, in batches of 64 per lock hold; a runner fires at most
 * 256 tasks per run; both ask to run again at once when more are due).
 *
 * Runners join a clock too (tw_runner_config.clock): then no runner starts a
 * tick thread. Their callbacks never run on the clock's thread: they run on
 * an executor pool, a struct tw_pool of N threads that many runners share
 * (tw_runner_config.pool), so that 1,000 runners and 1,000 caches run on one
 * clock thread and N pool threads:
 *
 *   struct tw_clock *clk;  struct tw_pool *pool;
 *   tw_clock_new(&clk, NULL);
 *   tw_pool_new(&pool, 4, NULL);          // 4 executor threads for all
 *   rcfg.clock = clk; rcfg.pool = pool;   // for every runner
 *   ccfg.clock = clk;                     // for every cache
 *   ...
 *   // free every runner and cache first, then:
 *   tw_pool_free(pool); tw_clock_free(clk);
 */
#ifndef TWHEEL_CLOCK_H
#define TWHEEL_CLOCK_H

#include <stdint.h>

#include "twheel/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A clock service: one thread and its members. Opaque. */
struct tw_clock;
/** One member's registration. Opaque. */
struct tw_clock_member;

/** "No deadline": a run function returns it when it has nothing pending. */
#define TW_CLOCK_NEVER UINT64_MAX

/** A member's work at time now_ns (CLOCK_MONOTONIC nanoseconds, as
 * tw_clock_now_ns). Returns the member's next deadline on the same time line
 * (<= now_ns: run again at once), or TW_CLOCK_NEVER. Runs on the service's
 * thread, never twice at once for one member; it must not join or leave any
 * member of this clock, nor free it. */
typedef uint64_t tw_clock_run_fn(void *ctx, uint64_t now_ns);

/** CLOCK_MONOTONIC in nanoseconds: the time line of every deadline here. */
TW_API uint64_t tw_clock_now_ns(void);

/** Create a clock service and start its thread. alloc may be NULL
 * (realloc/free); it is copied. Returns 0 and sets *out, or TW_EINVAL (NULL
 * out, allocator without fn), TW_ENOMEM, TW_ESYS (thread, lock or condition
 * creation failed). On failure *out is untouched. */
TW_API int tw_clock_new(struct tw_clock **out, const struct tw_allocator *alloc);

/** Stop the thread, join it and free the service. Returns 0 (NULL included:
 * a no-op), or TW_EBUSY when members are still joined (nothing is freed
 * then: free the caches and runners using it first). */
TW_API int tw_clock_free(struct tw_clock *k);

/** Join: run(ctx, now) will be called at first_ns (or at once if earlier)
 * and then at the deadlines it returns. Returns 0 and sets *out, TW_EINVAL
 * (NULL argument) or TW_ENOMEM. */
TW_API int tw_clock_join(struct tw_clock *k, tw_clock_run_fn *run, void *ctx, uint64_t first_ns,
                         struct tw_clock_member **out);

/** Leave: after it returns, run is not running and will not be called again
 * for this member, and m is freed. Must not be called from a run function of
 * this clock. NULL m is a no-op. */
TW_API void tw_clock_leave(struct tw_clock *k, struct tw_clock_member *m);

/** Ask for run to be called at at_ns at the latest (earlier deadlines win).
 * Cheap when the member is already due by then (one atomic load); wakes the
 * thread only when it sleeps past at_ns. Any thread, any time while m is
 * joined, run functions included. */
TW_API void tw_clock_wake(struct tw_clock *k, struct tw_clock_member *m, uint64_t at_ns);

/** Members joined now (0 for NULL). */
TW_API unsigned tw_clock_members(struct tw_clock *k);

/** An executor pool: threads that run the callbacks of many runners
 * (tw_runner_config.pool). Opaque. Each runner keeps its own bounded queue
 * of fired tasks; the pool's threads take the runners that have work in
 * turn (first come, first served, one task per turn), so one runner's tasks
 * start in the order they fired and a runner with a backlog does not starve
 * the others. A callback that blocks holds one pool thread, and so delays
 * the callbacks of every runner on the pool: give blocking work its own
 * pool. */
struct tw_pool;

/** Most threads in a pool. */
#define TW_POOL_THREADS_MAX 4096u

/** Create a pool and start its threads (1 .. TW_POOL_THREADS_MAX). alloc may
 * be NULL (realloc/free); it is copied. Returns 0 and sets *out, or
 * TW_EINVAL (NULL out, threads out of range, allocator without fn),
 * TW_ENOMEM, TW_ESYS (a thread or lock could not be created; nothing is left
 * behind). */
TW_API int tw_pool_new(struct tw_pool **out, unsigned threads, const struct tw_allocator *alloc);

/** Join the threads and free the pool. Returns 0 (NULL included: a no-op),
 * or TW_EBUSY when runners still use it (free them first) or when called
 * from one of its threads; nothing is freed then. */
TW_API int tw_pool_free(struct tw_pool *p);

/** The pool's thread count (0 for NULL). */
TW_API unsigned tw_pool_threads(const struct tw_pool *p);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_CLOCK_H */
