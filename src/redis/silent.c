/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: per-master isolation. A master that accepts
 * connections but does not answer (stopped, hung, cut off with its socket
 * open) must delay only its own partitions' tasks.
 *
 * A blocking read waits command_timeout_ms for such a master, and a
 * worker's threads each make calls that span the masters: the claim
 * thread's TIME round and claims, the executors' START rounds (a partition
 * group per call, pipelined over the masters), the acknowledger's. So no
 * worker thread waits on one master for more than silent_ms in a
 * cluster, and once one has, the master is silent for all of them:
 *  - START and acknowledgement rounds (start.c) read every master's replies
 *    as they come (router.c, reply_ms) and give a master that owes replies
 *    silent_ms: its connection is closed, its calls unanswered (their
 *    tasks back to the local queue, their acknowledgements pending), and it
 *    is marked here (tw_rr_silent_mark). Rounds then leave a silent
 *    master's partitions out: no executor waits for it again, and the
 *    acknowledger keeps its acknowledgements (ack.c).
 *  - The claim thread sends its TIME round to every master at once and
 *    reads the replies as they come; a claim's reply is awaited
 *    silent_ms. What is not answered by then stays outstanding on its
 *    connection, one call per master (struct tw_rr_await): the claim thread
 *    goes on with the other masters and reads that reply when it comes
 *    (tw_rr_await_collect), a late claim's tasks included, so no claimed
 *    task is lost to the wait; no other command uses that connection
 *    meanwhile (router.c: owed). It gives up on a TIME after
 *    command_timeout_ms, on a claim after lease_ms / 2 (command_timeout_ms
 *    if longer: its tasks' leases end about then; reading it later is
 *    safe, START checks the lease): the connection is closed.
 *  - While a master is silent the claim thread probes it: a PING on a
 *    connection of its own (rr_probe), read every silent_ms; its
 *    reply, or any late reply from that master, clears the mark, and the
 *    next rounds take its partitions again. No thread reconnects to a
 *    silent master meanwhile (that waits for an AUTH reply).
 *  - The subscriber leaves a silent master for another node (subscriber.c).
 * The marks are per partition (the master of each by the marking thread's
 * slot map), holding the entry of the master's address in a small table,
 * so a clear finds them whatever map the marking thread had.
 *
 * The price: a healthy master that takes longer than silent_ms to
 * answer (a stall of its host, an fsync) is taken as silent until its next
 * reply, a few ms later: its tasks in that round wait for a later one
 * (execute.c: TW_RR_RETRY_MS), and the START it did not answer in time is
 * sent again (a START redone counts its attempt once; an acknowledgement
 * redone counts as stale). tw_redis_config.silent_ms sets the wait (0: no
 * isolation), stats' silent_marks counts the marks. A standalone server has
 * no other master to isolate from: calls wait command_timeout_ms there. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

/* ---- the table of silent masters -------------------------------------------- */

