/* SPDX-License-Identifier: MIT */
/* Allocation failures in the Redis layer: every allocation can fail and is
 * handled. A public call short of memory returns a documented error code;
 * nothing crashes, leaks (ASan's leak check at exit) or hangs, and what Redis
 * holds stays consistent.
 *
 * How allocations are made to fail: the test is linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup
 * (tests/redis/CMakeLists.txt), which sends those calls of every object
 * linked statically into it to the __wrap_ functions below: the layer
 * (twheel_redis and twheel_static are archives) and hiredis, linked here
 * from its archive. hiredis 0.14 (Debian 12) has no hiredisSetAllocators;
 * its reader, formatter and sds call malloc, calloc and realloc directly,
 * so the wrap reaches them all the same, and only this test process is
 * affected (the library itself never touches a global allocator).
 * Allocations made inside libc (getaddrinfo, pthread_create) or OpenSSL are
 * not reached.
 *
 * The wrappers count the allocations made while armed (atomics: the layer's
 * threads allocate too) and refuse exactly the k-th (NM_FAIL_ONE), every
 * one from the k-th on (NM_FAIL_FROM) or every k-th (NM_FAIL_EVERY); while
 * disarmed they count and refuse nothing. With a worker's threads running,
 * which allocation is the k-th depends on their timing; a client alone is
 * deterministic. A leak is ASan's to find (LeakSanitizer at exit); one of
 * hiredis's own is suppressed (__lsan_default_suppressions, below).
 *
 * Cases (one CTest test each), on one redis-server of the fixture:
 *  - test_new_worker: tw_redis_new of a worker (2 partitions, 2 executors,
 *    an on_event hook: every thread starts) with its k-th allocation
 *    refused, for every k up to what an unrefused new makes (counted first)
 *    and on until three runs in a row refuse nothing: 0 (then a task set is
 *    delivered, and free leaves the queue empty) or a code tw_redis_new
 *    documents, with *out NULL and errbuf written; each new and free bounded
 *    in time.
 *  - test_stop: a worker holding leases (24 held tasks, 2 running) is
 *    stopped and freed with every allocation refused from the k-th on, and
 *    with the k-th alone refused, k spread over what an unrefused stop and
 *    free allocate: stop returns 0 in bounded time, and a fresh worker then
 *    delivers every task at least once (unreleased leases come back when
 *    they end, lease_ms 400, hold_ms 100).
 *  - test_running_worker: a running worker with every 50th, then every 7th,
 *    then every allocation refused (2 s in all) while 400 tasks come due and
 *    more are set (the claim, subscriber, executor, acknowledger, schedule
 *    and events threads meet the refusals): once allocations succeed again
 *    every task whose set answered 0 is delivered and the queue drains: no
 *    thread gave up.
 *  - test_client_calls: tw_redis_new of a client, then set, move, remove,
 *    set_many and the readers (get, counts, list, stats) with their k-th
 *    allocation refused, for every k each call reaches: each returns its
 *    success or a documented code, and a reader's success its right answer;
 *    the task a call touched is where its code says (0: applied; TW_EIO:
 *    nothing written; TW_EUNKNOWN: either); the schema of every partition
 *    holds after each call; the counts then match, and a worker delivers the
 *    tasks stored and no other, and the queue drains.
 *
 * $RNM_TRACE=1 prints the stack of each refused allocation; $RNM_SITES=1
 * prints the distinct call sites refused (offsets in the executable, for
 * addr2line -f -e test_redis_nomem). $RNM_STRIDE=n tries every n-th k only;
 * $RNM_K=n only k = n in test_new_worker; $RNM_VERBOSE=1 a line per k there
 * and per slow set in test_running_worker;
 * $RNM_STOP_ALL=1 every k of stop (test_stop; about a minute under ASan).
 */
#define _GNU_SOURCE
#include "fixture.h"
#include "schema_lua.h"
#include "test.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis/internal.h" /* TW_RR_BUCKET_MS, for the schema check */
#include "twheel/redis.h"

/* ---- the allocator the test controls ----------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);

/* Under ASan or TSan: their stack printer (weak: absent without a sanitizer). */
void __sanitizer_print_stack_trace(void) __attribute__((weak));

enum { NM_OFF, NM_COUNT, NM_FAIL_ONE, NM_FAIL_FROM, NM_FAIL_EVERY };

static atomic_int nm_mode;          /* NM_* */
static atomic_ullong nm_k;          /* the allocation (1-based) refused, or the first */
static atomic_ullong nm_seen;       /* allocations made while armed */
static atomic_ullong nm_refused;    /* of them refused */
static int nm_trace;                /* $RNM_TRACE: a stack per refusal */

/* The distinct call sites refused (return addresses), per case and in all. */
#define NM_SITES 4096
struct nm_sites {
    _Atomic(uintptr_t) pc[NM_SITES];
    atomic_uint n;
};
static struct nm_sites nm_all, nm_case;

static void nm_site_add(struct nm_sites *t, uintptr_t pc)
{
    size_t h = (size_t)((pc * 0x9e3779b97f4a7c15ull) >> 52) % NM_SITES;
    for (size_t i = 0; i < NM_SITES; i++, h = (h + 1) % NM_SITES) {
        uintptr_t cur = atomic_load(&t->pc[h]);
        if (cur == pc)
            return;
        if (cur == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&t->pc[h], &zero, pc)) {
                atomic_fetch_add(&t->n, 1);
                return;
            }
            if (zero == pc)
                return;
        }
    }
}

