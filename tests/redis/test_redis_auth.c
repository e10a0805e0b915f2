/* SPDX-License-Identifier: MIT */
/* Connecting to the Redis that production runs (redis.h, "Connecting"),
 * against real redis-server processes the cases start:
 *  - requirepass: no password (NOAUTH), a wrong one (WRONGPASS): TW_EAUTH
 *    with the server's words and never the password; the right one, in a
 *    URL with percent escapes or in the password field: everything works;
 *  - an ACL user with exactly the least rule redis.h documents (read from
 *    the header itself): set, set_many, move, remove, claim, deliver, stats,
 *    and not one denial in the server's ACL LOG; users that lack one
 *    command, a channel or the keys: tw_redis_new fails with TW_EAUTH naming
 *    it; a command taken away while the worker runs: TW_EAUTH from the call,
 *    the worker's own error, and delivery once it is given back; the
 *    channel taken away: TW_EAUTH from a set that is written whole, and
 *    delivered by a refill;
 *  - AUTH on every connection: across a SIGKILL and restart of the server
 *    (every thread reconnects, the subscriber subscribes again), and on
 *    every node of a cluster learnt from CLUSTER SLOTS (one seed given);
 *  - a unix domain socket, plain and as a URL with a password and a db;
 *  - the server's words for any error (OOM), per thread, and for a server
 *    that does not answer; configurations refused with what is wrong
 *    (TLS with a unix socket, Sentinel, conflicting credentials or databases).
 * Waits are bounded polls; nothing asserts speed.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "test.h"

#include "recorder.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "redis/internal.h" /* the ACL check's list and the scripts (white box) */
#include "twheel/redis.h"

#ifndef TW_REDIS_HEADER
#error "TW_REDIS_HEADER: include/twheel/redis.h, where the least ACL rule is written"
#endif

/* A password with every character that must be escaped in a URL, and an @. */
#define PASS "pa:ss@w/rd%x?#"
#define PASS_URL "pa%3Ass@w%2Frd%25x%3F%23"

static char errbuf[TW_RR_ERR_MAX];

/* A config of one server entry, queue q; a worker when g is given. */
static void cfg_of(struct tw_redis_config *c, const char *const *servers, const char *q,
                   struct got *g)
{
    tw_redis_config_init(c);
    c->servers = servers;
    c->nservers = 1;
    c->queue = q;
    c->connect_timeout_ms = 500;
    c->command_timeout_ms = 1000;
    c->errbuf = errbuf;
    c->errbuf_len = sizeof errbuf;
    if (g) {
        c->execute = got_exec;
        c->arg = g;
        c->threads = 2;
        c->lease_ms = 3000;
        c->window_ms = 1000;
    }
}

/* tw_redis_new on one entry with (user, pass) fields; errbuf says why. */
static int open_one(struct tw_redis **r, const char *server, const char *q, const char *user,
                    const char *pass, struct got *g)
{
    const char *servers[1] = {server};
    struct tw_redis_config c;
    cfg_of(&c, servers, q, g);
    c.username = user;
    c.password = pass;
    return tw_redis_new(r, &c);
}

/* round_trip_stats (recorder.h), then no error of this thread. */
static void round_trip(struct tw_redis *client, struct tw_redis *worker, struct got *g,
                       const char *p, size_t n)
{
    struct tw_redis_stats st;
    round_trip_stats(client, worker, g, p, n, &st);
    char buf[TW_RR_ERR_MAX];
    CHECK_EQ_INT(tw_redis_last_error(client, buf, sizeof buf), 0);
    CHECK_EQ_STR(buf, "");
    CHECK_EQ_INT(tw_redis_worker_error(worker, buf, sizeof buf), 0);
}

static redisReply *admin(const struct rfx_server *s, int argc, const char **argv)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return NULL;
    redisReply *x = redisCommandArgv(c, argc, argv, NULL);
    redisFree(c);
    return x;
}

/* ---- requirepass ---------------------------------------------------------- */

