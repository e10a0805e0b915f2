/* SPDX-License-Identifier: MIT */
/* Where W2's tick time goes: W2's driver (docs/workloads.md: N connections
 * armed for 30,000 ticks at 0, N/3000 random heartbeats a tick re-arming to
 * now + 30,000, 1% silent from tick 5,000, 60,000 ticks) on the core with
 * lazy re-arms, the tick's CPU time and the timers it moved summed per
 * 1,024-tick stretch (a level-2 walk window), less the clock's own cost.
 * The stretches that move timers are the walks: each line says ns a move.
 * The fires are not checked here (bench_twheel does that).
 *
 * --chase K FRACTION: no wheel; a pointer chase over N 40-byte nodes, a
 * FRACTION of them (picked at random, kept in address order) linked on K
 * chains as the core links a slot's timers, walked side by side with the
 * walk's prefetch and relinked onto other lists as the walk does: what a
 * walk's move costs for that density and that many chains.
 *
 * Usage: w2_walks [N (default 1e6)] [--eager] | w2_walks --chase K FRACTION [N]
 * Output: per stretch that moved timers, its ms, moves and ns a move; the
 * mean tick; or the chase's ns a node. One run: compare medians of several.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "twheel/wheel.h"

#define TICKS 60000u
#define TIMEOUT 30000u
#define STRETCH 1024u
#define STRETCHES (TICKS / STRETCH + 1)

static void on_fire(struct tw_timer *t, void *arg)
{
    (void)t;
    (*(uint64_t *)arg)++;
}

/* The cost of one pair of clock reads, the least of many. */
static uint64_t clock_cost(void)
{
    uint64_t least = UINT64_MAX;
    for (int i = 0; i < 10000; i++) {
        uint64_t t0 = cpu_now_ns(), t1 = cpu_now_ns();
        least = t1 - t0 < least ? t1 - t0 : least;
    }
    return least;
}

static int run_w2(size_t n, int eager)
{
    struct tw_timer *tm = aligned_alloc(64, (n * sizeof *tm + 63) & ~(size_t)63);
    unsigned char *silent = calloc(n, 1);
    struct tw_wheel *w = malloc(sizeof *w);
    if (!tm || !silent || !w) {
        fprintf(stderr, "w2_walks: out of memory\n");
        return 1;
    }
    uint64_t fired = 0, rng = 42, ns[STRETCHES] = {0}, moves[STRETCHES] = {0}, total = 0;
    uint64_t cc = clock_cost();
    tw_wheel_init(w, 0);
    for (size_t i = 0; i < n; i++) {
        tw_timer_init(&tm[i], on_fire, &fired);
        tw_arm(w, &tm[i], TIMEOUT, 0, TW_ARM_IDLE);
    }
    for (uint64_t t = 1; t <= TICKS; t++) {
        uint64_t m0 = tw_wheel_moves(w), t0 = cpu_now_ns();
        tw_wheel_advance(w, t);
        uint64_t dt = cpu_now_ns() - t0;
        dt = dt > cc ? dt - cc : 0;
        ns[t / STRETCH] += dt;
        moves[t / STRETCH] += tw_wheel_moves(w) - m0;
        total += dt;
        if (t == 5000)
            for (size_t k = 0; k < n / 100; k++)
                silent[xorshift64(&rng) % n] = 1;
        size_t beats = (size_t)(t * n / 3000 - (t - 1) * n / 3000);
        for (size_t j = 0; j < beats; j++) {
            size_t id;
            do
                id = (size_t)(xorshift64(&rng) % n);
            while (silent[id]);
            tw_arm(w, &tm[id], t + TIMEOUT, 0, eager ? TW_ARM_EAGER : 0);
        }
    }
    for (unsigned s = 0; s < STRETCHES; s++)
        if (moves[s] >= 1000)
            printf("ticks %5u..%5u: %6.2f ms, %7llu moves, %5.1f ns a move\n", s * STRETCH,
                   s * STRETCH + STRETCH - 1, (double)ns[s] / 1e6, (unsigned long long)moves[s],
                   (double)ns[s] / (double)moves[s]);
    printf("%s, %zu timers: mean tick %.1f ns, %.2f moves a timer, %llu fired\n",
           eager ? "eager" : "lazy", n, (double)total / TICKS,
           (double)tw_wheel_moves(w) / (double)n, (unsigned long long)fired);
    tw_wheel_destroy(w);
    free(w);
    free(silent);
    free(tm);
    return 0;
}

struct cnode {
    struct cnode *next, **pprev;
    uint64_t deadline;
    void *fn, *arg;
};

static int run_chase(unsigned k, double fraction, size_t n)
{
    struct cnode *a = aligned_alloc(64, (n * sizeof *a + 63) & ~(size_t)63);
    struct cnode *head[64] = {0}, *out[TW_WHEEL_CHAINS] = {0};
    size_t big = (size_t)256 << 20; /* out of the caches before the walk */
    char *junk = malloc(big);
    if (!a || !junk || k < 1 || k > 64) {
        fprintf(stderr, "w2_walks: out of memory, or K not in 1..64\n");
        return 1;
    }
    memset(a, 0, n * sizeof *a);
    uint64_t rng = 42, linked = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        if ((double)(xorshift64(&rng) % 1000000) >= fraction * 1e6)
            continue;
        a[i].deadline = i;
        a[i].next = head[linked % k];
        head[linked++ % k] = &a[i];
    }
    memset(junk, 1, big);
    uint64_t t0 = cpu_now_ns();
    unsigned spread = 0;
    for (unsigned live = k; live;) {
        live = 0;
        for (unsigned c = 0; c < k; c++) {
            struct cnode *t = head[c];
            if (!t)
                continue;
            live++;
            head[c] = t->next;
            if (t->next)
                __builtin_prefetch(t->next);
            sum += t->deadline;
            struct cnode **to = &out[spread++ % TW_WHEEL_CHAINS], *first = *to;
            t->next = first;
            *to = t;
            t->pprev = to;
            if (first)
                first->pprev = &t->next;
        }
    }
    uint64_t dt = cpu_now_ns() - t0;
    printf("chase: %u chains, %llu of %zu nodes (%.2f): %.2f ns a node (%llu)\n", k,
           (unsigned long long)linked, n, fraction, linked ? (double)dt / (double)linked : 0.0,
           (unsigned long long)(sum & 1));
    free(junk);
    free(a);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "--chase"))
        return run_chase((unsigned)atoi(argv[2]), atof(argv[3]),
                         argc > 4 ? (size_t)strtoull(argv[4], NULL, 10) : 1000000);
    size_t n = 1000000;
    int eager = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--eager"))
            eager = 1;
        else if (atof(argv[i]) >= 1)
            n = (size_t)atof(argv[i]);
        else {
            fprintf(stderr, "usage: w2_walks [N] [--eager] | w2_walks --chase K FRACTION [N]\n");
            return 2;
        }
    }
    return run_w2(n, eager);
}
