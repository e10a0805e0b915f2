/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the configuration: its defaults, the checks
 * tw_redis_new runs on it before it connects (ranges, the servers entries
 * with their credentials, database and TLS), and the copy of the servers
 * it keeps. Which values mean what: include/twheel/redis.h. */
#define _GNU_SOURCE /* strncasecmp, strdup */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "redis/internal.h"

void tw_redis_config_init(struct tw_redis_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->queue = "twq";
    cfg->partitions = TW_REDIS_PARTITIONS_AUTO;
    cfg->threads = 4;
    cfg->lease_ms = 30000;
    cfg->window_ms = 2000;
    cfg->tick_ms = 1;
    cfg->start_ahead_ms = 10;
    cfg->retry_base_ms = 1000;
    cfg->retry_max_ms = 60000;
    cfg->connect_timeout_ms = 1000;
    cfg->command_timeout_ms = 2000;
    cfg->hold_ms = 1000;
    cfg->silent_ms = TW_RR_SILENT_MS;
}

/* Where tw_redis_new says what failed (cfg->errbuf, when given). */
void tw_rr_errbuf(const struct tw_redis_config *cfg, const char *fmt, ...)
{
    if (!cfg || !cfg->errbuf || !cfg->errbuf_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cfg->errbuf, cfg->errbuf_len, fmt, ap);
    va_end(ap);
}

static bool rr_same_str(bool has_a, const char *a, bool has_b, const char *b)
{
    return has_a == has_b && (!has_a || strcmp(a, b) == 0);
}

/* The servers entries (url.c): each parsed, the schemes served, and one
 * set of credentials and one database for them all. Credentials come from
 * the username/password fields or from the URLs, not both; the URLs that
 * carry them carry the same, and those that name a database name the same
 * (the others share what they say). On success *first holds the entry
 * with credentials (or the first), and *db the database (0: none). */
int tw_rr_check_servers(const struct tw_redis_config *c, struct tw_rr_url *first, int *db,
                        bool *tls)
{
    struct tw_rr_url u;
    bool have = false;
    *db = 0;
    *tls = c->tls;
    for (size_t i = 0; i < c->nservers; i++)
        if (tw_rr_url_parse(c->servers[i], &u, NULL) == 0 && u.scheme == TW_RR_TLS)
            *tls = true;
    for (size_t i = 0; i < c->nservers; i++) {
        const char *why;
        if (tw_rr_url_parse(c->servers[i], &u, &why) != 0) {
            tw_rr_errbuf(c, "servers[%zu]: %s", i, why);
            return TW_EINVAL;
        }
        if (i > 0 && (u.scheme == TW_RR_SENTINEL) != (first->scheme == TW_RR_SENTINEL)) {
            tw_rr_errbuf(c, "servers[%zu]: Sentinel and other entries mixed", i);
            return TW_EINVAL;
        }
        if (i > 0 && u.scheme == TW_RR_SENTINEL && strcmp(u.master, first->master) != 0) {
            tw_rr_errbuf(c, "servers[%zu]: another master name than an earlier entry's", i);
            return TW_EINVAL;
        }
        if (*tls && u.scheme == TW_RR_SENTINEL) {
            tw_rr_errbuf(c,
                         "servers[%zu]: Sentinel with TLS is not served (the Sentinels and "
                         "the master are reached in plain)",
                         i);
            return TW_EINVAL;
        }
        if (*tls && (u.scheme == TW_RR_UNIX || strncasecmp(c->servers[i], "redis://", 8) == 0)) {
            tw_rr_errbuf(c, "servers[%zu]: %s with TLS (every entry host:port or rediss://)", i,
                         u.scheme == TW_RR_UNIX ? "a unix socket" : "redis://");
            return TW_EINVAL;
        }
        if (u.db >= 0 && *db != 0 && u.db != *db) {
            tw_rr_errbuf(c, "servers[%zu]: another database than an earlier entry's", i);
            return TW_EINVAL;
        }
        if (u.db > 0)
            *db = u.db;
        bool creds = u.has_user || u.has_pass;
        if (creds && (c->username || c->password)) {
            tw_rr_errbuf(c, "servers[%zu]: credentials in the URL and in username/password", i);
            return TW_EINVAL;
        }
        if (creds && have &&
            (!rr_same_str(u.has_user, u.user, first->has_user, first->user) ||
             !rr_same_str(u.has_pass, u.pass, first->has_pass, first->pass))) {
            tw_rr_errbuf(c, "servers[%zu]: other credentials than an earlier entry's", i);
            return TW_EINVAL;
        }
        if (i == 0 || (creds && !have))
            *first = u; /* the same scheme and master name as servers[0] (above) */
        have = have || creds;
    }
    if (!*tls && (c->tls_ca_file || c->tls_ca_dir || c->tls_cert_file || c->tls_key_file ||
                  c->tls_server_name || c->tls_skip_hostname_check)) {
        tw_rr_errbuf(c, "tls_* settings without TLS (tls, or rediss:// entries)");
        return TW_EINVAL;
    }
    return 0;
}

