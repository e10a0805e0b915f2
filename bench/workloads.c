/* SPDX-License-Identifier: MIT */
/* The workloads W1-W4 of docs/workloads.md, and the limit probe.
 *
 * Each run is one "cell": one workload, one size, one implementation, one
 * repetition, in a process of its own (main.c forks), so that peak RSS is the
 * cell's own and a crash or a wrong answer cannot spoil the others.
 *
 * Every implementation gets the same operation sequence: the sequence comes
 * from a seeded generator and from the workload's own model of what should
 * happen, never from what the implementation did. The model also says when
 * each timer must fire, and every fire is checked against it: a timer fires
 * exactly once, at the tick of its deadline (the drivers only ever advance to
 * ticks no later than the earliest deadline, or tick by tick, so "not early and
 * not late" is "fired while the time was its deadline"). Fires are appended to
 * a log (id, tick) by the callback, a sequential write, and checked outside the
 * timed sections, so the check costs every implementation the same little.
 *
 * Timing: CLOCK_MONOTONIC around whole phases (W1, W4) or around each tick's
 * batch of operations and its advance (W2, W3), minus the measured cost of a
 * clock read per timed section. The operations of a batch are generated
 * before its timed section starts.
 */
#include "workloads.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "twheel/wheel.h"

/* ---- the worst tick ---------------------------------------------------------- */

/* A mean per tick hides how the work is spread: a wheel that moves many
 * timers in one advance (a lazy re-arm's deferred moves, a cascade) makes an
 * event loop miss its turn at that tick. Kept per run: the longest advance
 * (wall clock: it also catches an interrupt or a preemption, so compare the
 * medians over repetitions) and the most timers moved by one advance
 * (bench_impl.moves, where the implementation counts them). */
struct worst_tick {
    uint64_t ns;
    uint64_t moves;
};

static void worst_tick_add(struct worst_tick *w, const struct bench_impl *im, void *s,
                           uint64_t ns, uint64_t moves_before)
{
    if (ns > w->ns)
        w->ns = ns;
    if (im->moves) {
        uint64_t m = im->moves(s) - moves_before;
        if (m > w->moves)
            w->moves = m;
    }
}

/* us for the longest advance (less one clock read), and the most moves (-1:
 * not counted) */
static void worst_tick_done(const struct worst_tick *w, const struct bench_impl *im, double cc,
                            double *us, double *moves)
{
    double ns = (double)w->ns - cc;
    *us = (ns > 0 ? ns : 0) / 1000.0;
    *moves = im->moves ? (double)w->moves : -1;
}

/* ---- the fire log ---------------------------------------------------------- */

struct rec {
    uint32_t id;
    uint32_t tick;
};

struct drv {
    struct rec *log;
    size_t nlog, cap;
    int overflow;
    uint64_t target; /* the tick being advanced to */
};

static void drv_fire(void *c, uint32_t id)
{
    struct drv *d = c;
    if (d->nlog < d->cap) {
        d->log[d->nlog].id = id;
        d->log[d->nlog].tick = (uint32_t)d->target;
        d->nlog++;
    } else {
        d->overflow = 1;
    }
}

/* One step of "advance straight to the next deadline". */
static uint64_t step(const struct bench_impl *im, void *s, struct drv *d)
{
    if (im->advance_next)
        return im->advance_next(s); /* writes d->target itself */
    uint64_t t = im->next_deadline(s);
    if (t == BENCH_NEVER)
        return t;
    d->target = t;
    im->advance_to(s, t);
    return t;
}

/* ---- helpers ------------------------------------------------------------- */

static void fail(struct cell_result *r, const char *fmt, ...)
{
    if (!r->ok)
        return; /* keep the first error */
    r->ok = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "bench: out of memory (%zu x %zu bytes)\n", n, size);
        exit(3);
    }
    return p;
}

