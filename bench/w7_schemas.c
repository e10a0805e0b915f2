/* SPDX-License-Identifier: MIT */
/* w7_schemas: what a task's whole life costs Redis under the Redis layer's
 * schema and the one before it, under two lease schemas it does not have,
 * and under a poller:
 * a probe of the designs issue 26 asks for, before anyone builds them.
 *
 * Each kind runs N tasks (16-byte keys, 32-byte payloads, due uniformly over
 * 59 s, 500 ms due buckets) through its scripts on its own redis-server (the
 * test fixture: AOF, appendfsync everysec, as W7), one call at a time as a
 * worker makes them, and divides the server's CPU (INFO used_cpu_sys +
 * used_cpu_user) by N, the sets included:
 *   per-task lease  the shapes of the layer's commands before it took tokens
 *                   at set (src/redis/scripts.c, simplified: one
 *                   partition, no pause, share, recovery or
 *                   dead letters): set HMGET HSET RPUSH; claim a bucket
 *                   LRANGE HMGET INCRBY HSET (each record's token) ZADD (each
 *                   lease); START of a group HMGET ZADD XX GT; acknowledgement
 *                   of 80 HMGET ZMSCORE HDEL ZREM.
 *   token at set    the per-task lease with its token taken at set (one
 *                   INCRBY a set call), so that a claim writes the lease
 *                   alone (LRANGE HMGET ZADD); START and acknowledgement
 *                   as the per-task lease: the layer's schema since it
 *                   took tokens at set (the per-task kind is the one before).
 *   arming lease    the per-task lease with its token taken at set (one
 *                   INCRBY a set call) instead of at claim, and the lease
 *                   member key .. ':' .. token, whose presence is then the
 *                   token check: set HMGET INCRBY HSET RPUSH; claim LRANGE
 *                   HMGET ZADD (no record written); START of a group one
 *                   ZADD XX GT CH (members read back only when it changed
 *                   fewer than all); acknowledgement ZREM, then HDEL when it
 *                   removed all. What it leaves out: a replace or remove then
 *                   finds a leased task by its member (ZSCORE), and recovery,
 *                   FAIL and RELEASE give the task a new token as they return
 *                   it to its bucket.
 *   batch lease     set the same; claim LRANGE HMGET (the payloads), then the
 *                   bucket's LIST RENAMEd under one batch token with one lease
 *                   member and a count; START of a group one lease ZADD XX GT
 *                   and one watermark HSET, nothing per task; acknowledgement
 *                   HDEL and one HINCRBY of the count. What this kind leaves
 *                   out, and a real one would need: revocations by set, move
 *                   and remove (a small per-batch set that START and the
 *                   acknowledgement look up once a call), and recovery.
 *   batch, no START the same without START calls: the gate's share.
 *   poll 100 ms     ZADD of key|payload by due; a Lua claim of up to 1,000
 *                   due every 100 ms of due time (ZRANGEBYSCORE, ZREM).
 * Sets go in batches of 1,000 (set order random, each batch sorted by due, as
 * set_many sends them); a bucket is claimed whole, started in groups of
 * --group (default 7: a START span's tasks for one of two workers at 1e5 over
 * a minute), and acknowledged 80 at a time. Every kind must deliver N and
 * leave its keys empty, or the run fails. Rounds alternate the kinds'
 * order; medians are printed, and the median of each round's ratio to the
 * poller's (the machine's pace drifts between rounds, less within one).
 *
 * Usage: w7_schemas [--n N] [--rounds R] [--group K]
 * (defaults 100000, 3, 7). Needs redis-server (PATH or $RFX_REDIS_SERVER).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench_util.h" /* xorshift64, median */
#include "fixture.h"
#include "w7_probe.h" /* w7_load, w7_server_cpu */

#define SET_BATCH 1000
#define ACK_BATCH 80
#define GROUP_MAX 1000
#define ARG_LEN 48

