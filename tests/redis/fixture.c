/* SPDX-License-Identifier: MIT */
/* Test fixture for the Redis layer; see fixture.h for what and why.
 *
 * A registry of children and directories (mutex-guarded, fixed size) lets an
 * atexit handler kill, reap and remove whatever a failing test left behind;
 * PR_SET_PDEATHSIG covers the case where the test itself is SIGKILLed (by a
 * CTest timeout, say): the children die with it.
 */
#define _GNU_SOURCE
#include "fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RFX_REG_MAX 128
#define RFX_START_TRIES 6
#define RFX_READY_MS 20000
#define RFX_STOP_MS 5000

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rfx: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- time --------------------------------------------------------------- */
uint64_t rfx_realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t rfx_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void rfx_sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- registry and cleanup ----------------------------------------------- */
struct reg_entry {
    pid_t pid;     /* 0: none */
    char dir[256]; /* "": none */
    bool used;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_entry reg[RFX_REG_MAX];
static bool reg_atexit_done;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP || flag == FTW_D)
        rmdir(path);
    else
        unlink(path);
    return 0;
}

static void remove_dir(const char *dir)
{
    if (dir[0])
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Kill and reap with a bound: SIGTERM first when @p gentle. */
static void kill_reap(pid_t pid, bool gentle)
{
    if (pid <= 0)
        return;
    int status;
    if (gentle) {
        kill(pid, SIGTERM);
        uint64_t end = rfx_mono_ms() + RFX_STOP_MS;
        while (rfx_mono_ms() < end) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid || (w < 0 && errno == ECHILD))
                return;
            rfx_sleep_ms(5);
        }
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
}

static void reg_cleanup(void)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < RFX_REG_MAX; i++) {
        if (!reg[i].used)
            continue;
        if (reg[i].pid > 0)
            kill(reg[i].pid, SIGKILL);
    }
    for (int i = 0; i < RFX_REG_MAX; i++) {
        if (!reg[i].used)
            continue;
        kill_reap(reg[i].pid, false);
        remove_dir(reg[i].dir);
        reg[i].used = false;
    }
    pthread_mutex_unlock(&reg_lock);
}

static int reg_add(pid_t pid, const char *dir)
{
    pthread_mutex_lock(&reg_lock);
    if (!reg_atexit_done) {
        atexit(reg_cleanup);
        reg_atexit_done = true;
    }
    int slot = -1;
    for (int i = 0; i < RFX_REG_MAX; i++) {
        if (!reg[i].used) {
            slot = i;
            reg[i].used = true;
            reg[i].pid = pid;
            snprintf(reg[i].dir, sizeof reg[i].dir, "%s", dir ? dir : "");
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (slot < 0)
        fail("registry full (%d children and directories)", RFX_REG_MAX);
    return slot;
}

static void reg_set_pid(int slot, pid_t pid)
{
    if (slot < 0 || slot >= RFX_REG_MAX)
        return;
    pthread_mutex_lock(&reg_lock);
    reg[slot].pid = pid;
    pthread_mutex_unlock(&reg_lock);
}

static void reg_drop(int slot)
{
    if (slot < 0 || slot >= RFX_REG_MAX)
        return;
    pthread_mutex_lock(&reg_lock);
    reg[slot].used = false;
    reg[slot].pid = 0;
    reg[slot].dir[0] = 0;
    pthread_mutex_unlock(&reg_lock);
}

static int reg_find_pid(pid_t pid)
{
    int slot = -1;
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < RFX_REG_MAX; i++)
        if (reg[i].used && reg[i].pid == pid) {
            slot = i;
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    return slot;
}

/* SIGINT/SIGTERM/SIGHUP: kill and reap every child, then die of the signal.
 * Only async-signal-safe calls; the registry is read without its lock (the
 * process is going away). Directories stay (the next run's sweep removes them). */
static void on_fatal_signal(int sig)
{
    for (int i = 0; i < RFX_REG_MAX; i++)
        if (reg[i].used && reg[i].pid > 0)
            kill(reg[i].pid, SIGKILL);
    for (int i = 0; i < RFX_REG_MAX; i++)
        if (reg[i].used && reg[i].pid > 0)
            waitpid(reg[i].pid, NULL, 0);
    signal(sig, SIG_DFL);
    raise(sig);
}

void rfx_cleanup_on_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ---- processes ----------------------------------------------------------- */
/* The child side of every fork: die with the parent, redirect, exec. Only
 * async-signal-safe calls (the parent may have threads). */
static void child_exec(pid_t parent, char *const argv[], const char *log, const char *cwd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    if (cwd && chdir(cwd) != 0)
        _exit(126);
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
        dup2(fd, 0);
        close(fd);
    }
    if (log) {
        fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
    }
    /* Signals ignored or blocked by the test must not leak into the child. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[0], argv);
    _exit(127);
}

int rfx_spawn(pid_t *out, char *const argv[], const char *log)
{
    pid_t parent = getpid();
    int slot = reg_add(0, NULL);
    if (slot < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        fail("fork: %s", strerror(errno));
        reg_drop(slot);
        return -1;
    }
    if (pid == 0)
        child_exec(parent, argv, log, NULL);
    reg_set_pid(slot, pid);
    *out = pid;
    return 0;
}

int rfx_signal(pid_t pid, int sig)
{
    if (pid <= 0 || reg_find_pid(pid) < 0) {
        fail("signal: %d is not a child of the fixture", (int)pid);
        return -1;
    }
    return kill(pid, sig) == 0 ? 0 : -1;
}

int rfx_wait_stopped(pid_t pid, int timeout_ms)
{
    uint64_t end = rfx_mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
        int st = 0;
        /* the group stop is reported once every thread has stopped */
        pid_t w = waitpid(pid, &st, WNOHANG | WUNTRACED);
        if (w == pid && WIFSTOPPED(st))
            return 0;
        if (w == pid || (w < 0 && errno == ECHILD)) { /* it exited: reaped here */
            reg_drop(reg_find_pid(pid));
            return -1;
        }
        if (w < 0 && errno != EINTR)
            return -1;
        if (rfx_mono_ms() >= end)
            return -1;
        rfx_sleep_ms(1);
    }
}

