/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the figures. The lateness histogram the executors
 * feed, tw_redis_stats, and (a debug build with -DTW_RR_TRACE only) the
 * stage figures of each start.
 *
 * Lateness is what execute sees: the executor reads its clock just before
 * the call and converts it to the server's with the best estimate of the
 * offset (offset.c: the middle of the tightest bounds, within half a round
 * trip), kept within what the task's own START round proves; due is
 * subtracted (execute.c). A lower bound alone would miss everything
 * between the server's reading of its clock and the reply's arrival: the
 * script's work, the reply, an fsync. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis/internal.h"

static unsigned rr_bucket(uint64_t v)
{
    if (v < 16)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return 16u + (e - 4u) * 8u + (unsigned)((v >> (e - 3u)) & 7u);
}

static uint64_t rr_bucket_value(unsigned b)
{
    if (b < 16)
        return b;
    unsigned e = (b - 16u) / 8u + 4u, sub = (b - 16u) % 8u;
    return ((uint64_t)(8u + sub) << (e - 3u)) + (((uint64_t)1 << (e - 3u)) - 1u);
}

void tw_rr_note_late(struct tw_redis *r, uint64_t us)
{
    pthread_mutex_lock(&r->hist_mu);
    r->hist[rr_bucket(us)]++;
    r->hist_n++;
    r->late_sum_us += us;
    if (us > r->late_max_us)
        r->late_max_us = us;
    pthread_mutex_unlock(&r->hist_mu);
}

static uint64_t rr_pct(const struct tw_redis *r, double q)
{
    if (r->hist_n == 0)
        return 0;
    uint64_t want = (uint64_t)((double)r->hist_n * q + 0.999999), seen = 0;
    if (want == 0)
        want = 1;
    for (unsigned b = 0; b < TW_RR_HIST; b++) {
        seen += r->hist[b];
        if (seen >= want) {
            uint64_t v = rr_bucket_value(b);
            return v < r->late_max_us ? v : r->late_max_us;
        }
    }
    return r->late_max_us;
}

#ifdef TW_RR_TRACE
void tw_rr_trace_note(struct tw_redis *r, const struct tw_rr_item *it, uint64_t take_ns,
                          uint64_t sent_ns, uint64_t reply_ns, uint64_t srv_us,
                          uint64_t exec_ns, uint32_t batch, unsigned thread)
{
    uint32_t cs = tw_rr_clock_slot(r, it->part);
    int_fast64_t a = atomic_load(&r->off_cur[cs]), b = atomic_load(&r->off_prev[cs]);
    pthread_mutex_lock(&r->hist_mu);
    if (r->ntrace == r->trace_cap) {
        size_t cap = r->trace_cap ? 2 * r->trace_cap : 4096;
        struct tw_rr_trace *t = realloc(r->trace, cap * sizeof *t);
        if (t) {
            r->trace = t;
            r->trace_cap = cap;
        }
    }
    if (r->ntrace < r->trace_cap)
        r->trace[r->ntrace++] = (struct tw_rr_trace){it->due_ms, it->due_local_ns, it->fired_ns,
                                                  take_ns, sent_ns, reply_ns, srv_us,
                                                  exec_ns, a > b ? a : b, batch, thread};
    pthread_mutex_unlock(&r->hist_mu);
}

void tw_rr_trace_dump(struct tw_redis *r)
{
    const char *base = getenv("TW_RR_TRACE_FILE");
    char path[512];
    snprintf(path, sizeof path, "%s.%d", base ? base : "/tmp/tw_rr_trace", (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        for (size_t i = 0; i < r->ntrace; i++) {
            const struct tw_rr_trace *t = &r->trace[i];
            fprintf(f, "%llu %llu %llu %llu %llu %llu %llu %lld %u %u %llu\n",
                    (unsigned long long)t->due_ms, (unsigned long long)t->due_local_ns,
                    (unsigned long long)t->fired_ns, (unsigned long long)t->take_ns,
                    (unsigned long long)t->sent_ns, (unsigned long long)t->reply_ns,
                    (unsigned long long)t->srv_us, (long long)t->off_us, t->batch, t->thread,
                    (unsigned long long)t->exec_ns);
        }
        fclose(f);
    }
    free(r->trace);
    r->trace = NULL;
    r->ntrace = r->trace_cap = 0;
}
#endif

int tw_redis_stats(const struct tw_redis *cr, struct tw_redis_stats *out)
{
    if (!cr || !out)
        return TW_EINVAL;
    struct tw_redis *r = (struct tw_redis *)cr; /* locks its mutexes; changes no state */
    memset(out, 0, sizeof *out);
    out->leased = r->local ? tw_rr_local_held(r->local) : 0;
    out->delivered = atomic_load(&r->delivered);
    out->redelivered = atomic_load(&r->redelivered);
    out->failed = atomic_load(&r->failed);
    out->stale_acks = atomic_load(&r->stale_acks);
    out->claims = atomic_load(&r->claims);
    out->refills = atomic_load(&r->refills);
    out->notifications = atomic_load(&r->notifications);
    out->recovered = atomic_load(&r->recovered);
    out->lost_leases = atomic_load(&r->lost_leases);
    out->worker_errors = atomic_load(&r->worker_errors);
    out->fenced = atomic_load(&r->fenced);
    out->dead = atomic_load(&r->dead_n);
    out->events_dropped = atomic_load(&r->events_dropped);
    out->schedule_fires = atomic_load(&r->sched_fires);
    out->silent_marks = atomic_load(&r->silent_marks);
    out->rt_refused = r->local ? tw_rr_local_rt_refused(r->local) : 0;
    pthread_mutex_lock(&r->hist_mu);
    out->late_p50_us = rr_pct(r, 0.50);
    out->late_p99_us = rr_pct(r, 0.99);
    out->late_max_us = r->late_max_us;
    pthread_mutex_unlock(&r->hist_mu);
    int rc = 0;
    uint64_t pending = 0;
    pthread_mutex_lock(&r->api_mu);
    out->reconnects = r->api.reconnects + atomic_load(&r->sub_reconnects) +
                      atomic_load(&r->worker_reconnects);
    out->oom_refusals = r->api.oom_refusals; /* the workers' scripts are never refused */
    for (size_t i = 0; i < r->api.nnodes; i++)
        out->evicting_nodes += r->api.nodes[i].c && r->api.nodes[i].check > 0;
    for (uint32_t p = 0; p < r->cfg.partitions && rc == 0; p++) {
        char kb[6][TW_RR_KEYBUF];
        const char *av[6];
        size_t al[6];
        tw_rr_keys(r, p, kb, av, al);
        const char *cmd[2] = {"HLEN", av[2]};
        size_t cl[2] = {4, al[2]};
        redisReply *x;
        rc = tw_rr_command(&r->api, r->slots[p], 2, cmd, cl, &x);
        if (rc == 0) {
            long long v = 0;
            rc = tw_rr_int_reply(x, &v);
            freeReplyObject(x);
            pending += (uint64_t)v;
        }
    }
    tw_rr_note(r, rc ? TW_EIO : 0);
    pthread_mutex_unlock(&r->api_mu);
    out->pending = rc ? UINT64_MAX : pending;
    return rc ? TW_EIO : 0;
}
