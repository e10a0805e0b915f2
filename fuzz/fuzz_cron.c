/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the cron parser (src/redis/cron.c, built alone: no
 * hiredis). The input's first 8 bytes are a time (ms, cut to year 2200),
 * the rest one expression. The parser must not crash or read past it; what
 * it accepts must hold together: the next time is strictly after the time
 * given, on a whole minute, matches, and no minute between them matches
 * (checked by walking up to 2 days of minutes); a refusal has a reason.
 * Aborts at the first disagreement. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis/cron.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8 || size > 512)
        return 0;
    uint64_t after = 0;
    memcpy(&after, data, 8);
    after %= 7258118400000ull; /* 2200-01-01 */
    struct tw_cron c;
    const char *why = NULL;
    if (tw_cron_parse(&c, (const char *)data + 8, size - 8, &why) != 0) {
        check(why != NULL && why[0] != 0);
        return 0;
    }
    check(c.minute && c.hour && c.dom && c.month && c.dow);
    uint64_t t;
    if (tw_cron_next(&c, after, &t) != 0)
        return 0; /* e.g. only Feb 29 of a decade without one */
    check(t > after && t % 60000 == 0 && tw_cron_match(&c, t));
    uint64_t from = after / 60000 * 60000 + 60000;
    for (uint64_t m = from; m < t && m < from + 2880ull * 60000; m += 60000)
        check(!tw_cron_match(&c, m));
    uint64_t t2;
    if (tw_cron_next(&c, t, &t2) == 0)
        check(t2 > t);
    return 0;
}
