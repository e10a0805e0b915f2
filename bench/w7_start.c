/* SPDX-License-Identifier: MIT */
/* w7_start: what one START script call costs Redis, split into its part per
 * call and its part per task started.
 *
 * A worker starts the tasks of each start_ahead_ms / 2 span in one START
 * call (src/redis/start.c), so in W7 a call starts few tasks at low density
 * and many at high density; what a task costs then depends on how the call's
 * cost splits. This program measures it on its own redis-server (the test
 * fixture: a free port, a temporary directory, AOF with appendfsync
 * everysec, as W7): it fills a partition with N records (16-byte keys,
 * 32-byte payloads, due a second ago, token 5) and their leases, then makes
 * calls one by one, as a worker does, each starting k keys drawn at random
 * (the records' HASH and the lease ZSET are N large: every start misses in
 * both), and divides the server's CPU (INFO used_cpu_sys + used_cpu_user)
 * by the calls. The same call of a script that returns at once (same
 * arguments as k = 8) gives the cost of a round trip with its arguments.
 * Rounds alternate the kinds; medians are printed, and a line fit over k:
 *
 *     cost(k) ~ per_call + k * per_start
 *
 * Usage: w7_start [--n N] [--calls C] [--rounds R]
 * (defaults 100000, 4000, 3). Needs redis-server (PATH or $RFX_REDIS_SERVER).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench_util.h" /* xorshift64, median */
#include "fixture.h"
#include "w7_probe.h"       /* w7_load, w7_server_cpu */
#include "redis/internal.h" /* tw_rr_scripts: the START the library sends */

#define KMAX 32
static const int kinds[] = {0, 1, 8, 32}; /* 0: the script that returns at once */
#define NKINDS (sizeof kinds / sizeof kinds[0])

