/* SPDX-License-Identifier: MIT */
/* Multi-threaded stress test of tw_runner: producer threads set/move/remove
 * random keys at full speed while the tick thread runs (0.2 ms ticks) and
 * callbacks run on workers (or inline), for a bounded time.
 *
 * Every arming carries a unique id (its value); callbacks count fires per id.
 * Each producer owns a key range, so it knows from the return codes what must
 * have happened to each of its armings:
 *   set -> 0 (replaced), remove -> 0:  that arming must never fire;
 *   set -> 1 over a known arming, move/remove -> TW_ENOENT: it must have fired;
 *   the arming still current at the end must fire (or be drained by stop) once.
 * A further thread hammers a shared key range with no bookkeeping but the
 * fire counts, and callbacks call back in. Checked at the end: no id fires
 * twice, no superseded id fires, no surviving id is lost.
 *
 * Runs: 3 producers on 4 shards (callbacks on 2 workers, then inline), and
 * 16 producers on the default shard count with 1 worker (the many-producer
 * case of the W8 workload: more threads than this machine's cores, so lock holders
 * are preempted and the spinning shard lock falls back to sleeping); there
 * the odd producers use the batched calls (tw_runner_*_many, 1..8 items of
 * one kind, repeated keys likely) and read each item's result as the single
 * call's.
 *
 * Usage: test_runner_stress [milliseconds]  (default 1500)
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "test.h"
#include "twheel.h"

#define PRODUCERS 16 /* at most; each run says how many */
#define KEYS_PER 512
#define MAX_IDS (1u << 21) /* per producer */
#define SHARED_BASE (UINT64_C(1) << 40)
#define TICK_NS 200000

enum { UNKNOWN = 0, MUST_FIRE = 1, MUST_NOT = 2 };

