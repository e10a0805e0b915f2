/* SPDX-License-Identifier: MIT */
/** @file
 * twheel core: a hierarchical timing wheel over abstract ticks.
 *
 * No threads, no clock, no allocation. Time is an unsigned 64-bit tick count
 * owned by the wheel; the caller says what time it is (tw_wheel_advance) and
 * chooses what one tick means. Timers are intrusive: embed a struct tw_timer in
 * your own object (container_of gets you back to it), and the wheel links it
 * into a slot. Arming, cancelling, re-arming and advancing allocate nothing.
 *
 * Rules (tests/test_wheel_*.c pin each of them):
 *  - Exact: a timer with deadline D fires during the first advance whose new
 *    time is >= D, never before. Within one advance, timers fire tick by tick:
 *    one due at tick t never fires after one due at t+1. Timers due at the same
 *    tick fire in an unspecified order.
 *  - A deadline is always in the future: a timer armed with delay 0, or at an
 *    absolute deadline <= now, is due at now + 1 (the next tick).
 *  - Deadlines saturate at UINT64_MAX instead of wrapping round.
 *  - While a callback runs, tw_wheel_now() is the tick being fired, and the
 *    callback may arm, cancel or re-arm any timer of the wheel, itself
 *    included. A timer cancelled or re-armed by a callback obeys its new state
 *    at once: it does not fire again in this advance unless its new deadline
 *    is passed by it.
 *  - Re-arming to a later deadline is lazy (one store: the timer moves when
 *    its old slot comes due); re-arming earlier relocates it at once. Eager
 *    arms (TW_ARM_EAGER) relocate at once either way (see below).
 *
 * Lazy or eager re-arm (both exact; pick per call):
 *  - Lazy (tw_timer_arm without flags, the default): re-arming a pending timer
 *    to a later deadline is one store, and the advance that reaches the
 *    slot of its older deadline moves it. Lowest total cost: the choice for
 *    most programs (a heartbeat re-arming a 30 s timeout every 3 s moves it
 *    about twice a minute instead of 20 times).
 *  - Eager (the flag TW_ARM_EAGER, for timers and nodes): re-arming a
 *    pending timer, later or earlier, relocates
 *    it at once to the slot of its new deadline (one store if it is in that
 *    slot already), so no advance ever moves it for that re-arm. A relocating
 *    re-arm costs about twice a lazy one (it touches the timer's old
 *    neighbours), and the ticks are left with the fires: the choice for an
 *    event loop whose latency is the tick. (Lazy timers armed together stay
 *    in one slot however often they are re-armed, and the advance that
 *    reaches it moves them all at once.)
 *  - Lazy and eager arms may be mixed on one wheel and one timer, exact
 *    either way; an eager re-arm into the slot of a deadline stored lazily
 *    before may leave that lazy move in place. From an event loop's clock,
 *    arm eagerly at an absolute deadline: tw_timer_arm(w, t,
 *    tw_deadline_in(now, delay), 0, TW_ARM_EAGER) (tw_deadline_in saturates
 *    the sum: one that wrapped would be a past deadline, due at the next
 *    tick).
 *
 * Time and event loops (the rule):
 *  - The wheel's time moves only when you advance it. While your loop sleeps,
 *    the wheel's time is stale: a delay counted from tw_wheel_now(w) counts
 *    from the wheel's time, not from the present, so a timer armed that way
 *    after a long sleep without advancing first fires early. In a loop with
 *    a clock, read the clock once per turn and arm with
 *    tw_timer_arm_in(w, t, now, d) (or tw_timer_arm(w, t, tw_deadline_in(now,
 *    d), slack, flags)): the deadline is never earlier than now + d, whatever
 *    the wheel's time, and it is safe anywhere (in callbacks too). Periodic
 *    timers: tw_periodic_start_in(w, p, now, d, period).
 *  - Sleep with tw_wheel_timeout_from(w, now), the ticks from your now to the
 *    next expiry (0 if it is due or past). tw_wheel_timeout counts from the
 *    wheel's stale time and would push a re-armed loop timer forward forever.
 *  - Ticks from a clock: tick = floor(clock / tick length) for advance and for
 *    timeouts. A deadline of now + d ticks with a floored now can come up to
 *    one tick length less than d ticks after the real instant: when the delay
 *    is a minimum (an idle timeout), arm from the clock rounded up, or arm
 *    with d + 1. examples/ shows it for epoll, libuv and libevent.
 *
 * Getters (tw_wheel_now, _next_expiry, _timeout*, _pending, _moves,
 * tw_timer_/tw_node_pending and _deadline) accept NULL and then return the
 * value meaning "nothing": 0, false, or TW_NEVER for a tick (the rule of
 * every layer, see twheel/common.h). Calls that change state return
 * TW_EINVAL for NULL.
 *
 * Slack (opt-in, per arming: the slack argument of tw_timer_arm and
 * tw_node_arm, or TW_ARM_SLACK; exact arms pay nothing for it). A timer
 * armed with deadline D and slack S:
 *  - never fires before D, and never after D + S (saturating): it fires
 *    during the first advance whose new time is >= its planned tick P, some
 *    tick in [D, D + S], which tw_timer_deadline() reports. The wheel plans
 *    P on a slot boundary it fires from without being moved down a level,
 *    so timers whose windows hold the same boundary fire together;
 *  - re-armed with slack, stays where it is if P is inside the new window
 *    (nothing to do), else is relocated at once, never lazily, and
 *    tw_wheel_moves counts it; relocated while pending, it is planned late
 *    in its window, so that later re-arms find it inside longer (at most one
 *    move more if it does come due); re-armed exact (slack 0 without
 *    TW_ARM_SLACK) it is exact again; cancelling works as for any timer;
 *  - D <= now means now + 1, as for exact timers; S = 0 with TW_ARM_SLACK is
 *    exact (the timer fires at D), with the re-arm rule above;
 *  - a periodic timer with slack keeps its phase: its n-th fire happens in
 *    [first + n * period, first + n * period + S], the next deadline counting
 *    from the nominal one (the slack is capped at period - 1, so fires stay
 *    in order);
 *  - tw_wheel_next_expiry stays a lower bound on the next fire, so a poller
 *    may sleep until it.
 *
 * Thread safety: none. A wheel and its timers belong to one thread at a time;
 * tw_runner (twheel/runner.h) is the thread-safe service.
 *
 * Costs: arm, cancel, re-arm are O(1). Advancing costs O(1) per occupied slot
 * that comes due plus O(1) per timer fired or moved down a level; idle ticks
 * cost nothing. An exact timer that is not re-armed moves at most once per
 * level it starts above level 0 (11 levels), and with a delay below 64^k
 * ticks at most k times: once below 64 ticks, twice below 4096, three times
 * below 2^18 (a deadline just past a multiple of 2^18 starts at level 3
 * however near it is, then moves to levels 2, 1 and 0).
 */
