/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the claim thread. Claim rounds (every window/2, and
 * for notified partitions), their pacing, the frontier that hands claimed
 * tasks to the local queue (local.c) in due order, the catch-up after a
 * reconnect, and the recovery of held tasks whose holder is gone.
 *
 * Recovery. A claimed task is held with a short lease, the hold, which ends
 * hold_ms after its due time (scripts.c: CLAIM); its START lengthens it.
 * A hold that runs out means its worker died, stalled, or never got the
 * claim's answer; any claim of the partition moves it back to due. Refill
 * rounds come every window/2, so each claim also answers the earliest lease
 * end left in its partition, and the claim thread claims that partition
 * again at that time (recover_ns: when the server's clock has surely passed
 * it, offset.c), at most once per hold_ms / RR_RECOVER_DIV (8) per
 * partition (rr_recover_gap): a dead worker's held tasks, whose holds end one after another,
 * come back in a claim per gap, not one per task. A task so comes back
 * within about hold_ms + gap of its due time, whichever worker held it. In
 * the steady state the earliest end is that of the next task to start
 * (starts lengthen the others'), about hold_ms ahead: a claim per
 * partition per hold_ms at most, most of them the refill's own. During a
 * paced refill the wait between its calls ends for a recovery too
 * (rr_pace). A worker at its fill claims nothing of its window (nor
 * recovers: the others do), only its shares (below); and its fill counts
 * execute's time (rr_ready_max), so that a live worker starts what it
 * holds well within the hold.
 *
 * Sharing. A refill takes every task that enters its window, and rounds of
 * different workers do not interleave by design: at one partition a
 * worker's round may take every task due in the next second. With a cheap
 * execute that is what saves Redis work (fewer, fuller START groups); with
 * a slow one, tasks due in that second wait for that worker's executors
 * while the other workers' sit idle, and once it falls behind (at its
 * fill, it claims nothing) the others take whole windows and fall behind
 * in turn. So a worker whose executors run fewer than RR_SHARE_MAX tasks
 * in W (at execute's measured mean time) sends a share, 4/5 of that pace
 * over the partitions (rr_share): once its claim has taken the window,
 * CLAIM goes on to the buckets up to a window past it (the zone; at most
 * RR_SHARE_ZONE_MAX_MS) and takes of each what the share has room for:
 * the worker counts what it took of each zone bucket (share_tab, a slot a
 * bucket) and sends the counts with every claim, so a bucket gives each
 * worker its share once, whether its tasks were set before the bucket
 * entered the zone or after. A worker at its fill still claims its shares
 * (rr_claim_shares: its backlog is due now, the zone a window later).
 * Each worker's rounds (every window/2) pass a bucket's time in the zone,
 * so every worker is offered its share of every bucket before the rest is
 * taken whole when the bucket enters a window: a bucket is split about by
 * the workers' paces, and what is left (more than the shares) is claimed
 * as before, window/4 or more ahead (a partition's claims are at most 3/4
 * of a window apart). A share is the head of its bucket's list (the tasks
 * set into it first; LTRIM keeps the rest), not every n-th task: striding
 * would rewrite the list at every claim. Until a worker has timed an
 * execute its share is 0 and it takes whole buckets. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis/internal.h"

#define RR_BATCH 256         /* tasks per claim call */
/* Tasks per claim call of a paced refill (rr_pace): a few ms of Redis at
 * most, which starting ahead absorbs (start_ahead_ms), and enough that a
 * bucket of a dense partition goes to one worker in a few calls: the
 * worker that holds a bucket's tasks STARTs them in fewer, fuller groups
 * than two workers holding every other slice of it. */
#define RR_PACED_BATCH 1024
#define RR_BATCH_BYTES (4u << 20)
#define RR_HELD_MAX 65536    /* claimed tasks a worker holds before it stops claiming */
#define RR_READY_PER_THREAD (4 * TW_RR_RUN_BATCH) /* due tasks waiting per executor, at most */
#define RR_CAPPED_RETRY_NS 5000000u /* a worker at its fill claims again this soon */
#define RR_OFF_EPOCH_NS 5000000000ull /* clock offset samples are kept 5-10 s */
#define RR_CLAIM_RETRY_MS (TW_RR_RETRY_MS / 5) /* a claim round gives up on a master away */
#define RR_RECOVER_DIV 8 /* a partition is claimed for recovery once per hold_ms / this */
#define RR_READY_MIN 4   /* due tasks waiting per executor, at least */
#define RR_SHARE_MAX 16384 /* tasks a worker runs in W, at which it takes no share */
#define RR_SHARE_ZONE_MAX_MS 10000 /* the zone: window_ms past the window, at most this */
/* Buckets the zone can span at once, and a slot each (rr_share_slot) */
#define RR_SHARE_SLOTS (RR_SHARE_ZONE_MAX_MS / TW_RR_BUCKET_MS + 3)
#define RR_SHARES_ONLY_GAP_NS (TW_RR_BUCKET_MS * 500000ull) /* W/2 between them */

