/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: opening one connection. Every connection the layer
 * makes comes through tw_rr_open: the router's (client, claim, executors,
 * acknowledger, every cluster node it learns, every reconnect) and the
 * subscriber's. TCP, or a unix socket (port 0); the command timeout; then
 * AUTH (`AUTH password`, or `AUTH user password` for an ACL user; a user
 * without a password sends "", which a nopass user accepts) and SELECT db
 * when the configuration names one, each one round trip before the
 * connection is handed out.
 *
 * What failed is written for the caller naming the server by its address
 * only: the credentials are never formatted into a text (the server's
 * refusals do not echo them either).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "redis/internal.h"

static struct timeval rr_tv(uint32_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

void tw_rr_where(const char *host, int port, char *buf, size_t len)
{
    if (port == 0)
        snprintf(buf, len, "%s", host);
    else if (strchr(host, ':'))
        snprintf(buf, len, "[%s]:%d", host, port);
    else
        snprintf(buf, len, "%s:%d", host, port);
}

/* One command on a fresh connection; its refusal becomes a code and text. */
static int rr_hello(redisContext *c, int argc, const char **av, const size_t *al, bool auth,
                    const char *where, char *err, size_t errlen)
{
    redisReply *x = redisCommandArgv(c, argc, av, al);
    if (!x) {
        snprintf(err, errlen, "%s: %s", where, c->errstr[0] ? c->errstr : "connection lost");
        return c->err == REDIS_ERR_OOM ? TW_ENOMEM : TW_EIO;
    }
    int rc = 0;
    if (x->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s: %s", where, x->str);
        /* any refusal of AUTH is about the credentials */
        rc = auth ? TW_EAUTH : tw_rr_error_code(x->str);
    } else if (x->type != REDIS_REPLY_STATUS) {
        snprintf(err, errlen, "%s: unexpected reply to %s", where, av[0]);
        rc = TW_EPROTO;
    }
    freeReplyObject(x);
    return rc;
}

int tw_rr_open(const struct tw_rr_conn *cn, const char *host, int port,
               uint32_t connect_timeout_ms, uint32_t command_timeout_ms, redisContext **out,
               char *err, size_t errlen)
{
    char where[TW_RR_ERR_MAX / 2];
    tw_rr_where(host, port, where, sizeof where);
    *out = NULL;
    redisContext *c = port == 0 ? redisConnectUnixWithTimeout(host, rr_tv(connect_timeout_ms))
                                : redisConnectWithTimeout(host, port, rr_tv(connect_timeout_ms));
    if (!c || c->err) {
        snprintf(err, errlen, "%s: %s", where, c ? c->errstr : "out of memory");
        int oom = !c || c->err == REDIS_ERR_OOM;
        if (c)
            redisFree(c);
        return oom ? TW_ENOMEM : TW_EIO;
    }
    int rc = 0;
    if (redisSetTimeout(c, rr_tv(command_timeout_ms)) != REDIS_OK) {
        snprintf(err, errlen, "%s: cannot set the command timeout", where);
        rc = TW_EIO;
    }
    if (rc == 0 && cn && (cn->user || cn->pass)) {
        const char *av[3] = {"AUTH", cn->user, cn->pass ? cn->pass : ""};
        size_t al[3] = {4, cn->user ? strlen(cn->user) : 0, strlen(av[2])};
        rc = cn->user ? rr_hello(c, 3, av, al, true, where, err, errlen)
                      : rr_hello(c, 2, (const char *[]){"AUTH", av[2]}, (size_t[]){4, al[2]},
                                 true, where, err, errlen);
    }
    if (rc == 0 && cn && cn->db > 0) {
        char db[16];
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)snprintf(db, sizeof db, "%d", cn->db)};
        rc = rr_hello(c, 2, av, al, false, where, err, errlen);
    }
    if (rc) {
        redisFree(c);
        return rc;
    }
    *out = c;
    return 0;
}
