/* SPDX-License-Identifier: MIT */
/* How much of a test's lateness the machine explains.
 *
 * A test that bounds a lateness judges the library; on a busy machine its
 * threads (and the servers it talks to) wait for a CPU, and a task can be
 * late by that wait without the library doing anything wrong. This meter,
 * started before the timed part and stopped after it, measures in the same
 * run:
 *
 *   rq_self_ms   the longest time one thread of this process (the library's
 *                executors, claim and subscriber threads among them) sat
 *                runnable in a run queue, from /proc/self/task/N/schedstat;
 *   rq_peer_ms   the same for the other processes named (redis-server), the
 *                longest of them;
 *   sleeper_ms   the worst oversleep of a control thread that asks for 1 ms
 *                naps: what a wake-up costs on this machine now;
 *   load, steal  the 1-minute load average, and the % of CPU time a
 *                hypervisor gave to someone else;
 *   foreign_pct  the % of all CPU time that went to processes other than
 *                this one and the peers (other work on the machine).
 *
 * explained_ms = max(sleeper_ms, rq_self_ms + rq_peer_ms): had the machine
 * run every thread whenever it was runnable, a task that went through one of
 * our threads and one peer could have been at most that much earlier. A test
 * fails a lateness bound only by what exceeds bound + explained_ms, and
 * prints the figures either way.
 *
 * Linux only: where /proc lacks schedstat, the run-queue figures are 0 and
 * the sleeper alone explains. Header-only, for tests.
 */
#ifndef TWHEEL_TEST_MACHINE_STALL_H
#define TWHEEL_TEST_MACHINE_STALL_H

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MSTALL_MAX_THREADS 512
#define MSTALL_MAX_PEERS 16

struct mstall_thread_wait {
    long tid;
    uint64_t wait_ns;
};

struct mstall {
    /* set by mstall_start */
    pid_t peer[MSTALL_MAX_PEERS];
    int npeers;
    uint64_t peer_wait0[MSTALL_MAX_PEERS], peer_cpu0[MSTALL_MAX_PEERS];
    struct mstall_thread_wait self0[MSTALL_MAX_THREADS];
    int nself0;
    unsigned long long cpu_total0, cpu_idle0, cpu_steal0, self_cpu0;
    pthread_t sleeper;
    int sleeper_on;
    atomic_int stop;
    atomic_uint_fast64_t sleeper_worst_ns;
    /* results, set by mstall_stop */
    double rq_self_ms, rq_peer_ms, sleeper_ms, load, steal_pct, foreign_pct, explained_ms;
};

static inline uint64_t mstall_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The run-queue wait (ns) in a schedstat file: its second field. */
static inline int mstall_read_wait(const char *path, uint64_t *wait_ns)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    unsigned long long run = 0, wait = 0;
    int n = fscanf(f, "%llu %llu", &run, &wait);
    fclose(f);
    if (n != 2)
        return -1;
    *wait_ns = wait;
    return 0;
}

/* utime + stime (clock ticks) of a process, from /proc/PID/stat. */
static inline unsigned long long mstall_proc_cpu(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (!p)
        return 0;
    unsigned long long utime = 0, stime = 0;
    /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
               &stime) != 2)
        return 0;
    return utime + stime;
}

static inline void mstall_cpu_line(unsigned long long *total, unsigned long long *idle,
                                   unsigned long long *steal)
{
    unsigned long long v[8] = {0};
    *total = *idle = *steal = 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    for (int i = 0; i < n; i++)
        *total += v[i];
    *idle = (n >= 4 ? v[3] : 0) + (n >= 5 ? v[4] : 0); /* idle + iowait */
    *steal = n >= 8 ? v[7] : 0;
}

/* Every thread of this process and its run-queue wait so far. */
static inline int mstall_self_waits(struct mstall_thread_wait *out, int max)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%.255s/schedstat", e->d_name);
        uint64_t w;
        if (mstall_read_wait(path, &w) == 0) {
            out[n].tid = strtol(e->d_name, NULL, 10);
            out[n].wait_ns = w;
            n++;
        }
    }
    closedir(d);
    return n;
}

static inline void *mstall_sleeper_main(void *arg)
{
    struct mstall *m = arg;
    while (!atomic_load(&m->stop)) {
        uint64_t t = mstall_now_ns();
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
        uint64_t over = mstall_now_ns() - t;
        over = over > 1000000u ? over - 1000000u : 0;
        if (over > atomic_load(&m->sleeper_worst_ns))
            atomic_store(&m->sleeper_worst_ns, over);
    }
    return NULL;
}