/* The least time between two claims of a partition for recovery (see the top). */
static uint64_t rr_recover_gap(const struct tw_redis *r)
{
    return (uint64_t)r->cfg.hold_ms * 1000000u / RR_RECOVER_DIV;
}

static int rr_item_cmp(const void *a, const void *b)
{
    const struct tw_rr_item *x = *(struct tw_rr_item *const *)a, *y = *(struct tw_rr_item *const *)b;
    if (x->due_ms != y->due_ms)
        return x->due_ms < y->due_ms ? -1 : 1;
    return x->due_local_ns < y->due_local_ns ? -1 : x->due_local_ns > y->due_local_ns;
}

static int rr_claim_reply(struct tw_redis *r, uint32_t p, unsigned batch, unsigned share,
                          struct tw_rr_batch *b, redisReply *x);

/* The share (see the top: Sharing): tasks of one due bucket of one
 * partition that this worker takes beyond its window, 4/5 of what its
 * executors run in W at execute's mean time over the partitions; 0 (no
 * share: the buckets wait for the window) while that time is unknown, when
 * the worker runs RR_SHARE_MAX tasks or more in W, or less than a task a
 * partition. */
static unsigned rr_share(const struct tw_redis *r)
{
    uint64_t ex = atomic_load(&r->exec_ns);
    if (!ex)
        return 0;
    uint64_t pace = (uint64_t)r->cfg.threads * TW_RR_BUCKET_MS * 1000000u / ex;
    if (pace >= RR_SHARE_MAX)
        return 0;
    return (unsigned)(pace * 4u / 5u / r->cfg.partitions);
}

/* How far past the window the shares reach, ms. */
static uint64_t rr_share_zone_ms(const struct tw_redis *r)
{
    return r->cfg.window_ms < RR_SHARE_ZONE_MAX_MS ? r->cfg.window_ms : RR_SHARE_ZONE_MAX_MS;
}

/* The slot of bucket b of partition p (emptied if it held an older bucket:
 * the zone spans fewer buckets than there are slots). */
static struct tw_rr_share_slot *rr_share_slot(struct tw_redis *r, uint32_t p, uint64_t b)
{
    struct tw_rr_share_slot *s = &r->share_tab[(size_t)p * RR_SHARE_SLOTS + b % RR_SHARE_SLOTS];
    if (s->bucket != b) {
        s->bucket = b;
        s->taken = 0;
    }
    return s;
}

/* One claim call on partition p; appends the items to b. Returns the number
 * claimed (>= 0) or an error (TW_RR_EAWAIT: its reply comes later, silent.c).
 * shares_only: nothing of the window, only this worker's shares beyond it
 * (rr_claim_shares). */
static int rr_claim_part(struct tw_redis *r, uint32_t p, unsigned batch, struct tw_rr_batch *b,
                         bool shares_only)
{
    char kb[6][TW_RR_KEYBUF], win[16], n[16], lease[16], bytes[16], hold[16], maxa[16];
    char share[16], zone[16], taken[RR_SHARE_SLOTS * 32 + 1];
    const char *av[15];
    size_t al[15];
    tw_rr_keys(r, p, kb, av, al);
    al[5] = (size_t)snprintf(win, sizeof win, "%u", r->cfg.window_ms);
    av[5] = win;
    al[6] = (size_t)snprintf(n, sizeof n, "%u", batch);
    av[6] = n;
    al[7] = (size_t)snprintf(lease, sizeof lease, "%u", r->cfg.lease_ms);
    av[7] = lease;
    al[8] = (size_t)snprintf(bytes, sizeof bytes, "%u", RR_BATCH_BYTES);
    av[8] = bytes;
    al[9] = (size_t)snprintf(hold, sizeof hold, "%u", r->cfg.hold_ms);
    av[9] = hold;
    al[10] = (size_t)snprintf(maxa, sizeof maxa, "%u", r->cfg.max_attempts);
    av[10] = maxa;
    unsigned sh = rr_share(r);
    al[11] = (size_t)snprintf(share, sizeof share, "%u", sh);
    av[11] = share;
    size_t tl = 0; /* "bucket:taken ..." of this partition's slots */
    for (size_t i = 0; sh && i < RR_SHARE_SLOTS; i++) {
        const struct tw_rr_share_slot *t = &r->share_tab[(size_t)p * RR_SHARE_SLOTS + i];
        if (t->taken)
            tl += (size_t)snprintf(taken + tl, sizeof taken - tl, "%" PRIu64 ":%" PRIu32 " ",
                                   t->bucket, t->taken);
    }
    taken[tl] = 0;
    av[12] = taken;
    al[12] = tl;
    av[13] = shares_only ? "1" : "0";
    al[13] = 1;
    al[14] = (size_t)snprintf(zone, sizeof zone, "%" PRIu64, rr_share_zone_ms(r));
    av[14] = zone;
    redisReply *x;
    uint64_t rc0 = r->claim_rt.reconnects;
#ifdef TW_RR_TRACE
    uint64_t t_sent = tw_rr_mono_ns();
#endif
    int rc = tw_rr_await_claim(r, p, batch, av, al, &x);
#ifdef TW_RR_TRACE
    if (rc == 0) {
        uint64_t t_done = tw_rr_mono_ns();
        pthread_mutex_lock(&r->hist_mu);
        if (r->ntrace < r->trace_cap)
            r->trace[r->ntrace++] = (struct tw_rr_trace){0, 0, 0, 0, t_sent, t_done,
                                                      x->type == REDIS_REPLY_ARRAY && x->elements
                                                          ? (uint64_t)x->element[0]->integer
                                                          : 0,
                                                      0, 0, (uint32_t)(x->elements - 3) / 2, 9999};
        pthread_mutex_unlock(&r->hist_mu);
    }
#endif
    atomic_fetch_add(&r->worker_reconnects, r->claim_rt.reconnects - rc0);
    atomic_fetch_add(&r->claims, 1);
    if (rc)
        return rc;
    return rr_claim_reply(r, p, batch, sh, b, x);
}

