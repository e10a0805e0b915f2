/* SPDX-License-Identifier: MIT */
/* A reference model of tw_tasks: a plain array indexed by key number holding
 * (present, value, deadline). Every operation is applied to both and the
 * results compared; any disagreement aborts with a message. Used by
 * tests/test_tasks_model.c (random operations) and fuzz/fuzz_tasks.c (bytes
 * -> operations).
 *
 * Covered: set/move/remove/get with both key kinds (string keys of many
 * shapes: empty, embedded NULs, long), advance (to any time, or bounded by a
 * maximum count), drain, max_pending, an allocator that fails at random
 * (every failing call must change nothing), re-entrant calls from execute and
 * from drain's fn, exact firing ticks, deadline order, exactly-once firing,
 * and that every byte allocated is freed; the batched calls (tw_tasks_*_many)
 * item by item against the same model, as if the single calls were made.
 *
 * Slack (tm_init_slack): with config.slack_shift, or the *_slack calls, a
 * task's model holds its window [deadline, hi] instead of one tick: it must
 * fire at a tick inside it (never before `deadline`), and get, execute and
 * drain must report a planned tick inside it; once seen, the planned tick is
 * the one it must fire at.
 */
#ifndef TWHEEL_TASKS_MODEL_H
#define TWHEEL_TASKS_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel.h"

#define TM_MAXK 20000
#define TM_FAIL(...)                                                             \
    do {                                                                         \
        fprintf(stderr, "tasks model: " __VA_ARGS__);                            \
        fprintf(stderr, "\n");                                                   \
        abort();                                                                 \
    } while (0)

struct tm_key {
    int present;
    uintptr_t value;
    uint64_t deadline; /* the earliest tick it may fire at */
    uint64_t hi;       /* the latest (deadline + slack, saturating) */
    int drained; /* in the batch of the drain running now, with: */
    uintptr_t drained_value;
    uint64_t drained_deadline, drained_hi;
};

struct tmodel {
    struct tw_tasks *t;
    int int_keys;
    uint32_t nkeys;
    struct tm_key k[TM_MAXK];
    uint64_t now;         /* model time (outside callbacks) */
    uint64_t target;      /* time the running advance goes to */
    uint64_t cb_now;      /* time while a callback runs */
    int in_cb;
    int in_advance;
    uint64_t last_fire;   /* deadline of the last fire in this advance */
    uint64_t fires_this;  /* fires in this advance */
    uint64_t drain_left;  /* tasks still to be handed to drain's fn */
    uint64_t rng;
    unsigned cb_ops;      /* re-entrant operations per callback (max) */
    unsigned fail_per_mille; /* allocator failure rate */
    size_t max_pending;
    unsigned slack_shift; /* the instance's config.slack_shift */
    int slack_calls;      /* set and move use the *_slack calls at random too */
    size_t pending;
    int64_t outstanding;  /* bytes held through the allocator */
    uint64_t serial;
    uint64_t total_fires, total_drained, total_ops, enomem, total_batched;
    struct tw_allocator alloc;
    unsigned char kbuf[128];
};

static inline uint64_t tm_rand(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void *tm_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size)
{
    struct tmodel *m = ctx;
    if (new_size == 0) {
        m->outstanding -= (int64_t)old_size;
        free(ptr);
        return NULL;
    }
    if (m->fail_per_mille && tm_rand(&m->rng) % 1000 < m->fail_per_mille)
        return NULL;
    void *r = realloc(ptr, new_size);
    if (r)
        m->outstanding += (int64_t)new_size - (int64_t)old_size;
    return r;
}

/* The key of number i: integers spread over 64 bits; strings of many shapes. */
static inline uint64_t tm_int_key(uint32_t i)
{
    return (uint64_t)i | ((uint64_t)(i * 2654435761u) << 40);
}

