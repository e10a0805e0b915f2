/* SPDX-License-Identifier: MIT */
/* twheel Redis layer: the Prometheus text rendering (tw_redis_metrics).
 *
 * The figures are a table, rr_metrics: one line per metric (or per labelled
 * series of one), naming the field it reads in struct tw_redis_stats (the
 * worker's, W_) or struct tw_redis_counts (the queue's, Q_). Adding a figure
 * is adding a field at the end of one of those structs and a line here.
 * Lines of one name sit together: HELP and TYPE are written before the
 * first. A figure kept in ms is rendered in seconds (div 1000), the
 * format's base unit. Every series carries queue="NAME" (escaped as the format wants).
 *
 * The lateness histogram is the worker's own (stats.c: log-linear, eighths
 * of a power of two, in whole us), folded into buckets at powers of two:
 * le = 2^k us holds the values below 2^k us, which is exact since a value
 * is the lateness truncated to whole us (v < 2^k exactly when the lateness
 * is below 2^k us). _sum is the sum of the recorded values (late_sum_us).
 *
 * A client without a worker renders the queue's figures only: its own
 * counters would be zeros that a scraper sums with the workers'.
 *
 * Text exposition format 0.0.4: "# HELP name text", "# TYPE name type",
 * then "name{labels} value" lines, each ending in \n. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "redis/internal.h"

enum { RR_W, RR_Q };

struct rr_metric {
    const char *name, *type, *labels, *help; /* labels: "" or `k="v"`, after queue's */
    unsigned char src;                       /* RR_W or RR_Q */
    unsigned char size;                      /* of the field: 1, 4 or 8 bytes */
    size_t off;
    unsigned div; /* 0: the field as it is; else the field / div, as a decimal (ms to s) */
};

#define W_(f) RR_W, sizeof(((struct tw_redis_stats *)0)->f), offsetof(struct tw_redis_stats, f), 0
#define Q_(f) RR_Q, sizeof(((struct tw_redis_counts *)0)->f), offsetof(struct tw_redis_counts, f), 0
#define Q_MS(f) /* a field in ms, rendered in seconds */                                          \
    RR_Q, sizeof(((struct tw_redis_counts *)0)->f), offsetof(struct tw_redis_counts, f), 1000
#define RR_C "counter"
#define RR_G "gauge"
/* One line per metric: a counter or a gauge of the worker's (tw_redis_stats
 * field f, named twheel_redis_f[_total]), a gauge of the queue's
 * (tw_redis_counts field f); a labelled series or another unit in full. */
#define WC(f, help) {"twheel_redis_" #f "_total", RR_C, "", help, W_(f)}
#define WG(f, help) {"twheel_redis_" #f, RR_G, "", help, W_(f)}
#define QG(f, help) {"twheel_redis_" #f, RR_G, "", help, Q_(f)}

static const struct rr_metric rr_metrics[] = {
    WC(delivered, "execute calls answered DONE and acknowledged"),
    WC(redelivered, "deliveries with attempt > 1"),
    WC(failed, "execute calls answered FAILED"),
    WC(stale_acks, "acknowledgements refused: the lease was gone"),
    WC(claims, "claim script calls"),
    WC(refills, "periodic refill rounds"),
    WC(notifications, "notifications received"),
    WC(recovered, "expired leases moved back to due"),
    WC(lost_leases, "held tasks not started: their lease was gone"),
    WC(fenced, "started tasks not executed: the lease may have ended"),
    WC(reconnects, "connections re-established after a failure"),
    WC(oom_refusals, "calls refused at maxmemory"),
    WC(worker_errors, "error replies the worker's threads met"),
    WC(dead, "tasks this worker's scripts moved to the dead letters"),
    WC(events_dropped, "events not given to on_event: its queue was full"),
    WC(schedule_fires, "schedule occurrences this worker made tasks"),
    WC(silent_marks, "times a cluster master was taken as silent (silent_ms)"),
    WG(leased, "tasks this worker holds now"),
    WG(evicting_nodes, "connected servers whose policy may evict the queue's keys"),
    {"twheel_redis_tasks", RR_G, "state=\"waiting\"", "the queue's tasks by state", Q_(waiting)},
    {"twheel_redis_tasks", RR_G, "state=\"held\"", "", Q_(held)},
    {"twheel_redis_tasks", RR_G, "state=\"running\"", "", Q_(running)},
    QG(due_within, "waiting tasks due within the scrape's horizon"),
    {"twheel_redis_queue_lag_seconds", RR_G, "", "how late the most overdue waiting task is",
     Q_MS(lag_ms)},
    {"twheel_redis_paused_partitions", RR_G, "", "partitions paused", Q_(paused)},
    {"twheel_redis_dead_letters", RR_G, "", "the queue's dead letters", Q_(dead)},
    QG(schedules, "the queue's recurring schedules"),
};