/* A claim's reply x (freed here) on partition p, sent with that batch and
 * share: its items appended to b. Returns the number claimed (>= 0) or an
 * error. */
static int rr_claim_reply(struct tw_redis *r, uint32_t p, unsigned batch, unsigned share,
                          struct tw_rr_batch *b, redisReply *x)
{
    uint64_t t_reply = tw_rr_mono_ns();
    if (x->type != REDIS_REPLY_ARRAY || x->elements < 3 || (x->elements - 3) % 2 != 0 ||
        x->element[0]->type != REDIS_REPLY_INTEGER || tw_rr_dead_claimed(r, p, x->element[1]) ||
        x->element[x->elements - 1]->type != REDIS_REPLY_INTEGER) {
        freeReplyObject(x);
        return TW_EPROTO;
    }
    uint64_t now_us = (uint64_t)x->element[0]->integer;
    tw_rr_clock_sample(r, p, now_us, t_reply);
    /* claim p again when its earliest lease ends (see the top) */
    long long end = x->element[x->elements - 1]->integer;
    uint64_t at = end < 0 ? UINT64_MAX : tw_rr_local_due(r, p, (uint64_t)end);
    r->recover_ns[p] = at < t_reply + rr_recover_gap(r) ? t_reply + rr_recover_gap(r) : at;
    if (r->recover_ns[p] < r->recover_next)
        r->recover_next = r->recover_ns[p];
    size_t k = (x->elements - 3) / 2;
    if (b->n + k > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + k)
            cap *= 2;
        struct tw_rr_item **v = realloc(b->v, cap * sizeof *v);
        if (!v) {
            freeReplyObject(x);
            return TW_ENOMEM; /* claimed tasks come back when their leases end */
        }
        b->v = v;
        b->cap = cap;
    }
    size_t got = 0, n0 = b->n;
    uint64_t last = 0;
    for (size_t i = 0; i < k; i++) {
        redisReply **e = x->element + 2 + 2 * i; /* key, record */
        uint64_t f[3]; /* token, attempt, due */
        size_t off;
        if (e[0]->type != REDIS_REPLY_STRING || e[1]->type != REDIS_REPLY_STRING ||
            tw_rr_parse_fields(e[1]->str, e[1]->len, 3, f, &off))
            continue; /* not a record: its lease will expire */
        const char *pay = e[1]->str + off;
        size_t pl = e[1]->len - off;
        /* the lease member's token: the record's own digits, as CLAIM wrote it */
        size_t dl = (size_t)((const char *)memchr(e[1]->str, ' ', e[1]->len) - e[1]->str);
        size_t tl = 1 + dl; /* ':' and the digits */
        struct tw_rr_item *it = malloc(sizeof *it + e[0]->len + tl + pl + 1);
        if (!it)
            continue; /* its lease will expire and it comes back */
        /* every field zero (unanswered, ack_lost, started), then this claim's */
        memset(it, 0, sizeof *it);
        it->part = p;
        it->due_ms = f[2];
        it->token = f[0];
        it->attempt = f[1];
        it->key_len = (uint32_t)e[0]->len; /* a Redis string is at most 512 MB */
        it->payload_len = (uint32_t)pl;
        it->tok_len = (uint16_t)tl;
        memcpy(it->data, e[0]->str, e[0]->len);
        it->data[e[0]->len] = ':';
        memcpy(it->data + e[0]->len + 1, e[1]->str, dl);
        memcpy(tw_rr_payload(it), pay, pl);
        tw_rr_payload(it)[pl] = 0;
        it->due_local_ns = tw_rr_local_due(r, p, it->due_ms);
        last = it->due_ms > last ? it->due_ms : last;
        b->v[b->n++] = it;
        r->carry_n[p]++;
        got++;
    }
    /* A bucket's tasks come in the order they were put there (scripts.c):
     * this claim's by due time. CLAIM takes whole buckets, so what a full
     * one left is due after its last task; but for a bucket it split, due
     * window/4 ahead or more, whose tasks go to the wheel (which orders
     * them) before any is due. */
    if (b->n - n0 > 1)
        qsort(b->v + n0, b->n - n0, sizeof *b->v, rr_item_cmp);
    r->last_full[p] = k >= batch && got ? last : UINT64_MAX;
    /* What this claim took beyond its window (as CLAIM computes it) counts
     * against this worker's share of each bucket there. */
    uint64_t hb = (now_us / 1000u + r->cfg.window_ms) / TW_RR_BUCKET_MS;
    for (size_t i = n0; share && i < b->n; i++) {
        uint64_t bk = b->v[i]->due_ms / TW_RR_BUCKET_MS;
        if (bk > hb)
            rr_share_slot(r, p, bk)->taken++;
    }
    freeReplyObject(x);
    return (int)(k > got ? k : got);
}

