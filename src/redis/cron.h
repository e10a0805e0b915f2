/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: 5-field cron expressions in universal time (schedule.c).
 * Apart from the rest of the layer so that it builds without hiredis (the
 * fuzz target and the unit tests build it alone). No allocation, no clock:
 * times are ms since the epoch, universal time (no time zone). */
#ifndef TWHEEL_REDIS_CRON_H
#define TWHEEL_REDIS_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A parsed expression: the set of each field as bits (minute 0-59, hour
 * 0-23, day of month 1-31, month 1-12, day of week 0-6, Sunday 0), and
 * whether each day field began with '*' (the day rule: both restricted,
 * either day field matching suffices; else both must match). */
struct tw_cron {
    uint64_t minute;
    uint32_t hour, dom;
    uint16_t month;
    uint8_t dow;
    bool dom_star, dow_star;
};

/* Longest expression accepted, in bytes. */
#define TW_CRON_MAX 256

/* Parse s (len bytes, no NUL needed): five fields separated by blanks, each
 * a list (a,b) of items: `*`, `n`, `a-b`, each with an optional `/step`
 * (`n/step`: n to the field's end), numbers in the field's range, months
 * JAN-DEC and days SUN-SAT (any case), 7 for Sunday. 0, or -1 with *why a
 * static reason (not quoting s) when s is not such an expression or never
 * matches any day (a day of month no month in the set has). */
int tw_cron_parse(struct tw_cron *c, const char *s, size_t len, const char **why);

/* The first time matching c strictly after after_ms (whole minutes), into
 * *out: 0, or -1 when none within the next 10 years (or past year 9999). */
int tw_cron_next(const struct tw_cron *c, uint64_t after_ms, uint64_t *out);

/* Whether the minute holding t_ms matches c. */
bool tw_cron_match(const struct tw_cron *c, uint64_t t_ms);

#endif /* TWHEEL_REDIS_CRON_H */
