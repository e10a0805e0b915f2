/* SPDX-License-Identifier: MIT */
/* W5 keyed benchmark (docs/workloads.md): go-zero's API.
 *
 * Part 1, single-threaded tw_tasks, N in {1e4, 1e5, 1e6}, integer keys and
 * "conn:<i>" string keys: set all N (random delays in [1, 2^20] ticks), move
 * all N, remove all N (random order), set all N then fire all; ns/op (median
 * of 3) and bytes per task (entries + index + key blocks, as allocated).
 *
 * Part 2, tw_runner with a 1 ms tick and 1e6 tasks pending (integer keys):
 * 1 and 2 producer threads issue set/move/remove at full speed for D seconds;
 * ops/s, and fire lateness (callback start - (set time + delay)) p50/p99/max
 * against CLOCK_MONOTONIC. Two producer paths are compared:
 *   - "mutex": the library's design, a short critical section per call on one
 *     of 16 shards (and with 1 shard, to see what sharding buys);
 *   - "queue": a prototype command queue (bounded lock-free MPSC ring, Vyukov's
 *     sequence-numbered slots) drained by a single thread that owns the
 *     tw_tasks and also runs the ticks; producers never touch the tasks.
 *
 * Usage: w5_keyed [seconds-per-runner-case (default 5)] [max N (default 1e6)]
 * Output: human-readable tables, and CSV lines prefixed "csv," for plots.
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

/* ---- part 1: tw_tasks ---------------------------------------------------------------- */

static uint64_t fired_count;
static void count_fire(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
    fired_count++;
}

struct keys {
    int is_int;
    size_t n;
    char (*s)[16];
    uint8_t *len;
    uint32_t *perm;
    int64_t *delay, *delay2;
};

static int kset(struct tw_tasks *t, const struct keys *k, size_t i, int64_t d)
{
    return k->is_int ? tw_tasks_set_int(t, i, NULL, d) : tw_tasks_set(t, k->s[i], k->len[i], NULL, d);
}

static void bench_tasks(size_t n, int is_int)
{
    struct keys k = {.is_int = is_int, .n = n};
    k.s = malloc(n * sizeof *k.s);
    k.len = malloc(n);
    k.perm = malloc(n * sizeof *k.perm);
    k.delay = malloc(n * sizeof *k.delay);
    k.delay2 = malloc(n * sizeof *k.delay2);
    uint64_t seed = 12345;
    for (size_t i = 0; i < n; i++) {
        k.len[i] = (uint8_t)snprintf(k.s[i], sizeof k.s[i], "conn:%zu", i);
        k.perm[i] = (uint32_t)i;
        k.delay[i] = 1 + (int64_t)(splitmix64(&seed) % (1u << 20));
        k.delay2[i] = 1 + (int64_t)(splitmix64(&seed) % (1u << 20));
    }
    for (size_t i = n - 1; i > 0; i--) { /* random order for move/remove */
        size_t j = splitmix64(&seed) % (i + 1);
        uint32_t x = k.perm[i];
        k.perm[i] = k.perm[j];
        k.perm[j] = x;
    }
    double set[3], move[3], rem[3], setfire[3], fire[3], bytes = 0, keybytes = 0;
    for (int rep = 0; rep < 3; rep++) {
        struct tw_tasks_config cfg = {.execute = count_fire,
                                      .key_kind = is_int ? TW_TASKS_KEY_INT : TW_TASKS_KEY_BYTES};
        struct tw_tasks *t;
        tw_tasks_new(&t, &cfg);
        struct tw_tasks_stats st0, st;
        tw_tasks_stats(t, &st0);
        uint64_t a = now_ns();
        for (size_t i = 0; i < n; i++)
            kset(t, &k, i, k.delay[i]);
        uint64_t b = now_ns();
        tw_tasks_stats(t, &st);
        bytes = (double)(st.bytes - st0.bytes) / (double)n;
        keybytes = 0;
        if (!is_int)
            for (size_t i = 0; i < n; i++)
                keybytes += k.len[i] + 2;
        keybytes /= (double)n;
        for (size_t j = 0; j < n; j++) {
            size_t i = k.perm[j];
            if (is_int)
                tw_tasks_move_int(t, i, k.delay2[i]);
            else
                tw_tasks_move(t, k.s[i], k.len[i], k.delay2[i]);
        }
        uint64_t c = now_ns();
        for (size_t j = 0; j < n; j++) {
            size_t i = k.perm[j];
            if (is_int)
                tw_tasks_remove_int(t, i, NULL);
            else
                tw_tasks_remove(t, k.s[i], k.len[i], NULL);
        }
        uint64_t d = now_ns();
        for (size_t i = 0; i < n; i++)
            kset(t, &k, i, k.delay[i]);
        uint64_t e = now_ns();
        fired_count = 0;
        tw_tasks_advance(t, UINT64_C(1) << 21);
        uint64_t f = now_ns();
        if (fired_count != n)
            fprintf(stderr, "fired %llu of %zu!\n", (unsigned long long)fired_count, n);
        set[rep] = (double)(b - a) / (double)n;
        move[rep] = (double)(c - b) / (double)n;
        rem[rep] = (double)(d - c) / (double)n;
        setfire[rep] = (double)(f - d) / (double)n;
        fire[rep] = (double)(f - e) / (double)n;
        tw_tasks_free(t);
    }
    printf("%-7s %8zu %8.1f %8.1f %8.1f %10.1f %8.1f %8.1f %8.1f\n", is_int ? "int" : "string",
           n, median(set, 3), median(move, 3), median(rem, 3), median(setfire, 3), median(fire, 3), bytes,
           keybytes);
    printf("csv,w5_tasks,%s,%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", is_int ? "int" : "string",
           n, median(set, 3), median(move, 3), median(rem, 3), median(setfire, 3), median(fire, 3), bytes,
           keybytes);
    free(k.s);
    free(k.len);
    free(k.perm);
    free(k.delay);
    free(k.delay2);
}

