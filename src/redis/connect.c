/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: opening one connection. Every connection the layer
 * makes comes through tw_rr_open: the router's (client, claim, executors,
 * acknowledger, every cluster node it learns, every reconnect) and the
 * subscriber's, and the silent probe's socket (transport.c). TCP, or a unix
 * socket (port 0); TLS over TCP when the instance has a TLS context
 * (transport.c: the handshake and verification); the command timeout; then
 * AUTH (`AUTH password`, or `AUTH user password` for an ACL user; a user
 * without a password sends "", which a nopass user accepts) and SELECT db
 * when the configuration names one, each one round trip before the
 * connection is handed out. A TLS connection with neither answers a PING:
 * with TLS 1.3 a server that refuses the client's certificate says so only
 * after the handshake, and that refusal belongs here (TW_ETLS), not in the
 * first command of a caller.
 *
 * What failed is written for the caller naming the server by its address
 * only: the credentials are never formatted into a text (the server's
 * refusals do not echo them either).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "redis/internal.h"

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
static int rr_hello(struct tw_rr_link *c, int argc, const char **av, const size_t *al, bool auth,
                    const char *where, char *err, size_t errlen)
{
    redisReply *x;
    int rc = tw_rr_link_command(c, argc, av, al, &x);
    if (rc) {
        snprintf(err, errlen, "%s: %s", where, c->errstr[0] ? c->errstr : "connection lost");
        return rc == TW_EPROTO ? TW_EIO : rc;
    }
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
               uint32_t connect_timeout_ms, uint32_t command_timeout_ms, struct tw_rr_link **out,
               char *err, size_t errlen)
{
    char where[TW_RR_ERR_MAX / 2];
    tw_rr_where(host, port, where, sizeof where);
    *out = NULL;
    struct tw_rr_link *c;
    int rc = tw_rr_link_open(cn ? cn->tls : NULL, host, port, connect_timeout_ms,
                             command_timeout_ms, &c);
    if (rc) {
        snprintf(err, errlen, "%s: %s", where, c ? c->errstr : "out of memory");
        tw_rr_link_free(c);
        return rc;
    }
    bool hello = false;
    if (cn && (cn->user || cn->pass)) {
        const char *av[3] = {"AUTH", cn->user, cn->pass ? cn->pass : ""};
        size_t al[3] = {4, cn->user ? strlen(cn->user) : 0, strlen(av[2])};
        rc = cn->user ? rr_hello(c, 3, av, al, true, where, err, errlen)
                      : rr_hello(c, 2, (const char *[]){"AUTH", av[2]}, (size_t[]){4, al[2]},
                                 true, where, err, errlen);
        hello = true;
    }
    if (rc == 0 && cn && cn->db > 0) {
        char db[16];
        const char *av[2] = {"SELECT", db};
        size_t al[2] = {6, (size_t)snprintf(db, sizeof db, "%d", cn->db)};
        rc = rr_hello(c, 2, av, al, false, where, err, errlen);
        hello = true;
    }
    if (rc == 0 && !hello && c->ssl)
        rc = rr_hello(c, 1, (const char *[]){"PING"}, (size_t[]){4}, false, where, err, errlen);
    if (rc) {
        tw_rr_link_free(c);
        return rc;
    }
    *out = c;
    return 0;
}
