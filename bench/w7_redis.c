/* SPDX-License-Identifier: MIT */
/* W7 durable: twheel's Redis layer against a polling baseline, on one
 * redis-server started by the test fixture, in one run.
 *
 * The baseline is what Sidekiq's scheduled set and Redisson's RDelayedQueue
 * do: one sorted set scored by due time; a worker claims due members with one
 * Lua call (ZRANGEBYSCORE ... LIMIT 1000, ZREM) every 100 ms, or every 1 s,
 * again at once while a full batch comes back (redis_worker --mode poll).
 *
 * Phases, each on a flushed server (AOF on, appendfsync everysec unless
 * --fsync says otherwise):
 *  1. sets/s from one client thread: tw_redis_set one by one and
 *     tw_redis_set_many in batches of 1000 (then of 10,000); ZADD one by one
 *     and pipelined 1000 (then 10,000) at a time;
 *     Redis memory per pending task (INFO used_memory delta / N) with 16-byte
 *     keys "order:0000000042" and 32-byte payloads, delays spread over
 *     [min, max] + 1 h (the spread of phase 2, nothing due meanwhile).
 *  2. spread: N tasks due uniformly in [--min-ms, --max-ms] (1-60 s), two
 *     worker processes; lateness p50/p99/max of first deliveries against the
 *     due time (Redis clock), Redis CPU seconds (INFO used_cpu_sys+user) per
 *     1e5 tasks over the run. Also: early and lost (must be 0).
 *  3. burst: N tasks all due at the same millisecond, two workers; delivered
 *     per second = N / (time from that due time until nothing is pending).
 *  4. kill (a second server, appendfsync always): 2e4 tasks (N/5 at most)
 *     due in 0.5-5 s, 0.2 ms of work each, two workers, one SIGKILLed 2 s
 *     in; lost and delivered twice (twheel: leases of 3 s; the baseline has no lease: what the killed
 *     poller had claimed is gone).
 *
 * Usage: w7_redis [--n N] [--min-ms A] [--max-ms B] [--fsync everysec|always]
 *                 [--quick] [--sets-only] [--pipe-only] [--spread-only] [--out FILE]
 *                 [--auth] [--unix] [--no-tls] [--scale-only] [--million]
 *                 [--cluster M] [--partitions P] [--exec-us N] [--no-aof-rewrite]
 * --quick: N = 2e4, delays 1-8 s. --sets-only: phase 1 alone (sets/s and
 * memory, printed; a quick check of the memory figure). --pipe-only: twheel's
 * pipelined sets alone, with Redis and client CPU per set (for profiling the
 * SET script under callgrind). --spread-only: phase 2
 * for twheel alone, one summary line (no table): for measuring a change to the
 * layer without the whole run. The table (markdown) is printed and, with
 * --out, written there too. Ratios are twheel / baseline. --auth: the
 * servers want a password; --unix: every client, worker and baseline
 * connection goes through the servers' unix sockets (both: the layer's
 * connection syntax, redis.h "Connecting", as the workers are given it).
 * --exec-us N: each execute of the spread and burst runs sleeps N us (a slow
 * execute: how the workers share the tasks); the spread run prints each
 * worker's share and how many 100 ms spans of due times one worker ran
 * (nearly) alone, and with W7_SHARES_DUMP=FILE in the environment writes
 * each delivery there as "<first worker? 1 : 0> <due ms> <start us>".
 * --no-aof-rewrite (not with --cluster): the servers never start an AOF
 * rewrite by themselves (the phases' own rewrites between them stay). A
 * run at 1e6 writes more than auto-aof-rewrite-min-size of AOF within its
 * spread phase; where the host makes a rewrite (its fork, the child's CPU
 * and writes) stall Redis, every kind's lateness tail is that stall: this
 * tells the two apart.
 *
 * TLS rows (unless --no-tls, or with --pipe-only / --spread-only, or a
 * layer built without TLS): the
 * server also serves a TLS port (certificates made at run time, fixture
 * rfx_tls_make), and twheel runs phases 1-3 again over rediss:// on it,
 * each right after its plain run; the report adds a TLS / plain table.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "fixture.h"
#include "harness.h"
#include "redis/url.h" /* tw_rr_url_redact: a URL printed without its password */
#include "twheel/redis.h"

#ifndef W7_WORKER_PATH
#error "W7_WORKER_PATH: the redis_worker binary"
#endif

#define PAYLOAD "0123456789abcdef0123456789abcdef"
#define KILL_LEASE_MS 3000
#define BIG_BATCH 10000 /* the second pipelined-sets figure: calls of this many */
#define KILL_EXEC_US 200 /* work in execute, so a kill finds tasks in flight */

enum kind { TWHEEL, POLL100, POLL1000, TWHEEL_TLS, NKINDS };
static const char *kind_name[NKINDS] = {"twheel", "poll 100 ms", "poll 1 s", "twheel TLS"};
/* The order of the burst and spread runs: twheel over TLS right after it plain. */
static const enum kind run_order[NKINDS] = {TWHEEL, TWHEEL_TLS, POLL100, POLL1000};

struct row {
    double sets_single, sets_pipe, bytes_per_task; /* per implementation (poll rows share) */
    double sets_pipe_big; /* pipelined in batches of BIG_BATCH */
    double sets_redis_us, sets_script_us, sets_client_us; /* pipelined sets: CPU us per set */
    double sets_calls, sets_cmds, sets_aof, sets_in; /* pipelined sets, per set: script calls,
                                                        commands, AOF bytes, bytes in */
    double delivered_per_s;
    double p50_ms, p99_ms, max_ms;
    double cpu_per_1e5;
    double calls_per_task, script_us_per_task; /* spread run: script calls (sets included) */
    uint64_t early, lost, spread_missing;
    uint64_t kill_lost, kill_dups, kill_unexplained;
    bool have_kill;
    uint64_t claims; /* twheel: claim calls over the spread run (from worker stats) */
    uint64_t spread_dups; /* spread run: deliveries beyond the first of a task */
    char cmds[512];       /* spread run: INFO commandstats per task, the costliest first */
};

static struct {
    uint64_t n;
    uint64_t min_ms, max_ms;
    const char *fsync;
    const char *out;
    bool sets_only; /* --sets-only: phase 1 alone, figures printed */
    bool pipe_only; /* --pipe-only: twheel's pipelined sets alone (for profiling Redis) */
    bool spread_only; /* --spread-only: twheel's spread run alone (no table) */
    bool auth;        /* --auth: the servers want a password */
    bool via_unix;    /* --unix: connect through their unix sockets */
    bool no_tls;      /* --no-tls: no TLS rows */
    bool scale_only;  /* --scale-only: the scale rows alone (sets, memory, spread of each kind) */
    bool million;     /* --million: the full run adds the scale row of 1e6 tasks */
    bool no_rewrite;  /* --no-aof-rewrite: auto-aof-rewrite-percentage 0 on the servers */
    unsigned cluster; /* --cluster M: twheel's spread on a local cluster of M masters alone */
    unsigned partitions; /* --partitions P: twheel's queue's count (0: the library's default) */
    unsigned exec_us;    /* --exec-us N: each execute of the spread and burst runs sleeps N us */
} cfg = {100000, 1000, 60000, "everysec", NULL, false, false, false, false, false,
#ifdef W7_TLS
         false,
#else
         true, /* the layer was built without TLS */
#endif
         false, false, false, 0, 0, 0};

static struct rfx_tls tls; /* the TLS rows' certificates (made at run time) */
static char tls_ca[300];

/* The entry a client or worker of kind k takes for s: the plain one
 * (rfx_url), or for TWHEEL_TLS rediss:// on the TLS port (with the password). */
