/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: what its source files share (not installed).
 *
 * A task's path through the files runs one way: claim.c claims it and hands
 * it to the local queue (local.c); an executor (execute.c) takes it from
 * there, STARTs it (start.c) and runs it; its acknowledgement waits in
 * ack.c until a later START carries it, or the acknowledger sends it. No
 * file calls back into one before it on that path.
 *
 * redis.c      - the layer's design comment (schema of keys, calls and
 *                costs, threads, locks, faults) and the lifetime: new, stop
 *                (the release of held leases), free.
 * config.c     - the configuration: defaults, the checks of its values and
 *                servers entries, the copy of the servers kept.
 * server_checks.c - the servers' configuration: eviction policy, the
 *                queue's stored partition count.
 * client.c     - the producer calls: set, move, remove, set_many.
 * keys.c       - a key's partition, the names of a partition's keys.
 * offset.c     - the Redis clock offset: samples, local due times.
 * claim.c      - the claim thread: claim rounds, pacing, the frontier, the
 *                catch-up after a reconnect.
 * subscriber.c - the subscriber thread: notifications flag partitions.
 * local.c      - the local queue: the claimed tasks a worker holds, on a core
 *                wheel until they may be started, then ready, and once
 *                started armed until their run time; its tick thread and the
 *                executors' wait.
 * execute.c    - the executor threads: take from the local queue, START,
 *                hand each task on, run it, FAIL.
 * start.c      - a START round: one round trip of START script calls that
 *                start a batch and carry pending acknowledgements.
 * ack.c        - the delayed acknowledgements: the pending lists, what a
 *                round's answers settle, the acknowledger thread.
 * stats.c      - the figures: lateness histogram, tw_redis_stats, trace.
 * silent.c     - per-master isolation: the masters that do not answer (a
 *                table every thread reads), the claim thread's TIME round,
 *                its calls awaited without holding the other masters, probes.
 * router.c     - connections to one server or a Redis Cluster: CRC16 slots,
 *                CLUSTER SLOTS map, MOVED/ASK, reconnect with backoff, EVALSHA
 *                with EVAL fallback. One router per thread that uses it (or
 *                under the caller's mutex): a router is not thread-safe.
 * pipeline.c   - the router's calls that do not wait for each reply: send
 *                now and read later, and pipelined batches of script calls.
 * url.c        - the connection syntax: a server entry (plain or URL) parsed
 *                (url.h: it builds without hiredis).
 * connect.c    - opening one connection: TCP or unix socket, AUTH, SELECT.
 * transport.c  - a connection's own I/O (struct tw_rr_link): socket, TLS
 *                (OpenSSL), hiredis' reader and formatter; the TLS context.
 * acl.c        - the permission check of tw_redis_new: every command, key
 *                and channel the layer uses, asked of the server's ACL.
 * errors.c     - the server's words: error replies to codes, each thread's
 *                last error, the worker threads' last error.
 * sentinel.c   - Sentinel: the master asked of the Sentinels, ROLE confirmed
 *                on every connection, asked again after a failure.
 * wait.c       - the replica wait (WAIT) after the producer's writes.
 * scripts.c    - the Lua scripts (see the schema in redis.c).
 * dead.c       - the retry limit and the dead letters: set_opts, execute's
 *                error text, list, get, requeue, purge, count.
 * events.c     - the on_event hook: a bounded queue and the events thread.
 * schedule.c   - recurring schedules: upsert, remove, list, and a worker's
 *                schedule thread that makes occurrences tasks.
 * cron.c       - 5-field cron expressions in universal time (cron.h: no hiredis).
 * inspect.c    - operating a queue: get, list, counts, pause and resume,
 *                drop, and the stored partition count a client adopts.
 * metrics.c    - the Prometheus text of the worker's and the queue's
 *                figures: a table, a line per metric.
 */
#ifndef TWHEEL_REDIS_INTERNAL_H
#define TWHEEL_REDIS_INTERNAL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "twheel/redis.h"
#include "twheel/wheel.h"

#include "common/time.h" /* monotonic reads, condvars, tick rounding */
#include "redis/url.h"   /* the connection syntax */

#define TW_RR_SLOTS 16384u

/* ---- time ------------------------------------------------------------------ */
uint64_t tw_rr_mono_ns(void);
void tw_rr_sleep_ms(uint32_t ms);

/* ---- a connection's transport (transport.c) ------------------------------------
 * One connection: a socket (TCP, or a unix socket), TLS over it when the
 * instance's TLS context is given (never on a unix socket), hiredis' reader
 * for the replies and its formatter for the commands, an output buffer.
 * Blocking calls wait up to the command timeout (wait_ms) per read or write.
 * One thread at a time. On a failure err and errstr say what (the first
 * failure stays; the link is dead then: free it). */
struct tw_rr_tls; /* the instance's TLS context (an OpenSSL SSL_CTX and the names) */
struct tw_rr_link {
    int fd;
    bool nb;               /* the socket is non-blocking: waits poll (TLS, a probe) */
    unsigned char state;   /* connecting, handshaking, ready (transport.c) */
    int err;               /* 0, or what failed: TW_EIO, TW_ENOMEM, TW_ETLS, TW_EPROTO */
    uint32_t wait_ms;      /* a blocking read or write waits this long */
    void *ssl;             /* SSL *, NULL: plain */
    redisReader *reader;
    char *ob;              /* commands to write: ob[opos .. olen) */
    size_t opos, olen, ocap;
    char errstr[128];      /* what failed (no address: callers add it) */
};
/* Bytes appended and not written yet. */
static inline size_t tw_rr_link_unsent(const struct tw_rr_link *l)
{
    return l->olen - l->opos;
}
/* The TLS settings of a configuration (redis.c copies them from
 * tw_redis_config; the strings need only last through tw_rr_tls_new). */
struct tw_rr_tls_config {
    const char *ca_file, *ca_dir;      /* NULL both: the system's store */
    const char *cert_file, *key_file;  /* client certificate and key (both or neither) */
    const char *server_name;           /* NULL: each server's host */
    bool skip_hostname_check;
};
/* A TLS context for every connection of an instance: 0 and *out, or
 * TW_ETLS (no TLS in this build, a file OpenSSL refused: err says which and
 * why), TW_EINVAL (a certificate without its key), TW_ENOMEM. Thread-safe
 * once made; tw_rr_tls_free(NULL) is fine. */
int tw_rr_tls_new(const struct tw_rr_tls_config *tc, struct tw_rr_tls **out, char *err,
                  size_t errlen);
void tw_rr_tls_free(struct tw_rr_tls *t);
/* Connect to host:port (a unix socket when port is 0: host is its path)
 * within connect_timeout_ms, then the TLS handshake when tls is given (port
 * > 0). *out is always set (NULL only for TW_ENOMEM): on failure its err and
 * errstr say what (TW_EIO, TW_ETLS: verification or handshake refused,
 * TW_ENOMEM); free it. */
int tw_rr_link_open(const struct tw_rr_tls *tls, const char *host, int port,
                    uint32_t connect_timeout_ms, uint32_t command_timeout_ms,
                    struct tw_rr_link **out);
/* The same without waiting (the silent probe): the connect is started, and
 * tw_rr_link_step drives it, the handshake, the writes and the reads. */
int tw_rr_link_start(const struct tw_rr_tls *tls, const char *host, int port,
                     uint32_t command_timeout_ms, struct tw_rr_link **out);
/* One command formatted into the output buffer (redisFormatSdsCommandArgv;
 * lens may be NULL for NUL-terminated strings). 0, or TW_ENOMEM (the link is
 * dead then: its err says so). */
int tw_rr_link_append(struct tw_rr_link *l, int argc, const char **argv, const size_t *lens);
/* Write everything buffered. 0 or the link's error. */
int tw_rr_link_flush(struct tw_rr_link *l);
/* Read what has come, without waiting (after poll said the socket is
 * readable; with TLS it may be part of a record: nothing). 0 or the error. */
int tw_rr_link_read(struct tw_rr_link *l);
/* The next reply the reader holds, without I/O: 0 and *reply (NULL: none
 * yet), or the link's error (TW_EPROTO: a reply that cannot be parsed). */
int tw_rr_link_next(struct tw_rr_link *l, void **reply);
/* The next reply, waiting (writing what is buffered first): 0 and *reply,
 * or the link's error (a read timeout is TW_EIO). */
int tw_rr_link_get(struct tw_rr_link *l, void **reply);
/* One command and its reply (append, get). */
int tw_rr_link_command(struct tw_rr_link *l, int argc, const char **argv, const size_t *lens,
                       redisReply **reply);
/* Whether the server closed an idle connection (a non-blocking peek). */
bool tw_rr_link_closed(struct tw_rr_link *l);
/* The probe's step (tw_rr_link_start): without waiting, finish the connect
 * and the handshake, write, read; 0 and *reply (NULL: none yet) or the
 * link's error. */
int tw_rr_link_step(struct tw_rr_link *l, void **reply);
/* Close and free (NULL is fine). */
void tw_rr_link_free(struct tw_rr_link *l);

/* ---- connections (connect.c) ------------------------------------------------- */
/* How every connection of an instance is opened: the credentials, the
 * database and the TLS context of the configuration (redis.c owns them). */
struct tw_rr_conn {
    char *user; /* ACL user; NULL: none */
    char *pass; /* password; NULL: none (no AUTH unless a user is named) */
    int db;     /* SELECT after AUTH when > 0 */
    struct tw_rr_tls *tls; /* NULL: plain */
};
#define TW_RR_ERR_MAX 256 /* an error text, NUL included */
/* Open one connection to host:port (a unix socket when port is 0: host is
 * its path), TLS as cn says, with the command timeout set, then AUTH and
 * SELECT as cn says (cn may be NULL: plain, neither); a TLS connection
 * without either answers a PING first, so that a server refusing the
 * client's certificate (TLS 1.3 tells after the handshake) fails here. 0 and
 * *out; else *out NULL and err (errlen bytes) says what failed, naming the
 * server, never a credential: TW_EIO (unreachable or lost), TW_ETLS (TLS
 * refused: verification, the client certificate), TW_EAUTH (AUTH refused,
 * or SELECT refused for a permission), TW_EPROTO (SELECT refused otherwise:
 * the server's words), TW_ENOMEM. The one entry point for a connection to
 * any server (Sentinels too). */
int tw_rr_open(const struct tw_rr_conn *cn, const char *host, int port,
               uint32_t connect_timeout_ms, uint32_t command_timeout_ms, struct tw_rr_link **out,
               char *err, size_t errlen);
/* A server as error texts name it: "host:port", "[v6]:port" or the socket
 * path (port 0). */
void tw_rr_where(const char *host, int port, char *buf, size_t len);

/* ---- router ---------------------------------------------------------------- */
struct tw_rr_node {
    char host[256];
    int port;
    struct tw_rr_link *c; /* NULL when not connected */
    bool ever_connected;  /* a later connect counts as a reconnect */
    uint64_t next_try_ns; /* no connect attempt before (backoff) */
    uint32_t backoff_ms;  /* current backoff, 0 after a success */
    int check;            /* the owner's on_connect answer for the current connection */
    uint32_t owed;        /* replies to tw_rr_send's commands not read yet: no other
                           * command may use the connection meanwhile */
};

struct tw_rr_router {
    struct tw_rr_node *nodes; /* seeds first, then nodes learnt from the slot map */
    size_t nnodes, cap;
    bool cluster;             /* false: every slot lives on nodes[0] */
    bool map_stale;           /* refresh CLUSTER SLOTS before the next command */
    bool oom;                 /* the last command failed for want of memory here (its
                               * code TW_EUNKNOWN when a try may have been applied) */
    uint16_t *slot_node;      /* cluster: TW_RR_SLOTS node indexes (UINT16_MAX: unknown) */
    uint32_t connect_timeout_ms, command_timeout_ms;
    uint32_t retry_ms;        /* set by the owner: redirects, reconnects and backoff of
                               * one command end after this, at once when the node's
                               * connect backoff ends later (0: command_timeout_ms; a
                               * reply still waits up to command_timeout_ms) */
    const char *const *shas;  /* script SHA1s (hex), owned by the client */
    const char *const *bodies; /* script texts */
    uint64_t reconnects;      /* connections re-established after a failure */
    /* Set by the owner: run on each new connection before its first command;
     * TW_EIO fails the connection, another negative code refuses the command
     * with it (the connection closed: the next command to that node connects
     * and is checked again), 0 or more is kept in the node's check. */
    int (*on_connect)(void *ctx, struct tw_rr_link *c);
    void *on_connect_ctx;
    uint64_t oom_refusals; /* script calls refused at maxmemory (TW_EOOM) */
    const struct tw_rr_conn *conn; /* credentials and database of every connection */
    char err[TW_RR_ERR_MAX];  /* what ended the last command badly: the server's error
                               * reply, or the connection's failure ("" if nothing) */
    void (*sink)(void *ctx, int code, const char *text); /* set by the owner: told
                               * of each error reply that ends a call, and each AUTH refused */
    void *sink_ctx;
    /* Set by the owner (per-master isolation, silent.c): in a cluster,
     * tw_rr_eval_many reads every node's replies as they come and waits at
     * most reply_ms for a node's (0: in order, each read up to
     * command_timeout_ms); a node that owes replies then is silent: its
     * connection is closed, its calls left unanswered, and on_silent told. */
    uint32_t reply_ms;
    void (*on_silent)(void *arg, const struct tw_rr_router *rt, size_t node);
    void *silent_arg;
    /* Set by the owner (sentinel.c): the master Sentinels name. Each
     * connection goes to its current address and must answer ROLE master;
     * a failed connection, a replica, or a READONLY reply has the
     * Sentinels asked again. NULL: the seeds as given. */
    struct tw_rr_sentinel *sentinel;
    /* Set by the owner per call (wait.c): "WAIT wait_replicas wait_ms" goes
     * in the same write as each command tw_rr_command sends, and its answer
     * (replicas that confirmed; -1: none read) lands in waited. */
    int wait_replicas;
    uint32_t wait_ms;
    long long waited;
    uint64_t opened; /* connections opened, ever (wait.c: the same connection carried a call) */
};

/* Copy the seeds ("host:port", or a unix socket's "/path"); connect to the
 * first that answers (each connection opened as conn says: it must outlive
 * the router) and learn whether it is a cluster (and its slot map). TW_EIO
 * when none answers, TW_EAUTH when one refused the credentials or a
 * permission (and none answered), TW_EINVAL for a bad seed, TW_ENOMEM,
 * TW_EPROTO. On failure the router is empty but for err, which says why
 * (free it anyway: tw_rr_router_free is safe). */
int tw_rr_router_init(struct tw_rr_router *rt, const char *const *seeds, size_t nseeds,
                      const struct tw_rr_conn *conn, uint32_t connect_timeout_ms,
                      uint32_t command_timeout_ms);
void tw_rr_router_free(struct tw_rr_router *rt);
/* Parse "host:port" (host may be a name or an IPv4/IPv6 literal in [ ]), or
 * a unix socket's "/path" (port 0). */
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
 * TW_EIO (no attempt can have been applied), TW_EUNKNOWN (one may have: its
 * reply was lost), TW_ENOMEM, or the node's refusal (on_connect). */
int tw_rr_command(struct tw_rr_router *rt, int slot, int argc, const char **argv,
                  const size_t *lens, redisReply **reply);
/* The code of an error reply: TW_EOOM for a write refused at maxmemory
 * (counted in rt->oom_refusals), else TW_EPROTO. */
int tw_rr_reply_error(struct tw_rr_router *rt, const redisReply *r);
/* A command sent without waiting for its reply, and that reply read later
 * (the claim thread's calls, silent.c): tw_rr_send connects the node
 * serving `slot` when needed (no retry: TW_EIO while it backs off), writes
 * the command and returns the node's index; tw_rr_recv returns that node's
 * next reply (0 and *reply, error replies included), or TW_RR_PENDING when
 * none came by until_ns (the call stays outstanding: a node answers its
 * commands in order), or TW_EIO (the connection failed and was closed),
 * TW_ENOMEM. tw_rr_drop closes a node's connection (what it owes is lost). */
#define TW_RR_PENDING 1
int tw_rr_send(struct tw_rr_router *rt, int slot, int argc, const char **argv, const size_t *lens);
int tw_rr_eval_send(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
                    const char **argv, const size_t *lens);
int tw_rr_recv(struct tw_rr_router *rt, size_t node, uint64_t until_ns, redisReply **reply);
void tw_rr_drop(struct tw_rr_router *rt, size_t node);
/* EVALSHA script `id` with EVAL fallback on NOSCRIPT. argv holds the keys then
 * the arguments (nkeys + nargs entries). Error replies other than NOSCRIPT:
 * as tw_rr_reply_error (the reply is freed), or TW_EUNKNOWN after a lost
 * attempt. */
int tw_rr_eval(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
               const char **argv, const size_t *lens, redisReply **reply);
/* Pipelined EVALSHA of `n` calls of script `id` on one slot each: build(i)
 * gives call i's slot, keys and arguments (and their count, *nargs); the
 * calls are sent in chunks; every reply is checked with `check` (0: fine).
 * Redirected or NOSCRIPT calls are redone one by one with tw_rr_eval (for
 * TW_RR_SET with the later calls of their slot, so that a slot's SET calls
 * take effect in order). A node whose connection fails leaves its calls
 * unanswered; the other nodes' replies are still checked, and nothing is
 * redone (but SET's unanswered calls, while the chunk's command timeout
 * lasts). A call written whole whose reply was lost may have been applied:
 * check(i, NULL) says so (its return is ignored), before any reply a redo
 * of it brings. Returns 0, or the first error: TW_EIO only when no call
 * was applied or lost (else TW_EUNKNOWN). */
typedef int tw_rr_build_fn(void *ctx, size_t i, int *slot, const char **argv, size_t *lens,
                           int *nargs);
typedef int tw_rr_check_fn(void *ctx, size_t i, const redisReply *reply); /* reply NULL: lost */
int tw_rr_eval_many(struct tw_rr_router *rt, unsigned id, size_t n, int nkeys,
                    tw_rr_build_fn *build, void *ctx, tw_rr_check_fn *check);
/* router.c's pieces that pipeline.c (tw_rr_send, tw_rr_recv, tw_rr_eval_many)
 * shares: connect node i if it is not (0, TW_EIO while it backs off, the
 * node's refusal); tell the owner's sink that node i's connection was lost
 * (why: NULL for the connection's own error); with Sentinel, close node i's
 * connection when it went to a master the Sentinels no longer name (true
 * then); close node i's connection when the server closed it while idle;
 * whether an error reply is one to retry after a backoff (LOADING,
 * TRYAGAIN, CLUSTERDOWN, MASTERDOWN, BUSY); EVALSHA's first three
 * arguments, and all of them (their count, or TW_EINVAL when over
 * TW_RR_ARGV_MAX; nk holds the key count); tw_rr_eval whose *lost tells
 * that an attempt was written whole and its reply lost. */
int tw_rr_connect_node(struct tw_rr_router *rt, size_t i);
void tw_rr_lost(struct tw_rr_router *rt, size_t node, const char *why);
bool tw_rr_sentinel_moved(struct tw_rr_router *rt, size_t node);
void tw_rr_check_idle(struct tw_rr_router *rt, size_t i);
bool tw_rr_is_retry_error(const redisReply *r);
void tw_rr_evalsha_head(const struct tw_rr_router *rt, unsigned id, const char *nk,
                        const char **av, size_t *al);
int tw_rr_eval_argv(const struct tw_rr_router *rt, unsigned id, int nkeys, int nargs,
                    const char **argv, const size_t *lens, const char **av, size_t *al,
                    char nk[16]);
int tw_rr_eval_lost(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
                    const char **argv, const size_t *lens, bool *lost, redisReply **reply);
/* Most tasks in one SET script call (set_many groups them by partition):
 * enough for a partition's share of a 1000-item set_many on 16 partitions
 * (62 on average) to go in one call, and few enough that one call holds
 * single-threaded Redis for well under a millisecond. */
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
    TW_RR_START, /* and the acknowledgements (ack.c) */
    TW_RR_FAIL,
    TW_RR_RELEASE,
    TW_RR_SETX,        /* dead.c: set with options (a per-task max_attempts) */
    TW_RR_REQUEUE,     /* dead.c: a dead letter back into the queue */
    TW_RR_REQUEUE_ALL, /* dead.c: one HSCAN step of them */
    TW_RR_SCHED_SET,   /* schedule.c: upsert */
    TW_RR_SCHED_DEL,   /* schedule.c: remove */
    TW_RR_SCHED_DUE,   /* schedule.c: the schedules coming due */
    TW_RR_SCHED_FIRE,  /* schedule.c: occurrences made tasks, next moved on */
    TW_RR_NSCRIPTS
};
extern const char *const tw_rr_scripts[TW_RR_NSCRIPTS];
/* Keys every script but START takes, in this order (KEYS[1..5]). */
#define TW_RR_NKEYS 5
#define TW_RR_CLAIM_NARGS 10 /* CLAIM's ARGV: window, n, lease, bytes, hold, max_attempts, \
                                share, taken, shares_only, zone_ms (claim.c) */