static void test_password(void)
{
    struct rfx_server s;
    struct rfx_options o = {.password = PASS};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    struct tw_redis *r = NULL;
    /* none: NOAUTH, the server's words */
    CHECK_EQ_INT(open_one(&r, rfx_addr(&s), "pw", NULL, NULL, NULL), TW_EAUTH);
    CHECK(r == NULL);
    CHECK(strstr(errbuf, "NOAUTH") != NULL);
    printf("no password: %s\n", errbuf);
    /* a wrong one: WRONGPASS, and the wrong password is not in the text */
    CHECK_EQ_INT(open_one(&r, rfx_addr(&s), "pw", NULL, "guess-4711", NULL), TW_EAUTH);
    CHECK(strstr(errbuf, "WRONGPASS") != NULL);
    CHECK(strstr(errbuf, "guess-4711") == NULL);
    CHECK(strstr(errbuf, rfx_addr(&s)) != NULL); /* which server refused */
    printf("wrong password: %s\n", errbuf);
    char url[400];
    snprintf(url, sizeof url, "redis://:wrong%%40@%s", rfx_addr(&s));
    CHECK_EQ_INT(open_one(&r, url, "pw", NULL, NULL, NULL), TW_EAUTH);
    CHECK(strstr(errbuf, "WRONGPASS") != NULL && strstr(errbuf, "wrong@") == NULL);
    /* a worker refused too (its first connection, before any thread) */
    struct got g = GOT_INIT;
    CHECK_EQ_INT(open_one(&r, rfx_addr(&s), "pw", NULL, "guess-4711", &g), TW_EAUTH);
    CHECK(strstr(errbuf, "WRONGPASS") != NULL);

    /* right: in a URL (escapes decoded) for the worker, the field for the client */
    snprintf(url, sizeof url, "redis://:%s@%s", PASS_URL, rfx_addr(&s));
    struct tw_redis *worker = NULL, *client = NULL;
    CHECK_EQ_INT(open_one(&worker, url, "pw", NULL, NULL, &g), 0);
    CHECK_EQ_STR(errbuf, "");
    CHECK_EQ_INT(open_one(&client, rfx_addr(&s), "pw", NULL, PASS, NULL), 0);
    if (worker && client)
        round_trip(client, worker, &g, "pw:", 20);
    tw_redis_free(client);
    tw_redis_free(worker);
    /* both ways at once: which one is meant is not guessed */
    CHECK_EQ_INT(open_one(&r, url, "pw", NULL, PASS, NULL), TW_EINVAL);
    CHECK(strstr(errbuf, "servers[0]") != NULL && strstr(errbuf, PASS) == NULL);
    rfx_stop(&s);
}

/* ---- the least ACL rule ----------------------------------------------------- */

/* The rule as redis.h writes it ("ACL SETUSER twheel on >PASSWORD ..." up to
 * the blank comment line), its Q and PASSWORD replaced, as argv; the number
 * of words, 0 if it is not found. */
static int least_rule(const char *q, const char *user, const char *pass, char words[64][128])
{
    FILE *f = fopen(TW_REDIS_HEADER, "r");
    CHECK(f != NULL);
    if (!f)
        return 0;
    char line[512];
    int n = 0;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        char *t = line;
        while (*t == ' ' || *t == '*')
            t++;
        if (!in && strncmp(t, "ACL SETUSER twheel ", 19) == 0)
            in = true;
        if (!in)
            continue;
        if (*t == '\n' || *t == 0)
            break;
        for (char *save = NULL, *w = strtok_r(t, " \n", &save); w && n < 64;
             w = strtok_r(NULL, " \n", &save)) {
            char out[128];
            if (strcmp(w, "twheel") == 0 && n == 2)
                snprintf(out, sizeof out, "%s", user);
            else if (strcmp(w, ">PASSWORD") == 0)
                snprintf(out, sizeof out, ">%s", pass);
            else if (strncmp(w, "~{Q:*", 5) == 0)
                snprintf(out, sizeof out, "~{%s:*", q);
            else if (strncmp(w, "&{Q:*}:ch", 9) == 0)
                snprintf(out, sizeof out, "&{%s:*}:ch", q);
            else
                snprintf(out, sizeof out, "%s", w);
            snprintf(words[n++], 128, "%s", out);
        }
    }
    fclose(f);
    CHECK(n > 10);
    return n;
}

/* Create user `user` with the least rule of queue q, then apply `change`
 * (more rule words, NULL-terminated; NULL: none). 0 on success. */
static int acl_user(const struct rfx_server *s, const char *q, const char *user,
                    const char *const *change)
{
    char words[64][128];
    const char *argv[80];
    int n = least_rule(q, user, "u-pass", words);
    for (int i = 0; i < n; i++)
        argv[i] = words[i];
    for (int k = 0; change && change[k] && n < 80; k++)
        argv[n++] = change[k];
    redisReply *x = n ? admin(s, n, argv) : NULL;
    bool ok = x && x->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "ACL SETUSER failed: %s\n", x && x->str ? x->str : "no reply");
    if (x)
        freeReplyObject(x);
    return ok ? 0 : -1;
}

