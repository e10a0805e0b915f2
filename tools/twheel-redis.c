/* SPDX-License-Identifier: MIT */
/* twheel-redis: operate a durable queue of twheel's Redis layer from a shell.
 *
 *   twheel-redis [-u URL]... [-q QUEUE] [-p PARTITIONS] COMMAND [ARGS]
 *
 * Every command is one or a few calls of include/twheel/redis.h on a client
 * instance (no worker): stats, get, list, set, move, remove, pause, resume,
 * drop, dead list|get|requeue|purge|count, schedule list|set|remove,
 * metrics (printed once, or served over HTTP at /metrics with --listen). The commands are a table (cmds[] below): a command is a line
 * there and a function. Connection strings go through the library's own
 * parser, so every form it takes (host:port, socket paths, redis://,
 * unix://, and what the library adds) works here.
 *
 * Exit codes: 0 done; 1 a server or data error (cannot connect, refused,
 * no such task or queue, drop refused while workers run), with a message
 * on stderr; 2 a usage error, with a usage line on stderr.
 *
 * The HTTP server of `metrics --listen` is small and blocking: one
 * connection at a time, a request of at most 8 KB read within 2 s (else
 * 400 or 408; the connection closed either way, its unread bytes drained
 * first, 64 KB at most), GET or HEAD of /metrics
 * only (404 for another path, 405 for another method), every answer with
 * Content-Length and Connection: close. SIGINT or SIGTERM ends it (exit 0).
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "twheel/common.h"
#include "twheel/redis.h"

#define PROG "twheel-redis"
#define USAGE "usage: " PROG " [-u URL]... [-q QUEUE] [-p PARTITIONS] COMMAND [ARGS]\n"
#define EXIT_DATA 1
#define EXIT_USAGE 2
#define SERVERS_MAX 16

struct ctx {
    const char *servers[SERVERS_MAX];
    size_t nservers;
    const char *queue;
    uint32_t partitions;   /* 0: the queue's stored count */
    uint32_t timeout_ms;
    struct tw_redis *r;
};

struct cmd {
    const char *name;
    const char *args; /* the usage of its arguments */
    const char *help;
    bool creates;     /* may create the queue (set: the library's default count) */
    int (*run)(struct ctx *c, int argc, char **argv);
};

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n" USAGE "(" PROG " --help for the commands)\n");
    return EXIT_USAGE;
}

static int fail(struct ctx *c, const char *what, int rc)
{
    char words[256] = "";
    if (c->r)
        tw_redis_last_error(c->r, words, sizeof words);
    fprintf(stderr, PROG ": %s: %s%s%s\n", what, tw_strerror(rc), words[0] ? ": " : "", words);
    return EXIT_DATA;
}

/* A number argument: 0 and *out, or a usage error's exit code. */
static int num_arg(const char *s, const char *what, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+')
        return usage_error("%s: a number is needed", what);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return usage_error("%s: not a number in range", what);
    *out = v;
    return 0;
}

/* A subcommand's options: --name VALUE pairs (and flags) before its
 * positional arguments. Returns the index of the first positional one, or
 * -1 after a usage error (*ec set). */
struct opt {
    const char *name;
    bool flag;
    const char **val;
};
static int parse_opts(int argc, char **argv, struct opt *o, size_t n, int *ec)
{
    int i = 1;
    while (i < argc && strncmp(argv[i], "--", 2) == 0 && argv[i][2]) {
        size_t k = 0;
        while (k < n && strcmp(argv[i] + 2, o[k].name) != 0)
            k++;
        if (k == n) {
            *ec = usage_error("unknown option %s", argv[i]);
            return -1;
        }
        if (o[k].flag) {
            *o[k].val = "1";
            i++;
            continue;
        }
        if (i + 1 >= argc) {
            *ec = usage_error("%s needs a value", argv[i]);
            return -1;
        }
        *o[k].val = argv[i + 1];
        i += 2;
    }
    return i;
}

static int want_args(int argc, int first, int min, int max, const char *cmd)
{
    int n = argc - first;
    if (n < min || n > max)
        return usage_error("%s: wrong number of arguments", cmd);
    return 0;
}

/* ---- the commands ------------------------------------------------------------ */

