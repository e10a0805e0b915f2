/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: operating a queue. Inspect (get one task, list what is
 * due in a range, count by state, the lag), pause and resume, drop; the
 * stored partition count a client adopts. Costs: redis.c's design table.
 *
 * These calls are an operator's, rare next to the producers' and the
 * workers': their scripts go by EVAL (Redis caches the body; no SHA kept
 * in the instance), read-only ones flagged no-writes (a server at maxmemory
 * or a replica-read setup still answers them), each on one partition's
 * slot, reading its bucket keys as every script does (undeclared, same
 * slot: redis.c, "Buckets in a cluster"; the stable() check first, so a
 * migrating slot answers TRYAGAIN and the router retries).
 *
 * Bounded work: no call reads a whole queue. get reads one record; list
 * reads at most limit + 2 buckets per partition (the index holds non-empty
 * buckets only, so every bucket visited gives a task, but the first, where
 * the range or the cursor starts, and the last, past the range's end), each
 * whole: a bucket is a LIST in the order its tasks were put there, not by
 * due time (redis.c), so the first tasks of a bucket after the cursor are
 * known only once all of it is read (its records' due times by HMGET, 512
 * keys a step). A bucket is what falls due in 500 ms of one partition, so a
 * page costs O(limit + 2 buckets) of tasks per partition, at most 2 * limit
 * kept at a time; the partitions' pages are merged here. counts reads the
 * leases (what workers hold), at most RR_COUNT_BUCKETS buckets per
 * partition by LLEN, and two buckets whole (the one that ends after the
 * span, the first); drop unlinks RR_DROP_BUCKETS buckets per call.
 *
 * The cursor of a listing is the last task listed, (due, key): a task
 * follows it when its due time is later, or equal with a key greater by
 * bytes (memcmp, then length: how the merge here orders partitions' tasks).
 * Lua compares strings by the server's locale (strcoll), so the script
 * compares keys byte by byte.
 *
 * Pause is a flag key per partition, {q:p}:pause: a claim script can read
 * only keys of its partition's slot, so one queue-wide key could not be
 * read by a cluster's claims. CLAIM's first lines return nothing claimed
 * while it exists (scripts.c). On one server one script sets (or deletes)
 * every flag, so the partitions pause and resume at one instant: a claim
 * between two flags could otherwise hand over one partition's catch-up
 * before earlier tasks of one still paused. A cluster's flags go one
 * partition after another. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

#define RR_COUNT_BUCKETS 4096 /* buckets counts reads per partition (due_capped) */
#define RR_DROP_BUCKETS 1024  /* buckets one drop call unlinks */
#define RR_TIME_MAX 1000000000000000ull /* ms: times beyond are clamped (Lua's doubles) */

/* The per-partition keys drop deletes besides the five every script declares
 * (index, lease, task, seq, hold) and the due buckets: one line per key a
 * feature adds to a partition. */
static const char *const rr_drop_suffixes[] = {
    ":pause",
    ":lease",   /* the leases a previous version kept (upgrade.c) */
    ":dead",    /* the dead letters (dead.c) */
    ":sched",   /* the schedules (schedule.c) */
    ":sched:n", /* their next occurrences */
};
/* The queue-wide keys drop deletes last, {q:meta}<suffix>: one line per key. */
static const char *const rr_drop_queue_keys[] = {
    ":schema", /* upgrade.c */
    ":partitions",
};
#define RR_NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* What every script here starts with: the stable() check (internal.h), the
 * bucket width and the clock. */
#define RR_STABLE                                                                          \
    TW_RR_STABLE_LUA                                                                       \
    "local W, call, floor = " TW_RR_BUCKET_MS_STR ", redis.call, math.floor\n"              \
    "local function I(x) return string.format('%d', x) end\n"                               \
    "local t = call('TIME') "                                                               \
    "local now = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)\n"

/* KEYS: index, lease, task; ARGV: key -> {now ms, record or nil, lease end or nil}
 * (the lease member is the key and the token its record holds) */
static const char rr_get_lua[] =
    "#!lua flags=no-writes\n" RR_STABLE
    "local v = call('HGET', KEYS[3], ARGV[1])\n"
    "return {now, v or false, v and call('ZSCORE', KEYS[2], "
    "ARGV[1] .. ':' .. string.match(v, '^%d+')) or false}\n";

/* A bucket is a LIST of keys in no order (redis.c): scan(bk, f) reads it
 * whole, 512 keys per LRANGE with their records' due times by one HMGET,
 * and calls f(key, due) for each (a key without a record is skipped). */
#define RR_SCAN                                                                            \
    "local function scan(bk, f) local i = 0\n"                                              \
    "  while true do local m = call('LRANGE', bk, i, i + 511)\n"                            \
    "    if #m == 0 then return end\n"                                                      \
    "    local vs = call('HMGET', KEYS[3], unpack(m))\n"                                    \
    "    for j = 1, #m do local v = vs[j]\n"                                                \
    "      if v then f(m[j], tonumber(string.match(v, '^%d+ %d+ (%d+) '))) end end\n"       \
    "    if #m < 512 then return end\n"                                                     \
    "    i = i + 512 end end\n"

/* KEYS: index, lease, task; ARGV: within ms, most buckets
 * -> {now, pending, leased, running, due within, capped, earliest due or -1,
 *     paused, dead letters, schedules}
 * running: the leases that carry START's mark (+ 0.5, scripts.c). A bucket
 * wholly before now + within counts by LLEN; the one that ends after it and
 * the first bucket (the earliest due time) are read whole (scan). */
static const char rr_counts_lua[] =
    "#!lua flags=no-writes\n" RR_STABLE RR_SCAN
    "local pending, leased = call('HLEN', KEYS[3]), call('ZCARD', KEYS[2])\n"
    "local running, off = 0, 0\n"
    "while off < leased do\n"
    "  local ls = call('ZRANGE', KEYS[2], off, off + 511, 'WITHSCORES')\n"
    "  if #ls == 0 then break end\n"
    "  for i = 2, #ls, 2 do if tonumber(ls[i]) % 1 ~= 0 then running = running + 1 end end\n"
    "  off = off + 512\n"
    "end\n"
    "local hi = now + tonumber(ARGV[1]) local hb = I(floor(hi / W))\n"
    "local due, nb, capped, from, maxb = 0, 0, 0, '-inf', tonumber(ARGV[2])\n"
    "while capped == 0 do\n"
    "  local bs = call('ZRANGEBYSCORE', KEYS[1], from, hb, 'LIMIT', 0, 64)\n"
    "  if #bs == 0 then break end\n"
    "  for i = 1, #bs do local b = tonumber(bs[i]) local bk = KEYS[1] .. ':' .. bs[i]\n"
    "    if b * W + W <= hi then due = due + call('LLEN', bk)\n"
    "    else scan(bk, function(k, d) if d < hi then due = due + 1 end end) end\n"
    "    nb = nb + 1 if nb >= maxb then capped = 1 break end\n"
    "  end\n"
    "  from = '(' .. bs[#bs]\n"
    "end\n"
    "local first, e = -1, call('ZRANGE', KEYS[1], 0, 0)\n"
    "if e[1] then scan(KEYS[1] .. ':' .. e[1], function(k, d)\n"
    "  if first < 0 or d < first then first = d end end) end\n"
    "local base = string.sub(KEYS[1], 1, -3)\n"
    "local paused = call('EXISTS', base .. ':pause')\n"
    "return {now, pending, leased, running, due, capped, first, paused, "
    "call('HLEN', base .. ':dead'), call('HLEN', base .. ':sched')}\n";

/* KEYS: index, lease, task; ARGV: from, to (ms, due in [from, to)), after
 * due (-1: none), after key, limit -> {key1, due1, key2, due2, ...}, the
 * first `limit` tasks after the cursor in (due, key) order. Buckets come in
 * due order but their tasks in none: each bucket is read whole (scan), its
 * tasks in the range and after the cursor kept, the kept ones sorted and
 * cut to `limit` whenever they reach 2 * limit; the walk ends after the
 * bucket that brings them to `limit` (every later bucket's tasks are due
 * later). */
static const char rr_list_lua[] =
    "#!lua flags=no-writes\n" RR_STABLE RR_SCAN
    "local from, to, ad, ak = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]\n"
    "local left = tonumber(ARGV[5])\n"
    /* a < b by bytes (Lua's < is strcoll) */
    "local function kless(a, b) local n = math.min(#a, #b)\n"
    "  for i = 1, n do local x, y = string.byte(a, i), string.byte(b, i)\n"
    "    if x ~= y then return x < y end end\n"
    "  return #a < #b end\n"
    "local function less(x, y) return x[1] < y[1] or (x[1] == y[1] and kless(x[2], y[2])) end\n"
    "local c, nc = {}, 0\n"
    "local function cut() table.sort(c, less)\n"
    "  for i = nc, left + 1, -1 do c[i] = nil end if nc > left then nc = left end end\n"
    "local function keep(k, d)\n"
    "  if d < from or d >= to or (ad >= 0 and (d < ad or (d == ad and not kless(ak, k)))) then\n"
    "    return end\n"
    "  nc = nc + 1 c[nc] = {d, k} if nc >= 2 * left then cut() end end\n"
    "local lo = from if ad >= 0 and ad > lo then lo = ad end\n"
    "local fb, hb, done = I(floor(lo / W)), I(floor((to - 1) / W)), false\n"
    "while not done do\n"
    "  local bs = call('ZRANGEBYSCORE', KEYS[1], fb, hb, 'LIMIT', 0, 16)\n"
    "  if #bs == 0 then break end\n"
    "  for i = 1, #bs do scan(KEYS[1] .. ':' .. bs[i], keep)\n"
    "    if nc >= left then done = true break end\n"
    "  end\n"
    "  fb = '(' .. bs[#bs]\n"
    "end\n"
    "cut()\n"
    "local out = {} for i = 1, nc do out[2 * i - 1] = c[i][2] out[2 * i] = c[i][1] end\n"
    "return out\n";

/* KEYS: index, lease, task, seq, hold; ARGV: "check" -> {hold exists, leases};
 * ARGV: "drop", most buckets, suffixes... -> 1 (buckets left: call again) or
 * 0 (the partition's keys deleted) */
static const char rr_drop_lua[] =
    "#!lua flags=allow-oom\n" RR_STABLE
    /* leases: an earlier version's {q:p}:lease counted too (upgrade.c) */
    "if ARGV[1] == 'check' then return {call('EXISTS', KEYS[5]), call('ZCARD', KEYS[2]) + "
    "call('ZCARD', string.sub(KEYS[1], 1, -3) .. ':lease')} end\n"
    "local bs = call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)\n"
    "if #bs > 0 then local ks = {} for i = 1, #bs do ks[i] = KEYS[1] .. ':' .. bs[i] end\n"
    "  call('UNLINK', unpack(ks)) call('ZREM', KEYS[1], unpack(bs)) return 1 end\n"
    "local base, ks = string.sub(KEYS[1], 1, -3), {KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]}\n"
    "for i = 3, #ARGV do ks[#ks + 1] = base .. ARGV[i] end\n"
    "call('UNLINK', unpack(ks)) return 0\n";

int tw_rr_adopt_partitions(struct tw_redis *r, const char *v)
{
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || n == 0 || n > TW_REDIS_PARTITIONS_MAX || *v < '1' || *v > '9')
        return TW_ECONFLICT;
    r->cfg.partitions = (uint32_t)n; /* the arrays new sized for any count */
    return 0;
}

static uint64_t rr_clamp(uint64_t ms)
{
    return ms > RR_TIME_MAX ? RR_TIME_MAX : ms;
}

/* One script call of body on partition p's slot: EVAL body 5 keys args.
 * Under api_mu, the calling thread's error noted. 0 and *out (not an error
 * reply), or an error code. */
int tw_rr_eval_body(struct tw_redis *r, const char *body, uint32_t p, int nargs,
                    const char **args, const size_t *lens, redisReply **out)
{
    char kb[6][TW_RR_KEYBUF], nk[4];
    const char *av[3 + TW_RR_NKEYS + 16];
    size_t al[3 + TW_RR_NKEYS + 16];
    if (nargs > 16)
        return TW_EINVAL;
    av[0] = "EVAL";
    al[0] = 4;
    av[1] = body;
    al[1] = strlen(body);
    al[2] = (size_t)snprintf(nk, sizeof nk, "%d", TW_RR_NKEYS);
    av[2] = nk;
    tw_rr_keys(r, p, kb, av + 3, al + 3); /* writes 6: the channel is overwritten below */
    for (int i = 0; i < nargs; i++) {
        av[3 + TW_RR_NKEYS + i] = args[i];
        al[3 + TW_RR_NKEYS + i] = lens ? lens[i] : strlen(args[i]);
    }
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    redisReply *x = NULL;
    pthread_mutex_lock(&r->api_mu);
    int rc = tw_rr_command(&r->api, r->slots[p], 3 + TW_RR_NKEYS + nargs, av, al, &x);
    if (rc == 0 && x->type == REDIS_REPLY_ERROR) {
        rc = tw_rr_reply_error(&r->api, x);
        freeReplyObject(x);
        x = NULL;
    }
    tw_rr_note(r, rc);
    pthread_mutex_unlock(&r->api_mu);
    *out = x;
    return rc;
}

/* One plain command on partition p's slot (or the queue key's slot: p ==
 * UINT32_MAX, slot given); the reply freed. Under api_mu. */
static int rr_plain(struct tw_redis *r, int slot, int argc, const char **av, const size_t *al)
{
    redisReply *x = NULL;
    pthread_mutex_lock(&r->api_mu);
    int rc = tw_rr_command(&r->api, slot, argc, av, al, &x);
    if (rc == 0 && x->type == REDIS_REPLY_ERROR)
        rc = tw_rr_reply_error(&r->api, x);
    tw_rr_note(r, rc);
    pthread_mutex_unlock(&r->api_mu);
    if (x)
        freeReplyObject(x);
    return rc;
}

static long long rr_int_at(const redisReply *x, size_t i)
{
    return i < x->elements && x->element[i]->type == REDIS_REPLY_INTEGER
               ? x->element[i]->integer
               : 0;
}

/* ---- get -------------------------------------------------------------------- */

int tw_redis_get(struct tw_redis *r, const void *key, size_t key_len, struct tw_redis_info *info,
                 void *payload, size_t cap)
{
    if (!r || !key || !info || (!payload && cap))
        return TW_EINVAL;
    if (key_len > TW_REDIS_KEY_MAX)
        return TW_E2BIG;
    const char *args[1] = {key};
    size_t lens[1] = {key_len};
    redisReply *x;
    int rc = tw_rr_eval_body(r, rr_get_lua, tw_rr_part_of(r, key, key_len), 1, args, lens, &x);
    if (rc)
        return rc;
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 3 ||
        x->element[0]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(x);
        return TW_EPROTO;
    }
    const redisReply *v = x->element[1], *l = x->element[2];
    if (v->type != REDIS_REPLY_STRING) {
        freeReplyObject(x);
        return TW_ENOENT;
    }
    uint64_t f[3]; /* token, attempt, due; then the payload */
    size_t pos;
    if (tw_rr_parse_fields(v->str, v->len, 3, f, &pos)) {
        freeReplyObject(x);
        return TW_EPROTO;
    }
    uint64_t tok = f[0], att = f[1], due = f[2];
    memset(info, 0, sizeof *info);
    info->now_ms = (uint64_t)x->element[0]->integer;
    info->due_ms = due;
    info->attempt = (uint32_t)att; /* the starts; above bit 32 a per-task limit (dead.c) */
    info->payload_len = v->len - pos;
    info->state = TW_REDIS_WAITING;
    /* a waiting task's record holds the token its next lease will have
     * (scripts.c); the lease member says whether it is leased */
    if (l->type == REDIS_REPLY_STRING) {
        info->token = tok;
        /* a started lease ends at a whole ms + 0.5 (START's mark, scripts.c): its
         * start is not in the record's attempt yet */
        info->lease_end_ms = strtoull(l->str, NULL, 10);
        info->state = memchr(l->str, '.', l->len) ? TW_REDIS_RUNNING : TW_REDIS_HELD;
        info->attempt += info->state == TW_REDIS_RUNNING;
    }
    info->max_attempts = (uint32_t)(att >> 32);
    if (cap)
        memcpy(payload, v->str + pos, info->payload_len < cap ? info->payload_len : cap);
    freeReplyObject(x);
    return 0;
}