/* Width of a due-time bucket in ms (the schema in redis.c). Every client of a
 * queue must use the same width: it names the bucket a task sits in. */
#define TW_RR_BUCKET_MS 500
#define TW_RR_STR_(x) #x
#define TW_RR_STR(x) TW_RR_STR_(x)
#define TW_RR_BUCKET_MS_STR TW_RR_STR(TW_RR_BUCKET_MS) /* "500", for the scripts */
/* The first line of a script that reads or writes a partition's buckets
 * outside scripts.c (inspect.c, upgrade.c): EXISTS of two absent keys of
 * the slot errors (ASK or TRYAGAIN) only on a node that is migrating or
 * importing it, and the script then answers TRYAGAIN before it touches
 * anything (the router retries; redis.c, "Buckets in a cluster"). */
#define TW_RR_STABLE_LUA                                                                   \
    "if type(redis.pcall('EXISTS', KEYS[1] .. ':-', KEYS[1] .. ':+')) ~= 'number' then "   \
    "return redis.error_reply('TRYAGAIN twheel: the slot of ' .. KEYS[1] .. "               \
    "' is migrating') end\n"

/* ---- a claimed task -------------------------------------------------------- */
struct tw_rr_item {
    struct tw_rr_item *next; /* in the ready FIFO, the armed list or an ack list */
    /* Held for later, an item waits on the local wheel; once started, for its
     * run time. Never both (a started item is never held for later again), so
     * the wheel's node and the START's times share their bytes. */
    union {
        struct tw_node node;   /* on the local wheel (local.c's) */
        struct {               /* set by a granted START (execute.c): */
            uint64_t run_ns;   /* local clock at which it may run (never early) */
            uint64_t srv_us;   /* the server's clock in the START reply */
            uint64_t reply_ns; /* local clock when that reply was read */
            uint64_t round_ns; /* local clock when that START round was sent (fencing) */
        };
    };
    uint64_t token;
    uint64_t attempt;      /* starts counted when it was claimed (its start makes it + 1) */
    uint64_t due_ms;       /* Redis clock */
    uint64_t due_local_ns; /* when the local clock may run it (conservative); in an ack
                              list: when it was put there */
    uint64_t started;      /* the attempt its START recorded */
#ifdef TW_RR_TRACE
    uint64_t fired_ns;         /* local clock when it became ready (stage figures) */
    uint64_t take_ns, sent_ns; /* its START round: taken from the FIFO, sent */
    uint32_t batch;            /* items of that round */
#endif
    uint32_t part;
    uint32_t key_len;     /* <= TW_REDIS_KEY_MAX */
    uint32_t payload_len; /* <= TW_REDIS_PAYLOAD_MAX */
    uint16_t ack_lost;    /* an acknowledgement of it was written and its reply lost: it may
                             have deleted the task (ack.c) */
    uint16_t unanswered;  /* a START round of it went unanswered (Redis or its master away):
                             put back, its due_local_ns is the retry's (execute.c) until a
                             later round answers "not yet" */
    uint16_t tok_len;     /* ':' and the token's digits, after the key in data */
    char data[];          /* key bytes, ':' and the token's digits (with the key: its lease
                             member, scripts.c), then payload bytes and a NUL */
};

