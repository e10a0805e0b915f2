/* SPDX-License-Identifier: MIT */
/* The figures: pending, now, next expiry, next work and tw_tasks_stats. */
#include "tasks/internal.h"

size_t tw_tasks_pending(const struct tw_tasks *t)
{
    return t ? t->live : 0;
}

uint64_t tw_tasks_now(const struct tw_tasks *t)
{
    return t ? tw_wheel_now(&t->wheel) : 0;
}

uint64_t tw_tasks_next_expiry(const struct tw_tasks *t)
{
    return t ? tw_wheel_next_expiry(&t->wheel) : TW_NEVER;
}

uint64_t tw_tasks_next_work(const struct tw_tasks *t)
{
    return t ? tw_wheel_next_work(&t->wheel) : TW_NEVER;
}

int tw_tasks_stats(const struct tw_tasks *t, struct tw_tasks_stats *s)
{
    if (!t || !s)
        return TW_EINVAL;
    memset(s, 0, sizeof *s);
    s->pending = t->live;
    s->index_slots = t->cap;
    s->index_tombs = t->tombs;
    s->pool_entries = (size_t)t->nchunks * TASKS_CHUNK;
    s->bytes = t->bytes;
    for (uint32_t pos = 0; pos < t->cap; pos++) {
        uint32_t sl = t->slots[pos];
        if (sl <= TASKS_SLOT_TOMB)
            continue;
        uint32_t home = tw_hash_home((uint64_t)*tasks_hi_at(t, (sl & t->mask) - 2) << 32, t->cap);
        size_t dist = (size_t)(pos >= home ? pos - home : pos + t->cap - home) + 1;
        if (dist > s->max_probe)
            s->max_probe = dist;
    }
    return 0;
}
