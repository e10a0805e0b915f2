/* SPDX-License-Identifier: MIT */
/* Randomized model test of the core wheel: >= 10^6 random operations per run
 * against the reference in wheel_model.h (delays from 0 to beyond 2^40 and
 * saturating ones, callbacks that arm/cancel/re-arm others and themselves,
 * push and pull expiry), from several starting times, including one just
 * below 2^63 and one near the end of the 64-bit range; and heartbeat runs,
 * whose timers are armed at once, and re-armed, a fixed delay ahead (at
 * level 1 or 2), advanced mostly tick by tick, so that re-arms push many
 * timers back past the few slots they share.
 * Every advance is held to the moves wheel.h allows
 * (tw_wheel_lazy_moves_max plus the descents toward the timers' own
 * deadlines), and every exact lazy arm to TW_WHEEL_REARM_MOVES_MAX (its
 * walk step); the most moves one advance and one arm
 * made are printed per run.
 *
 * Usage: test_wheel_model [ops] [seed]   (defaults: 1200000, fixed seed)
 */
#include <stdio.h>
#include <stdlib.h>

#include "wheel_model.h"

static struct model m; /* large: keep it off the stack */

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 1200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261121;
    const struct {
        uint64_t start;
        size_t timers;
        unsigned callback_ops;
        uint64_t cluster; /* 0, or the delay armings cluster around */
    } runs[] = {
        {0, 64, 0, 0},
        {0, 1000, 2, 0},
        {12345, 3000, 3, 0},
        {(UINT64_C(1) << 63) - 100000, 500, 2, 0},
        {UINT64_MAX - (UINT64_C(1) << 52), 300, 2, 0},
        {0, 4000, 0, 400},
        {777, 4000, 1, 20000},
    };
    size_t nruns = sizeof runs / sizeof runs[0];
    uint64_t total_fires = 0;
    for (size_t k = 0; k < nruns; k++) {
        uint64_t rng = seed * 1000003 + k;
        model_init(&m, runs[k].timers, runs[k].start, model_rand(&rng), runs[k].callback_ops);
        m.cluster = runs[k].cluster;
        uint64_t per_run = ops / nruns;
        if (m.cluster) {
            /* Every timer armed at once (a server's connections after a
             * restart), then heartbeats for as long as it takes them to
             * come round twice: 16 operations a tick. */
            for (size_t id = 0; id < m.n; id++)
                model_op(&m, (uint64_t)2 << 56 | (uint64_t)id << 4); /* op 0: arm */
            per_run = 16 * (2 * m.cluster + 1000);
        }
        for (uint64_t i = 0; i < per_run; i++) {
            model_op(&m, model_rand(&rng));
            if (i % 1024 == 0)
                model_check_all(&m);
        }
        model_check_all(&m);
        /* Drain what is left (saturated deadlines included) to the end. */
        model_advance(&m, UINT64_MAX, 0);
        model_check_all(&m);
        printf("run %zu: start %llu, %zu timers, cluster %llu, %llu fires, %llu moves (at most "
               "%llu in one advance; %llu by lazy arms, at most %llu in one), ends at %llu\n",
               k, (unsigned long long)runs[k].start, m.n, (unsigned long long)runs[k].cluster,
               (unsigned long long)m.total_fires, (unsigned long long)tw_wheel_moves(&m.wheel),
               (unsigned long long)m.most_moves, (unsigned long long)m.rearm_moves,
               (unsigned long long)m.most_rearm, (unsigned long long)m.wheel.now);
        total_fires += m.total_fires;
    }
    printf("%llu operations, %llu fires checked against the model\n", (unsigned long long)ops,
           (unsigned long long)total_fires);
    printf("%zu passed, 0 failed\n", nruns); /* any mismatch aborts before this */
    return 0;
}
