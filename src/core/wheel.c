/* SPDX-License-Identifier: MIT */
/* twheel core: the hierarchical timing wheel.
 *
 * 11 levels of 64 slots cover all 64 bits of time. A timer is placed by its
 * absolute deadline d relative to the current time `now`: its level is the
 * level holding the highest bit in which d and now differ, its slot is d's
 * 6-bit digit at that level.
 *
 *   level  digit bits   slot width (ticks)   level spans (ticks)
 *     0      0..5            1                  64
 *     1      6..11          64                  4096
 *     2     12..17          4096                262144
 *     3     18..23          2^18                2^24
 *    ...
 *     9     54..59          2^54                2^60
 *    10     60..63          2^60                2^64 (16 slots used)
 *
 * Because d > now and they agree on every bit above level L, d's digit at L is
 * greater than now's: an occupied slot is always strictly ahead of the current
 * one at its level, within the current block of the level above. So no slot
 * ever holds timers from two revolutions (nothing wraps, there is no "rounds"
 * count), and the next slot to come due is the lowest set bit of the lowest
 * non-empty level's occupancy bitmap: O(1) with two ctz.
 *
 * A slot at level L > 0 comes due when `now` reaches the first tick of its
 * range; its timers are then re-placed relative to the new now, which puts
 * each of them at a strictly lower level (or fires it, if its deadline is that
 * very tick). A timer therefore moves at most once per level it starts above
 * level 0, and never fires early: it only fires from a slot whose tick equals
 * its deadline.
 *
 * Lazy re-arm (the default): re-arming a pending timer to a later deadline
 * only stores the deadline; the timer stays in the slot of its older one and
 * is re-placed when that slot comes due. Re-arming earlier unlinks and
 * re-inserts at once. One store per later re-arm: the lowest total cost.
 *
 * Eager re-arm (flag TW_ARM_EAGER): a pending timer is placed for its new
 * deadline at once, later or earlier, unless it is in that deadline's slot
 * already (in_place_for, one mask test: one store). It pays the unlink (the
 * old neighbours' lines) so that no advance moves the timer for the re-arm:
 * the lowest tick cost, the tick being left with the fires and the cascades
 * of timers that do fire.
 *
 * Idle arm (flag TW_ARM_IDLE): the arm of a timer the caller knows is idle
 * only stores into it, skipping the load of pprev that tells every other arm
 * a re-arm from an arm (start_node says why that load matters).
 *
 * Slack: a timer allowed to fire anywhere in [D, D + S] is planned at the
 * earliest slot boundary of the highest level that falls in that window
 * (plan_place), and that planned tick is its deadline from then on: apart
 * from the sub-slots below, nothing in the wheel knows about slack, and the
 * exact paths pay nothing for it. A timer planned at a boundary of level L
 * fires straight from the level-L slot it reaches, so it moves at most
 * through the levels between the one it is placed at and L (with S = D/8,
 * usually none), and timers whose windows hold the same boundary fire
 * together. A re-arm with slack is a no-op while the planned tick stays in
 * the new window, and otherwise relocates at once, late in the window
 * (plan_late), never lazily: a lazy re-arm would move the timer in a later
 * advance, the very tick work slack exists to remove.
 *
 * Sub-slots: a window with no multiple of 64 (short delays) is planned on a
 * multiple of 16 if it holds one. Every timer planned with slack on a
 * multiple of 16 that lands at level 1 waits on one of its slot's four
 * sub-lists (sub[slot][q], tick 16q of the slot), each TW_WHEEL_CHAINS
 * chains; when the slot comes due they go down to level 0, or to the ready
 * list, whole (hand_down_subs, splice_due) instead of timer by timer. Exact
 * timers never use them.
 *
 * Firing: the timers due at one tick are first collected on the `ready`
 * list, then their callbacks run one by one. A callback may cancel or re-arm
 * any timer, ready ones included (the ready list is an ordinary doubly
 * linked list), and timers it arms are due at a later tick, so an advance
 * always terminates.
 *
 * Nodes and lists: the slots hold struct tw_node (next, pprev, deadline); a
 * tw_timer is a node plus its callback and argument, and pull-only users
 * (the keyed layer, the cache) embed bare 24-byte nodes (the `bare` flag
 * keeps advance from treating a node as a timer). Lists are singly linked
 * forward plus `pprev`, a pointer to the link that points at the node, as in
 * the Linux kernel's hlist: unlinking needs no slot index, and a slot that
 * became empty is known because only a chain head can be pointed at by
 * `pprev` from outside a node, and its address tells which slot it is.
 *
 * Chains: a slot is TW_WHEEL_CHAINS lists, pushed onto in turn. Walking one
 * list is a chain of dependent loads, each a cache miss once the timers
 * outgrow the cache; walking four side by side keeps four misses in flight.
 * Four make the expiry of 10^6 timers about 2.4 times cheaper than one list;
 * eight gain little more, cost more than four on small wheels, and double
 * the slot array.
 */
