/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: Sentinel. The servers may be Sentinels and the name of
 * the master they watch (redis+sentinel://host:port,host:port/name, url.c);
 * the layer then connects to whatever master they name, and follows a
 * failover.
 *
 * Finding the master: the Sentinels are asked in turn (SENTINEL
 * get-master-addr-by-name), from the one that answered last, each on a
 * connection of its own opened by tw_rr_open with the Sentinels'
 * credentials (sentinel_username/password; none by default), closed after
 * the answer. The first answer is taken, but when the master was found
 * wrong, an answer other than the address that failed is preferred (a
 * Sentinel that has not yet learnt of a failover names the old master).
 * Nothing trusts that answer alone: every connection any router of the
 * instance opens (router.c, tw_rr_connect_node) goes to the address last found and
 * must answer ROLE with "master" before its first command; a replica (a
 * stale answer, or a failed-over master that came back as a replica) fails
 * that connection like an unreachable server, and has the Sentinels asked
 * again.
 *
 * Following a failover: the master's address is one value per instance
 * (host, port, gen), under mu. Anything that shows the master wrong marks
 * it stale (an atomic flag): a connection that cannot be opened, ROLE not
 * master, a READONLY reply (router.c; nothing was written: the call is
 * retried). The next connection attempt of any thread then asks the
 * Sentinels, under mu (the others wait for its answer rather than asking
 * too), at most every RR_ASK_MS while the answer does not change; a new
 * address resets the node's backoff. So each of the instance's connections
 * (client, claim, executors, acknowledger, subscriber) reaches the new
 * master on its next attempt after the Sentinels name it, within the
 * router's retries (command_timeout_ms per call). +switch-master is not
 * listened to: a failover always breaks the old master's connections (it
 * died, or a demoted master answers writes READONLY), which is the signal.
 *
 * On a new master (gen changes): the clock offsets (offset.c) are
 * forgotten and measured again from the new master's replies (a due time
 * is met by the new master's clock); the client's router checks the new
 * master as it checks every new connection (the maxmemory-policy, redis.c)
 * and, here, the queue's partition count, stored again when the failover
 * lost it; the subscriber re-subscribes there (subscriber.c); the claim
 * thread, on its reconnect, claims every partition (claim.c).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

#define RR_ASK_MS 100u /* the Sentinels are asked at most this often while nothing changes */
#define RR_SENTINELS_MAX 64

struct tw_rr_sentinel {
    pthread_mutex_t mu;   /* guards what follows but stale and gen */
    size_t n;             /* the Sentinels */
    struct {
        char host[TW_RR_URL_HOST];
        int port;
    } v[RR_SENTINELS_MAX];
    size_t next;          /* the one that answered last: asked first */
    char master[TW_RR_URL_HOST];
    struct tw_rr_conn conn; /* the Sentinels' credentials */
    uint32_t connect_timeout_ms, command_timeout_ms;
    char host[TW_RR_URL_HOST]; /* the master as last found */
    int port;
    uint64_t asked_ns;    /* when the Sentinels were last asked */
    atomic_bool stale;
    _Atomic uint64_t gen;
    struct tw_redis *r;   /* its clock offsets, forgotten on a new master */
};

/* One Sentinel's answer: 0 and host, port; else a code and err. */
static int rr_ask_one(struct tw_rr_sentinel *s, size_t i, char *host, int *port, char *err,
                      size_t errlen)
{
    struct tw_rr_link *c;
    int rc = tw_rr_open(s->conn.user || s->conn.pass ? &s->conn : NULL, s->v[i].host,
                        s->v[i].port, s->connect_timeout_ms, s->command_timeout_ms, &c, err,
                        errlen);
    if (rc)
        return rc;
    char where[TW_RR_ERR_MAX / 2 - 2]; /* with ": " and hiredis' errstr (128), fits err */
    tw_rr_where(s->v[i].host, s->v[i].port, where, sizeof where);
    const char *av[3] = {"SENTINEL", "get-master-addr-by-name", s->master};
    redisReply *x = NULL;
    if (tw_rr_link_command(c, 3, av, NULL, &x) != 0)
        x = NULL;
    if (!x) {
        snprintf(err, errlen, "%s: %s", where, c->errstr[0] ? c->errstr : "connection lost");
        rc = TW_EIO;
    } else if (x->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "%s: %s", where, x->str);
        rc = tw_rr_error_code(x->str);
    } else if (x->type == REDIS_REPLY_NIL) {
        snprintf(err, errlen, "%s: no master named \"%.64s\" known to this Sentinel", where,
                 s->master);
        rc = TW_EINVAL;
    } else if (x->type != REDIS_REPLY_ARRAY || x->elements != 2 ||
               x->element[0]->type != REDIS_REPLY_STRING ||
               x->element[1]->type != REDIS_REPLY_STRING ||
               x->element[0]->len >= TW_RR_URL_HOST || atoi(x->element[1]->str) <= 0 ||
               atoi(x->element[1]->str) > 65535) {
        snprintf(err, errlen, "%s: unexpected reply to SENTINEL get-master-addr-by-name",
                 where);
        rc = TW_EPROTO;
    } else {
        memcpy(host, x->element[0]->str, x->element[0]->len + 1);
        *port = atoi(x->element[1]->str);
    }
    if (x)
        freeReplyObject(x);
    tw_rr_link_free(c);
    return rc;
}