/* ---- list ------------------------------------------------------------------- */

/* (due, key) order: due, then key bytes, then length. */
static int rr_cmp(uint64_t da, const char *ka, size_t la, uint64_t db, const char *kb, size_t lb)
{
    if (da != db)
        return da < db ? -1 : 1;
    int c = memcmp(ka, kb, la < lb ? la : lb);
    if (c)
        return c;
    return la < lb ? -1 : la > lb;
}

static int rr_listed_cmp(const void *a, const void *b)
{
    const struct tw_redis_listed *x = a, *y = b;
    return rr_cmp(x->due_ms, x->key, x->key_len, y->due_ms, y->key, y->key_len);
}

void tw_redis_page_free(struct tw_redis_page *page)
{
    if (!page)
        return;
    for (size_t i = 0; i < page->n; i++)
        free((void *)page->items[i].key);
    free(page->items);
    free(page);
}

int tw_redis_list(struct tw_redis *r, uint64_t from_ms, uint64_t to_ms,
                  const struct tw_redis_cursor *after, size_t limit, struct tw_redis_page **out)
{
    if (out)
        *out = NULL;
    if (!r || !out || limit == 0 || limit > TW_REDIS_PAGE_MAX || from_ms > to_ms ||
        (after && after->key_len > TW_REDIS_KEY_MAX))
        return TW_EINVAL;
    from_ms = rr_clamp(from_ms);
    to_ms = rr_clamp(to_ms);
    struct tw_redis_page *pg = calloc(1, sizeof *pg);
    size_t cap = 0;
    if (!pg)
        return TW_ENOMEM;
    char a[4][24];
    const char *args[5];
    size_t lens[5];
    lens[0] = (size_t)snprintf(a[0], sizeof a[0], "%llu", (unsigned long long)from_ms);
    lens[1] = (size_t)snprintf(a[1], sizeof a[1], "%llu", (unsigned long long)to_ms);
    lens[2] = after ? (size_t)snprintf(a[2], sizeof a[2], "%llu",
                                       (unsigned long long)rr_clamp(after->due_ms))
                    : (size_t)snprintf(a[2], sizeof a[2], "-1");
    lens[4] = (size_t)snprintf(a[3], sizeof a[3], "%zu", limit);
    args[0] = a[0];
    args[1] = a[1];
    args[2] = a[2];
    args[3] = after ? after->key : "";
    lens[3] = after ? after->key_len : 0;
    args[4] = a[3];
    int rc = 0;
    for (uint32_t p = 0; p < r->cfg.partitions && rc == 0; p++) {
        redisReply *x;
        if ((rc = tw_rr_eval_body(r, rr_list_lua, p, 5, args, lens, &x)) != 0)
            break;
        if (x->type != REDIS_REPLY_ARRAY || x->elements % 2) {
            rc = TW_EPROTO;
        } else {
            size_t k = x->elements / 2;
            if (k == limit)
                pg->more = true; /* this partition may have more */
            if (pg->n + k > cap) {
                size_t nc = cap ? cap * 2 : 64;
                while (nc < pg->n + k)
                    nc *= 2;
                struct tw_redis_listed *v = realloc(pg->items, nc * sizeof *v);
                if (!v)
                    rc = TW_ENOMEM;
                else {
                    pg->items = v;
                    cap = nc;
                }
            }
            for (size_t i = 0; i < k && rc == 0; i++) {
                const redisReply *kr = x->element[2 * i], *dr = x->element[2 * i + 1];
                char *kc = kr->type == REDIS_REPLY_STRING ? malloc(kr->len + 1) : NULL;
                if (!kc) {
                    rc = kr->type == REDIS_REPLY_STRING ? TW_ENOMEM : TW_EPROTO;
                    break;
                }
                memcpy(kc, kr->str, kr->len);
                kc[kr->len] = 0;
                pg->items[pg->n++] = (struct tw_redis_listed){
                    kc, kr->len, dr->type == REDIS_REPLY_INTEGER ? (uint64_t)dr->integer : 0};
            }
        }
        freeReplyObject(x);
    }
    if (rc) {
        tw_redis_page_free(pg);
        return rc;
    }
    if (pg->n)
        qsort(pg->items, pg->n, sizeof *pg->items, rr_listed_cmp);
    if (pg->n > limit) {
        for (size_t i = limit; i < pg->n; i++)
            free((void *)pg->items[i].key);
        pg->n = limit;
        pg->more = true;
    }
    if (pg->n) {
        const struct tw_redis_listed *last = &pg->items[pg->n - 1];
        pg->next.due_ms = last->due_ms;
        pg->next.key_len = last->key_len;
        memcpy(pg->next.key, last->key, last->key_len);
    }
    *out = pg;
    return 0;
}

