/* SPDX-License-Identifier: MIT */
/* What the core's files share: the wheel's geometry, slot arithmetic, the
 * linking and unlinking of nodes, placement, the debug ownership checks and
 * the exact arm of a node. All static inline, so that the hot paths (arm,
 * re-arm, cancel, advance) inline it. The design, and what each field of
 * struct tw_wheel holds, is at the top of src/core/wheel.c. */
#ifndef TWHEEL_CORE_INTERNAL_H
#define TWHEEL_CORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "twheel/wheel.h"

#define SLOT_BITS TW_WHEEL_SLOT_BITS
#define SLOT_MASK ((uint64_t)TW_WHEEL_SLOTS - 1)
#define LEVELS TW_WHEEL_LEVELS
#define CHAINS TW_WHEEL_CHAINS

_Static_assert(TW_WHEEL_SLOTS == 64, "one 64-bit occupancy word per level");
_Static_assert(LEVELS *SLOT_BITS >= 64 && (LEVELS - 1) * SLOT_BITS < 64,
               "levels cover exactly the 64-bit tick range");
_Static_assert(LEVELS <= 32, "levels bitmap is 32 bits wide");
_Static_assert(CHAINS >= 1 && (CHAINS & (CHAINS - 1)) == 0, "chains: a power of two");
_Static_assert(CHAINS == 4, "walk_holds looks at 4 chains");

/* ---- slots and levels ------------------------------------------------------ */

/* The first tick of slot `slot` at `level`, in the block of the level above
 * that holds `now`. */
static inline uint64_t slot_tick(uint64_t now, unsigned level, unsigned slot)
{
    unsigned shift = (level + 1) * SLOT_BITS;
    uint64_t above = shift >= 64 ? 0 : now & ~((UINT64_C(1) << shift) - 1);
    return above | ((uint64_t)slot << (level * SLOT_BITS));
}

/* The first tick of the earliest occupied slot (w->levels != 0): no timer
 * is due before it. */
static inline uint64_t first_slot_tick(const struct tw_wheel *w)
{
    unsigned level = (unsigned)__builtin_ctz(w->levels);
    return slot_tick(w->now, level, (unsigned)__builtin_ctzll(w->occupied[level]));
}

static inline uint64_t saturating_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* A level that holds a timer again brings its near limit into near_top
 * (push_lazily). */
static inline void mark_occupied(struct tw_wheel *w, unsigned level, unsigned slot)
{
    w->occupied[level] |= UINT64_C(1) << slot;
    if (__builtin_expect(!(w->levels >> level & 1), 0)) {
        w->levels |= UINT32_C(1) << level;
        uint64_t limit = w->near[level * SLOT_BITS + 1]; /* level 0: 0, under near[6] */
        w->near_top = limit > w->near_top ? limit : w->near_top;
    }
}

static inline void mark_empty(struct tw_wheel *w, unsigned level, unsigned slot)
{
    w->occupied[level] &= ~(UINT64_C(1) << slot);
    if (!w->occupied[level])
        w->levels &= ~(UINT32_C(1) << level);
}

/* Level 1's sub-slots: a level-1 slot's 64 ticks in SUBS parts of SUB_WIDTH
 * ticks (as many parts as chains: 16 ticks). */
#define SUBS CHAINS
#define SUB_BITS 4
#define SUB_WIDTH (TW_WHEEL_SLOTS / SUBS)
_Static_assert(SUB_WIDTH == 1u << SUB_BITS, "a sub-slot is 2^SUB_BITS ticks");
_Static_assert(SUBS == 4 && SUB_WIDTH * SUBS == TW_WHEEL_SLOTS,
               "sub-slots split a slot in 4 (process_next_slot looks at 1..3)");

/* Whether level-1 slot `slot` holds nothing, in its chains or sub-lists. */
static inline bool level1_slot_empty(const struct tw_wheel *w, size_t slot)
{
    struct tw_node *const *sub = &w->sub[slot][0][0];
    for (unsigned c = 0; c < CHAINS; c++)
        if (w->slots[1][slot][c])
            return false;
    for (unsigned i = 0; i < SUBS * CHAINS; i++)
        if (sub[i])
            return false;
    return true;
}

