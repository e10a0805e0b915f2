/* SPDX-License-Identifier: MIT */
/* TLS (redis.h, "Connecting"), against real redis-server processes serving
 * a TLS port with certificates the test makes at run time (openssl; the
 * fixture's own admin connections use the plain port):
 *  - standalone: rediss:// and the tls field with "localhost" (a DNS name)
 *    and 127.0.0.1 (an IP SAN): set, set_many, move, remove, a worker
 *    delivering (its notifications arrive over TLS);
 *  - a 3-master cluster with tls-cluster yes, one TLS seed given: every
 *    master learnt from CLUSTER SLOTS on its TLS port, tasks on every master
 *    delivered;
 *  - verification: another CA, a wrong name (tls_server_name, and a server
 *    whose certificate names another host): TW_ETLS with OpenSSL's words;
 *    tls_skip_hostname_check accepts the wrong name, not the wrong CA;
 *  - mutual TLS (tls-auth-clients yes): refused without a client
 *    certificate, served with one;
 *  - AUTH over TLS: the right password works, a wrong one is TW_EAUTH;
 *  - a TLS server SIGKILLed and restarted: every thread reconnects;
 *  - the silent probe's non-blocking connection: its handshake and PING
 *    answered by a TLS server, no step waiting on a stopped one;
 *  - configurations refused: TLS with a unix socket or redis://, tls_*
 *    fields without TLS, a certificate without its key, an unreadable CA.
 * Waits are bounded polls; nothing asserts speed.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "test.h"

#include "recorder.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h" /* the probe's link (white box) */
#include "twheel/redis.h"

/* A step the rest of a case needs: checked, and the case ends without it. */
#define NEED(x)                                                                  \
    do {                                                                         \
        if (!(x)) {                                                              \
            CHECK_(0, "%s", #x);                                                 \
            return;                                                              \
        }                                                                        \
    } while (0)

static struct rfx_tls tls;
static char errbuf[256];
static char ca[300], ca2[300], ccrt[300], ckey[300];

static bool make_certs(void)
{
    if (rfx_tls_make(&tls) != 0)
        return false;
    rfx_tls_path(&tls, "ca.crt", ca, sizeof ca);
    rfx_tls_path(&tls, "ca2.crt", ca2, sizeof ca2);
    rfx_tls_path(&tls, "client.crt", ccrt, sizeof ccrt);
    rfx_tls_path(&tls, "client.key", ckey, sizeof ckey);
    return true;
}

/* A config of the given entries with the test's CA, queue q; a worker when
 * g is given. */
static void cfg_of(struct tw_redis_config *c, const char *const *servers, size_t n,
                   const char *q, struct got *g)
{
    tw_redis_config_init(c);
    c->servers = servers;
    c->nservers = n;
    c->queue = q;
    c->connect_timeout_ms = 1000;
    c->command_timeout_ms = 2000;
    c->errbuf = errbuf;
    c->errbuf_len = sizeof errbuf;
    c->tls_ca_file = ca;
    if (g) {
        c->execute = got_exec;
        c->arg = g;
        c->threads = 2;
        c->lease_ms = 3000;
        c->window_ms = 1000;
    }
}

/* round_trip_stats (recorder.h), then no run more, and a set inside
 * the held window told to the worker over the subscriber's connection. */
static void round_trip(struct tw_redis *client, struct tw_redis *worker, struct got *g,
                       const char *p, size_t n)
{
    struct tw_redis_stats st;
    round_trip_stats(client, worker, g, p, n, &st);
    rfx_sleep_ms(100);
    CHECK_EQ_U64(got_count(g), st.delivered); /* nothing run twice, nothing removed run */
    /* The subscriber's connection: a set inside the held window is told to
     * the worker (a refill may claim a task first: a few tries). */
    for (int i = 0; i < 20 && st.notifications == 0; i++) {
        size_t had = got_count(g);
        CHECK_EQ_INT(tw_redis_set(client, "note", 4, "x", 1, 30), 0);
        CHECK(got_wait(g, had + 1, 5000));
        CHECK_EQ_INT(tw_redis_stats(worker, &st), 0);
    }
    CHECK(st.notifications > 0);
}

/* A worker of `wurl` recording into g and a client of `curl` (a host:port
 * entry with the tls field, else a rediss:// one), queue q, as cfg_of
 * configures them, with the client certificate when cert. True when both
 * opened (errbuf says why not); free both either way. */
static bool open_pair(const char *wurl, const char *curl, const char *q, struct got *g,
                      bool cert, struct tw_redis **w, struct tw_redis **client)
{
    *w = *client = NULL;
    for (int i = 0; i < 2; i++) {
        const char *servers[1] = {i == 0 ? wurl : curl};
        struct tw_redis_config c;
        cfg_of(&c, servers, 1, q, i == 0 ? g : NULL);
        c.tls = strncmp(servers[0], "rediss://", 9) != 0;
        if (cert) {
            c.tls_cert_file = ccrt;
            c.tls_key_file = ckey;
        }
        CHECK_(tw_redis_new(i == 0 ? w : client, &c) == 0, "%s", errbuf);
    }
    return *w && *client;
}

/* open_pair, then round_trip of n tasks named p..., both freed. */
static void pair_round_trip(const char *wurl, const char *curl, const char *q, bool cert,
                            const char *p, size_t n)
{
    struct got g = GOT_INIT;
    struct tw_redis *w, *client;
    if (open_pair(wurl, curl, q, &g, cert, &w, &client))
        round_trip(client, w, &g, p, n);
    tw_redis_free(client);
    tw_redis_free(w);
}

static bool start_tls_server(struct rfx_server *s, bool auth_clients, const char *password)
{
    struct rfx_options o = {0};
    o.tls_dir = tls.dir;
    o.tls_auth_clients = auth_clients;
    o.password = password;
    return rfx_start(s, &o) == 0;
}

static void test_standalone(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, false, NULL));
    char url[64], host[64];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s.tls_port);
    snprintf(host, sizeof host, "localhost:%d", s.tls_port);
    /* the client: the bool for host:port, and a DNS name checked against the DNS SAN */
    pair_round_trip(url, host, "tq", false, "s", 40);
    rfx_stop(&s);
}

