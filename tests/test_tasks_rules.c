/* SPDX-License-Identifier: MIT */
/* Unit tests of tw_tasks: one test per row and rule of docs/contracts.md that the
 * single-threaded layer owns, the go-zero bugs pinned as regressions, and the
 * layer's own promises (errors, memory, allocator failures, hash flooding,
 * bytes per task). */
#include <stdlib.h>

#include "common/hash.h"
#include "test.h"
#include "twheel.h"

/* ---- helpers ---------------------------------------------------------------- */

#define MAXREC 4096

/* What execute saw. */
struct rec {
    int n;
    uint64_t key[MAXREC];
    uintptr_t value[MAXREC];
    uint64_t deadline[MAXREC];
    uint64_t now[MAXREC];
    char skey[MAXREC][16];
    struct tw_tasks *t;
    void (*hook)(struct rec *r, const struct tw_task *task); /* re-entrant actions */
    int hook_state;
};

static void record(void *ctx, const struct tw_task *task)
{
    struct rec *r = ctx;
    if (r->n < MAXREC) {
        r->key[r->n] = task->key_int;
        r->value[r->n] = (uintptr_t)task->value;
        r->deadline[r->n] = task->deadline;
        r->now[r->n] = tw_tasks_now(r->t);
        size_t n = task->key_len < 15 ? task->key_len : 15;
        if (task->key)
            memcpy(r->skey[r->n], task->key, n);
        r->skey[r->n][n] = 0;
    }
    r->n++;
    if (r->hook)
        r->hook(r, task);
}

static struct tw_tasks *new_tasks(struct rec *r, enum tw_tasks_key_kind kind, uint64_t now)
{
    memset(r, 0, sizeof *r);
    struct tw_tasks_config cfg = {.execute = record, .ctx = r, .key_kind = kind, .now = now};
    struct tw_tasks *t = NULL;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    r->t = t;
    return t;
}

static struct rec R; /* large */

static uint64_t tm_rand_(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Counting allocator that can fail the n-th call (n from 1), or always. */
struct counting {
    int64_t outstanding;
    long calls;
    long fail_at; /* 0 = never */
    int fail_all;
    size_t fail_big; /* != 0: fail the first call for at least this many bytes */
};

static void *counting_alloc(void *ctx, void *ptr, size_t old_size, size_t new_size)
{
    struct counting *c = ctx;
    if (new_size == 0) {
        c->outstanding -= (int64_t)old_size;
        free(ptr);
        return NULL;
    }
    c->calls++;
    if (c->fail_all || c->calls == c->fail_at)
        return NULL;
    if (c->fail_big && new_size >= c->fail_big) {
        c->fail_big = 0;
        return NULL;
    }
    void *p = realloc(ptr, new_size);
    if (p)
        c->outstanding += (int64_t)new_size - (int64_t)old_size;
    return p;
}

/* ---- construction ------------------------------------------------------------ */

static void test_config_errors(void)
{
    struct rec r;
    struct tw_tasks *t = (struct tw_tasks *)&r;
    struct tw_tasks_config cfg = {.execute = record, .ctx = &r};
    CHECK_EQ_INT(tw_tasks_new(NULL, &cfg), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_new(&t, NULL), TW_EINVAL);
    CHECK_EQ_PTR(t, NULL); /* *out is cleared on failure */
    cfg.execute = NULL;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), TW_EINVAL);
    cfg.execute = record;
    cfg.key_kind = (enum tw_tasks_key_kind)7;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), TW_EINVAL);
    cfg.key_kind = TW_TASKS_KEY_INT;
    struct tw_allocator bad = {NULL, NULL};
    cfg.allocator = &bad;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), TW_EINVAL);
    /* Out of memory at creation: nothing is half-built, nothing leaks. */
    for (long k = 1; k <= 3; k++) {
        struct counting c = {.fail_at = k};
        struct tw_allocator a = {counting_alloc, &c};
        cfg.allocator = &a;
        int rc = tw_tasks_new(&t, &cfg);
        if (rc == 0) {
            tw_tasks_free(t);
        } else {
            CHECK_EQ_INT(rc, TW_ENOMEM);
            CHECK_EQ_PTR(t, NULL);
        }
        CHECK_EQ_INT(c.outstanding, 0);
    }
    CHECK_EQ_INT(tw_tasks_free(NULL), 0); /* no-op */
}

/* ---- keys ---------------------------------------------------------------------- */

