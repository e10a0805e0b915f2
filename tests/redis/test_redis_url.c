/* SPDX-License-Identifier: MIT */
/* The connection syntax (src/redis/url.c, built alone: no server, no
 * hiredis): every form the configuration takes, the defaults, percent
 * escapes, and the entries it must refuse, each with a reason that never
 * quotes the entry (it may hold a password). */
#include "test.h"

#include "redis/url.h"

static struct tw_rr_url u;
static const char *why;

static int parse(const char *s)
{
    why = NULL;
    return tw_rr_url_parse(s, &u, &why);
}

/* s is refused, with a reason (test_reasons_never_quote: never quoting it) */
static void refused(const char *s)
{
    int rc = parse(s);
    CHECK_(rc == -1, "refused: %s", s);
    CHECK_(why && why[0], "a reason for %s", s);
}

static void test_plain_forms(void)
{
    CHECK_EQ_INT(parse("127.0.0.1:6379"), 0);
    CHECK_EQ_INT(u.scheme, TW_RR_TCP);
    CHECK_EQ_STR(u.host, "127.0.0.1");
    CHECK_EQ_INT(u.port, 6379);
    CHECK(!u.has_user && !u.has_pass);
    CHECK_EQ_INT(u.db, -1);
    CHECK_EQ_INT(parse("redis-1.example.com:7000"), 0);
    CHECK_EQ_STR(u.host, "redis-1.example.com");
    CHECK_EQ_INT(parse("[::1]:6379"), 0);
    CHECK_EQ_STR(u.host, "::1");
    CHECK_EQ_INT(u.port, 6379);
    CHECK_EQ_INT(parse("::1:6380"), 0); /* the layer's old form: the last : starts the port */
    CHECK_EQ_STR(u.host, "::1");
    CHECK_EQ_INT(u.port, 6380);
    CHECK_EQ_INT(parse("/tmp/redis.sock"), 0);
    CHECK_EQ_INT(u.scheme, TW_RR_UNIX);
    CHECK_EQ_STR(u.host, "/tmp/redis.sock");
    CHECK_EQ_INT(u.port, 0);
    CHECK_EQ_INT(parse("/tmp/a%20b"), 0); /* the plain path is taken as written */
    CHECK_EQ_STR(u.host, "/tmp/a%20b");
    CHECK_EQ_INT(parse("/run/://x@y.sock"), 0); /* whatever it holds (fuzz_url found it) */
    CHECK_EQ_INT(u.scheme, TW_RR_UNIX);
    CHECK_EQ_STR(u.host, "/run/://x@y.sock");
}

static void test_redis_urls(void)
{
    CHECK_EQ_INT(parse("redis://localhost"), 0);
    CHECK_EQ_INT(u.scheme, TW_RR_TCP);
    CHECK_EQ_STR(u.host, "localhost");
    CHECK_EQ_INT(u.port, 6379);
    CHECK_EQ_INT(u.db, -1);
    CHECK_EQ_INT(parse("redis://localhost/"), 0);
    CHECK_EQ_INT(u.db, -1);
    CHECK_EQ_INT(parse("redis://h:1/0"), 0);
    CHECK_EQ_INT(u.port, 1);
    CHECK_EQ_INT(u.db, 0);
    CHECK_EQ_INT(parse("redis://h:65535/1000000"), 0);
    CHECK_EQ_INT(u.port, 65535);
    CHECK_EQ_INT(u.db, 1000000);
    CHECK_EQ_INT(parse("REDIS://H:7"), 0); /* schemes without regard to case */
    CHECK_EQ_STR(u.host, "H");
    CHECK_EQ_INT(parse("redis://[::1]"), 0);
    CHECK_EQ_STR(u.host, "::1");
    CHECK_EQ_INT(u.port, 6379);
    CHECK_EQ_INT(parse("redis://[fe80::1:2]:7001/2"), 0);
    CHECK_EQ_STR(u.host, "fe80::1:2");
    CHECK_EQ_INT(u.port, 7001);
    CHECK_EQ_INT(u.db, 2);
    CHECK_EQ_INT(parse("redis://[::ffff:127.0.0.1]:6379"), 0);
    CHECK_EQ_STR(u.host, "::ffff:127.0.0.1");
}

