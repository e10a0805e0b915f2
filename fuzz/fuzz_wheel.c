/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the core wheel: the input bytes become a sequence of
 * operations (arm, arm at: exact lazy, exact eager or with slack, or the
 * start of an idle timer, exact or with slack; cancel, advance, pull;
 * callbacks act on other timers) applied to the wheel and to the reference
 * model of tests/wheel_model.h, which aborts at the first disagreement,
 * a fire early or late, or an advance that moved more timers than wheel.h
 * allows (tw_wheel_lazy_moves_max and the descents toward the timers' own
 * deadlines), or an exact lazy arm that moved more than
 * TW_WHEEL_REARM_MOVES_MAX (its walk step).
 *
 * Layout: byte 0 timer count (1..64), byte 1 starting time class, byte 2
 * callback actions (low 2 bits) and heartbeat mode (bits 2-3: 2 and 3 arm
 * every timer at once 400 or 5000 ticks ahead and make the operations
 * lazy re-arms that far ahead, advanced mostly tick by tick; see
 * model.cluster), then 8 bytes per operation (see model_op). */
#include <string.h>

#include "wheel_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct model m;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    static const uint64_t starts[4] = {0, UINT64_C(1) << 63, UINT64_MAX - (UINT64_C(1) << 40),
                                       UINT64_MAX - 100};
    uint64_t seed = 0;
    memcpy(&seed, data, size < 8 ? size : 8);
    /* Class 0 starts a little after 0, the others a little before their
     * start (never wrapping round to the end of time). */
    uint64_t start = data[1] % 4 ? starts[data[1] % 4] - data[1] / 4 : data[1] / 4;
    model_init(&m, 1 + data[0] % 64, start, seed, data[2] % 4);
    static const uint64_t clusters[4] = {0, 0, 400, 5000};
    m.cluster = clusters[data[2] / 4 % 4];
    for (size_t id = 0; m.cluster && id < m.n; id++) /* every timer armed at once */
        model_op(&m, (uint64_t)2 << 56 | (uint64_t)id << 4);
    for (size_t i = 3; i + 8 <= size; i += 8) {
        uint64_t r;
        memcpy(&r, data + i, 8);
        model_op(&m, r);
    }
    model_check_all(&m);
    model_advance(&m, UINT64_MAX, 0);
    model_check_all(&m);
    return 0;
}
