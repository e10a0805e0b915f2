/* SPDX-License-Identifier: MIT */
/* Batched keyed calls against single calls, tw_tasks,
 * single thread, N keys pending (default 1e6), integer keys and "conn:<i>"
 * string keys.
 *
 * For each of set (N new keys), move (every key, random order), get (every
 * key, random order) and remove (every key, random order): ns per op with the
 * single call and with the batched call (tw_tasks_*_many, BATCH items per
 * call), median of 3 runs, each on a fresh instance. Delays are uniform in
 * [1, 2^20] ticks. The item arrays are filled before the clock starts, so
 * both paths are timed on the library's work alone (the single path reads
 * its keys from the same arrays). Time is the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID): on a machine shared with other jobs, time spent
 * preempted would otherwise swamp the difference (caches are still shared).
 *
 * Usage: batch_keyed [N (default 1e6)] [batch (default 256)] [options]
 *   --keys int|string|both   key kinds to run (default both)
 *   --mode single|batched|both  which paths to time (default both)
 *   --reps R                 runs per path, the median is printed (default 3)
 *   --capacity               create each instance with config.capacity = N
 *                            (pre-sized: the fill does not rehash)
 *   --eager                  create each instance with config.eager_rearm
 *                            (move relocates at once; the removals' advance
 *                            then has no lazy moves left to make)
 * Output: a table, "csv,batch,..." lines (0 for a path not run), and the
 * bytes per task tw_tasks_stats reports after a fill.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "twheel.h"
#include "bench_util.h"

static void nop(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    (void)task;
}

enum { OP_SET, OP_MOVE, OP_GET, OP_REMOVE, NOPS };
enum { MAX_REPS = 15 };
static const char *op_name[NOPS] = {"set", "move", "get", "remove"};

static size_t n, batch, reps = 3, capacity;
static int is_int, run_single = 1, run_batched = 1, eager;
static char (*skeys)[16];
static struct tw_tasks_item *ins, *rnd_items; /* insertion order, random order */
static uint64_t sink;
static double fill_bytes; /* tw_tasks_stats bytes per task after the last fill */
static double tidy_ns;    /* the advance right after the removals, ns per removed key */

static void single(struct tw_tasks *t, int op, struct tw_tasks_item *it)
{
    int rc = 0;
    void *v = NULL;
    uint64_t d = 0;
    for (size_t i = 0; i < n; i++) {
        struct tw_tasks_item *x = &it[i];
        if (is_int) {
            switch (op) {
            case OP_SET: rc = tw_tasks_set_int(t, x->key_int, x->value, x->delay_ticks); break;
            case OP_MOVE: rc = tw_tasks_move_int(t, x->key_int, x->delay_ticks); break;
            case OP_GET: rc = tw_tasks_get_int(t, x->key_int, &v, &d); break;
            default: rc = tw_tasks_remove_int(t, x->key_int, &v); break;
            }
        } else {
            switch (op) {
            case OP_SET: rc = tw_tasks_set(t, x->key, x->key_len, x->value, x->delay_ticks); break;
            case OP_MOVE: rc = tw_tasks_move(t, x->key, x->key_len, x->delay_ticks); break;
            case OP_GET: rc = tw_tasks_get(t, x->key, x->key_len, &v, &d); break;
            default: rc = tw_tasks_remove(t, x->key, x->key_len, &v); break;
            }
        }
        sink += (uint64_t)rc + d;
    }
}

static void batched(struct tw_tasks *t, int op, struct tw_tasks_item *it)
{
    for (size_t i = 0; i < n; i += batch) {
        size_t m = n - i < batch ? n - i : batch;
        int64_t ok;
        switch (op) {
        case OP_SET: ok = tw_tasks_set_many(t, it + i, m); break;
        case OP_MOVE: ok = tw_tasks_move_many(t, it + i, m); break;
        case OP_GET: ok = tw_tasks_get_many(t, it + i, m); break;
        default: ok = tw_tasks_remove_many(t, it + i, m); break;
        }
        sink += (uint64_t)ok;
    }
}

/* One run: set all (timed), move, get, remove, each timed; ns/op into r[op]. */
static void run(int use_batch, double r[NOPS])
{
    struct tw_tasks_config cfg = {.execute = nop,
                                  .key_kind = is_int ? TW_TASKS_KEY_INT : TW_TASKS_KEY_BYTES,
                                  .capacity = capacity,
                                  .eager_rearm = eager};
    struct tw_tasks *t;
    if (tw_tasks_new(&t, &cfg)) {
        fprintf(stderr, "tw_tasks_new failed\n");
        exit(1);
    }
    for (int op = 0; op < NOPS; op++) {
        struct tw_tasks_item *it = op == OP_SET ? ins : rnd_items;
        uint64_t a = cpu_now_ns();
        if (use_batch)
            batched(t, op, it);
        else
            single(t, op, it);
        r[op] = (double)(cpu_now_ns() - a) / (double)n;
        if (op == OP_SET && tw_tasks_pending(t) != n)
            fprintf(stderr, "pending %zu after set, want %zu!\n", tw_tasks_pending(t), n);
        if (op == OP_SET) {
            struct tw_tasks_stats st;
            tw_tasks_stats(t, &st);
            fill_bytes = (double)st.bytes / (double)n;
        }
    }
    if (tw_tasks_pending(t) != 0)
        fprintf(stderr, "pending %zu after remove!\n", tw_tasks_pending(t));
    /* Remove leaves the pool's compaction to the next set, advance or drain:
     * time that advance too, so that no deferred work goes unseen. */
    uint64_t a = cpu_now_ns();
    tw_tasks_advance(t, tw_tasks_now(t));
    tidy_ns = (double)(cpu_now_ns() - a) / (double)n;
    tw_tasks_free(t);
}