/* Counts an allocation while armed; true when it is to be refused. */
static bool nm_refuse(void *caller)
{
    int mode = atomic_load_explicit(&nm_mode, memory_order_acquire);
    if (mode == NM_OFF)
        return false;
    unsigned long long i = atomic_fetch_add(&nm_seen, 1) + 1, k = atomic_load(&nm_k);
    if (!((mode == NM_FAIL_ONE && i == k) || (mode == NM_FAIL_FROM && i >= k) ||
          (mode == NM_FAIL_EVERY && i % k == 0)))
        return false;
    atomic_fetch_add(&nm_refused, 1);
    nm_site_add(&nm_all, (uintptr_t)caller);
    nm_site_add(&nm_case, (uintptr_t)caller);
    if (nm_trace) {
        fprintf(stderr, "rnm: allocation %llu refused (mode %d, k %llu):\n", i, mode, k);
        if (__sanitizer_print_stack_trace) {
            __sanitizer_print_stack_trace();
        } else {
            void *bt[32];
            backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
        }
    }
    errno = ENOMEM;
    return true;
}

void *__wrap_malloc(size_t n)
{
    return nm_refuse(__builtin_return_address(0)) ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return nm_refuse(__builtin_return_address(0)) ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    /* realloc(p, 0) frees p: never refused (a NULL answer would leave it) */
    if (p && n == 0)
        return __real_realloc(p, n);
    return nm_refuse(__builtin_return_address(0)) ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
    return nm_refuse(__builtin_return_address(0)) ? NULL : __real_strdup(s);
}

/* LeakSanitizer (ASan): one leak is hiredis 0.14's, not the layer's.
 * redisFormatSdsCommandArgv makes an empty sds, then grows it with
 * sdsMakeRoomFor, whose NULL on a refused allocation leaves the empty one
 * (4 bytes) unfreed; the layer (transport.c, tw_rr_link_append) frees what
 * the formatter gives it on every path. Suppressed are leaks allocated in
 * sdsnewlen: sds strings that never grew (a formatted command, grown by
 * sdsMakeRoomFor, is not among them, nor is a reader, whose buffer alone is). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:sdsnewlen\n";
}

static void nm_arm(int mode, unsigned long long k)
{
    atomic_store(&nm_seen, 0);
    atomic_store(&nm_refused, 0);
    atomic_store(&nm_k, k);
    atomic_store_explicit(&nm_mode, mode, memory_order_release);
}

static void nm_disarm(void)
{
    atomic_store_explicit(&nm_mode, NM_OFF, memory_order_release);
}

static unsigned long long nm_stride(void)
{
    const char *s = getenv("RNM_STRIDE");
    unsigned long long v = s ? strtoull(s, NULL, 10) : 1;
    return v ? v : 1;
}

/* The case's refused sites: how many, and with $RNM_SITES their offsets. */
static void nm_case_begin(void)
{
    for (size_t i = 0; i < NM_SITES; i++)
        atomic_store(&nm_case.pc[i], 0);
    atomic_store(&nm_case.n, 0);
}

static void nm_print_sites(const struct nm_sites *t, const char *label)
{
    printf("%s: %u distinct allocation sites refused\n", label, atomic_load(&t->n));
    if (!getenv("RNM_SITES"))
        return;
    Dl_info self;
    uintptr_t base = dladdr((void *)&nm_mode, &self) ? (uintptr_t)self.dli_fbase : 0;
    for (size_t i = 0; i < NM_SITES; i++) {
        uintptr_t pc = atomic_load(&t->pc[i]);
        if (pc)
            printf("  site 0x%lx\n", (unsigned long)(pc - base - 1));
    }
}

/* ---- deliveries, recorded without allocating ----------------------------------- */

#define IDS 8192

/* Keys are "t<id>" (delivered at once) or "L<id>" (execute sleeps 200 ms:
 * running while the test stops its worker), id < IDS. */
struct rec {
    atomic_uint n[IDS]; /* deliveries per id */
    atomic_uint total, foreign, entered_long, events;
};

static enum tw_redis_result rec_exec(void *arg, const struct tw_redis_task *t)
{
    struct rec *R = arg;
    unsigned id = 0;
    bool ok = t->key_len >= 2 && t->key_len <= 6 && (t->key[0] == 't' || t->key[0] == 'L');
    for (size_t i = 1; ok && i < t->key_len; i++) {
        ok = t->key[i] >= '0' && t->key[i] <= '9';
        id = id * 10 + (unsigned)(t->key[i] - '0');
    }
    if (!ok || id >= IDS) {
        atomic_fetch_add(&R->foreign, 1);
        return TW_REDIS_DONE;
    }
    atomic_fetch_add(&R->n[id], 1);
    atomic_fetch_add(&R->total, 1);
    if (t->key[0] == 'L') {
        atomic_fetch_add(&R->entered_long, 1);
        rfx_sleep_ms(200);
    }
    return TW_REDIS_DONE;
}

static void rec_event(void *arg, const struct tw_redis_event *ev)
{
    struct rec *R = arg;
    (void)ev;
    atomic_fetch_add(&R->events, 1);
}

static struct rec *rec_new(void)
{
    struct rec *R = calloc(1, sizeof *R); /* disarmed: never refused */
    if (!R)
        abort();
    return R;
}

/* Wait (bounded) until R has n deliveries of id. */
static bool rec_wait_id(struct rec *R, unsigned id, unsigned n, unsigned ms)
{
    uint64_t end = rfx_mono_ms() + ms;
    while (atomic_load(&R->n[id]) < n) {
        if (rfx_mono_ms() > end)
            return false;
        rfx_sleep_ms(5);
    }
    return true;
}

