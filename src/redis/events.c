/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the worker's events hook (config on_event).
 *
 * The threads that see an event (executors: delivered, failed, dead, lease
 * lost; the claim thread: dead letters its claims made) only append a copy
 * of it to a FIFO under a mutex and signal; the events thread, started by
 * tw_redis_new when on_event is set, takes the whole FIFO at once and calls
 * on_event for each, outside the mutex. So the hook never runs on the
 * delivery path, and a slow hook delays only the hook. The FIFO is bounded
 * (TW_REDIS_EVENTS_MAX): past it an event is dropped and counted
 * (events_dropped), so a hook that blocks costs memory up to that bound and
 * nothing else. Stop: after the executors and the acknowledger have
 * exited, the events thread gives what is queued and exits
 * (tw_rr_events_stop).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

struct rr_ev {
    struct rr_ev *next;
    struct tw_redis_event ev;
    char key[];
};

struct tw_rr_events {
    struct tw_rr_bg bg; /* mu guards what follows */
    struct rr_ev *head, *tail;
    size_t n;
};

int tw_rr_bg_new(void **slot, size_t size, void *(*fn)(void *), void *arg)
{
    struct tw_rr_bg *b = calloc(1, size);
    if (!b)
        return TW_ENOMEM;
    if (pthread_mutex_init(&b->mu, NULL)) {
        free(b); /* cannot fail with glibc */
        return TW_ESYS;
    }
    if (tw_cond_init_mono_(&b->cv)) {
        pthread_mutex_destroy(&b->mu);
        free(b);
        return TW_ESYS;
    }
    *slot = b; /* before the thread starts: it reads it */
    if (tw_rr_thread_create(&b->thread, fn, arg) != 0) {
        *slot = NULL;
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
        free(b);
        return TW_ESYS;
    }
    return 0;
}

void tw_rr_bg_free(void **slot)
{
    struct tw_rr_bg *b = *slot;
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    *slot = NULL;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

void tw_rr_event_(struct tw_redis *r, enum tw_redis_event_kind kind, const char *key,
                  size_t key_len, uint32_t attempt, uint64_t due_ms)
{
    struct tw_rr_events *q = r->ev;
    struct rr_ev *e = malloc(sizeof *e + key_len + 1);
    if (!e) {
        atomic_fetch_add(&r->events_dropped, 1);
        return;
    }
    memcpy(e->key, key, key_len);
    e->key[key_len] = 0;
    e->next = NULL;
    e->ev = (struct tw_redis_event){
        .kind = kind, .key = e->key, .key_len = key_len, .attempt = attempt, .due_ms = due_ms};
    pthread_mutex_lock(&q->bg.mu);
    if (q->n >= TW_REDIS_EVENTS_MAX) {
        pthread_mutex_unlock(&q->bg.mu);
        free(e);
        atomic_fetch_add(&r->events_dropped, 1);
        return;
    }
    if (q->tail)
        q->tail->next = e;
    else
        q->head = e;
    q->tail = e;
    if (q->n++ == 0)
        pthread_cond_signal(&q->bg.cv);
    pthread_mutex_unlock(&q->bg.mu);
}

static void *rr_events_main(void *arg)
{
    struct tw_redis *r = arg;
    struct tw_rr_events *q = r->ev;
    for (;;) {
        pthread_mutex_lock(&q->bg.mu);
        while (!q->head && !q->bg.stop)
            pthread_cond_wait(&q->bg.cv, &q->bg.mu);
        struct rr_ev *e = q->head;
        bool stop = q->bg.stop;
        q->head = q->tail = NULL;
        q->n = 0;
        pthread_mutex_unlock(&q->bg.mu);
        while (e) {
            struct rr_ev *nx = e->next;
            r->cfg.on_event(r->cfg.event_arg, &e->ev);
            free(e);
            e = nx;
        }
        if (stop)
            return NULL;
    }
}

int tw_rr_events_start(struct tw_redis *r)
{
    return tw_rr_bg_new(&r->ev, sizeof(struct tw_rr_events), rr_events_main, r);
}

void tw_rr_events_stop(struct tw_redis *r)
{
    tw_rr_bg_free(&r->ev); /* the thread gives what is queued before it exits */
}
