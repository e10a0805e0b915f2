/* SPDX-License-Identifier: MIT */
/* Test fixture for the Redis layer: real redis-server processes, no mocks.
 *
 * Starts redis-server on 127.0.0.1 at a free port in a fresh mkdtemp
 * directory, waits (bounded) until PING answers PONG, and stops it (SIGTERM,
 * SIGKILL after a bound, waitpid, directory removed). Also a three-master
 * Redis Cluster (redis-cli --cluster create), slot migration by hand
 * (SETSLOT IMPORTING/MIGRATING, MIGRATE in batches, SETSLOT NODE), and
 * fork/exec of worker processes that a test can SIGKILL.
 *
 * Safety: every child (server or worker) is started with PR_SET_PDEATHSIG =
 * SIGKILL, so it dies with the test even if the test is SIGKILLed; every
 * child still running at exit() is killed and reaped and every directory
 * removed by an atexit handler, so a failing test leaves no zombie, no
 * server and no directory. A test SIGKILLed itself leaves its directories:
 * the first rfx_start of a process removes such leftovers (ours, idle for
 * 10 minutes, their server gone). The registry behind that is the one piece of
 * global state, guarded by a mutex; it belongs to the test process only.
 *
 * Every function returns 0 on success and -1 on failure, after printing the
 * reason on stderr prefixed "rfx:". Not async-signal-safe. The redis-server
 * and redis-cli binaries are found in PATH, or in $RFX_REDIS_SERVER and
 * $RFX_REDIS_CLI.
 */
#ifndef TWHEEL_TESTS_REDIS_FIXTURE_H
#define TWHEEL_TESTS_REDIS_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How to start a server. Zero-initialised = plain server, no persistence. */
struct rfx_options {
    bool appendonly;            /* --appendonly yes */
    const char *appendfsync;    /* "always", "everysec", "no"; NULL: Redis default */
    bool cluster;               /* --cluster-enabled yes (bus port = port + 10000) */
    const char *const *extra;   /* more arguments, NULL-terminated; must outlive the server */
    bool unix_socket;           /* --unixsocket DIR/redis.sock (--unixsocketperm 700): s->sock */
    const char *password;       /* --requirepass: the default user's password, which the
                                   fixture's own connections send (AUTH); must outlive it */
    const char *sentinel_conf;  /* a Sentinel: this text is written to DIR/sentinel.conf and
                                   the server started on it with --sentinel (it rewrites
                                   the file); must outlive it */
    const char *tls_dir;        /* an rfx_tls_make directory: a second port, s->tls_port, serves
                                   TLS with its server.crt/key and ca.crt (the plain port stays
                                   for the fixture's own connections); in a cluster also
                                   --tls-cluster yes. Must outlive the server */
    bool tls_auth_clients;      /* with tls_dir: --tls-auth-clients yes (mutual TLS), else no */
};

struct rfx_server {
    pid_t pid;                  /* 0 when not running */
    int port;
    char dir[256];              /* the server's own temporary directory */
    char addr[32];              /* "127.0.0.1:port" */
    char sock[300];             /* the unix socket's path with opts.unix_socket, else "" */
    int tls_port;               /* with opts.tls_dir: the TLS port, else 0 */
    char tls_addr[32];          /* "127.0.0.1:tls_port", or "" */
    struct rfx_options opts;    /* kept for rfx_restart */
    int slot_;                  /* registry index (internal) */
};

/* Start a server at a free port in a new directory. */
int rfx_start(struct rfx_server *s, const struct rfx_options *opts);
/* SIGTERM, then SIGKILL after 5 s; reap it; remove its directory. Idempotent. */
int rfx_stop(struct rfx_server *s);
/* SIGKILL and reap; the directory and the port stay for rfx_restart. */
int rfx_kill(struct rfx_server *s);
/* Start it again on the same port and directory (AOF, if on, is reloaded);
 * kills it first if it is running. Waits until it answers PONG (not LOADING). */
int rfx_restart(struct rfx_server *s);
/* "127.0.0.1:port". */
const char *rfx_addr(const struct rfx_server *s);
/* The entry a tw_redis configuration takes for s, into buf: "127.0.0.1:port";
 * "redis://:PASSWORD@127.0.0.1:port" when it has opts.password (percent-
 * encoded); with @p via_unix (opts.unix_socket needed) "unix:///dir/redis.sock"
 * or "unix://:PASSWORD@/dir/redis.sock". Returns buf ("" when it does not fit). */
const char *rfx_url(const struct rfx_server *s, bool via_unix, char *buf, size_t len);
/* The same for its TLS port (opts.tls_dir): "rediss://[:PASSWORD@]127.0.0.1:tls_port". */
const char *rfx_tls_url(const struct rfx_server *s, char *buf, size_t len);
/* A new control connection (1 s connect timeout, 10 s command timeout; the
 * unix socket when the server has one, else TCP; AUTH with opts.password),
 * or NULL. */
redisContext *rfx_connect(const struct rfx_server *s);
/* One command on a fresh connection, reply checked: 0 if it is not an error. */
int rfx_command(const struct rfx_server *s, const char *fmt, ...);
/* One INFO field as an integer/decimal (e.g. "used_memory", "used_cpu_sys"). */
int rfx_info_double(const struct rfx_server *s, const char *field, double *out);
/* The server's clock (TIME), microseconds since the epoch. */
int rfx_time_us(const struct rfx_server *s, uint64_t *out);

/* ---- cluster ----------------------------------------------------------- */
#define RFX_CLUSTER_MAX 8

