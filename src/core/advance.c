/* SPDX-License-Identifier: MIT */
/* Advancing the wheel: the next slot to come due, the timers it moves down a
 * level (the cascade) or hands to the ready list, the level-1 sub-slots
 * spliced whole, and the callbacks run from the ready list; the pull
 * interface takes from the same list. The design is at the top of wheel.c. */
#include <string.h>

#include "core/internal.h"

/* ---- the walk ahead -------------------------------------------------------------- */
/* "The walk ahead" at the top of wheel.c says what it is for and why it is
 * bounded. A walk of level L takes the chains of the level's first slot X
 * when X's window begins (into w->walk[L - 1]: X stays marked occupied) and
 * goes through them at its pace: each timer it takes was pushed back past X
 * (placed for its deadline, a later slot) or is due in X (placed back into
 * X's chains, as the timers armed into X meanwhile). When X comes due first,
 * what it has not taken is placed all the same (walks_due). */

/* The stage: a walk of level L >= 2 takes every timer of its slot X anyway,
 * so a timer due in X that it takes goes down to level L - 1 there and
 * then, into the slot of its digit at that level, instead of back into X
 * to be taken again when X comes due (a second miss on each, or an extra
 * pass over X's timers once they outgrow the cache). Those slots are free
 * until X comes due: in X's window (the last 4096 ticks before it; at
 * L = 2 its two passes over those ticks) every level-(L - 1) slot of
 * now's block has passed when L >= 3 (the window lies in the last level-2
 * slot of a level-3 block), and at L = 2 the level-1 slots up to now's
 * own have: from 0 of the 64 in the first pass, from 48 in the second (a
 * timer whose digit is above now's goes back into X, for the second pass
 * or for X's due tick). Staged timers stay out of the occupancy bits (staged: which
 * slots hold them), so that no advance before X takes those slots for now's
 * block; when X comes due the levels below it are empty and stage_down
 * marks them: O(1) a slot, nothing moves. Those due in X's first
 * level-(L - 1) slot (digit 0) go back into X, as they must go lower
 * still. One walk of a level >= 2 runs at a time (a level >= 3 window lies
 * in the last level-2 slot of a block, a level-2 window in an earlier
 * one), so staged and stage_level (the level whose walk stages) serve
 * them all. A staged timer is due in the level-(L - 1) slot of its
 * deadline: while a walk stages, in_place_for asks one digit more of a
 * deadline at level L (w->level_bits), so that an eager re-arm to an
 * earlier tick of X relocates it. */

/* Walks of `level` stage (0: none): in_place_for's masks ask one digit
 * more of a deadline at that level. */
static void stage_serve(struct tw_wheel *w, unsigned level)
{
    w->level_bits = tw_level_bits_[level];
    w->stage_level = (uint8_t)level;
}

/* Put timer t, due in the walked slot of level `level` at digit `digit` of
 * the level below, into that slot of the level below, chain `chain`,
 * leaving its occupancy bit alone. Out of line: inlined, it would leave
 * walk_take's loop too big to keep its chains in registers. */
static __attribute__((noinline)) void stage_node(struct tw_wheel *w, struct tw_node *t,
                                                 unsigned level, unsigned digit, unsigned chain)
{
    struct tw_node **head = &w->slots[level - 1][digit][chain & (CHAINS - 1)];
    struct tw_node *first = *head;
    t->next = first;
    *head = t;
    t->pprev = head;
    if (first)
        first->pprev = &t->next;
    w->staged |= UINT64_C(1) << digit;
}

/* The walked slot of level `level` came due (now is its first tick): the
 * level-(level - 1) slots that hold staged timers are marked occupied, and
 * the walk that staged them ends. */
static __attribute__((noinline)) void stage_down(struct tw_wheel *w, unsigned level)
{
    for (uint64_t bits = w->staged; bits; bits &= bits - 1) {
        unsigned digit = (unsigned)__builtin_ctzll(bits);
        struct tw_node *const *chains = w->slots[level - 1][digit];
        if (chains[0] || chains[1] || chains[2] || chains[3]) /* else all cancelled */
            mark_occupied(w, level - 1, digit);
    }
    w->staged = 0;
    w->walking &= ~(UINT32_C(1) << level);
    stage_serve(w, 0);
}

