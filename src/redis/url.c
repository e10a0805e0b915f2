/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the connection syntax. One server entry of the
 * configuration, parsed:
 *
 *   entry  = "host:port" | "[v6]:port" | "/socket/path"     (plain forms)
 *          | "redis://"  [userinfo "@"] hostport ["/" [db]]
 *          | "rediss://" [userinfo "@"] hostport ["/" [db]]  (TLS)
 *          | "unix://"   [userinfo "@"] /socket/path ["?db=" db]
 *          | "redis+sentinel://" [userinfo "@"] hostport *("," hostport) "/" master ["/" db]
 *                                               (1..16 Sentinels, asked in that order)
 *   userinfo = [user] [":" password]             percent-encoded (%XX); for a
 *                                                Sentinel URL: the master's (and
 *                                                its replicas'), not the Sentinels'
 *   hostport = host [":" port]                   port 1..65535, default 6379
 *                                                (26379 for a Sentinel)
 *   host     = name or IPv4 (letters, digits, ".", "-", "_"), or "[" IPv6 "]"
 *   db       = decimal 0..1000000
 *
 * Schemes are matched without regard to case (RFC 3986). The userinfo ends
 * at the last "@" before the path, so an "@" in a password may go
 * unencoded; ":", "/", "?", "#" and "%" in a user or password must be
 * encoded. A plain "host:port" keeps what the layer always took: its host
 * may be an unbracketed IPv6 address (the last ":" starts the port); the
 * plain path is taken as written (no decoding, no query). Queries other
 * than a unix socket's db=, and fragments, are refused: a later option
 * (TLS files, say) gets a name of its own rather than being ignored.
 *
 * Errors name what is wrong, never quote the entry: it may hold a password.
 */
#include "redis/url.h"

#include <stdio.h>
#include <string.h>

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode s[0..n) into dst (cap bytes, NUL included). */
static int decode(const char *s, size_t n, char *dst, size_t cap, const char *what,
                  const char **why)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (n - i < 3 || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0) {
                *why = "a % not followed by two hex digits";
                return -1;
            }
            c = hexval(s[i + 1]) * 16 + hexval(s[i + 2]);
            i += 2;
            if (c == 0) {
                *why = "a NUL byte (%00) in the URL";
                return -1;
            }
        }
        if (k + 1 >= cap) {
            *why = what;
            return -1;
        }
        dst[k++] = (char)c;
    }
    dst[k] = 0;
    return 0;
}

/* Digits only, lo..hi. */
static int number(const char *s, size_t n, long lo, long hi, long *out)
{
    if (n == 0 || n > 7)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static bool name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_';
}

static bool v6_char(int c)
{
    return hexval(c) >= 0 || c == ':' || c == '.';
}

/* host[:port] or [v6][:port], s[0..n). plain: the port is required and the
 * host may be an unbracketed IPv6 address (the layer's old "host:port"). */
static int hostport(const char *s, size_t n, bool plain, int dflt, struct tw_rr_url *u,
                    const char **why)
{
    const char *h = s, *p = NULL;
    size_t hl;
    bool v6 = false;
    if (n > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close) {
            *why = "an IPv6 address without its closing ]";
            return -1;
        }
        h = s + 1;
        hl = (size_t)(close - h);
        size_t rest = n - (size_t)(close + 1 - s);
        if (rest > 0 && close[1] != ':') {
            *why = "something after the ] other than :port";
            return -1;
        }
        p = rest > 0 ? close + 1 : NULL;
        v6 = true;
    } else {
        const char *colon = NULL;
        if (plain) {
            for (size_t i = n; i > 0; i--)
                if (s[i - 1] == ':') {
                    colon = s + i - 1;
                    break;
                }
        } else {
            colon = memchr(s, ':', n);
        }
        hl = colon ? (size_t)(colon - s) : n;
        p = colon;
        v6 = plain && memchr(s, ':', hl) != NULL;
    }
    if (hl == 0) {
        *why = "an empty host";
        return -1;
    }
    if (hl >= sizeof u->host) {
        *why = "a host name longer than 255 bytes";
        return -1;
    }
    for (size_t i = 0; i < hl; i++)
        if (v6 ? !v6_char((unsigned char)h[i]) : !name_char((unsigned char)h[i])) {
            *why = v6 ? "a character that is not in an IPv6 address"
                      : "a character that is not in a host name (letters, digits, . - _)";
            return -1;
        }
    if (v6 && !memchr(h, ':', hl)) {
        *why = "an IPv6 address without a :";
        return -1;
    }
    memcpy(u->host, h, hl);
    u->host[hl] = 0;
    if (!p) {
        if (plain) {
            *why = "no port (host:port)";
            return -1;
        }
        u->port = dflt;
        return 0;
    }
    long port;
    size_t pl = n - (size_t)(p + 1 - s);
    if (number(p + 1, pl, 1, 65535, &port) != 0) {
        *why = pl == 0 ? "an empty port" : "a port that is not a number in 1..65535";
        return -1;
    }
    u->port = (int)port;
    return 0;
}

