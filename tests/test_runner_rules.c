/* SPDX-License-Identifier: MIT */
/* Tests of tw_runner: the keyed operations (set, move, remove, drain, stop)
 * through the thread-safe service, the runner rules (monotonic ticks,
 * catching up after a stall in deadline order, waking for an earlier
 * deadline, executor pool, admission limit,
 * stop/drain/closed), and memory. Timing is observed, not asserted, except
 * "never early" (safe whatever the load) and generous sanity bounds. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "test_time.h"
#include "runner_wait.h"
#include "twheel.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#define TICK_NS 1000000 /* 1 ms */


#define MAXF 1024
struct fires {
    pthread_mutex_t lock;
    int n;
    uint64_t key[MAXF];
    uintptr_t value[MAXF];
    uint64_t deadline[MAXF];
    uint64_t at_ns[MAXF];
    struct tw_runner *r;
    int concurrent, max_concurrent;
    atomic_int block; /* callbacks with value 999 wait while set */
    int stall_ms;     /* callbacks with value 777 sleep this long */
    int stop_rc;      /* what stop returned from inside a callback */
};

static void fire_cb(void *ctx, const struct tw_task *task)
{
    struct fires *f = ctx;
    pthread_mutex_lock(&f->lock);
    if (f->n < MAXF) {
        f->key[f->n] = task->key ? (uint64_t)((const char *)task->key)[0] : task->key_int;
        f->value[f->n] = (uintptr_t)task->value;
        f->deadline[f->n] = task->deadline;
        f->at_ns[f->n] = now_ns();
    }
    f->n++;
    f->concurrent++;
    if (f->concurrent > f->max_concurrent)
        f->max_concurrent = f->concurrent;
    pthread_mutex_unlock(&f->lock);
    if ((uintptr_t)task->value == 999)
        while (atomic_load(&f->block))
            sleep_ms(1);
    if ((uintptr_t)task->value == 777)
        sleep_ms((unsigned)f->stall_ms);
    if ((uintptr_t)task->value == 555)
        f->stop_rc = tw_runner_stop(f->r, 0);
    if ((uintptr_t)task->value == 444) /* re-arm itself from the callback */
        tw_runner_set_int(f->r, task->key_int + 1, (void *)1, 2 * TICK_NS);
    pthread_mutex_lock(&f->lock);
    f->concurrent--;
    pthread_mutex_unlock(&f->lock);
}

static int fires_n(struct fires *f)
{
    pthread_mutex_lock(&f->lock);
    int n = f->n;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* Wait (bounded: 5 s) until at least n fires. */
static int wait_fires(struct fires *f, int n)
{
    for (int i = 0; i < 5000 && fires_n(f) < n; i++)
        sleep_ms(1);
    return fires_n(f);
}

static struct fires F;

/* Forget every recorded fire. */
static void reset_fires(void)
{
    pthread_mutex_destroy(&F.lock);
    memset(&F, 0, sizeof F);
    pthread_mutex_init(&F.lock, NULL);
}

static int start_eager; /* start() sets config.eager_rearm (test_eager_rearm) */

static struct tw_runner *start(unsigned workers, enum tw_tasks_key_kind kind, size_t max_pending)
{
    reset_fires();
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                   .workers = workers, .key_kind = kind,
                                   .max_pending = max_pending, .eager_rearm = start_eager};
    struct tw_runner *r = NULL;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    F.r = r;
    return r;
}

struct counting {
    atomic_llong outstanding;
    atomic_long calls;
    atomic_long fail_at; /* atomic: set while runner threads may allocate */
};

static void *counting_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size)
{
    struct counting *c = ctx;
    if (new_size == 0) {
        atomic_fetch_sub(&c->outstanding, (long long)old_size);
        free(ptr);
        return NULL;
    }
    if (atomic_fetch_add(&c->calls, 1) + 1 == atomic_load(&c->fail_at))
        return NULL;
    void *p = realloc(ptr, new_size);
    if (p)
        atomic_fetch_add(&c->outstanding, (long long)new_size - (long long)old_size);
    return p;
}

/* ---- construction ------------------------------------------------------------ */

static void test_config(void)
{
    struct tw_runner *r = (struct tw_runner *)&F;
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS};
    CHECK_EQ_INT(tw_runner_new(NULL, &cfg), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_new(&r, NULL), TW_EINVAL);
    CHECK_EQ_PTR(r, NULL);
    cfg.tick_ns = 0;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    cfg.tick_ns = TICK_NS;
    cfg.execute = NULL;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    cfg.execute = fire_cb;
    cfg.shards = 100000;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    cfg.shards = 0;
    cfg.key_kind = (enum tw_tasks_key_kind)9;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    cfg.key_kind = TW_TASKS_KEY_INT;
    cfg.workers = 1;
    cfg.queue = SIZE_MAX; /* its ring's size would wrap round */
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    cfg.queue = TW_RUNNER_QUEUE_MAX + 1; /* the documented limits */
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    cfg.queue = 0;
    cfg.workers = TW_RUNNER_WORKERS_MAX + 1;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    CHECK_EQ_PTR(r, NULL);
    /* Out of memory at every allocation of new: a clean error, nothing left. */
    cfg.workers = 2;
    for (long k = 1;; k++) {
        struct counting c = {.fail_at = k};
        struct tw_allocator a = {counting_alloc, &c};
        cfg.allocator = &a;
        int rc = tw_runner_new(&r, &cfg);
        if (rc == 0) {
            tw_runner_free(r);
            CHECK_EQ_INT(atomic_load(&c.outstanding), 0);
            break;
        }
        CHECK_EQ_INT(rc, TW_ENOMEM);
        CHECK_EQ_PTR(r, NULL);
        CHECK_EQ_INT(atomic_load(&c.outstanding), 0);
    }
    CHECK_EQ_INT(tw_runner_free(NULL), 0);
}

/* ---- operations -------------------------------------------------------------- */

