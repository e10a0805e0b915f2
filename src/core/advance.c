/* SPDX-License-Identifier: MIT */
/* Advancing the wheel: the next slot to come due, the timers it moves down a
 * level (the cascade) or hands to the ready list, the level-1 sub-slots
 * spliced whole, and the callbacks run from the ready list; the pull
 * interface takes from the same list. The design is at the top of wheel.c. */
#include <string.h>

#include "core/internal.h"

/* Level-1 slot `slot` came due (now is its first tick): hand each chain of
 * its sub-lists to the same chain of the level-0 slot of its tick, which is
 * empty (level 0 holds nothing when a level-1 slot comes due: its slots all
 * lie before): one store and one pprev fix per chain. Should that chain be
 * in use after all, its timers are placed one by one (counted as moves). */
static __attribute__((noinline)) uint64_t hand_down_subs(struct tw_wheel *w, unsigned slot,
                                                         unsigned *spread)
{
    uint64_t moved = 0;
    for (unsigned q = 1; q < SUBS; q++) {
        struct tw_node **sub = w->sub[slot][q];
        unsigned s0 = q * SUB_WIDTH; /* the level-0 slot of tick + 16q */
        struct tw_node **chains = w->slots[0][s0];
        for (unsigned c = 0; c < CHAINS; c++) {
            struct tw_node *list = sub[c];
            if (!list)
                continue;
            sub[c] = NULL;
            if (__builtin_expect(!chains[c], 1)) {
                chains[c] = list;
                list->pprev = &chains[c];
                mark_occupied(w, 0, s0);
                continue;
            }
            for (struct tw_node *t = list, *next; t; t = next) {
                next = t->next;
                place(w, t, (*spread)++);
                moved++;
            }
        }
    }
    return moved;
}

/* The lists `heads` (a level-1 slot's sub-list 0) came due at `tick`
 * (now): each timer in them is due unless a lazy re-arm pushed it back. The chains are walked side by side (their
 * loads are independent; each node's successor is prefetched a round ahead)
 * only to read each deadline; the rare timer not due is unlinked and placed
 * anew, and what is left of the chains, all due, is linked in at `tail` (the
 * end of the ready list) as it stands: its links are already right, so no
 * store per timer that fires. The heads are left empty. Returns the new end
 * of the ready list (the caller ends it with NULL); adds to *moved.
 * (Level-0 slots are not spliced: where they hold one timer each, the walk
 * costs more per slot than it saves per timer.) */
static inline struct tw_node **splice_due(struct tw_wheel *w, struct tw_node **heads,
                                          struct tw_node **tail, uint64_t tick, unsigned *spread,
                                          uint64_t *moved)
{
    struct tw_node *cur[CHAINS], *last[CHAINS];
    for (unsigned c = 0; c < CHAINS; c++) {
        cur[c] = heads[c];
        last[c] = NULL;
    }
    for (unsigned live = CHAINS; live;) {
        live = 0;
        for (unsigned c = 0; c < CHAINS; c++) {
            struct tw_node *t = cur[c];
            if (!t)
                continue;
            live++;
            struct tw_node *next = t->next;
            cur[c] = next;
            if (next) /* never NULL: a page walk for nothing (a nested one in a VM) */
                __builtin_prefetch(next);
            if (__builtin_expect(t->deadline <= tick, 1)) {
                last[c] = t;
            } else { /* pushed back lazily: out of the chain, to its new slot */
                *t->pprev = next;
                if (next)
                    next->pprev = t->pprev;
                place(w, t, (*spread)++);
                (*moved)++;
            }
        }
    }
    for (unsigned c = 0; c < CHAINS; c++) {
        if (!last[c])
            continue;
        struct tw_node *first = heads[c];
        *tail = first;
        first->pprev = tail;
        tail = &last[c]->next;
        heads[c] = NULL;
    }
    return tail;
}

/* Move the timers of the next slot due at or before `limit` to their new
 * places or to the ready list, setting now to that slot's tick. Returns 0 if
 * no slot is due by `limit`. Called with the ready list empty. */