enum kind { PER_TASK, SET_TOKEN, ARMING, BATCH, BATCH_NO_START, POLL, NKINDS };
static const char *const kind_name[NKINDS] = {"per-task lease", "token at set", "arming lease",
                                              "batch lease", "batch, no START", "poll 100 ms"};

/* KEYS: task HASH, index ZSET (bucket LISTs index:b), lease ZSET, seq, in one slot */
static const char *const keys5[] = {"{q}:t", "{q}:i", "{q}:l", "{q}:seq", "{q}:r"};

/* ARGV: n, n keys, n payloads, n due ms (sorted by due). TOKENS: Lua run
 * before the records are made; RECORD: a Lua expression, the record's
 * fields before the payload for task j. Then each run of keys of one 500 ms
 * bucket in one RPUSH, and the bucket into the index when the RPUSH made it. */
#define SET_SCRIPT(TOKENS, RECORD)                                                                 \
    "local n = tonumber(ARGV[1])\n"                                                                \
    "local old = redis.call('HMGET', KEYS[1], unpack(ARGV, 2, 1 + n))\n" TOKENS                    \
    "local hs, fmt = {}, string.format\n"                                                          \
    "for j = 1, n do hs[2 * j - 1] = ARGV[1 + j] hs[2 * j] = " RECORD " .. ARGV[1 + n + j] end\n"  \
    "redis.call('HSET', KEYS[1], unpack(hs))\n"                                                    \
    "local cb, s = nil, 1\n"                                                                       \
    "for j = 1, n + 1 do local b = j <= n and math.floor(tonumber(ARGV[1 + 2 * n + j]) / 500) or " \
    "-1\n"                                                                                         \
    " if b ~= cb then\n"                                                                           \
    "  if cb and redis.call('RPUSH', KEYS[2] .. ':' .. cb, unpack(ARGV, 1 + s, j)) == j - s "      \
    "then\n"                                                                                       \
    "   redis.call('ZADD', KEYS[2], cb, cb) end\n"                                                 \
    "  cb = b s = j end\n"                                                                         \
    "end\n"                                                                                        \
    "return n\n"

/* The previous layer's set (the per-task kind): token 0 while waiting */
static const char SET_LUA[] = SET_SCRIPT("", "fmt('0 0 %s ', ARGV[1 + 2 * n + j])");

/* ARGV: bucket, hold ms -> key, due, token, attempt, payload per task */
static const char PER_TASK_CLAIM[] =
    "local bk = KEYS[2] .. ':' .. ARGV[1] local hold = tonumber(ARGV[2])\n"
    "local m = redis.call('LRANGE', bk, 0, -1) local out, no = {}, 0\n"
    "local match, sub, fmt = string.match, string.sub, string.format\n"
    "for s = 1, #m, 1000 do local e = math.min(s + 999, #m)\n"
    " local vs = redis.call('HMGET', KEYS[1], unpack(m, s, e))\n"
    " local t = redis.call('INCRBY', KEYS[4], e - s + 1) - (e - s + 1)\n"
    " local hs, lz, nh = {}, {}, 0\n"
    " for j = s, e do local k, v = m[j], vs[j - s + 1]\n"
    "  local tk, att, due, pos = match(v, '^(%d+) (%d+) (%d+) ()') due = tonumber(due) t = t + 1\n"
    "  hs[nh + 1] = k hs[nh + 2] = fmt('%d', t) .. sub(v, #tk + 1)\n"
    "  lz[nh + 1] = fmt('%d', due + hold) lz[nh + 2] = k nh = nh + 2\n"
    "  out[no + 1] = k out[no + 2] = due out[no + 3] = t out[no + 4] = tonumber(att)\n"
    "  out[no + 5] = sub(v, pos) no = no + 5\n"
    " end\n"
    " redis.call('HSET', KEYS[1], unpack(hs, 1, nh)) redis.call('ZADD', KEYS[3], unpack(lz, 1, "
    "nh))\n"
    "end\n"
    "redis.call('DEL', bk) redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "return out\n";