static const char *kind_url(const struct rfx_server *s, enum kind k, char *buf, size_t len)
{
    return k == TWHEEL_TLS ? rfx_tls_url(s, buf, len) : rfx_url(s, cfg.via_unix, buf, len);
}

static struct row rows[NKINDS];
static struct rfx_server srv_main; /* the everysec server (scale rows) */

/* The scale table: per N, each kind's pipelined sets, memory and spread run
 * (the 1e5 row from the phases above, 1e6 with --million). */
#define NSCALES 2
static struct {
    uint64_t n;
    struct row r[NKINDS];
} scales[NSCALES];
static int nscales;

static void key_of(char *k, uint64_t i)
{
    snprintf(k, 17, "order:%010" PRIu64, i % 10000000000u); /* 10 digits: 16 bytes */
}

static double now_s(void)
{
    return (double)rfx_realtime_us() / 1e6;
}

/* FLUSHALL, then an AOF rewrite waited for (<= 20 s): FLUSHALL alone leaves
 * the AOF as long as before, so a later phase would cross the 64 MB
 * auto-aof-rewrite-min-size with the AOF of the phases before it and Redis
 * would fork a rewrite in the middle of that phase's measurement (the 1e5
 * spread run writes ~57 MB of AOF by itself, the burst before it as much).
 * Every phase now starts with an empty AOF, twheel's and the baseline's. */
static int flushall(const struct rfx_server *s)
{
    int rc = rfx_command(s, "FLUSHALL");
    if (rc || rfx_command(s, "BGREWRITEAOF"))
        return rc;
    for (int i = 0; i < 2000; i++) {
        double busy = 1, sched = 1;
        if (rfx_info_double(s, "aof_rewrite_in_progress", &busy) ||
            rfx_info_double(s, "aof_rewrite_scheduled", &sched) || (busy == 0 && sched == 0))
            break;
        rfx_sleep_ms(10);
    }
    return 0;
}

static double info(const struct rfx_server *s, const char *f)
{
    double v = 0;
    rfx_info_double(s, f, &v);
    return v;
}

static double redis_cpu(const struct rfx_server *s)
{
    return info(s, "used_cpu_sys") + info(s, "used_cpu_user");
}

/* Script calls (EVALSHA + EVAL) and their Redis time (us) so far, from
 * INFO commandstats. */
static void script_calls(const struct rfx_server *s, double *calls, double *usec)
{
    *calls = *usec = 0;
    redisContext *c = rfx_connect(s);
    if (!c)
        return;
    redisReply *rp = redisCommand(c, "INFO commandstats");
    if (rp && rp->type == REDIS_REPLY_STRING) {
        const char *names[2] = {"cmdstat_evalsha:", "cmdstat_eval:"};
        for (int i = 0; i < 2; i++) {
            const char *l = strstr(rp->str, names[i]);
            unsigned long long n = 0, us = 0;
            if (l && sscanf(l + strlen(names[i]), "calls=%llu,usec=%llu", &n, &us) == 2) {
                *calls += (double)n;
                *usec += (double)us;
            }
        }
    }
    if (rp)
        freeReplyObject(rp);
    redisFree(c);
}

/* INFO commandstats: per command its calls and usec (scripts' inner
 * commands included), for per-task figures of a run. */
#define CS_MAX 96
struct cstats {
    int n;
    char name[CS_MAX][32];
    double calls[CS_MAX], usec[CS_MAX];
};

static void cstats_read(const struct rfx_server *s, struct cstats *cs)
{
    cs->n = 0;
    redisContext *c = rfx_connect(s);
    if (!c)
        return;
    redisReply *rp = redisCommand(c, "INFO commandstats");
    if (rp && rp->type == REDIS_REPLY_STRING) {
        for (const char *l = strstr(rp->str, "cmdstat_"); l && cs->n < CS_MAX;
             l = strstr(l + 1, "\ncmdstat_")) {
            if (*l == '\n')
                l++;
            unsigned long long n = 0, us = 0;
            char name[32];
            if (sscanf(l, "cmdstat_%31[^:]:calls=%llu,usec=%llu", name, &n, &us) == 3) {
                snprintf(cs->name[cs->n], sizeof cs->name[0], "%s", name);
                cs->calls[cs->n] = (double)n;
                cs->usec[cs->n] = (double)us;
                cs->n++;
            }
        }
    }
    if (rp)
        freeReplyObject(rp);
    redisFree(c);
}

/* "cmd calls x us, ..." per task of b - a, the costliest (calls * us) first, into out. */
static void cstats_diff(const struct cstats *a, const struct cstats *b, double n, char *out,
                        size_t len)
{
    double cost[CS_MAX], calls[CS_MAX];
    for (int i = 0; i < b->n; i++) {
        double c0 = 0, u0 = 0;
        for (int j = 0; j < a->n; j++)
            if (!strcmp(a->name[j], b->name[i])) {
                c0 = a->calls[j];
                u0 = a->usec[j];
            }
        calls[i] = (b->calls[i] - c0) / n;
        cost[i] = (b->usec[i] - u0) / n;
    }
    size_t o = 0;
    out[0] = 0;
    for (int k = 0; k < 8; k++) {
        int best = -1;
        for (int i = 0; i < b->n; i++)
            if (cost[i] > 0.005 && (best < 0 || cost[i] > cost[best]))
                best = i;
        if (best < 0 || o + 48 > len)
            break;
        o += (size_t)snprintf(out + o, len - o, "%s%s %.2f (%.1f us)", k ? ", " : "",
                              b->name[best], calls[best], cost[best]);
        cost[best] = -1;
    }
}

/* CPU seconds this process has used (user + system). */
static double self_cpu(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0)
        return 0;
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec +
           ((double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_usec) / 1e6;
}

/* A client of the servers given; ca: the TLS rows' CA file (NULL: plain). */
static struct tw_redis *client_of(const char *const *servers, size_t nservers, const char *ca)
{
    struct tw_redis_config c;
    tw_redis_config_init(&c);
    c.tls_ca_file = ca;
    c.servers = servers;
    c.nservers = nservers;
    c.queue = "w7";
    if (cfg.partitions)
        c.partitions = cfg.partitions;
    if (cfg.pipe_only)
        c.command_timeout_ms = 600000; /* redis-server may run under callgrind */
    struct tw_redis *r = NULL;
    char err[256] = "";
    c.errbuf = err;
    c.errbuf_len = sizeof err;
    int rc = tw_redis_new(&r, &c);
    if (rc) {
        fprintf(stderr, "w7: tw_redis_new: %s: %s\n", tw_strerror(rc), err);
        return NULL;
    }
    return r;
}

static struct tw_redis *client_new(const struct rfx_server *s, enum kind k)
{
    char url[512];
    const char *servers[1] = {kind_url(s, k, url, sizeof url)};
    return client_of(servers, 1, k == TWHEEL_TLS ? tls_ca : NULL);
}

/* ---- phase 1: sets/s and memory --------------------------------------- */
/* Phase 1's delays: spread over [min, max] as in the other phases (the
 * schema's due buckets hold what falls in each 500 ms, so the density
 * matters), an hour out so that nothing comes due while it runs. */
static int64_t mem_delay(void)
{
    return 3600000 + (int64_t)cfg.min_ms + rand() % (int64_t)(cfg.max_ms - cfg.min_ms + 1);
}

/* Pipelined sets of cfg.n tasks in batches of `batch` (tw_redis_set_many
 * of `batch` items; items and keys hold `batch`): sets per second, 0 on
 * failure. */
