/* SPDX-License-Identifier: MIT */
/* twheel runner: the batched calls, tw_runner_set_many and friends (design:
 * runner.c). */
#include <string.h>

#include "runner/internal.h"

/* Items are taken RN_GROUP at a time: checked and hashed, their due ticks
 * computed from one clock read, grouped by shard (a stable counting sort, so
 * items of one key keep their order), and each shard's group applied under
 * one acquisition of its lock with tw_tasks' batched call (which prefetches
 * the next keys' slots and entries, and hashes each key again for that).
 * With max_pending (sets) or slack (sets and moves) the group goes one by
 * one under that lock through the single calls' seam instead: each set is
 * admitted before it inserts anything, and each item has a slack of its
 * own; the hash computed here is handed down. */

static inline uint64_t rn_item_hash(const struct tw_runner *r, const struct tw_runner_item *it)
{
    return r->int_keys ? tw_hash_int(it->key_int, r->k0, r->k1)
                       : tw_siphash13(it->key, it->key_len, r->k0, r->k1);
}

/* Whether a group's sets or moves go one by one (rn_one_by_one). */
static inline int rn_one_by_one_wanted(const struct tw_runner *r, enum rn_op op)
{
    return op != RN_REMOVE && (r->slack_shift || (r->max_pending && op == RN_SET));
}

/* A group's sets or moves one by one, as the single calls do them: item i's
 * due tick in its `delay_ticks`, its slack in its `deadline` (both unused
 * by these calls otherwise), its hash hash[order[i]]. */
static void rn_one_by_one(struct tw_runner *r, struct rn_shard *s, struct tw_tasks_item *it,
                          size_t m, enum rn_op op, const uint64_t *hash, const uint16_t *order)
{
    for (size_t i = 0; i < m; i++) {
        struct tasks_keyref k = {0}; /* (whole: a lookup reads `in` of short keys only) */
        uint64_t h = hash[order[i]], deadline = (uint64_t)it[i].delay_ticks + s->off;
        if (r->int_keys)
            k = (struct tasks_keyref){.num = it[i].key_int, .h = h};
        else
            tasks_keyref_str_hashed(it[i].key, it[i].key_len, h, &k);
        it[i].result = op == RN_SET
                           ? rn_set_in_shard(r, s, &k, it[i].value, deadline, it[i].deadline)
                           : tasks_move_at(s->tasks, &k, deadline, it[i].deadline, r->lazy);
    }
}

/* One shard's group, copied into tmp[0..m) with `delay_ticks` holding due
 * ticks; hash[order[i]] is tmp[i]'s hash. */
static void rn_apply_group(struct tw_runner *r, struct rn_shard *s, struct tw_tasks_item *tmp,
                           size_t m, enum rn_op op, const uint64_t *hash, const uint16_t *order)
{
    rn_lock(s);
    if (s->closed) {
        rn_unlock(s);
        for (size_t i = 0; i < m; i++)
            tmp[i].result = TW_ECLOSED;
        return;
    }
    struct tw_tasks *t = s->tasks;
    if (op == RN_REMOVE) {
        (void)tw_tasks_remove_many(t, tmp, m);
        for (size_t i = 0; i < m; i++)
            if (tmp[i].result == 0)
                rn_pending_sub(r, s, 1);
        rn_unlock(s);
        return;
    }
    uint64_t now = rn_shard_now(s), earliest = UINT64_MAX;
    if (rn_one_by_one_wanted(r, op)) {
        for (size_t i = 0; i < m; i++) {
            uint64_t due = (uint64_t)tmp[i].delay_ticks;
            if (due < earliest)
                earliest = due;
        }
        rn_one_by_one(r, s, tmp, m, op, hash, order);
    } else {
        for (size_t i = 0; i < m; i++) { /* due tick -> delay from the shard's now */
            uint64_t due = (uint64_t)tmp[i].delay_ticks;
            tmp[i].delay_ticks = due > now ? (int64_t)(due - now) : 0;
            if (due < earliest)
                earliest = due;
        }
        if (op == RN_SET)
            (void)tw_tasks_set_many(t, tmp, m);
        else
            (void)tw_tasks_move_many(t, tmp, m);
    }
    /* the earliest tick the group fires at: its earliest due, or the
     * shard's next tick if that is later */
    if (earliest <= now)
        earliest = now + 1;
    if (r->clock && earliest != UINT64_MAX)
        rn_clock_wake(r, earliest);
    uint64_t sleeping = atomic_load_explicit(&r->sleep_until, memory_order_relaxed);
    uint64_t work = rn_work_kick(r, s, sleeping, 0);
    rn_unlock(s);
    if (work && work < earliest)
        earliest = work;
    if (earliest < sleeping)
        rn_kick_(r, earliest, sleeping);
}

static int64_t rn_many_group(struct tw_runner *r, struct tw_runner_item *items, size_t m,
                             enum rn_op op)
{
    struct tw_tasks_item tmp[RN_GROUP];
    uint16_t shard_of[RN_GROUP], order[RN_GROUP];
    uint64_t hash[RN_GROUP]; /* item i's, kept for rn_one_by_one */
    uint16_t count[RN_MAX_SHARDS + 1];
    memset(count, 0, (r->nshards + 1) * sizeof count[0]);
    uint64_t now_ns = tw_mono_ns_() - r->start_ns;
    size_t good = 0;
    int one_by_one = rn_one_by_one_wanted(r, op);
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
        uint64_t h = rn_item_hash(r, it);
        if (one_by_one) /* (a test the compiler takes out of the loop) */
            hash[i] = h;
        shard_of[i] = (uint16_t)rn_shard_index(r, h);
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
            if (r->slack_shift) /* the slack rides in `deadline` (rn_one_by_one) */
                tmp[at].deadline = rn_slack_ticks(r, items[i].delay_ns);
        }
    }
    /* count[sh] is now the end of shard sh's run. */
    for (size_t lo = 0; lo < good;) {
        unsigned sh = shard_of[order[lo]];
        size_t hi = count[sh];
        rn_apply_group(r, &r->shards[sh], tmp + lo, hi - lo, op, hash, order + lo);
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

static int64_t rn_many(struct tw_runner *r, struct tw_runner_item *items, size_t n, enum rn_op op)
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