#ifndef TWHEEL_WHEEL_H
#define TWHEEL_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "twheel/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Geometry: levels of 64 slots, enough levels to cover all 64 bits of time.
 * This is log2 of the slots per level. */
#define TW_WHEEL_SLOT_BITS 6
/** Slots per level: 64. */
#define TW_WHEEL_SLOTS (1u << TW_WHEEL_SLOT_BITS)
/** Levels: 11, enough for every 64-bit deadline. */
#define TW_WHEEL_LEVELS ((64 + TW_WHEEL_SLOT_BITS - 1) / TW_WHEEL_SLOT_BITS)
/** Each slot is kept as this many independent lists, filled in turn and walked
 * side by side when the slot comes due, so that that many cache misses are in
 * flight at once instead of one. */
#define TW_WHEEL_CHAINS 4

/* TW_NEVER, the tick value meaning "no deadline", is in twheel/common.h. */

struct tw_timer;
struct tw_wheel;

/** Called when a timer fires. The timer is idle again when this runs (unless
 * it is periodic, see tw_periodic), so the callback may re-arm it. */
typedef void tw_timer_fn(struct tw_timer *timer, void *arg);

/** What the wheel links into its slots: 24 bytes on LP64. Every timer holds
 * one. A pull-only user (see "bare nodes" below) may embed a bare node
 * instead of a whole timer and save the callback's 16 bytes. Treat every
 * field as private. */