/* How much an error says: a refusal or an unknown name more than silence. */
static int rr_rank(int rc)
{
    return rc == TW_EAUTH ? 3 : rc == TW_EINVAL ? 2 : rc == TW_EIO ? 0 : 1;
}

/* Ask the Sentinels (mu held); other: prefer an answer other than the
 * current address. 0 with s->host, s->port set (gen bumped when they
 * change), or the most telling error with err. */
static int rr_ask(struct tw_rr_sentinel *s, bool other, char *err, size_t errlen)
{
    char host[TW_RR_URL_HOST], first[TW_RR_URL_HOST] = "";
    int port = 0, first_port = 0, worst = TW_EIO;
    size_t first_i = 0;
    char e[TW_RR_ERR_MAX];
    snprintf(err, errlen, "no Sentinel answered");
    s->asked_ns = tw_rr_mono_ns();
    for (size_t k = 0; k < s->n; k++) {
        size_t i = (s->next + k) % s->n;
        int rc = rr_ask_one(s, i, host, &port, e, sizeof e);
        if (rc) {
            if (rr_rank(rc) > rr_rank(worst) || (worst == TW_EIO && rc == TW_EIO)) {
                worst = rc;
                snprintf(err, errlen, "%s", e);
            }
            continue;
        }
        bool differs = port != s->port || strcmp(host, s->host) != 0;
        if (!first[0] || differs) { /* the first answer, or the first that differs */
            memcpy(first, host, sizeof first);
            first_port = port;
            first_i = i;
        }
        if (!other || differs)
            break;
    }
    if (!first[0])
        return worst;
    s->next = first_i;
    if (first_port != s->port || strcmp(first, s->host) != 0) {
        memcpy(s->host, first, sizeof s->host);
        s->port = first_port;
        atomic_fetch_add(&s->gen, 1);
        if (s->r) /* a new master's clock: measured afresh (offset.c) */
            for (uint32_t p = 0; p < s->r->cfg.partitions; p++) {
                atomic_store(&s->r->off_cur[p], INT64_MIN);
                atomic_store(&s->r->off_prev[p], INT64_MIN);
                atomic_store(&s->r->off_hi_cur[p], INT64_MAX);
                atomic_store(&s->r->off_hi_prev[p], INT64_MAX);
            }
    }
    return 0;
}

bool tw_rr_sentinel_addr(struct tw_rr_sentinel *s, char *host, int *port)
{
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->stale) &&
        tw_rr_mono_ns() - s->asked_ns >= (uint64_t)RR_ASK_MS * 1000000u) {
        char err[TW_RR_ERR_MAX];
        if (rr_ask(s, true, err, sizeof err) == 0)
            atomic_store(&s->stale, false);
    }
    bool changed = *port != s->port || strcmp(host, s->host) != 0;
    if (changed) {
        memcpy(host, s->host, TW_RR_URL_HOST);
        *port = s->port;
    }
    pthread_mutex_unlock(&s->mu);
    return changed;
}

void tw_rr_sentinel_stale(struct tw_rr_sentinel *s)
{
    atomic_store(&s->stale, true);
}

uint64_t tw_rr_sentinel_gen(const struct tw_rr_sentinel *s)
{
    return atomic_load(&s->gen);
}

int tw_rr_sentinel_role(struct tw_rr_sentinel *s, struct tw_rr_link *c, const char *host, int port,
                        char *err, size_t errlen)
{
    char where[TW_RR_ERR_MAX / 2];
    tw_rr_where(host, port, where, sizeof where);
    redisReply *x = NULL;
    if (tw_rr_link_command(c, 1, (const char *[]){"ROLE"}, NULL, &x) != 0)
        x = NULL;
    int rc = TW_EIO;
    if (!x)
        snprintf(err, errlen, "%s: %s", where, c->errstr[0] ? c->errstr : "connection lost");
    else if (x->type == REDIS_REPLY_ERROR && tw_rr_error_code(x->str) == TW_EAUTH)
        rc = TW_EAUTH; /* ROLE denied: the least ACL rule with Sentinel names it */
    else if (x->type == REDIS_REPLY_ARRAY && x->elements > 0 &&
             x->element[0]->type == REDIS_REPLY_STRING && strcmp(x->element[0]->str, "master") == 0)
        rc = 0;
    else
        snprintf(err, errlen, "%s: not the master the Sentinels name (ROLE): asking them again",
                 where);
    if (rc == TW_EAUTH)
        snprintf(err, errlen, "%s: %s", where, x->str);
    if (x)
        freeReplyObject(x);
    if (rc == TW_EIO)
        tw_rr_sentinel_stale(s);
    return rc;
}