static void test_set_fires_once_never_early(void)
{
    struct tw_runner *r = start(2, TW_TASKS_KEY_BYTES, 0);
    uint64_t t0 = now_ns();
    CHECK_EQ_INT(tw_runner_set(r, "a", 1, (void *)1, 5 * TICK_NS), 1);
    CHECK_EQ_INT(tw_runner_set(r, "b", 1, (void *)2, 0), 1); /* below one tick: next tick */
    CHECK_EQ_INT(tw_runner_set(r, "c", 1, (void *)3, TICK_NS / 3), 1);
    CHECK_EQ_INT(tw_runner_set(r, NULL, 1, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_set(r, "d", 1, NULL, -1), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_set_int(r, 1, NULL, 1), TW_EINVAL); /* other kind */
    char big[TW_RUNNER_KEY_MAX + 1] = {0};
    CHECK_EQ_INT(tw_runner_set(r, big, sizeof big, NULL, 1), TW_E2BIG);
    CHECK_EQ_INT(tw_runner_set(r, big, TW_RUNNER_KEY_MAX, (void *)4, 1), 1);
    CHECK_EQ_INT(wait_fires(&F, 4), 4);
    sleep_ms(20);
    CHECK_EQ_INT(fires_n(&F), 4); /* each once */
    for (int i = 0; i < 4; i++) {
        uint64_t min_delay = F.value[i] == 1 ? 5 * TICK_NS : F.value[i] == 3 ? TICK_NS / 3 : 0;
        CHECK(F.at_ns[i] >= t0 + min_delay); /* never early */
        if (F.value[i] == 1)
            CHECK_EQ_INT(F.key[i], 'a'); /* the key's bytes reach the callback */
    }
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.fired, 4);
    CHECK_EQ_U64(st.pending, 0);
    CHECK(st.tick > 0);
    printf("  4 fires: late %llu, worst lateness %.3f ms\n", (unsigned long long)st.late,
           (double)st.worst_lateness_ns / 1e6);
    tw_runner_free(r);
}

static void test_move_remove_replace(void)
{
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 0);
    CHECK_EQ_INT(tw_runner_move_int(r, 1, TICK_NS), TW_ENOENT);
    CHECK_EQ_INT(tw_runner_remove_int(r, 1, NULL), TW_ENOENT);
    uint64_t t0 = now_ns();
    /* delays of 100 ms and more: the next call comes first even on a busy
     * machine */
    CHECK_EQ_INT(tw_runner_set_int(r, 1, (void *)10, 100 * TICK_NS), 1);
    CHECK_EQ_INT(tw_runner_move_int(r, 1, 130 * TICK_NS), 0); /* later */
    CHECK_EQ_INT(tw_runner_move_int(r, 1, -1), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_set_int(r, 2, (void *)20, 200 * TICK_NS), 1);
    CHECK_EQ_INT(tw_runner_set_int(r, 2, (void *)21, 4 * TICK_NS), 0); /* replaced */
    CHECK_EQ_INT(tw_runner_set_int(r, 3, (void *)30, 500 * TICK_NS), 1); /* far: removed first even on a busy machine */
    void *v = NULL;
    CHECK_EQ_INT(tw_runner_remove_int(r, 3, &v), 0);
    CHECK_EQ_PTR(v, (void *)30);
    CHECK_EQ_INT(tw_runner_set_int(r, 4, (void *)40, 500 * TICK_NS), 1);
    CHECK_EQ_INT(tw_runner_move_int(r, 4, 0), 0); /* go-zero ran this twice */
    CHECK_EQ_INT(wait_fires(&F, 3), 3);
    sleep_ms(60);
    CHECK_EQ_INT(fires_n(&F), 3);
    for (int i = 0; i < 3; i++) {
        if (F.key[i] == 1) {
            CHECK_EQ_U64(F.value[i], 10);
            CHECK(F.at_ns[i] >= t0 + 130 * TICK_NS);
        } else if (F.key[i] == 2) {
            CHECK_EQ_U64(F.value[i], 21);
            CHECK(F.at_ns[i] >= t0 + 4 * TICK_NS);
        } else {
            CHECK_EQ_U64(F.key[i], 4);
        }
    }
    CHECK_EQ_INT(tw_runner_move_int(r, 4, TICK_NS), TW_ENOENT); /* ran: gone */
    tw_runner_free(r);
}

/* The tick thread sleeps until the next deadline, and an earlier set wakes
 * it: a 5 ms task set after a 60 s one runs long before 60 s. */
static void test_earlier_deadline_wakes(void)
{
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 0);
    CHECK_EQ_INT(tw_runner_set_int(r, 1, NULL, INT64_C(60000000000)), 1);
    sleep_ms(20); /* let it go to sleep for 60 s */
    uint64_t t0 = now_ns();
    CHECK_EQ_INT(tw_runner_set_int(r, 2, NULL, 5 * TICK_NS), 1);
    CHECK_EQ_INT(wait_fires(&F, 1), 1);
    CHECK_EQ_U64(F.key[0], 2);
    CHECK(F.at_ns[0] - t0 < UINT64_C(2000000000)); /* sanity bound */
    printf("  woken for an earlier deadline: fired %.3f ms after set (delay 5 ms)\n",
           (double)(F.at_ns[0] - t0) / 1e6);
    tw_runner_free(r);
}

/* A stall (a long inline callback) loses no time: the tasks due during it
 * all run right after it, in deadline order. */
static void test_catch_up_in_order(void)
{
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 0);
    F.stall_ms = 80;
    CHECK_EQ_INT(tw_runner_set_int(r, 0, (void *)777, TICK_NS), 1);
    for (uint64_t k = 1; k <= 60; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, (void *)k, (int64_t)(2 + (k * 37) % 60) * TICK_NS), 1);
    CHECK_EQ_INT(wait_fires(&F, 61), 61);
    CHECK_EQ_U64(F.value[0], 777);
    for (int i = 2; i < 61; i++)
        CHECK(F.deadline[i - 1] <= F.deadline[i]);
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK(st.late > 0); /* they were due during the stall */
    printf("  after an 80 ms stall: %llu late fires, worst %.3f ms\n",
           (unsigned long long)st.late, (double)st.worst_lateness_ns / 1e6);
    tw_runner_free(r);
}

/* The tick thread sleeps to tick boundaries without Linux's default 50 us of
 * timer slack (callbacks with workers = 0 run on it, so one can ask). */
static atomic_long tick_thread_slack = -1;

static void read_slack(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
#if defined(PR_GET_TIMERSLACK)
    atomic_store(&tick_thread_slack, (long)prctl(PR_GET_TIMERSLACK, 0UL, 0UL, 0UL, 0UL));
#else
    atomic_store(&tick_thread_slack, 1);
#endif
}