struct tw_node {
    struct tw_node *next;   /**< private: next node in the same slot */
    struct tw_node **pprev; /**< private: link that points at us; NULL = idle */
    uint64_t deadline;      /**< private: use tw_timer_deadline()/tw_node_deadline() */
#ifdef TWHEEL_DEBUG
    struct tw_wheel *owner; /**< private, debug builds: the wheel it is pending on */
#endif
};

#ifdef TWHEEL_DEBUG
/** Debug builds (TWHEEL_DEBUG defined, as CMake does for
 * CMAKE_BUILD_TYPE=Debug or -DTWHEEL_DEBUG=ON, for the library and for every
 * program that uses it): a node remembers the wheel it is pending on, and
 * arming or cancelling it on another wheel returns TW_EINVAL instead of
 * corrupting both wheels. Nodes and timers are then 8 bytes larger, so the
 * init functions get other link names: a program compiled without
 * TWHEEL_DEBUG against a debug library (or the reverse) fails to link
 * instead of passing nodes of the wrong size. Release builds are unchanged. */
#define tw_wheel_init tw_wheel_init_debug
/** See tw_wheel_init_debug. */
#define tw_timer_init tw_timer_init_debug
/** See tw_wheel_init_debug. */
#define tw_node_init tw_node_init_debug
/** Bytes that debug builds add to every node and timer (8 on LP64). */
#define TW_NODE_DEBUG_BYTES sizeof(struct tw_wheel *)
#else
/** Bytes that debug builds add to every node and timer: none in this one. */
#define TW_NODE_DEBUG_BYTES 0
#endif

/** An intrusive timer: 40 bytes on LP64. Initialise it with tw_timer_init
 * before first use; treat every field as private. */
struct tw_timer {
    struct tw_node node; /**< private: the wheel's link */
    tw_timer_fn *fn;     /**< private: set by tw_timer_init */
    void *arg;           /**< private: set by tw_timer_init */
};

/** The wheel. Caller-owned (static, inside your struct, or malloc'ed by you);
 * about 31 KB, of which only the slots in use are touched. Every field is
 * private. */
struct tw_wheel {
    /** private: the slots, each kept as TW_WHEEL_CHAINS lists */
    struct tw_node *slots[TW_WHEEL_LEVELS][TW_WHEEL_SLOTS][TW_WHEEL_CHAINS];
    /** private: level 1's sub-slot lists, sub[s][q] for the timers planned
     * with slack on tick 16 * q of level-1 slot s */
    struct tw_node *sub[TW_WHEEL_SLOTS][TW_WHEEL_CHAINS][TW_WHEEL_CHAINS];
    uint64_t occupied[TW_WHEEL_LEVELS]; /**< bit s set <=> slots[level][s] non-empty */
    struct tw_node *ready;              /**< due at `now`, not fired yet */
    uint64_t now;                       /**< current tick */
    uint64_t target;                    /**< tick the running advance goes to */
    uint64_t moves;                     /**< timers moved down a level, ever */
    size_t pending;                     /**< armed timers, ready list included */
    uint32_t levels;                    /**< bit l set <=> occupied[l] != 0 */
    uint32_t chain;                     /**< next chain to push onto, round robin */
    int advancing;                      /**< inside tw_wheel_advance */
    int bare;                           /**< a bare node was armed since init: pull only */
    uint64_t subbed; /**< private: bit s set => level-1 slot s may have sub-lists in use */
};

/* ---- wheel ------------------------------------------------------------- */

/** Make an empty wheel whose time is `now`. Returns 0, or TW_EINVAL if w is
 * NULL. O(size of the wheel). */
TW_API int tw_wheel_init(struct tw_wheel *w, uint64_t now);

/** Detach every pending timer (each becomes idle; no callback runs) and leave
 * the wheel empty. The timers' memory stays the caller's. Returns the number
 * of timers detached, TW_EINVAL for NULL, or TW_EBUSY when called from inside
 * a callback of this wheel (nothing is changed then). O(pending + slots). */
