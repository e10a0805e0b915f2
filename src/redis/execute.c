/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the executor threads. Each takes work from the local
 * queue (local.c): a batch of ready tasks, which it STARTs in one round
 * (start.c) and hands on, each by its answer (run now, armed in the queue
 * until its run time, back to the queue for a later round, or dropped); or
 * an armed task whose run time has come. It runs a started task (execute),
 * hands a DONE one's acknowledgement to ack.c and FAILs a FAILED one at
 * once.
 *
 * Fencing: a granted START leased the task until L = max(due, the reply's
 * clock) + lease_ms on the server's clock (scripts.c). The server read its
 * clock after the round was sent (round_ns), so at local time t its clock
 * reads at most srv_us + (t - round_ns), scaled up by the clock-rate margin
 * (redis.h: clocks): the lease surely still runs before round_ns + (L -
 * srv_us) scaled down by it. That is the deadline execute is called before
 * (and the one it is given); an executor that reaches a task later (the
 * process stopped or starved past the lease, with the task armed, or
 * waiting behind the others of its batch) drops it unrun: another worker
 * may be running it already. It is counted in `fenced`, neither
 * acknowledged nor failed: its lease runs out and it is delivered again. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "redis/internal.h"

/* Back to the local queue for a later round, wait_ns from now (while
 * stopping it stays there, and stop releases it). */
static void rr_requeue(struct tw_redis *r, struct tw_rr_item *it, uint64_t wait_ns)
{
    it->due_local_ns = tw_rr_mono_ns() + wait_ns;
    tw_rr_local_add(r->local, it);
}

/* The tasks of a batch are started together (their leases renewed then) and
 * run one after the other: a batch must run well within lease_ms. Keep a
 * running mean of execute's time and let a batch take a quarter of the lease
 * at most (1..TW_RR_RUN_BATCH tasks). */
static void rr_exec_time(struct tw_redis *r, uint64_t ns)
{
    uint64_t avg = atomic_load(&r->exec_ns);
    avg = avg ? avg - avg / 8 + ns / 8 : ns + 1;
    atomic_store(&r->exec_ns, avg);
    uint64_t budget = (uint64_t)r->cfg.lease_ms * 1000000u / 4;
    tw_rr_local_batch(r->local, (size_t)(budget / avg > TW_RR_RUN_BATCH ? TW_RR_RUN_BATCH
                                                                           : budget / avg));
}

/* When a granted start may run: the server's clock read srv_us before the
 * reply that carried it was read here at reply_ns, so after due_us - srv_us
 * more (lengthened by the clock-rate margin against a local clock running
 * fast, plus 1 us for the server's clock read in whole us) the server's
 * clock has surely passed the due time. 0: at once. */
static uint64_t rr_run_at(uint64_t due_ms, uint64_t srv_us, uint64_t reply_ns)
{
    uint64_t due_us = due_ms * 1000u;
    if (srv_us >= due_us)
        return 0;
    return reply_ns + tw_rr_rate_up((due_us - srv_us) * 1000u) + 1000u;
}

/* Local time before which that lease surely runs (see the top), less 1 us
 * for the server's clock read in whole us. */
static uint64_t rr_fence_ns(const struct tw_redis *r, const struct tw_rr_item *it)
{
    uint64_t end_us = tw_rr_lease_end_ms(r, it) * 1000u;
    uint64_t left = end_us > it->srv_us ? tw_rr_rate_down((end_us - it->srv_us) * 1000u) : 0;
    return left > 1000u ? it->round_ns + left - 1000u : it->round_ns;
}

/* Run one started item at (or after) it->run_ns, on executor `thread`: count
 * its lateness, execute it, hand the acknowledgement of DONE to ack.c, FAIL
 * it at once when FAILED. For the items of its own round due already, and
 * for armed ones the local queue hands out on whichever executor woke
 * first. */