/* A claim whose reply came after the claim thread went on without it
 * (silent.c): its items join the carry, and the partition is flagged so
 * that a round hands them over (by the frontier, as any claim's). */
static void rr_claim_late(struct tw_redis *r, uint32_t p, unsigned batch, redisReply *x)
{
    (void)rr_claim_reply(r, p, batch, 0, &r->carry, x); /* failed: the leases end, they come back */
    pthread_mutex_lock(&r->mu);
    if (!r->flags[p]) {
        r->flags[p] = 1;
        r->nflagged++;
    }
    pthread_mutex_unlock(&r->mu);
}

/* Catch-up after Redis comes back. The frontier (below) takes a partition
 * whose last claim was not full as holding nothing unclaimed that is due
 * before the others' tasks. After the claim connection was re-established
 * (Redis restarted, or was away) that no longer holds: tasks came due during
 * the outage in every partition. A round for one notified partition (or a
 * round that straddled the restart: partitions claimed before it, one that
 * failed, the rest after) would hand the catch-up of the partitions claimed
 * after the restart to the executors while the others' earlier tasks were
 * still in Redis: one block out of due order. So once a reconnect is seen
 * (the router's count moved: at the round's TIME or during a claim), every
 * partition is "unknown": claimed in this round whatever it was flagged
 * for, and the frontier stays at 0 (nothing due is handed over) until each
 * has been claimed on the new connection, or has failed (a node that stays
 * unreachable does not hold the others back: its partitions' tasks come
 * when it is back). And a claim that fails for I/O ends the round for its
 * node: the other partitions there would fail too, each after a command
 * timeout. */
static void rr_reconnected(struct tw_redis *r)
{
    /* a resume (inspect.c) is a catch-up too: tasks came due in every partition */
    bool resumed = atomic_load_explicit(&r->resumed, memory_order_relaxed) &&
                   atomic_exchange(&r->resumed, false);
    if (r->claim_rt.reconnects == r->rc_seen && !resumed)
        return;
    r->rc_seen = r->claim_rt.reconnects;
    memset(r->unknown, 1, r->cfg.partitions);
    r->nunknown = r->cfg.partitions;
}

static void rr_known(struct tw_redis *r, uint32_t p)
{
    if (r->unknown[p]) {
        r->unknown[p] = 0;
        r->nunknown--;
    }
}

/* Every task not claimed yet is due at or after this (see rr_claim_round). */
static uint64_t rr_frontier(const struct tw_redis *r)
{
    if (r->nunknown)
        return 0;
    uint64_t f = UINT64_MAX;
    for (uint32_t p = 0; p < r->cfg.partitions; p++)
        if (r->last_full[p] < f)
            f = r->last_full[p];
    return f;
}

/* Due tasks this worker takes on at most (see rr_claim_round: Load):
 * RR_READY_PER_THREAD per executor, fewer when execute is slow: what its
 * executors get through in half a hold, so that a live worker starts what
 * it holds before the hold ends and no claim takes it back (RR_READY_MIN
 * at least). */
static size_t rr_ready_max(const struct tw_redis *r)
{
    uint64_t per = RR_READY_PER_THREAD, ex = atomic_load(&r->exec_ns);
    if (ex) {
        uint64_t fit = (uint64_t)r->cfg.hold_ms * 500000u / ex;
        if (fit < per)
            per = fit < RR_READY_MIN ? RR_READY_MIN : fit;
    }
    return (size_t)r->cfg.threads * per;
}

/* The partitions whose recovery claim is due (within half a gap, so that
 * nearby ones go together): each gets a provisional next time a gap away
 * (its claim sets the real one; a claim that fails or waits for its
 * carried items retries then), and those with no items carried are marked
 * in `due` (if not marked yet: counted). recover_next is recomputed. */
static size_t rr_recovery_due(struct tw_redis *r, unsigned char *due, uint64_t now)
{
    uint64_t gap = rr_recover_gap(r), soon = now + gap / 2, next = UINT64_MAX;
    size_t k = 0;
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        if (r->recover_ns[p] <= soon) {
            r->recover_ns[p] = now + gap;
            if (!r->carry_n[p] && !due[p]) {
                due[p] = 1;
                k++;
            }
        }
        if (r->recover_ns[p] < next)
            next = r->recover_ns[p];
    }
    r->recover_next = next;
    return k;
}

/* The carry's items from n0 on go to the local queue at once: due window/4
 * or more ahead, they need no frontier (the wheel orders them). */