TW_API int64_t tw_wheel_destroy(struct tw_wheel *w);

/** Advance time to `now`, firing every timer whose deadline is <= now, tick by
 * tick in deadline order. Returns the number of callbacks run (>= 0), or
 * TW_EINVAL for NULL or a pull-only wheel (see tw_node_arm), or TW_EBUSY when
 * called from inside one of this wheel's callbacks. A `now` earlier than the
 * wheel's time does not move time back and rescans nothing: it only fires
 * timers that tw_wheel_expire_next left due at the current tick (usually
 * none, so it returns 0). Idle ticks cost nothing. */
TW_API int64_t tw_wheel_advance(struct tw_wheel *w, uint64_t now);

/** Pull interface, for callers that prefer to run expired work themselves:
 * remove and return the next timer due by `now` (earliest deadline first; the
 * timer is idle and its callback is NOT called, periodic ones included), or
 * NULL when none is left, in which case the wheel's time is `now` (or stays
 * where it was if `now` is earlier: time never goes back). Between
 * calls the caller may arm, cancel or re-arm anything; the wheel's time is
 * then the returned timer's deadline. Returns NULL for a NULL wheel, a
 * pull-only wheel (use tw_wheel_expire_next_node there), or while
 * tw_wheel_advance is running. O(1) amortised per timer, as advance. */
TW_API struct tw_timer *tw_wheel_expire_next(struct tw_wheel *w, uint64_t now);

/** The wheel's current tick (0 for NULL). Static inline, so that arming
 * from the wheel's time, tw_timer_arm_in(w, t, tw_wheel_now(w), delay),
 * costs no call more than arming from a clock. O(1). */
static inline uint64_t tw_wheel_now(const struct tw_wheel *w)
{
    return w ? w->now : 0;
}

/** The earliest tick at which the wheel has work: no timer is due before it,
 * so a poller may sleep until then. It is never later than the earliest
 * deadline, and equal to it unless a later re-arm or a far slot makes the
 * wheel stop early to move timers (advancing to it then fires nothing).
 * TW_NEVER when no timer is pending. (TW_NEVER is also UINT64_MAX, the last
 * tick, where saturated deadlines fall: tw_wheel_pending tells the two apart.)
 * O(1). */
TW_API uint64_t tw_wheel_next_expiry(const struct tw_wheel *w);

/** Ticks from the wheel's time until tw_wheel_next_expiry: 0 if something is
 * due now, TW_NEVER if nothing is pending; with timers pending always
 * next_expiry - now, the last tick included (time 2^64-2 and a timer due at
 * 2^64-1 give 1). In an event loop use tw_wheel_timeout_from: the wheel's
 * time is stale while the loop sleeps. O(1). */
TW_API uint64_t tw_wheel_timeout(const struct tw_wheel *w);

/** The poll timeout of an event loop: ticks from the caller's `now` until
 * tw_wheel_next_expiry, 0 if that is at or before `now` (advance, then ask
 * again), TW_NEVER if nothing is pending or w is NULL. Measured from the
 * caller's clock, not from the wheel's last advance, so a loop that re-aims
 * its poll or loop timer with it never pushes an expiry forward. O(1). */
TW_API uint64_t tw_wheel_timeout_from(const struct tw_wheel *w, uint64_t now);

/** Number of armed timers. O(1). */
TW_API size_t tw_wheel_pending(const struct tw_wheel *w);

/** How many times timers have been moved from one slot to another by
 * advancing (cascades and lazy re-arms) or by a re-arm with slack (or
 * TW_ARM_SLACK) that relocated a pending timer, whatever the slack (0 included),
 * since init (an eager re-arm counts none and leaves none to an advance, but
 * for the move a lazy re-arm before it may have left in place: see "Lazy or
 * eager re-arm"). For tuning. O(1). */
TW_API uint64_t tw_wheel_moves(const struct tw_wheel *w);

/* ---- timers ------------------------------------------------------------ */

/** Prepare a timer: idle, calling fn(timer, arg) when it fires. fn may not be
 * NULL. Returns 0 or TW_EINVAL. Must not be called on a pending timer. */
