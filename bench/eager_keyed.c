/* SPDX-License-Identifier: MIT */
/* tw_tasks with lazy or eager re-arm (config.eager_rearm), for counting
 * instructions under callgrind rather than timing (a shared machine's timings
 * of this small a difference are noise; instruction counts are exact).
 *
 * A heartbeat pattern (W2's shape on the keyed layer): N integer keys, each
 * set with a timeout of T = 32768 ticks (spread over [T, 2T) so that slots
 * differ), then R rounds: every key is moved back to T (plus its spread) in
 * random order, by single calls or by tw_tasks_move_many, and time advances
 * by T / 8, tick by tick (a tick-driven loop). Lazy re-arm leaves each moved
 * task to be relocated by the advance that reaches its old slot; eager
 * relocates it inside move, so the advances only fire. No task fires during
 * the rounds; at the end everything fires. With --spread a round's moves
 * are spread over its ticks instead (N / (T / 8) before each tick, single
 * calls), as W2's heartbeats are: then the lazy moves take steps of the
 * walks (twheel/wheel.h, TW_WHEEL_REARM_MOVES_MAX).
 *
 * Usage: eager_keyed [N (default 1e5)] [rounds (default 16)] [--eager] [--batched | --spread]
 * Count: valgrind --tool=callgrind --toggle-collect=tw_tasks_move_int \
 *          --toggle-collect=tw_tasks_move_many --toggle-collect=tw_tasks_advance \
 *          eager_keyed ...   and callgrind_annotate --inclusive=yes.
 * Output: the fires seen, the CPU time of the whole run and of its dearest
 * tick during the rounds (one run: compare medians of alternated runs).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel.h"
#include "bench_util.h"

static uint64_t fired;
static void on_fire(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
    fired++;
}

static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

int main(int argc, char **argv)
{
    size_t n = 100000, rounds = 16;
    int eager = 0, batched = 0, spread = 0, npos = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--eager") == 0)
            eager = 1;
        else if (strcmp(argv[a], "--batched") == 0)
            batched = 1;
        else if (strcmp(argv[a], "--spread") == 0)
            spread = 1;
        else if (argv[a][0] != '-' && npos < 2)
            *(npos++ == 0 ? &n : &rounds) = (size_t)atof(argv[a]);
        else {
            fprintf(stderr, "usage: eager_keyed [N] [rounds] [--eager] [--batched | --spread]\n");
            return 2;
        }
    }
    enum { T = 32768, STEP = T / 8 };
    struct tw_tasks_config cfg = {.execute = on_fire,
                                  .key_kind = TW_TASKS_KEY_INT,
                                  .seed = {1, 2},
                                  .capacity = n,
                                  .eager_rearm = eager};
    struct tw_tasks *t;
    struct tw_tasks_item *it = malloc(n * sizeof *it);
    if (!it || tw_tasks_new(&t, &cfg)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        tw_tasks_set_int(t, i, NULL, T + (int64_t)(mix(i) % T));
    uint64_t t0 = cpu_now_ns(), worst = 0; /* the dearest tick of the rounds */
    for (size_t r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++) /* every key once, in a new random order */
            it[i] = (struct tw_tasks_item){.key_int = i, .delay_ticks = T + (int64_t)(mix(i) % T)};
        for (size_t i = n - 1; i > 0; i--) {
            size_t j = mix(i ^ ((uint64_t)r << 40)) % (i + 1);
            struct tw_tasks_item x = it[i];
            it[i] = it[j];
            it[j] = x;
        }
        if (batched)
            tw_tasks_move_many(t, it, n);
        else if (!spread)
            for (size_t i = 0; i < n; i++)
                tw_tasks_move_int(t, it[i].key_int, it[i].delay_ticks);
        for (uint64_t k = 0; k < STEP; k++) {
            for (size_t i = spread ? k * n / STEP : 0; spread && i < (k + 1) * n / STEP; i++)
                tw_tasks_move_int(t, it[i].key_int, it[i].delay_ticks);
            uint64_t a = cpu_now_ns();
            tw_tasks_advance(t, tw_tasks_now(t) + 1);
            a = cpu_now_ns() - a;
            worst = a > worst ? a : worst;
        }
    }
    uint64_t rounds_fired = fired;
    tw_tasks_advance(t, tw_tasks_now(t) + 2 * T + 1);
    uint64_t t1 = cpu_now_ns();
    printf("eager_keyed: N %zu, %zu rounds, %s, %s: %llu fired during the rounds, %llu in "
           "all; %.1f ms CPU, the dearest tick %.1f us\n",
           n, rounds, eager ? "eager" : "lazy",
           batched  ? "move_many"
           : spread ? "single moves between the ticks"
                    : "single moves",
           (unsigned long long)rounds_fired, (unsigned long long)fired, (double)(t1 - t0) / 1e6,
           (double)worst / 1e3);
    tw_tasks_free(t);
    free(it);
    return fired != n;
}
