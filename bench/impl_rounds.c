/* SPDX-License-Identifier: MIT */
/* A single-level wheel with rounds: go-zero's TimingWheel and Netty's
 * HashedWheelTimer algorithm, in C, as the baseline that shows what the
 * hierarchy buys.
 *
 * One array of ROUNDS_SLOTS slots, one tick per slot. A timer due at d goes
 * into slot d mod ROUNDS_SLOTS with a round count = how many times that slot
 * comes round before d. Each tick visits every entry of the current slot:
 * fire it if its count is 0, else decrement the count (go-zero's `circle--`,
 * Netty's `remainingRounds--`). Cancel and re-arm unlink at once (doubly
 * linked, O(1)), as Netty's bucket list does; go-zero's lazy "diff" move is
 * not copied (it fires early or late across the wrap, see docs/contracts.md, Keyed tasks).
 *
 * The slot count is generous: 2^16 slots (512 KB of list heads; Netty's
 * default is 512, go-zero's users pick a few hundred to a few thousand), so
 * W2's 30 s timeout and W3's 200 ms need no rounds at all; W1's delays up to
 * 2^20 take up to 16 and W4's week-long ones thousands. A tick whose slot is
 * empty still costs one look at the slot: there is no bitmap to skip idle time,
 * which is the point (Netty's worker wakes every tick).
 *
 * moves() counts entries visited without firing (round decrements). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define ROUNDS_BITS 16
#define ROUNDS_SLOTS (1u << ROUNDS_BITS)
#define ROUNDS_MASK ((uint64_t)ROUNDS_SLOTS - 1)

struct rnode {
    struct rnode *next;
    struct rnode **pprev; /* the link pointing at us */
    uint64_t deadline;
    uint64_t rounds;
};

struct rwheel {
    struct rnode *slots[ROUNDS_SLOTS];
    struct rnode *nodes;
    size_t capacity, pending;
    uint64_t now, visits;
    bench_fire_fn *fire;
    void *ctx;
};

static void *rw_create(const struct bench_setup *setup)
{
    struct rwheel *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    /* Fault the 512 KB of slots in now, untimed. Not with a memset: gcc
     * drops a memset of calloc'ed memory (and turns malloc + memset into
     * calloc), so the pages would fault in inside the timed phases. */
    for (size_t off = 0; off < sizeof w->slots; off += 4096)
        ((volatile char *)w->slots)[off] = 0;
    /* Line-aligned, as heap4's array: a 32-byte node then never straddles
     * two cache lines (calloc's 16 mod 64 start made half of them do, about
     * half a line more per arm at 1e6, bench/README.md). */
    size_t bytes = (setup->capacity * sizeof *w->nodes + 63) & ~(size_t)63;
    w->nodes = aligned_alloc(64, bytes ? bytes : 64);
    if (!w->nodes) {
        free(w);
        return NULL;
    }
    memset(w->nodes, 0, setup->capacity * sizeof *w->nodes);
    w->capacity = setup->capacity;
    w->now = setup->now;
    w->fire = setup->fire;
    w->ctx = setup->ctx;
    return w;
}

static void rw_destroy(void *p)
{
    struct rwheel *w = p;
    free(w->nodes);
    free(w);
}

static void link_node(struct rwheel *w, struct rnode *n, uint64_t deadline)
{
    n->deadline = deadline;
    n->rounds = (deadline - w->now - 1) >> ROUNDS_BITS;
    struct rnode **head = &w->slots[deadline & ROUNDS_MASK];
    n->next = *head;
    if (n->next)
        n->next->pprev = &n->next;
    *head = n;
    n->pprev = head;
}

static void unlink_node(struct rnode *n)
{
    *n->pprev = n->next;
    if (n->next)
        n->next->pprev = n->pprev;
    n->pprev = NULL;
}

static void rw_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct rwheel *w = p;
    link_node(w, &w->nodes[id], deadline);
    w->pending++;
}

static void rw_reset(void *p, uint32_t id, uint64_t deadline)
{
    struct rwheel *w = p;
    unlink_node(&w->nodes[id]);
    link_node(w, &w->nodes[id], deadline);
}

static void rw_cancel(void *p, uint32_t id)
{
    struct rwheel *w = p;
    unlink_node(&w->nodes[id]);
    w->pending--;
}

/* Callbacks must not cancel the entry after the firing one in its slot (our
 * workloads' callbacks only record the fire). */
static void rw_advance_to(void *p, uint64_t now)
{
    struct rwheel *w = p;
    while (w->now < now) {
        uint64_t tick = ++w->now;
        struct rnode *n = w->slots[tick & ROUNDS_MASK], *next;
        for (; n; n = next) {
            next = n->next;
            if (n->rounds == 0) {
                unlink_node(n);
                w->pending--;
                w->fire(w->ctx, (uint32_t)(n - w->nodes));
            } else {
                n->rounds--;
                w->visits++;
            }
        }
    }
}

/* The next tick whose slot is not empty: what the worker finds by ticking. */
static uint64_t rw_next_deadline(void *p)
{
    struct rwheel *w = p;
    if (!w->pending)
        return BENCH_NEVER;
    uint64_t tick = w->now + 1;
    while (!w->slots[tick & ROUNDS_MASK])
        tick++;
    return tick;
}

static size_t rw_bytes(void *p)
{
    struct rwheel *w = p;
    return w->capacity * sizeof(struct rnode) + sizeof *w;
}

static uint64_t rw_moves(void *p)
{
    struct rwheel *w = p;
    return w->visits;
}

const struct bench_impl bench_impl_rounds = {
    .name = "rounds",
    .what = "single-level wheel with rounds (go-zero/Netty algorithm), 2^16 slots",
    .workloads = BENCH_ALL,
    .create = rw_create,
    .destroy = rw_destroy,
    .arm = rw_arm,
    .reset = rw_reset,
    .cancel = rw_cancel,
    .advance_to = rw_advance_to,
    .next_deadline = rw_next_deadline,
    .bytes = rw_bytes,
    .moves = rw_moves,
};