/* ---- the server, configurations, direct reads -------------------------------- */

static struct rfx_server srv;
static const char *srv_addr[1];
static char errbuf[256];

#define PARTS 2

static void cfg_client(struct tw_redis_config *c, const char *queue)
{
    tw_redis_config_init(c);
    srv_addr[0] = rfx_addr(&srv);
    c->servers = srv_addr;
    c->nservers = 1;
    c->queue = queue;
    c->partitions = PARTS;
    c->connect_timeout_ms = 500;
    c->command_timeout_ms = 1000;
    c->errbuf = errbuf;
    c->errbuf_len = sizeof errbuf;
}

static void cfg_worker(struct tw_redis_config *c, const char *queue, struct rec *R)
{
    cfg_client(c, queue);
    c->execute = rec_exec;
    c->arg = R;
    c->threads = 2;
    c->lease_ms = 1000;
    c->hold_ms = 100;
    c->window_ms = 1000;
    c->on_event = rec_event; /* the events thread too */
    c->event_arg = R;
}

/* Queue q's tasks stored (HLEN of each partition's task HASH), or with
 * leases its lease members (ZCARD); -1 on failure. */
static long long count_of(const char *q, bool leases)
{
    redisContext *c = rfx_connect(&srv);
    if (!c)
        return -1;
    long long n = 0;
    for (unsigned p = 0; p < PARTS && n >= 0; p++) {
        redisReply *x = redisCommand(c, leases ? "ZCARD {%s:%u}:leases" : "HLEN {%s:%u}:task", q, p);
        n = x && x->type == REDIS_REPLY_INTEGER ? n + x->integer : -1;
        if (x)
            freeReplyObject(x);
    }
    redisFree(c);
    return n;
}

static long long stored(const char *q)
{
    return count_of(q, false);
}

/* Wait (bounded) until queue q stores nothing. */
static bool wait_empty(const char *q, unsigned ms)
{
    uint64_t end = rfx_mono_ms() + ms;
    while (stored(q) != 0) {
        if (rfx_mono_ms() > end)
            return false;
        rfx_sleep_ms(10);
    }
    return true;
}

static void del_queue(const char *q)
{
    static const char lua[] =
        "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end return 0";
    char pat[64];
    snprintf(pat, sizeof pat, "{%s:*", q);
    CHECK_EQ_INT(rfx_command(&srv, "EVAL %s 0 %s", lua, pat), 0);
}

/* The schema of queue q, every partition (schema_lua.h): CHECKs it; the
 * violations. */

static long long check_schema(redisContext *c, const char *q)
{
    long long bad = 0;
    for (unsigned p = 0; p < PARTS; p++) {
        char k[3][64];
        snprintf(k[0], sizeof k[0], "{%s:%u}:d", q, p);
        snprintf(k[1], sizeof k[1], "{%s:%u}:leases", q, p);
        snprintf(k[2], sizeof k[2], "{%s:%u}:task", q, p);
        redisReply *x = redisCommand(c, "EVAL %s 3 %s %s %s %d", schema_lua, k[0], k[1], k[2],
                                     TW_RR_BUCKET_MS);
        bool ok = x && x->type == REDIS_REPLY_ARRAY && x->elements == 3;
        CHECK(ok);
        if (ok)
            bad += x->element[0]->integer;
        else
            bad++;
        if (x)
            freeReplyObject(x);
    }
    CHECK_EQ_INT(bad, 0);
    return bad;
}

/* ---- codes ---------------------------------------------------------------------- */

/* Histogram of the codes a kind of call answered. */
struct codes {
    unsigned n[32]; /* index -code (0: success) */
};

static void codes_add(struct codes *h, int rc)
{
    int i = rc > 0 ? 0 : -rc;
    if (i < 32)
        h->n[i]++;
}

static void codes_print(const struct codes *h, const char *label)
{
    printf("  %-10s", label);
    for (int i = 0; i < 32; i++)
        if (h->n[i])
            printf(" %s:%u", i ? tw_err_name(-i) : "ok", h->n[i]);
    printf("\n");
}

/* rc among @p ok (terminated by 1)? */
static bool code_in(int rc, const int *ok)
{
    for (; *ok != 1; ok++)
        if (rc == *ok)
            return true;
    return false;
}

/* ---- tw_redis_new of a worker, the k-th allocation refused ----------------------- */