TW_API int tw_timer_init(struct tw_timer *t, tw_timer_fn *fn, void *arg);

/** Disarm t. Returns 1 if it was pending (its callback will not run), 0 if it
 * was idle (no-op), TW_EINVAL for NULL. O(1).
 *
 * A pending timer or node belongs to the wheel it was armed on until it fires
 * or is cancelled: arming or cancelling it with another wheel is the caller's
 * error (release builds corrupt both wheels' counts; debug builds, see
 * TWHEEL_DEBUG, return TW_EINVAL and change nothing). */
TW_API int tw_timer_cancel(struct tw_wheel *w, struct tw_timer *t);

/** Whether t is armed. O(1). */
TW_API bool tw_timer_pending(const struct tw_timer *t);

/** t's deadline if pending, TW_NEVER if idle. O(1). */
TW_API uint64_t tw_timer_deadline(const struct tw_timer *t);

/* ---- arming ------------------------------------------------------------- */
/** @name Arming: one call for timers, one for nodes
 * tw_timer_arm(w, t, deadline, slack, flags) and tw_node_arm are every arm:
 * first arm, re-arm, exact or with slack, lazy or eager, and the store-only
 * arm of a timer known idle. `deadline` is an absolute tick (<= the wheel's
 * time means the next tick); arm from a clock with tw_timer_arm_in(w, t, now,
 * delay). Both are static inline: with constant `slack` and `flags`, as in
 * almost every call, the choice below folds away at compile time and the
 * call costs what one out-of-line worker (tw_timer_arm_lazy_ and the others
 * below) costs, so the hot paths pay nothing for the flags.
 * @{ */

/** Flag of tw_timer_arm / tw_node_arm: re-arming a pending timer relocates it
 * at once to the slot of its new deadline, later or earlier, instead of only
 * storing a later deadline, so that no advance moves it for this re-arm (see
 * "Lazy or eager re-arm" above). One store if it is in that slot already.
 * One exception: if a lazy re-arm left t in the slot of an older deadline
 * and the new one falls in the slot of the deadline that lazy re-arm
 * stored, it is one store too, and t stays where the lazy re-arm left it
 * (moved once when that slot comes due; still exact, and
 * tw_wheel_next_expiry may return that slot's earlier tick meanwhile). Only
 * an idle timer is checked for being initialised (a pending one was, when it
 * was armed). Ignored with slack or TW_ARM_IDLE: a slack re-arm relocates at
 * once anyway, and an idle timer has nothing to relocate. */
#define TW_ARM_EAGER 0x1u
/** Flag of tw_timer_arm / tw_node_arm: the caller knows the timer is idle
 * (initialised and never armed, or fired, or cancelled since). The arm then
 * only stores into it, skipping the load that tells an arm from a re-arm, so
 * arming a timer whose memory is not in the cache does not wait for it.
 * Contract: the timer is initialised and not pending. Release builds do not
 * check it (a pending timer would be linked twice and corrupt the wheel);
 * debug builds (TWHEEL_DEBUG) return TW_EBUSY for a pending one and
 * TW_EINVAL for an uninitialised one, changing nothing. Release builds check
 * the pointers only (a timer's callback is read by debug builds). */
#define TW_ARM_IDLE 0x2u
/** Flag of tw_timer_arm / tw_node_arm: arm by the slack rules (planned
 * tick, re-arm relocated at once and counted by tw_wheel_moves) even when
 * `slack` is 0. A nonzero slack implies it; with slack 0 and without it
 * the arm is exact, lazy or eager. */
#define TW_ARM_SLACK 0x4u
/** Every flag tw_timer_arm and tw_node_arm know; other bits give TW_EINVAL. */
#define TW_ARM_FLAGS (TW_ARM_EAGER | TW_ARM_IDLE | TW_ARM_SLACK)

