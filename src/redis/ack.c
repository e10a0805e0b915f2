/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the delayed acknowledgements. A DONE task's
 * acknowledgement waits in its partition's pending list, and the
 * acknowledger thread sends them in batches (START calls that start
 * nothing, start.c); the answers are settled here (counted, or pushed
 * back).
 *
 * ACKs go in batches. An executor does not acknowledge a finished task at
 * once: the item goes to its partition's pending list, and once the oldest
 * pending one has waited ack_delay (100 ms, at most lease_ms / 8) the
 * acknowledger sends every pending one, of every partition, in rounds of up
 * to TW_RR_ACK_MAX (back to back): a partition's group is one ZREM of the
 * lease members and one HDEL for all its acknowledgements (HMGET and a
 * ZMSCORE when one is stale or a lease may have ended: scripts.c, START),
 * so the commands and calls per task fall
 * as the rate grows; stop sends the rest.
 * Why not in START calls (a partition's acknowledgements added to a START
 * group of the same partition): at 1e5 tasks a minute on 16 partitions a
 * START group is about one task, so each acknowledgement would cost a
 * group's HDEL and ZREM; a batch every 100 ms costs about one command per
 * acknowledgement, and a START group is one ZADD alone.
 * The price, at-least-once: a worker that dies has up to ack_delay more of
 * finished tasks unacknowledged, delivered again when their leases end (the
 * same as an acknowledgement lost on the way); and a finished task stays in
 * Redis (pending, in stats) up to ack_delay longer.
 *
 * Lost replies. An acknowledgement written whole whose reply was lost
 * (router.c) may have deleted its task: it is marked (ack_lost) and goes
 * back to its list while the acknowledger runs, until an answer comes.
 * START answers 1 (deleted now), 0 (not our lease: stale) or 2 (absent).
 * Absent after a lost try is taken as that try's own deletion, a delivery;
 * absent otherwise is stale (a remove, or another worker that acknowledged
 * the task after our lease ended). Exact
 * but for a task that, between the lost try and its answer, was both not
 * deleted by that try and deleted by someone else: counted delivered, not
 * stale. The price: nothing on the way that works (the answer was already
 * read; 2 tells apart what 0 lumped together). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "redis/internal.h"

#define RR_ACK_PENDING_MAX 4096 /* more waiting: the acknowledger sends them at once */

/* Put an acknowledgement at the end of its pending list (its ack_lost kept). */
static void rr_ack_queue(struct tw_redis *r, struct tw_rr_item *it)
{
    uint32_t p = tw_rr_ack_list(r, it->part);
    it->next = NULL;
    it->due_local_ns = tw_rr_mono_ns(); /* pending since (the field is free now) */
    pthread_mutex_lock(&r->ack_mu);
    if (r->ack_tail[p])
        r->ack_tail[p]->next = it;
    else
        r->ack_head[p] = it;
    r->ack_tail[p] = it;
    if (r->ack_n++ == 0 || r->ack_n >= RR_ACK_PENDING_MAX)
        pthread_cond_signal(&r->ack_cv); /* arm the acknowledger's timer, or flush now */
    pthread_mutex_unlock(&r->ack_mu);
}

void tw_rr_ack_push(struct tw_redis *r, struct tw_rr_item *it)
{
    it->ack_lost = 0;
    rr_ack_queue(r, it);
}

static void rr_ack_count(struct tw_redis *r, const struct tw_rr_item *it, long long st)
{
    if (st == 1 || (st == 2 && it->ack_lost)) /* deleted now, or by the lost try */
        atomic_fetch_add(&r->delivered, 1);
    else if (st == 0 || st == 2)
        atomic_fetch_add(&r->stale_acks, 1);
    /* no answer: the lease runs out and the task is delivered again (or the
     * lost try deleted it: uncounted) */
}

/* Count and free the answered acknowledgements of a round; the unanswered
 * ones go back to their lists (all, or the lost ones only; a silent
 * master's), or are dropped. */
static void rr_ack_settle(struct tw_rr_round *e, bool requeue, bool requeue_lost)
{
    for (size_t j = 0; j < e->nack; j++) {
        struct tw_rr_item *it = e->ack[j];
        /* no answer: tried again (a silent master's once it answers, silent.c) */
        if (e->ack_st[j] == -2 &&
            (requeue || (requeue_lost && it->ack_lost) || tw_rr_silent_part(e->r, it->part))) {
            rr_ack_queue(e->r, it);
            continue;
        }
        rr_ack_count(e->r, it, e->ack_st[j]);
        free(it);
    }
    e->nack = 0;
}

