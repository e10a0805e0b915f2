/* SPDX-License-Identifier: MIT */
/* bench_twheel: twheel against its peers on workloads W1-W4.
 *
 *   bench_twheel [--full | --tiny] [--reps K] [--only w1,w3] [--impl twheel,heap4]
 *                [--sizes 1000,100000] [--budget SECONDS] [--out DIR] [--no-plot]
 *
 * For each workload, size and repetition, every implementation (and the limit
 * probe) runs in a child process of its own, one after the other, so the
 * implementations of one repetition see the same machine. The tables give
 * medians over the repetitions, with the ratio of each figure to twheel's
 * (x > 1: slower than twheel). A run that gives a wrong answer (a timer
 * fired early, late, twice or never) or crashes is reported as FAILED and makes
 * the exit code non-zero.
 *
 * The budget (default 12 s, --full 600 s) is the time one run of a cell is
 * worth: an implementation whose run at the previous size, scaled linearly to
 * the next one, exceeds it is not run there nor above (in the default set: the
 * scan at 1e6 in W2, the single-level wheel at 1e6 in W4), and a run is killed
 * after 4 budgets (at least 60 s), which also stops its larger sizes. The
 * table says which were left out and why.
 *
 * Output in DIR (default bench/results of the source tree): tables.md (what is
 * printed), raw.csv (every repetition), w1.csv..w4.csv (medians), and
 * w1.png/.svg..w4.png/.svg (gnuplot, ns/op against N, log-log).
 */
#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "workloads.h"

#ifndef BENCH_DEFAULT_OUT
#define BENCH_DEFAULT_OUT "bench/results"
#endif

#define MAX_SIZES 8
#define MAX_REPS 15

static const struct bench_impl *const all_impls[] = {
    &bench_impl_twheel,
    &bench_impl_twheel_slack,
    &bench_impl_twheel_eager,
#ifdef BENCH_HAVE_LIBUV
    &bench_impl_libuv,
#endif
#ifdef BENCH_HAVE_LIBEVENT
    &bench_impl_libevent,
    &bench_impl_libevent_common,
#endif
#ifdef BENCH_HAVE_TIMEOUTC
    &bench_impl_timeoutc,
#endif
    &bench_impl_heap4,
    &bench_impl_rounds,
    &bench_impl_scan,
    NULL, /* the limit probe */
};
#define NIMPL (sizeof all_impls / sizeof all_impls[0])

struct metric {
    const char *name; /* column title */
    int ratio;        /* a cost: show x twheel, and the probe's figure */
    int plot;         /* drawn in the workload's plot */
    int probe;        /* ns per timer: the probe's ns per read applies */
    const char *fmt;  /* NULL: automatic */
};

struct workload {
    int id;
    const char *title;
    const char *unit; /* what the ns are per */
    int nmetrics;
    struct metric m[BENCH_METRICS];
    size_t sizes[3][MAX_SIZES]; /* default, full, tiny; 0-terminated */
};

enum { SET_DEFAULT, SET_FULL, SET_TINY };

static const struct workload workloads[] = {
    {1, "W1 churn: add N, reset N, expire all (delays 1..2^20 ticks)", "ns per add / reset / expired timer", 3,
     {{"add ns", 1, 1, 1, NULL}, {"reset ns", 1, 1, 1, NULL}, {"expire ns", 1, 1, 1, NULL}},
     {{1000, 10000, 100000, 1000000}, {1000, 10000, 100000, 1000000, 10000000}, {2000}}},
    {2, "W2 heartbeat: 60 s of 1 ms ticks, 30 s timeout, N/3000 beats per tick, 1% silent", "ns per heartbeat / tick", 7,
     {{"beat ns", 1, 1, 1, NULL}, {"tick ns", 1, 1, 0, NULL}, {"ms/60s", 1, 0, 0, NULL}, {"expired", 0, 0, 0, "%.0f"}, {"late", 0, 0, 0, "%.0f"},
      {"worst tick us", 1, 0, 0, "%.1f"}, {"most moves/tick", 0, 0, 0, "%.0f"}},
     {{10000, 100000, 1000000}, {10000, 100000, 1000000}, {600}}},
    {3, "W3 mostly cancelled: 200 ms +-20%, 99% cancelled, N live", "ns per arm+cancel pair / fire", 7,
     {{"pair ns", 1, 1, 1, NULL}, {"fire ns", 1, 1, 1, NULL}, {"tick ns", 1, 0, 0, NULL}, {"pairs", 0, 0, 0, "%.0f"},
      {"worst tick us", 1, 0, 0, "%.1f"}, {"most moves/tick", 0, 0, 0, "%.0f"}, {"ms/500 ticks", 1, 0, 0, NULL}},
     {{100000, 1000000}, {100000, 1000000}, {2000}}},
    {4, "W4 long range: delays over 7 days (1 ms ticks), expire all; one idle hour", "ns per expired timer / us per idle hour", 2,
     {{"expire ns", 1, 1, 1, NULL}, {"idle hour us", 1, 1, 0, NULL}},
     {{100000, 1000000}, {100000, 1000000}, {1000}}},
};
#define NWORK (sizeof workloads / sizeof workloads[0])

