/* SPDX-License-Identifier: MIT */
/* twheel-idled: an idle-timeout TCP server on one epoll loop.
 *
 * Every connection must send a line (a heartbeat) within --timeout seconds or
 * be closed; every line pushes its deadline back. Two strategies keep the
 * deadlines, so that they can be compared on the same traffic:
 *
 *   wheel  each connection embeds a struct tw_timer; a heartbeat re-arms it
 *          (one store: re-arming later is lazy), epoll_wait sleeps until the
 *          wheel's next work (tw_wheel_next_work: its next expiry, or a step
 *          of the walks that move pushed-back timers), and advancing the
 *          wheel fires the idle ones.
 *   scan   each connection keeps its deadline; the loop wakes every
 *          --scan-period (default: every tick, the same precision as the
 *          wheel; 1000 is the classic once-a-second sweep) and checks them all.
 *
 * Deadlines are in ticks of --tick ms since the server started. A heartbeat
 * processed at time r gets the deadline ceil((r + timeout) / tick): never
 * before r + timeout, at most one tick after it. r is read from the clock
 * after the read that returned the line, not when the loop woke: a line that
 * arrived while the loop was busy with other events is read later in the same
 * turn, and a deadline from the wake time would cut its timeout short by up to
 * a turn. (The clock is the vDSO, some 20 ns against the microsecond of the
 * read; the summary prints the measured cost.) Events are handled before
 * timers in each loop turn, so a heartbeat already sitting in a socket buffer
 * always counts, even when the loop woke late.
 *
 * Out of descriptors, the server takes each waiting connection with a spare
 * descriptor and closes it at once (counted as refused), so the backlog does
 * not wake it forever; when even that is impossible it stops listening until
 * a connection closes, or for ACCEPT_RETRY_MS.
 *
 * Output: a line of live counts every --stats seconds, a summary on exit, and
 * a last line "SUMMARY key=value ..." for scripts. Exit status: 0 after a
 * clean shutdown (SIGINT, SIGTERM or --duration), and after --help and
 * --version; 2 on every usage error (an unknown option, a missing or bad
 * value, --bind not an IPv4 address), before anything is set up; 1 on a
 * setup error (the port is taken, no epoll...); 3 if it left an fd open.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <twheel.h>

#include "scene.h"

#define PROG "twheel-idled"
#define MAX_EVENTS 1024
/* The connection table grows by chunks of this many connections (64 KB): a
 * container's open-file limit can be 2^20 or 2^30, far more than the
 * connections that will ever come, and sizing the table to it up front would
 * take gigabytes for nothing. */
#define CONN_CHUNK 1024
/* Out of descriptors with no way to refuse connections: how long the listener
 * stays out of the epoll set when no connection closes first. */
#define ACCEPT_RETRY_MS 100

enum strategy { STRATEGY_WHEEL, STRATEGY_SCAN };

struct conn {
    struct tw_timer timer;  /* wheel: fires when the connection is idle */
    uint64_t deadline;      /* scan: tick at which it is idle */
    int64_t last_ns;        /* when its last heartbeat (or accept) was handled */
    int fd;                 /* -1 when the slot is free */
    unsigned scan_index : 31; /* scan: position in server.live */
    unsigned in_beat_list : 1; /* queued for re-arming at the end of this turn */
};
/* One cache line per connection: the scan reads one line per connection, the
 * wheel one per heartbeat. */
_Static_assert(sizeof(struct conn) <= 64 + TW_NODE_DEBUG_BYTES, /* debug builds: 8 more */
               "struct conn fits a cache line");