int rfx_wait(pid_t pid, int timeout_ms, int *status)
{
    uint64_t end = rfx_mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    int st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid || (w < 0 && errno == ECHILD)) {
            reg_drop(reg_find_pid(pid));
            if (status)
                *status = st;
            return 0;
        }
        if (rfx_mono_ms() >= end)
            return -1;
        rfx_sleep_ms(2);
    }
}

void rfx_reap(pid_t pid)
{
    if (pid <= 0)
        return;
    kill_reap(pid, false);
    reg_drop(reg_find_pid(pid));
}

/* ---- TLS material ------------------------------------------------------------ */
static const char *env_or(const char *name, const char *dflt);

const char *rfx_tls_path(const struct rfx_tls *t, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", t->dir, name);
    return buf;
}

/* Run the openssl command in dir: 0 when it exits 0 within 30 s. */
static int openssl_run(const char *dir, const char *const *args)
{
    char *argv[40], log[300];
    size_t n = 0;
    argv[n++] = "openssl";
    for (; *args && n < 39; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s/openssl.log", dir);
    pid_t pid;
    int st = 0;
    if (rfx_spawn(&pid, argv, log) != 0)
        return -1;
    if (rfx_wait(pid, 30000, &st) != 0) {
        rfx_reap(pid);
        st = -1;
    }
    if (st != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fail("openssl %s failed (log: %s)", argv[1], log);
        return -1;
    }
    return 0;
}

/* A key and a certificate NAME.crt/NAME.key: a self-signed CA (ext NULL),
 * or signed by the CA CANAME with the extensions ext. */
static int tls_cert(const char *dir, const char *name, const char *caname, const char *ext)
{
    char key[300], crt[300], csr[300], subj[64], cacrt[300], cakey[300], extf[300];
    snprintf(key, sizeof key, "%s/%s.key", dir, name);
    snprintf(crt, sizeof crt, "%s/%s.crt", dir, name);
    snprintf(csr, sizeof csr, "%s/%s.csr", dir, name);
    snprintf(subj, sizeof subj, "/CN=twheel-test-%s", name);
    if (!caname) {
        const char *a[] = {"req", "-x509", "-newkey", "ec", "-pkeyopt",
                           "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt,
                           "-days", "2", "-subj", subj, "-addext",
                           "basicConstraints=critical,CA:TRUE", "-addext",
                           "keyUsage=critical,keyCertSign,cRLSign", NULL};
        return openssl_run(dir, a);
    }
    snprintf(cacrt, sizeof cacrt, "%s/%s.crt", dir, caname);
    snprintf(cakey, sizeof cakey, "%s/%s.key", dir, caname);
    snprintf(extf, sizeof extf, "%s/%s.ext", dir, name);
    FILE *f = fopen(extf, "w");
    if (!f || fprintf(f, "%s\n", ext) < 0 || fclose(f) != 0) {
        fail("%s: %s", extf, strerror(errno));
        return -1;
    }
    const char *a[] = {"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                       "-nodes", "-keyout", key, "-out", csr, "-subj", subj, NULL};
    const char *b[] = {"x509", "-req", "-in", csr, "-CA", cacrt, "-CAkey", cakey,
                       "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", extf, NULL};
    return openssl_run(dir, a) == 0 && openssl_run(dir, b) == 0 ? 0 : -1;
}

int rfx_tls_make(struct rfx_tls *t)
{
    snprintf(t->dir, sizeof t->dir, "%s/twheel-tls-XXXXXX", env_or("TMPDIR", "/tmp"));
    if (!mkdtemp(t->dir)) {
        fail("mkdtemp %s: %s", t->dir, strerror(errno));
        return -1;
    }
    if (reg_add(0, t->dir) < 0) {
        remove_dir(t->dir);
        return -1;
    }
    if (tls_cert(t->dir, "ca", NULL, NULL) != 0 || tls_cert(t->dir, "ca2", NULL, NULL) != 0 ||
        tls_cert(t->dir, "server", "ca",
                 "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth") != 0 ||
        tls_cert(t->dir, "client", "ca", "extendedKeyUsage=clientAuth") != 0 ||
        tls_cert(t->dir, "wrong", "ca",
                 "subjectAltName=DNS:wrong.example\nextendedKeyUsage=serverAuth,clientAuth") != 0)
        return -1;
    return 0;
}

/* ---- servers --------------------------------------------------------------- */
/* Ports. Test processes run side by side (ctest -j) and kill and restart
 * their servers on the same port: a port another process's server gave up
 * for a moment must not be handed to a new server elsewhere, or a client
 * reconnecting to the first would reach the second (and, on the same queue
 * name, take its tasks). So each port is reserved across processes by a
 * file RFX_PORT_DIR/<port> holding the reserving pid (kept until rfx_stop
 * or that pid's exit), and ports come from 10000..19999 (cluster bus:
 * +10000), below Linux's ephemeral range (32768..), which clients' own
 * sockets use. */
#define RFX_PORT_LO 10000
#define RFX_PORT_N 10000

static void port_path(char *buf, size_t len, int port)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/twheel-rfx-ports-%u/%d", tmp && *tmp ? tmp : "/tmp",
             (unsigned)getuid(), port);
}

