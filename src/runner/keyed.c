/* SPDX-License-Identifier: MIT */
/* twheel runner: the single calls, set, move and remove of one key (design:
 * runner.c). */
#include "runner/internal.h"

/* A validated key and its shard. */
struct rn_key {
    const void *p;
    size_t len;
    uint64_t num;
    struct rn_shard *shard;
};

static int rn_key_bytes(const struct tw_runner *r, const void *key, size_t len, struct rn_key *k)
{
    if (!r || !key || r->int_keys)
        return TW_EINVAL;
    if (len > TW_RUNNER_KEY_MAX)
        return TW_E2BIG;
    k->p = key;
    k->len = len;
    k->num = 0;
    k->shard = rn_shard_of(r, tw_siphash13(key, len, r->k0, r->k1));
    return 0;
}

static int rn_key_int(const struct tw_runner *r, uint64_t key, struct rn_key *k)
{
    if (!r || !r->int_keys)
        return TW_EINVAL;
    k->p = NULL;
    k->len = 0;
    k->num = key;
    k->shard = rn_shard_of(r, tw_hash_int(key, r->k0, r->k1));
    return 0;
}


static int rn_apply(struct tw_runner *r, const struct rn_key *k, enum rn_op op, void *value,
                    void **out_value, int64_t delay_ns)
{
    if (op != RN_REMOVE && delay_ns < 0)
        return TW_EINVAL;
    uint64_t due = op == RN_REMOVE ? 0 : rn_due_tick(r, delay_ns);
    struct rn_shard *s = k->shard;
    int swept = 0;
again:
    rn_lock(s);
    if (s->closed) {
        rn_unlock(s);
        return TW_ECLOSED;
    }
    struct tw_tasks *t = s->tasks;
    uint64_t now = rn_shard_now(s);
    int64_t delay = due > now ? (int64_t)(due - now) : 0;
    uint64_t deadline = now + (delay ? (uint64_t)delay : 1);
    int rc;
    switch (op) {
    case RN_SET:
        if (__builtin_expect(r->slack_shift != 0, 0)) {
            uint64_t slack = rn_slack_ticks(r, delay_ns);
            rc = r->int_keys ? tw_tasks_set_slack_int(t, k->num, value, delay, slack)
                             : tw_tasks_set_slack(t, k->p, k->len, value, delay, slack);
        } else {
            rc = r->int_keys ? tw_tasks_set_int(t, k->num, value, delay)
                             : tw_tasks_set(t, k->p, k->len, value, delay);
        }
        if (rc == 1 && r->max_pending && !rn_admit_(r, s)) {
            if (r->int_keys)
                tw_tasks_remove_int(t, k->num, NULL);
            else
                tw_tasks_remove(t, k->p, k->len, NULL);
            rc = TW_EFULL;
        }
        break;
    case RN_MOVE:
        if (__builtin_expect(r->slack_shift != 0, 0)) {
            uint64_t slack = rn_slack_ticks(r, delay_ns);
            rc = r->int_keys ? tw_tasks_move_slack_int(t, k->num, delay, slack)
                             : tw_tasks_move_slack(t, k->p, k->len, delay, slack);
        } else {
            rc = r->int_keys ? tw_tasks_move_int(t, k->num, delay)
                             : tw_tasks_move(t, k->p, k->len, delay);
        }
        break;
    default:
        rc = r->int_keys ? tw_tasks_remove_int(t, k->num, out_value)
                         : tw_tasks_remove(t, k->p, k->len, out_value);
        if (rc == 0)
            rn_pending_sub(r, s, 1);
        break;
    }
    if (r->clock && rc >= 0 && op != RN_REMOVE) /* under the lock: see rn_clock_wake */
        rn_clock_wake(r, deadline);
    if (rc == TW_EFULL && !swept) {
        /* Nothing changed (the key was taken out again). Take back every
         * shard's spare room, each lock alone, and try once more: so a
         * refusal means the limit was reached at some instant of the call
         * (exact for one producer). */
        rn_unlock(s);
        rn_room_sweep_(r);
        swept = 1;
        goto again;
    }
    uint64_t sleeping = atomic_load_explicit(&r->sleep_until, memory_order_relaxed);
    rn_unlock(s);
    if (rc >= 0 && op != RN_REMOVE && deadline < sleeping)
        rn_kick_(r, deadline, sleeping);
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
