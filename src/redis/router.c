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
#define RR_PIPE_CHUNK 512u
#define RR_FLUSH_BYTES 4096u /* tw_rr_eval_many writes a node's buffer at this size */

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
static int rr_connect(struct tw_rr_router *rt, size_t i)
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
    int rc = tw_rr_open(rt->conn, n->host, n->port, rt->connect_timeout_ms,
                        rt->command_timeout_ms, &c, rt->err, sizeof rt->err);
    if (rc == 0 && rt->sentinel &&
        (rc = tw_rr_sentinel_role(rt->sentinel, c, n->host, n->port, rt->err,
                                  sizeof rt->err)) != 0)
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
            e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
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
    int rc = rr_connect(rt, i);
    if (rc != 0)
        return rc;
    redisReply *r;
    if (tw_rr_link_command(rt->nodes[i].c, 2, (const char *[]){"CLUSTER", "SLOTS"},
                           (size_t[]){7, 5}, &r) != 0) {
        rr_lost(rt, &rt->nodes[i], NULL);
        rr_drop(&rt->nodes[i]);
        return TW_EIO;
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

/* The node for a slot; -1 when the map does not know it. */
static int rr_node_for(struct tw_rr_router *rt, int slot)
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

static bool rr_is_retry_error(const redisReply *r)
{
    static const char *const pre[] = {"LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN",
                                      "BUSY "};
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
static void rr_check_idle(struct tw_rr_router *rt, size_t i)
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
    for (;;) {
        if (rt->cluster && rt->map_stale) {
            int rc = rr_refresh(rt);
            if (rc == TW_ENOMEM)
                return rr_failed(*lost, rc);
        }
        int n = ask >= 0 ? ask : rr_node_for(rt, slot);
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
        rr_check_idle(rt, (size_t)n);
        int crc = rr_connect(rt, (size_t)n);
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
            if (oom)
                return rr_failed(*lost, TW_ENOMEM);
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
            if (idx < 0)
                return rr_failed(*lost, idx == TW_ENOMEM ? TW_ENOMEM : TW_EPROTO);
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
        if (r->type == REDIS_REPLY_ERROR && rr_is_retry_error(r)) {
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
static void rr_evalsha_head(const struct tw_rr_router *rt, unsigned id, const char *nk,
                            const char **av, size_t *al)
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
static int rr_eval_argv(const struct tw_rr_router *rt, unsigned id, int nkeys, int nargs,
                        const char **argv, const size_t *lens, const char **av, size_t *al,
                        char nk[16])
{
    int argc = 3 + nkeys + nargs;
    if (argc > TW_RR_ARGV_MAX)
        return TW_EINVAL;
    snprintf(nk, 16, "%d", nkeys);
    rr_evalsha_head(rt, id, nk, av, al);
    memcpy(av + 3, argv, (size_t)(nkeys + nargs) * sizeof *av);
    memcpy(al + 3, lens, (size_t)(nkeys + nargs) * sizeof *al);
    return argc;
}

/* tw_rr_eval, *lost as rr_command's (the EVAL after NOSCRIPT included): an
 * error reply after a lost attempt leaves the outcome unknown. */
static int rr_eval(struct tw_rr_router *rt, unsigned id, int slot, int nkeys, int nargs,
                   const char **argv, const size_t *lens, bool *lost, redisReply **reply)
{
    const char *av[TW_RR_ARGV_MAX];
    size_t al[TW_RR_ARGV_MAX];
    char nk[16];
    int argc = rr_eval_argv(rt, id, nkeys, nargs, argv, lens, av, al, nk);
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
    return rr_eval(rt, id, slot, nkeys, nargs, argv, lens, &lost, reply);
}

void tw_rr_drop(struct tw_rr_router *rt, size_t node)
{
    rr_drop(&rt->nodes[node]);
}

/* Write what is buffered for node n; 0, or TW_EIO (closed). */
static int rr_flush(struct tw_rr_router *rt, size_t n)
{
    if (tw_rr_link_flush(rt->nodes[n].c) != 0) {
        rr_lost(rt, &rt->nodes[n], NULL);
        rr_drop(&rt->nodes[n]);
        return TW_EIO;
    }
    return 0;
}

int tw_rr_send(struct tw_rr_router *rt, int slot, int argc, const char **argv, const size_t *lens)
{
    int n = rr_node_for(rt, slot); /* the map as it is: the node tw_rr_node_of names */
    if (n < 0) {
        rt->map_stale = true;
        return TW_EIO;
    }
    (void)rr_sentinel_moved(rt, &rt->nodes[n]);
    int crc = rr_connect(rt, (size_t)n);
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
    int argc = rr_eval_argv(rt, id, nkeys, nargs, argv, lens, av, al, nk);
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
            rr_lost(rt, &rt->nodes[node], NULL);
            rr_drop(&rt->nodes[node]);
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
            rr_lost(rt, &rt->nodes[node], NULL);
            rr_drop(&rt->nodes[node]);
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
    rr_lost(rt, &rt->nodes[nd], NULL);
    rr_drop(&rt->nodes[nd]);
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
         strncmp(r->str, "ASK ", 4) == 0 || rr_is_retry_error(r))) {
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
                          const uint64_t *nbytes, tw_rr_check_fn *check, void *ctx,
                          bool *applied, bool *io)
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
                rr_lost(rt, &rt->nodes[dn[k]], "no answer (silent)");
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
            rr_evalsha_head(rt, id, nk, av, al);
            rc = build(ctx, base + j, &slot, av + 3, al + 3, &nargs);
            if (rc)
                break;
            int argc = 3 + nkeys + nargs;
            if (argc > TW_RR_ARGV_MAX) {
                rc = TW_EINVAL;
                break;
            }
            int nd = rr_node_for(rt, slot);
            cl[j] = (struct rr_call){0, nd, slot, RR_CALL_REDO};
            if (nd < 0)
                continue;
            if (nbytes[nd] == 0) /* the node's first call of the chunk */
                rr_check_idle(rt, (size_t)nd);
            if (!rt->nodes[nd].c)
                (void)rr_connect(rt, (size_t)nd);
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
                rr_drop(&rt->nodes[i]);
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
            rc = rr_eval(rt, id, slot, nkeys, nargs, av + 3, al + 3, &lost, &r);
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
