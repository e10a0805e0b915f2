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
 * its deadline. The level depends on where d lies, not on how near it is: a
 * deadline just past a multiple of 2^18 starts at level 3 however close, then
 * moves to levels 2, 1 and 0 (so a delay below 64^k moves at most k times).
 *
 * Lazy re-arm (the default): re-arming a pending timer to a later deadline
 * only stores the deadline (push_lazily): the timer stays in the slot of its
 * older one, pushed back past it, and is moved for its deadline later, by
 * the walk ahead of that slot (below) or when the slot comes due. Re-arming
 * earlier unlinks and re-inserts at once. One store into the timer per
 * later re-arm (and, one push in eight while a walk runs, a step of that
 * walk: below): the lowest total cost. A timer whose slot is near, due
 * within its walk window (so the walk may have passed it; at level 2 the
 * next slot always, as a first pass may walk it), or at level 0 (due
 * within 64 ticks: no time to walk it), or in a level-1 slot with
 * sub-lists (which go down whole, not walked), is relocated at once
 * instead, as an eager re-arm;
 * "near" is a limit per highest differing bit of D and now (near[b]: the
 * last near tick of D's level), and one comparison with the highest limit
 * of the levels that hold timers (near_top) clears most heartbeats without
 * that test. The limits change only at a few ticks, when a window opens or
 * closes (near_at per level, near_until the first of them): level 1's
 * every 64 ticks, the others' every 4096 or more.
 *
 * The walk ahead: without it, timers armed together and pushed back
 * together (connections accepted at once, then heartbeats) all wait in the
 * slot they were armed for, and the advance that reaches it moves them all:
 * 10^6 in one tick in W2. So each level's first slot X is walked during its
 * window, the last TW_WHEEL_WALK_TICKS ticks before it comes due (64 at
 * level 1, 1024 at level 2, 4096 above: at level 1 the whole slot before
 * it; at level 2 its last quarter, so that most level-1 slots have passed
 * when the walk takes X's timers down to them (below); above, long enough
 * to spread any load, short enough that what it walks is still in the
 * cache when X comes due). At level 2 a first pass may come before that
 * window: a lazy push's step in the first half of the slot before X opens
 * it (first_pass; WALK_FIRST_OPEN marks the slot before X, X unwalked),
 * at the pace of the pending timers over the ticks left until the window;
 * it moves the timers pushed back past X and takes down what it can, and
 * the second pass, in the window, walks what it put back (second_pass).
 * Why: re-arms of every timer at once (a keyed heartbeat sweep) come right
 * after a level-2 slot came due, long before the next one's last quarter:
 * with no walk open for their steps, the ticks would make the moves at the
 * window's pace, set by every timer pending, a few hundred misses a tick;
 * the first pass gives the sweep's steps a walk to take whole. Opened only by pushes: without them, a first pass
 * would read X's timers not pushed back twice (W1's expiry). When a
 * window opens (tw_time_moved_, at near_until), X's chains become the
 * walk's (w->walk; X stays marked occupied, and chain_emptied does not
 * mark it empty while the walk holds chains of it), and at each later
 * time move the walk takes its pace's
 * worth off them: a timer pushed back past X is placed for its deadline (a
 * move), any other is placed back into X. Its pace is the timers pending
 * when it starts over the window's ticks (walk_rate), so it has taken them
 * all by X's due tick (a first pass: by the second's start); what it has
 * not taken when X comes due within an advance (time jumped) is taken then
 * (walks_due), at most its pace times the ticks that advance covers. Since
 * X is near throughout its walks (at level 2 the next slot always is), no
 * re-arm pushes a timer into it behind the walk, and timers armed into X
 * meanwhile are placed for their deadlines. A walk moves on once its pace
 * has earned a batch of 256 (or every TW_WHEEL_WALK_LAG ticks if slower):
 * the call and setup cost more than a few timers. The re-arms take steps
 * of it too (tw_walk_step_): while a walk has timers left, one lazy push in
 * REARM_WALK_EVERY (8) takes TW_WHEEL_REARM_MOVES_MAX (64) off the walk of
 * the lowest level, counted in walk_ahead, and an advance takes only what
 * the pace asks beyond them. Why: the moves are the pushes' doing, and
 * made by the ticks they made the mean tick of a heartbeat loop at 10^6
 * timers dearer than an eager re-arm's, each move a cache miss; made by
 * the pushes, a push costs one store almost always, a few microseconds
 * once in eight while a walk runs, and the ticks are left with the fires
 * and the cascades. Taking timers ahead of the pace is right at any time:
 * the walked slot is near from its window's start. Callbacks of an advance
 * take no steps (the advance running walks at its pace). A walk starts
 * only if a push may have left a timer in X: the last push (pushed_at)
 * came after X's block of the level above began (before, no slot of it
 * existed; a timer pushed earlier came into it placed for its deadline),
 * and X was not walked already (walked). Exact timers nobody re-arms (W3, W4) are never
 * walked. A walk of a level L >= 2 takes X's other timers (due in X) down a
 * level as it goes, into the level-(L - 1) slots of their deadlines, which
 * are free until X comes due (all of them above level 2, the level-1 slots
 * already past at level 2), kept out of the occupancy bits until then
 * (staged; advance.c, "The stage"): so each timer of X is read once, not
 * by the walk and again when X comes due, and X's own descent is spread
 * too. tw_wheel_lazy_moves_max states what one advance can move.
 *
 * Eager re-arm (flag TW_ARM_EAGER): a pending timer is placed for its new
 * deadline at once, later or earlier, unless it is in that deadline's slot
 * already (in_place_for, one mask test: one store). It pays the unlink (the
 * old neighbours' lines) so that no advance moves the timer for the re-arm:
 * the lowest tick cost, the tick being left with the fires and the cascades
 * of timers that do fire. A timer a lazy re-arm left in the slot of an older
 * deadline counts as in place when the new deadline falls in the slot of the
 * one that lazy re-arm stored: one store, and the slot it waits in moves it
 * once when it comes due (still exact; tw_wheel_next_expiry may stop there
 * first). An eager re-arm checks an idle timer's callback only (a pending one
 * was checked when armed).
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
 * advance, the very tick work slack exists to remove. Planned late, a timer
 * re-armed again and again (a heartbeat) stays inside its next windows
 * longer, at the price of at most one move more if it does come due. A
 * periodic timer with slack keeps its phase: each nominal deadline counts
 * from the one before, the slack capped at period - 1 so that fires stay in
 * order.
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
 *
 * The fields of struct tw_wheel (all private; twheel/wheel.h only lays them
 * out):
 *   slots[level][slot][chain]  the lists, TW_WHEEL_CHAINS per slot
 *   sub[slot][q][chain]        level 1's sub-lists: timers planned with slack
 *                              on tick 16q of level-1 slot `slot`
 *   occupied[level]            bit s set <=> slot s of the level holds a
 *                              node (at level 1, in a chain or a sub-list)
 *   levels                     bit l set <=> occupied[l] != 0
 *   subbed                     bit s set => level-1 slot s may have sub-lists
 *                              in use (never clear while they hold a node)
 *   walk[level - 1][chain]     the chains a walk ahead took from its level's
 *                              first slot and has not taken off yet
 *   near[b]                    by highest differing bit b of D ^ now (6 for
 *                              level 0): the last tick of the level's near
 *                              slots; a lazy re-arm at or below relocates
 *   near_at[level]             when that level's near limit changes next
 *   near_until, upper_until    the first of near_at of all levels, of
 *                              levels 2 and up
 *   near_top                   the highest near limit of a level holding
 *                              timers: above it a re-arm is pushed at once
 *   pushed_at                  the time of the last push (UINT64_MAX: none)
 *   walk_rate, walk_time       a walk's pace (timers a tick) and the tick
 *                              it has taken timers up to
 *   walk_ahead[level]          timers the re-arms' steps took off the walk
 *                              since walk_time, ahead of its pace
 *   pushes                     lazy pushes while a walk ran or a first
 *                              pass could open (one in REARM_WALK_EVERY
 *                              takes a step)
 *   walked[level], walk_slot   the tick and the index of the slot the
 *                              level's walk takes (or last took) from
 *   second_pass                the level-2 walk is a first pass: a second
 *                              is due when the window of its slot opens
 *   walking                    bit l set <=> level l's walk is under way
 *                              (a walk that staged timers: until its slot
 *                              comes due); bit 31, WALK_FIRST_OPEN: a
 *                              push's step may open a first pass
 *   staged, stage_level        the level-(stage_level - 1) slots holding
 *                              timers the walk of stage_level took down
 *                              ahead of its slot, not marked occupied yet
 *   level_bits                 in_place_for's masks: tw_level_bits_[0], or
 *                              [stage_level] (one digit more at that level)
 *   wake                       the first tick at which a near limit
 *                              changes or a walk is due (time_moved)
 *   ready                      the nodes due at `now`, not fired or pulled yet
 *   now, target                the current tick; the tick the running
 *                              advance (or pull) goes to
 *   pending                    armed timers and nodes, ready ones included
 *   moves                      timers moved by advances and by relocating
 *                              re-arms with slack, since init
 *   chain                      the chain the next push goes to, round robin
 *   advancing                  inside tw_wheel_advance
 *   bare                       a bare node was armed since init: pull only
 *
 * Files: wheel.c this design, init, destroy and the getters; arm.c the arm,
 * re-arm and cancel of timers and bare nodes (the workers behind tw_arm);
 * advance.c advancing, the cascade, the walks ahead and the pull
 * interface; periodic.c the
 * periodic timers; internal.h and slack.h the static inline helpers they
 * share (placement, linking, the exact arm; planning with slack), inlined
 * into the hot paths.
 */