/** Worker of tw_timer_arm: exact, lazy (no flag, slack 0). Call tw_timer_arm. */
TW_API int tw_timer_arm_lazy_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline);
/** Worker of tw_timer_arm: exact, eager (TW_ARM_EAGER). Call tw_timer_arm. */
TW_API int tw_timer_arm_eager_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline);
/** Worker of tw_timer_arm: with slack (or TW_ARM_SLACK). Call tw_timer_arm. */
TW_API int tw_timer_arm_slack_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline,
                               uint64_t slack);
/** Worker of tw_timer_arm: exact, known idle (TW_ARM_IDLE). Call tw_timer_arm. */
TW_API int tw_timer_arm_idle_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline);
/** Worker of tw_timer_arm: with slack, known idle (TW_ARM_IDLE and slack or
 * TW_ARM_SLACK). Call tw_timer_arm. */
TW_API int tw_timer_arm_idle_slack_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline,
                                    uint64_t slack);

/** Arm t to fire at the absolute tick `deadline` (<= the wheel's time means
 * the next tick), at some tick in [deadline, deadline + slack] (the end
 * saturating at UINT64_MAX; slack 0 is exact), with `flags` a set of
 * TW_ARM_EAGER, TW_ARM_IDLE and TW_ARM_SLACK (0 for the default: lazy, and
 * any state).
 *
 * Arming a pending timer re-arms it. Exact (slack 0, no TW_ARM_SLACK): lazy
 * when the new deadline is not earlier (one store; the advance that reaches
 * the older deadline's slot moves it), immediate otherwise; with
 * TW_ARM_EAGER, relocated at once either way. With slack: nothing to do if
 * its planned tick is inside the new window, else it is relocated at once
 * (never lazily), late in the window, and tw_wheel_moves counts it; the
 * slack rules are at the top of this file. With TW_ARM_IDLE, the caller
 * promises t is idle and the arm only stores into t (see TW_ARM_IDLE).
 *
 * Returns 0, TW_EINVAL (NULL argument, unknown flag, or uninitialised timer:
 * the lazy arm checks it always; the eager and slack arms of a pending timer
 * skip it, since it was checked when the timer was armed), or TW_ERANGE when
 * the wheel's time is already UINT64_MAX (no later tick exists; t is left
 * unchanged). Callable from callbacks. O(1). */
static inline int tw_timer_arm(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline,
                               uint64_t slack, unsigned flags)
{
    if (flags & ~TW_ARM_FLAGS)
        return TW_EINVAL;
    if (slack || (flags & TW_ARM_SLACK))
        return (flags & TW_ARM_IDLE) ? tw_timer_arm_idle_slack_(w, t, deadline, slack)
                                     : tw_timer_arm_slack_(w, t, deadline, slack);
    if (flags & TW_ARM_IDLE)
        return tw_timer_arm_idle_(w, t, deadline);
    if (flags & TW_ARM_EAGER)
        return tw_timer_arm_eager_(w, t, deadline);
    return tw_timer_arm_lazy_(w, t, deadline);
}

/** The deadline `delay` ticks after `now`, saturating at UINT64_MAX instead
 * of wrapping round (a sum that wrapped would be a past deadline, due at the
 * next tick): tw_timer_arm(w, t, tw_deadline_in(now, delay), slack, flags)
 * arms from a clock with any slack and flags, and now = tw_wheel_now(w)
 * counts from the wheel's time. */
static inline uint64_t tw_deadline_in(uint64_t now, uint64_t delay)
{
    return now + delay < now ? UINT64_MAX : now + delay;
}

/** Arm (or re-arm) t to fire `delay` ticks after the caller's `now`: exact
 * and lazy, at now + delay (saturating), or the wheel's next tick if that is
 * already past. The deadline is never earlier than now + delay, even on a
 * wheel not advanced for a while: the way to arm from an event loop (see
 * "Time and event loops" above). With now = tw_wheel_now(w) it counts from
 * the wheel's time. The results of tw_timer_arm. O(1). */
static inline int tw_timer_arm_in(struct tw_wheel *w, struct tw_timer *t, uint64_t now,
                                  uint64_t delay)
{
    return tw_timer_arm(w, t, tw_deadline_in(now, delay), 0, 0);
}
/** @} */

