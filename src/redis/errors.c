/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the server's words. An error reply that ends a call
 * is kept as the server wrote it and mapped to a code; what a caller's call
 * ended with is kept per thread, what the worker's own threads met once for
 * the worker.
 *
 * Codes: a refusal of credentials or of a permission is TW_EAUTH: NOAUTH
 * (no AUTH sent to a server that wants one), WRONGPASS, NOPERM (a command,
 * key or channel the ACL denies), and, inside a script, Redis 7.0's "ERR
 * The user executing the script can't ..." (its redis.call checks the same
 * ACL; those words do not name the command: tw_redis_new's check in acl.c
 * does, before anything runs). "OOM command not allowed when used memory >
 * 'maxmemory'" (a write, or a script without the allow-oom flag, refused
 * before it ran) is TW_EOOM, counted in the router's oom_refusals. Any
 * other error reply is TW_EPROTO, its words kept all the same.
 *
 * Each thread's last error: the client calls (set, move, remove, set_many,
 * stats) share one router under api_mu, whose err holds what ended the
 * call; tw_rr_note copies it, with the code, into the calling thread's slot
 * of lasterr (under err_mu, a lock of its own so that reading it never
 * waits for a call in flight), or frees that slot when the call succeeded.
 * TW_RR_ERR_THREADS slots: a failing thread that finds none free takes the
 * one written longest ago. A success looks at the slots only while one is
 * taken (nerrs), so the calls pay one load while nothing fails.
 *
 * The worker's threads (claim, executors, acknowledger, subscriber) have no
 * caller to answer: their routers' sink keeps the last error text in werr
 * and counts them (stats: worker_errors).
 *
 * Texts carry the server's words or the connection's (transport.c) with
 * the server's address, never a credential: connect.c formats none, and no
 * server reply echoes one. A TLS failure is no server's words but
 * OpenSSL's (certificate verify failed, hostname mismatch, certificate
 * required): TW_ETLS, told to the sink like a refused AUTH.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "redis/internal.h"

int tw_rr_error_code(const char *text)
{
    static const char *const pre[] = {"NOAUTH", "WRONGPASS", "NOPERM"};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(text, pre[i], strlen(pre[i])) == 0)
            return TW_EAUTH;
    if (strstr(text, "The user executing the script can't"))
        return TW_EAUTH;
    if (strncmp(text, "OOM ", 4) == 0)
        return TW_EOOM;
    return TW_EPROTO;
}

int tw_rr_reply_error(struct tw_rr_router *rt, const redisReply *x)
{
    snprintf(rt->err, sizeof rt->err, "%s", x->str ? x->str : "error reply");
    int code = tw_rr_error_code(rt->err);
    if (rt->sentinel && strncmp(rt->err, "READONLY", 8) == 0)
        tw_rr_sentinel_stale(rt->sentinel); /* a replica now: the Sentinels asked again */
    if (code == TW_EOOM)
        rt->oom_refusals++;
    if (rt->sink)
        rt->sink(rt->sink_ctx, code, rt->err);
    return code;
}

/* The calling thread's slot (err_mu held), or NULL. */
static struct tw_rr_lasterr *rr_mine(struct tw_redis *r)
{
    pthread_t me = pthread_self();
    for (size_t i = 0; i < TW_RR_ERR_THREADS; i++)
        if (r->lasterr[i].code && pthread_equal(r->lasterr[i].tid, me))
            return &r->lasterr[i];
    return NULL;
}

void tw_rr_note_(struct tw_redis *r, int rc)
{
    pthread_mutex_lock(&r->err_mu);
    struct tw_rr_lasterr *e = rr_mine(r);
    if (rc >= 0) {
        if (e) {
            e->code = 0;
            atomic_fetch_sub(&r->nerrs, 1);
        }
        pthread_mutex_unlock(&r->err_mu);
        return;
    }
    if (!e) { /* a free slot, else the one written longest ago */
        e = &r->lasterr[0];
        for (size_t i = 0; i < TW_RR_ERR_THREADS && e->code; i++)
            if (!r->lasterr[i].code || r->lasterr[i].seq < e->seq)
                e = &r->lasterr[i];
        if (!e->code)
            atomic_fetch_add(&r->nerrs, 1);
        e->tid = pthread_self();
    }
    e->code = rc;
    e->seq = ++r->err_seq;
    snprintf(e->text, sizeof e->text, "%s", r->api.err[0] ? r->api.err : tw_strerror(rc));
    pthread_mutex_unlock(&r->err_mu);
}

void tw_rr_worker_sink(void *ctx, int code, const char *text)
{
    struct tw_redis *r = ctx;
    pthread_mutex_lock(&r->err_mu);
    snprintf(r->werr, sizeof r->werr, "%s", text);
    r->werr_code = code;
    pthread_mutex_unlock(&r->err_mu);
    atomic_fetch_add(&r->worker_errors, 1);
}

/* Copy text into buf (len bytes, cut, NUL-terminated when len > 0). */
static void rr_copy(char *buf, size_t len, const char *text)
{
    if (len)
        snprintf(buf, len, "%s", text);
}

int tw_redis_last_error(const struct tw_redis *cr, char *buf, size_t len)
{
    if (!cr || (!buf && len))
        return TW_EINVAL;
    struct tw_redis *r = (struct tw_redis *)cr; /* locks err_mu; changes nothing */
    pthread_mutex_lock(&r->err_mu);
    const struct tw_rr_lasterr *e = rr_mine(r);
    int code = e ? e->code : 0;
    rr_copy(buf, len, e ? e->text : "");
    pthread_mutex_unlock(&r->err_mu);
    return code;
}

int tw_redis_worker_error(const struct tw_redis *cr, char *buf, size_t len)
{
    if (!cr || (!buf && len))
        return TW_EINVAL;
    struct tw_redis *r = (struct tw_redis *)cr; /* as above */
    pthread_mutex_lock(&r->err_mu);
    int code = r->werr_code;
    rr_copy(buf, len, r->werr);
    pthread_mutex_unlock(&r->err_mu);
    return code;
}