static int cmd_stats(struct ctx *c, int argc, char **argv)
{
    const char *within = "60000";
    struct opt o[] = {{"within", false, &within}};
    int ec = 0, i = parse_opts(argc, argv, o, 1, &ec);
    uint64_t w;
    if (i < 0 || (ec = want_args(argc, i, 0, 0, "stats")) || (ec = num_arg(within, "--within",
                                                                          1000000000000ull, &w)))
        return ec;
    if (!c->r) /* the arguments checked before connecting */
        return 0;
    struct tw_redis_counts q;
    int rc = tw_redis_counts(c->r, w, &q);
    if (rc)
        return fail(c, "stats", rc);
    printf("queue       %s\npartitions  %" PRIu32 "\npending     %" PRIu64 "\nwaiting     %" PRIu64 "\nheld        %" PRIu64
           "\nrunning     %" PRIu64 "\ndue_within  %" PRIu64 "%s (%" PRIu64 " ms)\nlag_ms      %" PRIu64
           "\npaused      %s\ndead        %" PRIu64 "\nschedules   %" PRIu64 "\n",
           c->queue, q.partitions, q.pending, q.waiting, q.held, q.running, q.due_within,
           q.due_capped ? "+" : "", w, q.lag_ms,
           q.paused == 0 ? "no" : q.paused == q.partitions ? "yes" : "partly", q.dead,
           q.schedules);
    return 0;
}

static void put_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\')
            putchar(ch);
        else
            printf("\\x%02x", ch);
    }
}

static int cmd_get(struct ctx *c, int argc, char **argv)
{
    int ec = want_args(argc, 1, 1, 1, "get");
    if (ec || !c->r)
        return ec;
    static char payload[TW_REDIS_PAYLOAD_MAX];
    struct tw_redis_info in;
    int rc = tw_redis_get(c->r, argv[1], strlen(argv[1]), &in, payload, sizeof payload);
    if (rc == TW_ENOENT) {
        fprintf(stderr, PROG ": get: no such task: %s\n", argv[1]);
        return EXIT_DATA;
    }
    if (rc)
        return fail(c, "get", rc);
    static const char *const st[] = {"waiting", "held", "running"};
    printf("key         %s\nstate       %s\ndue_ms      %" PRIu64 "\ndue_in_ms   %" PRId64
           "\nattempt     %" PRIu32 "\nmax_attempts %" PRIu32 "%s\ntoken       %" PRIu64
           "\nlease_end_ms %" PRIu64 "\npayload     ",
           argv[1], st[in.state], in.due_ms, (int64_t)(in.due_ms - in.now_ms), in.attempt,
           in.max_attempts, in.max_attempts ? "" : " (the queue's)", in.token, in.lease_end_ms);
    put_escaped(payload, in.payload_len);
    putchar('\n');
    return 0;
}

/* A cursor as the command line shows it: DUE:HEXKEY. */
static void put_cursor(const struct tw_redis_cursor *cur)
{
    printf("%" PRIu64 ":", cur->due_ms);
    for (size_t i = 0; i < cur->key_len; i++)
        printf("%02x", (unsigned char)cur->key[i]);
}

static int parse_cursor(const char *s, struct tw_redis_cursor *cur)
{
    char *end;
    errno = 0;
    unsigned long long due = strtoull(s, &end, 10);
    if (errno || *end != ':' || *s < '0' || *s > '9')
        return -1;
    const char *h = end + 1;
    size_t n = strlen(h);
    if (n % 2 || n / 2 > TW_REDIS_KEY_MAX)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1 || !h[2 * i + 1] || h[2 * i] == ' ' ||
            h[2 * i] == '+' || h[2 * i] == '-')
            return -1;
        cur->key[i] = (char)v;
    }
    cur->due_ms = due;
    cur->key_len = n / 2;
    return 0;
}

static int cmd_list(struct ctx *c, int argc, char **argv)
{
    const char *from = NULL, *to = NULL, *within = NULL, *limit = "100", *cursor = NULL;
    const char *all = NULL;
    struct opt o[] = {{"from", false, &from},     {"to", false, &to},
                      {"within", false, &within}, {"limit", false, &limit},
                      {"cursor", false, &cursor}, {"all", true, &all}};
    int ec = 0, i = parse_opts(argc, argv, o, 6, &ec);
    if (i < 0)
        return ec;
    if ((ec = want_args(argc, i, 0, 0, "list")))
        return ec;
    uint64_t f = 0, t = UINT64_MAX, w = 0, n = 0;
    if ((from && (ec = num_arg(from, "--from", UINT64_MAX, &f))) ||
        (to && (ec = num_arg(to, "--to", UINT64_MAX, &t))) ||
        (within && (ec = num_arg(within, "--within", 1000000000000ull, &w))) ||
        (ec = num_arg(limit, "--limit", TW_REDIS_PAGE_MAX, &n)))
        return ec;
    if (n == 0)
        return usage_error("--limit: 1..%s", "1000");
    struct tw_redis_cursor cur;
    if (cursor && parse_cursor(cursor, &cur) != 0)
        return usage_error("--cursor: not a cursor: %s", cursor);
    if (!c->r)
        return 0;
    if (within) { /* due within MS of the server's clock */
        struct tw_redis_counts q;
        int rc = tw_redis_counts(c->r, 0, &q);
        if (rc)
            return fail(c, "list", rc);
        t = q.now_ms + w;
    }
    if (f > t)
        return usage_error("--from is after --to%s", "");
    if (!c->r)
        return 0;
    for (;;) {
        struct tw_redis_page *pg;
        int rc = tw_redis_list(c->r, f, t, cursor ? &cur : NULL, (size_t)n, &pg);
        if (rc)
            return fail(c, "list", rc);
        for (size_t k = 0; k < pg->n; k++) {
            printf("%" PRIu64 " ", pg->items[k].due_ms);
            put_escaped(pg->items[k].key, pg->items[k].key_len);
            putchar('\n');
        }
        bool more = pg->more && pg->n;
        if (more) {
            cur = pg->next;
            cursor = "";
        }
        tw_redis_page_free(pg);
        if (!more)
            break;
        if (!all) {
            printf("# next: " PROG " list --cursor ");
            put_cursor(&cur);
            putchar('\n');
            break;
        }
    }
    return 0;
}