static inline char *tw_rr_payload(struct tw_rr_item *it)
{
    return it->data + it->key_len + it->tok_len;
}

/* Bytes of its lease member, the key and ':token' (at it->data). */
static inline size_t tw_rr_member_len(const struct tw_rr_item *it)
{
    return (size_t)it->key_len + it->tok_len;
}

/* The token's digits, after the ':' of its lease member, as FAIL and
 * RELEASE take them (tok_len counts the ':' and at least one digit). */
static inline const char *tw_rr_token_digits(const struct tw_rr_item *it, size_t *len)
{
    *len = (size_t)it->tok_len - 1u;
    return it->data + it->key_len + 1;
}

/* ---- the local queue (local.c) ------------------------------------------------
 * Every task a worker holds, from its claim until an executor takes it to
 * run: on the wheel (held for later), ready (the FIFO), or started and armed
 * until its run time. Thread-safe (one mutex). */
struct tw_rr_local;
#define TW_RR_RUN_BATCH 32
/* An executor's wait for rt_priority (local.c fills it; zeroed at first). */
struct tw_rr_waiter {
    int state;             /* 0 not tried, 1 granted, -1 refused */
    int pol;               /* the thread's own policy and parameters, */
    struct sched_param sp; /* restored after each wait */
};
/* Start the tick thread. `threads` executors take from the queue: ahead_ms
 * > 0 hands each ready item over once it is ahead_ms / 2 .. ahead_ms away
 * (the items of each ahead_ms / 2 span together; with ticks longer than
 * ahead_ms / 2, at the first tick at most ahead_ms away), else once its
 * local due time has come; rt_prio (redis.h's rt_priority, 0: none): the
 * tick thread asks for SCHED_FIFO at this priority when it starts, and each
 * executor while it waits for an armed item's run time. TW_ENOMEM, TW_ESYS. */