/* 0: port is now ours; -1: another live process holds it. */
static int port_reserve(int port)
{
    char path[512];
    port_path(path, sizeof path, port);
    char *slash = strrchr(path, '/');
    *slash = 0;
    (void)mkdir(path, 0700);
    *slash = '/';
    for (int t = 0; t < 2; t++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            bool ok = write(fd, pid, (size_t)n) == n;
            close(fd);
            if (ok)
                return 0;
            unlink(path);
            return -1;
        }
        if (errno != EEXIST)
            return -1;
        FILE *f = fopen(path, "r");
        long owner = 0;
        if (f) {
            if (fscanf(f, "%ld", &owner) != 1)
                owner = 0;
            fclose(f);
        }
        /* a file still being written (owner 0) counts as held */
        if (owner == 0 || (kill((pid_t)owner, 0) == 0 || errno != ESRCH))
            return -1;
        unlink(path); /* its process is gone: stale */
    }
    return -1;
}

static void port_release(int port)
{
    char path[512];
    port_path(path, sizeof path, port);
    FILE *f = fopen(path, "r");
    long owner = 0;
    if (!f)
        return;
    if (fscanf(f, "%ld", &owner) != 1)
        owner = 0;
    fclose(f);
    if (owner == (long)getpid())
        unlink(path);
}

static bool port_bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* A reserved port p with p (and p + 10000 for a cluster bus) bindable now
 * (rfx_start still retries when the server cannot bind). */
static int free_port(bool need_bus)
{
    static _Atomic unsigned next;
    unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)rfx_mono_ms();
    for (int tries = 0; tries < 200; tries++) {
        unsigned k = atomic_fetch_add(&next, 1);
        int port = RFX_PORT_LO + (int)((seed + k * 7919u) % RFX_PORT_N);
        if (port_reserve(port) != 0)
            continue;
        if (port_bindable(port) && (!need_bus || port_bindable(port + 10000)))
            return port;
        port_release(port);
    }
    return -1;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? v : dflt;
}