/* ---- counts ----------------------------------------------------------------- */

int tw_redis_counts(struct tw_redis *r, uint64_t within_ms, struct tw_redis_counts *out)
{
    if (!r || !out)
        return TW_EINVAL;
    memset(out, 0, sizeof *out);
    char a[2][24];
    const char *args[2] = {a[0], a[1]};
    snprintf(a[0], sizeof a[0], "%llu",
             (unsigned long long)(within_ms > TW_REDIS_DELAY_MAX ? TW_REDIS_DELAY_MAX
                                                                 : within_ms));
    snprintf(a[1], sizeof a[1], "%d", RR_COUNT_BUCKETS);
    uint64_t first = UINT64_MAX;
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        redisReply *x;
        int rc = tw_rr_eval_body(r, rr_counts_lua, p, 2, args, NULL, &x);
        if (rc)
            return rc;
        if (x->type != REDIS_REPLY_ARRAY || x->elements != 10) {
            freeReplyObject(x);
            return TW_EPROTO;
        }
        uint64_t pending = (uint64_t)rr_int_at(x, 1), leased = (uint64_t)rr_int_at(x, 2);
        uint64_t running = (uint64_t)rr_int_at(x, 3);
        long long e = rr_int_at(x, 6);
        out->now_ms = (uint64_t)rr_int_at(x, 0);
        out->pending += pending;
        out->waiting += pending > leased ? pending - leased : 0;
        out->running += running;
        out->held += leased > running ? leased - running : 0;
        out->due_within += (uint64_t)rr_int_at(x, 4);
        out->due_capped |= rr_int_at(x, 5) != 0;
        out->paused += rr_int_at(x, 7) != 0;
        out->dead += (uint64_t)rr_int_at(x, 8);
        out->schedules += (uint64_t)rr_int_at(x, 9);
        if (e >= 0 && (uint64_t)e < first)
            first = (uint64_t)e;
        freeReplyObject(x);
    }
    out->partitions = r->cfg.partitions;
    out->lag_ms = first != UINT64_MAX && out->now_ms > first ? out->now_ms - first : 0;
    return 0;
}

