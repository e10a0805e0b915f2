/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: durable delayed tasks shared by worker processes.
 *
 * Redis holds every task; a worker claims the near window with a lease and
 * holds it in its local queue (local.c: a core wheel), so a task starts at
 * its tick, not at the next poll. Notifications bring in work set earlier
 * than what workers hold.
 *
 * This file is the layer's entry: this design comment and the lifetime
 * (new, stop with the release of held leases, free, and the layer's
 * threads). The other jobs have a file each (internal.h lists them):
 * config.c (the configuration's defaults and checks), server_checks.c (the
 * servers' eviction policy, the stored partition count), client.c (set, move, remove, set_many), inspect.c (get, list,
 * counts, pause, resume, drop), metrics.c (the Prometheus text), keys.c, offset.c (the Redis
 * clock offset), subscriber.c, stats.c, router.c, scripts.c, silent.c (the
 * masters that do not answer), and along a
 * task's path, which runs one way: claim.c -> local.c (held until it may
 * start) -> execute.c (START through start.c, run, FAIL) -> ack.c (the
 * delayed acknowledgement).
 *
 * Schema, per partition p of queue q (hash tag {q:p}, so a partition's keys
 * share one cluster slot and the partitions spread over the masters; a key
 * goes to partition FNV-1a-64(key) % partitions, the same in every client):
 *
 *   key            type    holds                                 touched by
 *   {q:p}:d:<b>    LIST    due bucket b (a Redis-side timing      set move remove claim fail release
 *                          wheel): the keys of the waiting tasks
 *                          due in [b * W, (b+1) * W), in the
 *                          order they were put there
 *   {q:p}:d        ZSET    index: b -> b, one member per          as above, when a bucket
 *                          non-empty bucket                       appears or empties
 *   {q:p}:leases   ZSET    key:token -> lease end ms (claimed,    set move remove claim start ack fail release
 *                          under the token the record holds;
 *                          + 0.5 once started: the start's
 *                          attempt). key:token, so that start
 *                          and ack need not read the record
 *                          (a member means that lease runs)
 *   {q:p}:task     HASH    key -> "token attempt due " payload    all
 *   {q:p}:seq      STRING  token counter (INCRBY): a task's       set move claim fail release
 *                          token is taken when it is armed        requeue, a schedule's fire
 *   {q:p}:hold     STRING  latest window end any worker claimed   claim (SET PX); set move fail release (GET)
 *   {q:p}:ch       channel PUBLISH due ms when a task becomes     set move fail release
 *                          due before hold (a worker claims now)  resume ("resume"),
 *                                                                 schedule set ("sched")
 *   {q:p}:pause    STRING  present while the queue is paused      pause resume (SET, DEL);
 *                          (inspect.c)                            claim (EXISTS)
 *   {q:p}:r:<id>   STRING  a move's or remove's marker (below,    move remove (SET PX)
 *                          "Lost replies"), PX 2 * timeout + 1 s
 *
 *   {q:p}:dead     HASH    the dead letters (dead.c): key ->      fail, claim (at the last
 *                          "attempt dead_ms due errlen " error    attempt); requeue purge
 *                          payload                                list get count
 *   {q:p}:sched    HASH    the schedules (schedule.c): key ->     schedule set remove list,
 *                          "next policy anchor speclen " spec     a worker's schedule thread
 *                          payload
 *   {q:p}:sched:n  ZSET    schedule key -> next occurrence ms     as {q:p}:sched
 *
 * A record's attempt field counts starts in its low 32 bits; a per-task
 * max_attempts (set_opts) rides above them, so every script that copies a
 * record keeps it (dead.c; a new token is spliced in before the field,
 * untouched). The running lease's start is not in the field but in its
 * lease score's + 0.5 mark: FAIL and CLAIM's recovery fold it in before
 * they compare the attempts with max_attempts, so the start that failed or
 * whose lease was lost counts; inspect's get reads the same mark (held or
 * running, the attempt with the running start included). A schedule's occurrence is the task
 * "<key>@<occurrence ms>" in the schedule's partition (schedule.c).
 *
 * and two keys per queue, each in its own slot: {q:meta}:partitions
 * (STRING), the partition count, written SET NX by the queue's first
 * client and compared by every later one at new (below, "The servers'
 * configuration"); {q:meta}:schema (STRING "2"), written once every
 * partition's leases are in {q:p}:leases (upgrade.c: an earlier version's
 * {q:p}:lease converted).
 *
 * What an empty queue leaves (docs/keys.md says it for operators): a task's
 * keys go with its last task (a bucket and its index entry with the
 * bucket's last task, lease and task with their last member), but for
 * {q:p}:seq, the token counter of each partition that ever held a task,
 * kept on purpose: tokens must grow across the queue's life (fencing: a
 * store keeps the highest token it accepted, and a counter started again
 * would be refused there); {q:p}:hold while a worker runs and 2 * window_ms
 * + 1 s after (its TTL: the refill sets it every window/2); the markers,
 * for their PX; {q:meta}:partitions; the dead letters and schedules until
 * an operator requeues, purges or removes them. drop (inspect.c) deletes
 * them all.
 *
 * W = TW_RR_BUCKET_MS = 500 ms. A waiting task (in no lease) is in exactly the
 * bucket floor(due / W) of the due time in its record; a claimed one is in
 * lease instead. set, move and remove find the old bucket from the record
 * (LREM of the key); claim walks the index in score order and takes whole
 * buckets, and the worker sorts what a claim brought by due time (claim.c),
 * so tasks leave in due order (catch-up included); a bucket that begins
 * window/4 or more ahead is split at the claim's batch instead (its tasks
 * go to the worker's wheel, which orders them), so that a dense one is
 * not one long call.
 *
 * Why LIST buckets: a LIST is a quicklist of listpacks (8 KB each,
 * list-max-listpack-size -2) at any length: ~19 B per task here (the key
 * with its 2 bytes of framing), whether a bucket holds 50 tasks or 5,000.
 * A ZSET bucket would be a listpack only up to 128 members
 * (zset-max-listpack-entries), a skiplist of ~120 B per task beyond: 1e6
 * tasks due over a minute on 16 partitions put ~520 in each 500 ms bucket.
 * What a LIST gives up is order by due time inside a bucket, which no one
 * needs: claim takes a bucket whole, the worker sorts it. Its costs: a
 * replaced, moved or removed waiting task is found by LREM, a scan of its
 * bucket (O(bucket), memcmp of keys); a claim leases tasks up to one bucket
 * (W) past its window (held locally, hold_ms past their due time as any;
 * a worker with a slow execute takes a share of each bucket up to one
 * more window ahead too: claim.c, Sharing);
 * and a claim's n bounds where it stops, not its size (one bucket over at
 * most, among buckets due within window/4). RPUSH answers the list's
 * length, so set learns which buckets are new (the index's ZADD) without
 * an EXISTS. The index is a listpack while a
 * partition's work spans <= 128 buckets (64 s), a skiplist beyond: one
 * member per bucket either way, ~0.4 B per task at that density. Every
 * client of a queue must use the same W (it names the buckets).
 *
 * Buckets in a cluster: the bucket keys are not declared to EVALSHA (set
 * cannot know its bucket before it reads the server's TIME, move and remove
 * before they read the record). They carry the partition's hash tag, so
 * they live in the declared keys' slot, and Redis 7.0 serves a script's
 * undeclared keys of that slot on the node that owns it (another slot's
 * key fails: "non local key"). The hazard is a slot migration: MIGRATE
 * moves keys one by one, so a bucket may sit on the other node than the
 * declared keys, and a script would then fail half-way (source: ASK error
 * on a moved key, after earlier writes) or, on the target under ASKING,
 * find the bucket absent and create a second one that MIGRATE later
 * overwrites (losing tasks). So every bucket script first runs EXISTS of two
 * absent keys of the slot through redis.pcall (stable() in scripts.c): that
 * fails on a node that is migrating the slot out (ASK) or importing it
 * (TRYAGAIN: keys missing under ASKING) and nowhere else; the script then
 * answers TRYAGAIN before writing anything, and the router retries with
 * backoff until SETSLOT NODE ends the migration (then MOVED). While the slot
 * is stable, every key of it is on its owner and the scripts see all of
 * them. START (acknowledgements included) touches its declared keys only
 * and keeps working during a migration. test_redis_cluster
 * (test_bucket_keys) checks all of this on a 7.0 cluster, with the slot
 * open before and after the declared keys moved.
 *
 * Calls, each one script call (atomic: nothing half-written), and their cost
 * in Redis operations (n = tasks in the partition, k = tasks in the call):
 *
 *   call       script   round trips            Redis work per call              cost
 *   set        SET      1                      EXISTS(2) TIME GET HMGET INCRBY    O(log n)
 *                                              HSET, a replaced task's ZMSCORE,
 *                                              then ZREM of lease or LREM of the
 *                                              old bucket (EXISTS, [ZREM index]),
 *                                              RPUSH bucket [ZADD index] [PUB]
 *   set_many   SET      pipelined, 1 call per  the same, each of HMGET HSET       O(k log n)
 *                       partition per <= 96    taking the k tasks at once, one
 *                       (a key twice in one    RPUSH per bucket (the tasks sent
 *                       call: sent once, the   by delay: a bucket is one run),
 *                       last), each call       whose answer tells a new bucket;
 *                       written once built     one index ZADD
 *   move       MOVE     1                      EXISTS(2) GET(marker) HGET, lease  O(log n + bucket)
 *                                              ZREM, else old bucket LREM EXISTS
 *                                              [ZREM index], TIME INCRBY HSET RPUSH
 *                                              [ZADD index] GET [PUB], SET(marker
 *                                              PX)
 *   remove     REMOVE   1                      EXISTS(2) EXISTS(marker) HGET      O(log n + bucket)
 *                                              HDEL, lease ZREM, else bucket LREM
 *                                              EXISTS [ZREM index], SET(marker
 *                                              PX) when it removed
 *   claim      CLAIM    1 per >= 256 tasks     EXISTS(2) TIME, ZRANGEBYSCORE      O(k log n)
 *                       (whole buckets: one    LIMIT WITHSCORES of expired leases
 *                       bucket over at most)   (each: HGET ZREM INCRBY HSET RPUSH
 *                                              [ZADD index]); the index, 8
 *                                              buckets per ZRANGEBYSCORE; per
 *                                              bucket LRANGE HMGET ZADD(lease)
 *                                              DEL ZREM(index) (the records not
 *                                              written: each holds its token), each
 *                                              taking the bucket's tasks at once;
 *                                              GET SET; ZRANGEBYSCORE of the
 *                                              first lease; with a share, per
 *                                              zone bucket the same as a split
 *                                              one (LRANGE .. LTRIM)
 *   (worker)   TIME     1 per node per round   TIME                               O(1)
 *   start      START    1 round trip per       TIME; per partition group of the   O(k log n)
 *                       executor round: the    call: one ZADD XX GT CH of its k
 *                       tasks of one span      lease members key:token
 *                       (start_ahead_ms / 2;   (lengthened, marked started; the
 *                       <= 32): one call       record neither read nor written),
 *                       standalone (cut at 128 [one ZMSCORE when it changed fewer
 *                       arguments), one per    than it started]
 *                       partition in a cluster
 *   (ack)      START    1 round trip per       TIME; per partition group: ZREM    O(a log n)
 *                       batch: every pending   of its a lease members, then HDEL
 *                       ACK once the oldest    of the a records when all were
 *                       has waited 100 ms      there; else (or when a lease may
 *                       (<= 128 of <= 48       have ended) HMGET of the records
 *                       partitions a round)    [ZMSCORE], HDEL [ZREM] of those
 *                                              still this lease's
 *   fail       FAIL     1 per FAILED task      HGET TIME ZSCORE EXISTS(2) INCRBY  O(log n)
 *                                              HSET
 *                                              ZREM RPUSH [ZADD index]
 *                                              GET [PUBLISH]
 *   release    RELEASE  pipelined, 1 per held  HGET EXISTS(2) ZSCORE INCRBY HSET  O(log n)
 *                                              ZREM
 *                                              RPUSH [ZADD index] GET [PUBLISH]
 *   stats      HLEN     1 per partition        HLEN                               O(1)
 *   (new)      GET      1                      GET {q:meta}:schema                O(1)
 *              EVAL,    until a client wrote   per partition EXISTS(2)            O(P + l)
 *              SET      it: 1 per partition    ZRANGEBYSCORE LIMIT 1000 of
 *                       + 1 per 1000 leases    {q:p}:lease, per 1000 HMGET ZADD
 *                       an earlier version     ZREM; then SET (upgrade.c)
 *                       left, once
 *   (fail, claim at a task's last attempt, the lease's start mark folded in:
 *              FAIL's or the recovery's writes become ZREM lease, HSET dead,
 *              HDEL task: the same cost)
 *   set_opts   SETX     1                      EXISTS(2) HGET, lease ZREM, else   O(log n + bucket)
 *                                              old bucket (LREM EXISTS [ZREM
 *                                              index]), TIME INCRBY EXISTS HSET [HDEL]
 *                                              RPUSH [ZADD index] GET [PUB]
 *   dead list  HSCAN    1 per partition        HSCAN COUNT count (1..1000); a     O(count)
 *                       visited (<= 64)        call ends at the first partition
 *                                              that gave entries
 *   dead get   HGET     1                      HGET                               O(1)
 *   requeue    REQUEUE  1                      EXISTS(2) TIME HGET HEXISTS EXISTS O(log n)
 *                                              INCRBY HSET HDEL RPUSH [ZADD index]
 *                                              GET [PUB]
 *   requeue    REQUEUE_ 1 per partition per    HSCAN COUNT 128, then per dead     O(k log n)
 *    all       ALL      HSCAN step             letter as requeue; GET [PUB]
 *   purge      HDEL,    1; all: 1 per          HDEL; UNLINK (the server frees     O(1)
 *              UNLINK   partition              the HASH in the background)
 *   dead count HLEN     1 per partition        HLEN                               O(1)
 *   schedule   TIME,    1 (every) or 2 (cron)  EXISTS(2) TIME HGET HSET ZADD      O(log s)
 *    set       SCHED_SET                       PUBLISH "sched"
 *   schedule   SCHED_   1                      EXISTS(2) ZREM HDEL                O(log s)
 *    remove    DEL
 *   schedule   HSCAN    as dead list           as dead list                       O(count)
 *    list
 *   schedule   HLEN     1 per partition        HLEN                               O(1)
 *    count
 *   (worker)   SCHED_   1 per partition when   EXISTS(2) TIME ZRANGEBYSCORE       O(log s + d)
 *              DUE      its next occurrence    LIMIT 32 HMGET of the d due ones,
 *                       comes within window    ZRANGEBYSCORE LIMIT 1 of the next
 *                       (then every window/2
 *                       while it fires), on a
 *                       "sched" and at least
 *                       once a minute (its own
 *                       thread)
 *   (worker)   SCHED_   1 per schedule coming  EXISTS(2) HGET TIME, per           O(k log n)
 *              FIRE     due (per 64            occurrence HEXISTS EXISTS INCRBY HSET
 *                       occurrences)           [HDEL] RPUSH [ZADD index], HSET
 *                                              ZADD, GET [PUB]
 * (s: schedules in the partition.)
 * The operator's calls (inspect.c, EVAL of read-only scripts but drop's;
 * P = partitions, b = buckets read, l = leases, s = page size, B = tasks
 * in one bucket: what falls due in W in one partition):
 *   get        GET      1                      EXISTS(2) TIME HGET ZSCORE         O(log n)
 *   list       LIST     1 per partition        EXISTS(2) TIME; per 16 buckets a   O(P (s + 2) B)
 *                                              ZRANGEBYSCORE of the index; per    (a bucket is
 *                                              bucket, per 512 of its tasks       not sorted:
 *                                              LRANGE HMGET (b <= s + 2 whole     each is read
 *                                              buckets: a LIST bucket is not      whole, its
 *                                              ordered by due time; the page      best s kept)
 *                                              kept is at most 2 s tasks)
 *   counts     COUNTS   1 per partition        EXISTS(2) TIME HLEN ZCARD; per 512 O(P (l + b + B))
 *                                              leases ZRANGE WITHSCORES (the
 *                                              start mark: running); per 64
 *                                              buckets due by now + within a
 *                                              ZRANGEBYSCORE, each LLEN (b <=
 *                                              4096), the one that ends after
 *                                              now + within and the first read
 *                                              whole (LRANGE HMGET per 512: the
 *                                              due times), EXISTS (pause)
 *                                              HLEN(2) (dead letters, schedules)
 *   pause      -        1 (one server: EVAL    SET {q:p}:pause (each)             O(P)
 *                       of every flag; a
 *                       cluster: 1 per
 *                       partition)
 *   resume     -        as pause, + 1 per      DEL (each), PUBLISH "resume"       O(P)
 *                       partition
 *   drop       DROP     1 + b / 1024 per       EXISTS(2) TIME; check: EXISTS      O(P + b)
 *                       partition, + 1 check   ZCARD; then per 1024 buckets       (UNLINK frees
 *                       per partition          ZRANGE UNLINK ZREM, last UNLINK    big values in
 *                                              of the partition's keys (pause, the background)
 *                                              dead, sched, sched:n too); DEL meta
 *   metrics    -        counts' and stats'     as counts and stats                O(P (l + b + B))
 * The claim's pause check is one EXISTS per claim call.
 * A bucket's RPUSH and its claim (LRANGE, DEL) cost O(1) per task; the LREM
 * of a replaced, moved or removed waiting task scans its bucket; the index
 * costs O(buckets) while a listpack, O(log n) once a skiplist. Nothing else
 * of the workers' and producers' calls scans: claim reads at most 256
 * expired leases, and due tasks until it has 256 or more (whole buckets
 * within window/4, split beyond; it stops mid-bucket past ~4 MB of records)
 * per call, and reads no more of a bucket than it takes, but for the
 * payload stop; the operator's list and counts read whole buckets (above).
 * A worker's periodic work is one refill round every window/2: a TIME per node and one claim per partition (more while
 * partitions return full batches; <= 1024 tasks per call, spread over
 * window/4: rr_pace), counted in stats (claims, refills), and a claim of a
 * partition when the earliest lease its last claim saw ends (recovery,
 * claim.c), at most one per partition per hold_ms / 8: in the steady state
 * about one per partition per hold_ms, mostly the refill's. A delivered task
 * costs about claim/64 + start/batch script calls, and its acknowledgement
 * a share of one batch per 100 ms (ack.c); a batch is what comes due in one
 * start_ahead_ms / 2 span (below), and on a standalone server one START
 * call takes every partition's starts of a round; a catch-up of tasks due
 * together starts them in batches of 32.
 *
 * Redis's work per task: the writes (each propagated to the AOF), the
 * reads that check token and lease, and the Lua around them. A task is
 * written at set (record HSET with its token, one INCRBY a call, bucket
 * RPUSH), claim (lease ZADD only, its bucket's DEL shared: the record
 * already holds the token), start (lease ZADD only: the
 * start's attempt is the lease's + 0.5 mark, folded into the record by
 * whoever ends the lease without deleting it, so the record and its
 * payload are not rewritten) and acknowledgement (ZREM, HDEL). Only the
 * claim reads the records (HMGET: the token and the payload): the lease
 * member is the key and that token, so a start group is one ZADD XX of the
 * members and an acknowledgement group one ZREM of them (a member means
 * the lease it names runs: scripts.c), and acknowledgements go in batches,
 * a partition's group of them one ZREM and one HDEL (ack.c: why not
 * riding on STARTs). A polling queue writes a task once (ZADD) and takes
 * it in bulk. What is left per task is per-call and per-partition work at
 * low density (a START call per start_ahead_ms / 2 per worker, and a START
 * group of about one task at 1e5 tasks a minute on 16 partitions: its ZADD
 * is that task's) and a write per task at claim, start and
 * acknowledgement; cutting those needs leases of many tasks under one
 * member (a batch token, its tasks' starts and attempts counted without a
 * write each): not done.
 *
 * Starting ahead (start_ahead_ms, A; local.c): a held task leaves the
 * local wheel between A/2 and A before its local due time, at a multiple
 * of A/2, so what comes due in one A/2 span leaves together and one
 * executor STARTs it in one round trip. START grants a task once the server's clock
 * is within A of its due time (TIME + A >= due; earlier: "not yet", nothing
 * written) and answers its clock; each granted task may run at local reply
 * time + (due - that clock) (+ 0.1% + 1 us) (never early: below). Those
 * due already run at once on the executor that started them; the others go
 * to the worker's armed list (local.c), ordered by that time, and the
 * first idle executor to wake at the head's time runs it. Why: the wheel's
 * wake-up and the START round trip happen while the task is not due yet,
 * so their delays (the tick thread scheduled late, round trips queued
 * behind Redis work) cost nothing up to A/2; what remains is one wake-up
 * at the due time, shared by the idle executors because a machine's stalls
 * are per CPU (local.c). The price: a task counts as
 * started (its attempt counted) up to A before it runs, so a set, move or
 * remove returning in that span no longer stops that delivery (as for a
 * running task; redis.h says so). That span is why A is 10 ms by default:
 * a larger A batches more (fewer START calls, less Redis CPU) and widens
 * it. An executor is not asleep for its batch: it comes back to the FIFO
 * and to the armed list after each round. A = 0: START at the due time,
 * one executor per ready task, nothing armed. So a task normally runs
 * within the worker's own wake-up latency of its due time (A = 0: within
 * a tick and a round trip). rt_priority (the tick thread, and executors
 * while they wait for an armed task's time, at SCHED_FIFO) is opt-in: it
 * needs privileges, and a stalled virtual CPU runs no thread, whatever its
 * priority.
 *
 * Why refills are paced: Redis runs one script at a time, so a refill
 * round's claim calls run back to back would hold it for tens of ms every
 * window/2, and the STARTs of tasks due meanwhile would queue behind them:
 * a lateness tail. rr_pace spreads them over window/4; an acknowledgement
 * batch is calls of <= 128 acknowledgements. What tail is left is threads
 * the machine does not schedule in time. And a worker takes no more due
 * work than its executors can start soon (claim.c, RR_READY_PER_THREAD), so
 * that a backlog is shared by the workers instead of expiring in one
 * worker's queue. With `appendfsync
 * always`, every claim and start waits for an fsync: the disk is then on
 * the lateness path.
 *
 * Memory in Redis per pending task, with 16-byte keys and 32-byte payloads:
 * ~130 B of HASH field (dict entry 24, bucket 8, key sds 24, value sds
 * 56-64 for "<token> 0 <due> " and the payload, rounding), ~19 B in its due bucket
 * (the key and its framing in a listpack, at any density), ~0.4 B of
 * index, and the buckets' keyspace entries; bench/README.md has the
 * measured figures at 1e5 and 1e6. The HASH is most of it; a
 * listpack-encoded record store (records bucketed by key hash) would need
 * its bucket count to grow with n (rehashing live buckets): not done. The
 * price of buckets is Redis work on set: one RPUSH per bucket a batch
 * touches (about one per task when delays are spread) and the HMGET that
 * finds replaced tasks' buckets, where one due ZSET per partition would
 * take a batch in one ZADD (less Redis CPU per set; claims cost the same).
 *
 * Memory pressure. Redis must keep every key of the queue: a task record
 * evicted is a task lost (and its bucket entry an orphan, counted nowhere
 * once its record is gone), an evicted bucket LIST or lease ZSET hides its
 * tasks from every claim while their records stay counted in pending. Which
 * maxmemory-policy evicts what: allkeys-lru, allkeys-lfu and allkeys-random
 * any key, so tasks; the volatile-* policies (lru, lfu, random, ttl) only
 * keys with a TTL, and the queue's only such key is hold (SET PX by
 * claim), whose loss costs at most lateness: a set due before the window
 * already claimed then publishes nothing and waits for the next refill
 * (window/2), never lost, never early; noeviction evicts nothing. With no
 * key left to evict a volatile-* server refuses writes as noeviction
 * does. So new accepts noeviction and volatile-*, and refuses the rest
 * (a policy it cannot read included) with TW_ECONFLICT unless the config
 * accepts the risk (accept_evicting_policy; stats count those servers in
 * evicting_nodes). A key given a TTL later must be weighed the same way.
 * The policy is read from INFO memory, or with CONFIG GET where INFO is
 * renamed or denied (managed services). It is checked on every master at
 * new (each node of the cluster's slot map), and on every later connection
 * of the client's router (a master that was away, a promoted replica, a
 * reconnect: router on_connect, one round trip); a server refused after new
 * answers the client's calls with TW_ECONFLICT, each call on a new
 * connection checked again (so a reconfigured server is taken at once;
 * the refused one costs a connection per call). The workers' own
 * connections are not checked: they drain. A policy changed by CONFIG SET
 * on a connected server is seen at the next connection only.
 *
 * At maxmemory under noeviction, Redis refuses the commands that may grow
 * memory. A script without flags is refused at its first such write unless
 * another write came first: the claim then failed at its first lease
 * ZADD, nothing was ever started or acknowledged, and a full queue stayed
 * full. So every script declares Redis 7 flags (a shebang, scripts.c): set
 * and move (new work) are refused before they run, whole (TW_EOOM, nothing
 * written, counted in oom_refusals); claim, start with its
 * acknowledgements, fail, release and remove carry allow-oom and run at
 * any memory: an acknowledgement or remove frees a task, claim and start
 * move a member between ZSETs (a claim rewrites a record whose token is 0,
 * left by an earlier version, with a few digits more), fail
 * and release move one back (a new bucket at most). The queue drains, and
 * sets work again once it has freed enough. The router keeps the OOM
 * answer as TW_EOOM (tw_rr_reply_error), not TW_EPROTO.
 *
 * The servers' configuration, checked by new (server_checks.c): the policy (above) and the
 * queue's partition count. A key's partition is its hash % partitions, so
 * clients with different counts put a task where another's worker never
 * claims it, or claim partitions no set fills: tasks silently lost. So the
 * first client of a queue stores its count in {q:meta}:partitions (GET, then
 * SET NX, GET again after losing the race: a server at maxmemory still
 * lets a client of an existing queue start), and a client with another
 * count fails new with TW_ECONFLICT. To grow a queue: a new queue name
 * with the new count, producers moved to it, the old queue's workers kept
 * until its pending is 0 (redis.h); or, for an empty queue with no client
 * running, DEL {q:meta}:partitions. Not built: re-partitioning in place would
 * move every task between slots while workers claim them. A queue whose
 * key was lost with its data (a restart without persistence) takes the
 * count of its next first client. lease_ms has a floor (redis.h,
 * TW_REDIS_LEASE_MIN_MS, and 4 ticks): a lease shorter than the fixed
 * costs between a claim or START and the work it protects runs out before
 * the work starts, and the queue churns without delivering.
 *
 * Pipelined sets are bound by Redis's CPU, not the client's, so the SET
 * script is written for Redis's cost (scripts.c): a bucket is one run of
 * the delay-sorted tasks, added by one RPUSH; keys, payloads and delays come
 * as three ARGV runs, the delays as one binary string; the task HASH is
 * created hashtable-encoded; and the client writes a chunk's first call as
 * soon as it is built (router.c).
 * A set's Redis work is mostly the AOF feed (each propagated argument
 * appended on its own: HSET's two and RPUSH's one per task), HSET,
 * string.format of the record (the cheapest number-to-string in Redis's
 * Lua), the RPUSH, and the Lua VM (its tables, GC and string interning) and
 * redis.call's plumbing.
 *
 * Why these calls:
 *  - claim leases a task up to window_ms (+ W: whole buckets; a share of
 *    each bucket up to one more window, at most 10 s, with a slow execute,
 *    so that workers split buckets by pace: claim.c) before it is due, with a short
 *    lease, the hold, that ends hold_ms (1 s) after its due time; the
 *    worker holds it in its local queue. Why short: a worker that dies (or
 *    a claim whose answer is lost) must not keep tasks it never started
 *    from running for lease_ms; a hold that runs out is taken back by the
 *    next claim of its partition, and each claim answers the partition's
 *    earliest lease end so that some worker claims it then (claim.c:
 *    recovery). The tasks a dead worker held come back about hold_ms
 *    (+ hold_ms / 8) after their due time.
 *  - start, run when the local queue lets the task out (start_ahead_ms
 *    before its due time at most), is the gate: it checks that the lease
 *    is still this worker's (its member key:token exists: a set, move or
 *    remove since the claim removed it with the record's token, so
 *    "replace and remove win" hold for held tasks too; a claim that took
 *    an expired hold back did too, and a hold
 *    that ran out with no claim since is still this worker's alone), that
 *    the task is due within start_ahead_ms by the server's clock (TIME +
 *    ahead >= due; the worker waits out the rest), counts the attempt
 *    (marks the lease started: a start redone after a lost reply counts
 *    once; the worker knows it as the claim's attempt + 1) and lengthens
 *    the lease to max(due, now) + lease_ms: execute's time.
 *  - ack and fail act only for the current token with an unexpired lease: a
 *    stale acknowledgement deletes nothing.
 *  - an expired lease goes back to due (keeping its due time) at the next
 *    claim of that partition by any worker; attempt counts only starts.
 *  - fencing: the worker calls execute only while the lease START granted
 *    surely still runs by the server's clock (execute.c: the lease end it
 *    computes as START did, the server's clock bounded from above by the
 *    round's send time, the clock margin), and hands execute that end and
 *    the lease's token, which grows with every lease of a key (one INCR
 *    counter per partition), for stores that must refuse a stale writer.
 *  - hold tells set whether a worker already holds the window the new task
 *    falls in (then it must be told: PUBLISH); later tasks will be claimed
 *    by the periodic refill, which runs every window/2 and claims
 *    window_ms ahead (its calls spread over window/4: rr_pace), so each task
 *    is claimed >= window/4 before its due time.
 *
 * Never early, the argument: (1) claim hands out tasks due by server_now +
 * window only; (2) the worker fires a held task when its local monotonic
 * clock reaches due - offset, where offset (server clock - local clock) is
 * the largest of recent lower bounds: each reply carrying the server's TIME
 * (read during the call) gives one as server_time - local_time_after_reply,
 * since the server's clock had reached server_time before the reply
 * arrived; so the local estimate of the server's clock never runs ahead of
 * it (drift aside: samples older than 5-10 s are dropped). A TIME round trip
 * per node before each claim round keeps the bound tight (a claim's own
 * reply is loose by its script and payload time). (3) start reads TIME on
 * the server itself and grants a task only within start_ahead_ms of its
 * due time; the worker runs it once (due - that TIME) has passed on its
 * monotonic clock since the reply was read: the server's clock had reached
 * that TIME before the reply arrived, so it has reached the due time by
 * then (plus TW_REDIS_CLOCK_RATE_PPM, 0.1%, + 1 us for a local clock running
 * fast against the server's: the wait is at most start_ahead_ms <= 1 s).
 * (3) alone makes the rule hold; (2) makes it cheap (start almost never
 * answers "not yet").
 *
 * Clocks, what is assumed (redis.h states it): a worker's clock runs at the
 * server's rate within TW_REDIS_CLOCK_RATE_PPM; offsets of any size are
 * measured. Every span the worker measures on its own clock and trusts
 * against the server's is scaled by that margin (internal.h:
 * tw_rr_rate_up/down): the wait after START is lengthened (never early),
 * the span a lease is trusted for after START is shortened (fencing). The
 * windows, holds and recovery times only cost or save work, never break a
 * rule, so they use the plain offset. Nothing corrects a difference
 * between two masters' clocks: a due time read from one master's TIME is
 * met by the next master's clock after a failover or a migration, so a
 * task may run early by the old master's clock by as much as the new one
 * runs behind it (the operator's clock synchronisation bounds that).
 * tests/redis/test_redis_clocks.c runs a worker whose clocks run 0.1% fast
 * (libfaketime) and checks that nothing starts early by the real clock.
 *
 * Retry limit and dead letters (dead.c): FAIL, at a task's last attempt
 * (its own max_attempts, else the queue's, which the worker sends), and
 * CLAIM, recovering an expired lease at the last attempt, move the record
 * into {q:p}:dead in the same script instead of back to a bucket: nothing
 * lost on the way, never both a task and a dead letter from one move. The
 * error text is execute's (tw_redis_fail_text, sent with FAIL) or "lease
 * lost". A dead letter and a live task may share a key (a set after the
 * move): requeue then refuses (TW_ECONFLICT). Why per partition: one
 * script writes the task HASH and the dead HASH, so they share a slot.
 *
 * Schedules (schedule.c, its design comment): each occurrence becomes a
 * task ahead of its time, made by whichever worker's schedule thread wins
 * a compare-and-set on the schedule's next occurrence (SCHED_FIRE): one
 * task per occurrence across all workers, due at the occurrence (never
 * early: the task path's rule); cron expressions are read in universal time.
 *
 * Events (events.c): executors and the claim thread queue copies of their
 * events (bounded), an events thread of its own calls on_event.
 *
 * Threads and connections: the client API (set, move, remove, set_many,
 * stats, and stop's releases) shares one router under api_mu; a worker adds a
 * claim thread (own router), a subscriber thread (own connection, SUBSCRIBE
 * to every partition's channel on one node: in a cluster PUBLISH reaches
 * every node; new returns once it is subscribed), the local queue's tick
 * thread (local.c), `threads` executors (execute.c), each with its own
 * router, and an acknowledger thread (ack.c, own router) for the delayed
 * ACKs, a schedule thread (schedule.c, own router) and, with
 * on_event, an events thread (events.c, no connection). No connection is
 * ever shared unlocked. What they
 * share of the masters' health is the table of silent masters (silent.c:
 * a mutex for the table, an atomic mark per partition). Every one of
 * these threads blocks SIGPIPE (tw_rr_thread_create); the application's
 * threads are the application's to guard (redis.h).
 *
 * Stop: claim and subscriber threads first (the claim thread leaves its
 * carry, claimed but not handed over, to stop); then the local queue is
 * closed: no START round begins, running ones finish, armed tasks run at
 * their time, the executors exit; what is left in the queue and the carry
 * is released (RELEASE, pipelined); last, the acknowledger sends every
 * pending acknowledgement.
 *
 * Faults: a call gives TW_EIO after command_timeout_ms of failed attempts
 * (reconnecting with backoff), TW_EUNKNOWN once one may have been applied
 * (below, "Lost replies"); the claim thread and the subscriber reconnect
 * with backoff and, once back, claim every partition before handing any due
 * task over (catching up what came due, in due order: rr_reconnected). In
 * a cluster with another connection left, a claim round's calls give up
 * after RR_CLAIM_RETRY_MS (20 ms) instead: a master away costs the round
 * that much, not command_timeout_ms per call, and its partitions are
 * claimed by a later round once it answers (rr_claim_round). A START
 * round's calls give up after 5 ms likewise (execute.c,
 * RR_START_RETRY_MS) and hand on every task they got an answer for at
 * once (started ones run or armed); the unanswered ones of a round
 * answered in part (a cluster master away, or one call of a standalone
 * round failing) go back to the local queue for the next round, so tasks
 * on the masters that are up stay on time. A round with no answer at all
 * while Redis is wholly away (standalone, or no cluster connection left)
 * is retried in place every 100 ms (the batch kept, so the catch-up stays
 * in order) for up to lease_ms / 2, then its tasks go back to the queue
 * (execute.c). A master that accepts connections but does not answer
 * (stopped, hung, cut off with its socket open) delays only its own
 * partitions (silent.c): in a cluster a worker's threads read every
 * master's replies as they come and wait silent_ms (30 ms by default) at most
 * for one; a master that owes replies then is silent for the whole worker
 * (START and acknowledgement rounds leave its partitions out, the claim
 * thread keeps an unanswered claim outstanding and reads it when it comes,
 * the subscriber moves to another node) until the claim thread's probe,
 * or any late reply, shows it answers. An ack that fails leaves the lease to expire
 * (at-least-once).
 *
 * Connecting (url.c, connect.c, transport.c, acl.c, errors.c): each
 * servers entry is parsed once (tw_rr_check_servers, config.c: plain
 * host:port or socket path, or a redis://, rediss://, unix:// or redis+sentinel:// URL),
 * and kept as the router takes it: "host:port" or the socket's path, no
 * credentials. The credentials
 * and the db go to r->conn, one set for the instance (the fields or the
 * URLs, never both; URLs that disagree are refused rather than guessed at),
 * wiped at free. Every connection is opened by tw_rr_open with r->conn:
 * the routers' (client, claim, executors, acknowledger, each node learnt
 * from CLUSTER SLOTS or a redirect, each reconnect) and the subscriber's,
 * so no path connects without AUTH (nor, with TLS, without TLS: the
 * silent probe's PING goes through transport.c too). A refused AUTH is TW_EAUTH and ends
 * the call at once (retrying the same credentials cannot help; the node
 * still backs off, so the worker's threads retry it slowly). Before it
 * writes anything, new asks the server's ACL (acl.c, one EVAL of
 * redis.acl_check_cmd, Redis >= 7) for every command the layer sends on
 * the queue's keys and channel, because a command refused inside a script
 * is not named by Redis 7.0 and one only the worker sends would otherwise
 * fail long after new returned; a worker's new also fails when the
 * subscriber's first connection is refused (sub_err). Error replies keep
 * their words (errors.c): in the router's err for the call that met them,
 * copied per calling thread for tw_redis_last_error, and, for the worker's
 * own threads, which have no caller, into werr through their routers'
 * sink (counted in worker_errors). Texts name servers by address only.
 * Sentinel (sentinel.c): with redis+sentinel:// entries (all of them, one
 * master name) new first asks the Sentinels for the master and confirms it
 * (ROLE master, with the config's credentials), and every router is seeded
 * with its address. The instance keeps one master address (sentinel.c,
 * under its own mutex) that every router's connection attempt reads
 * (router.c, tw_rr_connect_node: the address, then ROLE before the first command;
 * the subscriber reads it before each subscription). What shows it wrong
 * marks it stale: a connection that fails, a connection answering ROLE
 * other than master, a READONLY reply. The next attempt of any thread asks
 * the Sentinels again (at most every 100 ms; an answer other than the
 * failed address preferred), and a connection still open to the old
 * address is closed at its next command (rr_check_idle). A new master
 * resets the clock offsets (measured afresh from its replies), and is
 * checked by the client's on_connect as every new server, the queue's
 * partition count included. Nothing listens to +switch-master: a failover
 * breaks the old master's connections (it died) or its writes (READONLY,
 * demoted), which is what the layer acts on.
 * Replication loss (wait.c): a failover loses what no replica had; with
 * wait_replicas, set, move and remove send WAIT in the same write as their
 * script call (router.c, rr_roundtrip, when rt->wait_replicas is set) and
 * set_many one WAIT per master after its calls, and answer TW_EREPLICAS
 * when too few replicas confirmed. The worker's writes are not waited
 * for: losing them delivers again (at least once), and the cost stays off
 * the delivery path.
 * Transport and TLS (transport.c): every connection is the layer's own
 * struct tw_rr_link, not a hiredis redisContext, because Debian 12's
 * hiredis 0.14 has no TLS (hiredis has TLS from 1.0 on, as a library of its
 * own). We keep hiredis for the protocol (redisFormatSdsCommandArgv for the
 * requests, a redisReader for the replies) and do the socket I/O: plain
 * connections as hiredis did (a blocking socket with SO_RCVTIMEO and
 * SO_SNDTIMEO at the command timeout, TCP_NODELAY, one read of up to 16 KB
 * per wait; MSG_DONTWAIT where nothing may wait), TLS ones through OpenSSL
 * on a non-blocking socket and poll. TLS is one switch for the instance
 * (rediss:// entries, or cfg.tls): tw_redis_new builds one SSL_CTX (CA file
 * or directory, else the system's store; the client certificate) held in
 * r->conn.tls, and every connection made with r->conn (client, claim,
 * subscriber, executors, acknowledger, each cluster node, each reconnect,
 * the probe) does the handshake and verifies the server's chain and name
 * (tls_server_name, else the host connected to: for nodes learnt from
 * CLUSTER SLOTS the address it gives, which is the TLS port for a TLS
 * client when the servers run tls-cluster yes). A TLS connection without
 * AUTH or SELECT sends a PING before it is handed out: TLS 1.3 servers
 * refuse a missing client certificate after the handshake. Any TLS failure
 * is TW_ETLS with OpenSSL's words; like TW_EAUTH it ends the call at once
 * and reaches the worker's error (sink). A TLS write reports only whole
 * records (SSL_MODE_ENABLE_PARTIAL_WRITE), so what the router counts as
 * written (a call that may have run) stays exact. Unix sockets are never
 * TLS (Redis serves none there): a config mixing them with TLS is refused.
 * Lost replies: a call is sent (router.c) once all of its bytes are in the
 * socket; before that (a failed connect, a backoff, an unknown slot, a
 * write that failed, a connection found closed before writing) nothing can
 * have been applied, after it a reply that does not come (read timeout,
 * connection closed, an unreadable reply) leaves the outcome unknown. The
 * router retries a lost attempt at once on a new connection while
 * command_timeout_ms lasts (a read timeout spends all of it: no retry);
 * once one is lost, the call ends in a reply or in TW_EUNKNOWN, never
 * TW_EIO. What a retry answers must be the call's own answer:
 *  - set, set_many: SET run twice stores the same tasks (due from the
 *    later run). set_many redoes its unanswered calls, the lost ones too,
 *    while its chunk's command_timeout_ms lasts, else answers TW_EUNKNOWN
 *    (some items may be stored: a server that resumes runs what it read of
 *    a closed connection up to its first failed reply, so even that part is
 *    not known). The price of no memory: a task a worker claimed and
 *    started in the few ms between the two runs is reset by the second and
 *    delivered again (at least once; its acknowledgement then stale).
 *  - move, remove: each call carries a request id, a marker key of its
 *    partition's slot ({q:p}:r:<16 hex digits>, a per-client counter from
 *    a random start) that the script reads first (answering what it holds)
 *    and sets, PX 2 * command_timeout_ms + 1 s, only when it changed
 *    something: a retry answers 0 for its own removal and the first run's
 *    due time for its own move, instead of TW_ENOENT or a second move. An
 *    absent task needs no memory (a retry that removes a task set meanwhile
 *    is still one removal within the call). The marker outlives every
 *    attempt the server runs while the caller waits (a retry is sent only
 *    before the deadline). Cost per call: a marker read (EXISTS or GET of
 *    an absent key) always, a marker write (SET PX: a key of ~30 B with its
 *    expiry, ~100 B of memory, an AOF entry, and a DEL when it expires) per
 *    move or remove that changed something, alive for its PX (at 10,000
 *    removes per second and the default 2 s timeout, 50,000 markers, ~5
 *    MB); in the client, the id's format. An evicting maxmemory-policy may drop a
 *    marker (volatile-* first: it has a TTL), and the retry then answers as
 *    without it.
 *  - START (acknowledgements): a lost acknowledgement may have deleted its
 *    task; it is marked and sent again until answered (ack.c), and START
 *    answers "absent" apart from "stale", so that the retry counts its own
 *    deletion as the delivery it was. No cost where no reply is lost.
 *  - claim: a retried claim leases other tasks; what the lost one leased
 *    waits for its lease to end (claim.c).
 * Connections a server closed while idle are found (a non-blocking peek,
 * one recv per command) and replaced before anything is written, so that
 * a server gone before the call gives TW_EIO, not TW_EUNKNOWN.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/random.h"
#include "redis/internal.h"

#define RR_ACK_DELAY_MS 100 /* the oldest pending acknowledgement waits this long, then a batch */

/* Wipe and free a credential. */
static void rr_forget(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

/* ---- lifetime ---------------------------------------------------------------- */

/* Start one of the layer's own threads with SIGPIPE blocked (it inherits
 * the mask of the thread creating it, which is restored): hiredis writes
 * with write(), so a write to a server that was killed raises SIGPIPE,
 * whose default action ends the process. Blocked, it stays pending on that
 * thread and write() fails with EPIPE, a reconnect like any other. The
 * process's disposition, which is the application's, is left alone. */
int tw_rr_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t pipe, old;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe, &old) != 0)
        return pthread_create(t, NULL, fn, arg);
    int rc = pthread_create(t, NULL, fn, arg);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void rr_free_all(struct tw_redis *r)
{
    if (r->local)
        tw_rr_local_free(r->local);
    if (r->exec_rt) {
        for (uint32_t i = 0; i < r->cfg.threads; i++)
            tw_rr_router_free(&r->exec_rt[i]);
        free(r->exec_rt);
    }
    free(r->round);
    free(r->exec_threads);
    free(r->ack_round);
    if (r->ack_head)
        for (uint32_t p = 0; p < r->cfg.partitions; p++)
            while (r->ack_head[p]) {
                struct tw_rr_item *n = r->ack_head[p]->next;
                free(r->ack_head[p]);
                r->ack_head[p] = n;
            }
    free(r->ack_head);
    free(r->ack_tail);
    tw_rr_router_free(&r->ack_rt);
    tw_rr_router_free(&r->sched_rt);
    tw_rr_router_free(&r->claim_rt);
    tw_rr_router_free(&r->sub_rt);
    tw_rr_router_free(&r->api);
    if (r->servers) {
        for (size_t i = 0; i < r->cfg.nservers; i++)
            free(r->servers[i]);
        free(r->servers);
    }
    free(r->flags);
    free(r->slots);
    free(r->off_cur);
    free(r->off_prev);
    free(r->off_hi_cur);
    free(r->off_hi_prev);
    free(r->carry_n);
    free(r->last_full);
    free(r->unknown);
    free(r->silent);
    tw_rr_claim_free(r);
    for (size_t k = 0; k < TW_RR_SAMPLE_NODES; k++)
        if (r->probe[k])
            tw_rr_link_free(r->probe[k]);
    pthread_mutex_destroy(&r->silent_mu);
    for (size_t i = 0; i < r->carry.n; i++)
        free(r->carry.v[i]);
    free(r->carry.v);
    pthread_mutex_destroy(&r->api_mu);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->stop_mu);
    pthread_mutex_destroy(&r->hist_mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->sub_cv);
    pthread_mutex_destroy(&r->ack_mu);
    pthread_cond_destroy(&r->ack_cv);
    pthread_mutex_destroy(&r->err_mu);
    rr_forget(r->conn.user);
    rr_forget(r->conn.pass);
    tw_rr_sentinel_free(r->sentinel);
    tw_rr_tls_free(r->conn.tls);
    free(r);
}

/* A router of r's servers; the worker's threads' routers tell their errors
 * to the worker (tw_rr_worker_sink). On failure `why` (TW_RR_ERR_MAX bytes)
 * says what failed. */
static int rr_router(struct tw_redis *r, struct tw_rr_router *rt, char *why)
{
    int rc = tw_rr_router_init(rt, (const char *const *)r->servers, r->cfg.nservers, &r->conn,
                               r->cfg.connect_timeout_ms, r->cfg.command_timeout_ms);
    rt->shas = r->shas;
    rt->bodies = tw_rr_scripts;
    rt->sentinel = r->sentinel; /* each connection to the master the Sentinels name */
    if (rt != &r->api) {
        rt->sink = tw_rr_worker_sink;
        rt->sink_ctx = r;
    }
    if (rc)
        snprintf(why, TW_RR_ERR_MAX, "%s", rt->err[0] ? rt->err : tw_strerror(rc));
    return rc;
}

/* A code of new's own calls for its caller. A reply lost there (TW_EUNKNOWN)
 * leaves no doubt to report: what they write (the scripts, the partition
 * count SET NX, the schema marker, converted leases) a later new writes
 * again. So it is the connection lost (TW_EIO), or the memory to read the
 * reply (TW_ENOMEM). */
static int rr_new_code(const struct tw_redis *r, int rc)
{
    return rc != TW_EUNKNOWN ? rc : r->api.oom ? TW_ENOMEM : TW_EIO;
}

static int rr_load_scripts(struct tw_redis *r)
{
    for (unsigned i = 0; i < TW_RR_NSCRIPTS; i++) {
        const char *av[3] = {"SCRIPT", "LOAD", tw_rr_scripts[i]};
        size_t al[3] = {6, 4, strlen(tw_rr_scripts[i])};
        redisReply *x;
        int rc = tw_rr_command(&r->api, -1, 3, av, al, &x);
        if (rc)
            return rr_new_code(r, rc); /* not loaded, whatever the server did */
        if (x->type != REDIS_REPLY_STRING || x->len != 40) {
            rc = x->type == REDIS_REPLY_ERROR ? tw_rr_reply_error(&r->api, x) : TW_EPROTO;
            freeReplyObject(x);
            return rc;
        }
        memcpy(r->sha[i], x->str, 41);
        r->shas[i] = r->sha[i];
        freeReplyObject(x);
    }
    return 0;
}

/* A client that read its partition count (config 0 or AUTO) was sized for
 * TW_REDIS_PARTITIONS_MAX: its per-partition arrays shrink to the count.
 * Before any thread starts; a shrink that fails keeps the larger block. */
#define RR_FIT(a)                                                                          \
    do {                                                                                   \
        void *fit_ = realloc((a), n * sizeof *(a));                                        \
        if (fit_)                                                                          \
            (a) = fit_;                                                                    \
    } while (0)
static void rr_fit_partitions(struct tw_redis *r)
{
    size_t n = r->cfg.partitions;
    if (!(r->adopt || r->auto_partitions) || n == TW_REDIS_PARTITIONS_MAX)
        return;
    RR_FIT(r->slots);
    RR_FIT(r->flags);
    RR_FIT(r->off_cur);
    RR_FIT(r->off_prev);
    RR_FIT(r->off_hi_cur);
    RR_FIT(r->off_hi_prev);
    RR_FIT(r->carry_n);
    RR_FIT(r->last_full);
    RR_FIT(r->unknown);
}
#undef RR_FIT

int tw_redis_new(struct tw_redis **out, const struct tw_redis_config *cfg)
{
    if (out)
        *out = NULL;
    if (!cfg || !out) {
        tw_rr_errbuf(cfg, "NULL argument");
        return TW_EINVAL;
    }
    tw_rr_errbuf(cfg, "%s", "");
    struct tw_rr_url first;
    bool tls;
    int db, rc = tw_rr_check_config(cfg);
    if (rc && cfg->errbuf && cfg->errbuf_len && !cfg->errbuf[0])
        tw_rr_errbuf(cfg, "a configuration value out of its range (include/twheel/redis.h)");
    if (rc || (rc = tw_rr_check_servers(cfg, &first, &db, &tls)) != 0)
        return rc;
    char why[TW_RR_ERR_MAX] = "";
    /* partitions 0 or AUTO: sized for any count until it is read (rr_fit_partitions) */
    struct tw_redis_config adopt;
    uint32_t asked = cfg->partitions;
    if (asked == 0 || asked == TW_REDIS_PARTITIONS_AUTO) {
        adopt = *cfg;
        adopt.partitions = TW_REDIS_PARTITIONS_MAX;
        cfg = &adopt;
    }
    struct tw_redis *r = calloc(1, sizeof *r);
    if (!r) {
        tw_rr_errbuf(cfg, "%s", tw_strerror(TW_ENOMEM));
        return TW_ENOMEM;
    }
    r->cfg = *cfg;
    r->adopt = asked == 0;
    r->auto_partitions = asked == TW_REDIS_PARTITIONS_AUTO;
    r->cfg.username = r->cfg.password = NULL; /* r->conn holds copies */
    r->cfg.tls_ca_file = r->cfg.tls_ca_dir = r->cfg.tls_cert_file = r->cfg.tls_key_file = NULL;
    r->cfg.tls_server_name = NULL; /* read into r->conn.tls */
    r->cfg.errbuf = NULL;
    r->cfg.errbuf_len = 0;
    uint64_t seed[2];
    tw_random_seed_(seed);
    atomic_init(&r->req_seq, seed[0]); /* request ids of move and remove (client.c) */
    /* starts ahead by a quarter of the lease and of the window at most:
     * capped, not refused, so that the default start_ahead_ms suits every
     * valid lease and window */
    if (r->cfg.start_ahead_ms > r->cfg.lease_ms / 4)
        r->cfg.start_ahead_ms = r->cfg.lease_ms / 4;
    if (r->cfg.start_ahead_ms > r->cfg.window_ms / 4)
        r->cfg.start_ahead_ms = r->cfg.window_ms / 4;
    /* a hold is the lease of a task not started yet, and START marks a start
     * by lengthening it (ZADD GT): a longer hold would refuse that write and
     * leave the start uncounted */
    if (r->cfg.hold_ms > r->cfg.lease_ms)
        r->cfg.hold_ms = r->cfg.lease_ms;
    /* glibc's inits cannot fail; elsewhere the ones done are undone */
    pthread_mutex_t *mus[] = {&r->api_mu, &r->mu,     &r->stop_mu,  &r->hist_mu,
                              &r->ack_mu, &r->err_mu, &r->silent_mu};
    pthread_cond_t *cvs[] = {&r->cv, &r->sub_cv, &r->ack_cv};
    const size_t NMU = sizeof mus / sizeof mus[0], NCV = sizeof cvs / sizeof cvs[0];
    size_t nmu = 0, ncv = 0;
    while (nmu < NMU && pthread_mutex_init(mus[nmu], NULL) == 0)
        nmu++;
    while (nmu == NMU && ncv < NCV && tw_cond_init_mono_(cvs[ncv]) == 0)
        ncv++;
    if (ncv < NCV) {
        while (ncv)
            pthread_cond_destroy(cvs[--ncv]);
        while (nmu)
            pthread_mutex_destroy(mus[--nmu]);
        free(r);
        return TW_ESYS;
    }
    strcpy(r->queue, cfg->queue);
    r->cfg.queue = r->queue;
    r->worker = cfg->execute != NULL;
    if (!r->worker)
        r->cfg.threads = 0;
    r->servers = calloc(cfg->nservers, sizeof *r->servers);
    r->slots = malloc(cfg->partitions * sizeof *r->slots);
    r->flags = calloc(cfg->partitions, 1);
    r->off_cur = malloc(cfg->partitions * sizeof *r->off_cur);
    r->off_prev = malloc(cfg->partitions * sizeof *r->off_prev);
    r->off_hi_cur = malloc(cfg->partitions * sizeof *r->off_hi_cur);
    r->off_hi_prev = malloc(cfg->partitions * sizeof *r->off_hi_prev);
    r->carry_n = calloc(cfg->partitions, sizeof *r->carry_n);
    r->last_full = malloc(cfg->partitions * sizeof *r->last_full);
    r->unknown = calloc(cfg->partitions, 1);
    if (!r->servers || !r->slots || !r->flags || !r->off_cur || !r->off_prev || !r->carry_n ||
        !r->last_full || !r->unknown || !r->off_hi_cur || !r->off_hi_prev)
        goto nomem;
    for (uint32_t p = 0; p < cfg->partitions; p++)
        r->last_full[p] = UINT64_MAX;
    for (uint32_t p = 0; p < cfg->partitions; p++) {
        atomic_init(&r->off_cur[p], INT64_MIN);
        atomic_init(&r->off_prev[p], INT64_MIN);
        atomic_init(&r->off_hi_cur[p], INT64_MAX);
        atomic_init(&r->off_hi_prev[p], INT64_MAX);
    }
    if (tw_rr_copy_servers(r, cfg, &first, db) != 0)
        goto nomem;
    if (tls) {
        const struct tw_rr_tls_config tc = {cfg->tls_ca_file,     cfg->tls_ca_dir,
                                            cfg->tls_cert_file,   cfg->tls_key_file,
                                            cfg->tls_server_name, cfg->tls_skip_hostname_check};
        if ((rc = tw_rr_tls_new(&tc, &r->conn.tls, why, sizeof why)) != 0)
            goto fail;
    }
    r->cfg.servers = (const char *const *)r->servers;
    r->cfg.sentinel_username = r->cfg.sentinel_password = NULL; /* the Sentinel's copies */
    if (first.scheme == TW_RR_SENTINEL && (rc = tw_rr_sentinel_new(r, cfg, why)) != 0)
        goto fail;
    for (uint32_t p = 0; p < cfg->partitions; p++) {
        char tag[TW_RR_KEYBUF];
        int n = snprintf(tag, sizeof tag, "{%s:%u}", r->queue, (unsigned)p);
        r->slots[p] = (int)tw_rr_key_slot(tag, (size_t)n);
    }
    if ((rc = rr_router(r, &r->api, why)) != 0)
        goto fail;
    /* the count first (config 0 or AUTO): the permission check asks for
     * the keys of the first and the last partition */
    if ((rc = tw_rr_read_partitions(r)) != 0 || (rc = tw_rr_acl_check(r)) != 0 ||
        (rc = rr_load_scripts(r)) != 0 ||
        (rc = tw_rr_check_masters(r)) != 0 || (rc = tw_rr_check_partitions(r)) != 0 ||
        (rc = tw_rr_upgrade_leases(r)) != 0) {
        snprintf(why, sizeof why, "%s", r->api.err[0] ? r->api.err : tw_strerror(rc));
        rc = rr_new_code(r, rc);
        goto fail;
    }
    rr_fit_partitions(r);
    if (r->worker) {
        r->exec_rt = calloc(r->cfg.threads, sizeof *r->exec_rt);
        r->round = calloc(r->cfg.threads, sizeof *r->round);
        r->exec_threads = calloc(r->cfg.threads, sizeof *r->exec_threads);
        r->ack_round = calloc(1, sizeof *r->ack_round);
        r->ack_head = calloc(r->cfg.partitions, sizeof *r->ack_head);
        r->ack_tail = calloc(r->cfg.partitions, sizeof *r->ack_tail);
        r->silent = calloc(r->cfg.partitions, sizeof *r->silent);
        if (!r->exec_rt || !r->round || !r->exec_threads || !r->ack_round || !r->ack_head ||
            !r->ack_tail || !r->silent || tw_rr_claim_alloc(r) != 0)
            goto nomem;
        r->ack_delay_ns = (uint64_t)(r->cfg.lease_ms / 8 < RR_ACK_DELAY_MS ? r->cfg.lease_ms / 8
                                                                           : RR_ACK_DELAY_MS) *
                          1000000u;
        if ((rc = rr_router(r, &r->claim_rt, why)) != 0 ||
            (rc = rr_router(r, &r->sub_rt, why)) != 0 || (rc = rr_router(r, &r->ack_rt, why)) != 0 ||
            (rc = rr_router(r, &r->sched_rt, why)) != 0)
            goto fail;
        r->one_clock = !r->claim_rt.cluster; /* its router has asked (offset.c) */
        if (r->cfg.on_event && (rc = tw_rr_events_start(r)) != 0) /* events.c */
            goto fail;
        for (uint32_t i = 0; i < r->cfg.threads; i++)
            if ((rc = rr_router(r, &r->exec_rt[i], why)) != 0)
                goto fail;
        if (tw_rr_thread_create(&r->ack_thread, tw_rr_ack_main, r) != 0) {
            rc = TW_ESYS;
            goto fail;
        }
        r->ack_started = true;
        if ((rc = tw_rr_local_new(&r->local, r->cfg.tick_ms, r->cfg.start_ahead_ms,
                                  r->cfg.rt_priority, r->cfg.threads)) != 0)
            goto fail;
        for (uint32_t i = 0; i < r->cfg.threads; i++) {
            r->round[i].r = r;
            if (tw_rr_thread_create(&r->exec_threads[i], tw_rr_exec_main, &r->round[i]) != 0) {
                rc = TW_ESYS;
                goto fail;
            }
            r->exec_started++;
        }
        if ((rc = tw_rr_sched_start(r)) != 0) /* before the subscriber, which wakes it */
            goto fail;
        if (tw_rr_thread_create(&r->sub_thread, tw_rr_sub_main, r) != 0) {
            rc = TW_ESYS;
            goto fail;
        }
        r->sub_started = true;
        /* Return once notifications are flowing (bounded: the subscriber
         * keeps trying on its own if this server is slow to answer). */
        uint64_t until = tw_rr_mono_ns() +
                         (uint64_t)(r->cfg.connect_timeout_ms + r->cfg.command_timeout_ms) * 1000000u;
        pthread_mutex_lock(&r->mu);
        while (!r->subscribed && !r->sub_err &&
               tw_cond_wait_until_(&r->sub_cv, &r->mu, until) == 0) {
        }
        rc = r->subscribed ? 0 : r->sub_err; /* refused: the credentials or SUBSCRIBE */
        snprintf(why, sizeof why, "%s", r->sub_errtext);
        pthread_mutex_unlock(&r->mu);
        if (rc)
            goto fail;
        if (tw_rr_thread_create(&r->claim_thread, tw_rr_claim_main, r) != 0) {
            rc = TW_ESYS;
            goto fail;
        }
        r->claim_started = true;
    }
    *out = r;
    return 0;
nomem:
    rc = TW_ENOMEM;
fail:
    tw_rr_errbuf(cfg, "%s", why[0] ? why : tw_strerror(rc));
    (void)tw_redis_stop(r);
    rr_free_all(r);
    return rc;
}

/* ---- stop: the held leases given back, free -------------------------------- */

struct rr_rel {
    struct tw_redis *r;
    struct tw_rr_item **v;
    char kb[6][TW_RR_KEYBUF];
};

static int rr_rel_build(void *ctx, size_t i, int *slot, const char **av, size_t *al, int *nargs)
{
    *nargs = 3;
    struct rr_rel *m = ctx;
    const struct tw_rr_item *it = m->v[i];
    *slot = m->r->slots[it->part];
    tw_rr_keys(m->r, it->part, m->kb, av, al);
    av[7] = av[5];
    al[7] = al[5];
    av[5] = it->data;
    al[5] = it->key_len;
    av[6] = tw_rr_token_digits(it, &al[6]);
    return 0;
}

#define RR_REL_CHUNK 512 /* items a pipelined RELEASE batch takes (the pipeline's chunk) */

/* Give the leases of a list of held items back (they become due at their due
 * time for any worker), and free the items. Best effort: what cannot be
 * released (Redis away, or the pipeline's memory refused) comes back when
 * its lease ends. Nothing here allocates, so a stop short of memory still
 * gives back what it can, chunk by chunk. */
static void rr_release(struct tw_redis *r, struct tw_rr_item *list)
{
    struct tw_rr_item *v[RR_REL_CHUNK];
    struct rr_rel m = {.r = r, .v = v};
    while (list) {
        size_t n = 0;
        for (; list && n < RR_REL_CHUNK; list = list->next)
            v[n++] = list;
        pthread_mutex_lock(&r->api_mu);
        (void)tw_rr_eval_many(&r->api, TW_RR_RELEASE, n, TW_RR_NKEYS, rr_rel_build, &m,
                              tw_rr_many_check);
        pthread_mutex_unlock(&r->api_mu);
        for (size_t i = 0; i < n; i++)
            free(v[i]);
    }
}

int tw_redis_stop(struct tw_redis *r)
{
    if (!r)
        return TW_EINVAL;
    pthread_mutex_lock(&r->stop_mu);
    if (r->stopped) {
        pthread_mutex_unlock(&r->stop_mu);
        return 0;
    }
    atomic_store(&r->closed, true);
    pthread_mutex_lock(&r->mu);
    r->stop_claim = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    atomic_store(&r->stop_sub, true);
    if (r->claim_started)
        pthread_join(r->claim_thread, NULL);
    if (r->sub_started)
        pthread_join(r->sub_thread, NULL);
    r->claim_started = r->sub_started = false;
    tw_rr_sched_stop(r);
    struct tw_rr_item *list = NULL;
    if (r->local) {
        /* No START round begins now; running ones finish, armed items run
         * at their time, and then the executors exit. What they left in the
         * queue, and what it held for later, is given back. */
        tw_rr_local_close(r->local);
        for (uint32_t i = 0; i < r->exec_started; i++)
            pthread_join(r->exec_threads[i], NULL);
        r->exec_started = 0;
        list = tw_rr_local_drain(r->local);
    }
    for (size_t i = 0; i < r->carry.n; i++) { /* claimed, not handed over yet */
        r->carry.v[i]->next = list;
        list = r->carry.v[i];
    }
    r->carry.n = 0;
    if (list)
        rr_release(r, list);
    if (r->ack_started) { /* after the executors: it sends what they left */
        pthread_mutex_lock(&r->ack_mu);
        r->ack_stop = true;
        pthread_cond_signal(&r->ack_cv);
        pthread_mutex_unlock(&r->ack_mu);
        pthread_join(r->ack_thread, NULL);
        r->ack_started = false;
    }
    tw_rr_events_stop(r); /* after every thread that tells it */
#ifdef TW_RR_TRACE
    if (r->worker)
        tw_rr_trace_dump(r);
#endif
    r->stopped = true;
    pthread_mutex_unlock(&r->stop_mu);
    return 0;
}

int tw_redis_free(struct tw_redis *r)
{
    if (!r)
        return 0;
    (void)tw_redis_stop(r);
    rr_free_all(r);
    return 0;
}