/* Start measuring; peers: the other processes the timed work goes through. */
static inline void mstall_start(struct mstall *m, const pid_t *peers, int npeers)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < npeers && m->npeers < MSTALL_MAX_PEERS; i++) {
        if (peers[i] <= 0)
            continue;
        int k = m->npeers++;
        char path[64];
        m->peer[k] = peers[i];
        snprintf(path, sizeof path, "/proc/%ld/schedstat", (long)peers[i]);
        if (mstall_read_wait(path, &m->peer_wait0[k]) != 0)
            m->peer_wait0[k] = 0;
        m->peer_cpu0[k] = mstall_proc_cpu(peers[i]);
    }
    mstall_cpu_line(&m->cpu_total0, &m->cpu_idle0, &m->cpu_steal0);
    m->self_cpu0 = mstall_proc_cpu(getpid());
    atomic_init(&m->stop, 0);
    atomic_init(&m->sleeper_worst_ns, 0);
    m->sleeper_on = pthread_create(&m->sleeper, NULL, mstall_sleeper_main, m) == 0;
    m->nself0 = mstall_self_waits(m->self0, MSTALL_MAX_THREADS);
}

/* Stop measuring and fill in the results. */
static inline void mstall_stop(struct mstall *m)
{
    static struct mstall_thread_wait now[MSTALL_MAX_THREADS]; /* tests: one meter at a time */
    int n = mstall_self_waits(now, MSTALL_MAX_THREADS);
    if (m->sleeper_on) {
        atomic_store(&m->stop, 1);
        pthread_join(m->sleeper, NULL);
    }
    uint64_t worst = 0;
    for (int i = 0; i < n; i++) {
        uint64_t before = 0;
        for (int j = 0; j < m->nself0; j++)
            if (m->self0[j].tid == now[i].tid)
                before = m->self0[j].wait_ns;
        uint64_t d = now[i].wait_ns > before ? now[i].wait_ns - before : 0;
        if (d > worst)
            worst = d;
    }
    m->rq_self_ms = (double)worst / 1e6;
    uint64_t peer_worst = 0;
    unsigned long long peers_cpu = 0;
    for (int k = 0; k < m->npeers; k++) {
        char path[64];
        uint64_t w;
        snprintf(path, sizeof path, "/proc/%ld/schedstat", (long)m->peer[k]);
        if (mstall_read_wait(path, &w) == 0 && w > m->peer_wait0[k] &&
            w - m->peer_wait0[k] > peer_worst)
            peer_worst = w - m->peer_wait0[k];
        unsigned long long c = mstall_proc_cpu(m->peer[k]);
        peers_cpu += c > m->peer_cpu0[k] ? c - m->peer_cpu0[k] : 0;
    }
    m->rq_peer_ms = (double)peer_worst / 1e6;
    m->sleeper_ms = (double)atomic_load(&m->sleeper_worst_ns) / 1e6;
    unsigned long long total, idle, steal;
    mstall_cpu_line(&total, &idle, &steal);
    unsigned long long self_cpu = mstall_proc_cpu(getpid());
    self_cpu = self_cpu > m->self_cpu0 ? self_cpu - m->self_cpu0 : 0;
    m->steal_pct = m->foreign_pct = 0;
    if (total > m->cpu_total0) {
        double all = (double)(total - m->cpu_total0);
        double busy = all - (double)(idle - m->cpu_idle0) - (double)(steal - m->cpu_steal0);
        double foreign = busy - (double)self_cpu - (double)peers_cpu;
        m->steal_pct = 100.0 * (double)(steal - m->cpu_steal0) / all;
        m->foreign_pct = foreign > 0 ? 100.0 * foreign / all : 0;
    }
    m->load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &m->load) != 1)
            m->load = -1;
        fclose(f);
    }
    double rq = m->rq_self_ms + m->rq_peer_ms;
    m->explained_ms = rq > m->sleeper_ms ? rq : m->sleeper_ms;
}

/* One line with every figure, for the test's output. */
static inline void mstall_print(const struct mstall *m, const char *what)
{
    printf("machine during %s: explains %.0f ms (run-queue wait: this process's worst thread "
           "%.0f ms, peers' worst %.0f ms; a 1 ms sleeper's worst oversleep %.1f ms), load %.2f, "
           "steal %.1f%%, other work %.0f%% of the CPUs\n",
           what, m->explained_ms, m->rq_self_ms, m->rq_peer_ms, m->sleeper_ms, m->load,
           m->steal_pct, m->foreign_pct);
}

#endif
