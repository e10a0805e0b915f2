/* SPDX-License-Identifier: MIT */
/** @file
 * twheel core: a hierarchical timing wheel over abstract ticks.
 *
 * No threads, no clock, no allocation. Time is an unsigned 64-bit tick count
 * owned by the wheel; the caller says what time it is (tw_wheel_advance) and
 * chooses what one tick means. Timers are intrusive: embed a struct tw_timer
 * (or, pull only, a bare struct tw_node) in your own object and get back to it
 * with tw_container_of. One call per operation serves both: tw_arm,
 * tw_arm_in, tw_cancel, tw_pending, tw_deadline.
 *
 * Rules (tests/test_wheel_*.c pin each of them):
 *  - Exact: a timer with deadline D fires during the first advance whose new
 *    time is >= D, never before. Within one advance, timers fire tick by tick;
 *    timers due at the same tick fire in an unspecified order.
 *  - A deadline is always in the future: one <= the wheel's time means the
 *    next tick. Deadlines saturate at UINT64_MAX instead of wrapping round.
 *  - While a callback runs, tw_wheel_now() is the tick being fired, and the
 *    callback may arm, cancel or re-arm any timer of the wheel, itself
 *    included; a timer it cancels or re-arms obeys its new state at once.
 *  - Re-arm, lazy or eager (both exact; pick per call): by default a re-arm
 *    to a later deadline costs one store into the timer, and the timer is
 *    moved later, by the walk ahead of the slot it waits in, before that
 *    slot comes due, a bounded number at a time ("Moves per advance"
 *    below; the cheapest in total: a heartbeat re-arming a 30 s timeout
 *    every 3 s moves it about twice a minute). Only a timer whose slot is
 *    that near (due within its walk's TW_WHEEL_WALK_TICKS, the next slot
 *    at level 2, or within 64 ticks) is relocated at once. With
 *    TW_ARM_EAGER it is relocated at once, about twice the cost, and no
 *    advance or re-arm moves it for that re-arm. tw_wheel_moves counts the
 *    moves.
 *  - Slack (opt-in per arm: the `slack` argument, or TW_ARM_SLACK): a timer
 *    armed at D with slack S fires at some tick P in [D, D + S] (saturating),
 *    never outside it; tw_deadline reports P, and timers with overlapping
 *    windows tend to fire together. A re-arm with slack leaves it alone if P
 *    is inside the new window, else relocates it at once (tw_wheel_moves
 *    counts it); a re-arm without slack makes it exact again.
 *    tw_wheel_next_expiry stays a lower bound on the next fire.
 *  - Getters accept NULL and return the value meaning "nothing" (0, false,
 *    TW_NEVER); calls that change state return TW_EINVAL for NULL.
 *  - A pending timer or node belongs to the wheel it was armed on until it
 *    fires or is cancelled: arming or cancelling it with another wheel is
 *    the caller's error (debug builds, TWHEEL_DEBUG, return TW_EINVAL).
 *
 * Time and event loops: the wheel's time moves only when you advance it, so
 * it is stale while your loop sleeps. Read your clock once per turn, arm with
 * tw_arm_in(w, t, now, delay) and sleep tw_wheel_timeout(w, now): a delay
 * counted from tw_wheel_now(w) after a long sleep would end early. Ticks from
 * a clock: tick = floor(clock / tick length) for advance and timeouts; arm a
 * minimum delay (an idle timeout) from the clock rounded up. examples/ shows
 * it for epoll, libuv and libevent.
 *
 * Threads: none. A wheel and its timers belong to one thread at a time;
 * tw_runner (twheel/runner.h) is the thread-safe service.
 *
 * Costs: arm, re-arm and cancel are O(1). Advancing costs O(1) per occupied
 * slot that comes due plus O(1) per timer fired, moved or walked past;
 * idle ticks cost nothing. An exact timer not re-armed moves at most k
 * times for a delay below 64^k ticks (once below 64, twice below 4096).
 *
 * Moves per advance: timers that lazy re-arms pushed back are moved by a
 * walk ahead of the slot they wait in, during the TW_WHEEL_WALK_TICKS
 * ticks before it comes due (64 for a level-1 slot, 1024 for a level-2
 * slot, 4096 above), at a pace of the pending timers over those ticks. A
 * level-2 slot may be walked in a first pass before that: a lazy re-arm
 * in the first half of the slot before it opens one, which runs at the
 * pace of the pending timers over the ticks left until the second pass
 * (at least 1024), so that re-arms of many timers at once (a sweep of
 * every key) find a walk to take steps of. A walk of a slot above level 1
 * takes the slot's other
 * timers down a level as it goes, where the level below has room (always
 * above level 2; at level 2, into the level-1 slots already past; the
 * second pass walks those the first put back). The walks move on in two
 * ways: while a walk has timers left, one in eight lazy re-arms that push
 * a timer back takes up to TW_WHEEL_REARM_MOVES_MAX (64) of them off it
 * (not from inside a callback of tw_wheel_advance), and the advances take
 * what the pace asks beyond what those steps took. So one advance that
 * takes time k ticks forward, with at most n timers pending, moves at most
 * tw_wheel_lazy_moves_max(n, k) timers for walks, about (k + 8) (n / 51 +
 * 11), and takes at most that many off the walked slots; besides them it
 * moves only timers going down a level toward their own deadlines (at
 * most once per level each, as above: what an eager re-arm or an exact arm
 * costs too). Timers armed together and pushed back together (a heartbeat
 * after a restart) are not all moved in one advance. Each advance that takes time forward also does O(1) work
 * when a walk's window opens or its pace is due (once every 64 ticks, more
 * often while a walk runs).
 *
 * What the bound costs: no extra moves (a timer pushed back moves once per
 * slot its deadline outruns, about 60 / timeout times a minute: twice for
 * a 30 s timeout, walked or not), and a heartbeat's own timer stays one
 * store. A walked slot's timers are each read once by its walk; only a
 * level-1 walk's, and a level-2 walk's due above now's level-1 slot, go
 * back into their slot and are read again, by the second pass or when it
 * comes due (the cost of a level-1 walk is its 64-tick slot's). With 10^6 heartbeat timers each
 * move is a cache miss (about one random read). Where re-arms are frequent
 * (a heartbeat workload re-arms far more often than its timers move) their
 * steps take nearly all the moves, so the ticks are left with the fires
 * and the cascades, as with an eager re-arm, and one re-arm in eight, while
 * a walk runs, costs up to 64 moves (a few microseconds at 10^6 timers);
 * where they are rare, the advances make the moves at the walks' pace.
 * TW_ARM_EAGER relocates the timer in the re-arm itself (about 1.7x the
 * lazy heartbeat) and moves no other timer.
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

/** log2 of the slots per level. */
#define TW_WHEEL_SLOT_BITS 6
/** Slots per level: 64. */
#define TW_WHEEL_SLOTS (1u << TW_WHEEL_SLOT_BITS)
/** Levels: 11, enough for every 64-bit deadline. */
#define TW_WHEEL_LEVELS ((64 + TW_WHEEL_SLOT_BITS - 1) / TW_WHEEL_SLOT_BITS)
/** Lists per slot (src/core/wheel.c says why). */
#define TW_WHEEL_CHAINS 4