/* Detach the staged timers (destroy: the occupancy bits do not show them). */
int64_t tw_stage_detach_(struct tw_wheel *w)
{
    int64_t detached = 0;
    for (uint64_t bits = w->staged; bits; bits &= bits - 1) {
        struct tw_node **chains = w->slots[w->stage_level - 1][__builtin_ctzll(bits)];
        for (unsigned c = 0; c < CHAINS; c++) {
            for (struct tw_node *t = chains[c]; t; t = t->next, detached++)
                t->pprev = NULL;
            chains[c] = NULL;
        }
    }
    w->staged = 0;
    return detached;
}

/* Start a walk of level-`level` slot `slot`, due at `tick`, credited from
 * tick `from` (its window's first) on: its chains become the walk's. Its
 * pace, the timers pending (more than the slot can hold) over `span` ticks,
 * takes them all by the end of its window: the time the slot comes due, or
 * at level 2 the second pass's start for a first pass. */
static void walk_start(struct tw_wheel *w, unsigned level, unsigned slot, uint64_t tick,
                       uint64_t from, uint64_t span)
{
    for (unsigned c = 0; c < CHAINS; c++) {
        struct tw_node **head = &w->slots[level][slot][c], **walk = &w->walk[level - 1][c];
        *walk = *head;
        *head = NULL;
        if (*walk)
            (*walk)->pprev = walk;
    }
    w->walk_rate[level] = w->pending / span + 1;
    w->walk_time[level] = from;
    w->walk_ahead[level] = 0;
    w->walked[level] = tick;
    w->walk_slot[level] = (uint8_t)slot;
    w->walking |= UINT32_C(1) << level;
    if (level >= 2 && !w->staged)
        stage_serve(w, level);
}

/* Take up to `budget` timers off the chains `chains` of a walk of `level`
 * side by side (their loads are independent; each chain's next timer is
 * prefetched a round ahead), and place each for its deadline: a timer
 * pushed back past the slot (after `last`) goes to its own slot (a move);
 * with `stage` (a constant), one due in the slot at a digit of the level
 * below from 1 to `top` is staged (a move down), the others go back into
 * the slot. Nothing else runs meanwhile, so the lists are made whole again
 * (their heads' pprev) only by the caller. Returns the timers moved. The
 * loop is kept lean: at 10^6 timers each take is a miss, and the fewer its
 * instructions, the more takes the CPU keeps in flight. */
static inline __attribute__((always_inline)) uint64_t walk_take(struct tw_wheel *w, unsigned level,
                                                                struct tw_node **chains,
                                                                uint64_t last, unsigned top,
                                                                uint64_t budget, bool stage)
{
    unsigned shift = (level - 1) * SLOT_BITS;
    struct tw_node *chain[CHAINS]; /* a local copy: kept in registers */
    memcpy(chain, chains, sizeof chain);
    uint64_t moved = 0, now = w->now;
    unsigned spread = w->chain, live = CHAINS;
    while (live && budget) {
        live = 0;
#pragma GCC unroll 4 /* the chains in registers */
        for (unsigned c = 0; c < CHAINS && budget; c++) {
            struct tw_node *t = chain[c];
            if (!t)
                continue;
            live++;
            budget--;
            chain[c] = t->next;
            if (t->next) /* its miss now, a round early */
                __builtin_prefetch(t->next);
            uint64_t d = t->deadline;
            if (stage && __builtin_expect(d <= last, 0)) {
                unsigned digit = (unsigned)(d >> shift) & SLOT_MASK;
                if (digit - 1 < top) { /* due in the slot: down a level, ahead of it */
                    stage_node(w, t, level, digit, spread++);
                    moved++;
                    continue;
                }
            }
            moved += d > last; /* pushed back past the slot */
            place_at(w, t, now, spread++);
        }
    }
    w->chain = spread;
    memcpy(chains, chain, sizeof chain);
    return moved;
}

/* Take up to `budget` timers off the walk of `level` (walk_take), staging
 * those due in its slot if the stage serves this level. When the walk has
 * taken everything it ends, and a slot it left empty is marked so; a walk
 * that staged timers ends only when its slot comes due (stage_down), so
 * that the slot stays marked (walk_holds) while the stage holds its timers.
 * Returns the timers moved. */
