/* SPDX-License-Identifier: MIT */
/* twheel-load: the other side of the connection scene, and its judge.
 *
 * Opens --conns connections to 127.0.0.1:--port (loopback only, always),
 * sends one heartbeat line on each at once and then every --interval seconds
 * on average (uniform in [0.5, 1.5] x the mean), and lets a --silent fraction
 * of them stop beating, each at a random moment of the first --silent-window
 * seconds. Then it checks what the server did:
 *
 *   - correctness, the verdict: every silent connection was closed (by the
 *     end of the run), none before --timeout after its last heartbeat was
 *     sent (sent, not received: the server hears it later, so the measured
 *     lateness is an upper bound of the real one), and no connection that
 *     was still beating was ever closed;
 *   - timeliness, reported beside it and not judged: how many closes came
 *     later than one server tick (--tick) plus a scheduling allowance
 *     (--slack), the distribution, and how busy the machine was (load
 *     average before and after, CPU steal), so that a late close on a busy
 *     machine is named as such ("machine busy: load X") instead of failing
 *     the run. Compare with the server's own lateness (its SUMMARY line).
 *     A live connection that this load generator itself left silent for a
 *     whole timeout (it stalled: the previous gap, or the one since its last
 *     heartbeat, reached the timeout) was rightly closed: it is counted
 *     apart (wrong_gap) and reported there too, not as a failure.
 *
 * Beats are scheduled on a twheel wheel of 1 ms ticks, one timer embedded per
 * connection. Connections are opened in batches from the event loop, so the
 * first ones keep beating while the last ones connect.
 *
 * Bounded: at most the open-file limit (raised to the hard limit, and it says
 * so; --conns is capped to what fits, and it says so), and it stops by itself
 * after the silent window plus the timeout plus a margin.
 *
 * SIGTERM or SIGINT end the run early: the report so far is printed (a
 * failure already seen is a FAIL; otherwise the run is INCONCLUSIVE).
 *
 * Exit status: 0 when the verdict is PASS (late closes included), 1 when it
 * is FAIL (an early close, a live one closed, a silent one never closed), 2
 * on a usage error, 3 when the run could not be judged (cannot connect, or
 * interrupted).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <twheel.h>

#include "scene.h"

#define PROG "twheel-load"
#define MAX_EVENTS 1024
#define CONNECT_BATCH 256
#define FD_RESERVE 16 /* stdio, epoll, and room for the tool's own needs */

enum state { ST_NEW, ST_OPEN, ST_CLOSED_BY_SERVER, ST_CLOSED_BY_US };

struct lconn {
    struct tw_timer beat;  /* next heartbeat */
    int64_t last_send_ns;  /* when the last heartbeat was sent */
    int64_t prev_send_ns;  /* ... and the one before */
    int64_t stop_ns;       /* silent ones send nothing at or after this time */
    int64_t max_gap_ns;    /* longest time between two of its heartbeats */
    int fd;
    uint8_t state;
    uint8_t silent;
    uint8_t stopped; /* a silent one that has stopped */
};

struct load {
    struct lconn *c;
    size_t n, nsilent, opened;
    int epoll_fd;
    struct tw_wheel wheel; /* 1 ms ticks since t0 */
    int64_t t0_ns;
    int64_t interval_ns, timeout_ns, tick_ns, slack_ns;
    uint64_t rng;
    struct sockaddr_in server;
    /* results */
    uint64_t sent, send_errors;
    uint64_t silent_closed, early, late, wrong, wrong_gap_ok;
    uint64_t crossed; /* silent ones closed as their late last heartbeat was sent */
    int64_t live_max_gap_ns;
    struct scene_hist late_hist;
    int wrong_reported, gap_reported;
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " --port N [options]\n"
            "  --port N            server port on 127.0.0.1 (required)\n"
            "  --conns N           connections (default 10000; 'max' for all that fit)\n"
            "  --timeout S         the server's idle timeout in seconds (default 30)\n"
            "  --tick MS           the server's tick in ms: the allowed lateness (default 1)\n"
            "  --slack MS          scheduling allowance on top of one tick (default 25)\n"
            "  --interval S        mean heartbeat interval in seconds (default 3)\n"
            "  --silent F          fraction of connections that go silent (default 0.1)\n"
            "  --silent-window S   they stop within the first S seconds (default timeout/2)\n"
            "  --margin S          run on this long after the last one is due (default 2)\n"
            "  --seed N            random seed (default 1)\n"
            "  --version           print the version and exit\n"
            "  -h, --help          print this and exit\n"
            "Exit status: 0 PASS (late closes are reported, not judged), 1 FAIL (an early\n"
            "close, a live one closed, a silent one never closed), 2 usage error, 3 not\n"
            "judged (cannot connect, interrupted).\n");
}