/* ---- part 2: runner ---------------------------------------------------------------- */

#define TICK_NS 1000000
#define PREFILL 1000000
#define KEYSPACE 2000000
#define LAT_BUCKETS 100000 /* 10 us buckets up to 1 s */

static _Atomic uint64_t lat_hist[LAT_BUCKETS + 1];
static _Atomic uint64_t lat_max, lat_n;
static atomic_int running;

static void record_lateness(uint64_t due_ns)
{
    uint64_t now = now_ns();
    uint64_t late = now > due_ns ? now - due_ns : 0;
    uint64_t b = late / 10000;
    atomic_fetch_add_explicit(&lat_hist[b > LAT_BUCKETS ? LAT_BUCKETS : b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&lat_n, 1, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&lat_max, memory_order_relaxed);
    while (late > m && !atomic_compare_exchange_weak(&lat_max, &m, late))
        ;
}

static void on_fire(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    if (task->key_int % 2 == 0) /* never moved: its value is its due instant */
        record_lateness((uint64_t)(uintptr_t)task->value);
}

static double lat_pct(double p)
{
    uint64_t n = atomic_load(&lat_n), want = (uint64_t)(p * (double)n), acc = 0;
    for (size_t b = 0; b <= LAT_BUCKETS; b++) {
        acc += atomic_load(&lat_hist[b]);
        if (acc > want)
            return (double)(b * 10000 + 5000) / 1e6; /* ms, bucket middle */
    }
    return 0;
}

static void lat_reset(void)
{
    for (size_t b = 0; b <= LAT_BUCKETS; b++)
        atomic_store(&lat_hist[b], 0);
    atomic_store(&lat_max, 0);
    atomic_store(&lat_n, 0);
}

/* Delays of the steady state: 1..10 s, so 1e6 pending fire ~1e5/s. */
static int64_t pick_delay(uint64_t r)
{
    return (int64_t)(1000000000u + r % 9000000000u);
}

/* -- the library's runner (mutex per shard) -- */

struct prod {
    struct tw_runner *r;
    unsigned id;
    uint64_t ops;
    double seconds;
};

static void *mutex_producer(void *arg)
{
    struct prod *p = arg;
    uint64_t s = 777 + p->id, ops = 0;
    while (!atomic_load_explicit(&running, memory_order_relaxed)) /* start together */
        ;
    while (atomic_load_explicit(&running, memory_order_relaxed) == 1) {
        for (int j = 0; j < 64; j++) {
            uint64_t r = splitmix64(&s);
            uint64_t key = (r >> 8) % KEYSPACE;
            int64_t d = pick_delay(r >> 20);
            switch (r % 5) {
            case 0:
            case 1:
                tw_runner_set_int(p->r, key, (void *)(uintptr_t)(now_ns() + (uint64_t)d), d);
                break;
            case 2:
            case 3:
                /* only odd keys move, so that an even key's value (its due
                 * instant) stays true and its lateness can be measured */
                tw_runner_move_int(p->r, key | 1, d);
                break;
            default:
                tw_runner_remove_int(p->r, key, NULL);
                break;
            }
        }
        ops += 64;
    }
    p->ops = ops;
    return NULL;
}

static void bench_runner_mutex(unsigned producers, unsigned shards, double seconds)
{
    lat_reset();
    struct tw_runner_config cfg = {.execute = on_fire, .tick_ns = TICK_NS, .workers = 1,
                                   .key_kind = TW_TASKS_KEY_INT, .shards = shards};
    struct tw_runner *r;
    if (tw_runner_new(&r, &cfg)) {
        fprintf(stderr, "runner_new failed\n");
        return;
    }
    uint64_t seed = 99;
    for (uint64_t k = 0; k < PREFILL; k++) {
        int64_t d = pick_delay(splitmix64(&seed));
        tw_runner_set_int(r, k * 2, (void *)(uintptr_t)(now_ns() + (uint64_t)d), d);
    }
    struct prod p[2];
    pthread_t th[2];
    atomic_store(&running, 0);
    for (unsigned i = 0; i < producers; i++) {
        p[i] = (struct prod){.r = r, .id = i};
        pthread_create(&th[i], NULL, mutex_producer, &p[i]);
    }
    lat_reset();
    uint64_t t0 = now_ns();
    atomic_store(&running, 1);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&running, 2);
    uint64_t ops = 0;
    for (unsigned i = 0; i < producers; i++) {
        pthread_join(th[i], NULL);
        ops += p[i].ops;
    }
    double el = (double)(now_ns() - t0) / 1e9;
    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    tw_runner_free(r);
    printf("%-6s %2u shards %u producers: %6.2f Mops/s, pending %zu, fires %llu, lateness "
           "p50 %.3f p99 %.3f max %.3f ms (runner: %llu late > 1 tick, worst %.3f ms)\n",
           "mutex", shards, producers, (double)ops / el / 1e6, st.pending,
           (unsigned long long)atomic_load(&lat_n), lat_pct(0.5), lat_pct(0.99),
           (double)atomic_load(&lat_max) / 1e6, (unsigned long long)st.late,
           (double)st.worst_lateness_ns / 1e6);
    printf("csv,w5_runner,mutex,%u,%u,%.3f,%zu,%llu,%.3f,%.3f,%.3f\n", shards, producers,
           (double)ops / el / 1e6, st.pending, (unsigned long long)atomic_load(&lat_n),
           lat_pct(0.5), lat_pct(0.99), (double)atomic_load(&lat_max) / 1e6);
}

