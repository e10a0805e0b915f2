/* SPDX-License-Identifier: MIT */
/* A consumer of twheel that touches every in-process layer once: the core
 * wheel, keyed tasks, the runner (its threads) and the cache. Built by
 * scripts/test-all against each way of getting twheel (installed and moved,
 * pkg-config shared and static, find_package, add_subdirectory,
 * FetchContent, the single-file amalgamation). Exits 0 when every layer
 * answered as documented, else prints the first failure and exits 1. Takes
 * no measurable time and never waits on the clock. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "twheel.h"

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "every_layer: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

static void on_timer(struct tw_timer *t, void *arg)
{
    (void)t;
    ++*(int *)arg;
}

static void on_task(void *ctx, const struct tw_task *task)
{
    (void)task;
    ++*(int *)ctx;
}

static atomic_int runner_runs;

static void on_runner_task(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
    atomic_fetch_add(&runner_runs, 1);
}

static int wheel_layer(void)
{
    struct tw_wheel w;
    struct tw_timer t;
    int fired = 0;
    CHECK(tw_wheel_init(&w, 100) == 0);
    CHECK(tw_timer_init(&t, on_timer, &fired) == 0);
    CHECK(tw_arm_in(&w, &t, tw_wheel_now(&w), 10) == 0);
    CHECK(tw_wheel_advance(&w, 109) == 0 && fired == 0);
    CHECK(tw_wheel_advance(&w, 110) == 1 && fired == 1);
    CHECK(tw_wheel_pending(&w) == 0);
    tw_wheel_destroy(&w);
    return 0;
}

static int tasks_layer(void)
{
    struct tw_tasks *t = NULL;
    struct tw_tasks_config cfg;
    int runs = 0;
    memset(&cfg, 0, sizeof cfg);
    cfg.execute = on_task;
    cfg.ctx = &runs;
    CHECK(tw_tasks_new(&t, &cfg) == 0);
    CHECK(tw_tasks_set(t, "conn-7", 6, NULL, 5) == 1);
    CHECK(tw_tasks_set(t, "conn-7", 6, NULL, 8) == 0); /* re-armed, not doubled */
    CHECK(tw_tasks_advance(t, 5) == 0 && runs == 0);
    CHECK(tw_tasks_advance(t, 8) == 1 && runs == 1);
    CHECK(tw_tasks_pending(t) == 0);
    tw_tasks_free(t);
    return 0;
}

static int runner_layer(void)
{
    struct tw_runner *r = NULL;
    struct tw_runner_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.execute = on_runner_task;
    cfg.tick_ns = 1000000;
    cfg.workers = 1;
    CHECK(tw_runner_new(&r, &cfg) == 0);
    CHECK(tw_runner_set(r, "job", 3, NULL, 1000000) == 1);
    /* Runs exactly once: by its tick or, at the latest, by stop's drain. */
    CHECK(tw_runner_stop(r, TW_RUNNER_STOP_DRAIN) == 0);
    CHECK(atomic_load(&runner_runs) == 1);
    CHECK(tw_runner_set(r, "late", 4, NULL, 0) == TW_ECLOSED);
    tw_runner_free(r);
    return 0;
}

static int cache_layer(void)
{
    struct tw_cache *c = NULL;
    struct tw_cache_config cfg;
    char buf[16];
    size_t len = 0;
    tw_cache_config_init(&cfg);
    cfg.default_ttl_ms = 1000;
    cfg.jitter = 0;
    cfg.copy_values = true;
    cfg.manual_clock = true;
    CHECK(tw_cache_new(&c, &cfg) == 0);
    CHECK(tw_cache_set_copy(c, "k", 1, "value", 6) >= 0);
    CHECK(tw_cache_get_copy(c, "k", 1, buf, sizeof buf, &len) == 0);
    CHECK(len == 6 && strcmp(buf, "value") == 0);
    CHECK(tw_cache_advance(c, 5000) >= 1); /* its TTL is over */
    CHECK(tw_cache_get_copy(c, "k", 1, buf, sizeof buf, &len) == TW_ENOENT);
    tw_cache_free(c);
    return 0;
}

int main(void)
{
    if (wheel_layer() || tasks_layer() || runner_layer() || cache_layer())
        return 1;
    printf("every_layer: twheel %s: wheel, tasks, runner and cache ok\n", tw_version_string());
    return 0;
}