int tw_rr_sentinel_recheck(struct tw_redis *r, struct tw_rr_link *c)
{
    char key[TW_RR_KEYBUF], val[16];
    snprintf(key, sizeof key, "{%s:meta}:partitions", r->queue);
    snprintf(val, sizeof val, "%u", (unsigned)r->cfg.partitions);
    const char *av[5] = {"SET", key, val, "NX", "GET"}; /* Redis >= 7.0 */
    redisReply *x = NULL;
    if (tw_rr_link_command(c, 5, av, NULL, &x) != 0 || !x)
        return TW_EIO;
    int rc = 0;
    if (x->type == REDIS_REPLY_STRING && strcmp(x->str, val) != 0)
        rc = TW_ECONFLICT; /* another count stored with the queue */
    freeReplyObject(x);   /* nil: it was lost (stored again now); an error: as before */
    return rc;
}

void tw_rr_sentinel_free(struct tw_rr_sentinel *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    if (s->conn.pass)
        explicit_bzero(s->conn.pass, strlen(s->conn.pass));
    free(s->conn.user);
    free(s->conn.pass);
    free(s);
}

/* The Sentinels of every entry (each a redis+sentinel:// URL naming the
 * same master: redis.c checked). */
static int rr_list(struct tw_rr_sentinel *s, const struct tw_redis_config *cfg, char *why)
{
    for (size_t i = 0; i < cfg->nservers; i++) {
        struct tw_rr_url u;
        (void)tw_rr_url_parse(cfg->servers[i], &u, NULL); /* checked */
        memcpy(s->master, u.master, sizeof s->master);
        for (size_t k = 0; k < u.nsent; k++) {
            if (s->n == RR_SENTINELS_MAX) {
                snprintf(why, TW_RR_ERR_MAX, "more than %d Sentinels", RR_SENTINELS_MAX);
                return TW_EINVAL;
            }
            memcpy(s->v[s->n].host, u.sent[k].host, sizeof s->v[0].host);
            s->v[s->n++].port = u.sent[k].port;
        }
    }
    if ((cfg->sentinel_username && !(s->conn.user = strdup(cfg->sentinel_username))) ||
        (cfg->sentinel_password && !(s->conn.pass = strdup(cfg->sentinel_password))))
        return TW_ENOMEM;
    return 0;
}

/* Whether the master the Sentinels name answers as one: 0, TW_EIO (not
 * yet: ask again), or the refusal of r->conn's credentials. */
static int rr_confirm(struct tw_redis *r, struct tw_rr_sentinel *s, char *why)
{
    struct tw_rr_link *c;
    int rc = tw_rr_open(&r->conn, s->host, s->port, r->cfg.connect_timeout_ms,
                        r->cfg.command_timeout_ms, &c, why, TW_RR_ERR_MAX);
    if (rc)
        return rc;
    rc = tw_rr_sentinel_role(s, c, s->host, s->port, why, TW_RR_ERR_MAX);
    tw_rr_link_free(c);
    return rc;
}

int tw_rr_sentinel_new(struct tw_redis *r, const struct tw_redis_config *cfg, char *why)
{
    struct tw_rr_sentinel *s = calloc(1, sizeof *s);
    if (!s)
        return TW_ENOMEM;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s);
        return TW_ESYS;
    }
    r->sentinel = s;
    s->connect_timeout_ms = cfg->connect_timeout_ms;
    s->command_timeout_ms = cfg->command_timeout_ms;
    int rc = rr_list(s, cfg, why);
    uint64_t until = tw_rr_mono_ns() +
                     (uint64_t)(cfg->connect_timeout_ms + cfg->command_timeout_ms) * 1000000u;
    /* Ask, and confirm the answer; a replica (a failover under way) has
     * them asked again until the bound. */
    while (rc == 0) {
        pthread_mutex_lock(&s->mu);
        rc = rr_ask(s, atomic_load(&s->stale), why, TW_RR_ERR_MAX);
        pthread_mutex_unlock(&s->mu);
        if (rc == 0 && (rc = rr_confirm(r, s, why)) == 0)
            break;
        if (rc == TW_EIO) /* unreachable, or a replica: prefer another answer */
            atomic_store(&s->stale, true);
        if (rc != TW_EIO || tw_rr_mono_ns() >= until)
            return rc;
        tw_rr_sleep_ms(RR_ASK_MS);
        rc = 0;
    }
    if (rc)
        return rc;
    atomic_store(&s->stale, false);
    char addr[TW_RR_URL_HOST + 16];
    tw_rr_where(s->host, s->port, addr, sizeof addr);
    for (size_t i = 0; i < cfg->nservers; i++) { /* every router's seeds: the master */
        char *a = strdup(addr);
        if (!a)
            return TW_ENOMEM;
        free(r->servers[i]);
        r->servers[i] = a;
    }
    s->r = r;
    return 0;
}
