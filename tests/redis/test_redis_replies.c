/* SPDX-License-Identifier: MIT */
/* Lost replies (redis.h, "Faults"; redis.c, "Lost replies"), against real
 * redis-server processes: replies are lost for real, three ways.
 *
 *  - A relay in this process (struct relay): a TCP proxy between the layer
 *    and the server that, for a chosen script (matched by its SHA1 in what
 *    the client writes), forwards the command, reads the server's reply,
 *    swallows it and closes both connections. The command was applied and
 *    the caller's reply is lost: the router retries on a new connection.
 *    Deterministic: every such loss is a case.
 *  - SIGSTOP of the server past command_timeout_ms with calls in flight,
 *    then SIGCONT: the server applies what it had read.
 *  - CLIENT KILL of every client, in a loop, while removes run: the race in
 *    which Redis ran a command and drops the client before its reply
 *    leaves.
 *
 * The rules: a call whose outcome is unknown answers TW_EUNKNOWN, TW_EIO
 * only when nothing was sent; a retried remove or move answers for its own
 * first run (never TW_ENOENT for its own removal, never a second move);
 * set_many redoes what was lost; stale_acks and delivered count an
 * acknowledgement retried after a lost reply as the delivery it was.
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "harness.h"
#include "test.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redis/internal.h" /* tw_rr_scripts: the SHA1 the relay looks for */
#include "twheel/redis.h"

/* ---- the relay --------------------------------------------------------------- */

#define RELAY_PAIRS 64

struct relay {
    int lfd, port, up_port;
    char addr[32];
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    char match[41]; /* a write holding this (a script's SHA1) is a candidate */
    unsigned every; /* the reply of every every-th candidate is swallowed (0: none) */
    unsigned limit; /* at most this many (0: no limit) */
    unsigned seen, dropped;
    void (*hook)(void *arg); /* after a reply was swallowed, before the client sees EOF */
    void *hook_arg;
    struct {
        int c, s;
        bool drop;
    } pair[RELAY_PAIRS];
    size_t n;
};

static void relay_close(struct relay *R, size_t i)
{
    close(R->pair[i].c);
    close(R->pair[i].s);
    R->pair[i] = R->pair[--R->n];
}

