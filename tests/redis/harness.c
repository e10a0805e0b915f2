/* SPDX-License-Identifier: MIT */
/* Worker processes, delivery records and their judgement; see harness.h. */
#define _GNU_SOURCE
#include "harness.h"

#include "fixture.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "twheel/redis.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RW_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(undefined_behavior_sanitizer)
#define RW_SANITIZED 1
#endif
#endif
#ifndef RW_SANITIZED
#define RW_SANITIZED 0
#endif

struct tw_redis_stats rw_wait_drained(struct tw_redis *client, uint64_t deadline_ms)
{
    return rw_wait_pending(client, 0, deadline_ms);
}

struct tw_redis_stats rw_wait_pending(struct tw_redis *client, uint64_t left,
                                      uint64_t deadline_ms)
{
    struct tw_redis_stats st = {.pending = UINT64_MAX};
    for (;;) {
        if (tw_redis_stats(client, &st) == 0 && st.pending <= left)
            break;
        if (rfx_mono_ms() >= deadline_ms)
            break;
        rfx_sleep_ms(100);
    }
    return st;
}

uint64_t rw_test_size(uint64_t dflt)
{
    const char *e = getenv("TWHEEL_REDIS_TEST_N");
    if (e && *e) {
        uint64_t v = strtoull(e, NULL, 10);
        if (v > 0)
            return v;
    }
    if (RW_SANITIZED)
        dflt /= 5;
    return dflt < 1000 ? 1000 : dflt;
}

int rw_spawn(const char *worker, const struct rw_opts *o, pid_t *pid, const char *log)
{
    char num[11][16];
    const char *argv[64];
    size_t n = 0, k = 0;
    for (size_t i = 0; o->prefix && o->prefix[i] && n < 16; i++)
        argv[n++] = o->prefix[i];
    argv[n++] = worker;
#define RW_STR(flag, v)      \
    do {                     \
        if (v) {             \
            argv[n++] = flag; \
            argv[n++] = v;   \
        }                    \
    } while (0)
#define RW_NUM(flag, v)                                  \
    do {                                                 \
        if (v) {                                         \
            snprintf(num[k], sizeof num[k], "%u", (v)); \
            argv[n++] = flag;                            \
            argv[n++] = num[k++];                        \
        }                                                \
    } while (0)
    RW_STR("--servers", o->servers);
    RW_STR("--queue", o->queue);
    RW_STR("--out", o->out);
    RW_STR("--stats", o->stats);
    RW_STR("--mode", o->mode);
    RW_STR("--fail-prefix", o->fail_prefix);
    RW_NUM("--partitions", o->partitions);
    RW_NUM("--threads", o->threads);
    RW_NUM("--lease-ms", o->lease_ms);
    RW_NUM("--window-ms", o->window_ms);
    RW_NUM("--tick-ms", o->tick_ms);
    RW_NUM("--exec-us", o->exec_us);
    RW_NUM("--interval-ms", o->interval_ms);
    RW_NUM("--batch", o->batch);
    RW_NUM("--ahead-ms", o->ahead_ms);
    RW_NUM("--hold-ms", o->hold_ms);
    RW_STR("--tls-ca", o->tls_ca);
    RW_STR("--tls-cert", o->tls_cert);
    RW_STR("--tls-key", o->tls_key);
#undef RW_STR
#undef RW_NUM
    argv[n] = NULL;
    return rfx_spawn(pid, (char *const *)argv, log);
}

int rw_stop(pid_t pid, int timeout_ms)
{
    int status = 0;
    if (rfx_signal(pid, SIGTERM) != 0)
        return -1;
    if (rfx_wait(pid, timeout_ms, &status) != 0) {
        fprintf(stderr, "rw: worker %d did not stop within %d ms: SIGKILL\n", (int)pid,
                timeout_ms);
        rfx_reap(pid);
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rw: worker %d ended with status %d\n", (int)pid, status);
        return -1;
    }
    return 0;
}

int rdel_load(struct rdel_set *s, const char *path, const char *prefix, uint64_t nids)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t pl = strlen(prefix);
    char line[1024];
    uint64_t seq = 0;
    while (fgets(line, sizeof line, f)) {
        struct rdel d;
        memset(&d, 0, sizeof d);
        char *p = line;
        if (strncmp(p, prefix, pl) != 0 || !strchr(p, '\n')) {
            s->bad_lines++;
            continue;
        }
        p += pl;
        char *end;
        d.id = strtoull(p, &end, 10);
        unsigned long long due, start, lease_end = 0;
        unsigned att;
        int pid;
        if (end == p || *end != ' ' || d.id >= nids ||
            sscanf(end, " %u %llu %llu %d %llu", &att, &due, &start, &pid, &lease_end) < 4) {
            s->bad_lines++;
            continue;
        }
        d.attempt = att;
        d.due_ms = due;
        d.start_us = start;
        d.lease_end_ms = lease_end;
        d.pid = pid;
        d.seq = seq++;
        if (s->n == s->cap) {
            size_t cap = s->cap ? s->cap * 2 : 4096;
            struct rdel *v = realloc(s->v, cap * sizeof *v);
            if (!v) {
                fclose(f);
                return -1;
            }
            s->v = v;
            s->cap = cap;
        }
        s->v[s->n++] = d;
    }
    fclose(f);
    return 0;
}

void rdel_free(struct rdel_set *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

uint64_t rdel_count_ids(const struct rdel_set *s, uint64_t nids)
{
    unsigned char *seen = calloc(nids ? nids : 1, 1);
    if (!seen)
        return 0;
    uint64_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i].id < nids && !seen[s->v[i].id]) {
            seen[s->v[i].id] = 1;
            n++;
        }
    free(seen);
    return n;
}

