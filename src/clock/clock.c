/* SPDX-License-Identifier: MIT */
/* twheel clock service: one thread runs the expiry of many members.
 *
 * Members sit in an array (mu). Each has an atomic `due` (ns on
 * CLOCK_MONOTONIC). The thread:
 *   sleep_until = 0 (it is awake)
 *   for each member with due <= now: due = NEVER, run it without mu,
 *       then due = min(due, what run returned)
 *   next = min of every due; sleep_until = next; next = min(next, every
 *   due again); wait on the condition until next
 * tw_clock_wake lowers a member's due (CAS), then reads sleep_until, and
 * signals under mu only if the thread sleeps past the new deadline.
 * Dekker-style handshake, seq_cst on both sides: either the thread's second
 * scan sees the lowered due, or the waker sees sleep_until and signals
 * (under mu, so not before the thread waits). While the thread is awake
 * (sleep_until = 0) nobody takes mu to wake it.
 *
 * Leave waits until the thread is not running that member (`running`), so
 * a member's memory may go right after. The scan costs a load per member
 * per wake-up (1,000 members: about a microsecond); members run one after
 * the other on the one thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "clock/internal.h"
#include "common/alloc.h"
#include "common/time.h"
#include "twheel/clock.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

struct tw_clock_member {
    _Atomic uint64_t due;
    tw_clock_run_fn *run;
    void *ctx;
};

struct tw_clock {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the thread sleeps here (CLOCK_MONOTONIC) */
    pthread_cond_t left_cv; /* leavers wait here for `running` to change */
    pthread_t thread;
    struct tw_clock_member **members;
    unsigned n, cap;
    struct tw_clock_member *running;
    bool stop;
    _Atomic uint64_t sleep_until; /* 0 while the thread is awake */
    struct tw_allocator alloc;
};

uint64_t tw_clock_now_ns(void)
{
    return tw_mono_ns_();
}

static uint64_t clock_min_due(const struct tw_clock *k)
{
    uint64_t m = TW_CLOCK_NEVER;
    for (unsigned i = 0; i < k->n; i++) {
        uint64_t d = atomic_load(&k->members[i]->due);
        if (d < m)
            m = d;
    }
    return m;
}

static void clock_lower(struct tw_clock_member *m, uint64_t at)
{
    uint64_t cur = atomic_load(&m->due);
    while (at < cur && !atomic_compare_exchange_weak(&m->due, &cur, at)) {
    }
}

static void *clock_main(void *arg)
{
    struct tw_clock *k = arg;
#if defined(PR_SET_TIMERSLACK)
    /* Runners' ticks are due at exact instants: no 50 us timer slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        atomic_store(&k->sleep_until, 0);
        uint64_t now = tw_clock_now_ns();
        for (unsigned i = 0; i < k->n && !k->stop; i++) {
            struct tw_clock_member *m = k->members[i];
            if (atomic_load(&m->due) > now)
                continue;
            atomic_store(&m->due, TW_CLOCK_NEVER);
            k->running = m;
            pthread_mutex_unlock(&k->mu);
            uint64_t next = m->run(m->ctx, now);
            pthread_mutex_lock(&k->mu);
            k->running = NULL;
            clock_lower(m, next);
            pthread_cond_broadcast(&k->left_cv);
            /* The array may have changed meanwhile: a member moved into
             * slot i is looked at on the next round (its due is in the
             * minimum below, so that round comes in time). */
        }
        if (k->stop)
            break;
        uint64_t next = clock_min_due(k);
        atomic_store(&k->sleep_until, next ? next : 1);
        uint64_t again = clock_min_due(k);
        if (again < next)
            next = again;
        if (next <= tw_clock_now_ns())
            continue;
        if (next == TW_CLOCK_NEVER) {
            pthread_cond_wait(&k->cv, &k->mu);
        } else {
            tw_cond_wait_until_(&k->cv, &k->mu, next);
        }
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