/* Whether the walk of `level` (advance.c) has timers left to take. */
static inline bool walk_left(const struct tw_wheel *w, unsigned level)
{
    struct tw_node *const *walk = w->walk[level - 1];
    return walk[0] || walk[1] || walk[2] || walk[3];
}

/* Whether a walk ahead (advance.c) holds chains taken from `slot` of
 * `level` (its walk_slot), or staged timers it took from there: then the
 * slot is not empty.
 * Inline, with no call: a call in chain_emptied would cost every path that
 * inlines it a stack frame. */
static inline bool walk_holds(const struct tw_wheel *w, unsigned level, unsigned slot)
{
    if (!(w->walking >> level & 1) || w->walk_slot[level] != slot)
        return false;
    struct tw_node *const *walk = w->walk[level - 1];
    return walk[0] || walk[1] || walk[2] || walk[3] || (w->staged && level == w->stage_level);
}

/* The cold half of unlinking: `link`, a list head, was left NULL; if it is a
 * chain (or a level-1 sub-list) of a slot, or a chain a walk ahead took
 * from a slot, and the slot's other lists, and the walk's, are empty too,
 * the slot is empty now (a staged slot, whose bit is clear, stays so).
 * Written with few live values and no call so that, inlined, it costs the
 * hot paths no stack frame. */
static inline void chain_emptied(struct tw_wheel *w, struct tw_node **link)
{
    size_t off = (size_t)((uintptr_t)link - (uintptr_t)&w->slots[0][0][0]);
    unsigned level, slot;
    if (off < sizeof w->slots) {
        size_t idx = off / (sizeof(struct tw_node *) * CHAINS); /* level * 64 + slot */
        level = (unsigned)(idx / TW_WHEEL_SLOTS);
        slot = (unsigned)(idx % TW_WHEEL_SLOTS);
    } else if ((off = (size_t)((uintptr_t)link - (uintptr_t)&w->sub[0][0][0])) < sizeof w->sub) {
        level = 1;
        slot = (unsigned)(off / sizeof w->sub[0]);
    } else if ((off = (size_t)((uintptr_t)link - (uintptr_t)&w->walk[0][0])) < sizeof w->walk) {
        level = (unsigned)(off / sizeof w->walk[0]) + 1;
        slot = w->walk_slot[level];
    } else {
        return; /* a link inside a node */
    }
    if (level == 1) {
        if (!level1_slot_empty(w, slot))
            return;
    } else {
        struct tw_node *const *chains = w->slots[level][slot];
        for (unsigned c = 0; c < CHAINS; c++)
            if (chains[c])
                return;
    }
    if (__builtin_expect(w->walking != 0, 0) && walk_holds(w, level, slot))
        return;
    mark_empty(w, level, slot);
}

/* Take a pending node out of its list; the caller decides what it becomes.
 * Only the last node of a chain can leave its slot empty, and only a chain
 * head (or the ready list's) points at it then. */
static inline void unlink_node(struct tw_wheel *w, struct tw_node *t)
{
    struct tw_node **link = t->pprev;
    struct tw_node *next = t->next;
    *link = next;
    if (next)
        next->pprev = link;
    else if (__builtin_expect(link != &w->ready, 1))
        chain_emptied(w, link);
    t->pprev = NULL;
}

/* Per highest differing bit b (0..63) of deadline ^ now, the level's digit
 * shift (6 * level) and the flat index of its first chain head in w->slots
 * (level * slots * chains): L1-resident loads instead of a division by 6 and
 * the multiplications around it, on every arm. place() reads both from one
 * word of place_by_bit (index << 8 | shift): one load, and the shift needs
 * no extracting (x86 shifts by the low 6 bits of the count). */
#define TW_B4(b) TW_B1(b), TW_B1((b) + 1), TW_B1((b) + 2), TW_B1((b) + 3)
#define TW_B16(b) TW_B4(b), TW_B4((b) + 4), TW_B4((b) + 8), TW_B4((b) + 12)
#define TW_B1(b) \
    ((uint32_t)(((b) / SLOT_BITS) * TW_WHEEL_SLOTS * CHAINS) << 8 | ((b) / SLOT_BITS) * SLOT_BITS)