void tw_rr_silent_mark(void *arg, const struct tw_rr_router *rt, size_t node)
{
    struct tw_redis *r = arg;
    const struct tw_rr_node *n = &rt->nodes[node];
    size_t k, free_k = TW_RR_SAMPLE_NODES;
    pthread_mutex_lock(&r->silent_mu);
    for (k = 0; k < TW_RR_SAMPLE_NODES; k++) {
        const struct tw_rr_silent_node *e = &r->silent_at[k];
        if (e->used && e->port == n->port && strcmp(e->host, n->host) == 0)
            break;
        if (!e->used && free_k == TW_RR_SAMPLE_NODES)
            free_k = k;
    }
    bool added = false;
    if (k == TW_RR_SAMPLE_NODES && (k = free_k) < TW_RR_SAMPLE_NODES) {
        struct tw_rr_silent_node *e = &r->silent_at[k];
        strcpy(e->host, n->host);
        e->port = n->port;
        e->used = added = true;
        atomic_fetch_add(&r->nsilent, 1);
    }
    if (k < TW_RR_SAMPLE_NODES)
        for (uint32_t p = 0; p < r->cfg.partitions; p++)
            if (tw_rr_node_of(rt, r->slots[p]) == (int)node)
                atomic_store(&r->silent[p], (uint_least16_t)(k + 1));
    pthread_mutex_unlock(&r->silent_mu);
    if (added) { /* the claim thread probes it from now on */
        atomic_fetch_add(&r->silent_marks, 1);
        pthread_mutex_lock(&r->mu);
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

/* Entry k answers again: its partitions' marks cleared (silent_mu held). */
static void rr_silent_clear(struct tw_redis *r, size_t k)
{
    r->silent_at[k].used = false;
    atomic_fetch_sub(&r->nsilent, 1);
    for (uint32_t p = 0; p < r->cfg.partitions; p++)
        if (atomic_load(&r->silent[p]) == k + 1)
            atomic_store(&r->silent[p], 0);
}

/* The entry of host:port, or TW_RR_SAMPLE_NODES (silent_mu held). */
static size_t rr_silent_find(const struct tw_redis *r, const char *host, int port)
{
    for (size_t k = 0; k < TW_RR_SAMPLE_NODES; k++) {
        const struct tw_rr_silent_node *e = &r->silent_at[k];
        if (e->used && e->port == port && strcmp(e->host, host) == 0)
            return k;
    }
    return TW_RR_SAMPLE_NODES;
}

bool tw_rr_silent_addr(struct tw_redis *r, const char *host, int port)
{
    if (atomic_load(&r->nsilent) == 0)
        return false;
    pthread_mutex_lock(&r->silent_mu);
    bool s = rr_silent_find(r, host, port) < TW_RR_SAMPLE_NODES;
    pthread_mutex_unlock(&r->silent_mu);
    return s;
}

/* Claim router node nd answered: it is not silent (claim thread). */
static void rr_answered(struct tw_redis *r, size_t nd)
{
    if (atomic_load(&r->nsilent) == 0)
        return;
    const struct tw_rr_node *n = &r->claim_rt.nodes[nd];
    pthread_mutex_lock(&r->silent_mu);
    size_t k = rr_silent_find(r, n->host, n->port);
    if (k < TW_RR_SAMPLE_NODES)
        rr_silent_clear(r, k);
    pthread_mutex_unlock(&r->silent_mu);
}

/* ---- the claim thread's calls ------------------------------------------------ */

/* Whether claim router node nd is a silent master (its probe tells when it
 * answers again). */
static bool rr_silent_node(struct tw_redis *r, size_t nd)
{
    const struct tw_rr_node *n = &r->claim_rt.nodes[nd];
    return tw_rr_silent_addr(r, n->host, n->port);
}

uint32_t tw_rr_isolate_ms(const struct tw_redis *r, bool cluster)
{
    uint32_t ms = r->cfg.silent_ms;
    return cluster && ms > 0 && ms < r->cfg.command_timeout_ms ? ms : 0;
}

uint64_t tw_rr_patience_ns(const struct tw_redis *r)
{
    uint32_t ms = tw_rr_isolate_ms(r, r->claim_rt.cluster);
    return (uint64_t)(ms ? ms : r->cfg.command_timeout_ms) * 1000000u;
}

static void rr_await_set(struct tw_redis *r, size_t nd, unsigned char kind, uint32_t p,
                         unsigned batch, uint64_t sent)
{
    if (!r->await[nd].kind)
        r->nawait++;
    r->await[nd] = (struct tw_rr_await){kind, p, batch, sent};
}

static void rr_await_end(struct tw_redis *r, size_t nd)
{
    if (r->await[nd].kind)
        r->nawait--;
    r->await[nd].kind = 0;
}

/* Claim router node nd has not answered within the patience: outstanding,
 * and silent for the worker when it is a cluster's. */
static void rr_await_late(struct tw_redis *r, size_t nd, unsigned char kind, uint32_t p,
                          unsigned batch, uint64_t sent)
{
    rr_await_set(r, nd, kind, p, batch, sent);
    if (r->claim_rt.cluster)
        tw_rr_silent_mark(r, &r->claim_rt, nd);
}

/* A TIME reply of node nd read at local t, its request sent at local sent
 * (0: not known): a clock sample for each partition it serves that is
 * wanted (want NULL: every one), both bounds (offset.c); freed. */
static void rr_time_reply(struct tw_redis *r, size_t nd, redisReply *x, uint64_t t,
                          uint64_t sent, const unsigned char *want)
{
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[0]->type == REDIS_REPLY_STRING && x->element[1]->type == REDIS_REPLY_STRING) {
        uint64_t srv = strtoull(x->element[0]->str, NULL, 10) * 1000000u +
                       strtoull(x->element[1]->str, NULL, 10);
        for (uint32_t p = 0; p < r->cfg.partitions; p++)
            if ((!want || want[p]) && tw_rr_node_of(&r->claim_rt, r->slots[p]) == (int)nd) {
                tw_rr_clock_sample(r, p, srv, t);
                if (sent)
                    tw_rr_clock_sample_hi(r, p, srv, sent);
            }
    }
    freeReplyObject(x);
}

/* Before claiming, a fresh and tight clock sample of every node serving a
 * wanted partition: TIME is a quick round trip, where the claim's own reply
 * comes after its whole script and its records (up to ~4 MB), so the
 * claim's sample is loose; the held tasks' local due times are only as good
 * as the offset known when they are claimed. All are sent at once and read
 * as they come, each sample taken when its reply is read. */
void tw_rr_time_round(struct tw_redis *r, const unsigned char *want, unsigned char *bad)
{
    struct tw_rr_router *rt = &r->claim_rt;
    const char *time_av[1] = {"TIME"};
    const size_t time_al[1] = {4};
    unsigned char sent[TW_RR_SAMPLE_NODES] = {0};
    uint64_t sent_ns[TW_RR_SAMPLE_NODES] = {0}; /* when each TIME was sent */
    size_t nsent = 0;
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        int nd = want[p] ? tw_rr_node_of(rt, r->slots[p]) : -1;
        if (nd < 0 || nd >= TW_RR_SAMPLE_NODES || sent[nd] || bad[nd])
            continue;
        if (r->await[nd].kind || rr_silent_node(r, (size_t)nd)) { /* owes a reply, or silent */
            bad[nd] = 1;
            continue;
        }
        uint64_t t_send = tw_rr_mono_ns();
        int s = tw_rr_send(rt, r->slots[p], 1, time_av, time_al);
        if (s == nd) {
            sent[nd] = 1;
            sent_ns[nd] = t_send;
            nsent++;
            continue;
        }
        redisReply *x; /* not connected: connect with the router's retries */
        if (s >= 0 || tw_rr_command(rt, r->slots[p], 1, time_av, time_al, &x) != 0) {
            bad[nd] = 1; /* unreachable: no claims there this round */
            continue;
        }
        rr_answered(r, (size_t)nd);
        rr_time_reply(r, (size_t)nd, x, tw_rr_mono_ns(), t_send, want);
    }
    uint64_t t0 = tw_rr_mono_ns(), until = t0 + tw_rr_patience_ns(r);
    while (nsent) {
        struct pollfd fds[TW_RR_SAMPLE_NODES];
        size_t idx[TW_RR_SAMPLE_NODES], nf = 0;
        for (size_t nd = 0; nd < TW_RR_SAMPLE_NODES; nd++)
            if (sent[nd]) {
                fds[nf] = (struct pollfd){rt->nodes[nd].c->fd, POLLIN, 0};
                idx[nf++] = nd;
            }
        uint64_t now = tw_rr_mono_ns();
        int pr = poll(fds, (nfds_t)nf, now >= until ? 0 : (int)((until - now + 999999) / 1000000));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break; /* what is left is late */
        for (size_t f = 0; f < nf; f++) {
            size_t nd = idx[f];
            redisReply *x;
            int rc = fds[f].revents ? tw_rr_recv(rt, nd, 0, &x) : TW_RR_PENDING;
            if (rc == TW_RR_PENDING)
                continue;
            sent[nd] = 0;
            nsent--;
            if (rc != 0) {
                bad[nd] = 1;
                continue;
            }
            rr_answered(r, nd);
            rr_time_reply(r, nd, x, tw_rr_mono_ns(), sent_ns[nd], want);
        }
    }
    for (size_t nd = 0; nd < TW_RR_SAMPLE_NODES && nsent; nd++) {
        if (!sent[nd])
            continue;
        nsent--;
        bad[nd] = 1;
        if (rt->cluster)
            rr_await_late(r, nd, TW_RR_AWAIT_TIME, 0, 0, t0);
        else
            tw_rr_drop(rt, nd); /* the whole command timeout: as a failed call */
    }
}

