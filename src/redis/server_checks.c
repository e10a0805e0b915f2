/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the servers' own configuration, checked by
 * tw_redis_new and on every new connection: a maxmemory-policy that keeps
 * the queue's keys (or accept_evicting_policy), and the queue's partition
 * count stored with the queue. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

/* The maxmemory-policy of the server behind c into buf ("" when it does not
 * tell): INFO memory's maxmemory_policy, or CONFIG GET where INFO is denied
 * (INFO first: the least ACL rule grants it, while CONFIG is an admin
 * command that managed services rename or deny, and a denied command is
 * logged in the server's ACL LOG). 0, or TW_EIO when the connection failed. */
static int rr_read_policy(struct tw_rr_link *c, char *buf, size_t cap)
{
    buf[0] = 0;
    redisReply *x;
    if (tw_rr_link_command(c, 2, (const char *[]){"INFO", "memory"}, (size_t[]){4, 6}, &x) != 0)
        return TW_EIO;
    const char *p = x->type == REDIS_REPLY_STRING ? strstr(x->str, "maxmemory_policy:") : NULL;
    if (p) {
        p += strlen("maxmemory_policy:");
        size_t n = strcspn(p, "\r\n");
        if (n < cap) {
            memcpy(buf, p, n);
            buf[n] = 0;
        }
        freeReplyObject(x);
        return 0;
    }
    freeReplyObject(x);
    if (tw_rr_link_command(c, 3, (const char *[]){"CONFIG", "GET", "maxmemory-policy"},
                           (size_t[]){6, 3, 16}, &x) != 0)
        return TW_EIO;
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[1]->type == REDIS_REPLY_STRING)
        snprintf(buf, cap, "%s", x->element[1]->str);
    freeReplyObject(x);
    return 0;
}

/* The router's check of each new connection (on_connect): 0 for a policy
 * that keeps the queue's keys, 1 for one that may evict them when the
 * config accepts that, else TW_ECONFLICT (the node refused); TW_EIO. */
static int rr_check_server(void *ctx, struct tw_rr_link *c)
{
    const struct tw_redis *r = ctx;
    char pol[64];
    if (rr_read_policy(c, pol, sizeof pol) != 0)
        return TW_EIO;
    int v = r->sentinel ? tw_rr_sentinel_recheck((struct tw_redis *)r, c) : 0;
    if (v) /* a new master: the queue's partition count too (sentinel.c) */
        return v;
    if (strcmp(pol, "noeviction") == 0 || strncmp(pol, "volatile-", 9) == 0)
        return 0;
    return r->cfg.accept_evicting_policy ? 1 : TW_ECONFLICT;
}

/* Check every master of the client's router: the nodes the slot map names
 * (standalone: the server). The seeds new connected before the check was
 * set are checked here; the others on connecting (a PING), and a master
 * that does not answer now when it first does (the router calls
 * rr_check_server on every connection). 0, TW_ECONFLICT, TW_ENOMEM. */
int tw_rr_check_masters(struct tw_redis *r)
{
    struct tw_rr_router *rt = &r->api;
    rt->on_connect = rr_check_server;
    rt->on_connect_ctx = r;
    int *slot_of = malloc((rt->nnodes ? rt->nnodes : 1) * sizeof *slot_of);
    if (!slot_of)
        return TW_ENOMEM;
    size_t n = rt->nnodes; /* a PING may add nodes (redirects): those are checked on connecting */
    for (size_t i = 0; i < n; i++)
        slot_of[i] = !rt->cluster && i == 0 ? -1 : -2;
    for (unsigned s = 0; rt->cluster && s < TW_RR_SLOTS; s++) {
        int i = tw_rr_node_of(rt, (int)s);
        if (i >= 0 && (size_t)i < n && slot_of[i] == -2)
            slot_of[i] = (int)s;
    }
    int rc = 0;
    uint32_t keep = rt->retry_ms;
    rt->retry_ms = 1; /* one connection attempt per master: one that is away is checked later */
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (slot_of[i] == -2) /* a seed that serves no slot (a replica) */
            continue;
        if (rt->nodes[i].c) {
            int v = rr_check_server(r, rt->nodes[i].c);
            rt->nodes[i].check = v == TW_EIO ? 0 : v;
            if (v < 0 && v != TW_EIO)
                rc = v;
            continue;
        }
        const char *av[1] = {"PING"};
        size_t al[1] = {4};
        redisReply *x = NULL;
        int e = tw_rr_command(rt, slot_of[i], 1, av, al, &x);
        if (x)
            freeReplyObject(x);
        if (e != 0 && e != TW_EIO)
            rc = e;
    }
    rt->retry_ms = keep;
    free(slot_of);
    return rc;
}