struct server {
    /* configuration */
    enum strategy strategy;
    int64_t tick_ns, timeout_ns, scan_period_ns, stats_ns, duration_ns;
    /* descriptors */
    int listen_fd, epoll_fd, signal_fd, reserve_fd;
    /* connections, indexed by fd, in chunks of CONN_CHUNK allocated on first
     * use: a chunk never moves, since the wheel links the timers in it and
     * the epoll set points at it. */
    struct conn **chunks;
    size_t nchunks, chunks_room; /* chunks in use, entries of chunks */
    size_t capacity;      /* connection slots: nchunks * CONN_CHUNK, and the
                           * entries of beats, idle and live */
    size_t fd_limit;      /* the soft open-file limit: every fd is below it */
    struct conn **beats;  /* connections to re-arm at the end of this turn */
    size_t nbeats;
    struct conn **live;   /* scan: dense array of open connections */
    size_t nlive;
    struct conn **idle;   /* idle connections found by the wheel or the scan */
    size_t nidle;
    struct tw_wheel wheel;
    uint64_t next_scan_tick;
    /* out of descriptors: see shed_one */
    int accept_paused;      /* the listener is out of the epoll set */
    int starved;            /* no spare fd, or paused: retry at a close or at retry_ns */
    uint64_t starved_closed; /* connections closed when that began */
    int64_t retry_ns;
    uint64_t accept_pauses;
    /* time */
    int64_t t0_ns, clock_cost_ns;
    /* counters */
    uint64_t accepted, rejected, heartbeats, idle_closed, peer_closed, shutdown_closed;
    uint64_t wakeups, timeouts, events, arms, open_max, moves;
    int64_t arm_ns, expire_ns; /* time in arm (or store) batches and in advance (or scan) */
    uint64_t arm_batches, expire_batches;
    struct scene_hist late; /* server side: closed - (last heartbeat + timeout) */
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " [options]\n"
            "  --port N           TCP port (default 7070; 0 picks a free one)\n"
            "  --bind ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
            "  --timeout S        idle timeout in seconds (default 30)\n"
            "  --tick MS          tick length in milliseconds (default 1)\n"
            "  --strategy NAME    wheel (default) or scan\n"
            "  --scan-period MS   scan: sweep every MS milliseconds (default: one tick)\n"
            "  --stats S          live counts every S seconds, 0 for none (default 1)\n"
            "  --duration S       stop by itself after S seconds (default: at SIGINT/SIGTERM)\n"
            "  --version          print the version and exit\n"
            "  -h, --help         print this and exit\n"
            "The first line printed is \"listening on ADDR:PORT\".\n"
            "Exit status: 0 after a clean shutdown (SIGINT, SIGTERM, --duration); 1 on a\n"
            "setup error; 2 on a usage error; 3 if an fd was left open.\n");
}

/* ---- time ------------------------------------------------------------------- */

static uint64_t tick_of(const struct server *s, int64_t ns)
{
    return (uint64_t)((ns - s->t0_ns) / s->tick_ns);
}

/* The tick at which a connection heard from at `ns` becomes idle: the first
 * tick that starts at or after ns + timeout. */
static uint64_t deadline_of(const struct server *s, int64_t ns)
{
    int64_t at = ns - s->t0_ns + s->timeout_ns;
    return (uint64_t)((at + s->tick_ns - 1) / s->tick_ns);
}

static int64_t tick_start_ns(const struct server *s, uint64_t tick)
{
    return s->t0_ns + (int64_t)tick * s->tick_ns;
}

/* ---- connections ----------------------------------------------------------- */

static struct conn *conn_at(const struct server *s, size_t fd)
{
    return &s->chunks[fd / CONN_CHUNK][fd % CONN_CHUNK];
}

static int grow_array(struct conn ***a, size_t n)
{
    struct conn **p = realloc(*a, n * sizeof *p);
    if (!p)
        return -1;
    *a = p;
    return 0;
}

/* Make room for connection `fd`: chunks up to its own. The arrays of
 * connection pointers grow first, so that capacity only counts slots that all
 * of them can hold (an open connection is at most once in each). */
static int grow_table(struct server *s, size_t fd)
{
    while (s->capacity <= fd) {
        size_t cap = s->capacity + CONN_CHUNK;
        if (s->nchunks == s->chunks_room) {
            size_t room = s->chunks_room ? 2 * s->chunks_room : 16;
            struct conn **p = realloc(s->chunks, room * sizeof *p);
            if (!p)
                return -1;
            s->chunks = p;
            s->chunks_room = room;
        }
        if (grow_array(&s->beats, cap) != 0 || grow_array(&s->idle, cap) != 0 ||
            (s->strategy == STRATEGY_SCAN && grow_array(&s->live, cap) != 0))
            return -1;
        size_t bytes = (CONN_CHUNK * sizeof(struct conn) + 63) / 64 * 64;
        struct conn *chunk = aligned_alloc(64, bytes);
        if (!chunk)
            return -1;
        memset(chunk, 0, bytes);
        for (size_t i = 0; i < CONN_CHUNK; i++)
            chunk[i].fd = -1;
        s->chunks[s->nchunks++] = chunk;
        s->capacity = cap;
    }
    return 0;
}