/* Cost of one clock read, subtracted once per timed section. */
static double clock_cost_ns(void)
{
    uint64_t best = UINT64_MAX;
    for (int k = 0; k < 5; k++) {
        uint64_t t0 = bench_real_ns();
        for (int i = 0; i < 1000; i++)
            (void)bench_real_ns();
        uint64_t t = bench_real_ns() - t0;
        if (t < best)
            best = t;
    }
    return (double)best / 1001.0;
}

/* Peak RSS of this process, from the moment of rss_reset. */
static long read_status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0) {
            v = strtol(line + klen, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static long rss_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f); /* resets VmHWM to the current RSS (Linux >= 4.0) */
        fclose(f);
    }
    return read_status_kb("VmRSS:");
}

static void rss_done(struct cell_result *r, long base_kb, size_t n)
{
    long hwm = read_status_kb("VmHWM:");
    if (hwm >= 0 && base_kb >= 0 && hwm >= base_kb)
        r->rss_per_timer = (double)(hwm - base_kb) * 1024.0 / (double)n;
    else
        r->rss_per_timer = -1;
}

static void *create(const struct bench_impl *im, struct drv *d, size_t capacity, uint64_t now,
                    uint64_t common_lo, uint64_t common_hi)
{
    struct bench_setup setup = {
        .capacity = capacity,
        .now = now,
        .fire = drv_fire,
        .ctx = d,
        .target = &d->target,
        .common_lo = common_lo,
        .common_hi = common_hi,
    };
    d->target = now;
    return im->create(&setup);
}

/* Check a log of "advance straight to the next deadline" fires: every id in
 * [0, n) exactly once, at the tick of its deadline. */
static void check_expire_log(struct cell_result *r, const struct drv *d, const uint64_t *deadline,
                             size_t n)
{
    if (d->overflow || d->nlog != n) {
        fail(r, "%zu fires for %zu timers%s", d->nlog, n, d->overflow ? " (or more)" : "");
        return;
    }
    unsigned char *fired = xcalloc(n, 1);
    for (size_t i = 0; i < d->nlog; i++) {
        uint32_t id = d->log[i].id;
        if (id >= n) {
            fail(r, "fire of unknown id %u", id);
            break;
        }
        if (fired[id]++) {
            fail(r, "timer %u fired twice", id);
            break;
        }
        if (d->log[i].tick != deadline[id]) {
            fail(r, "timer %u due at %llu fired at %u (%s)", id, (unsigned long long)deadline[id],
                 d->log[i].tick, d->log[i].tick < deadline[id] ? "early" : "late");
            break;
        }
    }
    free(fired);
}

/* ---- W1 churn -------------------------------------------------------------- */

#define W1_MAX_DELAY (UINT64_C(1) << 20)
#define CHUNK 65536

static void run_w1(const struct bench_impl *im, size_t n, uint64_t seed, struct cell_result *r)
{
    uint64_t rng = seed;
    uint64_t *deadline = xcalloc(n, sizeof *deadline);
    for (size_t i = 0; i < n; i++)
        deadline[i] = 1 + bench_below(&rng, W1_MAX_DELAY);
    uint32_t *rid = xcalloc(CHUNK, sizeof *rid);
    uint64_t *rdl = xcalloc(CHUNK, sizeof *rdl);
    struct drv d = {.log = xcalloc(n, sizeof(struct rec)), .cap = n};
    memset(d.log, 0, n * sizeof(struct rec)); /* touched before the RSS baseline */
    long base_kb = rss_reset();

    void *s = create(im, &d, n, 0, 0, 0);
    if (!s) {
        fail(r, "create failed");
        goto out;
    }
    uint64_t t0 = bench_real_ns();
    for (size_t i = 0; i < n; i++)
        im->arm(s, (uint32_t)i, deadline[i]);
    uint64_t t_add = bench_real_ns() - t0;
    r->bytes_per_timer = (double)im->bytes(s) / (double)n;

    /* reset: n times a random armed timer to a new random delay (now is 0) */
    uint64_t t_reset = 0;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        for (size_t j = 0; j < k; j++) {
            rid[j] = (uint32_t)bench_below(&rng, n);
            rdl[j] = 1 + bench_below(&rng, W1_MAX_DELAY);
        }
        t0 = bench_real_ns();
        for (size_t j = 0; j < k; j++)
            im->reset(s, rid[j], rdl[j]);
        t_reset += bench_real_ns() - t0;
        for (size_t j = 0; j < k; j++)
            deadline[rid[j]] = rdl[j];
        done += k;
    }

    /* expire: straight to the next deadline until nothing is pending */
    t0 = bench_real_ns();
    while (step(im, s, &d) != BENCH_NEVER) {
    }
    uint64_t t_expire = bench_real_ns() - t0;
    rss_done(r, base_kb, n);
    r->moves_per_timer = im->moves ? (double)im->moves(s) / (double)n : -1;
    im->destroy(s);

    check_expire_log(r, &d, deadline, n);
    r->m[0] = (double)t_add / (double)n;
    r->m[1] = (double)t_reset / (double)n;
    r->m[2] = (double)t_expire / (double)n;
