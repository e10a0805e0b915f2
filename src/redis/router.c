/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: a small Redis Cluster router over the layer's own
 * connections (transport.c; hiredis 0.14 has no cluster support).
 *
 * - Slots: CRC16-XMODEM of the key, or of its {hash tag}, mod 16384 (the
 *   cluster spec's algorithm).
 * - Map: CLUSTER SLOTS from any node answering; a node that replies "cluster
 *   support disabled" makes the router standalone (every slot on that node).
 *   The map is refreshed after a MOVED and after a connection failure.
 * - Redirects: MOVED updates that slot at once (and marks the map stale);
 *   ASK sends ASKING then the command to the named node, once.
 * - Failures: a lost connection is closed and retried at once; a failed
 *   connect backs off 10, 20, 40 ... 1000 ms per node; LOADING, TRYAGAIN,
 *   CLUSTERDOWN and MASTERDOWN back off too. All of it within the command
 *   timeout (or the owner's shorter retry_ms, which also ends the call at
 *   once when the node's backoff outlasts it), after which the call gives
 *   TW_EIO, or TW_EUNKNOWN once an attempt may have been applied (below).
 *   A pipelined batch (tw_rr_eval_many) whose connection to one node fails
 *   still reads the other nodes' replies.
 * - Where a command leaves, and where its reply is lost: a connection the
 *   server closed while it sat idle is found before writing (rr_check_idle)
 *   and replaced. A command is applied only once the server has read all of
 *   it, so one whose bytes did not all reach the socket was not (unsent: a
 *   failed connect, a backoff, an unknown slot, a write that failed); one
 *   written whole whose reply does not come (read timeout, connection
 *   closed, an unreadable reply) may have been (lost). Error replies (MOVED,
 *   ASK, TRYAGAIN, LOADING, BUSY, NOSCRIPT, ...) come before any write, so a
 *   retry after them is clean. Once an attempt is lost, the call's answer is
 *   the reply of a later attempt, or TW_EUNKNOWN, never TW_EIO; a later
 *   error reply cannot say the call did nothing either (TW_EUNKNOWN). A
 *   retry after a lost attempt runs the command again: SET stores the same
 *   tasks again, REMOVE and MOVE answer from the memory of their request id
 *   (scripts.c), START takes its acknowledgements' "absent" as their own
 *   deletion (ack.c). A read timeout spends the whole budget (the socket's
 *   timeout is command_timeout_ms), so no retry follows one.
 * - Scripts: EVALSHA, and EVAL of the text when the server answers NOSCRIPT
 *   (after a restart or SCRIPT FLUSH); the EVAL caches it again.
 * - Pipelines: pipeline.c sends without waiting and reads replies later,
 *   by the same rules of where a command leaves and where its reply is lost.
 * A router is used by one thread at a time (the caller owns the lock).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "redis/internal.h"

#define RR_BACKOFF_MIN_MS 10u
#define RR_BACKOFF_MAX_MS 1000u

uint64_t tw_rr_mono_ns(void)
{
    return tw_mono_ns_();
}

void tw_rr_sleep_ms(uint32_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

unsigned tw_rr_key_slot(const void *key, size_t len)
{
    const unsigned char *k = key;
    size_t s, e;
    for (s = 0; s < len && k[s] != '{'; s++) {
    }
    if (s < len) {
        for (e = s + 1; e < len && k[e] != '}'; e++) {
        }
        if (e < len && e > s + 1) {
            k += s + 1;
            len = e - s - 1;
        }
    }
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(k[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc & (TW_RR_SLOTS - 1);
}

int tw_rr_parse_addr(const char *s, char *host, size_t hostcap, int *port)
{
    if (!s)
        return TW_EINVAL;
    if (s[0] == '/') { /* a unix socket: the path, port 0 */
        if (strlen(s) >= hostcap)
            return TW_EINVAL;
        strcpy(host, s);
        *port = 0;
        return 0;
    }
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return TW_EINVAL;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[') { /* [v6]:port */
        if (hl < 3 || h[hl - 1] != ']')
            return TW_EINVAL;
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= hostcap)
        return TW_EINVAL;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 1 || p > 65535)
        return TW_EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (int)p;
    return 0;
}

static int rr_add_node(struct tw_rr_router *rt, const char *host, int port)
{
    for (size_t i = 0; i < rt->nnodes; i++)
        if (rt->nodes[i].port == port && strcmp(rt->nodes[i].host, host) == 0)
            return (int)i;
    if (strlen(host) >= sizeof rt->nodes[0].host || rt->nnodes >= UINT16_MAX - 1)
        return TW_EPROTO;
    if (rt->nnodes == rt->cap) {
        size_t cap = rt->cap ? rt->cap * 2 : 4;
        struct tw_rr_node *n = realloc(rt->nodes, cap * sizeof *n);
        if (!n)
            return TW_ENOMEM;
        rt->nodes = n;
        rt->cap = cap;
    }
    struct tw_rr_node *n = &rt->nodes[rt->nnodes];
    memset(n, 0, sizeof *n);
    strcpy(n->host, host);
    n->port = port;
    return (int)rt->nnodes++;
}

static void rr_drop(struct tw_rr_node *n)
{
    n->owed = 0;
    if (n->c) {
        tw_rr_link_free(n->c);
        n->c = NULL;
    }
}

static void rr_backoff(struct tw_rr_node *n)
{
    n->backoff_ms = n->backoff_ms ? n->backoff_ms * 2 : RR_BACKOFF_MIN_MS;
    if (n->backoff_ms > RR_BACKOFF_MAX_MS)
        n->backoff_ms = RR_BACKOFF_MAX_MS;
    n->next_try_ns = tw_rr_mono_ns() + (uint64_t)n->backoff_ms * 1000000u;
}

/* What a node's connection failed with (why, else the link's words), into
 * rt->err (before rr_drop). */
static void rr_lost(struct tw_rr_router *rt, const struct tw_rr_node *n, const char *why)
{
    char where[TW_RR_ERR_MAX / 2 - 1]; /* with ": " and the link's errstr, fits err */
    tw_rr_where(n->host, n->port, where, sizeof where);
    if (!why)
        why = n->c && n->c->errstr[0] ? n->c->errstr : "connection lost";
    snprintf(rt->err, sizeof rt->err, "%s: %s", where, why);
}

/* Connect node i unless it is connected (tw_rr_open: AUTH and SELECT as
 * rt->conn says); 0, TW_EIO (unreachable, or backing off), TW_EAUTH (AUTH
 * refused: told to the sink), TW_EPROTO, TW_ENOMEM; rt->err says what. */
int tw_rr_connect_node(struct tw_rr_router *rt, size_t i)
{
    struct tw_rr_node *n = &rt->nodes[i];
    if (n->c)
        return 0;
    if (rt->sentinel && !rt->cluster && tw_rr_sentinel_addr(rt->sentinel, n->host, &n->port))
        n->next_try_ns = n->backoff_ms = 0; /* a new master: no backoff */
    if (tw_rr_mono_ns() < n->next_try_ns) {
        if (!rt->err[0])
            rr_lost(rt, n, "not reachable (waiting to connect again)");
        return TW_EIO;
    }
    struct tw_rr_link *c;
    int rc = tw_rr_open(rt->conn, n->host, n->port, rt->connect_timeout_ms, rt->command_timeout_ms,
                        &c, rt->err, sizeof rt->err);
    if (rc == 0 && rt->sentinel &&
        (rc = tw_rr_sentinel_role(rt->sentinel, c, n->host, n->port, rt->err, sizeof rt->err)) != 0)
        tw_rr_link_free(c); /* not the master (any more): the Sentinels are asked again */
    if (rc) {
        if (rc == TW_EIO && rt->sentinel)
            tw_rr_sentinel_stale(rt->sentinel);
        rr_backoff(n);
        if ((rc == TW_EAUTH || rc == TW_ETLS) && rt->sink)
            rt->sink(rt->sink_ctx, rc, rt->err);
        return rc;
    }
    if (rt->on_connect) { /* the owner's check of the server (redis.c) */
        int v = rt->on_connect(rt->on_connect_ctx, c);
        if (v == TW_EIO) {
            tw_rr_link_free(c);
            rr_backoff(n);
            return TW_EIO;
        }
        n->check = v;
    }
    n->c = c;
    rt->opened++;
    n->backoff_ms = 0;
    n->next_try_ns = 0;
    if (n->ever_connected)
        rt->reconnects++;
    n->ever_connected = true;
    return 0;
}

/* Parse a CLUSTER SLOTS reply into the map. */
static int rr_load_slots(struct tw_rr_router *rt, size_t asked, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return TW_EPROTO;
    if (!rt->slot_node) {
        rt->slot_node = malloc(TW_RR_SLOTS * sizeof *rt->slot_node);
        if (!rt->slot_node)
            return TW_ENOMEM;
    }
    for (unsigned s = 0; s < TW_RR_SLOTS; s++)
        rt->slot_node[s] = UINT16_MAX;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            return TW_EPROTO;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (lo < 0 || hi >= TW_RR_SLOTS || lo > hi)
            return TW_EPROTO;
        const redisReply *m = e->element[2];
        char host[256];
        if (m->element[0]->len == 0 || strcmp(m->element[0]->str, "?") == 0)
            snprintf(host, sizeof host, "%s", rt->nodes[asked].host);
        else if (m->element[0]->len < sizeof host)
            memcpy(host, m->element[0]->str, m->element[0]->len + 1);
        else
            return TW_EPROTO;
        int idx = rr_add_node(rt, host, (int)m->element[1]->integer);
        if (idx < 0)
            return idx;
        for (long long s = lo; s <= hi; s++)
            rt->slot_node[s] = (uint16_t)idx;
    }
    rt->cluster = true;
    rt->map_stale = false;
    return 0;
}

/* Ask node i for the map. 0 (map loaded, or standalone found), TW_EIO,
 * TW_EPROTO, TW_ENOMEM. */
static int rr_refresh_from(struct tw_rr_router *rt, size_t i)
{
    int rc = tw_rr_connect_node(rt, i);
    if (rc != 0)
        return rc;
    redisReply *r;
    rc = tw_rr_link_command(rt->nodes[i].c, 2, (const char *[]){"CLUSTER", "SLOTS"},
                            (size_t[]){7, 5}, &r);
    if (rc != 0) {
        rr_lost(rt, &rt->nodes[i], NULL);
        rr_drop(&rt->nodes[i]);
        return rc == TW_ENOMEM ? TW_ENOMEM : TW_EIO; /* no memory for the reply: say so */
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (strstr(r->str, "cluster support disabled")) {
            rt->cluster = false;
            rt->map_stale = false;
            if (i != 0) { /* the standalone server becomes node 0 */
                struct tw_rr_node t = rt->nodes[0];
                rt->nodes[0] = rt->nodes[i];
                rt->nodes[i] = t;
            }
            rc = 0;
        } else if (strncmp(r->str, "LOADING", 7) == 0) {
            rc = TW_EIO;
        } else {
            rc = tw_rr_reply_error(rt, r); /* NOAUTH, NOPERM: TW_EAUTH */
        }
    } else {
        rc = rr_load_slots(rt, i, r);
    }
    freeReplyObject(r);
    return rc;
}

static int rr_refresh(struct tw_rr_router *rt)
{
    int rc = TW_EIO;
    /* Known nodes, connected ones first. */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < rt->nnodes; i++) {
            if ((pass == 0) != (rt->nodes[i].c != NULL) || rt->nodes[i].owed)
                continue;
            rc = rr_refresh_from(rt, i);
            if (rc == 0 || rc == TW_ENOMEM)
                return rc;
        }
    return rc;
}

int tw_rr_router_init(struct tw_rr_router *rt, const char *const *seeds, size_t nseeds,
                      const struct tw_rr_conn *conn, uint32_t connect_timeout_ms,
                      uint32_t command_timeout_ms)
{
    memset(rt, 0, sizeof *rt);
    rt->conn = conn;
    rt->connect_timeout_ms = connect_timeout_ms;
    rt->command_timeout_ms = command_timeout_ms;
    for (size_t i = 0; i < nseeds; i++) {
        char host[256];
        int port, rc = tw_rr_parse_addr(seeds[i], host, sizeof host, &port);
        if (rc == 0)
            rc = rr_add_node(rt, host, port);
        if (rc < 0) {
            tw_rr_router_free(rt);
            return rc == TW_EPROTO ? TW_EINVAL : rc;
        }
    }
    /* A seed that answered with a refusal (TW_EAUTH, TW_EPROTO) says more
     * than one that did not answer: that is the error, with its words. */
    int rc = TW_EIO, worst = TW_EIO;
    char why[TW_RR_ERR_MAX] = "";
    for (size_t i = 0; i < rt->nnodes && rc != 0 && rc != TW_ENOMEM; i++) {
        rc = rr_refresh_from(rt, i);
        if (rc != 0 && (rc != TW_EIO || worst == TW_EIO)) {
            worst = rc;
            memcpy(why, rt->err, sizeof why);
        }
    }
    if (rc != 0) {
        tw_rr_router_free(rt);
        memcpy(rt->err, why, sizeof why);
        return worst;
    }
    return 0;
}

void tw_rr_router_free(struct tw_rr_router *rt)
{
    for (size_t i = 0; i < rt->nnodes; i++)
        rr_drop(&rt->nodes[i]);
    free(rt->nodes);
    free(rt->slot_node);
    memset(rt, 0, sizeof *rt);
}

bool tw_rr_any_connected(const struct tw_rr_router *rt)
{
    for (size_t i = 0; i < rt->nnodes; i++)
        if (rt->nodes[i].c)
            return true;
    return false;
}

int tw_rr_node_of(const struct tw_rr_router *rt, int slot)
{
    if (!rt->cluster || slot < 0)
        return 0;
    uint16_t n = rt->slot_node[slot];
    return n == UINT16_MAX ? -1 : n;
}

static int rr_redirect_target(struct tw_rr_router *rt, size_t from, const char *msg, int *slot)
{
    /* "MOVED 3999 127.0.0.1:6381" / "ASK 3999 :6381" */
    const char *sp = strchr(msg, ' ');
    if (!sp)
        return TW_EPROTO;
    char *end;
    long s = strtol(sp + 1, &end, 10);
    if (*end != ' ' || s < 0 || s >= (long)TW_RR_SLOTS)
        return TW_EPROTO;
    const char *addr = end + 1;
    char host[256];
    int port;
    if (addr[0] == ':') {
        char buf[300];
        snprintf(buf, sizeof buf, "%s%s", rt->nodes[from].host, addr);
        if (tw_rr_parse_addr(buf, host, sizeof host, &port) != 0)
            return TW_EPROTO;
    } else if (tw_rr_parse_addr(addr, host, sizeof host, &port) != 0) {
        return TW_EPROTO;
    }
    *slot = (int)s;
    return rr_add_node(rt, host, port);
}

bool tw_rr_is_retry_error(const redisReply *r)
{
    static const char *const pre[] = {"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "BUSY "};
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(r->str, pre[i], strlen(pre[i])) == 0)
            return true;
    return false;
}

static void rr_wait(struct tw_rr_router *rt, size_t node, uint64_t deadline)
{
    uint64_t now = tw_rr_mono_ns(), until = rt->nodes[node].next_try_ns;
    if (until < now + RR_BACKOFF_MIN_MS * 1000000u)
        until = now + RR_BACKOFF_MIN_MS * 1000000u;
    if (until > deadline)
        until = deadline;
    if (until > now)
        tw_rr_sleep_ms((uint32_t)((until - now + 999999) / 1000000));
}

/* With Sentinel: whether node n's connection went to a master the
 * Sentinels no longer name (they were asked again if it was found stale);
 * then it is closed, and the node takes the new address (sentinel.c). */
static bool rr_sentinel_moved(struct tw_rr_router *rt, struct tw_rr_node *n)
{
    if (!rt->sentinel || rt->cluster || n->owed || !n->c ||
        !tw_rr_sentinel_addr(rt->sentinel, n->host, &n->port))
        return false;
    rr_drop(n);
    return true;
}

/* Whether the server closed node i's connection while it sat idle (it
 * restarted or was killed, or dropped an idle client): a peek without
 * waiting finds the end of the stream, or an error, queued on the socket. A
 * command written there could only be lost, its outcome unknown to the
 * caller (TW_EUNKNOWN) although the server never saw it; dropped now, the
 * command goes on a new connection, or the call fails with nothing sent
 * (TW_EIO). One non-blocking recv per command (per node and chunk in
 * tw_rr_eval_many). A server that goes after the peek still makes the
 * command's outcome unknown: nothing tells that apart from one that ran it
 * and then went. */
void tw_rr_check_idle(struct tw_rr_router *rt, size_t i)
{
    struct tw_rr_node *n = &rt->nodes[i];
    if (!n->c)
        return;
    if (rr_sentinel_moved(rt, n))
        return;
    if (tw_rr_link_closed(n->c)) {
        rr_drop(n);
        if (rt->cluster)
            rt->map_stale = true;
    }
}

/* What became of one command on a connection (rr_roundtrip). */
enum {
    RR_UNSENT = 1, /* failed before the whole command was in the socket: the server, which
                      runs a command only once it has read all of it, cannot have run it */
    RR_LOST = 2    /* failed after (read timeout, connection closed, a reply that cannot be
                      read): it may have been run */
};

/* Write the command (after ASKING when ask) on c and read its reply: 0 and
 * *reply, RR_UNSENT or RR_LOST (c->err says why: TW_ENOMEM when the command
 * could not even be formatted). The write and the read are done apart to
 * tell the two failures apart. With the replica wait, WAIT goes in the same
 * write. */
static int rr_roundtrip(struct tw_rr_router *rt, struct tw_rr_link *c, bool ask, int argc,
                        const char **argv, const size_t *lens, redisReply **reply)
{
    if ((ask && tw_rr_link_append(c, 1, (const char *[]){"ASKING"}, (size_t[]){6}) != 0) ||
        tw_rr_link_append(c, argc, argv, lens) != 0 ||
        (rt->wait_replicas && tw_rr_wait_append(rt, c) != 0))
        return RR_UNSENT;
    if (tw_rr_link_flush(c) != 0)
        return RR_UNSENT;
    void *a = NULL;
    if (ask) {
        if (tw_rr_link_get(c, &a) != 0)
            return RR_LOST;
        freeReplyObject(a);
    }
    if (tw_rr_link_get(c, (void **)reply) != 0)
        return RR_LOST;
    if (rt->wait_replicas) /* the command's reply is in: WAIT's answer, or none (-1) */
        tw_rr_wait_read(rt, c);
    return 0;
}

/* A call that failed: TW_EUNKNOWN once some attempt may have been applied,
 * else `rc` (TW_EIO: nothing applied). */
static int rr_failed(bool lost, int rc)
{
    return lost ? TW_EUNKNOWN : rc;
}

/* tw_rr_command; *lost is set once an attempt was written whole and its
 * reply lost (it stays set: the call's outcome is unknown unless a later
 * attempt answers, and whether that answer tells is the script's affair:
 * REMOVE and MOVE remember theirs, scripts.c). Such a retry is sent only
 * before the deadline, so that the scripts' memory of a call (2 *
 * command_timeout_ms + 1 s, client.c) outlasts every attempt the server runs
 * while the caller still waits. */
static int rr_command(struct tw_rr_router *rt, int slot, int argc, const char **argv,
                      const size_t *lens, bool *lost, redisReply **reply)
{
    uint32_t budget = rt->retry_ms ? rt->retry_ms : rt->command_timeout_ms;
    uint64_t deadline = tw_rr_mono_ns() + (uint64_t)budget * 1000000u;
    int ask = -1;
    rt->err[0] = 0;
    rt->oom = false;
    for (;;) {
        if (rt->cluster && rt->map_stale) {
            int rc = rr_refresh(rt);
            if (rc == TW_ENOMEM) {
                rt->oom = true;
                return rr_failed(*lost, rc);
            }
        }
        int n = ask >= 0 ? ask : tw_rr_node_of(rt, slot);
        if (n < 0) { /* slot unknown: refresh and retry */
            rt->map_stale = true;
            if (tw_rr_mono_ns() >= deadline)
                return rr_failed(*lost, TW_EIO);
            tw_rr_sleep_ms(RR_BACKOFF_MIN_MS);
            continue;
        }
        struct tw_rr_node *nd = &rt->nodes[n];
        if (nd->owed) /* its connection awaits replies (tw_rr_send): not for this call */
            return rr_failed(*lost, TW_EIO);
        tw_rr_check_idle(rt, (size_t)n);
        int crc = tw_rr_connect_node(rt, (size_t)n);
        if (crc != 0 && crc != TW_EIO) /* refused (TW_EAUTH ...): retrying cannot help */
            return rr_failed(*lost, crc);
        if (crc != 0) {
            if (rt->cluster)
                rt->map_stale = true;
            /* With the owner's short budget (retry_ms), a node that may not
             * be tried again before the deadline fails the call at once:
             * sleeping until the deadline only cost the caller its time (an
             * executor's START round 5 ms per round with a master down). */
            if (tw_rr_mono_ns() >= deadline || (rt->retry_ms && nd->next_try_ns >= deadline))
                return rr_failed(*lost, TW_EIO);
            rr_wait(rt, (size_t)n, deadline);
            continue;
        }
        if (nd->check < 0) { /* refused by the owner's check: checked again on the next call */
            int refused = nd->check;
            rr_drop(nd);
            return rr_failed(*lost, refused);
        }
        if (*lost && tw_rr_mono_ns() >= deadline)
            return TW_EUNKNOWN;
        redisReply *r = NULL;
        int st = rr_roundtrip(rt, nd->c, ask >= 0, argc, argv, lens, &r);
        ask = -1;
        if (*lost && rt->wait_replicas) /* WAIT vouches for this connection's writes only, */
            rt->waited = -1;            /* and a lost attempt's went over another (wait.c) */
        if (st != 0) {
            if (r)
                freeReplyObject(r);
            int oom = nd->c->err == TW_ENOMEM;
            *lost = *lost || st == RR_LOST;
            rr_lost(rt, nd, NULL);
            rr_drop(nd);
            if (oom) {
                rt->oom = true;
                return rr_failed(*lost, TW_ENOMEM);
            }
            if (rt->cluster)
                rt->map_stale = true;
            if (tw_rr_mono_ns() >= deadline)
                return rr_failed(*lost, TW_EIO);
            continue; /* reconnect at once */
        }
        if (r->type == REDIS_REPLY_ERROR && rt->cluster &&
            (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0)) {
            int s, idx = rr_redirect_target(rt, (size_t)n, r->str, &s);
            bool moved = r->str[0] == 'M';
            freeReplyObject(r);
            if (idx < 0) {
                rt->oom = idx == TW_ENOMEM;
                return rr_failed(*lost, idx == TW_ENOMEM ? TW_ENOMEM : TW_EPROTO);
            }
            if (moved) {
                rt->slot_node[s] = (uint16_t)idx;
                rt->map_stale = true;
            } else {
                ask = idx;
            }
            if (tw_rr_mono_ns() >= deadline)
                return rr_failed(*lost, TW_EIO);
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR && rt->sentinel && strncmp(r->str, "READONLY", 8) == 0) {
            freeReplyObject(r); /* a replica now: nothing written; the Sentinels asked again */
            tw_rr_sentinel_stale(rt->sentinel);
            rr_lost(rt, nd, "a replica now (READONLY)");
            rr_drop(nd);
            if (tw_rr_mono_ns() >= deadline)
                return rr_failed(*lost, TW_EIO);
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR && tw_rr_is_retry_error(r)) {
            freeReplyObject(r);
            if (rt->cluster)
                rt->map_stale = true;
            if (tw_rr_mono_ns() >= deadline)
                return rr_failed(*lost, TW_EIO);
            rr_backoff(nd);
            rr_wait(rt, (size_t)n, deadline);
            nd->next_try_ns = 0;
            continue;
        }
        if (r->type == REDIS_REPLY_ERROR) /* the caller's to judge; its words kept */
            snprintf(rt->err, sizeof rt->err, "%s", r->str);
        *reply = r;
        return 0;
    }
}

int tw_rr_command(struct tw_rr_router *rt, int slot, int argc, const char **argv,
                  const size_t *lens, redisReply **reply)
{
    bool lost = false;
    return rr_command(rt, slot, argc, argv, lens, &lost, reply);
}

/* The head of a script call: EVALSHA, script id's SHA1, the key count nk
 * (a decimal string). */
void tw_rr_evalsha_head(const struct tw_rr_router *rt, unsigned id, const char *nk, const char **av,
                        size_t *al)
{
    av[0] = "EVALSHA";
    al[0] = 7;
    av[1] = rt->shas[id];
    al[1] = strlen(av[1]);
    av[2] = nk;
    al[2] = strlen(nk);
}

/* The arguments of EVALSHA script `id` into av, al (TW_RR_ARGV_MAX each; nk
 * holds the key count): their count, or TW_EINVAL when they do not fit. */
int tw_rr_eval_argv(const struct tw_rr_router *rt, unsigned id, int nkeys, int nargs,
                    const char **argv, const size_t *lens, const char **av, size_t *al, char nk[16])
{
    int argc = 3 + nkeys + nargs;
    if (argc > TW_RR_ARGV_MAX)
        return TW_EINVAL;
    snprintf(nk, 16, "%d", nkeys);
    tw_rr_evalsha_head(rt, id, nk, av, al);
    memcpy(av + 3, argv, (size_t)(nkeys + nargs) * sizeof *av);
    memcpy(al + 3, lens, (size_t)(nkeys + nargs) * sizeof *al);
    return argc;
}

/* tw_rr_eval, *lost as rr_command's (the EVAL after NOSCRIPT included): an
 * error reply after a lost attempt leaves the outcome unknown. */
int tw_rr_eval_lost(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
                    const char **argv, const size_t *lens, bool *lost, redisReply **reply)
{
    const char *av[TW_RR_ARGV_MAX];
    size_t al[TW_RR_ARGV_MAX];
    char nk[16];
    int argc = tw_rr_eval_argv(rt, id, nkeys, nargs, argv, lens, av, al, nk);
    if (argc < 0)
        return argc;
    redisReply *r;
    int rc = rr_command(rt, slot, argc, av, al, lost, &r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        av[0] = "EVAL";
        al[0] = 4;
        av[1] = rt->bodies[id];
        al[1] = strlen(av[1]);
        rc = rr_command(rt, slot, argc, av, al, lost, &r);
        if (rc)
            return rc;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* an error after a lost attempt may answer that attempt's effect
         * (a retried set refused at maxmemory after the first was stored) */
        rc = *lost ? TW_EUNKNOWN : tw_rr_reply_error(rt, r);
        if (*lost)
            tw_rr_reply_error(rt, r); /* its words kept all the same */
        freeReplyObject(r);
        return rc;
    }
    *reply = r;
    return 0;
}

int tw_rr_eval(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
               const char **argv, const size_t *lens, redisReply **reply)
{
    bool lost = false;
    return tw_rr_eval_lost(rt, id, slot, nkeys, nargs, argv, lens, &lost, reply);
}

void tw_rr_drop(struct tw_rr_router *rt, size_t node)
{
    rr_drop(&rt->nodes[node]);
}

void tw_rr_lost(struct tw_rr_router *rt, size_t node, const char *why)
{
    rr_lost(rt, &rt->nodes[node], why);
}

bool tw_rr_sentinel_moved(struct tw_rr_router *rt, size_t node)
{
    return rr_sentinel_moved(rt, &rt->nodes[node]);
}