static int write_all(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int connect_local(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void *relay_main(void *arg)
{
    struct relay *R = arg;
    static char buf[1 << 16];
    struct pollfd pf[1 + 2 * RELAY_PAIRS];
    while (!atomic_load(&R->stop)) {
        size_t np = 0;
        pf[np++] = (struct pollfd){.fd = R->lfd, .events = POLLIN};
        for (size_t i = 0; i < R->n; i++) {
            pf[np++] = (struct pollfd){.fd = R->pair[i].c, .events = POLLIN};
            pf[np++] = (struct pollfd){.fd = R->pair[i].s, .events = POLLIN};
        }
        if (poll(pf, np, 20) <= 0)
            continue;
        /* pairs from the end, so that closing one (the last moves in) is safe */
        for (size_t i = R->n; i-- > 0;) {
            short ce = pf[1 + 2 * i].revents, se = pf[2 + 2 * i].revents;
            if (ce) {
                ssize_t k = read(R->pair[i].c, buf, sizeof buf);
                if (k <= 0) {
                    relay_close(R, i);
                    continue;
                }
                pthread_mutex_lock(&R->mu);
                if (R->every && R->match[0] && memmem(buf, (size_t)k, R->match, 40) &&
                    (!R->limit || R->dropped < R->limit) && ++R->seen % R->every == 0) {
                    R->pair[i].drop = true;
                    R->dropped++;
                }
                pthread_mutex_unlock(&R->mu);
                if (write_all(R->pair[i].s, buf, (size_t)k) != 0) {
                    relay_close(R, i);
                    continue;
                }
            }
            if (se) {
                ssize_t k = read(R->pair[i].s, buf, sizeof buf);
                if (k <= 0) {
                    relay_close(R, i);
                    continue;
                }
                if (R->pair[i].drop) { /* applied; the reply never reaches the client */
                    if (R->hook)
                        R->hook(R->hook_arg);
                    relay_close(R, i);
                    continue;
                }
                if (write_all(R->pair[i].c, buf, (size_t)k) != 0)
                    relay_close(R, i);
            }
        }
        if (pf[0].revents & POLLIN) {
            int c = accept(R->lfd, NULL, NULL);
            if (c < 0)
                continue;
            int s = connect_local(R->up_port);
            if (s < 0 || R->n == RELAY_PAIRS) {
                close(c);
                if (s >= 0)
                    close(s);
                continue;
            }
            int one = 1;
            setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            R->pair[R->n].c = c;
            R->pair[R->n].s = s;
            R->pair[R->n].drop = false;
            R->n++;
        }
    }
    while (R->n)
        relay_close(R, R->n - 1);
    return NULL;
}

static int relay_start(struct relay *R, const struct rfx_server *s)
{
    memset(R, 0, sizeof *R);
    pthread_mutex_init(&R->mu, NULL);
    R->up_port = s->port;
    R->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (R->lfd < 0 || bind(R->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(R->lfd, 64) != 0 || getsockname(R->lfd, (struct sockaddr *)&a, &al) != 0) {
        if (R->lfd >= 0)
            close(R->lfd);
        return -1;
    }
    R->port = ntohs(a.sin_port);
    snprintf(R->addr, sizeof R->addr, "127.0.0.1:%d", R->port);
    if (pthread_create(&R->th, NULL, relay_main, R) != 0) {
        close(R->lfd);
        return -1;
    }
    return 0;
}

static void relay_stop(struct relay *R)
{
    atomic_store(&R->stop, true);
    pthread_join(R->th, NULL);
    close(R->lfd);
    pthread_mutex_destroy(&R->mu);
}

/* Swallow the reply of every every-th call of script `id` (at most limit). */
static void relay_drop(struct relay *R, const struct rfx_server *s, unsigned id, unsigned every,
                       unsigned limit)
{
    redisContext *c = rfx_connect(s);
    redisReply *x = c ? redisCommand(c, "SCRIPT LOAD %s", tw_rr_scripts[id]) : NULL;
    CHECK(x && x->type == REDIS_REPLY_STRING && x->len == 40);
    pthread_mutex_lock(&R->mu);
    if (x && x->type == REDIS_REPLY_STRING && x->len == 40)
        memcpy(R->match, x->str, 41);
    R->every = every;
    R->limit = limit;
    R->seen = R->dropped = 0;
    pthread_mutex_unlock(&R->mu);
    if (x)
        freeReplyObject(x);
    if (c)
        redisFree(c);
}

static unsigned relay_dropped(struct relay *R)
{
    pthread_mutex_lock(&R->mu);
    unsigned d = R->dropped;
    pthread_mutex_unlock(&R->mu);
    return d;
}

/* ---- helpers ----------------------------------------------------------------- */

static struct tw_redis *client_new(const char *addr, const char *queue, uint32_t parts,
                                   uint32_t timeout_ms)
{
    const char *servers[1] = {addr};
    struct tw_redis_config c;
    tw_redis_config_init(&c);
    c.servers = servers;
    c.nservers = 1;
    c.queue = queue;
    c.partitions = parts;
    c.connect_timeout_ms = 500;
    c.command_timeout_ms = timeout_ms;
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    return r;
}

/* A case's servers and clients: a redis-server, the relay in front of it
 * (when relayed), a client on the server itself and one through the relay. */
struct scene {
    struct rfx_server s;
    struct relay R;
    bool relayed;
    struct tw_redis *direct, *via;
};

/* Start what the case needs; false (the failure checked) when it could not. */
static bool scene_start(struct scene *S, const char *queue, uint32_t parts, uint32_t timeout_ms,
                        bool relayed, bool via)
{
    memset(S, 0, sizeof *S);
    CHECK_EQ_INT(rfx_start(&S->s, NULL), 0);
    if (S->s.pid <= 0)
        return false;
    if (relayed) {
        CHECK_EQ_INT(relay_start(&S->R, &S->s), 0);
        S->relayed = S->R.port != 0;
    }
    S->direct = client_new(rfx_addr(&S->s), queue, parts, timeout_ms);
    if (via && S->relayed)
        S->via = client_new(S->R.addr, queue, parts, timeout_ms);
    return S->direct && (!relayed || S->relayed) && (!via || S->via);
}

static void scene_stop(struct scene *S)
{
    tw_redis_free(S->via);
    tw_redis_free(S->direct);
    if (S->relayed)
        relay_stop(&S->R);
    if (S->s.pid > 0)
        rfx_stop(&S->s);
}

/* Executions per task id (keys "k<id>"). */
#define IDS 8192

struct runs {
    atomic_uint n[IDS];
    atomic_uint total, foreign;
};

static enum tw_redis_result runs_exec(void *arg, const struct tw_redis_task *t)
{
    struct runs *R = arg;
    char k[16];
    snprintf(k, sizeof k, "%.*s", (int)(t->key_len < 15 ? t->key_len : 15), t->key);
    long id = k[0] == 'k' ? strtol(k + 1, NULL, 10) : -1;
    if (id >= 0 && id < IDS)
        atomic_fetch_add(&R->n[id], 1);
    else
        atomic_fetch_add(&R->foreign, 1);
    atomic_fetch_add(&R->total, 1);
    return TW_REDIS_DONE;
}

static struct tw_redis *worker_new(const char *addr, const char *queue, uint32_t parts,
                                   struct runs *R, uint32_t timeout_ms, uint32_t lease_ms)
{
    const char *servers[1] = {addr};
    struct tw_redis_config c;
    tw_redis_config_init(&c);
    c.servers = servers;
    c.nservers = 1;
    c.queue = queue;
    c.partitions = parts;
    c.execute = runs_exec;
    c.arg = R;
    c.threads = 2;
    c.window_ms = 500;
    c.lease_ms = lease_ms;
    c.connect_timeout_ms = 500;
    c.command_timeout_ms = timeout_ms;
    struct tw_redis *r = NULL;
    CHECK_EQ_INT(tw_redis_new(&r, &c), 0);
    return r;
}

static int key_of(char *buf, size_t cap, unsigned id)
{
    return snprintf(buf, cap, "k%u", id);
}

/* Sets ids [from, to) with delays from `delay` + (id - from) * step ms. */
static int set_ids(struct tw_redis *r, unsigned from, unsigned to, int64_t delay, int64_t step)
{
    static char keys[IDS][8];
    static struct tw_redis_item it[IDS];
    for (unsigned i = from; i < to; i++) {
        int l = key_of(keys[i - from], sizeof keys[0], i);
        it[i - from] = (struct tw_redis_item){keys[i - from], (size_t)l, "p", 1,
                                              delay + (int64_t)(i - from) * step};
    }
    return tw_redis_set_many(r, it, to - from);
}

/* Wait (bounded) until the worker's acknowledgements reach n. */
static struct tw_redis_stats wait_delivered(struct tw_redis *w, uint64_t n, unsigned ms)
{
    struct tw_redis_stats st;
    memset(&st, 0, sizeof st);
    uint64_t end = rfx_mono_ms() + ms;
    while (tw_redis_stats(w, &st) == 0 && st.delivered + st.stale_acks < n && rfx_mono_ms() < end)
        rfx_sleep_ms(20);
    return st;
}

/* The record of key in partition 0 of queue q: its due ms, or -1 (absent). */
static long long due_of(const struct rfx_server *s, const char *q, const char *key)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return -2;
    char tk[96];
    snprintf(tk, sizeof tk, "{%s:0}:task", q);
    redisReply *x = redisCommand(c, "HGET %s %s", tk, key);
    long long due = -1;
    if (x && x->type == REDIS_REPLY_STRING) {
        unsigned long long tok, att, d;
        if (sscanf(x->str, "%llu %llu %llu ", &tok, &att, &d) == 3)
            due = (long long)d;
    }
    if (x)
        freeReplyObject(x);
    redisFree(c);
    return due;
}

/* ---- remove and move: a retry answers for its own first run ----------------- */

/* Every fifth remove's reply is lost after Redis ran it; the router
 * retries at once on a new connection, and that retry finds the task gone
 * (its own removal). Each must answer 0, never TW_ENOENT. */
static void test_remove_lost_reply(void)
{
    struct scene S;
    const unsigned N = 2000;
    if (!scene_start(&S, "rm", 4, 2000, true, true))
        goto out;
    struct tw_redis *direct = S.direct, *via = S.via;
    struct relay *R = &S.R;
    CHECK_EQ_INT(set_ids(direct, 0, N, 600000, 0), (int)N);
    relay_drop(R, &S.s, TW_RR_REMOVE, 5, 0);
    unsigned ok = 0, enoent = 0, other = 0;
    for (unsigned i = 0; i < N; i++) {
        char k[8];
        int l = key_of(k, sizeof k, i);
        int rc = tw_redis_remove(via, k, (size_t)l);
        ok += rc == 0;
        enoent += rc == TW_ENOENT;
        if (rc != 0 && rc != TW_ENOENT && other++ < 5)
            printf("remove k%u: %s\n", i, tw_strerror(rc));
    }
    unsigned lost = relay_dropped(R);
    printf("removes: %u answered 0, %u TW_ENOENT, %u other; %u replies lost\n", ok, enoent, other,
           lost);
    CHECK(lost >= N / 5 - 1);
    CHECK_EQ_INT(enoent, 0);
    CHECK_EQ_INT(ok, N);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(direct, &st), 0);
    CHECK_EQ_U64(st.pending, 0);
    /* an absent task stays absent, the answer of its retry too */
    relay_drop(R, &S.s, TW_RR_REMOVE, 1, 1);
    CHECK_EQ_INT(tw_redis_remove(via, "k0", 2), TW_ENOENT);
    CHECK_EQ_INT(relay_dropped(R), 1);
out:
    scene_stop(&S);
}

struct move_hook {
    const struct rfx_server *s;
    struct tw_redis *direct;
    char key[8];
    bool remove;     /* remove the task (as a worker that delivered it would) */
    uint64_t srv_us; /* the server's clock once the first run's reply was swallowed */
};

static void move_hook(void *arg)
{
    struct move_hook *h = arg;
    if (h->remove) {
        CHECK_EQ_INT(tw_redis_remove(h->direct, h->key, strlen(h->key)), 0);
    } else {
        CHECK_EQ_INT(rfx_time_us(h->s, &h->srv_us), 0);
        rfx_sleep_ms(3); /* a second run would compute a later due time */
    }
}

/* A move's reply is lost after Redis ran it. Its retry must neither move
 * the task again (the due time stays the first run's) nor answer TW_ENOENT
 * when the task is gone meanwhile (delivered and acknowledged, here removed
 * between the two runs). */
static void test_move_lost_reply(void)
{
    struct scene S;
    const unsigned N = 200;
    const int64_t delay = 300000;
    if (!scene_start(&S, "mv", 1, 2000, true, true))
        goto out;
    struct tw_redis *direct = S.direct, *via = S.via;
    struct relay *R = &S.R;
    struct move_hook h = {.s = &S.s, .direct = direct};
    CHECK_EQ_INT(set_ids(direct, 0, N, 600000, 0), (int)N);
    R->hook = move_hook;
    R->hook_arg = &h;
    /* every other attempt: from the second call on, each call's first
     * attempt (the first call, of an absent key, only counts) */
    relay_drop(R, &S.s, TW_RR_MOVE, 2, 0);
    CHECK_EQ_INT(tw_redis_move(via, "absent", 6, delay), TW_ENOENT);
    unsigned again = 0, enoent = 0;
    for (unsigned i = 0; i < N; i++) {
        key_of(h.key, sizeof h.key, i);
        h.remove = i % 2 == 1;
        int rc = tw_redis_move(via, h.key, strlen(h.key), delay);
        enoent += rc == TW_ENOENT;
        CHECK_EQ_INT(rc, 0);
        long long due = due_of(&S.s, "mv", h.key);
        if (h.remove) {
            CHECK_EQ_INT(due, -1); /* the retry moved nothing back in */
        } else {
            /* the first run's due time: set before the hook read the clock */
            long long first_max = (long long)((h.srv_us + 999) / 1000) + delay;
            again += due > first_max;
            CHECK(due > 0 && due <= first_max);
        }
    }
    printf("moves: %u replies lost, %u TW_ENOENT, %u moved twice\n", relay_dropped(R), enoent,
           again);
    CHECK_EQ_INT(relay_dropped(R), N);
out:
    scene_stop(&S);
}

struct killer {
    const struct rfx_server *s;
    atomic_bool stop;
    unsigned kills;
};

static void *killer_main(void *arg)
{
    struct killer *K = arg;
    redisContext *c = rfx_connect(K->s);
    while (c && !atomic_load(&K->stop)) {
        redisReply *x = redisCommand(c, "CLIENT KILL TYPE normal SKIPME yes");
        if (!x)
            break;
        if (x->type == REDIS_REPLY_INTEGER && x->integer > 0)
            K->kills++;
        freeReplyObject(x);
        usleep(300);
    }
    if (c)
        redisFree(c);
    return NULL;
}

/* The fault run's race: removes while every client is killed again and
 * again. Redis may run a remove and free its client before the reply is
 * written; the retry must still answer 0. */
static void test_remove_client_kill(void)
{
    struct scene S;
    const unsigned N = (unsigned)(rw_test_size(5000) > IDS ? IDS : rw_test_size(5000));
    if (!scene_start(&S, "ck", 4, 2000, false, false))
        goto out;
    struct tw_redis *r = S.direct;
    struct killer K = {.s = &S.s};
    pthread_t th;
    CHECK_EQ_INT(set_ids(r, 0, N, 600000, 0), (int)N);
    CHECK_EQ_INT(pthread_create(&th, NULL, killer_main, &K), 0);
    unsigned ok = 0, enoent = 0, unknown = 0;
    for (unsigned i = 0; i < N; i++) {
        char k[8];
        int l = key_of(k, sizeof k, i);
        int rc = tw_redis_remove(r, k, (size_t)l);
        ok += rc == 0;
        enoent += rc == TW_ENOENT;
        unknown += rc == TW_EUNKNOWN;
        CHECK(rc == 0 || rc == TW_EUNKNOWN);
    }
    atomic_store(&K.stop, true);
    pthread_join(th, NULL);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(r, &st), 0);
    printf("removes under CLIENT KILL: %u answered 0, %u TW_ENOENT, %u TW_EUNKNOWN; "
           "%u kills, %" PRIu64 " reconnects\n",
           ok, enoent, unknown, K.kills, st.reconnects);
    CHECK_EQ_INT(enoent, 0);
    CHECK_EQ_U64(st.pending, 0);
out:
    scene_stop(&S);
}