struct cell {
    int state; /* 0 not run, 1 ok, 2 failed, 3 timeout, 4 skipped */
    struct cell_result r;
};

static struct {
    int set, reps, plot;
    double budget;
    const char *out;
    unsigned only;         /* workload bits; 0 = all */
    const char *impl_list; /* comma-separated names, NULL = all */
    size_t sizes[MAX_SIZES];
} opt = {SET_DEFAULT, 3, 1, 12.0, BENCH_DEFAULT_OUT, 0, NULL, {0}};

static FILE *tables, *raw;
static int failures;

static const char *impl_name(const struct bench_impl *im)
{
    return im ? im->name : "probe";
}

static int impl_selected(const struct bench_impl *im)
{
    if (!opt.impl_list)
        return 1;
    const char *name = impl_name(im);
    size_t len = strlen(name);
    for (const char *p = opt.impl_list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == len && strncmp(p, name, l) == 0)
            return 1;
        p += l + (e ? 1 : 0);
    }
    return 0;
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (tables) {
        va_start(ap, fmt);
        vfprintf(tables, fmt, ap);
        va_end(ap);
    }
}

/* ---- running one cell in a child process ---------------------------------- */

/* A cell is killed after this many seconds: well past the budget, which only
 * decides what is worth starting. */
static double kill_after(void)
{
    return opt.budget * 4 > 60 ? opt.budget * 4 : 60;
}