static int cmd_set(struct ctx *c, int argc, char **argv)
{
    const char *maxa = NULL;
    struct opt o[] = {{"max-attempts", false, &maxa}};
    uint64_t d, m = 0;
    int ec = 0, i = parse_opts(argc, argv, o, 1, &ec);
    if (i < 0 || (ec = want_args(argc, i, 2, 3, "set")) ||
        (ec = num_arg(argv[i + 1], "DELAY_MS", TW_REDIS_DELAY_MAX, &d)) ||
        (maxa && (ec = num_arg(maxa, "--max-attempts", 1048575, &m))))
        return ec;
    if (maxa && m == 0)
        return usage_error("--max-attempts: 1..%s", "1048575");
    if (!c->r)
        return 0;
    const char *p = argc > i + 2 ? argv[i + 2] : "";
    struct tw_redis_set_opts so = {.max_attempts = (uint32_t)m};
    int rc = tw_redis_set_opts(c->r, argv[i], strlen(argv[i]), p, strlen(p), (int64_t)d, &so);
    return rc ? fail(c, "set", rc) : 0;
}

static int cmd_move(struct ctx *c, int argc, char **argv)
{
    uint64_t d;
    int ec = want_args(argc, 1, 2, 2, "move");
    if (ec || (ec = num_arg(argv[2], "DELAY_MS", TW_REDIS_DELAY_MAX, &d)) || !c->r)
        return ec;
    int rc = tw_redis_move(c->r, argv[1], strlen(argv[1]), (int64_t)d);
    if (rc == TW_ENOENT) {
        fprintf(stderr, PROG ": move: no such task: %s\n", argv[1]);
        return EXIT_DATA;
    }
    return rc ? fail(c, "move", rc) : 0;
}

static int cmd_remove(struct ctx *c, int argc, char **argv)
{
    int ec = want_args(argc, 1, 1, 1, "remove");
    if (ec || !c->r)
        return ec;
    int rc = tw_redis_remove(c->r, argv[1], strlen(argv[1]));
    if (rc == TW_ENOENT) {
        fprintf(stderr, PROG ": remove: no such task: %s\n", argv[1]);
        return EXIT_DATA;
    }
    return rc ? fail(c, "remove", rc) : 0;
}

static int cmd_pause(struct ctx *c, int argc, char **argv)
{
    int ec = want_args(argc, 1, 0, 0, argv[0]);
    if (ec || !c->r)
        return ec;
    bool pause = strcmp(argv[0], "pause") == 0;
    int rc = pause ? tw_redis_pause(c->r) : tw_redis_resume(c->r);
    return rc ? fail(c, argv[0], rc) : 0;
}

static int cmd_drop(struct ctx *c, int argc, char **argv)
{
    const char *force = NULL;
    struct opt o[] = {{"force", true, &force}};
    int ec = 0, i = parse_opts(argc, argv, o, 1, &ec);
    if (i < 0 || (ec = want_args(argc, i, 0, 0, "drop")) || !c->r)
        return ec;
    int rc = tw_redis_drop(c->r, force != NULL);
    if (rc == TW_EBUSY) {
        fprintf(stderr, PROG ": drop: queue %s has a worker running or tasks leased; stop its "
                        "workers (or pause it and wait), or drop --force\n", c->queue);
        return EXIT_DATA;
    }
    return rc ? fail(c, "drop", rc) : 0;
}

/* ---- dead letters, schedules ------------------------------------------------------ */

#define POS_MAX 4
/* As parse_opts, but options may come before or after the positional
 * arguments ("--" ends the options), which go to pos[] (POS_MAX at most).
 * Returns how many there are, or -1 after a usage error (*ec set). */