/* -- prototype: command queue drained by the thread that owns the tasks -- */

struct cmd {
    _Atomic uint64_t seq;
    uint64_t key;
    int64_t delay_ns;
    uint64_t due_ns;
    int op;
};

#define QSIZE (1u << 16)
static struct cmd *ring;
static _Atomic uint64_t q_tail; /* producers claim here */
static uint64_t q_head;         /* consumer only */

static void q_push(uint64_t key, int op, int64_t d, uint64_t due)
{
    uint64_t pos = atomic_load_explicit(&q_tail, memory_order_relaxed);
    for (;;) {
        struct cmd *c = &ring[pos & (QSIZE - 1)];
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        if (seq == pos) {
            if (atomic_compare_exchange_weak_explicit(&q_tail, &pos, pos + 1, memory_order_relaxed,
                                                      memory_order_relaxed)) {
                c->key = key;
                c->op = op;
                c->delay_ns = d;
                c->due_ns = due;
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
                return;
            }
        } else if (seq < pos) {
            pos = atomic_load_explicit(&q_tail, memory_order_relaxed); /* full: spin */
        } else {
            pos = atomic_load_explicit(&q_tail, memory_order_relaxed);
        }
    }
}

static struct tw_tasks *qt;
static uint64_t q_start, q_applied;

static void *queue_consumer(void *arg)
{
    (void)arg;
    while (atomic_load_explicit(&running, memory_order_relaxed) != 3) {
        uint64_t now_tick = (now_ns() - q_start) / TICK_NS;
        if (now_tick > tw_tasks_now(qt))
            tw_tasks_advance(qt, now_tick);
        for (int j = 0; j < 256; j++) {
            struct cmd *c = &ring[q_head & (QSIZE - 1)];
            if (atomic_load_explicit(&c->seq, memory_order_acquire) != q_head + 1)
                break;
            uint64_t nowt = tw_tasks_now(qt);
            uint64_t x = c->due_ns - q_start;
            uint64_t due = x / TICK_NS + (x % TICK_NS != 0);
            int64_t d = due > nowt ? (int64_t)(due - nowt) : 0;
            switch (c->op) {
            case 0: tw_tasks_set_int(qt, c->key, (void *)(uintptr_t)c->due_ns, d); break;
            case 1: tw_tasks_move_int(qt, c->key, d); break;
            default: tw_tasks_remove_int(qt, c->key, NULL); break;
            }
            atomic_store_explicit(&c->seq, q_head + QSIZE, memory_order_release);
            q_head++;
            q_applied++;
        }
    }
    return NULL;
}

