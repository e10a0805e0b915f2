/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the replica wait. Redis replicates asynchronously: a
 * write the master acknowledged may not have reached any replica when the
 * master dies, and a failover then promotes a replica without it (a set
 * vanishes, a move or a remove is undone). With wait_replicas > 0 the
 * producer calls (set, move, remove, set_many) send WAIT wait_replicas
 * wait_timeout_ms after their write, and answer TW_EREPLICAS when fewer
 * replicas confirmed it: written on the master, not known to survive a
 * failover (never "nothing written"). The worker's own writes (claims,
 * starts, acknowledgements, failures, releases) are not waited for: a loss
 * of one delivers a task again (at least once), never early, never not at
 * all.
 *
 * WAIT counts the replicas that have acknowledged the calling connection's
 * last write, so it must go on the connection that carried the write. set,
 * move and remove append it to the same write as their script call
 * (router.c, rr_roundtrip): one round trip, the reply of each attempt
 * followed by its WAIT's. A call retried after a lost attempt is
 * reported unconfirmed: the lost attempt's write, which a retried move or
 * remove answers for without writing again, went over a connection now
 * gone, whose WAIT cannot be asked. set_many sends one WAIT per connected master after its
 * pipelined calls (one round trip more per set_many, not per item), and
 * counts any connection opened meanwhile as unconfirmed (a call may have
 * gone over a connection now gone, whose WAIT cannot be asked). Without
 * wait_replicas nothing is sent and the router pays one test per command.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "redis/internal.h"

#define RR_WAIT_REFUSED (-2) /* rt->waited: WAIT answered an error (its words in rt->err) */

/* WAIT's arguments: want replicas within ms */
static int rr_wait_command(struct tw_rr_link *c, int want, uint32_t ms)
{
    char n[16], t[16];
    snprintf(n, sizeof n, "%d", want);
    snprintf(t, sizeof t, "%u", (unsigned)ms);
    return tw_rr_link_append(c, 3, (const char *[]){"WAIT", n, t}, NULL);
}

int tw_rr_wait_append(struct tw_rr_router *rt, struct tw_rr_link *c)
{
    rt->waited = -1;
    return rr_wait_command(c, rt->wait_replicas, rt->wait_ms) == 0 ? 0 : -1;
}

/* What a WAIT reply says: the replicas that confirmed, RR_WAIT_REFUSED for
 * an error reply (NOPERM, say: its words into rt->err), -1 for none. */
static long long rr_answer(struct tw_rr_router *rt, const redisReply *x)
{
    if (x && x->type == REDIS_REPLY_INTEGER)
        return x->integer;
    if (!x || x->type != REDIS_REPLY_ERROR)
        return -1;
    snprintf(rt->err, sizeof rt->err, "written on the master; WAIT refused: %s", x->str);
    return RR_WAIT_REFUSED;
}

void tw_rr_wait_read(struct tw_rr_router *rt, struct tw_rr_link *c)
{
    redisReply *x = NULL;
    if (tw_rr_link_get(c, (void **)&x) != 0)
        x = NULL;
    rt->waited = rr_answer(rt, x);
    if (x)
        freeReplyObject(x);
}

/* TW_EREPLICAS with its words in rt->err when got < want. */
static int rr_short(struct tw_rr_router *rt, long long got, int want, uint32_t ms)
{
    if (got >= want)
        return 0;
    if (got == RR_WAIT_REFUSED) /* rt->err holds the refusal */
        return TW_EREPLICAS;
    if (got < 0)
        snprintf(rt->err, sizeof rt->err,
                 "written on the master; WAIT unanswered: replicas not confirmed");
    else
        snprintf(rt->err, sizeof rt->err,
                 "written on the master; WAIT: %lld of %d replicas confirmed within %u ms", got,
                 want, (unsigned)ms);
    return TW_EREPLICAS;
}

int tw_rr_wait_check(struct tw_redis *r)
{
    struct tw_rr_router *rt = &r->api;
    int rc = rt->wait_replicas ? rr_short(rt, rt->waited, rt->wait_replicas, rt->wait_ms) : 0;
    rt->wait_replicas = 0;
    return rc;
}

int tw_rr_wait_many(struct tw_redis *r, uint64_t opened)
{
    struct tw_rr_router *rt = &r->api;
    int want = (int)r->cfg.wait_replicas;
    if (want == 0)
        return 0;
    if (rt->opened != opened)
        return rr_short(rt, -1, want, r->cfg.wait_timeout_ms);
    long long least = -1;
    for (size_t i = 0; i < rt->nnodes; i++) {
        if (!rt->nodes[i].c)
            continue;
        redisReply *x = NULL;
        if (rr_wait_command(rt->nodes[i].c, want, r->cfg.wait_timeout_ms) != 0 ||
            tw_rr_link_get(rt->nodes[i].c, (void **)&x) != 0)
            x = NULL;
        long long got = rr_answer(rt, x);
        if (!x)
            tw_rr_drop(rt, i);
        else
            freeReplyObject(x);
        if (got < 0)
            return rr_short(rt, got, want, r->cfg.wait_timeout_ms);
        if (least < 0 || got < least)
            least = got;
    }
    return rr_short(rt, least, want, r->cfg.wait_timeout_ms);
}
