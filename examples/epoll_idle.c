/* SPDX-License-Identifier: MIT */
/* twheel on an epoll loop: a TCP server that closes connections idle for
 * TIMEOUT_MS, with one wheel timer embedded in each connection (1 ms ticks
 * on CLOCK_MONOTONIC).
 *
 * The pattern, each loop turn:
 *   timeout = tw_wheel_timeout(&wheel, tick_floor(clock_ns()));
 *   epoll_wait(..., timeout);            (-1 when the wheel is empty)
 *   for each event: read; on data, last = clock_ns() and
 *       tw_arm_in(&wheel, &c->idle, tick_ceil(last), TIMEOUT_MS);
 *   tw_wheel_advance(&wheel, tick_floor(clock_ns()));   (closes idle ones)
 * tw_arm_in counts from the caller's clock, not from the wheel's last
 * advance (stale after a long epoll_wait), so a connection is never closed
 * before TIMEOUT_MS of silence; re-arming later is one store.
 *
 * The program tests itself: it listens on 127.0.0.1 (a free port) and forks
 * a client that opens 20 connections, 10 of which send a heartbeat every
 * 30 ms for 0.8 s and then leave, and 10 of which say one line and fall
 * silent. The server checks that each idle close comes at least TIMEOUT_MS
 * after the connection's last data (CLOCK_MONOTONIC) and that all 10 silent
 * ones are closed; the client checks that no live one is (unless the client
 * itself stalled for a whole timeout: then the server was right to close
 * it, and it says so). Bounded to 3 s.
 * Exit status 0 on PASS, 1 on FAIL, 2 if it cannot set up.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loop_clock.h"

#define TIMEOUT_MS 300
#define LIVE 10
#define SILENT 10
#define BEAT_MS 30
#define LIVE_FOR_MS 800
#define LIMIT_MS 3000
#define MAX_CONNS 64

struct conn {
    int fd; /* -1: free slot */
    int64_t last_ns;
    struct tw_timer idle;
};

static struct tw_wheel wheel;
static struct conn conns[MAX_CONNS];
static struct fire_check check;
static int open_conns;
static int epoll_fd = -1;

static void conn_close(struct conn *c)
{
    tw_cancel(&wheel, &c->idle);
    close(c->fd);
    c->fd = -1;
    open_conns--;
}

static void on_idle(struct tw_timer *t, void *arg)
{
    (void)arg;
    struct conn *c = tw_container_of(t, struct conn, idle);
    check_fired(&check, "an idle close", c->last_ns, TIMEOUT_MS);
    conn_close(c);
}

/* Data (or a new connection) at last_ns: the idle deadline moves. */
static void touch(struct conn *c)
{
    c->last_ns = clock_ns();
    tw_arm_in(&wheel, &c->idle, tick_ceil(c->last_ns), TIMEOUT_MS);
}

static void accept_all(int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct conn *c = NULL;
        for (int i = 0; i < MAX_CONNS && !c; i++)
            if (conns[i].fd < 0)
                c = &conns[i];
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        open_conns++;
        touch(c);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
    }
}

static void on_readable(struct conn *c)
{
    char buf[512];
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof buf);
        if (n > 0) {
            touch(c); /* the clock read after the read: the data's real time */
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_close(c); /* EOF or error: the client left */
        return;
    }
}

/* ---- the client (a child process, plain blocking sockets) ------------------ */