/* The userinfo of s[0..n): up to the last "@"; sets *at past it (s when
 * there is none). */
static int userinfo(const char *s, size_t n, struct tw_rr_url *u, const char **at,
                    const char **why)
{
    const char *last = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '@')
            last = s + i;
    *at = s;
    if (!last)
        return 0;
    size_t ul = (size_t)(last - s);
    const char *colon = memchr(s, ':', ul);
    size_t nl = colon ? (size_t)(colon - s) : ul;
    const char *toolong = "a user name or password longer than 255 bytes";
    if (decode(s, nl, u->user, sizeof u->user, toolong, why) != 0)
        return -1;
    u->has_user = nl > 0;
    if (colon) {
        if (decode(colon + 1, ul - nl - 1, u->pass, sizeof u->pass, toolong, why) != 0)
            return -1;
        u->has_pass = true;
    }
    *at = last + 1;
    return 0;
}

static int parse_db(const char *s, size_t n, struct tw_rr_url *u, const char **why)
{
    long db;
    if (number(s, n, 0, TW_RR_URL_DB_MAX, &db) != 0) {
        *why = "a database that is not a number in 0..1000000";
        return -1;
    }
    u->db = (int)db;
    return 0;
}

static int socket_path(const char *s, size_t n, bool decoded, struct tw_rr_url *u,
                       const char **why)
{
    const char *toolong = "a socket path longer than 107 bytes";
    if (decoded) {
        if (decode(s, n, u->host, TW_RR_URL_PATH, toolong, why) != 0)
            return -1;
    } else {
        if (n >= TW_RR_URL_PATH) {
            *why = toolong;
            return -1;
        }
        memcpy(u->host, s, n);
        u->host[n] = 0;
    }
    if (u->host[0] != '/' || u->host[1] == 0) {
        *why = "a socket path that is not absolute (/...)";
        return -1;
    }
    u->scheme = TW_RR_UNIX;
    u->port = 0;
    return 0;
}

/* unix:// [userinfo @] /path [?db=N] */
static int parse_unix(const char *s, struct tw_rr_url *u, const char **why)
{
    size_t n = strlen(s);
    const char *slash = memchr(s, '/', n);
    const char *path;
    if (userinfo(s, slash ? (size_t)(slash - s) : n, u, &path, why) != 0)
        return -1;
    if (path != (slash ? slash : s + n) || !slash) {
        *why = "a unix:// URL without an absolute socket path";
        return -1;
    }
    size_t pl = strcspn(path, "?#");
    if (socket_path(path, pl, true, u, why) != 0)
        return -1;
    const char *q = path + pl;
    if (*q == 0)
        return 0;
    if (*q == '#' || strncmp(q, "?db=", 4) != 0 || strchr(q + 4, '&') || strchr(q + 4, '#')) {
        *why = "a query other than ?db=N, or a fragment";
        return -1;
    }
    return parse_db(q + 4, strlen(q + 4), u, why);
}