/* ---- set_many: what was lost is redone ---------------------------------------- */

/* The reply of set_many's first SET call is lost after Redis ran it: the
 * calls left unanswered are redone on a new connection, and the call
 * answers n (TW_EIO, "nothing written", would be false: every item is
 * stored). */
static void test_set_many_lost_reply(void)
{
    struct scene S;
    const unsigned N = 1500;
    if (!scene_start(&S, "sm", 16, 2000, true, true))
        goto out;
    struct tw_redis *direct = S.direct, *via = S.via;
    struct relay *R = &S.R;
    relay_drop(R, &S.s, TW_RR_SET, 1, 1);
    CHECK_EQ_INT(set_ids(via, 0, N, 600000, 1), (int)N);
    CHECK_EQ_INT(relay_dropped(R), 1);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(direct, &st), 0);
    CHECK_EQ_U64(st.pending, N);
    /* a single set likewise: retried, stored once */
    relay_drop(R, &S.s, TW_RR_SET, 1, 1);
    CHECK_EQ_INT(tw_redis_set(via, "k9999", 5, "p", 1, 600000), 0);
    CHECK_EQ_INT(relay_dropped(R), 1);
    CHECK_EQ_INT(tw_redis_stats(direct, &st), 0);
    CHECK_EQ_U64(st.pending, N + 1);
