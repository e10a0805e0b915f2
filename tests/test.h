/* SPDX-License-Identifier: MIT */
/* A tiny test harness: typed checks that print both values, and a summary.
 *
 *   static void test_something(void) { CHECK_EQ_U64(tw_wheel_now(&w), 5); }
 *   int main(void) { RUN(test_something); return test_summary(); }
 *
 * A failed check prints file:line, the expression and both values, and the
 * test goes on (so one run shows every failure); the exit code is non-zero.
 */
#ifndef TWHEEL_TEST_H
#define TWHEEL_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_;
static int test_checks_;
static int test_cases_failed_;
static int test_cases_passed_;

#define CHECK_(cond, fmt, ...)                                                   \
    do {                                                                         \
        test_checks_++;                                                          \
        if (!(cond)) {                                                           \
            test_failures_++;                                                    \
            fprintf(stderr, "%s:%d: check failed: " fmt "\n", __FILE__, __LINE__, \
                    __VA_ARGS__);                                                \
        }                                                                        \
    } while (0)

#define CHECK(cond) CHECK_((cond), "%s", #cond)
#define CHECK_EQ_U64(a, b)                                                       \
    do {                                                                         \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                         \
        CHECK_(a_ == b_, "%s == %s (%" PRIu64 " vs %" PRIu64 ")", #a, #b, a_, b_); \
    } while (0)
#define CHECK_EQ_INT(a, b)                                                       \
    do {                                                                         \
        long long a_ = (long long)(a), b_ = (long long)(b);                      \
        CHECK_(a_ == b_, "%s == %s (%lld vs %lld)", #a, #b, a_, b_);             \
    } while (0)
#define CHECK_EQ_PTR(a, b)                                                       \
    do {                                                                         \
        const void *a_ = (const void *)(a), *b_ = (const void *)(b);             \
        CHECK_(a_ == b_, "%s == %s (%p vs %p)", #a, #b, a_, b_);                 \
    } while (0)
#define CHECK_EQ_STR(a, b)                                                       \
    do {                                                                         \
        const char *a_ = (a), *b_ = (b);                                         \
        CHECK_(a_ && b_ && strcmp(a_, b_) == 0, "%s == %s (\"%s\" vs \"%s\")", #a, #b, \
               a_ ? a_ : "(null)", b_ ? b_ : "(null)");                          \
    } while (0)

/* Run one test case and report it. With TWHEEL_TEST_CASE=name in the
 * environment only the case of that name runs (CTest registers each case so,
 * as FILE.case): a case can be run, timed out and reported on its own. */
static int test_cases_selected_;

static inline int test_case_wanted_(const char *name)
{
    const char *only = getenv("TWHEEL_TEST_CASE");
    return !only || !*only || strcmp(only, name) == 0;
}

#define RUN(fn)                                                                  \
    do {                                                                         \
        if (!test_case_wanted_(#fn))                                             \
            break;                                                               \
        test_cases_selected_++;                                                  \
        int before_ = test_failures_;                                            \
        fn();                                                                    \
        if (test_failures_ == before_) {                                         \
            test_cases_passed_++;                                                \
        } else {                                                                 \
            test_cases_failed_++;                                                \
            fprintf(stderr, "FAIL %s\n", #fn);                                   \
        }                                                                        \
    } while (0)

/* Exit status of a run whose one case was left out of this build (e.g. under
 * a sanitizer): CTest reports it as skipped (SKIP_RETURN_CODE). */
#define TEST_SKIPPED 77

static inline int test_summary(void)
{
    if (test_cases_selected_ == 0 && getenv("TWHEEL_TEST_CASE")) {
        printf("case %s is not in this build: skipped\n", getenv("TWHEEL_TEST_CASE"));
        return TEST_SKIPPED;
    }
    printf("%d passed, %d failed (%d checks)\n", test_cases_passed_, test_cases_failed_,
           test_checks_);
    return test_cases_failed_ ? 1 : 0;
}

#endif /* TWHEEL_TEST_H */