out:
    free(deadline);
    free(rid);
    free(rdl);
    free(d.log);
}

/* ---- W2 heartbeat ------------------------------------------------------------ */

#define W2_TICKS 60000u   /* 60 s of 1 ms ticks */
#define W2_TIMEOUT 30000u /* 30 s idle timeout */
#define W2_SILENT_AT 5000u

static void run_w2(const struct bench_impl *im, size_t n, uint64_t seed, struct cell_result *r)
{
    uint64_t rng = seed;
    double cc = clock_cost_ns();
    uint64_t *expiry = xcalloc(n, sizeof *expiry);     /* model: when it must fire */
    unsigned char *state = xcalloc(n, 1);              /* 1 silent, 2 closed */
    uint32_t *due = xcalloc(W2_TICKS + W2_TIMEOUT + 2, sizeof *due); /* expiries per tick */
    size_t max_beats = n / 3000 + 2;
    uint32_t *beat = xcalloc(max_beats, sizeof *beat);
    /* Live connections fire only when no heartbeat came for 30 s (rare but
     * possible with random picks), silent ones always: the log holds them. */
    struct drv d = {.log = xcalloc(n, sizeof(struct rec)), .cap = n};
    long base_kb = rss_reset();

    /* Every arming is 30 s ahead: one window for all. */
    const uint64_t w2_slack = im->slack_shift ? W2_TIMEOUT >> im->slack_shift : 0;
    void *s = create(im, &d, n, 0, W2_TIMEOUT, W2_TIMEOUT);
    if (!s) {
        fail(r, "create failed");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        expiry[i] = W2_TIMEOUT;
        im->arm(s, (uint32_t)i, W2_TIMEOUT);
    }
    due[W2_TIMEOUT] = (uint32_t)n;
    r->bytes_per_timer = (double)im->bytes(s) / (double)n;

    uint64_t beat_ns = 0, tick_ns = 0, beats = 0, expiries = 0, sections = 0, max_late = 0;
    struct worst_tick worst = {0};
    size_t live = n;
    for (uint64_t t = 1; t <= W2_TICKS && r->ok; t++) {
        /* advance one tick */
        size_t nlog0 = d.nlog;
        d.target = t;
        uint64_t m0 = im->moves ? im->moves(s) : 0;
        uint64_t t0 = bench_real_ns();
        im->advance_to(s, t);
        uint64_t dt = bench_real_ns() - t0;
        tick_ns += dt;
        sections++;
        worst_tick_add(&worst, im, s, dt, m0);
        for (size_t i = nlog0; i < d.nlog; i++) {
            uint32_t id = d.log[i].id;
            if (id >= n || state[id] == 2) {
                fail(r, "timer %u fired again (or unknown) at %llu", id, (unsigned long long)t);
                break;
            }
            if (t < expiry[id] || t > expiry[id] + w2_slack) {
                fail(r, "connection %u due at %llu (slack %llu) fired at %llu (%s)", id,
                     (unsigned long long)expiry[id], (unsigned long long)w2_slack,
                     (unsigned long long)t, t < expiry[id] ? "early" : "late");
                break;
            }
            if (t - expiry[id] > max_late)
                max_late = t - expiry[id];
            if (state[id] == 0)
                live--;
            state[id] = 2;
        }
        /* Exact: the fires of each tick are known. With slack a connection
         * fires anywhere in its window; that no window closes unfired is
         * checked at the end. */
        if (d.overflow || (!w2_slack && d.nlog - nlog0 != due[t])) {
            fail(r, "tick %llu: %zu fires, %u expected", (unsigned long long)t, d.nlog - nlog0,
                 due[t]);
            break;
        }
        expiries += d.nlog - nlog0;

        if (t == W2_SILENT_AT) { /* 1% go silent */
            size_t want = n / 100 ? n / 100 : 1;
            for (size_t k = 0; k < want && live > 0;) {
                uint32_t id = (uint32_t)bench_below(&rng, n);
                if (state[id] == 0) {
                    state[id] = 1;
                    live--;
                    k++;
                }
            }
        }
        /* N/3000 random live connections send a heartbeat */
        size_t k = (size_t)(t * n / 3000 - (t - 1) * n / 3000), m = 0;
        for (size_t j = 0; j < k && live > 0; j++) {
            uint32_t id;
            do
                id = (uint32_t)bench_below(&rng, n);
            while (state[id] != 0);
            beat[m++] = id;
        }
        if (m == 0)
            continue;
        t0 = bench_real_ns();
        for (size_t j = 0; j < m; j++)
            im->reset(s, beat[j], t + W2_TIMEOUT);
        beat_ns += bench_real_ns() - t0;
        sections++;
        beats += m;
        for (size_t j = 0; j < m; j++) {
            due[expiry[beat[j]]]--;
            expiry[beat[j]] = t + W2_TIMEOUT;
            due[t + W2_TIMEOUT]++;
        }
    }
    rss_done(r, base_kb, n);
    r->moves_per_timer = im->moves ? (double)im->moves(s) / (double)n : -1;
    im->destroy(s);
    for (size_t i = 0; i < n && r->ok; i++) /* no window closed unfired */
        if (state[i] != 2 && expiry[i] + w2_slack <= W2_TICKS)
            fail(r, "connection %zu due at %llu never fired", i, (unsigned long long)expiry[i]);
    if (!r->ok)
        goto out;
    /* minus the clock reads, split in proportion to the section counts */
    double b = (double)beat_ns, k = (double)tick_ns;
    b -= cc * (double)(sections - W2_TICKS);
    k -= cc * (double)W2_TICKS;
    r->m[0] = beats ? (b > 0 ? b : 0) / (double)beats : 0;
    r->m[1] = (k > 0 ? k : 0) / (double)W2_TICKS;
    r->m[2] = ((b > 0 ? b : 0) + (k > 0 ? k : 0)) / 1e6; /* ms of timer work for 60 s */
    r->m[3] = (double)expiries;
    r->m[4] = (double)max_late; /* ticks; exact runs fail on any lateness */
    worst_tick_done(&worst, im, cc, &r->m[5], &r->m[6]);
out:
    free(expiry);
    free(state);
    free(due);
    free(beat);
    free(d.log);
}