static void test_string_keys(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_BYTES, 0);
    char buf[8] = "abc";
    CHECK_EQ_INT(tw_tasks_set(t, buf, 3, (void *)1, 5), 1);
    buf[0] = 'X'; /* the key was copied */
    void *v = NULL;
    CHECK_EQ_INT(tw_tasks_get(t, "abc", 3, &v, NULL), 0);
    CHECK_EQ_PTR(v, (void *)1);
    CHECK_EQ_INT(tw_tasks_get(t, "ab", 2, &v, NULL), TW_ENOENT);   /* prefix */
    CHECK_EQ_INT(tw_tasks_get(t, "abcd", 4, &v, NULL), TW_ENOENT); /* extension */
    /* Bytes, not C strings: embedded NULs count, equal bytes are equal keys. */
    CHECK_EQ_INT(tw_tasks_set(t, "a\0b", 3, (void *)2, 5), 1);
    CHECK_EQ_INT(tw_tasks_set(t, "a\0c", 3, (void *)3, 5), 1);
    CHECK_EQ_INT(tw_tasks_set(t, "a", 1, (void *)4, 5), 1);
    char copy[3] = {'a', 0, 'b'};
    CHECK_EQ_INT(tw_tasks_set(t, copy, 3, (void *)5, 5), 0); /* same key: replaced */
    CHECK_EQ_INT(tw_tasks_get(t, "a\0b", 3, &v, NULL), 0);
    CHECK_EQ_PTR(v, (void *)5);
    /* The empty key is a key. */
    CHECK_EQ_INT(tw_tasks_set(t, "", 0, (void *)6, 5), 1);
    CHECK_EQ_INT(tw_tasks_get(t, "", 0, &v, NULL), 0);
    CHECK_EQ_U64(tw_tasks_pending(t), 5);
    /* NULL and oversize keys: a clear error, no change. */
    CHECK_EQ_INT(tw_tasks_set(t, NULL, 0, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_set(t, NULL, 3, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_move(t, NULL, 3, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_remove(t, NULL, 3, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_get(t, NULL, 3, NULL, NULL), TW_EINVAL);
    char *big = calloc(1, TW_TASKS_KEY_MAX + 1);
    CHECK_EQ_INT(tw_tasks_set(t, big, TW_TASKS_KEY_MAX + 1, NULL, 1), TW_E2BIG);
    CHECK_EQ_INT(tw_tasks_move(t, big, TW_TASKS_KEY_MAX + 1, 1), TW_E2BIG);
    CHECK_EQ_INT(tw_tasks_remove(t, big, TW_TASKS_KEY_MAX + 1, NULL), TW_E2BIG);
    CHECK_EQ_INT(tw_tasks_get(t, big, TW_TASKS_KEY_MAX + 1, NULL, NULL), TW_E2BIG);
    CHECK_EQ_U64(tw_tasks_pending(t), 5);
    CHECK_EQ_INT(tw_tasks_set(t, big, TW_TASKS_KEY_MAX, (void *)7, 1), 1); /* the maximum is fine */
    /* The other kind's calls are refused. */
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_move_int(t, 1, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_remove_int(t, 1, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_get_int(t, 1, NULL, NULL), TW_EINVAL);
    CHECK_EQ_U64(tw_tasks_pending(t), 6);
    /* execute gets the key's bytes. */
    CHECK_EQ_INT(tw_tasks_advance(t, 1), 1);
    CHECK_EQ_INT(R.n, 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 5), 5);
    int saw_abc = 0;
    for (int i = 0; i < R.n; i++)
        saw_abc += strcmp(R.skey[i], "abc") == 0 && R.value[i] == 1;
    CHECK_EQ_INT(saw_abc, 1);
    free(big);
    tw_tasks_free(t);
}

/* Keys of up to 15 bytes live in the entry, longer ones in a block of their
 * own: lengths around that edge are distinct keys, compare by bytes, and
 * reach execute intact even when execute's own set reuses the entry. */
struct reuse_ctx {
    struct tw_tasks *t;
    int runs, intact;
};

static void reuse_execute(void *ctx, const struct tw_task *task)
{
    struct reuse_ctx *rc = ctx;
    char before[40];
    size_t len = task->key_len;
    memcpy(before, task->key, len);
    /* The freed entry is the first to be reused: overwrite it with a new key
     * of another length class, then look at the task's key again. */
    CHECK_EQ_INT(tw_tasks_set(rc->t, "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", 30 - len % 20, NULL, 100), 1);
    rc->intact += task->key_len == len && memcmp(before, task->key, len) == 0;
    rc->runs++;
}

static void test_key_lengths_around_inline(void)
{
    struct reuse_ctx rc = {0};
    struct tw_tasks_config cfg = {.execute = reuse_execute, .ctx = &rc};
    CHECK_EQ_INT(tw_tasks_new(&rc.t, &cfg), 0);
    const char *k = "0123456789abcdefghij";
    for (size_t len = 13; len <= 18; len++)
        CHECK_EQ_INT(tw_tasks_set(rc.t, k, len, (void *)(uintptr_t)len, 10), 1);
    for (size_t len = 13; len <= 18; len++) {
        void *v = NULL;
        CHECK_EQ_INT(tw_tasks_get(rc.t, k, len, &v, NULL), 0);
        CHECK_EQ_U64((uintptr_t)v, len);
        char other[20];
        memcpy(other, k, len);
        other[len - 1] ^= 1; /* same length, last byte differs */
        CHECK_EQ_INT(tw_tasks_get(rc.t, other, len, NULL, NULL), TW_ENOENT);
    }
    CHECK_EQ_INT(tw_tasks_remove(rc.t, k, 15, NULL), 0);
    CHECK_EQ_INT(tw_tasks_remove(rc.t, k, 16, NULL), 0);
    CHECK_EQ_INT(tw_tasks_get(rc.t, k, 14, NULL, NULL), 0);
    CHECK_EQ_INT(tw_tasks_get(rc.t, k, 17, NULL, NULL), 0);
    CHECK_EQ_INT(tw_tasks_advance(rc.t, 10), 4);
    CHECK_EQ_INT(rc.runs, 4);
    CHECK_EQ_INT(rc.intact, 4);
    tw_tasks_free(rc.t);
    /* The same through drain, whose fn may also reuse the freed entries. */
    rc = (struct reuse_ctx){0};
    CHECK_EQ_INT(tw_tasks_new(&rc.t, &cfg), 0);
    for (size_t len = 13; len <= 18; len++)
        CHECK_EQ_INT(tw_tasks_set(rc.t, k, len, NULL, 10), 1);
    CHECK_EQ_INT(tw_tasks_drain(rc.t, NULL, NULL), 6);
    CHECK_EQ_INT(rc.runs, 6);
    CHECK_EQ_INT(rc.intact, 6);
    tw_tasks_free(rc.t);
}

static void test_int_keys(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    CHECK_EQ_INT(tw_tasks_set_int(t, 0, (void *)1, 3), 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, UINT64_MAX, (void *)2, 3), 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, 0, (void *)3, 3), 0);
    CHECK_EQ_INT(tw_tasks_set(t, "a", 1, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_get(t, "a", 1, NULL, NULL), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_advance(t, 3), 2);
    CHECK_EQ_INT(R.n, 2);
    for (int i = 0; i < 2; i++) {
        CHECK(R.key[i] == 0 || R.key[i] == UINT64_MAX);
        CHECK_EQ_U64(R.value[i], R.key[i] == 0 ? 3 : 2);
        CHECK_EQ_INT(R.skey[i][0], 0);
    }
    tw_tasks_free(t);
}

/* ---- operations table ------------------------------------------------------------ */

static void test_set_absent_arms(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 100);
    CHECK_EQ_INT(tw_tasks_set_int(t, 7, (void *)70, 10), 1);
    uint64_t d = 0;
    CHECK_EQ_INT(tw_tasks_get_int(t, 7, NULL, &d), 0);
    CHECK_EQ_U64(d, 110);
    CHECK_EQ_INT(tw_tasks_advance(t, 109), 0); /* never early */
    CHECK_EQ_INT(R.n, 0);
    CHECK_EQ_INT(tw_tasks_advance(t, 110), 1);
    CHECK_EQ_INT(R.n, 1);
    CHECK_EQ_U64(R.key[0], 7);
    CHECK_EQ_U64(R.value[0], 70);
    CHECK_EQ_U64(R.deadline[0], 110);
    CHECK_EQ_U64(R.now[0], 110);
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    tw_tasks_free(t);
}

static void test_set_present_replaces(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, (void *)10, 5), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 3), 0);
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, (void *)11, 5), 0); /* due at 8 now, value 11 */
    CHECK_EQ_U64(tw_tasks_pending(t), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 7), 0); /* the first arming (5) does not run */
    CHECK_EQ_INT(tw_tasks_advance(t, 8), 1);
    CHECK_EQ_INT(R.n, 1);
    CHECK_EQ_U64(R.value[0], 11);
    CHECK_EQ_U64(R.deadline[0], 8);
    /* Replacing with an earlier deadline works too. */
    CHECK_EQ_INT(tw_tasks_set_int(t, 2, (void *)20, 100), 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, 2, (void *)21, 2), 0);
    CHECK_EQ_INT(tw_tasks_advance(t, 10), 1);
    CHECK_EQ_U64(R.value[1], 21);
    CHECK_EQ_INT(tw_tasks_advance(t, 1000), 0);
    CHECK_EQ_INT(R.n, 2);
    tw_tasks_free(t);
}

static void test_move(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_BYTES, 0);
    CHECK_EQ_INT(tw_tasks_move(t, "k", 1, 5), TW_ENOENT); /* absent: no-op */
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    CHECK_EQ_INT(tw_tasks_advance(t, 100), 0);
    CHECK_EQ_INT(R.n, 0);
    CHECK_EQ_INT(tw_tasks_set(t, "k", 1, (void *)9, 5), 1);
    CHECK_EQ_INT(tw_tasks_move(t, "k", 1, 50), 0); /* later */
    CHECK_EQ_INT(tw_tasks_advance(t, 149), 0);
    CHECK_EQ_INT(tw_tasks_move(t, "k", 1, 3), 0); /* earlier */
    CHECK_EQ_INT(tw_tasks_advance(t, 151), 0);
    CHECK_EQ_INT(tw_tasks_advance(t, 152), 1);
    CHECK_EQ_U64(R.value[0], 9); /* value kept */
    CHECK_EQ_U64(R.deadline[0], 152);
    CHECK_EQ_INT(tw_tasks_move(t, "k", 1, 5), TW_ENOENT); /* it ran: gone */
    tw_tasks_free(t);
}

static void test_remove(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    CHECK_EQ_INT(tw_tasks_remove_int(t, 1, NULL), TW_ENOENT);
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, (void *)5, 5), 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, 2, (void *)6, 5), 1);
    void *v = NULL;
    CHECK_EQ_INT(tw_tasks_remove_int(t, 1, &v), 0);
    CHECK_EQ_PTR(v, (void *)5);
    CHECK_EQ_INT(tw_tasks_remove_int(t, 1, &v), TW_ENOENT);
    CHECK_EQ_U64(tw_tasks_pending(t), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 10), 1); /* only key 2 */
    CHECK_EQ_INT(R.n, 1);
    CHECK_EQ_U64(R.key[0], 2);
    tw_tasks_free(t);
}

/* ---- exactness ------------------------------------------------------------------- */

static void test_exact_random(void)
{
    /* Random delays, random moves, advanced in random steps: each task runs at
     * the tick it is due (the advance that reaches it, with now == deadline). */
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 12345);
    uint64_t rng = 99, due[512] = {0};
    for (uint64_t k = 0; k < 512; k++) {
        uint64_t d = tm_rand_(&rng) % 70000;
        CHECK_EQ_INT(tw_tasks_set_int(t, k, (void *)(uintptr_t)k, (int64_t)d), 1);
        due[k] = 12345 + (d ? d : 1);
    }
    uint64_t now = 12345;
    while (tw_tasks_pending(t)) {
        if (tm_rand_(&rng) % 4 == 0) { /* move a random pending key */
            uint64_t k = tm_rand_(&rng) % 512, d = tm_rand_(&rng) % 5000;
            if (tw_tasks_move_int(t, k, (int64_t)d) == 0)
                due[k] = now + (d ? d : 1);
        }
        now += tm_rand_(&rng) % 300;
        int before = R.n;
        tw_tasks_advance(t, now);
        for (int i = before; i < R.n; i++) {
            CHECK_EQ_U64(R.deadline[i], due[R.key[i]]);
            CHECK_EQ_U64(R.now[i], due[R.key[i]]);
            CHECK(R.deadline[i] <= now);
            if (i > before)
                CHECK(R.deadline[i] >= R.deadline[i - 1]); /* order */
        }
    }
    CHECK_EQ_INT(R.n, 512);
    tw_tasks_free(t);
}

/* go-zero: a move whose old and new slots straddle the wheel's wrap fires a
 * revolution early or late. Our "wraps" are the level boundaries (every 64,
 * 4096, 262144 ticks): move across each of them, both ways, from times on
 * both sides of them. Every moved task runs exactly at now + delay. */
