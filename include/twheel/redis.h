/* SPDX-License-Identifier: MIT */
/** @file
 * twheel durable layer: delayed tasks that survive crashes and span machines.
 *
 * Redis (one standalone server, or a Redis Cluster) holds every task; each
 * worker process claims the near window of due work with a lease and runs
 * each task at its due time. A library of its own (twheel_redis, CMake
 * option TWHEEL_BUILD_REDIS), the only part of twheel that links hiredis.
 * The rules, each tested against a real redis-server (docs/contracts.md
 * states them in full):
 *  - set/move/remove are durable in Redis when they return.
 *  - Never early: a task runs at or after its due time by the Redis
 *    server's clock.
 *  - At least once, one holder at a time: a worker that dies or outlives
 *    its lease loses the task, which is delivered again with attempt + 1;
 *    a stale acknowledgement deletes nothing.
 *  - Replace and remove win: once set/move/remove returned, no worker
 *    starts the old arming, unless it was started already: starts are
 *    granted up to start_ahead_ms before the due time.
 *  - Catch-up: tasks that came due while no worker (or Redis) ran are
 *    delivered once a worker runs, in due order; except those a worker had
 *    claimed already, and in a cluster those of a master still away.
 *  - No polling for due work.
 *  - Faults: a call gives TW_EIO after command_timeout_ms of failed tries
 *    when nothing was sent (nothing written), and TW_EUNKNOWN when a try was
 *    sent and its reply lost (a timeout, a connection closed after the
 *    write): the call may have been applied, then or later (a stalled
 *    server runs it when it resumes). A reply lost before the timeout is
 *    retried, and the retry answers for the call: a retried remove or move
 *    answers for its own first run (never TW_ENOENT for its own removal,
 *    never a second move); a retried set stores the task again. Nothing
 *    half-written (set_many aside); in a cluster, a master that refuses
 *    connections, or hangs with its connections open, does not hold the
 *    other masters' tasks back: a worker waits 30 ms at most for a master's
 *    answer before it leaves that master's partitions alone until it
 *    answers again (its tasks then run, none lost). A producer's call (set,
 *    move, remove, set_many, stats) on a hung master still waits
 *    command_timeout_ms.
 *
 * Threads: every call but execute's may come from any thread; set, move,
 * remove, set_many and stats share one set of connections under a mutex.
 * execute runs on the worker's executor threads and may call set, move,
 * remove, set_many and stats on the same client, never stop or free.
 *
 * SIGPIPE: the worker's own threads (execute's included) block it, so a
 * write to a closed socket fails with EPIPE there. set, move, remove,
 * set_many, stats and stop write on the caller's thread: ignore or block
 * SIGPIPE there (`signal(SIGPIPE, SIG_IGN)`). The library never changes the
 * process's disposition.
 *
 * Durability is Redis's configuration: with `appendfsync always` nothing
 * acknowledged is lost, `everysec` may lose the last second of writes (a
 * lost acknowledgement is a second delivery, a lost set a task never
 * delivered), RDB alone everything since the last snapshot.
 *
 * Memory: Redis must keep the queue's keys. tw_redis_new refuses a server
 * whose maxmemory-policy may evict them, unless the caller accepts the risk
 * (accept_evicting_policy). At maxmemory under noeviction new work is
 * refused (TW_EOOM) and workers still drain the queue.
 *
 * Leases: a worker claims tasks up to window_ms (plus 500 ms: Redis keeps
 * them in 500 ms buckets and a claim takes buckets whole) before they are due and
 * holds them with a short lease, the hold, that ends hold_ms (default 1 s)
 * after the due time; starting a task lengthens its lease to lease_ms past
 * the later of its due time and the start. So the tasks a worker held but
 * had not started when it died (or that a claim leased but whose answer was
 * lost) are delivered again about hold_ms after their due time, and
 * lease_ms bounds how long execute may run (the lease is not renewed while
 * execute runs): an execute that runs longer loses its lease and the task
 * is delivered again. A live worker that is slow to start a held task (its
 * executors busy) loses it only when another worker's claim takes it back
 * first: its own start then finds the lease gone, and it does not run it.
 *
 * Fencing: execute is called only while the lease surely still runs by the
 * server's clock (checked just before the call, with the margins below);
 * otherwise the task is dropped (counted in `fenced`) and delivered again
 * elsewhere. A worker that stalls (a pause, a stopped process, a swapped
 * machine) past its lease therefore calls execute on none of the tasks it
 * had started. execute itself can outlive the lease: struct tw_redis_task
 * carries the lease's end (lease_end_ms on the server's clock,
 * lease_deadline_ns on the worker's CLOCK_MONOTONIC) and a fencing token
 * (token, with attempt). An application whose store must refuse a stale
 * writer keeps, per key, the highest token it has accepted, and applies a
 * write only if its token is at least that (one conditional write: SQL
 * `UPDATE ... SET ..., fence = $token WHERE key = $key AND fence <= $token`,
 * a Redis script, a compare-and-set); or, without conditional writes,
 * checks CLOCK_MONOTONIC against lease_deadline_ns before it commits. A
 * token is larger for every later lease of the same key: tokens come from
 * one counter per partition of the queue, kept in Redis with the queue (a
 * server that loses its data, or a queue moved to another partition count,
 * starts another series: the store's fence must then be reset).
 *
 * Clocks: the contract assumes (1) a worker's clocks (CLOCK_MONOTONIC)
 * run at the server's rate within TW_REDIS_CLOCK_RATE_PPM (0.1%); clock
 * offsets of any size are fine: the worker measures them; and (2) after a
 * failover or a slot migration, the master that now serves a partition has
 * a clock within Y of the previous one's, Y being what the operator's time
 * synchronisation keeps (NTP: typically well under 10 ms). Under (1) never
 * early and fencing hold by the clock of the master that STARTs the task:
 * every wait after START is lengthened, and every span a lease is trusted
 * for shortened, by TW_REDIS_CLOCK_RATE_PPM. Under (2) a due time read from
 * one master's TIME is met by its next master's clock: by the first one's, a
 * task may run up to Y early, and a lease end may differ by Y; the layer
 * cannot correct that (no clock is shared), so keep Y well under hold_ms.
 *
 * Acknowledgements are delayed by up to 100 ms (lease_ms / 8 if less):
 * `pending` and `delivered` lag execute by that much, and a worker that dies
 * leaves that much of its finished tasks to be delivered again. stop sends
 * them all.
 *
 * Connecting: each `servers` entry is one of
 *  - `host:port`, `[ipv6]:port`: TCP, no credentials (the plain form);
 *  - `/path/to/redis.sock`: a unix domain socket (the plain form);
 *  - `redis://[user[:password]@]host[:port][/db]`: TCP, port 6379 by default,
 *    host a name, an IPv4 address or `[ipv6]`;
 *  - `unix://[user[:password]@]/path/to/redis.sock[?db=N]`.
 * User and password are percent-decoded (`%40` for `@`; `:`, `/`, `?`, `#`
 * and `%` must be encoded, an `@` need not be); schemes are matched without
 * regard to case; a db is 0..1000000 (SELECT; a cluster has db 0 only);
 * queries other than a socket's `?db=`, and fragments, are refused. Reserved,
 * refused with TW_EINVAL for now: `rediss://` (TLS, same form) and
 * `redis+sentinel://[user[:password]@]host[:port]/master-name[/db]` (one
 * Sentinel per entry, port 26379 by default). Credentials come from the
 * URLs or from the username and password fields, not both (TW_EINVAL); URLs
 * that carry credentials must carry the same, URLs that name a db the same
 * db, and entries without them share them: one user, one password and one
 * db for every connection. Every connection the layer opens (the client's,
 * the claim, subscriber, executor and acknowledger threads', each cluster
 * node learnt from CLUSTER SLOTS, each reconnect) sends `AUTH password`, or
 * `AUTH user password` with a user (a user without a password sends "", which
 * a `nopass` user accepts), then `SELECT db` for a db other than 0. A
 * refusal is TW_EAUTH. Credentials never appear in stats or error texts: a
 * text names a server by its address only.
 *
 * The least ACL rule, for queue Q (glob characters of Q escaped):
 *
 *     ACL SETUSER twheel on >PASSWORD resetkeys resetchannels ~{Q:* &{Q:*}:ch
 *         -@all +evalsha +eval +script|load +cluster|slots +time +hlen
 *         +exists +get +set +hget +hmget +hset +hdel +incrby +publish
 *         +zadd +zrangebyscore +zrem +zscore +zmscore
 *         +rpush +llen +lrange +ltrim +lrem +del
 *         +subscribe +asking +select +info
 *
 * The keys are the queue's, `{Q:partition}...`, and the channels
 * `{Q:partition}:ch`; the commands are those the layer sends itself (EVALSHA
 * and EVAL of its scripts, SCRIPT LOAD, CLUSTER SLOTS, TIME, HLEN for
 * stats, INFO for the maxmemory-policy check; SUBSCRIBE for a worker, ASKING in a cluster, SELECT with a db other
 * than 0: those three may be left out where they are not used) and those its
 * scripts call, which run under the same user. With Redis 7 or later,
 * tw_redis_new asks the server's ACL (redis.acl_check_cmd, one EVAL) for
 * every one of them on the queue's keys and channel before anything is
 * written, and fails with TW_EAUTH whose text names the first refused
 * (`NOPERM ... 'zadd {Q:0}:d:0 1 k' ...`). A rule changed later shows as
 * TW_EAUTH from the calls, or in tw_redis_worker_error for the worker's
 * threads (Redis's words in a script do not name the command there).
 *
 * The server's words: a call that fails on an error reply keeps it, and
 * tw_redis_last_error gives the calling thread the text of its last call
 * (NOAUTH, WRONGPASS, NOPERM, OOM ..., or the connection's failure with the
 * server's address); tw_redis_new writes its failure into the config's
 * errbuf.
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
/** Shortest lease_ms a worker accepts (less gives TW_EINVAL; so does less than 4 * tick_ms).
 * A lease must outlast what a worker does between a START and the end of the work it
 * protects: the wait until the due time (start_ahead_ms, capped at lease_ms / 4), the tasks
 * of its batch run before it (a batch is cut to a quarter of the lease), the delayed
 * acknowledgement (lease_ms / 8 at most), and the fixed costs no fraction of the lease
 * covers: a tick of the local wheel, a START retried 100 ms after a lost reply, round trips
 * and thread wake-ups. Below 200 ms those fixed costs alone can outlast the lease, and the
 * queue churns: tasks claimed, their leases gone before they start, claimed again. */