static void test_credentials(void)
{
    CHECK_EQ_INT(parse("redis://alice:s3cret@h:6379"), 0);
    CHECK(u.has_user && u.has_pass);
    CHECK_EQ_STR(u.user, "alice");
    CHECK_EQ_STR(u.pass, "s3cret");
    CHECK_EQ_INT(parse("redis://:only-pass@h"), 0); /* AUTH password */
    CHECK(!u.has_user && u.has_pass);
    CHECK_EQ_STR(u.pass, "only-pass");
    CHECK_EQ_INT(parse("redis://bob@h"), 0); /* a user, no password */
    CHECK(u.has_user && !u.has_pass);
    CHECK_EQ_STR(u.user, "bob");
    CHECK_EQ_INT(parse("redis://bob:@h"), 0); /* an empty password */
    CHECK(u.has_user && u.has_pass);
    CHECK_EQ_STR(u.pass, "");
    CHECK_EQ_INT(parse("redis://@h"), 0);
    CHECK(!u.has_user && !u.has_pass);
    /* percent escapes, either case; a raw @ in the password (the last @ ends it) */
    CHECK_EQ_INT(parse("redis://us%65r:p%40ss%3aw%2Fo%25rd@h"), 0);
    CHECK_EQ_STR(u.user, "user");
    CHECK_EQ_STR(u.pass, "p@ss:w/o%rd");
    CHECK_EQ_INT(parse("redis://u:a@b@h:1"), 0);
    CHECK_EQ_STR(u.pass, "a@b");
    CHECK_EQ_STR(u.host, "h");
    CHECK_EQ_INT(parse("redis://u:%C3%A9t%C3%A9@h"), 0); /* UTF-8 bytes */
    CHECK_EQ_STR(u.pass, "\xC3\xA9t\xC3\xA9");
    CHECK_EQ_INT(parse("unix://u:p%2F@/run/redis.sock?db=4"), 0);
    CHECK_EQ_INT(u.scheme, TW_RR_UNIX);
    CHECK_EQ_STR(u.user, "u");
    CHECK_EQ_STR(u.pass, "p/");
    CHECK_EQ_STR(u.host, "/run/redis.sock");
    CHECK_EQ_INT(u.db, 4);
    CHECK_EQ_INT(parse("unix:///run/re%64is.sock"), 0);
    CHECK_EQ_STR(u.host, "/run/redis.sock");
    CHECK(!u.has_user && !u.has_pass);
    CHECK_EQ_INT(u.db, -1);
}

static void test_reserved_schemes(void)
{
    CHECK_EQ_INT(parse("rediss://u:p@h"), 0);
    CHECK_EQ_INT(u.scheme, TW_RR_TLS);
    CHECK_EQ_INT(u.port, 6379);
    CHECK_EQ_STR(u.pass, "p");
    CHECK_EQ_INT(parse("redis+sentinel://:pw@s1/mymaster/2"), 0);
    CHECK_EQ_INT(u.scheme, TW_RR_SENTINEL);
    CHECK_EQ_STR(u.host, "s1");
    CHECK_EQ_INT(u.port, 26379);
    CHECK_EQ_STR(u.master, "mymaster");
    CHECK_EQ_INT(u.db, 2);
    CHECK_EQ_INT(parse("redis+sentinel://[::1]:5000/m%20x"), 0);
    CHECK_EQ_INT(u.port, 5000);
    CHECK_EQ_STR(u.master, "m x");
    CHECK_EQ_INT(u.nsent, 1);
    CHECK_EQ_INT(parse("redis+sentinel://u:p@s1:1,[::1]:2,s3/mm"), 0);
    CHECK_EQ_INT(u.nsent, 3);
    CHECK_EQ_STR(u.host, "s1");
    CHECK_EQ_INT(u.port, 1);
    CHECK_EQ_STR(u.sent[1].host, "::1");
    CHECK_EQ_INT(u.sent[1].port, 2);
    CHECK_EQ_STR(u.sent[2].host, "s3");
    CHECK_EQ_INT(u.sent[2].port, 26379);
    CHECK_EQ_STR(u.user, "u");
    CHECK_EQ_STR(u.master, "mm");
    refused("redis+sentinel://s1,/m");   /* an empty Sentinel */
    refused("redis+sentinel://,s1/m");
    refused("redis+sentinel://s1:0,s2/m");
    refused("redis+sentinel://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q/m"); /* 17 */
    refused("redis://s1,s2");            /* a list is a Sentinel URL's only */
    CHECK_EQ_INT(tw_rr_url_entry_len("a:1,b:2"), 3);
    CHECK_EQ_INT(tw_rr_url_entry_len("redis+sentinel://a:1,b:2/m,c:3"), 26);
    CHECK_EQ_INT(tw_rr_url_entry_len("REDIS+SENTINEL://a,b/m"), 22);
    CHECK_EQ_INT(tw_rr_url_entry_len("redis://a:1,b"), 11);
    refused("redis+sentinel://s1");  /* no master name */
    refused("redis+sentinel://s1/"); /* no master name */
}