redisContext *rfx_connect(const struct rfx_server *s)
{
    struct timeval ct = {1, 0}, rt = {10, 0};
    redisContext *c = s->sock[0] ? redisConnectUnixWithTimeout(s->sock, ct)
                                 : redisConnectWithTimeout("127.0.0.1", s->port, ct);
    if (!c)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, rt);
    if (s->opts.password) {
        redisReply *r = redisCommand(c, "AUTH %s", s->opts.password);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* 1: PONG; 0: not yet (refused, LOADING); */
static int ping(const struct rfx_server *s)
{
    redisContext *c = rfx_connect(s);
    if (!c)
        return 0;
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* fork/exec redis-server for s (port and dir set); wait for PONG.
 * 0 ready; 1 it exited (port taken?); -1 other failure. */
static int launch(struct rfx_server *s)
{
    char port[16], log[300];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    const char *argv[64];
    size_t n = 0;
    argv[n++] = env_or("RFX_REDIS_SERVER", "redis-server");
    char conf[300];
    if (s->opts.sentinel_conf) { /* the config file first, as Sentinel wants it */
        snprintf(conf, sizeof conf, "%s/sentinel.conf", s->dir);
        FILE *f = fopen(conf, "w");
        bool ok = f && fputs(s->opts.sentinel_conf, f) >= 0;
        if ((f && fclose(f) != 0) || !ok) {
            fail("write %s: %s", conf, strerror(errno));
            return -1;
        }
        argv[n++] = conf;
        argv[n++] = "--sentinel";
    }
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--dir";
    argv[n++] = s->dir;
    argv[n++] = "--logfile";
    argv[n++] = log;
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    argv[n++] = "--appendonly";
    argv[n++] = s->opts.appendonly ? "yes" : "no";
    if (s->opts.appendfsync) {
        argv[n++] = "--appendfsync";
        argv[n++] = s->opts.appendfsync;
    }
    if (s->opts.cluster) {
        argv[n++] = "--cluster-enabled";
        argv[n++] = "yes";
        argv[n++] = "--cluster-config-file";
        argv[n++] = "nodes.conf";
        argv[n++] = "--cluster-node-timeout";
        argv[n++] = "5000";
    }
    if (s->opts.unix_socket) {
        snprintf(s->sock, sizeof s->sock, "%s/redis.sock", s->dir);
        argv[n++] = "--unixsocket";
        argv[n++] = s->sock;
        argv[n++] = "--unixsocketperm";
        argv[n++] = "700";
    }
    if (s->opts.password) {
        argv[n++] = "--requirepass";
        argv[n++] = s->opts.password;
    }
    char tport[16], tcert[300], tkey[300], tca[300];
    if (s->opts.tls_dir) {
        snprintf(tport, sizeof tport, "%d", s->tls_port);
        snprintf(tcert, sizeof tcert, "%s/server.crt", s->opts.tls_dir);
        snprintf(tkey, sizeof tkey, "%s/server.key", s->opts.tls_dir);
        snprintf(tca, sizeof tca, "%s/ca.crt", s->opts.tls_dir);
        const char *t[] = {"--tls-port", tport, "--tls-cert-file", tcert, "--tls-key-file", tkey,
                           "--tls-ca-cert-file", tca, "--tls-auth-clients",
                           s->opts.tls_auth_clients ? "yes" : "no"};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            argv[n++] = t[i];
        if (s->opts.cluster) {
            argv[n++] = "--tls-cluster";
            argv[n++] = "yes";
        }
    }
    for (const char *const *e = s->opts.extra; e && *e && n < 62; e++)
        argv[n++] = *e;
    argv[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fail("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0)
        child_exec(parent, (char *const *)argv, log, s->dir);
    s->pid = pid;
    reg_set_pid(s->slot_, pid);

    uint64_t end = rfx_mono_ms() + RFX_READY_MS;
    int status;
    while (rfx_mono_ms() < end) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            s->pid = 0;
            reg_set_pid(s->slot_, 0);
            return 1;
        }
        if (ping(s))
            return 0;
        rfx_sleep_ms(10);
    }
    fail("redis-server on port %d did not answer PING within %d ms (log: %s)", s->port,
         RFX_READY_MS, log);
    kill_reap(pid, false);
    s->pid = 0;
    reg_set_pid(s->slot_, 0);
    return -1;
}

/* The last pid that wrote to a redis.log ("1234:M 23 Nov ..."), or 0. */
static pid_t log_pid(const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return 0;
    char line[512];
    long pid = 0;
    while (fgets(line, sizeof line, f)) {
        char *end;
        long v = strtol(line, &end, 10);
        if (end != line && *end == ':' && v > 0)
            pid = v;
    }
    fclose(f);
    return (pid_t)pid;
}

/* Directories left by a test process that was SIGKILLed (a CTest timeout):
 * its servers died with it (PDEATHSIG) but nobody removed their directory.
 * Remove ours that are idle for 10 minutes and whose server is gone. */
static void sweep_stale(const char *tmp)
{
    DIR *d = opendir(tmp);
    if (!d)
        return;
    struct dirent *e;
    time_t now = time(NULL);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "twheel-redis-", 13) != 0)
            continue;
        char dir[512], log[600];
        snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name);
        snprintf(log, sizeof log, "%s/redis.log", dir);
        struct stat st;
        if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
            continue;
        struct stat ls;
        time_t last = stat(log, &ls) == 0 ? ls.st_mtime : st.st_mtime;
        if (now - last < 600)
            continue;
        pid_t pid = log_pid(log);
        if (pid > 0 && (kill(pid, 0) == 0 || errno == EPERM))
            continue;
        remove_dir(dir);
    }
    closedir(d);
}