int tw_rr_check_config(const struct tw_redis_config *c)
{
    if (!c->servers || c->nservers == 0 || c->nservers > 1024 || !c->queue) {
        tw_rr_errbuf(c, "servers (1..1024 entries) and queue are required");
        return TW_EINVAL;
    }
    size_t ql = strlen(c->queue);
    if (ql == 0 || ql > TW_RR_QUEUE_MAX || strpbrk(c->queue, "{}")) {
        tw_rr_errbuf(c, "queue: 1..64 bytes, no { or }");
        return TW_EINVAL;
    }
    /* 0: a client adopts the stored count; AUTO: adopts it, or creates the
     * queue with a count for the servers (tw_rr_check_partitions, server_checks.c) */
    if ((c->partitions == 0 && c->execute) ||
        (c->partitions > TW_REDIS_PARTITIONS_MAX && c->partitions != TW_REDIS_PARTITIONS_AUTO))
        return TW_EINVAL;
    if (c->wait_replicas > 1000 ||
        (c->wait_replicas &&
         (c->wait_timeout_ms == 0 || c->wait_timeout_ms >= c->command_timeout_ms))) {
        tw_rr_errbuf(
            c, "wait_replicas: at most 1000, with wait_timeout_ms in 1..command_timeout_ms-1");
        return TW_EINVAL;
    }
    if (c->silent_ms > 60000 || (c->silent_ms > 0 && c->silent_ms < 5)) {
        tw_rr_errbuf(c, "silent_ms: 0 (no isolation) or 5..60000");
        return TW_EINVAL;
    }
    if (c->connect_timeout_ms == 0 || c->command_timeout_ms == 0 ||
        c->connect_timeout_ms > 3600000u || c->command_timeout_ms > 3600000u)
        return TW_EINVAL;
    if (c->execute) {
        if (c->threads == 0 || c->threads > TW_REDIS_THREADS_MAX)
            return TW_EINVAL;
        if (c->tick_ms == 0 || c->tick_ms > 1000 || c->window_ms < 2 * c->tick_ms ||
            c->window_ms > 86400000u)
            return TW_EINVAL;
        if (c->lease_ms < TW_REDIS_LEASE_MIN_MS || c->lease_ms < 4 * c->tick_ms ||
            c->lease_ms > 86400000u)
            return TW_EINVAL;
        if (c->hold_ms < TW_REDIS_HOLD_MIN_MS || c->hold_ms > 86400000u)
            return TW_EINVAL;
        if (c->retry_max_ms < c->retry_base_ms || c->retry_max_ms > 86400000u)
            return TW_EINVAL;
        if (c->start_ahead_ms > 1000)
            return TW_EINVAL;
        if (c->rt_priority > 99)
            return TW_EINVAL;
    }
    return 0;
}

/* The configuration's credentials and database into r->conn (copies), its
 * servers into r->servers as the router takes them ("host:port" or the
 * socket's path: no credentials). After tw_rr_check_config and
 * tw_rr_check_servers. */
int tw_rr_copy_servers(struct tw_redis *r, const struct tw_redis_config *cfg,
                       const struct tw_rr_url *first, int db)
{
    const char *user = cfg->username, *pass = cfg->password;
    if (!user && !pass) {
        user = first->has_user ? first->user : NULL;
        pass = first->has_pass ? first->pass : NULL;
    }
    if ((user && !(r->conn.user = strdup(user))) || (pass && !(r->conn.pass = strdup(pass))))
        return TW_ENOMEM;
    r->conn.db = db;
    for (size_t i = 0; i < cfg->nservers; i++) {
        struct tw_rr_url u;
        char addr[TW_RR_URL_HOST + 16];
        (void)tw_rr_url_parse(cfg->servers[i], &u, NULL); /* checked */
        tw_rr_url_addr(&u, addr, sizeof addr);
        if (!(r->servers[i] = strdup(addr)))
            return TW_ENOMEM;
    }
    return 0;
}