/* ---- pause, resume ---------------------------------------------------------- */

/* The name of partition p's key with suffix, into buf; its length. */
static size_t rr_part_key(const struct tw_redis *r, uint32_t p, const char *suffix,
                          char buf[TW_RR_KEYBUF])
{
    return (size_t)snprintf(buf, TW_RR_KEYBUF, "{%s:%u}%s", r->queue, (unsigned)p, suffix);
}

/* `cmd KEY [arg]` on every partition, KEY its key with suffix; stops at
 * the first error. */
static int rr_each_part(struct tw_redis *r, const char *cmd, const char *suffix, const char *arg)
{
    if (!r)
        return TW_EINVAL;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    int rc = 0;
    for (uint32_t p = 0; p < r->cfg.partitions && rc == 0; p++) {
        char k[TW_RR_KEYBUF];
        const char *av[3] = {cmd, k, arg};
        size_t al[3] = {strlen(cmd), rr_part_key(r, p, suffix, k), arg ? strlen(arg) : 0};
        rc = rr_plain(r, r->slots[p], arg ? 3 : 2, av, al);
    }
    return rc;
}

/* On one server every partition's flag in one script (atomic, and with
 * the commands the least ACL rule already allows: SET, DEL), so that no
 * claim sees some partitions flagged and others not. TW_ENOMEM if the
 * argument arrays cannot be had. */
