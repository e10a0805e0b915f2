/* SPDX-License-Identifier: MIT */
/* The keyed calls of one key: set, move, remove and get (tw_tasks_set and
 * the others), and the seam every set goes through: a key hashed once, an
 * absolute deadline and the call's slack, the limits checked and room made
 * before anything is inserted. */
#include "tasks/internal.h"

/* An arm that is not exact and lazy: with slack, or exact and eager if
 * config.eager_rearm says so (a slack arm is not: it relocates at once
 * anyway). Out of line: the default path only tests for it. */
void tw_tasks_arm_other_(struct tw_tasks *t, struct tasks_entry *e, uint64_t deadline,
                         uint64_t slack)
{
    if (slack)
        tw_arm(&t->wheel, &e->u.node, deadline, slack, 0);
    else if (t->eager)
        tw_arm(&t->wheel, &e->u.node, deadline, 0, TW_ARM_EAGER);
    else
        tw_arm(&t->wheel, &e->u.node, deadline, 0, 0);
}

/* The seam of every set: key k (checked and hashed once by the caller) to
 * run at the absolute tick `deadline` with `slack` (`lazy`: see tasks_arm).
 * Returns 1 if new, 0 if present (re-armed, value replaced), TW_ERANGE,
 * TW_EFULL or TW_ENOMEM, changing nothing then. */
static inline __attribute__((always_inline)) int tasks_set_at(struct tw_tasks *t,
                                                              const struct tasks_keyref *k,
                                                              void *value, uint64_t deadline,
                                                              uint64_t slack, int lazy)
{
    /* (Time at UINT64_MAX saturates every deadline to it: one test of the
     * deadline on the path, the time read only then.) */
    if (__builtin_expect(deadline == UINT64_MAX, 0) && tw_wheel_now(&t->wheel) == UINT64_MAX)
        return TW_ERANGE;
    if (__builtin_expect(tasks_compact_wanted(t), 0)) /* removals left the pool sparse */
        tw_tasks_compact_(t);
    uint32_t ins = 0; /* (set by probe whenever it returns TASKS_NIL) */
    uint32_t pos = tasks_probe(t, k, &ins);
    if (pos != TASKS_NIL) {
        struct tasks_entry *e = tasks_entry_at(t, (t->slots[pos] & t->mask) - 2);
        e->value = value;
        tasks_arm(t, e, deadline, slack, lazy);
        return 0;
    }
    if (t->max_pending && t->live >= t->max_pending)
        return TW_EFULL;
    if (t->live >= TASKS_MAX_POOL - 1)
        return TW_ENOMEM;
    /* Make room first (each step leaves a valid instance if a later one fails),
     * then commit. */
    int moved = 0;
    if ((uint64_t)(t->used + 1) * 4 > (uint64_t)t->cap * 3) {
        if (tw_tasks_rehash_(t, tasks_grow_cap_for((uint64_t)t->live + 1), t->bits))
            return TW_ENOMEM;
        moved = 1;
    }
    if (t->free_head == TASKS_NIL) {
        uint32_t bits = t->bits;
        if (tw_tasks_add_chunk_(t))
            return TW_ENOMEM;
        moved |= bits != t->bits;
    }
    union tasks_key key;
    memset(&key, 0, sizeof key);
    if (t->int_keys) {
        key.num = k->num;
    } else if (k->len <= TASKS_KEY_INLINE) {
        key = k->in;
    } else {
        unsigned char *b = tasks_mem(t, NULL, 0, k->len + 2);
        if (!b)
            return TW_ENOMEM;
        b[0] = (unsigned char)(k->len & 0xff);
        b[1] = (unsigned char)(k->len >> 8);
        memcpy(b + 2, k->p, k->len);
        key.block = b;
        key.b[TASKS_KEY_INLINE] = TASKS_KEY_OUTSIDE;
    }
    if (moved) /* the same hash, in the new index */
        (void)tasks_probe(t, k, &ins);
    uint32_t idx = t->free_head;
    struct tasks_entry *e = tasks_entry_at(t, idx);
    t->free_head = e->u.idle.next;
    tw_node_init(&e->u.node);
    e->value = value;
    e->key = key;
    *tasks_hi_at(t, idx) = (uint32_t)(k->h >> 32);
    if (t->slots[ins] == TASKS_SLOT_EMPTY)
        t->used++;
    else
        t->tombs--;
    t->slots[ins] = tasks_tag_of(k->h, t->mask) | (idx + 2);
    t->live++;
    tasks_arm(t, e, deadline, slack, lazy);
    return 1;
}