/* ---- W3 mostly cancelled --------------------------------------------------- */

#define W3_MIN 160u /* 200 ms +- 20% */
#define W3_MAX 240u
#define W3_RING 256u /* > W3_MAX: a ring of per-tick lists */
#define W3_WARM 250u
#define W3_TICKS 500u
#define NIL UINT32_MAX

static void run_w3(const struct bench_impl *im, size_t n, uint64_t seed, struct cell_result *r)
{
    uint64_t rng = seed;
    double cc = clock_cost_ns();
    size_t cap = 2 * n + 1024;
    uint64_t *deadline = xcalloc(cap, sizeof *deadline);
    uint64_t *latest = xcalloc(cap, sizeof *latest); /* deadline + slack */
    unsigned char *fate = xcalloc(cap, 1); /* 0 idle, 1 will be cancelled, 2 will fire */
    uint32_t *link = xcalloc(cap, sizeof *link);
    uint32_t *freeq = xcalloc(cap, sizeof *freeq); /* FIFO of idle ids */
    uint32_t cancel_head[W3_RING], fire_count[W3_RING];
    uint32_t *ops = xcalloc(cap, sizeof *ops);
    uint64_t *opdl = xcalloc(cap, sizeof *opdl);
    size_t fq_head = 0, fq_len = cap;
    for (size_t i = 0; i < cap; i++)
        freeq[i] = (uint32_t)i;
    for (unsigned i = 0; i < W3_RING; i++)
        cancel_head[i] = NIL, fire_count[i] = 0;
    /* at most every live timer can fire in one tick */
    struct drv d = {.log = xcalloc(cap, sizeof(struct rec)), .cap = cap};
    long base_kb = rss_reset();

    void *s = create(im, &d, cap, 0, W3_MIN, W3_MAX);
    if (!s) {
        fail(r, "create failed");
        goto out;
    }
    /* Mean life: 99% cancelled uniformly within their ~200 ticks (mean ~100),
     * 1% live 200: 101 ticks. Arming n/101 per tick keeps n live. */
    const double rate = (double)n / 101.0;
    double acc = 0;
    uint64_t ops_ns = 0, adv_ns = 0, nops = 0, fires = 0, pairs = 0, arms = 0;
    struct worst_tick worst = {0};
    for (uint64_t t = 1; t <= W3_WARM + W3_TICKS && r->ok; t++) {
        int measured = t > W3_WARM;
        size_t nlog0 = d.nlog;
        d.target = t;
        uint64_t m0 = im->moves ? im->moves(s) : 0;
        uint64_t t0 = bench_real_ns();
        im->advance_to(s, t);
        uint64_t dt = bench_real_ns() - t0;
        if (measured)
            worst_tick_add(&worst, im, s, dt, m0);
        size_t nf = d.nlog - nlog0;
        for (size_t i = nlog0; i < d.nlog; i++) {
            uint32_t id = d.log[i].id;
            if (id >= cap || fate[id] != 2 || deadline[id] > t || latest[id] < t) {
                fail(r, "timer %u fired at %llu: %s", id, (unsigned long long)t,
                     id >= cap || fate[id] == 0 ? "not armed"
                     : fate[id] == 1 ? "it was cancelled"
                     : deadline[id] > t ? "early" : "late");
                break;
            }
            fate[id] = 0;
            freeq[(fq_head + fq_len++) % cap] = id;
        }
        if (!im->slack_shift && nf != fire_count[t % W3_RING]) {
            fail(r, "tick %llu: %zu fires, %u expected", (unsigned long long)t, nf,
                 fire_count[t % W3_RING]);
            break;
        }
        fire_count[t % W3_RING] = 0;
        d.nlog = 0; /* checked: start over */
        if (measured) {
            adv_ns += dt;
            fires += nf;
        }

        /* this tick's cancels, then its arms */
        size_t m = 0, nc = 0;
        for (uint32_t id = cancel_head[t % W3_RING]; id != NIL; id = link[id])
            ops[m++] = id;
        cancel_head[t % W3_RING] = NIL;
        nc = m;
        acc += rate;
        size_t na = (size_t)acc;
        acc -= (double)na;
        arms += na;
        for (size_t j = 0; j < na; j++) {
            if (!fq_len) {
                fail(r, "out of ids");
                break;
            }
            uint32_t id = freeq[fq_head];
            fq_head = (fq_head + 1) % cap;
            fq_len--;
            uint64_t delay = W3_MIN + bench_below(&rng, W3_MAX - W3_MIN + 1);
            deadline[id] = t + delay;
            latest[id] = deadline[id] + (im->slack_shift ? delay >> im->slack_shift : 0);
            if (bench_below(&rng, 100) != 0) { /* 99%: cancelled at a random point of its life */
                uint64_t c = t + 1 + bench_below(&rng, delay - 1);
                fate[id] = 1;
                link[id] = cancel_head[c % W3_RING];
                cancel_head[c % W3_RING] = id;
            } else {
                fate[id] = 2;
                fire_count[deadline[id] % W3_RING]++;
            }
            ops[m] = id;
            opdl[m++] = deadline[id];
        }
        t0 = bench_real_ns();
        for (size_t j = 0; j < nc; j++)
            im->cancel(s, ops[j]);
        for (size_t j = nc; j < m; j++)
            im->arm(s, ops[j], opdl[j]);
        dt = bench_real_ns() - t0;
        if (measured) {
            ops_ns += dt;
            nops += m;
            pairs += nc;
        }
        for (size_t j = 0; j < nc; j++) { /* cancelled ids are idle again */
            fate[ops[j]] = 0;
            freeq[(fq_head + fq_len++) % cap] = ops[j];
        }
    }
    /* per timer object: the pool holds 2n+ ids, about n of them live */
    r->bytes_per_timer = (double)im->bytes(s) / (double)cap;
    for (size_t i = 0; i < cap && r->ok; i++) /* with slack: no window closed unfired */
        if (fate[i] == 2 && latest[i] < W3_WARM + W3_TICKS)
            fail(r, "timer %zu due at %llu never fired", i, (unsigned long long)deadline[i]);
    rss_done(r, base_kb, n);
    r->moves_per_timer = im->moves ? (double)im->moves(s) / (double)arms : -1; /* per arm */
    im->destroy(s);
    if (!r->ok)
        goto out;
    double o = (double)ops_ns - cc * W3_TICKS, a = (double)adv_ns - cc * W3_TICKS;
    r->m[0] = nops ? 2.0 * (o > 0 ? o : 0) / (double)nops : 0; /* an arm and a cancel */
    r->m[1] = fires ? (a > 0 ? a : 0) / (double)fires : 0;   /* ticking included */
    r->m[2] = (a > 0 ? a : 0) / W3_TICKS;                    /* per tick */
    r->m[3] = (double)pairs;
    worst_tick_done(&worst, im, cc, &r->m[4], &r->m[5]);
    r->m[6] = ((o > 0 ? o : 0) + (a > 0 ? a : 0)) / 1e6; /* ms of timer work, measured ticks */
out:
    free(deadline);
    free(latest);
    free(fate);
    free(link);
    free(freeq);
    free(ops);
    free(opdl);
    free(d.log);
}