struct tw_timer;
struct tw_wheel;

/** Called when a timer fires. The timer is idle again when this runs (unless
 * it is periodic, see tw_periodic), so the callback may re-arm it. */
typedef void tw_timer_fn(struct tw_timer *timer, void *arg);

/** What the wheel links: 24 bytes on LP64. Every timer holds one; a pull-only
 * user may embed a bare node instead (see "Bare nodes"). Initialise it with
 * tw_node_init; every field is private. */
struct tw_node {
    struct tw_node *next;   /**< private */
    struct tw_node **pprev; /**< private: NULL = idle */
    uint64_t deadline;      /**< private: read it with tw_deadline */
#ifdef TWHEEL_DEBUG
    struct tw_wheel *owner; /**< private, debug builds: the wheel it is pending on */
#endif
};

#ifdef TWHEEL_DEBUG
/** Debug builds (TWHEEL_DEBUG, set by CMake for CMAKE_BUILD_TYPE=Debug or
 * -DTWHEEL_DEBUG=ON, for the library and every program using it): a node
 * remembers its wheel, so arming or cancelling it on another wheel returns
 * TW_EINVAL. Nodes are 8 bytes larger, so the init calls get other link
 * names: mixing debug and release objects fails to link. */
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

/** An intrusive timer: 40 bytes on LP64. Initialise it with tw_timer_init;
 * every field is private. */
