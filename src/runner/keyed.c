/* SPDX-License-Identifier: MIT */
/* twheel runner: the single calls, set, move and remove of one key (design:
 * runner.c). */
#include "runner/internal.h"

/* A checked key, its one hash (the shard's index uses it too: the shards'
 * instances have the runner's seed) and its shard. */
struct rn_key {
    struct tasks_keyref kr;
    struct rn_shard *shard;
};

static inline int rn_key_bytes(const struct tw_runner *r, const void *key, size_t len,
                               struct rn_key *k)
{
    if (!r || !key || r->int_keys)
        return TW_EINVAL;
    if (len > TW_RUNNER_KEY_MAX)
        return TW_E2BIG;
    tasks_keyref_str_seeded(r->k0, r->k1, key, len, &k->kr);
    k->shard = rn_shard_of(r, k->kr.h);
    return 0;
}

static inline int rn_key_int(const struct tw_runner *r, uint64_t key, struct rn_key *k)
{
    if (!r || !r->int_keys)
        return TW_EINVAL;
    tasks_keyref_int_seeded(r->k0, r->k1, key, &k->kr);
    k->shard = rn_shard_of(r, k->kr.h);
    return 0;
}

/* The seam of the single calls: the key hashed once (rn_key), the due tick
 * absolute from the start (the first tick at or after now + delay_ns, on
 * the runner's clock; due + off on its shard's), the slack an argument,
 * and a set admitted before anything is inserted (rn_set_in_shard). */
static int rn_apply(struct tw_runner *r, const struct rn_key *k, enum rn_op op, void *value,
                    void **out_value, int64_t delay_ns)
{
    uint64_t due = 0, slack = 0;
    if (op != RN_REMOVE) {
        if (delay_ns < 0)
            return TW_EINVAL;
        due = rn_due_tick(r, delay_ns);
        if (__builtin_expect(r->slack_shift != 0, 0))
            slack = rn_slack_ticks(r, delay_ns);
    }
    struct rn_shard *s = k->shard;
    int swept = 0, rc;
again:
    rn_lock(s);
    if (s->closed) {
        rn_unlock(s);
        return TW_ECLOSED;
    }
    switch (op) {
    case RN_SET:
        rc = rn_set_in_shard(r, s, &k->kr, value, due + s->off, slack);
        if (rc == TW_EFULL && !swept) {
            /* Nothing was inserted. Take back every shard's spare room,
             * each lock alone, and try once more: so a refusal means the
             * limit was reached at some instant of the call (exact for one
             * producer). */
            rn_unlock(s);
            rn_room_sweep_(r);
            swept = 1;
            goto again;
        }
        break;
    case RN_MOVE:
        rc = tasks_move_at(s->tasks, &k->kr, due + s->off, slack, r->lazy);
        break;
    default:
        rc = tasks_remove_key(s->tasks, &k->kr, out_value);
        if (rc == 0)
            rn_pending_sub(r, s, 1);
        rn_unlock(s);
        return rc;
    }
    /* After the arm, under the lock: the tick thread's wake-up (see the
     * design comment), and the tick the task fires at, due or the shard's
     * next tick if that is later, when the tick thread or the clock must
     * hear of it (it is never earlier than due). */
    uint64_t sleeping = atomic_load_explicit(&r->sleep_until, memory_order_relaxed), at = 0;
    if (rc >= 0 && (r->clock || due < sleeping)) {
        uint64_t now = rn_shard_now(s);
        at = due > now ? due : now + 1;
        if (r->clock) /* under the lock: see rn_clock_wake */
            rn_clock_wake(r, at);
    }
    if (rc >= 0)
        at = rn_work_kick(r, s, sleeping, at);
    rn_unlock(s);
    if (at && at < sleeping)
        rn_kick_(r, at, sleeping);
    return rc;
}

int tw_runner_set(struct tw_runner *r, const void *key, size_t key_len, void *value,
                  int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_bytes(r, key, key_len, &k);
    return rc ? rc : rn_apply(r, &k, RN_SET, value, NULL, delay_ns);
}

int tw_runner_set_int(struct tw_runner *r, uint64_t key, void *value, int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_int(r, key, &k);
    return rc ? rc : rn_apply(r, &k, RN_SET, value, NULL, delay_ns);
}

int tw_runner_move(struct tw_runner *r, const void *key, size_t key_len, int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_bytes(r, key, key_len, &k);
    return rc ? rc : rn_apply(r, &k, RN_MOVE, NULL, NULL, delay_ns);
}

int tw_runner_move_int(struct tw_runner *r, uint64_t key, int64_t delay_ns)
{
    struct rn_key k;
    int rc = rn_key_int(r, key, &k);
    return rc ? rc : rn_apply(r, &k, RN_MOVE, NULL, NULL, delay_ns);
}

int tw_runner_remove(struct tw_runner *r, const void *key, size_t key_len, void **value)
{
    struct rn_key k;
    int rc = rn_key_bytes(r, key, key_len, &k);
    return rc ? rc : rn_apply(r, &k, RN_REMOVE, NULL, value, 0);
}

int tw_runner_remove_int(struct tw_runner *r, uint64_t key, void **value)
{
    struct rn_key k;
    int rc = rn_key_int(r, key, &k);
    return rc ? rc : rn_apply(r, &k, RN_REMOVE, NULL, value, 0);
}