static void test_refused(void)
{
    refused("");
    refused("localhost");         /* plain: the port is required */
    refused("127.0.0.1:");        /* empty port */
    refused("127.0.0.1:0");       /* port 0 */
    refused("127.0.0.1:65536");   /* port too large */
    refused("127.0.0.1:6379x");
    refused("127.0.0.1:-1");
    refused(":6379");             /* empty host */
    refused("redis://");          /* empty host */
    refused("redis://:6379");     /* empty host */
    refused("redis://u:p@");      /* empty host */
    refused("redis://h:");        /* empty port */
    refused("redis://h:99999");
    refused("redis://h:+1");
    refused("redis://h:1/x");     /* a path that is not a db */
    refused("redis://h:1/-1");
    refused("redis://h:1/1000001");
    refused("redis://h:1/2/3");
    refused("redis://h?timeout=1"); /* queries are not taken (yet) */
    refused("redis://h#frag");
    refused("redis://h/0?x=1");
    refused("redis://ho st:1");   /* not a host name */
    refused("redis://h%41:1");    /* no escapes in host names */
    refused("redis://[::1");      /* IPv6 without its ] */
    refused("redis://[::1]x");    /* something after the ] */
    refused("redis://[]:1");
    refused("redis://[1.2.3.4]"); /* an IPv6 literal needs a : */
    refused("redis://[::g]");
    refused("redis://u:p%4@h");   /* a cut escape */
    refused("redis://u:p%zz@h");  /* not hex */
    refused("redis://u:p%@h");
    refused("redis://u:p%00@h");  /* NUL */
    refused("http://h:1");        /* unknown scheme */
    refused("redis:/h:1");        /* no "//": taken plain, "redis:/h" is no host */
    refused("unix://");
    refused("unix://relative.sock");
    refused("unix:///");
    refused("unix://u:p@relative");
    refused("unix:///tmp/s?db=x");
    refused("unix:///tmp/s?db=1&x=2");
    refused("unix:///tmp/s?timeout=1");
    refused("unix:///tmp/s#x");
    refused("/");
    /* lengths: a host of 255 bytes is taken, 256 not; a socket path of 107, 108 not */
    char big[400];
    memset(big, 'a', 255);
    strcpy(big + 255, ":1");
    CHECK_EQ_INT(parse(big), 0);
    memset(big, 'a', 256);
    strcpy(big + 256, ":1");
    refused(big);
    big[0] = '/';
    memset(big + 1, 'p', 106);
    big[107] = 0;
    CHECK_EQ_INT(parse(big), 0);
    CHECK_EQ_INT(strlen(u.host), 107);
    big[107] = 'p';
    big[108] = 0;
    refused(big);
    char cred[600] = "redis://u:";
    memset(cred + 10, 'x', 256);
    strcpy(cred + 266, "@h");
    refused(cred); /* a password longer than 255 bytes */
}

static void test_reasons_never_quote(void)
{
    /* a password never shows in the reason for a refusal */
    const char *bad[] = {"redis://u:hunter2@h:0", "redis://u:hunter2@", "redis://u:hunter2@h/x",
                         "rediss://u:hunter2@h?x", "unix://u:hunter2@rel"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ_INT(parse(bad[i]), -1);
        CHECK(why && !strstr(why, "hunter2"));
    }
}

static void test_addr_and_redact(void)
{
    char buf[300];
    CHECK_EQ_INT(parse("redis://u:p@[::1]:7000/3"), 0);
    CHECK_EQ_U64(tw_rr_url_addr(&u, buf, sizeof buf), 10);
    CHECK_EQ_STR(buf, "[::1]:7000");
    CHECK_EQ_INT(parse("redis://u:p@h"), 0);
    tw_rr_url_addr(&u, buf, sizeof buf);
    CHECK_EQ_STR(buf, "h:6379");
    CHECK_EQ_INT(parse("unix://:p@/run/r.sock"), 0);
    tw_rr_url_addr(&u, buf, sizeof buf);
    CHECK_EQ_STR(buf, "/run/r.sock");
    CHECK_EQ_U64(tw_rr_url_addr(&u, buf, 4), 11); /* cut, the full length returned */
    CHECK_EQ_STR(buf, "/ru");

    tw_rr_url_redact("redis://alice:s3cret@h:1/2", buf, sizeof buf);
    CHECK_EQ_STR(buf, "redis://alice:***@h:1/2");
    tw_rr_url_redact("redis://:a@b@h", buf, sizeof buf);
    CHECK_EQ_STR(buf, "redis://:***@h");
    tw_rr_url_redact("unix://u:p@/run/r.sock?db=1", buf, sizeof buf);
    CHECK_EQ_STR(buf, "unix://u:***@/run/r.sock?db=1");
    tw_rr_url_redact("redis://bob@h", buf, sizeof buf); /* no password: as given */
    CHECK_EQ_STR(buf, "redis://bob@h");
    tw_rr_url_redact("127.0.0.1:6379", buf, sizeof buf);
    CHECK_EQ_STR(buf, "127.0.0.1:6379");
    tw_rr_url_redact("redis://h:1/x@y", buf, sizeof buf); /* an @ past the path is no userinfo */
    CHECK_EQ_STR(buf, "redis://h:1/x@y");
}

int main(void)
{
    RUN(test_plain_forms);
    RUN(test_redis_urls);
    RUN(test_credentials);
    RUN(test_reserved_schemes);
    RUN(test_refused);
    RUN(test_reasons_never_quote);
    RUN(test_addr_and_redact);
    return test_summary();
}