static const uint32_t place_by_bit[64] = {TW_B16(0), TW_B16(16), TW_B16(32), TW_B16(48)};
#undef TW_B1
#undef TW_B16
#undef TW_B4

/* Place a timer whose deadline is > now (the wheel's time, passed in: a
 * caller placing many keeps it in a register) into its slot, on chain
 * `chain` (any number: taken modulo TW_WHEEL_CHAINS). The occupancy bits
 * change only when the chain was empty: a non-empty chain means the slot is
 * marked already. */
static inline void place_at(struct tw_wheel *w, struct tw_node *t, uint64_t now, unsigned chain)
{
    uint64_t deadline = t->deadline;
    size_t bit = 63 - (size_t)__builtin_clzll(deadline ^ now);
    uint32_t pb = place_by_bit[bit];
    size_t slot = (size_t)(deadline >> (pb & 63)) & SLOT_MASK;
    size_t base = pb >> 8;
    struct tw_node **head = &w->slots[0][0][0] + (base + slot * CHAINS + (chain & (CHAINS - 1)));
    struct tw_node *first = *head;
    t->next = first;
    *head = t;
    t->pprev = head;
    if (__builtin_expect(first != NULL, 1))
        first->pprev = &t->next;
    else
        mark_occupied(w, (unsigned)(base / (TW_WHEEL_SLOTS * CHAINS)), (unsigned)slot);
}

static inline void place(struct tw_wheel *w, struct tw_node *t, unsigned chain)
{
    place_at(w, t, w->now, chain);
}

/* Per highest differing bit b of d ^ now: the bits of a tick from the
 * level of d upward (~0 << 6 * level), which in_place_for compares; in the
 * table of a level L > 0, one digit more for a d at level L (a walk of L
 * stages, see advance.c). The wheel points at the table in use
 * (w->level_bits: tw_level_bits_[0], or [L] while a walk of L stages),
 * so the test costs what a static table does. A mask rather than
 * place_by_bit's shift: one AND-test, where a shift by a variable count
 * takes the count's move into CL as well. */
extern const uint64_t tw_level_bits_[LEVELS][64];

/* Whether pending node n (its deadline D, not ready) may take deadline d >
 * now with one store, being in the slot place() would pick for d already,
 * or in one before it (then it is moved when that slot comes due, as after
 * a lazy re-arm, and never fires late). True when D and d agree on every
 * digit from the level of d upward (d's level: the highest bit in which d
 * and now differ), that is, place() would put D and d in the same slot S:
 *  - n was placed for some D0 <= D (D0 = D unless a lazy re-arm stored D
 *    since); its slot X has not come due, so X's level is D0's level
 *    against now, no higher than S's level (D0 <= D, both > now);
 *  - at a lower level X lies inside now's current slot of S's level, all of
 *    it before S; at the same level X is D0's slot, not after D's, S;
 *  - either way X starts no later than S, which starts no later than d.
 * Level 1's sub-lists break the last step (sub-list q starts 16q ticks into
 * its slot), so a level-1 slot with sub-lists in use (subbed, never clear
 * while they hold a node) does not qualify. (A node on a sub-list starts at
 * its D0 <= D, so d >= D would be safe there too, but testing it keeps D
 * live: one instruction more on every re-arm, for a case exact timers never
 * meet.) A ready node (D = now) never does: d and now differ at d's level.
 * At level 0 this is D == d. Timers a walk staged (advance.c) sit a level
 * below their slot, in the slot of their digit there: while a walk stages,
 * its level's mask asks that digit too. The digits are compared with one
 * mask rather than a shift by place_by_bit's count, which would first have
 * to move the count into CL. */
static inline bool in_place_for(const struct tw_wheel *w, const struct tw_node *n, uint64_t d)
{
    uint64_t high = w->level_bits[63 - (size_t)__builtin_clzll(d ^ w->now)];
    if ((n->deadline ^ d) & high)
        return false;
    return high != ~SLOT_MASK || !(w->subbed >> ((d >> SLOT_BITS) & SLOT_MASK) & 1);
}

