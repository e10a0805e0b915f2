/* SPDX-License-Identifier: MIT */
/* The batched keyed calls: tw_tasks_set_many, _move_many, _remove_many and
 * _get_many, a software pipeline of prefetches ahead of the single calls'
 * paths. */
#include "tasks/internal.h"

/* With millions of tasks every keyed call waits on DRAM two to five times
 * (the index slot, the entry, the wheel neighbours it unlinks from; with
 * string keys the caller's key bytes too). A batched call overlaps those
 * waits: a software pipeline over groups of TASKS_BATCH_GROUP items
 * (bench/README.md, "Batched keyed calls", has the figures).
 * Each step runs the calls of one group while the groups after it pass
 * through the look-ahead stages, each stage doing its group's items back to
 * back:
 *   group + 4  string keys: the caller's key bytes prefetched
 *   group + 3  keys checked and hashed, home slots prefetched
 *   group + 2  slots read (a tag match: the entry prefetched, both lines)
 *   group + 1  move and remove: entries read, the wheel neighbours that
 *              unlinking writes prefetched
 *   group      the calls, in item order.
 * Grouping is what makes the prefetches overlap: a prefetch that misses holds
 * up retirement until its line (or its page walk) arrives, so prefetches one
 * item apart, with a call's worth of work between them, mostly waited one
 * after the other; issued TASKS_BATCH_GROUP at a time, their waits overlap,
 * and a stage's group is a whole step (TASKS_BATCH_GROUP calls) ahead of the
 * next stage, time for its lines to arrive.
 * The look-ahead stages only read (slots by tag, never a key compare) and
 * only prefetch: the real call on an item starts from its hash alone, so an
 * earlier item that rehashes the index, compacts the pool or frees an entry
 * cannot make a stage read freed memory (a stale prefetch address is
 * harmless: prefetches do not fault) nor change a result. Results are those
 * of the single calls in array order. */

#ifndef TASKS_BATCH_GROUP
#define TASKS_BATCH_GROUP 8 /* items per group */
#endif
#define TASKS_BATCH_RING (TASKS_BATCH_GROUP * 4) /* items hashed but not yet called: 4 groups */

enum tasks_batch_op { TASKS_BATCH_SET, TASKS_BATCH_MOVE, TASKS_BATCH_REMOVE, TASKS_BATCH_GET };

/* Validate item's key as the single calls do; fill k (hash included). */
static inline int tasks_item_key(const struct tw_tasks *t, const struct tw_tasks_item *it,
                                 struct tasks_keyref *k)
{
    if (t->int_keys) {
        tasks_keyref_int(t, it->key_int, k);
        return 0;
    }
    if (!it->key)
        return TW_EINVAL;
    if (it->key_len > TW_TASKS_KEY_MAX)
        return TW_E2BIG;
    tasks_keyref_str(t, it->key, it->key_len, k);
    return 0;
}

/* The entry a slot scan from h's home finds by tag alone (no key compare:
 * for prefetching only), or NULL. Looks at most 8 slots. */
static inline const struct tasks_entry *tasks_entry_by_tag(const struct tw_tasks *t, uint64_t h)
{
    uint32_t mask = t->mask, tag = tasks_tag_of(h, mask);
    uint32_t pos = tw_hash_home(h, t->cap);
    for (unsigned n = 0; n < 8; n++) {
        uint32_t s = t->slots[pos];
        if (s == TASKS_SLOT_EMPTY)
            return NULL;
        if (s != TASKS_SLOT_TOMB && (s & ~mask) == tag)
            return tasks_entry_at(t, (s & mask) - 2);
        if (++pos == t->cap)
            pos = 0;
    }
    return NULL;
}

