/* SPDX-License-Identifier: MIT */
/* twheel runner: max_pending, the admission room each shard reserves (design:
 * runner.c). */
#include "runner/internal.h"

/* r->pending counts the tasks pending plus the room the shards have reserved
 * and not used, and never exceeds max_pending. Admission comes before the
 * insert (rn_set_in_shard): a set finds a unit of room in its shard (under
 * the shard lock, no shared write), and takes it if its key turns out new;
 * only a shard with none left reserves a chunk (room_chunk, at most
 * max_pending / (2 * shards), 1 to 64) from r->pending with a CAS. A task
 * that leaves (fired, removed, drained) gives its unit back to its shard's
 * room, and a shard holding more than two chunks returns the excess. So the
 * shared line is written about once per chunk of calls of a shard, not per
 * call. When r->pending is full, the set first takes back the room of every
 * other shard whose lock is free at that moment (trylock: never waits, no
 * lock order issue) and tries once more; still without room, it may only
 * replace a present key. A single call so refused drops its lock, takes
 * back every shard's room one lock at a time (rn_room_sweep_) and tries a
 * last time. So a single set's TW_EFULL means the limit was reached at some
 * instant of the call, counting the room that concurrent sets reserved
 * meanwhile (exact with one producer); a batched set (under its group's
 * lock) only does the trylock pass, so it may be refused while up to
 * 2 * room_chunk units per busy shard are reserved and unused. */

static void rn_room_take_back(struct tw_runner *r, struct rn_shard *o)
{
    if (o->room) {
        atomic_fetch_sub_explicit(&r->pending, o->room, memory_order_relaxed);
        o->room = 0;
        o->room_moves++;
    }
}

/* With mine's lock held: the other shards whose lock is free now. */
static void rn_room_reclaim(struct tw_runner *r, struct rn_shard *mine)
{
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *o = &r->shards[i];
        if (o == mine || pthread_mutex_trylock(&o->lock) != 0)
            continue;
        rn_room_take_back(r, o);
        pthread_mutex_unlock(&o->lock);
    }
}

/* With no lock held: every shard, one lock at a time. */
void rn_room_sweep_(struct tw_runner *r)
{
    for (unsigned i = 0; i < r->nshards; i++) {
        struct rn_shard *o = &r->shards[i];
        rn_lock(o);
        rn_room_take_back(r, o);
        rn_unlock(o);
    }
}

static int rn_room_reserve(struct tw_runner *r, struct rn_shard *s)
{
    size_t cur = atomic_load_explicit(&r->pending, memory_order_relaxed);
    while (cur < r->max_pending) {
        size_t grab = r->max_pending - cur;
        if (grab > r->room_chunk)
            grab = r->room_chunk;
        if (atomic_compare_exchange_weak_explicit(&r->pending, &cur, cur + grab,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            s->room += grab;
            s->room_moves++;
            return 1;
        }
    }
    return 0;
}

int rn_room_ensure_(struct tw_runner *r, struct rn_shard *s)
{
    if (s->room || rn_room_reserve(r, s))
        return 1;
    rn_room_reclaim(r, s);
    return rn_room_reserve(r, s);
}