static void test_tick_thread_timer_slack(void)
{
    struct tw_runner_config cfg = {.execute = read_slack, .tick_ns = TICK_NS,
                                   .key_kind = TW_TASKS_KEY_INT};
    struct tw_runner *r;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    CHECK_EQ_INT(tw_runner_set_int(r, 1, NULL, TICK_NS), 1);
    for (int i = 0; i < 5000 && atomic_load(&tick_thread_slack) < 0; i++)
        sleep_ms(1);
    CHECK_EQ_INT(atomic_load(&tick_thread_slack), 1);
    tw_runner_free(r);
}

/* A blocked callback delays only its own worker; concurrency is bounded. */
static void test_executor_pool(void)
{
    struct tw_runner *r = start(2, TW_TASKS_KEY_INT, 0);
    atomic_store(&F.block, 1);
    CHECK_EQ_INT(tw_runner_set_int(r, 1, (void *)999, TICK_NS), 1);
    CHECK_EQ_INT(wait_fires(&F, 1), 1);
    for (uint64_t k = 10; k < 40; k++)
        tw_runner_set_int(r, k, (void *)k, (int64_t)(k % 5) * TICK_NS);
    CHECK_EQ_INT(wait_fires(&F, 31), 31); /* ran on the other worker */
    atomic_store(&F.block, 0);
    CHECK(F.max_concurrent <= 2);
    tw_runner_free(r);
    /* Callbacks may call back in: 444 re-arms key + 1. */
    r = start(2, TW_TASKS_KEY_INT, 0);
    tw_runner_set_int(r, 100, (void *)444, TICK_NS);
    CHECK_EQ_INT(wait_fires(&F, 2), 2);
    CHECK_EQ_U64(F.key[1], 101);
    tw_runner_free(r);
}

static void test_admission_limit(void)
{
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 3);
    /* 100 ms: nothing fires while the limit is probed, even on a loaded
     * machine under ASan (5 ms was seen to fire in between) */
    for (uint64_t k = 0; k < 3; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, 100 * TICK_NS), 1);
    CHECK_EQ_INT(tw_runner_set_int(r, 3, NULL, 100 * TICK_NS), TW_EFULL);
    CHECK_EQ_INT(tw_runner_set_int(r, 2, NULL, 100 * TICK_NS), 0); /* replace is fine */
    CHECK_EQ_INT(tw_runner_remove_int(r, 0, NULL), 0);
    CHECK_EQ_INT(tw_runner_set_int(r, 3, NULL, 100 * TICK_NS), 1);
    CHECK_EQ_INT(wait_fires(&F, 3), 3);
    CHECK_EQ_INT(tw_runner_set_int(r, 4, NULL, 5 * TICK_NS), 1); /* room again */
    tw_runner_free(r);
}

/* A set that max_pending refuses changes nothing: admission comes before
 * the insert, so the key is never inserted and taken out again (no key
 * block allocated and freed, no index grown), whichever path refuses it:
 * single or batched, string keys short (stored in the entry) or long (in a
 * block of their own). Present keys may still be replaced at the limit. */
static void test_refused_set_changes_nothing(void)
{
    enum { MAXP = 6 };
    static const char long_key[] = "a key longer than fifteen bytes";
    struct counting c = {0};
    struct tw_allocator a = {counting_alloc, &c};
    reset_fires();
    struct tw_runner_config cfg = {.execute = fire_cb,
                                   .ctx = &F,
                                   .tick_ns = TICK_NS,
                                   .key_kind = TW_TASKS_KEY_BYTES,
                                   .max_pending = MAXP,
                                   .allocator = &a,
                                   .shards = 4};
    struct tw_runner *r;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    const int64_t hour = INT64_C(3600000000000);
    char key[MAXP][8];
    for (int i = 0; i < MAXP; i++) {
        snprintf(key[i], sizeof key[i], "k%d", i);
        CHECK_EQ_INT(tw_runner_set(r, key[i], strlen(key[i]), (void *)(intptr_t)(i + 1), hour), 1);
    }
    struct tw_runner_stats before, after;
    tw_runner_stats(r, &before);
    long calls = atomic_load(&c.calls);
    long long bytes = atomic_load(&c.outstanding);
    CHECK_EQ_INT(tw_runner_set(r, long_key, sizeof long_key - 1, (void *)99, hour), TW_EFULL);
    CHECK_EQ_INT(tw_runner_set(r, "new", 3, (void *)98, hour), TW_EFULL);
    struct tw_runner_item it[2] = {
        {.key = long_key, .key_len = sizeof long_key - 1, .value = (void *)97, .delay_ns = hour},
        {.key = "new", .key_len = 3, .value = (void *)96, .delay_ns = hour}};
    CHECK_EQ_INT((int)tw_runner_set_many(r, it, 2), 0);
    CHECK_EQ_INT(it[0].result, TW_EFULL);
    CHECK_EQ_INT(it[1].result, TW_EFULL);
    CHECK_EQ_INT(atomic_load(&c.calls), calls); /* nothing allocated, nothing freed */
    CHECK_EQ_U64((uint64_t)atomic_load(&c.outstanding), (uint64_t)bytes);
    tw_runner_stats(r, &after);
    CHECK_EQ_U64(after.pending, before.pending);
    CHECK_EQ_U64(after.pending, MAXP);
    /* the refused keys are absent, the others untouched, and a present key
     * is replaced at the limit */
    void *v = NULL;
    CHECK_EQ_INT(tw_runner_remove(r, long_key, sizeof long_key - 1, NULL), TW_ENOENT);
    CHECK_EQ_INT(tw_runner_remove(r, "new", 3, NULL), TW_ENOENT);
    CHECK_EQ_INT(tw_runner_set(r, key[0], strlen(key[0]), (void *)100, hour), 0);
    CHECK_EQ_INT(tw_runner_remove(r, key[0], strlen(key[0]), &v), 0);
    CHECK_EQ_PTR(v, (void *)100);
    for (int i = 1; i < MAXP; i++) {
        CHECK_EQ_INT(tw_runner_remove(r, key[i], strlen(key[i]), &v), 0);
        CHECK_EQ_PTR(v, (void *)(intptr_t)(i + 1));
    }
    /* room again: the long key goes in */
    CHECK_EQ_INT(tw_runner_set(r, long_key, sizeof long_key - 1, (void *)99, hour), 1);
    CHECK_EQ_INT(tw_runner_free(r), 0);
    CHECK_EQ_INT(fires_n(&F), 0);
    CHECK_EQ_U64((uint64_t)atomic_load(&c.outstanding), 0);
}

