/* SPDX-License-Identifier: MIT */
/* redis_worker: one worker process for the Redis layer's fault tests, the W7
 * benchmark and the demo scene. Started (and SIGKILLed) by them through the
 * fixture's rfx_spawn.
 *
 * Every delivery is appended to --out as one line, written with one write()
 * before execute returns, so a SIGKILL loses no delivery that was
 * acknowledged:
 *
 *     <key> <attempt> <due_ms> <start_us> <pid> <lease_end_ms>\n
 *
 * (start_us: CLOCK_REALTIME at the start of execute; the servers run on the
 * same machine, so it is comparable with the Redis clock. lease_end_ms: the
 * task's lease_end_ms, the end of the lease its START granted, on the Redis
 * clock; 0 in the poll mode, which leases nothing.)
 *
 * Modes:
 *   --mode wheel  (default) a tw_redis worker: the layer under test.
 *   --mode poll   the polling baseline of W7, as Sidekiq's scheduled set and
 *                 Redisson's delayed queue do it: one sorted set <queue>:zset
 *                 scored by due time (ms, Redis clock), members "<key>|<payload>";
 *                 every --interval-ms one Lua call claims up to --batch due
 *                 members (ZRANGEBYSCORE ... LIMIT + ZREM), repeated while a
 *                 full batch comes back. Nothing is leased: at most once.
 *
 * --servers takes entries separated by commas, each as the configuration
 * takes it: host:port, a unix socket's /path, or a redis:// or unix:// URL
 * with credentials (redis.h, "Connecting"; a comma in a password as %2C);
 * the poll mode uses the first.
 *
 * --ahead-ms N (or the environment's TW_RW_AHEAD_MS) sets start_ahead_ms,
 * --rt-priority N (or TW_RW_RT_PRIORITY) rt_priority, --hold-ms N hold_ms;
 * --fail-prefix P: tasks whose key starts with P answer FAILED (with an error
 * text: the dead letters of the scene).
 * --tls-ca FILE, --tls-cert FILE, --tls-key FILE: tls_ca_file,
 * tls_cert_file, tls_key_file (with rediss:// entries; the poll mode is
 * plain only).
 *
 * Run under libfaketime (FAKETIME in the environment: a test that makes the
 * worker's clocks run fast), start_us is read from the kernel by the raw
 * clock_gettime system call, which libfaketime does not intercept: the real
 * CLOCK_REALTIME, comparable with the server's TIME. The stats file then
 * also gives clock_rate: how fast the worker's CLOCK_MONOTONIC ran against
 * the kernel's over the worker's life (1.001: 0.1% fast).
 *
 * SIGTERM or SIGINT: stop cleanly (tw_redis_stop, stats to --stats, exit 0).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis/internal.h" /* the poll mode connects as the layer does (url.c, connect.c) */
#include "twheel/redis.h"

#define MAX_SERVERS 16

struct opts {
    const char *servers[MAX_SERVERS];
    size_t nservers;
    const char *queue;
    const char *out;
    const char *stats;
    const char *mode;
    uint32_t partitions, threads, lease_ms, window_ms, tick_ms;
    uint32_t exec_us, interval_ms, batch;
    int64_t ahead_ms; /* start_ahead_ms; -1: the default */
    uint32_t rt_priority, hold_ms;
    const char *fail_prefix; /* keys starting with it answer FAILED */
    const char *tls_ca, *tls_cert, *tls_key;
};

static int out_fd = -1;
static pid_t self;
static bool raw_clock; /* under libfaketime: read the kernel's clocks (see the top) */

/* Clock `id` in ns: the kernel's own by the raw system call when raw_clock,
 * else through the C library (which a preloaded libfaketime may fake). */