#define TW_REDIS_LEASE_MIN_MS 200u
/** Shortest hold_ms accepted by a worker. */
#define TW_REDIS_HOLD_MIN_MS 100u
/** How far a worker's clock rate may differ from the server's, in parts per
 * million (0.1%): the margin of every wait after START and of fencing (see
 * "Clocks" above). A divisor of 1000000. */
#define TW_REDIS_CLOCK_RATE_PPM 1000u

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
    /** Fencing token: the lease's token, larger for every later lease of this key (see
     * "Fencing" above); with attempt, what a store records to refuse a stale writer. */
    uint64_t token;
    /** The lease's end, ms since the epoch on the Redis server's clock (a lower bound:
     * at least due_ms + lease_ms); past it, the task may be delivered to another worker. */
    uint64_t lease_end_ms;
    /** The same end on this worker's CLOCK_MONOTONIC, in ns, made early by the clock
     * margins: before it, the lease surely still runs. execute is called before it. */
    uint64_t lease_deadline_ns;
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
    const char *const *servers; /**< the server, or any nodes of a cluster: "host:port",
                                     "/socket/path" or URLs (Connecting, above) */
    size_t nservers;            /**< number of seeds (>= 1) */
    const char *queue;          /**< queue name, the prefix of every key (default "twq") */
    uint32_t partitions;        /**< hash-tag partitions (default 16); every client of a queue must
                                     agree: the first stores it with the queue, another count gives
                                     TW_ECONFLICT (tw_redis_new) */
    tw_redis_execute_fn *execute; /**< NULL: a client only (set/move/remove/stats), no worker */
    void *arg;                  /**< passed to execute */
    uint32_t threads;           /**< executor threads running execute (default 4) */
    uint32_t lease_ms;          /**< lease length (default 30000) */
    uint32_t window_ms;         /**< how far ahead a worker claims tasks (default 2000) */
    uint32_t tick_ms;           /**< the worker's local tick (default 1) */
    uint32_t retry_base_ms;     /**< backoff after FAILED: base * 2^(attempt-1) ... (default 1000) */
    uint32_t retry_max_ms;      /**< ... capped here (default 60000) */
    uint32_t connect_timeout_ms; /**< per connection attempt (default 1000) */
    uint32_t command_timeout_ms; /**< per call, retries included (default 2000) */
    /** How long before its due time a worker may start a task in Redis (default 10; 0: at
     * the due time only; at most 1000; capped at lease_ms / 4 and window_ms / 4); it still
     * runs the task at its due time. A task counts as started (attempt counted, lease
     * renewed) up to this long before it runs: a set, move or remove returning in that span
     * may no longer stop that delivery, as for a running task. */
    uint32_t start_ahead_ms;
    /** 0 (default): normal scheduling. 1..99: the worker's tick thread, and each executor
     * while it waits for a task's due time (not while execute runs), use SCHED_FIFO at this
     * priority. Needs root or CAP_SYS_NICE (and an RLIMIT_RTPRIO that allows it); when
     * refused, the thread keeps normal scheduling and stats count it in rt_refused. */
    uint32_t rt_priority;
    /** false (default): tw_redis_new refuses (TW_ECONFLICT) a server, or a cluster master,
     * whose maxmemory-policy may evict the queue's keys: allkeys-lru, allkeys-lfu,
     * allkeys-random, or a policy it cannot read; noeviction and the volatile-* policies are
     * safe (see tw_redis_new). true: the caller accepts tasks lost to eviction; stats count
     * such servers in evicting_nodes. */
    bool accept_evicting_policy;
    /** ACL user for AUTH (NULL: none, or a URL's); copied. Not with credentials in URLs. */
    const char *username;
    /** Password for AUTH (NULL: none, or a URL's); copied, wiped at free. Not with
     * credentials in URLs. */
    const char *password;
    /** Where tw_redis_new writes, when it fails, what failed (it writes "" first): the
     * server's own words when a server refused (e.g. "127.0.0.1:6379: WRONGPASS invalid
     * username-password pair or user is disabled."), hiredis' with the server's address
     * when none answered, or which entry of the config is wrong and why; never a
     * credential. NUL-terminated, cut to errbuf_len bytes. NULL: nothing written.
     * Written during tw_redis_new only. */
    char *errbuf;
    size_t errbuf_len; /**< bytes at errbuf (256 holds any text the layer writes) */
    /** How long past its due time a claimed task stays leased to its worker until that
     * worker starts it (default 1000; at least TW_REDIS_HOLD_MIN_MS; capped at lease_ms):
     * the tasks a dead worker held come back this long after their due time. Shorter
     * also means a worker whose executors are this late in starting a held task (a
     * stall, a backlog) may lose it to another worker. */
    uint32_t hold_ms;
};