static size_t tm_bytes_key(uint32_t i, unsigned char *buf)
{
    switch (i % 4) {
    case 0:
        if (i == 0)
            return 0; /* the empty key */
        return (size_t)sprintf((char *)buf, "conn:%u", i);
    case 1: /* embedded NULs, short */
        buf[0] = 0;
        buf[1] = (unsigned char)i;
        buf[2] = (unsigned char)(i >> 8);
        buf[3] = 0;
        return 4;
    case 2: { /* long: 20..100 bytes */
        size_t n = 20 + i % 81;
        for (size_t j = 0; j < n; j++)
            buf[j] = (unsigned char)(i * 31 + j);
        return n;
    }
    default: /* prefixes of one another: p:3, p:35, p:355 */
        return (size_t)sprintf((char *)buf, "p:%u", i);
    }
}

static inline uint32_t tm_key_of_value(uintptr_t v)
{
    return (uint32_t)(v >> 24);
}

static void tm_execute(void *ctx, const struct tw_task *task);

static inline uint64_t tm_time(const struct tmodel *m)
{
    return m->in_cb ? m->cb_now : m->now;
}

/* The slack the instance gives a delay (config.slack_shift). */
static inline uint64_t tm_inst_slack(const struct tmodel *m, int64_t delay)
{
    return m->slack_shift && delay >= 0 ? (uint64_t)delay >> m->slack_shift : 0;
}

/* A task (re-)armed with delay (>= 0) and slack: its window. */
static void tm_window(struct tmodel *m, struct tm_key *k, int64_t delay, uint64_t slack)
{
    k->deadline = tm_time(m) + (delay ? (uint64_t)delay : 1);
    k->hi = k->deadline > UINT64_MAX - slack ? UINT64_MAX : k->deadline + slack;
}

/* A random explicit slack for the *_slack calls. */
static uint64_t tm_rand_slack(struct tmodel *m, int64_t delay)
{
    uint64_t x = tm_rand(&m->rng);
    switch (x % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return delay > 0 ? (uint64_t)delay >> 3 : 0;
    case 3: return (x >> 8) % 5000;
    case 4: return (x >> 8) % (UINT64_C(1) << 30);
    default: return (x >> 8) % 64 == 0 ? UINT64_MAX : (x >> 8) % 70;
    }
}

/* Check set(i, delay, value) with `slack`'s result rc against the model and apply it. */
static int tm_set_seen_slack(struct tmodel *m, uint32_t i, int64_t delay, uintptr_t value,
                             int rc, uint64_t slack)
{
    struct tm_key *k = &m->k[i];
    if (delay < 0) {
        if (rc != TW_EINVAL)
            TM_FAIL("set(%u, %lld) = %d, want EINVAL", i, (long long)delay, rc);
        return rc;
    }
    int want = k->present ? 0 : (m->max_pending && m->pending >= m->max_pending) ? TW_EFULL : 1;
    if (rc == TW_ENOMEM && m->fail_per_mille && want == 1) {
        m->enomem++;
        return rc;
    }
    if (rc != want)
        TM_FAIL("set(%u) = %d (%s), want %d", i, rc, tw_err_name(rc), want);
    if (rc < 0)
        return rc;
    if (!k->present)
        m->pending++;
    k->present = 1;
    k->value = value;
    tm_window(m, k, delay, slack);
    return rc;
}

/* As tm_set_seen_slack, with the instance's slack. */
static int tm_set_seen(struct tmodel *m, uint32_t i, int64_t delay, uintptr_t value, int rc)
{
    return tm_set_seen_slack(m, i, delay, value, rc, tm_inst_slack(m, delay));
}

static uintptr_t tm_new_value(struct tmodel *m, uint32_t i)
{
    return ((uintptr_t)i << 24) | (uintptr_t)(++m->serial & 0xffffff);
}