static void on_idle(struct tw_timer *t, void *arg)
{
    struct server *s = arg;
    s->idle[s->nidle++] = tw_container_of(t, struct conn, timer);
}

static void queue_beat(struct server *s, struct conn *c)
{
    if (!c->in_beat_list) {
        c->in_beat_list = 1;
        s->beats[s->nbeats++] = c;
    }
}

static void close_conn(struct server *s, struct conn *c)
{
    if (s->strategy == STRATEGY_WHEEL) {
        tw_cancel(&s->wheel, &c->timer);
    } else {
        struct conn *last = s->live[--s->nlive];
        s->live[c->scan_index] = last;
        last->scan_index = c->scan_index;
    }
    close(c->fd); /* also removes it from the epoll set */
    c->fd = -1;
    /* c stays in the beat list if it is there: the re-arm loop skips it. */
}

static uint64_t closed_conns(const struct server *s)
{
    return s->idle_closed + s->peer_closed;
}

/* Note that the server is short of descriptors: retry (the spare, the
 * listener) when a connection closes, or at retry_ns at the latest. */
static void note_starved(struct server *s)
{
    if (!s->starved) {
        s->starved = 1;
        s->starved_closed = closed_conns(s);
        s->retry_ns = scene_now_ns() + ACCEPT_RETRY_MS * NS_PER_MS;
    }
}

static void reopen_reserve(struct server *s)
{
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (s->reserve_fd < 0)
        note_starved(s);
}

/* Waiting connections that cannot be taken keep the listener readable: take
 * it out of the epoll set rather than wake for them again and again. */
static void pause_accepting(struct server *s, int err)
{
    if (!s->accept_paused && epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, s->listen_fd, NULL) == 0) {
        s->accept_paused = 1;
        if (s->accept_pauses++ == 0)
            fprintf(stderr,
                    PROG ": accept: %s, and no spare descriptor to refuse connections with: "
                    "not accepting until a connection closes (or for %d ms)\n",
                    strerror(err), ACCEPT_RETRY_MS);
    }
    note_starved(s);
}

/* End of a turn while starved: once a connection has closed (its descriptor
 * is free) or the retry time has come, get the spare back and listen again.
 * If that fails, starved again, with a new retry time: one attempt per
 * ACCEPT_RETRY_MS at most, never a busy loop. */
static void recover(struct server *s, int64_t now)
{
    if (closed_conns(s) == s->starved_closed && now < s->retry_ns)
        return;
    s->starved = 0;
    if (s->reserve_fd < 0)
        reopen_reserve(s);
    if (s->accept_paused) {
        struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
        if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &lev) == 0)
            s->accept_paused = 0;
        else
            note_starved(s);
    }
}

/* accept failed with EMFILE or ENFILE (err): out of descriptors, and maybe
 * connections in the backlog, which keep the listener readable. Take one with
 * the spare descriptor and close it at once. Returns 1 when one was shed
 * (there may be more: the caller tries again), 0 when the caller must stop:
 * the backlog is empty (Linux checks the descriptor limit before the backlog,
 * so accept4 says EMFILE even then: only this accept can tell), or nothing
 * could be shed, and accepting is paused. */
static int shed_one(struct server *s, int err)
{
    if (s->reserve_fd >= 0) {
        close(s->reserve_fd);
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        err = errno;
        if (fd >= 0) {
            close(fd);
            s->rejected++;
        }
        reopen_reserve(s);
        if (fd >= 0 || err == ECONNABORTED || err == EINTR)
            return 1; /* without a spare now, the next accept4 ends up below */
        if (err == EAGAIN || err == EWOULDBLOCK)
            return 0;
        /* ENFILE: the whole system is out, our spare was not enough. */
    }
    pause_accepting(s, err);
    return 0;
}