/** Statistics; every count since tw_redis_new. */
struct tw_redis_stats {
    uint64_t pending;     /**< tasks stored in Redis (all partitions) */
    uint64_t leased;      /**< tasks this worker holds leases on now */
    uint64_t delivered;   /**< execute calls that answered DONE and were acknowledged
                               (delayed: see above); an acknowledgement retried after a
                               lost reply that finds its task gone counts here */
    uint64_t redelivered; /**< deliveries with attempt > 1 */
    uint64_t failed;      /**< execute calls that answered FAILED */
    uint64_t stale_acks;  /**< acknowledgements refused because the lease was no longer ours */
    uint64_t reconnects;  /**< connections re-established after a failure */
    uint64_t late_p50_us; /**< delivery lateness as execute sees it: the server's clock
                               just before execute is called (this worker's clock, and
                               the offset to the server's measured by round trips: within
                               about half a round trip) - due; median, from a log-linear
                               histogram (buckets an eighth of a power of two wide) */
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
    uint64_t oom_refusals;   /**< set, move and set_many calls a server refused at maxmemory
                                (TW_EOOM; a set_many counts once) */
    uint64_t evicting_nodes; /**< servers connected now whose maxmemory-policy may evict the
                                  queue's keys, accepted by accept_evicting_policy: tasks
                                  may be lost (0 without it: such servers are refused) */
    uint64_t worker_errors; /**< error replies (and refused AUTHs) the worker's own threads
                                 met: claim, start, acknowledge, fail, subscribe; the last
                                 one's words: tw_redis_worker_error */
    uint64_t fenced;      /**< started tasks not executed because their lease may have
                               ended before an executor got to them (a stall) */
};