static int run_child(int w, const struct bench_impl *im, size_t n, uint64_t seed, struct cell *c)
{
    int fd[2];
    if (pipe(fd) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        close(fd[0]);
        alarm((unsigned)kill_after());
        struct cell_result r;
        bench_run_cell(w, im, n, seed, opt.set == SET_TINY, &r);
        ssize_t wr = write(fd[1], &r, sizeof r);
        close(fd[1]);
        exit(wr == (ssize_t)sizeof r ? 0 : 2); /* exit, not _exit: LeakSanitizer runs */
    }
    close(fd[1]);
    ssize_t got = 0, k;
    char *buf = (char *)&c->r;
    while (got < (ssize_t)sizeof c->r && (k = read(fd[0], buf + got, sizeof c->r - (size_t)got)) != 0) {
        if (k < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        got += k;
    }
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        return c->state = 3;
    if (got != (ssize_t)sizeof c->r || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        memset(&c->r, 0, sizeof c->r);
        if (WIFSIGNALED(status))
            snprintf(c->r.err, sizeof c->r.err, "crashed: signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        else
            snprintf(c->r.err, sizeof c->r.err, "exited with status %d%s",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                     got == (ssize_t)sizeof c->r ? "" : " before reporting");
        return c->state = 2;
    }
    return c->state = c->r.ok ? 1 : 2;
}

/* ---- statistics and formatting ---------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of field `get` over the successful repetitions; NAN-free: -1 if none. */
static double median(struct cell *reps, int nreps, double (*get)(const struct cell_result *, int),
                     int k)
{
    double v[MAX_REPS];
    int n = 0;
    for (int i = 0; i < nreps; i++)
        if (reps[i].state == 1)
            v[n++] = get(&reps[i].r, k);
    if (!n)
        return -1;
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double get_m(const struct cell_result *r, int k) { return r->m[k]; }
static double get_bytes(const struct cell_result *r, int k) { (void)k; return r->bytes_per_timer; }
static double get_rss(const struct cell_result *r, int k) { (void)k; return r->rss_per_timer; }
static double get_moves(const struct cell_result *r, int k) { (void)k; return r->moves_per_timer; }

static const char *fmt_num(char *buf, size_t size, double v, const char *fmt)
{
    if (v < 0)
        snprintf(buf, size, "-");
    else if (fmt)
        snprintf(buf, size, fmt, v);
    else if (v >= 1000)
        snprintf(buf, size, "%.0f", v);
    else if (v >= 100)
        snprintf(buf, size, "%.0f", v);
    else if (v >= 10)
        snprintf(buf, size, "%.1f", v);
    else
        snprintf(buf, size, "%.2f", v);
    return buf;
}

static const char *fmt_n(char *buf, size_t size, size_t n)
{
    int e = 0;
    size_t m = n;
    while (m >= 10 && m % 10 == 0)
        m /= 10, e++;
    if (e < 3)
        snprintf(buf, size, "%zu", n);
    else if (m == 1)
        snprintf(buf, size, "1e%d", e);
    else
        snprintf(buf, size, "%zue%d", m, e);
    return buf;
}

/* ---- one workload ------------------------------------------------------------ */

static const size_t *sizes_of(const struct workload *wl)
{
    return opt.sizes[0] ? opt.sizes : wl->sizes[opt.set];
}

static void run_workload(const struct workload *wl)
{
    const size_t *sizes = sizes_of(wl);
    int nsizes = 0;
    while (nsizes < MAX_SIZES && sizes[nsizes])
        nsizes++;
    static struct cell cells[MAX_SIZES][NIMPL][MAX_REPS];
    memset(cells, 0, sizeof cells);
    int in_run[NIMPL];
    char skipnote[NIMPL][160];
    double last_secs[NIMPL];
    size_t last_n[NIMPL];
    for (size_t i = 0; i < NIMPL; i++) {
        const struct bench_impl *im = all_impls[i];
        in_run[i] = impl_selected(im) && (!im || (im->workloads & (1u << wl->id)));
        skipnote[i][0] = 0;
        last_secs[i] = 0;
        last_n[i] = 0;
    }
    char nb[32];
    fprintf(stderr, "\n== %s\n", wl->title);
    for (int si = 0; si < nsizes; si++) {
        size_t n = sizes[si];
        uint64_t seed = UINT64_C(0x74776865656c) ^ ((uint64_t)wl->id << 40) ^ n;
        for (int rep = 0; rep < opt.reps; rep++) {
            fprintf(stderr, "   N=%-6s rep %d:", fmt_n(nb, sizeof nb, n), rep + 1);
            for (size_t i = 0; i < NIMPL; i++) {
                const struct bench_impl *im = all_impls[i];
                struct cell *c = &cells[si][i][rep];
                if (!in_run[i])
                    continue;
                if (skipnote[i][0]) {
                    c->state = 4;
                    continue;
                }
                if (rep == 0 && last_n[i] && last_secs[i] * (double)n / (double)last_n[i] > opt.budget) {
                    snprintf(skipnote[i], sizeof skipnote[i],
                             "%s: not run from N=%s on (%.1f s at N=%zu projects past the %.0f s budget)",
                             impl_name(im), fmt_n(nb, sizeof nb, n), last_secs[i], last_n[i], opt.budget);
                    c->state = 4;
                    continue;
                }
                int st = run_child(wl->id, im, n, seed, c);
                fprintf(stderr, " %s", impl_name(im));
                if (st == 1) {
                    fprintf(stderr, "(%.1fs)", c->r.seconds);
                    if (rep == 0)
                        last_secs[i] = c->r.seconds, last_n[i] = n;
                } else if (st == 3) {
                    fprintf(stderr, "(TIMEOUT)");
                    snprintf(skipnote[i], sizeof skipnote[i],
                             "%s: killed at N=%s after %.0f s; larger N not run",
                             impl_name(im), fmt_n(nb, sizeof nb, n), kill_after());
                } else {
                    fprintf(stderr, "(FAILED)");
                    fprintf(stderr, "\nFAILED: W%d N=%zu %s rep %d: %s\n", wl->id, n, impl_name(im),
                            rep + 1, c->r.err);
                    failures++;
                }
                if (raw) {
                    fprintf(raw, "%d,%zu,%s,%d,%s", wl->id, n, impl_name(im), rep + 1,
                            st == 1 ? "ok" : st == 3 ? "timeout" : "failed");
                    for (int k = 0; k < BENCH_METRICS; k++)
                        fprintf(raw, ",%.4f", c->r.m[k]);
                    fprintf(raw, ",%.2f,%.2f,%.3f,%.3f\n", c->r.bytes_per_timer, c->r.rss_per_timer,
                            c->r.moves_per_timer, c->r.seconds);
                    fflush(raw);
                }
            }
            fprintf(stderr, "\n");
        }
    }

    /* the table (markdown) */
    out("\n### %s\n\n", wl->title);
    out("Median of %d repetitions; %s; x = figure / twheel's (x > 1: slower than twheel). "
        "B/timer: structure bytes per timer; RSS/timer: peak RSS growth per timer.\n\n",
        opt.reps, wl->unit);
    out("| N | impl |");
    for (int k = 0; k < wl->nmetrics; k++)
        out(" %s |%s", wl->m[k].name, wl->m[k].ratio ? " x |" : "");
    out(" B/timer | RSS/timer | moves/timer |\n|--:|:--|");
    for (int k = 0; k < wl->nmetrics; k++)
        out("--:|%s", wl->m[k].ratio ? "--:|" : "");
    out("--:|--:|--:|\n");
    char csvname[512];
    snprintf(csvname, sizeof csvname, "%s/w%d.csv", opt.out, wl->id);
    FILE *csv = fopen(csvname, "w");
    if (csv) {
        fprintf(csv, "n,impl");
        for (int k = 0; k < wl->nmetrics; k++)
            fprintf(csv, ",%s", wl->m[k].name);
        fprintf(csv, ",bytes_per_timer,rss_per_timer,moves_per_timer,status\n");
    }
    char b1[32], b2[32];
    for (int si = 0; si < nsizes; si++) {
        size_t n = sizes[si];
        double ref[BENCH_METRICS];
        for (int k = 0; k < wl->nmetrics; k++)
            ref[k] = in_run[0] ? median(cells[si][0], opt.reps, get_m, k) : -1;
        for (size_t i = 0; i < NIMPL; i++) {
            if (!in_run[i])
                continue;
            const struct bench_impl *im = all_impls[i];
            struct cell *reps = cells[si][i];
            int ok = 0, bad = 0, timeout = 0;
            for (int r = 0; r < opt.reps; r++) {
                ok += reps[r].state == 1;
                bad += reps[r].state == 2;
                timeout += reps[r].state == 3;
            }
            const char *status = bad ? "FAILED" : ok ? "ok" : timeout ? "timeout" : "skipped";
            out("| %s | %s |", fmt_n(nb, sizeof nb, n), impl_name(im));
            if (csv)
                fprintf(csv, "%zu,%s", n, impl_name(im));
            for (int k = 0; k < wl->nmetrics; k++) {
                const struct metric *m = &wl->m[k];
                double v = (!im && !m->probe) ? -1 : median(reps, opt.reps, get_m, k);
                if (bad)
                    v = -1;
                if (csv)
                    fprintf(csv, ",%.4f", v);
                if (k == 0 && !ok) {
                    out(" %s |", status);
                } else {
                    out(" %s |", fmt_num(b1, sizeof b1, v, m->fmt));
                }
                if (m->ratio) {
                    if (v >= 0 && ref[k] > 0)
                        out(" %.2f |", v / ref[k]);
                    else
                        out(" - |");
                }
            }
            double bytes = median(reps, opt.reps, get_bytes, 0);
            double rss = im ? median(reps, opt.reps, get_rss, 0) : -1;
            double moves = median(reps, opt.reps, get_moves, 0);
            out(" %s | %s | %s |\n", fmt_num(b1, sizeof b1, bytes, "%.1f"),
                fmt_num(b2, sizeof b2, rss, "%.1f"), fmt_num(nb, sizeof nb, moves, "%.2f"));
            if (csv)
                fprintf(csv, ",%.2f,%.2f,%.3f,%s\n", bytes, rss, moves, status);
        }
    }
    if (csv)
        fclose(csv);
    int notes = 0;
    for (size_t i = 0; i < NIMPL; i++)
        if (in_run[i] && skipnote[i][0])
            out("%s%s\n", notes++ ? "" : "\n", skipnote[i]);
    fflush(stdout);

    /* the plot: one panel per plotted figure, ns against N, log-log */
    if (!opt.plot)
        return;
    char gpname[512];
    snprintf(gpname, sizeof gpname, "%s/w%d.gp", opt.out, wl->id);
    FILE *gp = fopen(gpname, "w");
    if (!gp)
        return;
    int panels = 0;
    for (int k = 0; k < wl->nmetrics; k++)
        panels += wl->m[k].plot;
    for (int k = 0; k < wl->nmetrics; k++) {
        if (!wl->m[k].plot)
            continue;
        for (size_t i = 0; i < NIMPL; i++) {
            if (!in_run[i] || (!all_impls[i] && !wl->m[k].probe))
                continue;
            fprintf(gp, "$d%d_%zu << EOD\n", k, i);
            for (int si = 0; si < nsizes; si++) {
                double v = median(cells[si][i], opt.reps, get_m, k);
                if (v > 0 && (all_impls[i] || wl->m[k].probe))
                    fprintf(gp, "%zu %g\n", sizes[si], v);
            }
            fprintf(gp, "EOD\n");
        }
    }
    /* gnuplot's enhanced text: 2^20 must be 2^{20} */
    char gp_title[256];
    size_t o = 0;
    for (const char *p = wl->title; *p && o + 4 < sizeof gp_title; p++) {
        gp_title[o++] = *p;
        if (*p == '^' && p[1] >= '0' && p[1] <= '9') {
            gp_title[o++] = '{';
            while (p[1] >= '0' && p[1] <= '9' && o + 3 < sizeof gp_title)
                gp_title[o++] = *++p;
            gp_title[o++] = '}';
        }
    }
    gp_title[o] = 0;
    fprintf(gp, "set xrange [%g:%g]\n", (double)sizes[0] / 1.6, (double)sizes[nsizes - 1] * 1.6);
    fprintf(gp, "set logscale xy\nset grid\nset key top left font ',9'\nset xlabel 'N (timers)'\n");
    fprintf(gp, "set format x '10^{%%L}'\nset pointsize 1\n");
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0)
            fprintf(gp, "set terminal pngcairo size %d,460 font ',10'\nset output '%s/w%d.png'\n",
                    420 * panels + 40, opt.out, wl->id);
        else
            fprintf(gp, "set terminal svg size %d,460 font 'sans,10'\nset output '%s/w%d.svg'\n",
                    420 * panels + 40, opt.out, wl->id);
        fprintf(gp, "set multiplot layout 1,%d title '%s'\n", panels, gp_title);
        for (int k = 0; k < wl->nmetrics; k++) {
            if (!wl->m[k].plot)
                continue;
            fprintf(gp, "set ylabel '%s'\nset title '%s'\nplot ", wl->m[k].name, wl->m[k].name);
            int first = 1;
            for (size_t i = 0; i < NIMPL; i++) {
                if (!in_run[i] || (!all_impls[i] && !wl->m[k].probe))
                    continue;
                fprintf(gp, "%s$d%d_%zu using 1:2 with linespoints %s title '%s'", first ? "" : ", ",
                        k, i,
                        i == 0 ? "lw 4"
                        : all_impls[i] ? "lw 2"
                                       : "lw 2 dt 2 lc rgb 'black'",
                        impl_name(all_impls[i]));
                first = 0;
            }
            fprintf(gp, "\n");
        }
        fprintf(gp, "unset multiplot\nset output\n");
    }
    fclose(gp);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>'%s/w%d.gnuplot.log'", gpname, opt.out, wl->id);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench: gnuplot failed for W%d (see %s/w%d.gnuplot.log)\n", wl->id, opt.out,
                wl->id);
    } else {
        snprintf(cmd, sizeof cmd, "%s/w%d.gnuplot.log", opt.out, wl->id);
        remove(cmd);
    }
}

