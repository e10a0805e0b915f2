/* SPDX-License-Identifier: MIT */
/* One header alone (test_headers_alone): cache.h cites the getter rule of
 * twheel/common.h (TW_NEVER for deadlines), so including it alone must make
 * TW_NEVER available. */
#include <twheel/cache.h>

_Static_assert(TW_NEVER == UINT64_MAX, "TW_NEVER from <twheel/cache.h> alone");

int alone_cache(void)
{
    return tw_cache_now(NULL) == 0 && (uint64_t)TW_NEVER == UINT64_MAX;
}