static const char rr_pause_all_lua[] =
    "for i = 1, #KEYS do redis.call('SET', KEYS[i], '1') end return #KEYS";
static const char rr_resume_all_lua[] =
    "for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end return #KEYS";

static int rr_all_parts(struct tw_redis *r, const char *lua)
{
    uint32_t P = r->cfg.partitions;
    size_t argc = 3 + (size_t)P;
    const char **av = malloc(argc * sizeof *av);
    size_t *al = malloc(argc * sizeof *al);
    char *keys = malloc((size_t)P * TW_RR_KEYBUF);
    char nk[16];
    int rc = TW_ENOMEM;
    if (av && al && keys) {
        av[0] = "EVAL";
        al[0] = 4;
        av[1] = lua;
        al[1] = strlen(lua);
        al[2] = (size_t)snprintf(nk, sizeof nk, "%u", (unsigned)P);
        av[2] = nk;
        for (uint32_t p = 0; p < P; p++) {
            char *k = keys + (size_t)p * TW_RR_KEYBUF;
            al[3 + p] = rr_part_key(r, p, ":pause", k);
            av[3 + p] = k;
        }
        rc = rr_plain(r, r->slots[0], (int)argc, av, al);
    }
    free(av);
    free(al);
    free(keys);
    return rc;
}