/* ---- drain and stop --------------------------------------------------------------- */

struct drain_ctx {
    struct tw_runner *r;
    int calls;
};

static void drain_fn(void *ctx, const struct tw_task *task)
{
    struct drain_ctx *d = ctx;
    d->calls++;
    if (task->key_int == 1) /* calling back in: go-zero deadlocks here */
        CHECK_EQ_INT(tw_runner_set_int(d->r, 1, (void *)11, 2 * TICK_NS), 1);
}

/* Task deadlines are ticks of the runner's clock (tick k = creation + k
 * ticks), whichever shard holds the task: in execute, in drain's fn and in
 * stop's drain. Each shard's wheel counts from its own origin (staggered), so
 * this fails if a deadline leaks out on a shard's clock. */
struct clock_check {
    uint64_t lo, hi; /* bounds of a right deadline */
    int calls, inside;
};

static void clock_check_fn(void *ctx, const struct tw_task *task)
{
    struct clock_check *c = ctx;
    c->calls++;
    c->inside += task->deadline >= c->lo && task->deadline <= c->hi;
}

/* How many of F's fires from..to-1 have a deadline in [lo, hi]. */
static int fires_inside(int from, int to, uint64_t lo, uint64_t hi)
{
    int inside = 0;
    pthread_mutex_lock(&F.lock);
    for (int i = from; i < to; i++)
        inside += F.deadline[i] >= lo && F.deadline[i] <= hi;
    pthread_mutex_unlock(&F.lock);
    return inside;
}

static void test_deadlines_on_runner_clock(void)
{
    const uint64_t far = 10000; /* ticks */
    uint64_t before = now_ns(); /* <= the runner's tick 0 */
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 0);
    for (uint64_t k = 1; k <= 64; k++) /* over every shard */
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, (int64_t)(far * TICK_NS)), 1);
    struct clock_check c = {far, (now_ns() - before) / TICK_NS + far + 1, 0, 0};
    CHECK_EQ_INT(tw_runner_drain(r, clock_check_fn, &c), 64);
    CHECK_EQ_INT(c.inside, 64);
    /* execute */
    for (uint64_t k = 1; k <= 64; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, 2 * TICK_NS), 1);
    uint64_t hi = (now_ns() - before) / TICK_NS + 3;
    CHECK_EQ_INT(wait_fires(&F, 64), 64);
    CHECK_EQ_INT(fires_inside(0, 64, 2, hi), 64);
    /* stop's drain */
    for (uint64_t k = 1; k <= 64; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, (int64_t)(far * TICK_NS)), 1);
    hi = (now_ns() - before) / TICK_NS + far + 1;
    CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
    CHECK_EQ_INT(fires_n(&F), 128);
    CHECK_EQ_INT(fires_inside(64, 128, far, hi), 64);
    tw_runner_free(r);
}

static void test_drain(void)
{
    struct tw_runner *r = start(1, TW_TASKS_KEY_INT, 100);
    struct drain_ctx d = {.r = r};
    for (uint64_t k = 1; k <= 20; k++)
        tw_runner_set_int(r, k, (void *)k, INT64_C(10000000000));
    CHECK_EQ_INT(tw_runner_drain(r, drain_fn, &d), 20);
    CHECK_EQ_INT(d.calls, 20);
    /* fn's set and a set after drain (no stale key) both fire. */
    CHECK_EQ_INT(tw_runner_set_int(r, 2, (void *)22, 2 * TICK_NS), 1);
    CHECK_EQ_INT(wait_fires(&F, 2), 2);
    CHECK_EQ_INT(F.value[0] + F.value[1], 33);
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.drained, 20);
    CHECK_EQ_U64(st.pending, 0);
    /* The pending count of the admission limit went down with the drain. */
    for (uint64_t k = 100; k < 200; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, INT64_C(10000000000)), 1);
    CHECK_EQ_INT(tw_runner_set_int(r, 200, NULL, TICK_NS), TW_EFULL);
    tw_runner_free(r);
}

static void test_stop(void)
{
    struct counting c = {0};
    struct tw_allocator a = {counting_alloc, &c};
    reset_fires();
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                   .workers = 2, .key_kind = TW_TASKS_KEY_BYTES,
                                   .allocator = &a};
    struct tw_runner *r;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    F.r = r;
    /* stop from a callback: refused, not a deadlock */
    CHECK_EQ_INT(tw_runner_set(r, "s", 1, (void *)555, 0), 1);
    CHECK_EQ_INT(wait_fires(&F, 1), 1);
    sleep_ms(5);
    CHECK_EQ_INT(F.stop_rc, TW_EBUSY);
    char key[32];
    for (int k = 0; k < 1000; k++) {
        int n = snprintf(key, sizeof key, "conn:%d", k);
        tw_runner_set(r, key, (size_t)n, (void *)1, INT64_C(10000000000));
    }
    CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
    CHECK_EQ_INT(tw_runner_stop(r, 0), 0); /* twice: fine (go-zero panics) */
    CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
    CHECK_EQ_INT(fires_n(&F), 1); /* released, not run */
    CHECK_EQ_INT(tw_runner_set(r, "x", 1, NULL, 1), TW_ECLOSED);
    CHECK_EQ_INT(tw_runner_move(r, "x", 1, 1), TW_ECLOSED);
    CHECK_EQ_INT(tw_runner_remove(r, "x", 1, NULL), TW_ECLOSED);
    CHECK_EQ_INT(tw_runner_drain(r, NULL, NULL), TW_ECLOSED);
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.pending, 0);
    tw_runner_free(r);
    CHECK_EQ_INT(atomic_load(&c.outstanding), 0); /* destroy frees everything */

    /* stop with the drain flag runs what is pending, once. */
    r = start(1, TW_TASKS_KEY_INT, 0);
    for (uint64_t k = 0; k < 50; k++)
        tw_runner_set_int(r, k, (void *)k, INT64_C(10000000000));
    CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
    CHECK_EQ_INT(fires_n(&F), 50);
    CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
    CHECK_EQ_INT(fires_n(&F), 50);
    CHECK_EQ_INT(tw_runner_stop(r, 2), TW_EINVAL);
    tw_runner_free(r);
}