#include "twheel/wheel.h"

#include <string.h>

#define SLOT_BITS TW_WHEEL_SLOT_BITS
#define SLOT_MASK ((uint64_t)TW_WHEEL_SLOTS - 1)
#define LEVELS TW_WHEEL_LEVELS
#define CHAINS TW_WHEEL_CHAINS

_Static_assert(TW_WHEEL_SLOTS == 64, "one 64-bit occupancy word per level");
_Static_assert(LEVELS * SLOT_BITS >= 64 && (LEVELS - 1) * SLOT_BITS < 64,
               "levels cover exactly the 64-bit tick range");
_Static_assert(LEVELS <= 32, "levels bitmap is 32 bits wide");
_Static_assert(CHAINS >= 1 && (CHAINS & (CHAINS - 1)) == 0, "chains: a power of two");

/* ---- small helpers -------------------------------------------------------- */

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

static inline void mark_occupied(struct tw_wheel *w, unsigned level, unsigned slot)
{
    w->occupied[level] |= UINT64_C(1) << slot;
    w->levels |= UINT32_C(1) << level;
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
_Static_assert(SUBS == 4 && SUB_WIDTH * SUBS == TW_WHEEL_SLOTS, "sub-slots split a slot in 4 (process_next_slot looks at 1..3)");

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

/* The cold half of unlinking: `link`, a list head, was left NULL; if it is a
 * chain (or a level-1 sub-list) of a slot whose other lists are empty too,
 * the slot is empty now. Written with few live values so that, inlined, it
 * costs the hot paths no stack frame. */
static inline void chain_emptied(struct tw_wheel *w, struct tw_node **link)
{
    size_t off = (size_t)((uintptr_t)link - (uintptr_t)&w->slots[0][0][0]);
    if (off >= sizeof w->slots) {
        off = (size_t)((uintptr_t)link - (uintptr_t)&w->sub[0][0][0]);
        if (off >= sizeof w->sub)
            return; /* a link inside a node */
        size_t slot = off / sizeof w->sub[0];
        if (level1_slot_empty(w, slot))
            mark_empty(w, 1, (unsigned)slot);
        return;
    }
    size_t idx = off / (sizeof(struct tw_node *) * CHAINS); /* level * 64 + slot */
    if (idx / TW_WHEEL_SLOTS == 1) {
        if (level1_slot_empty(w, idx % TW_WHEEL_SLOTS))
            mark_empty(w, 1, (unsigned)(idx % TW_WHEEL_SLOTS));
        return;
    }
    struct tw_node *const *chains = &w->slots[0][0][0] + idx * CHAINS;
    for (unsigned c = 0; c < CHAINS; c++)
        if (chains[c])
            return;
    mark_empty(w, (unsigned)(idx / TW_WHEEL_SLOTS), (unsigned)(idx % TW_WHEEL_SLOTS));
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
#define TW_B1(b) ((uint32_t)(((b) / SLOT_BITS) * TW_WHEEL_SLOTS * CHAINS) << 8 | ((b) / SLOT_BITS) * SLOT_BITS)
static const uint32_t place_by_bit[64] = {TW_B16(0), TW_B16(16), TW_B16(32), TW_B16(48)};
#undef TW_B1
/* ... and, for slack (plan_place), the mask that rounds a window's tick up
 * to its planned tick: the level's slot width less one, 2^(6 * level) - 1,
 * at levels 1 and up; at level 0, 15 if the window holds a multiple of 16
 * (b = 4, 5), else 0. */
#define TW_B1(b)                                                                             \
    ((b) >= SLOT_BITS ? (UINT64_C(1) << (((b) / SLOT_BITS) * SLOT_BITS)) - 1                 \
                      : (b) >= SUB_BITS ? (uint64_t)SUB_WIDTH - 1 : 0)
static const uint64_t plan_mask[64] = {TW_B16(0), TW_B16(16), TW_B16(32), TW_B16(48)};
#undef TW_B16
#undef TW_B4
#undef TW_B1

/* Place a timer whose deadline is > now into its slot, on chain `chain` (any
 * number: taken modulo TW_WHEEL_CHAINS). The occupancy bits change only when
 * the chain was empty: a non-empty chain means the slot is marked already. */
static inline void place(struct tw_wheel *w, struct tw_node *t, unsigned chain)
{
    uint64_t deadline = t->deadline;
    size_t bit = 63 - (size_t)__builtin_clzll(deadline ^ w->now);
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

/* Per highest differing bit b of d ^ now: the bits of a tick from the
 * level of d upward (~0 << 6 * level), which in_place_for compares. A mask
 * rather than place_by_bit's shift: one AND-test, where a shift by a
 * variable count takes the count's move into CL as well. */
#define TW_B1(b) (~UINT64_C(0) << (((b) / SLOT_BITS) * SLOT_BITS))
#define TW_B4(b) TW_B1(b), TW_B1((b) + 1), TW_B1((b) + 2), TW_B1((b) + 3)
#define TW_B16(b) TW_B4(b), TW_B4((b) + 4), TW_B4((b) + 8), TW_B4((b) + 12)
static const uint64_t level_bits[64] = {TW_B16(0), TW_B16(16), TW_B16(32), TW_B16(48)};
#undef TW_B16
#undef TW_B4
#undef TW_B1

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
 * At level 0 this is D == d. The digits are compared with one mask,
 * level_bits, rather than a shift by place_by_bit's count, which would
 * first have to move the count into CL. */
static inline bool in_place_for(const struct tw_wheel *w, const struct tw_node *n,
                                uint64_t d)
{
    uint64_t high = level_bits[63 - (size_t)__builtin_clzll(d ^ w->now)];
    if ((n->deadline ^ d) & high)
        return false;
    return high != ~SLOT_MASK || !(w->subbed >> ((d >> SLOT_BITS) & SLOT_MASK) & 1);
}

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
        mark_occupied(w, 1, (unsigned)(sub / SUBS));
        w->subbed |= UINT64_C(1) << (sub / SUBS);
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
                                          struct tw_node **tail, uint64_t tick,
                                          unsigned *spread, uint64_t *moved)
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

/* ---- wheel ------------------------------------------------------------------ */

int tw_wheel_init(struct tw_wheel *w, uint64_t now)
{
    if (!w)
        return TW_EINVAL;
    memset(w, 0, sizeof *w);
    w->now = now;
    w->target = now;
    return 0;
}

int64_t tw_wheel_destroy(struct tw_wheel *w)
{
    if (!w)
        return TW_EINVAL;
    if (w->advancing)
        return TW_EBUSY;
    int64_t detached = 0;
    for (struct tw_node *t = w->ready; t; t = t->next, detached++)
        t->pprev = NULL;
    for (unsigned level = 0; level < LEVELS; level++) {
        for (uint64_t bits = w->occupied[level]; bits; bits &= bits - 1) {
            unsigned slot = (unsigned)__builtin_ctzll(bits);
            for (unsigned c = 0; c < CHAINS; c++)
                for (struct tw_node *t = w->slots[level][slot][c]; t; t = t->next, detached++)
                    t->pprev = NULL;
            for (unsigned i = 0; level == 1 && i < SUBS * CHAINS; i++)
                for (struct tw_node *t = (&w->sub[slot][0][0])[i]; t; t = t->next, detached++)
                    t->pprev = NULL;
        }
    }
    uint64_t now = w->now;
    tw_wheel_init(w, now);
    return detached;
}

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

uint64_t tw_wheel_next_expiry(const struct tw_wheel *w)
{
    if (!w)
        return TW_NEVER;
    if (w->ready)
        return w->now;
    if (!w->levels)
        return TW_NEVER;
    return first_slot_tick(w);
}

size_t tw_wheel_pending(const struct tw_wheel *w)
{
    return w ? w->pending : 0;
}

uint64_t tw_wheel_moves(const struct tw_wheel *w)
{
    return w ? w->moves : 0;
}

/* ---- slack ------------------------------------------------------------------ */

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
#define TW_B1(b)                                                                              \
    ((b) < SUB_BITS    ? ~UINT64_C(0)                                                          \
     : (b) < SLOT_BITS ? ~(uint64_t)(SUB_WIDTH - 1)                                            \
                       : ~UINT64_C(0) << ((b) < 2 * SLOT_BITS ? SLOT_BITS                      \
                                                              : ((b) / SLOT_BITS - 1) * SLOT_BITS))
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

/* The first step of a slack arm: a deadline <= now becomes now + 1 (0), or
 * there is no later tick (TW_ERANGE). */
static inline __attribute__((always_inline)) int slack_clamp(const struct tw_wheel *w,
                                                             uint64_t *deadline)
{
    if (__builtin_expect(*deadline <= w->now, 0)) {
        if (w->now == UINT64_MAX)
            return TW_ERANGE;
        *deadline = w->now + 1;
    }
    return 0;
}

/* Re-arm pending n to fire in [deadline, deadline + slack] (saturating;
 * both pointers checked by the caller). Planned inside the window already
 * (so still ahead of now): it stays where it is, with nothing stored.
 * Otherwise it is relocated at once, so that a later advance never has to
 * move it (see the file comment of wheel.h), to plan_late's tick. The stay
 * test needs no saturated end: D >= deadline and D - deadline <= slack is
 * D in the window whether or not deadline + slack wraps (D <= UINT64_MAX
 * always holds), so the end is worked out only to relocate. */
static inline __attribute__((always_inline)) int
rearm_node_slack(struct tw_wheel *w, struct tw_node *n, uint64_t deadline, uint64_t slack)
{
    int rc = slack_clamp(w, &deadline);
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
    int rc = slack_clamp(w, &deadline);
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

/* ---- nodes and timers ------------------------------------------------------- */

int tw_node_init(struct tw_node *n)
{
    if (!n)
        return TW_EINVAL;
    n->next = NULL;
    n->pprev = NULL;
    n->deadline = TW_NEVER;
    set_owner(n, NULL);
    return 0;
}

/* Arm or re-arm n (both pointers checked by the caller). Inlined into each
 * public entry: the arm is a few dozen instructions, a call is a tenth of it.
 * Timers are spread over a slot's chains by the wheel's round-robin counter
 * (the order in which timers due at one tick fire is unspecified, but this
 * keeps it stable). */
static inline __attribute__((always_inline)) int
arm_node(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    if (__builtin_expect(deadline <= w->now, 0)) {
        if (w->now == UINT64_MAX)
            return TW_ERANGE;
        deadline = w->now + 1;
    }
    if (n->pprev) {
        /* Later than a deadline still in the future: one store, moved when
         * its slot comes due. (A ready node has deadline == now: relink.) */
        if (deadline >= n->deadline && n->deadline > w->now) {
            n->deadline = deadline;
            return 0;
        }
        unlink_node(w, n);
    } else {
        w->pending++;
    }
    n->deadline = deadline;
    place(w, n, w->chain++);
    set_owner(n, w);
    return 0;
}

/* Arm n, which the caller knows to be idle (TW_ARM_IDLE; debug builds
 * check it, release builds take the caller's word): only stores into n. An
 * arm first loads n->pprev to tell a re-arm from an arm, and for a timer not
 * touched for a while (millions of timers: a cold line per arm) that load is
 * most of the arm; stores to a cold line retire through the store buffer
 * without a wait. The wheel's own fields (w) are hot: reading them is
 * free. */
static inline __attribute__((always_inline)) int
start_node(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    if (__builtin_expect(deadline <= w->now, 0)) {
        if (w->now == UINT64_MAX)
            return TW_ERANGE;
        deadline = w->now + 1;
    }
    w->pending++;
    n->deadline = deadline;
    place(w, n, w->chain++);
    set_owner(n, w);
    return 0;
}

/* Arm or re-arm n eagerly (both pointers checked by the caller): exact as
 * arm_node, but a pending node is unlinked and placed for its new deadline
 * at once, never left in the slot of an older one, so that no later advance
 * moves it for this re-arm - unless it is in the slot of the new deadline
 * already (in_place_for), where one store does. */
static inline __attribute__((always_inline)) int
arm_node_eager(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    if (__builtin_expect(deadline <= w->now, 0)) {
        if (w->now == UINT64_MAX)
            return TW_ERANGE;
        deadline = w->now + 1;
    }
    if (n->pprev) {
        if (in_place_for(w, n, deadline)) {
            n->deadline = deadline;
            return 0;
        }
        unlink_node(w, n);
    } else {
        w->pending++;
    }
    n->deadline = deadline;
    place(w, n, w->chain++);
    set_owner(n, w);
    return 0;
}

/* Cancel n (both pointers checked by the caller). unlink_node written out
 * with n's own stores first: then n is not needed after the neighbours'
 * stores, and gcc keeps it in its argument register (one instruction less
 * per cancel, of about 22). unlink_node
 * itself keeps that store last: its other callers place the node next, and
 * place()'s store to pprev then makes it dead (moved first, it survives:
 * one instruction more in every relinking arm, gcc -O3). */
static inline __attribute__((always_inline)) int cancel_node(struct tw_wheel *w,
                                                             struct tw_node *n)
{
    struct tw_node **link = n->pprev;
    if (!link)
        return 0;
    if (!owned_or_idle(w, n))
        return TW_EINVAL;
    struct tw_node *next = n->next;
    n->pprev = NULL;
    w->pending--;
    *link = next;
    if (next)
        next->pprev = link;
    else if (__builtin_expect(link != &w->ready, 1))
        chain_emptied(w, link);
    return 1;
}

/* ---- the workers behind tw_arm and tw_cancel ------------------------------ */
/* The typed forms of twheel/wheel.h pick one worker per arm from their
 * constant flags (how), for a timer or a bare node. Every worker is
 * arm_checked with both constant: one body for all ten, each inlined into
 * its worker, so that a worker checks only what its own kind and flags
 * need. */
enum arm_how { ARM_LAZY, ARM_EAGER, ARM_IDLE, ARM_SLACK, ARM_IDLE_SLACK };

/* The checks of an arm, then the arm: of timer t's node n, or of bare node n
 * (t NULL, bare true: a constant in each worker). A bare node is refused
 * from a callback (the advance running would hand it to the loop that calls
 * back, which would take it for a timer), and arming one makes the wheel
 * pull-only. A timer's callback is checked to tell an uninitialised timer:
 * always by the lazy arm; by the eager and slack arms only while the timer
 * is idle (a pending one was checked when it was armed, and skipping the
 * load saves a heartbeat's re-arm two of its about forty instructions); by
 * the idle arms only in debug builds (release builds read nothing of an idle
 * arm's timer: it lives in a cold line, see start_node). */
static inline __attribute__((always_inline)) int arm_checked(struct tw_wheel *w, struct tw_node *n,
                                                             const struct tw_timer *t,
                                                             uint64_t deadline, uint64_t slack,
                                                             enum arm_how how, bool bare)
{
    if (!w || !n)
        return TW_EINVAL;
    if (bare && w->advancing)
        return TW_EBUSY;
    int rc;
    if (how == ARM_IDLE || how == ARM_IDLE_SLACK) {
#ifdef TWHEEL_DEBUG
        if (!bare && !t->fn)
            return TW_EINVAL;
        if (n->pprev)
            return TW_EBUSY;
#endif
        rc = how == ARM_IDLE ? start_node(w, n, deadline) : start_node_slack(w, n, deadline, slack);
    } else if (!owned_or_idle(w, n)) {
        return TW_EINVAL;
    } else if (how == ARM_LAZY) {
        if (!bare && !t->fn)
            return TW_EINVAL;
        rc = arm_node(w, n, deadline);
    } else if (n->pprev) {
        rc = how == ARM_EAGER ? arm_node_eager(w, n, deadline)
                              : rearm_node_slack(w, n, deadline, slack);
    } else if (!bare && !t->fn) {
        return TW_EINVAL;
    } else {
        rc = how == ARM_EAGER ? arm_node_eager(w, n, deadline)
                              : start_node_slack(w, n, deadline, slack);
    }
    if (bare && rc == 0)
        w->bare = 1;
    return rc;
}

/* A timer's node: NULL for a NULL timer (the node is its first member). */
static inline struct tw_node *node_of(struct tw_timer *t)
{
    return t ? &t->node : NULL;
}

int tw_timer_arm_lazy_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline)
{
    return arm_checked(w, node_of(t), t, deadline, 0, ARM_LAZY, false);
}

int tw_timer_arm_eager_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline)
{
    return arm_checked(w, node_of(t), t, deadline, 0, ARM_EAGER, false);
}

int tw_timer_arm_idle_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline)
{
    return arm_checked(w, node_of(t), t, deadline, 0, ARM_IDLE, false);
}

