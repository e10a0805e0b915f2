/* SPDX-License-Identifier: MIT */
/* The cron parser (src/redis/cron.c, built alone: no server): fields,
 * ranges, steps, lists, names, the day-of-month / day-of-week rule, Feb 29,
 * month ends, year ends, and the expressions it must refuse, each with a
 * reason. Times are UTC ms. */
#include "test.h"

#include <string.h>

#include "redis/cron.h"

/* ms of Y-M-D h:m UTC (1970..2199), by counting days */
static uint64_t at(int y, int mo, int d, int h, int mi)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    uint64_t days = 0;
    for (int yy = 1970; yy < y; yy++)
        days += (yy % 4 == 0 && (yy % 100 != 0 || yy % 400 == 0)) ? 366 : 365;
    for (int m = 1; m < mo; m++)
        days += (uint64_t)mdays[m - 1] + (m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0));
    days += (uint64_t)(d - 1);
    return ((days * 24 + (uint64_t)h) * 60 + (uint64_t)mi) * 60000u;
}

static struct tw_cron c;

static int parse(const char *s)
{
    const char *why = NULL;
    int rc = tw_cron_parse(&c, s, strlen(s), &why);
    if (rc != 0)
        CHECK_(why && why[0], "a reason for %s", s);
    return rc;
}

static uint64_t next(const char *s, uint64_t after)
{
    if (parse(s) != 0)
        return 0;
    uint64_t t = 0;
    if (tw_cron_next(&c, after, &t) != 0)
        return UINT64_MAX;
    CHECK(tw_cron_match(&c, t));
    return t;
}

static void test_every_minute(void)
{
    CHECK_EQ_U64(next("* * * * *", at(2026, 1, 1, 0, 0)), at(2026, 1, 1, 0, 1));
    CHECK_EQ_U64(next("* * * * *", at(2026, 1, 1, 0, 0) + 59999), at(2026, 1, 1, 0, 1));
    CHECK_EQ_U64(next("* * * * *", 0), 60000u); /* strictly after */
    CHECK_EQ_U64(next("*\t*  * * * ", at(2026, 1, 1, 0, 0)), at(2026, 1, 1, 0, 1));
}

static void test_ranges_steps_lists(void)
{
    CHECK_EQ_U64(next("*/15 * * * *", at(2026, 3, 1, 10, 1)), at(2026, 3, 1, 10, 15));
    CHECK_EQ_U64(next("*/15 * * * *", at(2026, 3, 1, 10, 45)), at(2026, 3, 1, 11, 0));
    CHECK_EQ_U64(next("5-10/2 * * * *", at(2026, 3, 1, 10, 7)), at(2026, 3, 1, 10, 9));
    CHECK_EQ_U64(next("5-10/2 * * * *", at(2026, 3, 1, 10, 9)), at(2026, 3, 1, 11, 5));
    CHECK_EQ_U64(next("50/5 * * * *", at(2026, 3, 1, 10, 56)), at(2026, 3, 1, 11, 50));
    CHECK_EQ_U64(next("0 9,17 * * *", at(2026, 3, 1, 9, 0)), at(2026, 3, 1, 17, 0));
    CHECK_EQ_U64(next("0 9,17 * * *", at(2026, 3, 1, 17, 0)), at(2026, 3, 2, 9, 0));
    CHECK_EQ_U64(next("0 0 1 * *", at(2026, 12, 15, 0, 0)), at(2027, 1, 1, 0, 0));
    CHECK_EQ_U64(next("30 23 31 12 *", at(2026, 12, 31, 23, 30)), at(2027, 12, 31, 23, 30));
    CHECK_EQ_U64(next("0 12 * JAN,jul *", at(2026, 2, 1, 0, 0)), at(2026, 7, 1, 12, 0));
    CHECK_EQ_U64(next("0 0 31 * *", at(2026, 4, 1, 0, 0)), at(2026, 5, 31, 0, 0));
    CHECK_EQ_U64(next("1,2,3-4 * * * *", at(2026, 1, 1, 0, 3)), at(2026, 1, 1, 0, 4));
}