static void test_new_worker(void)
{
    static const char *Q = "nm_new";
    static const int NEW_CODES[] = {TW_ENOMEM, TW_ESYS, TW_EIO, TW_EPROTO, 1};
    del_queue(Q);
    nm_case_begin();
    struct rec *R = rec_new();
    struct tw_redis_config c;
    cfg_worker(&c, Q, R);

    /* the count: an unrefused new, as many allocations as it made */
    struct tw_redis *r = NULL;
    nm_arm(NM_COUNT, 0);
    int rc = tw_redis_new(&r, &c);
    nm_disarm();
    unsigned long long total = atomic_load(&nm_seen);
    CHECK_EQ_INT(rc, 0);
    tw_redis_free(r);
    printf("new (worker, %u partitions, %u executors): %llu allocations\n", PARTS, c.threads,
           total);

    struct codes h = {0};
    unsigned long long stride = nm_stride(), refused_runs = 0, k, quiet = 0;
    uint64_t t0 = rfx_mono_ms(), worst_new = 0, worst_free = 0;
    unsigned id = 0, delivered = 0;
    bool verbose = getenv("RNM_VERBOSE") != NULL;
    /* past the count, until three runs in a row refuse nothing (the threads'
     * allocations during new vary with their timing) */
    const char *only = getenv("RNM_K"); /* one k alone, to trace it */
    unsigned long long k_last = only ? strtoull(only, NULL, 10) : 2000;
    uint64_t budget = t0 + 90000; /* bounded: a slow machine stops early, and fails */
    for (k = only ? k_last : 1; k <= k_last && (k <= total || quiet < 3 || only); k += stride) {
        if (rfx_mono_ms() > budget) {
            printf("new: out of time at k = %llu\n", k);
            CHECK(rfx_mono_ms() <= budget);
            break;
        }
        r = (struct tw_redis *)&r; /* must come back NULL on failure */
        errbuf[0] = 0;
        uint64_t a = rfx_mono_ms();
        nm_arm(NM_FAIL_ONE, k);
        rc = tw_redis_new(&r, &c);
        nm_disarm();
        uint64_t took = rfx_mono_ms() - a;
        worst_new = took > worst_new ? took : worst_new;
        unsigned long long refused = atomic_load(&nm_refused);
        quiet = refused ? 0 : quiet + 1;
        refused_runs += refused != 0;
        codes_add(&h, rc);
        if (verbose)
            printf("  new, allocation %llu refused: %s %llu ms (%s)\n", k, tw_err_name(rc),
                   (unsigned long long)took, errbuf);
        CHECK(took < 10000); /* no hang: at most connect + command timeouts, twice */
        if (rc != 0) {
            if (!code_in(rc, NEW_CODES))
                printf("new, allocation %llu refused: %s (%s) not expected\n", k, tw_err_name(rc),
                       errbuf);
            CHECK(code_in(rc, NEW_CODES));
            /* a failure for want of memory says so: not TW_EIO "out of memory" */
            CHECK(rc != TW_EIO || !strcasestr(errbuf, "memory"));
            CHECK_EQ_PTR(r, NULL);
            CHECK(errbuf[0] != 0);
            if (!refused)
                printf("new failed with %s though nothing was refused: %s\n", tw_err_name(rc),
                       errbuf);
            CHECK(refused != 0);
            continue;
        }
        CHECK(r != NULL);
        if (!r)
            continue;
        /* a worker that started: it works (its threads' allocations may have been refused) */
        char key[16];
        id = (id + 1) % IDS;
        int n = snprintf(key, sizeof key, "t%u", id);
        unsigned before = atomic_load(&R->n[id]);
        CHECK_EQ_INT(tw_redis_set(r, key, (size_t)n, "p", 1, 10), 0);
        bool got = rec_wait_id(R, id, before + 1, 10000);
        if (!got)
            printf("new, allocation %llu refused: the worker did not deliver %s in 10 s\n", k, key);
        CHECK(got);
        delivered += got;
        a = rfx_mono_ms();
        CHECK_EQ_INT(tw_redis_free(r), 0);
        took = rfx_mono_ms() - a;
        worst_free = took > worst_free ? took : worst_free;
        CHECK(took < 10000);
        /* its acknowledgement sent (stop sends what is pending): nothing left */
        bool empty = wait_empty(Q, 3000);
        if (!empty)
            printf("new, allocation %llu refused: %lld tasks left after free\n", k, stored(Q));
        CHECK(empty);
    }
    printf("new: k = 1..%llu (stride %llu), %llu runs with an allocation refused, %u workers "
           "started and delivered, %llu s; slowest new %llu ms, free %llu ms\n",
           k - stride, stride, refused_runs, delivered,
           (unsigned long long)(rfx_mono_ms() - t0) / 1000, (unsigned long long)worst_new,
           (unsigned long long)worst_free);
    CHECK(quiet >= 3 || only); /* reached the end: new ran out of allocations to refuse */
    codes_print(&h, "new");
    nm_print_sites(&nm_case, "new");
    CHECK_EQ_INT(atomic_load(&R->foreign), 0);
    free(R);
}

/* ---- stop and free of a worker holding leases, allocations refused ---------------- */

#define STOP_HELD 24 /* held (claimed, not started) at the stop */
#define STOP_LONG 2  /* running (execute sleeps 200 ms) at the stop */

/* One round: a worker W1 (lease_ms 400, hold_ms 100) holds STOP_HELD tasks
 * due in 450 ms and runs STOP_LONG; it is stopped and freed with allocations
 * refused as (mode, k); a fresh worker then delivers every task (W1's
 * deliveries count: at least once). *allocs: what stop and free allocated
 * (counted while armed), *refused: of them refused. */