static size_t acl_log_len(const struct rfx_server *s)
{
    const char *argv[2] = {"ACL", "LOG"};
    redisReply *x = admin(s, 2, argv);
    size_t n = x && x->type == REDIS_REPLY_ARRAY ? x->elements : 999;
    if (x)
        freeReplyObject(x);
    return n;
}

static void test_least_acl_user(void)
{
    struct rfx_server s;
    struct rfx_options o = {.password = "admin-pass"};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    CHECK_EQ_INT(acl_user(&s, "lq", "tw", NULL), 0);
    const char *reset[3] = {"ACL", "LOG", "RESET"};
    redisReply *x = admin(&s, 3, reset);
    if (x)
        freeReplyObject(x);
    char url[400];
    snprintf(url, sizeof url, "redis://tw:u-pass@%s", rfx_addr(&s));
    struct got g = GOT_INIT;
    struct tw_redis *worker = NULL, *client = NULL;
    CHECK_EQ_INT(open_one(&worker, url, "lq", NULL, NULL, &g), 0);
    if (!worker)
        printf("least rule worker: %s\n", errbuf);
    CHECK_EQ_INT(open_one(&client, rfx_addr(&s), "lq", "tw", "u-pass", NULL), 0);
    if (worker && client) {
        round_trip(client, worker, &g, "lq:", 40);
        /* a task held by the worker when it stops: released, under the same rule */
        CHECK_EQ_INT(tw_redis_set(client, "held", 4, "x", 1, 600), 0);
        rfx_sleep_ms(100);
    }
    tw_redis_free(worker);
    tw_redis_free(client);
    CHECK_EQ_U64(acl_log_len(&s), 0); /* not one command, key or channel denied */
    rfx_stop(&s);
}

/* A user lacking one thing: tw_redis_new fails with TW_EAUTH naming it. */
static void refused_without(const struct rfx_server *s, const char *const *change, bool worker,
                            const char *named)
{
    static int seq;
    char user[32], url[400];
    snprintf(user, sizeof user, "lack%d", seq++);
    CHECK_EQ_INT(acl_user(s, "mq", user, change), 0);
    snprintf(url, sizeof url, "redis://%s:u-pass@%s", user, rfx_addr(s));
    struct got g = GOT_INIT;
    struct tw_redis *r = NULL;
    int rc = open_one(&r, url, "mq", NULL, NULL, worker ? &g : NULL);
    CHECK_EQ_INT(rc, TW_EAUTH);
    CHECK_(strstr(errbuf, named) != NULL, "'%s' named in: %s", named, errbuf);
    CHECK(strstr(errbuf, "u-pass") == NULL);
    printf("without %s: %s\n", change[0], errbuf);
    tw_redis_free(r);
}

static void test_acl_missing(void)
{
    struct rfx_server s;
    struct rfx_options o = {.password = "admin-pass"};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    /* a command the scripts call: named by the check (the server's words
     * inside a script would not name it) */
    refused_without(&s, (const char *[]){"-hset", NULL}, false, "'hset {mq:0}:task");
    refused_without(&s, (const char *[]){"-incrby", NULL}, false, "'incrby {mq:0}:seq");
    refused_without(&s, (const char *[]){"-zmscore", NULL}, false, "'zmscore");
    /* the layer's own commands: the server's words name them */
    refused_without(&s, (const char *[]){"-eval", NULL}, false, "'eval'");
    refused_without(&s, (const char *[]){"-script|load", NULL}, false, "'script load");
    refused_without(&s, (const char *[]){"-cluster|slots", NULL}, false, "'cluster|slots'");
    /* SUBSCRIBE: a client does without it, a worker does not */
    CHECK_EQ_INT(acl_user(&s, "mq", "nosub", (const char *[]){"-subscribe", NULL}), 0);
    char url[400];
    snprintf(url, sizeof url, "redis://nosub:u-pass@%s", rfx_addr(&s));
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(open_one(&r, url, "mq", NULL, NULL, NULL), 0);
    tw_redis_free(r);
    r = NULL;
    refused_without(&s, (const char *[]){"-subscribe", NULL}, true, "'subscribe {mq:0}:ch'");
    /* the channel, and the keys */
    refused_without(&s, (const char *[]){"resetchannels", "&other", NULL}, false, "'publish");
    /* a queue of 16 partitions (the default makes 1 on one server): a user
     * with the keys of the first only (and of the stored count) */
    const char *del[2] = {"DEL", "{mq:meta}:partitions"};
    const char *set16[3] = {"SET", "{mq:meta}:partitions", "16"};
    redisReply *x = admin(&s, 2, del);
    if (x)
        freeReplyObject(x);
    x = admin(&s, 3, set16);
    if (x)
        freeReplyObject(x);
    refused_without(&s, (const char *[]){"resetkeys", "~{mq:0}*", "~{mq:meta}*", NULL}, false,
                    "{mq:15}");
    rfx_stop(&s);
}

