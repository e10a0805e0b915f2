/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the local queue, every task a worker holds from its
 * claim until an executor takes it to run.
 *
 * An item is in one of three places, all under one mutex `mu`:
 *  - the wheel: a core wheel (twheel/wheel.h) of tick_ms ticks, pull only,
 *    holding each item by the bare node embedded in it (no key, no index:
 *    nothing ever looks an item up, it only comes due). Tick k is the
 *    instant start_ns + k * tick. The tick thread collects what comes due
 *    (tw_wheel_expire_next_node) and sleeps until the wheel's next expiry
 *    on CLOCK_MONOTONIC: no polling.
 *  - the FIFO of ready items, which executors take in order, each a fair
 *    share of what is ready (at most batch_max, <= TW_RR_RUN_BATCH, set by
 *    the owner), so that a backlog costs one round trip per batch. Items
 *    already due when added go straight to it in the order they were added
 *    (catch-up keeps due order), behind what the wheel holds for the ticks
 *    that have come: an add collects those first, as the tick thread would
 *    (a catch-up handed over late must not overtake them). Without start
 *    ahead an item's tick is the first at or after its due time, so an
 *    item added due may still go before one of the wheel's that fell due
 *    less than a tick before it (the order holds to the tick).
 *  - the armed list: items a START granted ahead, ordered by run_ns; every
 *    idle executor waits for the head's time.
 * The queue calls no one: claim.c adds, executors (execute.c) take, arm
 * and settle what they took. A held task costs its item and nothing more:
 * the wheel links the node inside it, which shares its bytes with the run
 * times a START sets (internal.h).
 *
 * When an item leaves the wheel (local due time D = item->due_local_ns,
 * computed conservatively by the claimer: offset.c, and "Never early" in
 * redis.c):
 *  - ahead == 0: at the first tick at or after D.
 *  - ahead > 0 (the worker's start_ahead_ms): between ahead / 2 and ahead
 *    before D, at a tick that is a multiple of ahead / 2 (in ticks), so the
 *    items due in one such span leave together and one executor takes them
 *    all (up to the batch limit) in one START round trip; the executor then
 *    runs each at its due time. With ticks longer than ahead / 2, at the
 *    first tick at or after D - ahead (never earlier: Redis would answer
 *    that START "not yet"). The tick thread wakes at most once per span,
 *    and its own lateness (a wake-up the machine serves late) is absorbed
 *    by the span.
 *
 * The armed list: the wake-up at a task's run time is its lateness, and a
 * virtual machine's stalls are per vCPU (the host descheduling one), so the
 * first of several waiters is late far less often than one thread sleeping
 * until its own batch's times. Whichever executor wakes first takes the
 * head; the others find it gone and wait for the next. Executors are not
 * pinned: the scheduler spreads idle waiters over the CPUs. An executor busy
 * with a START round trip or an execute comes back to the queue after. An
 * armed item whose time has come goes before the FIFO (it is due; FIFO items
 * are still ahead of theirs), and while items are armed an executor takes a
 * FIFO batch only if another one is idle: a START round can last long
 * (Redis away: retried up to lease_ms / 2), and an item it granted earlier
 * must not wait for it past its time (nor past its lease: it would run
 * beside the next holder). With one executor: its armed items first, then
 * the next round, unless the FIFO's head is due before the armed head and
 * locally due less than start_ahead_ms ago (a span that a moved clock bound
 * put one span late: its round goes first, for due order). Insertion is
 * O(1) when run times come in order (START rounds of successive spans),
 * else it walks the sorted list: it holds what was granted within
 * start_ahead_ms, a few dozen items.
 *
 * Stop (tw_rr_local_close): no ready item is handed out any more; executors
 * exit only once the armed list is empty (a granted item runs at its time),
 * and an executor in a START round comes back to take before it may exit,
 * so nothing armed is left behind. What its round puts back (add) stays in
 * the queue for tw_rr_local_drain.
 *
 * Counts: `held` is every item in the queue plus those taken and not
 * settled; `running` those taken and not settled. An item a round arms is
 * counted twice until that round settles (the rest of the round, the
 * execute of its items already due included): held, ready and the `leased`
 * stat then err on the high side, and the claimer, which limits its intake
 * by them, takes less.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "redis/internal.h"

struct tw_rr_local {
    pthread_mutex_t mu;
    pthread_cond_t tick_cv; /* wakes the tick thread: earlier work, or stop */
    pthread_cond_t run_cv;  /* wakes executors: FIFO not empty, new armed head, or stop
                             * (CLOCK_MONOTONIC: the armed head's timed wait) */
    struct tw_wheel wheel;  /* items held for later, by their node; under mu */
    struct tw_rr_item *head, *tail; /* the FIFO, under mu */
    size_t nready;          /* items in the FIFO */
    struct tw_rr_item *armed, *armed_tail; /* started items by run_ns, under mu */
    size_t narmed;
    uint32_t idle;          /* executors waiting in loc_wait */
    atomic_size_t batch_max; /* most items one take hands out (set by the owner) */
    uint64_t start_ns, tick_ns;
    uint64_t ahead_ns;      /* items leave the wheel up to this much before their due time */
    uint64_t span;          /* ... at ticks that are multiples of this (>= 1) */
    uint32_t rt_prio;       /* SCHED_FIFO priority of the tick thread (0: none) */
    atomic_uint_fast64_t rt_refused; /* threads refused it */
    uint64_t sleep_until;            /* tick the tick thread sleeps until (TW_NEVER: no work) */
    size_t held;                     /* items in the queue, or taken and not settled */
    size_t running;                  /* items taken and not settled */
    bool stopping;
    uint32_t nthreads; /* executors taking from the queue */
    pthread_t tick_thread;
    bool tick_started;
};

static void loc_push(struct tw_rr_local *l, struct tw_rr_item *it)
{
    it->next = NULL;
#ifdef TW_RR_TRACE
    it->fired_ns = tw_rr_mono_ns();
#endif
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    l->nready++;
    pthread_cond_signal(&l->run_cv);
}

static uint64_t loc_now_tick(const struct tw_rr_local *l)
{
    return (tw_rr_mono_ns() - l->start_ns) / l->tick_ns;
}

/* Move what the wheel holds due by tick `now` to the FIFO, in due order. */
static void loc_collect(struct tw_rr_local *l, uint64_t now)
{
    struct tw_node *n;
    while ((n = tw_wheel_expire_next_node(&l->wheel, now)) != NULL)
        loc_push(l, tw_container_of(n, struct tw_rr_item, node));
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
        loc_collect(l, loc_now_tick(l));
        uint64_t next = tw_wheel_next_expiry(&l->wheel);
        l->sleep_until = next;
        if (next == TW_NEVER)
            pthread_cond_wait(&l->tick_cv, &l->mu);
        else
            (void)tw_cond_wait_until_(&l->tick_cv, &l->mu, l->start_ns + next * l->tick_ns);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static bool loc_rt_raise(struct tw_rr_local *l, struct tw_rr_waiter *w)
{
    if (!l->rt_prio || w->state < 0)
        return false;
    struct sched_param sp = {.sched_priority = (int)l->rt_prio};
    if ((w->state == 1 || pthread_getschedparam(pthread_self(), &w->pol, &w->sp) == 0) &&
        pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0) {
        w->state = 1;
        return true;
    }
    w->state = -1; /* counted once; normal scheduling from then on */
    atomic_fetch_add(&l->rt_refused, 1);
    return false;
}

/* The FIFO's head is due (the server's ms) before the armed head, and its
 * local due time is less than a start-ahead span past: see
 * tw_rr_local_take. Not an item put back unanswered (Redis away): its
 * due_local_ns is its retry's time, and its round would only wait again. */
static bool loc_before_armed(const struct tw_rr_local *l)
{
    return l->head->due_ms < l->armed->due_ms && !l->head->unanswered &&
           l->head->due_local_ns + l->ahead_ns > tw_rr_mono_ns();
}

/* Wait for work: the FIFO, stop, or the armed head's run time (the wake-up
 * that is a task's lateness: at rt_priority when set). */
static void loc_wait(struct tw_rr_local *l, struct tw_rr_waiter *w)
{
    l->idle++;
    if (!l->armed) {
        pthread_cond_wait(&l->run_cv, &l->mu);
    } else {
        uint64_t at = l->armed->run_ns;
        bool raised = loc_rt_raise(l, w);
        (void)tw_cond_wait_until_(&l->run_cv, &l->mu, at);
        if (raised)
            (void)pthread_setschedparam(pthread_self(), w->pol, &w->sp);
    }
    l->idle--;
}

size_t tw_rr_local_take(struct tw_rr_local *l, struct tw_rr_waiter *w, size_t done,
                        struct tw_rr_item **v, bool *started)
{
    pthread_mutex_lock(&l->mu);
    l->running -= done;
    l->held -= done;
    for (;;) {
        struct tw_rr_item *it = l->armed;
        if (it && it->run_ns <= tw_rr_mono_ns()) { /* due: before the FIFO */
            l->armed = it->next;
            if (!l->armed)
                l->armed_tail = NULL;
            l->narmed--;
            l->running++;
            pthread_mutex_unlock(&l->mu);
            v[0] = it;
            *started = true;
            return 1;
        }
        if (l->stopping) {
            if (!l->armed)
                break;
            loc_wait(l, w); /* granted items still run at their time */
            continue;
        }
        /* The last idle executor does not leave armed items for a START
         * round: that round may take long (Redis away: retries up to
         * lease_ms / 2), and a started item must run at its time, well
         * within its lease. Unless the FIFO's head is due before the armed
         * head and its local due time is less than start_ahead_ms past (the
         * tick thread may have woken late): a span's items whose local due
         * time a later claim fixed from a moved clock bound (offset.c) may
         * leave one span after an item due just after them, and their round
         * first keeps due order. Not a catch-up's items (overdue by more):
         * batch after batch of them could keep an armed item waiting, where
         * the items that qualify are few, due within a span of now. */
        if (!l->head || (l->armed && l->idle == 0 && !loc_before_armed(l))) {
            loc_wait(l, w);
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
            v[i] = l->head;
            l->head = l->head->next;
        }
        if (!l->head)
            l->tail = NULL;
        l->nready -= n;
        l->running += n;
        if (l->head)
            pthread_cond_signal(&l->run_cv);
        pthread_mutex_unlock(&l->mu);
        *started = false;
        return n;
    }
    pthread_mutex_unlock(&l->mu);
    return 0;
}

bool tw_rr_local_armed_waits(struct tw_rr_local *l, uint64_t by_ns)
{
    pthread_mutex_lock(&l->mu);
    bool waits = l->armed && l->armed->run_ns <= by_ns && l->idle == 0;
    pthread_mutex_unlock(&l->mu);
    return waits;
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
    l->held++;          /* counted twice until the round that armed it settles (see the top) */
    if (l->armed == it) /* a new head: every idle executor waits for it */
        pthread_cond_broadcast(&l->run_cv);
    pthread_mutex_unlock(&l->mu);
}

int tw_rr_local_new(struct tw_rr_local **out, uint32_t tick_ms, uint32_t ahead_ms, uint32_t rt_prio,
                    uint32_t threads)
{
    *out = NULL;
    struct tw_rr_local *l = calloc(1, sizeof *l);
    if (!l)
        return TW_ENOMEM;
    l->tick_ns = (uint64_t)tick_ms * 1000000u;
    l->ahead_ns = (uint64_t)ahead_ms * 1000000u;
    l->span = ahead_ms / 2 / tick_ms ? ahead_ms / 2 / tick_ms : 1;
    l->rt_prio = rt_prio;
    atomic_init(&l->rt_refused, 0);
    atomic_init(&l->batch_max, 1);
    l->nthreads = threads ? threads : 1;
    l->sleep_until = TW_NEVER;
    l->start_ns = tw_rr_mono_ns();
    (void)tw_wheel_init(&l->wheel, 0);
    if (pthread_mutex_init(&l->mu, NULL) != 0)
        goto no_mu;
    if (tw_cond_init_mono_(&l->tick_cv) != 0)
        goto no_tick_cv;
    if (tw_cond_init_mono_(&l->run_cv) != 0)
        goto no_run_cv;
    if (tw_rr_thread_create(&l->tick_thread, loc_tick_main, l) != 0)
        goto no_thread;
    l->tick_started = true;
    *out = l;
    return 0;
no_thread:
    pthread_cond_destroy(&l->run_cv);
no_run_cv:
    pthread_cond_destroy(&l->tick_cv);
no_tick_cv:
    pthread_mutex_destroy(&l->mu);
no_mu:
    free(l);
    return TW_ESYS;
}

void tw_rr_local_add(struct tw_rr_local *l, struct tw_rr_item *it)
{
    pthread_mutex_lock(&l->mu);
    uint64_t now = tw_rr_mono_ns();
    uint64_t wnow = tw_wheel_now(&l->wheel);
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
    /* On the wheel it comes due at `tick`, or at the next tick if the wheel
     * has passed it. Arming a fresh node fails only for a wheel at the last
     * tick (2^64 ticks from start): the item is then ready at once, and its
     * START tells when it may run. */
    if (leave <= now || tw_node_init(&it->node) != 0 ||
        tw_arm(&l->wheel, &it->node, tick, 0, 0) != 0) {
        /* Ready at once, but not before what the wheel holds for ticks that
         * have come and the tick thread has not collected yet (it wakes late
         * on a busy machine): those leave earlier, and a catch-up handed
         * over after its leave time would otherwise overtake them. */
        loc_collect(l, loc_now_tick(l));
        loc_push(l, it);
    } else if ((tick > wnow ? tick : wnow + 1) < l->sleep_until)
        pthread_cond_signal(&l->tick_cv);
    l->held++;
    pthread_mutex_unlock(&l->mu);
}

uint64_t tw_rr_local_tick_ns(const struct tw_rr_local *l, uint64_t tick)
{
    return l->start_ns + tick * l->tick_ns;
}

void tw_rr_local_close(struct tw_rr_local *l)
{
    pthread_mutex_lock(&l->mu);
    l->stopping = true;
    pthread_cond_broadcast(&l->tick_cv);
    pthread_cond_broadcast(&l->run_cv);
    pthread_mutex_unlock(&l->mu);
    if (l->tick_started)
        pthread_join(l->tick_thread, NULL);
    l->tick_started = false;
}

struct tw_rr_item *tw_rr_local_drain(struct tw_rr_local *l)
{
    pthread_mutex_lock(&l->mu);
    /* The FIFO first (due first), then the wheel in due order. The armed
     * list is empty: executors exit only once it is. */
    struct tw_rr_item *list = l->head, **end = l->tail ? &l->tail->next : &list;
    struct tw_node *n;
    while ((n = tw_wheel_expire_next_node(&l->wheel, TW_NEVER)) != NULL) {
        struct tw_rr_item *it = tw_container_of(n, struct tw_rr_item, node);
        *end = it;
        end = &it->next;
    }
    *end = l->armed;
    l->head = l->tail = l->armed = l->armed_tail = NULL;
    l->nready = l->narmed = l->held = l->running = 0;
    pthread_mutex_unlock(&l->mu);
    return list;
}

void tw_rr_local_free(struct tw_rr_local *l)
{
    if (!l)
        return;
    tw_rr_local_close(l);
    struct tw_rr_item *it = tw_rr_local_drain(l);
    while (it) {
        struct tw_rr_item *n = it->next;
        free(it);
        it = n;
    }
    pthread_cond_destroy(&l->run_cv);
    pthread_cond_destroy(&l->tick_cv);
    pthread_mutex_destroy(&l->mu);
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

size_t tw_rr_local_armed(struct tw_rr_local *l)
{
    pthread_mutex_lock(&l->mu);
    size_t n = l->narmed;
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