static double twheel_pipe(struct tw_redis *r, struct tw_redis_item *items, char *keys,
                          size_t batch)
{
    double t = now_s();
    for (uint64_t i = 0; i < cfg.n; i += batch) {
        size_t k = cfg.n - i < batch ? (size_t)(cfg.n - i) : batch;
        for (size_t j = 0; j < k; j++) {
            key_of(keys + j * 17, i + j);
            items[j] = (struct tw_redis_item){keys + j * 17, 16, PAYLOAD, 32, mem_delay()};
        }
        if (tw_redis_set_many(r, items, k) != (int)k) {
            fprintf(stderr, "w7: tw_redis_set_many failed\n");
            return 0;
        }
    }
    return cfg.n / (now_s() - t);
}

static int twheel_sets(const struct rfx_server *s, enum kind k, struct row *out)
{
    struct tw_redis *r = client_new(s, k);
    if (!r)
        return -1;
    uint64_t single = cfg.pipe_only ? 0 : cfg.n < 20000 ? cfg.n : 20000;
    char key[17];
    flushall(s);
    double t = now_s();
    for (uint64_t i = 0; i < single; i++) {
        key_of(key, i);
        if (tw_redis_set(r, key, 16, PAYLOAD, 32, mem_delay()) != 0) {
            fprintf(stderr, "w7: tw_redis_set failed\n");
            tw_redis_free(r);
            return -1;
        }
    }
    out->sets_single = single ? single / (now_s() - t) : 0;
    flushall(s);
    double mem0 = info(s, "used_memory");
    srand(7);
    struct tw_redis_item *items = calloc(BIG_BATCH, sizeof *items);
    char *keys = malloc(BIG_BATCH * 17);
    if (!items || !keys) {
        free(items);
        free(keys);
        tw_redis_free(r);
        return -1;
    }
    double calls0, sus0, cpu0 = redis_cpu(s), self0 = self_cpu();
    double cmd0 = info(s, "total_commands_processed"), aof0 = info(s, "aof_current_size");
    double in0 = info(s, "total_net_input_bytes");
    script_calls(s, &calls0, &sus0);
    out->sets_pipe = twheel_pipe(r, items, keys, 1000);
    out->sets_client_us = (self_cpu() - self0) * 1e6 / (double)cfg.n;
    out->sets_redis_us = (redis_cpu(s) - cpu0) * 1e6 / (double)cfg.n;
    double calls1, sus1;
    script_calls(s, &calls1, &sus1);
    out->sets_script_us = (sus1 - sus0) / (double)cfg.n;
    out->sets_calls = (calls1 - calls0) / (double)cfg.n;
    out->sets_cmds = (info(s, "total_commands_processed") - cmd0) / (double)cfg.n;
    out->sets_aof = (info(s, "aof_current_size") - aof0) / (double)cfg.n;
    out->sets_in = (info(s, "total_net_input_bytes") - in0) / (double)cfg.n;
    out->bytes_per_task = (info(s, "used_memory") - mem0) / (double)cfg.n;
    flushall(s);
    out->sets_pipe_big = twheel_pipe(r, items, keys, BIG_BATCH);
    free(items);
    free(keys);
    tw_redis_free(r);
    flushall(s);
    return out->sets_pipe > 0 && out->sets_pipe_big > 0 ? 0 : -1;
}

/* The baseline's pipelined sets: cfg.n ZADDs, `batch` in flight at a time;
 * sets per second, 0 on failure. */
static double poll_pipe(redisContext *c, uint64_t batch)
{
    char member[64];
    double t = now_s();
    for (uint64_t i = 0; i < cfg.n; i += batch) {
        uint64_t k = cfg.n - i < batch ? cfg.n - i : batch;
        for (uint64_t j = 0; j < k; j++) {
            key_of(member, i + j);
            strcat(member, "|" PAYLOAD);
            redisAppendCommand(c, "ZADD w7:zset %f %s", 4e12, member);
        }
        for (uint64_t j = 0; j < k; j++) {
            void *rp = NULL;
            if (redisGetReply(c, &rp) != REDIS_OK)
                return 0;
            freeReplyObject(rp);
        }
    }
    return cfg.n / (now_s() - t);
}

static int poll_sets(const struct rfx_server *s, struct row *out)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return -1;
    uint64_t single = cfg.n < 20000 ? cfg.n : 20000;
    char member[64];
    flushall(s);
    double t = now_s();
    for (uint64_t i = 0; i < single; i++) {
        key_of(member, i);
        strcat(member, "|" PAYLOAD);
        redisReply *rp = redisCommand(c, "ZADD w7:zset %f %s", 4e12, member);
        if (!rp) {
            redisFree(c);
            return -1;
        }
        freeReplyObject(rp);
    }
    out->sets_single = single / (now_s() - t);
    flushall(s);
    double mem0 = info(s, "used_memory");
    double cpu0 = redis_cpu(s), self0 = self_cpu();
    out->sets_pipe = poll_pipe(c, 1000);
    out->sets_client_us = (self_cpu() - self0) * 1e6 / (double)cfg.n;
    out->sets_redis_us = (redis_cpu(s) - cpu0) * 1e6 / (double)cfg.n;
    out->bytes_per_task = (info(s, "used_memory") - mem0) / (double)cfg.n;
    flushall(s);
    out->sets_pipe_big = poll_pipe(c, BIG_BATCH);
    redisFree(c);
    flushall(s);
    return out->sets_pipe > 0 && out->sets_pipe_big > 0 ? 0 : -1;
}

/* ---- workers ------------------------------------------------------------- */
struct crew {
    pid_t pid[2];
    pid_t pid_first[2]; /* as started (pid is zeroed once stopped) */
    char out[2][300], stats[2][300];
};

/* Two workers of kind k on server s, or on the servers of the comma list
 * `urls` when given (a cluster; s then names the directory of their files). */
static int crew_start_on(struct crew *w, const struct rfx_server *s, const char *urls, enum kind k,
                         const char *tag, unsigned lease_ms, unsigned exec_us)
{
    memset(w, 0, sizeof *w);
    char url[2048];
    if (urls)
        snprintf(url, sizeof url, "%s", urls);
    else
        kind_url(s, k, url, sizeof url);
    for (int i = 0; i < 2; i++) {
        snprintf(w->out[i], sizeof w->out[i], "%s/%s.%d.%d", s->dir, tag, (int)k, i);
        snprintf(w->stats[i], sizeof w->stats[i], "%s/%s.stats.%d.%d", s->dir, tag, (int)k, i);
        unlink(w->out[i]);
        unlink(w->stats[i]);
        struct rw_opts o = {.servers = url, .queue = "w7", .out = w->out[i],
                            .stats = w->stats[i], .lease_ms = lease_ms, .exec_us = exec_us};
        o.partitions = cfg.partitions; /* 0: the default */
        if (k == TWHEEL_TLS)
            o.tls_ca = tls_ca;
        else if (k != TWHEEL) {
            o.mode = "poll";
            o.interval_ms = k == POLL100 ? 100 : 1000;
        }
        if (rw_spawn(W7_WORKER_PATH, &o, &w->pid[i], NULL) != 0)
            return -1;
        w->pid_first[i] = w->pid[i];
    }
    return 0;
}

static int crew_start(struct crew *w, const struct rfx_server *s, enum kind k, const char *tag,
                      unsigned lease_ms, unsigned exec_us)
{
    return crew_start_on(w, s, NULL, k, tag, lease_ms, exec_us);
}

static uint64_t stat_of(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[128];
    uint64_t v = 0;
    size_t nl = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, nl) && line[nl] == ' ')
            v = strtoull(line + nl + 1, NULL, 10);
    fclose(f);
    return v;
}