/* redis://, rediss://, redis+sentinel:// after the scheme */
static int parse_net(const char *s, struct tw_rr_url *u, const char **why)
{
    size_t n = strlen(s), al = strcspn(s, "/?#");
    const char *hp;
    if (userinfo(s, al, u, &hp, why) != 0)
        return -1;
    bool sentinel = u->scheme == TW_RR_SENTINEL;
    if (sentinel) { /* host:port[,host:port...], each kept in sent[]; the first in host */
        const char *h = hp, *end = s + al;
        for (;;) {
            size_t hl = strcspn(h, ",/?#"); /* ends at a comma, or at end */
            if (u->nsent == TW_RR_URL_SENTINELS) {
                *why = "more than 16 Sentinels in one URL";
                return -1;
            }
            if (hostport(h, hl, false, 26379, u, why) != 0)
                return -1;
            memcpy(u->sent[u->nsent].host, u->host, sizeof u->host);
            u->sent[u->nsent++].port = u->port;
            if (h + hl >= end)
                break;
            h += hl + 1; /* past the comma */
        }
        memcpy(u->host, u->sent[0].host, sizeof u->host);
        u->port = u->sent[0].port;
    } else if (hostport(hp, (size_t)(s + al - hp), false, 6379, u, why) != 0) {
        return -1;
    }
    const char *rest = s + al;
    if (strcspn(rest, "?#") != n - al) {
        *why = "a query or fragment (none is supported)";
        return -1;
    }
    if (sentinel) { /* "/" master ["/" db] */
        const char *m = rest[0] == '/' ? rest + 1 : rest;
        size_t ml = strcspn(m, "/");
        if (ml == 0) {
            *why = "a Sentinel URL without the master's name (/name)";
            return -1;
        }
        if (decode(m, ml, u->master, sizeof u->master, "a master name longer than 255 bytes",
                   why) != 0)
            return -1;
        rest = m + ml;
    }
    if (rest[0] == 0 || (rest[0] == '/' && rest[1] == 0))
        return 0;
    return parse_db(rest + 1, strlen(rest + 1), u, why);
}

static const struct {
    const char *name;
    enum tw_rr_scheme scheme;
} rr_schemes[] = {
    {"redis://", TW_RR_TCP},
    {"rediss://", TW_RR_TLS},
    {"unix://", TW_RR_UNIX},
    {"redis+sentinel://", TW_RR_SENTINEL},
};

int tw_rr_url_parse(const char *s, struct tw_rr_url *u, const char **why)
{
    const char *unused; /* the reason, when the caller wants none */
    if (!why)
        why = &unused;
    memset(u, 0, sizeof *u);
    u->db = -1;
    if (!s || !*s) {
        *why = "an empty server entry";
        return -1;
    }
    if (s[0] == '/') /* a plain path, whatever it holds */
        return socket_path(s, strlen(s), false, u, why);
    const char *sep = strstr(s, "://");
    if (!sep) {
        u->scheme = TW_RR_TCP;
        return hostport(s, strlen(s), true, 0, u, why);
    }
    size_t sl = (size_t)(sep - s) + 3;
    for (size_t i = 0; i < sizeof rr_schemes / sizeof rr_schemes[0]; i++) {
        if (strlen(rr_schemes[i].name) != sl)
            continue;
        size_t k = 0;
        while (k < sl && (s[k] | 0x20) == (rr_schemes[i].name[k] | 0x20))
            k++;
        if (k < sl)
            continue;
        u->scheme = rr_schemes[i].scheme;
        return u->scheme == TW_RR_UNIX ? parse_unix(s + sl, u, why) : parse_net(s + sl, u, why);
    }
    *why = "an unknown scheme (redis://, rediss://, unix://, redis+sentinel://)";
    return -1;
}

size_t tw_rr_url_addr(const struct tw_rr_url *u, char *buf, size_t len)
{
    int n;
    if (u->scheme == TW_RR_UNIX)
        n = snprintf(buf, len, "%s", u->host);
    else if (strchr(u->host, ':'))
        n = snprintf(buf, len, "[%s]:%d", u->host, u->port);
    else
        n = snprintf(buf, len, "%s:%d", u->host, u->port);
    return n < 0 ? 0 : (size_t)n;
}

size_t tw_rr_url_redact(const char *s, char *buf, size_t len)
{
    const char *sep = s && s[0] != '/' ? strstr(s, "://") : NULL;
    const char *at = NULL, *colon = NULL;
    if (sep) { /* the userinfo runs to the last "@" before the path */
        const char *info = sep + 3;
        for (size_t i = 0, al = strcspn(info, "/"); i < al; i++)
            if (info[i] == '@')
                at = info + i;
        colon = at ? memchr(info, ':', (size_t)(at - info)) : NULL;
    }
    int n = colon ? snprintf(buf, len, "%.*s***%s", (int)(colon + 1 - s), s, at)
                  : snprintf(buf, len, "%s", s ? s : "");
    return n < 0 ? 0 : (size_t)n;
}

size_t tw_rr_url_entry_len(const char *list)
{
    static const char sch[] = "redis+sentinel://";
    size_t k = 0;
    while (k < sizeof sch - 1 && list[k] && (list[k] | 0x20) == sch[k])
        k++;
    if (k < sizeof sch - 1) /* another scheme, or none: up to the first comma */
        return strcspn(list, ",");
    size_t hosts = k + strcspn(list + k, "/"); /* the Sentinels end at the path */
    return hosts + strcspn(list + hosts, ",");
}