static void rr_to_wheel(struct tw_redis *r, size_t n0)
{
    struct tw_rr_batch *c = &r->carry;
    for (size_t i = n0; i < c->n; i++) {
        r->carry_n[c->v[i]->part]--;
        tw_rr_local_add(r->local, c->v[i]);
    }
    c->n = n0;
}

/* Pacing a refill. A refill round claims what enters the window (tasks due
 * window/2 to window ahead), one claim call per partition or more. Run back
 * to back, the calls of every worker's round would hold single-threaded
 * Redis for tens of ms every window/2, and every START and ACK of tasks due
 * meanwhile would queue behind them (and the tasks in the ready FIFO behind
 * those executors): a lateness tail. So after each claim of a paced round
 * whose tasks are all due more than window/4 ahead, those tasks go to the
 * wheel at once (not due yet: the wheel orders them, no frontier is
 * needed) and the claim thread waits `gap` (window/4 over the partitions
 * wanted) before the next call; a notification ends the wait and
 * the pacing (the notified partitions are claimed in this round), as does a
 * claimed task due within window/4 (catch-up: the frontier rules) or the end
 * of the quarter. A recovery that comes due during the wait (see the top)
 * is claimed at once, here, and the wait goes on: a refill must not hold a
 * dead worker's tasks back for a quarter of the window; what it brings
 * back is due, which ends the pacing in turn (catch-up); a recovery claim
 * that fails ends the recoveries of this wait (the node may be away: the
 * round's own calls find out). Each task is still claimed >= window/4
 * before it is due:
 * rounds start every window/2 (counted from their start), a partition is
 * claimed within window/4 of its round's start, and its previous claim
 * covered up to a window past that previous round's start.
 * Returns true when the worker is stopping. */
static bool rr_pace(struct tw_redis *r, unsigned char *want, size_t *nwanted, size_t n0,
                    uint64_t pace_until, uint64_t gap, uint64_t quarter, bool *pace)
{
    struct tw_rr_batch *c = &r->carry;
    uint64_t until = 0;
    bool stop;
    for (;;) {
        uint64_t now = tw_rr_mono_ns(), far = now + quarter;
        if (r->nunknown) { /* catching up after a reconnect: no pacing */
            *pace = false;
            return false;
        }
        for (size_t i = n0; i < c->n; i++)
            if (c->v[i]->due_local_ns <= far) {
                *pace = false;
                return false;
            }
        rr_to_wheel(r, n0);
        if (!until)
            until = now + gap < pace_until ? now + gap : pace_until;
        uint64_t wake = until < r->recover_next ? until : r->recover_next;
        pthread_mutex_lock(&r->mu);
        while (!r->stop_claim && r->nflagged == 0 && tw_rr_mono_ns() < wake)
            (void)tw_cond_wait_until_(&r->cv, &r->mu, wake);
        stop = r->stop_claim;
        bool flagged = r->nflagged != 0;
        pthread_mutex_unlock(&r->mu);
        now = tw_rr_mono_ns();
        if (stop || flagged || now >= until || now < r->recover_next)
            break;
        /* recoveries due: claimed now, then the wait goes on */
        unsigned char *due = r->recover_due;
        memset(due, 0, r->cfg.partitions);
        rr_recovery_due(r, due, now);
        for (uint32_t p = 0; p < r->cfg.partitions; p++) {
            if (!due[p])
                continue;
            if (tw_rr_local_ready(r->local) >= rr_ready_max(r) ||
                tw_rr_local_held(r->local) + c->n >= RR_HELD_MAX)
                break; /* at its fill: the others recover them */
            int got = rr_claim_part(r, p, RR_PACED_BATCH, c, false);
            if (want[p]) { /* claimed for this round too */
                want[p] = 0;
                (*nwanted)--;
            }
            if (got < 0) {
                r->last_full[p] = UINT64_MAX;
                break;
            }
        }
        rr_reconnected(r);
    }
    pthread_mutex_lock(&r->mu);
    if (r->nflagged) {
        *pace = false;
        for (uint32_t p = 0; p < r->cfg.partitions; p++)
            if (r->flags[p] && !r->carry_n[p]) {
                r->flags[p] = 0;
                r->nflagged--;
                if (!want[p]) {
                    want[p] = 1;
                    (*nwanted)++;
                }
            }
    }
    pthread_mutex_unlock(&r->mu);
    if (tw_rr_mono_ns() >= pace_until)
        *pace = false;
    return stop;
}

/* A worker at its fill takes no work of its window, but still its share of
 * the buckets beyond it (see the top: Sharing): its backlog is due now,
 * those a window or more later, and a worker that skipped them would leave
 * its share to the others' windows, which then take it whole, overrun in
 * turn, and leave theirs. At most one call per partition per W/2 (the
 * shares already taken are not taken again: they are counted); the tasks
 * go to the wheel at once (due a window or more ahead: the wheel orders
 * them). */
static void rr_claim_shares(struct tw_redis *r)
{
    struct tw_rr_batch *c = &r->carry;
    if (!rr_share(r) || r->nunknown)
        return;
    uint64_t now = tw_rr_mono_ns();
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        if (tw_rr_local_held(r->local) + c->n >= RR_HELD_MAX)
            return;
        if (r->carry_n[p] || r->last_full[p] != UINT64_MAX ||
            now - r->share_ns[p] < RR_SHARES_ONLY_GAP_NS)
            continue;
        r->share_ns[p] = now;
        size_t n0 = c->n;
        if (rr_claim_part(r, p, RR_PACED_BATCH, c, true) < 0)
            return; /* the rounds find out */
        rr_to_wheel(r, n0);
    }
}