static void test_day_rule(void)
{
    /* 2026-03-01 is a Sunday */
    CHECK_EQ_U64(next("0 0 * * MON", at(2026, 3, 1, 0, 0)), at(2026, 3, 2, 0, 0));
    CHECK_EQ_U64(next("0 0 * * 1-5", at(2026, 3, 6, 12, 0)), at(2026, 3, 9, 0, 0));
    CHECK_EQ_U64(next("0 0 * * 0", at(2026, 3, 1, 0, 0)), at(2026, 3, 8, 0, 0));
    CHECK_EQ_U64(next("0 0 * * 7", at(2026, 3, 1, 0, 0)), at(2026, 3, 8, 0, 0)); /* 7: Sunday */
    CHECK_EQ_U64(next("0 0 * * sun", at(2026, 3, 1, 0, 0)), at(2026, 3, 8, 0, 0));
    /* both restricted: either day field (the 13th, or a Friday) */
    CHECK_EQ_U64(next("0 0 13 * 5", at(2026, 3, 1, 0, 0)), at(2026, 3, 6, 0, 0));
    CHECK_EQ_U64(next("0 0 13 * 5", at(2026, 3, 12, 0, 0)), at(2026, 3, 13, 0, 0));
    /* one of them '*': both must match (the 13th and a Friday) */
    CHECK_EQ_U64(next("0 0 13 * *", at(2026, 3, 1, 0, 0)), at(2026, 3, 13, 0, 0));
    CHECK_EQ_U64(next("0 0 */1 * 5", at(2026, 3, 1, 0, 0)), at(2026, 3, 6, 0, 0));
}

static void test_feb_29(void)
{
    CHECK_EQ_U64(next("0 0 29 2 *", at(2026, 1, 1, 0, 0)), at(2028, 2, 29, 0, 0));
    CHECK_EQ_U64(next("0 0 29 2 *", at(2028, 2, 29, 0, 0)), at(2032, 2, 29, 0, 0));
    /* 2100 is no leap year: 2096, then 2104 */
    CHECK_EQ_U64(next("0 0 29 2 *", at(2096, 3, 1, 0, 0)), at(2104, 2, 29, 0, 0));
    CHECK_EQ_U64(next("0 0 28 2 *", at(2100, 2, 28, 0, 0)), at(2101, 2, 28, 0, 0));
    CHECK_EQ_U64(next("0 0 1 3 *", at(2028, 2, 29, 0, 0)), at(2028, 3, 1, 0, 0));
}

static void test_refused(void)
{
    const char *bad[] = {"", "* * * *", "* * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
                         "* * 32 * *", "* * * 13 * ", "* * * * 8", "5-1 * * * *", "*/0 * * * *",
                         "a * * * *", "1- * * * *", "1,,2 * * * *", "* * * FOO *",
                         "0 0 30 2 *", "0 0 31 4,6,9,11 *", "*/1001 * * * *", "-1 * * * *",
                         "1/ * * * *", "@daily"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_(parse(bad[i]) == -1, "refused: '%s'", bad[i]);
    char long_expr[400];
    memset(long_expr, ' ', sizeof long_expr);
    memcpy(long_expr, "* * * * *", 9);
    const char *why = NULL;
    CHECK_EQ_INT(tw_cron_parse(&c, long_expr, sizeof long_expr, &why), -1);
    CHECK_EQ_INT(tw_cron_parse(&c, NULL, 0, NULL), -1);
    /* a time past year 9999 has no next */
    CHECK_EQ_INT(parse("* * * * *"), 0);
    uint64_t t;
    CHECK_EQ_INT(tw_cron_next(&c, 253402300800000ull, &t), -1);
}

int main(void)
{
    RUN(test_every_minute);
    RUN(test_ranges_steps_lists);
    RUN(test_day_rule);
    RUN(test_feb_29);
    RUN(test_refused);
    return test_summary();
}
