/* SPDX-License-Identifier: MIT */
/* The Redis layer's transport built without TLS (transport.c compiled here
 * without TWHEEL_TLS, as -DTWHEEL_TLS=OFF or a machine without OpenSSL
 * builds it): a TLS configuration is TW_ETLS with a text that says so,
 * which tw_redis_new passes on (redis.c builds the TLS context through
 * tw_rr_tls_new before any connection); plain connections still work. No
 * server: a refused connection is enough.
 */
#define _GNU_SOURCE
#include "test.h"

#include <string.h>
#include <time.h>

#include "redis/internal.h"

#ifdef TWHEEL_TLS
#error "this test builds transport.c without TLS"
#endif

/* router.c's clock, which transport.c's waits read (router.c is not linked). */
uint64_t tw_rr_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void test_tls_config_refused(void)
{
    struct tw_rr_tls_config tc = {0};
    struct tw_rr_tls *t = (struct tw_rr_tls *)&tc; /* overwritten with NULL */
    char err[256] = "";
    CHECK_EQ_INT(tw_rr_tls_new(&tc, &t, err, sizeof err), TW_ETLS);
    CHECK(t == NULL);
    CHECK_(strstr(err, "built without TLS") && strstr(err, "TWHEEL_TLS"), "%s", err);
    tw_rr_tls_free(NULL);
}

static void test_plain_still_connects(void)
{
    struct tw_rr_link *l = NULL;
    CHECK_EQ_INT(tw_rr_link_open(NULL, "127.0.0.1", 1, 500, 500, &l), TW_EIO);
    CHECK(l != NULL);
    if (l)
        CHECK_(strstr(l->errstr, "refused") != NULL, "%s", l->errstr);
    tw_rr_link_free(l);
}

int main(void)
{
    RUN(test_tls_config_refused);
    RUN(test_plain_still_connects);
    return test_summary();
}