int tw_timer_arm_slack_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline, uint64_t slack)
{
    return arm_checked(w, node_of(t), t, deadline, slack, ARM_SLACK, false);
}

int tw_timer_arm_idle_slack_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline,
                             uint64_t slack)
{
    return arm_checked(w, node_of(t), t, deadline, slack, ARM_IDLE_SLACK, false);
}

int tw_node_arm_lazy_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    return arm_checked(w, n, NULL, deadline, 0, ARM_LAZY, true);
}

int tw_node_arm_eager_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    return arm_checked(w, n, NULL, deadline, 0, ARM_EAGER, true);
}

int tw_node_arm_idle_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    return arm_checked(w, n, NULL, deadline, 0, ARM_IDLE, true);
}

int tw_node_arm_slack_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline, uint64_t slack)
{
    return arm_checked(w, n, NULL, deadline, slack, ARM_SLACK, true);
}

int tw_node_arm_idle_slack_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline,
                            uint64_t slack)
{
    return arm_checked(w, n, NULL, deadline, slack, ARM_IDLE_SLACK, true);
}

/* The cancel of timers and nodes alike (tw_timer_cancel_ passes the node). */
int tw_node_cancel_(struct tw_wheel *w, struct tw_node *n)
{
    if (!w || !n)
        return TW_EINVAL;
    return cancel_node(w, n);
}