/* The queue's partition count, stored with the queue: {queue:meta}:partitions
 * (its own slot: the name of no partition), written SET NX by its first
 * client, read by every later one. Read first, so that a client of an
 * existing queue starts on a server at maxmemory (the SET would be
 * refused). A client configured with 0 adopts the stored count and creates
 * no queue; one with TW_REDIS_PARTITIONS_AUTO adopts it, or creates the
 * queue with TW_REDIS_PARTITIONS_CLUSTER partitions on a cluster and
 * TW_REDIS_PARTITIONS_SINGLE on one server (which runs every partition on
 * its one thread: partitions there only add calls).
 *
 * rr_partitions_step: one GET and, when store and the queue has none, one
 * SET NX. 0 (decided: *done, or read but not stored yet), TW_ECONFLICT
 * (another count, or a value not a count), TW_ENOENT (0: no queue),
 * TW_EOOM, TW_EIO, TW_EPROTO, TW_ENOMEM. */
static int rr_partitions_step(struct tw_redis *r, bool store, bool *done)
{
    char key[TW_RR_KEYBUF], val[16];
    size_t kl = (size_t)snprintf(key, sizeof key, "{%s:meta}:partitions", r->queue);
    size_t vl = (size_t)snprintf(val, sizeof val, "%u", (unsigned)r->cfg.partitions);
    int slot = (int)tw_rr_key_slot(key, kl);
    const char *get[2] = {"GET", key}, *set[4] = {"SET", key, val, "NX"};
    size_t gl[2] = {3, kl}, sl[4] = {3, kl, vl, 2};
    redisReply *x;
    *done = false;
    int rc = tw_rr_command(&r->api, slot, 2, get, gl, &x);
    if (rc)
        return rc;
    int t = x->type;
    if (t == REDIS_REPLY_STRING && (r->adopt || r->auto_partitions)) /* inspect.c */
        rc = tw_rr_adopt_partitions(r, x->str);
    else if (t == REDIS_REPLY_STRING)
        rc = x->len == vl && memcmp(x->str, val, vl) == 0 ? 0 : TW_ECONFLICT;
    else
        rc = t == REDIS_REPLY_ERROR ? tw_rr_reply_error(&r->api, x) : TW_EPROTO;
    freeReplyObject(x);
    if (t != REDIS_REPLY_NIL) {
        *done = rc == 0;
        return rc;
    }
    if (r->adopt) /* no such queue: an inspecting client creates none */
        return TW_ENOENT;
    if (r->auto_partitions) /* a new queue: the servers' count */
        r->cfg.partitions = r->api.cluster ? TW_REDIS_PARTITIONS_CLUSTER : TW_REDIS_PARTITIONS_SINGLE;
    if (!store)
        return 0;
    vl = (size_t)snprintf(val, sizeof val, "%u", (unsigned)r->cfg.partitions);
    sl[2] = vl;
    if ((rc = tw_rr_command(&r->api, slot, 4, set, sl, &x)) != 0)
        return rc;
    t = x->type;
    if (t == REDIS_REPLY_STATUS) /* "OK": stored */
        rc = 0;
    else
        rc = t == REDIS_REPLY_ERROR ? tw_rr_reply_error(&r->api, x) : TW_EPROTO;
    freeReplyObject(x);
    *done = t != REDIS_REPLY_NIL && rc == 0; /* nil: another client stored first */
    return t == REDIS_REPLY_NIL ? 0 : rc;
}

int tw_rr_read_partitions(struct tw_redis *r)
{
    bool done;
    return r->adopt || r->auto_partitions ? rr_partitions_step(r, false, &done) : 0;
}

int tw_rr_check_partitions(struct tw_redis *r)
{
    for (int round = 0; round < 2; round++) { /* a second read after losing the SET NX race */
        bool done;
        int rc = rr_partitions_step(r, true, &done);
        if (rc || done)
            return rc;
    }
    return TW_EPROTO;
}