int tw_rr_local_new(struct tw_rr_local **out, uint32_t tick_ms, uint32_t ahead_ms, uint32_t rt_prio,
                    uint32_t threads);
/* Hold an item until it may be started (due_local_ns, or ahead as above;
 * at once when that is past: the FIFO, after what the wheel holds for the
 * ticks that have come, then in the order of the calls). Accepted while
 * stopping too (tw_rr_local_drain hands it back). */
void tw_rr_local_add(struct tw_rr_local *l, struct tw_rr_item *it);
/* The instant of the queue's tick `tick`, on tw_rr_mono_ns's clock. */
uint64_t tw_rr_local_tick_ns(const struct tw_rr_local *l, uint64_t tick);
/* An executor's next work (blocks): first settles the `done` items of its
 * previous take, then returns 1 armed item whose run time has come
 * (*started true: run it), or 1..max ready items in FIFO order (*started
 * false: START them), or 0 once stopping with nothing armed left (the
 * executor exits). The caller owns what it takes; `w` is the thread's own. */
size_t tw_rr_local_take(struct tw_rr_local *l, struct tw_rr_waiter *w, size_t done,
                        struct tw_rr_item **v, bool *started);
/* A started item that may run at it->run_ns (in the future) joins the armed
 * list, ordered by run_ns (ties in the order of the calls); the first idle
 * executor to wake at that time takes it. Accepted while stopping too:
 * executors exit only once the armed list is empty. */
void tw_rr_local_arm(struct tw_rr_local *l, struct tw_rr_item *it);
/* Stop: no more ready items are handed out (armed ones still are, at their
 * time); wake every executor, join the tick thread. */
void tw_rr_local_close(struct tw_rr_local *l);
/* Once every executor has exited: every item left (ready, then held for
 * later in due order) as a list, taken out of the queue. */
struct tw_rr_item *tw_rr_local_drain(struct tw_rr_local *l);
/* Close, drain and free the items left, free the queue. */
void tw_rr_local_free(struct tw_rr_local *l);
/* Items held (on the wheel, ready, armed, or taken and not settled). */
size_t tw_rr_local_held(struct tw_rr_local *l);
/* Items ready, armed, or taken and not settled. */
size_t tw_rr_local_ready(struct tw_rr_local *l);
/* Items armed: started, waiting for their run time. */
size_t tw_rr_local_armed(struct tw_rr_local *l);
/* Most ready items one take hands out (1..TW_RR_RUN_BATCH; starts at 1). */
void tw_rr_local_batch(struct tw_rr_local *l, size_t max);
/* Threads refused rt_prio so far. */
uint64_t tw_rr_local_rt_refused(struct tw_rr_local *l);
/* An armed item's run time comes by `by_ns` and no executor is idle to run
 * it: a START round retried while Redis is away should give way. */
bool tw_rr_local_armed_waits(struct tw_rr_local *l, uint64_t by_ns);

/* ---- the layer's state: struct tw_redis and what its files share ---------- */
#define TW_RR_QUEUE_MAX 64      /* queue name bytes */
#define TW_RR_KEYBUF 96         /* "{queue:p}:leases" fits */
#define TW_RR_RETRY_MS 100      /* a start that failed for I/O is retried this much later */
#define TW_RR_HIST 512       /* lateness histogram buckets */
#define TW_RR_SAMPLE_NODES 64 /* nodes a claim round samples the clock of */
/* A span of w measured on the local clock may be w / (1 + TW_REDIS_CLOCK_RATE_PPM
 * / 1e6) .. w * (1 + ...) on the server's (redis.h: clocks): the margins. */
static inline uint64_t tw_rr_rate_up(uint64_t w)
{
    return w + w / (1000000u / TW_REDIS_CLOCK_RATE_PPM) + 1;
}
static inline uint64_t tw_rr_rate_down(uint64_t w)
{
    uint64_t d = w / (1000000u / TW_REDIS_CLOCK_RATE_PPM) + 1;
    return w > d ? w - d : 0;
}

/* Per-master isolation (silent.c). A master that accepts connections but
 * does not answer (stopped, hung, cut off with its socket open) is silent
 * once a worker thread has waited cfg.silent_ms for it: every thread of
 * the worker then leaves its partitions alone until the claim thread's
 * probe, or a late reply, shows it answers again. TW_RR_SILENT_MS is the
 * default of silent_ms. */
#define TW_RR_SILENT_MS 30
#define TW_RR_EAWAIT (-1000) /* a claim left awaiting its reply (claim.c, silent.c) */

struct tw_rr_silent_node { /* an entry of the worker's table of silent masters */
    char host[256];
    int port;
    bool used;
};

struct tw_rr_await {    /* the claim thread's outstanding call on one node */
    unsigned char kind; /* 0 none, TW_RR_AWAIT_TIME, TW_RR_AWAIT_CLAIM */
    uint32_t part;      /* a claim's partition and batch */
    unsigned batch;
    uint64_t sent_ns;
};
enum { TW_RR_AWAIT_TIME = 1, TW_RR_AWAIT_CLAIM = 2 };

/* Claimed items not yet handed to the local queue (claim thread only; stop
 * releases what is left once the claim thread has exited). */