static void bench(void)
{
    ins = calloc(n, sizeof *ins);
    rnd_items = calloc(n, sizeof *rnd_items);
    skeys = malloc(n * sizeof *skeys);
    uint64_t seed = 4321;
    for (size_t i = 0; i < n; i++) {
        size_t len = (size_t)snprintf(skeys[i], sizeof skeys[i], "conn:%zu", i);
        ins[i] = (struct tw_tasks_item){.key = skeys[i], .key_len = len, .key_int = i * 7 + 3,
                                        .value = &ins[i],
                                        .delay_ticks =
                                            1 + (int64_t)(splitmix64(&seed) % (1u << 20))};
        rnd_items[i] = ins[i];
    }
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = splitmix64(&seed) % (i + 1);
        struct tw_tasks_item x = rnd_items[i];
        rnd_items[i] = rnd_items[j];
        rnd_items[j] = x;
    }
    for (size_t i = 0; i < n; i++)
        rnd_items[i].delay_ticks = 1 + (int64_t)(splitmix64(&seed) % (1u << 20));
    double s[NOPS][MAX_REPS] = {{0}}, b[NOPS][MAX_REPS] = {{0}};
    for (size_t rep = 0; rep < reps; rep++) {
        double rs[NOPS] = {0}, rb[NOPS] = {0};
        if (run_single)
            run(0, rs); /* interleaved: single, batched, single, ... */
        if (run_batched)
            run(1, rb);
        for (int op = 0; op < NOPS; op++) {
            s[op][rep] = rs[op];
            b[op][rep] = rb[op];
        }
    }
    for (int op = 0; op < NOPS; op++) {
        qsort(s[op], reps, sizeof(double), cmp_double);
        qsort(b[op], reps, sizeof(double), cmp_double);
        double sm = s[op][reps / 2], bm = b[op][reps / 2];
        printf("%-7s %-7s %8zu %10.1f %10.1f %8.2fx\n", is_int ? "int" : "string", op_name[op], n,
               sm, bm, bm > 0 ? sm / bm : 0.0);
        printf("csv,batch,%s,%s,%zu,%zu,%.1f,%.1f\n", is_int ? "int" : "string", op_name[op], n,
               batch, sm, bm);
    }
    printf("%-7s bytes per task after the fill (tw_tasks_stats): %.1f; the advance after the "
           "removals (last run): %.2f ns per removed key\n",
           is_int ? "int" : "string", fill_bytes, tidy_ns);
    free(ins);
    free(rnd_items);
    free(skeys);
}

static int usage(void)
{
    fprintf(stderr,
            "usage: batch_keyed [N >= 2] [batch >= 1] [--keys int|string|both]\n"
            "       [--mode single|batched|both] [--reps 1..%d] [--capacity] [--eager]\n",
            MAX_REPS);
    return 2;
}

int main(int argc, char **argv)
{
    n = 1000000;
    batch = 256;
    int npos = 0, keys_int = 1, keys_str = 1;
    for (int a = 1; a < argc; a++) {
        const char *o = argv[a], *v = a + 1 < argc ? argv[a + 1] : NULL;
        if (strcmp(o, "--capacity") == 0) {
            capacity = 1;
        } else if (strcmp(o, "--eager") == 0) {
            eager = 1;
        } else if (strcmp(o, "--keys") == 0 && v) {
            keys_int = strcmp(v, "string") != 0;
            keys_str = strcmp(v, "int") != 0;
            a++;
        } else if (strcmp(o, "--mode") == 0 && v) {
            run_single = strcmp(v, "batched") != 0;
            run_batched = strcmp(v, "single") != 0;
            a++;
        } else if (strcmp(o, "--reps") == 0 && v) {
            reps = (size_t)atoi(v);
            a++;
        } else if (o[0] != '-' && npos < 2) {
            if (npos++ == 0)
                n = (size_t)atof(o);
            else
                batch = (size_t)atof(o);
        } else {
            return usage();
        }
    }
    if (n < 2 || batch < 1 || reps < 1 || reps > MAX_REPS)
        return usage();
    if (capacity)
        capacity = n;
    printf("tw_tasks, %zu keys pending, batches of %zu%s%s; ns per op, median of %zu\n", n, batch,
           capacity ? ", config.capacity = N" : "", eager ? ", config.eager_rearm" : "", reps);
    printf("%-7s %-7s %8s %10s %10s %9s\n", "keys", "op", "N", "single", "batched", "speed-up");
    for (is_int = 1; is_int >= 0; is_int--)
        if (is_int ? keys_int : keys_str)
            bench();
    return sink == 42; /* keep the results alive */
}