static inline __attribute__((always_inline)) int64_t
tasks_run_batch(struct tw_tasks *t, struct tw_tasks_item *items, size_t n, enum tasks_batch_op op)
{
    if (!t || (!items && n))
        return TW_EINVAL;
    struct tasks_keyref ring[TASKS_BATCH_RING];
    int bad[TASKS_BATCH_RING];
    /* Stage 2's entry for stage 1 (move, remove), a step later: between the
     * two only move and remove calls run, which free no pool memory (only
     * compaction does, from set, advance and drain), so the entry, freed or
     * reused by then or not, is still mapped; what stage 1 reads in it only
     * feeds prefetches. */
    const struct tasks_entry *ent[TASKS_BATCH_RING];
    size_t groups = (n + TASKS_BATCH_GROUP - 1) / TASKS_BATCH_GROUP;
    int64_t ok = 0;
    /* Step s calls group s - 4; its stages work on groups s - 3 .. s. */
    for (size_t s = 0; s < groups + 4; s++) {
        size_t g, j, end;
        /* Stage 4: the caller's key bytes (hashed a step later). */
        g = s;
        if (!t->int_keys && g < groups) {
            for (j = g * TASKS_BATCH_GROUP,
                end = j + TASKS_BATCH_GROUP < n ? j + TASKS_BATCH_GROUP : n;
                 j < end; j++)
                if (items[j].key)
                    __builtin_prefetch(items[j].key);
        }
        if (s < 1)
            continue;
        /* Stage 3: check and hash, prefetch the home slots. */
        g = s - 1;
        if (g < groups) {
            for (j = g * TASKS_BATCH_GROUP,
                end = j + TASKS_BATCH_GROUP < n ? j + TASKS_BATCH_GROUP : n;
                 j < end; j++) {
                struct tasks_keyref *k = &ring[j % TASKS_BATCH_RING];
                bad[j % TASKS_BATCH_RING] = tasks_item_key(t, &items[j], k);
                if (!bad[j % TASKS_BATCH_RING])
                    __builtin_prefetch(&t->slots[tw_hash_home(k->h, t->cap)]);
            }
        }
        if (s < 2)
            continue;
        /* Stage 2: the entries a tag matches. */
        g = s - 2;
        if (g < groups) {
            for (j = g * TASKS_BATCH_GROUP,
                end = j + TASKS_BATCH_GROUP < n ? j + TASKS_BATCH_GROUP : n;
                 j < end; j++) {
                ent[j % TASKS_BATCH_RING] = NULL;
                if (bad[j % TASKS_BATCH_RING])
                    continue;
                const struct tasks_entry *e = tasks_entry_by_tag(t, ring[j % TASKS_BATCH_RING].h);
                ent[j % TASKS_BATCH_RING] = e;
                if (e)
                    tasks_prefetch_entry(e); /* get only reads it: no matter */
            }
        }
        if (s < 3)
            continue;
        /* Stage 1: the wheel neighbours (move, remove). */
        g = s - 3;
        if ((op == TASKS_BATCH_MOVE || op == TASKS_BATCH_REMOVE) && g < groups) {
            for (j = g * TASKS_BATCH_GROUP,
                end = j + TASKS_BATCH_GROUP < n ? j + TASKS_BATCH_GROUP : n;
                 j < end; j++) {
                const struct tasks_entry *e = ent[j % TASKS_BATCH_RING];
                if (e && e->u.node.pprev) {
                    __builtin_prefetch(e->u.node.pprev, 1);
                    if (e->u.node.next)
                        __builtin_prefetch(e->u.node.next, 1);
                }
            }
        }
        if (s < 4)
            continue;
        /* The calls. */
        g = s - 4;
        for (j = g * TASKS_BATCH_GROUP, end = j + TASKS_BATCH_GROUP < n ? j + TASKS_BATCH_GROUP : n;
             j < end; j++) {
            if (op == TASKS_BATCH_SET && t->free_head != TASKS_NIL) {
                tasks_prefetch_entry(tasks_entry_at(t, t->free_head));
                __builtin_prefetch(tasks_hi_at(t, t->free_head), 1);
            }
            struct tw_tasks_item *it = &items[j];
            const struct tasks_keyref *k = &ring[j % TASKS_BATCH_RING];
            int rc = bad[j % TASKS_BATCH_RING];
            if (!rc) {
                switch (op) {
                case TASKS_BATCH_SET:
                    rc = tasks_set_in(t, 0, k, it->value, it->delay_ticks, NULL);
                    break;
                case TASKS_BATCH_MOVE:
                    rc = tasks_move_in(t, 0, k, it->delay_ticks, NULL);
                    break;
                case TASKS_BATCH_REMOVE:
                    rc = tasks_remove_key_(t, k, &it->value, true);
                    break;
                default:
                    rc = tasks_get_key(t, k, &it->value, &it->deadline);
                    break;
                }
            }
            it->result = rc;
            ok += rc >= 0;
        }
    }
    return ok;
}

int64_t tw_tasks_set_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    return tasks_run_batch(t, items, n, TASKS_BATCH_SET);
}

int64_t tw_tasks_move_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    return tasks_run_batch(t, items, n, TASKS_BATCH_MOVE);
}

int64_t tw_tasks_remove_many(struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    return tasks_run_batch(t, items, n, TASKS_BATCH_REMOVE);
}

int64_t tw_tasks_get_many(const struct tw_tasks *t, struct tw_tasks_item *items, size_t n)
{
    /* get never writes the instance: tasks_run_batch's TASKS_BATCH_GET path only reads it. */
    return tasks_run_batch((struct tw_tasks *)t, items, n, TASKS_BATCH_GET);
}
