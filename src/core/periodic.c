/* SPDX-License-Identifier: MIT */
/* Periodic timers: a core timer re-armed from its previous nominal deadline
 * by its own callback, so that it never drifts, with or without slack. */
#include "core/internal.h"
#include "core/slack.h"

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
        next = periods > (UINT64_MAX - fired_at) / p->period ? UINT64_MAX
                                                             : fired_at + periods * p->period;
    }
    /* At the end of time (next == now == UINT64_MAX) the timer stays idle.
     * The slack is below the period, so next > now: never moved to now + 1. */
    if ((p->slack ? arm_node_slack(w, &t->node, next, p->slack) : arm_node(w, &t->node, next)) == 0)
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