/* Claim the flagged partitions until each returns less than a full batch,
 * and hand the items to the local queue in due order.
 *
 * Order: claims are bounded batches, so a partition whose claim came back
 * full may hold more due tasks, none earlier than the last one returned.
 * The frontier is the earliest such last due time over all partitions: every
 * task not claimed yet is due at or after it, so claimed tasks due by the
 * frontier are handed over (sorted), later ones wait in the carry. The
 * partition that sets the frontier has nothing left in the carry and is
 * claimed again next, so the frontier moves on. A partition with items in
 * the carry is not claimed again until they are gone, nor one whose next
 * tasks lie beyond the frontier (so the carry stays within one batch per
 * partition, and holds only what the frontier will reach).
 *
 * Load: a worker takes no more work than its executors can start soon
 * (rr_ready_max due and waiting, RR_HELD_MAX held in all;
 * the carry stays below one batch per partition): claiming a backlog faster
 * than it can run would let the leases run out before the tasks start, and
 * workers would only pass the tasks around. "Ready" counts only tasks whose
 * local due time has come (in the FIFO, or taken by an executor): tasks held
 * in the wheel for later ticks do not count, so the refill always claims its
 * whole window ahead whatever the wheel holds (up to RR_HELD_MAX).
 * Near that limit every wanted partition gets a small share of the room.
 * *capped says the round stopped there. Returns 0 or the last error. */