static unsigned nprod; /* producers of this run */
static _Atomic uint8_t fires[PRODUCERS + 1][MAX_IDS];
static uint8_t expect[PRODUCERS][MAX_IDS];
static atomic_int stop_flag;
static struct tw_runner *R;
static atomic_ullong callbacks, reentrant_sets;
static atomic_ullong bad; /* failed checks in producer threads (test.h is not thread-safe) */
#define TCHECK(cond)                                                                 \
    do {                                                                             \
        if (!(cond)) {                                                               \
            if (atomic_fetch_add(&bad, 1) < 10)                                      \
                fprintf(stderr, "%s:%d: check failed in a thread: %s\n", __FILE__, __LINE__, \
                        #cond);                                                      \
        }                                                                            \
    } while (0)

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* value = producer << 24 | id (id from 1) */
static void on_fire(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    uintptr_t v = (uintptr_t)task->value;
    unsigned p = (unsigned)(v >> 24);
    uint32_t id = (uint32_t)(v & 0xffffff);
    if (p <= PRODUCERS && id < MAX_IDS)
        atomic_fetch_add(&fires[p][id], 1);
    if ((atomic_fetch_add(&callbacks, 1) & 63) == 0 && task->key_int >= SHARED_BASE) {
        /* call back in: re-arm a shared key with a fresh untracked value */
        tw_runner_set_int(R, task->key_int + 1, (void *)((uintptr_t)(PRODUCERS + 1) << 24), 100000);
        atomic_fetch_add(&reentrant_sets, 1);
    }
}

struct producer {
    unsigned p;
    uint32_t cur[KEYS_PER]; /* current arming id of each own key, 0 = none */
    uint32_t next_id;
    uint64_t ops, sets, moves, removes, batched;
};

/* What a result says about the key's armings (see the top). */
static void note_set(struct producer *pr, unsigned k, uint32_t id, int rc)
{
    uint32_t *cur = &pr->cur[k];
    if (rc == 0)
        expect[pr->p][*cur] = MUST_NOT; /* replaced while pending */
    else if (rc == 1 && *cur)
        expect[pr->p][*cur] = MUST_FIRE; /* it had fired */
    TCHECK(rc == 0 || rc == 1);
    *cur = id;
    pr->sets++;
}

static void note_move(struct producer *pr, unsigned k, int rc)
{
    uint32_t *cur = &pr->cur[k];
    if (rc == TW_ENOENT) {
        if (*cur)
            expect[pr->p][*cur] = MUST_FIRE;
        *cur = 0;
    } else {
        TCHECK(rc == 0);
        TCHECK(*cur != 0);
    }
    pr->moves++;
}

static void note_remove(struct producer *pr, unsigned k, void *v, int rc)
{
    uint32_t *cur = &pr->cur[k];
    if (rc == 0) {
        TCHECK(((uintptr_t)v & 0xffffff) == *cur);
        expect[pr->p][*cur] = MUST_NOT;
    } else {
        TCHECK(rc == TW_ENOENT);
        if (*cur)
            expect[pr->p][*cur] = MUST_FIRE;
    }
    *cur = 0;
    pr->removes++;
}

/* Batched calls (odd producers of a batched run): 1..8 items of one kind on
 * own keys (repeats likely), each result read as the single call's. */
static void produce_batch(struct producer *pr, uint64_t *s, uint64_t r)
{
    struct tw_runner_item it[8];
    unsigned ks[8], m = 1 + (unsigned)((r >> 4) % 8), kind = (unsigned)((r >> 10) % 4);
    memset(it, 0, sizeof it);
    for (unsigned j = 0; j < m; j++) {
        uint64_t x = rnd(s);
        ks[j] = (unsigned)(x % 16) * (KEYS_PER / 16) + (unsigned)(r % (KEYS_PER / 16));
        it[j].key_int = (uint64_t)pr->p * KEYS_PER + ks[j];
        it[j].delay_ns = (int64_t)((x >> 20) % 40) * 100000;
        if (kind < 2)
            it[j].value = (void *)(((uintptr_t)pr->p << 24) | ++pr->next_id);
    }
    int64_t ok = kind < 2 ? tw_runner_set_many(R, it, m)
                 : kind == 2 ? tw_runner_move_many(R, it, m) : tw_runner_remove_many(R, it, m);
    TCHECK(ok >= 0 && ok <= (int64_t)m);
    for (unsigned j = 0; j < m; j++) {
        if (kind < 2)
            note_set(pr, ks[j], (uint32_t)((uintptr_t)it[j].value & 0xffffff), it[j].result);
        else if (kind == 2)
            note_move(pr, ks[j], it[j].result);
        else
            note_remove(pr, ks[j], it[j].value, it[j].result);
    }
    pr->ops += m;
    pr->batched += m;
}

static int batched_run; /* odd producers use the batched calls */

static void *produce(void *arg)
{
    struct producer *pr = arg;
    uint64_t s = pr->p * 7777 + 1;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed) && pr->next_id < MAX_IDS - 9) {
        uint64_t r = rnd(&s);
        if (batched_run && pr->p % 2) {
            produce_batch(pr, &s, r);
            continue;
        }
        unsigned k = (unsigned)(r % KEYS_PER);
        uint64_t key = (uint64_t)pr->p * KEYS_PER + k;
        int64_t delay = (int64_t)((r >> 20) % 40) * 100000; /* 0..4 ms: many fire */
        switch ((r >> 10) % 4) {
        case 0:
        case 1: {
            uint32_t id = ++pr->next_id;
            int rc = tw_runner_set_int(R, key, (void *)(((uintptr_t)pr->p << 24) | id), delay);
            note_set(pr, k, id, rc);
            break;
        }
        case 2:
            note_move(pr, k, tw_runner_move_int(R, key, delay));
            break;
        default: {
            void *v = NULL;
            int rc = tw_runner_remove_int(R, key, &v);
            note_remove(pr, k, v, rc);
            break;
        }
        }
        pr->ops++;
    }
    return NULL;
}

static void *chaos(void *arg)
{
    (void)arg;
    uint64_t s = 424242, ops = 0;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
        uint64_t r = rnd(&s);
        uint64_t key = SHARED_BASE + r % 256;
        int64_t delay = (int64_t)((r >> 20) % 30) * 100000;
        switch ((r >> 10) % 3) {
        case 0: tw_runner_set_int(R, key, (void *)(uintptr_t)((PRODUCERS + 1) << 24), delay); break;
        case 1: tw_runner_move_int(R, key, delay); break;
        default: tw_runner_remove_int(R, key, NULL); break;
        }
        ops++;
    }
    return (void *)(uintptr_t)ops;
}

