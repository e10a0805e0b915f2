/* SPDX-License-Identifier: MIT */
/* Durable delayed tasks on Redis (twheel/redis.h): reminders that survive a
 * crash of the process that set them.
 *
 *   redis_reminders [SERVER]     (default: $TWHEEL_REDIS_ADDR, else 127.0.0.1:6379)
 *
 * SERVER as the configuration takes it: host:port, a unix socket's path, or
 * a URL with credentials (redis://user:password@host:6379/0, unix://...;
 * twheel/redis.h, "Connecting"). It is never printed: it may hold a
 * password; the layer's own texts name a server by its address only.
 *
 * Two handles on one queue, as two processes would have them: a client
 * (no execute) sets five reminders, cancels one (remove) and brings one
 * forward (move); a worker (execute set) delivers each at its due time by
 * the Redis server's clock, on one of its executor threads. Then the worker
 * stops, acknowledging what it delivered, and the program prints the
 * layer's figures.
 *
 * The queue is named after the process id, so a run never meets another
 * run's tasks, and it is left empty. The program checks what it prints:
 * the four remaining reminders delivered once each, the removed one never,
 * nothing pending at the end. Bounded to 5 s of waiting (it takes about
 * 0.5 s). Exit status 0 on success, 1 otherwise (2: Redis not reachable).
 * Build: link twheel_redis (`pkg-config --cflags --libs twheel-redis`). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <twheel/redis.h>
#include <unistd.h>

#define N 5 /* reminder:1 .. reminder:5 */

static uint64_t start_ms;
static atomic_int delivered[N + 1]; /* deliveries of reminder:i */
static atomic_int total;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* execute: on one of the worker's executor threads, when a reminder is due. */
static enum tw_redis_result deliver(void *arg, const struct tw_redis_task *t)
{
    (void)arg;
    printf("%5llu ms  %.*s: \"%.*s\" (attempt %u)\n", (unsigned long long)(now_ms() - start_ms),
           (int)t->key_len, t->key, (int)t->payload_len, (const char *)t->payload,
           (unsigned)t->attempt);
    int i = 0;
    if (t->key_len > 9 && memcmp(t->key, "reminder:", 9) == 0)
        i = atoi(t->key + 9); /* "reminder:1" .. "reminder:5", at most 10 bytes */
    if (i >= 1 && i <= N)
        atomic_fetch_add(&delivered[i], 1);
    atomic_fetch_add(&total, 1);
    return TW_REDIS_DONE; /* done: the task is deleted; FAILED would retry it */
}

static int set_reminder(struct tw_redis *q, int i, const char *text, int64_t delay_ms)
{
    char key[16];
    int len = snprintf(key, sizeof key, "reminder:%d", i);
    int rc = tw_redis_set(q, key, (size_t)len, text, strlen(text), delay_ms);
    printf("%5llu ms  set %s in %lld ms: %s\n", (unsigned long long)(now_ms() - start_ms), key,
           (long long)delay_ms, rc ? tw_strerror(rc) : "stored in Redis");
    return rc;
}

int main(int argc, char **argv)
{
    const char *addr = argc > 1 ? argv[1] : getenv("TWHEEL_REDIS_ADDR");
    if (!addr || !addr[0])
        addr = "127.0.0.1:6379";
    /* The client's calls write to Redis on this thread: a write to a server
     * that died must fail (TW_EIO), not end the process (redis.h, SIGPIPE). */
    signal(SIGPIPE, SIG_IGN);
    start_ms = now_ms();

    char queue[48];
    snprintf(queue, sizeof queue, "twheel-example-%ld", (long)getpid());
    const char *servers[] = {addr};
    struct tw_redis_config cfg;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.queue = queue;
    cfg.connect_timeout_ms = 500;
    char why[256];
    cfg.errbuf = why; /* what failed, if tw_redis_new fails: the server's words */
    cfg.errbuf_len = sizeof why;

    struct tw_redis *client, *worker;
    int rc = tw_redis_new(&client, &cfg); /* execute NULL: sets, moves, removes */
    if (rc) {
        fprintf(stderr, "redis_reminders: cannot use Redis: %s (%s)\n", tw_strerror(rc), why);
        return 2;
    }
    cfg.execute = deliver;
    cfg.threads = 2;
    rc = tw_redis_new(&worker, &cfg);
    if (rc) {
        fprintf(stderr, "redis_reminders: worker: %s (%s)\n", tw_strerror(rc), why);
        tw_redis_free(client);
        return 2;
    }
    printf("%5llu ms  queue %s: a client and a worker (2 executor threads)\n",
           (unsigned long long)(now_ms() - start_ms), queue);

    int bad = 0;
    bad |= set_reminder(client, 1, "stand-up meeting", 200) != 0;
    bad |= set_reminder(client, 2, "pay invoice 17", 300) != 0;
    bad |= set_reminder(client, 3, "call the plumber", 400) != 0;
    bad |= set_reminder(client, 4, "water the plants", 500) != 0;
    bad |= set_reminder(client, 5, "leave for the train", 600) != 0;
    /* Cancelled: gone from Redis when remove returns, never delivered. */
    rc = tw_redis_remove(client, "reminder:3", 10);
    printf("%5llu ms  remove reminder:3: %s\n", (unsigned long long)(now_ms() - start_ms),
           rc ? tw_strerror(rc) : "removed");
    bad |= rc != 0;
    /* Brought forward to 100 ms: earlier than what the worker holds, so
     * Redis notifies it (no polling). */
    rc = tw_redis_move(client, "reminder:5", 10, 100);
    printf("%5llu ms  move reminder:5 to 100 ms from now: %s\n",
           (unsigned long long)(now_ms() - start_ms), rc ? tw_strerror(rc) : "moved");
    bad |= rc != 0;

    /* Wait (bounded) for the four, then 200 ms more in which reminder:3,
     * had it not been removed, would have come too. */
    uint64_t end = now_ms() + 5000;
    while (atomic_load(&total) < N - 1 && now_ms() < end)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    nanosleep(&(struct timespec){0, 200 * 1000000L}, NULL);

    tw_redis_stop(worker); /* stops claiming, sends the delayed acknowledgements */
    struct tw_redis_stats st;
    rc = tw_redis_stats(worker, &st);
    if (rc == 0)
        printf("%5llu ms  worker stopped: delivered %llu, pending in Redis %llu, lateness p50 "
               "%.2f ms max %.2f ms (Redis's clock)\n",
               (unsigned long long)(now_ms() - start_ms), (unsigned long long)st.delivered,
               (unsigned long long)st.pending, (double)st.late_p50_us / 1000.0,
               (double)st.late_max_us / 1000.0);
    tw_redis_free(worker);
    tw_redis_free(client);

    for (int i = 1; i <= N; i++)
        bad |= atomic_load(&delivered[i]) != (i == 3 ? 0 : 1);
    bad |= rc != 0 || st.pending != 0;
    printf("%s: reminders 1, 2, 4, 5 delivered once each, 3 never, nothing left pending\n",
           bad ? "FAIL, expected" : "ok");
    return bad ? 1 : 0;
}