static void test_move_across_wrap(void)
{
    static const uint64_t bounds[] = {64, 4096, 262144, UINT64_C(1) << 24};
    int cases = 0;
    for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
        for (uint64_t back = 1; back <= 5; back += 2) {
            uint64_t start = bounds[b] - back; /* just before the wrap */
            static const int64_t first[] = {1, 3, 10, 70, 5000};
            static const int64_t second[] = {1, 2, 6, 63, 64, 65, 4095, 4097, 300000};
            for (size_t i = 0; i < 5; i++) {
                for (size_t j = 0; j < 9; j++) {
                    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, start);
                    tw_tasks_set_int(t, 1, NULL, first[i]);
                    tw_tasks_advance(t, start + (uint64_t)back); /* cross or reach the wrap */
                    uint64_t at = tw_tasks_now(t);
                    if (R.n == 0) {
                        CHECK_EQ_INT(tw_tasks_move_int(t, 1, second[j]), 0);
                        uint64_t want = at + (uint64_t)second[j];
                        tw_tasks_advance(t, want - 1);
                        CHECK_EQ_INT(R.n, 0);
                        tw_tasks_advance(t, want);
                        CHECK_EQ_INT(R.n, 1);
                        CHECK_EQ_U64(R.deadline[0], want);
                        tw_tasks_advance(t, want + 3 * bounds[b]); /* and not again */
                        CHECK_EQ_INT(R.n, 1);
                        cases++;
                    }
                    tw_tasks_free(t);
                }
            }
        }
    }
    CHECK(cases > 100);
}

/* A delay below one tick (0) is due at the next tick and runs exactly once;
 * go-zero's move with such a delay ran the task at once and left it armed. */
static void test_delay_below_one_tick(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 50);
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, NULL, 0), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 50), 0); /* not now */
    CHECK_EQ_INT(tw_tasks_advance(t, 51), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 500), 0);
    CHECK_EQ_INT(R.n, 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, 2, NULL, 100), 1);
    CHECK_EQ_INT(tw_tasks_move_int(t, 2, 0), 0);
    CHECK_EQ_INT(R.n, 1); /* move does not run it at once */
    CHECK_EQ_INT(tw_tasks_advance(t, 501), 1);
    CHECK_EQ_U64(R.deadline[1], 501);
    CHECK_EQ_INT(tw_tasks_advance(t, 10000), 0); /* nor again later */
    CHECK_EQ_INT(R.n, 2);
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    tw_tasks_free(t);
}

static void test_negative_delay(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_BYTES, 0);
    CHECK_EQ_INT(tw_tasks_set(t, "a", 1, NULL, -1), TW_EINVAL);
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    CHECK_EQ_INT(tw_tasks_set(t, "a", 1, (void *)1, 10), 1);
    CHECK_EQ_INT(tw_tasks_set(t, "a", 1, (void *)2, INT64_MIN), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_move(t, "a", 1, -5), TW_EINVAL);
    void *v;
    uint64_t d;
    CHECK_EQ_INT(tw_tasks_get(t, "a", 1, &v, &d), 0); /* unchanged */
    CHECK_EQ_PTR(v, (void *)1);
    CHECK_EQ_U64(d, 10);
    tw_tasks_free(t);
}

static void test_order(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    for (uint64_t k = 0; k < 1000; k++)
        tw_tasks_set_int(t, k, NULL, (int64_t)((k * 7919) % 100000));
    CHECK_EQ_INT(tw_tasks_advance(t, 200000), 1000);
    for (int i = 1; i < R.n; i++)
        CHECK(R.deadline[i - 1] <= R.deadline[i]);
    tw_tasks_free(t);
}

/* ---- re-entrancy ------------------------------------------------------------------ */

static void reentrant_hook(struct rec *r, const struct tw_task *task)
{
    struct tw_tasks *t = r->t;
    CHECK_EQ_INT(tw_tasks_advance(t, 1000), TW_EBUSY);
    CHECK_EQ_INT(tw_tasks_free(t), TW_EBUSY); /* the advance still uses t */
    CHECK_EQ_INT(tw_tasks_get_int(t, task->key_int, NULL, NULL), TW_ENOENT); /* gone already */
    switch (task->key_int) {
    case 1: /* re-arm itself (a periodic task) up to 3 times */
        if (r->hook_state++ < 2)
            CHECK_EQ_INT(tw_tasks_set_int(t, 1, task->value, 10), 1);
        break;
    case 2: /* remove 3, due at the same tick: it must not run */
        CHECK_EQ_INT(tw_tasks_remove_int(t, 3, NULL), 0);
        CHECK_EQ_INT(tw_tasks_move_int(t, 4, 1), 0); /* and pull 4 in */
        CHECK_EQ_INT(tw_tasks_move_int(t, 5, 500), 0); /* push 5 out */
        break;
    case 6: /* drain from execute: takes everything pending now */
        CHECK_EQ_INT(tw_tasks_drain(t, NULL, NULL) >= 0, 1);
        break;
    default:
        break;
    }
}

static void test_reentrant_execute(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    R.hook = reentrant_hook;
    tw_tasks_set_int(t, 1, (void *)1, 10);
    tw_tasks_set_int(t, 2, (void *)2, 20);
    tw_tasks_set_int(t, 3, (void *)3, 20);
    tw_tasks_set_int(t, 4, (void *)4, 300);
    tw_tasks_set_int(t, 5, (void *)5, 25);
    CHECK_EQ_INT(tw_tasks_advance(t, 21), 4); /* 1 at 10, 1 again and 2 at 20, 4 moved to 21 */
    CHECK_EQ_INT(tw_tasks_advance(t, 21), 0);
    int fired[8] = {0};
    for (int i = 0; i < R.n; i++)
        fired[R.key[i]]++;
    CHECK_EQ_INT(fired[3], 0);
    CHECK_EQ_INT(fired[2], 1);
    CHECK_EQ_INT(fired[1], 2);
    CHECK_EQ_INT(fired[4], 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 100), 1); /* 1 at 30, the third time */
    CHECK_EQ_INT(tw_tasks_advance(t, 519), 0); /* 5 moved to 20 + 500 */
    CHECK_EQ_INT(tw_tasks_advance(t, 520), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 10000), 0);
    /* A drain from execute: 6 runs and drains 7 and 8 (run by execute). */
    R.n = 0;
    tw_tasks_set_int(t, 6, NULL, 5);
    tw_tasks_set_int(t, 7, NULL, 50);
    tw_tasks_set_int(t, 8, NULL, 60);
    CHECK_EQ_INT(tw_tasks_advance(t, 10005), 1);
    CHECK_EQ_INT(R.n, 3);
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    CHECK_EQ_INT(tw_tasks_advance(t, 20000), 0);
    tw_tasks_free(t);
}

/* ---- drain ------------------------------------------------------------------------- */

struct drain_ctx {
    struct tw_tasks *t;
    int calls;
    int seen[16];
};

static void drain_fn(void *ctx, const struct tw_task *task)
{
    struct drain_ctx *d = ctx;
    d->calls++;
    d->seen[task->key_int]++;
    CHECK_EQ_INT(tw_tasks_get_int(d->t, task->key_int, NULL, NULL), TW_ENOENT);
    /* Calling back in (go-zero deadlocks here): set, move, remove. */
    if (task->key_int == 1)
        CHECK_EQ_INT(tw_tasks_set_int(d->t, 1, (void *)100, 5), 1); /* a new task */
    if (task->key_int == 2) {
        CHECK_EQ_INT(tw_tasks_remove_int(d->t, 3, NULL), TW_ENOENT); /* drained too */
        CHECK_EQ_INT(tw_tasks_advance(d->t, 1u << 30), TW_EBUSY); /* as from execute */
        CHECK_EQ_INT(tw_tasks_free(d->t), TW_EBUSY);
    }
    if (task->key_int == 4) {
        CHECK_EQ_INT(tw_tasks_set_int(d->t, 9, NULL, 5), 1);
        CHECK_EQ_INT(tw_tasks_move_int(d->t, 9, 7), 0);
        CHECK_EQ_INT(tw_tasks_remove_int(d->t, 9, NULL), 0);
    }
}

static void test_drain(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    struct drain_ctx d = {.t = t};
    CHECK_EQ_INT(tw_tasks_drain(NULL, drain_fn, &d), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_drain(t, drain_fn, &d), 0); /* empty */
    for (uint64_t k = 1; k <= 5; k++)
        tw_tasks_set_int(t, k, (void *)k, (int64_t)(k * 1000));
    CHECK_EQ_INT(tw_tasks_drain(t, drain_fn, &d), 5);
    CHECK_EQ_INT(d.calls, 5);
    for (int k = 1; k <= 5; k++)
        CHECK_EQ_INT(d.seen[k], 1);
    CHECK_EQ_U64(tw_tasks_pending(t), 1); /* only fn's new key 1 */
    CHECK_EQ_INT(tw_tasks_advance(t, 100000), 1);
    CHECK_EQ_INT(R.n, 1);
    CHECK_EQ_U64(R.value[0], 100);
    /* Drain then set: no stale key (go-zero bug): the key fires normally. */
    tw_tasks_set_int(t, 2, (void *)2, 10);
    CHECK_EQ_INT(tw_tasks_drain(t, drain_fn, &d), 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, 2, (void *)22, 10), 1);
    CHECK_EQ_INT(tw_tasks_move_int(t, 2, 20), 0);
    CHECK_EQ_INT(tw_tasks_advance(t, 100020), 1);
    CHECK_EQ_U64(R.value[1], 22);
    /* fn NULL: the config's execute runs them. */
    tw_tasks_set_int(t, 3, (void *)3, 10);
    CHECK_EQ_INT(tw_tasks_drain(t, NULL, NULL), 1);
    CHECK_EQ_INT(R.n, 3);
    CHECK_EQ_U64(R.value[2], 3);
    CHECK_EQ_INT(tw_tasks_advance(t, 1000000), 0);
    tw_tasks_free(t);
}