/* wait_replicas: the least rule lacks +wait (redis.h adds it for this
 * option), and tw_redis_new says so up front, where a refused WAIT would
 * otherwise look like replicas that never answer. */
static void test_acl_wait(void)
{
    struct rfx_server s;
    struct rfx_options o = {.password = "admin-pass"};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    CHECK_EQ_INT(acl_user(&s, "wq", "nowait", NULL), 0);
    CHECK_EQ_INT(acl_user(&s, "wq", "withwait", (const char *[]){"+wait", NULL}), 0);
    char url[400];
    const char *servers[1] = {url};
    struct tw_redis_config c;
    struct tw_redis *r = NULL;
    snprintf(url, sizeof url, "redis://nowait:u-pass@%s", rfx_addr(&s));
    cfg_of(&c, servers, "wq", NULL);
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0); /* no WAIT sent: none asked for */
    tw_redis_free(r);
    r = NULL;
    c.wait_replicas = 1;
    c.wait_timeout_ms = 100;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EAUTH);
    CHECK_(strstr(errbuf, "'wait 0 0'") != NULL, "'wait' named in: %s", errbuf);
    tw_redis_free(r);
    r = NULL;
    snprintf(url, sizeof url, "redis://withwait:u-pass@%s", rfx_addr(&s));
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (r) /* no replica: the set is stored, its replication not confirmed */
        CHECK_EQ_INT(tw_redis_set(r, "k", 1, "v", 1, 60000), TW_EREPLICAS);
    tw_redis_free(r);
    rfx_stop(&s);
}

struct other_thread {
    struct tw_redis *r;
    int code;
};

static void *read_last_error(void *arg)
{
    struct other_thread *t = arg;
    char buf[64];
    t->code = tw_redis_last_error(t->r, buf, sizeof buf);
    return NULL;
}

/* A rule changed while the client and worker run: the calls and the
 * worker's threads get TW_EAUTH with the server's words; given back, all
 * goes on. */
static void test_acl_changed(void)
{
    struct rfx_server s;
    struct rfx_options o = {.password = "admin-pass"};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    CHECK_EQ_INT(acl_user(&s, "cq", "tw", NULL), 0);
    char url[400];
    snprintf(url, sizeof url, "redis://tw:u-pass@%s", rfx_addr(&s));
    struct got g = GOT_INIT;
    struct tw_redis *worker = NULL, *client = NULL;
    CHECK_EQ_INT(open_one(&worker, url, "cq", NULL, NULL, &g), 0);
    CHECK_EQ_INT(open_one(&client, url, "cq", NULL, NULL, NULL), 0);
    if (!worker || !client)
        goto out;
    /* set's ZADD taken away: TW_EAUTH, the server's words, this thread's only */
    CHECK_EQ_INT(acl_user(&s, "cq", "tw", (const char *[]){"-zadd", NULL}), 0);
    CHECK_EQ_INT(tw_redis_set(client, "a", 1, "x", 1, 100), TW_EAUTH);
    char buf[TW_RR_ERR_MAX];
    CHECK_EQ_INT(tw_redis_last_error(client, buf, sizeof buf), TW_EAUTH);
    CHECK(strstr(buf, "can't") != NULL || strstr(buf, "NOPERM") != NULL);
    printf("set without zadd: %s\n", buf);
    char small[8];
    CHECK_EQ_INT(tw_redis_last_error(client, small, sizeof small), TW_EAUTH);
    CHECK_EQ_U64(strlen(small), 7); /* cut, NUL-terminated */
    CHECK_EQ_INT(tw_redis_last_error(client, NULL, 0), TW_EAUTH);
    CHECK_EQ_INT(tw_redis_last_error(NULL, buf, sizeof buf), TW_EINVAL);
    CHECK_EQ_INT(tw_redis_last_error(client, NULL, 1), TW_EINVAL);
    struct other_thread t = {client, 1};
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, read_last_error, &t), 0);
    pthread_join(th, NULL);
    CHECK_EQ_INT(t.code, 0); /* another thread made no call */
    /* given back; the claim's LRANGE (of a bucket) taken away: the worker's
     * threads meet it.
     * "b" is due a second later than "a" was, in another due bucket: the
     * refused set of "a" had written its record and bucket before its index
     * ZADD was refused (Redis does not undo a script's writes on an error),
     * and a set into that bucket adds no index entry (redis.c). */
    CHECK_EQ_INT(acl_user(&s, "cq", "tw", (const char *[]){"-lrange", NULL}), 0);
    CHECK_EQ_INT(tw_redis_set(client, "b", 1, "x", 1, 1100), 0);
    CHECK_EQ_INT(tw_redis_last_error(client, buf, sizeof buf), 0); /* its last call succeeded */
    CHECK_EQ_STR(buf, "");
    uint64_t end = rfx_mono_ms() + 5000;
    while (tw_redis_worker_error(worker, buf, sizeof buf) == 0 && rfx_mono_ms() < end)
        rfx_sleep_ms(20);
    CHECK_EQ_INT(tw_redis_worker_error(worker, buf, sizeof buf), TW_EAUTH);
    printf("claim without lrange: %s\n", buf);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(worker, &st), 0);
    CHECK(st.worker_errors > 0);
    CHECK_EQ_U64(got_count(&g), 0);
    /* given back: delivered */
    CHECK_EQ_INT(acl_user(&s, "cq", "tw", NULL), 0);
    CHECK(got_wait(&g, 1, 10000));
    CHECK(got_has(&g, "b"));
    /* the channel taken away: set's last command, the PUBLISH of a task due
     * before what the worker holds, is refused; the task is written whole
     * (redis.h) and a refill claims it */
    CHECK_EQ_INT(acl_user(&s, "cq", "tw", (const char *[]){"resetchannels", NULL}), 0);
    CHECK_EQ_INT(tw_redis_set(client, "c", 1, "x", 1, 300), TW_EAUTH);
    const char *hexists[4] = {"HEXISTS", "{cq:0}:task", "c"};
    redisReply *x = admin(&s, 3, hexists);
    CHECK(x && x->type == REDIS_REPLY_INTEGER && x->integer == 1);
    if (x)
        freeReplyObject(x);
    CHECK(got_wait(&g, 2, 10000));
    CHECK(got_has(&g, "c"));
    CHECK_EQ_INT(acl_user(&s, "cq", "tw", NULL), 0);
