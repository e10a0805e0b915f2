/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: what its source files share (not installed).
 *
 * router.c  - connections to one server or a Redis Cluster: CRC16 slots,
 *             CLUSTER SLOTS map, MOVED/ASK, reconnect with backoff, EVALSHA
 *             with EVAL fallback. One router per thread that uses it (or
 *             under the caller's mutex): a router is not thread-safe.
 * scripts.c - the Lua scripts (see the schema in redis.c).
 * local.c   - a worker's near window: tw_tasks + tick thread + FIFO of ready
 *             tasks + executor threads.
 * redis.c   - the public API, the claim and subscriber threads.
 */
#ifndef TWHEEL_REDIS_INTERNAL_H
#define TWHEEL_REDIS_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "twheel/redis.h"
#include "twheel/tasks.h"
#include "twheel/wheel.h"

#define TW_RR_SLOTS 16384u

/* ---- time ------------------------------------------------------------------ */
uint64_t tw_rr_mono_ns(void);
void tw_rr_sleep_ms(uint32_t ms);

/* ---- router ---------------------------------------------------------------- */
struct tw_rr_node {
    char host[256];
    int port;
    redisContext *c;      /* NULL when not connected */
    bool ever_connected;  /* a later connect counts as a reconnect */
    uint64_t next_try_ns; /* no connect attempt before (backoff) */
    uint32_t backoff_ms;  /* current backoff, 0 after a success */
};

struct tw_rr_router {
    struct tw_rr_node *nodes; /* seeds first, then nodes learnt from the slot map */
    size_t nnodes, cap;
    bool cluster;             /* false: every slot lives on nodes[0] */
    bool map_stale;           /* refresh CLUSTER SLOTS before the next command */
    uint16_t *slot_node;      /* cluster: TW_RR_SLOTS node indexes (UINT16_MAX: unknown) */
    uint32_t connect_timeout_ms, command_timeout_ms;
    uint32_t retry_ms;        /* set by the owner: redirects, reconnects and backoff of
                               * one command end after this, at once when the node's
                               * connect backoff ends later (0: command_timeout_ms; a
                               * reply still waits up to command_timeout_ms) */
    const char *const *shas;  /* script SHA1s (hex), owned by the client */
    const char *const *bodies; /* script texts */
    uint64_t reconnects;      /* connections re-established after a failure */
};

/* Copy the seeds; connect to the first that answers and learn whether it is
 * a cluster (and its slot map). TW_EIO when none answers, TW_EINVAL for a bad
 * "host:port", TW_ENOMEM, TW_EPROTO. On failure the router is empty (free it
 * anyway: tw_rr_router_free is safe). */
int tw_rr_router_init(struct tw_rr_router *rt, const char *const *seeds, size_t nseeds,
                      uint32_t connect_timeout_ms, uint32_t command_timeout_ms);
void tw_rr_router_free(struct tw_rr_router *rt);
/* Parse "host:port" (host may be a name or an IPv4/IPv6 literal in [ ]). */
int tw_rr_parse_addr(const char *s, char *host, size_t hostcap, int *port);
/* Redis Cluster key slot (CRC16 of the hash tag or of the key, mod 16384). */
unsigned tw_rr_key_slot(const void *key, size_t len);

/* Whether a connection to some node is open (a failed one is closed). */
bool tw_rr_any_connected(const struct tw_rr_router *rt);
/* Index of the node serving `slot` by the current map (0 standalone), or -1. */
int tw_rr_node_of(const struct tw_rr_router *rt, int slot);
/* Run one command routed by `slot` (any node when slot < 0), following
 * MOVED/ASK, retrying connection errors with backoff until the command
 * timeout (retry_ms when set). Returns 0 and *reply (an error reply is returned as a reply), or
 * TW_EIO, TW_ENOMEM. */
int tw_rr_command(struct tw_rr_router *rt, int slot, int argc, const char **argv,
                  const size_t *lens, redisReply **reply);
/* EVALSHA script `id` with EVAL fallback on NOSCRIPT. argv holds the keys then
 * the arguments (nkeys + nargs entries). Error replies other than NOSCRIPT:
 * TW_EPROTO (the reply is freed). */
int tw_rr_eval(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
               const char **argv, const size_t *lens, redisReply **reply);
/* Pipelined EVALSHA of `n` calls of script `id` on one slot each: build(i)
 * gives call i's slot, keys and arguments (and their count, *nargs); the
 * calls are sent in chunks; every reply is checked with `check` (0: fine).
 * Redirected or NOSCRIPT calls are redone one by one with tw_rr_eval (for
 * TW_RR_SET with the later calls of their slot, so that a slot's SET calls
 * take effect in order). A node whose connection fails leaves its calls
 * unchecked; the other nodes' replies are still checked (and nothing is
 * redone): TW_EIO. Returns 0, or the first error. */
typedef int tw_rr_build_fn(void *ctx, size_t i, int *slot, const char **argv, size_t *lens,
                           int *nargs);
typedef int tw_rr_check_fn(void *ctx, size_t i, const redisReply *reply);
int tw_rr_eval_many(struct tw_rr_router *rt, unsigned id, size_t n, int nkeys,
                    tw_rr_build_fn *build, void *ctx, tw_rr_check_fn *check);
/* Most tasks in one SET script call (set_many groups them by partition):
 * 96 takes a partition's share of a 1000-item set_many on 16 partitions
 * (62 on average, rarely over 90) in one call, where 64 cut ~40% of them
 * in two; a call of 96 tasks holds Redis ~0.9 ms. */
#define TW_RR_SET_BATCH 96
/* Most arguments of one script call the router builds: EVALSHA sha n, 5 keys,
 * channel, count and a batched SET's 3 per task. Every caller's calls fit. */
#define TW_RR_ARGV_MAX (10 + 3 * TW_RR_SET_BATCH)

/* ---- scripts --------------------------------------------------------------- */
enum {
    TW_RR_SET,
    TW_RR_MOVE,
    TW_RR_REMOVE,
    TW_RR_CLAIM,
    TW_RR_START, /* with the acknowledgements (redis.c: "ACKs ride on STARTs") */
    TW_RR_FAIL,
    TW_RR_RELEASE,
    TW_RR_NSCRIPTS
};
extern const char *const tw_rr_scripts[TW_RR_NSCRIPTS];
/* Keys every script but START takes, in this order (KEYS[1..5]). */
#define TW_RR_NKEYS 5
/* Width of a due-time bucket in ms (the schema in redis.c). Every client of a
 * queue must use the same width: it names the bucket a task sits in. */
#define TW_RR_BUCKET_MS 500
#define TW_RR_STR_(x) #x
#define TW_RR_STR(x) TW_RR_STR_(x)
#define TW_RR_BUCKET_MS_STR TW_RR_STR(TW_RR_BUCKET_MS) /* "500", for the scripts */

/* ---- a claimed task -------------------------------------------------------- */
struct tw_rr_item {
    struct tw_rr_item *next; /* in the ready FIFO */
    uint32_t part;
    uint64_t token;
    uint64_t attempt;      /* starts counted when it was claimed (its start makes it + 1) */
    uint64_t due_ms;       /* Redis clock */
    uint64_t due_local_ns; /* when the local clock may run it (conservative) */
    uint64_t fired_ns;     /* local clock when it entered the ready FIFO (stage figures) */
    /* Set by a granted START (redis.c rr_run), read by whichever executor
     * runs it from the armed queue (local.c): */
    uint64_t run_ns;       /* local clock at which it may run (never early) */
    uint64_t srv_us;       /* the server's clock in the START reply */
    uint64_t reply_ns;     /* local clock when that reply was read */
    uint64_t started;      /* the attempt the START recorded */
#ifdef TW_RR_TRACE
    uint64_t take_ns, sent_ns; /* its START round: taken from the FIFO, sent */
    uint32_t batch;            /* items of that round */
#endif
    size_t key_len, payload_len;
    char *payload;         /* points into data, after the key */
    char data[];           /* key bytes, then payload bytes */
};

/* ---- the local window: wheel, tick thread, executors ----------------------- */
struct tw_rr_local;
#define TW_RR_RUN_BATCH 32
typedef void tw_rr_run_fn(void *ctx, struct tw_rr_item **items, size_t n, unsigned thread);
/* Runs one armed item (tw_rr_local_arm) on executor `thread` once its run_ns
 * has come; takes ownership of it. */
typedef void tw_rr_exec_fn(void *ctx, struct tw_rr_item *it, unsigned thread);
/* Start the tick thread and `threads` executor threads; run(ctx, items, n, i)
 * runs a batch of 1..TW_RR_RUN_BATCH items, in FIFO order, on executor i
 * once their local due time has come, or with ahead_ms > 0 once it is
 * ahead_ms / 2 .. ahead_ms away (the items of each ahead_ms / 2 span
 * together; with ticks longer than ahead_ms / 2, at the first tick at
 * most ahead_ms away; see local.c). */
int tw_rr_local_new(struct tw_rr_local **out, uint32_t tick_ms, uint32_t ahead_ms,
                    uint32_t rt_prio, uint32_t threads, tw_rr_run_fn *run,
                    tw_rr_exec_fn *exec, void *ctx);
/* rt_prio (redis.h's rt_priority, 0: none): the tick thread asks for
 * SCHED_FIFO at this priority when it starts, and each executor while it
 * waits for an armed item's run time. Threads refused it so far. */
uint64_t tw_rr_local_rt_refused(struct tw_rr_local *l);
/* From run (an executor thread): a started item that may run at it->run_ns
 * (in the future) joins the worker's armed queue, ordered by run_ns (ties in
 * the order of the calls); the first idle executor to wake at that time runs
 * it with exec. Accepted while stopping too: stop runs every armed item
 * before it returns. */
void tw_rr_local_arm(struct tw_rr_local *l, struct tw_rr_item *it);
/* Hold an item until item->due_local_ns (at once when already past: FIFO in
 * the order of the calls). TW_ECLOSED after stop, TW_ENOMEM. */
int tw_rr_local_add(struct tw_rr_local *l, struct tw_rr_item *it);
/* Stop: no more START rounds begin; running ones finish and every armed
 * item runs at its time; join every thread; return every item not started
 * (wheel and FIFO) as a list. */
struct tw_rr_item *tw_rr_local_stop(struct tw_rr_local *l);
void tw_rr_local_free(struct tw_rr_local *l);
/* Items held (waiting in the wheel, FIFO or armed queue, or running). */
size_t tw_rr_local_held(struct tw_rr_local *l);
/* Most items one executor takes at once (1..TW_RR_RUN_BATCH; starts at 1). */
void tw_rr_local_batch(struct tw_rr_local *l, size_t max);
/* Items due and waiting for an executor, armed, or running. */
size_t tw_rr_local_ready(struct tw_rr_local *l);

/* Start one of the layer's own threads with SIGPIPE blocked (local.c). */
int tw_rr_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

#endif /* TWHEEL_REDIS_INTERNAL_H */