/* ---- W4 long range ----------------------------------------------------------- */

#define W4_WEEK UINT64_C(604800000) /* 7 days of 1 ms ticks */
#define W4_HOUR UINT64_C(3600000)

static void run_w4(const struct bench_impl *im, size_t n, uint64_t seed, int tiny,
                   struct cell_result *r)
{
    uint64_t rng = seed;
    /* The tiny (test) run shrinks the range to 3 hours so that the
     * single-level wheel's walk stays short; the check is the same. */
    uint64_t range = tiny ? 3 * W4_HOUR : W4_WEEK;
    uint64_t *deadline = xcalloc(n, sizeof *deadline);
    uint64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        deadline[i] = 1 + bench_below(&rng, range);
        if (deadline[i] > last)
            last = deadline[i];
    }
    struct drv d = {.log = xcalloc(n, sizeof(struct rec)), .cap = n};
    memset(d.log, 0, n * sizeof(struct rec));
    long base_kb = rss_reset();

    void *s = create(im, &d, n, 0, 0, 0);
    if (!s) {
        fail(r, "create failed");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        im->arm(s, (uint32_t)i, deadline[i]);
    r->bytes_per_timer = (double)im->bytes(s) / (double)n;
    uint64_t t0 = bench_real_ns(), t, end = 0;
    while ((t = step(im, s, &d)) != BENCH_NEVER)
        end = t;
    uint64_t t_expire = bench_real_ns() - t0;
    r->moves_per_timer = im->moves ? (double)im->moves(s) / (double)n : -1;
    check_expire_log(r, &d, deadline, n);
    if (r->ok && end != last)
        fail(r, "the last step went to %llu, the last deadline is %llu", (unsigned long long)end,
             (unsigned long long)last);

    /* The idle hour: n timers due after it, none in it. */
    if (r->ok) {
        for (size_t i = 0; i < n; i++)
            im->arm(s, (uint32_t)i, last + W4_HOUR + 1 + bench_below(&rng, range - W4_HOUR));
        d.nlog = 0;
        d.target = last + W4_HOUR;
        t0 = bench_real_ns();
        im->advance_to(s, last + W4_HOUR);
        uint64_t t_idle = bench_real_ns() - t0;
        if (d.nlog)
            fail(r, "%zu timers fired in the idle hour", d.nlog);
        r->m[1] = (double)t_idle / 1000.0; /* us */
    }
    rss_done(r, base_kb, n);
    im->destroy(s);
    r->m[0] = (double)t_expire / (double)n;
out:
    free(deadline);
    free(d.log);
}