static void test_cluster(void)
{
    NEED(make_certs());
    struct rfx_cluster cl;
    struct rfx_options o = {0};
    o.tls_dir = tls.dir;
    NEED(rfx_cluster_start_opts(&cl, 3, &o) == 0);
    char seed[64];
    snprintf(seed, sizeof seed, "rediss://%s", cl.tls_addrs[1]);
    struct got g = GOT_INIT;
    struct tw_redis *w, *client;
    if (open_pair(seed, seed, "cq", &g, false, &w, &client)) {
        /* far enough ahead to count each master's keys before they are due */
        enum { N = 200 };
        char keys[N][16];
        struct tw_redis_item items[N];
        for (size_t i = 0; i < N; i++) {
            snprintf(keys[i], sizeof keys[i], "c%zu", i);
            items[i] = (struct tw_redis_item){keys[i], strlen(keys[i]), "x", 1, 1500};
        }
        CHECK_EQ_INT(tw_redis_set_many(client, items, N), N);
        for (size_t i = 0; i < cl.n; i++) {
            uint64_t n = 0;
            CHECK(rfx_dbsize(&cl.node[i], &n) == 0);
            CHECK_(n > 0, "master %zu holds none of the tasks", i);
        }
        CHECK(got_wait(&g, N, 15000));
        struct tw_redis_stats st;
        uint64_t end = rfx_mono_ms() + 5000;
        do {
            rfx_sleep_ms(20);
            CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
        } while (st.pending != 0 && rfx_mono_ms() < end);
        CHECK_EQ_U64(st.pending, 0);
        CHECK_EQ_U64(st.worker_errors, 0);
        round_trip(client, w, &g, "n", 40);
    }
    tw_redis_free(client);
    tw_redis_free(w);
    rfx_cluster_stop(&cl);
}

/* tw_redis_new fails with `code`, errbuf naming `says` and the server. */
static void expect_fail(struct tw_redis_config *c, int code, const char *says, const char *addr)
{
    struct tw_redis *r = NULL;
    int rc = tw_redis_new(&r, c);
    CHECK_(rc == code, "%s, not %s: %s", tw_err_name(rc), tw_err_name(code), errbuf);
    CHECK(r == NULL);
    CHECK_(strstr(errbuf, says) != NULL, "'%s' in: %s", says, errbuf);
    if (addr)
        CHECK_(strstr(errbuf, addr) != NULL, "'%s' in: %s", addr, errbuf);
    tw_redis_free(r);
}

static void test_wrong_ca(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, false, NULL));
    char url[64];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s.tls_port);
    struct tw_redis_config c;
    cfg_of(&c, (const char *[]){url}, 1, "wq", NULL);
    c.tls_ca_file = ca2;
    expect_fail(&c, TW_ETLS, "certificate verify failed", s.tls_addr);
    c.tls_skip_hostname_check = true; /* the chain is still verified */
    expect_fail(&c, TW_ETLS, "certificate verify failed", s.tls_addr);
    /* the system's store does not know the test's CA either */
    c.tls_ca_file = NULL;
    expect_fail(&c, TW_ETLS, "certificate verify failed", s.tls_addr);
    /* the CA as a directory (openssl rehash) verifies */
    struct tw_redis *r = NULL;
    c.tls_ca_dir = tls.dir;
    c.tls_skip_hostname_check = false;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "cd %s && mkdir -p cadir && cp ca.crt cadir/ && openssl rehash cadir",
             tls.dir);
    CHECK(system(cmd) == 0);
    char cadir[300];
    snprintf(cadir, sizeof cadir, "%s/cadir", tls.dir);
    c.tls_ca_dir = cadir;
    CHECK_(tw_redis_new(&r, &c) == 0, "%s", errbuf);
    tw_redis_free(r);
    rfx_stop(&s);
}