static void *refuse_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size)
{
    (void)ctx;
    (void)old_size;
    if (new_size == 0)
        free(ptr);
    return NULL;
}

/* The runner copies the allocator: drain, which makes new instances, must not
 * read the caller's struct after tw_runner_new (it may be gone). */
static void test_allocator_is_copied(void)
{
    struct counting c = {0};
    struct tw_allocator a = {counting_alloc, &c};
    reset_fires();
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                   .key_kind = TW_TASKS_KEY_INT, .allocator = &a};
    struct tw_runner *r;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    a.fn = refuse_alloc; /* the caller's struct changes (or dies) */
    for (uint64_t k = 0; k < 10; k++)
        tw_runner_set_int(r, k, (void *)1, INT64_C(10000000000));
    CHECK_EQ_INT(tw_runner_drain(r, NULL, NULL), 10);
    tw_runner_free(r);
    CHECK_EQ_INT(atomic_load(&c.outstanding), 0);
}

/* A callback run by stop's own drain may call stop or free: refused with
 * TW_EBUSY (it used to wait for the lock its own thread held: a hang). */
static void test_stop_drain_callback_calls_stop(void)
{
    struct tw_runner *r = start(1, TW_TASKS_KEY_INT, 0);
    F.stop_rc = 1;
    tw_runner_set_int(r, 7, (void *)555, INT64_C(10000000000));
    CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
    CHECK_EQ_INT(fires_n(&F), 1);
    CHECK_EQ_INT(F.stop_rc, TW_EBUSY);
    tw_runner_free(r);
}

/* Calling stop or free from drain's fn (drain run by a user thread) is
 * refused: drain goes on using the runner after fn returns. Free used to
 * destroy it under drain's feet (a use after free, caught by ASan). */
struct drain_stop {
    struct tw_runner *r;
    int calls, inner_calls;
    int stop_rc, stop_drain_rc, nested_stop_rc, free_rc;
};

static void drain_stop_inner(void *ctx, const struct tw_task *task)
{
    struct drain_stop *d = ctx;
    (void)task;
    d->inner_calls++;
    d->nested_stop_rc = tw_runner_stop(d->r, 0);
}

static void drain_stop_fn(void *ctx, const struct tw_task *task)
{
    struct drain_stop *d = ctx;
    (void)task;
    d->calls++;
    d->stop_rc = tw_runner_stop(d->r, 0);
    d->stop_drain_rc = tw_runner_stop(d->r, TW_RUNNER_STOP_DRAIN);
    d->free_rc = tw_runner_free(d->r); /* refused: must do nothing */
    /* From a nested drain's fn too (key 100 gives it a task). */
    if (task->key_int == 1) {
        tw_runner_set_int(d->r, 100, NULL, INT64_C(10000000000));
        tw_runner_drain(d->r, drain_stop_inner, d);
    }
}

static void test_drain_fn_calls_stop_free(void)
{
    struct tw_runner *r = start(1, TW_TASKS_KEY_INT, 0);
    struct drain_stop d = {.r = r, .stop_rc = 1, .stop_drain_rc = 1, .nested_stop_rc = 1,
                           .free_rc = 1};
    for (uint64_t k = 1; k <= 5; k++)
        tw_runner_set_int(r, k, (void *)k, INT64_C(10000000000));
    int64_t n = tw_runner_drain(r, drain_stop_fn, &d);
    CHECK_EQ_INT(n, d.calls);
    /* The nested drain took key 100 and whatever the outer had not reached. */
    CHECK(d.calls >= 1 && d.inner_calls >= 1);
    CHECK_EQ_INT(d.calls + d.inner_calls, 6);
    CHECK_EQ_INT(d.stop_rc, TW_EBUSY);
    CHECK_EQ_INT(d.stop_drain_rc, TW_EBUSY);
    CHECK_EQ_INT(d.nested_stop_rc, TW_EBUSY);
    CHECK_EQ_INT(d.free_rc, TW_EBUSY);
    /* Still running: a set fires, and the stop below is the first. */
    CHECK_EQ_INT(tw_runner_set_int(r, 7, (void *)7, TICK_NS), 1);
    CHECK_EQ_INT(wait_fires(&F, 1), 1);
    CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
    tw_runner_free(r);
}

/* A stop from another thread while a drain's fn runs is not refused: it
 * closes the runner and waits for that drain to return, so that free right
 * after it cannot pull the runner from under the drain. */
struct slow_drain {
    struct tw_runner *r;
    atomic_int in_fn, release, stop_returned;
    int64_t drained;
    int stop_rc;
};

static void slow_drain_fn(void *ctx, const struct tw_task *task)
{
    struct slow_drain *s = ctx;
    (void)task;
    atomic_store(&s->in_fn, 1);
    while (!atomic_load(&s->release))
        sleep_ms(1);
}

static void *slow_drain_thread(void *arg)
{
    struct slow_drain *s = arg;
    s->drained = tw_runner_drain(s->r, slow_drain_fn, s);
    return NULL;
}

static void *stop_thread(void *arg)
{
    struct slow_drain *s = arg;
    s->stop_rc = tw_runner_stop(s->r, 0);
    atomic_store(&s->stop_returned, 1);
    return NULL;
}

static void test_stop_waits_for_drain(void)
{
    struct tw_runner *r = start(1, TW_TASKS_KEY_INT, 0);
    struct slow_drain s = {.r = r, .stop_rc = 1};
    tw_runner_set_int(r, 1, NULL, INT64_C(10000000000)); /* one task: one fn call */
    pthread_t drainer, stopper;
    CHECK_EQ_INT(pthread_create(&drainer, NULL, slow_drain_thread, &s), 0);
    for (int i = 0; i < 5000 && !atomic_load(&s.in_fn); i++)
        sleep_ms(1);
    CHECK(atomic_load(&s.in_fn));
    CHECK_EQ_INT(pthread_create(&stopper, NULL, stop_thread, &s), 0);
    sleep_ms(30);
    CHECK_EQ_INT(atomic_load(&s.stop_returned), 0); /* waiting for the drain */
    atomic_store(&s.release, 1);
    pthread_join(stopper, NULL);
    CHECK_EQ_INT(s.stop_rc, 0);
    pthread_join(drainer, NULL);
    CHECK_EQ_INT(s.drained, 1); /* the shards after the stop were closed */
    CHECK_EQ_INT(tw_runner_drain(r, NULL, NULL), TW_ECLOSED);
    tw_runner_free(r);
}

