/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: a worker's near window.
 *
 * Claimed tasks wait here until their due time on the local monotonic clock
 * (item->due_local_ns, computed conservatively by the claimer: offset.c,
 * and "Never early" in redis.c).
 * A tw_tasks wheel with integer keys (a local sequence number per item, so
 * two claims of one key never collide) holds the future ones; a tick thread
 * advances it on CLOCK_MONOTONIC and moves what comes due to a FIFO; executor
 * threads take the FIFO in order, each a fair share of what is ready (at most
 * the batch limit the owner sets, <= TW_RR_RUN_BATCH), so that a backlog
 * costs one round trip per batch. Items already due when added go straight to
 * the FIFO in the order they were added (catch-up keeps due order).
 *
 * Starting ahead (ahead > 0, the worker's start_ahead_ms): an item leaves
 * the wheel between ahead / 2 and ahead before its local due time, at a
 * tick that is a multiple of ahead / 2 (in ticks), so the items due in
 * one such span leave together and an executor takes them all (up to the
 * batch limit) in one START round trip; the owner (execute.c) then runs each
 * at its due time. With ticks longer than ahead / 2, an item leaves at the
 * first tick at or after due - ahead (never earlier: Redis would answer
 * that START "not yet"). The tick thread wakes at most once per span, and its
 * own lateness (a wake-up the machine serves late) is absorbed by the
 * span. With ahead == 0 an item leaves at the first tick at or after its
 * local due time, and executors take a fair share of what is ready (one
 * item each when they come due one at a time).
 *
 * The armed queue: a START granted ahead (redis.c) leaves each started item
 * to run at its run_ns; the owner hands those not due yet to this queue
 * (tw_rr_local_arm), ordered by run_ns, and every idle executor waits for
 * the head's time (a timed wait on run_cv, CLOCK_MONOTONIC). Whichever wakes
 * first pops the head and runs it; the others find it gone and wait for the
 * next. Why: the wake-up at a task's run time is its lateness, and a
 * virtual machine's stalls are per vCPU (the host descheduling one), so the
 * first of several waiters is late far less often than one thread sleeping
 * until its own batch's times (bench/README.md, W7, has the probe).
 * Executors are not pinned: the scheduler spreads idle waiters over the
 * CPUs. An executor busy with a START round trip or an execute comes back
 * to the queue after. An armed item whose time has come goes before the
 * FIFO (it is due; FIFO items are still ahead of theirs), and while items
 * are armed an executor takes a FIFO batch only if another one is idle: a
 * START round can last long (Redis away: retried up to lease_ms / 2), and
 * an item it granted earlier must not wait for it past its time (nor past
 * its lease: it would run beside the next holder). With one executor: its
 * armed items first, then the next round. Insertion is O(1) when run times
 * come in order (START rounds of successive spans), else it walks the
 * sorted list: it holds what was granted within start_ahead_ms, a few
 * dozen items.
 * Stop: executors exit only once the armed queue is empty (a granted item
 * runs at its time), and an executor in a START round returns to the queue
 * before it may exit, so nothing armed is left behind.
 *
 * Locking: one mutex `mu` guards the wheel, the FIFO, the armed queue and
 * the counters; it is never held while an item runs. Tick k is the instant
 * start + k * tick.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "redis/internal.h"

struct tw_rr_local {
    pthread_mutex_t mu;
    pthread_cond_t tick_cv; /* wakes the tick thread: earlier work, or stop */
    pthread_cond_t run_cv;  /* wakes executors: FIFO not empty, new armed head, or stop
                             * (CLOCK_MONOTONIC: the armed head's timed wait) */
    struct tw_tasks *wheel; /* under mu */
    struct tw_rr_item *head, *tail; /* the FIFO, under mu */
    size_t nready;          /* items in the FIFO */
    struct tw_rr_item *armed, *armed_tail; /* started items by run_ns, under mu */
    size_t narmed;
    uint32_t idle;          /* executors waiting in loc_wait */
    atomic_size_t batch_max; /* most items an executor takes at once (set by the owner) */
    uint64_t start_ns, tick_ns;
    uint64_t ahead_ns;      /* items leave the wheel up to this much before their due time */
    uint64_t span;          /* ... at ticks that are multiples of this (>= 1) */
    uint32_t rt_prio;       /* SCHED_FIFO priority of the tick thread (0: none) */
    atomic_uint_fast64_t rt_refused; /* threads refused it */
    uint64_t seq;           /* wheel keys */
    uint64_t sleep_until;   /* tick the tick thread sleeps until (UINT64_MAX: no work) */
    size_t held;            /* items in the wheel, FIFO, armed queue or running */
    size_t running;
    bool stopping;
    tw_rr_run_fn *run;
    tw_rr_exec_fn *exec;
    void *ctx;
    uint32_t nthreads;
    pthread_t tick_thread;
    pthread_t *threads;
    uint32_t started;       /* executor threads started */
    bool tick_started;
};

static void loc_push(struct tw_rr_local *l, struct tw_rr_item *it)
{
    it->next = NULL;
    it->fired_ns = tw_rr_mono_ns();
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->nready++;
}

/* tw_tasks' execute: runs under mu on the tick thread. */
static void loc_fire(void *ctx, const struct tw_task *t)
{
    struct tw_rr_local *l = ctx;
    loc_push(l, t->value);
    pthread_cond_signal(&l->run_cv);
}

static uint64_t loc_now_tick(const struct tw_rr_local *l)
{
    return (tw_rr_mono_ns() - l->start_ns) / l->tick_ns;
}

/* Start one of the layer's own threads with SIGPIPE blocked (it inherits
 * the mask of the thread creating it, which is restored): hiredis writes
 * with write(), so a write to a server that was killed raises SIGPIPE,
 * whose default action ends the process. Blocked, it stays pending on that
 * thread and write() fails with EPIPE, a reconnect like any other. The
 * process's disposition, which is the application's, is left alone. */
int tw_rr_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t pipe, old;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    if (pthread_sigmask(SIG_BLOCK, &pipe, &old) != 0)
        return pthread_create(t, NULL, fn, arg);
    int rc = pthread_create(t, NULL, fn, arg);
    (void)pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

static void *loc_tick_main(void *arg)
{
    struct tw_rr_local *l = arg;
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* every task waits for this wake-up */
    if (l->rt_prio) {
        struct sched_param sp = {.sched_priority = (int)l->rt_prio};
        if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) != 0)
            atomic_fetch_add(&l->rt_refused, 1); /* normal scheduling, counted */
    }
    pthread_mutex_lock(&l->mu);
    while (!l->stopping) {
        (void)tw_tasks_advance(l->wheel, loc_now_tick(l));
        uint64_t next = tw_tasks_next_expiry(l->wheel);
        l->sleep_until = next;
        if (next == TW_NEVER) {
            pthread_cond_wait(&l->tick_cv, &l->mu);
        } else {
            uint64_t at = l->start_ns + next * l->tick_ns;
            (void)tw_cond_wait_until_(&l->tick_cv, &l->mu, at);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

struct loc_exec_arg {
    struct tw_rr_local *l;
    unsigned i;
};

/* rt_priority for an executor's timed waits: 0 not tried, 1 granted, -1
 * refused (counted once; normal scheduling from then on). */
struct loc_rt {
    int state;
    int pol;              /* the thread's own policy and parameters, */
    struct sched_param sp; /* restored after each wait */
};

static bool loc_rt_raise(struct tw_rr_local *l, struct loc_rt *rt)
{
    if (!l->rt_prio || rt->state < 0)
        return false;
    struct sched_param sp = {.sched_priority = (int)l->rt_prio};
    if ((rt->state == 1 || pthread_getschedparam(pthread_self(), &rt->pol, &rt->sp) == 0) &&
        pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0) {
        rt->state = 1;
        return true;
    }
    rt->state = -1;
    atomic_fetch_add(&l->rt_refused, 1);
    return false;
}

/* Wait for work: the FIFO, stop, or the armed head's run time (the wake-up
 * that is a task's lateness: at rt_priority when set). */
static void loc_wait(struct tw_rr_local *l, struct loc_rt *rt)
{
    l->idle++;
    if (!l->armed) {
        pthread_cond_wait(&l->run_cv, &l->mu);
    } else {
        uint64_t at = l->armed->run_ns;
        bool raised = loc_rt_raise(l, rt);
        (void)tw_cond_wait_until_(&l->run_cv, &l->mu, at);
        if (raised)
            (void)pthread_setschedparam(pthread_self(), rt->pol, &rt->sp);
    }
    l->idle--;
}

static void *loc_exec_main(void *arg)
{
    struct tw_rr_local *l = ((struct loc_exec_arg *)arg)->l;
    unsigned me = ((struct loc_exec_arg *)arg)->i;
    free(arg);
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* it waits for run times */
    struct tw_rr_item *batch[TW_RR_RUN_BATCH];
    struct loc_rt rt = {0};
    pthread_mutex_lock(&l->mu);
    for (;;) {
        struct tw_rr_item *it = l->armed;
        if (it && it->run_ns <= tw_rr_mono_ns()) { /* due: before the FIFO */
            l->armed = it->next;
            if (!l->armed)
                l->armed_tail = NULL;
            l->narmed--;
            l->running++;
            pthread_mutex_unlock(&l->mu);
            l->exec(l->ctx, it, me); /* takes ownership */
            pthread_mutex_lock(&l->mu);
            l->running--;
            l->held--;
            continue;
        }
        if (l->stopping) {
            if (!l->armed)
                break;
            loc_wait(l, &rt); /* granted items still run at their time */
            continue;
        }
        /* The last idle executor does not leave armed items for a START
         * round: that round may take long (Redis away: retries up to
         * lease_ms / 2), and a started item must run at its time, well
         * within its lease. */
        if (!l->head || (l->armed && l->idle == 0)) {
            loc_wait(l, &rt);
            continue;
        }
        /* A fair share of what is ready: the batch saves round trips when
         * work piles up, and one item at a time keeps every thread busy when
         * it does not. Starting ahead: all of it (up to the limit), the
         * items of one span in one round trip. */
        size_t n = l->ahead_ns ? l->nready : (l->nready + l->nthreads - 1) / l->nthreads;
        size_t max = atomic_load(&l->batch_max);
        if (n > max)
            n = max;
        for (size_t i = 0; i < n; i++) {
            batch[i] = l->head;
            l->head = l->head->next;
        }
        if (!l->head)
            l->tail = NULL;
        l->nready -= n;
        l->running += n;
        if (l->head)
            pthread_cond_signal(&l->run_cv);
        pthread_mutex_unlock(&l->mu);
        l->run(l->ctx, batch, n, me); /* takes ownership of the items */
        pthread_mutex_lock(&l->mu);
        l->running -= n;
        l->held -= n;
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void tw_rr_local_arm(struct tw_rr_local *l, struct tw_rr_item *it)
{
    pthread_mutex_lock(&l->mu);
    struct tw_rr_item **p = &l->armed;
    if (l->armed_tail && l->armed_tail->run_ns <= it->run_ns)
        p = &l->armed_tail->next; /* the usual case: in order */
    while (*p && (*p)->run_ns <= it->run_ns)
        p = &(*p)->next;
    it->next = *p;
    *p = it;
    if (!it->next)
        l->armed_tail = it;
    l->narmed++;
    l->held++; /* the round that armed it drops its own count when it returns: */
    /* until then (the rest of that round, the execute of its items already
     * due included), held and ready count it twice, as does the `leased`
     * stat; the claimer limits its intake by them, so it errs on the side of
     * taking less, and the count comes back when the round returns */
    if (l->armed == it) /* a new head: every idle executor waits for it */
        pthread_cond_broadcast(&l->run_cv);
    pthread_mutex_unlock(&l->mu);
}

static void loc_join(struct tw_rr_local *l)
{
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->tick_cv);
    pthread_cond_broadcast(&l->run_cv);
    pthread_mutex_unlock(&l->mu);
    if (l->tick_started)
        pthread_join(l->tick_thread, NULL);
    for (uint32_t i = 0; i < l->started; i++)
        pthread_join(l->threads[i], NULL);
    l->tick_started = false;
    l->started = 0;
}

int tw_rr_local_new(struct tw_rr_local **out, uint32_t tick_ms, uint32_t ahead_ms,
                    uint32_t rt_prio, uint32_t threads, tw_rr_run_fn *run,
                    tw_rr_exec_fn *exec, void *ctx)
{
    *out = NULL;
    struct tw_rr_local *l = calloc(1, sizeof *l);
    if (!l)
        return TW_ENOMEM;
    l->threads = calloc(threads, sizeof *l->threads);
    if (!l->threads) {
        free(l);
        return TW_ENOMEM;
    }
    l->tick_ns = (uint64_t)tick_ms * 1000000u;
    l->ahead_ns = (uint64_t)ahead_ms * 1000000u;
    l->span = ahead_ms / 2 / tick_ms ? ahead_ms / 2 / tick_ms : 1;
    l->rt_prio = rt_prio;
    atomic_init(&l->rt_refused, 0);
    l->start_ns = tw_rr_mono_ns();
    l->run = run;
    l->exec = exec;
    l->ctx = ctx;
    l->nthreads = threads;
    l->sleep_until = TW_NEVER;
    atomic_init(&l->batch_max, 1);
    struct tw_tasks_config tc = {0};
    tc.execute = loc_fire;
    tc.ctx = l;
    tc.key_kind = TW_TASKS_KEY_INT;
    int rc = tw_tasks_new(&l->wheel, &tc);
    if (rc) {
        free(l->threads);
        free(l);
        return rc;
    }
    if (pthread_mutex_init(&l->mu, NULL) != 0) {
        tw_tasks_free(l->wheel);
        free(l->threads);
        free(l);
        return TW_ESYS;
    }
    if (tw_cond_init_mono_(&l->tick_cv) != 0) {
        pthread_mutex_destroy(&l->mu);
        tw_tasks_free(l->wheel);
        free(l->threads);
        free(l);
        return TW_ESYS;
    }
    if (tw_cond_init_mono_(&l->run_cv) != 0) {
        pthread_cond_destroy(&l->tick_cv);
        pthread_mutex_destroy(&l->mu);
        tw_tasks_free(l->wheel);
        free(l->threads);
        free(l);
        return TW_ESYS;
    }
    rc = 0;
    if (tw_rr_thread_create(&l->tick_thread, loc_tick_main, l) != 0)
        rc = TW_ESYS;
    else
        l->tick_started = true;
    for (uint32_t i = 0; rc == 0 && i < threads; i++) {
        struct loc_exec_arg *a = malloc(sizeof *a);
        if (!a) {
            rc = TW_ENOMEM;
            break;
        }
        a->l = l;
        a->i = i;
        if (tw_rr_thread_create(&l->threads[i], loc_exec_main, a) != 0) {
            free(a);
            rc = TW_ESYS;
            break;
        }
        l->started++;
    }
    if (rc) {
        loc_join(l);
        tw_rr_local_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int tw_rr_local_add(struct tw_rr_local *l, struct tw_rr_item *it)
{
    int rc = 0;
    pthread_mutex_lock(&l->mu);
    if (l->stopping) {
        pthread_mutex_unlock(&l->mu);
        return TW_ECLOSED;
    }
    uint64_t now = tw_rr_mono_ns();
    uint64_t wnow = tw_tasks_now(l->wheel);
    uint64_t tick, leave = it->due_local_ns;
    if (l->ahead_ns == 0) {
        /* The first tick whose instant is at or after the local due time. */
        tick = leave <= l->start_ns ? 0 : tw_ticks_up_(leave - l->start_ns, l->tick_ns);
    } else {
        /* The last multiple of span ticks at or before due - ahead / 2: its
         * instant is at most ahead before the due time when span * tick <=
         * ahead / 2. When a tick is longer than that (span 1), not earlier
         * than the first tick at or after due - ahead: a START sent before
         * is answered "not yet" (a round trip and a script call wasted). */
        uint64_t from = leave > l->ahead_ns ? leave - l->ahead_ns : 0;
        uint64_t lo = from <= l->start_ns ? 0 : tw_ticks_up_(from - l->start_ns, l->tick_ns);
        leave = leave > l->ahead_ns / 2 ? leave - l->ahead_ns / 2 : 0;
        tick = leave <= l->start_ns ? 0 : (leave - l->start_ns) / l->tick_ns;
        tick -= tick % l->span;
        if (tick < lo)
            tick = lo;
    }
    if (leave <= now) {
        loc_push(l, it);
        pthread_cond_signal(&l->run_cv);
    } else {
        /* Fires at `tick`; a tick the wheel has passed already means the next one. */
        rc = tw_tasks_set_int(l->wheel, ++l->seq, it, (int64_t)(tick > wnow ? tick - wnow : 0));
        if (rc < 0) {
            pthread_mutex_unlock(&l->mu);
            return rc;
        }
        rc = 0;
        if ((tick > wnow ? tick : wnow + 1) < l->sleep_until)
            pthread_cond_signal(&l->tick_cv);
    }
    l->held++;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static void loc_collect(void *ctx, const struct tw_task *t)
{
    struct tw_rr_item **list = ctx, *it = t->value;
    it->next = *list;
    *list = it;
}

struct tw_rr_item *tw_rr_local_stop(struct tw_rr_local *l)
{
    loc_join(l); /* running items finished, armed ones ran: executors exit only then */
    pthread_mutex_lock(&l->mu);
    struct tw_rr_item *list = NULL;
    (void)tw_tasks_drain(l->wheel, loc_collect, &list);
    if (l->armed) { /* none: only an executor arms, and it drains the queue before it exits */
        l->armed_tail->next = list;
        list = l->armed;
        l->armed = l->armed_tail = NULL;
        l->narmed = 0;
    }
    /* FIFO items first (they were due first). */
    if (l->tail) {
        l->tail->next = list;
        list = l->head;
    }
    l->head = l->tail = NULL;
    l->nready = 0;
    l->held = 0;
    pthread_mutex_unlock(&l->mu);
    return list;
}

void tw_rr_local_free(struct tw_rr_local *l)
{
    if (!l)
        return;
    struct tw_rr_item *it = tw_rr_local_stop(l);
    while (it) {
        struct tw_rr_item *n = it->next;
        free(it);
        it = n;
    }
    tw_tasks_free(l->wheel);
    pthread_cond_destroy(&l->run_cv);
    pthread_cond_destroy(&l->tick_cv);
    pthread_mutex_destroy(&l->mu);
    free(l->threads);
    free(l);
}

void tw_rr_local_batch(struct tw_rr_local *l, size_t max)
{
    atomic_store(&l->batch_max, max < 1 ? 1 : max > TW_RR_RUN_BATCH ? TW_RR_RUN_BATCH : max);
}

size_t tw_rr_local_ready(struct tw_rr_local *l)
{
    pthread_mutex_lock(&l->mu);
    size_t n = l->nready + l->narmed + l->running;
    pthread_mutex_unlock(&l->mu);
    return n;
}

size_t tw_rr_local_held(struct tw_rr_local *l)
{
    pthread_mutex_lock(&l->mu);
    size_t n = l->held;
    pthread_mutex_unlock(&l->mu);
    return n;
}

uint64_t tw_rr_local_rt_refused(struct tw_rr_local *l)
{
    return atomic_load(&l->rt_refused);
}