static int parse_mixed(int argc, char **argv, struct opt *o, size_t n, const char **pos, int *ec)
{
    int np = 0;
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (opts && !strcmp(a, "--")) {
            opts = false;
            continue;
        }
        if (!opts || strncmp(a, "--", 2) != 0 || !a[2]) {
            if (np == POS_MAX) {
                *ec = usage_error("%s: too many arguments", argv[0]);
                return -1;
            }
            pos[np++] = a;
            continue;
        }
        size_t k = 0;
        while (k < n && strcmp(a + 2, o[k].name) != 0)
            k++;
        if (k == n) {
            *ec = usage_error("unknown option %s", a);
            return -1;
        }
        if (o[k].flag) {
            *o[k].val = "1";
        } else if (i + 1 >= argc) {
            *ec = usage_error("%s needs a value", a);
            return -1;
        } else {
            *o[k].val = argv[++i];
        }
    }
    return np;
}

/* "KEY" or "--all", exactly one; 0, or a usage error's exit code. */
static int key_or_all(int np, const char *all, const char *cmd)
{
    if ((np == 1) == (all != NULL))
        return usage_error("%s: KEY or --all, one of them", cmd);
    return 0;
}

static void put_dead(void *arg, const struct tw_redis_dead *d)
{
    long *left = arg;
    if (*left == 0)
        return;
    if (*left > 0)
        (*left)--;
    put_escaped(d->key, d->key_len);
    printf(" attempt=%" PRIu32 " max_attempts=%" PRIu32 " dead_ms=%" PRIu64 " due_ms=%" PRIu64
           " error=",
           d->attempt, d->max_attempts, d->dead_ms, d->due_ms);
    put_escaped(d->error, d->error_len);
    putchar('\n');
}

static int cmd_dead_list(struct ctx *c, int argc, char **argv)
{
    const char *count = "100", *pos[POS_MAX];
    struct opt o[] = {{"count", false, &count}};
    uint64_t n;
    int ec = 0, np = parse_mixed(argc, argv, o, 1, pos, &ec);
    if (np < 0 || (ec = want_args(np, 0, 0, 0, "dead list")) ||
        (ec = num_arg(count, "--count", 1000000000, &n)))
        return ec;
    if (n == 0)
        return usage_error("--count: 1..%s", "1000000000");
    if (!c->r)
        return 0;
    struct tw_redis_scan_cursor cur = {0};
    long left = (long)n;
    while (!cur.done && left > 0) {
        int rc = tw_redis_dead_list(c->r, &cur, left < 1000 ? (size_t)left : 1000, put_dead,
                                    &left);
        if (rc < 0)
            return fail(c, "dead list", rc);
    }
    if (!cur.done)
        printf("# more dead letters: " PROG " dead count; dead list --count N\n");
    return 0;
}

static void show_dead(void *arg, const struct tw_redis_dead *d)
{
    (void)arg;
    printf("key          ");
    put_escaped(d->key, d->key_len);
    printf("\nattempt      %" PRIu32 "\nmax_attempts %" PRIu32 "\ndead_ms      %" PRIu64
           "\ndue_ms       %" PRIu64 "\nerror        ",
           d->attempt, d->max_attempts, d->dead_ms, d->due_ms);
    put_escaped(d->error, d->error_len);
    printf("\npayload      ");
    put_escaped(d->payload, d->payload_len);
    putchar('\n');
}

/* A call on one key that answers TW_ENOENT for "no such WHAT": exit 1 with it. */
static int key_result(struct ctx *c, const char *cmd, const char *what, const char *key, int rc)
{
    if (rc == TW_ENOENT) {
        fprintf(stderr, PROG ": %s: no such %s: %s\n", cmd, what, key);
        return EXIT_DATA;
    }
    return rc ? fail(c, cmd, rc) : 0;
}

static int cmd_dead_get(struct ctx *c, int argc, char **argv)
{
    int ec = want_args(argc, 1, 1, 1, "dead get");
    if (ec || !c->r)
        return ec;
    int rc = tw_redis_dead_get(c->r, argv[1], strlen(argv[1]), show_dead, NULL);
    return key_result(c, "dead get", "dead letter", argv[1], rc);
}

static int cmd_dead_requeue(struct ctx *c, int argc, char **argv)
{
    const char *all = NULL, *delay = "0", *pos[POS_MAX];
    struct opt o[] = {{"all", true, &all}, {"delay", false, &delay}};
    uint64_t d;
    int ec = 0, np = parse_mixed(argc, argv, o, 2, pos, &ec);
    if (np < 0 || (ec = key_or_all(np, all, "dead requeue")) ||
        (ec = num_arg(delay, "--delay", TW_REDIS_DELAY_MAX, &d)) || !c->r)
        return ec;
    if (all) {
        uint64_t moved = 0;
        int rc = tw_redis_dead_requeue_all(c->r, (int64_t)d, &moved);
        printf("requeued %" PRIu64 "\n", moved);
        return rc ? fail(c, "dead requeue", rc) : 0;
    }
    int rc = tw_redis_dead_requeue(c->r, pos[0], strlen(pos[0]), (int64_t)d);
    if (rc == TW_ECONFLICT) {
        fprintf(stderr, PROG ": dead requeue: a live task holds the key %s (the dead letter "
                        "stays)\n", pos[0]);
        return EXIT_DATA;
    }
    return key_result(c, "dead requeue", "dead letter", pos[0], rc);
}