struct tw_rr_batch {
    struct tw_rr_item **v;
    size_t n, cap;
};

/* An executor's (or the acknowledger's) START round: what start.c groups,
 * sends and reads back (start.c: "A START round"). */
#define TW_RR_GROUPS_MAX 48 /* partition groups in one round */
#define TW_RR_ACK_MAX 128   /* acknowledgements in one round (the acknowledger's) */

struct tw_rr_grp {
    uint32_t part;
    size_t s0, ns; /* its starts: order[s0 .. s0 + ns) */
    size_t a0, na; /* its acknowledgements: ack[a0 .. a0 + na) */
};

struct tw_rr_round {
    struct tw_redis *r;
    bool starting;                    /* v holds items to start (else: to acknowledge) */
    struct tw_rr_item **v;
    size_t n;
    size_t ngroups, ncalls;
    struct tw_rr_grp g[TW_RR_GROUPS_MAX];
    size_t call[TW_RR_GROUPS_MAX + 1];   /* first group of each call */
    size_t order[TW_RR_RUN_BATCH];    /* indexes into v, grouped by partition */
    long long st[TW_RR_RUN_BATCH];    /* 1/0/-1, -2 no answer */
    long long arg[TW_RR_RUN_BATCH];   /* us until due (not yet) */
    uint64_t now[TW_RR_RUN_BATCH];    /* the server's clock, us */
    uint64_t sent_ns, reply_ns[TW_RR_RUN_BATCH]; /* local clock when the reply was read */
    struct tw_rr_item *ack[TW_RR_ACK_MAX]; /* grouped by partition */
    size_t nack;
    signed char ack_st[TW_RR_ACK_MAX];   /* 1 deleted, 0 stale, 2 absent, -2 no answer */
    bool cluster;                     /* one call per group, its keys declared */
    char kb[TW_RR_GROUPS_MAX][2][TW_RR_KEYBUF];
    size_t kl[TW_RR_GROUPS_MAX][2];
    char cnt[TW_RR_GROUPS_MAX][3][24]; /* nack, nstart, until (ms) */
    char due[TW_RR_RUN_BATCH][24];    /* a start's due time (ms, the claim's) */
    char lease[16], ahead[24];
};

/* The last error of one thread's calls (errors.c). */
#define TW_RR_ERR_THREADS 16 /* threads whose last error an instance keeps */
struct tw_rr_lasterr {
    pthread_t tid;
    uint64_t seq;  /* when it was written (the oldest is replaced first) */
    int code;      /* 0: the slot is free */
    char text[TW_RR_ERR_MAX];
};

/* What a worker took of one due bucket beyond its window (claim.c: Sharing). */
struct tw_rr_share_slot {
    uint64_t bucket;
    uint32_t taken;
};

struct tw_redis {
    /* configuration (copied) */
    struct tw_redis_config cfg;
    char **servers;
    char queue[TW_RR_QUEUE_MAX + 1];
    char sha[TW_RR_NSCRIPTS][41];
    const char *shas[TW_RR_NSCRIPTS];
    int *slots;                     /* slot of each partition */
    /* Per partition, the best lower bound of (server clock - local monotonic
     * clock) in us seen in this epoch and the previous one (INT64_MIN: none). */
    _Atomic int_fast64_t *off_cur, *off_prev;
    /* ... and the best upper bound likewise (INT64_MAX: none): only the
     * lateness figure uses it (offset.c), never a wait. */
    _Atomic int_fast64_t *off_hi_cur, *off_hi_prev;
    /* Not a cluster (set at new, before the worker's threads): one server's
     * clock is every partition's, so they all use partition 0's bounds
     * (tw_rr_clock_slot). */
    bool one_clock;

    /* client API: one router under api_mu */
    pthread_mutex_t api_mu;
    struct tw_rr_router api;
    atomic_bool closed;             /* stop has begun: calls give TW_ECLOSED */
    atomic_uint_fast64_t req_seq;   /* the next request id of move and remove (client.c),
                                       from a random start */

    /* worker */
    bool worker;
    pthread_mutex_t mu;             /* guards flags, nflagged, stop_claim */
    pthread_cond_t cv;              /* wakes the claim thread */
    pthread_cond_t sub_cv;          /* new waits here for the first subscription */
    bool subscribed;                /* the subscriber has subscribed once */
    unsigned char *flags;           /* partitions to claim now */
    size_t nflagged;
    bool stop_claim;
    uint32_t claim_start;           /* claim thread only: first partition of a round */
    struct tw_rr_batch carry;          /* claim thread only: claimed, waiting for the frontier */
    uint32_t *carry_n;              /* claim thread only: carry items per partition */
    uint32_t paced_calls;           /* claim thread only: calls of the last paced round */
    unsigned char *unknown;         /* claim thread only: partitions not claimed since the
                                       claim connection was re-established (rr_reconnected) */
    uint32_t nunknown;
    uint64_t rc_seen;               /* claim thread only: claim_rt.reconnects seen */
    uint64_t *last_full;            /* claim thread only: due ms of the last task of the
                                       partition's last claim if it was a full batch
                                       (more due work may wait there), else UINT64_MAX */
    uint64_t *recover_ns;           /* claim thread only: per partition, the local time to
                                       claim it again, when the earliest lease its last
                                       claim saw ends (UINT64_MAX: none; claim.c) */
    uint64_t recover_next;          /* claim thread only: at most the least recover_ns */
    struct tw_rr_share_slot *share_tab; /* claim thread only: per partition, what this
                                       worker took of each bucket beyond its window
                                       (claim.c: Sharing) */
    uint64_t *share_ns;             /* claim thread only: per partition, its last claim
                                       of shares only (rr_claim_shares) */
    unsigned char *recover_due;     /* claim thread only: scratch of rr_pace */
    unsigned char *claim_want;      /* claim thread only: the partitions a round claims */
    atomic_bool stop_sub;
    struct tw_rr_router claim_rt;
    struct tw_rr_router sub_rt;     /* only its node list is used */
    struct tw_rr_router *exec_rt;   /* one per executor thread */
    struct tw_rr_round *round;      /* one per executor thread: its START round */
    pthread_t *exec_threads;
    uint32_t exec_started; /* executor threads started */
    /* delayed acknowledgements (ack.c): per list (tw_rr_ack_list), the done
     * items, oldest first, under ack_mu; the acknowledger thread sends them
     * all once the oldest has waited ack_delay_ns */
    pthread_mutex_t ack_mu;
    pthread_cond_t ack_cv;
    struct tw_rr_item **ack_head, **ack_tail;
    size_t ack_n;
    bool ack_stop;
    uint64_t ack_delay_ns;
    struct tw_rr_router ack_rt;
    struct tw_rr_round *ack_round; /* the acknowledger's START round */
    pthread_t ack_thread;
    bool ack_started;
    struct tw_rr_local *local;
    pthread_t claim_thread, sub_thread;
    bool claim_started, sub_started;
    bool stopped;                   /* stop has finished */
    pthread_mutex_t stop_mu;        /* serialises stop */

    /* per-master isolation (silent.c) */
    pthread_mutex_t silent_mu;                              /* guards silent_at */
    struct tw_rr_silent_node silent_at[TW_RR_SAMPLE_NODES]; /* the silent masters */
    atomic_uint nsilent;                                    /* entries of silent_at in use */
    _Atomic uint_least16_t *silent; /* per partition: 0, or 1 + its silent master's entry */
    struct tw_rr_await await[TW_RR_SAMPLE_NODES]; /* claim thread only: per claim_rt node */
    struct tw_rr_link *probe[TW_RR_SAMPLE_NODES]; /* claim thread only: per silent_at entry */
    uint64_t probe_ns[TW_RR_SAMPLE_NODES];   /* ... when it was sent */
    uint32_t nawait;                              /* claim thread only: outstanding calls */