out:
    scene_stop(&S);
}

/* ---- unknown against nothing sent ----------------------------------------------- */

/* The server SIGSTOPped past command_timeout_ms while a worker delivers a
 * stream of tasks: set, set_many, move and remove written to it time out
 * and answer TW_EUNKNOWN (it may run them); after SIGCONT it does, and each
 * task is delivered once; the acknowledgements lost in the stop count as
 * deliveries, none stale. */
static void test_timeout_unknown(void)
{
    struct scene S;
    static struct runs R;
    memset(&R, 0, sizeof R);
    struct tw_redis *w = NULL;
    /* a claim lost in the stop leaves its tasks leased (the server runs it
     * at SIGCONT): a short lease brings them back soon */
    if (!scene_start(&S, "to", 4, 500, false, false) ||
        !(w = worker_new(rfx_addr(&S.s), "to", 4, &R, 500, 4000)))
        goto out;
    struct tw_redis *c = S.direct;
    /* ids: 0 set while stopped, 1 moved, 2 removed while stopped,
     * 100..399 a stream due across the stop, 1000..2499 set_many while stopped */
    enum {
        SET1 = 0,
        MOVED = 1,
        REMOVED = 2,
        STREAM = 100,
        STREAM_END = 400,
        MANY = 1000,
        MANY_END = 2500
    };
    CHECK_EQ_INT(tw_redis_set(c, "k1", 2, "p", 1, 600000), 0);
    CHECK_EQ_INT(tw_redis_set(c, "k2", 2, "p", 1, 600000), 0);
    CHECK_EQ_INT(set_ids(c, STREAM, STREAM_END, 200, 5), STREAM_END - STREAM); /* over 1.7 s */
    rfx_sleep_ms(700); /* deliveries under way */
    CHECK_EQ_INT(rfx_signal(S.s.pid, SIGSTOP), 0);
    uint64_t t0 = rfx_mono_ms();
    int rc_set = tw_redis_set(c, "k0", 2, "p", 1, 300);
    int rc_many = set_ids(c, MANY, MANY_END, 300, 0);
    int rc_move = tw_redis_move(c, "k1", 2, 300);
    int rc_remove = tw_redis_remove(c, "k2", 2);
    printf("while stopped (%" PRIu64 " ms): set %s, set_many %s, move %s, remove %s\n",
           rfx_mono_ms() - t0, tw_strerror(rc_set), tw_strerror(rc_many), tw_strerror(rc_move),
           tw_strerror(rc_remove));
    /* set's connection was open: written, its reply lost. Once it is
     * dropped, a new connection to the stopped server is accepted by the
     * kernel but its first command (the maxmemory-policy check) times out
     * before the call is written: TW_EIO, nothing written, is then the true
     * answer, and the checks below hold the call to it. */
    CHECK_EQ_INT(rc_set, TW_EUNKNOWN);
    CHECK(rc_many == TW_EUNKNOWN || rc_many == TW_EIO);
    CHECK(rc_move == TW_EUNKNOWN || rc_move == TW_EIO);
    CHECK(rc_remove == TW_EUNKNOWN || rc_remove == TW_EIO);
    rfx_sleep_ms(300);
    CHECK_EQ_INT(rfx_signal(S.s.pid, SIGCONT), 0);

    /* The server ran what it read of each connection until it failed to
     * write a reply to the closed socket: the single calls, and set_many's
     * items up to some point (not all: which, the caller cannot know, hence
     * TW_EUNKNOWN). Each stored task is delivered once. */
    /* a move or remove that answered TW_EIO did nothing: k1 stays due in
     * 600 s, k2 stays */
    bool moved = rc_move != TW_EIO, removed = rc_remove != TW_EIO;
    uint64_t left = !moved + !removed;
    struct tw_redis_stats st = rw_wait_pending(c, left, rfx_mono_ms() + 30000);
    CHECK_EQ_U64(st.pending, left);
    st = wait_delivered(w, atomic_load(&R.total), 10000);
    rfx_sleep_ms(300); /* a late second delivery would show */
    st = wait_delivered(w, atomic_load(&R.total), 10000);
    unsigned twice = 0, missing = 0, many = 0;
    for (unsigned id = 0; id < IDS; id++) {
        bool wanted = id == SET1 || (id == MOVED && moved) || (id >= STREAM && id < STREAM_END);
        unsigned n = atomic_load(&R.n[id]);
        twice += n > 1;
        missing += wanted && n == 0;
        if (id >= MANY && id < MANY_END)
            many += n > 0;
        else if (!wanted)
            CHECK_EQ_INT(n, 0); /* k2: removed while stopped, never delivered */
    }
    printf("deliveries %u: twice %u, missing %u, of set_many's %u items %u stored; stats "
           "delivered %" PRIu64 ", stale_acks %" PRIu64 ", reconnects %" PRIu64 "\n",
           atomic_load(&R.total), twice, missing, MANY_END - MANY, many, st.delivered,
           st.stale_acks, st.reconnects);
    CHECK_EQ_INT(twice, 0);
    CHECK_EQ_INT(missing, 0);
    if (rc_many == TW_EIO)
        CHECK_EQ_INT(many, 0); /* "nothing written" must be true */
    CHECK_EQ_INT(atomic_load(&R.foreign), 0);
    CHECK_EQ_U64(st.delivered, atomic_load(&R.total));
    CHECK_EQ_U64(st.stale_acks, 0);
out:
    tw_redis_free(w);
    scene_stop(&S);
}