static uint64_t walk_on(struct tw_wheel *w, unsigned level, uint64_t budget)
{
    struct tw_node *chain[CHAINS], **walk = w->walk[level - 1];
    memcpy(chain, walk, sizeof chain);
    uint64_t last = w->walked[level] + ((UINT64_C(1) << (level * SLOT_BITS)) - 1);
    bool stage = level == w->stage_level;
    /* the free slots of the level below: all but digit 0 above level 2,
     * those up to now's at level 2 */
    unsigned top = level > 2 ? SLOT_MASK : (unsigned)(w->now >> SLOT_BITS) & SLOT_MASK;
    uint64_t moved = stage ? walk_take(w, level, chain, last, top, budget, true)
                           : walk_take(w, level, chain, last, top, budget, false);
    unsigned live = 0;
    for (unsigned c = 0; c < CHAINS; c++) {
        walk[c] = chain[c];
        if (chain[c]) {
            chain[c]->pprev = &walk[c];
            live = 1;
        }
    }
    if (!live && !(stage && w->staged)) { /* else it ends in stage_down */
        unsigned slot = w->walk_slot[level];
        w->walking &= ~(UINT32_C(1) << level);
        int empty = level == 1 ? level1_slot_empty(w, slot) : 1;
        for (unsigned c = 0; c < CHAINS && empty; c++)
            empty = !w->slots[level][slot][c];
        if (empty)
            mark_empty(w, level, slot);
    }
    return moved;
}

/* End the walks whose slots come due by `limit` before process_next_slot
 * takes their slots' chains: what they have not taken is placed now, at
 * most their pace times the ticks to their slots (the pace having been
 * kept). A walked slot is always its level's first. */
static __attribute__((noinline)) void walks_due(struct tw_wheel *w, uint64_t limit)
{
    for (uint32_t ls = walk_levels(w); ls; ls &= ls - 1) {
        unsigned level = (unsigned)__builtin_ctz(ls);
        if (w->walked[level] <= limit)
            w->moves += walk_on(w, level, UINT64_MAX);
    }
}

/* The first pass over the next level-2 slot X (WALK_FIRST_OPEN: now lies
 * in the slot before X, before X's second-pass window): a lazy push's
 * step opens it if X is still at least FIRST_PASS_MIN ticks ahead of the
 * second pass's window, so that its pace, the timers pending over the
 * ticks left until that window, is at most a second pass's. The push just
 * made satisfies walks_open's rule (pushed_at is now, in X's block). */
static void first_pass(struct tw_wheel *w)
{
    w->walking &= ~WALK_FIRST_OPEN; /* opened now, or never for this slot */
    if (!(w->levels >> 2 & 1))
        return;
    uint64_t now = w->now, window = walk_window(2);
    unsigned slot = (unsigned)__builtin_ctzll(w->occupied[2]);
    uint64_t tick = slot_tick(now, 2, slot);
    /* not the next slot, walked already, or too late: the second pass
     * walks it */
    if (tick - now > SLOT_WIDTH_2 || tick <= w->walked[2] || tick - now < window + FIRST_PASS_MIN)
        return;
    walk_start(w, 2, slot, tick, now, tick - window - now);
    w->second_pass = 1;
    if (w->wake > now + 1) /* its pace counts from the next time move */
        w->wake = now + 1;
}

/* A lazy re-arm's step (arm_node_exact, every REARM_WALK_EVERY-th push
 * while a walk runs or a first pass may open, which it opens first): take
 * up to TW_WHEEL_REARM_MOVES_MAX timers off the walk of the lowest level
 * that has some left (its slot comes due first), counted ahead of its
 * pace (walk_ahead), so that the advances take only what the pushes did
 * not. Taking timers ahead of the pace is always
 * right: the walked slot is near from its window's start, so nothing is
 * pushed into it behind the walk. */
void tw_walk_step_(struct tw_wheel *w)
{
    if ((w->walking & WALK_FIRST_OPEN) && !(w->walking >> 2 & 1))
        first_pass(w);
    for (uint32_t ls = walk_levels(w); ls; ls &= ls - 1) {
        unsigned level = (unsigned)__builtin_ctz(ls);
        if (!walk_left(w, level))
            continue; /* a walk that staged: it ends when its slot comes due */
        w->moves += walk_on(w, level, TW_WHEEL_REARM_MOVES_MAX);
        w->walk_ahead[level] += TW_WHEEL_REARM_MOVES_MAX;
        return;
    }
}

/* Put the timers of every walk back in their slots' chains (destroy). */
void tw_walk_stop_(struct tw_wheel *w)
{
    for (uint32_t ls = walk_levels(w); ls; ls &= ls - 1)
        w->moves += walk_on(w, (unsigned)__builtin_ctz(ls), UINT64_MAX);
}

