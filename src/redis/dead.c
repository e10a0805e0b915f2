/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the retry limit and the dead letters.
 *
 * A task's record (redis.c: "token attempt due " payload) counts its starts
 * in the attempt field; a per-task max_attempts rides in the same field
 * above bit 32 (set_opts, SETX), so that every script that copies a
 * record keeps it and no script of the hot path reads anything more. The
 * worker sees attempt & 0xffffffff (execute.c's uint32_t). FAIL and CLAIM's
 * recovery of an expired lease test spent() (scripts.c, DEAD): a task whose
 * limit (its own, else the queue's, which the worker sends) is reached
 * moves to {q:p}:dead in that same script: nothing lost on the way, and no
 * second script can see it half-moved. FAIL answers 2 for it; CLAIM lists
 * the keys it buried in its reply's second element ({recovered, key,
 * attempt, ...} instead of the count), which tw_rr_dead_claimed reads.
 *
 * The calls here are the client's: they run on the client's router under
 * api_mu like set. list and get read with plain HSCAN and HGET (a dead
 * letter is written whole by one script, so a read sees it whole), requeue
 * and requeue_all are scripts (a dead letter back to the queue and out of
 * the dead set at once), purge is HDEL or UNLINK, count HLEN. The error
 * text execute may leave goes through a thread-local buffer of the
 * executor (tw_redis_fail_text; execute.c sends it with FAIL).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

#define RR_MAX_ATTEMPTS_MAX 1048575u /* a per-task limit: 20 bits above bit 32, < 2^53 */
#define RR_LIST_PARTS 64             /* partitions one listing call visits at most */

/* ---- execute's error text --------------------------------------------------- */

_Thread_local size_t tw_rr_fail_len;
static _Thread_local char rr_fail_text[TW_REDIS_ERROR_MAX];

int tw_redis_fail_text(const char *text, size_t len)
{
    if (!text && len)
        return TW_EINVAL;
    if (len > TW_REDIS_ERROR_MAX)
        len = TW_REDIS_ERROR_MAX;
    if (len)
        memcpy(rr_fail_text, text, len);
    tw_rr_fail_len = len;
    return 0;
}

const char *tw_rr_fail_text_take(size_t *len)
{
    *len = tw_rr_fail_len;
    tw_rr_fail_len = 0;
    return rr_fail_text;
}

/* ---- what the worker's scripts buried ----------------------------------------- */

int tw_rr_dead_claimed(struct tw_redis *r, uint32_t p, const redisReply *e)
{
    if (e->type == REDIS_REPLY_INTEGER) {
        atomic_fetch_add(&r->recovered, (uint64_t)e->integer);
        return 0;
    }
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 1 || e->elements % 2 != 1 ||
        e->element[0]->type != REDIS_REPLY_INTEGER)
        return TW_EPROTO;
    atomic_fetch_add(&r->recovered, (uint64_t)e->element[0]->integer);
    for (size_t i = 1; i + 1 < e->elements; i += 2) {
        const redisReply *k = e->element[i], *a = e->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || a->type != REDIS_REPLY_INTEGER)
            continue;
        atomic_fetch_add(&r->dead_n, 1);
        tw_rr_event(r, TW_REDIS_EVENT_DEAD, k->str, k->len, (uint32_t)a->integer, 0);
    }
    (void)p;
    return 0;
}

/* ---- the client's calls --------------------------------------------------------- */

int tw_rr_check_task(const struct tw_redis *r, const void *key, size_t key_len, const void *payload,
                     size_t payload_len)
{
    if (!r || !key || (!payload && payload_len))
        return TW_EINVAL;
    if (key_len > TW_REDIS_KEY_MAX || payload_len > TW_REDIS_PAYLOAD_MAX)
        return TW_E2BIG;
    return atomic_load(&r->closed) ? TW_ECLOSED : 0;
}