out:
    tw_redis_free(worker);
    tw_redis_free(client);
    rfx_stop(&s);
}

/* ---- AUTH on every connection ----------------------------------------------- */

static long long numsub(const struct rfx_server *s, const char *channel)
{
    const char *argv[3] = {"PUBSUB", "NUMSUB", channel};
    redisReply *x = admin(s, 3, argv);
    long long n = -1;
    if (x && x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
        x->element[1]->type == REDIS_REPLY_INTEGER)
        n = x->element[1]->integer;
    if (x)
        freeReplyObject(x);
    return n;
}

/* SIGKILL and restart: every thread connects again, with AUTH. */
static void test_reconnect_auth(void)
{
    struct rfx_server s;
    struct rfx_options o = {.appendonly = true, .appendfsync = "always", .password = PASS};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    char url[400];
    snprintf(url, sizeof url, "redis://:%s@%s", PASS_URL, rfx_addr(&s));
    struct got g = GOT_INIT;
    struct tw_redis *worker = NULL, *client = NULL;
    CHECK_EQ_INT(open_one(&worker, url, "rq", NULL, NULL, &g), 0);
    CHECK_EQ_INT(open_one(&client, url, "rq", NULL, NULL, NULL), 0);
    if (!worker || !client)
        goto out;
    round_trip(client, worker, &g, "r1:", 10);
    CHECK_EQ_INT(numsub(&s, "{rq:0}:ch"), 1);
    CHECK_EQ_INT(rfx_kill(&s), 0);
    CHECK_EQ_INT(rfx_restart(&s), 0);
    /* the client's call reconnects (retried until the server answers) */
    int rc = TW_EIO;
    uint64_t end = rfx_mono_ms() + 10000;
    while ((rc = tw_redis_set(client, "warm", 4, "x", 1, 10)) != 0 && rfx_mono_ms() < end)
        rfx_sleep_ms(50);
    CHECK_EQ_INT(rc, 0);
    CHECK(got_wait(&g, 10, 10000)); /* r1's 9 and warm */
    round_trip(client, worker, &g, "r2:", 10);
    end = rfx_mono_ms() + 5000;
    while (numsub(&s, "{rq:0}:ch") != 1 && rfx_mono_ms() < end)
        rfx_sleep_ms(20);
    CHECK_EQ_INT(numsub(&s, "{rq:0}:ch"), 1); /* subscribed again */
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(worker, &st), 0);
    CHECK(st.reconnects > 0);
    CHECK_EQ_U64(st.worker_errors, 0); /* no NOAUTH anywhere */