static int cmd_dead_purge(struct ctx *c, int argc, char **argv)
{
    const char *all = NULL, *pos[POS_MAX];
    struct opt o[] = {{"all", true, &all}};
    int ec = 0, np = parse_mixed(argc, argv, o, 1, pos, &ec);
    if (np < 0 || (ec = key_or_all(np, all, "dead purge")) || !c->r)
        return ec;
    int rc = tw_redis_dead_purge(c->r, all ? NULL : pos[0], all ? 0 : strlen(pos[0]));
    return key_result(c, "dead purge", "dead letter", all ? "" : pos[0], rc);
}

static int cmd_dead_count(struct ctx *c, int argc, char **argv)
{
    (void)argv;
    int ec = want_args(argc, 1, 0, 0, "dead count");
    if (ec || !c->r)
        return ec;
    uint64_t n;
    int rc = tw_redis_dead_count(c->r, &n);
    if (rc)
        return fail(c, "dead count", rc);
    printf("%" PRIu64 "\n", n);
    return 0;
}

static const char *const missed_names[] = {"skip", "once", "all"};

static void put_schedule(void *arg, const struct tw_redis_schedule_info *s)
{
    (void)arg;
    put_escaped(s->key, s->key_len);
    printf(" next_ms=%" PRIu64 " missed=%s spec=", s->next_ms,
           (unsigned)s->missed < 3 ? missed_names[s->missed] : "?");
    put_escaped(s->spec, s->spec_len);
    printf(" payload=");
    put_escaped(s->payload, s->payload_len);
    putchar('\n');
}

static int cmd_schedule_list(struct ctx *c, int argc, char **argv)
{
    (void)argv;
    int ec = want_args(argc, 1, 0, 0, "schedule list");
    if (ec || !c->r)
        return ec;
    struct tw_redis_scan_cursor cur = {0};
    while (!cur.done) {
        int rc = tw_redis_schedule_list(c->r, &cur, 100, put_schedule, NULL);
        if (rc < 0)
            return fail(c, "schedule list", rc);
    }
    return 0;
}

static int cmd_schedule_set(struct ctx *c, int argc, char **argv)
{
    const char *cron = NULL, *every = NULL, *anchor = NULL, *missed = "skip", *payload = "";
    const char *pos[POS_MAX];
    struct opt o[] = {{"cron", false, &cron},     {"every", false, &every},
                      {"anchor", false, &anchor}, {"missed", false, &missed},
                      {"payload", false, &payload}};
    int ec = 0, np = parse_mixed(argc, argv, o, 5, pos, &ec);
    if (np < 0 || (ec = want_args(np, 0, 1, 1, "schedule set")))
        return ec;
    struct tw_redis_schedule s = {0};
    if ((cron != NULL) == (every != NULL))
        return usage_error("schedule set: --cron EXPR or --every MS, one of them%s", "");
    if (anchor && !every)
        return usage_error("schedule set: --anchor goes with --every%s", "");
    if ((every && (ec = num_arg(every, "--every", TW_REDIS_DELAY_MAX, &s.every_ms))) ||
        (anchor && (ec = num_arg(anchor, "--anchor", UINT64_MAX, &s.anchor_ms))))
        return ec;
    if (every && s.every_ms < 1000)
        return usage_error("--every: at least 1000 ms, got %s", every);
    size_t m = 0;
    while (m < 3 && strcmp(missed, missed_names[m]) != 0)
        m++;
    if (m == 3)
        return usage_error("--missed: skip, once or all, got %s", missed);
    s.cron = cron;
    s.missed = (enum tw_redis_missed)m;
    if (!c->r)
        return 0;
    uint64_t next = 0;
    int rc = tw_redis_schedule_set(c->r, pos[0], strlen(pos[0]), payload, strlen(payload), &s,
                                   &next);
    if (rc == TW_EINVAL) /* what the library's parser refused: the command line's fault */
        return usage_error("--cron: not a 5-field expression that ever matches: %s",
                           cron ? cron : every);
    if (rc)
        return fail(c, "schedule set", rc);
    printf("next_ms %" PRIu64 "\n", next);
    return 0;
}