/* A runner on a clock with workers and no pool runs its callbacks on a pool
 * of its own, which the first stop joins. Every later stop (the idempotent
 * second one, and the one inside free) used to read that pool after the
 * first had freed it (ASan: heap-use-after-free in tw_pool_is_self_); a
 * release build could take the freed memory for "a pool thread", so that
 * stop returned TW_EBUSY and free leaked the runner (the counting allocator,
 * which the own pool uses too, sees that). Shapes: stop then free (the
 * report, with and without an allocator), stop three times then free, free
 * alone, and two threads stopping at once (TSan: no race on the pool). */
struct stop_race {
    struct tw_runner *r;
    atomic_int go;
    int rc;
};

static void *stop_race_thread(void *arg)
{
    struct stop_race *s = arg;
    while (!atomic_load(&s->go))
        ;
    s->rc = tw_runner_stop(s->r, 0);
    return NULL;
}

static void test_stop_twice_own_pool(void)
{
    struct tw_clock *clk;
    CHECK_EQ_INT(tw_clock_new(&clk, NULL), 0);
    for (int shape = 0; shape < 5; shape++) {
        struct counting c = {0};
        struct tw_allocator a = {counting_alloc, &c};
        reset_fires();
        struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                       .key_kind = TW_TASKS_KEY_INT, .clock = clk,
                                       .workers = 1, .allocator = shape == 1 ? NULL : &a};
        struct tw_runner *r = NULL;
        CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
        if (!r)
            continue;
        F.r = r;
        CHECK_EQ_INT(tw_runner_set_int(r, 1, (void *)1, 0), 1); /* the pool runs one */
        CHECK_EQ_INT(wait_fires(&F, 1), 1);
        CHECK_EQ_INT(tw_runner_set_int(r, 2, (void *)2, INT64_C(10000000000)), 1);
        switch (shape) {
        case 0:
        case 1: /* the report's form */
            CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
            break;
        case 2:
            CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
            CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
            CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
            CHECK_EQ_INT(tw_runner_set_int(r, 3, NULL, 1), TW_ECLOSED);
            break;
        case 3: /* free alone: its own stop is the first */
            break;
        default: {
            struct stop_race s1 = {.r = r, .rc = 1}, s2 = {.r = r, .rc = 1};
            pthread_t t1, t2;
            CHECK_EQ_INT(pthread_create(&t1, NULL, stop_race_thread, &s1), 0);
            CHECK_EQ_INT(pthread_create(&t2, NULL, stop_race_thread, &s2), 0);
            atomic_store(&s1.go, 1);
            atomic_store(&s2.go, 1);
            pthread_join(t1, NULL);
            pthread_join(t2, NULL);
            CHECK_EQ_INT(s1.rc, 0);
            CHECK_EQ_INT(s2.rc, 0);
            CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
            break;
        }
        }
        CHECK_EQ_INT(fires_n(&F), 1); /* the pending one was dropped, once */
        tw_runner_free(r);
        CHECK_EQ_INT(atomic_load(&c.outstanding), 0); /* free freed it all */
        CHECK_EQ_INT(tw_clock_members(clk), 0);
    }
    CHECK_EQ_INT(tw_clock_free(clk), 0);
}

static void count_fn(void *ctx, const struct tw_task *task)
{
    (void)task;
    (*(int *)ctx)++;
}

/* Out of memory in drain: TW_ENOMEM and nothing drained, wherever the
 * failing allocation falls (drain used to return a partial count, leaving
 * the later shards' tasks pending). */
static void test_drain_out_of_memory(void)
{
    struct counting c = {0};
    struct tw_allocator a = {counting_alloc, &c};
    reset_fires();
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                   .key_kind = TW_TASKS_KEY_INT, .shards = 4,
                                   .max_pending = 100, .allocator = &a};
    struct tw_runner *r;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    int failures = 0;
    uint64_t drained = 0;
    for (long k = 1; k < 1000; k++) {
        for (uint64_t key = 0; key < 40; key++)
            tw_runner_set_int(r, key, (void *)1, INT64_C(10000000000));
        long fail_at = atomic_load(&c.calls) + k; /* fail the k-th allocation from now */
        atomic_store(&c.fail_at, fail_at);
        int calls = 0;
        int64_t n = tw_runner_drain(r, count_fn, &calls);
        struct tw_runner_stats st;
        tw_runner_stats(r, &st);
        if (n >= 0) { /* the failure fell on an allocation whose failure is harmless */
            CHECK_EQ_INT(n, 40);
            CHECK_EQ_INT(calls, 40);
            CHECK_EQ_U64(st.pending, 0);
            drained += 40;
            if (atomic_load(&c.calls) < fail_at)
                break; /* not reached: every allocation of drain has failed once */
            continue;
        }
        failures++;
        CHECK_EQ_INT(n, TW_ENOMEM);
        CHECK_EQ_INT(calls, 0);
        CHECK_EQ_U64(st.pending, 40);
        CHECK_EQ_U64(st.drained, drained);
    }
    CHECK(failures > 0);
    atomic_store(&c.fail_at, 0);
    /* The admission count went down by the drain only. */
    for (uint64_t k = 0; k < 100; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, INT64_C(10000000000)), 1);
    CHECK_EQ_INT(tw_runner_set_int(r, 100, NULL, TICK_NS), TW_EFULL);
    tw_runner_free(r);
    CHECK_EQ_INT(atomic_load(&c.outstanding), 0);
}

static atomic_int stats_stop;

static void *stats_reader(void *arg)
{
    struct tw_runner *r = arg;
    struct tw_runner_stats st;
    while (!atomic_load(&stats_stop))
        tw_runner_stats(r, &st);
    return NULL;
}

/* Figures may be read from any thread while another stops the runner (TSan
 * saw stop drain a shard unlocked while stats read it). */