int tw_rr_api_call(struct tw_redis *r, unsigned id, int slot, int nkeys, int nargs, const char **av,
                   const size_t *al, redisReply **x)
{
    pthread_mutex_lock(&r->api_mu);
    int rc = id == TW_RR_NSCRIPTS ? tw_rr_command(&r->api, slot, nkeys + nargs, av, al, x)
                                  : tw_rr_eval(&r->api, id, slot, nkeys, nargs, av, al, x);
    if (rc == 0 && id == TW_RR_NSCRIPTS && (*x)->type == REDIS_REPLY_ERROR) {
        rc = tw_rr_reply_error(&r->api, *x);
        freeReplyObject(*x);
    }
    tw_rr_note(r, rc);
    pthread_mutex_unlock(&r->api_mu);
    return rc;
}

int tw_rr_api_int(struct tw_redis *r, unsigned id, int slot, int nkeys, int nargs, const char **av,
                  const size_t *al, long long *v)
{
    redisReply *x;
    int rc = tw_rr_api_call(r, id, slot, nkeys, nargs, av, al, &x);
    if (rc)
        return rc;
    rc = tw_rr_int_reply(x, v);
    freeReplyObject(x);
    return rc;
}

int tw_redis_set_opts(struct tw_redis *r, const void *key, size_t key_len, const void *payload,
                      size_t payload_len, int64_t delay_ms, const struct tw_redis_set_opts *o)
{
    if (!o || o->max_attempts == 0)
        return tw_redis_set(r, key, key_len, payload, payload_len, delay_ms);
    int rc = tw_rr_check_task(r, key, key_len, payload, payload_len);
    if (rc)
        return rc;
    if (delay_ms < 0 || delay_ms > TW_REDIS_DELAY_MAX || o->max_attempts > RR_MAX_ATTEMPTS_MAX)
        return TW_EINVAL;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char kb[6][TW_RR_KEYBUF], d[24], att[24];
    const char *av[10];
    size_t al[10];
    tw_rr_keys(r, p, kb, av, al);
    av[8] = av[5]; /* ARGV: key, payload, delay, channel, attempt field */
    al[8] = al[5];
    av[5] = key;
    al[5] = key_len;
    av[6] = payload ? payload : "";
    al[6] = payload_len;
    al[7] = (size_t)snprintf(d, sizeof d, "%lld", (long long)delay_ms);
    av[7] = d;
    al[9] = (size_t)snprintf(att, sizeof att, "%llu", (unsigned long long)o->max_attempts << 32);
    av[9] = att;
    long long due;
    return tw_rr_api_int(r, TW_RR_SETX, r->slots[p], TW_RR_NKEYS, 5, av, al, &due);
}

/* The name of partition p's key with this suffix ("dead", "sched"). */
size_t tw_rr_pkey(const struct tw_redis *r, uint32_t p, const char *suffix, char buf[TW_RR_KEYBUF])
{
    return (size_t)snprintf(buf, TW_RR_KEYBUF, "{%s:%u}:%s", r->queue, (unsigned)p, suffix);
}

/* A dead letter's record ("attempt dead_ms due errlen " error payload) to fn. */
static int rr_dead_give(const char *k, size_t kl, const char *v, size_t vl, tw_redis_dead_fn *fn,
                        void *arg)
{
    uint64_t f[4]; /* attempt, dead_ms, due, errlen; the error and the payload keep
                      their own leading blanks */
    size_t pos;
    if (tw_rr_parse_fields(v, vl, 4, f, &pos) || f[3] > vl - pos)
        return TW_EPROTO;
    uint64_t att = f[0], t = f[1], due = f[2];
    size_t el = (size_t)f[3];
    struct tw_redis_dead d = {.key = k,
                              .key_len = kl,
                              .error = v + pos,
                              .error_len = el,
                              .payload = v + pos + el,
                              .payload_len = vl - (size_t)pos - el,
                              .attempt = (uint32_t)att,
                              .max_attempts = (uint32_t)(att >> 32),
                              .dead_ms = t,
                              .due_ms = due};
    fn(arg, &d);
    return 0;
}

/* One HSCAN step of partition p's HASH `suffix` from cur->scan; each field
 * and value to give(). Moves cur on. The number given, or an error. */