/* ---- the lazy re-arm and the walk ahead ------------------------------------------ */
/* "Lazy re-arm" and "The walk ahead" at the top of wheel.c say what these
 * are for. */

/* The walk window of level L >= 1: the last ticks before one of its slots
 * comes due (TW_WHEEL_WALK_TICKS: the whole slot before it at level 1, the
 * width of a level-2 slot above). */
static inline uint64_t walk_window(unsigned level)
{
    return TW_WHEEL_WALK_TICKS(level);
}

void tw_time_moved_(struct tw_wheel *w);
void tw_walk_stop_(struct tw_wheel *w);
void tw_walk_step_(struct tw_wheel *w);
int64_t tw_stage_detach_(struct tw_wheel *w);

/* Called wherever the wheel's time moved, before anything can be re-armed
 * at the new time: the near limits of the levels change only at a few ticks
 * (near_until), and a walk moves on a batch at a time; `wake` is the first
 * tick at which either is due. */
static inline void time_moved(struct tw_wheel *w)
{
    if (__builtin_expect(w->now >= w->wake, 0))
        tw_time_moved_(w);
}

/* A walk moves on once its pace has earned it WALK_BATCH timers, or every
 * TW_WHEEL_WALK_LAG ticks if it is slower: a call and its setup for every
 * few timers would cost more than the timers, and a walk further behind
 * its pace would loosen the bound (tw_wheel_lazy_moves_max). */
#define WALK_BATCH 256

/* While a walk has timers left, every REARM_WALK_EVERY-th lazy push takes
 * TW_WHEEL_REARM_MOVES_MAX of them off it (tw_walk_step_): the walks'
 * moves ride on the re-arms that cause them, as a hash table's incremental
 * rehash rides on its lookups, and the ticks take only what the pushes did
 * not. Eight timers a push: in a heartbeat workload, more than the densest
 * walk's pace (W2 at 10^6: 333 pushes a tick, a walk of every timer over
 * 1024 ticks 977 a tick); 64 a step, so that a step keeps its four
 * chains' misses in flight and its setup is paid for 64 timers. */
#define REARM_WALK_EVERY 8

/* A bit of w->walking above the levels': now lies in the level-2 slot
 * before the next one X, before X's second-pass window, so a lazy push's
 * step may open a first pass over X (first_pass, advance.c). Only while X
 * is at least FIRST_PASS_MIN ticks ahead of that window. */
#define WALK_FIRST_OPEN (UINT32_C(1) << 31)
#define FIRST_PASS_MIN TW_WHEEL_WALK_TICKS(2)
#define SLOT_WIDTH_2 (UINT64_C(1) << (2 * SLOT_BITS))

/* The levels whose walks are under way (w->walking without the open bit). */
static inline uint32_t walk_levels(const struct tw_wheel *w)
{
    return w->walking & ~WALK_FIRST_OPEN;
}

/* The lazy re-arm of pending node n to a later `deadline` (> now): push it
 * back with one store into n, leaving it in the slot of its older deadline
 * D, and return true; or return false, and the caller relocates it now. A D
 * above near_top (the last near tick of the levels that hold timers) is far
 * at once, one comparison; below it, the exact test by level: it is pushed
 * back unless D <= near[b], b the highest bit in which D and
 * now differ (taken as 6 for a D at level 0: the OR): its slot is due within
 * its walk window (which may have walked it already; at level 2, the next
 * slot, which a first pass may walk), or is a level-1 slot
 * with sub-lists (in_place_for says why those differ), or D is at level 0
 * (due within 64 ticks: no time to walk it). A timer pushed back before,
 * whose slot D no longer tells, is pushed again: its slot was not near when
 * it was first pushed, and is walked when it is. pushed_at keeps the time
 * of the last push: a slot of a block begun after it has no timer to walk.
 * Re-arming to D itself changes nothing. A few instructions more than a
 * bare store, and nothing that waits on D but the test: a heartbeat misses
 * on its timer, and the fewer the instructions around each miss (and the
 * fewer stores that depend on it), the more misses of successive
 * heartbeats the CPU keeps in flight. */
