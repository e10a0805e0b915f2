/* SPDX-License-Identifier: MIT */
/* Randomized model test of tw_cache: many random inputs through the fuzz
 * target's model (tests/cache_model.h), with a fixed seed so that a failure
 * is reproducible (the corpus is replayed by fuzz_replay_cache). */
#include "cache_model.h"
#include "test.h"

static struct cmodel model;

static void test_random_inputs(void)
{
    uint64_t x = UINT64_C(0x9e3779b97f4a7c15);
    static uint8_t buf[2003];
    int runs = 0;
    for (int run = 0; run < 4000; run++) {
        size_t size = 3 + 2 * (size_t)(run % 1000);
        for (size_t i = 0; i < size; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (uint8_t)(x >> 24);
        }
        cm_run(&model, buf, size); /* aborts on a mismatch */
        runs++;
    }
    CHECK_EQ_INT(runs, 4000);
}

int main(void)
{
    RUN(test_random_inputs);
    return test_summary();
}
