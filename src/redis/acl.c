/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the permission check of tw_redis_new.
 *
 * A server with ACLs runs each command the layer sends, and each
 * redis.call of its scripts, under the instance's user. A command refused
 * inside a script says only "The user executing the script can't run this
 * command" (Redis 7.0), and a command only the worker's threads send would
 * fail there, long after tw_redis_new returned. So tw_redis_new asks first,
 * in one EVAL: redis.acl_check_cmd (Redis >= 7.0; an older server is not
 * asked) of every command the layer sends, with the keys and channel of the
 * first and the last partition, before anything is written. The first one
 * refused ends tw_redis_new with TW_EAUTH and a NOPERM text naming it (the
 * command and its arguments: key and channel names, never a credential).
 *
 * tw_rr_acl_needs lists them: the client's and the worker's own commands,
 * and every command scripts.c calls, each on the keys it is called on (a
 * test keeps the list complete against the scripts' text).
 * include/twheel/redis.h states the same as the least ACL rule. WAIT is
 * asked for only with wait_replicas: refused, it would show as replicas
 * that never answer (TW_EREPLICAS) rather than as a permission. ROLE, which
 * every connection sends first with Sentinel, is not asked: refused, it
 * fails the connection itself with TW_EAUTH (sentinel.c), before this
 * check could run.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

/* The probe: ARGV holds groups "n cmd arg ...", n counting cmd and args. */
static const char rr_probe[] =
    "if not redis.acl_check_cmd then return 0 end\n"
    "local i = 1\n"
    "while i <= #ARGV do\n"
    "  local n = tonumber(ARGV[i])\n"
    "  if not redis.acl_check_cmd(unpack(ARGV, i + 1, i + n)) then\n"
    "    return redis.error_reply('NOPERM this user has no permissions to run \\'' ..\n"
    "      table.concat({unpack(ARGV, i + 1, i + n)}, ' ') ..\n"
    "      '\\' (redis.acl_check_cmd at tw_redis_new: the layer sends it)')\n"
    "  end\n"
    "  i = i + n + 1\n"
    "end\n"
    "return 1\n";

/* @d index, @b a bucket, @l lease, @t task, @s seq, @h hold, @c channel,
 * @n the database */
const struct tw_rr_acl_need tw_rr_acl_needs[] = {
    /* the layer's own commands */
    {0, {"evalsha", "0", "5", "@d", "@l", "@t", "@s", "@h"}},
    {0, {"eval", "return", "5", "@d", "@l", "@t", "@s", "@h"}},
    {0, {"script", "load", "return"}},
    {0, {"cluster", "slots"}},
    {0, {"hlen", "@t"}},
    {0, {"info", "memory"}}, /* the maxmemory-policy check (redis.c) */
    {TW_RR_ACL_WORKER, {"subscribe", "@c"}},
    {TW_RR_ACL_CLUSTER, {"asking"}},
    {TW_RR_ACL_DB, {"select", "@n"}},
    {TW_RR_ACL_WAIT, {"wait", "0", "0"}}, /* after the producer calls (wait.c) */
    /* what the scripts call (scripts.c) */
    {0, {"exists", "@b"}},
    {0, {"exists", "@t"}},
    {0, {"get", "@h"}},
    {0, {"set", "@h", "1", "px", "1"}},
    {0, {"hget", "@t", "k"}},
    {0, {"hmget", "@t", "k"}},
    {0, {"hset", "@t", "k", "v"}},
    {0, {"hdel", "@t", "k"}},
    {0, {"incrby", "@s", "1"}},
    {0, {"publish", "@c", "1"}},
    {0, {"time"}}, /* also the worker's own (offset.c) */
    {0, {"zadd", "@d", "1", "k"}},
    {0, {"zadd", "@l", "1", "k"}},
    {0, {"rpush", "@b", "k"}},
    {0, {"llen", "@b"}},
    {0, {"lrange", "@b", "0", "1"}},
    {0, {"ltrim", "@b", "1", "-1"}},
    {0, {"lrem", "@b", "1", "k"}},
    {0, {"del", "@b"}},
    {0, {"zrangebyscore", "@d", "0", "1"}},
    {0, {"zrangebyscore", "@l", "0", "1"}},
    {0, {"zrem", "@d", "k"}},
    {0, {"zrem", "@l", "k"}},
    {0, {"zscore", "@l", "k"}},
    {0, {"zmscore", "@l", "k"}},
    /* dead letters and schedules (dead.c, schedule.c): their HASHes and
     * ZSET are keys of the same pattern, {Q:p}:dead, {Q:p}:sched[:n] */
    {0, {"hexists", "@t", "k"}},
    {0, {"hscan", "@t", "0"}},
    {0, {"unlink", "@t"}},
};
const size_t tw_rr_acl_nneeds = sizeof tw_rr_acl_needs / sizeof tw_rr_acl_needs[0];

/* The argument a token stands for in partition p's names (kb: tw_rr_keys's,
 * bucket: a bucket key, db: the database). */
static const char *rr_token(const char *t, char kb[6][TW_RR_KEYBUF], const char *bucket,
                            const char *db)
{
    if (t[0] != '@')
        return t;
    switch (t[1]) {
    case 'd': return kb[0];
    case 'l': return kb[1];
    case 't': return kb[2];
    case 's': return kb[3];
    case 'h': return kb[4];
    case 'c': return kb[5];
    case 'b': return bucket;
    default: return db;
    }
}

int tw_rr_acl_check(struct tw_redis *r)
{
    unsigned when = (r->worker ? TW_RR_ACL_WORKER : 0u) |
                    (r->api.cluster ? TW_RR_ACL_CLUSTER : 0u) |
                    (r->conn.db > 0 ? TW_RR_ACL_DB : 0u) |
                    (r->cfg.wait_replicas ? TW_RR_ACL_WAIT : 0u);
    uint32_t parts[2] = {0, r->cfg.partitions - 1};
    size_t nparts = r->cfg.partitions > 1 ? 2 : 1;
    size_t cap = 3 + nparts * tw_rr_acl_nneeds * (1 + TW_RR_ACL_ARGS);
    const char **av = malloc(cap * sizeof *av);
    size_t *al = malloc(cap * sizeof *al);
    char (*kb)[6][TW_RR_KEYBUF] = malloc(nparts * sizeof *kb);
    char (*bucket)[TW_RR_KEYBUF + 4] = malloc(nparts * sizeof *bucket);
    if (!av || !al || !kb || !bucket) {
        free(av);
        free(al);
        free(kb);
        free(bucket);
        return TW_ENOMEM;
    }
    static const char *const counts[] = {"0", "1", "2", "3", "4", "5", "6", "7", "8"};
    char db[16];
    snprintf(db, sizeof db, "%d", r->conn.db);
    size_t n = 0;
    av[n++] = "EVAL";
    av[n++] = rr_probe;
    av[n++] = "0";
    for (size_t q = 0; q < nparts; q++) {
        const char *kv[6];
        size_t kl[6];
        tw_rr_keys(r, parts[q], kb[q], kv, kl);
        snprintf(bucket[q], sizeof bucket[q], "%s:0", kb[q][0]);
        for (size_t i = 0; i < tw_rr_acl_nneeds; i++) {
            const struct tw_rr_acl_need *nd = &tw_rr_acl_needs[i];
            if (nd->when & ~when)
                continue;
            size_t k = 0;
            while (k < TW_RR_ACL_ARGS && nd->argv[k])
                k++;
            av[n++] = counts[k];
            for (size_t j = 0; j < k; j++)
                av[n++] = rr_token(nd->argv[j], kb[q], bucket[q], db);
        }
    }
    for (size_t i = 0; i < n; i++)
        al[i] = strlen(av[i]);
    redisReply *x;
    int rc = tw_rr_command(&r->api, -1, (int)n, av, al, &x);
    if (rc == 0) {
        if (x->type == REDIS_REPLY_ERROR)
            rc = tw_rr_reply_error(&r->api, x);
        else if (x->type != REDIS_REPLY_INTEGER)
            rc = TW_EPROTO;
        freeReplyObject(x);
    }
    free(av);
    free(al);
    free(kb);
    free(bucket);
    return rc;
}