static void accept_all(struct server *s)
{
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE) {
                if (shed_one(s, errno))
                    continue;
                return;
            }
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                fprintf(stderr, PROG ": accept: %s\n", strerror(errno));
            return;
        }
        /* The accept is the connection's first sign of life: its deadline
         * counts from now, like a heartbeat's from its read (see the top). */
        int64_t t = scene_now_ns();
        if ((size_t)fd >= s->capacity && grow_table(s, (size_t)fd) != 0) {
            fprintf(stderr, PROG ": out of memory for connection %d, refusing it\n", fd);
            close(fd);
            s->rejected++;
            continue;
        }
        if (s->nbeats >= s->capacity) { /* cannot happen: each is at most once in beats */
            close(fd);
            s->rejected++;
            continue;
        }
        struct conn *c = conn_at(s, (size_t)fd);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            fprintf(stderr, PROG ": epoll_ctl: %s\n", strerror(errno));
            close(fd);
            s->rejected++;
            continue;
        }
        c->fd = fd;
        c->last_ns = t;
        if (s->strategy == STRATEGY_WHEEL) {
            tw_timer_init(&c->timer, on_idle, s);
        } else {
            c->scan_index = (uint32_t)s->nlive;
            s->live[s->nlive++] = c;
        }
        /* The timer is armed at the end of this turn with the heartbeats. */
        queue_beat(s, c);
        s->accepted++;
        uint64_t open = s->accepted - s->idle_closed - s->peer_closed;
        if (open > s->open_max)
            s->open_max = open;
    }
}

/* Read everything the peer sent; every '\n' is a heartbeat. */
static void handle_readable(struct server *s, struct conn *c)
{
    char buf[4096];
    uint64_t lines = 0;
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof buf);
        if (n > 0) {
            for (ssize_t i = 0; i < n; i++)
                lines += buf[i] == '\n';
            if ((size_t)n < sizeof buf)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        /* EOF or an error such as ECONNRESET: the peer is gone. */
        s->heartbeats += lines;
        s->peer_closed++;
        close_conn(s, c);
        return;
    }
    if (lines) {
        /* After the last read: every line counted was in by now. */
        c->last_ns = scene_now_ns();
        s->heartbeats += lines;
        queue_beat(s, c);
    }
}

/* End of a loop turn: re-arm (or store) the deadlines of the connections
 * heard from in this turn, each from the time it was heard from (last_ns),
 * then let the timers find the idle ones, then close those. The first two
 * steps are the strategy's timer work, and are timed. */
static void run_timers(struct server *s)
{
    int64_t t_a = scene_now_ns();
    if (s->strategy == STRATEGY_WHEEL) {
        for (size_t i = 0; i < s->nbeats; i++) {
            struct conn *c = s->beats[i];
            c->in_beat_list = 0;
            if (c->fd >= 0)
                tw_arm(&s->wheel, &c->timer, deadline_of(s, c->last_ns), 0, 0);
        }
    } else {
        for (size_t i = 0; i < s->nbeats; i++) {
            struct conn *c = s->beats[i];
            c->in_beat_list = 0;
            if (c->fd >= 0)
                c->deadline = deadline_of(s, c->last_ns);
        }
    }
    int64_t t_b = scene_now_ns();
    if (s->nbeats) {
        s->arms += s->nbeats;
        s->arm_ns += t_b - t_a - s->clock_cost_ns;
        s->arm_batches++;
    }
    s->nbeats = 0;

    uint64_t tick = tick_of(s, t_b);
    int expired = 0;
    if (s->strategy == STRATEGY_WHEEL) {
        /* next_work, not next_expiry: the walks of the timers heartbeats
         * pushed back move on at the wake-ups it asks for, a share each */
        if (tw_wheel_next_work(&s->wheel) <= tick) {
            tw_wheel_advance(&s->wheel, tick);
            expired = 1;
        }
    } else if (tick >= s->next_scan_tick) {
        for (size_t i = 0; i < s->nlive; i++) {
            struct conn *c = s->live[i];
            if (c->deadline <= tick)
                s->idle[s->nidle++] = c;
        }
        uint64_t period = (uint64_t)(s->scan_period_ns / s->tick_ns);
        s->next_scan_tick = (tick / period + 1) * period;
        expired = 1;
    }
    int64_t t_c = scene_now_ns();
    if (expired) {
        s->expire_ns += t_c - t_b - s->clock_cost_ns;
        s->expire_batches++;
    }

    for (size_t i = 0; i < s->nidle; i++) {
        struct conn *c = s->idle[i];
        scene_hist_add(&s->late, t_c - (c->last_ns + s->timeout_ns));
        s->idle_closed++;
        close_conn(s, c);
    }
    s->nidle = 0;
}

