/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: recurring schedules.
 *
 * A schedule is a record in its key's partition ({q:p}:sched HASH: next
 * occurrence, missed-run policy, anchor, spec, payload) and a member of
 * that partition's {q:p}:sched:n ZSET scored by its next occurrence. Its
 * occurrences become ordinary tasks, "<key>@<occurrence ms>", due at the
 * occurrence, in the same partition (so one script writes the task and
 * moves next on: one slot), ahead of time: each worker's schedule thread
 * asks a partition for the schedules whose next occurrence falls within
 * window_ms (SCHED_DUE: one ZRANGEBYSCORE and an HMGET) when the earliest
 * next occurrence it holds comes that near (SCHED_DUE answers it too), then
 * every window_ms / 2 while it fires; computes the occurrences in C (cron.c for cron; arithmetic for
 * every-N), and fires each with SCHED_FIRE, a compare-and-set on next: of
 * the workers that read the same next, one changes it, the others find it
 * moved and do nothing. So each occurrence is made a task once across all
 * workers and restarts (the record is durable, next moves only with the
 * tasks it made, in one script), and never early: the task is due at the
 * occurrence itself, and the task path never starts a task before its due
 * time (redis.c). From there the task is delivered like any (at least once,
 * retries, max_attempts, dead letters).
 *
 * Why tasks and not a record the claim turns into a delivery: the claim,
 * start and acknowledgement scripts (the hot path) stay as they are, and
 * an occurrence has everything a task has (a key for fencing, attempts,
 * dead letters, events, catch-up in due order with the other tasks). The
 * price: a derived key lives in its schedule's partition, not in the one
 * its own hash names, so tw_redis_move and tw_redis_remove do not find it
 * (they answer TW_ENOENT); and occurrences made before a remove of the
 * schedule still run.
 *
 * Missed runs: an occurrence more than window_ms (the worker's) in the past
 * when a worker fires it was missed (no worker ran in time); the policy
 * says what becomes of it (SCHED_FIRE: skip, once, every one). A worker
 * keeps up otherwise: it fires each occurrence about window_ms before it.
 * For skip and once the list sent leaves out the missed occurrences past
 * the first (the first is the compare-and-set's), so a long downtime costs
 * one call; for every one the list is the missed occurrences in order, 64
 * per call, the calls repeated at once while they fill.
 *
 * Not polled: a partition is asked again when its earliest next occurrence
 * (SCHED_DUE's `later`) comes within window_ms, every window_ms / 2 while
 * it fires (an every-schedule shorter than the window fires each round),
 * at once when a schedule is set there (SCHED_SET publishes "sched" on the
 * partition's channel; the subscriber wakes this thread), for every
 * partition after the subscriber reconnected (what it missed), and at
 * least once a minute (RR_SCHED_RECHECK_NS: a bound on what anything
 * unforeseen could delay). Another worker firing a schedule only moves its
 * next later: this thread then asks early and finds nothing, never late.
 * So a queue without schedules costs a worker one SCHED_DUE per partition
 * a minute, not two a second.
 *
 * Costs (redis.c's table): upsert: a TIME (cron) and SCHED_SET (HGET HSET
 * ZADD PUBLISH); remove: SCHED_DEL (ZREM HDEL); list: HSCAN as dead
 * letters; per worker, SCHED_DUE (two ZRANGEBYSCORE, HMGET of what is due)
 * as above, and per occurrence a share of one SCHED_FIRE (HGET TIME, per
 * task HEXISTS HSET EXISTS ZADD [ZADD index], HSET ZADD of the schedule,
 * [PUBLISH]).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/cron.h"
#include "redis/internal.h"

#define RR_FIRE_MAX 64  /* occurrences one SCHED_FIRE is given at most */
#define RR_DUE_MAX "32" /* schedules one SCHED_DUE answers at most */
#define RR_SPEC_MAX (TW_CRON_MAX + 8)

/* The schedule thread's state: when to ask each partition next (monotonic
 * ns; 0: now, as after a wake), under bg.mu. */
struct tw_rr_sched {
    struct tw_rr_bg bg;
    bool woken; /* a wake since the thread last looked */
    uint64_t at[];
};

#define RR_ASKING (UINT64_MAX - 1) /* at[p] while the thread asks p */
#define RR_SCHED_RECHECK_NS (60ull * 1000000000u) /* the longest a partition goes unasked */

/* A schedule record "next policy anchor speclen " spec payload. */
struct rr_srec {
    uint64_t next, anchor;
    unsigned policy;
    const char *spec, *payload;
    size_t spec_len, payload_len;
};

static int rr_srec_parse(const char *v, size_t vl, struct rr_srec *s)
{
    uint64_t f[4]; /* next, policy, anchor, speclen */
    size_t pos;
    if (tw_rr_parse_fields(v, vl, 4, f, &pos) || f[1] > UINT_MAX || f[3] > vl - pos)
        return TW_EPROTO;
    size_t sl = (size_t)f[3];
    s->policy = (unsigned)f[1];
    s->next = f[0];
    s->anchor = f[2];
    s->spec = v + pos;
    s->spec_len = sl;
    s->payload = v + pos + sl;
    s->payload_len = vl - (size_t)pos - sl;
    return 0;
}

/* A spec: a cron expression (*c, true) or every N (*every). */
static int rr_spec(const char *spec, size_t len, struct tw_cron *c, uint64_t *every)
{
    *every = 0;
    if (len > 5 && memcmp(spec, "cron ", 5) == 0)
        return tw_cron_parse(c, spec + 5, len - 5, NULL) == 0 ? 0 : TW_EINVAL;
    unsigned long long n, a;
    char buf[64];
    if (len >= sizeof buf)
        return TW_EINVAL;
    memcpy(buf, spec, len);
    buf[len] = 0;
    if (sscanf(buf, "every %llu %llu", &n, &a) != 2 || n == 0)
        return TW_EINVAL;
    *every = n;
    return 0;
}

/* The occurrence after t. */
static int rr_after(const struct tw_cron *c, uint64_t every, uint64_t anchor, uint64_t t,
                    uint64_t *out)
{
    if (!every)
        return tw_cron_next(c, t, out);
    *out = t < anchor ? anchor : anchor + ((t - anchor) / every + 1) * every;
    return 0;
}

/* The occurrences to fire for schedule s at server time now (ms), grace
 * window_ms: s->next first, then (skip, once: from now - grace on) each
 * up to now + grace and one more, RR_FIRE_MAX at most. Their number. */
static size_t rr_occurrences(const struct rr_srec *s, uint64_t now, uint64_t grace, uint64_t *o)
{
    struct tw_cron c;
    uint64_t every;
    if (rr_spec(s->spec, s->spec_len, &c, &every) != 0)
        return 0;
    size_t n = 0;
    o[n++] = s->next;
    uint64_t t = s->next;
    if (s->policy != TW_REDIS_MISSED_ALL && now > grace && t + grace < now &&
        rr_after(&c, every, s->anchor, now - grace - 1, &t) == 0 && t > s->next)
        o[n++] = t;
    while (n < RR_FIRE_MAX && o[n - 1] <= now + grace) {
        if (rr_after(&c, every, s->anchor, o[n - 1], &t) != 0)
            break;
        o[n++] = t;
    }
    return n;
}

/* Fire schedule key k (record v) of partition p: SCHED_FIRE of its
 * occurrences. Whether the list was full (more to fire at once). */
static bool rr_fire(struct tw_redis *r, struct tw_rr_router *rt, uint32_t p, const redisReply *k,
                    const redisReply *v, uint64_t now)
{
    struct rr_srec s;
    if (rr_srec_parse(v->str, v->len, &s) != 0)
        return false;
    uint64_t o[RR_FIRE_MAX];
    size_t n = rr_occurrences(&s, now, r->cfg.window_ms, o);
    if (n < 2)
        return false;
    char kb[6][TW_RR_KEYBUF], nx[24], g[16], os[RR_FIRE_MAX][24];
    const char *av[10 + RR_FIRE_MAX];
    size_t al[10 + RR_FIRE_MAX];
    tw_rr_keys(r, p, kb, av, al);
    av[9] = av[5]; /* ARGV: key, next, spec, grace, channel, occurrences */
    al[9] = al[5];
    av[5] = k->str;
    al[5] = k->len;
    al[6] = (size_t)snprintf(nx, sizeof nx, "%llu", (unsigned long long)s.next);
    av[6] = nx;
    av[7] = s.spec;
    al[7] = s.spec_len;
    al[8] = (size_t)snprintf(g, sizeof g, "%u", r->cfg.window_ms);
    av[8] = g;
    for (size_t i = 0; i < n; i++) {
        al[10 + i] = (size_t)snprintf(os[i], sizeof os[i], "%llu", (unsigned long long)o[i]);
        av[10 + i] = os[i];
    }
    redisReply *x;
    if (tw_rr_eval(rt, TW_RR_SCHED_FIRE, r->slots[p], TW_RR_NKEYS, (int)(5 + n), av, al, &x) != 0)
        return false;
    long long made = 0;
    bool ok = tw_rr_int_reply(x, &made) == 0 && made >= 0;
    freeReplyObject(x);
    if (ok)
        atomic_fetch_add(&r->sched_fires, (uint64_t)made);
    return ok && n == RR_FIRE_MAX;
}

/* The cadence of an active partition: window_ms / 2 (1 ms at least), in ns. */
static uint64_t rr_half_window_ns(const struct tw_redis *r)
{
    return (uint64_t)(r->cfg.window_ms / 2 ? r->cfg.window_ms / 2 : 1) * 1000000u;
}

/* One partition: the schedules coming due, each fired. The monotonic time
 * at which to ask it again: window/2 on while it fires or fails (the
 * cadence of an active partition), else when its next occurrence comes
 * within window_ms (SCHED_DUE's `later`), at most RR_SCHED_RECHECK_NS on. */
static uint64_t rr_sched_part(struct tw_redis *r, struct tw_rr_router *rt, uint32_t p)
{
    uint64_t half = rr_half_window_ns(r);
    for (int again = 0; again < 16; again++) {
        char kb[6][TW_RR_KEYBUF], ahead[16];
        const char *av[7];
        size_t al[7];
        tw_rr_keys(r, p, kb, av, al);
        al[5] = (size_t)snprintf(ahead, sizeof ahead, "%u", r->cfg.window_ms);
        av[5] = ahead;
        av[6] = RR_DUE_MAX;
        al[6] = strlen(RR_DUE_MAX);
        redisReply *x;
        if (tw_rr_eval(rt, TW_RR_SCHED_DUE, r->slots[p], TW_RR_NKEYS, 2, av, al, &x) != 0)
            return tw_rr_mono_ns() + half;
        bool more = false, fired = false;
        long long now = -1, later = -1;
        if (x->type == REDIS_REPLY_ARRAY && x->elements >= 2 &&
            x->element[0]->type == REDIS_REPLY_INTEGER &&
            x->element[1]->type == REDIS_REPLY_INTEGER) {
            now = x->element[0]->integer;
            later = x->element[1]->integer;
            for (size_t i = 2; i + 1 < x->elements; i += 2)
                if (x->element[i]->type == REDIS_REPLY_STRING &&
                    x->element[i + 1]->type == REDIS_REPLY_STRING) {
                    more |= rr_fire(r, rt, p, x->element[i], x->element[i + 1], (uint64_t)now);
                    fired = true;
                }
        }
        freeReplyObject(x);
        if (more)
            continue;
        uint64_t t = tw_rr_mono_ns();
        if (fired || now < 0)
            return t + half;
        uint64_t wait = later < 0 ? RR_SCHED_RECHECK_NS
                        : (uint64_t)later > (uint64_t)now + r->cfg.window_ms
                            ? ((uint64_t)later - (uint64_t)now - r->cfg.window_ms) * 1000000u
                            : 0;
        return t + (wait < RR_SCHED_RECHECK_NS ? wait : RR_SCHED_RECHECK_NS);
    }
    return tw_rr_mono_ns();
}

/* The schedule thread: asks each partition when its at[] comes (or after
 * a wake: a schedule set there, or the subscriber reconnected), never at
 * a fixed pace while nothing nears. */
static void *rr_sched_main(void *arg)
{
    struct tw_redis *r = arg;
    struct tw_rr_sched *s = r->sched;
    uint64_t half = rr_half_window_ns(r);
    for (;;) {
        pthread_mutex_lock(&s->bg.mu);
        s->woken = false;
        pthread_mutex_unlock(&s->bg.mu);
        uint64_t next = UINT64_MAX;
        for (uint32_t p = 0; p < r->cfg.partitions; p++) {
            if (atomic_load(&r->closed))
                return NULL;
            uint64_t now = tw_rr_mono_ns(), again;
            pthread_mutex_lock(&s->bg.mu);
            bool due = s->at[p] <= now;
            if (due)
                s->at[p] = RR_ASKING;
            else
                next = s->at[p] < next ? s->at[p] : next;
            pthread_mutex_unlock(&s->bg.mu);
            if (!due)
                continue;
            if (tw_rr_silent_part(r, p))
                again = now + half;
            else
                again = rr_sched_part(r, &r->sched_rt, p);
            pthread_mutex_lock(&s->bg.mu);
            if (s->at[p] == RR_ASKING) /* else a wake came meanwhile: ask again */
                s->at[p] = again;
            next = s->at[p] < next ? s->at[p] : next;
            pthread_mutex_unlock(&s->bg.mu);
        }
        pthread_mutex_lock(&s->bg.mu);
        while (!s->bg.stop && !s->woken &&
               tw_cond_wait_until_(&s->bg.cv, &s->bg.mu, next) == 0) {
        }
        bool stop = s->bg.stop;
        pthread_mutex_unlock(&s->bg.mu);
        if (stop)
            return NULL;
    }
}

int tw_rr_sched_start(struct tw_redis *r)
{
    size_t size = sizeof(struct tw_rr_sched) + r->cfg.partitions * sizeof(uint64_t);
    return tw_rr_bg_new(&r->sched, size, rr_sched_main, r); /* at[] zeroed: every p now */
}

void tw_rr_sched_wake(struct tw_redis *r, uint32_t p)
{
    struct tw_rr_sched *s = r->sched;
    if (!s)
        return;
    pthread_mutex_lock(&s->bg.mu);
    if (p != UINT32_MAX)
        s->at[p] = 0; /* while asked (RR_ASKING): asked again after */
    else
        memset(s->at, 0, r->cfg.partitions * sizeof s->at[0]);
    s->woken = true;
    pthread_cond_signal(&s->bg.cv);
    pthread_mutex_unlock(&s->bg.mu);
}

void tw_rr_sched_stop(struct tw_redis *r)
{
    tw_rr_bg_free(&r->sched);
}

/* ---- the client's calls ------------------------------------------------------- */

int tw_redis_schedule_set(struct tw_redis *r, const void *key, size_t key_len, const void *payload,
                          size_t payload_len, const struct tw_redis_schedule *sc, uint64_t *next_ms)
{
    int rc = tw_rr_check_task(r, key, key_len, payload, payload_len);
    if (rc)
        return rc;
    if (key_len > TW_REDIS_KEY_MAX - 21) /* "@" and the occurrence's digits */
        return TW_E2BIG;
    if (!sc || (unsigned)sc->missed > TW_REDIS_MISSED_ALL)
        return TW_EINVAL;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char spec[RR_SPEC_MAX], c1[24] = "0", c2[24] = "0", pol[4];
    size_t sl;
    if (sc->cron) {
        size_t n = strlen(sc->cron);
        struct tw_cron c;
        if (tw_cron_parse(&c, sc->cron, n, NULL) != 0)
            return TW_EINVAL;
        sl = (size_t)snprintf(spec, sizeof spec, "cron %s", sc->cron);
        const char *av[1] = {"TIME"};
        size_t al[1] = {4};
        redisReply *x;
        if ((rc = tw_rr_api_call(r, TW_RR_NSCRIPTS, r->slots[p], 0, 1, av, al, &x)) != 0)
            return rc;
        uint64_t now = 0, o1, o2;
        if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 &&
            x->element[0]->type == REDIS_REPLY_STRING &&
            x->element[1]->type == REDIS_REPLY_STRING)
            now = strtoull(x->element[0]->str, NULL, 10) * 1000u +
                  strtoull(x->element[1]->str, NULL, 10) / 1000u;
        freeReplyObject(x);
        if (!now)
            return TW_EPROTO;
        if (tw_cron_next(&c, now, &o1) != 0 || tw_cron_next(&c, o1, &o2) != 0)
            return TW_EINVAL;
        snprintf(c1, sizeof c1, "%llu", (unsigned long long)o1);
        snprintf(c2, sizeof c2, "%llu", (unsigned long long)o2);
    } else {
        if (sc->every_ms < 1000 || sc->every_ms > (uint64_t)TW_REDIS_DELAY_MAX ||
            sc->anchor_ms > (uint64_t)TW_REDIS_DELAY_MAX * 2)
            return TW_EINVAL;
        sl = (size_t)snprintf(spec, sizeof spec, "every %llu %llu",
                              (unsigned long long)sc->every_ms, (unsigned long long)sc->anchor_ms);
    }
    snprintf(pol, sizeof pol, "%u", (unsigned)sc->missed);
    char kb[6][TW_RR_KEYBUF];
    const char *av[12];
    size_t al[12];
    tw_rr_keys(r, p, kb, av, al);
    const char *arg[7] = {key, spec, pol, payload ? payload : "", c1, c2, kb[5]};
    size_t argl[7] = {key_len, sl, strlen(pol), payload_len, strlen(c1), strlen(c2), al[5]};
    memcpy(av + 5, arg, sizeof arg);
    memcpy(al + 5, argl, sizeof argl);
    long long nx;
    if ((rc = tw_rr_api_int(r, TW_RR_SCHED_SET, r->slots[p], TW_RR_NKEYS, 7, av, al, &nx)) != 0)
        return rc;
    if (next_ms)
        *next_ms = (uint64_t)nx;
    return 0;
}

int tw_redis_schedule_remove(struct tw_redis *r, const void *key, size_t key_len)
{
    int rc = tw_rr_check_task(r, key, key_len, NULL, 0);
    if (rc)
        return rc;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char kb[6][TW_RR_KEYBUF];
    const char *av[6];
    size_t al[6];
    tw_rr_keys(r, p, kb, av, al);
    av[5] = key;
    al[5] = key_len;
    long long n;
    if ((rc = tw_rr_api_int(r, TW_RR_SCHED_DEL, r->slots[p], TW_RR_NKEYS, 1, av, al, &n)) != 0)
        return rc;
    return n == 1 ? 0 : TW_ENOENT;
}

struct rr_sched_scan {
    struct tw_rr_scan s;
    tw_redis_schedule_fn *fn;
    void *arg;
};

static int rr_sched_give(struct tw_rr_scan *s, const char *k, size_t kl, const char *v, size_t vl)
{
    struct rr_sched_scan *d = (struct rr_sched_scan *)s;
    struct rr_srec sr;
    if (rr_srec_parse(v, vl, &sr) != 0)
        return TW_EPROTO;
    struct tw_redis_schedule_info i = {.key = k,
                                       .key_len = kl,
                                       .payload = sr.payload,
                                       .payload_len = sr.payload_len,
                                       .spec = sr.spec,
                                       .spec_len = sr.spec_len,
                                       .next_ms = sr.next,
                                       .missed = (enum tw_redis_missed)sr.policy};
    d->fn(d->arg, &i);
    return 0;
}

int tw_redis_schedule_list(struct tw_redis *r, struct tw_redis_scan_cursor *cur, size_t count,
                           tw_redis_schedule_fn *fn, void *arg)
{
    if (!fn)
        return TW_EINVAL;
    struct rr_sched_scan d = {{"sched", count, rr_sched_give}, fn, arg};
    return tw_rr_scan(r, &d.s, cur);
}

int tw_redis_schedule_count(struct tw_redis *r, uint64_t *n)
{
    if (!r || !n)
        return TW_EINVAL;
    return tw_rr_each_part(r, "HLEN", "sched", n);
}