/* A server killed before the calls: nothing can be sent, each call answers
 * TW_EIO (the connection it left is found closed before anything is
 * written), and after a restart the same client works again. */
static void test_killed_before_call(void)
{
    struct scene S;
    if (!scene_start(&S, "kb", 4, 300, false, false))
        goto out;
    struct tw_redis *c = S.direct;
    CHECK_EQ_INT(set_ids(c, 0, 100, 600000, 0), 100); /* every connection used */
    CHECK_EQ_INT(tw_redis_move(c, "k1", 2, 600000), 0);
    CHECK_EQ_INT(rfx_kill(&S.s), 0);
    CHECK_EQ_INT(tw_redis_set(c, "k0", 2, "p", 1, 100), TW_EIO);
    CHECK_EQ_INT(tw_redis_move(c, "k1", 2, 100), TW_EIO);
    CHECK_EQ_INT(tw_redis_remove(c, "k2", 2), TW_EIO);
    CHECK_EQ_INT(set_ids(c, 0, 100, 600000, 0), TW_EIO);
    CHECK_EQ_INT(rfx_restart(&S.s), 0);
    rfx_sleep_ms(1100); /* past the router's longest connect backoff */
    CHECK_EQ_INT(set_ids(c, 0, 100, 600000, 0), 100);
    CHECK_EQ_INT(tw_redis_remove(c, "k2", 2), 0);
out:
    scene_stop(&S);
}