static void crew_stop(struct crew *w)
{
    for (int i = 0; i < 2; i++)
        if (w->pid[i] > 0) {
            rw_stop(w->pid[i], 15000);
            w->pid[i] = 0;
        }
}

static uint64_t crew_load(const struct crew *w, struct rdel_set *d, uint64_t n)
{
    rdel_free(d);
    for (int i = 0; i < 2; i++)
        rdel_load(d, w->out[i], "order:", n);
    return rdel_count_ids(d, n);
}

/* Set n tasks, task i due at base_ms + off[i] (absolute, Redis clock) when
 * base_ms != 0, else at set time + off[i]. due_lo[i] gets the due time. */
static int set_tasks(const struct rfx_server *s, struct tw_redis *r, redisContext *zc, uint64_t n,
                     const uint64_t *off, uint64_t base_ms, uint64_t *due_lo)
{
    struct tw_redis_item *items = calloc(1000, sizeof *items);
    char *keys = malloc(1000 * 64);
    int rc = 0;
    if (!items || !keys) {
        rc = -1;
        goto out;
    }
    for (uint64_t i = 0; i < n && !rc; i += 1000) {
        size_t k = n - i < 1000 ? (size_t)(n - i) : 1000;
        uint64_t t0 = 0;
        rfx_time_us(s, &t0);
        t0 /= 1000u;
        for (size_t j = 0; j < k; j++) {
            uint64_t due = base_ms ? base_ms + off[i + j] : t0 + off[i + j];
            int64_t delay = due > t0 ? (int64_t)(due - t0) : 0;
            due_lo[i + j] = t0 + (uint64_t)delay;
            char *key = keys + j * 64;
            key_of(key, i + j);
            if (r) {
                items[j] = (struct tw_redis_item){key, 16, PAYLOAD, 32, delay};
            } else {
                strcat(key, "|" PAYLOAD);
                redisAppendCommand(zc, "ZADD w7:zset %" PRIu64 " %s", t0 + (uint64_t)delay, key);
            }
        }
        if (r) {
            if (tw_redis_set_many(r, items, k) != (int)k)
                rc = -1;
        } else {
            for (size_t j = 0; j < k; j++) {
                void *rp = NULL;
                if (redisGetReply(zc, &rp) != REDIS_OK) {
                    rc = -1;
                    break;
                }
                freeReplyObject(rp);
            }
        }
    }
out:
    free(items);
    free(keys);
    return rc;
}

/* Wait until the work is done by Redis's count, cheaply (re-reading the
 * delivery files while the workers run would take a core from them at 1e6):
 * twheel: nothing pending (every task acknowledged, its record written
 * before); the baseline: its sorted set empty (everything claimed), then the
 * records of the last batch (up to 2 s). Returns the time (s) when Redis said
 * done (or the deadline); *d holds the records afterwards. */
static double wait_all(const struct crew *w, struct tw_redis *r, redisContext *zc,
                       struct rdel_set *d, uint64_t n, double quiet_until, double deadline,
                       unsigned poll_ms)
{
    double done = 0;
    /* nothing can be done before the last due time: no polling until then
     * (twheel's stats are one HLEN round trip per partition, which every
     * 200 ms over a minute's spread were about a seventh of Redis's
     * wake-ups at 1e5, counted in twheel's Redis CPU) */
    while (now_s() < quiet_until)
        rfx_sleep_ms(poll_ms);
    for (;;) {
        double t = now_s();
        if (r) {
            struct tw_redis_stats st;
            if (tw_redis_stats(r, &st) == 0 && st.pending == 0) {
                done = t;
                break;
            }
        } else {
            redisReply *rp = redisCommand(zc, "ZCARD w7:zset");
            bool empty = rp && rp->type == REDIS_REPLY_INTEGER && rp->integer == 0;
            if (rp)
                freeReplyObject(rp);
            if (empty) {
                done = t;
                break;
            }
        }
        if (t > deadline)
            break;
        rfx_sleep_ms(poll_ms);
    }
    if (!done)
        done = now_s();
    double until = now_s() + 2.0;
    while (crew_load(w, d, n) < n && now_s() < until)
        rfx_sleep_ms(100);
    return done;
}

