/* SPDX-License-Identifier: MIT */
/* twheel runner: the batched calls, tw_runner_set_many and friends (design:
 * runner.c). */
#include <string.h>

#include "runner/internal.h"

/* Items are taken RN_GROUP at a time: validated, their due ticks computed
 * from one clock read, grouped by shard (a stable counting sort, so items
 * of one key keep their order), and each shard's group applied under one
 * acquisition of its lock with tw_tasks' batched call (which prefetches the
 * next keys' slots and entries). With max_pending, sets go one by one under
 * that lock, since a refused new key must be taken out before the next item
 * of the same key is applied. */

static uint64_t rn_item_shard(const struct tw_runner *r, const struct tw_runner_item *it)
{
    uint64_t h = r->int_keys ? tw_hash_int(it->key_int, r->k0, r->k1)
                             : tw_siphash13(it->key, it->key_len, r->k0, r->k1);
    return tw_hash_home(h, r->nshards);
}

/* Sets of one shard's group one by one, as rn_apply does (max_pending, or
 * slack: each item's slack in ticks is in its `deadline` field, unused by a
 * set). */
static void rn_set_limited(struct tw_runner *r, struct rn_shard *s, struct tw_tasks_item *it,
                           size_t m)
{
    struct tw_tasks *t = s->tasks;
    for (size_t i = 0; i < m; i++) {
        int rc;
        if (r->slack_shift)
            rc = r->int_keys ? tw_tasks_set_slack_int(t, it[i].key_int, it[i].value,
                                                      it[i].delay_ticks, it[i].deadline)
                             : tw_tasks_set_slack(t, it[i].key, it[i].key_len, it[i].value,
                                                  it[i].delay_ticks, it[i].deadline);
        else
            rc = r->int_keys
                     ? tw_tasks_set_int(t, it[i].key_int, it[i].value, it[i].delay_ticks)
                     : tw_tasks_set(t, it[i].key, it[i].key_len, it[i].value, it[i].delay_ticks);
        if (rc == 1 && r->max_pending && !rn_admit_(r, s)) {
            if (r->int_keys)
                tw_tasks_remove_int(t, it[i].key_int, NULL);
            else
                tw_tasks_remove(t, it[i].key, it[i].key_len, NULL);
            rc = TW_EFULL;
        }
        it[i].result = rc;
    }
}

/* One shard's group, copied into tmp[0..m) with `delay_ticks` holding due ticks. */
static void rn_apply_group(struct tw_runner *r, struct rn_shard *s, struct tw_tasks_item *tmp,
                           size_t m, enum rn_op op)
{
    rn_lock(s);
    if (s->closed) {
        rn_unlock(s);
        for (size_t i = 0; i < m; i++)
            tmp[i].result = TW_ECLOSED;
        return;
    }
    struct tw_tasks *t = s->tasks;
    uint64_t now = rn_shard_now(s), earliest = UINT64_MAX;
    for (size_t i = 0; i < m; i++) { /* due tick -> delay from the shard's now */
        uint64_t due = (uint64_t)tmp[i].delay_ticks;
        tmp[i].delay_ticks = due > now ? (int64_t)(due - now) : 0;
        uint64_t deadline = now + (tmp[i].delay_ticks ? (uint64_t)tmp[i].delay_ticks : 1);
        if (deadline < earliest)
            earliest = deadline;
    }
    switch (op) {
    case RN_SET:
        if (r->max_pending || r->slack_shift)
            rn_set_limited(r, s, tmp, m);
        else
            (void)tw_tasks_set_many(t, tmp, m);
        break;
    case RN_MOVE:
        if (r->slack_shift) /* one by one, each with its slack (in `deadline`) */
            for (size_t i = 0; i < m; i++)
                tmp[i].result = r->int_keys
                                    ? tw_tasks_move_slack_int(t, tmp[i].key_int, tmp[i].delay_ticks,
                                                              tmp[i].deadline)
                                    : tw_tasks_move_slack(t, tmp[i].key, tmp[i].key_len,
                                                          tmp[i].delay_ticks, tmp[i].deadline);
        else
            (void)tw_tasks_move_many(t, tmp, m);
        break;
    default:
        (void)tw_tasks_remove_many(t, tmp, m);
        for (size_t i = 0; i < m; i++)
            if (tmp[i].result == 0)
                rn_pending_sub(r, s, 1);
        break;
    }
    if (r->clock && op != RN_REMOVE && earliest != UINT64_MAX)
        rn_clock_wake(r, earliest);
    uint64_t sleeping = atomic_load_explicit(&r->sleep_until, memory_order_relaxed);
    rn_unlock(s);
    if (op != RN_REMOVE && earliest < sleeping)
        rn_kick_(r, earliest, sleeping);
}

