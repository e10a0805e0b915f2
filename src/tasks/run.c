/* SPDX-License-Identifier: MIT */
/* Running tasks: advancing time runs the due ones (the tick), drain hands
 * every pending one to a function at once. Each task leaves the index before
 * its callback runs. */
#include "tasks/internal.h"

/* The slot pointing at entry e (which is in the index). */
static inline uint32_t tasks_slot_of_entry(const struct tw_tasks *t, const struct tasks_entry *e)
{
    uint64_t h = tasks_hash_entry(t, e);
    uint32_t pos = tw_hash_home(h, t->cap), tag = tasks_tag_of(h, t->mask);
    for (;; pos = pos + 1 == t->cap ? 0 : pos + 1) {
        uint32_t s = t->slots[pos];
        if (s > TASKS_SLOT_TOMB && (s & ~t->mask) == tag &&
            tasks_entry_at(t, (s & t->mask) - 2) == e)
            return pos;
    }
}

/* `key` is the caller's copy of the entry's key: the entry itself may be
 * reused by a set in the callback. */
static inline void tasks_fill_task(const struct tw_tasks *t, struct tw_task *task,
                                   const union tasks_key *key, void *value, uint64_t deadline)
{
    if (t->int_keys) {
        task->key = NULL;
        task->key_len = 0;
        task->key_int = key->num;
    } else {
        task->key = tasks_key_bytes(key, &task->key_len);
        task->key_int = 0;
    }
    task->value = value;
    task->deadline = deadline;
}

int64_t tw_tasks_drain(struct tw_tasks *t, tw_tasks_fn *fn, void *ctx)
{
    if (!t)
        return TW_EINVAL;
    if (!fn) {
        fn = t->execute;
        ctx = t->ctx;
    }
    /* Detach the whole batch first: the index is then empty, and whatever fn
     * does lands in it as new tasks. */
    uint32_t head = TASKS_NIL;
    int64_t n = 0;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t s = t->slots[pos];
        if (s <= TASKS_SLOT_TOMB)
            continue;
        uint32_t idx = (s & t->mask) - 2;
        struct tasks_entry *e = tasks_entry_at(t, idx);
        uint64_t deadline = tw_deadline(&e->u.node);
        tw_cancel(&t->wheel, &e->u.node);
        e->u.idle.deadline = deadline;
        e->u.idle.next = head;
        head = idx;
        n++;
    }
    memset(t->slots, 0, (size_t)t->cap * sizeof *t->slots);
    t->used = t->tombs = t->live = 0;
    tasks_maybe_shrink(t);
    t->depth++;
    while (head != TASKS_NIL) {
        uint32_t idx = head;
        struct tasks_entry *e = tasks_entry_at(t, idx);
        head = e->u.idle.next;
        struct tw_task task;
        union tasks_key key = e->key;
        tasks_fill_task(t, &task, &key, e->value, e->u.idle.deadline);
        tasks_free_entry(t, idx);
        fn(ctx, &task);
        tasks_free_key(t, &key);
    }
    t->depth--;
    tw_tasks_compact_(t);
    return n;
}

int64_t tw_tasks_advance_max(struct tw_tasks *t, uint64_t now, size_t max)
{
    if (!t)
        return TW_EINVAL;
    if (t->depth) /* inside execute or drain's fn */
        return TW_EBUSY;
    t->depth++;
    int64_t n = 0;
    struct tw_node *node;
    while ((max == 0 || (size_t)n < max) && (node = tw_wheel_expire_next_node(&t->wheel, now))) {
        struct tasks_entry *e = tw_container_of(node, struct tasks_entry, u.node);
        /* Entries do not store their index: their slot has it. */
        uint32_t pos = tasks_slot_of_entry(t, e);
        uint32_t idx = (t->slots[pos] & t->mask) - 2;
        struct tw_task task;
        union tasks_key key = e->key;
        tasks_fill_task(t, &task, &key, e->value, tw_wheel_now(&t->wheel));
        tasks_clear_slot(t, pos);
        tasks_free_entry(t, idx);
        n++;
        t->execute(t->ctx, &task);
        tasks_free_key(t, &key);
    }
    t->depth--;
    tasks_maybe_shrink(t);
    tw_tasks_compact_(t);
    return n;
}

int64_t tw_tasks_advance(struct tw_tasks *t, uint64_t now)
{
    return tw_tasks_advance_max(t, now, 0);
}