int tw_timer_init(struct tw_timer *t, tw_timer_fn *fn, void *arg)
{
    if (!t || !fn)
        return TW_EINVAL;
    tw_node_init(&t->node);
    t->fn = fn;
    t->arg = arg;
    return 0;
}

/* ---- periodic timers -------------------------------------------------------- */

/* The core callback of every periodic timer: re-arm from the deadline that
 * just fired (no drift), then run the user's callback, which may stop or
 * restart the timer. */
static void periodic_fire(struct tw_timer *t, void *arg)
{
    struct tw_periodic *p = arg;
    struct tw_wheel *w = p->wheel;
    uint64_t fired_at = p->due; /* the nominal deadline that fired (== now without slack) */
    uint64_t next = saturating_add(fired_at, p->period);
    if (p->policy == TW_MISSED_SKIP && next <= w->target) {
        uint64_t periods = (w->target - fired_at) / p->period + 1;
        next = periods > (UINT64_MAX - fired_at) / p->period
                   ? UINT64_MAX
                   : fired_at + periods * p->period;
    }
    /* At the end of time (next == now == UINT64_MAX) the timer stays idle.
     * The slack is below the period, so next > now: never moved to now + 1. */
    if ((p->slack ? arm_node_slack(w, &t->node, next, p->slack)
                  : arm_node(w, &t->node, next)) == 0)
        p->due = next;
    p->fn(p, p->arg);
}