static int64_t rn_many_group(struct tw_runner *r, struct tw_runner_item *items, size_t m,
                             enum rn_op op)
{
    struct tw_tasks_item tmp[RN_GROUP];
    uint16_t shard_of[RN_GROUP], order[RN_GROUP];
    uint16_t count[RN_MAX_SHARDS + 1];
    memset(count, 0, (r->nshards + 1) * sizeof count[0]);
    uint64_t now_ns = tw_mono_ns_() - r->start_ns;
    size_t good = 0;
    for (size_t i = 0; i < m; i++) {
        struct tw_runner_item *it = &items[i];
        int rc = 0;
        if (!r->int_keys && !it->key)
            rc = TW_EINVAL;
        else if (!r->int_keys && it->key_len > TW_RUNNER_KEY_MAX)
            rc = TW_E2BIG;
        else if (op != RN_REMOVE && it->delay_ns < 0)
            rc = TW_EINVAL;
        it->result = rc;
        if (rc) {
            shard_of[i] = UINT16_MAX;
            continue;
        }
        shard_of[i] = (uint16_t)rn_item_shard(r, it);
        count[shard_of[i] + 1]++;
        good++;
    }
    for (unsigned sh = 0; sh < r->nshards; sh++) /* count[sh] = start of shard sh */
        count[sh + 1] += count[sh];
    for (size_t i = 0; i < m; i++) {
        if (shard_of[i] == UINT16_MAX)
            continue;
        uint16_t at = count[shard_of[i]]++;
        order[at] = (uint16_t)i;
        tmp[at] = (struct tw_tasks_item){.key = items[i].key,
                                         .key_len = items[i].key_len,
                                         .key_int = items[i].key_int,
                                         .value = items[i].value};
        if (op != RN_REMOVE) { /* the due tick, as rn_due_tick, from one clock read */
            tmp[at].delay_ticks =
                (int64_t)tw_ticks_up_(now_ns + (uint64_t)items[i].delay_ns, r->tick_ns);
            if (r->slack_shift) /* the slack rides in `deadline` (rn_set_limited) */
                tmp[at].deadline = rn_slack_ticks(r, items[i].delay_ns);
        }
    }
    /* count[sh] is now the end of shard sh's run. */
    for (size_t lo = 0; lo < good;) {
        unsigned sh = shard_of[order[lo]];
        size_t hi = count[sh];
        rn_apply_group(r, &r->shards[sh], tmp + lo, hi - lo, op);
        lo = hi;
    }
    int64_t ok = 0;
    for (size_t j = 0; j < good; j++) {
        struct tw_runner_item *it = &items[order[j]];
        it->result = tmp[j].result;
        if (op == RN_REMOVE && tmp[j].result == 0)
            it->value = tmp[j].value;
    }
    for (size_t i = 0; i < m; i++)
        ok += items[i].result >= 0;
    return ok;
}

static int64_t rn_many(struct tw_runner *r, struct tw_runner_item *items, size_t n,
                       enum rn_op op)
{
    if (!r || (!items && n))
        return TW_EINVAL;
    int64_t ok = 0;
    for (size_t base = 0; base < n; base += RN_GROUP)
        ok += rn_many_group(r, items + base, n - base < RN_GROUP ? n - base : RN_GROUP, op);
    return ok;
}

int64_t tw_runner_set_many(struct tw_runner *r, struct tw_runner_item *items, size_t n)
{
    return rn_many(r, items, n, RN_SET);
}

int64_t tw_runner_move_many(struct tw_runner *r, struct tw_runner_item *items, size_t n)
{
    return rn_many(r, items, n, RN_MOVE);
}

int64_t tw_runner_remove_many(struct tw_runner *r, struct tw_runner_item *items, size_t n)
{
    return rn_many(r, items, n, RN_REMOVE);
}