/* ---- limits, memory, allocator ------------------------------------------------------ */

static void test_max_pending(void)
{
    memset(&R, 0, sizeof R);
    struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .key_kind = TW_TASKS_KEY_INT,
                                  .max_pending = 3};
    struct tw_tasks *t;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    R.t = t;
    for (uint64_t k = 0; k < 3; k++)
        CHECK_EQ_INT(tw_tasks_set_int(t, k, NULL, 5), 1);
    CHECK_EQ_INT(tw_tasks_set_int(t, 3, NULL, 5), TW_EFULL);
    CHECK_EQ_INT(tw_tasks_get_int(t, 3, NULL, NULL), TW_ENOENT);
    CHECK_EQ_INT(tw_tasks_set_int(t, 2, (void *)1, 9), 0); /* replacing is fine */
    CHECK_EQ_INT(tw_tasks_remove_int(t, 0, NULL), 0);
    CHECK_EQ_INT(tw_tasks_set_int(t, 3, NULL, 5), 1);
    CHECK_EQ_INT(tw_tasks_advance(t, 5), 2);
    CHECK_EQ_INT(tw_tasks_set_int(t, 4, NULL, 5), 1);
    CHECK_EQ_U64(tw_tasks_pending(t), 2); /* 2 (due at 9) and 4 */
    tw_tasks_free(t);
}

/* Every allocation failure leaves the instance as it was, and nothing leaks:
 * fail the n-th allocation for every n reached by a workload that grows the
 * index and the pool and allocates key blocks. */
static void test_failing_allocator(void)
{
    long total_calls = 0;
    for (long fail_at = 1;; fail_at++) {
        struct counting c = {.fail_at = fail_at};
        struct tw_allocator a = {counting_alloc, &c};
        memset(&R, 0, sizeof R);
        struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a};
        struct tw_tasks *t;
        int rc = tw_tasks_new(&t, &cfg);
        if (rc) {
            CHECK_EQ_INT(rc, TW_ENOMEM);
            CHECK_EQ_INT(c.outstanding, 0);
            continue;
        }
        R.t = t;
        int enomem = 0;
        size_t want = 0;
        char key[32];
        for (int k = 0; k < 1100; k++) { /* longer than 15 bytes: a block each */
            int n = snprintf(key, sizeof key, "connection:%06d", k);
            rc = tw_tasks_set(t, key, (size_t)n, (void *)(uintptr_t)k, 10 + k % 7);
            if (rc == TW_ENOMEM) {
                enomem++;
                CHECK_EQ_INT(tw_tasks_get(t, key, (size_t)n, NULL, NULL), TW_ENOENT);
            } else {
                CHECK_EQ_INT(rc, 1);
                want++;
            }
            CHECK_EQ_U64(tw_tasks_pending(t), want);
        }
        CHECK(enomem <= 1);
        /* Everything that was accepted fires, once. */
        CHECK_EQ_INT(tw_tasks_advance(t, 100), (int64_t)want);
        total_calls = c.calls;
        tw_tasks_free(t);
        CHECK_EQ_INT(c.outstanding, 0);
        if (fail_at > c.calls)
            break; /* the failure point is past the last allocation */
    }
    CHECK(total_calls > 1100);
    /* An allocator that always fails: sets fail cleanly. */
    struct counting c = {0};
    struct tw_allocator a = {counting_alloc, &c};
    struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a};
    struct tw_tasks *t;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    c.fail_all = 1;
    CHECK_EQ_INT(tw_tasks_set(t, "x", 1, NULL, 1), TW_ENOMEM);
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    CHECK_EQ_INT(tw_tasks_remove(t, "x", 1, NULL), TW_ENOENT);
    c.fail_all = 0;
    CHECK_EQ_INT(tw_tasks_set(t, "x", 1, NULL, 1), 1);
    tw_tasks_free(t);
    CHECK_EQ_INT(c.outstanding, 0);
}

/* tw_tasks_drain allocates: after emptying the index it shrinks it (a new,
 * smaller index) and compacts the pool (a bitmap of the entries in use).
 * Both keep going when that allocation fails (the larger index stays; the
 * free list is walked instead), so drain still hands every task to fn, once,
 * and returns their count: checked with each of drain's allocations failing
 * in turn, and with all of them failing; the instance works afterwards and
 * nothing leaks. (tasks.h used to say drain allocates nothing.) */
enum { DRAIN_N = 20000 };
struct drain_seen {
    unsigned char seen[DRAIN_N];
    int calls, bad;
};

static void drain_seen_fn(void *ctx, const struct tw_task *task)
{
    struct drain_seen *d = ctx;
    d->calls++;
    uint64_t k = (uintptr_t)task->value; /* the value is the key's number */
    if (k >= DRAIN_N || d->seen[k]++)
        d->bad++;
}

static void test_drain_failing_allocator(void)
{
    static struct drain_seen d;
    long drain_calls = 0;
    /* mode -1: nothing fails (counts drain's allocations); 0: every one
     * fails; k >= 1: the k-th fails */
    for (long mode = -1; mode <= drain_calls; mode++) {
        struct counting c = {0};
        struct tw_allocator a = {counting_alloc, &c};
        memset(&R, 0, sizeof R);
        struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a};
        struct tw_tasks *t;
        CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
        char key[40];
        for (int k = 0; k < DRAIN_N; k++) { /* odd keys long enough for a block */
            int n = snprintf(key, sizeof key, k % 2 ? "connection-%d-of-many" : "c:%d", k);
            CHECK_EQ_INT(tw_tasks_set(t, key, (size_t)n, (void *)(uintptr_t)k, 1 + k % 5000), 1);
        }
        struct tw_tasks_stats before, after;
        tw_tasks_stats(t, &before);
        long calls = c.calls;
        if (mode == 0)
            c.fail_all = 1;
        else if (mode > 0)
            c.fail_at = calls + mode;
        memset(&d, 0, sizeof d);
        CHECK_EQ_INT(tw_tasks_drain(t, drain_seen_fn, &d), DRAIN_N);
        c.fail_all = 0;
        CHECK_EQ_INT(d.calls, DRAIN_N);
        CHECK_EQ_INT(d.bad, 0);
        CHECK_EQ_U64(tw_tasks_pending(t), 0);
        tw_tasks_stats(t, &after);
        if (mode == -1) {
            drain_calls = c.calls - calls;
            CHECK(drain_calls >= 2); /* the smaller index and the bitmap */
            CHECK(after.index_slots < before.index_slots);
            CHECK(after.pool_entries < before.pool_entries);
        }
        if (mode == 0) /* nothing to shrink into: the index stays as it was */
            CHECK_EQ_U64(after.index_slots, before.index_slots);
        CHECK(after.pool_entries < before.pool_entries); /* compacted all the same */
        CHECK_EQ_INT(c.outstanding, (int64_t)after.bytes);
        /* still usable */
        CHECK_EQ_INT(tw_tasks_set(t, "again", 5, (void *)7, 3), 1);
        CHECK_EQ_INT(tw_tasks_advance(t, tw_tasks_now(t) + 3), 1);
        CHECK_EQ_INT(R.n, 1);
        tw_tasks_free(t);
        CHECK_EQ_INT(c.outstanding, 0);
    }
}

