/* SPDX-License-Identifier: MIT */
/* What the Redis fault tests, the W7 benchmark and the demo scene share:
 * starting redis_worker processes, reading back their delivery records, and
 * judging them (every task delivered, none early, duplicates explained by an
 * expired lease, lateness percentiles).
 *
 * Records are the lines redis_worker writes, one per delivery:
 *     <prefix><id> <attempt> <due_ms> <start_us> <pid> [<lease_end_ms>]
 * where <id> is a decimal task number below the test's task count.
 */
#ifndef TWHEEL_TESTS_REDIS_HARNESS_H
#define TWHEEL_TESTS_REDIS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Options of one redis_worker process (0 / NULL: the worker's default). */
struct rw_opts {
    const char *servers;   /* entries separated by commas: host:port, /socket, URLs */
    const char *queue;
    const char *out;       /* delivery records (appended) */
    const char *stats;     /* written at a clean exit */
    const char *mode;      /* "wheel" or "poll" */
    unsigned partitions, threads, lease_ms, window_ms, tick_ms, exec_us, interval_ms, batch;
    unsigned ahead_ms, hold_ms; /* start_ahead_ms, hold_ms (0: the default) */
    const char *fail_prefix; /* tasks whose key starts with it answer FAILED (NULL: none) */
    const char *tls_ca, *tls_cert, *tls_key; /* tls_ca_file ... (NULL: none) */
    /* Words run before the worker, NULL-terminated, the first a full path
     * (e.g. /usr/bin/env NAME=VALUE... to run it under LD_PRELOAD); NULL: none. */
    const char *const *prefix;
};

/* Start @p worker (the redis_worker binary) with @p o through rfx_spawn. */
int rw_spawn(const char *worker, const struct rw_opts *o, pid_t *pid, const char *log);
/* SIGTERM, wait up to timeout_ms, SIGKILL if needed. 0 if it exited 0 by itself. */
int rw_stop(pid_t pid, int timeout_ms);

struct rdel {
    uint64_t id;
    uint32_t attempt;
    int pid;
    uint64_t due_ms;   /* as reported to execute (Redis clock) */
    uint64_t start_us; /* start of execute, CLOCK_REALTIME */
    uint64_t lease_end_ms; /* the lease's end its START granted (Redis clock); 0: not known */
    uint64_t seq;      /* position in its file (order of starts within a 1-thread worker) */
};

struct rdel_set {
    struct rdel *v;
    size_t n, cap;
    uint64_t bad_lines; /* unparsable or foreign-prefix lines */
};

/* Append the records of one file (missing file: nothing, 0). -1: out of memory. */
int rdel_load(struct rdel_set *s, const char *path, const char *prefix, uint64_t nids);
void rdel_free(struct rdel_set *s);
/* How many distinct ids in [0, nids) have at least one delivery (cheap; for waiting). */
uint64_t rdel_count_ids(const struct rdel_set *s, uint64_t nids);

/* The judgement. */
struct rverdict {
    uint64_t expected;      /* ids required */
    uint64_t delivered;     /* required ids delivered at least once */
    uint64_t missing;       /* required ids never delivered */
    uint64_t first_missing; /* one of them (UINT64_MAX: none) */
    uint64_t deliveries;    /* records */
    uint64_t early;         /* deliveries started before due, or due before it was set */
    uint64_t duplicates;    /* deliveries beyond the first of an id */
    uint64_t unexplained;   /* duplicates that started before any lease could have run out */
    uint64_t redelivered;   /* deliveries with attempt > 1 */
    uint64_t late_p50_us, late_p99_us, late_max_us; /* first deliveries of required ids */
    uint64_t first_start_us, last_start_us;         /* first deliveries' span */
};

/* Judge @p s. @p required[id] (NULL: every id below nids) selects the ids
 * that must be delivered; @p due_lo_ms[id] (NULL: not checked) is the earliest
 * correct due time (Redis TIME before the set + delay). A duplicate is
 * explained when it starts once the previous holder's lease could have run
 * out: at or after due - window_ms + lease_ms (a lease taken when the task was
 * claimed into a window) and the end of the lease the previous delivery's
 * START granted (its lease_end_ms; where not recorded, its start + lease_ms,
 * which a delay between the START and execute makes too late), less 200 ms
 * of slack.
 * Sorts s. -1: out of memory. */
int rverdict_compute(struct rdel_set *s, uint64_t nids, const bool *required,
                     const uint64_t *due_lo_ms, uint32_t lease_ms, uint32_t window_ms,
                     struct rverdict *out);
/* One line: "delivered 100000/100000, missing 0, early 0, duplicates 12 (0 unexplained), ..." */
void rverdict_print(const struct rverdict *v, const char *label);

struct tw_redis;

/* Pipelined sets of ids [first, first + n) as "<prefix><id>" with 32-byte
 * payloads and the given delays; due_lo_ms[id] (may be NULL) gets the Redis
 * TIME read on @p tc (may be NULL) before the call + delay. @return what
 * tw_redis_set_many returned. */
int rw_set_range(struct tw_redis *r, redisContext *tc, const char *prefix, uint64_t first,
                 size_t n, const int64_t *delays, uint64_t *due_lo_ms);
/* Redis TIME in ms on @p tc; 0 on failure. */
uint64_t rw_redis_ms(redisContext *tc);

/* Wait until the queue holds nothing (tw_redis_stats' pending is 0) or the
 * monotonic clock reaches @p deadline_ms (rfx_mono_ms); polls every 100 ms.
 * @return the last stats read (pending UINT64_MAX if none could be read). */
struct tw_redis_stats rw_wait_drained(struct tw_redis *client, uint64_t deadline_ms);
/* The same, until at most `left` tasks are pending. */
struct tw_redis_stats rw_wait_pending(struct tw_redis *client, uint64_t left,
                                      uint64_t deadline_ms);

/* Task-count scaling for tests: $TWHEEL_REDIS_TEST_N if set, else @p dflt, divided
 * by 5 under a sanitizer (at least 1000). */
uint64_t rw_test_size(uint64_t dflt);

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_TESTS_REDIS_HARNESS_H */