/* A cluster's partitions live in many slots: one command each. */
static bool rr_one_server(struct tw_redis *r)
{
    pthread_mutex_lock(&r->api_mu);
    bool one = !r->api.cluster;
    pthread_mutex_unlock(&r->api_mu);
    return one;
}

/* Every flag at once on one server; one partition after another on a
 * cluster, also when the one-server call failed and its connection found a
 * cluster (a client made while the server was away learns which it is only
 * at its first connection). */
static int rr_flags(struct tw_redis *r, const char *lua, const char *cmd, const char *arg)
{
    if (r && !atomic_load(&r->closed) && rr_one_server(r)) {
        int rc = rr_all_parts(r, lua);
        if (rc == 0 || rr_one_server(r))
            return rc;
    }
    return rr_each_part(r, cmd, ":pause", arg);
}

int tw_redis_pause(struct tw_redis *r)
{
    return rr_flags(r, rr_pause_all_lua, "SET", "1");
}

int tw_redis_resume(struct tw_redis *r)
{
    int rc = rr_flags(r, rr_resume_all_lua, "DEL", NULL);
    /* every worker claims now what came due meanwhile, every partition before it
     * hands a due task over (subscriber.c, claim.c: as after a reconnect) */
    return rc ? rc : rr_each_part(r, "PUBLISH", tw_rr_suffix[5], "resume");
}