/* Set the near limit of `level` >= 1 (its entries in w->near, one per
 * highest differing bit: 6, or 4 at level 10) to `limit`. */
static inline void near_set(struct tw_wheel *w, unsigned level, uint64_t limit)
{
    uint64_t *near = &w->near[level * SLOT_BITS];
    unsigned n = level < LEVELS - 1 ? SLOT_BITS : 64 - (LEVELS - 1) * SLOT_BITS;
    for (unsigned i = 0; i < n; i++)
        near[i] = limit;
}

/* Recompute the near limit of `level` >= 1 (push_lazily) for the time
 * `now`, and the tick at which it changes next (near_at). Level L holds
 * deadlines from B, the first tick of the slot after now's; that slot is
 * near from B less its walk window until B, when the next one's window is
 * still to come; at level 2 always (a first pass may walk it: the open
 * bit is set until its window). At level 1, slots with sub-lists count as
 * near too (place_sub adds those it starts meanwhile), and so does all of
 * level 0. Returns whether the slot after now's is in its window. */
static bool near_level(struct tw_wheel *w, unsigned level, uint64_t now)
{
    uint64_t mask = (UINT64_C(1) << (level * SLOT_BITS)) - 1; /* level <= 10 */
    uint64_t b = (now | mask) + 1, window = walk_window(level), limit = 0;
    bool open = false;
    if (b == 0) { /* no slot ahead at this level, ever */
        w->near_at[level] = UINT64_MAX;
    } else if (level == 2) { /* always near: the first pass's window or the second's */
        limit = b + mask;
        if (b - now > window) { /* a push may open a first pass over b's slot */
            w->near_at[level] = b - window;
            if ((w->levels >> 2 & 1) && slot_tick(now, 2, (unsigned)__builtin_ctzll(w->occupied[2])) == b &&
                b > w->walked[2] && !(w->walking >> 2 & 1))
                w->walking |= WALK_FIRST_OPEN;
        } else {
            w->near_at[level] = b;
            w->walking &= ~WALK_FIRST_OPEN;
            open = true;
        }
    } else if (b - now <= window) {
        limit = b + mask;
        w->near_at[level] = b;
        open = true;
    } else {
        w->near_at[level] = b - window;
    }
    if (level == 1 && w->subbed) { /* the last slot with sub-lists, in now's block */
        uint64_t last = slot_tick(now, 1, 63 - (unsigned)__builtin_clzll(w->subbed)) + SLOT_MASK;
        limit = last > limit ? last : limit;
    }
    near_set(w, level, limit);
    if (level == 1 && (now | SLOT_MASK) > limit)
        w->near[SLOT_BITS] = now | SLOT_MASK; /* all of level 0 (push_lazily's OR) */
    return open;
}

/* The second pass over level-2 slot X (due at `tick`): its window began.
 * What the first pass has not taken yet (its pace took it all by now, bar
 * the last batch) is taken, and the timers the first put back into X (due
 * in X at a level-1 slot that had not passed) and those armed into X since
 * are walked again at the pace of the last TW_WHEEL_WALK_TICKS(2). */
static void second_pass(struct tw_wheel *w, uint64_t tick)
{
    unsigned slot = w->walk_slot[2];
    if ((w->walking >> 2 & 1) && walk_left(w, 2))
        w->moves += walk_on(w, 2, UINT64_MAX);
    struct tw_node *const *chains = w->slots[2][slot];
    if (chains[0] || chains[1] || chains[2] || chains[3])
        walk_start(w, 2, slot, tick, tick - walk_window(2), walk_window(2));
}

/* Start a walk on the first slot of each level in `opened` (levels whose
 * next slot's window has just begun) that is that slot and that a lazy
 * re-arm may have left a timer in: the last push (pushed_at) came after
 * the slot's block began, before which no slot of it existed to push from
 * (a timer pushed earlier came into it re-placed by its deadline). */