/* How long epoll may sleep: until the next timer work, or the next stats
 * line, or the end of --duration, or the retry when short of descriptors;
 * NULL for "no limit". */
static struct timespec *poll_timeout(struct server *s, int64_t now_ns, int64_t next_stats_ns,
                                     int64_t end_ns, struct timespec *ts)
{
    int64_t until = INT64_MAX;
    if (s->strategy == STRATEGY_WHEEL) {
        uint64_t next = tw_wheel_next_work(&s->wheel);
        if (next != TW_NEVER)
            until = tick_start_ns(s, next);
    } else {
        until = tick_start_ns(s, s->next_scan_tick);
    }
    if (next_stats_ns < until)
        until = next_stats_ns;
    if (end_ns < until)
        until = end_ns;
    if (s->starved && s->retry_ns < until)
        until = s->retry_ns;
    if (until == INT64_MAX)
        return NULL;
    int64_t d = until - now_ns;
    if (d < 0)
        d = 0;
    ts->tv_sec = (time_t)(d / NS_PER_S);
    ts->tv_nsec = (long)(d % NS_PER_S);
    return ts;
}

/* epoll_pwait2 has a nanosecond timeout (Linux 5.11); epoll_wait's is in ms,
 * which would add up to a millisecond to every idle close. Without it, fall
 * back for good: ENOSYS from an older kernel, EPERM from a seccomp profile
 * that predates it (the usual errno of container runtimes), EINVAL from
 * sandboxes that reject what they do not know (our arguments are valid; were
 * they not, epoll_wait fails the same way and the caller sees it). */
static int wait_events(int epfd, struct epoll_event *evs, int max, const struct timespec *ts)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
    static int have_pwait2 = 1;
    if (have_pwait2) {
        int n = epoll_pwait2(epfd, evs, max, ts, NULL);
        if (n >= 0 || (errno != ENOSYS && errno != EPERM && errno != EINVAL))
            return n;
        fprintf(stderr, PROG ": epoll_pwait2: %s; using epoll_wait (timeouts in whole ms)\n",
                strerror(errno));
        have_pwait2 = 0;
    }
#endif
    int ms = -1;
    if (ts) {
        int64_t ns = (int64_t)ts->tv_sec * NS_PER_S + ts->tv_nsec;
        int64_t m = (ns + NS_PER_MS - 1) / NS_PER_MS;
        ms = m > INT_MAX ? INT_MAX : (int)m;
    }
    return epoll_wait(epfd, evs, max, ms);
}

/* ---- reporting ----------------------------------------------------------------- */

static const char *strategy_name(const struct server *s)
{
    return s->strategy == STRATEGY_WHEEL ? "wheel" : "scan";
}

static uint64_t open_conns(const struct server *s)
{
    return s->accepted - s->idle_closed - s->peer_closed - s->shutdown_closed;
}

/* Timer work per heartbeat in ns: both batches, clock reads discounted. */
static double timer_ns_per_beat(const struct server *s, double *arm, double *expire)
{
    double beats = s->heartbeats ? (double)s->heartbeats : 1.0;
    *arm = (double)(s->arm_ns > 0 ? s->arm_ns : 0) / beats;
    *expire = (double)(s->expire_ns > 0 ? s->expire_ns : 0) / beats;
    return *arm + *expire;
}

static void print_stats(struct server *s, int64_t now_ns, int64_t *last_ns, uint64_t *last_beats,
                        uint64_t *last_idle, uint64_t *last_wakeups, int64_t *last_cpu)
{
    double dt = (double)(now_ns - *last_ns) / 1e9;
    int64_t cpu = scene_cpu_ns(NULL, NULL);
    printf("[%6.1fs] %s  conns %" PRIu64 "  heartbeats/s %.0f  idle-closed %" PRIu64 " (+%" PRIu64
           ")  peer-closed %" PRIu64 "  wakeups/s %.0f  cpu %.1f%% (%.2f s total)\n",
           (double)(now_ns - s->t0_ns) / 1e9, strategy_name(s), open_conns(s),
           (double)(s->heartbeats - *last_beats) / dt, s->idle_closed, s->idle_closed - *last_idle,
           s->peer_closed, (double)(s->wakeups - *last_wakeups) / dt,
           100.0 * (double)(cpu - *last_cpu) / 1e9 / dt, (double)cpu / 1e9);
    *last_ns = now_ns;
    *last_beats = s->heartbeats;
    *last_idle = s->idle_closed;
    *last_wakeups = s->wakeups;
    *last_cpu = cpu;
}