/* An appender: writes what fits, counts all. */
struct rr_out {
    char *buf;
    size_t cap, len;
};

static void rr_put(struct rr_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rr_put(struct rr_out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

static uint64_t rr_field(const void *base, const struct rr_metric *m)
{
    const char *p = (const char *)base + m->off;
    if (m->size == 1)
        return *(const unsigned char *)p;
    if (m->size == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* The lateness histogram: cumulative counts at le = 2^k us, k = 4 .. 26. */
static void rr_histogram(struct tw_redis *r, struct rr_out *o, const char *q)
{
    uint64_t h[TW_RR_HIST], n, sum;
    pthread_mutex_lock(&r->hist_mu);
    memcpy(h, r->hist, sizeof h);
    n = r->hist_n;
    sum = r->late_sum_us;
    pthread_mutex_unlock(&r->hist_mu);
    const char *name = "twheel_redis_lateness_seconds";
    rr_put(o, "# HELP %s delivery lateness as execute sees it\n# TYPE %s histogram\n", name, name);
    /* bucket b (stats.c) holds values below 2^k once b < 16 + (k - 4) * 8 */
    uint64_t seen = 0;
    unsigned b = 0;
    for (unsigned k = 4; k <= 26; k++) {
        unsigned end = 16u + (k - 4u) * 8u;
        for (; b < end && b < TW_RR_HIST; b++)
            seen += h[b];
        rr_put(o, "%s_bucket{queue=\"%s\",le=\"%.6f\"} %llu\n", name, q,
               (double)(1ull << k) / 1e6, (unsigned long long)seen);
    }
    rr_put(o, "%s_bucket{queue=\"%s\",le=\"+Inf\"} %llu\n", name, q, (unsigned long long)n);
    rr_put(o, "%s_sum{queue=\"%s\"} %.6f\n", name, q, (double)sum / 1e6);
    rr_put(o, "%s_count{queue=\"%s\"} %llu\n", name, q, (unsigned long long)n);
}

int tw_redis_metrics(struct tw_redis *r, uint64_t within_ms, char *buf, size_t cap, size_t *len)
{
    if (!r || (!buf && cap))
        return TW_EINVAL;
    struct tw_redis_stats st;
    struct tw_redis_counts qc;
    (void)tw_redis_stats(r, &st); /* pending unknown on a failure: not rendered */
    bool up = tw_redis_counts(r, within_ms, &qc) == 0;
    char q[2 * TW_RR_QUEUE_MAX + 1]; /* the label value: \ " and newline escaped */
    size_t j = 0;
    for (const char *s = r->queue; *s; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            q[j++] = '\\';
        q[j++] = *s == '\n' ? 'n' : *s;
    }
    q[j] = 0;
    struct rr_out o = {buf, cap, 0};
    const char *prev = "";
    for (size_t i = 0; i < sizeof rr_metrics / sizeof rr_metrics[0]; i++) {
        const struct rr_metric *m = &rr_metrics[i];
        if ((m->src == RR_Q && !up) || (m->src == RR_W && !r->worker))
            continue;
        if (strcmp(m->name, prev) != 0)
            rr_put(&o, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
        prev = m->name;
        uint64_t v = rr_field(m->src == RR_W ? (const void *)&st : &qc, m);
        rr_put(&o, "%s{queue=\"%s\"%s%s} ", m->name, q, m->labels[0] ? "," : "", m->labels);
        if (m->div)
            rr_put(&o, "%.3f\n", (double)v / m->div);
        else
            rr_put(&o, "%llu\n", (unsigned long long)v);
    }
    rr_put(&o, "# HELP twheel_redis_queue_up whether the queue's figures could be read\n"
               "# TYPE twheel_redis_queue_up gauge\ntwheel_redis_queue_up{queue=\"%s\"} %d\n",
           q, up ? 1 : 0);
    if (r->worker)
        rr_histogram(r, &o, q);
    if (len)
        *len = o.len;
    if (o.len >= cap) {
        if (cap)
            buf[0] = 0;
        return TW_E2BIG;
    }
    return 0;
}