static int tm_set(struct tmodel *m, uint32_t i, int64_t delay)
{
    uintptr_t value = tm_new_value(m, i);
    int rc;
    if (m->slack_calls && tm_rand(&m->rng) % 2) {
        uint64_t slack = tm_rand_slack(m, delay);
        if (m->int_keys) {
            rc = tw_tasks_set_slack_int(m->t, tm_int_key(i), (void *)value, delay, slack);
        } else {
            size_t n = tm_bytes_key(i, m->kbuf);
            rc = tw_tasks_set_slack(m->t, m->kbuf, n, (void *)value, delay, slack);
        }
        return tm_set_seen_slack(m, i, delay, value, rc, slack);
    }
    if (m->int_keys) {
        rc = tw_tasks_set_int(m->t, tm_int_key(i), (void *)value, delay);
    } else {
        size_t n = tm_bytes_key(i, m->kbuf);
        rc = tw_tasks_set(m->t, m->kbuf, n, (void *)value, delay);
    }
    return tm_set_seen(m, i, delay, value, rc);
}

static int tm_move_seen_slack(struct tmodel *m, uint32_t i, int64_t delay, int rc,
                              uint64_t slack)
{
    struct tm_key *k = &m->k[i];
    int want = delay < 0 ? TW_EINVAL : k->present ? 0 : TW_ENOENT;
    if (rc != want)
        TM_FAIL("move(%u, %lld) = %d, want %d", i, (long long)delay, rc, want);
    if (rc == 0)
        tm_window(m, k, delay, slack);
    return rc;
}

static int tm_move_seen(struct tmodel *m, uint32_t i, int64_t delay, int rc)
{
    return tm_move_seen_slack(m, i, delay, rc, tm_inst_slack(m, delay));
}

static int tm_move(struct tmodel *m, uint32_t i, int64_t delay)
{
    int rc;
    if (m->slack_calls && tm_rand(&m->rng) % 2) {
        uint64_t slack = tm_rand_slack(m, delay);
        if (m->int_keys) {
            rc = tw_tasks_move_slack_int(m->t, tm_int_key(i), delay, slack);
        } else {
            size_t n = tm_bytes_key(i, m->kbuf);
            rc = tw_tasks_move_slack(m->t, m->kbuf, n, delay, slack);
        }
        return tm_move_seen_slack(m, i, delay, rc, slack);
    }
    if (m->int_keys) {
        rc = tw_tasks_move_int(m->t, tm_int_key(i), delay);
    } else {
        size_t n = tm_bytes_key(i, m->kbuf);
        rc = tw_tasks_move(m->t, m->kbuf, n, delay);
    }
    return tm_move_seen(m, i, delay, rc);
}

static int tm_remove_seen(struct tmodel *m, uint32_t i, void *v, int rc)
{
    struct tm_key *k = &m->k[i];
    if (rc != (k->present ? 0 : TW_ENOENT))
        TM_FAIL("remove(%u) = %d, present %d", i, rc, k->present);
    if (rc == 0) {
        if ((uintptr_t)v != k->value)
            TM_FAIL("remove(%u): value %p want %p", i, v, (void *)k->value);
        k->present = 0;
        m->pending--;
    }
    return rc;
}

static int tm_remove(struct tmodel *m, uint32_t i)
{
    int rc;
    void *v = NULL;
    if (m->int_keys) {
        rc = tw_tasks_remove_int(m->t, tm_int_key(i), &v);
    } else {
        size_t n = tm_bytes_key(i, m->kbuf);
        rc = tw_tasks_remove(m->t, m->kbuf, n, &v);
    }
    return tm_remove_seen(m, i, v, rc);
}

static void tm_get_seen(struct tmodel *m, uint32_t i, void *v, uint64_t d, int rc)
{
    struct tm_key *k = &m->k[i];
    if (rc != (k->present ? 0 : TW_ENOENT))
        TM_FAIL("get(%u) = %d, present %d", i, rc, k->present);
    if (rc == 0 && ((uintptr_t)v != k->value || d < k->deadline || d > k->hi))
        TM_FAIL("get(%u): value %p deadline %llu, want %p [%llu, %llu]", i, v,
                (unsigned long long)d, (void *)k->value, (unsigned long long)k->deadline,
                (unsigned long long)k->hi);
    if (rc == 0) /* seen: the planned tick it must fire at */
        k->deadline = k->hi = d;
}