static int one_run(const struct rfx_server *s, enum kind k, bool burst, struct row *row)
{
    const uint64_t n = cfg.n;
    uint64_t *off = malloc(n * sizeof *off), *due = calloc(n, sizeof *due);
    struct tw_redis *r = NULL;
    redisContext *zc = NULL;
    struct crew w;
    struct rdel_set d = {0};
    int rc = -1;
    if (!off || !due)
        goto out;
    flushall(s);
    bool tw = k == TWHEEL || k == TWHEEL_TLS;
    r = tw ? client_new(s, k) : NULL;
    zc = tw ? NULL : rfx_connect(s);
    if (!r && !zc)
        goto out;
    if (crew_start(&w, s, k, burst ? "burst" : "spread", 0, cfg.exec_us))
        goto out;
    rfx_sleep_ms(300); /* workers connected */
    srand(42);
    uint64_t base = 0;
    if (burst) {
        /* all due at one instant, after the sets (at >= 20k/s) are done */
        uint64_t t0 = 0;
        rfx_time_us(s, &t0);
        base = t0 / 1000u + 1000 + n / 20;
        for (uint64_t i = 0; i < n; i++)
            off[i] = 0;
    } else {
        for (uint64_t i = 0; i < n; i++)
            off[i] = cfg.min_ms + (uint64_t)rand() % (cfg.max_ms - cfg.min_ms + 1);
    }
    double cpu0 = redis_cpu(s), calls0, us0;
    double cmd0 = info(s, "total_commands_processed"), aof0 = info(s, "aof_current_size");
    double ev0 = info(s, "total_net_input_bytes");
    script_calls(s, &calls0, &us0);
    struct cstats cs0, cs1;
    cstats_read(s, &cs0);
    double t_set0 = now_s();
    if (set_tasks(s, r, zc, n, off, base, due)) {
        fprintf(stderr, "w7: setting tasks failed\n");
        crew_stop(&w);
        goto out;
    }
    double cpu_set = redis_cpu(s), t_set1 = now_s(); /* the sets' share of Redis CPU */
    double deadline = now_s() + (double)(burst ? 2000 + n / 20 : cfg.max_ms) / 1000.0 + 60.0;
    double quiet = burst ? 0 : t_set0 + (double)cfg.max_ms / 1000.0;
    /* The burst's end is timed to 10 ms; the spread run only waits for the
     * end, and polls every 200 ms: twheel's stats cost one HLEN per
     * partition (16 round trips), which every 10 ms was about as many
     * commands as the workers sent, and counted in Redis CPU. */
    double done_at = wait_all(&w, r, zc, &d, n, quiet, deadline, burst ? 10 : 200);
    double cpu1 = redis_cpu(s), calls1, us1;
    script_calls(s, &calls1, &us1);
    cstats_read(s, &cs1);
    if (cfg.spread_only)
        printf("w7: per task: %.2f commands, %.0f AOF bytes, %.0f bytes in\n",
               (info(s, "total_commands_processed") - cmd0) / (double)n,
               (info(s, "aof_current_size") - aof0) / (double)n,
               (info(s, "total_net_input_bytes") - ev0) / (double)n);
    crew_stop(&w);
    crew_load(&w, &d, n);
    struct rverdict v;
    if (rverdict_compute(&d, n, NULL, due, 30000, 2000, &v))
        goto out;
    char label[64];
    snprintf(label, sizeof label, "%s %s", kind_name[k], burst ? "burst" : "spread");
    rverdict_print(&v, label);
    if (w.pid_first[0] && d.n) { /* each worker's share: a worker that claims first must not take all */
        uint64_t mine = 0;
        for (size_t i = 0; i < d.n; i++)
            mine += d.v[i].pid == w.pid_first[0];
        /* and over time: the 100 ms spans of due times one worker ran alone (>= 90%) */
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < d.n; i++) {
            lo = d.v[i].due_ms < lo ? d.v[i].due_ms : lo;
            hi = d.v[i].due_ms > hi ? d.v[i].due_ms : hi;
        }
        size_t nb = (size_t)((hi - lo) / 100 + 1), alone = 0, busy = 0;
        uint32_t(*bin)[2] = calloc(nb, sizeof *bin);
        if (bin) {
            for (size_t i = 0; i < d.n; i++)
                bin[(d.v[i].due_ms - lo) / 100][d.v[i].pid == w.pid_first[0]]++;
            for (size_t b = 0; b < nb; b++) {
                uint32_t t = bin[b][0] + bin[b][1];
                if (t < 20)
                    continue;
                busy++;
                alone += bin[b][0] * 10 >= t * 9 || bin[b][1] * 10 >= t * 9;
            }
            free(bin);
        }
        if (getenv("W7_SHARES_DUMP")) {
            FILE *df = fopen(getenv("W7_SHARES_DUMP"), "w");
            for (size_t i = 0; df && i < d.n; i++)
                fprintf(df, "%d %" PRIu64 " %" PRIu64 "\n", d.v[i].pid == w.pid_first[0],
                        d.v[i].due_ms, d.v[i].start_us);
            if (df)
                fclose(df);
        }
        printf("%s: worker shares %.1f%% / %.1f%%; one worker ran >= 90%% of %zu of %zu 100 ms spans\n",
               label, 100.0 * (double)mine / (double)d.n, 100.0 * (double)(d.n - mine) / (double)d.n,
               alone, busy);
    }
    if (burst) {
        double span = done_at - (double)base / 1000.0;
        row->delivered_per_s = span > 0 ? (double)n / span : 0;
    } else {
        row->p50_ms = v.late_p50_us / 1000.0;
        row->p99_ms = v.late_p99_us / 1000.0;
        row->max_ms = v.late_max_us / 1000.0;
        row->cpu_per_1e5 = (cpu1 - cpu0) * 1e5 / (double)n;
        row->calls_per_task = (calls1 - calls0) / (double)n;
        row->script_us_per_task = (us1 - us0) / (double)n;
        row->spread_missing = v.missing;
        row->spread_dups = v.duplicates;
        cstats_diff(&cs0, &cs1, (double)n, row->cmds, sizeof row->cmds);
        printf("%s: per task (INFO commandstats, sets included): %s\n", label, row->cmds);
        /* the sets end before the first task is due (min_ms, 1 s by default), so Redis's CPU
         * splits into theirs and the delivery's (claim, start, acknowledge) */
        printf("%s: Redis CPU per task: %.1f us while setting (%.2f s), %.1f us after\n", label,
               (cpu_set - cpu0) * 1e6 / (double)n, t_set1 - t_set0,
               (cpu1 - cpu_set) * 1e6 / (double)n);
        if (k == TWHEEL || k == TWHEEL_TLS)
            row->claims = stat_of(w.stats[0], "claims") + stat_of(w.stats[1], "claims");
        /* where the tail comes from: tasks set less than a window (2 s) before
         * their due time reach a worker through a notification, the others
         * through the periodic refill */
        bool *near = malloc(n * sizeof *near);
        if (near) {
            struct rverdict vn, vf;
            for (uint64_t i = 0; i < n; i++)
                near[i] = off[i] < 2000;
            rverdict_compute(&d, n, near, NULL, 30000, 2000, &vn);
            for (uint64_t i = 0; i < n; i++)
                near[i] = !near[i];
            rverdict_compute(&d, n, near, NULL, 30000, 2000, &vf);
            printf("%s: lateness p50/p99/max of tasks set < 2 s before due (%" PRIu64
                   "): %.2f/%.2f/%.2f ms; the others (%" PRIu64 "): %.2f/%.2f/%.2f ms\n",
                   label, vn.expected, vn.late_p50_us / 1000.0, vn.late_p99_us / 1000.0,
                   vn.late_max_us / 1000.0, vf.expected, vf.late_p50_us / 1000.0,
                   vf.late_p99_us / 1000.0, vf.late_max_us / 1000.0);
            free(near);
        }
    }
    row->early += v.early;
    row->lost += v.missing;
    rc = 0;
out:
    rdel_free(&d);
    free(off);
    free(due);
    tw_redis_free(r);
    if (zc)
        redisFree(zc);
    return rc;
}

/* Phase 4: SIGKILL one of two workers 2 s into a run of tasks due in 0.5-5 s. */
static int kill_run(const struct rfx_server *s, enum kind k, struct row *row)
{
    const uint64_t n = cfg.n / 5 < 20000 ? cfg.n / 5 : 20000;
    uint64_t *off = malloc(n * sizeof *off), *due = calloc(n, sizeof *due);
    struct tw_redis *r = NULL;
    redisContext *zc = NULL;
    struct crew w;
    struct rdel_set d = {0};
    int rc = -1;
    if (!off || !due)
        goto out;
    flushall(s);
    bool tw = k == TWHEEL || k == TWHEEL_TLS;
    r = tw ? client_new(s, k) : NULL;
    zc = tw ? NULL : rfx_connect(s);
    if ((!r && !zc) || crew_start(&w, s, k, "kill", KILL_LEASE_MS, KILL_EXEC_US))
        goto out;
    rfx_sleep_ms(300);
    srand(9);
    for (uint64_t i = 0; i < n; i++)
        off[i] = 500 + (uint64_t)rand() % 4500;
    if (set_tasks(s, r, zc, n, off, 0, due)) {
        crew_stop(&w);
        goto out;
    }
    rfx_sleep_ms(2000);
    rfx_signal(w.pid[0], SIGKILL);
    rfx_wait(w.pid[0], 5000, NULL);
    w.pid[0] = 0;
    /* the baseline never gets back what the dead poller claimed: bound the wait */
    wait_all(&w, r, zc, &d, n, 0, now_s() + (k == TWHEEL ? 30.0 : 8.0), 10);
    crew_stop(&w);
    crew_load(&w, &d, n);
    struct rverdict v;
    if (rverdict_compute(&d, n, NULL, due, KILL_LEASE_MS, 2000, &v))
        goto out;
    char label[64];
    snprintf(label, sizeof label, "%s kill", kind_name[k]);
    rverdict_print(&v, label);
    row->have_kill = true;
    row->kill_lost = v.missing;
    row->kill_dups = v.duplicates;
    row->kill_unexplained = v.unexplained;
    row->early += v.early;
    rc = 0;
out:
    rdel_free(&d);
    free(off);
    free(due);
    tw_redis_free(r);
    if (zc)
        redisFree(zc);
    return rc;
}

/* ---- report ---------------------------------------------------------------- */
static void emit(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (f) {
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
    }
}

/* ---- scale rows: each kind's sets, memory and spread at N ------------------ */
static int scale_run(uint64_t n)
{
    if (nscales == NSCALES)
        return -1;
    uint64_t keep = cfg.n;
    cfg.n = n;
    struct row *r = scales[nscales].r;
    memset(r, 0, NKINDS * sizeof *r);
    scales[nscales++].n = n;
    printf("w7: scale row N = %" PRIu64 ": sets and memory\n", n);
    int rc = twheel_sets(&srv_main, TWHEEL, &r[TWHEEL]) | poll_sets(&srv_main, &r[POLL100]);
    r[POLL1000].sets_pipe = r[POLL100].sets_pipe;
    r[POLL1000].bytes_per_task = r[POLL100].bytes_per_task;
    for (int k = 0; k < TWHEEL_TLS && !rc; k++) {
        printf("w7: scale row N = %" PRIu64 ": %s spread\n", n, kind_name[k]);
        rc |= one_run(&srv_main, (enum kind)k, false, &r[k]);
    }
    cfg.n = keep;
    return rc;
}