/* ---- drop ------------------------------------------------------------------- */

int tw_redis_drop(struct tw_redis *r, bool force)
{
    if (!r)
        return TW_EINVAL;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    const char *args[2 + RR_NELEMS(rr_drop_suffixes)];
    char nb[16];
    snprintf(nb, sizeof nb, "%d", RR_DROP_BUCKETS);
    args[0] = "check";
    for (uint32_t p = 0; p < r->cfg.partitions && !force; p++) {
        redisReply *x;
        int rc = tw_rr_eval_body(r, rr_drop_lua, p, 1, args, NULL, &x);
        if (rc)
            return rc;
        bool busy = x->type != REDIS_REPLY_ARRAY || rr_int_at(x, 0) || rr_int_at(x, 1);
        int proto = x->type != REDIS_REPLY_ARRAY;
        freeReplyObject(x);
        if (proto)
            return TW_EPROTO;
        if (busy)
            return TW_EBUSY;
    }
    args[0] = "drop";
    args[1] = nb;
    for (size_t i = 0; i < RR_NELEMS(rr_drop_suffixes); i++)
        args[2 + i] = rr_drop_suffixes[i];
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        long long more = 1;
        while (more == 1) {
            redisReply *x;
            int rc = tw_rr_eval_body(r, rr_drop_lua, p, (int)RR_NELEMS(args), args, NULL, &x);
            if (rc)
                return rc;
            more = x->type == REDIS_REPLY_INTEGER ? x->integer : -1;
            freeReplyObject(x);
            if (more < 0)
                return TW_EPROTO;
        }
    }
    for (size_t i = 0; i < RR_NELEMS(rr_drop_queue_keys); i++) {
        char k[TW_RR_KEYBUF];
        int n = snprintf(k, sizeof k, "{%s:meta}%s", r->queue, rr_drop_queue_keys[i]);
        const char *av[2] = {"DEL", k};
        size_t al[2] = {3, (size_t)n};
        int rc = rr_plain(r, (int)tw_rr_key_slot(k, (size_t)n), 2, av, al);
        if (rc)
            return rc;
    }
    return 0;
}