static void test_wrong_name(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, false, NULL));
    char url[64];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s.tls_port);
    struct tw_redis_config c;
    struct tw_redis *r = NULL;
    /* a name the certificate does not carry */
    cfg_of(&c, (const char *[]){url}, 1, "nq", NULL);
    c.tls_server_name = "wrong.example";
    expect_fail(&c, TW_ETLS, "hostname mismatch", s.tls_addr);
    c.tls_server_name = "localhost"; /* one it carries, though connected by address */
    CHECK_(tw_redis_new(&r, &c) == 0, "%s", errbuf);
    tw_redis_free(r);
    r = NULL;
    /* a server whose certificate names another host only */
    char wcrt[300], wkey[300];
    CHECK(rfx_command(&s, "CONFIG SET tls-cert-file %s tls-key-file %s",
                      rfx_tls_path(&tls, "wrong.crt", wcrt, sizeof wcrt),
                      rfx_tls_path(&tls, "wrong.key", wkey, sizeof wkey)) == 0);
    cfg_of(&c, (const char *[]){url}, 1, "nq", NULL);
    expect_fail(&c, TW_ETLS, "IP address mismatch", s.tls_addr);
    char host[64];
    snprintf(host, sizeof host, "rediss://localhost:%d", s.tls_port);
    cfg_of(&c, (const char *[]){host}, 1, "nq", NULL);
    expect_fail(&c, TW_ETLS, "hostname mismatch", NULL);
    /* accepted with the check turned off (the chain still verified) */
    cfg_of(&c, (const char *[]){url}, 1, "nq", NULL);
    c.tls_skip_hostname_check = true;
    CHECK_(tw_redis_new(&r, &c) == 0, "%s", errbuf);
    if (r)
        CHECK_EQ_INT(tw_redis_set(r, "k", 1, "v", 1, 60000), 0);
    tw_redis_free(r);
    rfx_stop(&s);
}

static void test_mutual(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, true, NULL));
    char url[64];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s.tls_port);
    struct tw_redis_config c;
    cfg_of(&c, (const char *[]){url}, 1, "mq", NULL);
    expect_fail(&c, TW_ETLS, "certificate required", s.tls_addr);
    /* the certificate without its key is refused before any connection */
    c.tls_cert_file = ccrt;
    expect_fail(&c, TW_EINVAL, "tls_key_file", NULL);
    c.tls_key_file = ca; /* not a key: OpenSSL's words */
    expect_fail(&c, TW_ETLS, "client key", NULL);
    pair_round_trip(url, url, "mq", true, "m", 20);
    rfx_stop(&s);
}

static void test_auth(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, false, "hunter2"));
    char url[96], bad[96];
    snprintf(url, sizeof url, "rediss://:hunter2@127.0.0.1:%d/2", s.tls_port);
    snprintf(bad, sizeof bad, "rediss://:wrong@127.0.0.1:%d", s.tls_port);
    struct tw_redis_config c;
    cfg_of(&c, (const char *[]){bad}, 1, "aq", NULL);
    expect_fail(&c, TW_EAUTH, "WRONGPASS", s.tls_addr);
    CHECK(strstr(errbuf, "wrong") == NULL || strstr(errbuf, ":wrong@") == NULL);
    pair_round_trip(url, url, "aq", false, "a", 20);
    rfx_stop(&s);
}

/* A TLS server SIGKILLed and restarted (no close_notify: OpenSSL 3 calls
 * that an unexpected EOF): a lost connection, reconnected with a new
 * handshake by every thread, no worker error. */
static void test_reconnect(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, false, NULL));
    char url[64];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s.tls_port);
    struct got g = GOT_INIT;
    struct tw_redis *w, *client;
    if (open_pair(url, url, "rq", &g, false, &w, &client)) {
        round_trip(client, w, &g, "b", 10);
        CHECK(rfx_kill(&s) == 0);
        CHECK(rfx_restart(&s) == 0);
        int rc = TW_EIO;
        uint64_t end = rfx_mono_ms() + 10000;
        while (rc != 0 && rfx_mono_ms() < end) /* the client reconnects on its next call */
            rc = tw_redis_set(client, "again", 5, "x", 1, 100);
        CHECK_EQ_INT(rc, 0);
        size_t had = got_count(&g);
        CHECK(got_wait(&g, had + 1, 10000));
        struct tw_redis_stats st;
        CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
        CHECK(st.reconnects > 0);
        char buf[256];
        CHECK_EQ_INT(tw_redis_worker_error(w, buf, sizeof buf), 0);
        CHECK_(st.worker_errors == 0, "%" PRIu64 " worker errors, the last: %s",
               st.worker_errors, buf);
    }
    tw_redis_free(client);
    tw_redis_free(w);
    rfx_stop(&s);
}