static int cmd_schedule_remove(struct ctx *c, int argc, char **argv)
{
    int ec = want_args(argc, 1, 1, 1, "schedule remove");
    if (ec || !c->r)
        return ec;
    int rc = tw_redis_schedule_remove(c->r, argv[1], strlen(argv[1]));
    return key_result(c, "schedule remove", "schedule", argv[1], rc);
}

/* ---- metrics, and its HTTP server -------------------------------------------------- */

static volatile sig_atomic_t stopping;
static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

/* The rendering into *buf (grown as needed). 0, or an error code. */
static int render(struct ctx *c, uint64_t within, char **buf, size_t *cap, size_t *len)
{
    for (;;) {
        int rc = tw_redis_metrics(c->r, within, *buf, *cap, len);
        if (rc != TW_E2BIG)
            return rc;
        size_t nc = *len + 4096;
        char *b = realloc(*buf, nc);
        if (!b)
            return TW_ENOMEM;
        *buf = b;
        *cap = nc;
    }
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t n,
                  bool head)
{
    char h[256];
    int k = snprintf(h, sizeof h,
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, type, n);
    send_all(fd, h, (size_t)k);
    if (!head)
        send_all(fd, body, n);
}

/* One connection: read the request head (8 KB, 2 s at most), answer, close. */
static void serve_one(struct ctx *c, int fd, uint64_t within, char **buf, size_t *cap)
{
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char req[8193];
    size_t n = 0;
    const char *txt = "text/plain; charset=utf-8";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (n < sizeof req - 1) {
        clock_gettime(CLOCK_MONOTONIC, &t1); /* 2 s for the whole head, not per read */
        long left_us = 2000000L - ((t1.tv_sec - t0.tv_sec) * 1000000L +
                                   (t1.tv_nsec - t0.tv_nsec) / 1000);
        if (left_us <= 0) {
            reply(fd, "408 Request Timeout", txt, "timeout\n", 8, false);
            return;
        }
        struct timeval lt = {left_us / 1000000, left_us % 1000000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &lt, sizeof lt);
        ssize_t r = recv(fd, req + n, sizeof req - 1 - n, 0);
        if (r <= 0) {
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                reply(fd, "408 Request Timeout", txt, "timeout\n", 8, false);
            return;
        }
        n += (size_t)r;
        req[n] = 0;
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[n] = 0;
    if (!strstr(req, "\r\n\r\n") && !strstr(req, "\n\n")) {
        reply(fd, "400 Bad Request", txt, "request too long\n", 17, false);
        return;
    }
    char method[8], path[1024], version[16];
    if (sscanf(req, "%7s %1023s %15s", method, path, version) != 3 ||
        strncmp(version, "HTTP/1.", 7) != 0) {
        reply(fd, "400 Bad Request", txt, "bad request\n", 12, false);
        return;
    }
    bool head = strcmp(method, "HEAD") == 0;
    if (!head && strcmp(method, "GET") != 0) {
        reply(fd, "405 Method Not Allowed", txt, "GET /metrics\n", 13, false);
        return;
    }
    size_t pl = strcspn(path, "?");
    if (pl != 8 || strncmp(path, "/metrics", 8) != 0) {
        reply(fd, "404 Not Found", txt, "GET /metrics\n", 13, head);
        return;
    }
    size_t len = 0;
    int rc = render(c, within, buf, cap, &len);
    if (rc) {
        reply(fd, "500 Internal Server Error", txt, "rendering failed\n", 17, head);
        return;
    }
    reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", *buf, len, head);
}

/* Close after the answer: the client's unread bytes drained first (64 KB,
 * the receive timeout at most), so that the close sends no reset that could
 * destroy the answer before the client reads it. */
static void linger_close(int fd)
{
    char sink[4096];
    shutdown(fd, SHUT_WR);
    for (int k = 0; k < 16 && recv(fd, sink, sizeof sink, 0) > 0; k++)
        ;
    close(fd);
}

static int listen_on(const char *addr, int *out_fd, int *out_port)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !colon[1])
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    if (host[0] == '[') { /* [v6] */
        size_t hl = strlen(host);
        if (host[hl - 1] != ']')
            return -1;
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) {
        freeaddrinfo(ai);
        return -2;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
        freeaddrinfo(ai);
        close(fd);
        return -2;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    char ps[16];
    getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, ps, sizeof ps, NI_NUMERICSERV);
    *out_fd = fd;
    *out_port = atoi(ps);
    return 0;
}