static void walks_open(struct tw_wheel *w, uint32_t opened, uint64_t now)
{
    if ((opened >> 2 & 1) && w->second_pass) {
        w->second_pass = 0;
        uint64_t tick = w->walked[2];
        if (tick > now && tick - now <= walk_window(2)) {
            second_pass(w, tick);
            opened &= ~UINT32_C(4);
        }
    }
    for (uint32_t ls = opened & w->levels & ~w->walking; ls; ls &= ls - 1) {
        unsigned level = (unsigned)__builtin_ctz(ls);
        unsigned slot = (unsigned)__builtin_ctzll(w->occupied[level]);
        uint64_t tick = slot_tick(now, level, slot), window = walk_window(level);
        uint64_t block =
            level + 1 < LEVELS ? tick & ~((UINT64_C(1) << ((level + 1) * SLOT_BITS)) - 1) : 0;
        if (tick - now <= window && tick > w->walked[level] && w->pushed_at != UINT64_MAX &&
            w->pushed_at >= block) {
            walk_start(w, level, slot, tick, tick - window, window);
            if (level == 2)
                w->second_pass = 0;
        }
    }
}

/* Time moved to w->now, to or past `wake`: refresh the near limits that
 * changed (level 1's every half slot; the others' rarely, when
 * upper_until comes), with near_top, the highest limit of a level that
 * holds timers; start the walks whose windows began; then move each walk
 * on by its pace times the ticks since it last moved, once that is a batch
 * (or its window is over), and note when this is due next. A walk starts
 * at the first time move into its window and is credited from the window's
 * first tick. tw_wheel_init calls it with every limit due. */
void tw_time_moved_(struct tw_wheel *w)
{
    uint64_t now = w->now;
    if (now >= w->near_until) {
        uint32_t opened = 0;
        if (now >= w->near_at[1])
            opened |= (uint32_t)near_level(w, 1, now) << 1;
        if (now >= w->upper_until) {
            uint64_t until = UINT64_MAX;
            for (unsigned level = 2; level < LEVELS; level++) {
                if (now >= w->near_at[level])
                    opened |= (uint32_t)near_level(w, level, now) << level;
                until = w->near_at[level] < until ? w->near_at[level] : until;
            }
            w->upper_until = until;
        }
        w->near_until = w->near_at[1] < w->upper_until ? w->near_at[1] : w->upper_until;
        uint64_t top = w->near[SLOT_BITS]; /* level 0's limit, and level 1's if higher */
        for (uint32_t ls = w->levels & ~1u; ls; ls &= ls - 1) {
            uint64_t limit = w->near[(unsigned)__builtin_ctz(ls) * SLOT_BITS + 1];
            top = limit > top ? limit : top;
        }
        w->near_top = top;
        if (opened)
            walks_open(w, opened, now);
    }
    uint64_t moved = 0, wake = w->near_until;
    for (uint32_t ls = walk_levels(w); ls; ls &= ls - 1) {
        unsigned level = (unsigned)__builtin_ctz(ls);
        uint64_t ticks = now - w->walk_time[level], rate = w->walk_rate[level];
        uint64_t span = level == 2 && w->second_pass ? SLOT_WIDTH_2 - walk_window(2) : walk_window(level);
        /* a whole span's worth takes every timer: no need to count */
        uint64_t budget = ticks >= span ? UINT64_MAX : rate * ticks;
        if (budget >= WALK_BATCH || ticks >= TW_WHEEL_WALK_LAG) {
            /* what the re-arms' steps took counts against the pace */
            uint64_t ahead = w->walk_ahead[level];
            w->walk_time[level] = now;
            w->walk_ahead[level] = budget > ahead ? 0 : ahead - budget;
            if (budget > ahead)
                moved += walk_on(w, level, budget == UINT64_MAX ? budget : budget - ahead);
            ticks = 0;
        }
        if ((w->walking >> level & 1) && walk_left(w, level)) {
            uint64_t every = (WALK_BATCH - 1) / rate + 1;
            uint64_t next = now + (every < TW_WHEEL_WALK_LAG ? every : TW_WHEEL_WALK_LAG) - ticks;
            wake = next < wake ? next : wake;
        }
    }
    w->wake = wake;
    w->moves += moved;
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
        if (__builtin_expect(w->staged != 0, 0) && level == w->stage_level &&
            tick == w->walked[level])
            stage_down(w, level);
        if (level == 1 && (w->subbed >> slot & 1)) {
            w->subbed &= ~(UINT64_C(1) << slot);
            moved += hand_down_subs(w, slot, &spread);
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
        if (__builtin_expect(w->walking != 0, 0))
            walks_due(w, limit);
        int due = process_next_slot(w, limit);
        if (!due)
            w->now = limit;
        time_moved(w);
        if (!due)
            return NULL;
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
            time_moved(w);
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