static int rr_scan_step(struct tw_redis *r, struct tw_rr_scan *s, struct tw_redis_scan_cursor *cur)
{
    char k[TW_RR_KEYBUF], c[24], n[16];
    const char *av[5] = {"HSCAN", k, c, "COUNT", n};
    size_t al[5] = {5, tw_rr_pkey(r, cur->partition, s->suffix, k), 0, 5, 0};
    al[2] = (size_t)snprintf(c, sizeof c, "%llu", (unsigned long long)cur->scan);
    al[4] = (size_t)snprintf(n, sizeof n, "%zu", s->count);
    redisReply *x;
    int rc = tw_rr_api_call(r, TW_RR_NSCRIPTS, r->slots[cur->partition], 0, 5, av, al, &x);
    if (rc)
        return rc;
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 2 ||
        x->element[0]->type != REDIS_REPLY_STRING || x->element[1]->type != REDIS_REPLY_ARRAY ||
        x->element[1]->elements % 2) {
        freeReplyObject(x);
        return TW_EPROTO;
    }
    int given = 0;
    redisReply *f = x->element[1];
    for (size_t i = 0; i + 1 < f->elements && rc == 0; i += 2)
        if (f->element[i]->type == REDIS_REPLY_STRING &&
            f->element[i + 1]->type == REDIS_REPLY_STRING) {
            rc = s->give(s, f->element[i]->str, f->element[i]->len, f->element[i + 1]->str,
                         f->element[i + 1]->len);
            given += rc == 0;
        }
    cur->scan = strtoull(x->element[0]->str, NULL, 10);
    freeReplyObject(x);
    if (cur->scan == 0 && ++cur->partition >= r->cfg.partitions)
        cur->done = true;
    return rc ? rc : given;
}

int tw_rr_scan(struct tw_redis *r, struct tw_rr_scan *s, struct tw_redis_scan_cursor *cur)
{
    if (!r || !cur || s->count == 0 || s->count > 1000)
        return TW_EINVAL;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    if (cur->partition >= r->cfg.partitions)
        cur->done = true;
    int total = 0;
    for (unsigned visited = 0; !cur->done && visited < RR_LIST_PARTS && total == 0; visited++) {
        int rc = rr_scan_step(r, s, cur);
        if (rc < 0)
            return rc;
        total += rc;
    }
    return total;
}

struct rr_dead_scan {
    struct tw_rr_scan s;
    tw_redis_dead_fn *fn;
    void *arg;
};

static int rr_dead_scan_give(struct tw_rr_scan *s, const char *k, size_t kl, const char *v,
                             size_t vl)
{
    struct rr_dead_scan *d = (struct rr_dead_scan *)s;
    return rr_dead_give(k, kl, v, vl, d->fn, d->arg);
}

int tw_redis_dead_list(struct tw_redis *r, struct tw_redis_scan_cursor *cur, size_t count,
                       tw_redis_dead_fn *fn, void *arg)
{
    if (!fn)
        return TW_EINVAL;
    struct rr_dead_scan d = {{"dead", count, rr_dead_scan_give}, fn, arg};
    return tw_rr_scan(r, &d.s, cur);
}

int tw_redis_dead_get(struct tw_redis *r, const void *key, size_t key_len, tw_redis_dead_fn *fn,
                      void *arg)
{
    int rc = tw_rr_check_task(r, key, key_len, NULL, 0);
    if (rc || !fn)
        return rc ? rc : TW_EINVAL;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char k[TW_RR_KEYBUF];
    const char *av[3] = {"HGET", k, key};
    size_t al[3] = {4, tw_rr_pkey(r, p, "dead", k), key_len};
    redisReply *x;
    if ((rc = tw_rr_api_call(r, TW_RR_NSCRIPTS, r->slots[p], 0, 3, av, al, &x)) != 0)
        return rc;
    if (x->type == REDIS_REPLY_NIL)
        rc = TW_ENOENT;
    else if (x->type != REDIS_REPLY_STRING)
        rc = TW_EPROTO;
    else
        rc = rr_dead_give(key, key_len, x->str, x->len, fn, arg);
    freeReplyObject(x);
    return rc;
}