static void scale_table(FILE *f)
{
    emit(f, "\n### Scale rows: N tasks due uniformly over %" PRIu64 "-%" PRIu64
             " ms, 2 workers, defaults%s\n\n",
          cfg.min_ms, cfg.max_ms, cfg.no_rewrite ? ", no automatic AOF rewrite" : "");
    emit(f, "| N | kind | lateness p50 / p99 / max, ms | Redis CPU us per delivered task "
             "(its set included) | x poll 100 ms | x poll 1 s | Redis B per pending task | "
             "sets/s pipelined | early / lost / duplicates |\n");
    emit(f, "|---|---|--:|--:|--:|--:|--:|--:|--:|\n");
    for (int i = 0; i < nscales; i++)
        for (int k = 0; k < TWHEEL_TLS; k++) {
            const struct row *r = &scales[i].r[k];
            double us = r->cpu_per_1e5 * 10, p1 = scales[i].r[POLL100].cpu_per_1e5 * 10;
            double p2 = scales[i].r[POLL1000].cpu_per_1e5 * 10;
            emit(f, "| %.0e | %s | %.2f / %.2f / %.2f | %.1f | %.2f | %.2f | %.0f | %.0f | %" PRIu64
                     " / %" PRIu64 " / %" PRIu64 " |\n",
                  (double)scales[i].n, kind_name[k], r->p50_ms, r->p99_ms, r->max_ms, us,
                  p1 > 0 ? us / p1 : 0, p2 > 0 ? us / p2 : 0, r->bytes_per_task, r->sets_pipe,
                  r->early, r->spread_missing, r->spread_dups);
        }
    emit(f, "\nINFO commandstats per delivered task (calls, usec), twheel's spread runs:\n");
    for (int i = 0; i < nscales; i++)
        emit(f, "- %.0e: %s\n", (double)scales[i].n, scales[i].r[TWHEEL].cmds);
}

/* ---- a local cluster: the work per task on each master ------------------- */
uint64_t tw_rr_hash_of(const void *key, size_t len); /* src/redis/keys.c: a key's partition hash */

/* twheel's spread run of cfg.n tasks on a local cluster of cfg.cluster
 * masters (AOF everysec): per master its partitions, the tasks of those, its
 * Redis CPU and INFO commandstats per such task, and tasks/s per Redis core
 * (1 / CPU per task). Printed, and written to cfg.out when given. */
static int cluster_run(void)
{
    struct rfx_cluster cl;
    struct rfx_options o = {.appendonly = true, .appendfsync = cfg.fsync};
    if (rfx_cluster_start_opts(&cl, cfg.cluster, &o))
        return -1;
    const uint64_t n = cfg.n;
    const unsigned parts = 16; /* the default (client_of leaves it) */
    uint64_t *off = malloc(n * sizeof *off), *due = calloc(n, sizeof *due);
    char urls[2048] = "";
    struct tw_redis *r = NULL;
    struct crew w;
    struct rdel_set d = {0};
    int rc = -1;
    double cpu0[RFX_CLUSTER_MAX], cpu1[RFX_CLUSTER_MAX];
    static struct cstats cs0[RFX_CLUSTER_MAX], cs1[RFX_CLUSTER_MAX];
    uint64_t tasks[RFX_CLUSTER_MAX] = {0}, nparts[RFX_CLUSTER_MAX] = {0};
    int owner[256];
    if (!off || !due)
        goto out;
    for (size_t i = 0; i < cl.n; i++)
        snprintf(urls + strlen(urls), sizeof urls - strlen(urls), "%s%s", i ? "," : "",
                 cl.addrs[i]);
    r = client_of(cl.addrs, cl.n, NULL);
    if (!r || crew_start_on(&w, &cl.node[0], urls, TWHEEL, "cluster", 0, 0))
        goto out;
    for (unsigned p = 0; p < parts; p++) {
        char tag[32];
        int l = snprintf(tag, sizeof tag, "{w7:%u}", p);
        owner[p] = rfx_cluster_owner(&cl, rfx_key_slot(tag, (size_t)l));
        if (owner[p] >= 0)
            nparts[owner[p]]++;
    }
    for (uint64_t i = 0; i < n; i++) {
        char key[24];
        key_of(key, i);
        int m = owner[tw_rr_hash_of(key, 16) % parts];
        if (m >= 0)
            tasks[m]++;
    }
    rfx_sleep_ms(500); /* workers connected */
    srand(42);
    for (uint64_t i = 0; i < n; i++)
        off[i] = cfg.min_ms + (uint64_t)rand() % (cfg.max_ms - cfg.min_ms + 1);
    for (size_t i = 0; i < cl.n; i++) {
        cpu0[i] = redis_cpu(&cl.node[i]);
        cstats_read(&cl.node[i], &cs0[i]);
    }
    double t_set0 = now_s();
    if (set_tasks(&cl.node[0], r, NULL, n, off, 0, due)) {
        crew_stop(&w);
        goto out;
    }
    wait_all(&w, r, NULL, &d, n, t_set0 + (double)cfg.max_ms / 1000.0,
             now_s() + (double)cfg.max_ms / 1000.0 + 60.0, 200);
    for (size_t i = 0; i < cl.n; i++) {
        cpu1[i] = redis_cpu(&cl.node[i]);
        cstats_read(&cl.node[i], &cs1[i]);
    }
    crew_stop(&w);
    crew_load(&w, &d, n);
    struct rverdict v;
    if (rverdict_compute(&d, n, NULL, due, 30000, 2000, &v))
        goto out;
    rverdict_print(&v, "twheel cluster spread");
    FILE *f = cfg.out ? fopen(cfg.out, "w") : NULL;
    emit(f, "\n### twheel on a local cluster of %zu masters: %" PRIu64 " tasks due over %" PRIu64
            "-%" PRIu64 " ms, 2 workers, defaults (16 partitions)\n\n",
         cl.n, n, cfg.min_ms, cfg.max_ms);
    emit(f, "lateness p50 / p99 / max %.2f / %.2f / %.2f ms; early %" PRIu64 ", lost %" PRIu64
            ", duplicates %" PRIu64 "\n\n",
         v.late_p50_us / 1000.0, v.late_p99_us / 1000.0, v.late_max_us / 1000.0, v.early,
         v.missing, v.duplicates);
    emit(f, "| master | partitions | tasks | Redis CPU us per task of its partitions | tasks/s "
            "per Redis core | INFO commandstats per task |\n|---|--:|--:|--:|--:|---|\n");
    for (size_t i = 0; i < cl.n; i++) {
        char cmds[512];
        double t = tasks[i] ? (double)tasks[i] : 1;
        cstats_diff(&cs0[i], &cs1[i], t, cmds, sizeof cmds);
        double us = (cpu1[i] - cpu0[i]) * 1e6 / t;
        emit(f, "| %zu | %" PRIu64 " | %" PRIu64 " | %.1f | %.0f | %s |\n", i, nparts[i],
             tasks[i], us, us > 0 ? 1e6 / us : 0, cmds);
    }
    if (f)
        fclose(f);
    rc = v.missing || v.early ? -1 : 0;
out:
    rdel_free(&d);
    free(off);
    free(due);
    tw_redis_free(r);
    rfx_cluster_stop(&cl);
    return rc;
}