/* Memory goes back when tasks leave (by remove, by firing, by drain). */
static void test_memory_returned(void)
{
    struct counting c = {0};
    struct tw_allocator a = {counting_alloc, &c};
    memset(&R, 0, sizeof R);
    struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a};
    struct tw_tasks *t;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    R.t = t;
    struct tw_tasks_stats st;
    tw_tasks_stats(t, &st);
    size_t empty = st.bytes;
    char key[32];
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 50000; k++) { /* odd keys long enough for a block */
            int n = snprintf(key, sizeof key, k % 2 ? "connection-%d-of-many" : "conn:%d", k);
            tw_tasks_set(t, key, (size_t)n, NULL, 1 + k % 1000);
        }
        tw_tasks_stats(t, &st);
        CHECK_EQ_U64(st.pending, 50000);
        CHECK(st.bytes > 50000 * 48 + 25000 * 20);
        CHECK_EQ_INT(c.outstanding, (int64_t)st.bytes);
        if (round == 0) { /* remove them */
            size_t pool = st.pool_entries;
            for (int k = 0; k < 50000; k++) {
                int n = snprintf(key, sizeof key, k % 2 ? "connection-%d-of-many" : "conn:%d", k);
                CHECK_EQ_INT(tw_tasks_remove(t, key, (size_t)n, NULL), 0);
            }
            /* A run of removals moves no entry: the pool is compacted by the
             * next set, advance or drain (here an advance to now). */
            tw_tasks_stats(t, &st);
            CHECK_EQ_U64(st.pool_entries, pool);
            CHECK_EQ_INT(tw_tasks_advance(t, tw_tasks_now(t)), 0);
        } else if (round == 1) { /* let them fire */
            tw_tasks_advance(t, tw_tasks_now(t) + 1000);
        } else {
            CHECK_EQ_INT(tw_tasks_drain(t, NULL, NULL), 50000);
        }
        tw_tasks_stats(t, &st);
        CHECK_EQ_U64(st.pending, 0);
        /* Back to at most one chunk of entries and a small index. */
        CHECK(st.pool_entries <= TW_TASKS_CHUNK);
        CHECK(st.index_slots <= 64);
        CHECK(st.bytes <= empty + TW_TASKS_CHUNK * (56 + TW_NODE_DEBUG_BYTES) + 1024);
    }
    tw_tasks_free(t);
    CHECK_EQ_INT(c.outstanding, 0);
}

/* Compaction moves tasks between entries: they must still fire exactly. */
static void test_compaction_keeps_tasks(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    for (uint64_t k = 0; k < 20000; k++)
        tw_tasks_set_int(t, k, (void *)(uintptr_t)k, (int64_t)(10 + k % 5000));
    for (uint64_t k = 0; k < 20000; k++) /* keep every 10th, from all chunks */
        if (k % 10)
            tw_tasks_remove_int(t, k, NULL);
    struct tw_tasks_stats st;
    tw_tasks_stats(t, &st);
    CHECK_EQ_U64(st.pending, 2000);
    CHECK(st.pool_entries >= 20000); /* removals alone move nothing */
    /* The next set compacts (a new key, removed again). */
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, NULL, 10), 1);
    CHECK_EQ_INT(tw_tasks_remove_int(t, 1, NULL), 0);
    tw_tasks_stats(t, &st);
    CHECK(st.pool_entries <= 4 * 2000 + TW_TASKS_CHUNK); /* 20 chunks before */
    for (uint64_t k = 0; k < 20000; k += 10) {
        void *v = NULL;
        uint64_t d = 0;
        CHECK_EQ_INT(tw_tasks_get_int(t, k, &v, &d), 0);
        CHECK_EQ_U64((uintptr_t)v, k);
        CHECK_EQ_U64(d, 10 + k % 5000);
    }
    CHECK_EQ_INT(tw_tasks_advance(t, 10000), 2000);
    for (int i = 0; i < R.n && i < MAXREC; i++)
        CHECK_EQ_U64(R.deadline[i], 10 + R.key[i] % 5000);
    tw_tasks_free(t);
}

/* A big pool (src/tasks/tasks.c, "pool"): past 39 chunks of 1024 entries the pool
 * grows by groups of 39 chunks (one 2 MB block). Failing an allocation (the
 * first group's, every 16th, each of the last ones) of a workload that grows
 * into a group, shrinks (compaction frees the group) and grows again leaves
 * the instance as it was, and nothing leaks;
 * the default allocator (mappings turned into huge pages) runs the same. */
static void test_big_pool(void)
{
    enum { N = 45000 };
    long calls = 0;
    for (long fail_at = -1;; fail_at++) {
        /* -1: fail the first group (the only request of 1 MB or more);
         * then every 16th call, and the last calls one by one. */
        struct counting c = {.fail_at = fail_at < 0 ? 0 : fail_at,
                             .fail_big = fail_at < 0 ? (size_t)1 << 20 : 0};
        struct tw_allocator a = {counting_alloc, &c};
        memset(&R, 0, sizeof R);
        struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .key_kind = TW_TASKS_KEY_INT,
                                      .allocator = &a};
        struct tw_tasks *t;
        if (tw_tasks_new(&t, &cfg)) {
            CHECK_EQ_INT(c.outstanding, 0);
            continue;
        }
        R.t = t;
        size_t want = 0;
        int enomem = 0;
        for (int phase = 0; phase < 2; phase++) {
            for (uint64_t k = 0; k < N; k++) {
                int rc = tw_tasks_set_int(t, k, NULL, 1000 + (int64_t)(k % 5000));
                if (rc == TW_ENOMEM) {
                    enomem++;
                    CHECK_EQ_INT(tw_tasks_get_int(t, k, NULL, NULL), TW_ENOENT);
                } else {
                    CHECK(rc == 0 || rc == 1);
                    want += rc == 1;
                }
            }
            CHECK_EQ_U64(tw_tasks_pending(t), want);
            if (phase == 0) { /* keep every 16th: the pool compacts below one group */
                struct tw_tasks_stats before, after;
                tw_tasks_stats(t, &before);
                for (uint64_t k = 0; k < N; k++)
                    if (k % 16 && tw_tasks_remove_int(t, k, NULL) == 0)
                        want--;
                CHECK_EQ_INT(tw_tasks_advance(t, tw_tasks_now(t)), 0); /* compacts */
                tw_tasks_stats(t, &after);
                CHECK_EQ_U64(tw_tasks_pending(t), want);
                CHECK(after.pool_entries < before.pool_entries / 4);
            }
        }
        CHECK(enomem <= 2);
        if (fail_at < 0)
            CHECK_EQ_INT(enomem, 1);
        CHECK_EQ_INT(tw_tasks_advance(t, 10000), (int64_t)want);
        tw_tasks_free(t);
        CHECK_EQ_INT(c.outstanding, 0);
        if (fail_at == 0)
            calls = c.calls;
        else if (fail_at > calls)
            break;
        if (fail_at > 0 && fail_at + 10 < calls)
            fail_at += 15;
    }
    CHECK(calls > 60);
    /* The default allocator: no allocator in the configuration. */
    memset(&R, 0, sizeof R);
    struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .key_kind = TW_TASKS_KEY_INT};
    struct tw_tasks *t;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    R.t = t;
    for (int round = 0; round < 2; round++) {
        for (uint64_t k = 0; k < N; k++)
            CHECK_EQ_INT(tw_tasks_set_int(t, k, (void *)(uintptr_t)(k + 1), 100 + (int64_t)k), 1);
        for (uint64_t k = 0; k < N; k += 7) {
            void *v = NULL;
            CHECK_EQ_INT(tw_tasks_get_int(t, k, &v, NULL), 0);
            CHECK_EQ_PTR(v, (void *)(uintptr_t)(k + 1));
        }
        for (uint64_t k = 0; k < N; k++)
            if (k % 16)
                CHECK_EQ_INT(tw_tasks_remove_int(t, k, NULL), 0);
        CHECK_EQ_INT(tw_tasks_drain(t, NULL, NULL), (int64_t)((N + 15) / 16));
    }
    tw_tasks_free(t);
}

/* config.capacity: the index is made for that many tasks at once (a fill up
 * to it never rehashes), neither the index nor the pool shrinks below it,
 * tasks behave as without it, and a hint that cannot be allocated fails
 * tw_tasks_new cleanly. */