/* ---- main ---------------------------------------------------------------- */

static void usage(int code)
{
    fprintf(code ? stderr : stdout,
            "usage: bench_twheel [--full | --tiny] [--reps K] [--only w1,w2,w3,w4]\n"
            "                    [--impl NAME,...] [--sizes N,...] [--budget SECONDS]\n"
            "                    [--out DIR] [--no-plot] [--list]\n"
            "  --full      W1 up to 1e7 timers, budget 600 s (default set: about 4-6 minutes)\n"
            "  --tiny      every workload at a tiny size, 1 rep: the harness test\n"
            "  --reps K    repetitions per cell (default 3; medians are reported)\n"
            "  --only 13   workloads to run (digits of 1-4)\n"
            "  --impl a,b  implementations to run (see --list); the ratios need twheel\n"
            "  --sizes N,. sizes for every selected workload instead of the set's\n"
            "  --budget S  seconds one run is worth: larger sizes projected past it are\n"
            "              not run, a run is killed after max(4 S, 60 s)\n"
            "  --out DIR   where tables.md, *.csv, *.png, *.svg go (default %s)\n"
            "  --no-plot   no gnuplot\n",
            BENCH_DEFAULT_OUT);
    exit(code);
}

static void mkdirs(const char *path)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0777);
            *p = '/';
        }
    mkdir(buf, 0777);
}