static void rr_exec_one(struct tw_redis *r, struct tw_rr_item *it, unsigned thread)
{
    struct tw_rr_router *rt = &r->exec_rt[thread];
    uint64_t fence = rr_fence_ns(r, it);
    uint64_t t1 = tw_rr_mono_ns();
    if (t1 >= fence) { /* the lease may have ended: not ours to run (see the top) */
        atomic_fetch_add(&r->fenced, 1);
        tw_rr_event(r, TW_REDIS_EVENT_LEASE_LOST, it->data, it->key_len, (uint32_t)it->started,
                    it->due_ms);
        free(it);
        return;
    }
    /* lateness as execute sees it: the server's clock now, best estimate,
     * within what the START round proves (after its reply, before its send) */
    uint64_t due_us = it->due_ms * 1000u;
    uint64_t lo = it->srv_us + (t1 - it->reply_ns) / 1000u;
    uint64_t hi = it->srv_us + tw_rr_rate_up(t1 - it->round_ns) / 1000u + 1u;
    uint64_t srv = tw_rr_server_us(r, it->part, t1, lo, hi);
    tw_rr_note_late(r, srv > due_us ? srv - due_us : 0);
#ifdef TW_RR_TRACE
    tw_rr_trace_note(r, it, it->take_ns, it->sent_ns, it->reply_ns, it->srv_us, t1, it->batch,
                  thread);
#endif
    if ((uint32_t)it->started > 1) /* above bit 32: a per-task max_attempts (dead.c) */
        atomic_fetch_add(&r->redelivered, 1);
    struct tw_redis_task t = {.key = it->data,
                              .key_len = it->key_len,
                              .payload = tw_rr_payload(it),
                              .payload_len = it->payload_len,
                              .due_ms = it->due_ms,
                              .attempt = (uint32_t)it->started,
                              .token = it->token,
                              .lease_end_ms = tw_rr_lease_end_ms(r, it),
                              .lease_deadline_ns = fence};
    enum tw_redis_result res = r->cfg.execute(r->cfg.arg, &t);
    rr_exec_time(r, tw_rr_mono_ns() - t1);
    if (res == TW_REDIS_DONE) {
        tw_rr_fail_text_forget();
        tw_rr_event(r, TW_REDIS_EVENT_DELIVERED, it->data, it->key_len, t.attempt, it->due_ms);
        tw_rr_ack_push(r, it); /* acknowledged in the acknowledger's next batch */
        return;
    }
    atomic_fetch_add(&r->failed, 1);
    tw_rr_event(r, TW_REDIS_EVENT_FAILED, it->data, it->key_len, t.attempt, it->due_ms);
    char kb[6][TW_RR_KEYBUF], base[16], max[16], maxa[16];
    const char *av[12];
    size_t al[12];
    tw_rr_keys(r, it->part, kb, av, al);
    av[9] = av[5];
    al[9] = al[5];
    av[5] = it->data;
    al[5] = it->key_len;
    av[6] = tw_rr_token_digits(it, &al[6]);
    al[7] = (size_t)snprintf(base, sizeof base, "%u", r->cfg.retry_base_ms);
    av[7] = base;
    al[8] = (size_t)snprintf(max, sizeof max, "%u", r->cfg.retry_max_ms);
    av[8] = max;
    al[10] = (size_t)snprintf(maxa, sizeof maxa, "%u", r->cfg.max_attempts); /* dead.c */
    av[10] = maxa;
    av[11] = tw_rr_fail_text_take(&al[11]);
    redisReply *x;
    if (tw_rr_eval(rt, TW_RR_FAIL, r->slots[it->part], TW_RR_NKEYS, 7, av, al, &x) == 0) {
        long long ok = 0;
        if (tw_rr_int_reply(x, &ok) != 0 || (ok != 1 && ok != 2))
            atomic_fetch_add(&r->stale_acks, 1);
        if (ok == 2) {
            atomic_fetch_add(&r->dead_n, 1);
            tw_rr_event(r, TW_REDIS_EVENT_DEAD, it->data, it->key_len, t.attempt, it->due_ms);
        }
        freeReplyObject(x);
    }
    free(it);
}