static void stop_round(int mode, unsigned long long k, unsigned long long *allocs,
                       unsigned long long *refused)
{
    static const char *Q = "nm_stop";
    del_queue(Q);
    struct rec *R = rec_new();
    struct tw_redis_config c;
    cfg_worker(&c, Q, R);
    c.lease_ms = 400;
    struct tw_redis *w1 = NULL, *w2 = NULL;
    *allocs = *refused = 0;
    CHECK_EQ_INT(tw_redis_new(&w1, &c), 0);
    if (!w1) {
        free(R);
        return;
    }
    struct tw_redis_item items[STOP_HELD + STOP_LONG];
    char keys[STOP_HELD + STOP_LONG][8];
    for (unsigned i = 0; i < STOP_HELD + STOP_LONG; i++) {
        bool lng = i >= STOP_HELD;
        int n = snprintf(keys[i], sizeof keys[i], "%c%u", lng ? 'L' : 't', i);
        items[i] = (struct tw_redis_item){keys[i], (size_t)n, "payload", 7, lng ? 0 : 450};
    }
    CHECK_EQ_INT(tw_redis_set_many(w1, items, STOP_HELD + STOP_LONG), STOP_HELD + STOP_LONG);
    /* both long ones running, every task leased */
    struct tw_redis_stats st = {0};
    uint64_t end = rfx_mono_ms() + 5000;
    while (rfx_mono_ms() < end) {
        CHECK_EQ_INT(tw_redis_stats(w1, &st), 0);
        if (atomic_load(&R->entered_long) >= STOP_LONG && st.leased >= STOP_HELD)
            break;
        rfx_sleep_ms(2);
    }
    CHECK_EQ_INT(atomic_load(&R->entered_long), STOP_LONG);
    CHECK(st.leased >= STOP_HELD);
    uint64_t a = rfx_mono_ms();
    nm_arm(mode, k);
    int rc = tw_redis_stop(w1);
    uint64_t stop_ms = rfx_mono_ms() - a;
    CHECK_EQ_INT(tw_redis_free(w1), 0);
    nm_disarm();
    *allocs = atomic_load(&nm_seen);
    *refused = atomic_load(&nm_refused);
    CHECK_EQ_INT(rc, 0);
    CHECK(stop_ms < 5000); /* the running executes (200 ms) and a few round trips */
    long long left = stored(Q), leases = count_of(Q, true);
    /* a fresh worker: every task at least once (W1's and its deliveries together) */
    CHECK_EQ_INT(tw_redis_new(&w2, &c), 0);
    unsigned missing = 0;
    end = rfx_mono_ms() + 10000;
    for (unsigned i = 0; i < STOP_HELD + STOP_LONG; i++)
        while (atomic_load(&R->n[i]) == 0 && rfx_mono_ms() < end)
            rfx_sleep_ms(5);
    for (unsigned i = 0; i < STOP_HELD + STOP_LONG; i++)
        missing += atomic_load(&R->n[i]) == 0;
    bool empty = wait_empty(Q, 5000);
    tw_redis_free(w2);
    printf("  stop, allocations refused %s %3llu: stop %llu ms, %llu allocations (%llu refused); "
           "after free %lld tasks stored, %lld leases left; %u deliveries, %u missing\n",
           mode == NM_FAIL_ONE ? "at  " : mode == NM_FAIL_FROM ? "from" : "none", k,
           (unsigned long long)stop_ms, *allocs, *refused, left, leases, atomic_load(&R->total),
           missing);
    CHECK_EQ_INT(missing, 0);
    CHECK(empty);
    CHECK_EQ_INT(atomic_load(&R->foreign), 0);
    free(R);
}

static void test_stop(void)
{
    nm_case_begin();
    unsigned long long total, refused;
    uint64_t t0 = rfx_mono_ms();
    stop_round(NM_COUNT, 0, &total, &refused); /* the count, nothing refused */
    printf("stop and free of a worker holding %u leases: %llu allocations\n",
           STOP_HELD + STOP_LONG, total);
    CHECK(total > 0);
    if (!total)
        return;
    /* every allocation refused from points spread over them (1: all), then
     * single ones spread likewise; $RNM_STOP_ALL: every single one */
    unsigned long long rounds = 0, runs_refused = 0, prev = 0, n, f;
    for (unsigned i = 0; i <= 4; i++) {
        unsigned long long k = 1 + (total - 1) * i / 4;
        if (k == prev)
            continue;
        prev = k;
        stop_round(NM_FAIL_FROM, k, &n, &f);
        rounds++;
        runs_refused += f != 0;
    }
    bool all = getenv("RNM_STOP_ALL") != NULL;
    unsigned long long step = all ? 1 : (total + 7) / 8;
    for (unsigned long long k = 1; k <= total; k += step) {
        stop_round(NM_FAIL_ONE, k, &n, &f);
        rounds++;
        runs_refused += f != 0;
    }
    printf("stop: %llu rounds, %llu with allocations refused, %llu s\n", rounds, runs_refused,
           (unsigned long long)(rfx_mono_ms() - t0) / 1000);
    /* the allocations of a stop vary with its threads' timing: most rounds reach k */
    CHECK(runs_refused * 4 >= rounds * 3);
    nm_print_sites(&nm_case, "stop");
}

/* ---- a running worker, allocations refused for a while ------------------------------ */

/* A worker runs while allocations are refused: every 50th for 1 s, every
 * 7th for 0.7 s, then every one for 0.3 s, with 400 tasks due over that
 * time, while the test sets a task every 10 ms (its own set calls refused
 * as well). Its threads (claim, subscriber, executors,
 * acknowledger, schedule, events) meet the refusals wherever they allocate;
 * once allocations succeed again it delivers every task whose set answered
 * 0 (and those answered TW_EUNKNOWN that were stored), and the queue
 * drains: no thread gave up for good. */
