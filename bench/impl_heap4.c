/* SPDX-License-Identifier: MIT */
/* A 4-ary min-heap of our own: the textbook alternative to a wheel.
 *
 * Entries are {deadline, id} (16 bytes) in one array, so the four children of
 * a node share one 64-byte cache line (the array is offset so that children
 * 1..4 start a line); pos[id] gives an entry's index for O(log n) cancel and
 * re-arm. Per timer: 16 + 4 bytes (a real timer would also need its callback
 * and argument somewhere: +16). */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define NOPOS UINT32_MAX

struct hent {
    uint64_t deadline;
    uint32_t id;
    uint32_t pad;
};

struct heap4 {
    struct hent *a; /* a[0] is the minimum */
    void *mem;      /* what to free */
    uint32_t *pos;  /* index of id in a, or NOPOS */
    size_t n, capacity;
    uint64_t now;
    bench_fire_fn *fire;
    void *ctx;
};

static inline void put(struct heap4 *h, size_t i, struct hent e)
{
    h->a[i] = e;
    h->pos[e.id] = (uint32_t)i;
}

static void sift_up(struct heap4 *h, size_t i, struct hent e)
{
    while (i > 0) {
        size_t p = (i - 1) / 4;
        if (h->a[p].deadline <= e.deadline)
            break;
        put(h, i, h->a[p]);
        i = p;
    }
    put(h, i, e);
}

static void sift_down(struct heap4 *h, size_t i, struct hent e)
{
    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= h->n)
            break;
        size_t end = c + 4 < h->n ? c + 4 : h->n, m = c;
        for (size_t k = c + 1; k < end; k++)
            if (h->a[k].deadline < h->a[m].deadline)
                m = k;
        if (h->a[m].deadline >= e.deadline)
            break;
        put(h, i, h->a[m]);
        i = m;
    }
    put(h, i, e);
}

static void *heap_create(const struct bench_setup *setup)
{
    struct heap4 *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    /* Offset by 3 entries: a[1..4] (children of the root), a[5..8], ... each
     * fill exactly one 64-byte line. */
    size_t bytes = (setup->capacity + 4) * sizeof(struct hent);
    bytes = (bytes + 63) & ~(size_t)63;
    h->mem = aligned_alloc(64, bytes);
    h->pos = malloc(setup->capacity * sizeof *h->pos);
    if (!h->mem || !h->pos) {
        free(h->mem);
        free(h->pos);
        free(h);
        return NULL;
    }
    memset(h->mem, 0, bytes); /* fault the pages in now, not in the timed arms */
    h->a = (struct hent *)h->mem + 3;
    memset(h->pos, 0xff, setup->capacity * sizeof *h->pos);
    h->capacity = setup->capacity;
    h->now = setup->now;
    h->fire = setup->fire;
    h->ctx = setup->ctx;
    return h;
}

static void heap_destroy(void *p)
{
    struct heap4 *h = p;
    free(h->mem);
    free(h->pos);
    free(h);
}

static void heap_arm(void *p, uint32_t id, uint64_t deadline)
{
    struct heap4 *h = p;
    sift_up(h, h->n++, (struct hent){deadline, id, 0});
}

static void heap_reset(void *p, uint32_t id, uint64_t deadline)
{
    struct heap4 *h = p;
    size_t i = h->pos[id];
    struct hent e = {deadline, id, 0};
    if (deadline < h->a[i].deadline)
        sift_up(h, i, e);
    else
        sift_down(h, i, e);
}

static void remove_at(struct heap4 *h, size_t i)
{
    h->pos[h->a[i].id] = NOPOS;
    struct hent last = h->a[--h->n];
    if (i == h->n)
        return;
    if (i > 0 && last.deadline < h->a[(i - 1) / 4].deadline)
        sift_up(h, i, last);
    else
        sift_down(h, i, last);
}

static void heap_cancel(void *p, uint32_t id)
{
    struct heap4 *h = p;
    remove_at(h, h->pos[id]);
}

static void heap_advance_to(void *p, uint64_t now)
{
    struct heap4 *h = p;
    if (now > h->now)
        h->now = now;
    while (h->n && h->a[0].deadline <= now) {
        uint32_t id = h->a[0].id;
        remove_at(h, 0);
        h->fire(h->ctx, id);
    }
}

static uint64_t heap_next_deadline(void *p)
{
    struct heap4 *h = p;
    return h->n ? h->a[0].deadline : BENCH_NEVER;
}

static size_t heap_bytes(void *p)
{
    struct heap4 *h = p;
    return h->capacity * (sizeof(struct hent) + sizeof(uint32_t)) + sizeof *h;
}

const struct bench_impl bench_impl_heap4 = {
    .name = "heap4",
    .what = "4-ary min-heap of {deadline, id} with a position index (ours)",
    .workloads = BENCH_ALL,
    .create = heap_create,
    .destroy = heap_destroy,
    .arm = heap_arm,
    .reset = heap_reset,
    .cancel = heap_cancel,
    .advance_to = heap_advance_to,
    .next_deadline = heap_next_deadline,
    .bytes = heap_bytes,
};