static void test_stats_while_stopping(void)
{
    struct tw_runner *r = start(1, TW_TASKS_KEY_INT, 0);
    for (uint64_t k = 0; k < 20000; k++)
        tw_runner_set_int(r, k, (void *)1, INT64_C(10000000000));
    atomic_store(&stats_stop, 0);
    pthread_t th;
    CHECK_EQ_INT(pthread_create(&th, NULL, stats_reader, r), 0);
    sleep_ms(2);
    CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
    atomic_store(&stats_stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ_INT(fires_n(&F), 20000);
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.pending, 0);
    tw_runner_free(r);
}

/* Batched calls: each item gets what the single call would return, items
 * of one key in array order, across several groups of 256 and many shards;
 * bad items fail alone; the limit and stop hold; the tasks fire once. */
static void test_batched_calls(void)
{
    enum { N = 700, KEYS = 300 };
    static struct tw_runner_item it[N];
    static uintptr_t last[KEYS];
    static int seen[KEYS];
    const int64_t hour = INT64_C(3600) * 1000000000;
    struct tw_runner *r = start(1, TW_TASKS_KEY_INT, 0);
    memset(it, 0, sizeof it);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
        it[i].key_int = (uint64_t)(i % KEYS) * 7919; /* repeated keys */
        it[i].value = (void *)(uintptr_t)(i + 1);
        it[i].delay_ns = i == 5 ? -1 : hour; /* item 5: a bad delay */
        it[i].result = 99;
    }
    CHECK_EQ_INT(tw_runner_set_many(r, it, N), N - 1);
    for (int i = 0; i < N; i++) {
        int k = i % KEYS, want = i == 5 ? TW_EINVAL : seen[k] ? 0 : 1;
        if (i != 5) {
            seen[k] = 1;
            last[k] = (uintptr_t)(i + 1);
        }
        CHECK_EQ_INT(it[i].result, want);
    }
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.pending, KEYS);

    for (int i = 0; i < 2 * KEYS; i++) { /* move: present, then absent keys */
        it[i].key_int = (uint64_t)i * 7919;
        it[i].delay_ns = i == 7 ? -3 : hour;
    }
    CHECK_EQ_INT(tw_runner_move_many(r, it, 2 * KEYS), KEYS - 1);
    for (int i = 0; i < 2 * KEYS; i++)
        CHECK_EQ_INT(it[i].result, i == 7 ? TW_EINVAL : i < KEYS ? 0 : TW_ENOENT);

    for (int i = 0; i < KEYS + 100; i++) { /* remove: each key, then 100 again */
        it[i].key_int = (uint64_t)(i % KEYS) * 7919;
        it[i].value = NULL;
    }
    CHECK_EQ_INT(tw_runner_remove_many(r, it, KEYS + 100), KEYS);
    for (int i = 0; i < KEYS + 100; i++) {
        CHECK_EQ_INT(it[i].result, i < KEYS ? 0 : TW_ENOENT);
        if (i < KEYS)
            CHECK_EQ_PTR(it[i].value, (void *)last[i]);
    }
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.pending, 0);

    /* Short delays: every task fires, once. */
    for (int i = 0; i < 50; i++) {
        it[i].key_int = 100000 + (uint64_t)i;
        it[i].value = (void *)(uintptr_t)(5000 + i);
        it[i].delay_ns = (int64_t)(i % 5) * TICK_NS;
    }
    CHECK_EQ_INT(tw_runner_set_many(r, it, 50), 50);
    CHECK_EQ_INT(wait_fires(&F, 50), 50);
    sleep_ms(10);
    CHECK_EQ_INT(fires_n(&F), 50);
    int once[50] = {0};
    for (int i = 0; i < 50 && i < F.n; i++)
        if (F.key[i] >= 100000 && F.key[i] < 100050)
            once[F.key[i] - 100000]++;
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(once[i], 1);

    CHECK_EQ_INT(tw_runner_set_many(NULL, it, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_move_many(r, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_runner_remove_many(r, NULL, 0), 0);
    CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
    it[0].key_int = 1;
    it[0].delay_ns = hour;
    CHECK_EQ_INT(tw_runner_set_many(r, it, 1), 0);
    CHECK_EQ_INT(it[0].result, TW_ECLOSED);
    tw_runner_free(r);

    /* max_pending: exactly the room left is taken. */
    r = start(0, TW_TASKS_KEY_INT, 10);
    for (int i = 0; i < 40; i++) {
        it[i].key_int = (uint64_t)i;
        it[i].delay_ns = hour;
    }
    CHECK_EQ_INT(tw_runner_set_many(r, it, 40), 10);
    int full = 0;
    for (int i = 0; i < 40; i++)
        full += it[i].result == TW_EFULL;
    CHECK_EQ_INT(full, 30);
    tw_runner_stats(r, &st);
    CHECK_EQ_U64(st.pending, 10);
    tw_runner_free(r);

    /* String keys: a NULL and an oversize key fail alone. */
    r = start(0, TW_TASKS_KEY_BYTES, 0);
    static char big[TW_RUNNER_KEY_MAX + 1];
    const char *keys[4] = {"a", "b", NULL, big};
    size_t lens[4] = {1, 1, 0, sizeof big};
    for (int i = 0; i < 4; i++) {
        it[i].key = keys[i];
        it[i].key_len = lens[i];
        it[i].value = (void *)(uintptr_t)(i + 1);
        it[i].delay_ns = hour;
    }
    CHECK_EQ_INT(tw_runner_set_many(r, it, 4), 2);
    CHECK_EQ_INT(it[0].result, 1);
    CHECK_EQ_INT(it[1].result, 1);
    CHECK_EQ_INT(it[2].result, TW_EINVAL);
    CHECK_EQ_INT(it[3].result, TW_E2BIG);
    CHECK_EQ_INT(tw_runner_remove_many(r, it, 2), 2);
    CHECK_EQ_PTR(it[1].value, (void *)2);
    tw_runner_free(r);
}

/* The default shard count follows the CPUs (8 per online CPU, 16 to 1024);
 * a configured count is kept. */
static void test_default_shards(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned want = cpus < 2 ? 16 : cpus * 8 > 1024 ? 1024 : (unsigned)cpus * 8;
    if (want < 16)
        want = 16;
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 0);
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    CHECK_EQ_INT((int)st.shards, (int)want);
    tw_runner_free(r);
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                   .shards = 3};
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    tw_runner_stats(r, &st);
    CHECK_EQ_INT((int)st.shards, 3);
    tw_runner_free(r);
}