/* ---- slack ------------------------------------------------------------- */
/* Timers that may fire late, by at most `slack` ticks (rules at the top of
 * this file). The wheel uses the freedom to plan each timer on a slot
 * boundary it can fire from without moving down a level, and to fire timers
 * together; exact timers and these may share a wheel. */

/** A slack of delay / 2^shift: tw_slack_fraction(delay, 3) is 1/8 of the
 * delay, the lateness Linux's timer wheel allows every timer. A shift of 64
 * or more gives 0 (exact). */
static inline uint64_t tw_slack_fraction(uint64_t delay, unsigned shift)
{
    return shift >= 64 ? 0 : delay >> shift;
}

/** Recover the struct that embeds a timer: container_of. */
#define tw_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- bare nodes (pull only) -------------------------------------------- */
/** @name Bare nodes (pull only)
 * For users who never let the wheel call back: they embed a struct tw_node
 * (24 bytes) instead of a struct tw_timer (40) and collect due nodes with
 * tw_wheel_expire_next_node, as twheel's keyed layer and cache do. Nodes obey
 * every rule of timers (exactness, lazy later re-arm, saturation, immediate
 * cancel). Once a bare node has been armed on a wheel, the wheel is pull-only
 * until tw_wheel_init or tw_wheel_destroy: tw_wheel_advance returns TW_EINVAL
 * and tw_wheel_expire_next NULL there, since a bare node has no callback.
 * Whole timers may share a pull-only wheel: tw_wheel_expire_next_node hands
 * out their nodes too (tw_container_of(n, struct tw_timer, node)).
 * @{ */

/** Prepare a node: idle. Returns 0 or TW_EINVAL. Not on a pending node. */
TW_API int tw_node_init(struct tw_node *n);

/** Worker of tw_node_arm: exact, lazy. Call tw_node_arm. */
TW_API int tw_node_arm_lazy_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline);
/** Worker of tw_node_arm: exact, eager (TW_ARM_EAGER). Call tw_node_arm. */
TW_API int tw_node_arm_eager_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline);
/** Worker of tw_node_arm: with slack (or TW_ARM_SLACK). Call tw_node_arm. */
TW_API int tw_node_arm_slack_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline,
                              uint64_t slack);
/** Worker of tw_node_arm: exact, known idle (TW_ARM_IDLE). Call tw_node_arm. */
TW_API int tw_node_arm_idle_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline);
/** Worker of tw_node_arm: with slack, known idle. Call tw_node_arm. */
TW_API int tw_node_arm_idle_slack_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline,
                                   uint64_t slack);

/** As tw_timer_arm for a node, with the same flags and results, and
 * TW_EBUSY from inside a callback of tw_wheel_advance (that advance would
 * take the node for a timer); on success the wheel becomes pull-only. With
 * TW_ARM_IDLE only stores are made into n (debug builds return TW_EBUSY for
 * a pending n). O(1). */
static inline int tw_node_arm(struct tw_wheel *w, struct tw_node *n, uint64_t deadline,
                              uint64_t slack, unsigned flags)
{
    if (flags & ~TW_ARM_FLAGS)
        return TW_EINVAL;
    if (slack || (flags & TW_ARM_SLACK))
        return (flags & TW_ARM_IDLE) ? tw_node_arm_idle_slack_(w, n, deadline, slack)
                                     : tw_node_arm_slack_(w, n, deadline, slack);
    if (flags & TW_ARM_IDLE)
        return tw_node_arm_idle_(w, n, deadline);
    if (flags & TW_ARM_EAGER)
        return tw_node_arm_eager_(w, n, deadline);
    return tw_node_arm_lazy_(w, n, deadline);
}

/** As tw_timer_arm_in, for a node: exact and lazy, `delay` ticks after the
 * caller's `now` (saturating; the wheel's next tick if already past). The
 * results of tw_node_arm. O(1). */
static inline int tw_node_arm_in(struct tw_wheel *w, struct tw_node *n, uint64_t now,
                                 uint64_t delay)
{
    return tw_node_arm(w, n, tw_deadline_in(now, delay), 0, 0);
}

