/* SPDX-License-Identifier: MIT */
/* The cache model test (tests/cache_model.h) with a reader thread reading
 * every key all along, lock-free: each value it is handed must still be
 * alive (checked by retain_value), and every value is freed exactly once in
 * the end even though running reads defer frees. Labelled "threads" (TSan).
 * About 1-2 s (10-20 s under TSan). */
#include "cache_model.h"
#include "test.h"

static struct cmodel model;

static void test_random_inputs_with_reader(void)
{
    uint64_t x = UINT64_C(0x2545f4914f6cdd1d);
    static uint8_t buf[603];
    int runs = 0;
    long hits = 0, rounds = 0;
    for (int run = 0; run < 300; run++) {
        size_t size = 3 + 2 * (size_t)(run % 300);
        for (size_t i = 0; i < size; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (uint8_t)(x >> 24);
        }
        cm_run_ex(&model, buf, size, true); /* aborts on a mismatch */
        hits += atomic_load(&model.reader_hits);
        rounds += atomic_load(&model.reader_rounds);
        runs++;
    }
    CHECK_EQ_INT(runs, 300);
    CHECK(rounds >= 300); /* the reader ran during every run */
    printf("reader: %ld rounds, %ld hits\n", rounds, hits);
}

int main(void)
{
    RUN(test_random_inputs_with_reader);
    return test_summary();
}