struct rfx_cluster {
    size_t n;
    struct rfx_server node[RFX_CLUSTER_MAX];
    char id[RFX_CLUSTER_MAX][48]; /* CLUSTER MYID of each node */
    const char *addrs[RFX_CLUSTER_MAX]; /* node[i].addr, ready for a seed list */
    const char *tls_addrs[RFX_CLUSTER_MAX]; /* node[i].tls_addr (with opts.tls_dir) */
};

/* Start n (3..RFX_CLUSTER_MAX) masters, no replicas, slots spread evenly;
 * returns when every node reports cluster_state:ok and knows every master. */
int rfx_cluster_start(struct rfx_cluster *c, size_t n);
/* The same with every node started with @p opts (cluster set by the
 * fixture; a password is given to redis-cli too). */
int rfx_cluster_start_opts(struct rfx_cluster *c, size_t n, const struct rfx_options *opts);
/* Stop every node. Idempotent. */
int rfx_cluster_stop(struct rfx_cluster *c);
/* Index of the node that owns @p slot (by node 0's view), or -1. */
int rfx_cluster_owner(const struct rfx_cluster *c, unsigned slot);
/* A slot owned by node @p from that holds at least one key, or -1. */
int rfx_cluster_busy_slot(const struct rfx_cluster *c, size_t from);
/* Move @p slot with its keys to node @p to: IMPORTING on the target,
 * MIGRATING on the source, MIGRATE keys in batches of 100, SETSLOT NODE on
 * every node (target first). Nothing to do if @p to owns it already. */
int rfx_cluster_migrate_slot(struct rfx_cluster *c, unsigned slot, size_t to);
/* Keys stored on node i (DBSIZE). */
int rfx_dbsize(const struct rfx_server *s, uint64_t *out);
/* Redis Cluster hash slot of a key (CRC16 with {hash tags}). */
unsigned rfx_key_slot(const void *key, size_t len);

/* ---- Sentinel (fixture_sentinel.c) ------------------------------------- */
/* A master, two replicas and three Sentinels (quorum 2) watching it as
 * "mymaster", each on a free port in a directory of its own; small
 * down-after-milliseconds (1000) and failover-timeout (3000) so that a
 * failover takes a few seconds. */
struct rfx_sentinels {
    struct rfx_server data[3];    /* data[0] the first master, then its replicas */
    struct rfx_server sentinel[3];
    char url[512];                /* redis+sentinel://[:PASSWORD@]127.0.0.1:p1,...:p3/mymaster */
    char port_[16], conf_[1024];  /* (internal: what the servers' options point to) */
    const char *extra_[10], *mextra_[10];
};
/* Start them (every data server with requirepass and masterauth @p password
 * when not NULL); returns when the master has both replicas in sync and
 * every Sentinel knows the two replicas and the two other Sentinels. */
int rfx_sentinels_start(struct rfx_sentinels *s, const char *password);
/* The same, the Sentinels with requirepass @p sentinel_password (and
 * sentinel-pass, to ask each other) when not NULL. */
int rfx_sentinels_start_auth(struct rfx_sentinels *s, const char *password,
                             const char *sentinel_password);
/* Stop them all. Idempotent. */
int rfx_sentinels_stop(struct rfx_sentinels *s);
/* The index in data[] of the master that every Sentinel names and that
 * answers ROLE master, waiting up to timeout_ms for one other than
 * @p not (-1: any); -1 on timeout. */
int rfx_sentinels_master(const struct rfx_sentinels *s, int not, int timeout_ms);
/* ---- TLS material ------------------------------------------------------ */
/* Certificates made at run time with the openssl command (EC P-256, 2 days)
 * in a new directory removed at exit: a CA (ca.crt), a server certificate
 * it signs for IP 127.0.0.1 and DNS localhost (server.crt/key), a client
 * certificate (client.crt/key), another CA (ca2.crt) and a certificate of
 * the first CA for another name only, "wrong.example" (wrong.crt/key).
 * Paths are dir + "/" + name. */
struct rfx_tls {
    char dir[256];
};
int rfx_tls_make(struct rfx_tls *t);
/* dir/name into buf; returns buf. */
const char *rfx_tls_path(const struct rfx_tls *t, const char *name, char *buf, size_t len);

/* ---- worker processes -------------------------------------------------- */
/* fork + execv(argv[0], argv) with PDEATHSIG; stdout/stderr inherited unless
 * @p log is given (then both go there, appended). The pid is registered for
 * the atexit cleanup. */
int rfx_spawn(pid_t *out, char *const argv[], const char *log);
/* Send a signal to a process started by rfx_spawn. */
int rfx_signal(pid_t pid, int sig);
/* After SIGSTOP: wait up to timeout_ms until every thread of the process
 * has stopped (kill returns before the threads running on other CPUs do);
 * 0 once stopped, -1 on timeout or if it exited. */
int rfx_wait_stopped(pid_t pid, int timeout_ms);
/* Wait up to timeout_ms for it to exit; 0 and *status (waitpid's) when it
 * did, -1 on timeout (still registered, still running). */
int rfx_wait(pid_t pid, int timeout_ms, int *status);
/* SIGKILL and reap (for cleanup paths). */
void rfx_reap(pid_t pid);

/* For long-running programs (bench, demo): on SIGINT, SIGTERM or SIGHUP kill
 * and reap every child, then die of the signal. */
void rfx_cleanup_on_signals(void);

/* Milliseconds / microseconds of CLOCK_REALTIME and CLOCK_MONOTONIC. */
uint64_t rfx_realtime_us(void);
uint64_t rfx_mono_ms(void);
void rfx_sleep_ms(unsigned ms);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_TESTS_REDIS_FIXTURE_H */
