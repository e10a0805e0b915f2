/* SPDX-License-Identifier: MIT */
/* What the W7 probes (w7_start, w7_schemas) share: loading a script and
 * reading the server's CPU. Header-only, as bench_util.h. */
#ifndef TWHEEL_BENCH_W7_PROBE_H
#define TWHEEL_BENCH_W7_PROBE_H

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "fixture.h"

/* SCRIPT LOAD body into sha (40 hex digits and a NUL); 0 or -1, said on
 * stderr under the program's name. */
static inline int w7_load(const char *prog, redisContext *c, const char *body, char sha[41])
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", body);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    else
        fprintf(stderr, "%s: SCRIPT LOAD failed: %s\n", prog, r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The server's CPU so far (INFO used_cpu_user + used_cpu_sys), s. */
static inline int w7_server_cpu(const struct rfx_server *s, double *out)
{
    double u, y;
    if (rfx_info_double(s, "used_cpu_user", &u) || rfx_info_double(s, "used_cpu_sys", &y))
        return -1;
    *out = u + y;
    return 0;
}

#endif
