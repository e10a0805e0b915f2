/* SPDX-License-Identifier: MIT */
/* Slack: planning the tick of a timer allowed to fire anywhere in a window,
 * the level-1 sub-slots such timers wait on, and the arms with slack (see
 * "Slack" and "Sub-slots" at the top of src/core/wheel.c). Static inline:
 * the arm workers (arm.c) and the periodic timers (periodic.c) inline it, and
 * the exact paths never reach it. */
#ifndef TWHEEL_CORE_SLACK_H
#define TWHEEL_CORE_SLACK_H

#include "core/internal.h"

#define TW_B4(b) TW_B1(b), TW_B1((b) + 1), TW_B1((b) + 2), TW_B1((b) + 3)
#define TW_B16(b) TW_B4(b), TW_B4((b) + 4), TW_B4((b) + 8), TW_B4((b) + 12)
/* Per highest differing bit b (0..63) of a window's first tick less one and
 * its last (plan_place), the mask that rounds the window's tick up to its
 * planned tick: the level's slot width less one, 2^(6 * level) - 1,
 * at levels 1 and up; at level 0, 15 if the window holds a multiple of 16
 * (b = 4, 5), else 0. */
#define TW_B1(b)                                                              \
    ((b) >= SLOT_BITS  ? (UINT64_C(1) << (((b) / SLOT_BITS) * SLOT_BITS)) - 1 \
     : (b) >= SUB_BITS ? (uint64_t)SUB_WIDTH - 1                              \
                       : 0)
static const uint64_t plan_mask[64] = {TW_B16(0), TW_B16(16), TW_B16(32), TW_B16(48)};
#undef TW_B16
#undef TW_B4
#undef TW_B1

/* Push t onto sub-slot `sub` (bits 4..11 of its tick: level-1 slot * 4 +
 * q) on chain `chain` (taken modulo TW_WHEEL_CHAINS). */
static inline void place_sub(struct tw_wheel *w, struct tw_node *t, size_t sub, unsigned chain)
{
    struct tw_node **head = &w->sub[0][0][0] + (sub * CHAINS + (chain & (CHAINS - 1)));
    struct tw_node *first = *head;
    t->next = first;
    *head = t;
    t->pprev = head;
    if (__builtin_expect(first != NULL, 1)) {
        first->pprev = &t->next;
    } else {
        unsigned slot = (unsigned)(sub / SUBS);
        mark_occupied(w, 1, slot);
        w->subbed |= UINT64_C(1) << slot;
        /* near: an exact re-arm there is never lazy (push_lazily) */
        uint64_t last = slot_tick(w->now, 1, slot) + SLOT_MASK;
        for (unsigned b = SLOT_BITS; b < 2 * SLOT_BITS; b++)
            w->near[b] = last > w->near[b] ? last : w->near[b];
        w->near_top = last > w->near_top ? last : w->near_top;
    }
}

/* Place a timer planned with slack (its deadline is its planned tick p).
 * One planned on a multiple of 16 that lands at level 1 goes onto the
 * sub-slot of its tick (the level-1 slot's q = 0 sub-list if p is a multiple
 * of 64): when the level-1 slot comes due, sub-lists 1..3 go down to level 0
 * whole (spliced, not walked) and fire from there at p, and sub-list 0 is
 * due at once, so the timer is never moved one by one. A multiple of 4096 is
 * never at level 1 (it would not be ahead of now), so all it takes is the
 * level-1 test. Elsewhere the timer is placed as ever. */
static inline void place_planned(struct tw_wheel *w, struct tw_node *t, unsigned chain)
{
    uint64_t p = t->deadline;
    if (__builtin_expect(!(p & (SUB_WIDTH - 1)), 1) &&
        (p ^ w->now) - TW_WHEEL_SLOTS < (uint64_t)TW_WHEEL_SLOTS * (TW_WHEEL_SLOTS - 1))
        place_sub(w, t, (size_t)(p >> SUB_BITS) & (TW_WHEEL_SLOTS * SUBS - 1), chain);
    else
        place(w, t, chain);
}

/* Plan a fresh timer allowed to fire anywhere in [first, last] (first >
 * now, last >= first) and place it. Its tick is `first` rounded up to the
 * slot boundary of the highest level whose boundaries fall in the window.
 * That level is floor(h / 6) for h the highest bit in which first - 1 and
 * last differ (a multiple of 2^h lies in (first - 1, last], and no multiple
 * of 2^(h+1) does), so h alone picks the case, with no branch (plan_mask):
 * h >= 6, a multiple of the level's slot width (never overflows: one lies
 * in the window); h = 4 or 5, no multiple of 64 but one of 16, a sub-slot
 * boundary (place_planned keeps it from moving); h < 4, the first tick.
 * S = 0 gives `first` in every case. A timer planned at such a boundary
 * fires from the slot it reaches at that level without being moved again,
 * and every timer whose window holds the same boundary fires at the same
 * tick. (A branch on the case would be mispredicted about every other arm
 * in W3, whose windows hold a multiple of 64 four times in ten.) */