static inline __attribute__((always_inline)) bool push_lazily(struct tw_wheel *w, struct tw_node *n,
                                                              uint64_t deadline)
{
    uint64_t d = n->deadline;
    if (deadline <= d)
        return deadline == d;
    if (__builtin_expect(d <= w->near_top, 0)) {
        unsigned b = 63u - (unsigned)__builtin_clzll((d ^ w->now) | (SLOT_MASK + 1));
        if (d <= w->near[b])
            return false;
    }
    w->pushed_at = w->now;
    n->deadline = deadline;
    return true;
}

/* Debug builds (TWHEEL_DEBUG): a pending node remembers its wheel, and the
 * public arm and cancel calls refuse a node pending on another wheel. In
 * release builds both are nothing at all. */
static inline bool owned_or_idle(const struct tw_wheel *w, const struct tw_node *n)
{
#ifdef TWHEEL_DEBUG
    return !n->pprev || n->owner == w;
#else
    (void)w;
    (void)n;
    return true;
#endif
}

static inline void set_owner(struct tw_node *n, struct tw_wheel *w)
{
#ifdef TWHEEL_DEBUG
    n->owner = w;
#else
    (void)n;
    (void)w;
#endif
}

/* The first step of every arm: a deadline <= now becomes now + 1 (0), or
 * there is no later tick (TW_ERANGE). */
static inline __attribute__((always_inline)) int clamp_deadline(const struct tw_wheel *w,
                                                                uint64_t *deadline)
{
    if (__builtin_expect(*deadline <= w->now, 0)) {
        if (w->now == UINT64_MAX)
            return TW_ERANGE;
        *deadline = w->now + 1;
    }
    return 0;
}

/* The last step of an exact arm: n, unlinked, takes `deadline` (> now) and
 * goes into its slot. Timers are spread over a slot's chains by the wheel's
 * round-robin counter (the order in which timers due at one tick fire is
 * unspecified, but this keeps it stable). */
static inline __attribute__((always_inline)) void link_node(struct tw_wheel *w, struct tw_node *n,
                                                            uint64_t deadline)
{
    n->deadline = deadline;
    place(w, n, w->chain++);
    set_owner(n, w);
}

/* Arm or re-arm n exact (both pointers checked by the caller), lazily or,
 * with `eager` (a constant), eagerly. Inlined into each public entry: the
 * arm is a few dozen instructions, a call is a tenth of it. A pending node
 * takes the new deadline with one store where it may stay: lazily, when the
 * deadline is later and push_lazily lets it (it is moved by a walk ahead of
 * its slot, or when its slot comes due; a ready node has deadline == now:
 * relinked); eagerly, when it is in the slot of the new deadline already
 * (in_place_for). Otherwise it is unlinked and placed for the new deadline
 * at once, so that an eager re-arm leaves no move to a later advance. */
static inline __attribute__((always_inline)) int
arm_node_exact(struct tw_wheel *w, struct tw_node *n, uint64_t deadline, bool eager)
{
    int rc = clamp_deadline(w, &deadline);
    if (rc)
        return rc;
    if (n->pprev) {
        if (eager) {
            if (in_place_for(w, n, deadline)) {
                n->deadline = deadline;
                return 0;
            }
        } else if (push_lazily(w, n, deadline)) {
            /* a callback's re-arm leaves the walks to the advance running */
            if (__builtin_expect(w->walking != 0, 0) &&
                (++w->pushes & (REARM_WALK_EVERY - 1)) == 0 && !w->advancing)
                tw_walk_step_(w);
            return 0;
        }
        unlink_node(w, n);
    } else {
        w->pending++;
    }
    link_node(w, n, deadline);
    return 0;
}

/* The lazy arm (the default), which periodic timers use too. */
static inline __attribute__((always_inline)) int arm_node(struct tw_wheel *w, struct tw_node *n,
                                                          uint64_t deadline)
{
    return arm_node_exact(w, n, deadline, false);
}

#endif /* TWHEEL_CORE_INTERNAL_H */
