/* SPDX-License-Identifier: MIT */
/** @file
 * twheel durable layer: delayed tasks that survive crashes and span machines.
 *
 * Redis (one standalone server, or a Redis Cluster) holds every task; each
 * worker process claims the near window of due work with a lease and keeps it
 * in a local timing wheel, so a task runs at its tick, not at the next poll.
 * This is the only part of twheel that links hiredis (library target
 * twheel_redis, CMake option TWHEEL_BUILD_REDIS).
 *
 * Contract (each rule has a test against a real redis-server):
 *  - set/move/remove are durable in Redis before they return.
 *  - Never early: a task runs at or after its due time by the Redis server's
 *    clock (a worker whose clock is skewed cannot run it early).
 *  - At least once, one holder at a time: a claimed task carries a lease
 *    (token + deadline); only the current token can acknowledge it; a worker
 *    that dies or stalls past its lease loses it and the task is delivered
 *    again with attempt + 1.
 *  - No stale deletes; replace and remove win: once set/move/remove returned,
 *    no worker starts the old arming. A start is granted up to start_ahead_ms
 *    (default 10 ms) before the due time: a call that returns after that
 *    finds the arming started, as a running one (set start_ahead_ms = 0 for
 *    starts at the due time only).
 *  - Catch-up: tasks that became due while no worker (or Redis) ran are
 *    delivered as soon as a worker runs, in due order, with their due time.
 *    Two exceptions, both about tasks that are not waiting in Redis when it
 *    comes back: tasks a worker had already claimed when Redis went away
 *    (due within its window_ms, or running) come back as its retried starts
 *    or their ending leases bring them, in no set order with the rest; and
 *    in a Redis Cluster, a master that stays unreachable does not hold the
 *    others back: its partitions' tasks come when it is back, possibly after
 *    later tasks of other masters.
 *  - A cluster master away, or a slot migrating: while a master refuses
 *    connections (down, restarting) the other masters' tasks keep running on
 *    time, as a worker's claim and start rounds give up on it (or on the
 *    migrating slot's partitions) after a few ms (20 for a claim, 5 for a
 *    start) and retry in later rounds; set/move/remove of such a partition
 *    retry until command_timeout_ms. A master that accepts connections but
 *    does not answer (stopped, or cut off while its socket stays open)
 *    holds each start round that includes its tasks for command_timeout_ms,
 *    and the other masters' tasks of that round, or all of them while every
 *    executor is so held.
 *  - No polling for due work.
 *
 * Threads: set/move/remove/set_many/stats may be called from any thread
 * (they share one set of connections under a mutex). A worker runs a claim
 * thread, a subscriber thread, a tick thread, an acknowledger thread and
 * `threads` executor threads, each with its own connections. execute may
 * call set/move/remove on the same client; it must not call stop or free.
 *
 * SIGPIPE: hiredis writes with write(), so writing to a connection whose
 * server died raises SIGPIPE, whose default action ends the process. The
 * worker's own threads run with SIGPIPE blocked (the write fails with EPIPE
 * and the connection is remade); execute runs on them, so its writes to a
 * closed socket or pipe fail with EPIPE too, and a thread it starts inherits
 * the blocked SIGPIPE. Calls on the application's threads (set, move,
 * remove, set_many, stats, stop) write there, so a program using this layer
 * should ignore SIGPIPE (`signal(SIGPIPE, SIG_IGN)`) or block it in its
 * threads, as any program writing to sockets must. The library never
 * changes the process's disposition.
 *
 * Durability: a call returns once Redis has applied it; what survives a crash
 * of Redis itself is Redis's choice: with `appendonly yes` and `appendfsync
 * always` nothing acknowledged is lost; `appendfsync everysec` (Redis's
 * default with AOF) may lose the last second of sets, moves, removes and
 * acknowledgements (a lost acknowledgement means a second delivery, a lost
 * set a task never delivered); RDB snapshots alone lose everything since the
 * last snapshot. With replicas, a failover may lose what the master had not
 * replicated yet. `appendfsync always` also puts the disk on the lateness
 * path: every start and claim writes, so its answer waits for an fsync.
 *
 * Lateness: a worker claims tasks window_ms ahead (every window_ms / 2) and
 * holds them in a wheel of tick_ms ticks; it starts them in Redis
 * start_ahead_ms / 2 to start_ahead_ms before they are due (one round trip
 * per such span) and runs each at its due time by the server's clock, so a
 * task normally runs within the worker's own wake-up latency of its due
 * time (with start_ahead_ms = 0: within a tick plus one round trip). A task
 * set or moved earlier than what workers hold reaches them through a
 * PUBLISH on its partition's channel. Tasks due while no worker ran are
 * handed to the executors in due order, and a worker takes no more due work
 * than its executors can start soon (128 tasks per thread), so that a
 * backlog is shared by the workers instead of expiring in one worker's queue.
 *
 * Memory in Redis: about 170 B per pending task with 16-byte keys and
 * 32-byte payloads (a HASH field holding the record, ~130 B, and an entry in
 * a small ZSET of the tasks due in the same 500 ms of the same partition,
 * ~25 B), while each partition has at most about 256 tasks due per second
 * (Redis's zset-max-listpack-entries: 128 per 500 ms) and keys are at most
 * 64 bytes (zset-max-listpack-value); 1e5 tasks due over a minute on the
 * default 16 partitions is ~53 per 500 ms. A denser 500 ms slice costs
 * ~120 B per task more until it is emptied (every call stays O(log n));
 * raise `partitions` to keep the density down.
 *
 * Acknowledgements are delayed: a task that answered DONE is deleted from
 * Redis by the worker's next start call (on a standalone server any start
 * call of that worker; in a Redis Cluster one of the same partition: one
 * script call for both), or after at most 100 ms (lease_ms / 8 if that is
 * less) by a call of its own. So `pending` and `delivered` in the stats lag
 * execute by up to that much, and a worker that dies leaves up to that much
 * more of its finished tasks unacknowledged: they are delivered again when
 * their leases end (at-least-once; the same as an acknowledgement lost on
 * the way). stop sends every delayed acknowledgement before it returns.
 *
 * Leases: lease_ms bounds both how long a claimed task may wait in a worker's
 * wheel past its due time and how long execute may run: the lease is renewed
 * to (at least) now + lease_ms when the task is started, and not extended
 * while it runs. An execute that runs longer loses its lease: the task is
 * delivered again and its acknowledgement is refused (stale_acks). When work
 * piles up an executor starts several tasks at once (one round trip) and
 * runs them one after the other, no more than a quarter of lease_ms of work
 * at a time, judged by the mean time of execute so far.
 */