/* A reply that asks for the call again (NOSCRIPT, a redirect, TRYAGAIN...):
 * tw_rr_eval follows it. */
static bool rr_redo_reply(const redisReply *x)
{
    return x->type == REDIS_REPLY_ERROR &&
           (strncmp(x->str, "NOSCRIPT", 8) == 0 || strncmp(x->str, "MOVED ", 6) == 0 ||
            strncmp(x->str, "ASK ", 4) == 0 || strncmp(x->str, "TRYAGAIN", 8) == 0 ||
            strncmp(x->str, "LOADING", 7) == 0 || strncmp(x->str, "CLUSTERDOWN", 11) == 0 ||
            strncmp(x->str, "MASTERDOWN", 10) == 0 || strncmp(x->str, "BUSY ", 5) == 0);
}

int tw_rr_await_claim(struct tw_redis *r, uint32_t p, unsigned batch, const char **av,
                      const size_t *al, redisReply **x)
{
    struct tw_rr_router *rt = &r->claim_rt;
    int slot = r->slots[p], nd = tw_rr_node_of(rt, slot);
    if (nd >= 0 && nd < TW_RR_SAMPLE_NODES && (r->await[nd].kind || rr_silent_node(r, (size_t)nd)))
        return TW_RR_EAWAIT; /* owes a reply, or silent: not this round */
    uint64_t t0 = tw_rr_mono_ns();
    int s = nd >= 0 && nd < TW_RR_SAMPLE_NODES
                ? tw_rr_eval_send(rt, TW_RR_CLAIM, slot, TW_RR_NKEYS, TW_RR_CLAIM_NARGS, av, al)
                : TW_EIO;
    if (s == TW_ENOMEM)
        return s;
    if (s != nd) /* not connected (or a node the map had not): the router's retries */
        return tw_rr_eval(rt, TW_RR_CLAIM, slot, TW_RR_NKEYS, TW_RR_CLAIM_NARGS, av, al, x);
    int rc = tw_rr_recv(rt, (size_t)nd, t0 + tw_rr_patience_ns(r), x);
    if (rc == TW_RR_PENDING) {
        if (!rt->cluster) { /* the whole command timeout: as a failed call */
            tw_rr_drop(rt, (size_t)nd);
            return TW_EIO;
        }
        rr_await_late(r, (size_t)nd, TW_RR_AWAIT_CLAIM, p, batch, t0);
        return TW_RR_EAWAIT;
    }
    if (rc) /* sent whole, its reply lost: it may have run */
        return rc == TW_EIO ? TW_EUNKNOWN : rc;
    rr_answered(r, (size_t)nd);
    if (rr_redo_reply(*x)) {
        freeReplyObject(*x);
        return tw_rr_eval(rt, TW_RR_CLAIM, slot, TW_RR_NKEYS, TW_RR_CLAIM_NARGS, av, al, x);
    }
    if ((*x)->type == REDIS_REPLY_ERROR) { /* its code, and the server's words told */
        rc = tw_rr_reply_error(rt, *x);
        freeReplyObject(*x);
        return rc;
    }
    return 0;
}