    /* figures */
    atomic_uint_fast64_t exec_ns;   /* running mean of one execute call's time */
    atomic_uint_fast64_t delivered, redelivered, failed, stale_acks, claims, refills, notifications,
        recovered, lost_leases, sub_reconnects, worker_reconnects, fenced;
    pthread_mutex_t hist_mu;
    uint64_t hist[TW_RR_HIST];
    uint64_t hist_n, late_max_us;
    uint64_t late_sum_us;           /* under hist_mu: the lateness histogram's sum (metrics.c) */
#ifdef TW_RR_TRACE
    struct tw_rr_trace *trace; /* under hist_mu */
    size_t ntrace, trace_cap;
#endif

    /* connecting (connect.c) and the server's words (errors.c) */
    struct tw_rr_conn conn;         /* credentials and database: every router's */
    struct tw_rr_sentinel *sentinel; /* the master the Sentinels name (sentinel.c); NULL:
                                      * the servers as configured */
    pthread_mutex_t err_mu;         /* guards lasterr, err_seq, werr */
    struct tw_rr_lasterr lasterr[TW_RR_ERR_THREADS];
    uint64_t err_seq;
    atomic_uint nerrs;              /* lasterr slots holding an error */
    char werr[TW_RR_ERR_MAX];       /* the worker threads' last error ("" none) */
    int werr_code;                  /* ... its code (0 none) */
    atomic_uint_fast64_t worker_errors;
    int sub_err;                    /* under mu: the subscriber's first connection refused
                                       (TW_EAUTH): new fails with it and sub_errtext */
    char sub_errtext[TW_RR_ERR_MAX];

    /* dead letters, events, schedules (dead.c, events.c, schedule.c) */
    atomic_uint_fast64_t dead_n, events_dropped, sched_fires, silent_marks;
    void *ev;                       /* events.c's queue (NULL: no on_event, no thread) */
    void *sched;                    /* a worker's schedule thread (schedule.c; NULL: none) */
    struct tw_rr_router sched_rt;   /* its router */
    bool adopt;                     /* config partitions 0: take the queue's stored count */
    bool auto_partitions;           /* config partitions AUTO: take it, or create the queue
                                       with the servers' count (server_checks.c) */
    atomic_bool resumed;            /* the subscriber saw a resume: claim every partition
                                       before handing due tasks over (claim.c) */
};

#ifdef TW_RR_TRACE
/* Stage figures of each start (a debug build with -DTW_RR_TRACE only): the
 * worker writes them at stop to $TW_RR_TRACE_FILE.<pid>, one line a task. */
struct tw_rr_trace {
    uint64_t due_ms, due_local_ns, fired_ns, take_ns, sent_ns, reply_ns, srv_us, exec_ns;
    int64_t off_us;
    uint32_t batch, thread;
};
#endif

/* ---- the layer's files and what each gives the others ----------------------- */
/* keys.c: the partition of a key and the names of a partition's keys. */
extern const char *const tw_rr_suffix[6]; /* ":d", ":leases", ":task", ":seq", ":hold", ":ch" */
uint64_t tw_rr_hash_of(const void *key, size_t len);
uint32_t tw_rr_part_of(const struct tw_redis *r, const void *key, size_t len);
/* The five keys and the channel of partition p, into buf. */
void tw_rr_keys(const struct tw_redis *r, uint32_t p, char buf[6][TW_RR_KEYBUF],
                const char **argv, size_t *lens);

/* offset.c: the server clock's offset from the local monotonic clock. */
/* The partition whose bounds partition p uses: p in a cluster, 0 on one server. */
static inline uint32_t tw_rr_clock_slot(const struct tw_redis *r, uint32_t p)
{
    return r->one_clock ? 0 : p;
}
/* The server read server_us before its reply arrived at local_ns: a lower bound. */
void tw_rr_clock_sample(struct tw_redis *r, uint32_t p, uint64_t server_us, uint64_t local_ns);
/* ... and after the request was sent at sent_ns: an upper bound. */
void tw_rr_clock_sample_hi(struct tw_redis *r, uint32_t p, uint64_t server_us, uint64_t sent_ns);
/* The server's clock at local now_ns, best estimate (us): the middle of the
 * tightest bounds known, kept within [lo_us, hi_us] (the caller's own
 * bounds); lo_us when no sample is known. For the lateness figure only. */
uint64_t tw_rr_server_us(struct tw_redis *r, uint32_t p, uint64_t now_ns, uint64_t lo_us,
                         uint64_t hi_us);
/* Local monotonic ns at which the server's clock has surely reached due_ms. */
uint64_t tw_rr_local_due(struct tw_redis *r, uint32_t p, uint64_t due_ms);

/* silent.c: per-master isolation. */
/* A router's on_silent: node `node` of rt did not answer in time; its
 * partitions (by rt's map) are silent for every thread of the worker. */
void tw_rr_silent_mark(void *r, const struct tw_rr_router *rt, size_t node);
/* How long a worker thread waits for one master's replies before it marks
 * it silent: silent_ms in a cluster (when below command_timeout_ms), else 0
 * (no isolation: the command timeout). */
uint32_t tw_rr_isolate_ms(const struct tw_redis *r, bool cluster);
/* How long the claim thread waits for a reply before it goes on without
 * it: tw_rr_isolate_ms for its router, else the whole command timeout. */
uint64_t tw_rr_patience_ns(const struct tw_redis *r);
/* Whether partition p's master is silent (any thread). */
static inline bool tw_rr_silent_part(const struct tw_redis *r, uint32_t p)
{
    return r->silent && atomic_load_explicit(&r->silent[p], memory_order_relaxed) != 0;
}
/* Whether the master at host:port is silent (any thread). */
bool tw_rr_silent_addr(struct tw_redis *r, const char *host, int port);
/* The claim thread's TIME round: a TIME to every node serving a wanted
 * partition, all sent at once and their replies read as they come; a node
 * that fails, or has not answered within its patience (TW_RR_SILENT_MS in a
 * cluster), or still owes an earlier reply, is marked in bad[]
 * (TW_RR_SAMPLE_NODES + 1 entries). */
void tw_rr_time_round(struct tw_redis *r, const unsigned char *want, unsigned char *bad);
/* A claim call (EVALSHA CLAIM of av, al) on partition p whose reply is
 * awaited for its patience at most: 0 and *x, an error, or TW_RR_EAWAIT (left
 * outstanding: tw_rr_await_collect hands the reply to `late`). */
int tw_rr_await_claim(struct tw_redis *r, uint32_t p, unsigned batch, const char **av,
                      const size_t *al, redisReply **x);
/* Read the replies that came for outstanding calls (a late claim's to
 * `late`, which owns it), give up on those outstanding too long, and probe
 * the silent masters. Claim thread only; whether anything is still
 * outstanding or silent (call again soon). */
typedef void tw_rr_late_fn(struct tw_redis *r, uint32_t p, unsigned batch, redisReply *x);
bool tw_rr_await_collect(struct tw_redis *r, tw_rr_late_fn *late);

/* client.c: the producer calls (and the reply checks the release shares). */
int tw_rr_int_reply(const redisReply *x, long long *out);
int tw_rr_many_check(void *ctx, size_t i, const redisReply *x); /* a tw_rr_check_fn */

/* claim.c and subscriber.c: the claim and subscriber threads. */
void *tw_rr_claim_main(void *arg);
/* The claim thread's per-partition state, allocated by tw_redis_new before
 * the thread starts (so that a failed allocation fails new, not the thread)
 * and freed with the instance: 0 or TW_ENOMEM. */
int tw_rr_claim_alloc(struct tw_redis *r);
void tw_rr_claim_free(struct tw_redis *r);
void *tw_rr_sub_main(void *arg);

/* execute.c: an executor thread; arg is its struct tw_rr_round (r set). */
void *tw_rr_exec_main(void *arg);

