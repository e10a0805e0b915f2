/* SPDX-License-Identifier: MIT */
/* redis_scene: the Redis layer's demonstration (scripts/redis-scene).
 *
 * Starts redis-server (appendonly yes, appendfsync always) and three
 * redis_worker processes sharing one queue, schedules tasks, then, mid-run,
 * SIGKILLs a worker, SIGKILLs redis-server and restarts it on the same port
 * and directory, and starts a replacement worker. Then it waits until every
 * acknowledged task was delivered and prints a verdict: all delivered, none
 * early, lateness p50/p99/max (of all tasks, and of those not due while Redis
 * was down), redeliveries. Exit status 0 when the verdict is good.
 *
 * The scene also keeps a recurring schedule (every second, missed runs all
 * run) through the kills, and a task the workers always fail
 * (--fail-prefix), which ends in the dead letters after 3 attempts.
 *
 * Timeline (s): 0-2 N tasks set in pipelined batches, due 0.5-8 s later;
 * 2-9 one task set every 2 ms (each acknowledged or refused on its own);
 * 3 SIGKILL worker 1; 4 SIGKILL redis-server; 6 restart it; 6.5 a new
 * worker. Leases 3 s, windows 1 s.
 *
 * Usage: redis_scene WORKER [--n N] [--quick] [--auth] [--unix | --tls]
 *   N = 5000; --quick: 3000, half the timeline. --auth: redis-server wants a
 *   password (one with an @, percent-encoded in the URL); --unix: the client
 *   and the workers connect through its unix domain socket; --tls: through
 *   its TLS port (rediss://, certificates made at run time, the CA given as
 *   tls_ca_file). Either way they are given one entry in the layer's syntax
 *   (redis.h, "Connecting"), and every reconnect after the kill
 *   authenticates (and with --tls, does its handshake) again.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "harness.h"
#include "machine_stall.h"
#include "redis/url.h" /* tw_rr_url_redact: the URL printed without its password */
#include "twheel/redis.h"

#define LEASE_MS 3000
#define WINDOW_MS 1000
#define MAXW 4

static uint64_t now_ms(void)
{
    return rfx_realtime_us() / 1000u;
}

struct scene_dead {
    unsigned attempt;
    char err[64];
};

static void scene_dead_one(void *arg, const struct tw_redis_dead *d)
{
    struct scene_dead *s = arg;
    s->attempt = d->attempt;
    snprintf(s->err, sizeof s->err, "%.*s", (int)d->error_len, d->error);
}

/* The schedule's occurrences in the delivery files: each period from the
 * anchor to 2 s before its removal delivered, none before its time. */