static void tm_check_key(struct tmodel *m, uint32_t i)
{
    int rc;
    void *v = NULL;
    uint64_t d = 0;
    if (m->int_keys) {
        rc = tw_tasks_get_int(m->t, tm_int_key(i), &v, &d);
    } else {
        size_t n = tm_bytes_key(i, m->kbuf);
        rc = tw_tasks_get(m->t, m->kbuf, n, &v, &d);
    }
    tm_get_seen(m, i, v, d, rc);
}

static void tm_check_pending(struct tmodel *m)
{
    if (tw_tasks_pending(m->t) != m->pending)
        TM_FAIL("pending %zu, want %zu", tw_tasks_pending(m->t), m->pending);
}

/* One random operation on a random key; `r` chooses everything. */
static int64_t tm_delay(uint64_t r)
{
    switch (r % 8) {
    case 0: return 0;
    case 1: return 1;
    case 2: return (int64_t)(r >> 8) % 64;
    case 3: return (int64_t)(r >> 8) % 4096;
    case 4: return (int64_t)(r >> 8) % 300000;
    case 5: return (int64_t)(r >> 8) % (INT64_C(1) << 40);
    case 6: return (r >> 8) % 64 == 0 ? -1 - (int64_t)((r >> 16) % 5) : 2;
    default: return 64 - (int64_t)((r >> 8) % 3);
    }
}

/* A batched call (tw_tasks_*_many) of 1..TM_BATCH items of one kind on
 * random keys (repeats likely, some bad delays, and for string keys now and
 * then a NULL or oversize key), checked item by item against the model as if
 * the single calls had been made in array order. */
#define TM_BATCH 40
static void tm_batch(struct tmodel *m, uint64_t r)
{
    struct tw_tasks_item it[TM_BATCH];
    uint32_t key[TM_BATCH];
    uintptr_t val[TM_BATCH];
    static unsigned char kb[TM_BATCH][128]; /* key bytes (test is single-threaded) */
    static unsigned char huge[1]; /* its length is a lie: never read (E2BIG first) */
    unsigned op = (unsigned)(r % 4), n = 1 + (unsigned)((r >> 2) % TM_BATCH);
    /* A narrow window of keys half of the time, so that items repeat. */
    uint32_t span = (r >> 8) % 2 ? m->nkeys : (m->nkeys < 8 ? m->nkeys : 8);
    uint32_t base = (uint32_t)((r >> 10) % (m->nkeys - span + 1));
    memset(it, 0, sizeof it);
    for (unsigned j = 0; j < n; j++) {
        uint64_t x = tm_rand(&m->rng);
        key[j] = base + (uint32_t)(x % span);
        if (m->int_keys) {
            it[j].key_int = tm_int_key(key[j]);
        } else {
            it[j].key_len = tm_bytes_key(key[j], kb[j]);
            it[j].key = kb[j];
            if ((x >> 40) % 64 == 0) {
                it[j].key = NULL; /* TW_EINVAL */
            } else if ((x >> 40) % 64 == 1) {
                it[j].key = huge;
                it[j].key_len = (size_t)TW_TASKS_KEY_MAX + 1; /* TW_E2BIG */
            }
        }
        it[j].delay_ticks = tm_delay(x >> 20);
        val[j] = tm_new_value(m, key[j]);
        it[j].value = op == 0 ? (void *)val[j] : NULL;
        it[j].result = 12345;
    }
    int64_t rc;
    switch (op) {
    case 0: rc = tw_tasks_set_many(m->t, it, n); break;
    case 1: rc = tw_tasks_move_many(m->t, it, n); break;
    case 2: rc = tw_tasks_remove_many(m->t, it, n); break;
    default: rc = tw_tasks_get_many(m->t, it, n); break;
    }
    int64_t ok = 0;
    for (unsigned j = 0; j < n; j++) {
        int res = it[j].result;
        ok += res >= 0;
        if (!m->int_keys && !it[j].key) {
            if (res != TW_EINVAL)
                TM_FAIL("batch %u item %u: NULL key gave %d", op, j, res);
            continue;
        }
        if (!m->int_keys && it[j].key == huge) {
            if (res != TW_E2BIG)
                TM_FAIL("batch %u item %u: oversize key gave %d", op, j, res);
            continue;
        }
        switch (op) {
        case 0: tm_set_seen(m, key[j], it[j].delay_ticks, val[j], res); break;
        case 1: tm_move_seen(m, key[j], it[j].delay_ticks, res); break;
        case 2: tm_remove_seen(m, key[j], it[j].value, res); break;
        default: tm_get_seen(m, key[j], it[j].value, it[j].deadline, res); break;
        }
    }
    if (rc != ok)
        TM_FAIL("batch %u returned %lld, %lld items succeeded", op, (long long)rc, (long long)ok);
    m->total_batched += n;
    tm_check_pending(m);
}