/* tasks_set_at out of line: any arm, and the exact lazy arm of the default
 * instance (no test on its path). */
int tw_tasks_set_at_(struct tw_tasks *t, const struct tasks_keyref *k, void *value,
                     uint64_t deadline, uint64_t slack)
{
    return tasks_set_at(t, k, value, deadline, slack, 0);
}

int tw_tasks_set_lazy_at_(struct tw_tasks *t, const struct tasks_keyref *k, void *value,
                          uint64_t deadline)
{
    return tasks_set_at(t, k, value, deadline, 0, 1);
}

/* Check a string key; fill k. */
static int tasks_key_str(const struct tw_tasks *t, const void *key, size_t len,
                         struct tasks_keyref *k)
{
    if (!t || !key || t->int_keys)
        return TW_EINVAL;
    if (len > TW_TASKS_KEY_MAX)
        return TW_E2BIG;
    tasks_keyref_str(t, key, len, k);
    return 0;
}

/* Check an integer key; fill k. */
static inline int tasks_key_int(const struct tw_tasks *t, uint64_t key, struct tasks_keyref *k)
{
    if (!t || !t->int_keys)
        return TW_EINVAL;
    tasks_keyref_int(t, key, k);
    return 0;
}

int tw_tasks_set(struct tw_tasks *t, const void *key, size_t key_len, void *value, int64_t delay)
{
    struct tasks_keyref k;
    return tasks_set_in(t, tasks_key_str(t, key, key_len, &k), &k, value, delay, NULL);
}

int tw_tasks_set_int(struct tw_tasks *t, uint64_t key, void *value, int64_t delay)
{
    struct tasks_keyref k;
    return tasks_set_in(t, tasks_key_int(t, key, &k), &k, value, delay, NULL);
}

int tw_tasks_set_slack(struct tw_tasks *t, const void *key, size_t key_len, void *value,
                       int64_t delay, uint64_t slack)
{
    struct tasks_keyref k;
    return tasks_set_in(t, tasks_key_str(t, key, key_len, &k), &k, value, delay, &slack);
}

int tw_tasks_set_slack_int(struct tw_tasks *t, uint64_t key, void *value, int64_t delay,
                           uint64_t slack)
{
    struct tasks_keyref k;
    return tasks_set_in(t, tasks_key_int(t, key, &k), &k, value, delay, &slack);
}

int tw_tasks_move(struct tw_tasks *t, const void *key, size_t key_len, int64_t delay)
{
    struct tasks_keyref k;
    return tasks_move_in(t, tasks_key_str(t, key, key_len, &k), &k, delay, NULL);
}

int tw_tasks_move_int(struct tw_tasks *t, uint64_t key, int64_t delay)
{
    struct tasks_keyref k;
    return tasks_move_in(t, tasks_key_int(t, key, &k), &k, delay, NULL);
}

int tw_tasks_move_slack(struct tw_tasks *t, const void *key, size_t key_len, int64_t delay,
                        uint64_t slack)
{
    struct tasks_keyref k;
    return tasks_move_in(t, tasks_key_str(t, key, key_len, &k), &k, delay, &slack);
}

int tw_tasks_move_slack_int(struct tw_tasks *t, uint64_t key, int64_t delay, uint64_t slack)
{
    struct tasks_keyref k;
    return tasks_move_in(t, tasks_key_int(t, key, &k), &k, delay, &slack);
}

int tw_tasks_remove(struct tw_tasks *t, const void *key, size_t key_len, void **value)
{
    struct tasks_keyref k;
    int rc = tasks_key_str(t, key, key_len, &k);
    return rc ? rc : tasks_remove_key(t, &k, value);
}

int tw_tasks_remove_int(struct tw_tasks *t, uint64_t key, void **value)
{
    struct tasks_keyref k;
    int rc = tasks_key_int(t, key, &k);
    return rc ? rc : tasks_remove_key(t, &k, value);
}

int tw_tasks_get(const struct tw_tasks *t, const void *key, size_t key_len, void **value,
                 uint64_t *deadline)
{
    struct tasks_keyref k;
    int rc = tasks_key_str(t, key, key_len, &k);
    return rc ? rc : tasks_get_key(t, &k, value, deadline);
}

int tw_tasks_get_int(const struct tw_tasks *t, uint64_t key, void **value, uint64_t *deadline)
{
    struct tasks_keyref k;
    int rc = tasks_key_int(t, key, &k);
    return rc ? rc : tasks_get_key(t, &k, value, deadline);
}