static void test_running_worker(void)
{
    static const char *Q = "nm_run";
    static const int CODES[] = {TW_ENOMEM, TW_EIO, TW_EUNKNOWN, TW_EPROTO, 1};
    del_queue(Q);
    nm_case_begin();
    struct rec *R = rec_new();
    struct tw_redis_config c;
    cfg_worker(&c, Q, R);
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &c), 0);
    if (!w) {
        free(R);
        return;
    }
    static unsigned char ok[IDS];
    memset(ok, 0, sizeof ok);
    struct codes h = {0};
    /* work for the worker's threads while allocations are refused: tasks due
     * over the whole window (claimed, started and acknowledged in it) */
    enum { PRE = 400 };
    static struct tw_redis_item items[PRE];
    static char keys[PRE][8];
    for (unsigned i = 0; i < PRE; i++) {
        int n = snprintf(keys[i], sizeof keys[i], "t%u", i);
        items[i] = (struct tw_redis_item){keys[i], (size_t)n, "payload", 7, (int64_t)i * 5};
        ok[i] = 1;
    }
    CHECK_EQ_INT(tw_redis_set_many(w, items, PRE), PRE);
    unsigned id = PRE;
    uint64_t slowest = 0;
    bool verbose = getenv("RNM_VERBOSE") != NULL; /* each set slower than 50 ms */
    unsigned long long seen = 0, refused = 0;
    const struct {
        int mode;
        unsigned long long k;
        unsigned ms;
    } phase[] = {{NM_FAIL_EVERY, 50, 1000}, {NM_FAIL_EVERY, 7, 700}, {NM_FAIL_FROM, 1, 300}};
    for (size_t ph = 0; ph < sizeof phase / sizeof phase[0]; ph++) {
        nm_arm(phase[ph].mode, phase[ph].k);
        uint64_t end = rfx_mono_ms() + phase[ph].ms;
        while (rfx_mono_ms() < end && id < IDS) {
            char key[16];
            int n = snprintf(key, sizeof key, "t%u", id);
            uint64_t a = rfx_mono_ms();
            int rc = tw_redis_set(w, key, (size_t)n, "payload", 7, (int64_t)(id % 7) * 20);
            slowest = rfx_mono_ms() - a > slowest ? rfx_mono_ms() - a : slowest;
            if (verbose && rfx_mono_ms() - a > 50) {
                char eb[256];
                (void)tw_redis_last_error(w, eb, sizeof eb);
                printf("  set t%u: %s in %llu ms (%s)\n", id, tw_err_name(rc),
                       (unsigned long long)(rfx_mono_ms() - a), eb);
            }
            codes_add(&h, rc);
            if (rc != 0 && !code_in(rc, CODES))
                printf("set from a running worker, allocations refused: %s\n", tw_err_name(rc));
            CHECK(rc == 0 || code_in(rc, CODES));
            ok[id++] = rc == 0;
            rfx_sleep_ms(10);
        }
        nm_disarm();
        seen += atomic_load(&nm_seen);
        refused += atomic_load(&nm_refused);
    }
    /* allocations succeed again: every task set is delivered, the queue drains */
    unsigned missing = 0, set_ok = 0;
    uint64_t end = rfx_mono_ms() + 10000;
    for (unsigned i = 0; i < id; i++) {
        set_ok += ok[i];
        while (ok[i] && atomic_load(&R->n[i]) == 0 && rfx_mono_ms() < end)
            rfx_sleep_ms(5);
        missing += ok[i] && atomic_load(&R->n[i]) == 0;
    }
    bool empty = wait_empty(Q, 10000);
    struct tw_redis_stats st;
    CHECK_EQ_INT(tw_redis_stats(w, &st), 0);
    uint64_t a = rfx_mono_ms();
    CHECK_EQ_INT(tw_redis_free(w), 0);
    uint64_t free_ms = rfx_mono_ms() - a;
    printf("running worker: %llu allocations while armed, %llu refused; %u tasks (%u set before, "
           "%u sets while armed, slowest %llu ms), %u stored for sure, %u deliveries, %u missing, "
           "queue %s; worker errors %llu, reconnects %llu; free %llu ms\n",
           seen, refused, id, (unsigned)PRE, id - PRE, (unsigned long long)slowest, set_ok,
           atomic_load(&R->total), missing, empty ? "empty" : "NOT empty",
           (unsigned long long)st.worker_errors, (unsigned long long)st.reconnects,
           (unsigned long long)free_ms);
    codes_print(&h, "set");
    CHECK(refused > 0);
    CHECK_EQ_INT(missing, 0);
    CHECK(empty);
    CHECK(free_ms < 5000);
    CHECK_EQ_INT(atomic_load(&R->foreign), 0);
    nm_print_sites(&nm_case, "running worker");
    free(R);
}

/* ---- a client's calls, the k-th allocation refused --------------------------------- */

enum { ABSENT, PRESENT };

struct cl {
    struct tw_redis *r;
    redisContext *c; /* the test's own connection (schema checks) */
    const char *q;
    unsigned next;          /* next id */
    unsigned char want[IDS]; /* per id: ABSENT or PRESENT after its call, 0xff unused */
    struct codes h[8];
    unsigned long long points; /* runs with an allocation refused */
    unsigned odd_nomem;        /* TW_ENOMEM though the call was applied */
};

static bool present(struct cl *C, unsigned id, uint64_t *due)
{
    char key[16];
    int n = snprintf(key, sizeof key, "t%u", id);
    struct tw_redis_info info;
    int rc = tw_redis_get(C->r, key, (size_t)n, &info, NULL, 0);
    CHECK(rc == 0 || rc == TW_ENOENT);
    if (due)
        *due = rc == 0 ? info.due_ms : 0;
    return rc == 0;
}

static int set_one(struct cl *C, unsigned id, int64_t delay)
{
    char key[16];
    int n = snprintf(key, sizeof key, "t%u", id);
    return tw_redis_set(C->r, key, (size_t)n, "payload", 7, delay);
}

static uint64_t srv_ms(void)
{
    uint64_t us = 0;
    (void)rfx_time_us(&srv, &us);
    return us / 1000;
}

static const int SET_CODES[] = {TW_ENOMEM, TW_EIO, TW_EUNKNOWN, TW_EPROTO, 1};
static const int READ_CODES[] = {TW_ENOMEM, TW_EIO, TW_EUNKNOWN, TW_EPROTO, 1};

