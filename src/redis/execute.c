/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the executors' START rounds. Starting held tasks in
 * START script calls with the delayed acknowledgements riding along,
 * running the started ones (at once or through the armed queue), FAIL, and
 * the acknowledger thread for what no START took. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/internal.h"

#define RR_ACK_FOLD 32       /* most acknowledgements folded into one START call */
#define RR_ACK_PENDING_MAX 4096 /* more waiting: the acknowledger sends them at once */

static void rr_requeue(struct tw_redis *r, struct tw_rr_item *it, uint64_t wait_ns)
{
    it->due_local_ns = tw_rr_mono_ns() + wait_ns;
    if (tw_rr_local_add(r->local, it) != 0)
        tw_rr_orphan(r, it); /* stopping (or no memory): released by stop */
}

/* A round of an executor: START a batch of held items, with delayed
 * acknowledgements riding along (or, on the acknowledger, acknowledgements
 * alone), in one START script call per partition group. A group is one
 * partition's starts and acknowledgements. On a standalone server every
 * group of the round goes in one call (the script takes any number of
 * partitions' keys there); in a Redis Cluster each group is its own call
 * (one slot's declared keys), the calls pipelined: one round trip either
 * way. */
#define RR_CALL_ARGV 128 /* arguments of one call, "EVALSHA sha n" included */
_Static_assert(RR_CALL_ARGV <= TW_RR_ARGV_MAX, "a START call must fit the router's argument limit");
_Static_assert(3 + 2 + 2 + 4 + 3 * TW_RR_RUN_BATCH <= RR_CALL_ARGV,
               "a group of a whole run's starts must fit one call");

/* ---- delayed acknowledgements ------------------------------------------------
 * ACKs ride on STARTs. An executor does not acknowledge a finished task at
 * once: the item goes to a pending list, and the next START call (from any
 * executor of this worker) carries it: on a standalone server any START
 * call (one list for every partition), in a cluster the next START call of
 * its partition (a list per partition: one slot per call). What no START
 * picks up within ack_delay (100 ms, at most lease_ms / 8) the acknowledger
 * thread sends in START calls that start nothing; stop sends the rest.
 * Why: with tasks coming due one at a time, an acknowledgement call of its
 * own per task would double the script calls per delivered task. The price,
 * at-least-once: a worker that dies has up to ack_delay more of finished
 * tasks unacknowledged, delivered again when their leases end (the same as
 * an acknowledgement lost on the way); and a finished task stays in Redis
 * (pending, in stats) up to ack_delay longer. */
static uint32_t rr_ack_list(const struct tw_redis *r, uint32_t part)
{
    return r->multi ? 0 : part;
}

static void rr_ack_push(struct tw_redis *r, struct tw_rr_item *it)
{
    uint32_t p = rr_ack_list(r, it->part);
    it->next = NULL;
    it->due_local_ns = tw_rr_mono_ns(); /* pending since (the field is free now) */
    pthread_mutex_lock(&r->ack_mu);
    if (r->ack_tail[p])
        r->ack_tail[p]->next = it;
    else
        r->ack_head[p] = it;
    r->ack_tail[p] = it;
    if (r->ack_n++ == 0 || r->ack_n >= RR_ACK_PENDING_MAX)
        pthread_cond_signal(&r->ack_cv); /* arm the acknowledger's timer, or flush now */
    pthread_mutex_unlock(&r->ack_mu);
}

/* Up to max pending items of list p, oldest first (ack_mu held). */
static size_t rr_ack_take(struct tw_redis *r, uint32_t p, struct tw_rr_item **out, size_t max)
{
    size_t k = 0;
    while (k < max && r->ack_head[p]) {
        struct tw_rr_item *it = r->ack_head[p];
        r->ack_head[p] = it->next;
        out[k++] = it;
    }
    if (!r->ack_head[p])
        r->ack_tail[p] = NULL;
    r->ack_n -= k;
    return k;
}

/* The group of partition p (a new one when absent), or -1 when full. */
static long rr_exec_find(struct tw_rr_exec *e, uint32_t p)
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
 * included: a start is key, token and attempt, an acknowledgement key and token. */
