/* SPDX-License-Identifier: MIT */
/* Heartbeats on tw_runner: its tick thread's dearest pass (the runner's
 * stat worst_tick_cpu_ns) with lazy or eager moves, W2's shape on the
 * runner, as eager_keyed is on tw_tasks.
 *
 * N integer keys are set with a timeout of T = 32768 ticks (spread over
 * [T, 2T) so that slots differ), then for SECONDS the main thread moves
 * every key back to its timeout once per round of T / 8 ticks: spread over
 * the round, a slice before each of its 64 sixty-fourths (the default), or
 * all at once at the round's start (--burst). Nothing fires meanwhile;
 * the runner's tick thread only advances time (and the walks). The tick
 * is TICK_US microseconds so that a run passes many level-2 slots.
 *
 * Usage: runner_beats [N (1e6)] [SECONDS (20)] [TICK_US (250)] [--eager] [--burst]
 * Output: one line: fires (0 expected), the dearest pass of the tick
 * thread in CPU time, the worst lateness (none expected), the rounds
 * whose moves did not fit in their round (the producer fell behind).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "twheel.h"
#include "bench_util.h"

static atomic_ullong fires;
static void on_fire(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
    atomic_fetch_add(&fires, 1);
}

static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until_ns(uint64_t at)
{
    uint64_t now = mono_ns();
    if (at <= now)
        return;
    struct timespec ts = {(time_t)((at - now) / 1000000000u), (long)((at - now) % 1000000000u)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    size_t n = 1000000;
    double seconds = 20, tick_us = 250;
    int eager = 0, burst = 0, npos = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--eager") == 0)
            eager = 1;
        else if (strcmp(argv[a], "--burst") == 0)
            burst = 1;
        else if (argv[a][0] != '-' && npos < 3) {
            double v = atof(argv[a]);
            if (npos == 0)
                n = (size_t)v;
            else if (npos == 1)
                seconds = v;
            else
                tick_us = v;
            npos++;
        } else {
            fprintf(stderr, "usage: runner_beats [N] [SECONDS] [TICK_US] [--eager] [--burst]\n");
            return 2;
        }
    }
    enum { T = 32768, ROUND = T / 8, SLICES = 64 };
    const uint64_t tick_ns = (uint64_t)(tick_us * 1000);
    struct tw_runner_config cfg = {.execute = on_fire,
                                   .tick_ns = tick_ns,
                                   .workers = 1,
                                   .key_kind = TW_TASKS_KEY_INT,
                                   .eager_rearm = eager};
    struct tw_runner *r;
    if (n == 0 || tick_ns < 1000 || tw_runner_new(&r, &cfg)) {
        fprintf(stderr, "runner_beats: bad arguments or out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        tw_runner_set_int(r, i, NULL, (int64_t)((T + mix(i) % T) * tick_ns));
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    uint64_t set_pass = st.worst_tick_cpu_ns; /* while the keys were set */
    uint64_t start = mono_ns(), round_ns = ROUND * tick_ns, behind = 0, rounds = 0;
    uint64_t end = start + (uint64_t)(seconds * 1e9);
    for (uint64_t at = start; at + round_ns <= end; at += round_ns, rounds++) {
        for (unsigned k = 0; k < SLICES; k++) {
            if (!burst)
                sleep_until_ns(at + k * round_ns / SLICES);
            size_t from = burst ? (k == 0 ? 0 : n) : k * n / SLICES;
            size_t to = burst ? (k == 0 ? n : n) : (k + 1) * n / SLICES;
            for (size_t key = from; key < to; key++) /* every key once a round */
                tw_runner_move_int(r, key, (int64_t)((T + mix(key) % T) * tick_ns));
        }
        behind += mono_ns() > at + round_ns;
        sleep_until_ns(at + round_ns);
    }
    tw_runner_stats(r, &st);
    printf("runner_beats: N %zu, %.0f s, tick %.0f us, %s, %s moves: %llu fired, the dearest "
           "tick-thread pass %.1f us CPU (%.1f while setting), worst lateness %.1f ms, %llu of "
           "%llu rounds behind\n",
           n, seconds, tick_us, eager ? "eager" : "lazy", burst ? "burst" : "spread",
           (unsigned long long)atomic_load(&fires), (double)st.worst_tick_cpu_ns / 1e3,
           (double)set_pass / 1e3,
           (double)st.worst_lateness_ns / 1e6, (unsigned long long)behind,
           (unsigned long long)rounds);
    tw_runner_stop(r, 0);
    tw_runner_free(r);
    return atomic_load(&fires) != 0;
}