static void test_capacity(void)
{
    enum { HINT = 5000, MORE = 20000 };
    for (int kind = 0; kind < 2; kind++) {
        struct counting c = {0};
        struct tw_allocator a = {counting_alloc, &c};
        memset(&R, 0, sizeof R);
        struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a,
                                      .key_kind = kind ? TW_TASKS_KEY_INT : TW_TASKS_KEY_BYTES,
                                      .capacity = HINT};
        struct tw_tasks *t;
        CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
        R.t = t;
        struct tw_tasks_stats st0, st;
        tw_tasks_stats(t, &st0);
        CHECK(st0.index_slots >= (size_t)HINT * 5 / 4 + 1); /* HINT keys stay under 0.8 */
        char key[32];
        for (int round = 0; round < 2; round++) {
            int upto = round ? MORE : HINT;
            for (int k = 0; k < upto; k++) {
                int n = snprintf(key, sizeof key, "k%d", k);
                int rc = kind ? tw_tasks_set_int(t, (uint64_t)k, (void *)(uintptr_t)(k + 1), 10)
                              : tw_tasks_set(t, key, (size_t)n, (void *)(uintptr_t)(k + 1), 10);
                CHECK_EQ_INT(rc, 1);
            }
            tw_tasks_stats(t, &st);
            CHECK_EQ_U64(st.pending, (uint64_t)upto);
            if (round == 0) /* filled up to the hint: never rehashed */
                CHECK_EQ_U64(st.index_slots, st0.index_slots);
            else
                CHECK(st.index_slots > st0.index_slots);
            for (int k = 0; k < upto; k++) {
                int n = snprintf(key, sizeof key, "k%d", k);
                void *v = NULL;
                int rc = kind ? tw_tasks_remove_int(t, (uint64_t)k, &v)
                              : tw_tasks_remove(t, key, (size_t)n, &v);
                CHECK_EQ_INT(rc, 0);
                CHECK_EQ_PTR(v, (void *)(uintptr_t)(k + 1));
            }
            CHECK_EQ_INT(tw_tasks_drain(t, NULL, NULL), 0); /* compacts (nothing to drain) */
            tw_tasks_stats(t, &st);
            CHECK_EQ_U64(st.pending, 0);
            CHECK_EQ_U64(st.index_slots, st0.index_slots); /* shrunk back to the floor */
            CHECK(st.pool_entries >= HINT);                 /* kept for HINT tasks */
            CHECK(st.pool_entries < MORE);                  /* the rest returned */
        }
        /* Tasks still fire as usual. */
        for (uint64_t k = 0; k < 3; k++) {
            int rc = kind ? tw_tasks_set_int(t, k, NULL, 5)
                          : tw_tasks_set(t, "abcd", 2 + k, NULL, 5);
            CHECK_EQ_INT(rc, 1);
        }
        CHECK_EQ_INT(tw_tasks_advance(t, 5), 3);
        CHECK_EQ_INT(R.n, 3);
        tw_tasks_free(t);
        CHECK_EQ_INT(c.outstanding, 0);
    }
    /* Edge cases: a hint of 1, and hints too large to allocate (clamped to
     * 2^31 - 1 tasks, whose index the allocator refuses): TW_ENOMEM, *out
     * NULL, nothing held. Every allocation of a hinted tw_tasks_new failing
     * in turn leaves nothing either. */
    static const size_t hints[] = {1, (size_t)1 << 31, SIZE_MAX};
    for (size_t i = 0; i < 3; i++) {
        struct counting c = {.fail_big = (size_t)64 << 20};
        struct tw_allocator a = {counting_alloc, &c};
        struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a,
                                      .key_kind = TW_TASKS_KEY_INT, .capacity = hints[i]};
        struct tw_tasks *t = (struct tw_tasks *)&c; /* must become NULL on failure */
        int rc = tw_tasks_new(&t, &cfg);
        if (i == 0) {
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_INT(tw_tasks_set_int(t, 1, NULL, 1), 1);
            CHECK_EQ_INT(tw_tasks_set_int(t, 2, NULL, 1), 1);
            CHECK_EQ_INT(tw_tasks_remove_int(t, 1, NULL), 0);
            tw_tasks_free(t);
        } else {
            CHECK_EQ_INT(rc, TW_ENOMEM);
            CHECK(t == NULL);
        }
        CHECK_EQ_INT(c.outstanding, 0);
    }
    for (long fail_at = 1; fail_at < 4; fail_at++) {
        struct counting c = {.fail_at = fail_at};
        struct tw_allocator a = {counting_alloc, &c};
        struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a,
                                      .capacity = 100000};
        struct tw_tasks *t;
        int rc = tw_tasks_new(&t, &cfg);
        if (rc == 0)
            tw_tasks_free(t);
        else
            CHECK_EQ_INT(rc, TW_ENOMEM);
        CHECK_EQ_INT(c.outstanding, 0);
    }
}

/* <= 64 bytes per task (entry + index + pool slack) for integer keys, plus the
 * key block for string keys (TWHEEL_DEBUG builds: 8 more, their nodes'). */
static void test_bytes_per_task(void)
{
    static const size_t sizes[] = {10000, 100000, 300000};
    for (size_t i = 0; i < 3; i++) {
        struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
        struct tw_tasks_stats st;
        tw_tasks_stats(t, &st);
        size_t empty = st.bytes;
        for (uint64_t k = 0; k < sizes[i]; k++)
            tw_tasks_set_int(t, k, NULL, (int64_t)(k % 100000));
        tw_tasks_stats(t, &st);
        double per = (double)(st.bytes - empty) / (double)sizes[i];
        printf("  int keys, %zu tasks: %.1f bytes per task (index %zu slots, max probe %zu)\n",
               sizes[i], per, st.index_slots, st.max_probe);
        CHECK(per <= 64.0 + (double)TW_NODE_DEBUG_BYTES); /* debug builds: bigger nodes */
        tw_tasks_free(t);
    }
}

/* twheel/tasks.h gives an empty instance as one allocation of about 31 KB
 * (twheel/runner.h counts it once per shard): pinned here under 32 KB, so
 * that a bigger wheel or instance fails this test instead of leaving those
 * figures stale. */
static void test_instance_bytes(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    struct tw_tasks_stats st;
    tw_tasks_stats(t, &st);
    printf("  empty instance: %zu bytes\n", st.bytes);
    CHECK(st.bytes <= 32 * 1024);
    CHECK(st.bytes >= 30 * 1024); /* "about 31 KB": a smaller one is news too */
    tw_tasks_free(t);
}

/* Hash flooding: keys that all land in one slot under a known seed (what an
 * attacker who knew the seed would send) spread out under another seed. */
static void test_hash_flooding(void)
{
    const uint64_t seed_a[2] = {0x1234, 0x5678};
    enum { N = 1500 };
    static uint64_t ikeys[N];
    static char skeys[N][24];
    static size_t slen[N];
    /* Keys whose hash has the same top 12 bits: one home slot (or two) for
     * any index of up to 4096 slots. */
    int n = 0;
    for (uint64_t k = 0; n < N; k++)
        if (tw_hash_int(k, seed_a[0], seed_a[1]) >> 52 == 0xabc)
            ikeys[n++] = k;
    n = 0;
    for (uint64_t k = 0; n < N; k++) {
        char buf[24];
        int len = snprintf(buf, sizeof buf, "conn:%llu", (unsigned long long)k);
        if (tw_siphash13(buf, (size_t)len, seed_a[0], seed_a[1]) >> 52 == 0xabc) {
            memcpy(skeys[n], buf, (size_t)len);
            slen[n++] = (size_t)len;
        }
    }
    for (int kind = 0; kind < 2; kind++) {
        size_t probe[2];
        for (int s = 0; s < 2; s++) {
            memset(&R, 0, sizeof R);
            struct tw_tasks_config cfg = {.execute = record, .ctx = &R,
                                          .key_kind = kind ? TW_TASKS_KEY_INT : TW_TASKS_KEY_BYTES};
            if (s == 0) {
                cfg.seed[0] = seed_a[0];
                cfg.seed[1] = seed_a[1];
            } /* else: a random seed */
            struct tw_tasks *t;
            CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
            for (int i = 0; i < N; i++) {
                if (kind)
                    tw_tasks_set_int(t, ikeys[i], NULL, 5);
                else
                    tw_tasks_set(t, skeys[i], slen[i], NULL, 5);
            }
            struct tw_tasks_stats st;
            tw_tasks_stats(t, &st);
            probe[s] = st.max_probe;
            CHECK_EQ_U64(st.pending, N);
            tw_tasks_free(t);
        }
        printf("  %s keys: longest probe %zu with the attacked seed, %zu with a random one\n",
               kind ? "int" : "string", probe[0], probe[1]);
        CHECK(probe[0] > N / 2); /* the attack works when the seed is known */
        CHECK(probe[1] < 64);    /* and not with the instance's own seed */
    }
}

/* Batched calls: argument errors, an empty batch, and a bad item that fails
 * alone (the model test checks results item by item at random). */