/* One kind of call, k = 1, 2, ... until a call reaches no refusal. */
enum { OP_SET, OP_MOVE, OP_REMOVE, OP_MANY, OP_GET, OP_COUNTS, OP_LIST, OP_STATS, NOPS };
static const char *const OP_NAME[NOPS] = {"set",    "move",   "remove", "set_many",
                                          "get",    "counts", "list",   "stats"};

static void run_op(struct cl *C, int op)
{
    unsigned long long k, stride = nm_stride();
    for (k = 1; k <= 2000; k += stride) {
        unsigned id = C->next;
        uint64_t old_due = 0, t_before = 0;
        int rc = 0;
        /* the task the call touches, made unrefused */
        if (op == OP_MOVE || op == OP_REMOVE) {
            CHECK_EQ_INT(set_one(C, id, 0), 0);
            CHECK(present(C, id, &old_due));
        }
        if (op == OP_MOVE)
            t_before = srv_ms();
        char key[16];
        int kn = snprintf(key, sizeof key, "t%u", id);
        struct tw_redis_item items[8];
        char keys[8][16];
        struct tw_redis_info info;
        struct tw_redis_counts counts;
        struct tw_redis_page *page = NULL;
        struct tw_redis_stats st;
        if (op == OP_MANY)
            for (unsigned i = 0; i < 8; i++) {
                int n = snprintf(keys[i], sizeof keys[i], "t%u", id + i);
                items[i] = (struct tw_redis_item){keys[i], (size_t)n, "payload", 7, (int64_t)i};
            }
        uint64_t a = rfx_mono_ms();
        nm_arm(NM_FAIL_ONE, k);
        switch (op) {
        case OP_SET: rc = tw_redis_set(C->r, key, (size_t)kn, "payload", 7, 0); break;
        case OP_MOVE: rc = tw_redis_move(C->r, key, (size_t)kn, 1500); break;
        case OP_REMOVE: rc = tw_redis_remove(C->r, key, (size_t)kn); break;
        case OP_MANY: rc = tw_redis_set_many(C->r, items, 8); break;
        case OP_GET: rc = tw_redis_get(C->r, "t0", 2, &info, NULL, 0); break;
        case OP_COUNTS: rc = tw_redis_counts(C->r, 1000, &counts); break;
        case OP_LIST: rc = tw_redis_list(C->r, 0, UINT64_MAX, NULL, 100, &page); break;
        case OP_STATS: rc = tw_redis_stats(C->r, &st); break;
        }
        nm_disarm();
        uint64_t took = rfx_mono_ms() - a;
        unsigned long long refused = atomic_load(&nm_refused);
        CHECK(took < 5000);
        /* a reader that answers 0 answers right (nothing runs: the queue holds still) */
        long long n_stored = stored(C->q);
        if (op == OP_LIST && rc == 0) {
            CHECK(page != NULL);
            if (page)
                CHECK_EQ_U64(page->n, n_stored < 100 ? n_stored : 100);
            tw_redis_page_free(page);
        } else if (op == OP_LIST) {
            CHECK_EQ_PTR(page, NULL);
        }
        if (op == OP_GET && (rc == 0 || rc == TW_ENOENT)) {
            CHECK_EQ_INT(rc == 0, C->want[0] == PRESENT); /* t0: set_one's first task */
            if (rc == 0)
                CHECK(info.due_ms > 0 && info.state == TW_REDIS_WAITING);
            rc = 0; /* either is an answer, not a failure */
        }
        if (op == OP_COUNTS && rc == 0) {
            CHECK_EQ_INT(counts.pending, n_stored);
            CHECK_EQ_INT(counts.waiting, n_stored);
            CHECK_EQ_INT(counts.partitions, PARTS);
        }
        if (op == OP_STATS && rc == 0)
            CHECK_EQ_INT(st.pending, n_stored);
        int done = op == OP_MANY ? 8 : 0;
        codes_add(&C->h[op], rc);
        if (!refused) { /* the call is past its allocations: it must have succeeded */
            CHECK_EQ_INT(rc, done);
        } else {
            C->points++;
            bool ok = rc == done ||
                      code_in(rc, op == OP_SET || op == OP_MOVE || op == OP_REMOVE || op == OP_MANY
                                      ? SET_CODES
                                      : READ_CODES);
            if (!ok)
                printf("%s, allocation %llu refused: %s, not a documented code\n", OP_NAME[op], k,
                       tw_err_name(rc));
            CHECK(ok);
        }
        /* where the touched tasks are */
        uint64_t due;
        switch (op) {
        case OP_SET: {
            bool p = present(C, id, NULL);
            if (rc == 0)
                CHECK(p);
            if (rc == TW_EIO)
                CHECK(!p);
            if (rc == TW_ENOMEM && p)
                C->odd_nomem++;
            C->want[id] = p ? PRESENT : ABSENT;
            C->next = id + 1;
            break;
        }
        case OP_MOVE: {
            CHECK(present(C, id, &due));
            bool moved = due != old_due;
            if (rc == 0)
                CHECK(moved && due >= t_before + 1500);
            if (rc == TW_EIO)
                CHECK(!moved);
            if (rc == TW_ENOMEM && moved)
                C->odd_nomem++;
            C->want[id] = PRESENT;
            C->next = id + 1;
            break;
        }
        case OP_REMOVE: {
            bool p = present(C, id, NULL);
            if (rc == 0)
                CHECK(!p);
            if (rc == TW_EIO)
                CHECK(p);
            if (rc == TW_ENOMEM && !p)
                C->odd_nomem++;
            C->want[id] = p ? PRESENT : ABSENT;
            C->next = id + 1;
            break;
        }
        case OP_MANY:
            for (unsigned i = 0; i < 8; i++) {
                bool p = present(C, id + i, NULL);
                if (rc == 8)
                    CHECK(p);
                C->want[id + i] = p ? PRESENT : ABSENT;
            }
            C->next = id + 8;
            break;
        default:
            break;
        }
        check_schema(C->c, C->q);
        if (!refused)
            break; /* k is past the call's allocations */
        if (C->next + 8 >= IDS)
            break;
    }
    CHECK(k <= 2000);
}

