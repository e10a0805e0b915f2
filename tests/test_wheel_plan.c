/* SPDX-License-Identifier: MIT */
/* White-box checks of the re-arm helpers of src/core/ (slack.h, internal.h),
 * whose sources this file compiles itself (release layout, no TWHEEL_DEBUG):
 *  - plan_late, one table load, against the rule it replaced (written out
 *    here with its branches), over every small window, windows at the slot
 *    boundaries of every level, random windows and the end of time, and
 *    the rule's bounds (first <= tick <= last);
 *  - in_place_for, one mask test, against the shift form it replaced, and
 *    a timer on a level-1 sub-list re-armed eagerly inside its slot;
 *  - the re-arm checks: an uninitialised timer is refused while idle by the
 *    eager and slack arms, as before. */

/* The core's sources, compiled here (src/ is on this test's include path). */
#include "core/advance.c"
#include "core/arm.c"
#include "core/periodic.c"
#include "core/wheel.c"

#include "test.h"
#include "wheel_rec.h"

/* plan_late as it was written before the table: the reference. */
static uint64_t ref_plan_late(uint64_t first, uint64_t last)
{
    if (last == first)
        return first;
    unsigned h = (unsigned)__builtin_clzll((first - 1) ^ last) ^ 63u;
    unsigned shift = (h / SLOT_BITS) * SLOT_BITS;
    if (shift > SLOT_BITS)
        shift -= SLOT_BITS;
    if (shift == 0) {
        uint64_t sub = last & ~(uint64_t)(SUB_WIDTH - 1);
        return sub >= first ? sub : last;
    }
    return last & ~((UINT64_C(1) << shift) - 1);
}

static uint64_t rng_state = 0x243f6a8885a308d3u;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int plan_bad;
static void check_late(uint64_t first, uint64_t last)
{
    uint64_t got = plan_late(first, last), want = ref_plan_late(first, last);
    if (got != want || got < first || got > last) {
        if (plan_bad++ < 5)
            CHECK_EQ_U64(got, want);
        CHECK(got >= first && got <= last);
    }
}

static void test_plan_late_matches_reference(void)
{
    for (uint64_t first = 1; first <= 600; first++)
        for (uint64_t last = first; last <= first + 600; last++)
            check_late(first, last);
    /* Around the boundaries of every level, windows of every width. */
    for (unsigned level = 1; level < LEVELS; level++) {
        uint64_t b = UINT64_C(1) << (level * SLOT_BITS);
        for (int i = 0; i < 4000; i++) {
            uint64_t first = b * (1 + rnd() % 5) + (rnd() % 9) - 4;
            if (first == 0)
                first = 1;
            uint64_t width = rnd() >> (rnd() % 64);
            check_late(first, saturating_add(first, width));
        }
    }
    for (int i = 0; i < 200000; i++) {
        uint64_t first = (rnd() >> (rnd() % 64)) | 1;
        uint64_t width = rnd() >> (rnd() % 64);
        check_late(first, saturating_add(first, width));
    }
    check_late(UINT64_MAX, UINT64_MAX);
    check_late(UINT64_MAX - 1, UINT64_MAX);
    check_late(1, UINT64_MAX);
    check_late(UINT64_C(1) << 63, UINT64_MAX);
    CHECK_EQ_INT(plan_bad, 0);
}

/* in_place_for as it was written with a shift: the reference. */
static bool ref_in_place_for(const struct tw_wheel *w, const struct tw_node *n, uint64_t d)
{
    size_t bit = 63 - (size_t)__builtin_clzll(d ^ w->now);
    unsigned shift = place_by_bit[bit] & 63;
    if ((n->deadline ^ d) >> shift)
        return false;
    return shift != SLOT_BITS || !(w->subbed >> ((d >> SLOT_BITS) & SLOT_MASK) & 1);
}