static int rr_claim_round(struct tw_redis *r, unsigned char *want, bool pace, bool *capped)
{
    struct tw_rr_batch *c = &r->carry;
    uint32_t P = r->cfg.partitions;
    int err = 0;
    bool more = true;
    /* Pacing (see rr_pace): the claims of a plain refill are spread over a
     * quarter of the window instead of running back to back. */
    uint64_t quarter = (uint64_t)r->cfg.window_ms * 250000u, pace_until = 0, gap = 0;
    bool paced_round = pace;
    if (pace) {
        /* as many gaps as the last paced round made calls (at least one per
         * partition wanted) */
        uint32_t nw = 0;
        for (uint32_t p = 0; p < P; p++)
            nw += want[p] != 0;
        if (r->paced_calls > nw)
            nw = r->paced_calls;
        pace_until = tw_rr_mono_ns() + quarter;
        gap = quarter / (nw ? nw : 1);
        r->paced_calls = 0;
    }
    size_t ready_max = rr_ready_max(r);
    /* Nodes that failed this round (a TIME or a claim gave TW_EIO): their
     * other partitions are not tried again before the next round. Besides
     * sparing a command timeout per partition while a node is away, this
     * keeps a round from straddling a restart of the node: partitions tried
     * before it came back would have failed and dropped out of the frontier
     * while the ones after it claimed their catch-up, and the first ones'
     * earlier tasks would have come after theirs (out of due order). */
    unsigned char bad[TW_RR_SAMPLE_NODES + 1] = {0}; /* [TW_RR_SAMPLE_NODES]: unknown nodes */
    /* A cluster master away must not hold up the others' claims: with
     * another connection left, the round's calls (TIME, claims) give up
     * after RR_CLAIM_RETRY_MS of redirects, reconnects and backoff, at once
     * when the node's connect backoff ends later (router.c), not after
     * command_timeout_ms; the node is then bad for the round and its
     * partitions are claimed by a later one once it answers. Wholly away (a
     * standalone server, or no cluster connection left): the whole command
     * timeout (the claim thread's reconnect and backoff, tw_rr_claim_main). A
     * claim of a slot being migrated (TRYAGAIN) gives up likewise and the
     * claim thread retries it after its backoff, instead of waiting out the
     * migration. test_redis_cluster (window 500 ms, one of three masters
     * SIGKILLed for 3 s) bounds the healthy masters' tasks' lateness.
     * A master that keeps its connections open but does not answer is
     * waited for silent_ms at most (silent.c): the TIME round reads
     * every master's reply as it comes, a claim not answered by then stays
     * outstanding (TW_RR_EAWAIT) and its master is bad until its reply is
     * read (tw_rr_await_collect, before each call of a round and every
     * silent_ms between rounds), which hands the tasks on
     * (rr_claim_late). test_redis_isolation (one of three masters
     * SIGSTOPped for 8 s) bounds the healthy masters' tasks' lateness. */
    struct tw_rr_router *rt = &r->claim_rt;
    rt->retry_ms =
        rt->cluster && tw_rr_any_connected(rt) && RR_CLAIM_RETRY_MS < r->cfg.command_timeout_ms
            ? RR_CLAIM_RETRY_MS
            : 0;
    (void)tw_rr_await_collect(r, rr_claim_late);
    tw_rr_time_round(r, want, bad);
    rr_reconnected(r);
    r->claim_start = (r->claim_start + 1) % P;
    while (more && !*capped) {
        more = false;
        uint64_t frontier = rr_frontier(r);
        size_t nwanted = 0;
        for (uint32_t p = 0; p < P; p++) {
            /* Not a partition with carried items (they go first), nor one
             * whose next tasks lie beyond the frontier (they would wait);
             * but every partition in an unknown state. */
            if (r->unknown[p])
                want[p] = 1;
            else if (want[p] && (r->carry_n[p] || (r->last_full[p] != UINT64_MAX &&
                                                   r->last_full[p] > frontier)))
                want[p] = 0;
            nwanted += want[p];
        }
        for (uint32_t i = 0; i < P; i++) {
            uint32_t p = (r->claim_start + i) % P; /* fair under the cap */
            if (!want[p])
                continue;
            if (r->nawait || atomic_load(&r->nsilent)) /* between a paced round's calls too */
                (void)tw_rr_await_collect(r, rr_claim_late);
            int nd = tw_rr_node_of(&r->claim_rt, r->slots[p]);
            size_t bi = nd < 0 || nd >= TW_RR_SAMPLE_NODES ? TW_RR_SAMPLE_NODES : (size_t)nd;
            if (bad[bi]) {
                want[p] = 0;
                nwanted--;
                r->last_full[p] = UINT64_MAX; /* unreachable: do not hold the others back */
                rr_known(r, p);
                continue;
            }
            size_t ready = tw_rr_local_ready(r->local);
            size_t held = tw_rr_local_held(r->local);
            bool fill = held + c->n >= RR_HELD_MAX;
            /* At the fill, a partition in an unknown state is claimed all the
             * same while the local queue alone is below it: until each is
             * known the frontier stays at 0 and nothing carried is handed
             * over, so a carry past the fill (a catch-up whose overdue
             * buckets a claim takes whole) would wait for it for good, while
             * the local queue drains on its own. Its claim adds what it
             * returns; the round then ends capped. */
            bool unknown_claim = r->unknown[p] && held < RR_HELD_MAX;
            if (ready >= ready_max || (fill && !unknown_claim)) {
                *capped = true;
                if (ready < ready_max && r->nunknown)
                    continue; /* the unknown ones of this pass still get theirs */
                rr_claim_shares(r);
                break;
            }
            want[p] = 0;
            size_t share = (ready_max - ready) / (nwanted ? nwanted : 1);
            unsigned batch = share < 4 ? 4 : share > RR_BATCH ? RR_BATCH : (unsigned)share;
            if (pace) /* tasks for later: not bound by the ready share */
                batch = RR_PACED_BATCH;
            if (paced_round)
                r->paced_calls++;
            nwanted--;
            size_t n0 = c->n;
            int got = rr_claim_part(r, p, batch, c, false);
            if (got < 0) {
                if (got != TW_RR_EAWAIT) /* awaited: its reply is collected later */
                    err = got;
                r->last_full[p] = UINT64_MAX; /* unreachable: do not hold the others back */
                if (got == TW_EIO || got == TW_EUNKNOWN || got == TW_RR_EAWAIT) /* as away */
                    bad[bi] = 1;
            }
            if (got >= 0)
                rr_reconnected(r); /* this claim ran on the new connection: p is known */
            rr_known(r, p);
            if (pace && rr_pace(r, want, &nwanted, n0, pace_until, gap, quarter, &pace)) {
                more = false;
                break;
            }
            if (pace == false && pace_until) {
                pace_until = 0;
                more = true; /* partitions notified meanwhile: claim them in this round */
            }
        }
        if (c->n > 1)
            qsort(c->v, c->n, sizeof *c->v, rr_item_cmp);
        frontier = rr_frontier(r);
        size_t k = 0;
        /* what is due by the frontier, and what is not due for window/4 (a
         * split bucket's, a share's: the wheel orders them, as in rr_pace) */
        uint64_t far = tw_rr_mono_ns() + quarter;
        for (size_t i = 0; i < c->n; i++) {
            struct tw_rr_item *it = c->v[i];
            if (it->due_ms > frontier && it->due_local_ns <= far) {
                c->v[k++] = it;
                continue;
            }
            r->carry_n[it->part]--;
            tw_rr_local_add(r->local, it);
        }
        c->n = k;
        for (uint32_t p = 0; p < P; p++)
            if (r->unknown[p] || (r->last_full[p] != UINT64_MAX && r->carry_n[p] == 0)) {
                want[p] = 1; /* more may wait there */
                more = true;
            }
        pthread_mutex_lock(&r->mu);
        bool stop = r->stop_claim;
        pthread_mutex_unlock(&r->mu);
        if (stop)
            break;
    }
    rt->retry_ms = 0;
    return err;
}