/* The silent probe's connection (silent.c): started without waiting, its
 * TLS handshake driven by steps that never block: a PING answered by a
 * TLS server; nothing, and no step waiting, from a stopped one. */
static void test_probe(void)
{
    NEED(make_certs());
    struct rfx_server s;
    NEED(start_tls_server(&s, false, NULL));
    struct tw_rr_tls_config tc = {.ca_file = ca};
    struct tw_rr_tls *t = NULL;
    char err[256];
    NEED(tw_rr_tls_new(&tc, &t, err, sizeof err) == 0);
    for (int stopped = 0; stopped < 2; stopped++) {
        if (stopped)
            CHECK(rfx_signal(s.pid, SIGSTOP) == 0);
        struct tw_rr_link *l = NULL;
        CHECK_EQ_INT(tw_rr_link_start(t, "127.0.0.1", s.tls_port, 1000, &l), 0);
        CHECK_EQ_INT(tw_rr_link_append(l, 1, (const char *[]){"PING"}, NULL), 0);
        void *x = NULL;
        uint64_t end = rfx_mono_ms() + (stopped ? 500 : 5000), slowest = 0;
        while (!x && rfx_mono_ms() < end) {
            uint64_t t0 = rfx_mono_ms();
            CHECK_EQ_INT(tw_rr_link_step(l, &x), 0);
            if (rfx_mono_ms() - t0 > slowest)
                slowest = rfx_mono_ms() - t0;
            if (!x)
                rfx_sleep_ms(5);
        }
        /* a step that blocked would wait out the 1000 ms timeout; a busy
         * machine may hold a step that did not for a while */
        CHECK_(slowest < 500, "a step waited %" PRIu64 " ms", slowest);
        if (stopped) {
            CHECK(x == NULL);
        } else {
            CHECK(x != NULL && ((redisReply *)x)->type == REDIS_REPLY_STATUS &&
                  strcmp(((redisReply *)x)->str, "PONG") == 0);
        }
        if (x)
            freeReplyObject(x);
        tw_rr_link_free(l);
    }
    CHECK(rfx_signal(s.pid, SIGCONT) == 0);
    tw_rr_tls_free(t);
    rfx_stop(&s);
}

static void expect_einval(struct tw_redis_config *c, const char *says)
{
    expect_fail(c, TW_EINVAL, says, NULL);
}

static void test_config_refused(void)
{
    NEED(make_certs());
    struct tw_redis_config c;
    cfg_of(&c, (const char *[]){"rediss://127.0.0.1:1", "/tmp/x.sock"}, 2, "zq", NULL);
    expect_einval(&c, "servers[1]: a unix socket with TLS");
    cfg_of(&c, (const char *[]){"127.0.0.1:1", "redis://127.0.0.1:2"}, 2, "zq", NULL);
    c.tls = true;
    expect_einval(&c, "servers[1]: redis:// with TLS");
    cfg_of(&c, (const char *[]){"unix:///tmp/x.sock"}, 1, "zq", NULL);
    c.tls = true;
    expect_einval(&c, "servers[0]: a unix socket with TLS");
    cfg_of(&c, (const char *[]){"127.0.0.1:1"}, 1, "zq", NULL); /* tls_ca_file, no TLS */
    expect_einval(&c, "tls_* settings without TLS");
    cfg_of(&c, (const char *[]){"127.0.0.1:1"}, 1, "zq", NULL);
    c.tls_ca_file = NULL;
    c.tls_skip_hostname_check = true;
    expect_einval(&c, "tls_* settings without TLS");
    cfg_of(&c, (const char *[]){"rediss://127.0.0.1:1"}, 1, "zq", NULL);
    c.tls_ca_file = "/nonexistent/ca.crt";
    expect_fail(&c, TW_ETLS, "cannot load the CA file", NULL);
    /* nothing listens: TW_EIO, as without TLS */
    cfg_of(&c, (const char *[]){"rediss://127.0.0.1:1"}, 1, "zq", NULL);
    expect_fail(&c, TW_EIO, "127.0.0.1:1", NULL);
    CHECK_EQ_STR(tw_err_name(TW_ETLS), "TW_ETLS");
}

int main(void)
{
    RUN(test_standalone);
    RUN(test_cluster);
    RUN(test_wrong_ca);
    RUN(test_wrong_name);
    RUN(test_mutual);
    RUN(test_auth);
    RUN(test_reconnect);
    RUN(test_probe);
    RUN(test_config_refused);
    return test_summary();
}