/* start.c: one START round trip of e->v[0 .. e->n) (e->starting: to start,
 * <= TW_RR_RUN_BATCH; else to acknowledge, <= TW_RR_ACK_MAX of at most
 * TW_RR_GROUPS_MAX partitions) on rt.
 * The answers are in e->st, e->arg, e->now, e->reply_ns and e->ack_st. */
void tw_rr_start_round(struct tw_rr_round *e, struct tw_rr_router *rt);

/* The end (server ms) of the lease a granted START wrote, as the worker
 * knows it from that START's answer (it->srv_us): the script's own sum, so
 * the lease ends then or later (a redone start only lengthens it), unless
 * a failover lost that write. Fencing (execute.c) and the
 * acknowledgements' lease check (start.c) use it. */
static inline uint64_t tw_rr_lease_end_ms(const struct tw_redis *r, const struct tw_rr_item *it)
{
    uint64_t now_ms = it->srv_us / 1000u;
    return (it->due_ms > now_ms ? it->due_ms : now_ms) + r->cfg.lease_ms;
}

/* ack.c: the delayed acknowledgements. */
/* Which pending list a partition's acknowledgements wait in: the
 * partition's own (a round groups them by partition). */
static inline uint32_t tw_rr_ack_list(const struct tw_redis *r, uint32_t part)
{
    (void)r;
    return part;
}
/* Up to max of list p's acknowledgements, oldest first (ack_mu held). */
static inline size_t tw_rr_ack_take(struct tw_redis *r, uint32_t p, struct tw_rr_item **out,
                                    size_t max)
{
    size_t k = 0;
    while (k < max && r->ack_head[p]) {
        struct tw_rr_item *it = r->ack_head[p];
        r->ack_head[p] = it->next;
        out[k++] = it;
    }
    if (!r->ack_head[p])
        r->ack_tail[p] = NULL;
    r->ack_n -= k;
    return k;
}
/* A DONE task: its acknowledgement waits for the acknowledger's next batch. */
void tw_rr_ack_push(struct tw_redis *r, struct tw_rr_item *it);
void *tw_rr_ack_main(void *arg);

/* stats.c: the figures. */
void tw_rr_note_late(struct tw_redis *r, uint64_t us);
#ifdef TW_RR_TRACE
void tw_rr_trace_note(struct tw_redis *r, const struct tw_rr_item *it, uint64_t take_ns,
                      uint64_t sent_ns, uint64_t reply_ns, uint64_t srv_us, uint64_t exec_ns,
                      uint32_t batch, unsigned thread);
void tw_rr_trace_dump(struct tw_redis *r);
#endif

/* inspect.c: a client whose config has partitions 0 takes the count stored
 * with the queue (text v, from {q:meta}:partitions): 0, or TW_ECONFLICT for a
 * value that is not a count. */
int tw_rr_adopt_partitions(struct tw_redis *r, const char *v);

/* redis.c: start one of the layer's own threads with SIGPIPE blocked. */
int tw_rr_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* config.c: what tw_redis_new says failed, into cfg->errbuf when given. */
void tw_rr_errbuf(const struct tw_redis_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* config.c: the ranges of c's values: 0 or TW_EINVAL (with the reason in
 * errbuf where one is more than "out of range"). */
int tw_rr_check_config(const struct tw_redis_config *c);
/* config.c: the servers entries (url.c) each parsed, the schemes served,
 * one set of credentials and one database for them all: 0 with *first the
 * entry with credentials (or the first), *db the database (0: none) and
 * *tls whether connections use TLS; or TW_EINVAL with the reason. */
int tw_rr_check_servers(const struct tw_redis_config *c, struct tw_rr_url *first, int *db,
                        bool *tls);
/* config.c: the credentials and database into r->conn, the servers into
 * r->servers as the router takes them; after both checks. 0, TW_ENOMEM. */
int tw_rr_copy_servers(struct tw_redis *r, const struct tw_redis_config *cfg,
                       const struct tw_rr_url *first, int db);
/* server_checks.c: every master's maxmemory-policy checked now and on each
 * new connection: 0, TW_ECONFLICT, TW_ENOMEM. */
int tw_rr_check_masters(struct tw_redis *r);
/* server_checks.c: the queue's partition count, stored with the queue by
 * its first client and compared (or adopted) by every later one: 0,
 * TW_ECONFLICT, TW_ENOENT (an inspecting client, no queue), TW_EOOM,
 * TW_EIO, TW_EPROTO, TW_ENOMEM. */
int tw_rr_check_partitions(struct tw_redis *r);
/* keys.c: n decimal fields, each followed by one blank, at the start of
 * s: a task record "token attempt due " then the payload (n = 3,
 * scripts.c), a dead letter "attempt dead_ms due errlen " (4), a schedule
 * "next policy anchor speclen " (4). num[0..n) and *rest (the offset after
 * the last blank: what follows is the rest's own, leading blanks
 * included). 0, or -1 when s is not that (a field empty or not digits, or
 * past 64 bits, or not followed by exactly one blank). */
int tw_rr_parse_fields(const char *s, size_t len, int n, uint64_t *num, size_t *rest);
/* upgrade.c: the lease sets an earlier version left ({q:p}:lease, bare
 * keys) converted into {q:p}:leases, unless {q:meta}:schema says they
 * were: 0 or an error code (TW_EPROTO: a set that does not shrink). */
int tw_rr_upgrade_leases(struct tw_redis *r);
/* inspect.c: one script call of body on partition p's slot (EVAL body with
 * the partition's five keys, then nargs args; lens NULL: C strings). Under
 * api_mu. 0 and *out (not an error reply), or an error code. */
int tw_rr_eval_body(struct tw_redis *r, const char *body, uint32_t p, int nargs,
                    const char **args, const size_t *lens, redisReply **out);
/* The same read only, for a client configured with 0 or AUTO (others: 0 at
 * once): the count it will use (the stored one, or a new queue's), nothing
 * written, so that the permission check (acl.c) asks for the right keys. */
int tw_rr_read_partitions(struct tw_redis *r);

/* errors.c: the server's words. */
/* The code of an error reply's text: TW_EAUTH for a refusal of credentials
 * or of a permission (NOAUTH, WRONGPASS, NOPERM, and the ACL refusals of a
 * script's redis.call), else TW_EPROTO. */
int tw_rr_error_code(const char *text);
/* An error reply that ends a call: its words kept in rt->err (and told to
 * rt->sink); returns its code (tw_rr_error_code). */
int tw_rr_reply_error(struct tw_rr_router *rt, const redisReply *x);
/* Record the outcome of the calling thread's call on r->api (under api_mu;
 * rc: what the call returns). Inline: a success costs one load while no
 * thread's last call failed. */
void tw_rr_note_(struct tw_redis *r, int rc);
static inline void tw_rr_note(struct tw_redis *r, int rc)
{
    if (rc < 0 || atomic_load_explicit(&r->nerrs, memory_order_relaxed))
        tw_rr_note_(r, rc);
}
/* A worker router's sink (ctx: the struct tw_redis): counts and keeps the
 * worker threads' last error. */
void tw_rr_worker_sink(void *ctx, int code, const char *text);

/* acl.c: ask the server's ACL, before anything is written, whether this
 * instance's user may send every command the layer sends, on its keys and
 * channels (redis.acl_check_cmd, Redis >= 7; earlier servers are not
 * asked). 0, or TW_EAUTH naming the first command refused (in r->api.err),
 * or as tw_rr_eval. */
int tw_rr_acl_check(struct tw_redis *r);
/* What it asks: each command with its arguments ("@d" index, "@b" a bucket,
 * "@l" lease, "@t" task, "@s" seq, "@h" hold, "@c" channel, "@n" the
 * database), and when the layer sends it. */
#define TW_RR_ACL_WORKER 1u  /* a worker's only */
#define TW_RR_ACL_CLUSTER 2u /* in a cluster only */
#define TW_RR_ACL_DB 4u      /* with a database other than 0 only */
#define TW_RR_ACL_WAIT 8u    /* with wait_replicas only */
#define TW_RR_ACL_ARGS 8
struct tw_rr_acl_need {
    unsigned when; /* 0: always */
    const char *argv[TW_RR_ACL_ARGS];
};
extern const struct tw_rr_acl_need tw_rr_acl_needs[];
extern const size_t tw_rr_acl_nneeds;