/* ARGV: lease ms, then key, token, attempt per start -> 1 started, -1 not ours */
static const char PER_TASK_START[] =
    "local call, match, fmt = redis.call, string.match, string.format\n"
    "local t = call('TIME') local L = tonumber(ARGV[1])\n"
    "local ks, ts, n = {}, {}, 0\n"
    "for i = 2, #ARGV, 3 do n = n + 1 ks[n] = ARGV[i] ts[n] = ARGV[i + 1] end\n"
    "local vs = call('HMGET', KEYS[1], unpack(ks, 1, n)) local lz, nz, out = {}, 0, {}\n"
    "for j = 1, n do local v, s = vs[j], -1\n"
    " if v then local tok, due = match(v, '^(%d+) %d+ (%d+) ')\n"
    "  if tok == ts[j] then s = 1 lz[nz + 1] = fmt('%d.5', tonumber(due) + L) lz[nz + 2] = ks[j]\n"
    "   nz = nz + 2 end end\n"
    " out[j] = s end\n"
    "if nz > 0 then call('ZADD', KEYS[3], 'XX', 'GT', unpack(lz, 1, nz)) end\n"
    "return out\n";

/* ARGV: key, token pairs -> how many deleted */
static const char PER_TASK_ACK[] =
    "local call, match = redis.call, string.match\n"
    "local ks, ts, n = {}, {}, 0\n"
    "for i = 1, #ARGV, 2 do n = n + 1 ks[n] = ARGV[i] ts[n] = ARGV[i + 1] end\n"
    "local vs = call('HMGET', KEYS[1], unpack(ks, 1, n))\n"
    "local ls = call('ZMSCORE', KEYS[3], unpack(ks, 1, n)) local del, nd = {}, 0\n"
    "for j = 1, n do local v, l = vs[j], ls[j]\n"
    " if v and l and match(v, '^%d+') == ts[j] then nd = nd + 1 del[nd] = ks[j] end end\n"
    "if nd > 0 then call('HDEL', KEYS[1], unpack(del, 1, nd)) call('ZREM', KEYS[3], unpack(del, 1, "
    "nd)) end\n"
    "return nd\n";

/* The arming lease: set numbers each arming from seq (one INCRBY a call) and
 * writes it where the per-task kind writes token 0; a lease is the member
 * key .. ':' .. arming, so that the member's presence is the token check. */
static const char ARM_SET[] = SET_SCRIPT("local a = redis.call('INCRBY', KEYS[4], n) - n\n",
                                         "fmt('%d 0 %s ', a + j, ARGV[1 + 2 * n + j])");

/* A claim of the kinds whose token set took (ARM_SET): the record is not
 * written. MEMBER: the Lua expression of task k's lease member (a: its
 * token). ARGV: bucket, hold ms -> key, due, token, attempt, payload per
 * task */
#define ARMED_CLAIM(MEMBER)                                                                        \
    "local bk = KEYS[2] .. ':' .. ARGV[1] local hold = tonumber(ARGV[2])\n"                        \
    "local m = redis.call('LRANGE', bk, 0, -1) local out, no = {}, 0\n"                            \
    "local match, sub, fmt = string.match, string.sub, string.format\n"                            \
    "for s = 1, #m, 1000 do local e = math.min(s + 999, #m)\n"                                     \
    " local vs = redis.call('HMGET', KEYS[1], unpack(m, s, e))\n"                                  \
    " local lz, nh = {}, 0\n"                                                                      \
    " for j = s, e do local k, v = m[j], vs[j - s + 1]\n"                                          \
    "  local a, att, due, pos = match(v, '^(%d+) (%d+) (%d+) ()') due = due + 0\n"                 \
    "  lz[nh + 1] = fmt('%d', due + hold) lz[nh + 2] = " MEMBER " nh = nh + 2\n"                   \
    "  out[no + 1] = k out[no + 2] = due out[no + 3] = a + 0 out[no + 4] = att + 0\n"              \
    "  out[no + 5] = sub(v, pos) no = no + 5\n"                                                    \
    " end\n"                                                                                       \
    " redis.call('ZADD', KEYS[3], unpack(lz, 1, nh))\n"                                            \
    "end\n"                                                                                        \
    "redis.call('DEL', bk) redis.call('ZREM', KEYS[2], ARGV[1])\n"                                 \
    "return out\n"

