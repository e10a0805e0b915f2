/* SPDX-License-Identifier: MIT */
/* libFuzzer target for tw_tasks: the input bytes become a sequence of
 * operations (set, move, remove, get, advance, bounded advance, drain; with
 * re-entrant calls from execute and drain's fn, and an allocator that fails
 * at a rate chosen by the input) applied to tw_tasks and to the reference
 * model of tests/tasks_model.h, which aborts at the first disagreement.
 *
 * Layout: byte 0 key kind, callback ops and slack (bits 3-4: config.slack_shift
 * 0, 1, 3 or 8; bit 5: the *_slack calls mixed in) and re-arm (bit 6:
 * config.eager_rearm), byte 1 key count class, byte 2 allocator failure rate
 * and pending limit, then 8 bytes per operation. */
#include <string.h>

#include "tasks_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct tmodel m;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const uint32_t nkeys[8] = {1, 2, 8, 64, 300, 1500, 3000, 5000};
    static const unsigned fail[4] = {0, 0, 10, 200};
    uint64_t seed = 0;
    memcpy(&seed, data, size < 8 ? size : 8);
    static const unsigned shift[4] = {0, 1, 3, 8};
    tm_init_cap(&m, data[0] & 1, nkeys[data[1] % 8], seed, (data[0] >> 1) % 4,
                fail[data[2] % 4], (data[2] >> 2) % 4 == 0 ? (size_t)(data[2] >> 4) : 0,
                (data[1] & 0x80) ? UINT64_MAX - (UINT64_C(1) << 52) : (uint64_t)data[1],
                shift[(data[0] >> 3) % 4], (data[0] >> 5) & 1, 0, (data[0] >> 6) & 1);
    for (size_t i = 3; i + 8 <= size; i += 8) {
        uint64_t r;
        memcpy(&r, data + i, 8);
        tm_op(&m, r, (r >> 60) & 1);
    }
    tm_finish(&m);
    return 0;
}