/* ---- Sentinel (sentinel.c) --------------------------------------------------- */
struct tw_rr_sentinel;
/* With redis+sentinel:// servers: the Sentinels and their credentials from
 * cfg, the master asked of them and confirmed (ROLE master, r->conn's
 * credentials), its address written over r->servers (what every router
 * seeds from), r->sentinel set. 0; else why (TW_RR_ERR_MAX bytes) says
 * what failed: TW_EIO (no Sentinel answered, or the master they name did
 * not within connect_timeout_ms + command_timeout_ms), TW_EINVAL (no
 * Sentinel knows the master's name), TW_EAUTH, TW_EPROTO, TW_ENOMEM. */
int tw_rr_sentinel_new(struct tw_redis *r, const struct tw_redis_config *cfg, char *why);
void tw_rr_sentinel_free(struct tw_rr_sentinel *s);
/* The master's address as last found into host (TW_RR_URL_HOST bytes) and
 * *port, the Sentinels asked again first when it was found stale (at most
 * every RR_ASK_MS; the caller waits while another thread asks). True when
 * it differs from what host and port held. Any thread. */
bool tw_rr_sentinel_addr(struct tw_rr_sentinel *s, char *host, int *port);
/* The master found wrong (a connection failed, a replica, READONLY): the
 * next tw_rr_sentinel_addr asks the Sentinels. Any thread, lock-free. */
void tw_rr_sentinel_stale(struct tw_rr_sentinel *s);
/* ROLE on a new connection to host:port: 0 for a master; TW_EIO for
 * anything else (marked stale, err says what), TW_EAUTH when ROLE is
 * denied. */
int tw_rr_sentinel_role(struct tw_rr_sentinel *s, struct tw_rr_link *c, const char *host, int port,
                        char *err, size_t errlen);
/* Bumped each time the master's address changes. Any thread. */
uint64_t tw_rr_sentinel_gen(const struct tw_rr_sentinel *s);
/* The client's check of a new connection to the master, after its policy:
 * the queue's partition count (stored again if a failover lost it). 0,
 * TW_ECONFLICT, TW_EIO. */
int tw_rr_sentinel_recheck(struct tw_redis *r, struct tw_rr_link *c);

/* ---- the replica wait (wait.c) ----------------------------------------------- */
/* Append WAIT to c's output after a command (router.c, rt->wait_replicas
 * set); read its answer into rt->waited after the command's reply. */
int tw_rr_wait_append(struct tw_rr_router *rt, struct tw_rr_link *c);
void tw_rr_wait_read(struct tw_rr_router *rt, struct tw_rr_link *c);
/* After a producer call on r->api that succeeded: 0, or TW_EREPLICAS when
 * fewer replicas than configured confirmed it (r->api.err says so). */
int tw_rr_wait_check(struct tw_redis *r);
/* After a set_many that succeeded: WAIT on each connected master, a round
 * trip each; TW_EREPLICAS when one confirmed too few, or a connection was
 * opened since `opened` (the calls' own connection gone: unconfirmed). */
int tw_rr_wait_many(struct tw_redis *r, uint64_t opened);
/* dead.c: the retry limit, dead letters, and the client-call helpers that
 * schedule.c shares. */
/* CLAIM's reply element 2: the recovered count, or {count, key, attempt,
 * ...} of the tasks it moved to the dead letters (counted, told as events).
 * 0, or TW_EPROTO for another shape. */
int tw_rr_dead_claimed(struct tw_redis *r, uint32_t p, const redisReply *e);
/* The calling executor's tw_redis_fail_text, taken (forgotten after); or
 * forgotten (DONE): one thread-local load when execute left none. */
const char *tw_rr_fail_text_take(size_t *len);
extern _Thread_local size_t tw_rr_fail_len;
static inline void tw_rr_fail_text_forget(void)
{
    if (tw_rr_fail_len)
        tw_rr_fail_len = 0;
}
/* r, key and payload as set takes them: 0, TW_EINVAL, TW_E2BIG, TW_ECLOSED. */
int tw_rr_check_task(const struct tw_redis *r, const void *key, size_t key_len,
                     const void *payload, size_t payload_len);
/* One call on the client's router under api_mu, its outcome noted
 * (tw_rr_note): script `id`, or with id TW_RR_NSCRIPTS the plain command
 * av (nkeys 0, nargs its words; an error reply becomes its code). */
int tw_rr_api_call(struct tw_redis *r, unsigned id, int slot, int nkeys, int nargs,
                   const char **av, const size_t *al, redisReply **x);
/* ... whose reply is an integer, into *v. */
int tw_rr_api_int(struct tw_redis *r, unsigned id, int slot, int nkeys, int nargs,
                  const char **av, const size_t *al, long long *v);
/* CMD {queue:p}:suffix on every partition (HLEN, UNLINK): the integer
 * replies summed into *sum. 0 or as tw_rr_api_call. */
int tw_rr_each_part(struct tw_redis *r, const char *cmd, const char *suffix, uint64_t *sum);
/* "{queue:p}:suffix" into buf; its length. */
size_t tw_rr_pkey(const struct tw_redis *r, uint32_t p, const char *suffix,
                  char buf[TW_RR_KEYBUF]);
/* A paged listing of one HASH per partition ("dead", "sched"): give() is
 * told each field and value; count is HSCAN's COUNT (1..1000). */
struct tw_rr_scan {
    const char *suffix;
    size_t count;
    int (*give)(struct tw_rr_scan *s, const char *k, size_t kl, const char *v, size_t vl);
};
int tw_rr_scan(struct tw_redis *r, struct tw_rr_scan *s, struct tw_redis_scan_cursor *cur);

/* events.c: the on_event hook's queue and thread; and a thread of the
 * worker's own with a stop flag (the events and the schedule threads). */
struct tw_rr_bg {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC (tw_cond_wait_until_) */
    bool stop;         /* under mu */
    pthread_t thread;
};
/* A zeroed block of `size` bytes (a struct whose first member is a struct
 * tw_rr_bg) into *slot, then its thread fn(arg): TW_ENOMEM, TW_ESYS (*slot
 * NULL). Free: stop set and signalled, the thread joined, *slot NULL, freed. */
int tw_rr_bg_new(void **slot, size_t size, void *(*fn)(void *), void *arg);
void tw_rr_bg_free(void **slot);
/* Queue an event (a copy of the key): a no-op without on_event (one load
 * on the executors' path). Any thread. */
void tw_rr_event_(struct tw_redis *r, enum tw_redis_event_kind kind, const char *key,
                  size_t key_len, uint32_t attempt, uint64_t due_ms);
static inline void tw_rr_event(struct tw_redis *r, enum tw_redis_event_kind kind,
                               const char *key, size_t key_len, uint32_t attempt,
                               uint64_t due_ms)
{
    if (r->ev)
        tw_rr_event_(r, kind, key, key_len, attempt, due_ms);
}
int tw_rr_events_start(struct tw_redis *r); /* TW_ENOMEM, TW_ESYS */
void tw_rr_events_stop(struct tw_redis *r); /* gives what is queued, joins */

/* schedule.c: a worker's schedule thread (on r->sched_rt). */
int tw_rr_sched_start(struct tw_redis *r); /* TW_ENOMEM, TW_ESYS */
void tw_rr_sched_stop(struct tw_redis *r);
/* The subscriber's: ask partition p (UINT32_MAX: every one) for due
 * schedules now (a schedule was set there, or notifications may have been
 * missed). A no-op without the schedule thread. */
void tw_rr_sched_wake(struct tw_redis *r, uint32_t p);

#endif /* TWHEEL_REDIS_INTERNAL_H */