out:
    tw_redis_free(worker);
    tw_redis_free(client);
    rfx_stop(&s);
}

/* One seed: the other masters are learnt from CLUSTER SLOTS, and each
 * connection to them authenticates. */
static void test_cluster_auth(void)
{
    struct rfx_cluster cl;
    struct rfx_options o = {.password = PASS};
    CHECK_EQ_INT(rfx_cluster_start_opts(&cl, 3, &o), 0);
    if (cl.n != 3)
        return;
    char url[400];
    snprintf(url, sizeof url, "redis://:%s@%s", PASS_URL, cl.addrs[1]);
    struct got g = GOT_INIT;
    struct tw_redis *worker = NULL, *client = NULL;
    CHECK_EQ_INT(open_one(&worker, url, "kq", NULL, NULL, &g), 0);
    CHECK_EQ_INT(open_one(&client, url, "kq", NULL, NULL, NULL), 0);
    if (worker && client) {
        round_trip(client, worker, &g, "k:", 48); /* 16 partitions on 3 masters */
        uint64_t keys[3] = {0};
        for (size_t i = 0; i < 3; i++)
            rfx_dbsize(&cl.node[i], &keys[i]);
        printf("keys per master after the run: %llu %llu %llu\n", (unsigned long long)keys[0],
               (unsigned long long)keys[1], (unsigned long long)keys[2]);
        /* each master holds some of the queue's partitions: all were written */
        for (unsigned p = 0; p < 16; p++) {
            char tag[32];
            snprintf(tag, sizeof tag, "{kq:%u}", p);
            CHECK(rfx_cluster_owner(&cl, rfx_key_slot(tag, strlen(tag))) >= 0);
        }
    }
    tw_redis_free(worker);
    tw_redis_free(client);
    /* a wrong password fails on the seed */
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(open_one(&r, cl.addrs[0], "kq", NULL, "nope", NULL), TW_EAUTH);
    rfx_cluster_stop(&cl);
}

/* ---- unix domain sockets ------------------------------------------------------- */

static void test_unix_socket(void)
{
    struct rfx_server s;
    struct rfx_options o = {.unix_socket = true};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    CHECK(s.sock[0] == '/');
    struct got g = GOT_INIT;
    struct tw_redis *worker = NULL, *client = NULL;
    char url[400];
    snprintf(url, sizeof url, "unix://%s", s.sock);
    CHECK_EQ_INT(open_one(&worker, s.sock, "uq", NULL, NULL, &g), 0); /* the plain path */
    CHECK_EQ_INT(open_one(&client, url, "uq", NULL, NULL, NULL), 0);
    if (worker && client)
        round_trip(client, worker, &g, "u:", 20);
    tw_redis_free(worker);
    tw_redis_free(client);
    /* a socket that is not there: TW_EIO naming its path */
    char gone[400];
    snprintf(gone, sizeof gone, "%s/none.sock", s.dir);
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(open_one(&r, gone, "uq", NULL, NULL, NULL), TW_EIO);
    CHECK(strstr(errbuf, gone) != NULL);
    rfx_stop(&s);

    /* with a password and a database, as a URL */
    struct rfx_options op = {.unix_socket = true, .password = PASS};
    CHECK_EQ_INT(rfx_start(&s, &op), 0);
    if (s.pid <= 0)
        return;
    snprintf(url, sizeof url, "unix://:%s@%s?db=3", PASS_URL, s.sock);
    struct got g2 = GOT_INIT;
    CHECK_EQ_INT(open_one(&worker, url, "uq", NULL, NULL, &g2), 0);
    CHECK_EQ_INT(open_one(&client, url, "uq", NULL, NULL, NULL), 0);
    if (worker && client) {
        round_trip(client, worker, &g2, "v:", 20);
        CHECK_EQ_INT(tw_redis_set(client, "later", 5, "x", 1, 3600000), 0);
        /* the task is in db 3, not in db 0 */
        redisContext *c = rfx_connect(&s);
        CHECK(c != NULL);
        if (c) {
            uint64_t n0 = 0, n3 = 0;
            redisReply *x = redisCommand(c, "DBSIZE");
            n0 = x && x->type == REDIS_REPLY_INTEGER ? (uint64_t)x->integer : 999;
            if (x)
                freeReplyObject(x);
            x = redisCommand(c, "SELECT 3");
            if (x)
                freeReplyObject(x);
            x = redisCommand(c, "DBSIZE");
            n3 = x && x->type == REDIS_REPLY_INTEGER ? (uint64_t)x->integer : 0;
            if (x)
                freeReplyObject(x);
            redisFree(c);
            CHECK_EQ_U64(n0, 0);
            CHECK(n3 > 0);
        }
    }
    tw_redis_free(worker);
    tw_redis_free(client);
    rfx_stop(&s);
}