static size_t rr_grp_argc(const struct tw_rr_grp *g)
{
    return 3 + 2 + 2 + 4 + 3 * g->ns + 2 * g->na;
}

/* Group the round: the items of v by partition (to start, or to
 * acknowledge), and on a START the pending acknowledgements that fit (any
 * partition's on a standalone server, the started partitions' in a
 * cluster; each group small enough for a call of its own), then cut the
 * groups into calls of at most RR_CALL_ARGV arguments (standalone), or one
 * call per group (cluster). */
static void rr_exec_group(struct tw_rr_exec *e, bool cluster)
{
    struct tw_redis *r = e->r;
    struct tw_rr_item *acks[TW_RR_ACK_MAX];
    size_t ag[TW_RR_ACK_MAX], na = 0;
    size_t gi[TW_RR_RUN_BATCH];
    e->ngroups = 0;
    for (size_t i = 0; i < e->n; i++) {
        long g = rr_exec_find(e, e->v[i]->part); /* fits: <= 32 items */
        gi[i] = (size_t)g;
        if (e->starting) {
            e->g[g].ns++;
        } else {
            acks[na] = e->v[i];
            ag[na++] = (size_t)g;
            e->g[g].na++;
        }
    }
    if (e->starting) {
        pthread_mutex_lock(&r->ack_mu);
        if (r->multi) {
            while (na < TW_RR_ACK_MAX && r->ack_head[0]) {
                long g = rr_exec_find(e, r->ack_head[0]->part);
                if (g < 0 || rr_grp_argc(&e->g[g]) + 2 > RR_CALL_ARGV)
                    break;
                ag[na] = (size_t)g;
                e->g[g].na++;
                na += rr_ack_take(r, 0, acks + na, 1);
            }
        } else {
            size_t ng = e->ngroups;
            for (size_t g = 0; g < ng; g++) {
                uint32_t p = e->g[g].part;
                while (na < TW_RR_ACK_MAX && r->ack_head[p] && e->g[g].na < RR_ACK_FOLD &&
                       rr_grp_argc(&e->g[g]) + 2 <= RR_CALL_ARGV) {
                    ag[na] = g;
                    e->g[g].na++;
                    na += rr_ack_take(r, p, acks + na, 1);
                }
            }
        }
        pthread_mutex_unlock(&r->ack_mu);
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
    for (size_t g = 0; g < e->ngroups; g++) {
        e->g[g].a0 = k;
        for (size_t j = 0; j < na; j++)
            if (ag[j] == g) {
                e->ack[k] = acks[j];
                e->ack_st[k++] = -2;
            }
    }
    e->nack = na;
    for (size_t i = 0; i < e->n; i++)
        e->st[i] = -2;
    /* calls */
    e->ncalls = 0;
    size_t argc = RR_CALL_ARGV;
    for (size_t g = 0; g < e->ngroups; g++) {
        size_t add = rr_grp_argc(&e->g[g]) - 7; /* its 4 + 3 ns + 2 na arguments */
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
static int rr_exec_build(void *ctx, size_t c, int *slot, const char **av, size_t *al, int *nargs)
{
    struct tw_rr_exec *e = ctx;
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
        for (size_t j = G->a0; j < G->a0 + G->na; j++) {
            const struct tw_rr_item *it = e->ack[j];
            a[na] = it->data;
            l[na++] = it->key_len;
            l[na] = (size_t)snprintf(e->atok[j], sizeof e->atok[j], "%llu",
                                     (unsigned long long)it->token);
            a[na++] = e->atok[j];
        }
        for (size_t k = G->s0; k < G->s0 + G->ns; k++) {
            const struct tw_rr_item *it = e->v[e->order[k]];
            a[na] = it->data;
            l[na++] = it->key_len;
            l[na] = (size_t)snprintf(e->tok[k], sizeof e->tok[k], "%llu",
                                     (unsigned long long)it->token);
            a[na++] = e->tok[k];
            l[na] = (size_t)snprintf(e->att[k], sizeof e->att[k], "%llu",
                                     (unsigned long long)it->attempt + 1);
            a[na++] = e->att[k];
        }
    }
    *nargs = na;
    return 0;
}

static int rr_exec_check(void *ctx, size_t c, const redisReply *x)
{
    struct tw_rr_exec *e = ctx;
    uint64_t t_reply = tw_rr_mono_ns();
    size_t g0 = e->call[c], g1 = e->call[c + 1], want = 1;
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
        for (size_t j = G->a0; j < G->a0 + G->na; j++)
            e->ack_st[j] = x->element[o++]->integer == 1 ? 1 : 0;
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

static void rr_ack_count(struct tw_redis *r, long long st)
{
    if (st == 1)
        atomic_fetch_add(&r->delivered, 1);
    else if (st == 0)
        atomic_fetch_add(&r->stale_acks, 1);
    /* no answer: the lease runs out and the task is delivered again */
}

/* One round trip: the calls of the round (e->v, e->n, e->starting set). */
static void rr_exec_eval(struct tw_rr_exec *e, struct tw_rr_router *rt)
{
    e->sent_ns = tw_rr_mono_ns();
    e->cluster = rt->cluster;
    rr_exec_group(e, e->cluster);
    if (e->ngroups == 0)
        return;
    uint64_t rc0 = rt->reconnects;
    (void)tw_rr_eval_many(rt, TW_RR_START, e->ncalls, e->cluster ? 2 : 0, rr_exec_build, e,
                          rr_exec_check);
    atomic_fetch_add(&e->r->worker_reconnects, rt->reconnects - rc0);
}

/* The round's acknowledgements, answered: counted and freed; unanswered:
 * back to the pending list (requeue) or dropped (their leases run out). */
static void rr_exec_acks_done(struct tw_rr_exec *e, bool requeue)
{
    for (size_t j = 0; j < e->nack; j++) {
        if (e->ack_st[j] == -2 && requeue) { /* no answer: the acknowledger tries again */
            rr_ack_push(e->r, e->ack[j]);
            continue;
        }
        rr_ack_count(e->r, e->ack_st[j]);
        free(e->ack[j]);
    }
    e->nack = 0;
}

/* The tasks of a batch are started together (their leases renewed then) and
 * run one after the other: a batch must run well within lease_ms. Keep a
 * running mean of execute's time and let a batch take a quarter of the lease
 * at most (1..TW_RR_RUN_BATCH tasks). */
static void rr_exec_time(struct tw_redis *r, uint64_t ns)
{
    uint64_t avg = atomic_load(&r->exec_ns);
    avg = avg ? avg - avg / 8 + ns / 8 : ns + 1;
    atomic_store(&r->exec_ns, avg);
    uint64_t budget = (uint64_t)r->cfg.lease_ms * 1000000u / 4;
    tw_rr_local_batch(r->local, (size_t)(budget / avg > TW_RR_RUN_BATCH ? TW_RR_RUN_BATCH
                                                                           : budget / avg));
}

/* When a granted start may run: the server's clock read srv_us before the
 * reply that carried it was read here at reply_ns, so after due_us - srv_us
 * more (plus 0.1% and 1 us against a local clock running fast against the
 * server's) the server's clock has surely passed the due time. 0: at once. */
static uint64_t rr_run_at(uint64_t due_ms, uint64_t srv_us, uint64_t reply_ns)
{
    uint64_t due_us = due_ms * 1000u;
    if (srv_us >= due_us)
        return 0;
    uint64_t w = due_us - srv_us;
    return reply_ns + w * 1000u + w + 1000u;
}

/* Run one started item at (or after) it->run_ns, on executor `thread`: count
 * its lateness, execute it, queue the acknowledgement of DONE (rr_ack_push),
 * FAIL it at once when FAILED. Called by tw_rr_run for those due already and
 * by local.c for the armed ones, on whichever executor woke first. */
void tw_rr_exec_one(void *ctx, struct tw_rr_item *it, unsigned thread)
{
    struct tw_redis *r = ctx;
    struct tw_rr_router *rt = &r->exec_rt[thread];
    uint64_t t1 = tw_rr_mono_ns();
    /* lateness: a lower bound of the server's clock now, against due */
    uint64_t due_us = it->due_ms * 1000u, srv = it->srv_us + (t1 - it->reply_ns) / 1000u;
    tw_rr_note_late(r, srv > due_us ? srv - due_us : 0);
#ifdef TW_RR_TRACE
    tw_rr_trace_note(r, it, it->take_ns, it->sent_ns, it->reply_ns, it->srv_us, t1, it->batch,
                  thread);
#endif
    if (it->started > 1)
        atomic_fetch_add(&r->redelivered, 1);
    struct tw_redis_task t = {it->data, it->key_len, it->payload, it->payload_len,
                              it->due_ms, (uint32_t)it->started};
    enum tw_redis_result res = r->cfg.execute(r->cfg.arg, &t);
    rr_exec_time(r, tw_rr_mono_ns() - t1);
    if (res == TW_REDIS_DONE) {
        rr_ack_push(r, it); /* acknowledged with a later START, or by the acknowledger */
        return;
    }
    atomic_fetch_add(&r->failed, 1);
    char kb[6][TW_RR_KEYBUF], tok[24], base[16], max[16];
    const char *av[10];
    size_t al[10];
    tw_rr_keys(r, it->part, kb, av, al);
    av[9] = av[5];
    al[9] = al[5];
    av[5] = it->data;
    al[5] = it->key_len;
    al[6] = (size_t)snprintf(tok, sizeof tok, "%llu", (unsigned long long)it->token);
    av[6] = tok;
    al[7] = (size_t)snprintf(base, sizeof base, "%u", r->cfg.retry_base_ms);
    av[7] = base;
    al[8] = (size_t)snprintf(max, sizeof max, "%u", r->cfg.retry_max_ms);
    av[8] = max;
    redisReply *x;
    if (tw_rr_eval(rt, TW_RR_FAIL, r->slots[it->part], TW_RR_NKEYS, 5, av, al, &x) == 0) {
        long long ok = 0;
        if (tw_rr_int_reply(x, &ok) != 0 || ok != 1)
            atomic_fetch_add(&r->stale_acks, 1);
        freeReplyObject(x);
    }
    free(it);
}

/* Run a batch of held items whose start time has come (executor `thread`):
 * START them (the pending acknowledgements riding along), then hand each
 * answered item on at once: a started task in order of the time it may run
 * at (a start is granted up to start_ahead_ms before its due time), those
 * due already here at once (tw_rr_exec_one), the others through the worker's
 * armed queue (local.c); one not due yet by the server's clock back to the
 * wheel for that long; one whose lease is gone dropped.
 *
 * Unanswered items (no reply for their call: Redis, or one master, away).
 * A round answered in part (a cluster with a master away, or a standalone
 * batch of several calls of which a later one failed) hands on what was
 * answered and puts the unanswered items back into the wheel, due again
 * after rr_retry_ns: a later round (any executor's) STARTs them with what
 * comes due then. Retrying them here would hold the answered tasks and
 * this executor until the away master is back (up to lease_ms / 2); every
 * executor would end up in such a loop, and the healthy masters' tasks
 * would wait for them. So no executor waits with started tasks of its own
 * (with threads = 1 it goes back to its armed queue at once, local.c), and
 * stop is never held by a retry.
 * A round with no answer at all is retried here every TW_RR_RETRY_MS, the
 * batch kept, when Redis looks wholly away: a standalone server, or a
 * cluster none of whose connections is left (a failed one is closed).
 * Putting its items back behind the ones that come due meanwhile would
 * start later tasks first once Redis is back (out of due order). That
 * gives up while stopping, or after lease_ms / 2 (the leases are about
 * gone: the items go back to the wheel, their STARTs will tell). In a
 * cluster with another master still connected, a round with no answer (its
 * items all on the away master) goes back to the wheel instead, like the
 * unanswered part of a round: redis.h promises no order for the tasks a
 * worker held when their master went, and an executor must not wait
 * seconds for that master while the others' tasks come due.
 * Each round's redirects, reconnects and backoff end after
 * RR_START_RETRY_MS (router retry_ms, 5 ms), not command_timeout_ms: a
 * master that refuses connections costs a round that much; the retry is
 * the next round's (a redirect is still followed at once). 5 ms, not the
 * claim round's 20: an away master's held tasks cycle through many rounds,
 * each spending that much of an executor. A round gives up at once when
 * the node's connect backoff ends later (router.c): sleeping out the 5 ms
 * in every such round would take the executors from the healthy masters'
 * tasks.
 * A master that accepts connections but does not answer (stopped, or cut
 * off while the socket stays open) still holds the round for the socket's
 * command_timeout_ms on each read, its answered calls included; not done:
 * it needs replies read as they come (poll) and a reply wait well under
 * command_timeout_ms for START rounds. */
#define RR_START_RETRY_MS (TW_RR_RETRY_MS / 20)

/* How long an unanswered item waits before a later round tries it again:
 * TW_RR_RETRY_MS, or until its node may be tried again if this executor's
 * router backs off from it (up to 1 s for a node refusing connections: a
 * round sent before would fail on it at once again). Held tasks of a master
 * that is down then cost a round each per backoff, not per TW_RR_RETRY_MS:
 * each such round spends RR_START_RETRY_MS of an executor. */
static uint64_t rr_retry_ns(const struct tw_redis *r, const struct tw_rr_router *rt,
                            const struct tw_rr_item *it)
{
    uint64_t w = (uint64_t)TW_RR_RETRY_MS * 1000000u;
    int nd = tw_rr_node_of(rt, r->slots[it->part]);
    if (nd >= 0 && (size_t)nd < rt->nnodes && !rt->nodes[nd].c) {
        uint64_t now = tw_rr_mono_ns(), at = rt->nodes[nd].next_try_ns;
        if (at > now + w)
            w = at - now;
    }
    return w;
}

void tw_rr_run(void *ctx, struct tw_rr_item **v, size_t n, unsigned thread)
{
    struct tw_redis *r = ctx;
    struct tw_rr_router *rt = &r->exec_rt[thread];
    struct tw_rr_exec *e = &r->exec[thread];
    uint64_t at[TW_RR_RUN_BATCH];
    size_t run[TW_RR_RUN_BATCH], nrun = 0;
    e->r = r;
    e->starting = true;
    e->v = v;
    e->n = n;
#ifdef TW_RR_TRACE
    uint64_t t_take = tw_rr_mono_ns(), t_sent;
#endif
    rt->retry_ms = RR_START_RETRY_MS < r->cfg.command_timeout_ms ? RR_START_RETRY_MS : 0;
    rr_exec_eval(e, rt);
    rr_exec_acks_done(e, true);
    uint64_t t0 = tw_rr_mono_ns(), give_up = (uint64_t)r->cfg.lease_ms * 500000u;
    for (;;) {
        bool none = true;
        for (size_t i = 0; i < n && none; i++)
            none = e->st[i] == -2;
        if (!none || (rt->cluster && tw_rr_any_connected(rt)) || atomic_load(&r->closed) ||
            tw_rr_mono_ns() - t0 >= give_up)
            break;
        tw_rr_sleep_ms(TW_RR_RETRY_MS); /* Redis away: the same batch again */
        rr_exec_eval(e, rt);
        rr_exec_acks_done(e, true);
    }
    rt->retry_ms = 0;
#ifdef TW_RR_TRACE
    t_sent = e->sent_ns;
#endif
    for (size_t i = 0; i < n; i++) {
        struct tw_rr_item *it = v[i];
        if (e->st[i] == -2) { /* unanswered: a later round tries again */
            rr_requeue(r, it, rr_retry_ns(r, rt, it));
            continue;
        }
        if (e->st[i] == 0) { /* not due within start_ahead_ms by the server's clock */
            rr_requeue(r, it, (uint64_t)(e->arg[i] > 0 ? e->arg[i] : 1) * 1000u);
            continue;
        }
        if (e->st[i] != 1) {
            atomic_fetch_add(&r->lost_leases, 1);
            free(it);
            continue;
        }
        /* started: run in the order of the times they may run at (stable:
         * the ones due already, e.g. a catch-up, keep the batch's order) */
        at[i] = rr_run_at(it->due_ms, e->now[i], e->reply_ns[i]);
        size_t j = nrun++;
        while (j > 0 && at[run[j - 1]] > at[i]) {
            run[j] = run[j - 1];
            j--;
        }
        run[j] = i;
    }
    /* Those not due yet go to the armed queue first (any idle executor
     * runs each at its time, local.c), then this one runs the rest. */
    uint64_t t_arm = tw_rr_mono_ns();
    size_t nnow = 0;
    for (size_t q = 0; q < nrun; q++) {
        struct tw_rr_item *it = v[run[q]];
        it->run_ns = at[run[q]];
        it->srv_us = e->now[run[q]];
        it->reply_ns = e->reply_ns[run[q]];
        it->started = (uint64_t)e->arg[run[q]];
#ifdef TW_RR_TRACE
        it->take_ns = t_take;
        it->sent_ns = t_sent;
        it->batch = (uint32_t)n;
#endif
        if (it->run_ns > t_arm)
            tw_rr_local_arm(r->local, it);
        else
            run[nnow++] = run[q];
    }
    for (size_t q = 0; q < nnow; q++)
        tw_rr_exec_one(r, v[run[q]], thread);
}

/* The acknowledger thread: sends what no START took within ack_delay (all of
 * it once stopping), up to TW_RR_RUN_BATCH items per round. */
void *tw_rr_ack_main(void *arg)
{
    struct tw_redis *r = arg;
    struct tw_rr_exec *e = r->ack_exec_p;
    struct tw_rr_item *v[TW_RR_RUN_BATCH];
    uint32_t P = r->multi ? 1 : r->cfg.partitions, from = 0;
    pthread_mutex_lock(&r->ack_mu);
    for (;;) {
        uint64_t now = tw_rr_mono_ns(), next = UINT64_MAX;
        size_t n = 0;
        bool stop = r->ack_stop;
        if (r->ack_n) {
            bool all = stop || r->ack_n >= RR_ACK_PENDING_MAX;
            for (uint32_t i = 0; i < P && n < TW_RR_RUN_BATCH; i++) {
                uint32_t p = (from + i) % P;
                /* the oldest first, while they are old enough */
                while (n < TW_RR_RUN_BATCH && r->ack_head[p]) {
                    struct tw_rr_item *h = r->ack_head[p];
                    if (!all && now - h->due_local_ns < r->ack_delay_ns) {
                        if (h->due_local_ns + r->ack_delay_ns < next)
                            next = h->due_local_ns + r->ack_delay_ns;
                        break;
                    }
                    n += rr_ack_take(r, p, v + n, 1);
                }
            }
            from = (from + 1) % P;
        }
        if (n) {
            pthread_mutex_unlock(&r->ack_mu);
            e->r = r;
            e->starting = false;
            e->v = v;
            e->n = n;
            rr_exec_eval(e, &r->ack_rt);
            bool answered = false;
            for (size_t j = 0; j < e->nack; j++)
                answered = answered || e->ack_st[j] != -2;
            if (!answered) /* a connection that died with a restart fails at once: again */
                rr_exec_eval(e, &r->ack_rt);
            answered = false;
            for (size_t j = 0; j < e->nack; j++)
                answered = answered || e->ack_st[j] != -2;
            rr_exec_acks_done(e, false);
            pthread_mutex_lock(&r->ack_mu);
            if (stop && !answered) { /* Redis away at stop: the leases will run out */
                for (uint32_t p = 0; p < P; p++)
                    while (r->ack_head[p]) {
                        struct tw_rr_item *it = r->ack_head[p];
                        r->ack_head[p] = it->next;
                        free(it);
                    }
                for (uint32_t p = 0; p < P; p++)
                    r->ack_tail[p] = NULL;
                r->ack_n = 0;
            }
            continue; /* more may be due */
        }
        if (stop)
            break;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&r->ack_cv, &r->ack_mu);
        } else {
            (void)tw_cond_wait_until_(&r->ack_cv, &r->ack_mu, next);
        }
    }
    pthread_mutex_unlock(&r->ack_mu);
    return NULL;
}