/* The probe of silent master k: a PING on a connection of its own, made
 * without waiting (no AUTH: an error reply shows it answers as well as
 * PONG), read without waiting; its first reply clears the mark. Started
 * again after command_timeout_ms without one. The router's connections to
 * that master are left alone meanwhile: a reconnect there would wait for
 * the AUTH reply of a master that does not answer. Claim thread only. */
static void rr_probe(struct tw_redis *r, size_t k)
{
    char host[sizeof r->silent_at[k].host];
    pthread_mutex_lock(&r->silent_mu);
    bool used = r->silent_at[k].used;
    int port = r->silent_at[k].port;
    strcpy(host, r->silent_at[k].host);
    pthread_mutex_unlock(&r->silent_mu);
    struct tw_rr_link *c = r->probe[k];
    uint64_t now = tw_rr_mono_ns();
    if (c && (!used || now - r->probe_ns[k] > (uint64_t)r->cfg.command_timeout_ms * 1000000u)) {
        tw_rr_link_free(c); /* cleared meanwhile, or no answer: a new one */
        c = r->probe[k] = NULL;
    }
    if (!used)
        return;
    if (!c) {
        if (tw_rr_link_start(r->conn.tls, host, port, r->cfg.command_timeout_ms, &c) != 0 ||
            tw_rr_link_append(c, 1, (const char *[]){"PING"}, (size_t[]){4}) != 0) {
            tw_rr_link_free(c);
            return; /* refused (away): tried again next pass */
        }
        r->probe[k] = c;
        r->probe_ns[k] = now;
    }
    void *x = NULL;
    bool ok = tw_rr_link_step(c, &x) == 0;
    if (ok && !x)
        return; /* no answer yet, or part of it */
    if (x)
        freeReplyObject(x);
    tw_rr_link_free(c);
    r->probe[k] = NULL;
    if (!ok)
        return; /* refused or closed: tried again next pass */
    pthread_mutex_lock(&r->silent_mu);
    if (r->silent_at[k].used && r->silent_at[k].port == port &&
        strcmp(r->silent_at[k].host, host) == 0)
        rr_silent_clear(r, k);
    pthread_mutex_unlock(&r->silent_mu);
}