/** Fill @p cfg with the defaults above (servers NULL: must be set). No I/O. */
TW_API void tw_redis_config_init(struct tw_redis_config *cfg);

/** Connect and, with an execute callback, start the worker. Blocks while it
 * connects (connect_timeout_ms per attempt, AUTH and SELECT included),
 * checks the user's permissions (one EVAL, Redis >= 7: see Connecting),
 * loads the scripts and checks the servers (below); a worker then waits for
 * its subscription, for at most connect_timeout_ms + command_timeout_ms
 * more. @p cfg and the strings it points to are copied; arg stays the
 * caller's. What failed goes to cfg->errbuf. Any thread.
 *
 * Checks, a round trip or two each:
 *  - Eviction: every master (each one the cluster's slot map names, and any
 *    server the client connects to later) must keep the queue's keys:
 *    maxmemory-policy noeviction, or volatile-* (the queue's keys carry no
 *    TTL but one, which is only a hint). allkeys-* would evict tasks, and a
 *    policy neither CONFIG GET nor INFO memory tells counts as evicting. A
 *    server refused after new (first connected later, e.g. a promoted
 *    replica) answers set, move, remove, set_many and stats with
 *    TW_ECONFLICT, each call checking it again on a new connection, until
 *    it is reconfigured.
 *  - Partitions: the first client of a queue stores its partition count in
 *    Redis (key "{queue:meta}:partitions"); a client with another count is
 *    refused. To move a queue to more partitions, give the new count a new
 *    queue name: producers set into the new queue, workers of both run until
 *    the old one's pending is 0, then the old workers stop. A queue with
 *    nothing pending and no client running may instead be renumbered in
 *    place: DEL {queue:meta}:partitions, then start the clients with the new count.
 *
 * At maxmemory (noeviction): set, move and set_many are refused (TW_EOOM,
 * nothing written), while workers keep claiming, starting, acknowledging,
 * failing and releasing, and remove keeps working: what frees memory, or
 * keeps it flat, gets through, so a full queue drains. Needs Redis 7.0 or
 * later (the scripts declare this with Redis 7 script flags).
 * @return 0 and *out, or TW_EINVAL (bad config, a TLS or Sentinel URL,
 *         lease_ms below TW_REDIS_LEASE_MIN_MS or 4 * tick_ms), TW_EIO (no
 *         server reachable), TW_EAUTH (credentials refused, or a permission
 *         the layer needs missing: the text names it), TW_ECONFLICT (an
 *         evicting maxmemory-policy not accepted, or another partition count
 *         stored with the queue), TW_EOOM (a new queue's partition count
 *         refused at maxmemory), TW_EPROTO (another error reply: the server's
 *         words in errbuf), TW_ENOMEM, TW_ESYS. */