/* A round: a batch of held items whose start time has come (executor
 * `thread`): START them, then hand each
 * answered item on at once: a started task in order of the time it may run
 * at (a start is granted up to start_ahead_ms before its due time), those
 * due already here at once (rr_exec_one), the others through the worker's
 * armed list (local.c); one not due yet by the server's clock back to the
 * queue for that long; one whose lease is gone dropped.
 *
 * Unanswered items (no reply for their call: Redis, or one master, away).
 * A round answered in part (a cluster with a master away, or a standalone
 * batch of several calls of which a later one failed) hands on what was
 * answered and puts the unanswered items back into the queue, due again
 * after rr_retry_ns: a later round (any executor's) STARTs them with what
 * comes due then. Retrying them here would hold the answered tasks and
 * this executor until the away master is back (up to lease_ms / 2); every
 * executor would end up in such a loop, and the healthy masters' tasks
 * would wait for them. So no executor waits with started tasks of its own
 * (with threads = 1 it goes back to its armed items at once, local.c), and
 * stop is never held by a retry.
 * A round with no answer at all is retried here every TW_RR_RETRY_MS, the
 * batch kept, when Redis looks wholly away: a standalone server, or a
 * cluster none of whose connections is left (a failed one is closed).
 * Putting its items back behind the ones that come due meanwhile would
 * start later tasks first once Redis is back (out of due order). That
 * gives up while stopping, or after lease_ms / 2 (the leases are about
 * gone: the items go back to the queue, their STARTs will tell), or when
 * an armed item comes due before the next try and no other executor is
 * idle to run it (it needs no Redis, and must run at its time, within its
 * lease: the round's items go back to the queue). In a
 * cluster with another master still connected, a round with no answer (its
 * items all on the away master) goes back to the queue instead, like the
 * unanswered part of a round: redis.h promises no order for the tasks a
 * worker held when their master went, and an executor must not wait
 * seconds for that master while the others' tasks come due. So too while
 * a master is silent (silent.c): a round of its tasks alone sends nothing
 * and opens no connection, and must not take it for Redis wholly away.
 * Each round's redirects, reconnects and backoff end after
 * RR_START_RETRY_MS (router retry_ms, 5 ms), not command_timeout_ms: a
 * master that refuses connections costs a round that much; the retry is
 * the next round's (a redirect is still followed at once). 5 ms, not the
 * claim round's 20: an away master's held tasks cycle through many rounds,
 * each spending that much of an executor. A round gives up at once when
 * the node's connect backoff ends later (router.c): sleeping out the 5 ms
 * in every such round would take the executors from the healthy masters'
 * tasks.
 * A master that accepts connections but does not answer (stopped, or cut
 * off while the socket stays open) holds a round silent_ms at most
 * in a cluster: the replies are read as they come and that master's calls
 * are then left unanswered (silent.c); later rounds leave its partitions
 * out until it answers again, so its tasks wait here, requeued like any
 * unanswered ones. */
#define RR_START_RETRY_MS (TW_RR_RETRY_MS / 20)

/* How long an unanswered item waits before a later round tries it again:
 * TW_RR_RETRY_MS, or until its node may be tried again if this executor's
 * router backs off from it (up to 1 s for a node refusing connections: a
 * round sent before would fail on it at once again). Held tasks of a master
 * that is down then cost a round each per backoff, not per TW_RR_RETRY_MS:
 * each such round spends RR_START_RETRY_MS of an executor. */
static uint64_t rr_retry_ns(const struct tw_redis *r, const struct tw_rr_router *rt,
                            const struct tw_rr_item *it)
{
    uint64_t w = (uint64_t)TW_RR_RETRY_MS * 1000000u;
    int nd = tw_rr_node_of(rt, r->slots[it->part]);
    if (nd >= 0 && (size_t)nd < rt->nnodes && !rt->nodes[nd].c) {
        uint64_t now = tw_rr_mono_ns(), at = rt->nodes[nd].next_try_ns;
        if (at > now + w)
            w = at - now;
    }
    return w;
}