/* The acknowledger thread: once the oldest pending acknowledgement has waited
 * ack_delay (or at once: stopping, or too many pending), sends every pending
 * one, up to TW_RR_ACK_MAX items of TW_RR_GROUPS_MAX partitions per round. */
void *tw_rr_ack_main(void *arg)
{
    struct tw_redis *r = arg;
    struct tw_rr_round *e = r->ack_round;
    struct tw_rr_item *v[TW_RR_ACK_MAX];
    uint32_t P = r->cfg.partitions, from = 0;
    uint64_t flush_to = 0; /* pending since this or earlier: sent now */
    pthread_mutex_lock(&r->ack_mu);
    for (;;) {
        uint64_t now = tw_rr_mono_ns(), next = UINT64_MAX;
        size_t n = 0;
        bool stop = r->ack_stop, crowded = r->ack_n >= RR_ACK_PENDING_MAX;
        if (r->ack_n) {
            bool all = stop || crowded;
            /* once the oldest has waited ack_delay, every one pending goes
             * with it (rounds back to back): a batch per ack_delay, not a
             * call per acknowledgement as each comes of age */
            for (uint32_t p = 0; p < P && !all; p++) {
                struct tw_rr_item *h = r->ack_head[p];
                if (h && h->due_local_ns > flush_to && now - h->due_local_ns >= r->ack_delay_ns &&
                    !tw_rr_silent_part(r, p))
                    flush_to = now;
            }
            size_t parts = 0; /* a round's groups */
            for (uint32_t i = 0; i < P && n < TW_RR_ACK_MAX && parts < TW_RR_GROUPS_MAX; i++) {
                uint32_t p = (from + i) % P;
                if (r->ack_head[p] && tw_rr_silent_part(r, p)) { /* kept until it answers */
                    uint64_t again = now + tw_rr_patience_ns(r);
                    next = again < next ? again : next;
                    continue;
                }
                /* the oldest first, those pending since flush_to or before */
                size_t n0 = n;
                while (n < TW_RR_ACK_MAX && r->ack_head[p]) {
                    struct tw_rr_item *h = r->ack_head[p];
                    if (!all && h->due_local_ns > flush_to) {
                        if (h->due_local_ns + r->ack_delay_ns < next)
                            next = h->due_local_ns + r->ack_delay_ns;
                        break;
                    }
                    n += tw_rr_ack_take(r, p, v + n, 1);
                }
                parts += n > n0;
            }
            from = (from + 1) % P;
        }
        if (n) {
            pthread_mutex_unlock(&r->ack_mu);
            e->r = r;
            e->starting = false;
            e->v = v;
            e->n = n;
            tw_rr_start_round(e, &r->ack_rt);
            bool answered = false;
            for (size_t j = 0; j < e->nack; j++)
                answered = answered || e->ack_st[j] != -2;
            if (!answered) /* a connection that died with a restart fails at once: again */
                tw_rr_start_round(e, &r->ack_rt);
            answered = false;
            for (size_t j = 0; j < e->nack; j++)
                answered = answered || e->ack_st[j] != -2;
            /* the lost ones again until answered, but not at stop: a master
             * that keeps losing them would hold it; the others unanswered
             * with the next batch, but not while too many wait (that batch
             * would follow at once) */
            rr_ack_settle(e, !stop && !crowded, !stop);
            pthread_mutex_lock(&r->ack_mu);
            if (stop && !answered) { /* Redis away at stop: the leases will run out */
                for (uint32_t p = 0; p < P; p++)
                    while (r->ack_head[p]) {
                        struct tw_rr_item *it = r->ack_head[p];
                        r->ack_head[p] = it->next;
                        free(it);
                    }
                for (uint32_t p = 0; p < P; p++)
                    r->ack_tail[p] = NULL;
                r->ack_n = 0;
            }
            continue; /* more may be due */
        }
        if (stop)
            break;
        if (next == UINT64_MAX) {
            pthread_cond_wait(&r->ack_cv, &r->ack_mu);
        } else {
            (void)tw_cond_wait_until_(&r->ack_cv, &r->ack_mu, next);
        }
    }
    pthread_mutex_unlock(&r->ack_mu);
    return NULL;
}