static __attribute__((noinline)) int process_next_slot(struct tw_wheel *w, uint64_t limit)
{
    while (w->levels) {
        unsigned level = (unsigned)__builtin_ctz(w->levels);
        unsigned slot = (unsigned)__builtin_ctzll(w->occupied[level]);
        uint64_t tick = slot_tick(w->now, level, slot);
        if (tick > limit)
            return 0;
        w->now = tick;
        mark_empty(w, level, slot);
        unsigned spread = w->chain;
        uint64_t moved = 0;
        struct tw_node *head = NULL; /* the ready list (empty on entry), built here */
        struct tw_node *chain[CHAINS];
        memcpy(chain, w->slots[level][slot], sizeof chain);
        memset(w->slots[level][slot], 0, sizeof chain);
        /* w->subbed may be stale (a cancel emptied the sub-lists): then the
         * hand-down finds nothing. Exact timers never set it. */
        if (level == 1 && (w->subbed >> slot & 1)) {
            w->subbed &= ~(UINT64_C(1) << slot);
            moved = hand_down_subs(w, slot, &spread);
            *splice_due(w, w->sub[slot][0], &w->ready, tick, &spread, &moved) = NULL;
            head = w->ready;
        }
        /* Walk the chains side by side: their next loads are independent.
         * Moved timers are spread over the chains of their new slots in
         * turn; due ones are pushed onto the ready list, kept here until the
         * walk ends (due timers of one tick fire in an unspecified order,
         * but a stable one: layers above may rely on it). */
        for (unsigned live = CHAINS; live;) {
            live = 0;
            for (unsigned c = 0; c < CHAINS; c++) {
                struct tw_node *t = chain[c];
                if (!t)
                    continue;
                live++;
                chain[c] = t->next;
                if (t->next) /* its miss now, a round early (never NULL) */
                    __builtin_prefetch(t->next);
                if (t->deadline <= tick) {
                    t->next = head;
                    if (head)
                        head->pprev = &t->next;
                    head = t;
                } else {
                    place(w, t, spread++);
                    moved++;
                }
            }
        }
        if (head) {
            w->ready = head;
            head->pprev = &w->ready;
        }
        w->chain = spread;
        w->moves += moved;
        if (w->ready)
            return 1;
    }
    return 0;
}

/* Pop the next timer due by `limit`, or NULL (then now == limit, or stays if
 * limit is in the past). */
static inline struct tw_node *pop_due(struct tw_wheel *w, uint64_t limit)
{
    if (!w->ready) {
        if (limit <= w->now)
            return NULL;
        if (!process_next_slot(w, limit)) {
            w->now = limit;
            return NULL;
        }
    }
    struct tw_node *t = w->ready; /* the ready list's head: no slot to update */
    w->ready = t->next;
    if (t->next)
        t->next->pprev = &w->ready;
    t->pprev = NULL;
    w->pending--;
    return t;
}

/* ---- advancing and pulling ---------------------------------------------------- */

int64_t tw_wheel_advance(struct tw_wheel *w, uint64_t now)
{
    if (!w || w->bare)
        return TW_EINVAL;
    if (w->advancing)
        return TW_EBUSY;
    if (!w->ready) {
        if (now <= w->now)
            return 0;
        /* Nothing due by `now` (most ticks of a busy loop): move time, done.
         * A cheap lower bound on the first slot's tick: level 0's lowest
         * occupied slot, or else the next multiple of 64 (every slot of a
         * higher level starts at one, strictly ahead); 0 if that wraps. */
        uint64_t bound = w->levels & 1
                             ? (w->now & ~SLOT_MASK) | (uint64_t)__builtin_ctzll(w->occupied[0])
                             : (w->now | SLOT_MASK) + 1;
        if (now < bound) {
            w->now = now;
            w->target = now;
            return 0;
        }
    }
    if (now < w->now) /* timers left ready by the pull interface are due now */
        now = w->now;
    int64_t fired = 0;
    w->advancing = 1;
    w->target = now;
    struct tw_node *n;
    while ((n = pop_due(w, now)) != NULL) {
        struct tw_timer *t = tw_container_of(n, struct tw_timer, node);
        fired++;
        t->fn(t, t->arg);
    }
    w->advancing = 0;
    return fired;
}

struct tw_node *tw_wheel_expire_next_node(struct tw_wheel *w, uint64_t now)
{
    if (!w || w->advancing)
        return NULL;
    if (now > w->now)
        w->target = now;
    return pop_due(w, now);
}

struct tw_timer *tw_wheel_expire_next(struct tw_wheel *w, uint64_t now)
{
    if (!w || w->bare)
        return NULL;
    struct tw_node *n = tw_wheel_expire_next_node(w, now);
    return n ? tw_container_of(n, struct tw_timer, node) : NULL;
}