int rfx_start(struct rfx_server *s, const struct rfx_options *opts)
{
    memset(s, 0, sizeof *s);
    s->slot_ = -1;
    if (opts)
        s->opts = *opts;
    const char *tmp = env_or("TMPDIR", "/tmp");
    static atomic_flag swept = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&swept))
        sweep_stale(tmp);
    snprintf(s->dir, sizeof s->dir, "%s/twheel-redis-XXXXXX", tmp);
    if (!mkdtemp(s->dir)) {
        fail("mkdtemp %s: %s", s->dir, strerror(errno));
        s->dir[0] = 0;
        return -1;
    }
    s->slot_ = reg_add(0, s->dir);
    if (s->slot_ < 0) {
        remove_dir(s->dir);
        return -1;
    }
    for (int t = 0; t < RFX_START_TRIES; t++) {
        s->port = free_port(s->opts.cluster);
        if (s->port < 0)
            break;
        snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", s->port);
        if (s->opts.tls_dir) {
            do /* its own port, and its own bus port in a cluster (tls-cluster) */
                s->tls_port = free_port(s->opts.cluster);
            while (s->tls_port == s->port);
            if (s->tls_port < 0)
                break;
            snprintf(s->tls_addr, sizeof s->tls_addr, "127.0.0.1:%d", s->tls_port);
        }
        int rc = launch(s);
        if (rc == 0)
            return 0;
        if (rc < 0)
            break;
        /* exited: most likely the port was taken in between; try another */
        char log[300];
        snprintf(log, sizeof log, "%s/redis.log", s->dir);
        unlink(log);
    }
    fail("could not start redis-server in %s", s->dir);
    remove_dir(s->dir);
    reg_drop(s->slot_);
    s->slot_ = -1;
    s->dir[0] = 0;
    return -1;
}

int rfx_kill(struct rfx_server *s)
{
    if (s->pid > 0) {
        kill_reap(s->pid, false);
        s->pid = 0;
        reg_set_pid(s->slot_, 0);
    }
    return 0;
}

int rfx_restart(struct rfx_server *s)
{
    if (!s->dir[0] || s->port <= 0) {
        fail("restart of a server that was never started");
        return -1;
    }
    rfx_kill(s);
    /* Same port: it may stay taken for a moment (another process, or the
     * cluster bus); retry briefly. */
    for (int t = 0; t < 50; t++) {
        int rc = launch(s);
        if (rc == 0)
            return 0;
        if (rc < 0)
            return -1;
        rfx_sleep_ms(100);
    }
    fail("could not restart redis-server on port %d", s->port);
    return -1;
}

int rfx_stop(struct rfx_server *s)
{
    if (s->pid > 0)
        kill_reap(s->pid, true);
    s->pid = 0;
    if (s->port > 0)
        port_release(s->port);
    remove_dir(s->dir);
    s->dir[0] = 0;
    reg_drop(s->slot_);
    s->slot_ = -1;
    return 0;
}

const char *rfx_addr(const struct rfx_server *s)
{
    return s->addr;
}