int main(int argc, char **argv)
{
    int reps_set = 0, budget_set = 0;
    setvbuf(stdout, NULL, _IOLBF, 0); /* tables and progress interleave right in a log */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(0);
        } else if (!strcmp(a, "--full")) {
            opt.set = SET_FULL;
        } else if (!strcmp(a, "--tiny")) {
            opt.set = SET_TINY;
        } else if (!strcmp(a, "--no-plot")) {
            opt.plot = 0;
        } else if (!strcmp(a, "--list")) {
            for (size_t k = 0; k < NIMPL; k++)
                printf("%-13s %s\n", impl_name(all_impls[k]),
                       all_impls[k] ? all_impls[k]->what
                                    : "limit probe: random one-line reads over N x 40 bytes");
            return 0;
        } else if (v && !strcmp(a, "--reps")) {
            opt.reps = atoi(v), reps_set = 1, i++;
            if (opt.reps < 1 || opt.reps > MAX_REPS)
                usage(2);
        } else if (v && !strcmp(a, "--budget")) {
            opt.budget = atof(v), budget_set = 1, i++;
        } else if (v && !strcmp(a, "--out")) {
            opt.out = v, i++;
        } else if (v && !strcmp(a, "--impl")) {
            opt.impl_list = v, i++;
        } else if (v && !strcmp(a, "--only")) {
            for (const char *p = v; *p; p++)
                if (*p >= '1' && *p <= '4')
                    opt.only |= 1u << (*p - '0');
            i++;
        } else if (v && !strcmp(a, "--sizes")) {
            int k = 0;
            for (char *p = argv[++i]; *p && k < MAX_SIZES - 1;) {
                char *e;
                double d = strtod(p, &e);
                if (e == p || d < 1)
                    usage(2);
                opt.sizes[k++] = (size_t)d;
                p = *e == ',' ? e + 1 : e;
            }
        } else {
            usage(2);
        }
    }
    if (opt.set == SET_TINY) {
        if (!reps_set)
            opt.reps = 1;
    } else if (opt.set == SET_FULL && !budget_set) {
        opt.budget = 600;
    }
    mkdirs(opt.out);
    char path[600];
    snprintf(path, sizeof path, "%s/tables.md", opt.out);
    tables = fopen(path, "w");
    snprintf(path, sizeof path, "%s/raw.csv", opt.out);
    raw = fopen(path, "w");
    if (raw)
        fprintf(raw, "workload,n,impl,rep,status,m0,m1,m2,m3,m4,bytes_per_timer,rss_per_timer,"
                     "moves_per_timer,seconds\n");
    out("## twheel benchmark (%s set, %d rep%s, budget %.0f s per run)\n\n",
        opt.set == SET_FULL ? "full" : opt.set == SET_TINY ? "tiny" : "default", opt.reps,
        opt.reps > 1 ? "s" : "", opt.budget);
    out("Implementations:\n\n");
    for (size_t k = 0; k < NIMPL; k++)
        if (impl_selected(all_impls[k]))
            out("- **%s**: %s\n", impl_name(all_impls[k]),
                all_impls[k] ? all_impls[k]->what
                             : "limit probe: independent random one-cache-line reads over an array "
                               "of N x 40 bytes (ns per read in every ns column)");
#ifndef BENCH_HAVE_LIBUV
    out("- (libuv not found at build time: not run)\n");
#endif
#ifndef BENCH_HAVE_LIBEVENT
    out("- (libevent not found at build time: not run)\n");
#endif
    uint64_t t0 = bench_real_ns();
    for (size_t k = 0; k < NWORK; k++)
        if (!opt.only || (opt.only & (1u << workloads[k].id)))
            run_workload(&workloads[k]);
    out("\nTotal time: %.0f s.%s\n", (double)(bench_real_ns() - t0) / 1e9,
        failures ? " SOME RUNS FAILED (see above)." : "");
    if (tables)
        fclose(tables);
    if (raw)
        fclose(raw);
    fprintf(stderr, "\nResults in %s: tables.md, w1..w4.csv, raw.csv%s\n", opt.out,
            opt.plot ? ", w1..w4.png and .svg" : "");
    if (failures) {
        fprintf(stderr, "bench: %d run(s) FAILED: a wrong answer or a crash\n", failures);
        return 1;
    }
    return 0;
}