static int by_id_start(const void *a, const void *b)
{
    const struct rdel *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    if (x->start_us != y->start_us)
        return x->start_us < y->start_us ? -1 : 1;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int rverdict_compute(struct rdel_set *s, uint64_t nids, const bool *required,
                     const uint64_t *due_lo_ms, uint32_t lease_ms, uint32_t window_ms,
                     struct rverdict *out)
{
    memset(out, 0, sizeof *out);
    out->first_missing = UINT64_MAX;
    out->first_start_us = UINT64_MAX;
    out->deliveries = s->n;
    if (s->n > 1)
        qsort(s->v, s->n, sizeof *s->v, by_id_start);
    uint64_t *late = malloc((s->n ? s->n : 1) * sizeof *late);
    if (!late)
        return -1;
    size_t nl = 0, i = 0;
    for (uint64_t id = 0; id < nids; id++) {
        bool req = !required || required[id];
        if (req)
            out->expected++;
        if (i >= s->n || s->v[i].id != id) {
            if (req) {
                out->missing++;
                if (out->first_missing == UINT64_MAX)
                    out->first_missing = id;
            }
            continue;
        }
        const struct rdel *first = &s->v[i];
        if (req) {
            out->delivered++;
            uint64_t due_us = first->due_ms * 1000u;
            late[nl++] = first->start_us > due_us ? first->start_us - due_us : 0;
            if (first->start_us < out->first_start_us)
                out->first_start_us = first->start_us;
            if (first->start_us > out->last_start_us)
                out->last_start_us = first->start_us;
        }
        for (; i < s->n && s->v[i].id == id; i++) {
            const struct rdel *d = &s->v[i];
            if (d->start_us < d->due_ms * 1000u)
                out->early++;
            else if (due_lo_ms && d->due_ms + 1 < due_lo_ms[id])
                out->early++;
            if (d->attempt > 1)
                out->redelivered++;
            if (d != first) {
                /* The previous holder's lease ran from its claim (at the
                 * earliest due - window) or, once started, to the end its
                 * START granted (by the Redis clock: 200 ms slack). */
                out->duplicates++;
                uint64_t w = window_ms < lease_ms ? window_ms : lease_ms;
                uint64_t earliest = (d->due_ms + lease_ms - w) * 1000u;
                uint64_t after_prev = d[-1].lease_end_ms
                                          ? d[-1].lease_end_ms * 1000u
                                          : d[-1].start_us + (uint64_t)lease_ms * 1000u;
                after_prev = after_prev > 200000u ? after_prev - 200000u : 0;
                if (after_prev > earliest)
                    earliest = after_prev;
                if (d->start_us < earliest)
                    out->unexplained++;
            }
        }
    }
    if (nl > 1)
        qsort(late, nl, sizeof *late, cmp_u64);
    if (nl) {
        out->late_p50_us = late[(nl - 1) / 2];
        out->late_p99_us = late[(nl - 1) * 99 / 100];
        out->late_max_us = late[nl - 1];
    }
    free(late);
    return 0;
}

void rverdict_print(const struct rverdict *v, const char *label)
{
    printf("%s: delivered %" PRIu64 "/%" PRIu64 ", missing %" PRIu64 ", early %" PRIu64
           ", duplicates %" PRIu64 " (%" PRIu64 " unexplained by a lease), attempts>1 %" PRIu64
           ", lateness p50 %.2f ms p99 %.2f ms max %.2f ms\n",
           label, v->delivered, v->expected, v->missing, v->early, v->duplicates, v->unexplained,
           v->redelivered, v->late_p50_us / 1000.0, v->late_p99_us / 1000.0,
           v->late_max_us / 1000.0);
    if (v->missing)
        printf("%s: first missing id %" PRIu64 "\n", label, v->first_missing);
}

uint64_t rw_redis_ms(redisContext *tc)
{
    if (!tc)
        return 0;
    redisReply *r = redisCommand(tc, "TIME");
    uint64_t ms = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        ms = strtoull(r->element[0]->str, NULL, 10) * 1000u +
             strtoull(r->element[1]->str, NULL, 10) / 1000u;
    if (r)
        freeReplyObject(r);
    return ms;
}

int rw_set_range(struct tw_redis *r, redisContext *tc, const char *prefix, uint64_t first,
                 size_t n, const int64_t *delays, uint64_t *due_lo_ms)
{
    enum { KEY_MAX = 64 };
    struct tw_redis_item *items = calloc(n ? n : 1, sizeof *items);
    char *keys = malloc((n ? n : 1) * KEY_MAX);
    if (!items || !keys) {
        free(items);
        free(keys);
        return TW_ENOMEM;
    }
    static const char payload[33] = "0123456789abcdef0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        char *k = keys + i * KEY_MAX;
        int len = snprintf(k, KEY_MAX, "%s%" PRIu64, prefix, first + i);
        items[i].key = k;
        items[i].key_len = (size_t)len;
        items[i].payload = payload;
        items[i].payload_len = 32;
        items[i].delay_ms = delays[i];
    }
    uint64_t t0 = rw_redis_ms(tc);
    int rc = tw_redis_set_many(r, items, n);
    if (due_lo_ms)
        for (size_t i = 0; i < n; i++)
            due_lo_ms[first + i] = t0 + (uint64_t)delays[i];
    free(items);
    free(keys);
    return rc;
}