/* rfx_url and rfx_tls_url: mode 0 TCP, 1 the unix socket, 2 TLS. */
static const char *url_of(const struct rfx_server *s, int mode, char *buf, size_t len)
{
    char pass[3 * 256 + 1] = "";
    const char *p = s->opts.password ? s->opts.password : "";
    size_t k = 0;
    for (; *p && k + 4 < sizeof pass; p++) { /* all but unreserved characters escaped */
        unsigned char c = (unsigned char)*p;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~')
            pass[k++] = (char)c;
        else
            k += (size_t)snprintf(pass + k, 4, "%%%02X", c);
    }
    pass[k] = 0;
    bool auth = s->opts.password != NULL;
    int n;
    if (mode == 1)
        n = snprintf(buf, len, "unix://%s%s%s%s", auth ? ":" : "", pass, auth ? "@" : "", s->sock);
    else if (mode == 2)
        n = snprintf(buf, len, "rediss://%s%s%s%s", auth ? ":" : "", pass, auth ? "@" : "",
                     s->tls_addr);
    else if (auth)
        n = snprintf(buf, len, "redis://:%s@%s", pass, s->addr);
    else
        n = snprintf(buf, len, "%s", s->addr);
    if (n < 0 || (size_t)n >= len) {
        if (len)
            buf[0] = 0;
        fail("rfx_url: %zu bytes are too few", len);
    }
    return buf;
}

const char *rfx_url(const struct rfx_server *s, bool via_unix, char *buf, size_t len)
{
    return url_of(s, via_unix ? 1 : 0, buf, len);
}

const char *rfx_tls_url(const struct rfx_server *s, char *buf, size_t len)
{
    return url_of(s, 2, buf, len);
}

static redisReply *vcmd(const struct rfx_server *s, const char *fmt, va_list ap)
{
    redisContext *c = rfx_connect(s);
    if (!c) {
        fail("connect to %s failed", s->addr);
        return NULL;
    }
    redisReply *r = redisvCommand(c, fmt, ap);
    if (!r)
        fail("%s: %s", s->addr, c->errstr);
    redisFree(c);
    return r;
}

static redisReply *cmd(const struct rfx_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    return r;
}

int rfx_command(const struct rfx_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    if (!r)
        return -1;
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR) {
        fail("%s: %s: %s", s->addr, fmt, r->str);
        rc = -1;
    }
    freeReplyObject(r);
    return rc;
}

int rfx_info_double(const struct rfx_server *s, const char *field, double *out)
{
    redisReply *r = cmd(s, "INFO everything");
    if (!r)
        return -1;
    int rc = -1;
    if (r->type == REDIS_REPLY_STRING) {
        size_t fl = strlen(field);
        for (const char *p = r->str; p && *p;) {
            if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
                *out = strtod(p + fl + 1, NULL);
                rc = 0;
                break;
            }
            p = strchr(p, '\n');
            if (p)
                p++;
        }
    }
    if (rc)
        fail("%s: INFO has no field %s", s->addr, field);
    freeReplyObject(r);
    return rc;
}