/* ---- the server's words -------------------------------------------------------- */

struct setter {
    struct tw_redis *r;
    int rc, code;
    char text[TW_RR_ERR_MAX];
};

/* Sets big payloads until one is refused; then reads its own last error. */
static void *fill(void *arg)
{
    struct setter *t = arg;
    static char big[256 << 10];
    memset(big, 'b', sizeof big);
    t->rc = 0;
    for (int i = 0; i < 64 && t->rc == 0; i++) {
        char key[16];
        int n = snprintf(key, sizeof key, "big%d", i);
        t->rc = tw_redis_set(t->r, key, (size_t)n, big, sizeof big, 3600000);
    }
    t->code = tw_redis_last_error(t->r, t->text, sizeof t->text);
    return NULL;
}

static void test_server_words(void)
{
    struct rfx_server s;
    const char *extra[] = {"--maxmemory", "4mb", "--maxmemory-policy", "noeviction", NULL};
    struct rfx_options o = {.extra = extra};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    const char *servers[1] = {rfx_addr(&s)};
    struct tw_redis_config c;
    cfg_of(&c, servers, "oq", NULL);
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    if (!r)
        goto out;
    /* another thread's call runs out of memory: its error, its words */
    struct setter t = {.r = r};
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, fill, &t), 0);
    pthread_join(th, NULL);
    CHECK(t.rc < 0);
    CHECK_EQ_INT(t.code, t.rc);
    CHECK_(strncmp(t.text, "OOM", 3) == 0, "the server's words: %s", t.text);
    printf("over maxmemory: %s (%s)\n", t.text, tw_err_name(t.rc));
    char buf[TW_RR_ERR_MAX];
    CHECK_EQ_INT(tw_redis_last_error(r, buf, sizeof buf), 0); /* not this thread's */
    CHECK_EQ_STR(buf, "");
    /* a server gone: TW_EIO, and the connection's failure with its address */
    rfx_kill(&s);
    CHECK_EQ_INT(tw_redis_set(r, "k", 1, "x", 1, 10), TW_EIO);
    CHECK_EQ_INT(tw_redis_last_error(r, buf, sizeof buf), TW_EIO);
    CHECK(strstr(buf, rfx_addr(&s)) != NULL);
    printf("server gone: %s\n", buf);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(r, &st), TW_EIO);
    CHECK_EQ_INT(tw_redis_last_error(r, buf, sizeof buf), TW_EIO);
    tw_redis_free(r);
    r = NULL;
    /* tw_redis_new: none answering */
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EIO);
    CHECK(strstr(errbuf, rfx_addr(&s)) != NULL);
    printf("new, server gone: %s\n", errbuf);
out:
    tw_redis_free(r);
    rfx_stop(&s);
}

/* ---- configurations refused ------------------------------------------------------ */

static void expect_einval(const char *const *servers, size_t n, const char *user,
                          const char *pass, const char *says)
{
    struct tw_redis_config c;
    cfg_of(&c, servers, "zq", NULL);
    c.nservers = n;
    c.username = user;
    c.password = pass;
    struct tw_redis *r = NULL;
    memset(errbuf, 'X', sizeof errbuf); /* new writes it, whatever it held */
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
    CHECK(r == NULL);
    CHECK_(strstr(errbuf, says) != NULL, "'%s' in: %s", says, errbuf);
    CHECK(strstr(errbuf, "hunter2") == NULL);
}

