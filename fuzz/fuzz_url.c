/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the Redis layer's connection syntax (src/redis/url.c,
 * built alone: no hiredis). The input, cut at its first NUL, is one servers
 * entry. The parser must not crash or read past it, and what it accepts
 * must hold together:
 *  - the address it gives (tw_rr_url_addr) parses again, as a plain entry,
 *    to the same host and port: the router's seeds are those addresses;
 *  - the redacted copy (tw_rr_url_redact) of an entry with a password parses
 *    to the same entry with the password "***": the user and the rest kept;
 *  - the fields are within their documented ranges.
 * Aborts at the first disagreement. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis/url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    struct tw_rr_url u, v;
    const char *why = NULL;
    if (tw_rr_url_parse(s, &u, &why) != 0) {
        check(why != NULL && strlen(why) > 0);
        free(s);
        return 0;
    }
    check(strlen(u.host) > 0 && strlen(u.host) < sizeof u.host);
    check(u.db >= -1 && u.db <= TW_RR_URL_DB_MAX);
    if (u.scheme == TW_RR_UNIX) {
        check(u.port == 0 && u.host[0] == '/' && strlen(u.host) < TW_RR_URL_PATH);
    } else {
        check(u.port >= 1 && u.port <= 65535);
        /* the address round trip */
        char addr[TW_RR_URL_HOST + 16];
        size_t n = tw_rr_url_addr(&u, addr, sizeof addr);
        check(n < sizeof addr);
        check(tw_rr_url_parse(addr, &v, &why) == 0);
        check(v.scheme == TW_RR_TCP && v.port == u.port && strcmp(v.host, u.host) == 0);
        check(!v.has_user && !v.has_pass && v.db == -1);
    }
    if (u.scheme == TW_RR_UNIX) {
        char addr[TW_RR_URL_PATH + 1];
        tw_rr_url_addr(&u, addr, sizeof addr);
        check(tw_rr_url_parse(addr, &v, &why) == 0 && v.scheme == TW_RR_UNIX &&
              strcmp(v.host, u.host) == 0);
    }
    /* a Sentinel list: 1..16 entries, the first of them in host and port, and
     * the list is the whole entry (tw_rr_url_entry_len, as the tools split) */
    if (u.scheme == TW_RR_SENTINEL) {
        check(u.nsent >= 1 && u.nsent <= TW_RR_URL_SENTINELS);
        check(u.sent[0].port == u.port && strcmp(u.sent[0].host, u.host) == 0);
        for (size_t i = 0; i < u.nsent; i++)
            check(u.sent[i].port >= 1 && u.sent[i].port <= 65535 && u.sent[i].host[0]);
        const char *path = strchr(s + 17, '/'); /* after "redis+sentinel://" and the hosts */
        check(path != NULL);
        if (!strchr(path, ','))
            check(tw_rr_url_entry_len(s) == strlen(s));
    } else {
        check(u.nsent == 0);
    }
    /* the redacted copy: the same entry with "***" for the password */
    if (u.has_pass) {
        char *red = malloc(size + 8);
        check(red != NULL);
        check(tw_rr_url_redact(s, red, size + 8) < size + 8);
        check(tw_rr_url_parse(red, &v, &why) == 0);
        check(v.scheme == u.scheme && v.port == u.port && v.db == u.db &&
              strcmp(v.host, u.host) == 0 && strcmp(v.master, u.master) == 0 &&
              v.nsent == u.nsent);
        check(v.has_user == u.has_user && strcmp(v.user, u.user) == 0);
        check(v.has_pass && strcmp(v.pass, "***") == 0);
        free(red);
    }
    free(s);
    return 0;
}