int rfx_time_us(const struct rfx_server *s, uint64_t *out)
{
    redisReply *r = cmd(s, "TIME");
    if (!r)
        return -1;
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING) {
        *out = strtoull(r->element[0]->str, NULL, 10) * 1000000u +
               strtoull(r->element[1]->str, NULL, 10);
        rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

int rfx_dbsize(const struct rfx_server *s, uint64_t *out)
{
    redisReply *r = cmd(s, "DBSIZE");
    if (!r)
        return -1;
    int rc = r->type == REDIS_REPLY_INTEGER ? 0 : -1;
    if (!rc)
        *out = (uint64_t)r->integer;
    freeReplyObject(r);
    return rc;
}

/* ---- cluster ----------------------------------------------------------- */
static uint16_t crc16(const unsigned char *p, size_t n)
{
    uint16_t crc = 0; /* XMODEM: poly 0x1021, init 0 */
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned rfx_key_slot(const void *key, size_t len)
{
    const unsigned char *k = key;
    size_t s, e;
    for (s = 0; s < len && k[s] != '{'; s++) {
    }
    if (s < len) {
        for (e = s + 1; e < len && k[e] != '}'; e++) {
        }
        if (e < len && e != s + 1)
            return crc16(k + s + 1, e - s - 1) & 16383u;
    }
    return crc16(k, len) & 16383u;
}

static int cluster_ready(const struct rfx_cluster *c)
{
    for (size_t i = 0; i < c->n; i++) {
        redisReply *r = cmd(&c->node[i], "CLUSTER INFO");
        if (!r)
            return 0;
        int ok = r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
                 strstr(r->str, "cluster_slots_assigned:16384");
        char want[64];
        snprintf(want, sizeof want, "cluster_known_nodes:%zu", c->n);
        ok = ok && strstr(r->str, want);
        freeReplyObject(r);
        if (!ok)
            return 0;
        /* every node's slot map shows all masters */
        r = cmd(&c->node[i], "CLUSTER SLOTS");
        if (!r)
            return 0;
        ok = r->type == REDIS_REPLY_ARRAY && r->elements >= c->n;
        freeReplyObject(r);
        if (!ok)
            return 0;
    }
    return 1;
}

int rfx_cluster_start(struct rfx_cluster *c, size_t n)
{
    return rfx_cluster_start_opts(c, n, NULL);
}

int rfx_cluster_start_opts(struct rfx_cluster *c, size_t n, const struct rfx_options *opts)
{
    memset(c, 0, sizeof *c);
    if (n < 3 || n > RFX_CLUSTER_MAX) {
        fail("cluster of %zu nodes: 3..%d", n, RFX_CLUSTER_MAX);
        return -1;
    }
    struct rfx_options o = {0};
    if (opts)
        o = *opts;
    o.cluster = true;
    for (size_t i = 0; i < n; i++) {
        if (rfx_start(&c->node[i], &o) != 0) {
            rfx_cluster_stop(c);
            return -1;
        }
        c->n = i + 1;
        c->addrs[i] = c->node[i].addr;
        c->tls_addrs[i] = c->node[i].tls_addr;
    }
    /* redis-cli --cluster create A B C --cluster-replicas 0 --cluster-yes; with
     * tls-cluster the nodes meet on their TLS ports (the bus is TLS_PORT + 10000) */
    char *argv[RFX_CLUSTER_MAX + 20];
    char cacert[300], cert[300], key[300];
    size_t k = 0;
    argv[k++] = (char *)env_or("RFX_REDIS_CLI", "redis-cli");
    if (o.password) {
        argv[k++] = "-a";
        argv[k++] = (char *)o.password;
    }
    if (o.tls_dir) {
        snprintf(cacert, sizeof cacert, "%s/ca.crt", o.tls_dir);
        snprintf(cert, sizeof cert, "%s/client.crt", o.tls_dir);
        snprintf(key, sizeof key, "%s/client.key", o.tls_dir);
        char *t[] = {"--tls", "--cacert", cacert, "--cert", cert, "--key", key};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
            argv[k++] = t[i];
    }
    argv[k++] = "--cluster";
    argv[k++] = "create";
    for (size_t i = 0; i < n; i++)
        argv[k++] = o.tls_dir ? c->node[i].tls_addr : c->node[i].addr;
    argv[k++] = "--cluster-replicas";
    argv[k++] = "0";
    argv[k++] = "--cluster-yes";
    argv[k] = NULL;
    char log[300];
    snprintf(log, sizeof log, "%s/cluster-create.log", c->node[0].dir);
    pid_t pid;
    int status = 0;
    if (rfx_spawn(&pid, argv, log) != 0)
        goto fail;
    if (rfx_wait(pid, 60000, &status) != 0) {
        rfx_reap(pid);
        fail("redis-cli --cluster create did not finish within 60 s (log: %s)", log);
        goto fail;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail("redis-cli --cluster create failed (status %d, log: %s)", status, log);
        goto fail;
    }
    uint64_t end = rfx_mono_ms() + 30000;
    while (!cluster_ready(c)) {
        if (rfx_mono_ms() > end) {
            fail("cluster not ok on every node after 30 s");
            goto fail;
        }
        rfx_sleep_ms(50);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = cmd(&c->node[i], "CLUSTER MYID");
        if (!r || r->type != REDIS_REPLY_STRING) {
            if (r)
                freeReplyObject(r);
            fail("CLUSTER MYID failed on %s", c->node[i].addr);
            goto fail;
        }
        snprintf(c->id[i], sizeof c->id[i], "%s", r->str);
        freeReplyObject(r);
    }
    return 0;
fail:
    rfx_cluster_stop(c);
    return -1;
}

int rfx_cluster_stop(struct rfx_cluster *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->node[i].slot_ >= 0 || c->node[i].pid > 0)
            rfx_stop(&c->node[i]);
    c->n = 0;
    return 0;
}

int rfx_cluster_owner(const struct rfx_cluster *c, unsigned slot)
{
    if (c->n == 0)
        return -1;
    redisReply *r = cmd(&c->node[0], "CLUSTER SLOTS");
    if (!r)
        return -1;
    int owner = -1;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && owner < 0; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
            continue;
        if (slot < (unsigned)e->element[0]->integer || slot > (unsigned)e->element[1]->integer)
            continue;
        redisReply *m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2)
            continue;
        int port = (int)m->element[1]->integer;
        for (size_t j = 0; j < c->n; j++)
            if (c->node[j].port == port)
                owner = (int)j;
    }
    freeReplyObject(r);
    return owner;
}