static void *queue_producer(void *arg)
{
    struct prod *p = arg;
    uint64_t s = 777 + p->id, ops = 0;
    while (!atomic_load_explicit(&running, memory_order_relaxed))
        ;
    while (atomic_load_explicit(&running, memory_order_relaxed) == 1) {
        for (int j = 0; j < 64; j++) {
            uint64_t r = splitmix64(&s);
            uint64_t key = (r >> 8) % KEYSPACE;
            int64_t d = pick_delay(r >> 20);
            uint64_t now = now_ns();
            int op = r % 5 < 2 ? 0 : r % 5 < 4 ? 1 : 2;
            q_push(op == 1 ? key | 1 : key, op, d, now + (uint64_t)d);
        }
        ops += 64;
    }
    p->ops = ops;
    return NULL;
}

static void bench_runner_queue(unsigned producers, double seconds)
{
    lat_reset();
    ring = calloc(QSIZE, sizeof *ring);
    for (uint64_t i = 0; i < QSIZE; i++)
        atomic_init(&ring[i].seq, i);
    atomic_store(&q_tail, 0);
    q_head = 0;
    q_applied = 0;
    struct tw_tasks_config cfg = {.execute = on_fire, .key_kind = TW_TASKS_KEY_INT};
    tw_tasks_new(&qt, &cfg);
    q_start = now_ns();
    uint64_t seed = 99;
    for (uint64_t k = 0; k < PREFILL; k++) {
        int64_t d = pick_delay(splitmix64(&seed));
        tw_tasks_set_int(qt, k * 2, (void *)(uintptr_t)(now_ns() + (uint64_t)d),
                         d / TICK_NS + 1);
    }
    struct prod p[2];
    pthread_t th[2], cons;
    atomic_store(&running, 0);
    pthread_create(&cons, NULL, queue_consumer, NULL);
    for (unsigned i = 0; i < producers; i++) {
        p[i] = (struct prod){.id = i};
        pthread_create(&th[i], NULL, queue_producer, &p[i]);
    }
    lat_reset();
    uint64_t t0 = now_ns();
    atomic_store(&running, 1);
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
    atomic_store(&running, 2);
    for (unsigned i = 0; i < producers; i++)
        pthread_join(th[i], NULL);
    uint64_t t1 = now_ns();
    atomic_store(&running, 3);
    pthread_join(cons, NULL);
    double el = (double)(t1 - t0) / 1e9;
    /* Throughput = commands applied by the owner while producers ran. */
    printf("%-6s          %u producers: %6.2f Mops/s applied, pending %zu, fires %llu, lateness "
           "p50 %.3f p99 %.3f max %.3f ms\n",
           "queue", producers, (double)q_applied / el / 1e6, tw_tasks_pending(qt),
           (unsigned long long)atomic_load(&lat_n), lat_pct(0.5), lat_pct(0.99),
           (double)atomic_load(&lat_max) / 1e6);
    printf("csv,w5_runner,queue,1,%u,%.3f,%zu,%llu,%.3f,%.3f,%.3f\n", producers,
           (double)q_applied / el / 1e6, tw_tasks_pending(qt),
           (unsigned long long)atomic_load(&lat_n), lat_pct(0.5), lat_pct(0.99),
           (double)atomic_load(&lat_max) / 1e6);
    tw_tasks_free(qt);
    free(ring);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    size_t max_n = argc > 2 ? (size_t)atof(argv[2]) : 1000000;
    printf("W5 part 1: tw_tasks, single thread; ns per op (median of 3), bytes per task\n");
    printf("%-7s %8s %8s %8s %8s %10s %8s %8s %8s\n", "keys", "N", "set", "move", "remove",
           "set+fire", "fire", "B/task", "of which key");
    for (size_t n = 10000; n <= max_n; n *= 10) {
        bench_tasks(n, 1);
        bench_tasks(n, 0);
    }
    printf("\nW5 part 2: runner, 1 ms tick, %d pending, %.1f s per case; lateness = callback "
           "start - (set time + delay), includes rounding up to the tick (<= 1 ms)\n",
           PREFILL, seconds);
    for (unsigned prod = 1; prod <= 2; prod++) {
        bench_runner_mutex(prod, 16, seconds);
        bench_runner_mutex(prod, 1, seconds);
        bench_runner_queue(prod, seconds);
    }
    return 0;
}