#ifndef TWHEEL_REDIS_H
#define TWHEEL_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "twheel/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Longest key accepted, in bytes. */
#define TW_REDIS_KEY_MAX 512
/** Longest payload accepted, in bytes. */
#define TW_REDIS_PAYLOAD_MAX (1u << 20)
/** Longest delay accepted, in ms (about 31 years); more gives TW_EINVAL. */
#define TW_REDIS_DELAY_MAX 1000000000000LL
/** Most partitions a queue may have. */
#define TW_REDIS_PARTITIONS_MAX 16384u
/** Most executor threads of a worker. */
#define TW_REDIS_THREADS_MAX 256u

/** A client of one durable queue; with an execute callback, also a worker. */
struct tw_redis;

/** One delivery, as handed to the execute callback. Valid during the call only. */
struct tw_redis_task {
    const char *key;     /**< the task's key (not NUL-terminated) */
    size_t key_len;      /**< its length */
    const void *payload; /**< the payload bytes */
    size_t payload_len;  /**< their length */
    uint64_t due_ms;     /**< due time, ms since the epoch on the Redis server's clock */
    uint32_t attempt;    /**< 1 for the first delivery, 2 after one failure or lost lease, ... */
};

/** What execute answers. */
enum tw_redis_result {
    TW_REDIS_DONE = 0,  /**< the task is deleted (if the lease is still ours) */
    TW_REDIS_FAILED = 1 /**< the task is delivered again later, with backoff */
};

/** Runs a due task on one of the worker's executor threads. */
typedef enum tw_redis_result tw_redis_execute_fn(void *arg, const struct tw_redis_task *task);