static struct producer P[PRODUCERS];

static void run(unsigned workers, unsigned ms, unsigned producers, unsigned shards, int batched)
{
    nprod = producers;
    batched_run = batched;
    memset(fires, 0, sizeof fires);
    memset(expect, 0, sizeof expect);
    memset(P, 0, sizeof P);
    atomic_store(&stop_flag, 0);
    atomic_store(&callbacks, 0);
    struct tw_runner_config cfg = {.execute = on_fire, .tick_ns = TICK_NS, .workers = workers,
                                   .key_kind = TW_TASKS_KEY_INT, .shards = shards};
    CHECK_EQ_INT(tw_runner_new(&R, &cfg), 0);
    pthread_t th[PRODUCERS + 1];
    for (unsigned p = 0; p < nprod; p++) {
        P[p].p = p;
        pthread_create(&th[p], NULL, produce, &P[p]);
    }
    pthread_create(&th[nprod], NULL, chaos, NULL);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
    atomic_store(&stop_flag, 1);
    void *chaos_ops;
    for (unsigned p = 0; p < nprod; p++)
        pthread_join(th[p], NULL);
    pthread_join(th[nprod], &chaos_ops);
    /* The survivors: fire by themselves (<= 4 ms) or are drained by stop. */
    ts.tv_sec = 0;
    ts.tv_nsec = 20000000;
    nanosleep(&ts, NULL);
    CHECK_EQ_INT(tw_runner_stop(R, TW_RUNNER_STOP_DRAIN), 0);
    struct tw_runner_stats st;
    tw_runner_stats(R, &st);
    tw_runner_free(R);

    uint64_t ops = 0, nbatched = 0, twice = 0, superseded = 0, lost = 0, checked = 0;
    for (unsigned p = 0; p < nprod; p++) {
        ops += P[p].ops;
        nbatched += P[p].batched;
        for (unsigned k = 0; k < KEYS_PER; k++)
            if (P[p].cur[k])
                expect[p][P[p].cur[k]] = MUST_FIRE;
        for (uint32_t id = 1; id <= P[p].next_id; id++) {
            uint8_t f = atomic_load(&fires[p][id]);
            twice += f > 1;
            if (expect[p][id] == MUST_NOT)
                superseded += f != 0;
            else if (expect[p][id] == MUST_FIRE)
                lost += f != 1;
            checked += expect[p][id] != UNKNOWN;
        }
    }
    CHECK_EQ_U64(atomic_load(&bad), 0);
    CHECK_EQ_U64(twice, 0);
    CHECK_EQ_U64(superseded, 0);
    CHECK_EQ_U64(lost, 0);
    CHECK(checked > 1000);
    CHECK(shards ? st.shards == shards : st.shards >= 16); /* the default: >= 16 */
    printf("  %u producers, %u shards, workers %u: %llu lock waits; %llu tracked ops (%llu "
           "batched) + %llu shared, %llu armings checked, %llu callbacks (%llu re-entrant sets), "
           "%llu late, worst %.2f ms\n",
           nprod, st.shards, workers, (unsigned long long)st.contended, (unsigned long long)ops,
           (unsigned long long)nbatched, (unsigned long long)(uintptr_t)chaos_ops,
           (unsigned long long)checked, (unsigned long long)atomic_load(&callbacks),
           (unsigned long long)atomic_load(&reentrant_sets), (unsigned long long)st.late,
           (double)st.worst_lateness_ns / 1e6);
}

static unsigned MS = 1500;
static void test_stress_workers(void) { run(2, MS, 3, 4, 0); }
static void test_stress_inline(void) { run(0, MS, 3, 4, 0); }
static void test_stress_16_producers(void) { run(1, MS * 2 / 3, 16, 0, 1); }

int main(int argc, char **argv)
{
    if (argc > 1)
        MS = (unsigned)strtoul(argv[1], NULL, 10);
    RUN(test_stress_workers);
    RUN(test_stress_inline);
    RUN(test_stress_16_producers);
    return test_summary();
}