static void tm_small_op(struct tmodel *m, uint64_t r)
{
    uint32_t i = (uint32_t)((r >> 4) % m->nkeys);
    int64_t d = tm_delay(r >> 20);
    if ((r >> 60) == 0) { /* one in 16: a batched call, from a callback too */
        tm_batch(m, r >> 8);
        return;
    }
    switch (r % 4) {
    case 0: tm_set(m, i, d); break;
    case 1: tm_move(m, i, d); break;
    case 2: tm_remove(m, i); break;
    default: tm_check_key(m, i); break;
    }
    tm_check_pending(m);
}

static void tm_callback_ops(struct tmodel *m)
{
    if (!m->cb_ops)
        return;
    unsigned n = (unsigned)(tm_rand(&m->rng) % (m->cb_ops + 1));
    for (unsigned j = 0; j < n; j++)
        tm_small_op(m, tm_rand(&m->rng));
}

static void tm_execute(void *ctx, const struct tw_task *task)
{
    struct tmodel *m = ctx;
    uint32_t i = tm_key_of_value((uintptr_t)task->value);
    if (!m->in_advance || m->in_cb)
        TM_FAIL("execute outside advance or nested");
    if (i >= m->nkeys)
        TM_FAIL("execute: bad value %p", task->value);
    struct tm_key *k = &m->k[i];
    if (!k->present || k->value != (uintptr_t)task->value)
        TM_FAIL("execute(%u): not armed (present %d) or stale value", i, k->present);
    if (task->deadline < k->deadline || task->deadline > k->hi ||
        tw_tasks_now(m->t) != task->deadline)
        TM_FAIL("execute(%u): deadline %llu now %llu, want [%llu, %llu]", i,
                (unsigned long long)task->deadline, (unsigned long long)tw_tasks_now(m->t),
                (unsigned long long)k->deadline, (unsigned long long)k->hi);
    if (task->deadline < m->last_fire || task->deadline < m->now || task->deadline > m->target)
        TM_FAIL("execute(%u): out of order (%llu after %llu, start %llu)", i,
                (unsigned long long)task->deadline, (unsigned long long)m->last_fire,
                (unsigned long long)m->now);
    if (m->int_keys) {
        if (task->key || task->key_len || task->key_int != tm_int_key(i))
            TM_FAIL("execute(%u): wrong int key", i);
    } else {
        size_t n = tm_bytes_key(i, m->kbuf);
        if (!task->key || task->key_len != n || memcmp(task->key, m->kbuf, n) != 0)
            TM_FAIL("execute(%u): wrong key bytes", i);
    }
    m->last_fire = task->deadline;
    k->present = 0;
    m->pending--;
    m->fires_this++;
    m->total_fires++;
    m->in_cb = 1;
    m->cb_now = task->deadline;
    tm_check_key(m, i); /* gone already */
    tm_check_pending(m);
    if (tw_tasks_advance(m->t, task->deadline + 1) != TW_EBUSY)
        TM_FAIL("advance from execute must be TW_EBUSY");
    tm_callback_ops(m);
    m->in_cb = 0;
}