static void test_client_calls(void)
{
    static const char *Q = "nm_client";
    static const int NEW_CODES[] = {TW_ENOMEM, TW_ESYS, TW_EIO, TW_EPROTO, 1};
    del_queue(Q);
    nm_case_begin();
    uint64_t t0 = rfx_mono_ms();
    struct cl *C = calloc(1, sizeof *C);
    if (!C)
        abort();
    memset(C->want, 0xff, sizeof C->want);
    C->q = Q;
    C->c = rfx_connect(&srv);
    CHECK(C->c != NULL);
    struct tw_redis_config c;
    cfg_client(&c, Q);

    /* the client's new: every allocation refused in turn */
    struct codes hn = {0};
    unsigned long long k, points = 0;
    for (k = 1; k <= 2000; k++) {
        struct tw_redis *r = (struct tw_redis *)&r;
        errbuf[0] = 0;
        nm_arm(NM_FAIL_ONE, k);
        int rc = tw_redis_new(&r, &c);
        nm_disarm();
        unsigned long long refused = atomic_load(&nm_refused);
        codes_add(&hn, rc);
        if (rc != 0) {
            if (!code_in(rc, NEW_CODES))
                printf("client new, allocation %llu refused: %s (%s) not expected\n", k,
                       tw_err_name(rc), errbuf);
            CHECK(code_in(rc, NEW_CODES));
            /* a failure for want of memory says so: not TW_EIO "out of memory" */
            CHECK(rc != TW_EIO || !strcasestr(errbuf, "memory"));
            CHECK_EQ_PTR(r, NULL);
            CHECK(errbuf[0] != 0);
        }
        if (!refused) {
            CHECK_EQ_INT(rc, 0);
            C->r = r; /* the client of the calls below */
            break;
        }
        points++;
        if (rc == 0)
            tw_redis_free(r);
    }
    printf("client new: %llu allocations, each refused in turn\n", k - 1);
    codes_print(&hn, "new");
    if (!C->r) {
        CHECK(C->r != NULL);
        free(C);
        return;
    }
    for (int op = 0; op < NOPS; op++)
        run_op(C, op);
    printf("client calls: %llu calls with an allocation refused (+%llu of new), %u TW_ENOMEM "
           "answers whose call was applied\n",
           C->points, points, C->odd_nomem);
    for (int op = 0; op < NOPS; op++)
        codes_print(&C->h[op], OP_NAME[op]);

    /* what is stored: exactly the tasks a worker delivers */
    unsigned want_present = 0;
    for (unsigned id = 0; id < C->next; id++) {
        if (C->want[id] == 0xff)
            continue;
        bool p = present(C, id, NULL);
        CHECK_EQ_INT(p, C->want[id] == PRESENT);
        want_present += p;
    }
    struct tw_redis_counts counts;
    CHECK_EQ_INT(tw_redis_counts(C->r, 1000, &counts), 0);
    CHECK_EQ_U64(counts.pending, want_present);
    CHECK_EQ_U64(counts.waiting, want_present);
    CHECK_EQ_INT(stored(Q), want_present);
    struct rec *R = rec_new();
    struct tw_redis_config wc;
    cfg_worker(&wc, Q, R);
    struct tw_redis *w = NULL;
    CHECK_EQ_INT(tw_redis_new(&w, &wc), 0);
    uint64_t end = rfx_mono_ms() + 10000;
    while (atomic_load(&R->total) < want_present && rfx_mono_ms() < end)
        rfx_sleep_ms(10);
    CHECK(wait_empty(Q, 5000));
    tw_redis_free(w);
    unsigned wrong = 0, again = 0;
    for (unsigned id = 0; id < C->next; id++) {
        unsigned n = atomic_load(&R->n[id]);
        bool should = C->want[id] == PRESENT;
        again += n > 1;
        if (should ? n == 0 : n != 0) {
            if (wrong++ < 5)
                printf("t%u: %u deliveries, %s\n", id, n, should ? "stored" : "not stored");
        }
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(atomic_load(&R->foreign), 0);
    printf("client: %u tasks stored, each delivered (%u more than once), none other; %llu s\n",
           want_present, again, (unsigned long long)(rfx_mono_ms() - t0) / 1000);
    nm_print_sites(&nm_case, "client");
    tw_redis_free(C->r);
    redisFree(C->c);
    free(R);
    free(C);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN); /* the client's calls write on this thread (redis.h) */
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with stderr, and kept by an abort */
    nm_trace = getenv("RNM_TRACE") != NULL;
#ifdef RNM_HIREDIS_ARCHIVE
    printf("hiredis linked from its archive: its allocations are refused too\n");
#else
    printf("no hiredis archive: the layer's own allocations alone are refused\n");
#endif
    if (rfx_start(&srv, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server\n");
        return 1;
    }
    RUN(test_new_worker);
    RUN(test_stop);
    RUN(test_running_worker);
    RUN(test_client_calls);
    nm_print_sites(&nm_all, "all cases");
    rfx_stop(&srv);
    return test_summary();
}