/* config.slack_shift: a task with delay d may run up to
 * (d >> slack_shift) / tick_ns ticks late, never early, through the single
 * calls and the batched ones, on every shard. Asserted on the task's
 * reported deadline tick (bounded by clock reads around the calls: tick k is
 * at creation + k ticks, creation >= `before`) and on "never early" on the
 * clock; how late the callback starts after its tick is not asserted. */
static void test_slack(void)
{
    enum { K = 16 };
    /* slack 200 and 300 ticks; long enough that the sets, the move_many and
     * the remove below come before any of them is due on a busy machine */
    const int64_t d = 400 * TICK_NS, d2 = 600 * TICK_NS;
    reset_fires();
    struct tw_runner_config cfg = {.execute = fire_cb, .ctx = &F, .tick_ns = TICK_NS,
                                   .key_kind = TW_TASKS_KEY_INT,
                                   .slack_shift = TW_TASKS_SLACK_SHIFT_MAX + 1};
    struct tw_runner *r = NULL;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), TW_EINVAL);
    CHECK_EQ_PTR(r, NULL);
    cfg.slack_shift = 1;
    uint64_t before = now_ns();
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    F.r = r;
    /* Keys 1..K: single sets; K+1..2K: set_many; 2K+1..3K: set_many, then
     * move_many further. */
    uint64_t c0 = now_ns();
    for (uint64_t k = 1; k <= K; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, (void *)(uintptr_t)k, d), 1);
    struct tw_runner_item it[2 * K];
    memset(it, 0, sizeof it);
    for (int i = 0; i < 2 * K; i++) {
        it[i].key_int = (uint64_t)(K + 1 + i);
        it[i].value = (void *)(uintptr_t)it[i].key_int;
        it[i].delay_ns = d;
    }
    CHECK_EQ_INT(tw_runner_set_many(r, it, 2 * K), 2 * K);
    uint64_t c1 = now_ns();
    for (int i = 0; i < K; i++)
        it[K + i].delay_ns = d2;
    uint64_t c2 = now_ns();
    CHECK_EQ_INT(tw_runner_move_many(r, it + K, K), K);
    uint64_t c3 = now_ns();
    CHECK_EQ_INT(wait_fires(&F, 3 * K), 3 * K);
    sleep_ms(5); /* nothing more fires */
    CHECK_EQ_INT(fires_n(&F), 3 * K);
    int inside = 0, early = 0;
    pthread_mutex_lock(&F.lock);
    for (int i = 0; i < 3 * K; i++) {
        int moved = F.key[i] > 2 * K;
        uint64_t delay = (uint64_t)(moved ? d2 : d), from = moved ? c2 : c0;
        uint64_t until = moved ? c3 : c1;
        uint64_t lo = delay / TICK_NS; /* due >= (c - creation + d) / tick */
        uint64_t hi = (until - before + delay) / TICK_NS + 1 + (delay >> 1) / TICK_NS;
        inside += F.deadline[i] >= lo && F.deadline[i] <= hi;
        early += F.at_ns[i] < from + delay; /* never before c + d */
    }
    pthread_mutex_unlock(&F.lock);
    CHECK_EQ_INT(inside, 3 * K);
    CHECK_EQ_INT(early, 0);
    /* remove before its window: never runs. */
    CHECK_EQ_INT(tw_runner_set_int(r, 999, NULL, d), 1);
    CHECK_EQ_INT(tw_runner_remove_int(r, 999, NULL), 0);
    tw_runner_stop(r, 0);
    CHECK_EQ_INT(fires_n(&F), 3 * K);
    tw_runner_free(r);
}

/* config.eager_rearm changes no rule: the tests of move, replace, remove,
 * catch-up order and the batched calls pass as written with it. */
/* Tasks that are only moved (lazily) still have their wheels walked: the
 * tick thread sleeps until the walks' next step (tw_tasks_next_work), not
 * until the next expiry a minute away, so its passes follow time, each
 * with a share of the moves; worst_tick_cpu_ns reports the dearest pass.
 * Bounded wait: passes as soon as the thread has passed 128 ticks. */
static void test_lazy_moves_keep_time(void)
{
    struct tw_runner *r = start(0, TW_TASKS_KEY_INT, 0);
    for (uint64_t k = 0; k < 1000; k++)
        CHECK_EQ_INT(tw_runner_set_int(r, k, NULL, INT64_C(60000000000)), 1);
    sleep_ms(20); /* let it go to sleep for 60 s */
    for (uint64_t k = 0; k < 1000; k++)
        CHECK_EQ_INT(tw_runner_move_int(r, k, INT64_C(61000000000)), 0);
    struct tw_runner_stats st = runner_wait_tick(r, 128);
    CHECK(st.tick >= 128);
    CHECK(st.worst_tick_cpu_ns > 0);
    CHECK_EQ_U64(st.fired, 0);
    tw_runner_free(r);
}

static void test_eager_rearm(void)
{
    start_eager = 1;
    test_move_remove_replace();
    test_catch_up_in_order();
    test_batched_calls();
    start_eager = 0;
}

int main(void)
{
    alarm(120); /* a deadlock fails the test instead of hanging CI */
    pthread_mutex_init(&F.lock, NULL);
    RUN(test_config);
    RUN(test_set_fires_once_never_early);
    RUN(test_move_remove_replace);
    RUN(test_earlier_deadline_wakes);
    RUN(test_catch_up_in_order);
    RUN(test_tick_thread_timer_slack);
    RUN(test_executor_pool);
    RUN(test_admission_limit);
    RUN(test_refused_set_changes_nothing);
    RUN(test_deadlines_on_runner_clock);
    RUN(test_drain);
    RUN(test_stop);
    RUN(test_allocator_is_copied);
    RUN(test_stop_drain_callback_calls_stop);
    RUN(test_stats_while_stopping);
    RUN(test_drain_fn_calls_stop_free);
    RUN(test_stop_waits_for_drain);
    RUN(test_stop_twice_own_pool);
    RUN(test_drain_out_of_memory);
    RUN(test_batched_calls);
    RUN(test_default_shards);
    RUN(test_slack);
    RUN(test_eager_rearm);
    RUN(test_lazy_moves_keep_time);
    return test_summary();
}