static void tm_drain_fn(void *ctx, const struct tw_task *task)
{
    struct tmodel *m = ctx;
    uint32_t i = tm_key_of_value((uintptr_t)task->value);
    if (i >= m->nkeys || !m->k[i].drained || m->k[i].drained_value != (uintptr_t)task->value ||
        task->deadline < m->k[i].drained_deadline || task->deadline > m->k[i].drained_hi)
        TM_FAIL("drain fn: unexpected task %p (key %u, drained %d, value %p, deadline %llu vs %llu)",
                task->value, i, i < m->nkeys ? m->k[i].drained : -1,
                i < m->nkeys ? (void *)m->k[i].drained_value : NULL,
                (unsigned long long)task->deadline,
                (unsigned long long)(i < m->nkeys ? m->k[i].drained_deadline : 0));
    m->k[i].drained = 0;
    m->drain_left--;
    m->total_drained++;
    int was = m->in_cb;
    uint64_t was_now = m->cb_now;
    if (!was) {
        m->in_cb = 1;
        m->cb_now = m->now;
    }
    tm_callback_ops(m);
    m->in_cb = was;
    m->cb_now = was_now;
}

static void tm_drain(struct tmodel *m)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < m->nkeys; i++) {
        if (m->k[i].present) {
            m->k[i].present = 0;
            m->k[i].drained = 1;
            m->k[i].drained_value = m->k[i].value;
            m->k[i].drained_deadline = m->k[i].deadline;
            m->k[i].drained_hi = m->k[i].hi;
            n++;
        }
    }
    m->pending = 0;
    m->drain_left = n;
    int64_t rc = tw_tasks_drain(m->t, tm_drain_fn, m);
    if (rc != (int64_t)n || m->drain_left)
        TM_FAIL("drain = %lld, want %llu (%llu not handed out)", (long long)rc,
                (unsigned long long)n, (unsigned long long)m->drain_left);
    tm_check_pending(m);
}

static void tm_advance(struct tmodel *m, uint64_t target, size_t max)
{
    m->in_advance = 1;
    m->target = target;
    m->last_fire = 0;
    m->fires_this = 0;
    int64_t rc = tw_tasks_advance_max(m->t, target, max);
    m->in_advance = 0;
    if (rc < 0 || (uint64_t)rc != m->fires_this)
        TM_FAIL("advance = %lld, fired %llu", (long long)rc, (unsigned long long)m->fires_this);
    uint64_t now = tw_tasks_now(m->t);
    if (max && (size_t)rc == max) {
        if (now > target || (target > m->now && now < m->now))
            TM_FAIL("bounded advance left time at %llu", (unsigned long long)now);
    } else if (target > m->now && now != target) {
        TM_FAIL("advance to %llu left time at %llu", (unsigned long long)target,
                (unsigned long long)now);
    }
    if (now > m->now)
        m->now = now;
    for (uint32_t i = 0; i < m->nkeys; i++)
        if (m->k[i].present && m->k[i].hi < m->now + (max && (size_t)rc == max ? 0 : 1))
            TM_FAIL("key %u due by %llu still pending at %llu", i,
                    (unsigned long long)m->k[i].hi, (unsigned long long)m->now);
    tm_check_pending(m);
}

/* Create the instance (retrying while the failing allocator refuses), with
 * config.slack_shift = slack_shift, the *_slack calls mixed in if
 * slack_calls, config.capacity = capacity and config.eager_rearm = eager
 * (which must change no firing: the model is the same). */
static void tm_init_cap(struct tmodel *m, int int_keys, uint32_t nkeys, uint64_t seed,
                        unsigned cb_ops, unsigned fail_per_mille, size_t max_pending,
                        uint64_t start, unsigned slack_shift, int slack_calls, size_t capacity,
                        int eager)
{
    memset(m, 0, sizeof *m);
    m->int_keys = int_keys;
    m->nkeys = nkeys < 1 ? 1 : nkeys > TM_MAXK ? TM_MAXK : nkeys;
    m->rng = seed;
    m->cb_ops = cb_ops;
    m->fail_per_mille = fail_per_mille;
    m->max_pending = max_pending;
    m->slack_shift = slack_shift;
    m->slack_calls = slack_calls;
    m->now = start;
    m->alloc.fn = tm_alloc;
    m->alloc.ctx = m;
    struct tw_tasks_config cfg = {
        .execute = tm_execute,
        .ctx = m,
        .key_kind = int_keys ? TW_TASKS_KEY_INT : TW_TASKS_KEY_BYTES,
        .now = start,
        .max_pending = max_pending,
        .allocator = &m->alloc,
        .seed = {seed, seed ^ 0x5bd1e995},
        .slack_shift = slack_shift,
        .capacity = capacity,
        .eager_rearm = eager,
    };
    int rc;
    while ((rc = tw_tasks_new(&m->t, &cfg)) == TW_ENOMEM) {
        if (m->outstanding)
            TM_FAIL("failed new leaked %lld bytes", (long long)m->outstanding);
    }
    if (rc)
        TM_FAIL("tw_tasks_new = %d", rc);
}