static void test_in_place_for_matches_reference(void)
{
    static struct tw_wheel w;
    struct tw_node n;
    int bad = 0, level1 = 0;
    for (int i = 0; i < 400000; i++) {
        tw_wheel_init(&w, rnd() >> (rnd() % 64));
        if (w.now == UINT64_MAX)
            w.now--;
        w.subbed = rnd() & rnd();
        uint64_t span = rnd() >> (rnd() % 64);
        n.deadline = w.now + 1 + span % (UINT64_MAX - w.now);
        uint64_t d = (rnd() & 1) ? n.deadline + (rnd() % 200) - 100
                                 : w.now + 1 + (rnd() >> (rnd() % 64)) % (UINT64_MAX - w.now);
        if (d <= w.now)
            d = w.now + 1;
        bool got = in_place_for(&w, &n, d), want = ref_in_place_for(&w, &n, d);
        if (got != want && bad++ < 5)
            CHECK(got == want);
        level1 += place_by_bit[63 - (size_t)__builtin_clzll(d ^ w.now)] % 64 == SLOT_BITS;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(level1 > 1000); /* the sub-list case was drawn */
}


/* A timer on a level-1 sub-list (planned with slack at 112: sub-list 3 of
 * slot 1) re-armed eagerly to another tick of the same slot, later or
 * earlier, is relocated (the sub-list starts at 112, not at the slot's
 * first tick), counts no move, and fires exactly then. */
static void test_eager_rearm_on_a_sub_list(void)
{
    static struct tw_wheel w;
    for (int earlier = 0; earlier < 2; earlier++) {
        struct rec r, other;
        memset(&r, 0, sizeof r);
        memset(&other, 0, sizeof other);
        r.wheel = other.wheel = &w;
        tw_wheel_init(&w, 0);
        CHECK_EQ_INT(tw_timer_init(&r.timer, rec_fire, &r), 0);
        CHECK_EQ_INT(tw_timer_init(&other.timer, rec_fire, &other), 0);
        CHECK_EQ_INT(tw_arm(&w, &r.timer, 100, 20, 0), 0);
        CHECK_EQ_U64(tw_deadline(&r.timer), 112);
        CHECK(w.subbed >> 1 & 1);
        CHECK(r.timer.node.pprev == &w.sub[1][3][0] || r.timer.node.pprev == &w.sub[1][3][1] ||
              r.timer.node.pprev == &w.sub[1][3][2] || r.timer.node.pprev == &w.sub[1][3][3]);
        CHECK_EQ_INT(tw_arm(&w, &other.timer, 70, 0, TW_ARM_SLACK), 0); /* exact, slot 1 */
        struct tw_node **before = r.timer.node.pprev;
        uint64_t d = earlier ? 100 : 120;
        CHECK_EQ_INT(tw_arm(&w, &r.timer, d, 0, TW_ARM_EAGER), 0);
        CHECK_EQ_U64(tw_deadline(&r.timer), d);
        CHECK_EQ_U64(tw_wheel_moves(&w), 0);
        CHECK(r.timer.node.pprev != before); /* relocated */
        CHECK(tw_wheel_next_expiry(&w) <= d);
        CHECK_EQ_INT(tw_wheel_advance(&w, d - 1), 1); /* only `other`, at 70 */
        CHECK_EQ_INT(r.fires, 0);
        CHECK_EQ_INT(other.fires, 1);
        CHECK_EQ_INT(tw_wheel_advance(&w, d), 1);
        CHECK_EQ_INT(r.fires, 1);
        CHECK_EQ_U64(r.fired_at, d);
        CHECK_EQ_INT(tw_wheel_pending(&w), 0);
    }
}

/* The eager and slack arms no longer read fn of a pending timer, but an
 * idle, uninitialised one is still refused and left idle. */
static void test_uninitialised_idle_timer_refused(void)
{
    static struct tw_wheel w;
    struct tw_timer raw;
    tw_wheel_init(&w, 0);
    memset(&raw, 0, sizeof raw);
    CHECK_EQ_INT(tw_arm(&w, &raw, 10, 0, TW_ARM_EAGER), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, &raw, tw_deadline_in(tw_wheel_now(&w), 10), 0, TW_ARM_EAGER),
                 TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, &raw, 10, 5, 0), TW_EINVAL);
    CHECK_EQ_INT(tw_arm(&w, &raw, tw_deadline_in(tw_wheel_now(&w), 10), 5, 0), TW_EINVAL);
    CHECK(!tw_pending(&raw));
    CHECK_EQ_INT(tw_wheel_pending(&w), 0);
}

/* A slack re-arm's stay test with a window that saturates at UINT64_MAX:
 * a timer planned before the new deadline is relocated (its offset from the
 * deadline wraps to a huge number, which a huge slack must not take for
 * "inside"), one planned inside stays. */
static void test_slack_stay_with_saturated_window(void)
{
    static struct tw_wheel w;
    struct rec r;
    memset(&r, 0, sizeof r);
    r.wheel = &w;
    tw_wheel_init(&w, 0);
    CHECK_EQ_INT(tw_timer_init(&r.timer, rec_fire, &r), 0);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 100, 0, 0), 0);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 200, UINT64_MAX, TW_ARM_SLACK), 0);
    CHECK(tw_deadline(&r.timer) >= 200); /* relocated, never early */
    CHECK_EQ_U64(tw_wheel_moves(&w), 1);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 300, 0, 0), 0); /* exact again, earlier or lazy */
    uint64_t moves = tw_wheel_moves(&w);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 200, UINT64_MAX - 100, TW_ARM_SLACK), 0);
    CHECK_EQ_U64(tw_deadline(&r.timer), 300); /* inside [200, MAX]: stays */
    CHECK_EQ_U64(tw_wheel_moves(&w), moves);
    CHECK_EQ_INT(tw_arm(&w, &r.timer, 301, UINT64_MAX, TW_ARM_SLACK), 0);
    CHECK(tw_deadline(&r.timer) >= 301); /* one tick past it: relocated */
    CHECK_EQ_INT(tw_wheel_advance(&w, 300), 0);
    CHECK_EQ_INT(r.fires, 0);
    CHECK_EQ_INT(tw_wheel_advance(&w, UINT64_MAX), 1);
    CHECK_EQ_INT(r.fires, 1);
}

int main(void)
{
    RUN(test_plan_late_matches_reference);
    RUN(test_in_place_for_matches_reference);
    RUN(test_eager_rearm_on_a_sub_list);
    RUN(test_uninitialised_idle_timer_refused);
    RUN(test_slack_stay_with_saturated_window);
    return test_summary();
}