static void rr_run(struct tw_redis *r, struct tw_rr_item **v, size_t n, unsigned thread)
{
    struct tw_rr_router *rt = &r->exec_rt[thread];
    struct tw_rr_round *e = &r->round[thread];
    uint64_t at[TW_RR_RUN_BATCH];
    size_t run[TW_RR_RUN_BATCH], nrun = 0;
    e->r = r;
    e->starting = true;
    e->v = v;
    e->n = n;
#ifdef TW_RR_TRACE
    uint64_t t_take = tw_rr_mono_ns(), t_sent;
#endif
    rt->retry_ms = RR_START_RETRY_MS < r->cfg.command_timeout_ms ? RR_START_RETRY_MS : 0;
    tw_rr_start_round(e, rt);
    uint64_t t0 = tw_rr_mono_ns(), give_up = (uint64_t)r->cfg.lease_ms * 500000u;
    for (;;) {
        bool none = true;
        for (size_t i = 0; i < n && none; i++)
            none = e->st[i] == -2;
        uint64_t now = tw_rr_mono_ns();
        if (!none || (rt->cluster && (tw_rr_any_connected(rt) || atomic_load(&r->nsilent))) ||
            atomic_load(&r->closed) || now - t0 >= give_up ||
            tw_rr_local_armed_waits(r->local, now + (uint64_t)TW_RR_RETRY_MS * 1000000u))
            break;
        tw_rr_sleep_ms(TW_RR_RETRY_MS); /* Redis away: the same batch again */
        tw_rr_start_round(e, rt);
    }
    rt->retry_ms = 0;
#ifdef TW_RR_TRACE
    t_sent = e->sent_ns;
#endif
    for (size_t i = 0; i < n; i++) {
        struct tw_rr_item *it = v[i];
        if (e->st[i] == -2) { /* unanswered: a later round tries again */
            it->unanswered = 1;
            rr_requeue(r, it, rr_retry_ns(r, rt, it));
            continue;
        }
        if (e->st[i] == 0) { /* not due within start_ahead_ms by the server's clock */
            it->unanswered = 0; /* its wait is its due time again, not a retry's */
            rr_requeue(r, it, (uint64_t)(e->arg[i] > 0 ? e->arg[i] : 1) * 1000u);
            continue;
        }
        if (e->st[i] != 1) {
            atomic_fetch_add(&r->lost_leases, 1);
            tw_rr_event(r, TW_REDIS_EVENT_LEASE_LOST, it->data, it->key_len,
                        (uint32_t)it->attempt + 1, it->due_ms);
            free(it);
            continue;
        }
        /* started: run in the order of the times they may run at (stable:
         * the ones due already, e.g. a catch-up, keep the batch's order) */
        at[i] = rr_run_at(it->due_ms, e->now[i], e->reply_ns[i]);
        size_t j = nrun++;
        while (j > 0 && at[run[j - 1]] > at[i]) {
            run[j] = run[j - 1];
            j--;
        }
        run[j] = i;
    }
    /* Those not due yet go to the armed list first (any idle executor
     * runs each at its time, local.c), then this one runs the rest. */
    uint64_t t_arm = tw_rr_mono_ns();
    size_t nnow = 0;
    for (size_t q = 0; q < nrun; q++) {
        struct tw_rr_item *it = v[run[q]];
        it->run_ns = at[run[q]];
        it->srv_us = e->now[run[q]];
        it->reply_ns = e->reply_ns[run[q]];
        it->round_ns = e->sent_ns;
        it->started = it->attempt + 1; /* what START counted (scripts.c) */
#ifdef TW_RR_TRACE
        it->take_ns = t_take;
        it->sent_ns = t_sent;
        it->batch = (uint32_t)n;
#endif
        if (it->run_ns > t_arm)
            tw_rr_local_arm(r->local, it);
        else
            run[nnow++] = run[q];
    }
    for (size_t q = 0; q < nnow; q++)
        rr_exec_one(r, v[run[q]], thread);
}

/* An executor thread: rounds and runs until the local queue is closed and
 * its armed items have run. */
void *tw_rr_exec_main(void *arg)
{
    struct tw_rr_round *e = arg;
    struct tw_redis *r = e->r;
    unsigned me = (unsigned)(e - r->round);
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL); /* it waits for run times */
    struct tw_rr_item *v[TW_RR_RUN_BATCH];
    struct tw_rr_waiter w = {0};
    bool started = false;
    size_t n = 0;
    while ((n = tw_rr_local_take(r->local, &w, n, v, &started)) != 0) {
        if (started)
            rr_exec_one(r, v[0], me);
        else
            rr_run(r, v, n, me);
    }
    return NULL;
}