static void test_config_refused(void)
{
    expect_einval((const char *[]){"rediss://:hunter2@127.0.0.1:1", "/tmp/x.sock"}, 2, NULL, NULL,
                  "a unix socket with TLS");
    expect_einval((const char *[]){"redis+sentinel://:hunter2@127.0.0.1/m", "127.0.0.1:1"}, 2,
                  NULL, NULL, "Sentinel and other entries mixed");
    expect_einval((const char *[]){"redis+sentinel://127.0.0.1/m", "redis+sentinel://h:2/n"}, 2,
                  NULL, NULL, "another master name");
    { /* Sentinel with cfg.tls: refused, not reached in plain */
        struct tw_redis_config c;
        cfg_of(&c, (const char *[]){"redis+sentinel://127.0.0.1/m"}, "zq", NULL);
        c.tls = true;
        struct tw_redis *r = NULL;
        CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
        CHECK_(strstr(errbuf, "Sentinel with TLS") != NULL, "in: %s", errbuf);
    }
    expect_einval((const char *[]){"127.0.0.1:1", "redis://:hunter2@h:0"}, 2, NULL, NULL,
                  "servers[1]: a port");
    expect_einval((const char *[]){"redis://a:hunter2@h:1", "redis://a:other@h:2"}, 2, NULL,
                  NULL, "other credentials");
    expect_einval((const char *[]){"redis://a:hunter2@h:1", "redis://b:hunter2@h:2"}, 2, NULL,
                  NULL, "other credentials");
    expect_einval((const char *[]){"redis://h:1/1", "redis://h:2/2"}, 2, NULL, NULL,
                  "database");
    expect_einval((const char *[]){"redis://u:hunter2@h:1"}, 1, "u", NULL, "username/password");
    expect_einval((const char *[]){"unix://relative"}, 1, NULL, NULL, "absolute");
    /* a partition count out of range still says something */
    struct tw_redis_config c;
    cfg_of(&c, (const char *[]){"127.0.0.1:1"}, "zq", NULL);
    c.partitions = TW_REDIS_PARTITIONS_MAX + 1;
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
    CHECK(errbuf[0] != 0);
    /* a small errbuf: cut and NUL-terminated; none: fine */
    char small[6];
    c.partitions = 16;
    c.servers = (const char *[]){"rediss://h:1", "/tmp/x.sock"};
    c.nservers = 2;
    c.errbuf = small;
    c.errbuf_len = sizeof small;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
    CHECK_EQ_U64(strlen(small), 5);
    c.errbuf = NULL;
    CHECK_EQ_INT(tw_redis_new(&r, &c), TW_EINVAL);
}

/* The check asks for every command the scripts call (white box: the
 * scripts' text), and redis.h's least rule grants exactly what it asks. */
static void test_acl_check_complete(void)
{
    size_t calls = 0;
    for (int i = 0; i < TW_RR_NSCRIPTS; i++) {
        for (const char *p = tw_rr_scripts[i]; (p = strstr(p, "call('")) != NULL; p += 6) {
            char cmd[32];
            size_t n = strcspn(p + 6, "'");
            if (n >= sizeof cmd)
                continue;
            for (size_t k = 0; k < n; k++)
                cmd[k] = (char)(p[6 + k] | 0x20);
            cmd[n] = 0;
            bool found = false;
            for (size_t j = 0; j < tw_rr_acl_nneeds && !found; j++)
                found = strcmp(tw_rr_acl_needs[j].argv[0], cmd) == 0;
            CHECK_(found, "the check asks for %s (called by script %d)", cmd, i);
            calls++;
        }
    }
    CHECK(calls > 20);
    char words[64][128];
    int n = least_rule("q", "u", "p", words);
    for (size_t j = 0; j < tw_rr_acl_nneeds; j++) {
        const struct tw_rr_acl_need *nd = &tw_rr_acl_needs[j];
        if (nd->when & TW_RR_ACL_WAIT) /* redis.h: "gains ... `+wait` with wait_replicas" */
            continue;
        char want[64];
        if (strcmp(nd->argv[0], "script") == 0 || strcmp(nd->argv[0], "cluster") == 0)
            snprintf(want, sizeof want, "+%s|%s", nd->argv[0], nd->argv[1]);
        else
            snprintf(want, sizeof want, "+%s", nd->argv[0]);
        bool found = false;
        for (int k = 0; k < n && !found; k++)
            found = strcmp(words[k], want) == 0;
        CHECK_(found, "redis.h's rule grants %s", want);
    }
    for (int k = 0; k < n; k++) {
        if (words[k][0] != '+')
            continue;
        bool found = false;
        for (size_t j = 0; j < tw_rr_acl_nneeds && !found; j++) {
            size_t l = strlen(tw_rr_acl_needs[j].argv[0]);
            found = strncmp(words[k] + 1, tw_rr_acl_needs[j].argv[0], l) == 0 &&
                    (words[k][1 + l] == 0 || words[k][1 + l] == '|');
        }
        CHECK_(found, "the check asks for what the rule grants: %s", words[k]);
    }
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the client's calls write on this thread (redis.h) */
    RUN(test_config_refused);
    RUN(test_acl_check_complete);
    RUN(test_password);
    RUN(test_least_acl_user);
    RUN(test_acl_missing);
    RUN(test_acl_wait);
    RUN(test_acl_changed);
    RUN(test_reconnect_auth);
    RUN(test_cluster_auth);
    RUN(test_unix_socket);
    RUN(test_server_words);
    return test_summary();
}