/** Configuration; fill it with tw_redis_config_init, then change what you need. */
struct tw_redis_config {
    const char *const *servers; /**< "host:port" seeds: the server, or any nodes of a cluster */
    size_t nservers;            /**< number of seeds (>= 1) */
    const char *queue;          /**< queue name, the prefix of every key (default "twq") */
    uint32_t partitions;        /**< hash-tag partitions (default 16); every client of a queue must agree */
    tw_redis_execute_fn *execute; /**< NULL: a client only (set/move/remove/stats), no worker */
    void *arg;                  /**< passed to execute */
    uint32_t threads;           /**< executor threads running execute (default 4) */
    uint32_t lease_ms;          /**< lease length (default 30000) */
    uint32_t window_ms;         /**< how far ahead a worker claims into its wheel (default 2000) */
    uint32_t tick_ms;           /**< the local wheel's tick (default 1) */
    uint32_t retry_base_ms;     /**< backoff after FAILED: base * 2^(attempt-1) ... (default 1000) */
    uint32_t retry_max_ms;      /**< ... capped here (default 60000) */
    uint32_t connect_timeout_ms; /**< per connection attempt (default 1000) */
    uint32_t command_timeout_ms; /**< per call, retries included (default 2000) */
    /** How long before its due time a worker may start a task (default 10; 0: at the due
     * time only; at most 1000; capped at lease_ms / 4 and window_ms / 4). The worker starts
     * the tasks coming due in each start_ahead_ms / 2 together, start_ahead_ms / 2 to
     * start_ahead_ms ahead (with tick_ms over start_ahead_ms / 2: at the first tick at most
     * start_ahead_ms ahead), in one round trip (on a standalone server one script call), and
     * runs each at its due time by the server's clock: never early, and the round trip and
     * the tick thread's wake-ups are off the lateness path. The price: a task counts as
     * started (its attempt counted, its lease renewed) up to start_ahead_ms before it runs,
     * so a set, move or remove that returns in that span may no longer stop that delivery,
     * as for a task already running. */
    uint32_t start_ahead_ms;
    /** 0 (default): normal scheduling. 1..99: the worker's tick thread, and each executor
     * while it waits for a started task's due time (not while execute runs), use SCHED_FIFO at this
     * priority, so that a busy machine does not serve those wake-ups late. Needs root or
     * CAP_SYS_NICE (and an RLIMIT_RTPRIO that allows it); when refused, the thread keeps
     * normal scheduling and tw_redis_stats counts it in rt_refused (not an error). */
    uint32_t rt_priority;
};

/** Statistics; every count since tw_redis_new. */
struct tw_redis_stats {
    uint64_t pending;     /**< tasks stored in Redis (all partitions) */
    uint64_t leased;      /**< tasks this worker holds leases on now */
    uint64_t delivered;   /**< execute calls that answered DONE and were acknowledged
                               (acknowledgements are delayed up to 100 ms: see above) */
    uint64_t redelivered; /**< deliveries with attempt > 1 */
    uint64_t failed;      /**< execute calls that answered FAILED */
    uint64_t stale_acks;  /**< acknowledgements refused because the lease was no longer ours */
    uint64_t reconnects;  /**< connections re-established after a failure */
    uint64_t late_p50_us; /**< delivery lateness (a lower bound of the server's clock when
                               execute was called, - due), median, from a log-linear
                               histogram */
    uint64_t late_p99_us; /**< ... 99th percentile */
    uint64_t late_max_us; /**< ... maximum */
    uint64_t claims;      /**< claim script calls (refills, notifications, catch-up batches) */
    uint64_t refills;     /**< periodic refill rounds (one claim per partition, every window/2) */
    uint64_t notifications; /**< notifications received (a set earlier than the held window) */
    uint64_t recovered;   /**< expired leases this worker's claims moved back to due */
    uint64_t lost_leases; /**< held tasks not started because their lease was gone (replaced,
                               moved, removed or expired) */
    uint64_t rt_refused;  /**< threads refused the rt_priority of the config (they run with
                               normal scheduling) */
};

/** Fill @p cfg with the defaults above (servers NULL: must be set). No I/O. */
TW_API void tw_redis_config_init(struct tw_redis_config *cfg);