/* The token at set: the per-task lease whose token set takes, so that a
 * claim writes the lease alone (member: the key) */
static const char SET_TOKEN_CLAIM[] = ARMED_CLAIM("k");
/* The arming lease's claim: member key .. ':' .. token */
static const char ARM_CLAIM[] = ARMED_CLAIM("k .. ':' .. a");

/* ARGV: lease ms, then member, due per start -> 1 started, -1 not ours. One
 * ZADD XX GT CH; the members are read back only when it changed fewer than
 * all (a start redone, or a lease revoked) */
static const char ARM_START[] =
    "local call, fmt = redis.call, string.format\n"
    "local t = call('TIME') local now = math.floor((t[1] * 1000000 + t[2]) / 1000)\n"
    "local L = ARGV[1] + 0 local lz, n, out = {}, 0, {}\n"
    "for i = 2, #ARGV, 2 do local d = ARGV[i + 1] + 0 if d < now then d = now end\n"
    " lz[n + 1] = fmt('%d.5', d + L) lz[n + 2] = ARGV[i] n = n + 2 end\n"
    "local ch = call('ZADD', KEYS[3], 'XX', 'GT', 'CH', unpack(lz, 1, n))\n"
    "if ch == n / 2 then for j = 1, ch do out[j] = 1 end return out end\n"
    "local ms, ks = {}, 0 for i = 2, #ARGV, 2 do ks = ks + 1 ms[ks] = ARGV[i] end\n"
    "local ls = call('ZMSCORE', KEYS[3], unpack(ms, 1, ks))\n"
    "for j = 1, ks do out[j] = ls[j] and 1 or -1 end\n"
    "return out\n";

/* ARGV: key, member pairs -> how many deleted. Whatever ends a lease
 * other than its acknowledgement (replace, remove, recovery, FAIL, RELEASE)
 * removes its member and gives the record a new token or deletes it, so a
 * member present, or else a record still holding the acknowledged token,
 * is this worker's lease: when the ZREM removed fewer than all, the
 * records say which to delete. */
static const char ARM_ACK[] =
    "local call = redis.call local ks, ms, n = {}, {}, 0\n"
    "for i = 1, #ARGV, 2 do n = n + 1 ks[n] = ARGV[i] ms[n] = ARGV[i + 1] end\n"
    "if call('ZREM', KEYS[3], unpack(ms, 1, n)) == n then\n"
    " return call('HDEL', KEYS[1], unpack(ks, 1, n)) end\n"
    "local vs, del, nd = call('HMGET', KEYS[1], unpack(ks, 1, n)), {}, 0\n"
    "for j = 1, n do if vs[j] and ms[j] == ks[j] .. ':' .. string.match(vs[j], '^%d+') then\n"
    " nd = nd + 1 del[nd] = ks[j] end end\n"
    "if nd > 0 then call('HDEL', KEYS[1], unpack(del, 1, nd)) end\n"
    "return nd\n";

/* ARGV: bucket, hold ms -> batch token, then key, due, attempt, payload per task */
static const char BATCH_CLAIM[] =
    "local bk = KEYS[2] .. ':' .. ARGV[1] local hold = tonumber(ARGV[2])\n"
    "local m = redis.call('LRANGE', bk, 0, -1)\n"
    "local T = redis.call('INCR', KEYS[4]) local out, no, last = {T}, 1, 0\n"
    "local match, sub = string.match, string.sub\n"
    "for s = 1, #m, 1000 do local e = math.min(s + 999, #m)\n"
    " local vs = redis.call('HMGET', KEYS[1], unpack(m, s, e))\n"
    " for j = s, e do local v = vs[j - s + 1]\n"
    "  local att, due, pos = match(v, '^%d+ (%d+) (%d+) ()') due = tonumber(due)\n"
    "  if due > last then last = due end\n"
    "  out[no + 1] = m[j] out[no + 2] = due out[no + 3] = tonumber(att) out[no + 4] = sub(v, pos)\n"
    "  no = no + 4\n"
    " end\n"
    "end\n"
    "redis.call('RENAME', bk, KEYS[3] .. ':' .. T) redis.call('ZADD', KEYS[3], last + hold, T)\n"
    "redis.call('HSET', KEYS[3] .. ':n', T, #m) redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "return out\n";