static int cmd_metrics(struct ctx *c, int argc, char **argv)
{
    const char *listen_addr = NULL, *within = "60000";
    struct opt o[] = {{"listen", false, &listen_addr}, {"within", false, &within}};
    int ec = 0, i = parse_opts(argc, argv, o, 2, &ec);
    uint64_t w;
    if (i < 0)
        return ec;
    if ((ec = want_args(argc, i, 0, 0, "metrics")) ||
        (ec = num_arg(within, "--within", 1000000000000ull, &w)))
        return ec;
    if (listen_addr && !strrchr(listen_addr, ':'))
        return usage_error("--listen: ADDRESS:PORT expected, got %s", listen_addr);
    if (!c->r)
        return 0;
    char *buf = NULL;
    size_t cap = 0, len = 0;
    if (!listen_addr) {
        int rc = render(c, w, &buf, &cap, &len);
        if (rc == 0)
            fwrite(buf, 1, len, stdout);
        free(buf);
        return rc ? fail(c, "metrics", rc) : 0;
    }
    int fd, port, e = listen_on(listen_addr, &fd, &port);
    if (e == -1)
        return usage_error("--listen: ADDRESS:PORT expected, got %s", listen_addr);
    if (e) {
        fprintf(stderr, PROG ": metrics: cannot listen on %s: %s\n", listen_addr,
                strerror(errno));
        return EXIT_DATA;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_stop; /* no SA_RESTART: poll returns */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf(PROG ": serving /metrics of queue %s on port %d\n", c->queue, port);
    fflush(stdout);
    while (!stopping) {
        struct pollfd pfd = {fd, POLLIN, 0};
        if (poll(&pfd, 1, 500) <= 0)
            continue;
        int cfd = accept(fd, NULL, NULL);
        if (cfd < 0)
            continue;
        serve_one(c, cfd, w, &buf, &cap);
        linger_close(cfd);
    }
    close(fd);
    free(buf);
    return 0;
}

/* The commands. A name of two words ("dead list") is a command of a group:
 * its function gets the arguments after both words (argv[0] its second). */
static const struct cmd cmds[] = {
    {"stats", "[--within MS]",
     "tasks by state, due within MS (60000), lag, paused, dead letters, schedules", false,
     cmd_stats},
    {"get", "KEY", "one task: state, due time, attempt, token, lease end, payload", false,
     cmd_get},
    {"list", "[--from MS] [--to MS | --within MS] [--limit N] [--cursor C] [--all]",
     "waiting tasks due in [from, to) (server ms), in due order, a page of N (100)", false,
     cmd_list},
    {"set", "[--max-attempts N] KEY DELAY_MS [PAYLOAD]",
     "store or replace a task due in DELAY_MS (its own retry limit N)", true, cmd_set},
    {"move", "KEY DELAY_MS", "re-arm a task to now + DELAY_MS", false, cmd_move},
    {"remove", "KEY", "remove a task", false, cmd_remove},
    {"pause", "", "workers stop claiming (what they hold still runs); sets are accepted", false,
     cmd_pause},
    {"resume", "", "workers claim again: what came due runs, in due order", false, cmd_pause},
    {"drop", "[--force]", "delete the queue's keys (refused while a worker runs)", false,
     cmd_drop},
    {"dead list", "[--count N]", "dead letters: key, attempts, when, error (N of them: 100)",
     false, cmd_dead_list},
    {"dead get", "KEY", "one dead letter, its error text and payload", false, cmd_dead_get},
    {"dead requeue", "KEY|--all [--delay MS]",
     "dead letters back into the queue, due in MS (0), attempts counted anew", false,
     cmd_dead_requeue},
    {"dead purge", "KEY|--all", "delete dead letters", false, cmd_dead_purge},
    {"dead count", "", "how many dead letters", false, cmd_dead_count},
    {"schedule list", "", "recurring schedules: key, next occurrence, policy, spec, payload",
     false, cmd_schedule_list},
    {"schedule set",
     "KEY (--cron EXPR | --every MS [--anchor MS]) [--missed skip|once|all] [--payload P]",
     "create or replace a schedule (cron in UTC); its occurrences are tasks KEY@MS", true,
     cmd_schedule_set},
    {"schedule remove", "KEY", "delete a schedule", false, cmd_schedule_remove},
    {"metrics", "[--listen ADDR:PORT] [--within MS]",
     "Prometheus text: printed, or served at http://ADDR:PORT/metrics", false, cmd_metrics},
};
#define NCMDS (sizeof cmds / sizeof cmds[0])

static void help(void)
{
    printf(USAGE "\nOperate a durable queue of twheel's Redis layer.\n\nOptions:\n"
           "  -u, --url URL          a server or cluster node: host:port, /socket,\n"
           "                         redis://[user[:pass]@]host[:port][/db], unix://...\n"
           "                         (repeat for more seeds; default 127.0.0.1:6379)\n"
           "  -q, --queue NAME       the queue (default twq)\n"
           "  -p, --partitions N     its partition count (default: the one stored with it;\n"
           "                         set creates a new queue with 16 on a cluster,\n"
           "                         1 on one server)\n"
           "  -t, --timeout MS       per command, retries included (default 2000)\n"
           "  -h, --help             print this and exit\n"
           "  -V, --version          print the version and exit\n\nCommands:\n");
    for (size_t i = 0; i < NCMDS; i++)
        printf("  %s %s\n      %s\n", cmds[i].name, cmds[i].args, cmds[i].help);
    printf("\nExit status: 0 done, 1 a server or data error (message on stderr),\n"
           "2 a usage error (usage line on stderr).\n");
}

int main(int argc, char **argv)
{
    struct ctx c = {.queue = "twq", .timeout_ms = 2000};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help();
            return 0;
        } else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf(PROG " (twheel %s)\n", tw_version_string());
            return 0;
        } else if ((!strcmp(a, "-u") || !strcmp(a, "--url")) && has) {
            if (c.nservers == SERVERS_MAX)
                return usage_error("at most %s servers", "16");
            c.servers[c.nservers++] = argv[++i];
        } else if ((!strcmp(a, "-q") || !strcmp(a, "--queue")) && has) {
            c.queue = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--partitions")) && has) {
            uint64_t v;
            int ec = num_arg(argv[++i], "--partitions", TW_REDIS_PARTITIONS_MAX, &v);
            if (ec || v == 0)
                return ec ? ec : usage_error("--partitions: 1..%s", "16384");
            c.partitions = (uint32_t)v;
        } else if ((!strcmp(a, "-t") || !strcmp(a, "--timeout")) && has) {
            uint64_t v;
            int ec = num_arg(argv[++i], "--timeout", 3600000, &v);
            if (ec || v == 0)
                return ec ? ec : usage_error("--timeout: 1..%s ms", "3600000");
            c.timeout_ms = (uint32_t)v;
        } else {
            return usage_error("unknown option, or one missing its value: %s", a);
        }
    }
    if (i >= argc)
        return usage_error("a command is needed%s", "");
    const struct cmd *cmd = NULL;
    bool group = false; /* argv[i] names a group ("dead"): the next word its command */
    for (size_t k = 0; k < NCMDS && !cmd; k++) {
        const char *sp = strchr(cmds[k].name, ' ');
        size_t n = sp ? (size_t)(sp - cmds[k].name) : strlen(cmds[k].name);
        if (strncmp(argv[i], cmds[k].name, n) != 0 || argv[i][n])
            continue;
        group = sp != NULL;
        if (!sp || (i + 1 < argc && !strcmp(argv[i + 1], sp + 1)))
            cmd = &cmds[k];
    }
    if (!cmd && group) {
        char both[64];
        snprintf(both, sizeof both, "%s %s", argv[i], i + 1 < argc ? argv[i + 1] : "");
        return usage_error(i + 1 < argc ? "unknown command: %s" : "%sCOMMAND is needed", both);
    }
    if (!cmd)
        return usage_error("unknown command: %s", argv[i]);
    if (group)
        i++;
    if (c.nservers == 0)
        c.servers[c.nservers++] = "127.0.0.1:6379";
    int ec = cmd->run(&c, argc - i, argv + i); /* c.r NULL: the arguments only */
    if (ec)
        return ec;
    signal(SIGPIPE, SIG_IGN); /* the library writes on this thread (redis.h) */

    struct tw_redis_config cfg;
    char err[256];
    tw_redis_config_init(&cfg);
    cfg.servers = c.servers;
    cfg.nservers = c.nservers;
    cfg.queue = c.queue;
    /* 0: the stored count; a command that may create the queue takes the
     * library's default, which is the stored count or a new queue's */
    cfg.partitions = c.partitions ? c.partitions : cmd->creates ? TW_REDIS_PARTITIONS_AUTO : 0;
    cfg.command_timeout_ms = c.timeout_ms;
    cfg.connect_timeout_ms = c.timeout_ms < 1000 ? c.timeout_ms : 1000;
    cfg.errbuf = err;
    cfg.errbuf_len = sizeof err;
    int rc = tw_redis_new(&c.r, &cfg);
    if (rc == TW_ENOENT) {
        fprintf(stderr, PROG ": queue %s does not exist (no {%s:meta}:partitions)\n", c.queue,
                c.queue);
        return EXIT_DATA;
    }
    if (rc == TW_EINVAL)
        return usage_error("%s", err[0] ? err : "a connection option is out of range");
    if (rc) {
        fprintf(stderr, PROG ": cannot open queue %s: %s%s%s\n", c.queue, tw_strerror(rc),
                err[0] ? ": " : "", err);
        return EXIT_DATA;
    }
    ec = cmd->run(&c, argc - i, argv + i);
    tw_redis_free(c.r);
    return ec;
}