static void print_summary(const struct server *s, int64_t end_ns, int fds_start, int fds_end)
{
    int64_t user, sys;
    scene_cpu_ns(&user, &sys);
    double run = (double)(end_ns - s->t0_ns) / 1e9;
    double arm, expire;
    double per_beat = timer_ns_per_beat(s, &arm, &expire);
    printf("\n" PROG " summary: strategy %s, tick %.3g ms, timeout %.3g s", strategy_name(s),
           (double)s->tick_ns / 1e6, (double)s->timeout_ns / 1e9);
    if (s->strategy == STRATEGY_SCAN)
        printf(", sweep every %.3g ms", (double)s->scan_period_ns / 1e6);
    printf("\n  ran %.1f s; accepted %" PRIu64 " connections (at most %" PRIu64
           " open), refused %" PRIu64 "; heartbeats %" PRIu64 " (%.0f/s)\n",
           run, s->accepted, s->open_max, s->rejected, s->heartbeats, (double)s->heartbeats / run);
    printf("  closed: %" PRIu64 " idle, %" PRIu64 " by the peer, %" PRIu64 " at shutdown\n",
           s->idle_closed, s->peer_closed, s->shutdown_closed);
    if (s->accept_pauses)
        printf("  out of descriptors with no spare: stopped accepting %" PRIu64 " times\n",
               s->accept_pauses);
    printf("  CPU: user %.2f s + system %.2f s = %.2f s (%.1f%% of one core)\n", (double)user / 1e9,
           (double)sys / 1e9, (double)(user + sys) / 1e9, 100.0 * (double)(user + sys) / 1e9 / run);
    printf("  wakeups: %" PRIu64 " (%.0f/s), %" PRIu64 " of them by the timeout alone; %.2f events "
           "per wakeup with events\n",
           s->wakeups, (double)s->wakeups / run, s->timeouts,
           s->wakeups > s->timeouts ? (double)s->events / (double)(s->wakeups - s->timeouts) : 0.0);
    printf("  timer work: %.1f ns per heartbeat = %s %.1f + %s %.1f (%.0f ns per clock read "
           "discounted)\n",
           per_beat, s->strategy == STRATEGY_WHEEL ? "arm" : "store", arm,
           s->strategy == STRATEGY_WHEEL ? "advance" : "scan", expire, (double)s->clock_cost_ns);
    if (s->strategy == STRATEGY_WHEEL)
        printf("  wheel: %" PRIu64 " re-arms, %" PRIu64 " timer moves (%.3f per heartbeat)\n",
               s->arms, s->moves,
               (double)s->moves / (s->heartbeats ? (double)s->heartbeats : 1.0));
    printf("  idle close lateness, server side (closed - last heartbeat - timeout): ");
    scene_hist_print(&s->late, stdout);
    printf("\n  descriptors: %d open at start, %d at exit%s\n", fds_start, fds_end,
           fds_start == fds_end ? "" : "  <-- LEAK");
    printf("SUMMARY strategy=%s tick_ms=%g timeout_s=%g run_s=%.2f accepted=%" PRIu64
           " open_max=%" PRIu64 " refused=%" PRIu64 " heartbeats=%" PRIu64 " idle_closed=%" PRIu64
           " peer_closed=%" PRIu64 " shutdown_closed=%" PRIu64 " cpu_user_s=%.3f cpu_sys_s=%.3f"
           " cpu_s=%.3f wakeups=%" PRIu64 " timeouts=%" PRIu64 " timer_ns_per_beat=%.1f arm_ns_per_beat=%.1f"
           " expire_ns_per_beat=%.1f late_p50_ms=%.3f late_p99_ms=%.3f late_max_ms=%.3f"
           " fds_start=%d fds_end=%d\n",
           strategy_name(s), (double)s->tick_ns / 1e6, (double)s->timeout_ns / 1e9, run,
           s->accepted, s->open_max, s->rejected, s->heartbeats, s->idle_closed, s->peer_closed,
           s->shutdown_closed, (double)user / 1e9, (double)sys / 1e9, (double)(user + sys) / 1e9,
           s->wakeups, s->timeouts, per_beat, arm, expire,
           s->late.count ? (double)scene_hist_quantile(&s->late, 0.5) / 1e6 : -1.0,
           s->late.count ? (double)scene_hist_quantile(&s->late, 0.99) / 1e6 : -1.0,
           s->late.count ? (double)s->late.max / 1e6 : -1.0, fds_start, fds_end);
}