struct tw_timer {
    struct tw_node node; /**< private: the wheel's link */
    tw_timer_fn *fn;     /**< private */
    void *arg;           /**< private */
};

/** The wheel: caller-owned (static, in your struct, or malloc'ed), about
 * 31 KB, of which only the slots in use are touched. Every field is private
 * (src/core/wheel.c describes them). */
struct tw_wheel {
    /** private */
    struct tw_node *slots[TW_WHEEL_LEVELS][TW_WHEEL_SLOTS][TW_WHEEL_CHAINS];
    /** private */
    struct tw_node *sub[TW_WHEEL_SLOTS][TW_WHEEL_CHAINS][TW_WHEEL_CHAINS];
    /** private: the chains the walks ahead take from their slots, by level from 1 */
    struct tw_node *walk[TW_WHEEL_LEVELS - 1][TW_WHEEL_CHAINS];
    uint64_t occupied[TW_WHEEL_LEVELS];  /**< private */
    uint64_t near[64];                   /**< private */
    uint64_t near_at[TW_WHEEL_LEVELS];   /**< private */
    uint64_t walk_rate[TW_WHEEL_LEVELS]; /**< private */
    uint64_t walk_time[TW_WHEEL_LEVELS]; /**< private */
    uint64_t walked[TW_WHEEL_LEVELS];    /**< private */
    uint64_t walk_ahead[TW_WHEEL_LEVELS]; /**< private */
    uint64_t near_top;                   /**< private */
    uint64_t pushed_at;                  /**< private */
    uint64_t near_until;                 /**< private */
    uint64_t upper_until;                /**< private */
    uint64_t wake;                       /**< private */
    uint32_t walking;                    /**< private */
    uint32_t pushes;                     /**< private */
    uint8_t walk_slot[TW_WHEEL_LEVELS];  /**< private */
    uint8_t second_pass;                 /**< private */
    struct tw_node *ready;              /**< private */
    uint64_t now;                       /**< private: read it with tw_wheel_now */
    uint64_t target;                    /**< private */
    uint64_t moves;                     /**< private */
    size_t pending;                     /**< private */
    uint32_t levels;                    /**< private */
    uint32_t chain;                     /**< private */
    int advancing;                      /**< private */
    int bare;                           /**< private */
    uint64_t subbed;                    /**< private */
    uint64_t staged;                    /**< private */
    const uint64_t *level_bits;         /**< private */
    uint8_t stage_level;                /**< private */
};

/* ---- wheel ------------------------------------------------------------- */

/** Make an empty wheel whose time is `now`. Returns 0, or TW_EINVAL for NULL.
 * O(size of the wheel). */
TW_API int tw_wheel_init(struct tw_wheel *w, uint64_t now);

/** Detach every pending timer (each becomes idle; no callback runs) and leave
 * the wheel empty; the timers' memory stays the caller's. Returns the number
 * detached, TW_EINVAL for NULL, or TW_EBUSY from inside one of this wheel's
 * callbacks (nothing changed). O(pending + slots). */
TW_API int64_t tw_wheel_destroy(struct tw_wheel *w);

/** Advance time to `now`, running the callback of every timer due by then,
 * tick by tick. Returns the number of callbacks run, TW_EINVAL for NULL or a
 * pull-only wheel (see "Bare nodes"), or TW_EBUSY from inside one of this
 * wheel's callbacks. A `now` before the wheel's time does not move time back:
 * it only fires what tw_wheel_expire_next left due (usually nothing). */
TW_API int64_t tw_wheel_advance(struct tw_wheel *w, uint64_t now);