/* ARGV: lease ms, batch token, then key, due per start -> 1 per start (none
 * revoked: the revocation set is looked up, never written here) */
static const char BATCH_START[] =
    "local call = redis.call local t = call('TIME') local L, T = tonumber(ARGV[1]), ARGV[2]\n"
    "local revoked = call('EXISTS', KEYS[5] .. ':' .. T) == 1 local out, n, last = {}, 0, 0\n"
    "for i = 3, #ARGV, 2 do n = n + 1 local due = tonumber(ARGV[i + 1])\n"
    " if due > last then last = due end out[n] = revoked and 0 or 1 end\n"
    "call('ZADD', KEYS[3], 'XX', 'GT', last + L, T) call('HSET', KEYS[3] .. ':w', T, last)\n"
    "return out\n";

/* ARGV: batch token, keys -> how many deleted; the batch goes with its last */
static const char BATCH_ACK[] =
    "local call, T = redis.call, ARGV[1]\n"
    "local revoked = call('EXISTS', KEYS[5] .. ':' .. T) == 1\n"
    "local n = call('HDEL', KEYS[1], unpack(ARGV, 2))\n"
    "if call('HINCRBY', KEYS[3] .. ':n', T, 1 - #ARGV) <= 0 then\n"
    " call('DEL', KEYS[3] .. ':' .. T) call('ZREM', KEYS[3], T)\n"
    " call('HDEL', KEYS[3] .. ':n', T) call('HDEL', KEYS[3] .. ':w', T) end\n"
    "return n\n";

/* ARGV: now ms -> up to 1,000 members due by then, removed */
static const char POLL_CLAIM[] =
    "local m = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 1000)\n"
    "if #m > 0 then redis.call('ZREM', KEYS[1], unpack(m)) end return m\n";

struct probe {
    redisContext *c;
    const struct rfx_server *s;
    uint64_t n;
    int group;
    int64_t *due;    /* per task */
    uint32_t *order; /* set order */
    const char **av; /* one call's arguments */
    size_t *al;
    char (*buf)[ARG_LEN];
    char sha[5][41]; /* set, claim, start, ack; poll claim */
};