/* ---- setup -------------------------------------------------------------------- */

static int open_listener(const char *addr, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, PROG ": --bind %s: not an IPv4 address\n", addr);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, PROG ": socket: %s\n", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, SOMAXCONN) != 0) {
        fprintf(stderr, PROG ": listen on %s:%d: %s\n", addr, port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    const char *bind_addr = "127.0.0.1";
    int port = 7070;
    double timeout_s = 30, tick_ms = 1, scan_ms = 0, stats_s = 1, duration_s = 0;
    enum strategy strategy = STRATEGY_WHEEL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf(PROG " (twheel %s)\n", tw_version_string());
            return 0;
        } else if ((v = scene_opt(argc, argv, &i, "--port"))) {
            port = (int)scene_num("--port", v, 0, 65535);
        } else if ((v = scene_opt(argc, argv, &i, "--bind"))) {
            struct in_addr probe;
            if (inet_pton(AF_INET, v, &probe) != 1) {
                fprintf(stderr, PROG ": --bind %s: not an IPv4 address\n", v);
                return 2; /* a usage error, like every other */
            }
            bind_addr = v;
        } else if ((v = scene_opt(argc, argv, &i, "--timeout"))) {
            timeout_s = scene_num("--timeout", v, 0.001, 86400);
        } else if ((v = scene_opt(argc, argv, &i, "--tick"))) {
            tick_ms = scene_num("--tick", v, 0.001, 60000);
        } else if ((v = scene_opt(argc, argv, &i, "--scan-period"))) {
            scan_ms = scene_num("--scan-period", v, 0.001, 3600000);
        } else if ((v = scene_opt(argc, argv, &i, "--stats"))) {
            stats_s = scene_num("--stats", v, 0, 3600);
        } else if ((v = scene_opt(argc, argv, &i, "--duration"))) {
            duration_s = scene_num("--duration", v, 0, 1e6);
        } else if ((v = scene_opt(argc, argv, &i, "--strategy"))) {
            if (!strcmp(v, "wheel")) {
                strategy = STRATEGY_WHEEL;
            } else if (!strcmp(v, "scan")) {
                strategy = STRATEGY_SCAN;
            } else {
                fprintf(stderr, PROG ": --strategy must be wheel or scan\n");
                return 2;
            }
        } else {
            fprintf(stderr, PROG ": unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    static struct server srv; /* zeroed; the wheel is about 6 KB */
    struct server *s = &srv;
    s->strategy = strategy;
    s->tick_ns = (int64_t)(tick_ms * 1e6 + 0.5);
    s->timeout_ns = (int64_t)(timeout_s * 1e9 + 0.5);
    /* The sweep runs on tick boundaries: its period is a whole number of ticks. */
    int64_t period_ticks = scan_ms > 0 ? (int64_t)(scan_ms * 1e6 / (double)s->tick_ns + 0.5) : 1;
    s->scan_period_ns = (period_ticks < 1 ? 1 : period_ticks) * s->tick_ns;
    s->stats_ns = (int64_t)(stats_s * 1e9);
    s->duration_ns = (int64_t)(duration_s * 1e9);
    s->listen_fd = s->epoll_fd = s->signal_fd = s->reserve_fd = -1;
    scene_hist_init(&s->late);

    int fds_start = scene_count_fds();
    s->fd_limit = (size_t)scene_raise_nofile(PROG, stdout);
    int rc = 1;

    /* SIGINT and SIGTERM arrive as readable data on a signalfd: the loop
     * handles them like any event and shuts down cleanly. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* The loop sleeps to the next tick boundary with a deadline due there:
     * without this, Linux may end that sleep up to 50 us late (timer slack,
     * to batch wake-ups), and every close waits for it. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    s->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->listen_fd = open_listener(bind_addr, port);
    if (s->signal_fd < 0 || s->epoll_fd < 0 || s->listen_fd < 0) {
        if (s->signal_fd < 0 || s->epoll_fd < 0)
            fprintf(stderr, PROG ": setup: %s\n", strerror(errno));
        goto out;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &s->signal_fd};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &lev) != 0 ||
        epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->signal_fd, &sev) != 0) {
        fprintf(stderr, PROG ": epoll_ctl: %s\n", strerror(errno));
        goto out;
    }
    struct sockaddr_in bound;
    socklen_t blen = sizeof bound;
    getsockname(s->listen_fd, (struct sockaddr *)&bound, &blen);
    char abuf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &bound.sin_addr, abuf, sizeof abuf);
    printf("listening on %s:%d\n", abuf, ntohs(bound.sin_port));
    printf(PROG ": strategy %s, timeout %g s, tick %g ms", strategy_name(s), timeout_s,
           (double)s->tick_ns / 1e6);
    if (strategy == STRATEGY_SCAN)
        printf(", sweep every %g ms", (double)s->scan_period_ns / 1e6);
    printf(", room for %zu connections\n", s->fd_limit - (size_t)fds_start - 4);

    s->clock_cost_ns = scene_clock_cost_ns();
    s->t0_ns = scene_now_ns();
    tw_wheel_init(&s->wheel, 0);
    s->next_scan_tick = 1;
    int64_t now = s->t0_ns;
    int64_t next_stats = s->stats_ns > 0 ? now + s->stats_ns : INT64_MAX;
    int64_t end = s->duration_ns > 0 ? now + s->duration_ns : INT64_MAX;
    int64_t last_ns = now, last_cpu = scene_cpu_ns(NULL, NULL);
    uint64_t last_beats = 0, last_idle = 0, last_wakeups = 0;

    struct epoll_event evs[MAX_EVENTS];
    int stop = 0;
    while (!stop) {
        struct timespec ts;
        int n = wait_events(s->epoll_fd, evs, MAX_EVENTS,
                            poll_timeout(s, now, next_stats, end, &ts));
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, PROG ": epoll: %s\n", strerror(errno));
            goto out;
        }
        s->wakeups++;
        if (n == 0)
            s->timeouts++;
        else if (n > 0)
            s->events += (uint64_t)n;
        now = scene_now_ns();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->listen_fd) {
                accept_all(s);
            } else if (p == &s->signal_fd) {
                struct signalfd_siginfo si;
                while (read(s->signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
                    printf(PROG ": %s, shutting down\n", strsignal((int)si.ssi_signo));
                    stop = 1;
                }
            } else {
                struct conn *c = p;
                if (c->fd >= 0) /* closed earlier in this batch */
                    handle_readable(s, c);
            }
        }
        run_timers(s);
        if (s->starved)
            recover(s, now);
        if (now >= end) {
            printf(PROG ": --duration reached, shutting down\n");
            stop = 1;
        }
        if (now >= next_stats) {
            print_stats(s, now, &last_ns, &last_beats, &last_idle, &last_wakeups, &last_cpu);
            next_stats += s->stats_ns * ((now - next_stats) / s->stats_ns + 1);
        }
    }
    rc = 0;

out:;
    int64_t end_ns = scene_now_ns();
    /* Close everything we opened, then check that nothing is left. */
    for (size_t i = 0; i < s->capacity; i++) {
        struct conn *c = conn_at(s, i);
        if (c->fd >= 0) {
            s->shutdown_closed++;
            close_conn(s, c);
        }
    }
    s->moves = tw_wheel_moves(&s->wheel); /* destroy resets the wheel's counters */
    tw_wheel_destroy(&s->wheel);
    int *fds[] = {&s->listen_fd, &s->epoll_fd, &s->signal_fd, &s->reserve_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
    int fds_end = scene_count_fds();
    if (rc == 0) {
        print_summary(s, end_ns, fds_start, fds_end);
        if (fds_start != fds_end)
            rc = 3;
    }
    for (size_t i = 0; i < s->nchunks; i++)
        free(s->chunks[i]);
    free(s->chunks);
    free(s->beats);
    free(s->idle);
    free(s->live);
    return rc;
}