#include <string.h>

#include "core/internal.h"

/* ---- wheel ------------------------------------------------------------------ */

/* in_place_for's masks (internal.h): table L asks one digit more of a
 * deadline at level L > 0; table 0 none. */
#define TW_M(b, L) \
    (~UINT64_C(0) << (((b) / SLOT_BITS - ((L) > 0 && (b) / SLOT_BITS == (L))) * SLOT_BITS))
#define TW_B4(b, L) TW_M(b, L), TW_M((b) + 1, L), TW_M((b) + 2, L), TW_M((b) + 3, L)
#define TW_B16(b, L) TW_B4(b, L), TW_B4((b) + 4, L), TW_B4((b) + 8, L), TW_B4((b) + 12, L)
#define TW_T(L)                                                   \
    {                                                             \
        TW_B16(0, L), TW_B16(16, L), TW_B16(32, L), TW_B16(48, L) \
    }
const uint64_t tw_level_bits_[LEVELS][64] = {TW_T(0), TW_T(1), TW_T(2), TW_T(3), TW_T(4), TW_T(5),
                                             TW_T(6), TW_T(7), TW_T(8), TW_T(9), TW_T(10)};
_Static_assert(LEVELS == 11, "one table per level");
#undef TW_T
#undef TW_B16
#undef TW_B4
#undef TW_M