int tw_periodic_init(struct tw_periodic *p, tw_periodic_fn *fn, void *arg,
                     enum tw_missed_policy policy)
{
    if (!p || !fn || (policy != TW_MISSED_CATCH_UP && policy != TW_MISSED_SKIP))
        return TW_EINVAL;
    tw_timer_init(&p->timer, periodic_fire, p);
    p->wheel = NULL;
    p->period = 0;
    p->slack = 0;
    p->due = 0;
    p->fn = fn;
    p->arg = arg;
    p->policy = policy;
    return 0;
}

int tw_periodic_start(struct tw_wheel *w, struct tw_periodic *p, uint64_t first, uint64_t period,
                      uint64_t slack)
{
    if (!w || !p || !p->fn || period == 0)
        return TW_EINVAL;
    if (w->now == UINT64_MAX)
        return TW_ERANGE;
    if (p->wheel && p->wheel != w && p->timer.node.pprev)
        tw_cancel(p->wheel, &p->timer);
    p->wheel = w;
    p->period = period;
    p->slack = slack < period ? slack : period - 1;
    p->due = first > w->now ? first : w->now + 1;
    return p->slack ? arm_node_slack(w, &p->timer.node, p->due, p->slack)
                    : arm_node(w, &p->timer.node, p->due);
}

int tw_periodic_stop(struct tw_periodic *p)
{
    if (!p)
        return TW_EINVAL;
    if (!p->wheel)
        return 0;
    return tw_cancel(p->wheel, &p->timer);
}

/* ---- event loops: time from the caller's clock ------------------------------ */
/* The wheel's time moves only when it is advanced, so in an event loop it is
 * stale between advances: a delay counted from it would end early, and a
 * timeout counted from it would end late (and, re-aimed every turn, never).
 * The caller's clock is taken instead: arming from it is an absolute
 * deadline (tw_arm_in in wheel.h; the arm only moves a past one to the
 * next tick), and the timeout is measured from the caller's now. */

uint64_t tw_wheel_timeout(const struct tw_wheel *w, uint64_t now)
{
    if (!w || !w->pending)
        return TW_NEVER;
    uint64_t next = tw_wheel_next_expiry(w);
    return next <= now ? 0 : next - now;
}
