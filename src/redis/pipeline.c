/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the router's calls that do not wait for each reply
 * (router.c has the router's design): a command sent now and its reply read
 * later (tw_rr_send, tw_rr_recv: the claim thread's calls to many masters),
 * and pipelined batches of script calls (tw_rr_eval_many: set_many, the
 * release at stop), which read every node's replies at once and tell each
 * call's fate apart: answered, not applied (redone), or lost after it was
 * written whole (its outcome unknown). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

#define RR_PIPE_CHUNK 512u
#define RR_FLUSH_BYTES 4096u /* tw_rr_eval_many writes a node's buffer at this size */

/* Write what is buffered for node n; 0, or TW_EIO (closed). */
static int rr_flush(struct tw_rr_router *rt, size_t n)
{
    if (tw_rr_link_flush(rt->nodes[n].c) != 0) {
        tw_rr_lost(rt, n, NULL);
        tw_rr_drop(rt, n);
        return TW_EIO;
    }
    return 0;
}

int tw_rr_send(struct tw_rr_router *rt, int slot, int argc, const char **argv, const size_t *lens)
{
    int n = tw_rr_node_of(rt, slot); /* the map as it is: the node tw_rr_node_of names */
    if (n < 0) {
        rt->map_stale = true;
        return TW_EIO;
    }
    (void)tw_rr_sentinel_moved(rt, (size_t)n);
    int crc = tw_rr_connect_node(rt, (size_t)n);
    if (crc != 0)
        return crc;
    if (tw_rr_link_append(rt->nodes[n].c, argc, argv, lens) != 0)
        return TW_ENOMEM;
    if (rr_flush(rt, (size_t)n) != 0)
        return TW_EIO;
    rt->nodes[n].owed++;
    return n;
}

int tw_rr_eval_send(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
                    const char **argv, const size_t *lens)
{
    const char *av[TW_RR_ARGV_MAX];
    size_t al[TW_RR_ARGV_MAX];
    char nk[16];
    int argc = tw_rr_eval_argv(rt, id, nkeys, nargs, argv, lens, av, al, nk);
    return argc < 0 ? argc : tw_rr_send(rt, slot, argc, av, al);
}

/* Wait for any of fds[0..n) to be readable, until until_ns at most (0: poll
 * once). Returns poll's count (0: none by then). */
static int rr_poll_until(struct pollfd *fds, size_t n, uint64_t until_ns)
{
    for (;;) {
        uint64_t now = tw_rr_mono_ns();
        int ms = now >= until_ns ? 0 : (int)((until_ns - now + 999999) / 1000000);
        int pr = poll(fds, (nfds_t)n, ms);
        if (pr >= 0 || errno != EINTR)
            return pr < 0 ? 0 : pr;
    }
}

int tw_rr_recv(struct tw_rr_router *rt, size_t node, uint64_t until_ns, redisReply **reply)
{
    for (;;) {
        struct tw_rr_link *c = rt->nodes[node].c;
        void *x = NULL;
        if (!c)
            return TW_EIO;
        if (tw_rr_link_next(c, &x) != 0) {
            tw_rr_lost(rt, node, NULL);
            tw_rr_drop(rt, node);
            return TW_EIO;
        }
        if (x) {
            if (rt->nodes[node].owed)
                rt->nodes[node].owed--;
            *reply = x;
            return 0;
        }
        struct pollfd pfd = {c->fd, POLLIN, 0};
        if (rr_poll_until(&pfd, 1, until_ns) == 0)
            return TW_RR_PENDING;
        if (tw_rr_link_read(c) != 0) {
            int oom = c->err == TW_ENOMEM;
            tw_rr_lost(rt, node, NULL);
            tw_rr_drop(rt, node);
            return oom ? TW_ENOMEM : TW_EIO;
        }
    }
}

/* Send what is buffered for c once it reaches RR_FLUSH_BYTES (a SET call of
 * set_many is ~5 KB), once per chunk (*flushed): Redis runs that first call
 * while the caller builds the others, instead of waiting for the whole
 * chunk. Only once: a write per call would make Redis wake, read, reply and
 * write its AOF once per call, which costs it more CPU than the overlap
 * gains. Small calls (START) stay buffered until the first read. A write
 * error is left for the read to report (the link keeps it). */
static void rr_flush_big(struct tw_rr_link *c, bool *flushed)
{
    if (*flushed || tw_rr_link_unsent(c) < RR_FLUSH_BYTES)
        return;
    *flushed = true;
    (void)tw_rr_link_flush(c);
}

/* One call of a tw_rr_eval_many chunk. */
struct rr_call {
    uint64_t end; /* its node's bytes of the chunk, up to its own last one */
    int node, slot;
    unsigned char state; /* RR_CALL_* */
};

enum {
    RR_CALL_REDO,   /* not sent, or answered by a redirect or a retry error: not applied;
                       redone one by one */
    RR_CALL_SENT,   /* buffered or written on its node, its reply not read yet */
    RR_CALL_DONE,   /* answered */
    RR_CALL_UNSENT, /* its node failed before all of it was in the socket: not applied */
    RR_CALL_LOST    /* its node failed after: it may have been applied */
};

/* The node of call j failed while its reply was read: the chunk's calls on
 * that node not read yet are lost if they were wholly written (the bytes of
 * the chunk written to it: what was buffered less what is still left), else
 * unsent. */
static void rr_node_failed(struct tw_rr_router *rt, struct rr_call *cl, size_t j, size_t m,
                           const uint64_t *nbytes)
{
    int nd = cl[j].node;
    uint64_t left = tw_rr_link_unsent(rt->nodes[nd].c);
    uint64_t written = nbytes[nd] > left ? nbytes[nd] - left : 0;
    for (size_t k = j; k < m; k++)
        if (cl[k].state == RR_CALL_SENT && cl[k].node == nd)
            cl[k].state = cl[k].end <= written ? RR_CALL_LOST : RR_CALL_UNSENT;
    tw_rr_lost(rt, nd, NULL);
    tw_rr_drop(rt, nd);
    if (rt->cluster)
        rt->map_stale = true;
}

/* Call j's reply r (freed here): a redirect, NOSCRIPT or a retry answer
 * marks it for a redo; another error reply is its code (tw_rr_reply_error)
 * and a reply the check refuses TW_EPROTO; *applied once one has run. */
static int rr_call_reply(struct tw_rr_router *rt, struct rr_call *cl, size_t j, redisReply *r,
                         tw_rr_check_fn *check, void *ctx, size_t i, bool *applied)
{
    int rc = 0;
    cl[j].state = RR_CALL_DONE;
    if (r->type == REDIS_REPLY_ERROR &&
        (strncmp(r->str, "NOSCRIPT", 8) == 0 || strncmp(r->str, "MOVED ", 6) == 0 ||
         strncmp(r->str, "ASK ", 4) == 0 || tw_rr_is_retry_error(r))) {
        cl[j].state = RR_CALL_REDO;
        if (r->str[0] == 'M' || r->str[0] == 'A')
            rt->map_stale = true;
    } else if (r->type == REDIS_REPLY_ERROR) {
        rc = tw_rr_reply_error(rt, r);
    } else {
        *applied = true;
        if (check(ctx, i, r) != 0)
            rc = TW_EPROTO;
    }
    freeReplyObject(r);
    return rc;
}

/* The replies of a chunk's sent calls read from every node at once
 * (rt->reply_ms, a cluster): each node's in order as they come, so that a
 * node slow to answer holds no other node's answers. A node that still
 * owes replies reply_ms after they were written is silent: its calls are
 * lost (written whole: they may run once it answers), its connection
 * closed, on_silent told; *io then, as for a node whose connection fails
 * (rr_node_failed). Every call it settles leaves RR_CALL_SENT. */
static int rr_recv_polled(struct tw_rr_router *rt, struct rr_call *cl, size_t m, size_t base,
                          const uint64_t *nbytes, tw_rr_check_fn *check, void *ctx, bool *applied,
                          bool *io)
{
    size_t *next = malloc(m * sizeof *next), *head = malloc(m * sizeof *head);
    size_t *tail = malloc(m * sizeof *tail), *dn = malloc(m * sizeof *dn);
    struct pollfd *fds = malloc(m * sizeof *fds);
    size_t nd = 0;
    int rc = 0;
    if (!next || !head || !tail || !dn || !fds) {
        rc = TW_ENOMEM;
        goto out;
    }
    for (size_t j = 0; j < m; j++) { /* each node's calls, in order */
        if (cl[j].state != RR_CALL_SENT)
            continue;
        size_t k = 0;
        while (k < nd && dn[k] != (size_t)cl[j].node)
            k++;
        if (k == nd) {
            dn[nd] = (size_t)cl[j].node;
            head[nd++] = j;
        } else {
            next[tail[k]] = j;
        }
        tail[k] = j;
        next[j] = SIZE_MAX;
    }
    for (size_t k = 0; k < nd; k++) { /* everything written, then waited for */
        if (tw_rr_link_flush(rt->nodes[dn[k]].c) != 0) {
            rr_node_failed(rt, cl, head[k], m, nbytes);
            head[k] = SIZE_MAX;
            *io = true;
        }
    }
    uint64_t until = tw_rr_mono_ns() + (uint64_t)rt->reply_ms * 1000000u;
    for (;;) {
        size_t nf = 0;
        for (size_t k = 0; k < nd && rc == 0; k++) {
            while (head[k] != SIZE_MAX) {
                void *x = NULL;
                if (tw_rr_link_next(rt->nodes[dn[k]].c, &x) != 0) {
                    rr_node_failed(rt, cl, head[k], m, nbytes);
                    head[k] = SIZE_MAX;
                    *io = true;
                } else if (x) {
                    size_t j = head[k];
                    head[k] = next[j];
                    rc = rr_call_reply(rt, cl, j, x, check, ctx, base + j, applied);
                    if (rc)
                        break;
                } else {
                    break;
                }
            }
            if (head[k] != SIZE_MAX)
                fds[nf++] = (struct pollfd){rt->nodes[dn[k]].c->fd, POLLIN, 0};
        }
        if (nf == 0 || rc)
            break;
        if (rr_poll_until(fds, nf, until) == 0) {
            if (tw_rr_mono_ns() < until)
                continue;
            for (size_t k = 0; k < nd; k++) { /* silent: given up */
                if (head[k] == SIZE_MAX)
                    continue;
                rr_node_failed(rt, cl, head[k], m, nbytes);
                tw_rr_lost(rt, dn[k], "no answer (silent)");
                head[k] = SIZE_MAX;
                *io = true;
                if (rt->on_silent)
                    rt->on_silent(rt->silent_arg, rt, dn[k]);
            }
            break;
        }
        for (size_t k = 0, f = 0; k < nd && f < nf; k++) {
            if (head[k] == SIZE_MAX)
                continue;
            if (fds[f++].revents && tw_rr_link_read(rt->nodes[dn[k]].c) != 0) {
                rr_node_failed(rt, cl, head[k], m, nbytes);
                head[k] = SIZE_MAX;
                *io = true;
            }
        }
    }
out:
    free(next);
    free(head);
    free(tail);
    free(dn);
    free(fds);
    return rc;
}

int tw_rr_eval_many(struct tw_rr_router *rt, unsigned id, size_t n, int nkeys,
                    tw_rr_build_fn *build, void *ctx, tw_rr_check_fn *check)
{
    const char *av[TW_RR_ARGV_MAX];
    size_t al[TW_RR_ARGV_MAX];
    char nk[16];
    int nargs;
    snprintf(nk, sizeof nk, "%d", nkeys);
    size_t cap = n < RR_PIPE_CHUNK ? n : RR_PIPE_CHUNK, ncap = 0;
    struct rr_call *cl = malloc((cap ? cap : 1) * sizeof *cl);
    uint64_t *nbytes = NULL; /* per node: bytes of the chunk buffered for it */
    rt->err[0] = 0;
    if (!cl)
        return TW_ENOMEM;
    int rc = 0;
    bool applied = false; /* a call was answered, or lost: the batch is no TW_EIO */
    uint32_t budget = rt->retry_ms ? rt->retry_ms : rt->command_timeout_ms;
    for (size_t base = 0; base < n && rc == 0; base += RR_PIPE_CHUNK) {
        size_t m = n - base < RR_PIPE_CHUNK ? n - base : RR_PIPE_CHUNK;
        bool flushed = false;
        uint64_t deadline = tw_rr_mono_ns() + (uint64_t)budget * 1000000u;
        if (rt->nnodes > ncap) {
            uint64_t *nb = realloc(nbytes, rt->nnodes * sizeof *nb);
            if (!nb) {
                rc = TW_ENOMEM;
                break;
            }
            nbytes = nb;
            ncap = rt->nnodes;
        }
        memset(nbytes, 0, rt->nnodes * sizeof *nbytes);
        /* Send. A node that is not connected, or a slot the map does not
         * know, is left to the one-by-one path (which connects and waits). */
        for (size_t j = 0; j < m && rc == 0; j++) {
            int slot;
            tw_rr_evalsha_head(rt, id, nk, av, al);
            rc = build(ctx, base + j, &slot, av + 3, al + 3, &nargs);
            if (rc)
                break;
            int argc = 3 + nkeys + nargs;
            if (argc > TW_RR_ARGV_MAX) {
                rc = TW_EINVAL;
                break;
            }
            int nd = tw_rr_node_of(rt, slot);
            cl[j] = (struct rr_call){0, nd, slot, RR_CALL_REDO};
            if (nd < 0)
                continue;
            if (nbytes[nd] == 0) /* the node's first call of the chunk */
                tw_rr_check_idle(rt, (size_t)nd);
            if (!rt->nodes[nd].c)
                (void)tw_rr_connect_node(rt, (size_t)nd);
            struct tw_rr_link *c = rt->nodes[nd].c;
            if (!c || rt->nodes[nd].check < 0) /* refused by the owner's check: redone */
                continue;
            size_t before = tw_rr_link_unsent(c);
            if (tw_rr_link_append(c, argc, av, al) != 0) {
                rc = TW_ENOMEM;
                break;
            }
            nbytes[nd] += tw_rr_link_unsent(c) - before;
            cl[j].end = nbytes[nd];
            cl[j].state = RR_CALL_SENT;
            rr_flush_big(c, &flushed);
        }
        /* Receive, in order (each node answers its commands in order). A
         * node whose connection fails is dropped and its later calls of the
         * chunk stay unanswered (lost or unsent: rr_node_failed), but the
         * other nodes' replies are still read and checked: in a cluster with
         * one master away, what the others answered counts (an executor's
         * START round hands those on). */
        bool io = false;
        if (rt->cluster && rt->reply_ms)
            rc = rr_recv_polled(rt, cl, m, base, nbytes, check, ctx, &applied, &io);
        for (size_t j = 0; j < m && rc == 0; j++) {
            if (cl[j].state != RR_CALL_SENT)
                continue;
            redisReply *r = NULL;
            if (tw_rr_link_get(rt->nodes[cl[j].node].c, (void **)&r) != 0) {
                rr_node_failed(rt, cl, j, m, nbytes);
                io = true;
                continue;
            }
            rc = rr_call_reply(rt, cl, j, r, check, ctx, base + j, &applied);
        }
        /* The calls whose replies are lost (and, when the replies are left
         * unread below, the calls still waiting for theirs) may have been
         * applied: the caller hears of each (check with no reply). */
        for (size_t j = 0; j < m; j++) {
            if (rc && cl[j].state == RR_CALL_SENT)
                cl[j].state = RR_CALL_LOST;
            if (cl[j].state == RR_CALL_LOST) {
                applied = true;
                (void)check(ctx, base + j, NULL);
            }
        }
        if (rc) { /* replies may be left unread: drop every connection */
            for (size_t i = 0; i < rt->nnodes; i++)
                tw_rr_drop(rt, i);
            break;
        }
        if (io) {
            /* Every reply read: the connections left are in step. Nothing
             * is redone, but for SET while the chunk's time lasts (a lost
             * connection, not a timeout): its unanswered calls are redone
             * one by one below, those that may have run too (a SET call
             * run twice stores the same tasks; redis.c, "Lost replies"). */
            if (id != TW_RR_SET || tw_rr_mono_ns() >= deadline) {
                rc = applied ? TW_EUNKNOWN : TW_EIO;
                break;
            }
            for (size_t j = 0; j < m; j++)
                if (cl[j].state == RR_CALL_LOST || cl[j].state == RR_CALL_UNSENT)
                    cl[j].state = RR_CALL_REDO;
        }
        /* SET: a key given twice in one set_many is in two calls of its
         * slot, and the later call must win. A call redone one by one below
         * runs after the later calls of its slot that went through (a BUSY,
         * NOSCRIPT, TRYAGAIN or LOADING answer that ended in between: the
         * first calls are written early, rr_flush_big), so those are redone
         * too, in order (a SET call run twice stores the same tasks). */
        for (size_t j = 0; id == TW_RR_SET && j < m; j++)
            if (cl[j].state == RR_CALL_REDO)
                for (size_t k = j + 1; k < m; k++)
                    if (cl[k].slot == cl[j].slot)
                        cl[k].state = RR_CALL_REDO;
        for (size_t j = 0; j < m && rc == 0; j++) {
            if (cl[j].state != RR_CALL_REDO)
                continue;
            int slot;
            rc = build(ctx, base + j, &slot, av + 3, al + 3, &nargs);
            if (rc)
                break;
            redisReply *r;
            bool lost = false;
            rc = tw_rr_eval_lost(rt, id, slot, nkeys, nargs, av + 3, al + 3, &lost, &r);
            if (lost) {
                applied = true;
                (void)check(ctx, base + j, NULL);
            }
            if (rc == 0) {
                applied = true;
                rc = check(ctx, base + j, r) ? TW_EPROTO : 0;
                freeReplyObject(r);
            }
        }
    }
    free(cl);
    free(nbytes);
    /* some call may have been applied: not "nothing written" */
    return rc == TW_EIO && applied ? TW_EUNKNOWN : rc;
}
