/* SPDX-License-Identifier: MIT */
/* W8, the runner's half (bench/README.md, "The runner (W8)"): tw_runner with 1e6
 * integer keys pending, P producer threads issuing 70% move / 20% set / 10%
 * remove on random keys, 1 ms tick; ops/s, fire lateness, and shard lock
 * waits per call.
 *
 * The keys, operations and delays come from one precomputed stream (2^22
 * packed operations from splitmix64 with a fixed seed; producer p starts at
 * offset p * 2^22 / 16 and wraps), so the driver costs a load per call. The
 * Go peer (bench/peers/gozero_tw.go) builds the very same stream.
 *   key    = (r >> 8) % 1e6
 *   op     = r % 10: 0-6 move, 7-8 set, 9 remove
 *   delay  = 1000 + (r >> 40) % 9001 ms   (1 to 10 s)
 * Lateness is measured on even keys only: moves go to key | 1, so an even
 * key's value (its due instant, stored by the set) stays true; lateness =
 * callback start - (set time + delay), which includes the rounding up to the
 * next tick (< 1 ms).
 *
 * With a 4th argument "batch" each producer takes the stream 64 operations
 * at a time and issues them as three batched calls (tw_runner_move_many,
 * set_many, remove_many: the same operations, grouped by kind within each
 * window of 64), named "twheel-batch64".
 *
 * Usage: w8_runner SECONDS P [SHARDS [batch]]   (SHARDS 0 = the default)
 * Output: one line "csv,w8,NAME,P,SHARDS,ops_per_s,p50_ms,p99_ms,max_ms,
 * fires,waits_per_call" where NAME is "twheel" or "twheel-8xP" (when SHARDS
 * was given as -1: 8 shards per producer, what the default gives a machine
 * with one core per producer).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "twheel.h"
#include "bench_util.h"

#define KEYS 1000000u
#define STREAM (1u << 22)
#define TICK_NS 1000000u
/* Lateness buckets: 10 us wide up to 2 s, then 10 ms wide up to 62 s (the
 * Go peer falls seconds behind). */
#define FINE 200000
#define LAT_BUCKETS (FINE + 6000)
#define MAXP 64

/* A packed operation: key (20 bits) | op (2 bits) << 20 | delay ms << 22. */
static uint64_t *stream;
enum { OP_MOVE, OP_SET, OP_REMOVE };

static void make_stream(void)
{
    stream = malloc((size_t)STREAM * sizeof *stream);
    if (!stream) {
        fprintf(stderr, "w8_runner: out of memory\n");
        exit(1);
    }
    uint64_t s = 2026;
    for (uint32_t i = 0; i < STREAM; i++) {
        uint64_t r = splitmix64(&s);
        uint64_t key = (r >> 8) % KEYS;
        unsigned sel = (unsigned)(r % 10);
        uint64_t op = sel < 7 ? OP_MOVE : sel < 9 ? OP_SET : OP_REMOVE;
        uint64_t ms = 1000 + (r >> 40) % 9001;
        stream[i] = key | op << 20 | ms << 22;
    }
}

static _Atomic uint64_t lat_hist[LAT_BUCKETS + 1];
static _Atomic uint64_t lat_max, lat_n;

static void on_fire(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    if (task->key_int % 2)
        return;
    uint64_t due = (uint64_t)(uintptr_t)task->value, now = now_ns();
    uint64_t late = now > due ? now - due : 0;
    uint64_t b = late < FINE * UINT64_C(10000) ? late / 10000 : FINE + (late / 10000 - FINE) / 1000;
    atomic_fetch_add_explicit(&lat_hist[b > LAT_BUCKETS ? LAT_BUCKETS : b], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&lat_n, 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&lat_max, memory_order_relaxed);
    while (late > m && !atomic_compare_exchange_weak(&lat_max, &m, late))
        ;
}

static double lat_pct(double p)
{
    uint64_t n = atomic_load(&lat_n), want = (uint64_t)(p * (double)n), acc = 0;
    for (size_t b = 0; b <= LAT_BUCKETS; b++) {
        acc += atomic_load(&lat_hist[b]);
        if (acc > want)
            return b < FINE ? (double)(b * 10000 + 5000) / 1e6
                            : (double)FINE / 100 + (double)(b - FINE) * 10 + 5;
    }
    return 0;
}

static struct tw_runner *R;
static atomic_int phase; /* 0 wait, 1 run, 2 stop */

struct prod {
    unsigned id;
    uint64_t ops;
    char pad[64];
};

static int use_batch;

/* The batched variant: the same 64 operations per round, as three calls. */
static uint64_t produce_batched(uint32_t *pi)
{
    struct tw_runner_item it[3][64];
    size_t n[3] = {0, 0, 0};
    uint32_t i = *pi;
    for (int j = 0; j < 64; j++) {
        uint64_t x = stream[i];
        i = (i + 1) & (STREAM - 1);
        unsigned op = (unsigned)((x >> 20) & 3);
        struct tw_runner_item *t = &it[op][n[op]++];
        uint64_t key = x & 0xfffff;
        t->delay_ns = (int64_t)(x >> 22) * 1000000;
        t->key_int = op == OP_MOVE ? key | 1 : key;
        if (op == OP_SET)
            t->value = (void *)(uintptr_t)(now_ns() + (uint64_t)t->delay_ns);
    }
    *pi = i;
    tw_runner_move_many(R, it[OP_MOVE], n[OP_MOVE]);
    tw_runner_set_many(R, it[OP_SET], n[OP_SET]);
    tw_runner_remove_many(R, it[OP_REMOVE], n[OP_REMOVE]);
    return 64;
}

