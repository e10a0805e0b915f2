/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: a START round. One round trip of START script calls
 * that starts a batch of held tasks (an executor's round, execute.c), or
 * that acknowledges a batch of finished ones (the acknowledger's, ack.c):
 * the grouping by partition, the calls' arguments, and the answers read
 * back into the round (struct tw_rr_round). What to do with the answers is
 * the caller's: execute.c hands started tasks on, ack.c settles the
 * acknowledgements.
 *
 * A group is one partition's starts or acknowledgements. On a standalone
 * server the groups of the round go in as few calls as fit RR_CALL_ARGV
 * arguments (the script takes any number of partitions' keys there); in a
 * Redis Cluster each group is its own call (one slot's declared keys), the
 * calls pipelined: one round trip either way. Starts and acknowledgements
 * go in separate rounds: a start group is one ZADD of the lease members
 * (each item keeps its member, key:token, in its data: claim.c; the due
 * time sent with each start, the claim's); an
 * acknowledgement group is ZREM and HDEL for all of a partition's pending
 * acknowledgements at once (why apart: ack.c), with HMGET and ZMSCORE
 * only when one is stale or a lease may have ended: the group sends the
 * earliest lease end its items' STARTs granted (scripts.c). */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/internal.h"

#define RR_CALL_ARGV 128 /* arguments of one call, "EVALSHA sha n" included */
_Static_assert(RR_CALL_ARGV <= TW_RR_ARGV_MAX, "a START call must fit the router's argument limit");
_Static_assert(3 + 2 + 2 + 5 + 2 * TW_RR_RUN_BATCH <= RR_CALL_ARGV,
               "a group of a whole run's starts must fit one call");
_Static_assert(3 + 2 + 2 + 5 + 2 * TW_RR_ACK_MAX <= TW_RR_ARGV_MAX,
               "a group of a whole round's acknowledgements must fit one call");
_Static_assert(TW_RR_ACK_MAX >= TW_RR_RUN_BATCH, "a round's items fit either way");

/* The group of partition p (a new one when absent), or -1 when full. */
static long rr_group_of(struct tw_rr_round *e, uint32_t p)
{
    for (size_t g = 0; g < e->ngroups; g++)
        if (e->g[g].part == p)
            return (long)g;
    if (e->ngroups == TW_RR_GROUPS_MAX)
        return -1;
    e->g[e->ngroups] = (struct tw_rr_grp){p, 0, 0, 0, 0};
    return (long)e->ngroups++;
}

/* Arguments of a call of group g alone, "EVALSHA sha n" and the declared keys
 * included: the group's lease and task keys, counts and until, a start's
 * lease member and due time, an acknowledgement's lease member and key. */
static size_t rr_grp_argc(const struct tw_rr_grp *g)
{
    return 3 + 2 + 2 + 5 + 2 * g->ns + 2 * g->na;
}

/* Group the round: the items of v by partition (to start, or to
 * acknowledge: the caller keeps them within TW_RR_GROUPS_MAX partitions),
 * then cut the groups into calls of at most RR_CALL_ARGV arguments
 * (standalone; a bigger group alone), or one call per group (cluster). */
static void rr_start_group(struct tw_rr_round *e, bool cluster)
{
    struct tw_redis *r = e->r;
    struct tw_rr_item *acks[TW_RR_ACK_MAX];
    size_t ag[TW_RR_ACK_MAX], na = 0;
    size_t gi[TW_RR_ACK_MAX];
    e->ngroups = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (cluster && tw_rr_silent_part(r, e->v[i]->part)) { /* left out: unanswered */
            gi[i] = SIZE_MAX;
            if (!e->starting) {
                acks[na] = e->v[i];
                ag[na++] = SIZE_MAX;
            }
            continue;
        }
        long g = rr_group_of(e, e->v[i]->part); /* fits: the caller's bound */
        gi[i] = (size_t)g;
        if (e->starting) {
            e->g[g].ns++;
        } else {
            acks[na] = e->v[i];
            ag[na++] = (size_t)g;
            e->g[g].na++;
        }
    }
    /* the starts and the acknowledgements, each contiguous per group */
    size_t k = 0;
    for (size_t g = 0; g < e->ngroups; g++) {
        e->g[g].s0 = k;
        if (e->starting)
            for (size_t i = 0; i < e->n; i++)
                if (gi[i] == g)
                    e->order[k++] = i;
    }
    k = 0;
    for (size_t g = 0; g <= e->ngroups; g++) { /* the groups', then those left out */
        size_t want = g < e->ngroups ? g : SIZE_MAX;
        if (g < e->ngroups)
            e->g[g].a0 = k;
        for (size_t j = 0; j < na; j++)
            if (ag[j] == want) {
                e->ack[k] = acks[j];
                e->ack_st[k++] = -2;
            }
    }
    e->nack = na;
    for (size_t i = 0; e->starting && i < e->n; i++) /* st: starts only (<= TW_RR_RUN_BATCH) */
        e->st[i] = -2;
    /* calls */
    e->ncalls = 0;
    size_t argc = RR_CALL_ARGV;
    for (size_t g = 0; g < e->ngroups; g++) {
        size_t add = rr_grp_argc(&e->g[g]) - 7; /* its 5 + 2 ns + 2 na arguments */
        if (cluster || argc + add > RR_CALL_ARGV) {
            e->call[e->ncalls++] = g;
            argc = 7 - 2; /* EVALSHA sha n lease ahead: no declared keys */
        }
        argc += add;
    }
    e->call[e->ncalls] = e->ngroups;
}

/* Call c: in a cluster the group's two keys (declared: one slot), then
 * lease, ahead and each group's key names and lists. */
static int rr_start_build(void *ctx, size_t c, int *slot, const char **av, size_t *al, int *nargs)
{
    struct tw_rr_round *e = ctx;
    struct tw_redis *r = e->r;
    size_t g0 = e->call[c], g1 = e->call[c + 1];
    *slot = r->slots[e->g[g0].part];
    for (size_t g = g0; g < g1; g++)
        for (int j = 0; j < 2; j++) /* lease, task */
            e->kl[g][j] = (size_t)snprintf(e->kb[g][j], TW_RR_KEYBUF, "{%s:%u}%s", r->queue,
                                           (unsigned)e->g[g].part, tw_rr_suffix[1 + j]);
    size_t nk = 0;
    if (e->cluster) {
        for (int j = 0; j < 2; j++) {
            av[j] = e->kb[g0][j];
            al[j] = e->kl[g0][j];
        }
        nk = 2;
    }
    const char **a = av + nk;
    size_t *l = al + nk;
    int na = 0;
    l[na] = (size_t)snprintf(e->lease, sizeof e->lease, "%u", r->cfg.lease_ms);
    a[na++] = e->lease;
    l[na] = (size_t)snprintf(e->ahead, sizeof e->ahead, "%llu",
                             (unsigned long long)r->cfg.start_ahead_ms * 1000u);
    a[na++] = e->ahead;
    for (size_t g = g0; g < g1; g++) {
        const struct tw_rr_grp *G = &e->g[g];
        for (int j = 0; j < 2; j++) {
            a[na] = e->kb[g][j];
            l[na++] = e->kl[g][j];
        }
        l[na] = (size_t)snprintf(e->cnt[g][0], sizeof e->cnt[g][0], "%zu", G->na);
        a[na++] = e->cnt[g][0];
        l[na] = (size_t)snprintf(e->cnt[g][1], sizeof e->cnt[g][1], "%zu", G->ns);
        a[na++] = e->cnt[g][1];
        /* until: the earliest lease end of the acknowledged, as START granted
         * it (the script reads the leases only when that is not ahead) */
        uint64_t until = G->na ? UINT64_MAX : 0;
        for (size_t j = G->a0; j < G->a0 + G->na; j++) {
            uint64_t end = tw_rr_lease_end_ms(r, e->ack[j]);
            if (end < until)
                until = end;
        }
        l[na] = (size_t)snprintf(e->cnt[g][2], sizeof e->cnt[g][2], "%llu",
                                 (unsigned long long)until);
        a[na++] = e->cnt[g][2];
        for (size_t j = G->a0; j < G->a0 + G->na; j++) {
            const struct tw_rr_item *it = e->ack[j];
            a[na] = it->data; /* the member, then the key: one buffer */
            l[na++] = tw_rr_member_len(it);
            a[na] = it->data;
            l[na++] = it->key_len;
        }
        for (size_t k = G->s0; k < G->s0 + G->ns; k++) {
            const struct tw_rr_item *it = e->v[e->order[k]];
            a[na] = it->data;
            l[na++] = tw_rr_member_len(it);
            l[na] = (size_t)snprintf(e->due[k], sizeof e->due[k], "%llu",
                                     (unsigned long long)it->due_ms);
            a[na++] = e->due[k];
        }
    }
    *nargs = na;
    return 0;
}

static int rr_start_check(void *ctx, size_t c, const redisReply *x)
{
    struct tw_rr_round *e = ctx;
    uint64_t t_reply = tw_rr_mono_ns();
    size_t g0 = e->call[c], g1 = e->call[c + 1], want = 1;
    if (!x) { /* lost: its acknowledgements may have deleted their tasks (ack.c) */
        for (size_t j = e->g[g0].a0; j < e->g[g1 - 1].a0 + e->g[g1 - 1].na; j++)
            e->ack[j]->ack_lost = 1;
        return 0;
    }
    for (size_t g = g0; g < g1; g++)
        want += e->g[g].na + 2 * e->g[g].ns;
    if (x->type != REDIS_REPLY_ARRAY || x->elements != want)
        return TW_EPROTO;
    for (size_t i = 0; i < x->elements; i++)
        if (x->element[i]->type != REDIS_REPLY_INTEGER)
            return TW_EPROTO;
    uint64_t now = (uint64_t)x->element[0]->integer;
    size_t o = 1;
    for (size_t g = g0; g < g1; g++) {
        const struct tw_rr_grp *G = &e->g[g];
        tw_rr_clock_sample(e->r, G->part, now, t_reply);
        for (size_t j = G->a0; j < G->a0 + G->na; j++) { /* 1 deleted, 2 absent, else 0 */
            long long a = x->element[o++]->integer;
            e->ack_st[j] = (signed char)(a == 1 || a == 2 ? a : 0);
        }
        for (size_t k = G->s0; k < G->s0 + G->ns; k++) {
            size_t i = e->order[k];
            e->st[i] = x->element[o++]->integer;
            e->arg[i] = x->element[o++]->integer;
            e->now[i] = now;
            e->reply_ns[i] = t_reply;
        }
    }
    return 0;
}

void tw_rr_start_round(struct tw_rr_round *e, struct tw_rr_router *rt)
{
    e->sent_ns = tw_rr_mono_ns();
    e->cluster = rt->cluster;
    /* per-master isolation (silent.c): every master's replies read as they
     * come, a master silent after silent_ms, silent ones left out */
    rt->reply_ms = tw_rr_isolate_ms(e->r, e->cluster);
    rt->on_silent = tw_rr_silent_mark;
    rt->silent_arg = e->r;
    rr_start_group(e, e->cluster);
    if (e->ngroups == 0)
        return;
    uint64_t rc0 = rt->reconnects;
    (void)tw_rr_eval_many(rt, TW_RR_START, e->ncalls, e->cluster ? 2 : 0, rr_start_build, e,
                          rr_start_check);
    atomic_fetch_add(&e->r->worker_reconnects, rt->reconnects - rc0);
}