/* ---- the limit probe -------------------------------------------------------- */

/* Random reads of one cache line each over an array as large as the live
 * timers (n twheel timers: n x 40 bytes). The reads are independent (the
 * addresses come from a generator, not from loaded data), so the CPU keeps
 * as many misses in flight as it can: the memory system's throughput limit
 * for touching each timer once. */
static void run_probe(size_t n, uint64_t seed, struct cell_result *r)
{
    size_t lines = (n * sizeof(struct tw_timer) + 63) / 64;
    if (lines < 1)
        lines = 1;
    uint64_t *a = aligned_alloc(64, lines * 64);
    if (!a) {
        fail(r, "out of memory");
        return;
    }
    for (size_t i = 0; i < lines * 8; i++)
        a[i] = i;
    size_t reads = n < (1u << 20) ? (1u << 21) : 2 * n;
    uint64_t rng = seed, sum = 0;
    uint64_t t0 = bench_real_ns();
    for (size_t i = 0; i < reads; i++)
        sum += a[bench_below(&rng, lines) * 8];
    uint64_t t = bench_real_ns() - t0;
    __asm__ volatile("" : : "r"(sum));
    free(a);
    double ns = (double)t / (double)reads;
    for (int k = 0; k < BENCH_METRICS; k++)
        r->m[k] = ns;
    r->bytes_per_timer = sizeof(struct tw_timer);
}

/* ---- entry ---------------------------------------------------------------- */

void bench_run_cell(int workload, const struct bench_impl *im, size_t n, uint64_t seed, int tiny,
                    struct cell_result *r)
{
    memset(r, 0, sizeof *r);
    r->ok = 1;
    r->rss_per_timer = -1;
    r->moves_per_timer = -1;
    uint64_t t0 = bench_real_ns();
    if (!im)
        run_probe(n, seed, r);
    else if (workload == 1)
        run_w1(im, n, seed, r);
    else if (workload == 2)
        run_w2(im, n, seed, r);
    else if (workload == 3)
        run_w3(im, n, seed, r);
    else if (workload == 4)
        run_w4(im, n, seed, tiny, r);
    else
        fail(r, "no workload W%d", workload);
    r->seconds = (double)(bench_real_ns() - t0) / 1e9;
}