/** As tw_timer_cancel: 1 if it was pending, 0 if idle, TW_EINVAL. O(1). */
TW_API int tw_node_cancel(struct tw_wheel *w, struct tw_node *n);

/** Whether n is armed; its deadline if pending, TW_NEVER if idle. O(1). */
TW_API bool tw_node_pending(const struct tw_node *n);
/** n's deadline if pending, TW_NEVER if idle. O(1). */
TW_API uint64_t tw_node_deadline(const struct tw_node *n);

/** As tw_wheel_expire_next, handing out nodes (bare ones, and those of whole
 * timers). Works on every wheel, pull-only or not. */
TW_API struct tw_node *tw_wheel_expire_next_node(struct tw_wheel *w, uint64_t now);
/** @} */

/* ---- periodic timers --------------------------------------------------- */

/** What a periodic timer does when an advance passes several of its periods. */
enum tw_missed_policy {
    /** Fire once for every period, each at its own tick (deadline order is
     * kept with other timers). The default. */
    TW_MISSED_CATCH_UP = 0,
    /** Fire once, at the first missed deadline; the next deadline is the first
     * one of the original phase after the advance's target. */
    TW_MISSED_SKIP = 1,
};

struct tw_periodic;
/** Called at each deadline of a periodic timer, with the arg given to
 * tw_periodic_init. The timer is already re-armed for its next period when
 * this runs (unless time is at its end, UINT64_MAX); the callback may stop or
 * restart it. */
typedef void tw_periodic_fn(struct tw_periodic *p, void *arg);

/** A periodic timer re-arms from its previous deadline, so it never drifts:
 * its n-th deadline is first + n * period exactly (saturating). It is a core
 * timer plus 56 bytes on LP64; treat every field as private. */
struct tw_periodic {
    struct tw_timer timer;        /**< private: the core timer it re-arms */
    struct tw_wheel *wheel;       /**< private: the wheel it runs on */
    uint64_t period;              /**< private: ticks between deadlines */
    uint64_t slack;               /**< private: < period; 0 = exact */
    uint64_t due;                 /**< private: nominal deadline of the pending fire */
    tw_periodic_fn *fn;           /**< private: set by tw_periodic_init */
    void *arg;                    /**< private: set by tw_periodic_init */
    enum tw_missed_policy policy; /**< private: set by tw_periodic_init */
};

/** Prepare p (idle). fn may not be NULL; policy must be a tw_missed_policy.
 * Returns 0 or TW_EINVAL. */
TW_API int tw_periodic_init(struct tw_periodic *p, tw_periodic_fn *fn, void *arg,
                            enum tw_missed_policy policy);

/** Start p on w: first fire at the absolute tick `first` (<= the wheel's
 * time means the next tick), then every `period` ticks. With slack, the n-th
 * fire happens at some tick in [first + n * period, first + n * period +
 * slack], and the phase is kept (each deadline counts from the nominal one
 * before it, not from the tick it fired at); a slack >= period is taken as
 * period - 1; 0 is exact. Restarts p if it was running. The callback may
 * stop or restart p. Returns 0, TW_EINVAL (NULL, period 0), or TW_ERANGE
 * (the wheel's time is UINT64_MAX). O(1). */
TW_API int tw_periodic_start(struct tw_wheel *w, struct tw_periodic *p, uint64_t first,
                             uint64_t period, uint64_t slack);

/** Start p exact, first firing `delay` ticks after the caller's `now`
 * (saturating; the wheel's next tick if already past), then every `period`
 * ticks: the form for an event loop, whose wheel's time is stale while it
 * sleeps. With now = tw_wheel_now(w) it counts from the wheel's time. The
 * results of tw_periodic_start. O(1). */
static inline int tw_periodic_start_in(struct tw_wheel *w, struct tw_periodic *p, uint64_t now,
                                       uint64_t delay, uint64_t period)
{
    return tw_periodic_start(w, p, tw_deadline_in(now, delay), period, 0);
}

/** Stop p. Returns 1 if it was running, 0 if not, TW_EINVAL for NULL. O(1). */
TW_API int tw_periodic_stop(struct tw_periodic *p);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_WHEEL_H */