static void test_batched_arguments(void)
{
    struct tw_tasks *t = new_tasks(&R, TW_TASKS_KEY_INT, 0);
    struct tw_tasks_item it[3];
    memset(it, 0, sizeof it);
    CHECK_EQ_INT(tw_tasks_set_many(NULL, it, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_move_many(t, NULL, 1), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_remove_many(t, NULL, 0), 0);
    CHECK_EQ_INT(tw_tasks_get_many(t, it, 0), 0);
    it[0].key_int = 1;
    it[0].delay_ticks = 5;
    it[1].key_int = 2;
    it[1].delay_ticks = -1; /* fails alone */
    it[2].key_int = 1; /* the same key again: replaced */
    it[2].delay_ticks = 9;
    CHECK_EQ_INT(tw_tasks_set_many(t, it, 3), 2);
    CHECK_EQ_INT(it[0].result, 1);
    CHECK_EQ_INT(it[1].result, TW_EINVAL);
    CHECK_EQ_INT(it[2].result, 0);
    CHECK_EQ_INT(tw_tasks_get_many(t, it, 3), 2);
    CHECK_EQ_U64(it[0].deadline, 9);
    CHECK_EQ_INT(it[1].result, TW_ENOENT);
    CHECK_EQ_INT(tw_tasks_remove_many(t, it, 3), 1);
    CHECK_EQ_INT(it[2].result, TW_ENOENT);
    CHECK_EQ_INT((int)tw_tasks_pending(t), 0);
    tw_tasks_free(t);
}

/* Key j of test_batched_growth: "g<j>", every 40th one longer than 15
 * bytes (a key block: one more allocation that can fail). */
static size_t growth_key(char *buf, size_t size, int j)
{
    return (size_t)snprintf(buf, size, j % 40 ? "g%d" : "long-key-number-%d", j);
}

/* Batched calls through the index's growth, the pool's growth and the
 * compaction, with every allocation failing in turn: one set_many of 3000
 * items from an empty instance (the index rehashes about ten times and the
 * pool grows by chunks mid-batch; the last 500 items repeat keys, some
 * twice in the batch), then get_many, then remove_many of keys present,
 * absent and repeated; then most keys removed, one set (the pool compacts,
 * relocating tasks) and a second set_many that grows the index again over
 * the relocated ones. Each item's result is the single call's (an item
 * that fails with TW_ENOMEM changes nothing, the others go on), every key
 * stays findable through every rehash, and nothing leaks. */
static void test_batched_growth(void)
{
    enum { N = 3000, KEYS = 2500 };
    static struct tw_tasks_item it[N];
    static char kb[N][32];
    static int present[N];
    static uintptr_t value[N];
    for (int kind = 0; kind < 2; kind++) {
        long last_calls = 0;
        for (long fail_at = 1;; fail_at++) {
            struct counting c = {.fail_at = fail_at};
            struct tw_allocator a = {counting_alloc, &c};
            memset(&R, 0, sizeof R);
            struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .allocator = &a,
                                          .key_kind = kind ? TW_TASKS_KEY_INT
                                                           : TW_TASKS_KEY_BYTES};
            struct tw_tasks *t;
            int rc = tw_tasks_new(&t, &cfg);
            if (rc) {
                CHECK_EQ_INT(rc, TW_ENOMEM);
                CHECK_EQ_INT(c.outstanding, 0);
                continue;
            }
            R.t = t;
            memset(present, 0, sizeof present);
            /* Items 0..2499: keys 0..2499; 2500..2999 repeat keys, 2500..2749
             * twice over (j % 250 * 10 and j % 250 * 10 + 5 hit the same ones). */
            for (int j = 0; j < N; j++) {
                int key = j < KEYS ? j : (j % 250) * 10;
                it[j] = (struct tw_tasks_item){.key_int = (uint64_t)key * 977,
                                               .value = (void *)(uintptr_t)(j + 1),
                                               .delay_ticks = 100 + j % 50};
                it[j].key_len = growth_key(kb[j], sizeof kb[j], key);
                it[j].key = kb[j];
            }
            int64_t ok = tw_tasks_set_many(t, it, N);
            int64_t want_ok = 0, enomem = 0, live = 0;
            for (int j = 0; j < N; j++) {
                int key = j < KEYS ? j : (j % 250) * 10;
                if (it[j].result == TW_ENOMEM) {
                    enomem++;
                    continue;
                }
                CHECK_EQ_INT(it[j].result, present[key] ? 0 : 1);
                live += !present[key];
                present[key] = 1;
                value[key] = (uintptr_t)(j + 1);
                want_ok++;
            }
            CHECK_EQ_INT(ok, want_ok);
            CHECK(enomem <= 1);
            CHECK_EQ_U64(tw_tasks_pending(t), (uint64_t)live);
            /* get_many: every key, present or not (items 0..2499 are keys 0..2499). */
            for (int j = 0; j < KEYS; j++)
                it[j].value = NULL;
            CHECK_EQ_INT(tw_tasks_get_many(t, it, KEYS), live);
            for (int j = 0; j < KEYS; j++) {
                CHECK_EQ_INT(it[j].result, present[j] ? 0 : TW_ENOENT);
                if (present[j])
                    CHECK_EQ_PTR(it[j].value, (void *)value[j]);
            }
            struct tw_tasks_stats st;
            tw_tasks_stats(t, &st);
            CHECK_EQ_INT((int64_t)st.bytes, c.outstanding);
            /* remove_many of keys 1000..2999: 2500..2999 never set (absent),
             * and key 1000 once more at the end (removed: absent then). */
            for (int j = 1000; j < N; j++) {
                it[j].key_int = (uint64_t)j * 977;
                it[j].key_len = growth_key(kb[j], sizeof kb[j], j);
            }
            it[N - 1] = it[1000];
            int64_t removed = 0;
            for (int j = 1000; j < KEYS; j++)
                removed += present[j];
            CHECK_EQ_INT(tw_tasks_remove_many(t, it + 1000, N - 1000), removed);
            for (int j = 1000; j < N - 1; j++) {
                CHECK_EQ_INT(it[j].result, j < KEYS && present[j] ? 0 : TW_ENOENT);
                if (j < KEYS && present[j])
                    CHECK_EQ_PTR(it[j].value, (void *)value[j]);
                if (j < KEYS)
                    present[j] = 0;
            }
            CHECK_EQ_INT(it[N - 1].result, TW_ENOENT);
            live -= removed;
            CHECK_EQ_U64(tw_tasks_pending(t), (uint64_t)live);
            /* Most of the rest go; one set compacts the pool (relocating the
             * survivors, keys 0..99), then a set_many grows the index again. */
            for (int j = 100; j < 1000; j++) {
                if (!present[j])
                    continue;
                rc = kind ? tw_tasks_remove_int(t, it[j].key_int, NULL)
                          : tw_tasks_remove(t, it[j].key, it[j].key_len, NULL);
                CHECK_EQ_INT(rc, 0);
                present[j] = 0;
                live--;
            }
            for (int j = 100; j < KEYS; j++) {
                it[j].key_int = (uint64_t)j * 977;
                it[j].key_len = growth_key(kb[j], sizeof kb[j], j);
                it[j].key = kb[j];
                it[j].value = (void *)(uintptr_t)(j + 7);
            }
            ok = tw_tasks_set_many(t, it + 100, KEYS - 100);
            want_ok = 0;
            for (int j = 100; j < KEYS; j++) {
                if (it[j].result == TW_ENOMEM)
                    continue;
                CHECK_EQ_INT(it[j].result, 1);
                present[j] = 1;
                value[j] = (uintptr_t)(j + 7);
                want_ok++;
            }
            CHECK_EQ_INT(ok, want_ok);
            live += want_ok;
            for (int j = 0; j < KEYS; j++) {
                it[j].key_int = (uint64_t)j * 977;
                it[j].key_len = growth_key(kb[j], sizeof kb[j], j);
                it[j].key = kb[j];
            }
            CHECK_EQ_INT(tw_tasks_get_many(t, it, KEYS), live);
            for (int j = 0; j < KEYS; j++) {
                CHECK_EQ_INT(it[j].result, present[j] ? 0 : TW_ENOENT);
                if (present[j])
                    CHECK_EQ_PTR(it[j].value, (void *)value[j]);
            }
            /* Everything left fires once. */
            CHECK_EQ_INT(tw_tasks_advance(t, 1000), live);
            CHECK_EQ_INT(R.n, live);
            last_calls = c.calls;
            tw_tasks_free(t);
            CHECK_EQ_INT(c.outstanding, 0);
            if (fail_at > c.calls)
                break; /* past the last allocation: every one has failed once */
        }
        CHECK(last_calls > 10);
    }
}

/* ---- slack ---------------------------------------------------------------------- */

/* config.slack_shift: every set and move (single and batched) may fire late by
 * delay >> slack_shift, never early; the planned tick is what get and execute
 * report; an explicit *_slack call overrides the instance (0 = exact). */