bool tw_rr_await_collect(struct tw_redis *r, tw_rr_late_fn *late)
{
    struct tw_rr_router *rt = &r->claim_rt;
    uint64_t now = tw_rr_mono_ns();
    uint64_t time_max = (uint64_t)r->cfg.command_timeout_ms * 1000000u;
    uint64_t claim_max = (uint64_t)r->cfg.lease_ms * 500000u;
    if (claim_max < time_max)
        claim_max = time_max;
    for (size_t nd = 0; nd < TW_RR_SAMPLE_NODES && r->nawait; nd++) {
        struct tw_rr_await a = r->await[nd];
        if (!a.kind)
            continue;
        redisReply *x;
        int rc = nd < rt->nnodes ? tw_rr_recv(rt, nd, 0, &x) : TW_EIO;
        if (rc == TW_RR_PENDING) {
            if (now - a.sent_ns < (a.kind == TW_RR_AWAIT_CLAIM ? claim_max : time_max))
                continue;
            tw_rr_drop(rt, nd); /* given up: what it owes is lost */
        }
        rr_await_end(r, nd);
        if (rc != 0)
            continue;
        rr_answered(r, nd);
        if (a.kind == TW_RR_AWAIT_TIME)
            rr_time_reply(r, nd, x, tw_rr_mono_ns(), 0, NULL);
        else if (x->type == REDIS_REPLY_ERROR) { /* nothing claimed: a later round claims */
            if (!rr_redo_reply(x))
                (void)tw_rr_reply_error(rt, x);
            freeReplyObject(x);
        }
        else
            late(r, a.part, a.batch, x);
    }
    bool any = atomic_load(&r->nsilent) != 0;
    for (size_t k = 0; k < TW_RR_SAMPLE_NODES; k++)
        if (any || r->probe[k])
            rr_probe(r, k);
    return r->nawait || atomic_load(&r->nsilent);
}
