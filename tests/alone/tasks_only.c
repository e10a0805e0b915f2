/* SPDX-License-Identifier: MIT */
/* One header alone (test_headers_alone): tasks.h says tw_tasks_next_expiry
 * returns TW_NEVER, so including it alone must make TW_NEVER available. */
#include <twheel/tasks.h>

_Static_assert(TW_NEVER == UINT64_MAX, "TW_NEVER from <twheel/tasks.h> alone");

int alone_tasks(void)
{
    return tw_tasks_next_expiry(NULL) == TW_NEVER;
}
