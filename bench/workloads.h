/* SPDX-License-Identifier: MIT */
/* The workloads (workloads.c): one cell = one workload, size, implementation
 * and repetition, run in the calling process. */
#ifndef TWHEEL_BENCH_WORKLOADS_H
#define TWHEEL_BENCH_WORKLOADS_H

#include "bench.h"

#define BENCH_METRICS 7

struct cell_result {
    int ok;                    /* 0: the run was wrong (err says why) */
    double m[BENCH_METRICS];   /* the workload's figures, see main.c */
    double bytes_per_timer;    /* structure bytes / timers */
    double rss_per_timer;      /* peak RSS growth / timers, -1 unknown */
    double moves_per_timer;    /* bench_impl.moves / timers, -1 none */
    double seconds;            /* wall time of the cell */
    char err[240];
};

/* Run workload 1-4 on `im` (NULL: the limit probe) with n timers. `tiny`
 * shrinks what the harness test cannot afford (W4's range). */
void bench_run_cell(int workload, const struct bench_impl *im, size_t n, uint64_t seed, int tiny,
                    struct cell_result *r);

#endif