int tw_redis_dead_requeue(struct tw_redis *r, const void *key, size_t key_len, int64_t delay_ms)
{
    int rc = tw_rr_check_task(r, key, key_len, NULL, 0);
    if (rc)
        return rc;
    if (delay_ms < 0 || delay_ms > TW_REDIS_DELAY_MAX)
        return TW_EINVAL;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char kb[6][TW_RR_KEYBUF], d[24];
    const char *av[8];
    size_t al[8];
    tw_rr_keys(r, p, kb, av, al);
    av[7] = av[5]; /* ARGV: key, delay, channel */
    al[7] = al[5];
    av[5] = key;
    al[5] = key_len;
    al[6] = (size_t)snprintf(d, sizeof d, "%lld", (long long)delay_ms);
    av[6] = d;
    long long due;
    if ((rc = tw_rr_api_int(r, TW_RR_REQUEUE, r->slots[p], TW_RR_NKEYS, 3, av, al, &due)) != 0)
        return rc;
    return due >= 0 ? 0 : due == -1 ? TW_ENOENT : TW_ECONFLICT;
}

int tw_redis_dead_requeue_all(struct tw_redis *r, int64_t delay_ms, uint64_t *requeued)
{
    if (requeued)
        *requeued = 0;
    if (!r || delay_ms < 0 || delay_ms > TW_REDIS_DELAY_MAX)
        return TW_EINVAL;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    char d[24];
    size_t dl = (size_t)snprintf(d, sizeof d, "%lld", (long long)delay_ms);
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        char kb[6][TW_RR_KEYBUF], c[24] = "0";
        const char *av[9];
        size_t al[9];
        tw_rr_keys(r, p, kb, av, al);
        av[8] = av[5]; /* ARGV: cursor, count, delay, channel */
        al[8] = al[5];
        av[6] = "128";
        al[6] = 3;
        av[7] = d;
        al[7] = dl;
        do {
            av[5] = c;
            al[5] = strlen(c);
            redisReply *x;
            int rc = tw_rr_api_call(r, TW_RR_REQUEUE_ALL, r->slots[p], TW_RR_NKEYS, 4, av, al, &x);
            if (rc)
                return rc;
            if (x->type != REDIS_REPLY_ARRAY || x->elements != 3 ||
                x->element[0]->type != REDIS_REPLY_STRING || x->element[0]->len >= sizeof c ||
                x->element[1]->type != REDIS_REPLY_INTEGER) {
                freeReplyObject(x);
                return TW_EPROTO;
            }
            memcpy(c, x->element[0]->str, x->element[0]->len);
            c[x->element[0]->len] = 0;
            if (requeued)
                *requeued += (uint64_t)x->element[1]->integer;
            freeReplyObject(x);
        } while (strcmp(c, "0") != 0);
    }
    return 0;
}

/* CMD {q:p}:suffix on every partition (UNLINK, HLEN), the integer replies
 * summed into *sum. */
int tw_rr_each_part(struct tw_redis *r, const char *cmd, const char *suffix, uint64_t *sum)
{
    *sum = 0;
    for (uint32_t p = 0; p < r->cfg.partitions; p++) {
        char k[TW_RR_KEYBUF];
        const char *av[2] = {cmd, k};
        size_t al[2] = {strlen(cmd), tw_rr_pkey(r, p, suffix, k)};
        long long n;
        int rc = tw_rr_api_int(r, TW_RR_NSCRIPTS, r->slots[p], 0, 2, av, al, &n);
        if (rc)
            return rc;
        *sum += (uint64_t)n;
    }
    return 0;
}

int tw_redis_dead_purge(struct tw_redis *r, const void *key, size_t key_len)
{
    if (!r)
        return TW_EINVAL;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    uint64_t n = 0;
    if (!key)
        return tw_rr_each_part(r, "UNLINK", "dead", &n);
    if (key_len > TW_REDIS_KEY_MAX)
        return TW_E2BIG;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char k[TW_RR_KEYBUF];
    const char *av[3] = {"HDEL", k, key};
    size_t al[3] = {4, tw_rr_pkey(r, p, "dead", k), key_len};
    long long del;
    int rc = tw_rr_api_int(r, TW_RR_NSCRIPTS, r->slots[p], 0, 3, av, al, &del);
    return rc ? rc : del == 1 ? 0 : TW_ENOENT;
}

int tw_redis_dead_count(struct tw_redis *r, uint64_t *out)
{
    if (!r || !out)
        return TW_EINVAL;
    return tw_rr_each_part(r, "HLEN", "dead", out);
}