static int client(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct pollfd p[LIVE + SILENT];
    for (int i = 0; i < LIVE + SILENT; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
            write(fd, "hello\n", 6) != 6) {
            perror("epoll_idle client: connect");
            return 2;
        }
        p[i].fd = fd;
        p[i].events = POLLIN;
    }
    int rc = 0, silent_left = SILENT;
    int64_t start = clock_ns(), next_beat = start + BEAT_MS * NS_PER_TICK;
    int64_t live_end = start + LIVE_FOR_MS * NS_PER_TICK;
    int64_t limit = start + (LIMIT_MS - 300) * NS_PER_TICK;
    int live = 1;
    int64_t last_beat = start; /* the live ones' last heartbeat */
    while (silent_left > 0 || live) {
        int64_t now = clock_ns();
        if (now >= limit) {
            fprintf(stderr, "epoll_idle client: %d silent connections never closed\n",
                    silent_left);
            return 1;
        }
        if (live && now >= live_end) {
            for (int i = 0; i < LIVE; i++)
                close(p[i].fd); /* leaving: the server sees EOF */
            live = 0;
        } else if (live && now >= next_beat) {
            for (int i = 0; i < LIVE; i++)
                if (p[i].fd >= 0 && write(p[i].fd, "hb\n", 3) != 3)
                    rc = 1;
            last_beat = now;
            next_beat += BEAT_MS * NS_PER_TICK;
            if (next_beat < now)
                next_beat = now + BEAT_MS * NS_PER_TICK; /* we stalled: no burst */
        }
        if (!live && silent_left == 0)
            break;
        int64_t wake = live ? next_beat : limit;
        int ms = wake > now ? (int)((wake - now + NS_PER_TICK - 1) / NS_PER_TICK) : 0;
        /* Only watch what is open: live ones while they beat, silent ones
         * until the server closes them (fd < 0 makes poll skip an entry). */
        if (!live)
            for (int i = 0; i < LIVE; i++)
                p[i].fd = -1;
        if (poll(p, LIVE + SILENT, ms) < 0 && errno != EINTR)
            return 2;
        for (int i = 0; i < LIVE + SILENT; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char b[64];
            if (read(p[i].fd, b, sizeof b) > 0)
                continue; /* the server sends nothing, but may */
            if (i < LIVE) {
                double gap_ms = (double)(clock_ns() - last_beat) / 1e6;
                if (gap_ms < TIMEOUT_MS) {
                    fprintf(stderr, "epoll_idle client: the server closed a live connection "
                                    "%.1f ms after its last heartbeat\n", gap_ms);
                    rc = 1;
                } else {
                    fprintf(stderr, "epoll_idle client: stalled %.1f ms between heartbeats "
                                    "(machine busy?): the server rightly closed a connection\n",
                            gap_ms);
                }
            } else {
                silent_left--;
            }
            close(p[i].fd);
            p[i].fd = -1;
        }
    }
    return rc;
}

/* ---- the server --------------------------------------------------------- */

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) != 0) {
        perror("epoll_idle: listen");
        return 2;
    }
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_fd < 0 || epoll_ctl(epoll_fd, EPOLL_CTL_ADD, lfd, &lev) != 0) {
        perror("epoll_idle: epoll");
        return 2;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("epoll_idle: fork");
        return 2;
    }
    if (child == 0)
        _exit(client(ntohs(sa.sin_port)));

    for (int i = 0; i < MAX_CONNS; i++) {
        conns[i].fd = -1;
        tw_timer_init(&conns[i].idle, on_idle, NULL);
    }
    int64_t t0 = clock_ns(), limit = t0 + LIMIT_MS * NS_PER_TICK;
    tw_wheel_init(&wheel, tick_floor(t0));
    check.armed = SILENT; /* the idle closes that must happen */
    int client_status = -1;
    while (clock_ns() < limit && (client_status < 0 || open_conns > 0)) {
        int64_t now = clock_ns();
        int ms = timeout_ms(tw_wheel_timeout(&wheel, tick_floor(now)));
        if (ms < 0 || ms > 50)
            ms = 50; /* also look at the child now and then */
        struct epoll_event evs[MAX_CONNS];
        int n = epoll_wait(epoll_fd, evs, MAX_CONNS, ms);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL)
                accept_all(lfd);
            else if (((struct conn *)evs[i].data.ptr)->fd >= 0)
                on_readable(evs[i].data.ptr);
        }
        tw_wheel_advance(&wheel, tick_floor(clock_ns()));
        int st;
        if (client_status < 0 && waitpid(child, &st, WNOHANG) == child)
            client_status = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
    }
    if (client_status < 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        fprintf(stderr, "epoll_idle: the client did not finish in %d ms\n", LIMIT_MS);
        client_status = 1;
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i].fd >= 0)
            conn_close(&conns[i]);
    close(epoll_fd);
    close(lfd);
    int rc = check_report("epoll_idle", &check, (double)(clock_ns() - t0) / 1e9);
    if (client_status != 0) {
        printf("epoll_idle: FAIL (client: %s)\n",
               client_status == 1 ? "a live connection was closed, or a silent one was not"
                                  : "could not run");
        rc = 1;
    }
    return rc;
}
