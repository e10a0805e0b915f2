/* SPDX-License-Identifier: MIT */
/* Internal: what src/runner/runner.c needs of the clock service and of the executor
 * pool (src/clock/clock.c, src/clock/pool.c) beyond their public calls. */
#ifndef TWHEEL_CLOCK_INTERNAL_H
#define TWHEEL_CLOCK_INTERNAL_H

#include "twheel/clock.h"

/* One user of a pool (a runner): it has work queued of its own, and the
 * pool's threads call work(c) to take one item and run it. */
struct tw_pool_client {
    void (*work)(struct tw_pool_client *c); /* take one item, run it */
    struct tw_pool_client *next;            /* under the pool's lock: */
    int queued;                             /*   in the ready list */
    unsigned busy;                          /*   threads inside work(c) */
};

/* Count c as a user (tw_pool_free refuses while any is attached). */
void tw_pool_attach_(struct tw_pool *p, struct tw_pool_client *c);
/* c has work: put it in the ready list unless it is there, wake a thread.
 * Any thread; may be called with the client's own queue lock held. */
void tw_pool_post_(struct tw_pool *p, struct tw_pool_client *c);
/* Take c out of the ready list and wait until no thread is inside work(c);
 * then c is no longer a user. Not from a thread of p. */
void tw_pool_detach_(struct tw_pool *p, struct tw_pool_client *c);
/* Whether the calling thread is one of p's (after tw_pool_join_: one that
 * was, or a later thread that reuses such a thread's id). */
int tw_pool_is_self_(const struct tw_pool *p);
/* Stop and join p's threads, once (later calls do nothing); p's memory
 * stays, so tw_pool_is_self_ may still read it. No user may be attached,
 * and not from a thread of p. */
void tw_pool_join_(struct tw_pool *p);
/* tw_pool_free without its checks (the caller knows there is no user and
 * that it is not a thread of p): join the threads unless done, free p. */
void tw_pool_destroy_(struct tw_pool *p);
/* Whether the calling thread is k's. */
int tw_clock_is_self_(const struct tw_clock *k);

#endif /* TWHEEL_CLOCK_INTERNAL_H */
