/* SPDX-License-Identifier: MIT */
/* One header alone (test_headers_alone): runner.h cites the getter rule of
 * twheel/common.h (TW_NEVER for deadlines), so including it alone must make
 * TW_NEVER available. */
#include <twheel/runner.h>

_Static_assert(TW_NEVER == UINT64_MAX, "TW_NEVER from <twheel/runner.h> alone");

int alone_runner(void)
{
    struct tw_runner_stats st;
    return tw_runner_stats(NULL, &st) == TW_EINVAL && (uint64_t)TW_NEVER == UINT64_MAX;
}