int tw_rr_claim_alloc(struct tw_redis *r)
{
    uint32_t P = r->cfg.partitions;
    r->claim_want = calloc(P, 1);
    r->recover_ns = malloc(P * sizeof *r->recover_ns);
    r->recover_due = calloc(P, 1);
    r->share_tab = calloc((size_t)P * RR_SHARE_SLOTS, sizeof *r->share_tab);
    r->share_ns = calloc(P, sizeof *r->share_ns);
    if (!r->claim_want || !r->recover_ns || !r->recover_due || !r->share_tab || !r->share_ns)
        return TW_ENOMEM; /* tw_rr_claim_free (with the instance) frees what was */
    for (uint32_t p = 0; p < P; p++)
        r->recover_ns[p] = UINT64_MAX;
    r->recover_next = UINT64_MAX;
    return 0;
}

void tw_rr_claim_free(struct tw_redis *r)
{
    free(r->claim_want);
    free(r->recover_ns);
    free(r->recover_due);
    free(r->share_tab);
    free(r->share_ns);
    r->claim_want = NULL;
    r->recover_ns = NULL;
    r->recover_due = NULL;
    r->share_tab = NULL;
    r->share_ns = NULL;
}

void *tw_rr_claim_main(void *arg)
{
    struct tw_redis *r = arg;
    uint32_t P = r->cfg.partitions;
    unsigned char *want = r->claim_want;
    uint64_t half = (uint64_t)r->cfg.window_ms * 1000000u / 2, next_refill = 0;
    uint64_t retry_at = UINT64_MAX; /* at its fill: claim again then */
    uint64_t last_ok_refill = 0;    /* start of the last refill round that claimed all */
    uint32_t backoff_ms = 0;
    uint64_t epoch = tw_rr_mono_ns();
    bool awaiting = false; /* calls outstanding or masters silent: collect often */
    pthread_mutex_lock(&r->mu);
    while (!r->stop_claim) {
        awaiting = awaiting || atomic_load(&r->nsilent);
        if (awaiting) {
            pthread_mutex_unlock(&r->mu);
            awaiting = tw_rr_await_collect(r, rr_claim_late);
            pthread_mutex_lock(&r->mu);
        }
        uint64_t now = tw_rr_mono_ns();
        if (now - epoch > RR_OFF_EPOCH_NS) { /* forget old clock samples (drift) */
            epoch = now;
            for (uint32_t p = 0; p < P; p++) {
                atomic_store(&r->off_prev[p], atomic_exchange(&r->off_cur[p], INT64_MIN));
                atomic_store(&r->off_hi_prev[p], atomic_exchange(&r->off_hi_cur[p], INT64_MAX));
            }
        }
        bool refill = now >= next_refill, retry = now >= retry_at;
        /* recoveries (see the top), while Redis answers (else the backoff's refills) */
        uint64_t recover_at = backoff_ms == 0 ? r->recover_next : UINT64_MAX;
        bool recover = now >= recover_at;
        if (!refill && !retry && !recover && r->nflagged == 0) {
            uint64_t until = next_refill < retry_at ? next_refill : retry_at;
            uint64_t collect = now + tw_rr_patience_ns(r); /* an awaited reply's next look */
            if (awaiting && until > collect)
                until = collect;
            (void)tw_cond_wait_until_(&r->cv, &r->mu, until < recover_at ? until : recover_at);
            continue;
        }
        /* Pace only in the steady state: this worker's previous refill
         * claimed every partition, on time (rr_pace's bound needs it). */
        bool pace = refill && !retry && r->nflagged == 0 && last_ok_refill &&
                    now - last_ok_refill <= half + half / 4;
        size_t nwant = 0;
        for (uint32_t p = 0; p < P; p++) {
            nwant += want[p] = (unsigned char)(refill || retry || r->flags[p]);
            r->flags[p] = 0;
        }
        r->nflagged = 0;
        pthread_mutex_unlock(&r->mu);
        /* A refill wants every partition: a paced one recovers what is due
         * after its first call (rr_pace), an unpaced one claims them all. */
        if (recover && !refill && !retry)
            nwant += rr_recovery_due(r, want, now);
        if (nwant == 0) { /* nothing due after all (a claim moved it on) */
            pthread_mutex_lock(&r->mu);
            continue;
        }
        bool capped = false;
        uint64_t round_start = now;
        if (refill)
            atomic_fetch_add(&r->refills, 1);
        int rc = rr_claim_round(r, want, pace, &capped);
        awaiting = r->nawait || atomic_load(&r->nsilent);
        now = tw_rr_mono_ns();
        retry_at = capped ? now + RR_CAPPED_RETRY_NS : UINT64_MAX;
        if (rc == TW_EIO || rc == TW_EUNKNOWN || rc == TW_EPROTO || rc == TW_ENOMEM) {
            /* Redis away: try again soon, then less often, at most every window/2. */
            backoff_ms = backoff_ms ? backoff_ms * 2 : 50;
            uint64_t wait = (uint64_t)backoff_ms * 1000000u;
            if (wait > half) {
                wait = half;
                backoff_ms /= 2;
            }
            next_refill = now + wait;
            retry_at = UINT64_MAX;
            last_ok_refill = 0;
        } else {
            backoff_ms = 0;
            if (refill) /* from the round's start: a paced round takes up to window/4 */
                next_refill = round_start + half;
            if (refill)
                last_ok_refill = rc == 0 && !capped ? round_start : 0;
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL; /* the carry is left for stop to release */
}