static void *producer(void *arg)
{
    struct prod *p = arg;
    uint32_t i = (uint32_t)((uint64_t)p->id * STREAM / 16 + p->id * 977u) % STREAM;
    uint64_t ops = 0;
    while (atomic_load_explicit(&phase, memory_order_acquire) == 0)
        ;
    while (atomic_load_explicit(&phase, memory_order_relaxed) == 1) {
        if (use_batch) {
            ops += produce_batched(&i);
            continue;
        }
        for (int j = 0; j < 64; j++) {
            uint64_t x = stream[i];
            i = (i + 1) & (STREAM - 1);
            uint64_t key = x & 0xfffff;
            int64_t d = (int64_t)(x >> 22) * 1000000;
            switch ((x >> 20) & 3) {
            case OP_MOVE:
                tw_runner_move_int(R, key | 1, d);
                break;
            case OP_SET:
                tw_runner_set_int(R, key, (void *)(uintptr_t)(now_ns() + (uint64_t)d), d);
                break;
            default:
                tw_runner_remove_int(R, key, NULL);
                break;
            }
        }
        ops += 64;
    }
    p->ops = ops;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: w8_runner SECONDS PRODUCERS [SHARDS|-1]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    unsigned np = (unsigned)atoi(argv[2]);
    int shards_arg = argc > 3 ? atoi(argv[3]) : 0;
    use_batch = argc > 4 && strcmp(argv[4], "batch") == 0;
    if (np < 1 || np > MAXP || seconds <= 0) {
        fprintf(stderr, "w8_runner: 1..%d producers, seconds > 0\n", MAXP);
        return 2;
    }
    unsigned shards = shards_arg < 0 ? 8 * np : (unsigned)shards_arg;
    if (shards_arg < 0 && shards < 16)
        shards = 16;
    make_stream();
    struct tw_runner_config cfg = {.execute = on_fire, .tick_ns = TICK_NS, .workers = 1,
                                   .key_kind = TW_TASKS_KEY_INT, .shards = shards};
    if (tw_runner_new(&R, &cfg)) {
        fprintf(stderr, "w8_runner: tw_runner_new failed\n");
        return 1;
    }
    uint64_t s = 7;
    for (uint64_t k = 0; k < KEYS; k++) { /* 1e6 keys pending */
        int64_t d = (int64_t)(1000 + splitmix64(&s) % 9001) * 1000000;
        tw_runner_set_int(R, k, (void *)(uintptr_t)(now_ns() + (uint64_t)d), d);
    }
    struct prod *p = calloc(np, sizeof *p);
    pthread_t *th = calloc(np, sizeof *th);
    if (!p || !th)
        return 1;
    for (unsigned i = 0; i < np; i++) {
        p[i].id = i;
        pthread_create(&th[i], NULL, producer, &p[i]);
    }
    /* Lateness counts the fires of the timed run only. */
    for (size_t b = 0; b <= LAT_BUCKETS; b++)
        atomic_store(&lat_hist[b], 0);
    atomic_store(&lat_max, 0);
    atomic_store(&lat_n, 0);
    struct tw_runner_stats st0, st;
    tw_runner_stats(R, &st0);
    uint64_t t0 = now_ns();
    atomic_store_explicit(&phase, 1, memory_order_release);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&phase, 2);
    uint64_t ops = 0;
    for (unsigned i = 0; i < np; i++) {
        pthread_join(th[i], NULL);
        ops += p[i].ops;
    }
    double el = (double)(now_ns() - t0) / 1e9;
    tw_runner_stats(R, &st);
    /* Waits per call: the tick thread's acquisitions are in it too (a few
     * thousand a second), which only overstates it. */
    double waits = (double)(st.contended - st0.contended) / (double)ops;
    const char *name = use_batch ? "twheel-batch64" : shards_arg < 0 ? "twheel-8xP" : "twheel";
    printf("%-10s %2u producers %4u shards: %7.3f M ops/s, pending %zu, fires %llu, lateness p50 "
           "%.3f p99 %.3f max %.3f ms, lock waits per call %.4f\n",
           name, np, st.shards, (double)ops / el / 1e6, st.pending,
           (unsigned long long)atomic_load(&lat_n), lat_pct(0.5), lat_pct(0.99),
           (double)atomic_load(&lat_max) / 1e6, waits);
    printf("csv,w8,%s,%u,%u,%.0f,%.3f,%.3f,%.3f,%llu,%.5f\n", name, np, st.shards,
           (double)ops / el, lat_pct(0.5), lat_pct(0.99), (double)atomic_load(&lat_max) / 1e6,
           (unsigned long long)atomic_load(&lat_n), waits);
    tw_runner_free(R);
    free(p);
    free(th);
    free(stream);
    return 0;
}