TW_API int tw_redis_new(struct tw_redis **out, const struct tw_redis_config *cfg);

/** Store or replace a task due at now + delay_ms (Redis server clock); durable
 * when it returns. One script call (one round trip, O(log n) in Redis for n
 * tasks in the partition); retried with backoff for up to command_timeout_ms
 * while Redis is away or the slot migrates. Key and payload are copied to
 * Redis; the caller keeps them. Any thread, execute included. A try whose
 * reply is lost is retried (the task written again: if a worker had taken
 * it meanwhile, a few ms before its due time, it may be delivered twice).
 * @return 0, or TW_EINVAL (NULL, negative delay), TW_E2BIG, TW_EIO (nothing
 *         sent: nothing written), TW_EUNKNOWN (sent, reply lost: it may be
 *         stored; setting it again is safe), TW_EOOM (the server is at maxmemory:
 *         nothing written; counted in stats' oom_refusals), TW_ECONFLICT (a server
 *         found with an evicting policy after tw_redis_new), TW_EAUTH (a permission
 *         refused, or the credentials at a reconnect), TW_EPROTO (Redis answered
 *         another error), TW_ECLOSED, TW_ENOMEM; the server's words:
 *         tw_redis_last_error. */
TW_API int tw_redis_set(struct tw_redis *r, const void *key, size_t key_len,
                        const void *payload, size_t payload_len, int64_t delay_ms);

