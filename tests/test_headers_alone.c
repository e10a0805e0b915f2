/* SPDX-License-Identifier: MIT */
/* Each public header that returns or mentions TW_NEVER makes it available
 * on its own: tests/alone/NAME_only.c includes <twheel/NAME.h> and nothing
 * else of twheel, and compares with TW_NEVER (at compile time, and here at
 * run time). TW_NEVER used to be defined in wheel.h only, so a program that
 * included only tasks.h, runner.h or cache.h could not use it. */
#include "test.h"

int alone_tasks(void);
int alone_runner(void);
int alone_cache(void);

static void test_tw_never_from_each_header(void)
{
    CHECK(alone_tasks());
    CHECK(alone_runner());
    CHECK(alone_cache());
}

int main(void)
{
    RUN(test_tw_never_from_each_header);
    return test_summary();
}