/* As tm_init_cap, without a capacity hint, lazy. */
static inline void tm_init_slack(struct tmodel *m, int int_keys, uint32_t nkeys, uint64_t seed,
                                 unsigned cb_ops, unsigned fail_per_mille, size_t max_pending,
                                 uint64_t start, unsigned slack_shift, int slack_calls)
{
    tm_init_cap(m, int_keys, nkeys, seed, cb_ops, fail_per_mille, max_pending, start, slack_shift,
                slack_calls, 0, 0);
}

/* Create an exact instance (see tm_init_slack). */
static inline void tm_init(struct tmodel *m, int int_keys, uint32_t nkeys, uint64_t seed, unsigned cb_ops,
                    unsigned fail_per_mille, size_t max_pending, uint64_t start)
{
    tm_init_slack(m, int_keys, nkeys, seed, cb_ops, fail_per_mille, max_pending, start, 0, 0);
}

static void tm_check_all(struct tmodel *m)
{
    for (uint32_t i = 0; i < m->nkeys; i++)
        tm_check_key(m, i);
    tm_check_pending(m);
}

/* One top-level operation chosen by r. `grow` biases towards sets. */
static void tm_op(struct tmodel *m, uint64_t r, int grow)
{
    m->total_ops++;
    unsigned kind = (unsigned)(r % 100);
    uint64_t r2 = r >> 7;
    if (kind < 2 && !grow) {
        tm_drain(m);
    } else if (kind >= 2 && kind < 12) {
        uint64_t step;
        switch (grow ? r2 % 2 : r2 % 6) {
        case 0: step = 0; break;
        case 1: step = 1; break;
        case 2: step = (r2 >> 3) % 70; break;
        case 3: step = (r2 >> 3) % 5000; break;
        case 4: step = (r2 >> 3) % 400000; break;
        default: step = (r2 >> 3) % (UINT64_C(1) << 41); break;
        }
        if (UINT64_MAX - m->now < step + (UINT64_C(1) << 44))
            step = 0; /* stay clear of the end of time: delays are up to 2^40 */
        size_t max = (r2 >> 50) % 4 == 0 ? 1 + (size_t)((r2 >> 52) % 8) : 0;
        tm_advance(m, m->now + step, max);
    } else if (kind == 12) {
        tm_check_key(m, (uint32_t)(r2 % m->nkeys));
    } else if (kind == 13) {
        tm_batch(m, r2);
    } else {
        unsigned k2 = kind - 14; /* 0..85 */
        uint32_t i = (uint32_t)(r2 % m->nkeys);
        int64_t d = tm_delay(r2 >> 20);
        if (k2 < (grow ? 50u : 20u))
            tm_set(m, i, d);
        else if (k2 < (grow ? 70u : 45u))
            tm_move(m, i, d);
        else
            tm_remove(m, i);
        tm_check_pending(m);
    }
}

/* Drain what is left, free everything, and check no byte is held. */
static void tm_finish(struct tmodel *m)
{
    tm_check_all(m);
    m->cb_ops = 0;
    tm_advance(m, m->now + (UINT64_C(1) << 42), 0);
    tm_drain(m);
    tw_tasks_free(m->t);
    m->t = NULL;
    if (m->outstanding != 0)
        TM_FAIL("%lld bytes not freed", (long long)m->outstanding);
}

#endif /* TWHEEL_TASKS_MODEL_H */
