/* SPDX-License-Identifier: MIT */
/* Test fixture: a master, two replicas and three Sentinels (fixture.h,
 * "Sentinel"). The servers are ordinary rfx_start servers: the replicas
 * with --replicaof (and --masterauth), the Sentinels with a config file of
 * their own (rfx_options.sentinel_conf), so the registry and its cleanup
 * cover them as every other server. */
#define _GNU_SOURCE
#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
    fprintf(stderr, "rfx: sentinels: %s\n", what);
}

/* An integer field of a server's INFO section, or -1. */
static long info_long(const struct rfx_server *s, const char *section, const char *field)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return -1;
    redisReply *x = redisCommand(c, "INFO %s", section);
    long v = -1;
    const char *p = x && x->type == REDIS_REPLY_STRING ? strstr(x->str, field) : NULL;
    if (p)
        v = strtol(p + strlen(field), NULL, 10);
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return v;
}

/* Whether a replica's link to its master is up (its first sync done). */
static bool link_up(const struct rfx_server *s)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return false;
    redisReply *x = redisCommand(c, "INFO replication");
    bool up = x && x->type == REDIS_REPLY_STRING && strstr(x->str, "master_link_status:up");
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return up;
}

/* The number of entries of a Sentinel's answer to "SENTINEL what mymaster"
 * whose flags hold none of s_down, o_down, disconnected; -1 on failure. */
static long healthy(const struct rfx_server *sen, const char *what)
{
    redisContext *c = rfx_connect(sen);
    if (!c)
        return -1;
    redisReply *x = redisCommand(c, "SENTINEL %s mymaster", what);
    long n = -1;
    if (x && x->type == REDIS_REPLY_ARRAY) {
        n = 0;
        for (size_t i = 0; i < x->elements; i++) {
            const redisReply *e = x->element[i];
            for (size_t k = 0; e->type == REDIS_REPLY_ARRAY && k + 1 < e->elements; k += 2)
                if (strcmp(e->element[k]->str, "flags") == 0 &&
                    !strstr(e->element[k + 1]->str, "down") &&
                    !strstr(e->element[k + 1]->str, "disconnected"))
                    n++;
        }
    }
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return n;
}

int rfx_sentinels_start(struct rfx_sentinels *s, const char *password)
{
    return rfx_sentinels_start_auth(s, password, NULL);
}

int rfx_sentinels_start_auth(struct rfx_sentinels *s, const char *password,
                             const char *sentinel_password)
{
    memset(s, 0, sizeof *s);
    size_t k = 0; /* the master's: it may become a replica; the replicas': a master */
    s->extra_[k++] = "--repl-diskless-sync-delay"; /* replicas in sync at once, not in 5 s */
    s->extra_[k++] = "0";
    if (password) {
        s->extra_[k++] = "--masterauth";
        s->extra_[k++] = password;
    }
    s->extra_[k] = NULL;
    memcpy(s->mextra_, s->extra_, sizeof s->mextra_);
    struct rfx_options o = {.password = password, .extra = s->mextra_};
    if (rfx_start(&s->data[0], &o) != 0)
        return -1;
    snprintf(s->port_, sizeof s->port_, "%d", s->data[0].port);
    s->extra_[k++] = "--replicaof";
    s->extra_[k++] = "127.0.0.1";
    s->extra_[k++] = s->port_;
    s->extra_[k] = NULL;
    o.extra = s->extra_;
    /* the master's own restart as a replica would need --replicaof too:
     * Sentinel sends it REPLICAOF when it comes back */
    for (int i = 1; i < 3; i++)
        if (rfx_start(&s->data[i], &o) != 0)
            return -1;
    int n = snprintf(s->conf_, sizeof s->conf_,
                     "sentinel monitor mymaster 127.0.0.1 %d 2\n"
                     "sentinel down-after-milliseconds mymaster 1000\n"
                     "sentinel failover-timeout mymaster 3000\n"
                     "sentinel parallel-syncs mymaster 2\n",
                     s->data[0].port);
    if (password)
        n += snprintf(s->conf_ + n, sizeof s->conf_ - (size_t)n,
                      "sentinel auth-pass mymaster %s\n", password);
    if (sentinel_password)
        snprintf(s->conf_ + n, sizeof s->conf_ - (size_t)n, "sentinel sentinel-pass %s\n",
                 sentinel_password);
    struct rfx_options so = {.sentinel_conf = s->conf_, .password = sentinel_password};
    for (int i = 0; i < 3; i++)
        if (rfx_start(&s->sentinel[i], &so) != 0)
            return -1;
    snprintf(s->url, sizeof s->url, "redis+sentinel://%s%s%s127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/mymaster",
             password ? ":" : "", password ? password : "", password ? "@" : "",
             s->sentinel[0].port, s->sentinel[1].port, s->sentinel[2].port);
    uint64_t end = rfx_mono_ms() + 30000;
    for (;;) {
        bool ok = info_long(&s->data[0], "replication", "connected_slaves:") == 2 &&
                  link_up(&s->data[1]) && link_up(&s->data[2]);
        for (int i = 0; ok && i < 3; i++)
            ok = healthy(&s->sentinel[i], "replicas") == 2 &&
                 healthy(&s->sentinel[i], "sentinels") == 2;
        if (ok)
            return 0;
        if (rfx_mono_ms() > end) {
            fail("not ready within 30 s (replicas and Sentinels known to every Sentinel)");
            return -1;
        }
        rfx_sleep_ms(100);
    }
}

int rfx_sentinels_stop(struct rfx_sentinels *s)
{
    for (int i = 0; i < 3; i++) {
        rfx_stop(&s->sentinel[i]);
        rfx_stop(&s->data[i]);
    }
    return 0;
}

/* The port a Sentinel names for mymaster, or -1. */
static int named(const struct rfx_server *sen)
{
    redisContext *c = rfx_connect(sen);
    if (!c)
        return -1;
    redisReply *x = redisCommand(c, "SENTINEL get-master-addr-by-name mymaster");
    int port = -1;
    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(x->element[1]->str);
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return port;
}

static bool is_master(const struct rfx_server *s)
{
    if (s->pid <= 0)
        return false;
    redisContext *c = rfx_connect(s);
    if (!c)
        return false;
    redisReply *x = redisCommand(c, "ROLE");
    bool m = x && x->type == REDIS_REPLY_ARRAY && x->elements > 0 &&
             strcmp(x->element[0]->str, "master") == 0;
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return m;
}

int rfx_sentinels_master(const struct rfx_sentinels *s, int not, int timeout_ms)
{
    uint64_t end = rfx_mono_ms() + (uint64_t)timeout_ms;
    do {
        int port = named(&s->sentinel[0]);
        bool same = port > 0;
        for (int i = 1; same && i < 3; i++)
            same = named(&s->sentinel[i]) == port;
        for (int d = 0; same && d < 3; d++)
            if (s->data[d].port == port && d != not && is_master(&s->data[d]))
                return d;
        rfx_sleep_ms(50);
    } while (rfx_mono_ms() < end);
    return -1;
}