int tw_clock_new(struct tw_clock **out, const struct tw_allocator *alloc)
{
    if (!out || (alloc && !alloc->fn))
        return TW_EINVAL;
    struct tw_clock *k = tw_mem_new_(alloc, sizeof *k, offsetof(struct tw_clock, alloc));
    if (!k)
        return TW_ENOMEM;
    atomic_init(&k->sleep_until, 0);
    int rc = TW_ESYS;
    if (pthread_mutex_init(&k->mu, NULL))
        goto fail;
    if (tw_cond_init_mono_(&k->cv))
        goto fail_mu;
    if (pthread_cond_init(&k->left_cv, NULL))
        goto fail_cv;
    if (pthread_create(&k->thread, NULL, clock_main, k))
        goto fail_left;
    *out = k;
    return 0;
fail_left:
    pthread_cond_destroy(&k->left_cv);
fail_cv:
    pthread_cond_destroy(&k->cv);
fail_mu:
    pthread_mutex_destroy(&k->mu);
fail:
    tw_mem_free_(&k->alloc, k, sizeof *k);
    return rc;
}

int tw_clock_free(struct tw_clock *k)
{
    if (!k)
        return 0;
    pthread_mutex_lock(&k->mu);
    if (k->n) {
        pthread_mutex_unlock(&k->mu);
        return TW_EBUSY;
    }
    k->stop = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    pthread_cond_destroy(&k->left_cv);
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    struct tw_allocator a = k->alloc;
    tw_mem_(&a, k->members, k->cap * sizeof *k->members, 0);
    tw_mem_free_(&a, k, sizeof *k);
    return 0;
}

int tw_clock_join(struct tw_clock *k, tw_clock_run_fn *run, void *ctx, uint64_t first_ns,
                  struct tw_clock_member **out)
{
    if (!k || !run || !out)
        return TW_EINVAL;
    struct tw_clock_member *m = tw_mem_alloc_(&k->alloc, sizeof *m);
    if (!m)
        return TW_ENOMEM;
    atomic_init(&m->due, TW_CLOCK_NEVER);
    m->run = run;
    m->ctx = ctx;
    pthread_mutex_lock(&k->mu);
    if (k->n == k->cap) {
        unsigned cap = k->cap ? 2 * k->cap : 8;
        struct tw_clock_member **a =
            tw_mem_(&k->alloc, k->members, k->cap * sizeof *a, cap * sizeof *a);
        if (!a) {
            pthread_mutex_unlock(&k->mu);
            tw_mem_free_(&k->alloc, m, sizeof *m);
            return TW_ENOMEM;
        }
        k->members = a;
        k->cap = cap;
    }
    k->members[k->n++] = m;
    pthread_mutex_unlock(&k->mu);
    *out = m;
    tw_clock_wake(k, m, first_ns);
    return 0;
}

void tw_clock_leave(struct tw_clock *k, struct tw_clock_member *m)
{
    if (!k || !m)
        return;
    pthread_mutex_lock(&k->mu);
    for (unsigned i = 0; i < k->n; i++) {
        if (k->members[i] == m) {
            k->members[i] = k->members[--k->n];
            break;
        }
    }
    while (k->running == m)
        pthread_cond_wait(&k->left_cv, &k->mu);
    pthread_mutex_unlock(&k->mu);
    tw_mem_free_(&k->alloc, m, sizeof *m);
}

void tw_clock_wake(struct tw_clock *k, struct tw_clock_member *m, uint64_t at_ns)
{
    if (!k || !m || atomic_load(&m->due) <= at_ns)
        return;
    clock_lower(m, at_ns);
    if (at_ns < atomic_load(&k->sleep_until)) {
        pthread_mutex_lock(&k->mu);
        pthread_cond_signal(&k->cv);
        pthread_mutex_unlock(&k->mu);
    }
}

unsigned tw_clock_members(struct tw_clock *k)
{
    if (!k)
        return 0;
    pthread_mutex_lock(&k->mu);
    unsigned n = k->n;
    pthread_mutex_unlock(&k->mu);
    return n;
}

int tw_clock_is_self_(const struct tw_clock *k)
{
    return pthread_equal(pthread_self(), k->thread);
}
