/* SPDX-License-Identifier: MIT */
/* twheel executor pool: N threads shared by many runners.
 *
 * Each user (a runner, struct tw_pool_client) keeps its own bounded queue of
 * work under its own lock; the pool only keeps a FIFO list of the users that
 * have work (`ready`, under mu, each user at most once: `queued`). A thread
 * takes the first user, marks it busy and calls its work function, which
 * takes one item from the user's queue, posts the user again if more items
 * remain (so other threads can take them, and other users' turns come in
 * between: round robin), and runs the item with no lock held. So one user's
 * items start in its queue's order, and a user with a long backlog does not
 * starve the others. detach waits until no thread is inside the user's work
 * function, so its memory may go right after.
 *
 * Locks: mu is a leaf, except that post may be called with a user's queue
 * lock held (user queue -> mu); work is called without mu.
 */
#include <pthread.h>

#include "clock/internal.h"
#include "common/alloc.h"

struct tw_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* threads wait here for a ready user */
    pthread_cond_t idle; /* detach waits here for busy == 0 */
    struct tw_pool_client *head, *tail;
    unsigned clients;
    int quit;
    pthread_t *threads;
    unsigned nthreads, started; /* written by tw_pool_new only */
    int joined;                 /* the threads were joined (tw_pool_join_) */
    struct tw_allocator alloc;
};

static void *pool_main(void *arg)
{
    struct tw_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->quit)
            pthread_cond_wait(&p->cv, &p->mu);
        struct tw_pool_client *c = p->head;
        if (!c)
            break; /* quitting, and no user has work (none is attached) */
        p->head = c->next;
        if (!p->head)
            p->tail = NULL;
        c->next = NULL;
        c->queued = 0;
        c->busy++;
        pthread_mutex_unlock(&p->mu);
        c->work(c);
        pthread_mutex_lock(&p->mu);
        if (--c->busy == 0)
            pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_stop_threads(struct tw_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
}

int tw_pool_new(struct tw_pool **out, unsigned threads, const struct tw_allocator *alloc)
{
    if (!out || threads == 0 || threads > TW_POOL_THREADS_MAX || (alloc && !alloc->fn))
        return TW_EINVAL;
    struct tw_pool *p = tw_mem_new_(alloc, sizeof *p, offsetof(struct tw_pool, alloc));
    if (!p)
        return TW_ENOMEM;
    p->nthreads = threads;
    p->threads = tw_mem_alloc_(&p->alloc, threads * sizeof *p->threads);
    if (!p->threads) {
        tw_mem_free_(&p->alloc, p, sizeof *p);
        return TW_ENOMEM;
    }
    if (pthread_mutex_init(&p->mu, NULL))
        goto fail_threads;
    if (pthread_cond_init(&p->cv, NULL))
        goto fail_mu;
    if (pthread_cond_init(&p->idle, NULL))
        goto fail_cv;
    for (; p->started < threads; p->started++)
        if (pthread_create(&p->threads[p->started], NULL, pool_main, p))
            goto fail_started;
    *out = p;
    return 0;
fail_started:
    pool_stop_threads(p);
    pthread_cond_destroy(&p->idle);
fail_cv:
    pthread_cond_destroy(&p->cv);
fail_mu:
    pthread_mutex_destroy(&p->mu);
fail_threads:
    tw_mem_free_(&p->alloc, p->threads, threads * sizeof *p->threads);
    tw_mem_free_(&p->alloc, p, sizeof *p);
    return TW_ESYS;
}

int tw_pool_free(struct tw_pool *p)
{
    if (!p)
        return 0;
    if (tw_pool_is_self_(p))
        return TW_EBUSY;
    pthread_mutex_lock(&p->mu);
    unsigned clients = p->clients;
    pthread_mutex_unlock(&p->mu);
    if (clients)
        return TW_EBUSY;
    tw_pool_destroy_(p);
    return 0;
}

void tw_pool_join_(struct tw_pool *p)
{
    if (p->joined)
        return;
    pool_stop_threads(p);
    p->joined = 1;
}

void tw_pool_destroy_(struct tw_pool *p)
{
    tw_pool_join_(p);
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    struct tw_allocator a = p->alloc;
    tw_mem_free_(&a, p->threads, p->nthreads * sizeof *p->threads);
    tw_mem_free_(&a, p, sizeof *p);
}

unsigned tw_pool_threads(const struct tw_pool *p)
{
    return p ? p->nthreads : 0;
}

void tw_pool_attach_(struct tw_pool *p, struct tw_pool_client *c)
{
    c->next = NULL;
    c->queued = 0;
    c->busy = 0;
    pthread_mutex_lock(&p->mu);
    p->clients++;
    pthread_mutex_unlock(&p->mu);
}

void tw_pool_post_(struct tw_pool *p, struct tw_pool_client *c)
{
    pthread_mutex_lock(&p->mu);
    if (!c->queued) {
        c->queued = 1;
        c->next = NULL;
        if (p->tail)
            p->tail->next = c;
        else
            p->head = c;
        p->tail = c;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

void tw_pool_detach_(struct tw_pool *p, struct tw_pool_client *c)
{
    pthread_mutex_lock(&p->mu);
    if (c->queued) {
        struct tw_pool_client **link = &p->head, *prev = NULL;
        while (*link != c) {
            prev = *link;
            link = &(*link)->next;
        }
        *link = c->next;
        if (p->tail == c)
            p->tail = prev;
        c->queued = 0;
    }
    while (c->busy)
        pthread_cond_wait(&p->idle, &p->mu);
    p->clients--;
    pthread_mutex_unlock(&p->mu);
}

int tw_pool_is_self_(const struct tw_pool *p)
{
    pthread_t self = pthread_self();
    for (unsigned i = 0; i < p->started; i++)
        if (pthread_equal(self, p->threads[i]))
            return 1;
    return 0;
}