/* C calls, each starting k random keys (k = 0: the no-op with 8 keys' arguments). */
static int run(redisContext *c, const struct rfx_server *s, const char *sha, const char *nop,
               int k, uint64_t n, int calls, uint64_t *rng, double *us_per_call)
{
    int nk = k ? k : 8;
    const char *av[3 + 7 + 2 * KMAX];
    size_t al[3 + 7 + 2 * KMAX];
    char keys[KMAX][24] = {{0}}; /* drawn per call, below */
    int na = 0;
    av[na++] = "EVALSHA";
    av[na++] = k ? sha : nop;
    av[na++] = "0";
    av[na++] = "30000"; /* lease_ms */
    av[na++] = "10000"; /* ahead_us */
    av[na++] = "{q:0}:leases";
    av[na++] = "{q:0}:task";
    av[na++] = "0"; /* acknowledgements */
    char ns[8];
    snprintf(ns, sizeof ns, "%d", nk);
    av[na++] = ns;
    av[na++] = "0"; /* until: no acknowledgements */
    int first_key = na;
    for (int j = 0; j < nk; j++) {
        av[na++] = keys[j]; /* the lease member, key:token */
        av[na++] = "1";     /* due: long past (the lease then ends at now + lease_ms) */
    }
    for (int i = 0; i < na; i++)
        al[i] = strlen(av[i]);
    double a, b;
    if (w7_server_cpu(s, &a))
        return -1;
    for (int i = 0; i < calls; i++) {
        for (int j = 0; j < nk; j++) { /* distinct within a call: consecutive from a draw */
            uint64_t id = xorshift64(rng) % (n - (uint64_t)nk) + (uint64_t)j;
            snprintf(keys[j], sizeof keys[j], "k:%013" PRIu64 ":5", id);
            al[first_key + 2 * j] = 17;
        }
        redisReply *r = redisCommandArgv(c, na, av, al);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "w7_start: call failed: %s\n", r && r->str ? r->str : "no reply");
            freeReplyObject(r);
            return -1;
        }
        if (k && r->elements != 1 + 2 * (size_t)k) {
            fprintf(stderr, "w7_start: START answered %zu elements\n", r->elements);
            freeReplyObject(r);
            return -1;
        }
        for (size_t e = 1; k && e < r->elements; e += 2)
            if (r->element[e]->type != REDIS_REPLY_INTEGER || r->element[e]->integer != 1) {
                fprintf(stderr, "w7_start: a start was not granted\n");
                freeReplyObject(r);
                return -1;
            }
        freeReplyObject(r);
    }
    if (w7_server_cpu(s, &b))
        return -1;
    *us_per_call = (b - a) * 1e6 / calls;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t n = 100000;
    int calls = 4000, rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
            calls = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: w7_start [--n N] [--calls C] [--rounds R]\n");
            return 2;
        }
    }
    if (n < 1000 || calls < 1 || rounds < 1 || rounds > 99) {
        fprintf(stderr, "w7_start: --n >= 1000, --calls >= 1, --rounds 1..99\n");
        return 2;
    }
    struct rfx_server s;
    struct rfx_options o = {.appendonly = true, .appendfsync = "everysec"};
    if (rfx_start(&s, &o))
        return 1;
    int rc = 1;
    redisContext *c = rfx_connect(&s);
    char sha[41], nop[41];
    if (!c || w7_load("w7_start", c, tw_rr_scripts[TW_RR_START], sha) ||
        w7_load("w7_start", c, "#!lua flags=allow-oom\nreturn {1}", nop))
        goto out;
    /* N records due a second ago and their claims' holds (a whole ms: not started) */
    redisReply *r = redisCommand(
        c,
        "EVAL %s 2 {q:0}:task {q:0}:leases %" PRIu64,
        "local t = redis.call('TIME') local due = tonumber(t[1]) * 1000 - 1000 "
        "local p = string.rep('p', 32) "
        "for i = 0, tonumber(ARGV[1]) - 1 do local k = string.format('k:%013d', i) "
        "redis.call('HSET', KEYS[1], k, string.format('5 0 %d ', due) .. p) "
        "redis.call('ZADD', KEYS[2], due + 1000, k .. ':5') end return 1",
        n);
    int filled = r && r->type == REDIS_REPLY_INTEGER;
    if (!filled)
        fprintf(stderr, "w7_start: fill failed: %s\n", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    if (!filled)
        goto out;
    double v[NKINDS][99];
    uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);
    for (int round = 0; round < rounds; round++)
        for (size_t x = 0; x < NKINDS; x++) {
            size_t kx = round % 2 ? NKINDS - 1 - x : x; /* alternate the order */
            if (run(c, &s, sha, nop, kinds[kx], n, calls, &rng, &v[kx][round]))
                goto out;
        }
    double med[NKINDS];
    printf("w7_start: N = %" PRIu64 " records and leases, %d calls a kind, %d rounds; "
           "Redis CPU us a call (median, min-max)\n",
           n, calls, rounds);
    for (size_t x = 0; x < NKINDS; x++) {
        med[x] = median(v[x], (size_t)rounds); /* sorts v[x] */
        if (kinds[x])
            printf("  START of %2d: %7.1f (%.1f-%.1f), %.2f a start\n", kinds[x], med[x], v[x][0],
                   v[x][rounds - 1], med[x] / kinds[x]);
        else
            printf("  no-op, 8 starts' arguments: %7.1f (%.1f-%.1f)\n", med[x], v[x][0],
                   v[x][rounds - 1]);
    }
    /* least squares over k = 1, 8, 32 */
    double sx = 0, sy = 0, sxx = 0, sxy = 0, m = 0;
    for (size_t x = 0; x < NKINDS; x++)
        if (kinds[x]) {
            sx += kinds[x];
            sy += med[x];
            sxx += (double)kinds[x] * kinds[x];
            sxy += kinds[x] * med[x];
            m++;
        }
    double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx), icpt = (sy - slope * sx) / m;
    printf("  fit: %.1f us a call + %.2f us a start\n", icpt, slope);
    rc = 0;
out:
    if (c)
        redisFree(c);
    rfx_stop(&s);
    return rc;
}