/* EVALSHA sha with the five keys (or the poller's one) and av[8..8+nargs). */
static redisReply *call(struct probe *p, const char *sha, int nkeys, int nargs, int type)
{
    static const char *const poll_key[] = {"q"};
    const char *const *k = nkeys == 1 ? poll_key : keys5;
    p->av[0] = "EVALSHA";
    p->av[1] = sha;
    p->av[2] = nkeys == 1 ? "1" : "5";
    for (int i = 0; i < nkeys; i++)
        p->av[3 + i] = k[i];
    int first = 3 + nkeys, argc = first + nargs;
    if (first != 8)
        memmove(p->av + first, p->av + 8, sizeof *p->av * (size_t)nargs);
    for (int i = 0; i < argc; i++)
        p->al[i] = strlen(p->av[i]);
    redisReply *r = redisCommandArgv(p->c, argc, p->av, p->al);
    if (!r || r->type != type) {
        fprintf(stderr, "w7_schemas: call failed: %s\n", r && r->str ? r->str : "no reply or type");
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int cmp_due_ctx(const void *a, const void *b, void *ctx)
{
    const int64_t *due = ctx;
    int64_t x = due[*(const uint32_t *)a], y = due[*(const uint32_t *)b];
    return x < y ? -1 : x > y;
}

static char *arg(struct probe *p, int i, const char *fmt, int64_t v)
{
    snprintf(p->buf[i], ARG_LEN, fmt, v);
    p->av[8 + i] = p->buf[i];
    return p->buf[i];
}

/* The arming kind's lease member: key ':' arming. */
static void arg_member(struct probe *p, int i, const char *key, long long arming)
{
    snprintf(p->buf[i], ARG_LEN, "%s:%lld", key, arming);
    p->av[8 + i] = p->buf[i];
}

/* Sets in batches of SET_BATCH, each sorted by due. */
static int run_sets(struct probe *p)
{
    uint32_t idx[SET_BATCH];
    for (uint64_t b = 0; b < p->n; b += SET_BATCH) {
        int n = p->n - b < SET_BATCH ? (int)(p->n - b) : SET_BATCH;
        memcpy(idx, p->order + b, sizeof idx[0] * (size_t)n);
        qsort_r(idx, (size_t)n, sizeof idx[0], cmp_due_ctx, p->due);
        arg(p, 0, "%" PRId64, n);
        for (int j = 0; j < n; j++) {
            arg(p, 1 + j, "k:%014" PRId64, idx[j]);
            arg(p, 1 + n + j, "payload-%024" PRId64, idx[j]);
            arg(p, 1 + 2 * n + j, "%" PRId64, p->due[idx[j]]);
        }
        redisReply *r = call(p, p->sha[0], 5, 1 + 3 * n, REDIS_REPLY_INTEGER);
        if (!r)
            return -1;
        freeReplyObject(r);
    }
    return 0;
}

/* The lifecycle of the two lease kinds: every bucket in due order. */
static int run_leases(struct probe *p, enum kind k, uint64_t *delivered)
{
    redisReply *ix = redisCommand(p->c, "ZRANGE {q}:i 0 -1");
    if (!ix || ix->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(ix);
        return -1;
    }
    int rc = -1;
    int per_task = k == PER_TASK || k == SET_TOKEN || k == ARMING; /* a reply of 5 per task, no batch token */
    size_t per = per_task ? 5 : 4, off = per_task ? 0 : 1;
    for (size_t b = 0; b < ix->elements; b++) {
        p->av[8] = ix->element[b]->str;
        p->av[9] = "1000"; /* hold ms */
        redisReply *r = call(p, p->sha[1], 5, 2, REDIS_REPLY_ARRAY);
        if (!r)
            goto out;
        size_t n = (r->elements - off) / per;
        long long token = per_task ? 0 : r->element[0]->integer;
        for (size_t s = 0; k != BATCH_NO_START && s < n; s += (size_t)p->group) {
            size_t m = n - s < (size_t)p->group ? n - s : (size_t)p->group;
            int na = 0;
            p->av[8 + na++] = "30000"; /* lease ms */
            if (k == BATCH)
                arg(p, na++, "%" PRId64, token);
            for (size_t j = 0; j < m; j++) {
                redisReply **e = r->element + off + (s + j) * per;
                if (k == ARMING) /* its lease member, not its key */
                    arg_member(p, na++, e[0]->str, e[2]->integer);
                else
                    p->av[8 + na++] = e[0]->str;
                if (k == PER_TASK || k == SET_TOKEN) {
                    arg(p, na++, "%" PRId64, e[2]->integer);     /* token */
                    arg(p, na++, "%" PRId64, e[3]->integer + 1); /* attempt */
                } else {
                    arg(p, na++, "%" PRId64, e[1]->integer); /* due */
                }
            }
            redisReply *g = call(p, p->sha[2], 5, na, REDIS_REPLY_ARRAY);
            int granted = g && g->elements == m;
            for (size_t j = 0; granted && j < m; j++)
                granted = g->element[j]->integer == 1;
            freeReplyObject(g);
            if (!granted) {
                fprintf(stderr, "w7_schemas: %s: a start was not granted\n", kind_name[k]);
                freeReplyObject(r);
                goto out;
            }
        }
        for (size_t s = 0; s < n; s += ACK_BATCH) {
            size_t m = n - s < ACK_BATCH ? n - s : ACK_BATCH;
            int na = 0;
            if (!per_task)
                arg(p, na++, "%" PRId64, token);
            for (size_t j = 0; j < m; j++) {
                redisReply **e = r->element + off + (s + j) * per;
                p->av[8 + na++] = e[0]->str;
                if (k == PER_TASK || k == SET_TOKEN)
                    arg(p, na++, "%" PRId64, e[2]->integer);
                else if (k == ARMING)
                    arg_member(p, na++, e[0]->str, e[2]->integer);
            }
            redisReply *a = call(p, p->sha[3], 5, na, REDIS_REPLY_INTEGER);
            long long deleted = a ? a->integer : -1;
            freeReplyObject(a);
            if (deleted != (long long)m) {
                fprintf(stderr, "w7_schemas: %s: %lld of %zu acknowledged\n", kind_name[k], deleted,
                        m);
                freeReplyObject(r);
                goto out;
            }
            *delivered += m;
        }
        freeReplyObject(r);
    }
    rc = 0;
out:
    freeReplyObject(ix);
    return rc;
}

static int run_poll(struct probe *p, uint64_t *delivered)
{
    for (uint64_t b = 0; b < p->n; b += SET_BATCH) {
        uint64_t n = p->n - b < SET_BATCH ? p->n - b : SET_BATCH;
        for (uint64_t j = 0; j < n; j++) {
            uint32_t i = p->order[b + j];
            redisAppendCommand(p->c, "ZADD q %" PRId64 " k:%014" PRIu32 "|payload-%024" PRIu32,
                               p->due[i], i, i);
        }
        for (uint64_t j = 0; j < n; j++) {
            redisReply *r = NULL;
            if (redisGetReply(p->c, (void **)&r) != REDIS_OK || !r ||
                r->type != REDIS_REPLY_INTEGER) {
                freeReplyObject(r);
                return -1;
            }
            freeReplyObject(r);
        }
    }
    int64_t from = p->due[0];
    for (uint64_t i = 0; i < p->n; i++)
        if (p->due[i] < from)
            from = p->due[i];
    for (int64_t t = from; *delivered < p->n; t += 100) {
        arg(p, 0, "%" PRId64, t);
        redisReply *r = call(p, p->sha[4], 1, 1, REDIS_REPLY_ARRAY);
        if (!r)
            return -1;
        *delivered += r->elements;
        freeReplyObject(r);
    }
    return 0;
}

/* One kind's whole run on an empty server: Redis CPU us per task. */
static int run(struct probe *p, enum kind k, double *us)
{
    const char *const set[] = {SET_LUA, ARM_SET, ARM_SET, SET_LUA, SET_LUA};
    const char *const claim[] = {PER_TASK_CLAIM, SET_TOKEN_CLAIM, ARM_CLAIM, BATCH_CLAIM,
                                 BATCH_CLAIM};
    const char *const start[] = {PER_TASK_START, PER_TASK_START, ARM_START, BATCH_START,
                                 BATCH_START};
    const char *const ack[] = {PER_TASK_ACK, PER_TASK_ACK, ARM_ACK, BATCH_ACK, BATCH_ACK};
    if (rfx_command(p->s, "FLUSHALL") || rfx_command(p->s, "SCRIPT FLUSH"))
        return -1;
    const char *me = "w7_schemas";
    if (k == POLL
            ? w7_load(me, p->c, POLL_CLAIM, p->sha[4])
            : w7_load(me, p->c, set[k], p->sha[0]) || w7_load(me, p->c, claim[k], p->sha[1]) ||
                  w7_load(me, p->c, start[k], p->sha[2]) || w7_load(me, p->c, ack[k], p->sha[3]))
        return -1;
    uint64_t delivered = 0;
    double a, b;
    if (w7_server_cpu(p->s, &a))
        return -1;
    if (k == POLL ? run_poll(p, &delivered) : run_sets(p) || run_leases(p, k, &delivered))
        return -1;
    if (w7_server_cpu(p->s, &b))
        return -1;
    uint64_t left = 1;
    if (delivered != p->n || rfx_dbsize(p->s, &left) || left > (k == POLL ? 0 : 1)) {
        /* the lease kinds keep their seq counter */
        fprintf(stderr,
                "w7_schemas: %s: delivered %" PRIu64 " of %" PRIu64 ", %" PRIu64 " keys left\n",
                kind_name[k], delivered, p->n, left);
        return -1;
    }
    *us = (b - a) * 1e6 / (double)p->n;
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t n = 100000;
    int rounds = 3, group = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            group = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: w7_schemas [--n N] [--rounds R] [--group K]\n");
            return 2;
        }
    }
    if (n < 1000 || n > UINT32_MAX || rounds < 1 || rounds > 99 || group < 1 || group > GROUP_MAX) {
        fprintf(stderr, "w7_schemas: --n 1000..2^32-1, --rounds 1..99, --group 1..%d\n", GROUP_MAX);
        return 2;
    }
    struct probe p = {.n = n, .group = group};
    size_t nargs = 8 + 3 * (size_t)(SET_BATCH > GROUP_MAX ? SET_BATCH : GROUP_MAX) + 8;
    p.due = malloc(sizeof *p.due * n);
    p.order = malloc(sizeof *p.order * n);
    p.av = malloc(sizeof *p.av * nargs);
    p.al = malloc(sizeof *p.al * nargs);
    p.buf = malloc(sizeof *p.buf * nargs);
    if (!p.due || !p.order || !p.av || !p.al || !p.buf) {
        fprintf(stderr, "w7_schemas: out of memory\n");
        return 1;
    }
    uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);
    const int64_t base = INT64_C(1900000000000);
    for (uint64_t i = 0; i < n; i++) {
        p.due[i] = base + 1000 + (int64_t)(xorshift64(&rng) % 59000);
        p.order[i] = (uint32_t)i;
    }
    for (uint64_t i = n - 1; i > 0; i--) { /* set order: shuffled */
        uint64_t j = xorshift64(&rng) % (i + 1);
        uint32_t t = p.order[i];
        p.order[i] = p.order[j];
        p.order[j] = t;
    }
    struct rfx_server s;
    struct rfx_options o = {.appendonly = true, .appendfsync = "everysec"};
    if (rfx_start(&s, &o))
        return 1;
    p.s = &s;
    int rc = 1;
    double v[NKINDS][99];
    p.c = rfx_connect(&s);
    if (!p.c)
        goto out;
    for (int round = 0; round < rounds; round++)
        for (int x = 0; x < NKINDS; x++) {
            int kx = round % 2 ? NKINDS - 1 - x : x; /* alternate the order */
            if (run(&p, (enum kind)kx, &v[kx][round]))
                goto out;
        }
    printf(
        "w7_schemas: N = %" PRIu64 " over 59 s, STARTs of %d, %d rounds; Redis CPU us a task, "
        "sets included (median, min-max), and the median of its rounds' ratios to the poller's\n",
        n, group, rounds);
    double ratio[NKINDS][99];
    for (int x = 0; x < NKINDS; x++)
        for (int round = 0; round < rounds; round++)
            ratio[x][round] = v[x][round] / v[POLL][round];
    for (int x = 0; x < NKINDS; x++) {
        double med = median(v[x], (size_t)rounds); /* sorts v[x] */
        printf("  %-16s %6.2f (%.2f-%.2f)  %.2fx\n", kind_name[x], med, v[x][0], v[x][rounds - 1],
               median(ratio[x], (size_t)rounds));
    }
    rc = 0;
out:
    if (p.c)
        redisFree(p.c);
    rfx_stop(&s);
    free(p.due);
    free(p.order);
    free(p.av);
    free(p.al);
    free(p.buf);
    return rc;
}