/** Pull instead of callbacks: remove and return the next timer due by `now`
 * (earliest first; it is idle and its callback is not run, periodic ones
 * included), or NULL when none is left, the wheel's time then being `now`
 * (never going back). Between calls the caller may arm, cancel or re-arm
 * anything. NULL also for a NULL or pull-only wheel (use
 * tw_wheel_expire_next_node there) and inside tw_wheel_advance. O(1)
 * amortised per timer. */
TW_API struct tw_timer *tw_wheel_expire_next(struct tw_wheel *w, uint64_t now);

/** The wheel's time (0 for NULL). Inline: arming from it costs no call. */
static inline uint64_t tw_wheel_now(const struct tw_wheel *w)
{
    return w ? w->now : 0;
}

/** The earliest tick at which the wheel has work: nothing is due before it,
 * so a poller may sleep until then (advancing to it may fire nothing, when
 * the wheel only moves timers there). TW_NEVER when nothing is pending (a
 * deadline saturated at UINT64_MAX gives the same value: tw_wheel_pending
 * tells them apart). O(1). */
TW_API uint64_t tw_wheel_next_expiry(const struct tw_wheel *w);

/** The earliest tick at which advancing has work: tw_wheel_next_expiry, or
 * earlier once lazy re-arms have pushed timers back, the next tick at which
 * a walk ahead moves on at its pace or may begin (at most 64 ticks away
 * while a walk runs or may still begin: until time leaves, after the last
 * push, the block of the level above the highest that holds timers). A
 * poller that re-arms lazily and sleeps until this rather than until the
 * next expiry gets the walks' moves spread over its wake-ups; sleeping
 * until the next expiry, it leaves them to the advance that reaches the
 * walked slot, all at once (tw_runner's tick thread sleeps until this).
 * TW_NEVER when nothing is pending. O(1). */
TW_API uint64_t tw_wheel_next_work(const struct tw_wheel *w);

/** The poll timeout of an event loop: ticks from the caller's `now` to
 * tw_wheel_next_expiry, 0 if that is at or before `now` (advance, then ask
 * again), TW_NEVER if nothing is pending or w is NULL. Counted from your
 * clock, not the wheel's stale time, so re-aiming a loop timer with it never
 * pushes an expiry forward; tw_wheel_timeout(w, tw_wheel_now(w)) counts from
 * the wheel's time. O(1). */
TW_API uint64_t tw_wheel_timeout(const struct tw_wheel *w, uint64_t now);

/** Number of armed timers and nodes. O(1). */
TW_API size_t tw_wheel_pending(const struct tw_wheel *w);

/** How many times timers were moved since init: by advances (a timer moving
 * down a level, a timer a lazy re-arm pushed back moved for its deadline,
 * by the walk ahead or when its slot came due) and by re-arms with slack
 * that relocated a pending timer. For tuning. O(1). */
TW_API uint64_t tw_wheel_moves(const struct tw_wheel *w);

/** The ticks before a slot comes due during which its walk ahead moves the
 * timers lazy re-arms pushed back past it ("Moves per advance" above): 64
 * for a level-1 slot, 1024 for a level-2 slot (its second pass), 4096 for
 * a slot of any higher level. */
#define TW_WHEEL_WALK_TICKS(level)                                                          \
    ((level) < 2 ? TW_WHEEL_SLOTS : (level) == 2 ? 16 * TW_WHEEL_SLOTS : TW_WHEEL_SLOTS * TW_WHEEL_SLOTS)
/** How far, in ticks of its pace, a walk ahead may fall behind it: it moves
 * on a batch at a time, at least every this many ticks. */
#define TW_WHEEL_WALK_LAG 8
/** The most timers one lazy re-arm moves: while a walk ahead has timers
 * left, one in eight re-arms that push a timer back also takes up to this
 * many off the walk ("Moves per advance" above); not from a callback of
 * tw_wheel_advance. */
#define TW_WHEEL_REARM_MOVES_MAX 64