/** Connect and, with an execute callback, start the worker. Blocks while it
 * connects (connect_timeout_ms per attempt) and loads the scripts; a worker
 * then waits for its subscription, for at most connect_timeout_ms +
 * command_timeout_ms more. @p cfg and the strings it points to are copied;
 * arg stays the caller's. Any thread.
 * @return 0 and *out, or TW_EINVAL (bad config), TW_EIO (no server reachable),
 *         TW_EPROTO, TW_ENOMEM, TW_ESYS. */
TW_API int tw_redis_new(struct tw_redis **out, const struct tw_redis_config *cfg);

/** Store or replace a task due at now + delay_ms (Redis server clock); durable
 * when it returns. One script call (one round trip, O(log n) in Redis for n
 * tasks in the partition); retried with backoff for up to command_timeout_ms
 * while Redis is away or the slot migrates. Key and payload are copied to
 * Redis; the caller keeps them. Any thread, execute included.
 * @return 0, or TW_EINVAL (NULL, negative delay), TW_E2BIG, TW_EIO (nothing
 *         written), TW_EPROTO (Redis answered an error), TW_ECLOSED, TW_ENOMEM. */
TW_API int tw_redis_set(struct tw_redis *r, const void *key, size_t key_len,
                        const void *payload, size_t payload_len, int64_t delay_ms);

/** Re-arm a stored task to now + delay_ms; cost and threads as tw_redis_set.
 * @return 0, TW_ENOENT, or as tw_redis_set. */
TW_API int tw_redis_move(struct tw_redis *r, const void *key, size_t key_len, int64_t delay_ms);

/** Remove a task: not delivered after this returns (unless already running or started:
 * up to start_ahead_ms before its due time). Cost and threads as tw_redis_set.
 * @return 0, TW_ENOENT, or as tw_redis_set. */
TW_API int tw_redis_remove(struct tw_redis *r, const void *key, size_t key_len);

/** One item of tw_redis_set_many. */
struct tw_redis_item {
    const void *key;     /**< key bytes */
    size_t key_len;      /**< key length */
    const void *payload; /**< payload bytes */
    size_t payload_len;  /**< payload length */
    int64_t delay_ms;    /**< delay from now */
};

/** Pipelined sets: all items are validated first (one bad item: nothing sent);
 * then one script call per partition per 96 items, pipelined in chunks of
 * 512 calls. A key given twice: the last item wins. A larger batch costs
 * Redis less per item: each partition's items go in order of delay, so each
 * call covers a narrower band of due times. Items are copied to Redis; the
 * caller keeps them. Threads as tw_redis_set.
 * @return the number stored (n on success), or an error code as tw_redis_set;
 *         on TW_EIO some of the items may be stored (not necessarily a
 *         prefix), and which is not known. */
TW_API int tw_redis_set_many(struct tw_redis *r, const struct tw_redis_item *items, size_t n);

/** Stop claiming, let running callbacks finish, release held leases so other
 * workers take those tasks at once, send the delayed acknowledgements.
 * Idempotent; any thread, but not from execute. set, move, remove and
 * set_many then give TW_ECLOSED. Besides waiting for running callbacks,
 * normally a few round trips; with a server (or a cluster master) away, the
 * releases and the delayed acknowledgements sent to it fail after
 * command_timeout_ms each, and the claim round in progress may wait that
 * long too when no server answers, so stop then takes seconds. What it
 * could not release stays leased in Redis and is delivered when its lease
 * ends (a finished task whose acknowledgement failed, a second time).
 * @return 0 (TW_EINVAL for NULL). */
TW_API int tw_redis_stop(struct tw_redis *r);

/** Stop (if needed) and free everything; threads as tw_redis_stop, and no call
 * may use @p r after. What stop could not send stays leased in Redis (see
 * tw_redis_stop), so free has no error to report.
 * @return 0 (NULL included: a no-op; the free rule of twheel/common.h). */
TW_API int tw_redis_free(struct tw_redis *r);

/** Fill @p out: counters read locally, and `pending` by one HLEN round trip per
 * partition (under the client's mutex, as tw_redis_set). Any thread.
 * @return 0, TW_EINVAL (NULL r or out: *out untouched), or TW_EIO (pending
 *         unknown: set to UINT64_MAX, rest filled). */
TW_API int tw_redis_stats(const struct tw_redis *r, struct tw_redis_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_REDIS_H */
