/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the producer calls. set, move, remove and set_many,
 * each one SET, MOVE or REMOVE script call (set_many pipelined) on the
 * client's router under api_mu.
 *
 * A lost reply (router.c) is retried within command_timeout_ms; what that
 * retry answers must be the call's own answer. SET run twice stores the
 * same tasks. move and remove are not so: a retried remove would find its
 * own removal and answer "absent", a retried move would re-arm the task
 * again, or find it gone (delivered meanwhile). So each move and remove
 * carries a request id, the name of a marker key in its partition's slot
 * ({q:p}:r:<16 hex digits>: a per-client counter from a random start, so
 * the ids of the queue's clients do not meet); the script reads the marker
 * first and answers what it holds, and sets it (PX rr_mark_ms) only when it
 * changed something: the result a retry must repeat. An "absent" answer
 * needs no memory: a retry that finds the task set meanwhile and removes
 * it is still one removal, inside the call's span. The marker outlives
 * every attempt the router sends (rr_command: a retry after a lost attempt
 * only before the call's deadline, and its reply awaited for at most
 * command_timeout_ms more): 2 * command_timeout_ms + 1 s. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/internal.h"

int tw_rr_int_reply(const redisReply *x, long long *out)
{
    if (x->type != REDIS_REPLY_INTEGER)
        return TW_EPROTO;
    *out = x->integer;
    return 0;
}

static int rr_check_key(const void *key, size_t key_len)
{
    if (!key)
        return TW_EINVAL;
    return key_len > TW_REDIS_KEY_MAX ? TW_E2BIG : 0;
}

static int rr_check_delay(int64_t delay_ms)
{
    return delay_ms < 0 || delay_ms > TW_REDIS_DELAY_MAX ? TW_EINVAL : 0;
}

/* A delay as the SET script reads it: 8 bytes, little-endian (struct.unpack
 * 'I8': one C call for a call's delays, where a decimal ARGV string per task
 * would cost Redis a Lua string and a string-to-number conversion each). */
static void rr_put_delay(unsigned char *b, int64_t delay_ms)
{
    uint64_t v = (uint64_t)delay_ms;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static int rr_api_eval(struct tw_redis *r, unsigned id, uint32_t p, int nargs, const char **av,
                       const size_t *al, long long *result)
{
    redisReply *x;
    pthread_mutex_lock(&r->api_mu);
    r->api.wait_replicas = (int)r->cfg.wait_replicas; /* WAIT in the same write (wait.c) */
    r->api.wait_ms = r->cfg.wait_timeout_ms;
    int rc = tw_rr_eval(&r->api, id, r->slots[p], TW_RR_NKEYS, nargs, av, al, &x);
    int w = tw_rr_wait_check(r); /* TW_EREPLICAS: written, not confirmed by the replicas */
    tw_rr_note(r, rc ? rc : w); /* the calling thread's last error (errors.c) */
    pthread_mutex_unlock(&r->api_mu);
    if (rc)
        return rc;
    rc = tw_rr_int_reply(x, result);
    freeReplyObject(x);
    return rc ? rc : w;
}

int tw_redis_set(struct tw_redis *r, const void *key, size_t key_len, const void *payload,
                 size_t payload_len, int64_t delay_ms)
{
    if (!r)
        return TW_EINVAL;
    int rc = rr_check_key(key, key_len);
    if (rc)
        return rc;
    if (!payload && payload_len)
        return TW_EINVAL;
    if (payload_len > TW_REDIS_PAYLOAD_MAX)
        return TW_E2BIG;
    if ((rc = rr_check_delay(delay_ms)) != 0)
        return rc;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char kb[6][TW_RR_KEYBUF];
    unsigned char d[8];
    const char *av[10];
    size_t al[10];
    tw_rr_keys(r, p, kb, av, al); /* av[5] is the channel, ARGV[1] */
    av[6] = "1"; /* ARGV: channel, n, n keys, n payloads, the delays */
    al[6] = 1;
    av[7] = key;
    al[7] = key_len;
    av[8] = payload ? payload : "";
    al[8] = payload_len;
    rr_put_delay(d, delay_ms);
    av[9] = (const char *)d;
    al[9] = 8;
    long long nargv;
    return rr_api_eval(r, TW_RR_SET, p, 5, av, al, &nargv);
}

/* The marker key of a move or remove of partition p, into buf; its length. */
static size_t rr_mark_key(struct tw_redis *r, uint32_t p, char buf[TW_RR_KEYBUF])
{
    uint64_t id = atomic_fetch_add(&r->req_seq, 1);
    return (size_t)snprintf(buf, TW_RR_KEYBUF, "{%s:%u}:r:%016llx", r->queue, (unsigned)p,
                            (unsigned long long)id);
}

/* How long a marker lives, in ms, as the scripts take it (decimal). */
static size_t rr_mark_ms(const struct tw_redis *r, char buf[24])
{
    return (size_t)snprintf(buf, 24, "%llu", 2ull * r->cfg.command_timeout_ms + 1000u);
}

int tw_redis_move(struct tw_redis *r, const void *key, size_t key_len, int64_t delay_ms)
{
    if (!r)
        return TW_EINVAL;
    int rc = rr_check_key(key, key_len);
    if (rc || (rc = rr_check_delay(delay_ms)) != 0)
        return rc;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char kb[6][TW_RR_KEYBUF], d[24], mk[TW_RR_KEYBUF], ms[24];
    const char *av[10];
    size_t al[10];
    tw_rr_keys(r, p, kb, av, al);
    av[7] = av[5];
    al[7] = al[5];
    av[5] = key;
    al[5] = key_len;
    al[6] = (size_t)snprintf(d, sizeof d, "%lld", (long long)delay_ms);
    av[6] = d;
    al[8] = rr_mark_key(r, p, mk);
    av[8] = mk;
    al[9] = rr_mark_ms(r, ms);
    av[9] = ms;
    long long due;
    rc = rr_api_eval(r, TW_RR_MOVE, p, 5, av, al, &due);
    return rc && rc != TW_EREPLICAS ? rc : due < 0 ? TW_ENOENT : rc;
}

int tw_redis_remove(struct tw_redis *r, const void *key, size_t key_len)
{
    if (!r)
        return TW_EINVAL;
    int rc = rr_check_key(key, key_len);
    if (rc)
        return rc;
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    uint32_t p = tw_rr_part_of(r, key, key_len);
    char kb[6][TW_RR_KEYBUF], mk[TW_RR_KEYBUF], ms[24];
    const char *av[8];
    size_t al[8];
    tw_rr_keys(r, p, kb, av, al);
    av[5] = key;
    al[5] = key_len;
    al[6] = rr_mark_key(r, p, mk);
    av[6] = mk;
    al[7] = rr_mark_ms(r, ms);
    av[7] = ms;
    long long v;
    rc = rr_api_eval(r, TW_RR_REMOVE, p, 3, av, al, &v);
    return rc && rc != TW_EREPLICAS ? rc : v < 0 ? TW_ENOENT : rc;
}

/* set_many: the items sorted by partition (stable); within a partition, a
 * key given more than once keeps only its last item (the SET script takes
 * distinct keys), and the rest go in order of delay, cut into calls of at
 * most TW_RR_SET_BATCH items and about RR_SET_BYTES of payload. In delay
 * order the SET script meets each due bucket in one run of consecutive
 * tasks and adds a run with one ZADD (any order is correct; this one is
 * cheap for the script), and sorting the whole partition before cutting
 * gives each call a narrow band of due times (fewer ZADD and EXISTS per
 * task): with delays spread over a minute, a batch of 10,000 over 16
 * partitions makes calls that touch ~18 buckets each, where calls cut in
 * arrival order would touch ~70. No key is in two calls, so no order between
 * calls matters for which item wins. */
#define RR_SET_BYTES (512u << 10)

/* one item of a call: what the client sorts by */
struct rr_sel {
    uint64_t hash;
    int64_t delay;
    size_t idx; /* in items */
    const struct tw_redis_item *it;
};

struct rr_many {
    struct tw_redis *r;
    const struct tw_redis_item *items;
    uint32_t *part;  /* partition of each item */
    uint64_t *hash;  /* FNV-1a-64 of each item's key */
    size_t *order;   /* item indexes by partition */
    size_t *call;    /* first position in order of each call, and one past the last */
    char kb[6][TW_RR_KEYBUF];
    unsigned char d[8 * TW_RR_SET_BATCH]; /* the call's delays (rr_put_delay) */
    char nbuf[24];
    struct rr_sel *sel; /* one partition's items while they are sorted */
};

/* by key (hash first), then by position: a key's items are adjacent, its
 * last item last */
static int rr_sel_by_key(const void *a, const void *b)
{
    const struct rr_sel *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    if (x->it->key_len != y->it->key_len)
        return x->it->key_len < y->it->key_len ? -1 : 1;
    int c = memcmp(x->it->key, y->it->key, x->it->key_len);
    if (c)
        return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int rr_sel_by_delay(const void *a, const void *b)
{
    const struct rr_sel *x = a, *y = b;
    if (x->delay != y->delay)
        return x->delay < y->delay ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static bool rr_sel_same_key(const struct rr_sel *x, const struct rr_sel *y)
{
    return x->hash == y->hash && x->it->key_len == y->it->key_len &&
           memcmp(x->it->key, y->it->key, x->it->key_len) == 0;
}

/* Sort one partition's items order[0..n) as set_many sends them: each key's
 * last item only, by delay. Returns how many are left. */
static size_t rr_many_sort(struct rr_many *m, size_t *order, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        size_t i = order[j];
        m->sel[j] = (struct rr_sel){m->hash[i], m->items[i].delay_ms, i, &m->items[i]};
    }
    qsort(m->sel, n, sizeof m->sel[0], rr_sel_by_key);
    size_t k = 0;
    for (size_t j = 0; j < n; j++) /* keep each key's last item */
        if (j + 1 == n || !rr_sel_same_key(&m->sel[j], &m->sel[j + 1]))
            m->sel[k++] = m->sel[j];
    qsort(m->sel, k, sizeof m->sel[0], rr_sel_by_delay);
    for (size_t j = 0; j < k; j++)
        order[j] = m->sel[j].idx;
    return k;
}

static int rr_many_build(void *ctx, size_t c, int *slot, const char **av, size_t *al, int *nargs)
{
    struct rr_many *m = ctx;
    size_t from = m->call[c], to = m->call[c + 1];
    uint32_t p = m->part[m->order[from]];
    *slot = m->r->slots[p];
    tw_rr_keys(m->r, p, m->kb, av, al); /* av[5]: the channel */
    size_t k = to - from; /* ARGV: channel, k, k keys, k payloads, the delays */
    al[6] = (size_t)snprintf(m->nbuf, sizeof m->nbuf, "%zu", k);
    av[6] = m->nbuf;
    for (size_t x = 0; x < k; x++) { /* distinct keys in delay order (set_many) */
        const struct tw_redis_item *it = &m->items[m->order[from + x]];
        av[7 + x] = it->key;
        al[7 + x] = it->key_len;
        av[7 + k + x] = it->payload ? it->payload : "";
        al[7 + k + x] = it->payload_len;
        rr_put_delay(m->d + 8 * x, it->delay_ms);
    }
    av[7 + 2 * k] = (const char *)m->d;
    al[7 + 2 * k] = 8 * k;
    *nargs = (int)(3 + 2 * k);
    return 0;
}

/* Free what set_many allocated (any of it NULL). */
static void rr_many_free(struct rr_many *m, size_t *count)
{
    if (m) {
        free(m->part);
        free(m->hash);
        free(m->order);
        free(m->call);
        free(m->sel);
    }
    free(m);
    free(count);
}

int tw_rr_many_check(void *ctx, size_t i, const redisReply *x)
{
    (void)ctx;
    (void)i;
    return !x || x->type == REDIS_REPLY_INTEGER ? 0 : TW_EPROTO; /* NULL: lost, nothing to do */
}

int tw_redis_set_many(struct tw_redis *r, const struct tw_redis_item *items, size_t n)
{
    if (!r || (!items && n) || n > INT32_MAX)
        return TW_EINVAL;
    for (size_t i = 0; i < n; i++) {
        int rc = rr_check_key(items[i].key, items[i].key_len);
        if (rc)
            return rc;
        if (!items[i].payload && items[i].payload_len)
            return TW_EINVAL;
        if (items[i].payload_len > TW_REDIS_PAYLOAD_MAX)
            return TW_E2BIG;
        if ((rc = rr_check_delay(items[i].delay_ms)) != 0)
            return rc;
    }
    if (atomic_load(&r->closed))
        return TW_ECLOSED;
    if (n == 0)
        return 0;
    uint32_t P = r->cfg.partitions;
    struct rr_many *m = malloc(sizeof *m);
    size_t *count = calloc((size_t)P + 1, sizeof *count);
    if (m) {
        m->part = malloc(n * sizeof *m->part);
        m->hash = malloc(n * sizeof *m->hash);
        m->order = malloc(n * sizeof *m->order);
        m->call = malloc((n + 1) * sizeof *m->call);
        m->sel = malloc(n * sizeof *m->sel);
    }
    if (!m || !count || !m->part || !m->hash || !m->order || !m->call || !m->sel) {
        rr_many_free(m, count);
        return TW_ENOMEM;
    }
    m->r = r;
    m->items = items;
    for (size_t i = 0; i < n; i++) { /* counting sort by partition, stable */
        m->hash[i] = tw_rr_hash_of(items[i].key, items[i].key_len);
        m->part[i] = (uint32_t)(m->hash[i] % P);
        count[m->part[i] + 1]++;
    }
    for (uint32_t p = 0; p < P; p++)
        count[p + 1] += count[p];
    for (size_t i = 0; i < n; i++)
        m->order[count[m->part[i]]++] = i;
    /* each partition's run (count[p] is now its end) sorted and packed */
    size_t kept = 0, from = 0;
    for (uint32_t p = 0; p < P; p++) {
        size_t k = rr_many_sort(m, m->order + from, count[p] - from);
        memmove(m->order + kept, m->order + from, k * sizeof *m->order);
        kept += k;
        from = count[p];
    }
    size_t ncalls = 0, bytes = 0;
    for (size_t j = 0; j < kept; j++) {
        const struct tw_redis_item *it = &items[m->order[j]];
        if (j == 0 || m->part[m->order[j]] != m->part[m->order[j - 1]] ||
            j - m->call[ncalls - 1] >= TW_RR_SET_BATCH || bytes + it->payload_len > RR_SET_BYTES) {
            m->call[ncalls++] = j;
            bytes = 0;
        }
        bytes += it->payload_len + it->key_len;
    }
    m->call[ncalls] = kept;
    pthread_mutex_lock(&r->api_mu);
    uint64_t opened = r->api.opened;
    int rc = tw_rr_eval_many(&r->api, TW_RR_SET, ncalls, TW_RR_NKEYS, rr_many_build, m,
                             tw_rr_many_check);
    if (rc == 0 && r->cfg.wait_replicas) /* one WAIT per master after the calls (wait.c) */
        rc = tw_rr_wait_many(r, opened);
    tw_rr_note(r, rc);
    pthread_mutex_unlock(&r->api_mu);
    rr_many_free(m, count);
    return rc ? rc : (int)n; /* TW_EREPLICAS: every item stored on the master */
}
