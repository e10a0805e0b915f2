/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: one server address, parsed (url.c; not installed).
 *
 * Apart from internal.h so that the parser builds without hiredis (its unit
 * test and its fuzz target compile url.c alone). The grammar is in url.c
 * and, for users, in include/twheel/redis.h ("Connecting").
 */
#ifndef TWHEEL_REDIS_URL_H
#define TWHEEL_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

enum tw_rr_scheme {
    TW_RR_TCP,      /* "host:port", "[v6]:port", redis:// */
    TW_RR_UNIX,     /* "/path", unix:// */
    TW_RR_TLS,      /* rediss:// (TLS: transport.c) */
    TW_RR_SENTINEL  /* redis+sentinel:// (host, port: the first Sentinel; sent[]: all) */
};

#define TW_RR_URL_HOST 256 /* host name or address, NUL included */
#define TW_RR_URL_PATH 108 /* a unix socket path, NUL included (sun_path) */
#define TW_RR_URL_CRED 256 /* a user name or a password, decoded, NUL included */
#define TW_RR_URL_DB_MAX 1000000 /* most a database number may be */
#define TW_RR_URL_SENTINELS 16   /* most Sentinels one redis+sentinel:// entry names */

struct tw_rr_url {
    enum tw_rr_scheme scheme;
    char host[TW_RR_URL_HOST]; /* name or address (IPv6 without brackets); unix: the path */
    int port;                  /* 1..65535; 0 for a unix socket */
    bool has_user, has_pass;   /* the URL named a user / a password (either may be "") */
    char user[TW_RR_URL_CRED]; /* percent-decoded */
    char pass[TW_RR_URL_CRED]; /* percent-decoded */
    int db;                    /* database number, -1: not given */
    char master[TW_RR_URL_HOST]; /* redis+sentinel: the master's name (percent-decoded) */
    size_t nsent;                /* redis+sentinel: the Sentinels listed (1..16), in order */
    struct {
        char host[TW_RR_URL_HOST];
        int port;
    } sent[TW_RR_URL_SENTINELS];
};

/* Parse one server entry: a plain "host:port", "[v6]:port" or "/socket/path",
 * or a redis://, rediss://, unix:// or redis+sentinel:// URL. 0 and *u, or
 * -1 with *why (a static text naming what is wrong; never quoting the
 * entry, which may hold a password). O(length), no allocation. */
int tw_rr_url_parse(const char *s, struct tw_rr_url *u, const char **why);

/* The address alone, as the router's seeds and error texts name a server:
 * "host:port", "[v6]:port" or the socket path; no credentials. Truncated
 * to len (NUL-terminated when len > 0); returns the full length. */
size_t tw_rr_url_addr(const struct tw_rr_url *u, char *buf, size_t len);

/* A copy of an entry fit to print: a URL's password replaced by "***"
 * (the user kept), anything else as given. Truncated as above; returns
 * the full length. */
size_t tw_rr_url_redact(const char *s, char *buf, size_t len);

/* The length of the first entry of a comma-separated list of entries (as
 * the tools take --servers): up to the first comma, but a redis+sentinel://
 * entry keeps the commas of its Sentinel list (those before its path).
 * O(length). */
size_t tw_rr_url_entry_len(const char *list);

#endif /* TWHEEL_REDIS_URL_H */