static void test_slack(void)
{
    struct tw_tasks_config cfg = {.execute = record, .ctx = &R, .key_kind = TW_TASKS_KEY_INT,
                                  .slack_shift = TW_TASKS_SLACK_SHIFT_MAX + 1};
    struct tw_tasks *t = NULL;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), TW_EINVAL);
    CHECK_EQ_PTR(t, NULL);
    memset(&R, 0, sizeof R);
    cfg.slack_shift = 3;
    cfg.now = 1000;
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    R.t = t;
    const uint64_t d = 30000, s = d >> 3;
    uint64_t dl = 0;
    CHECK_EQ_INT(tw_tasks_set_int(t, 1, (void *)1, (int64_t)d), 1);
    CHECK_EQ_INT(tw_tasks_get_int(t, 1, NULL, &dl), 0);
    CHECK(dl >= 1000 + d && dl <= 1000 + d + s);
    CHECK(dl > 1000 + d); /* 31000 is on no level-2 boundary: planned later, on one (32768) */
    /* Explicit slack 0 overrides the instance: exact. */
    CHECK_EQ_INT(tw_tasks_set_slack_int(t, 2, (void *)2, (int64_t)d, 0), 1);
    CHECK_EQ_INT(tw_tasks_get_int(t, 2, NULL, &dl), 0);
    CHECK_EQ_U64(dl, 1000 + d);
    /* Delay 0: the window starts at the next tick; slack of 0 >> 3 = 0. */
    CHECK_EQ_INT(tw_tasks_set_int(t, 3, (void *)3, 0), 1);
    CHECK_EQ_INT(tw_tasks_get_int(t, 3, NULL, &dl), 0);
    CHECK_EQ_U64(dl, 1001);
    /* Batched: the instance's slack too. */
    struct tw_tasks_item it[2] = {{.key_int = 4, .value = (void *)4, .delay_ticks = (int64_t)d},
                                  {.key_int = 5, .value = (void *)5, .delay_ticks = 100}};
    CHECK_EQ_INT(tw_tasks_set_many(t, it, 2), 2);
    CHECK_EQ_INT(tw_tasks_get_int(t, 4, NULL, &dl), 0);
    CHECK(dl >= 1000 + d && dl <= 1000 + d + s);
    /* Move with an explicit slack; remove as ever. */
    CHECK_EQ_INT(tw_tasks_move_slack_int(t, 5, 5000, 1000), 0);
    CHECK_EQ_INT(tw_tasks_get_int(t, 5, NULL, &dl), 0);
    CHECK(dl >= 6000 && dl <= 7000);
    CHECK_EQ_INT(tw_tasks_remove_int(t, 3, NULL), 0);
    CHECK_EQ_INT(tw_tasks_move_slack_int(t, 3, 5, 1), TW_ENOENT);
    CHECK_EQ_INT(tw_tasks_set_slack_int(t, 6, NULL, -1, 5), TW_EINVAL);
    /* Never early: nothing fires before its deadline; all fire by D + S. */
    CHECK_EQ_INT(tw_tasks_advance(t, 1000 + d - 1), 1); /* key 5 only */
    CHECK_EQ_U64(R.key[0], 5);
    CHECK(R.deadline[0] >= 6000 && R.deadline[0] <= 7000 && R.now[0] == R.deadline[0]);
    CHECK_EQ_INT(tw_tasks_advance(t, 1000 + d + s), 3);
    for (int i = 1; i < 4; i++) {
        CHECK(R.deadline[i] >= 1000 + d && R.deadline[i] <= 1000 + d + s);
        CHECK_EQ_U64(R.now[i], R.deadline[i]);
    }
    CHECK_EQ_U64(tw_tasks_pending(t), 0);
    /* String keys: the same calls. */
    tw_tasks_free(t);
    cfg.key_kind = TW_TASKS_KEY_BYTES;
    memset(&R, 0, sizeof R);
    CHECK_EQ_INT(tw_tasks_new(&t, &cfg), 0);
    R.t = t;
    CHECK_EQ_INT(tw_tasks_set_slack(t, "a", 1, NULL, 100, 50), 1);
    CHECK_EQ_INT(tw_tasks_move_slack(t, "a", 1, 200, 0), 0);
    CHECK_EQ_INT(tw_tasks_get(t, "a", 1, NULL, &dl), 0);
    CHECK_EQ_U64(dl, 1200);
    CHECK_EQ_INT(tw_tasks_move_slack(t, "b", 1, 200, 0), TW_ENOENT);
    CHECK_EQ_INT(tw_tasks_set_slack(t, NULL, 1, NULL, 200, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_tasks_set_slack_int(t, 1, NULL, 200, 0), TW_EINVAL); /* wrong kind */
    tw_tasks_free(t);
}

/* ---- eager re-arm --------------------------------------------------------------- */

/* What an instance fired, for comparing two of them: (tick, key, deadline). */
#define EAGER_MAXF 60000
struct fired {
    struct tw_tasks *t;
    size_t n;
    uint64_t v[EAGER_MAXF][3];
};

static void fired_record(void *ctx, const struct tw_task *task)
{
    struct fired *f = ctx;
    if (f->n < EAGER_MAXF) {
        f->v[f->n][0] = tw_tasks_now(f->t);
        f->v[f->n][1] = task->key_int;
        f->v[f->n][2] = task->deadline;
    }
    f->n++;
}

static int fired_cmp(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* config.eager_rearm changes no observable firing: the same script of sets
 * (new and replacing), moves (earlier and later, across every level of the
 * wheel), removes, batched calls and advances, run on a lazy and on an eager
 * instance (with and without slack_shift, whose slack arms eager leaves
 * alone), gives the same results, the same get answers, and the same fires
 * at the same ticks (compared as sets per tick: tasks due at one tick run
 * in an unspecified order). */
static void test_eager_rearm(void)
{
    static struct fired f[2];
    static const unsigned shifts[] = {0, 3};
    for (size_t si = 0; si < 2; si++) {
        struct tw_tasks *t[2];
        for (int e = 0; e < 2; e++) {
            memset(&f[e], 0, sizeof f[e]);
            struct tw_tasks_config cfg = {.execute = fired_record,
                                          .ctx = &f[e],
                                          .key_kind = TW_TASKS_KEY_INT,
                                          .now = 77,
                                          .slack_shift = shifts[si],
                                          .eager_rearm = e,
                                          .seed = {1, 2}};
            CHECK_EQ_INT(tw_tasks_new(&t[e], &cfg), 0);
            f[e].t = t[e];
        }
        uint64_t rng = 99 + si;
        int mismatches = 0;
        for (int step = 0; step < 40000; step++) {
            uint64_t r = tm_rand_(&rng);
            uint64_t key = r % 2000;
            /* delays from 0 to ~2^22 ticks: every level a re-arm can leave */
            int64_t delay = (int64_t)((r >> 16) % (UINT64_C(1) << ((r >> 40) % 23)));
            int rc[2];
            uint64_t dl[2] = {0, 0};
            for (int e = 0; e < 2; e++) {
                switch ((r >> 8) % 8) {
                case 0:
                case 1:
                    rc[e] = tw_tasks_set_int(t[e], key, (void *)(uintptr_t)step, delay);
                    break;
                case 2:
                case 3:
                case 4:
                    rc[e] = tw_tasks_move_int(t[e], key, delay);
                    break;
                case 5:
                    rc[e] = tw_tasks_remove_int(t[e], key, NULL);
                    break;
                case 6: {
                    struct tw_tasks_item it[4];
                    for (int i = 0; i < 4; i++)
                        it[i] = (struct tw_tasks_item){.key_int = (key + (uint64_t)i * 7) % 2000,
                                                       .delay_ticks = delay + i};
                    rc[e] = (int)((r >> 4) & 1 ? tw_tasks_move_many(t[e], it, 4)
                                               : tw_tasks_set_many(t[e], it, 4));
                    break;
                }
                default:
                    rc[e] = (int)tw_tasks_advance(t[e], tw_tasks_now(t[e]) + (r >> 32) % 3000);
                    break;
                }
                (void)tw_tasks_get_int(t[e], key, NULL, &dl[e]);
            }
            mismatches += rc[0] != rc[1] || dl[0] != dl[1];
        }
        CHECK_EQ_INT(mismatches, 0);
        for (int e = 0; e < 2; e++) /* everything left fires */
            CHECK(tw_tasks_advance(t[e], tw_tasks_now(t[e]) + (UINT64_C(1) << 23)) >= 0);
        CHECK_EQ_U64(f[0].n, f[1].n);
        CHECK(f[0].n > 1000 && f[0].n <= EAGER_MAXF);
        size_t n = f[0].n < EAGER_MAXF ? f[0].n : EAGER_MAXF;
        size_t late = 0;
        for (size_t i = 0; i < n; i++) /* exact: each fires at its (planned) tick */
            late += f[0].v[i][0] != f[0].v[i][2] || f[1].v[i][0] != f[1].v[i][2];
        CHECK_EQ_INT(late, 0);
        qsort(f[0].v, n, sizeof f[0].v[0], fired_cmp);
        qsort(f[1].v, n, sizeof f[1].v[0], fired_cmp);
        CHECK(memcmp(f[0].v, f[1].v, n * sizeof f[0].v[0]) == 0);
        CHECK_EQ_U64(tw_tasks_pending(t[0]) + tw_tasks_pending(t[1]), 0);
        tw_tasks_free(t[0]);
        tw_tasks_free(t[1]);
    }
}

int main(void)
{
    RUN(test_config_errors);
    RUN(test_string_keys);
    RUN(test_key_lengths_around_inline);
    RUN(test_int_keys);
    RUN(test_set_absent_arms);
    RUN(test_set_present_replaces);
    RUN(test_move);
    RUN(test_remove);
    RUN(test_exact_random);
    RUN(test_move_across_wrap);
    RUN(test_delay_below_one_tick);
    RUN(test_negative_delay);
    RUN(test_order);
    RUN(test_reentrant_execute);
    RUN(test_drain);
    RUN(test_max_pending);
    RUN(test_failing_allocator);
    RUN(test_drain_failing_allocator);
    RUN(test_big_pool);
    RUN(test_memory_returned);
    RUN(test_compaction_keeps_tasks);
    RUN(test_bytes_per_task);
    RUN(test_instance_bytes);
    RUN(test_hash_flooding);
    RUN(test_batched_arguments);
    RUN(test_batched_growth);
    RUN(test_slack);
    RUN(test_capacity);
    RUN(test_eager_rearm);
    return test_summary();
}
