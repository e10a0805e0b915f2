/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: 5-field cron expressions in universal time (cron.h).
 *
 * Parsing fills a bit set per field. The next time is found field by field
 * from the largest: a month not in the set skips to the next month's first
 * day, a day that does not match to the next day, then the hour, then the
 * minute; each step lands on a candidate no later than the answer, so the
 * first candidate that matches every field is it. At most ~3,700 day steps
 * (ten years: an expression matching only Feb 29 and a Monday... waits at
 * most 8 years between leap days, 2096 to 2104), each O(1). Civil dates
 * from day numbers by H. Hinnant's algorithms (proleptic Gregorian), so no
 * libc time zone is touched: universal time, whatever TZ says. */
#include "redis/cron.h"

#include <string.h>

static const char *const rr_months[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                        "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const rr_days[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

struct rr_field {
    unsigned lo, hi;          /* the range of its numbers */
    const char *const *names; /* names of lo, lo + 1, ... (NULL: none) */
    unsigned nnames;
};

static const struct rr_field rr_fields[5] = {
    {0, 59, NULL, 0},       {0, 23, NULL, 0},   {1, 31, NULL, 0},
    {1, 12, rr_months, 12}, {0, 7, rr_days, 7},
};

static char rr_up(char ch)
{
    return ch >= 'a' && ch <= 'z' ? (char)(ch - 'a' + 'A') : ch;
}

/* A number or a name at s[*i]; -1 when neither. */
static long rr_value(const struct rr_field *f, const char *s, size_t n, size_t *i)
{
    if (*i < n && s[*i] >= '0' && s[*i] <= '9') {
        long v = 0;
        while (*i < n && s[*i] >= '0' && s[*i] <= '9') {
            v = v * 10 + (s[*i] - '0');
            if (v > 1000)
                return -1;
            (*i)++;
        }
        return v;
    }
    for (unsigned k = 0; k < f->nnames; k++)
        if (*i + 3 <= n && rr_up(s[*i]) == f->names[k][0] && rr_up(s[*i + 1]) == f->names[k][1] &&
            rr_up(s[*i + 2]) == f->names[k][2]) {
            *i += 3;
            return (long)(f->lo + k);
        }
    return -1;
}

/* One field (s, n bytes) into *bits. */
static int rr_field(const struct rr_field *f, const char *s, size_t n, uint64_t *bits, bool *star,
                    const char **why)
{
    *bits = 0;
    *star = n > 0 && s[0] == '*';
    size_t i = 0;
    for (;;) {
        long a, b;
        bool single = false; /* one number: n/step runs from n to the field's end */
        if (i < n && s[i] == '*') {
            i++;
            a = (long)f->lo;
            b = (long)f->hi;
        } else {
            if ((a = rr_value(f, s, n, &i)) < 0) {
                *why = "a field holds something that is not a number, a name, * or a range";
                return -1;
            }
            b = a;
            single = true;
            if (i < n && s[i] == '-') {
                single = false;
                i++;
                if ((b = rr_value(f, s, n, &i)) < 0) {
                    *why = "a range without its end";
                    return -1;
                }
            }
        }
        long step = 1;
        if (i < n && s[i] == '/') {
            i++;
            size_t j = i;
            step = 0;
            while (i < n && s[i] >= '0' && s[i] <= '9' && step <= 1000)
                step = step * 10 + (s[i++] - '0');
            if (i == j || step == 0 || step > 1000) {
                *why = "a step that is not a number from 1";
                return -1;
            }
            if (single)
                b = (long)f->hi;
        }
        if (a < (long)f->lo || b > (long)f->hi || a > b) {
            *why = "a number out of its field's range, or a range backwards";
            return -1;
        }
        for (long v = a; v <= b; v += step)
            *bits |= 1ull << (v - (long)f->lo);
        if (i == n)
            return 0;
        if (s[i] != ',') {
            *why = "an unexpected character in a field";
            return -1;
        }
        i++;
    }
}

/* days since 1970-01-01 of y-m-d, and back (Hinnant) */
static int64_t rr_days_of(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void rr_civil(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static bool rr_day_ok(const struct tw_cron *c, int64_t day, unsigned d)
{
    bool dom = (c->dom >> (d - 1)) & 1;
    bool dow = (c->dow >> (unsigned)((day % 7 + 11) % 7)) & 1; /* 1970-01-01: Thursday (4) */
    return c->dom_star || c->dow_star ? dom && dow : dom || dow;
}

bool tw_cron_match(const struct tw_cron *c, uint64_t t_ms)
{
    uint64_t min = t_ms / 60000;
    int64_t day = (int64_t)(min / 1440);
    int64_t y;
    unsigned m, d;
    rr_civil(day, &y, &m, &d);
    return ((c->month >> (m - 1)) & 1) && rr_day_ok(c, day, d) &&
           ((c->hour >> (min / 60 % 24)) & 1) && ((c->minute >> (min % 60)) & 1);
}

#define RR_LAST_MS 253402300800000ull /* 10000-01-01T00:00Z */

int tw_cron_next(const struct tw_cron *c, uint64_t after_ms, uint64_t *out)
{
    if (after_ms >= RR_LAST_MS)
        return -1;
    uint64_t min = after_ms / 60000 + 1;
    int64_t day = (int64_t)(min / 1440), last = day + 3660;
    unsigned hm = (unsigned)(min % 1440);
    while (day <= last) {
        int64_t y;
        unsigned m, d;
        rr_civil(day, &y, &m, &d);
        if (!((c->month >> (m - 1)) & 1)) { /* the next month's first day */
            day = m == 12 ? rr_days_of(y + 1, 1, 1) : rr_days_of(y, m + 1, 1);
            hm = 0;
            continue;
        }
        if (!rr_day_ok(c, day, d)) {
            day++;
            hm = 0;
            continue;
        }
        for (unsigned h = hm / 60; h < 24; h++) {
            if (!((c->hour >> h) & 1))
                continue;
            for (unsigned mi = h == hm / 60 ? hm % 60 : 0; mi < 60; mi++)
                if ((c->minute >> mi) & 1) {
                    uint64_t t = ((uint64_t)day * 1440 + h * 60 + mi) * 60000;
                    if (t >= RR_LAST_MS)
                        return -1;
                    *out = t;
                    return 0;
                }
        }
        day++;
        hm = 0;
    }
    return -1;
}

int tw_cron_parse(struct tw_cron *c, const char *s, size_t len, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    memset(c, 0, sizeof *c);
    if (!s || len > TW_CRON_MAX) {
        *why = "no expression, or one longer than 256 bytes";
        return -1;
    }
    uint64_t bits[5];
    bool star[5];
    size_t i = 0;
    for (int f = 0; f < 5; f++) {
        while (i < len && (s[i] == ' ' || s[i] == '\t'))
            i++;
        size_t j = i;
        while (j < len && s[j] != ' ' && s[j] != '\t')
            j++;
        if (j == i) {
            *why = "fewer than 5 fields";
            return -1;
        }
        if (rr_field(&rr_fields[f], s + i, j - i, &bits[f], &star[f], why) != 0)
            return -1;
        i = j;
    }
    while (i < len && (s[i] == ' ' || s[i] == '\t'))
        i++;
    if (i != len) {
        *why = "more than 5 fields";
        return -1;
    }
    c->minute = bits[0];
    c->hour = (uint32_t)bits[1];
    c->dom = (uint32_t)bits[2];
    c->month = (uint16_t)bits[3];
    c->dow = (uint8_t)((bits[4] | bits[4] >> 7) & 0x7f); /* 7 is Sunday too */
    c->dom_star = star[2];
    c->dow_star = star[4];
    uint64_t t;
    if (tw_cron_next(c, 0, &t) != 0) { /* 1970..1980 holds two Feb 29s and every weekday */
        *why = "the expression matches no day";
        return -1;
    }
    return 0;
}
