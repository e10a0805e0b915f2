/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the subscriber thread. Its own connection,
 * SUBSCRIBE to every partition's channel, and each notification flags its
 * partition for the claim thread, or for the schedule thread when it says
 * "sched" (all of them for both after a reconnect). A node the worker finds
 * silent (silent.c) is left for another. */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

static void rr_flag_all(struct tw_redis *r)
{
    pthread_mutex_lock(&r->mu);
    for (uint32_t p = 0; p < r->cfg.partitions; p++)
        r->flags[p] = 1;
    r->nflagged = r->cfg.partitions;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void rr_on_message(struct tw_redis *r, const redisReply *m)
{
    if (m->type != REDIS_REPLY_ARRAY || m->elements < 3 || m->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(m->element[0]->str, "message") != 0 || m->element[1]->type != REDIS_REPLY_STRING)
        return;
    /* "{queue:p}:ch" */
    const char *ch = m->element[1]->str;
    size_t ql = strlen(r->queue);
    if (strncmp(ch, "{", 1) != 0 || strncmp(ch + 1, r->queue, ql) != 0 || ch[1 + ql] != ':')
        return;
    char *end;
    unsigned long p = strtoul(ch + 2 + ql, &end, 10);
    if (*end != '}' || p >= r->cfg.partitions)
        return;
    atomic_fetch_add(&r->notifications, 1);
    if (m->element[2]->type == REDIS_REPLY_STRING && strcmp(m->element[2]->str, "sched") == 0) {
        tw_rr_sched_wake(r, (uint32_t)p); /* a schedule set: no task to claim */
        return;
    }
    if (m->element[2]->type == REDIS_REPLY_STRING && strcmp(m->element[2]->str, "resume") == 0)
        atomic_store(&r->resumed, true); /* tw_redis_resume: a catch-up (claim.c) */
    pthread_mutex_lock(&r->mu);
    if (!r->flags[p]) {
        r->flags[p] = 1;
        r->nflagged++;
    }
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Sleep up to ms, in steps, returning early when stop is asked. */
static void rr_sub_sleep(struct tw_redis *r, uint32_t ms)
{
    while (ms > 0 && !atomic_load(&r->stop_sub)) {
        uint32_t s = ms < 50 ? ms : 50;
        tw_rr_sleep_ms(s);
        ms -= s;
    }
}

/* Connect (tw_rr_open: AUTH and SELECT as every connection) and
 * subscribe. 0 and *out, or an error code with err saying what (TW_EAUTH:
 * the credentials, or SUBSCRIBE or a channel, refused). */
static int rr_sub_connect(struct tw_redis *r, size_t node, struct tw_rr_link **out, char *err,
                          size_t errlen)
{
    const struct tw_rr_node *nd = &r->sub_rt.nodes[node];
    struct tw_rr_link *c;
    int rc = tw_rr_open(&r->conn, nd->host, nd->port, r->cfg.connect_timeout_ms,
                        r->cfg.command_timeout_ms, &c, err, errlen);
    if (rc)
        return rc;
    uint32_t P = r->cfg.partitions;
    const char **av = malloc((P + 1) * sizeof *av);
    size_t *al = malloc((P + 1) * sizeof *al);
    char *names = malloc((size_t)P * TW_RR_KEYBUF);
    bool ok = av && al && names;
    rc = ok ? TW_EIO : TW_ENOMEM;
    snprintf(err, errlen, "SUBSCRIBE: connection lost");
    if (ok) {
        av[0] = "SUBSCRIBE";
        al[0] = 9;
        for (uint32_t p = 0; p < P; p++) {
            char *s = names + (size_t)p * TW_RR_KEYBUF;
            al[p + 1] = (size_t)snprintf(s, TW_RR_KEYBUF, "{%s:%u}:ch", r->queue, (unsigned)p);
            av[p + 1] = s;
        }
        ok = tw_rr_link_append(c, (int)P + 1, av, al) == 0;
        /* Wait for every confirmation: from here on no PUBLISH is missed. */
        for (uint32_t p = 0; ok && p < P; p++) {
            redisReply *m = NULL;
            ok = tw_rr_link_get(c, (void **)&m) == 0 && m->type == REDIS_REPLY_ARRAY;
            if (m && m->type == REDIS_REPLY_ERROR) { /* NOPERM: the command or a channel */
                snprintf(err, errlen, "%s", m->str);
                rc = tw_rr_error_code(m->str);
            }
            if (m)
                freeReplyObject(m);
        }
    }
    free(av);
    free(al);
    free(names);
    if (!ok) {
        tw_rr_link_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* A refusal (TW_EAUTH) is the worker's error; before the first
 * subscription it also ends tw_redis_new, which waits for it. */
static void rr_sub_refused(struct tw_redis *r, int rc, const char *err)
{
    tw_rr_worker_sink(r, rc, err);
    pthread_mutex_lock(&r->mu);
    if (!r->subscribed && !r->sub_err) {
        r->sub_err = rc;
        snprintf(r->sub_errtext, sizeof r->sub_errtext, "%s", err);
        pthread_cond_broadcast(&r->sub_cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Whether the node subscribed to is a master the worker found silent
 * (silent.c): it forwards no notification while it does not answer, so the
 * subscriber moves to another node (and, as after any reconnect, every
 * partition is claimed: what was published meanwhile is not missed). */
static bool rr_sub_silent(struct tw_redis *r, size_t node)
{
    const struct tw_rr_node *nd = &r->sub_rt.nodes[node];
    return tw_rr_silent_addr(r, nd->host, nd->port);
}

void *tw_rr_sub_main(void *arg)
{
    struct tw_redis *r = arg;
    size_t node = 0;
    uint32_t backoff = 0;
    bool first = true;
    while (!atomic_load(&r->stop_sub)) {
        for (size_t k = 0; k < r->sub_rt.nnodes && rr_sub_silent(r, node); k++)
            node = (node + 1) % r->sub_rt.nnodes; /* not a silent master, if another is left */
        char err[TW_RR_ERR_MAX];
        struct tw_rr_link *c = NULL;
        struct tw_rr_node *nd = &r->sub_rt.nodes[node];
        uint64_t gen = r->sentinel ? tw_rr_sentinel_gen(r->sentinel) : 0;
        if (r->sentinel) /* the master the Sentinels name now (sentinel.c) */
            (void)tw_rr_sentinel_addr(r->sentinel, nd->host, &nd->port);
        int rc = rr_sub_connect(r, node, &c, err, sizeof err);
        if (rc == TW_EIO && r->sentinel)
            tw_rr_sentinel_stale(r->sentinel);
        if (rc == TW_EAUTH || rc == TW_ETLS)
            rr_sub_refused(r, rc, err);
        if (rc) {
            node = (node + 1) % r->sub_rt.nnodes;
            backoff = backoff ? (backoff * 2 > 1000 ? 1000 : backoff * 2) : 10;
            rr_sub_sleep(r, backoff);
            continue;
        }
        backoff = 0;
        pthread_mutex_lock(&r->mu);
        r->subscribed = true;
        pthread_cond_broadcast(&r->sub_cv);
        pthread_mutex_unlock(&r->mu);
        if (!first) {
            atomic_fetch_add(&r->sub_reconnects, 1);
            rr_flag_all(r); /* notifications may have been missed: claim everything */
            tw_rr_sched_wake(r, UINT32_MAX); /* ... and ask for every schedule */
        }
        first = false;
        bool ok = true;
        while (ok && !atomic_load(&r->stop_sub)) {
            if (rr_sub_silent(r, node)) /* its notifications stopped too: another node */
                break;
            if (r->sentinel && tw_rr_sentinel_gen(r->sentinel) != gen)
                break; /* a failover: subscribe on the new master */
            struct pollfd pfd = {c->fd, POLLIN, 0};
            int pr = poll(&pfd, 1, 100);
            if (pr < 0)
                continue;
            if (pr == 0)
                continue;
            if (tw_rr_link_read(c) != 0) {
                ok = false;
                break;
            }
            void *m = NULL;
            while (ok) {
                if (tw_rr_link_next(c, &m) != 0) {
                    ok = false;
                    break;
                }
                if (!m)
                    break;
                rr_on_message(r, m);
                freeReplyObject(m);
                m = NULL;
            }
        }
        tw_rr_link_free(c);
    }
    return NULL;
}