/** The most timers one advance moves for lazy re-arms ("Moves per advance"
 * above): an advance (or the pulls of one `now`, up to the one returning
 * NULL) that takes the wheel's time `ticks` ticks forward, with never more
 * than `pending` timers pending, moves at most this many timers that lazy
 * re-arms pushed back or that walks took down a level ahead of their slot:
 * (ticks + TW_WHEEL_WALK_LAG) times the sum over the levels 1-10 of
 * pending / TW_WHEEL_WALK_TICKS(level) + 1 plus pending /
 * TW_WHEEL_WALK_TICKS(2) + 1 (level 2's first pass, at most the second's
 * pace, whose rest the second's start takes), about pending / 51 + 11 a
 * tick
 * (saturating at UINT64_MAX). Besides them it moves only timers going down
 * a level toward their own deadlines when their slot comes due. O(1). */
static inline uint64_t tw_wheel_lazy_moves_max(uint64_t pending, uint64_t ticks)
{
    uint64_t per_tick = 0;
    for (unsigned level = 1; level < TW_WHEEL_LEVELS; level++)
        per_tick += pending / TW_WHEEL_WALK_TICKS(level) + 1;
    per_tick += pending / TW_WHEEL_WALK_TICKS(2) + 1; /* level 2's first pass */
    uint64_t t = ticks + TW_WHEEL_WALK_LAG < ticks ? UINT64_MAX : ticks + TW_WHEEL_WALK_LAG;
    return t > UINT64_MAX / per_tick ? UINT64_MAX : t * per_tick;
}

/* ---- timers and nodes --------------------------------------------------- */

/** Prepare a timer: idle, calling fn(t, arg) when it fires. fn may not be
 * NULL. Returns 0 or TW_EINVAL. Not on a pending timer. */
TW_API int tw_timer_init(struct tw_timer *t, tw_timer_fn *fn, void *arg);

/** Prepare a bare node: idle. Returns 0 or TW_EINVAL. Not on a pending node. */
TW_API int tw_node_init(struct tw_node *n);

/** Flag of tw_arm: re-arming a pending timer relocates it at once, later or
 * earlier, so that no advance moves it for this re-arm (see the re-arm rule
 * above). Ignored with slack or TW_ARM_IDLE. */
#define TW_ARM_EAGER 0x1u
/** Flag of tw_arm: the caller knows the timer is idle (initialised, and not
 * armed since, or fired or cancelled). The arm then only stores into it,
 * never reading it, so a timer whose memory is not in the cache costs no
 * wait. Release builds do not check the promise (a pending timer would be
 * linked twice and corrupt the wheel); debug builds return TW_EBUSY for a
 * pending one and TW_EINVAL for an uninitialised one. */
#define TW_ARM_IDLE 0x2u
/** Flag of tw_arm: the slack rules even for a slack of 0 (the fire at the
 * deadline, a re-arm relocated at once and counted by tw_wheel_moves). A
 * nonzero slack implies it. */
#define TW_ARM_SLACK 0x4u
/** Every flag tw_arm knows; other bits give TW_EINVAL. */
#define TW_ARM_FLAGS (TW_ARM_EAGER | TW_ARM_IDLE | TW_ARM_SLACK)

/* The calls of C (_Generic, which clang-format cannot lay out). */
/* clang-format off */
#ifndef __cplusplus
/** Arm or re-arm `x`, a struct tw_timer * or a bare struct tw_node *, to
 * fire at the absolute tick `deadline` (<= the wheel's time means the next
 * tick), or anywhere in [deadline, deadline + slack] with a nonzero slack;
 * `flags` is 0 (lazy re-arm, any state) or a set of TW_ARM_EAGER,
 * TW_ARM_IDLE and TW_ARM_SLACK. Every arm is this call: first arm, re-arm,
 * exact or with slack, lazy or eager. With constant slack and flags (almost
 * every call) the choice between them costs nothing at run time.
 *
 * Returns 0; TW_EINVAL for a NULL argument, an unknown flag or an
 * uninitialised timer (checked while it is idle); TW_ERANGE when the wheel's
 * time is UINT64_MAX (no later tick; x unchanged). A bare node also gets
 * TW_EBUSY from inside a callback of tw_wheel_advance. Callable from
 * callbacks. O(1), no allocation. */
#define tw_arm(w, x, deadline, slack, flags)                                                 \
    _Generic((x), struct tw_timer *: tw_timer_arm_,                                          \
             struct tw_node *: tw_node_arm_)(w, x, deadline, slack, flags)