/* ---- acknowledgements: counted as what they did ------------------------------ */

/* A worker behind the relay: every third START call's reply is lost after
 * Redis ran it (its starts are redone: START counts an attempt once; its
 * acknowledgements deleted their tasks and are sent again). Each task runs
 * once, and stats say so: delivered == tasks, stale_acks == 0. */
static void test_ack_lost_reply(void)
{
    struct scene S;
    static struct runs D;
    memset(&D, 0, sizeof D);
    const unsigned N = 600;
    struct tw_redis *w = NULL;
    if (!scene_start(&S, "ak", 4, 2000, true, false) ||
        !(w = worker_new(S.R.addr, "ak", 4, &D, 2000, 20000)))
        goto out;
    struct tw_redis *c = S.direct;
    struct relay *R = &S.R;
    relay_drop(R, &S.s, TW_RR_START, 3, 0);
    CHECK_EQ_INT(set_ids(c, 0, N, 300, 4), (int)N); /* due over 2.4 s */
    struct tw_redis_stats st = rw_wait_drained(c, rfx_mono_ms() + 30000);
    CHECK_EQ_U64(st.pending, 0);
    st = wait_delivered(w, N, 10000);
    rfx_sleep_ms(300);
    CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
    unsigned twice = 0, missing = 0;
    for (unsigned id = 0; id < N; id++) {
        unsigned n = atomic_load(&D.n[id]);
        twice += n > 1;
        missing += n == 0;
    }
    printf("START replies lost %u; deliveries %u, twice %u, missing %u; stats delivered %" PRIu64
           ", stale_acks %" PRIu64 "\n",
           relay_dropped(R), atomic_load(&D.total), twice, missing, st.delivered, st.stale_acks);
    CHECK(relay_dropped(R) >= 10);
    CHECK_EQ_INT(twice, 0);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_U64(st.delivered, N);
    CHECK_EQ_U64(st.stale_acks, 0);
out:
    tw_redis_free(w);
    scene_stop(&S);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the client calls write on this thread (redis.h) */
    RUN(test_remove_lost_reply);
    RUN(test_move_lost_reply);
    RUN(test_remove_client_kill);
    RUN(test_set_many_lost_reply);
    RUN(test_killed_before_call);
    RUN(test_timeout_unknown);
    RUN(test_ack_lost_reply);
    return test_summary();
}