static void ratio_cell(char *buf, size_t len, double tw, double base, bool higher_better)
{
    if (base <= 0 || tw <= 0) {
        snprintf(buf, len, "-");
        return;
    }
    double r = tw / base;
    snprintf(buf, len, "%.2fx%s", r, (higher_better ? r >= 1 : r <= 1) ? "" : " (loses)");
}

static void report(double elapsed)
{
    FILE *f = cfg.out ? fopen(cfg.out, "w") : NULL;
    const struct row *t = &rows[TWHEEL], *p1 = &rows[POLL100], *p2 = &rows[POLL1000];
    emit(f, "\n## W7 durable: twheel's Redis layer vs a polling sorted set\n\n");
    emit(f, "redis-server 7.0 on 127.0.0.1 (AOF on, appendfsync %s; kill run: always), "
            "N = %" PRIu64 " tasks \"order:<10 digits>\" (16-byte keys), 32-byte payloads, "
            "delays uniform %" PRIu64 "-%" PRIu64 " ms, 2 worker processes; run took %.0f s. "
            "Ratios: twheel / baseline.\n\n",
         cfg.fsync, cfg.n, cfg.min_ms, cfg.max_ms, elapsed);
    emit(f, "| metric | twheel | poll 100 ms | poll 1 s | vs 100 ms | vs 1 s |\n");
    emit(f, "|---|---:|---:|---:|---:|---:|\n");
    char a[48], b[48];
#define ROW(name, fmt, field, hb)                                                      \
    do {                                                                               \
        ratio_cell(a, sizeof a, t->field, p1->field, hb);                              \
        ratio_cell(b, sizeof b, t->field, p2->field, hb);                              \
        emit(f, "| %s | " fmt " | " fmt " | " fmt " | %s | %s |\n", name, t->field,    \
             p1->field, p2->field, a, b);                                              \
    } while (0)
    ROW("sets/s, one by one (1 thread)", "%.0f", sets_single, true);
    ROW("sets/s, pipelined (1 thread)", "%.0f", sets_pipe, true);
    ROW("sets/s, pipelined in batches of 10,000", "%.0f", sets_pipe_big, true);
    ROW("delivered/s end to end (burst, 2 workers)", "%.0f", delivered_per_s, true);
    ROW("lateness p50 (ms)", "%.2f", p50_ms, false);
    ROW("lateness p99 (ms)", "%.2f", p99_ms, false);
    ROW("lateness max (ms)", "%.2f", max_ms, false);
    ROW("Redis CPU s per 1e5 tasks (spread run)", "%.3f", cpu_per_1e5, false);
    ROW("Redis bytes per pending task", "%.0f", bytes_per_task, false);
#undef ROW
    emit(f, "| early deliveries (must be 0) | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | | |\n",
         t->early, p1->early, p2->early);
    emit(f, "| lost without a kill (must be 0) | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | | |\n",
         t->lost, p1->lost, p2->lost);
    emit(f, "| SIGKILLed worker: lost | %" PRIu64 " | %" PRIu64 " | %" PRIu64 " | | |\n",
         t->kill_lost, p1->kill_lost, p2->kill_lost);
    emit(f, "| SIGKILLed worker: delivered twice | %" PRIu64 " (%" PRIu64
            " before a lease ran out) | %" PRIu64 " | %" PRIu64 " | | |\n",
         t->kill_dups, t->kill_unexplained, p1->kill_dups, p2->kill_dups);
    emit(f, "\ntwheel claim calls during the spread run: %" PRIu64 " (both workers).\n",
         t->claims);
    const struct row *ts = &rows[TWHEEL_TLS];
    if (!cfg.no_tls) {
        emit(f, "\n### twheel over TLS (rediss://, TLS 1.3, EC P-256 certificates) vs plain, "
                "same server, same run\n\n");
        emit(f, "| metric | plain | TLS | TLS / plain |\n|---|---:|---:|---:|\n");
#define TROW(name, fmt, field)                                                                  \
    emit(f, "| %s | " fmt " | " fmt " | %.2fx |\n", name, t->field, ts->field,                  \
         t->field > 0 ? ts->field / t->field : 0)
        TROW("sets/s, one by one (1 thread)", "%.0f", sets_single);
        TROW("sets/s, pipelined (1 thread)", "%.0f", sets_pipe);
        TROW("sets/s, pipelined in batches of 10,000", "%.0f", sets_pipe_big);
        TROW("delivered/s end to end (burst, 2 workers)", "%.0f", delivered_per_s);
        TROW("lateness p50 (ms)", "%.2f", p50_ms);
        TROW("lateness p99 (ms)", "%.2f", p99_ms);
        TROW("Redis CPU s per 1e5 tasks (spread run)", "%.3f", cpu_per_1e5);
#undef TROW
        emit(f, "| early / lost (must be 0) | %" PRIu64 " / %" PRIu64 " | %" PRIu64 " / %" PRIu64
                " | |\n\n",
             t->early, t->lost, ts->early, ts->lost);
    }
    emit(f, "Script calls per task in the spread run (sets, claims, starts, acks; INFO "
            "commandstats): twheel %.2f (%.1f us of script time), poll 100 ms %.2f, poll 1 s "
            "%.2f.\n",
         t->calls_per_task, t->script_us_per_task, p1->calls_per_task, p2->calls_per_task);
    emit(f, "\nTargets (2-core machine, Redis included):\n");
    emit(f, "- lateness p99 <= 1 tick + 5 ms = 6 ms: %s (%.2f ms)\n",
         t->p99_ms <= 6.0 ? "reached" : "NOT reached", t->p99_ms);
    emit(f, "- >= 100k sets/s pipelined: in batches of 1,000 %s (%.0f/s); of 10,000 %s (%.0f/s)\n",
         t->sets_pipe >= 100000 ? "reached" : "NOT reached", t->sets_pipe,
         t->sets_pipe_big >= 100000 ? "reached" : "NOT reached", t->sets_pipe_big);
    emit(f, "- >= 20k delivered/s with 2 workers: %s (%.0f/s)\n",
         t->delivered_per_s >= 20000 ? "reached" : "NOT reached", t->delivered_per_s);
    emit(f, "- <= 200 B per pending task: %s (%.0f B)\n",
         t->bytes_per_task <= 200 ? "reached" : "NOT reached", t->bytes_per_task);
    emit(f, "- SIGKILLed worker, lost = 0: %s (%" PRIu64 ")\n",
         t->have_kill && t->kill_lost == 0 ? "reached" : "NOT reached", t->kill_lost);
    if (nscales)
        scale_table(f);
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--quick")) {
            cfg.n = 20000;
            cfg.min_ms = 1000;
            cfg.max_ms = 8000;
        } else if (!strcmp(a, "--n") && *v) {
            cfg.n = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--min-ms") && *v) {
            cfg.min_ms = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--max-ms") && *v) {
            cfg.max_ms = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--fsync") && *v) {
            cfg.fsync = v;
            i++;
        } else if (!strcmp(a, "--pipe-only")) {
            cfg.sets_only = cfg.pipe_only = true;
        } else if (!strcmp(a, "--sets-only")) {
            cfg.sets_only = true;
        } else if (!strcmp(a, "--spread-only")) {
            cfg.spread_only = true;
        } else if (!strcmp(a, "--out") && *v) {
            cfg.out = v;
            i++;
        } else if (!strcmp(a, "--auth")) {
            cfg.auth = true;
        } else if (!strcmp(a, "--unix")) {
            cfg.via_unix = true;
        } else if (!strcmp(a, "--no-tls")) {
            cfg.no_tls = true;
        } else if (!strcmp(a, "--scale-only")) {
            cfg.scale_only = true;
        } else if (!strcmp(a, "--million")) {
            cfg.million = true;
        } else if (!strcmp(a, "--cluster") && *v) {
            cfg.cluster = (unsigned)strtoul(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--partitions") && *v) {
            cfg.partitions = (unsigned)strtoul(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--no-aof-rewrite")) {
            cfg.no_rewrite = true;
        } else if (!strcmp(a, "--exec-us") && *v) {
            cfg.exec_us = (unsigned)strtoul(v, NULL, 10);
            i++;
        } else {
            fprintf(stderr, "usage: w7_redis [--quick] [--n N] [--min-ms A] [--max-ms B] "
                            "[--fsync everysec|always] [--sets-only] [--pipe-only] [--spread-only] [--out FILE] "
                            "[--auth] [--unix] [--no-tls] [--scale-only] [--million] [--cluster M] "
                            "[--partitions P] [--exec-us N] [--no-aof-rewrite]\n");
            return 2;
        }
    }
    if (cfg.n < 1000 || cfg.max_ms < cfg.min_ms) {
        fprintf(stderr, "w7: N >= 1000 and min <= max, please\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines, also into a log */
    rfx_cleanup_on_signals();
    if (cfg.cluster)
        return cluster_run() ? 1 : 0;
    double t0 = now_s();
    struct rfx_server always;
    const char *pass = cfg.auth ? "w7@secret" : NULL;
    struct rfx_options o = {.appendonly = true, .appendfsync = cfg.fsync,
                            .unix_socket = cfg.via_unix, .password = pass};
    struct rfx_options oa = {.appendonly = true, .appendfsync = "always",
                             .unix_socket = cfg.via_unix, .password = pass};
    if (cfg.pipe_only || cfg.spread_only || cfg.scale_only) /* plain twheel alone */
        cfg.no_tls = true;
    if (!cfg.no_tls) {
        if (rfx_tls_make(&tls) != 0)
            return 1;
        rfx_tls_path(&tls, "ca.crt", tls_ca, sizeof tls_ca);
        o.tls_dir = tls.dir;
    }
    if (rfx_start(&srv_main, &o) || rfx_start(&always, &oa))
        return 1;
    if (cfg.no_rewrite && (rfx_command(&srv_main, "CONFIG SET auto-aof-rewrite-percentage 0") ||
                           rfx_command(&always, "CONFIG SET auto-aof-rewrite-percentage 0")))
        return 1;
    char url[512], shown[512];
    tw_rr_url_redact(rfx_url(&srv_main, cfg.via_unix, url, sizeof url), shown, sizeof shown);
    printf("w7: redis-server at %s (appendfsync %s) and %s (always); N = %" PRIu64
           "; connections to %s\n",
           rfx_addr(&srv_main), cfg.fsync, rfx_addr(&always), cfg.n, shown);
    int rc = 0;
    if (cfg.spread_only) {
        rc = one_run(&srv_main, TWHEEL, false, &rows[TWHEEL]);
        printf("w7: twheel spread: p50/p99/max %.2f/%.2f/%.2f ms, Redis CPU %.3f s per 1e5 "
               "tasks, %.2f script calls per task (%.1f us in scripts), %" PRIu64
               " claim calls, early %" PRIu64 ", lost %" PRIu64 "\n",
               rows[TWHEEL].p50_ms, rows[TWHEEL].p99_ms, rows[TWHEEL].max_ms,
               rows[TWHEEL].cpu_per_1e5, rows[TWHEEL].calls_per_task,
               rows[TWHEEL].script_us_per_task, rows[TWHEEL].claims, rows[TWHEEL].early,
               rows[TWHEEL].lost);
        rfx_stop(&srv_main);
        rfx_stop(&always);
        return rc ? 1 : 0;
    }
    if (cfg.scale_only) {
        rc = scale_run(cfg.n);
        if (!rc && cfg.million && cfg.n != 1000000)
            rc = scale_run(1000000);
        rfx_stop(&srv_main);
        rfx_stop(&always);
        FILE *f = cfg.out ? fopen(cfg.out, "w") : NULL;
        scale_table(f);
        if (f)
            fclose(f);
        return rc ? 1 : 0;
    }
    printf("w7: phase 1, sets and memory\n");
    rc |= twheel_sets(&srv_main, TWHEEL, &rows[TWHEEL]);
    if (!cfg.no_tls && !cfg.pipe_only)
        rc |= twheel_sets(&srv_main, TWHEEL_TLS, &rows[TWHEEL_TLS]);
    if (!cfg.pipe_only)
        rc |= poll_sets(&srv_main, &rows[POLL100]);
    rows[POLL1000].sets_single = rows[POLL100].sets_single;
    rows[POLL1000].sets_pipe = rows[POLL100].sets_pipe;
    rows[POLL1000].sets_pipe_big = rows[POLL100].sets_pipe_big;
    rows[POLL1000].sets_redis_us = rows[POLL100].sets_redis_us;
    rows[POLL1000].sets_client_us = rows[POLL100].sets_client_us;
    rows[POLL1000].bytes_per_task = rows[POLL100].bytes_per_task;
    if (cfg.sets_only) {
        for (int k = 0; k < (cfg.pipe_only ? 1 : NKINDS); k += k == TWHEEL ? 2 : 1)
            printf("w7: %s: %.0f sets/s single, %.0f sets/s pipelined (CPU us per set: Redis "
                   "%.2f, scripts %.2f, client %.2f), %.0f in batches of 10,000, %.1f B per "
                   "pending task\n",
                   kind_name[k], rows[k].sets_single, rows[k].sets_pipe, rows[k].sets_redis_us,
                   rows[k].sets_script_us, rows[k].sets_client_us, rows[k].sets_pipe_big,
                   rows[k].bytes_per_task);
        printf("w7: twheel pipelined, per set: %.4f script calls, %.2f commands, %.0f AOF "
               "bytes, %.0f bytes in\n",
               rows[TWHEEL].sets_calls, rows[TWHEEL].sets_cmds, rows[TWHEEL].sets_aof,
               rows[TWHEEL].sets_in);
        rfx_stop(&srv_main);
        rfx_stop(&always);
        return rc ? 1 : 0;
    }
    for (int i = 0; i < NKINDS && !rc; i++) {
        enum kind k = run_order[i];
        if (k == TWHEEL_TLS && cfg.no_tls)
            continue;
        printf("w7: %s, burst then spread (%" PRIu64 "-%" PRIu64 " ms)\n", kind_name[k],
               cfg.min_ms, cfg.max_ms);
        rc |= one_run(&srv_main, k, true, &rows[k]);
        rc |= one_run(&srv_main, k, false, &rows[k]);
    }
    for (int k = 0; k < TWHEEL_TLS && !rc; k++) { /* no TLS kill run: the same code path */
        printf("w7: %s, a worker SIGKILLed (appendfsync always)\n", kind_name[k]);
        rc |= kill_run(&always, (enum kind)k, &rows[k]);
    }
    if (!rc) { /* the scale row of N from the phases above */
        scales[nscales].n = cfg.n;
        memcpy(scales[nscales++].r, rows, sizeof rows);
    }
    if (!rc && cfg.million && cfg.n != 1000000)
        rc = scale_run(1000000);
    rfx_stop(&srv_main);
    rfx_stop(&always);
    if (rc) {
        fprintf(stderr, "w7: a phase failed\n");
        return 1;
    }
    report(now_s() - t0);
    return 0;
}