/** Arm or re-arm `x` (a timer or bare node) exact and lazy, `delay` ticks
 * after the caller's `now`: tw_arm(w, x, tw_deadline_in(now, delay), 0, 0).
 * The deadline is never earlier than now + delay, however stale the wheel's
 * time: the way to arm from an event loop. With now = tw_wheel_now(w) it
 * counts from the wheel's time. The results of tw_arm. O(1). */
#define tw_arm_in(w, x, now, delay) tw_arm(w, x, tw_deadline_in(now, delay), 0, 0)

/** Disarm `x` (a timer or bare node). Returns 1 if it was pending (its
 * callback will not run), 0 if it was idle, TW_EINVAL for NULL. O(1). */
#define tw_cancel(w, x)                                                                      \
    _Generic((x), struct tw_timer *: tw_timer_cancel_,                                       \
             struct tw_node *: tw_node_cancel_)(w, x)

/** Whether `x` (a timer or bare node, const or not) is armed; false for NULL.
 * O(1). */
#define tw_pending(x)                                                                        \
    _Generic((x), struct tw_timer *: tw_timer_pending_,                                      \
             const struct tw_timer *: tw_timer_pending_,                                     \
             struct tw_node *: tw_node_pending_,                                             \
             const struct tw_node *: tw_node_pending_)(x)

/** The tick at which `x` (a timer or bare node, const or not) fires if
 * pending (its planned tick, with slack), TW_NEVER if idle or NULL. O(1). */
#define tw_deadline(x)                                                                       \
    _Generic((x), struct tw_timer *: tw_timer_deadline_,                                     \
             const struct tw_timer *: tw_timer_deadline_,                                    \
             struct tw_node *: tw_node_deadline_,                                            \
             const struct tw_node *: tw_node_deadline_)(x)
#endif /* C; C++ gets overloads of the same names at the end of this file */
/* clang-format on */

/** The deadline `delay` ticks after `now`, saturating at UINT64_MAX (a sum
 * that wrapped would be a past deadline, due at the next tick). */
static inline uint64_t tw_deadline_in(uint64_t now, uint64_t delay)
{
    return now + delay < now ? UINT64_MAX : now + delay;
}

/** Recover the struct that embeds a timer or node: container_of. */
/* clang-format off */
#define tw_container_of(ptr, type, member)                                                   \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
/* clang-format on */

/* ---- bare nodes (pull only) -------------------------------------------- */
/** @name Bare nodes (pull only)
 * For users who never let the wheel call back: they embed a struct tw_node
 * (24 bytes) instead of a struct tw_timer (40), arm it with the same calls
 * and collect due nodes with tw_wheel_expire_next_node, as twheel's keyed
 * layer and cache do. Nodes obey every rule of timers. Once a bare node has
 * been armed on a wheel, the wheel is pull-only until tw_wheel_init or
 * tw_wheel_destroy: tw_wheel_advance returns TW_EINVAL and
 * tw_wheel_expire_next NULL there, a bare node having no callback. Whole
 * timers may share a pull-only wheel (tw_container_of(n, struct tw_timer,
 * node) gets a timer back from its node).
 * @{ */

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

/* ---- internal: the typed forms behind tw_arm and the other calls --------
 * Not API, and not documented: use tw_arm, tw_arm_in, tw_cancel, tw_pending
 * and tw_deadline. They are here because the calls expand to them. The arm
 * forms pick one out-of-line worker from their flags, so that with constant
 * flags the choice folds away at compile time. */
/** @cond */
/* The out-of-line workers, one per kind (timer, node) and way of arming. */
#define TW_ARM_WORKERS_(kind, type)                                                        \
    TW_API int tw_##kind##_arm_lazy_(struct tw_wheel *w, type *x, uint64_t deadline);      \
    TW_API int tw_##kind##_arm_eager_(struct tw_wheel *w, type *x, uint64_t deadline);     \
    TW_API int tw_##kind##_arm_idle_(struct tw_wheel *w, type *x, uint64_t deadline);      \
    TW_API int tw_##kind##_arm_slack_(struct tw_wheel *w, type *x, uint64_t deadline,      \
                                      uint64_t slack);                                     \
    TW_API int tw_##kind##_arm_idle_slack_(struct tw_wheel *w, type *x, uint64_t deadline, \
                                           uint64_t slack)