/* SIGTERM / SIGINT: stop the run and report what was seen so far. */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

static uint64_t load_tick(const struct load *L, int64_t ns)
{
    return (uint64_t)((ns - L->t0_ns) / NS_PER_MS);
}

/* Beat intervals are uniform in [0.5, 1.5] x the mean, in whole ms. */
static uint64_t next_interval_ms(struct load *L)
{
    double f = 0.5 + scene_rand01(&L->rng);
    uint64_t ms = (uint64_t)((double)L->interval_ns * f / 1e6);
    return ms ? ms : 1;
}

/* The server closed c (EOF or reset) at `now`: judge it. */
static void closed_by_server(struct load *L, struct lconn *c, int64_t now)
{
    tw_cancel(&L->wheel, &c->beat);
    close(c->fd);
    c->fd = -1;
    c->state = ST_CLOSED_BY_SERVER;
    int64_t idle = now - c->last_send_ns;
    if (!c->silent || (!c->stopped && now < c->stop_ns)) {
        /* Still beating: the server was wrong, unless we (the load
         * generator, stalled on a busy machine) left it silent for a whole
         * timeout: since the last heartbeat, or before it (the server closed
         * it before that heartbeat reached it: the two crossed). */
        int64_t gap = c->last_send_ns - c->prev_send_ns;
        if (idle >= L->timeout_ns || gap >= L->timeout_ns) {
            L->wrong_gap_ok++;
            if (L->gap_reported++ < 3)
                fprintf(stderr,
                        PROG ": live connection #%td rightly closed by the server: this load "
                        "generator left it silent for %.3f s (timeout %.3f s; machine busy?)\n",
                        c - L->c, (double)(idle > gap ? idle : gap) / 1e9,
                        (double)L->timeout_ns / 1e9);
        } else {
            L->wrong++;
            if (L->wrong_reported++ < 5)
                fprintf(stderr,
                        PROG ": live connection #%td closed by the server %.3f s after its "
                        "last heartbeat (timeout %.3f s)\n",
                        c - L->c, (double)idle / 1e9, (double)L->timeout_ns / 1e9);
        }
        return;
    }
    L->silent_closed++;
    int64_t lateness = idle - L->timeout_ns;
    if (lateness < 0 && c->last_send_ns - c->prev_send_ns >= L->timeout_ns) {
        /* Its last heartbeat came a whole timeout after the one before (we
         * stalled): the server closed it before that one arrived. Rightly;
         * its lateness is unknown. */
        L->crossed++;
        return;
    }
    scene_hist_add(&L->late_hist, lateness);
    if (lateness < 0)
        L->early++;
    else if (lateness > L->tick_ns + L->slack_ns)
        L->late++;
}

static void on_beat(struct tw_timer *t, void *arg)
{
    struct load *L = arg;
    struct lconn *c = tw_container_of(t, struct lconn, beat);
    int64_t now = scene_now_ns();
    if (c->silent && now >= c->stop_ns) {
        c->stopped = 1; /* from now on it says nothing; the server must close it */
        return;
    }
    /* The time is read before the send: the server hears it later still. */
    ssize_t n = send(c->fd, "hb\n", 3, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != 3) {
        L->send_errors++;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            closed_by_server(L, c, now);
            return;
        }
    } else {
        int64_t gap = now - c->last_send_ns;
        if (gap > c->max_gap_ns)
            c->max_gap_ns = gap;
        c->prev_send_ns = c->last_send_ns;
        c->last_send_ns = now;
        L->sent++;
    }
    tw_arm_in(&L->wheel, t, tw_wheel_now(&L->wheel), next_interval_ms(L));
}

/* Open connection i, send its first heartbeat, schedule the next. Returns 0,
 * or -1 with a message. */
