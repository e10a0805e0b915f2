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
 *  - Retry limit: with max_attempts, a task whose last attempt answers FAILED
 *    or loses its lease becomes a dead letter in the same script (never
 *    lost, never both); list, get, requeue and purge them.
 *  - Schedules: each occurrence of a recurring schedule (every N ms, or cron
 *    in universal time) becomes one task across all workers, due at the occurrence;
 *    missed ones follow the schedule's policy.
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
 * remove, set_many and stats (and the dead-letter and schedule calls) share
 * one set of connections under a mutex. A worker runs, besides its
 * executors, a claim, a subscriber, an acknowledger and a schedule thread,
 * and an events thread when on_event is set.
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
 * Sharing: with a slow execute (a worker whose executors, at execute's
 * measured mean time, run fewer than 16,384 tasks in 500 ms), a worker also
 * claims a share of each 500 ms bucket due up to one more window past its
 * own (at most 10 s more: 2 * window_ms + 500 ms ahead by default): 4/5 of
 * what its executors run in 500 ms, divided over the partitions. So
 * workers split each bucket by their pace, and tasks due together do not
 * all wait for the executors of the one worker whose claim came first; a
 * worker at its fill (behind on due work) still takes its share of those
 * later buckets. A share is the tasks set first into its bucket, so with
 * tasks set in due order each worker runs a run of due times within a
 * bucket, and a worker may hold the end of one bucket and the start of the
 * next. A worker knows its
 * share once it has timed its first executes: until then it takes whole
 * buckets, so workers that start together on a queue with work due within
 * their first window may run that work unevenly. With a fast execute one
 * worker's claim may take every task due in a second: fewer, fuller START
 * calls.
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
 * queries other than a socket's `?db=`, and fragments, are refused.
 * `rediss://` is redis:// over TLS (port 6379 by default: give the server's
 * tls-port). Sentinel (not with TLS: TW_EINVAL):
 *  - `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/master-name[/db]`:
 *    up to 16 Sentinels (port 26379 by default) watching master-name; the
 *    user and password are the master's (and its replicas'), the Sentinels'
 *    own go in sentinel_username and sentinel_password. Several such entries
 *    may be given (one Sentinel each, say, as tools that split a list at its
 *    commas can pass them); they must all name the same master, and cannot be
 *    mixed with other entries (TW_EINVAL).
 * Credentials come from the
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
 * TLS (`rediss://` entries, or the config's tls for `host:port` ones) is on
 * for every connection of the instance, every node of a cluster (its TLS
 * ports, as CLUSTER SLOTS answers a TLS client when the servers run
 * `tls-cluster yes`) and every reconnect; a unix socket is never TLS (Redis
 * serves none there), so entries may not mix them. The server's certificate
 * is verified against tls_ca_file / tls_ca_dir (default: the system's
 * store) and, unless tls_skip_hostname_check, must name the server
 * (tls_server_name, else the host connected to); tls_cert_file and
 * tls_key_file offer a client certificate (mutual TLS). Every failure of
 * TLS is TW_ETLS with OpenSSL's words and the server's address in the text
 * ("127.0.0.1:6380: TLS: certificate verify failed: unable to get local
 * issuer certificate", "... Hostname mismatch", "... tlsv13 alert
 * certificate required"), as is a TLS config given to a build without TLS
 * (CMake option TWHEEL_TLS, on when OpenSSL is found). TLS costs a
 * handshake per connection and encryption per byte (W7 in bench/README.md
 * measures it); a connection without AUTH or SELECT sends one PING after
 * the handshake, so that a refused client certificate (told after the
 * handshake with TLS 1.3) fails tw_redis_new, not a later call. Threads:
 * as without TLS (OpenSSL 3 is thread-safe; each thread has its own
 * connections). The files named are read once, by tw_redis_new.
 *
 * The least ACL rule, for queue Q (glob characters of Q escaped):
 *
 *     ACL SETUSER twheel on >PASSWORD resetkeys resetchannels ~{Q:* &{Q:*}:ch
 *         -@all +evalsha +eval +script|load +cluster|slots +time +hlen
 *         +exists +get +set +hget +hmget +hset +hdel +incrby +publish
 *         +zadd +zrangebyscore +zrem +zscore +zmscore +hexists +hscan +unlink
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
 * threads (Redis's words in a script do not name the command there). Such
 * a TW_EAUTH does not mean nothing was written: Redis keeps the writes a
 * script made before its refused command. Taking a channel away leaves a
 * set whole but unannounced (PUBLISH comes last: it runs by the next
 * refill, up to window_ms / 2 late); taking a command away may leave a
 * task half-written (a set refused at its ZADD has put the task into a
 * due bucket the index does not list: no worker claims it, nor the tasks
 * set into that bucket after it). Change a running queue's rule only by
 * adding to it, or with its clients and workers stopped.
 *
 * Sentinel: tw_redis_new asks the Sentinels in turn (SENTINEL
 * get-master-addr-by-name), connects to the master they name and confirms
 * it answers ROLE master (a replica, or a stale answer: asked again, for up
 * to connect_timeout_ms + command_timeout_ms); every later connection of
 * every thread (client, claim, subscriber, executors, acknowledger, each
 * reconnect) goes to the master last named and is confirmed the same way,
 * so a failed-over master that comes back as a replica is never written to.
 * A connection that fails, a replica, or a READONLY reply has the Sentinels
 * asked again (at most every 100 ms): after a failover every thread reaches
 * the promoted replica on its next attempt once the Sentinels name it, the
 * subscriber subscribes there, the clock offsets are measured afresh and
 * the client checks the new master as every new server (maxmemory-policy,
 * the queue's partition count, stored again if the failover lost it). The
 * calls made meanwhile fail as while a server is away (TW_EIO, TW_EUNKNOWN
 * after command_timeout_ms), and the worker catches up once there. Errors
 * of new: TW_EIO (no Sentinel answered, or the master they name did not),
 * TW_EINVAL (no Sentinel knows master-name: errbuf says `no master named
 * ...`), TW_EAUTH (the Sentinels' or the master's credentials refused).
 * The least ACL rule gains `+role` on the master and replicas (and `+wait`
 * with wait_replicas, with or without Sentinel: tw_redis_new asks for it with
 * the others and fails with TW_EAUTH naming `wait` when it is refused; a
 * refused ROLE fails the connection itself with TW_EAUTH); a Sentinel's own
 * ACL must allow `sentinel|get-master-addr-by-name`.
 *
 * Replication and failover: Redis replicates asynchronously. A write the
 * master acknowledged and no replica had yet is lost when a failover
 * promotes a replica: a set may vanish (its task never delivered), a move
 * or a remove be undone (the task delivered at its earlier time, or after
 * all), an acknowledgement be lost (the task delivered again: at least
 * once holds), a claim or start be lost (the task claimed again, unless
 * its holder acknowledged it first: a lost start leaves the claim's
 * shorter hold, and an acknowledgement deletes a task whose lease no one
 * took back). A worker whose claim was lost has its START refused while
 * no one has claimed the task again; a claim that comes first leases it
 * under the same token (the task's record kept it), and both workers may
 * then run it: at least once holds, but one holder at a time and the
 * fencing token do not across such a failover. Until the
 * Sentinels demote it, a master cut off from them still takes writes that
 * the failover discards. wait_replicas > 0 makes the producer calls (set,
 * move, remove, set_many) wait for that many replicas (WAIT, in the same
 * write as the call; set_many: one WAIT per master after its calls) and
 * answer TW_EREPLICAS when fewer confirmed within wait_timeout_ms: the
 * write is on the master (never "nothing written"), not known to survive a
 * failover; setting it again is safe. A call answered 0 with wait_replicas
 * = N survives any failover that promotes one of the N replicas that
 * confirmed it; Sentinel promotes the replica with the most replication
 * offset among those it can reach (replica-priority first), so N = 1 is
 * enough unless that one is unreachable, and N = all replicas is safe
 * against any choice. The worker's own writes are not waited for: their
 * loss redelivers, never loses, a task. WAIT makes each call one replica
 * round trip slower; without wait_replicas nothing is sent.
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
/** tw_redis_config.partitions (the default): the count stored with the queue, or for a
 * new queue TW_REDIS_PARTITIONS_CLUSTER on a Redis Cluster and TW_REDIS_PARTITIONS_SINGLE
 * on one server (standalone, or the master Sentinels name). */
#define TW_REDIS_PARTITIONS_AUTO 0xffffffffu
/** Partitions of a queue created with TW_REDIS_PARTITIONS_AUTO on a Redis Cluster: enough
 * to spread it over 16 masters. */
#define TW_REDIS_PARTITIONS_CLUSTER 16u
/** Partitions of a queue created with TW_REDIS_PARTITIONS_AUTO on one server, which runs
 * every partition's scripts on its one thread: more would only add calls (bench/README.md,
 * "One partition on one server"). */
#define TW_REDIS_PARTITIONS_SINGLE 1u
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

/** What a worker tells its on_event hook. */
enum tw_redis_event_kind {
    TW_REDIS_EVENT_DELIVERED = 0, /**< execute answered DONE */
    TW_REDIS_EVENT_FAILED = 1,    /**< execute answered FAILED (retried later, or dead) */
    TW_REDIS_EVENT_DEAD = 2,      /**< moved to the dead letters by this worker's script */
    TW_REDIS_EVENT_LEASE_LOST = 3 /**< not run: its lease was gone (replaced, moved,
                                       removed, expired) or may have ended (fenced) */
};

/** One event (valid during the on_event call only). */
struct tw_redis_event {
    enum tw_redis_event_kind kind; /**< what happened */
    const char *key;  /**< the task's key (not NUL-terminated) */
    size_t key_len;   /**< its length */
    uint32_t attempt; /**< the delivery's attempt (dead: the attempts spent; 0 unknown) */
    uint64_t due_ms;  /**< its due time, server ms (0 unknown: a dead letter a claim made) */
};

/** Most events a worker queues for on_event; more are dropped (counted). */
#define TW_REDIS_EVENTS_MAX 65536u

/** Configuration; fill it with tw_redis_config_init, then change what you need. */
struct tw_redis_config {
    const char *const *servers; /**< the server, or any nodes of a cluster: "host:port",
                                     "/socket/path" or URLs (Connecting, above) */
    size_t nservers;            /**< number of seeds (>= 1) */
    const char *queue;          /**< queue name, the prefix of every key (default "twq") */
    uint32_t partitions;        /**< hash-tag partitions (default TW_REDIS_PARTITIONS_AUTO: the
                                     count stored with the queue, or for a new queue 16 on a Redis
                                     Cluster and 1 on one server); every client of a queue must
                                     agree: the first stores it with the queue, another count gives
                                     TW_ECONFLICT (tw_redis_new). 0, for a client without execute
                                     only: the count stored with the queue (tw_redis_new gives
                                     TW_ENOENT when the queue has none, and creates nothing) */
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
     * may no longer stop that delivery, as for a running task. A worker starts the tasks
     * due in each start_ahead_ms / 2 span together (one call on one server, up to 32
     * tasks), so a longer one makes fewer, fuller calls: less Redis CPU per task where
     * few tasks are due per span (bench/README.md, W7). */
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
    /** With redis+sentinel:// servers: the ACL user the Sentinels want (NULL: none); the
     * URL's credentials are the master's and its replicas'. Copied. */
    const char *sentinel_username;
    /** ... and the Sentinels' password (requirepass of sentinel.conf; NULL: none). Copied,
     * wiped at free. */
    const char *sentinel_password;
    /** 0 (default): no replica wait. 1..1000: set, move, remove and set_many send WAIT for
     * this many replicas after their write (in the same write; set_many: once per master
     * after its calls) and answer TW_EREPLICAS when fewer confirmed it within
     * wait_timeout_ms: written on the master, which a failover may still lose (see
     * "Replication and failover"). The worker's own writes are not waited for. */
    uint32_t wait_replicas;
    /** How long WAIT waits for them, in ms (1 .. command_timeout_ms - 1; needed with
     * wait_replicas): a call takes up to this much longer when a replica lags. */
    uint32_t wait_timeout_ms;
    /** Retry limit (default 0: unlimited): a task whose max_attempts-th start answers
     * FAILED, or loses its lease (its worker died, stalled past the lease or was fenced,
     * and a claim took the lease back), moves to the queue's dead letters in the same
     * script (tw_redis_dead_list), with its attempt, the time and the error text execute
     * left (tw_redis_fail_text). A per-task limit (tw_redis_set_opts) overrides it. Read
     * by the worker's scripts: every worker of a queue should give the same. */
    uint32_t max_attempts;
    /** Optional: told of this worker's deliveries (DONE answered), failures (FAILED
     * answered), dead letters (the tasks this worker's scripts moved there) and lost
     * leases (held or started tasks it did not run because the lease was gone). Called
     * on the worker's events thread, never on an executor, after the fact: it must not
     * block for long (events wait in a queue of TW_REDIS_EVENTS_MAX; past it they are
     * dropped and counted in stats' events_dropped). The event is valid during the call
     * only. NULL (default): no thread, nothing queued. */
    void (*on_event)(void *arg, const struct tw_redis_event *ev);
    void *event_arg; /**< passed to on_event */
    /** TLS on every connection (default false; see Connecting): for `host:port` entries.
     * `rediss://` entries turn it on as well. With TLS, every entry must be `host:port` or
     * `rediss://` (a `redis://` or unix socket entry: TW_EINVAL). */
    bool tls;
    /** CA certificates (PEM) that verify the servers; with tls_ca_dir NULL too, the
     * system's store (Debian: /etc/ssl/certs). Read during tw_redis_new (TW_ETLS when
     * OpenSSL cannot). Any tls_* field set without TLS on: TW_EINVAL. */
    const char *tls_ca_file;
    /** A directory of CA certificates named by hash (`openssl rehash`), beside or instead
     * of tls_ca_file. */
    const char *tls_ca_dir;
    /** Client certificate (PEM, may hold the chain) for servers that ask for one
     * (`tls-auth-clients yes`); with tls_key_file, both or neither (TW_EINVAL). */
    const char *tls_cert_file;
    /** The client certificate's private key (PEM, unencrypted). */
    const char *tls_key_file;
    /** The name every server's certificate must carry, also sent as SNI (NULL: each
     * server's host as connected: the entry's, or the address CLUSTER SLOTS gives). */
    const char *tls_server_name;
    /** false (default): a server's certificate must name it (tls_server_name, else the
     * host: a DNS name, or an IP address among its IP SANs). true: the chain alone is
     * verified; anyone with a certificate from the CA can pose as the server. */
    bool tls_skip_hostname_check;
    /** In a Redis Cluster, how long a worker thread waits for one master's reply before it
     * takes that master as silent (default 30 ms): the worker's threads then leave its
     * partitions alone, so that a hung master delays only its own tasks, until a probe or
     * a late reply shows it answers (its unanswered calls are not lost: their tasks wait
     * for a later round). A healthy master slower than this (far away, a slow fsync with
     * appendfsync always, a host stall) is taken as silent until its next reply and its
     * connection reopened, so raise it for such masters. 5 .. 60000; 0: no isolation, every
     * call waits command_timeout_ms, as always on a standalone server, which has no other
     * master to serve meanwhile. At or above command_timeout_ms: no isolation either. */
    uint32_t silent_ms;
};

/** Statistics; every count since tw_redis_new. */
struct tw_redis_stats {
    uint64_t pending;     /**< tasks stored in Redis (all partitions; dead letters and
                               schedules are not tasks: tw_redis_dead_count,
                               tw_redis_schedule_count) */
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
    uint64_t dead;        /**< tasks this worker's scripts moved to the dead letters
                               (FAILED on the last attempt, or a lease lost on it) */
    uint64_t events_dropped; /**< events not given to on_event: its queue was full */
    uint64_t schedule_fires; /**< schedule occurrences this worker made tasks */
    uint64_t silent_marks; /**< times this worker took a cluster master as silent (it did not
                                answer within silent_ms); frequent marks of healthy masters
                                say silent_ms is too short for them */
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
 *    refused, one with TW_REDIS_PARTITIONS_AUTO (the default) takes it. A
 *    queue created by a default client has 1 partition on one server: that
 *    server runs every partition's scripts on its one thread, so more
 *    partitions there only add script calls (each worker claims, starts and
 *    acknowledges per partition); on a Redis Cluster 16, spread over the
 *    masters by their hash tags. A queue on one server meant to move to a
 *    cluster later may be given its count now. To move a queue to more
 *    partitions, give the new count a new queue name: producers set into
 *    the new queue, workers of both run until the old one's pending is 0,
 *    then the old workers stop. A queue with nothing pending and no client
 *    running may instead be renumbered in place: DEL
 *    {queue:meta}:partitions, then start the clients with the new count.
 *
 * At maxmemory (noeviction): set, move and set_many are refused (TW_EOOM,
 * nothing written), while workers keep claiming, starting, acknowledging,
 * failing and releasing, and remove keeps working: what frees memory, or
 * keeps it flat, gets through, so a full queue drains. Needs Redis 7.0 or
 * later (the scripts declare this with Redis 7 script flags).
 * @return 0 and *out, or TW_EINVAL (bad config, TLS mixed with unix
 *         sockets, redis:// or Sentinel, tls_* fields without TLS, a
 *         certificate without its key, a master name no Sentinel knows,
 *         lease_ms below TW_REDIS_LEASE_MIN_MS or 4 * tick_ms, wait_replicas
 *         without a wait_timeout_ms below command_timeout_ms), TW_EIO (no
 *         server reachable, or a connection lost during new's own calls,
 *         whose writes a later new makes again; with Sentinel: no Sentinel,
 *         or not the master they name), TW_ETLS (TLS failed: the server's certificate not
 *         verified, the client's refused, a TLS file unreadable, no TLS in
 *         this build: OpenSSL's words in errbuf), TW_EAUTH (credentials refused, or a permission
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
 *         refused, or the credentials at a reconnect), TW_ETLS (TLS refused at a
 *         reconnect: a certificate no longer verified), TW_EPROTO (Redis answered
 *         another error), TW_EREPLICAS (with wait_replicas: stored on the
 *         master, fewer replicas confirmed it; see "Replication and failover"),
 *         TW_ECLOSED, TW_ENOMEM; the server's words: tw_redis_last_error. */
TW_API int tw_redis_set(struct tw_redis *r, const void *key, size_t key_len,
                        const void *payload, size_t payload_len, int64_t delay_ms);

/** Re-arm a stored task to now + delay_ms; cost and threads as tw_redis_set.
 * A retry after a lost reply answers for the first run (moves it once).
 * @return 0, TW_ENOENT, or as tw_redis_set (TW_EUNKNOWN: it may have been
 *         moved; TW_EREPLICAS: moved on the master). */
TW_API int tw_redis_move(struct tw_redis *r, const void *key, size_t key_len, int64_t delay_ms);

/** Remove a task: not delivered after this returns (unless already running or started:
 * up to start_ahead_ms before its due time). Cost and threads as tw_redis_set. It frees
 * memory, so a server at maxmemory still takes it. A retry after a lost reply answers for
 * the first run: 0 when that removed the task.
 * @return 0, TW_ENOENT, or as tw_redis_set (TW_EOOM aside; TW_EUNKNOWN: it may have been
 *         removed; a remove the caller repeats then answers TW_ENOENT if so;
 *         TW_EREPLICAS: removed on the master). */
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
 *         TW_EUNKNOWN, some items may be stored); TW_EREPLICAS (every item
 *         stored on the master, fewer replicas confirmed them, or a
 *         connection was replaced during the call). */
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
 * AUTH or TLS handshake at a reconnect, a refused SUBSCRIBE; its code (TW_EAUTH,
 * TW_ETLS, TW_EPROTO) and
 * in @p buf the server's words; 0 and "" when none yet (stats count them:
 * worker_errors). Buffer, threads and cost as tw_redis_last_error.
 * @return the code, or TW_EINVAL (NULL r, or NULL buf with len > 0). */
TW_API int tw_redis_worker_error(const struct tw_redis *r, char *buf, size_t len);

/* ---- retry limit and dead letters ------------------------------------------ */

/** Longest error text tw_redis_fail_text keeps, in bytes (more is cut). */
#define TW_REDIS_ERROR_MAX 256

/** Options of tw_redis_set_opts. Zero them, then set what you need. */
struct tw_redis_set_opts {
    /** This task's retry limit (1 .. 1048575); 0: the queue's (config max_attempts).
     * Kept with the task until it leaves the queue, through its retries and a requeue
     * from the dead letters; a later tw_redis_set of the key drops it. */
    uint32_t max_attempts;
};

/** tw_redis_set with options (NULL: as tw_redis_set). One script call (SETX); cost,
 * threads and errors as tw_redis_set (TW_EINVAL also for max_attempts > 1048575). A retry
 * after a lost reply stores the task again. */
TW_API int tw_redis_set_opts(struct tw_redis *r, const void *key, size_t key_len,
                             const void *payload, size_t payload_len, int64_t delay_ms,
                             const struct tw_redis_set_opts *opts);

/** Inside execute only (the executor's thread): the error text kept with the task
 * should this FAILED answer make it a dead letter; cut at TW_REDIS_ERROR_MAX bytes; the
 * last call before execute returns counts, and it is forgotten when execute returns.
 * Any bytes. No I/O, O(len).
 * @return 0, TW_EINVAL (NULL text with len > 0). */
TW_API int tw_redis_fail_text(const char *text, size_t len);

/** A dead letter (valid during the callback only). */
struct tw_redis_dead {
    const char *key;     /**< its key (not NUL-terminated) */
    size_t key_len;      /**< its length */
    const void *payload; /**< its payload */
    size_t payload_len;  /**< its length */
    const char *error;   /**< execute's tw_redis_fail_text, "lease lost", or "" */
    size_t error_len;    /**< its length */
    uint32_t attempt;    /**< the attempts it spent */
    uint32_t max_attempts; /**< its own limit (0: it had the queue's) */
    uint64_t dead_ms;    /**< when it moved, ms on the Redis server's clock */
    uint64_t due_ms;     /**< its last due time */
};
/** Told of dead letters and schedules, on the caller's thread. */
typedef void tw_redis_dead_fn(void *arg, const struct tw_redis_dead *d);

/** Where a listing goes on (dead letters, schedules). Zero it to start; done is
 * set once every partition was listed. */
struct tw_redis_scan_cursor {
    uint32_t partition; /**< the partition the listing is in */
    uint64_t scan;      /**< its HSCAN cursor there */
    bool done;          /**< nothing more */
};

/** List dead letters: calls fn for up to about @p count of them (1..1000; HSCAN's COUNT,
 * a hint) and moves @p cur on. Each call visits partitions one HSCAN round trip each
 * (O(count) in Redis) and returns after one that gave entries, or 64 partitions: bounded
 * work, a whole listing is O(dead letters + partitions). An entry may be listed twice
 * when the set grows or shrinks between calls (HSCAN's rule); every entry present
 * throughout the listing is listed. fn runs on the caller's thread after each reply, the
 * client's mutex not held (it may call the client). Any thread.
 * @return the number fn was given (>= 0), or TW_EINVAL, TW_ECLOSED, TW_EIO, TW_EUNKNOWN,
 *         TW_EAUTH, TW_EPROTO, TW_ENOMEM as tw_redis_set. */
TW_API int tw_redis_dead_list(struct tw_redis *r, struct tw_redis_scan_cursor *cur, size_t count,
                              tw_redis_dead_fn *fn, void *arg);

/** One dead letter by key (one HGET): calls fn with it. Threads as tw_redis_dead_list.
 * @return 0, TW_ENOENT, or as tw_redis_dead_list. */
TW_API int tw_redis_dead_get(struct tw_redis *r, const void *key, size_t key_len,
                             tw_redis_dead_fn *fn, void *arg);

/** Put a dead letter back into the queue, due at now + delay_ms, its attempts counted
 * from 0 again (its own max_attempts kept); atomic (one script, O(log n)). A live task of
 * the same key wins: the dead letter stays. Threads and costs as tw_redis_set.
 * @return 0, TW_ENOENT (no such dead letter), TW_ECONFLICT (a live task holds the key), or
 *         as tw_redis_set. */
TW_API int tw_redis_dead_requeue(struct tw_redis *r, const void *key, size_t key_len,
                                 int64_t delay_ms);

/** Every dead letter back into the queue (as tw_redis_dead_requeue, those whose key a live
 * task holds stay): per partition, script calls of one HSCAN step (COUNT 128) each until
 * the partition's scan ends: O(dead letters) in all, each call bounded. *requeued
 * (optional) counts what moved, also on failure.
 * @return 0, or as tw_redis_set (what moved before the failure stays moved). */
TW_API int tw_redis_dead_requeue_all(struct tw_redis *r, int64_t delay_ms, uint64_t *requeued);

/** Delete one dead letter (HDEL), or with a NULL key every one (UNLINK of each
 * partition's dead-letter HASH: the server frees it in the background). Threads as
 * tw_redis_set.
 * @return 0, TW_ENOENT (that key had no dead letter), or as tw_redis_set. */
TW_API int tw_redis_dead_purge(struct tw_redis *r, const void *key, size_t key_len);

/** Count the dead letters: one HLEN per partition. Threads as tw_redis_stats.
 * @return 0 and *n, or as tw_redis_set. */
TW_API int tw_redis_dead_count(struct tw_redis *r, uint64_t *n);

/* ---- recurring schedules ------------------------------------------------------ */

/** What a schedule does with occurrences no worker made a task of in time (workers down
 * longer than window_ms past the occurrence). */
enum tw_redis_missed {
    TW_REDIS_MISSED_SKIP = 0, /**< drop them: the next occurrence still ahead runs */
    TW_REDIS_MISSED_ONCE = 1, /**< run the first missed one at once, drop the rest */
    TW_REDIS_MISSED_ALL = 2   /**< run each missed one, in due order */
};

/** A recurring schedule: cron, or every_ms from anchor_ms. */
struct tw_redis_schedule {
    /** A 5-field cron expression (minute hour day-of-month month day-of-week), read in
     * universal time: numbers, `*`, ranges `a-b`, steps `/n`, lists `a,b`, month and day names
     * (JAN, MON), 7 for Sunday; when both day fields are restricted, either matching
     * suffices (the classic rule). NULL: every_ms instead. */
    const char *cron;
    uint64_t every_ms;  /**< with cron NULL: the period (1000 .. TW_REDIS_DELAY_MAX) */
    uint64_t anchor_ms; /**< with cron NULL: occurrences are anchor + k * every_ms, server
                             ms since the epoch; 0: the time of the first upsert */
    enum tw_redis_missed missed; /**< the missed-run policy */
};

/** Create or replace the schedule @p key: each occurrence becomes the task
 * "<key>@<occurrence ms>" due at that time, with @p payload, once per occurrence across
 * all workers, never early. An upsert with the same cron or every/anchor keeps the next
 * occurrence (a restart of the producer changes nothing); another one starts from now.
 * One TIME round trip (cron) and one script call (O(log n)). *next_ms (optional): the
 * next occurrence. Workers make occurrences tasks window_ms ahead: the upsert notifies
 * them (PUBLISH on the partition's channel), so an occurrence soon after it is made at
 * once and runs on time (never early); a worker not subscribed then asks every
 * partition when it subscribes (at its start, after a reconnect). Threads as
 * tw_redis_set.
 * @return 0, TW_EINVAL (a bad cron expression, or every_ms out of range, or a cron that
 *         never matches), TW_E2BIG, or as tw_redis_set. */
TW_API int tw_redis_schedule_set(struct tw_redis *r, const void *key, size_t key_len,
                                 const void *payload, size_t payload_len,
                                 const struct tw_redis_schedule *s, uint64_t *next_ms);

/** Delete a schedule (one script call). Occurrence tasks made already (up to window_ms
 * ahead) are still delivered: they live in the schedule's partition, which tw_redis_remove
 * does not look in for their key. Threads as tw_redis_set.
 * @return 0, TW_ENOENT, or as tw_redis_set. */
TW_API int tw_redis_schedule_remove(struct tw_redis *r, const void *key, size_t key_len);

/** A schedule as listed (valid during the callback only). */
struct tw_redis_schedule_info {
    const char *key;     /**< its key */
    size_t key_len;      /**< its length */
    const void *payload; /**< the occurrences' payload */
    size_t payload_len;  /**< its length */
    const char *spec;    /**< "cron <expression>" or "every <ms> <anchor ms>" */
    size_t spec_len;     /**< its length */
    uint64_t next_ms;    /**< the next occurrence not yet made a task */
    enum tw_redis_missed missed; /**< its policy */
};
/** Told of a schedule, on the caller's thread. */
typedef void tw_redis_schedule_fn(void *arg, const struct tw_redis_schedule_info *s);

/** Count the schedules: one HLEN per partition. Threads as tw_redis_stats.
 * @return 0 and *n, or as tw_redis_set. */
TW_API int tw_redis_schedule_count(struct tw_redis *r, uint64_t *n);

/** List schedules; paging, costs and threads as tw_redis_dead_list. */
TW_API int tw_redis_schedule_list(struct tw_redis *r, struct tw_redis_scan_cursor *cur, size_t count,
                                  tw_redis_schedule_fn *fn, void *arg);
/* ---- operating a queue: inspect, pause, drop, metrics (src/redis/inspect.c, metrics.c) ----
 *
 * These calls read (or, for pause, resume and drop, write) the queue's keys on the
 * client's connections, under the client's mutex as tw_redis_set; any thread, execute
 * included. Their cost in Redis operations is in src/redis/redis.c's design table. They
 * send their scripts with EVAL (not EVALSHA: they are rare), and besides the least ACL
 * rule above they need +zrange +zcard on the queue's keys (drop also DEL of
 * "{queue:meta}:partitions"). Each returns, besides the codes listed,
 * what a call of tw_redis_set may (TW_EIO, TW_EUNKNOWN, TW_EAUTH, TW_EPROTO, TW_ECLOSED,
 * TW_ENOMEM: the server's words in tw_redis_last_error). */

/** A stored task's state (tw_redis_get). */
enum tw_redis_state {
    TW_REDIS_WAITING = 0, /**< in its due bucket: no worker holds it */
    TW_REDIS_HELD = 1,    /**< claimed by a worker (a lease, the hold), not started */
    TW_REDIS_RUNNING = 2  /**< started (its lease lengthened to lease_ms) */
};

/** One stored task, as tw_redis_get reads it. */
struct tw_redis_info {
    enum tw_redis_state state; /**< waiting, held or running (see tw_redis_get) */
    uint64_t due_ms;       /**< due time, ms since the epoch on the Redis server's clock */
    uint32_t attempt;      /**< starts counted so far (a running task's own start included) */
    uint64_t token;        /**< the lease's token (0 while waiting) */
    uint64_t lease_end_ms; /**< the lease's end on the server's clock (0 while waiting) */
    uint64_t now_ms;       /**< the server's clock when it was read */
    size_t payload_len;    /**< the payload's whole length (what was copied may be less) */
    uint32_t max_attempts; /**< its own retry limit (tw_redis_set_opts); 0: the queue's */
};

/** Read one task: state, due time, attempt and its own max_attempts, lease and payload,
 * from one snapshot (one read-only script: HGET ZSCORE TIME, O(1)). The payload's first
 * @p cap bytes go to
 * @p payload (may be NULL with cap 0); info->payload_len is its whole length.
 * Held and running: START marks the lease it lengthens as started (its end a whole ms +
 * 0.5), a claim's hold never is; so a marked lease is RUNNING, any other HELD, exactly,
 * whatever the workers' lease_ms and hold_ms. A running task's attempt includes its own
 * start (the mark; the record counts it once the lease ends).
 * @return 0, TW_ENOENT (no such task), TW_EINVAL, TW_E2BIG (key too long). */
TW_API int tw_redis_get(struct tw_redis *r, const void *key, size_t key_len,
                        struct tw_redis_info *info, void *payload, size_t cap);

/** Where a listing stopped: the last task listed (its due time and key). */
struct tw_redis_cursor {
    uint64_t due_ms;            /**< its due time */
    size_t key_len;             /**< its key's length */
    char key[TW_REDIS_KEY_MAX]; /**< its key's bytes */
};

/** One listed task. */
struct tw_redis_listed {
    const char *key; /**< in the page's memory (NUL-terminated too) */
    size_t key_len;  /**< its length */
    uint64_t due_ms; /**< its due time, ms since the epoch on the server's clock */
};

/** A page of tw_redis_list; free it with tw_redis_page_free. */
struct tw_redis_page {
    size_t n;                      /**< tasks listed */
    struct tw_redis_listed *items; /**< in due order: by due_ms, then by key bytes */
    bool more;                     /**< tasks of the range may follow: list again after next */
    struct tw_redis_cursor next;   /**< the last task listed (n > 0) */
};

/** Most tasks one page lists. */
#define TW_REDIS_PAGE_MAX 1000u

/** List the waiting tasks due in [@p from_ms, @p to_ms) (server clock; 0 and UINT64_MAX
 * for no bound), in due order (due_ms, then key bytes), at most @p limit (1 to
 * TW_REDIS_PAGE_MAX), after @p after (NULL: from the range's start; else the next cursor
 * of the previous page). Held and running tasks sit in no due bucket and are not listed
 * (tw_redis_counts counts them; tw_redis_get reads one). Bounded work per call: one
 * read-only script per partition, each reading at most limit plus 2 buckets (the index
 * lists only non-empty ones) whole, with their records' due times (a bucket, what falls
 * due in 500 ms of one partition, is kept in no order by due time), keeping at most
 * 2 * limit tasks, merged here: O(partitions * (limit + 2) * bucket size), never a scan
 * of the queue. Pages are consistent per call, not across calls: a task
 * set, moved or claimed between two calls may be listed twice or missed.
 * @return 0 and *out, TW_EINVAL (limit 0 or above TW_REDIS_PAGE_MAX, from_ms > to_ms,
 *         NULL), TW_ENOMEM. */
TW_API int tw_redis_list(struct tw_redis *r, uint64_t from_ms, uint64_t to_ms,
                         const struct tw_redis_cursor *after, size_t limit,
                         struct tw_redis_page **out);

/** Free a page (NULL: nothing). */
TW_API void tw_redis_page_free(struct tw_redis_page *page);

/** The queue's figures, as tw_redis_counts reads them. */
struct tw_redis_counts {
    uint64_t now_ms;     /**< the server's clock (the last partition's read) */
    uint64_t pending;    /**< every stored task: waiting + held + running */
    uint64_t waiting;    /**< in a due bucket */
    uint64_t held;       /**< claimed, not started (held and running: tw_redis_get) */
    uint64_t running;    /**< started, not acknowledged */
    uint64_t due_within; /**< waiting tasks due before now + within_ms (overdue ones included) */
    bool due_capped;     /**< due_within is a lower bound: a partition had more than 4096
                              buckets due in that span (not all were counted) */
    uint64_t lag_ms;     /**< how late the most overdue waiting task is (0: none overdue) */
    uint32_t paused;     /**< partitions paused (0: running; the partition count: paused) */
    uint32_t partitions; /**< the queue's partition count */
    uint64_t dead;       /**< dead letters (as tw_redis_dead_count) */
    uint64_t schedules;  /**< schedules (as tw_redis_schedule_count) */
};

/** Count the queue's tasks by state, those due within @p within_ms (overdue ones
 * included), the lag, the dead letters and the schedules. One read-only script per
 * partition: HLEN, ZCARD, the leases' ends (O(leased): what the workers hold; a started
 * one carries START's mark), the index's buckets up to now + within_ms with an LLEN
 * each (O(buckets), at most 4096 per partition: due_capped) but the one that ends after
 * now + within_ms, read whole with its records' due times, the first bucket read whole
 * likewise (its earliest due time: the lag), EXISTS of the pause flag, HLEN of the dead
 * letters and of the schedules.
 * @return 0, TW_EINVAL (NULL). */
TW_API int tw_redis_counts(struct tw_redis *r, uint64_t within_ms, struct tw_redis_counts *out);

/** Pause the queue: one flag key per partition ({queue:p}:pause), all set by one script
 * on one server (EVAL: the partitions pause at one instant), one SET per partition on a
 * cluster. A claim of a paused partition leases nothing and recovers nothing, so
 * workers start no task they did not hold already: what a worker had claimed before
 * the pause (up to window_ms + 500 ms ahead of its due time, one more window, at most
 * 10 s, with a slow execute: see Leases, Sharing) still starts and runs, within that
 * + hold_ms of the pause's return; the held tasks of a worker that dies
 * meanwhile stay leased (counted held) until the resume, whose claims recover them. set, move, remove and
 * set_many are still accepted. Idempotent. On a cluster it takes effect per partition as
 * each flag is set (the partitions are not paused at one instant).
 * @return 0, TW_EOOM (a server at maxmemory refused a flag: on one server none is set;
 *         on a cluster the partitions before it are paused; pause again). */
TW_API int tw_redis_pause(struct tw_redis *r);

/** Resume a paused queue: its flags deleted (on one server by one script, at one
 * instant; on a cluster one DEL per partition), then a PUBLISH on each partition's
 * channel, so that every worker claims at once what came due meanwhile and delivers it
 * in due order (its catch-up). Idempotent. On a cluster the flags go one after another:
 * a claim that comes between two deletions (a worker's regular round) may hand over the
 * due tasks of a partition resumed first before earlier ones of a partition still paused.
 * @return 0. */
TW_API int tw_redis_resume(struct tw_redis *r);

/** Delete the queue: every key of every partition (due buckets, index, lease, task,
 * seq, hold, pause flag, dead letters, schedules; an earlier version's lease set), then
 * "{queue:meta}:schema", and "{queue:meta}:partitions" last, partition by partition,
 * each by a script that unlinks at most 1024 buckets per call (UNLINK: Redis frees big
 * values in the background). First every partition is checked: while a worker runs
 * (a hold key alive: a worker claimed in the last 2 * window_ms + 1 s) or holds a
 * lease, drop refuses with TW_EBUSY and deletes nothing, unless @p force. With force,
 * the tasks workers hold are not started (their START finds no lease), running ones
 * finish and their acknowledgements are stale; a worker still running recreates its
 * hold keys and, once a task is set again, the queue. What drop leaves: the move and
 * remove markers ({queue:p}:r:*), which expire within 2 * command_timeout_ms + 1 s.
 * A set racing the drop may leave its task. The instance stays usable but should be
 * freed: its partition count is no longer stored.
 * @return 0, TW_EBUSY (a worker holds the queue, nothing deleted). */
TW_API int tw_redis_drop(struct tw_redis *r, bool force);

/** Render the worker's and the queue's figures in the Prometheus text exposition
 * format (version 0.0.4) into @p buf: a worker's counters (tw_redis_stats) and its
 * lateness histogram (twheel_redis_lateness_seconds, buckets at powers of two of a
 * microsecond), left out for a client without execute, and the queue's figures from tw_redis_counts(r, within_ms) (tasks by
 * state, due within within_ms, lag, paused, dead letters, schedules), each labelled queue="NAME". When the queue
 * cannot be read, its figures are left out and twheel_redis_queue_up is 0. A metric is
 * a line of metrics.c's table. Cost: tw_redis_counts' calls, and HLEN per partition.
 * @p len (may be NULL) gets the length written, or the length needed on TW_E2BIG (no
 * NUL counted; the text is NUL-terminated when it fits). Any thread.
 * NULL @p buf with @p cap 0 asks for the length: TW_E2BIG, and @p len gets it.
 * @return 0, TW_E2BIG (@p cap too small: buf holds no text), TW_EINVAL (NULL r, or NULL
 * buf with cap > 0). */
TW_API int tw_redis_metrics(struct tw_redis *r, uint64_t within_ms, char *buf, size_t cap,
                            size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_REDIS_H */