TW_ARM_WORKERS_(timer, struct tw_timer);
TW_ARM_WORKERS_(node, struct tw_node);
TW_API int tw_node_cancel_(struct tw_wheel *w, struct tw_node *n);

/* clang-format off */
/* The worker of tw_KIND_arm_ for its flags (KIND: timer or node). */
#define TW_ARM_CHOOSE_(kind, w, x, deadline, slack, flags)                                   \
    ((flags) & ~TW_ARM_FLAGS ? (int)TW_EINVAL                                                \
     : (slack) || ((flags) & TW_ARM_SLACK)                                                   \
         ? ((flags) & TW_ARM_IDLE ? tw_##kind##_arm_idle_slack_(w, x, deadline, slack)       \
                                  : tw_##kind##_arm_slack_(w, x, deadline, slack))           \
     : (flags) & TW_ARM_IDLE  ? tw_##kind##_arm_idle_(w, x, deadline)                        \
     : (flags) & TW_ARM_EAGER ? tw_##kind##_arm_eager_(w, x, deadline)                       \
                              : tw_##kind##_arm_lazy_(w, x, deadline))
/* clang-format on */

static inline int tw_timer_arm_(struct tw_wheel *w, struct tw_timer *t, uint64_t deadline,
                                uint64_t slack, unsigned flags)
{
    return TW_ARM_CHOOSE_(timer, w, t, deadline, slack, flags);
}

static inline int tw_node_arm_(struct tw_wheel *w, struct tw_node *n, uint64_t deadline,
                               uint64_t slack, unsigned flags)
{
    return TW_ARM_CHOOSE_(node, w, n, deadline, slack, flags);
}

/* A timer's node is its first member: these cost no instruction over the
 * node forms. */
static inline int tw_timer_cancel_(struct tw_wheel *w, struct tw_timer *t)
{
    return tw_node_cancel_(w, t ? &t->node : NULL);
}

static inline bool tw_node_pending_(const struct tw_node *n)
{
    return n && n->pprev;
}

static inline bool tw_timer_pending_(const struct tw_timer *t)
{
    return tw_node_pending_(t ? &t->node : NULL);
}

static inline uint64_t tw_node_deadline_(const struct tw_node *n)
{
    return n && n->pprev ? n->deadline : TW_NEVER;
}

static inline uint64_t tw_timer_deadline_(const struct tw_timer *t)
{
    return tw_node_deadline_(t ? &t->node : NULL);
}
/** @endcond */

#ifdef __cplusplus
} /* extern "C" */

/* C++ has no _Generic: the same calls as overloads (outside extern "C",
 * which allows no overloading). */
inline int tw_arm(tw_wheel *w, tw_timer *t, uint64_t deadline, uint64_t slack, unsigned flags)
{
    return tw_timer_arm_(w, t, deadline, slack, flags);
}
inline int tw_arm(tw_wheel *w, tw_node *n, uint64_t deadline, uint64_t slack, unsigned flags)
{
    return tw_node_arm_(w, n, deadline, slack, flags);
}
template <class X> inline int tw_arm_in(tw_wheel *w, X *x, uint64_t now, uint64_t delay)
{
    return tw_arm(w, x, tw_deadline_in(now, delay), 0, 0);
}
inline int tw_cancel(tw_wheel *w, tw_timer *t)
{
    return tw_timer_cancel_(w, t);
}
inline int tw_cancel(tw_wheel *w, tw_node *n)
{
    return tw_node_cancel_(w, n);
}
inline bool tw_pending(const tw_timer *t)
{
    return tw_timer_pending_(t);
}
inline bool tw_pending(const tw_node *n)
{
    return tw_node_pending_(n);
}
inline uint64_t tw_deadline(const tw_timer *t)
{
    return tw_timer_deadline_(t);
}
inline uint64_t tw_deadline(const tw_node *n)
{
    return tw_node_deadline_(n);
}
#endif

#endif /* TWHEEL_WHEEL_H */
