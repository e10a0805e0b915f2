/* SPDX-License-Identifier: MIT */
/* tw_runner_config.release: every pending task that stop drops without
 * running is handed to release exactly once, so heap values never leak, even
 * with sets racing the stop. Each value is a malloc'ed block: the ASan stage
 * (detect_leaks=1) fails on any value that nobody freed, and the counters
 * below fail on any value freed twice or handed to no one. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "test.h"
#include "twheel.h"

#define MAGIC 0x7e1ea5eu

struct value {
    unsigned magic;
    unsigned owner;
};

static atomic_long made, executed, released, refused;
/* Failures seen on other threads (the CHECK counters are not thread-safe):
 * checked on the main thread. */
static atomic_long bad_value, bad_ctx, bad_set;

static void *new_value(unsigned owner)
{
    struct value *v = malloc(sizeof *v);
    if (v) {
        v->magic = MAGIC;
        v->owner = owner;
        atomic_fetch_add(&made, 1);
    }
    return v;
}

static void drop_value(void *p)
{
    struct value *v = p;
    if (!v || v->magic != MAGIC) { /* freed twice (ASan also says so) */
        atomic_fetch_add(&bad_value, 1);
        return;
    }
    v->magic = 0;
    free(v);
}

static void on_execute(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    atomic_fetch_add(&executed, 1);
    drop_value(task->value);
}

static void on_release(void *ctx, const struct tw_task *task)
{
    if (ctx != &made) /* the config's ctx */
        atomic_fetch_add(&bad_ctx, 1);
    atomic_fetch_add(&released, 1);
    drop_value(task->value);
}

static void reset(void)
{
    atomic_store(&made, 0);
    atomic_store(&executed, 0);
    atomic_store(&released, 0);
    atomic_store(&refused, 0);
}

static struct tw_runner *new_runner(unsigned workers, enum tw_tasks_key_kind kind)
{
    struct tw_runner_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.execute = on_execute;
    cfg.release = on_release;
    cfg.ctx = &made;
    cfg.tick_ns = 1000000;
    cfg.workers = workers;
    cfg.key_kind = kind;
    cfg.shards = 4;
    struct tw_runner *r = NULL;
    CHECK_EQ_INT(tw_runner_new(&r, &cfg), 0);
    return r;
}

/* Pending at stop: all of them go to release; stop with DRAIN runs them. */
static void test_stop_releases_pending(void)
{
    for (int mode = 0; mode < 3; mode++) {
        reset();
        struct tw_runner *r = new_runner(mode == 1 ? 2 : 0, TW_TASKS_KEY_BYTES);
        if (!r)
            return;
        for (unsigned i = 0; i < 1000; i++) {
            char key[16];
            int len = snprintf(key, sizeof key, "k%u", i);
            void *v = new_value(0);
            CHECK_EQ_INT(tw_runner_set(r, key, (size_t)len, v, INT64_C(60000000000)), 1);
        }
        if (mode == 2) {
            CHECK_EQ_INT(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN), 0);
            CHECK_EQ_INT(atomic_load(&executed), 1000);
            CHECK_EQ_INT(atomic_load(&released), 0);
        } else if (mode == 1) {
            tw_runner_free(r); /* free stops, and releases, too */
            r = NULL;
            CHECK_EQ_INT(atomic_load(&released), 1000);
        } else {
            CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
            CHECK_EQ_INT(atomic_load(&released), 1000);
            CHECK_EQ_INT(tw_runner_stop(r, 0), 0); /* idempotent: nothing twice */
            CHECK_EQ_INT(atomic_load(&released), 1000);
        }
        tw_runner_free(r);
        CHECK_EQ_INT(atomic_load(&made), atomic_load(&executed) + atomic_load(&released));
    }
}

/* Producers racing stop: each value is executed, released, or refused
 * (TW_ECLOSED: still the producer's, which frees it), exactly once. */
struct producer {
    struct tw_runner *r;
    unsigned id;
};

static void *produce(void *arg)
{
    struct producer *p = arg;
    uint64_t rng = p->id * 7919u + 1;
    for (uint64_t i = 0; i < 200000; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        void *v = new_value(p->id);
        if (!v)
            break;
        /* Short delays fire before the stop, long ones are dropped by it. */
        int64_t delay = (rng >> 60) < 8 ? (int64_t)((rng >> 40) % 3000000) : INT64_C(60000000000);
        int rc = tw_runner_set_int(p->r, ((uint64_t)p->id << 40) | i, v, delay);
        if (rc == TW_ECLOSED) {
            atomic_fetch_add(&refused, 1);
            drop_value(v);
            break;
        }
        if (rc != 1) { /* keys are unique: never a replace */
            atomic_fetch_add(&bad_set, 1);
            drop_value(v);
            atomic_fetch_add(&refused, 1);
        }
    }
    return NULL;
}

static void test_sets_racing_stop(void)
{
    enum { PRODUCERS = 3 };
    for (int round = 0; round < 4; round++) {
        reset();
        struct tw_runner *r = new_runner(round & 1 ? 2 : 0, TW_TASKS_KEY_INT);
        if (!r)
            return;
        struct producer P[PRODUCERS];
        pthread_t th[PRODUCERS];
        for (unsigned i = 0; i < PRODUCERS; i++) {
            P[i].r = r;
            P[i].id = i + 1;
            pthread_create(&th[i], NULL, produce, &P[i]);
        }
        struct timespec ts = {0, (5 + 5 * round) * 1000000L};
        nanosleep(&ts, NULL);
        CHECK_EQ_INT(tw_runner_stop(r, 0), 0);
        for (unsigned i = 0; i < PRODUCERS; i++)
            pthread_join(th[i], NULL);
        tw_runner_free(r);
        long m = atomic_load(&made), e = atomic_load(&executed), rel = atomic_load(&released),
             ref = atomic_load(&refused);
        CHECK_EQ_INT(m, e + rel + ref);
        printf("  round %d: %ld values: %ld executed, %ld released by stop, %ld refused\n",
               round, m, e, rel, ref);
    }
}

static void test_no_failure_on_other_threads(void)
{
    CHECK_EQ_INT(atomic_load(&bad_value), 0);
    CHECK_EQ_INT(atomic_load(&bad_ctx), 0);
    CHECK_EQ_INT(atomic_load(&bad_set), 0);
}

int main(void)
{
    RUN(test_stop_releases_pending);
    RUN(test_sets_racing_stop);
    RUN(test_no_failure_on_other_threads);
    return test_summary();
}
