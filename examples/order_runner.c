/* SPDX-License-Identifier: MIT */
/* The runner (twheel/runner.h): keyed delayed tasks from any thread, on
 * CLOCK_MONOTONIC, with execute on executor threads.
 *
 * A shop cancels orders left unpaid: placing an order sets a task under the
 * order's id with its payment deadline; paying removes it (handing the
 * order back); a grace period moves it. The runner's tick thread (1 ms
 * ticks) fires each order at its deadline and one of its two worker threads
 * runs cancel(), which frees the order. At shutdown, tw_runner_stop drops
 * what is still pending and hands each dropped order to release(), so no
 * order leaks.
 *
 * The program checks what it prints: every unpaid order cancelled on a
 * worker thread, none before its deadline by CLOCK_MONOTONIC, no paid order
 * cancelled, the one pending at shutdown released. Bounded to 5 s (it takes
 * about 0.4 s). Exit status 0 on success, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <twheel.h>

#define MS INT64_C(1000000) /* delays are in nanoseconds */
#define ORDERS 10           /* ids 0..9, deadlines 100..280 ms */
#define LATE_ORDER 99       /* due in an hour: still pending at shutdown */

struct order {
    uint64_t id;
    double amount;
};

static pthread_t main_thread;
static uint64_t start_ns;
static uint64_t cancelled_at[ORDERS]; /* written by a worker, read after stop */
static atomic_int cancelled, on_main, released;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* execute: runs on one of the runner's worker threads, at the deadline. */
static void cancel(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    struct order *o = task->value;
    uint64_t t = now_ns();
    if (pthread_equal(pthread_self(), main_thread))
        atomic_fetch_add(&on_main, 1);
    if (o->id < ORDERS)
        cancelled_at[o->id] = t;
    printf("%6.1f ms  order %llu (%.2f) unpaid: cancelled on a worker thread\n",
           (double)(t - start_ns) / 1e6, (unsigned long long)o->id, o->amount);
    free(o);
    atomic_fetch_add(&cancelled, 1);
}

/* release: the orders tw_runner_stop drops without running them. */
static void release(void *ctx, const struct tw_task *task)
{
    (void)ctx;
    struct order *o = task->value;
    printf("%6.1f ms  shutdown: order %llu still pending, released\n",
           (double)(now_ns() - start_ns) / 1e6, (unsigned long long)o->id);
    free(o);
    atomic_fetch_add(&released, 1);
}

static int place(struct tw_runner *r, uint64_t id, int64_t delay_ns, uint64_t *due)
{
    struct order *o = malloc(sizeof *o);
    if (!o)
        return TW_ENOMEM;
    o->id = id;
    o->amount = 10.0 + (double)id;
    uint64_t before = now_ns();
    int rc = tw_runner_set_int(r, id, o, delay_ns);
    if (rc < 0) {
        free(o);
        return rc;
    }
    if (due)
        *due = before + (uint64_t)delay_ns; /* the runner's is never earlier */
    return 0;
}

int main(void)
{
    main_thread = pthread_self();
    struct tw_runner_config cfg = {.execute = cancel,
                                   .release = release,
                                   .tick_ns = 1000000, /* 1 ms */
                                   .workers = 2,
                                   .key_kind = TW_TASKS_KEY_INT};
    struct tw_runner *r;
    int rc = tw_runner_new(&r, &cfg);
    if (rc) {
        fprintf(stderr, "tw_runner_new: %s\n", tw_strerror(rc));
        return 1;
    }
    start_ns = now_ns();
    uint64_t due[ORDERS];
    int paid[ORDERS] = {0}, bad = 0;
    for (uint64_t id = 0; id < ORDERS; id++)
        bad |= place(r, id, (100 + 20 * (int64_t)id) * MS, &due[id]) != 0;
    bad |= place(r, LATE_ORDER, 3600 * 1000 * MS, NULL) != 0;
    printf("%6.1f ms  %d orders placed, payment due in 100..280 ms; order %d in an hour\n",
           (double)(now_ns() - start_ns) / 1e6, ORDERS, LATE_ORDER);

    /* Orders 3 and 7 are paid: removed, they come back to us. */
    for (uint64_t id = 3; id < ORDERS; id += 4) {
        void *value;
        if (tw_runner_remove_int(r, id, &value) == 0) {
            paid[id] = 1;
            free(value);
            printf("%6.1f ms  order %llu paid: removed\n", (double)(now_ns() - start_ns) / 1e6,
                   (unsigned long long)id);
        } else {
            bad = 1;
        }
    }
    /* Order 5 gets a grace period: moved to 400 ms from now, value kept. */
    uint64_t before = now_ns();
    if (tw_runner_move_int(r, 5, 400 * MS) == 0) {
        due[5] = before + 400 * MS;
        printf("%6.1f ms  order 5: grace period, moved to 400 ms from now\n",
               (double)(before - start_ns) / 1e6);
    } else {
        bad = 1;
    }

    /* Wait (bounded) for the 8 unpaid orders; this thread is free meanwhile. */
    while (atomic_load(&cancelled) < ORDERS - 2 && now_ns() - start_ns < 5000 * (uint64_t)MS)
        nanosleep(&(struct timespec){0, 10 * MS}, NULL);

    struct tw_runner_stats st;
    tw_runner_stats(r, &st);
    printf("%6.1f ms  fired %llu, late by more than a tick %llu (worst %.1f ms), pending %zu\n",
           (double)(now_ns() - start_ns) / 1e6, (unsigned long long)st.fired,
           (unsigned long long)st.late, (double)st.worst_lateness_ns / 1e6, st.pending);
    tw_runner_stop(r, 0); /* joins the threads; the hour-long order goes to release() */
    tw_runner_free(r);

    /* After stop, every callback has returned: cancelled_at is ours to read. */
    int early = 0, paid_cancelled = 0;
    for (int id = 0; id < ORDERS; id++) {
        if (paid[id])
            paid_cancelled += cancelled_at[id] != 0;
        else if (cancelled_at[id] != 0 && cancelled_at[id] < due[id])
            early++;
    }
    bad |= atomic_load(&cancelled) != ORDERS - 2 || atomic_load(&released) != 1 ||
           atomic_load(&on_main) != 0 || early != 0 || paid_cancelled != 0;
    printf("%s: %d cancelled (%d early, %d on the main thread), %d paid ones cancelled, "
           "%d released\n",
           bad ? "FAIL" : "ok", atomic_load(&cancelled), early, atomic_load(&on_main),
           paid_cancelled, atomic_load(&released));
    return bad ? 1 : 0;
}
