/* SPDX-License-Identifier: MIT */
/* Randomized model test of tw_tasks: random operations checked one by one
 * against the reference of tasks_model.h, for both key kinds, with
 * re-entrant callbacks, a pending limit, and an allocator that fails at
 * random. Phases alternate between growing and shrinking so that the index
 * grows, shrinks and rehashes, and the pool is compacted, many times. The
 * last runs give tasks slack (config.slack_shift, and the *_slack calls):
 * each task must fire inside its window, never early (see tasks_model.h).
 * Others give config.capacity (the index and pool floors), and one runs a
 * failing allocator over 20000 keys, where the index grows and shrinks (its
 * rehash reads each task's home word, which compaction copies) under
 * allocation failures. Every run is made twice: lazy re-arm (the default),
 * then config.eager_rearm, which must fire exactly as the same reference.
 *
 * Usage: test_tasks_model [ops-per-run] [seed]  (defaults: 200000, fixed)
 */
#include <stdio.h>
#include <stdlib.h>

#include "tasks_model.h"

static struct tmodel m; /* large: keep it off the stack */

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 4242;
    const struct {
        int int_keys;
        uint32_t nkeys;
        unsigned cb_ops;
        unsigned fail;
        size_t max_pending;
        uint64_t start;
        unsigned slack_shift;
        int slack_calls;
        size_t capacity;
    } runs[] = {
        {1, 64, 0, 0, 0, 0, 0, 0, 0},
        {0, 64, 2, 0, 0, 0, 0, 0, 0},
        {1, 20000, 2, 0, 0, 1000, 0, 0, 0},
        {0, 20000, 2, 0, 0, UINT64_C(1) << 62, 0, 0, 0},
        {1, 3000, 1, 20, 0, 5, 0, 0, 0},
        {0, 3000, 1, 20, 0, 5, 0, 0, 0},
        {1, 500, 2, 0, 100, 0, 0, 0, 0},
        {0, 500, 2, 5, 100, 0, 0, 0, 0},
        {1, 3000, 2, 0, 0, 0, 3, 0, 0},
        {0, 3000, 1, 20, 0, 5, 1, 1, 0},
        {1, 20000, 2, 0, 0, 1000, 0, 1, 0},
        {0, 500, 2, 5, 100, UINT64_C(1) << 62, 6, 1, 0},
        {1, 20000, 2, 0, 0, 1000, 0, 0, 8000},
        {0, 3000, 1, 20, 0, 5, 0, 1, 2000},
        {1, 20000, 1, 3, 0, 0, 0, 0, 0},
        {0, 20000, 1, 3, 0, 0, 0, 0, 50000},
    };
    size_t nruns = sizeof runs / sizeof runs[0];
    for (size_t rr = 0; rr < 2 * nruns; rr++) {
        size_t r = rr % nruns;
        int eager = rr >= nruns;
        uint64_t rng = seed * 7919 + r;
        tm_init_cap(&m, runs[r].int_keys, runs[r].nkeys, tm_rand(&rng), runs[r].cb_ops,
                    runs[r].fail, runs[r].max_pending, runs[r].start, runs[r].slack_shift,
                    runs[r].slack_calls, runs[r].capacity, eager);
        int grow = 1;
        size_t peak_bytes = 0;
        for (uint64_t i = 0; i < ops; i++) {
            if (i % 20000 == 0)
                grow = !grow || i == 0;
            tm_op(&m, tm_rand(&rng), grow);
            if (i % 4096 == 0) {
                tm_check_all(&m);
                struct tw_tasks_stats st;
                tw_tasks_stats(m.t, &st);
                if (st.bytes > peak_bytes)
                    peak_bytes = st.bytes;
                if ((int64_t)st.bytes != m.outstanding)
                    TM_FAIL("stats bytes %zu, allocator holds %lld", st.bytes,
                            (long long)m.outstanding);
            }
        }
        printf("run %zu: %s keys, %u keys, capacity %zu, slack_shift %u%s, %s re-arm, "
               "%llu ops, %llu batched items, %llu fires, %llu drained, %llu ENOMEM, "
               "peak %zu bytes\n",
               r, runs[r].int_keys ? "int" : "string", m.nkeys, runs[r].capacity,
               runs[r].slack_shift, runs[r].slack_calls ? " + *_slack calls" : "",
               eager ? "eager" : "lazy", (unsigned long long)m.total_ops,
               (unsigned long long)m.total_batched, (unsigned long long)m.total_fires,
               (unsigned long long)m.total_drained, (unsigned long long)m.enomem, peak_bytes);
        tm_finish(&m);
    }
    printf("%zu passed, 0 failed\n", 2 * nruns); /* any mismatch aborts before this */
    return 0;
}