static uint64_t clock_ns(clockid_t id, bool raw)
{
    struct timespec ts;
    if (raw)
        syscall(SYS_clock_gettime, id, &ts);
    else
        clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t realtime_us(void)
{
    return clock_ns(CLOCK_REALTIME, raw_clock) / 1000u;
}

static void record(const char *key, size_t key_len, uint32_t attempt, uint64_t due_ms,
                   uint64_t start_us, uint64_t lease_end_ms)
{
    char line[TW_REDIS_KEY_MAX + 128];
    if (key_len > TW_REDIS_KEY_MAX)
        key_len = TW_REDIS_KEY_MAX;
    int n = snprintf(line, sizeof line,
                     "%.*s %" PRIu32 " %" PRIu64 " %" PRIu64 " %d %" PRIu64 "\n", (int)key_len,
                     key, attempt, due_ms, start_us, (int)self, lease_end_ms);
    if (n <= 0 || out_fd < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(out_fd, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

static void busy_us(uint32_t us)
{
    if (!us)
        return;
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static enum tw_redis_result execute(void *arg, const struct tw_redis_task *t)
{
    const struct opts *o = arg;
    uint64_t start = realtime_us();
    record(t->key, t->key_len, t->attempt, t->due_ms, start, t->lease_end_ms);
    busy_us(o->exec_us);
    size_t fl = o->fail_prefix ? strlen(o->fail_prefix) : 0;
    if (fl && t->key_len >= fl && memcmp(t->key, o->fail_prefix, fl) == 0) {
        tw_redis_fail_text("failed on purpose", 17); /* kept with a dead letter */
        return TW_REDIS_FAILED;
    }
    return TW_REDIS_DONE;
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->queue = "twq";
    o->mode = "wheel";
    o->interval_ms = 100;
    o->batch = 1000;
    o->ahead_ms = -1;
    /* the environment can set start_ahead_ms too (benchmarks compare values
     * without changing the spawning code) */
    const char *env = getenv("TW_RW_AHEAD_MS");
    uint32_t u;
    if (env && *env && parse_u32(env, &u) == 0)
        o->ahead_ms = u;
    env = getenv("TW_RW_RT_PRIORITY");
    if (env && *env && parse_u32(env, &u) == 0)
        o->rt_priority = u;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "redis_worker: %s needs a value\n", a);
            return -1;
        }
        i++;
        int rc = 0;
        if (!strcmp(a, "--servers")) {
            static char *copy; /* lives until exit, reachable (LeakSanitizer) */
            free(copy);
            o->nservers = 0;
            if (!(copy = strdup(v)))
                return -1;
            for (char *t = copy; *t && o->nservers < MAX_SERVERS;) { /* a Sentinel list kept */
                size_t n = tw_rr_url_entry_len(t);
                bool last = t[n] == 0;
                t[n] = 0;
                if (n)
                    o->servers[o->nservers++] = t; /* copy lives until exit */
                t += n + !last;
            }
        } else if (!strcmp(a, "--queue"))
            o->queue = v;
        else if (!strcmp(a, "--out"))
            o->out = v;
        else if (!strcmp(a, "--stats"))
            o->stats = v;
        else if (!strcmp(a, "--mode"))
            o->mode = v;
        else if (!strcmp(a, "--fail-prefix"))
            o->fail_prefix = v;
        else if (!strcmp(a, "--partitions"))
            rc = parse_u32(v, &o->partitions);
        else if (!strcmp(a, "--threads"))
            rc = parse_u32(v, &o->threads);
        else if (!strcmp(a, "--lease-ms"))
            rc = parse_u32(v, &o->lease_ms);
        else if (!strcmp(a, "--window-ms"))
            rc = parse_u32(v, &o->window_ms);
        else if (!strcmp(a, "--tick-ms"))
            rc = parse_u32(v, &o->tick_ms);
        else if (!strcmp(a, "--exec-us"))
            rc = parse_u32(v, &o->exec_us);
        else if (!strcmp(a, "--interval-ms"))
            rc = parse_u32(v, &o->interval_ms);
        else if (!strcmp(a, "--batch"))
            rc = parse_u32(v, &o->batch);
        else if (!strcmp(a, "--rt-priority"))
            rc = parse_u32(v, &o->rt_priority);
        else if (!strcmp(a, "--hold-ms"))
            rc = parse_u32(v, &o->hold_ms);
        else if (!strcmp(a, "--tls-ca"))
            o->tls_ca = v;
        else if (!strcmp(a, "--tls-cert"))
            o->tls_cert = v;
        else if (!strcmp(a, "--tls-key"))
            o->tls_key = v;
        else if (!strcmp(a, "--ahead-ms")) {
            rc = parse_u32(v, &u);
            o->ahead_ms = u;
        }
        else
            rc = -1;
        if (rc) {
            fprintf(stderr, "redis_worker: bad option %s %s\n", a, v);
            return -1;
        }
    }
    if (!o->nservers || !o->out) {
        fprintf(stderr, "redis_worker: --servers and --out are required\n");
        return -1;
    }
    return 0;
}

/* Wait for SIGTERM/SIGINT up to timeout_ms (-1: forever). 1 if one came. */
static int wait_signal(const sigset_t *set, int timeout_ms)
{
    if (timeout_ms < 0) {
        int sig;
        return sigwait(set, &sig) == 0;
    }
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    return sigtimedwait(set, NULL, &ts) > 0;
}

static int run_wheel(const struct opts *o, const sigset_t *set)
{
    uint64_t mono0 = clock_ns(CLOCK_MONOTONIC, false), raw0 = clock_ns(CLOCK_MONOTONIC, true);
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = o->servers;
    cfg.nservers = o->nservers;
    cfg.queue = o->queue;
    if (o->partitions)
        cfg.partitions = o->partitions;
    if (o->threads)
        cfg.threads = o->threads;
    if (o->lease_ms)
        cfg.lease_ms = o->lease_ms;
    if (o->window_ms)
        cfg.window_ms = o->window_ms;
    if (o->tick_ms)
        cfg.tick_ms = o->tick_ms;
    if (o->ahead_ms >= 0)
        cfg.start_ahead_ms = (uint32_t)o->ahead_ms;
    cfg.rt_priority = o->rt_priority;
    if (o->hold_ms)
        cfg.hold_ms = o->hold_ms;
    cfg.tls_ca_file = o->tls_ca;
    cfg.tls_cert_file = o->tls_cert;
    cfg.tls_key_file = o->tls_key;
    cfg.execute = execute;
    cfg.arg = (void *)o;
    char err[TW_RR_ERR_MAX] = "";
    cfg.errbuf = err;
    cfg.errbuf_len = sizeof err;
    struct tw_redis *r = NULL;
    int rc = TW_EIO;
    /* The server may be restarting: retry new for up to 10 s. */
    for (int t = 0; t < 100; t++) {
        rc = tw_redis_new(&r, &cfg);
        if (rc != TW_EIO)
            break;
        if (wait_signal(set, 100))
            return 0;
    }
    if (rc) {
        fprintf(stderr, "redis_worker: tw_redis_new: %s: %s\n", tw_strerror(rc), err);
        return 1;
    }
    wait_signal(set, -1);
    tw_redis_stop(r);
    if (o->stats) {
        struct tw_redis_stats st;
        memset(&st, 0, sizeof st);
        tw_redis_stats(r, &st);
        FILE *f = fopen(o->stats, "w");
        if (f) {
            fprintf(f,
                    "delivered %" PRIu64 "\nredelivered %" PRIu64 "\nfailed %" PRIu64
                    "\nstale_acks %" PRIu64 "\nreconnects %" PRIu64 "\nlate_p50_us %" PRIu64
                    "\nlate_p99_us %" PRIu64 "\nlate_max_us %" PRIu64 "\nclaims %" PRIu64
                    "\nrefills %" PRIu64 "\nnotifications %" PRIu64 "\nrecovered %" PRIu64
                    "\nlost_leases %" PRIu64 "\nfenced %" PRIu64 "\n",
                    st.delivered, st.redelivered, st.failed, st.stale_acks, st.reconnects,
                    st.late_p50_us, st.late_p99_us, st.late_max_us, st.claims, st.refills,
                    st.notifications, st.recovered, st.lost_leases, st.fenced);
            if (raw_clock) {
                uint64_t mono = clock_ns(CLOCK_MONOTONIC, false) - mono0;
                uint64_t raw = clock_ns(CLOCK_MONOTONIC, true) - raw0;
                fprintf(f, "clock_rate %.6f\n", raw ? (double)mono / (double)raw : 0.0);
            }
            fclose(f);
        }
    }
    tw_redis_free(r);
    return 0;
}

/* The polling baseline's claim: due members with their scores, removed in
 * the same atomic call, judged by the server's clock. */
static const char poll_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, "
    "tonumber(ARGV[1]))\n"
    "local m = {}\n"
    "for i = 1, #due, 2 do m[#m + 1] = due[i] end\n"
    "if #m > 0 then redis.call('ZREM', KEYS[1], unpack(m)) end\n"
    "return due\n";

static int run_poll(const struct opts *o, const sigset_t *set)
{
    /* the layer's own syntax and connection (AUTH, SELECT, unix sockets) */
    struct tw_rr_url u;
    const char *why;
    if (tw_rr_url_parse(o->servers[0], &u, &why) != 0) {
        fprintf(stderr, "redis_worker: --servers: %s\n", why);
        return 1;
    }
    struct tw_rr_conn cn = {u.has_user ? u.user : NULL, u.has_pass ? u.pass : NULL,
                            u.db > 0 ? u.db : 0, NULL}; /* plain: the baseline has no TLS */
    char err[TW_RR_ERR_MAX];
    struct tw_rr_link *c;
    if (tw_rr_open(&cn, u.host, u.port, 2000, 10000, &c, err, sizeof err) != 0) {
        fprintf(stderr, "redis_worker: %s\n", err);
        return 1;
    }
    char zkey[256];
    snprintf(zkey, sizeof zkey, "%s:zset", o->queue);
    uint64_t claims = 0, got = 0;
    for (;;) {
        for (;;) {
            char nb[16];
            snprintf(nb, sizeof nb, "%u", o->batch);
            redisReply *r;
            claims++;
            if (tw_rr_link_command(c, 5, (const char *[]){"EVAL", poll_script, "1", zkey, nb},
                                   NULL, &r) != 0) {
                fprintf(stderr, "redis_worker: poll: %s\n", c->errstr);
                tw_rr_link_free(c);
                return 1;
            }
            size_t n = 0;
            if (r->type == REDIS_REPLY_ARRAY) {
                uint64_t start = realtime_us();
                for (size_t i = 0; i + 1 < r->elements; i += 2) {
                    const char *m = r->element[i]->str;
                    size_t ml = r->element[i]->len;
                    const char *bar = memchr(m, '|', ml);
                    size_t kl = bar ? (size_t)(bar - m) : ml;
                    uint64_t due = strtoull(r->element[i + 1]->str, NULL, 10);
                    record(m, kl, 1, due, start, 0);
                    busy_us(o->exec_us);
                    n++;
                }
            }
            freeReplyObject(r);
            got += n;
            if (n < o->batch)
                break;
        }
        if (wait_signal(set, (int)o->interval_ms))
            break;
    }
    tw_rr_link_free(c);
    if (o->stats) {
        FILE *f = fopen(o->stats, "w");
        if (f) {
            fprintf(f, "delivered %" PRIu64 "\nclaims %" PRIu64 "\n", got, claims);
            fclose(f);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o))
        return 2;
    self = getpid();
    raw_clock = getenv("FAKETIME") != NULL;
    out_fd = open(o.out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) {
        fprintf(stderr, "redis_worker: open %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    /* Block the stop signals in every thread; main waits for them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = !strcmp(o.mode, "poll") ? run_poll(&o, &set) : run_wheel(&o, &set);
    close(out_fd);
    return rc;
}