int tw_wheel_init(struct tw_wheel *w, uint64_t now)
{
    if (!w)
        return TW_EINVAL;
    memset(w, 0, sizeof *w);
    w->now = now;
    w->target = now;
    w->pushed_at = UINT64_MAX; /* never */
    w->level_bits = tw_level_bits_[0];
    /* near_at and the untils are 0: every near limit is computed */
    tw_time_moved_(w);
    return 0;
}

int64_t tw_wheel_destroy(struct tw_wheel *w)
{
    if (!w)
        return TW_EINVAL;
    if (w->advancing)
        return TW_EBUSY;
    tw_walk_stop_(w);
    int64_t detached = tw_stage_detach_(w);
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

uint64_t tw_wheel_next_expiry(const struct tw_wheel *w)
{
    /* pending first: a walked slot stays marked while its walk's stage
     * holds slots below it (walk_holds), even once cancels emptied them,
     * and names a tick only a pending timer may justify */
    if (!w || !w->pending)
        return TW_NEVER;
    if (w->ready)
        return w->now;
    if (!w->levels)
        return TW_NEVER;
    return first_slot_tick(w);
}

/* wake is always ahead of now: tw_time_moved_ sets it past the time it
 * runs at, and runs whenever time reaches it. It counts while a walk runs,
 * or while one may still begin: a walk of level L begins only if the last
 * push came in now's block of level L + 1 (walks_open), so once time has
 * left the block of the highest level holding timers since the last push,
 * none can, and a wheel re-armed lazily once sleeps until its expiries
 * again. */
uint64_t tw_wheel_next_work(const struct tw_wheel *w)
{
    uint64_t next = tw_wheel_next_expiry(w);
    if (!w || !w->pending || !w->levels)
        return next;
    if (!walk_levels(w)) { /* the open bit alone: only a push opens that pass */
        unsigned bits = ((31u - (unsigned)__builtin_clz(w->levels)) + 1) * SLOT_BITS;
        uint64_t block = bits >= 64 ? 0 : w->now & ~((UINT64_C(1) << bits) - 1);
        if (w->pushed_at == UINT64_MAX || w->pushed_at < block)
            return next;
    }
    return w->wake < next ? w->wake : next;
}

size_t tw_wheel_pending(const struct tw_wheel *w)
{
    return w ? w->pending : 0;
}

uint64_t tw_wheel_moves(const struct tw_wheel *w)
{
    return w ? w->moves : 0;
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