/** Re-arm a stored task to now + delay_ms; cost and threads as tw_redis_set.
 * A retry after a lost reply answers for the first run (moves it once).
 * @return 0, TW_ENOENT, or as tw_redis_set (TW_EUNKNOWN: it may have been
 *         moved). */
TW_API int tw_redis_move(struct tw_redis *r, const void *key, size_t key_len, int64_t delay_ms);

/** Remove a task: not delivered after this returns (unless already running or started:
 * up to start_ahead_ms before its due time). Cost and threads as tw_redis_set. It frees
 * memory, so a server at maxmemory still takes it. A retry after a lost reply answers for
 * the first run: 0 when that removed the task.
 * @return 0, TW_ENOENT, or as tw_redis_set (TW_EOOM aside; TW_EUNKNOWN: it may have been
 *         removed; a remove the caller repeats then answers TW_ENOENT if so). */
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
 * 512 calls: O(log n) per item in Redis, less for larger batches. A key
 * given twice: the last item wins. Items are copied to Redis; the caller
 * keeps them. Threads as tw_redis_set. Calls whose replies are lost are
 * sent again while command_timeout_ms lasts (as a set's retry).
 * @return n (every item stored); TW_EINVAL, TW_E2BIG, TW_ECLOSED (nothing
 *         sent); TW_EIO (nothing stored: no call was applied, none may have
 *         been); TW_EUNKNOWN (some call was applied or may have been: each
 *         item may be stored or not, which is not known; set_many of the
 *         same items again is safe); TW_EOOM, TW_EPROTO, TW_ENOMEM (as
 *         TW_EUNKNOWN, some items may be stored). */
TW_API int tw_redis_set_many(struct tw_redis *r, const struct tw_redis_item *items, size_t n);

/** Stop claiming, let running callbacks finish (and tasks started ahead run
 * at their time), release held leases so other workers take those tasks at
 * once, send the delayed acknowledgements. Idempotent; any thread, but not
 * from execute. set, move, remove and set_many then give TW_ECLOSED. Cost:
 * the running callbacks and a few round trips; with a server away,
 * command_timeout_ms for each call it cannot make (the claim round under
 * way, releases, acknowledgements): seconds. What it could not release
 * stays leased in Redis and is delivered when its lease ends.
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
 *         unknown: set to UINT64_MAX, rest filled; why: tw_redis_last_error). */
TW_API int tw_redis_stats(const struct tw_redis *r, struct tw_redis_stats *out);

/** What the calling thread's last call on @p r that went to the server (set,
 * move, remove, set_many, stats) ended with: its error code, 0 when it
 * succeeded (or the thread made none), and in @p buf the words: the
 * server's error reply as it sent it (NOAUTH, WRONGPASS, NOPERM, OOM ...), or
 * what the connection failed with and the server's address, or
 * tw_strerror's text; "" for 0 (TW_ENOENT of move and remove is an answer,
 * not a failure: 0). Calls refused before they are sent (TW_EINVAL,
 * TW_E2BIG, TW_ECLOSED) leave it as it was. Kept per thread, for
 * the 16 threads whose calls failed last (a 17th replaces the oldest:
 * 0 then). Never a credential. @p buf gets at most @p len bytes, NUL
 * included (cut; 256 holds any text). Any thread; O(16), a mutex of its own
 * (it does not wait for calls in flight).
 * @return the code, or TW_EINVAL (NULL r, or NULL buf with len > 0). */
TW_API int tw_redis_last_error(const struct tw_redis *r, char *buf, size_t len);

/** The last error a worker's own threads met (they have no caller to answer):
 * an error reply to a claim, start, acknowledgement or failure, a refused
 * AUTH at a reconnect, a refused SUBSCRIBE; its code (TW_EAUTH, TW_EPROTO) and
 * in @p buf the server's words; 0 and "" when none yet (stats count them:
 * worker_errors). Buffer, threads and cost as tw_redis_last_error.
 * @return the code, or TW_EINVAL (NULL r, or NULL buf with len > 0). */
TW_API int tw_redis_worker_error(const struct tw_redis *r, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_REDIS_H */