int rfx_cluster_busy_slot(const struct rfx_cluster *c, size_t from)
{
    if (from >= c->n)
        return -1;
    redisContext *ctx = rfx_connect(&c->node[from]);
    if (!ctx)
        return -1;
    int slot = -1;
    for (int t = 0; t < 64 && slot < 0; t++) {
        redisReply *r = redisCommand(ctx, "RANDOMKEY");
        if (!r)
            break;
        if (r->type == REDIS_REPLY_STRING) {
            unsigned s = rfx_key_slot(r->str, r->len);
            if (rfx_cluster_owner(c, s) == (int)from)
                slot = (int)s;
        } else if (r->type == REDIS_REPLY_NIL) {
            freeReplyObject(r);
            break;
        }
        freeReplyObject(r);
    }
    redisFree(ctx);
    return slot;
}

static int setslot(const struct rfx_server *s, unsigned slot, const char *what, const char *id)
{
    return rfx_command(s, "CLUSTER SETSLOT %u %s %s", slot, what, id);
}

int rfx_cluster_migrate_slot(struct rfx_cluster *c, unsigned slot, size_t to)
{
    if (slot > 16383 || to >= c->n) {
        fail("migrate: bad slot %u or node %zu", slot, to);
        return -1;
    }
    int from = rfx_cluster_owner(c, slot);
    if (from < 0) {
        fail("migrate: no owner for slot %u", slot);
        return -1;
    }
    if ((size_t)from == to)
        return 0;
    struct rfx_server *src = &c->node[from], *dst = &c->node[to];
    if (setslot(dst, slot, "IMPORTING", c->id[from]) || setslot(src, slot, "MIGRATING", c->id[to]))
        return -1;
    redisContext *ctx = rfx_connect(src);
    if (!ctx)
        return -1;
    int rc = 0;
    for (int rounds = 0; rounds < 100000; rounds++) {
        redisReply *r = redisCommand(ctx, "CLUSTER GETKEYSINSLOT %u 100", slot);
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            fail("GETKEYSINSLOT failed on %s", src->addr);
            if (r)
                freeReplyObject(r);
            rc = -1;
            break;
        }
        if (r->elements == 0) {
            freeReplyObject(r);
            break;
        }
        /* MIGRATE host port "" 0 timeout REPLACE KEYS k1 k2 ... */
        size_t argc = 8 + r->elements;
        const char **argv = calloc(argc, sizeof *argv);
        size_t *lens = calloc(argc, sizeof *lens);
        if (!argv || !lens) {
            free(argv);
            free(lens);
            freeReplyObject(r);
            rc = -1;
            break;
        }
        char port[16];
        snprintf(port, sizeof port, "%d", dst->port);
        const char *fixed[] = {"MIGRATE", "127.0.0.1", port, "", "0", "10000", "REPLACE", "KEYS"};
        for (size_t i = 0; i < 8; i++) {
            argv[i] = fixed[i];
            lens[i] = strlen(fixed[i]);
        }
        for (size_t i = 0; i < r->elements; i++) {
            argv[8 + i] = r->element[i]->str;
            lens[8 + i] = r->element[i]->len;
        }
        redisReply *m = redisCommandArgv(ctx, (int)argc, argv, lens);
        free(argv);
        free(lens);
        freeReplyObject(r);
        if (!m || m->type == REDIS_REPLY_ERROR) {
            fail("MIGRATE slot %u %s -> %s: %s", slot, src->addr, dst->addr,
                 m ? m->str : ctx->errstr);
            if (m)
                freeReplyObject(m);
            rc = -1;
            break;
        }
        freeReplyObject(m);
    }
    redisFree(ctx);
    if (rc)
        return -1;
    /* target first, then source, then the others */
    if (setslot(dst, slot, "NODE", c->id[to]) || setslot(src, slot, "NODE", c->id[to]))
        return -1;
    for (size_t i = 0; i < c->n; i++)
        if (i != to && (int)i != from && setslot(&c->node[i], slot, "NODE", c->id[to]))
            return -1;
    return 0;
}