static int open_one(struct load *L, size_t i)
{
    struct lconn *c = &L->c[i];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, PROG ": socket #%zu: %s\n", i, strerror(errno));
        return -1;
    }
    /* A blocking connect on loopback completes in the kernel, without
     * waiting for the server to accept; if the server's backlog is full it
     * waits, but not longer than this (SYN retries alone could take 2 min). */
    struct timeval limit = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    if (connect(fd, (struct sockaddr *)&L->server, sizeof L->server) != 0) {
        fprintf(stderr, PROG ": connect #%zu to 127.0.0.1:%d: %s\n", i, ntohs(L->server.sin_port),
                strerror(errno));
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    if (epoll_ctl(L->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        fprintf(stderr, PROG ": epoll_ctl: %s\n", strerror(errno));
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->state = ST_OPEN;
    int64_t now = scene_now_ns();
    if (c->silent)
        c->stop_ns += now; /* it held an offset from the connect */
    c->last_send_ns = c->prev_send_ns = now;
    if (send(fd, "hb\n", 3, MSG_NOSIGNAL) != 3) {
        fprintf(stderr, PROG ": first heartbeat #%zu: %s\n", i, strerror(errno));
        return -1; /* the fd is c's now and is closed with the others */
    }
    L->sent++;
    tw_wheel_advance(&L->wheel, load_tick(L, now));
    tw_timer_init(&c->beat, on_beat, L);
    tw_arm_in(&L->wheel, &c->beat, tw_wheel_now(&L->wheel), next_interval_ms(L));
    return 0;
}

int main(int argc, char **argv)
{
    int port = -1;
    double conns = 10000, timeout_s = 30, tick_ms = 1, slack_ms = 25, interval_s = 3;
    double silent = 0.1, window_s = -1, margin_s = 2, seed = 1;
    int conns_max = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf(PROG " (twheel %s)\n", tw_version_string());
            return 0;
        } else if ((v = scene_opt(argc, argv, &i, "--port"))) {
            port = (int)scene_num("--port", v, 1, 65535);
        } else if ((v = scene_opt(argc, argv, &i, "--conns"))) {
            if (!strcmp(v, "max"))
                conns_max = 1;
            else
                conns = scene_num("--conns", v, 1, 1e7);
        } else if ((v = scene_opt(argc, argv, &i, "--timeout"))) {
            timeout_s = scene_num("--timeout", v, 0.001, 86400);
        } else if ((v = scene_opt(argc, argv, &i, "--tick"))) {
            tick_ms = scene_num("--tick", v, 0.001, 60000);
        } else if ((v = scene_opt(argc, argv, &i, "--slack"))) {
            slack_ms = scene_num("--slack", v, 0, 60000);
        } else if ((v = scene_opt(argc, argv, &i, "--interval"))) {
            interval_s = scene_num("--interval", v, 0.002, 86400);
        } else if ((v = scene_opt(argc, argv, &i, "--silent"))) {
            silent = scene_num("--silent", v, 0, 1);
        } else if ((v = scene_opt(argc, argv, &i, "--silent-window"))) {
            window_s = scene_num("--silent-window", v, 0, 86400);
        } else if ((v = scene_opt(argc, argv, &i, "--margin"))) {
            margin_s = scene_num("--margin", v, 0, 86400);
        } else if ((v = scene_opt(argc, argv, &i, "--seed"))) {
            seed = scene_num("--seed", v, 0, 1e15);
        } else {
            fprintf(stderr, PROG ": unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (port < 0) {
        fprintf(stderr, PROG ": --port is required\n");
        usage(stderr);
        return 2;
    }
    if (window_s < 0)
        window_s = timeout_s / 2;
    if (interval_s * 1.5 >= timeout_s)
        fprintf(stderr, PROG ": warning: beats up to %.3g s apart against a %.3g s timeout\n",
                interval_s * 1.5, timeout_s);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    /* No SA_RESTART: epoll_wait and connect return EINTR, and the loop ends. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    double load_before = scene_loadavg();
    struct scene_cpu_sample cpu_before = scene_cpu_sample();

    /* How many fit: the soft limit, raised to the hard one, minus a reserve. */
    long limit = scene_raise_nofile(PROG, stdout);
    int in_use = scene_count_fds();
    long fit = limit - (in_use > 0 ? in_use : 3) - FD_RESERVE;
    if (fit < 1) {
        fprintf(stderr, PROG ": no file descriptors to spare (limit %ld)\n", limit);
        return 3;
    }
    size_t n = conns_max ? (size_t)fit : (size_t)conns;
    if (n > (size_t)fit) {
        printf(PROG ": %zu connections do not fit in the open-file limit of %ld; "
                    "capping at %ld\n", n, limit, fit);
        n = (size_t)fit;
    }

    static struct load load; /* zeroed */
    struct load *L = &load;
    L->n = n;
    L->c = calloc(n, sizeof *L->c);
    if (!L->c) {
        fprintf(stderr, PROG ": out of memory for %zu connections\n", n);
        return 3;
    }
    L->interval_ns = (int64_t)(interval_s * 1e9);
    L->timeout_ns = (int64_t)(timeout_s * 1e9 + 0.5);
    L->tick_ns = (int64_t)(tick_ms * 1e6 + 0.5);
    L->slack_ns = (int64_t)(slack_ms * 1e6 + 0.5);
    L->rng = (uint64_t)seed;
    L->server.sin_family = AF_INET;
    L->server.sin_port = htons((uint16_t)port);
    L->server.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* loopback only, by design */
    scene_hist_init(&L->late_hist);

    /* Pick exactly round(silent * n) silent ones (a partial Fisher-Yates
     * shuffle), each with a stop offset uniform in the window. */
    L->nsilent = (size_t)(silent * (double)n + 0.5);
    size_t *idx = malloc(n * sizeof *idx);
    if (!idx) {
        free(L->c);
        return 3;
    }
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        L->c[i].fd = -1;
    }
    for (size_t k = 0; k < L->nsilent; k++) {
        size_t j = k + (size_t)(scene_rand(&L->rng) % (n - k));
        size_t t = idx[k];
        idx[k] = idx[j];
        idx[j] = t;
        struct lconn *c = &L->c[idx[k]];
        c->silent = 1;
        c->stop_ns = (int64_t)(scene_rand01(&L->rng) * window_s * 1e9); /* offset for now */
    }
    free(idx);

    L->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (L->epoll_fd < 0) {
        fprintf(stderr, PROG ": epoll_create1: %s\n", strerror(errno));
        free(L->c);
        return 3;
    }
    printf(PROG ": %zu connections to 127.0.0.1:%d, heartbeat every %.3g s on average, %zu "
                "(%.1f%%) go silent within %.3g s; timeout %.3g s, tick %.3g ms, allowance %.3g ms\n",
           n, port, interval_s, L->nsilent, 100.0 * silent, window_s, timeout_s, tick_ms, slack_ms);

    int64_t cpu0 = scene_cpu_ns(NULL, NULL);
    L->t0_ns = scene_now_ns();
    tw_wheel_init(&L->wheel, 0);
    int rc = 0;
    int64_t now = L->t0_ns, connected_ns = 0, end_ns = INT64_MAX;
    /* A hard bound, whatever happens: connecting may not take longer than
     * this, and the whole run not longer than it plus the planned length. */
    int64_t connect_limit_ns = L->t0_ns + 60 * NS_PER_S;
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        /* Open the next batch of connections, if any are left. */
        if (interrupted)
            goto done;
        if (L->opened < n) {
            for (int b = 0; b < CONNECT_BATCH && L->opened < n; b++) {
                if (open_one(L, L->opened++) != 0) {
                    rc = interrupted ? 0 : 3;
                    goto done;
                }
            }
            if (L->opened == n) {
                connected_ns = scene_now_ns();
                /* the last silent one stops by connected + window at the latest,
                 * and is due a timeout later */
                end_ns = connected_ns + (int64_t)((window_s + margin_s) * 1e9) + L->timeout_ns +
                         L->tick_ns + L->slack_ns;
                printf(PROG ": %zu connections open after %.2f s; running until %.1f s\n", n,
                       (double)(connected_ns - L->t0_ns) / 1e9,
                       (double)(end_ns - L->t0_ns) / 1e9);
            } else if (scene_now_ns() > connect_limit_ns) {
                fprintf(stderr, PROG ": connecting is taking too long (%zu of %zu in 60 s)\n",
                        L->opened, n);
                rc = 3;
                goto done;
            }
        }
        int timeout_ms = 0;
        if (L->opened == n) {
            uint64_t next = tw_wheel_next_expiry(&L->wheel);
            int64_t until = end_ns;
            if (next != TW_NEVER && L->t0_ns + (int64_t)next * NS_PER_MS < until)
                until = L->t0_ns + (int64_t)next * NS_PER_MS;
            int64_t d = until - now;
            timeout_ms = d <= 0 ? 0 : (int)((d + NS_PER_MS - 1) / NS_PER_MS);
        }
        int k = epoll_wait(L->epoll_fd, evs, MAX_EVENTS, timeout_ms);
        if (k < 0 && errno != EINTR) {
            fprintf(stderr, PROG ": epoll_wait: %s\n", strerror(errno));
            rc = 3;
            goto done;
        }
        now = scene_now_ns();
        for (int i = 0; i < k; i++) {
            struct lconn *c = evs[i].data.ptr;
            if (c->state != ST_OPEN)
                continue;
            char buf[256];
            ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
                continue; /* the server says nothing, but would be allowed to */
            closed_by_server(L, c, now); /* EOF, or reset */
        }
        tw_wheel_advance(&L->wheel, load_tick(L, now));
        if (now >= end_ns)
            break;
    }

done:;
    int64_t stop_ns = scene_now_ns();
    /* Judge the silent ones never closed, and close what is left. */
    uint64_t missed = 0, not_due = 0, open_live = 0;
    for (size_t i = 0; i < L->opened; i++) {
        struct lconn *c = &L->c[i];
        if (!c->silent && c->max_gap_ns > L->live_max_gap_ns)
            L->live_max_gap_ns = c->max_gap_ns;
        if (c->state != ST_OPEN)
            continue;
        if (c->silent && c->stopped) {
            if (stop_ns - c->last_send_ns > L->timeout_ns + L->tick_ns + L->slack_ns)
                missed++;
            else
                not_due++;
        } else if (c->silent) {
            not_due++; /* still beating when the run ended */
        } else {
            open_live++;
        }
        tw_cancel(&L->wheel, &c->beat);
        close(c->fd);
        c->fd = -1;
        c->state = ST_CLOSED_BY_US;
    }
    tw_wheel_destroy(&L->wheel);
    close(L->epoll_fd);
    int64_t cpu = scene_cpu_ns(NULL, NULL) - cpu0;
    double run = (double)(stop_ns - L->t0_ns) / 1e9;

    double load_after = scene_loadavg();
    double steal = scene_steal_pct(cpu_before, scene_cpu_sample());
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (interrupted)
        printf("\n" PROG ": interrupted by %s after %.1f s: the report so far\n",
               interrupted == SIGINT ? "SIGINT" : "SIGTERM", run);
    if (rc == 0) {
        const struct scene_hist *h = &L->late_hist;
        uint64_t in_tick = scene_hist_at_most(h, L->tick_ns);
        uint64_t in_allow = scene_hist_at_most(h, L->tick_ns + L->slack_ns);
        printf("\n" PROG " report: %zu connections for %.1f s, %" PRIu64
               " heartbeats sent (%.0f/s), %" PRIu64 " send errors; load CPU %.2f s\n",
               n, run, L->sent, (double)L->sent / run, L->send_errors, (double)cpu / 1e9);
        printf("  silent: %zu; closed by the server %" PRIu64 "; not closed in time %" PRIu64
               "; not yet due at the end %" PRIu64 "\n",
               L->nsilent, L->silent_closed, missed, not_due);
        printf("  live: %zu; still open at the end %" PRIu64 "; closed by the server %" PRIu64
               " (wrongly %" PRIu64 "; rightly %" PRIu64 ", left silent for a whole timeout by "
               "this load generator); longest gap between two heartbeats %.3f s\n",
               n - L->nsilent, open_live, L->wrong + L->wrong_gap_ok, L->wrong, L->wrong_gap_ok,
               (double)L->live_max_gap_ns / 1e9);
        printf("  idle close lateness, client side (EOF seen - last heartbeat sent - timeout):\n"
               "    ");
        scene_hist_print(h, stdout);
        printf("\n    early %" PRIu64 "; within one tick (%.3g ms) %.1f%%; within tick + allowance "
               "(%.3g ms) %.1f%%; beyond %" PRIu64 "\n",
               L->early, (double)L->tick_ns / 1e6,
               h->count ? 100.0 * (double)in_tick / (double)(h->count + h->negative) : 100.0,
               (double)(L->tick_ns + L->slack_ns) / 1e6,
               h->count ? 100.0 * (double)in_allow / (double)(h->count + h->negative) : 100.0,
               L->late);
        /* Correctness decides the verdict; lateness is reported with the
         * machine's load, never judged (a busy machine is not the wheel's
         * fault, and cannot be told from it by the client alone). */
        int failed = L->early > 0 || L->wrong > 0 || (!interrupted && missed > 0);
        /* A live connection that this load generator left silent for a whole
         * timeout (it stalled) was rightly closed: not a failure, reported
         * under timeliness with the machine's load. */
        int pass = !failed && !interrupted && L->silent_closed == L->nsilent && missed == 0 &&
                   not_due == 0;
        if (failed)
            rc = 1;
        else if (pass)
            rc = 0;
        else
            rc = 3;
        double load_max = load_after > load_before ? load_after : load_before;
        int busy = (cores > 0 && load_max >= (double)cores) || steal >= 5.0;
        char machine[160];
        snprintf(machine, sizeof machine, "load %.2f before, %.2f after, on %ld cores; steal %s",
                 load_before, load_after, cores, steal < 0 ? "not visible" : "");
        if (steal >= 0)
            snprintf(machine + strlen(machine), sizeof machine - strlen(machine), "%.1f%%", steal);
        if (L->wrong_gap_ok + L->crossed > 0)
            printf("  timeliness: this load generator stalled: it left %" PRIu64 " live "
                   "connections silent for a whole timeout (longest gap %.3f s), and %" PRIu64
                   " silent ones' last heartbeat crossed their close; the server rightly "
                   "closed them all; %s%s\n",
                   L->wrong_gap_ok, (double)L->live_max_gap_ns / 1e9, L->crossed,
                   busy ? "machine busy: " : "", machine);
        if (L->late == 0)
            printf("  timeliness: every close within tick + allowance (%s)\n", machine);
        else if (busy)
            printf("  timeliness: %" PRIu64 " closes later than tick + allowance (worst %.1f ms); "
                   "machine busy: load %.2f (%s): not counted against the server\n",
                   L->late, (double)h->max / 1e6, load_max, machine);
        else
            printf("  timeliness: %" PRIu64 " closes later than tick + allowance (worst %.1f ms) "
                   "on a machine that was not busy (%s): compare the server's own lateness\n",
                   L->late, (double)h->max / 1e6, machine);
        printf("RESULT conns=%zu silent=%zu silent_closed=%" PRIu64 " early=%" PRIu64
               " late=%" PRIu64 " missed=%" PRIu64 " not_due=%" PRIu64 " wrong=%" PRIu64
               " wrong_gap=%" PRIu64 " crossed=%" PRIu64 " sent=%" PRIu64
               " run_s=%.2f load_cpu_s=%.3f"
               " late_min_ms=%.3f late_p50_ms=%.3f late_p90_ms=%.3f late_p99_ms=%.3f"
               " late_max_ms=%.3f in_tick_pct=%.1f timeliness=%s load_before=%.2f"
               " load_after=%.2f cores=%ld steal_pct=%.1f interrupted=%d verdict=%s\n",
               n, L->nsilent, L->silent_closed, L->early, L->late, missed, not_due, L->wrong,
               L->wrong_gap_ok, L->crossed, L->sent, run, (double)cpu / 1e9,
               h->count + h->negative ? (double)h->min / 1e6 : -1.0,
               h->count ? (double)scene_hist_quantile(h, 0.5) / 1e6 : -1.0,
               h->count ? (double)scene_hist_quantile(h, 0.9) / 1e6 : -1.0,
               h->count ? (double)scene_hist_quantile(h, 0.99) / 1e6 : -1.0,
               h->count + h->negative ? (double)h->max / 1e6 : -1.0,
               h->count ? 100.0 * (double)in_tick / (double)(h->count + h->negative) : 100.0,
               L->late == 0 ? "ok" : busy ? "late-busy" : "late", load_before, load_after,
               cores, steal, interrupted ? 1 : 0,
               rc == 0 ? "PASS" : rc == 1 ? "FAIL" : "INCONCLUSIVE");
        printf("verdict: %s\n", rc == 0 ? "PASS" : rc == 1 ? "FAIL" : "INCONCLUSIVE");
    }
    free(L->c);
    return rc;
}
