/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: taking over the leases an earlier version left.
 *
 * The lease set of a partition is {q:p}:leases, its members `key:token`
 * (scripts.c). Earlier versions kept {q:p}:lease, its members the bare
 * keys, with the lease's token in the task record. Those members cannot
 * move into the new set as they are: a key may itself end in ":digits",
 * so the two forms cannot share one set. tw_redis_new (every client's)
 * converts them before it returns: each old member becomes `key:token`
 * with the token its record holds, its score (the lease end, START's mark
 * included) kept; a member without a record is dropped (the task is
 * gone). 1000 members a call, each call idempotent, so a client that dies
 * in it leaves what the next one finishes.
 *
 * Once every partition is converted, the client writes {q:meta}:schema
 * (RR_SCHEMA), and a later client that reads it converts nothing: one GET
 * at open. A queue created by this version gets the marker at its first
 * open (its partitions hold no old set: one call each, once).
 * Clients of the earlier versions must be stopped first (CHANGELOG): a
 * lease an old worker writes after the conversion is never recovered, and
 * an old producer's set would leave a new lease member in place.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "redis/internal.h"

#define RR_SCHEMA "2"           /* {q:p}:leases, members key:token */
#define RR_UPGRADE_SLICE "1000" /* old members converted a call */
#define RR_UPGRADE_CALLS 100000 /* a bound on the calls of one partition */

/* KEYS: the five of a partition; ARGV: slice -> 1 (converted some: call
 * again) or 0 (no old lease set left). allow-oom: it keeps memory flat. */
static const char rr_upgrade_lua[] =
    "#!lua flags=allow-oom\n" TW_RR_STABLE_LUA
    "local old = string.sub(KEYS[1], 1, -3) .. ':lease'\n"
    "local m = redis.call('ZRANGEBYSCORE', old, '-inf', '+inf', 'WITHSCORES', "
    "'LIMIT', 0, tonumber(ARGV[1]))\n"
    "if #m == 0 then return 0 end\n"
    "local ks, n = {}, 0 for i = 1, #m, 2 do n = n + 1 ks[n] = m[i] end\n"
    "local vs = redis.call('HMGET', KEYS[3], unpack(ks, 1, n))\n"
    "local z, nz = {}, 0\n"
    "for j = 1, n do local tk = vs[j] and string.match(vs[j], '^(%d+) ')\n"
    "  if tk then z[nz + 1] = m[2 * j] z[nz + 2] = ks[j] .. ':' .. tk nz = nz + 2 end end\n"
    "if nz > 0 then redis.call('ZADD', KEYS[2], unpack(z, 1, nz)) end\n"
    "redis.call('ZREM', old, unpack(ks, 1, n))\n"
    "return 1\n";

/* GET (set false) or SET of {q:meta}:schema: 0 and *is (GET: holds
 * RR_SCHEMA), or an error code. */
static int rr_schema(struct tw_redis *r, bool set, bool *is)
{
    char key[TW_RR_KEYBUF];
    size_t kl = (size_t)snprintf(key, sizeof key, "{%s:meta}:schema", r->queue);
    const char *av[3] = {set ? "SET" : "GET", key, RR_SCHEMA};
    size_t al[3] = {3, kl, strlen(RR_SCHEMA)};
    redisReply *x;
    int rc = tw_rr_command(&r->api, (int)tw_rr_key_slot(key, kl), set ? 3 : 2, av, al, &x);
    if (rc)
        return rc;
    if (x->type == REDIS_REPLY_ERROR)
        rc = tw_rr_reply_error(&r->api, x);
    else if (set)
        rc = x->type == REDIS_REPLY_STATUS ? 0 : TW_EPROTO;
    else if (x->type == REDIS_REPLY_STRING)
        *is = x->len == strlen(RR_SCHEMA) && memcmp(x->str, RR_SCHEMA, x->len) == 0;
    else
        rc = x->type == REDIS_REPLY_NIL ? 0 : TW_EPROTO;
    freeReplyObject(x);
    return rc;
}

int tw_rr_upgrade_leases(struct tw_redis *r)
{
    bool done = false;
    int rc = rr_schema(r, false, &done);
    if (rc || done)
        return rc;
    const char *args[1] = {RR_UPGRADE_SLICE};
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        for (int calls = 0;; calls++) {
            if (calls == RR_UPGRADE_CALLS)
                return TW_EPROTO; /* members that do not go away */
            redisReply *x;
            if ((rc = tw_rr_eval_body(r, rr_upgrade_lua, p, 1, args, NULL, &x)) != 0)
                return rc;
            long long more = 0;
            rc = tw_rr_int_reply(x, &more);
            freeReplyObject(x);
            if (rc)
                return rc;
            if (!more)
                break;
        }
    }
    return rr_schema(r, true, &done);
}