static void scene_ticks(char out[][300], int nw, uint64_t anchor, uint64_t end, uint64_t *periods,
                        uint64_t *missing, uint64_t *early)
{
    size_t np = end > anchor + 2000 ? (size_t)((end - anchor - 2000) / 1000 + 1) : 0;
    bool *seen = calloc(np ? np : 1, 1);
    for (int w = 0; w < nw && seen; w++) {
        FILE *f = fopen(out[w], "r");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            unsigned long long t, due, st;
            unsigned att;
            if (sscanf(line, "tick@%llu %u %llu %llu", &t, &att, &due, &st) != 4)
                continue;
            *early += st < due * 1000u;
            if (t >= anchor && (t - anchor) % 1000 == 0 && (t - anchor) / 1000 < np)
                seen[(t - anchor) / 1000] = true;
        }
        if (f)
            fclose(f);
    }
    *periods = np;
    for (size_t i = 0; i < np && seen; i++)
        *missing += !seen[i];
    free(seen);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: redis_scene WORKER [--n N] [--quick] [--auth] [--unix | --tls]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rfx_cleanup_on_signals();
    /* the client writes on this thread to a server the scene kills: EPIPE,
     * not death (redis.h; a unix socket gives it at the first write) */
    signal(SIGPIPE, SIG_IGN);
    const char *worker = argv[1];
    uint64_t n = 5000;
    double scale = 1.0; /* timeline scale */
    bool auth = false, via_unix = false, tls = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--auth")) {
            auth = true;
        } else if (!strcmp(argv[i], "--unix")) {
            via_unix = true;
        } else if (!strcmp(argv[i], "--tls")) {
            tls = true;
        } else if (!strcmp(argv[i], "--quick")) {
            n = 3000;
            scale = 0.5;
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            n = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "redis_scene: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (n < 100)
        n = 100;
    if (tls && via_unix) {
        fprintf(stderr, "redis_scene: --tls or --unix (Redis serves no TLS on its socket)\n");
        return 2;
    }
    const uint64_t set_ms = (uint64_t)(2000 * scale), single_until = (uint64_t)(9000 * scale);
    const uint64_t kill_w = (uint64_t)(3000 * scale), kill_r = (uint64_t)(4000 * scale);
    const uint64_t restart_r = (uint64_t)(6000 * scale), new_w = (uint64_t)(6500 * scale);
    const uint64_t cap = n + 100000; /* ids: batch tasks, then single sets */

    struct rfx_server srv;
    struct rfx_options so = {.appendonly = true, .appendfsync = "always",
                             .unix_socket = via_unix, .password = auth ? "scene@secret" : NULL};
    struct rfx_tls certs;
    char ca[300] = "";
    if (tls) {
        if (rfx_tls_make(&certs))
            return 1;
        rfx_tls_path(&certs, "ca.crt", ca, sizeof ca);
        so.tls_dir = certs.dir;
    }
    if (rfx_start(&srv, &so))
        return 1;
    printf("scene: redis-server %s (appendonly yes, appendfsync always) in %s\n", rfx_addr(&srv),
           srv.dir);
    char url[512], shown[512];
    if (tls)
        rfx_tls_url(&srv, url, sizeof url);
    else
        rfx_url(&srv, via_unix, url, sizeof url);
    tw_rr_url_redact(url, shown, sizeof shown);
    printf("scene: the client and the workers connect to %s\n", shown);
    char out[MAXW][300];
    pid_t pid[MAXW] = {0};
    int nw = 0;
    for (; nw < 3; nw++) {
        snprintf(out[nw], sizeof out[nw], "%s/deliveries.%d", srv.dir, nw);
        struct rw_opts o = {.servers = url, .queue = "scene", .out = out[nw], .threads = 2,
                            .lease_ms = LEASE_MS, .window_ms = WINDOW_MS,
                            .fail_prefix = "poison:", .tls_ca = tls ? ca : NULL};
        if (rw_spawn(worker, &o, &pid[nw], NULL))
            return 1;
    }
    printf("scene: 3 workers (pids %d %d %d), leases %d ms, windows %d ms\n", (int)pid[0],
           (int)pid[1], (int)pid[2], LEASE_MS, WINDOW_MS);

    const char *servers[] = {url};
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.queue = "scene";
    cfg.tls_ca_file = tls ? ca : NULL;
    cfg.connect_timeout_ms = 200;
    cfg.command_timeout_ms = 300;
    char err[256] = "";
    cfg.errbuf = err;
    cfg.errbuf_len = sizeof err;
    struct tw_redis *client = NULL;
    int rc = tw_redis_new(&client, &cfg);
    uint64_t *due_lo = calloc(cap, sizeof *due_lo);
    bool *acked = calloc(cap, sizeof *acked);
    int64_t *delays = malloc(n * sizeof *delays);
    if (rc || !due_lo || !acked || !delays) {
        fprintf(stderr, "scene: setup failed (%s: %s)\n", tw_strerror(rc), err);
        return 1;
    }
    /* a schedule through the kills, and a task that ends in the dead letters */
    uint64_t anchor = now_ms() + 1000, sched_end = 0;
    struct tw_redis_schedule tick = {.every_ms = 1000, .anchor_ms = anchor,
                                     .missed = TW_REDIS_MISSED_ALL};
    struct tw_redis_set_opts three = {.max_attempts = 3};
    if (tw_redis_schedule_set(client, "tick", 4, "", 0, &tick, NULL) ||
        tw_redis_set_opts(client, "poison:1", 8, "bad", 3, 500, &three)) {
        fprintf(stderr, "scene: schedule or poison task refused\n");
        return 1;
    }
    printf("scene: a schedule every 1000 ms (tick), a task the workers fail (poison:1, "
           "max_attempts 3)\n");
    srand(3);
    for (uint64_t i = 0; i < n; i++)
        delays[i] = 500 + rand() % 7500;

    /* the machine's own stall, printed beside the lateness (machine_stall.h) */
    pid_t peers[MAXW + 1];
    int npeers = 0;
    peers[npeers++] = srv.pid;
    for (int w = 0; w < nw; w++)
        peers[npeers++] = pid[w];
    struct mstall machine;
    mstall_start(&machine, peers, npeers);
    uint64_t start = rfx_mono_ms(), kill_ms = 0, restart_ms = 0, wkill_ms = 0, id = 0;
    uint64_t ok = 0, refused = 0;
    bool wk = false, rk = false, rr = false, wn = false;
    uint64_t wk_el = 0, rk_el = 0, rr_el = 0; /* events keep their spacing if sets run slow */
    pid_t victim = pid[1];
    while ((rfx_mono_ms() - start < single_until || !wn) && id < cap) {
        uint64_t el = rfx_mono_ms() - start;
        if (!wk && el >= kill_w) {
            wkill_ms = now_ms();
            rfx_signal(victim, SIGKILL);
            rfx_wait(victim, 5000, NULL);
            pid[1] = 0;
            wk = true;
            wk_el = el;
            printf("scene: %5.2f s  SIGKILL worker %d\n", el / 1000.0, (int)victim);
        }
        if (wk && !rk && el >= kill_r && el >= wk_el + (kill_r - kill_w)) {
            rk_el = el;
            kill_ms = now_ms();
            rfx_kill(&srv);
            rk = true;
            printf("scene: %5.2f s  SIGKILL redis-server\n", el / 1000.0);
        }
        if (rk && !rr && el >= restart_r && el >= rk_el + (restart_r - kill_r)) {
            rr_el = el;
            restart_ms = now_ms();
            if (rfx_restart(&srv)) {
                fprintf(stderr, "scene: restart failed\n");
                return 1;
            }
            rr = true;
            printf("scene: %5.2f s  redis-server restarted on the same port (AOF reloaded, "
                   "%.2f s to answer)\n",
                   el / 1000.0, (now_ms() - restart_ms) / 1000.0);
        }
        if (rr && !wn && el >= new_w && el >= rr_el + (new_w - restart_r)) {
            snprintf(out[nw], sizeof out[nw], "%s/deliveries.%d", srv.dir, nw);
            struct rw_opts o = {.servers = url, .queue = "scene", .out = out[nw], .threads = 2,
                                .lease_ms = LEASE_MS, .window_ms = WINDOW_MS,
                                .fail_prefix = "poison:", .tls_ca = tls ? ca : NULL};
            if (rw_spawn(worker, &o, &pid[nw], NULL))
                return 1;
            printf("scene: %5.2f s  a new worker %d\n", el / 1000.0, (int)pid[nw]);
            nw++;
            wn = true;
        }
        if (id < n) { /* the batch phase */
            size_t k = n - id < 500 ? (size_t)(n - id) : 500;
            uint64_t t0 = now_ms();
            int r = rw_set_range(client, NULL, "t:", id, k, delays + id, NULL);
            for (size_t j = 0; j < k; j++) {
                due_lo[id + j] = t0 + (uint64_t)delays[id + j];
                acked[id + j] = r == (int)k;
            }
            ok += r == (int)k ? k : 0;
            refused += r == (int)k ? 0 : k;
            id += k;
            uint64_t target = start + id * set_ms / n, now = rfx_mono_ms();
            if (now < target)
                rfx_sleep_ms((unsigned)(target - now));
            continue;
        }
        char key[32];
        int kl = snprintf(key, sizeof key, "t:%" PRIu64, id);
        int64_t delay = 200 + rand() % 2000;
        uint64_t t0 = now_ms();
        int r = tw_redis_set(client, key, (size_t)kl, "0123456789abcdef0123456789abcdef", 32,
                             delay);
        due_lo[id] = t0 + (uint64_t)delay;
        acked[id] = r == 0;
        if (r == 0)
            ok++;
        else
            refused++;
        id++;
        rfx_sleep_ms(2);
    }
    printf("scene: %" PRIu64 " sets acknowledged, %" PRIu64
           " refused with TW_EIO while Redis was down\n", ok, refused);
    struct tw_redis_counts qc; /* what an operator sees: twheel-redis stats */
    if (tw_redis_counts(client, 1000, &qc) == 0)
        printf("scene: the queue then: %" PRIu64 " waiting, %" PRIu64 " held, %" PRIu64
               " running, %" PRIu64 " due within 1 s, lag %" PRIu64 " ms\n",
               qc.waiting, qc.held, qc.running, qc.due_within, qc.lag_ms);

    struct rdel_set d = {0};
    struct rverdict v;
    uint64_t deadline = rfx_mono_ms() + 40000;
    for (;;) {
        rdel_free(&d);
        for (int w = 0; w < nw; w++)
            rdel_load(&d, out[w], "t:", id);
        if ((rverdict_compute(&d, id, acked, NULL, LEASE_MS, WINDOW_MS, &v) == 0 &&
             v.missing == 0) ||
            rfx_mono_ms() > deadline)
            break;
        rfx_sleep_ms(200);
    }
    sched_end = now_ms();
    tw_redis_schedule_remove(client, "tick", 4); /* its last occurrences still run */
    struct tw_redis_stats st = rw_wait_drained(client, deadline);
    uint64_t ndead = 0;
    while (tw_redis_dead_count(client, &ndead) == 0 && ndead < 1 && rfx_mono_ms() < deadline)
        rfx_sleep_ms(100);
    uint64_t all_done = rfx_mono_ms() - start;
    mstall_stop(&machine);
    for (int w = 0; w < nw; w++)
        if (pid[w] > 0)
            rw_stop(pid[w], 10000);
    rdel_free(&d);
    for (int w = 0; w < nw; w++)
        rdel_load(&d, out[w], "t:", id);
    rverdict_compute(&d, id, acked, due_lo, LEASE_MS, WINDOW_MS, &v);

    /* lateness of tasks due while every part was up */
    bool *calm = calloc(id ? id : 1, sizeof *calm);
    struct rverdict vc = v;
    if (calm) {
        for (uint64_t i = 0; i < id; i++)
            calm[i] = acked[i] && (due_lo[i] + 100 < wkill_ms || due_lo[i] > restart_ms + 3000);
        struct rdel_set d2 = {0};
        for (int w = 0; w < nw; w++)
            rdel_load(&d2, out[w], "t:", id);
        rverdict_compute(&d2, id, calm, NULL, LEASE_MS, WINDOW_MS, &vc);
        rdel_free(&d2);
        free(calm);
    }
    struct scene_dead dl = {0};
    tw_redis_dead_get(client, "poison:1", 8, scene_dead_one, &dl);
    uint64_t periods = 0, missing = 0, early = 0;
    scene_ticks(out, nw, anchor, sched_end, &periods, &missing, &early);
    bool good = v.missing == 0 && v.early == 0 && v.unexplained == 0 && st.pending == 0 &&
                ndead == 1 && dl.attempt == 3 && missing == 0 && early == 0;
    printf("\n=== verdict after %.1f s: %s\n", all_done / 1000.0, good ? "GOOD" : "BAD");
    printf("  delivered       %" PRIu64 " of %" PRIu64 " acknowledged tasks (missing %" PRIu64
           ")\n", v.delivered, v.expected, v.missing);
    printf("  early           %" PRIu64 " (by the Redis clock)\n", v.early);
    printf("  redeliveries    %" PRIu64 " tasks delivered twice, all after their lease ran out: %s;"
           " %" PRIu64 " deliveries with attempt > 1\n",
           v.duplicates, v.unexplained ? "NO" : "yes", v.redelivered);
    printf("  lateness, all   p50 %.2f ms  p99 %.2f ms  max %.2f ms (includes %.1f s of Redis "
           "downtime)\n",
           v.late_p50_us / 1000.0, v.late_p99_us / 1000.0, v.late_max_us / 1000.0,
           (restart_ms - kill_ms) / 1000.0);
    printf("  lateness, calm  p50 %.2f ms  p99 %.2f ms  max %.2f ms (%" PRIu64
           " tasks due before the worker kill or 3 s after the restart)\n",
           vc.late_p50_us / 1000.0, vc.late_p99_us / 1000.0, vc.late_max_us / 1000.0,
           vc.delivered);
    printf("  pending         %" PRIu64 " in Redis at the end\n", st.pending);
    printf("  dead letters    %" PRIu64 ": poison:1 after %u attempts (\"%s\")\n", ndead,
           dl.attempt, dl.err);
    printf("  schedule        tick: %" PRIu64 " periods, %" PRIu64 " missing, %" PRIu64
           " early\n", periods, missing, early);
    printf("  ");
    mstall_print(&machine, "the scene");
    rdel_free(&d);
    free(due_lo);
    free(acked);
    free(delays);
    tw_redis_free(client);
    rfx_stop(&srv);
    return good ? 0 : 1;
}
