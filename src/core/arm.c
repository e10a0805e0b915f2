/* SPDX-License-Identifier: MIT */
/* Arming, re-arming and cancelling timers and bare nodes: the out-of-line
 * workers behind tw_arm and tw_cancel (twheel/wheel.h picks one from its
 * constant flags), the eager and the idle (store-only) arms, and the init of
 * timers and nodes. The exact arm itself is in internal.h, the arms with
 * slack in slack.h; the design is at the top of wheel.c. */
#include "core/internal.h"
#include "core/slack.h"

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

/* Arm n, which the caller knows to be idle (TW_ARM_IDLE; debug builds
 * check it, release builds take the caller's word): only stores into n. An
 * arm first loads n->pprev to tell a re-arm from an arm, and for a timer not
 * touched for a while (millions of timers: a cold line per arm) that load is
 * most of the arm; stores to a cold line retire through the store buffer
 * without a wait. The wheel's own fields (w) are hot: reading them is
 * free. */
static inline __attribute__((always_inline)) int start_node(struct tw_wheel *w, struct tw_node *n,
                                                            uint64_t deadline)
{
    int rc = clamp_deadline(w, &deadline);
    if (rc)
        return rc;
    w->pending++;
    link_node(w, n, deadline);
    return 0;
}

/* Arm or re-arm n eagerly (both pointers checked by the caller): never left
 * in the slot of an older deadline (see arm_node_exact). */
static inline __attribute__((always_inline)) int
arm_node_eager(struct tw_wheel *w, struct tw_node *n, uint64_t deadline)
{
    return arm_node_exact(w, n, deadline, true);
}

/* Cancel n (both pointers checked by the caller). unlink_node written out
 * with n's own stores first: then n is not needed after the neighbours'
 * stores, and gcc keeps it in its argument register (one instruction less
 * per cancel, of about 22). unlink_node
 * itself keeps that store last: its other callers place the node next, and
 * place()'s store to pprev then makes it dead (moved first, it survives:
 * one instruction more in every relinking arm, gcc -O3). */
static inline __attribute__((always_inline)) int cancel_node(struct tw_wheel *w, struct tw_node *n)
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
 * arm_checked with its kind and its way of arming as constants: one body
 * for all ten, inlined into each, so that a worker checks only what its own
 * kind and flags need. */
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