static inline __attribute__((always_inline)) void
plan_place(struct tw_wheel *w, struct tw_node *n, uint64_t first, uint64_t last, unsigned chain)
{
    uint64_t before = first - 1;
    n->deadline = (before | plan_mask[63 - (size_t)__builtin_clzll(before ^ last)]) + 1;
    place_planned(w, n, chain);
}

/* The tick at which a pending timer pushed back into [first, last] is
 * planned: the latest boundary in the window of the highest level L that has
 * one there if L is 1, of level L - 1 if L >= 2 (the window's latest
 * multiple of 16 if L is 0 and it holds one, else its last tick). A timer
 * re-armed while pending is likely to be re-armed again (a heartbeat, an
 * idle timeout): planned late, it stays inside the next windows longer, so
 * more of its re-arms cost nothing. The price, for L >= 2, is one move more
 * than plan_place's tick would take if it does come due.
 *
 * As plan_place, by h, the highest bit in which first - 1 and last differ
 * (a multiple of 2^h lies in the window, none of 2^(h+1)): the tick is last
 * rounded down to a multiple of 2^k, with k from late_mask, so it is never
 * below that multiple of 2^h (k <= h), so >= first, and never above last.
 * h < 4: k = 0 (no multiple of 16 in the window: last); h = 4, 5: 16; h in
 * 6..11 (L = 1): 64; L >= 2: 2^(6 (L - 1)). first == last gives first (its
 * h is its lowest set bit, and k <= h). One load, no branch. */
#define TW_B1(b)                      \
    ((b) < SUB_BITS ? ~UINT64_C(0)    \
     : (b) < SLOT_BITS                \
         ? ~(uint64_t)(SUB_WIDTH - 1) \
         : ~UINT64_C(0) << ((b) < 2 * SLOT_BITS ? SLOT_BITS : ((b) / SLOT_BITS - 1) * SLOT_BITS))
#define TW_B4(b) TW_B1(b), TW_B1((b) + 1), TW_B1((b) + 2), TW_B1((b) + 3)
#define TW_B16(b) TW_B4(b), TW_B4((b) + 4), TW_B4((b) + 8), TW_B4((b) + 12)
static const uint64_t late_mask[64] = {TW_B16(0), TW_B16(16), TW_B16(32), TW_B16(48)};
#undef TW_B16
#undef TW_B4
#undef TW_B1

static inline uint64_t plan_late(uint64_t first, uint64_t last)
{
    return last & late_mask[(unsigned)__builtin_clzll((first - 1) ^ last) ^ 63u];
}

/* Re-arm pending n to fire in [deadline, deadline + slack] (saturating;
 * both pointers checked by the caller). Planned inside the window already
 * (so still ahead of now): it stays where it is, with nothing stored.
 * Otherwise it is relocated at once, so that a later advance never has to
 * move it (see "Slack" at the top of wheel.c), to plan_late's tick. The stay
 * test needs no saturated end: D >= deadline and D - deadline <= slack is
 * D in the window whether or not deadline + slack wraps (D <= UINT64_MAX
 * always holds), so the end is worked out only to relocate. */
static inline __attribute__((always_inline)) int
rearm_node_slack(struct tw_wheel *w, struct tw_node *n, uint64_t deadline, uint64_t slack)
{
    int rc = clamp_deadline(w, &deadline);
    if (rc)
        return rc;
    uint64_t planned = n->deadline;
    if (planned >= deadline && planned - deadline <= slack)
        return 0;
    unlink_node(w, n);
    w->moves++; /* relocated now instead of by a later advance */
    n->deadline = plan_late(deadline, saturating_add(deadline, slack));
    place_planned(w, n, w->chain++);
    set_owner(n, w);
    return 0;
}

/* Arm idle n to fire in [deadline, deadline + slack] (saturating; both
 * pointers checked by the caller): planned by plan_place. It only stores
 * into n, so it is also the arm of TW_ARM_IDLE with slack (see start_node). */
static inline __attribute__((always_inline)) int
start_node_slack(struct tw_wheel *w, struct tw_node *n, uint64_t deadline, uint64_t slack)
{
    int rc = clamp_deadline(w, &deadline);
    if (rc)
        return rc;
    w->pending++;
    plan_place(w, n, deadline, saturating_add(deadline, slack), w->chain++);
    set_owner(n, w);
    return 0;
}

/* Arm or re-arm n to fire in [deadline, deadline + slack] (both pointers
 * checked by the caller). */
static inline __attribute__((always_inline)) int
arm_node_slack(struct tw_wheel *w, struct tw_node *n, uint64_t deadline, uint64_t slack)
{
    return n->pprev ? rearm_node_slack(w, n, deadline, slack)
                    : start_node_slack(w, n, deadline, slack);
}

#endif /* TWHEEL_CORE_SLACK_H */
