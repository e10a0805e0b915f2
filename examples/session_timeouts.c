/* SPDX-License-Identifier: MIT */
/* Keyed tasks (twheel/tasks.h): session timeouts by session id, in one
 * thread. Each login sets a task under the session's id, each request moves
 * it (the timeout starts again, the value is kept), a logout removes it
 * (handing its value back), and a session left alone expires: execute runs
 * when the loop advances time past its deadline. At shutdown, drain hands
 * every session still open to a function that saves it.
 *
 * Time is in ticks of the caller's choosing (here one tick = one second of
 * a simulated clock, so the program runs at once); a real loop passes its
 * clock to tw_tasks_advance. The program checks what it prints: exit status
 * 0 when every session ended as the script below says, 1 otherwise. */
#include <stdio.h>
#include <string.h>
#include <twheel.h>

#define TIMEOUT 30 /* seconds without a request before a session expires */

struct session {
    char user[16];
    uint64_t ended; /* the tick it expired, was logged out or saved at */
    const char *how;
};

struct server {
    uint64_t now;
};

static void expire(void *ctx, const struct tw_task *task)
{
    struct server *srv = ctx;
    struct session *s = task->value;
    s->ended = srv->now;
    s->how = "expired";
    printf("%3llu s  session %.*s of %s expired (due at %llu s)\n",
           (unsigned long long)srv->now, (int)task->key_len, (const char *)task->key, s->user,
           (unsigned long long)task->deadline);
}

static void save(void *ctx, const struct tw_task *task)
{
    struct server *srv = ctx;
    struct session *s = task->value;
    s->ended = srv->now;
    s->how = "saved";
    printf("%3llu s  shutdown: session %.*s of %s saved, still open\n",
           (unsigned long long)srv->now, (int)task->key_len, (const char *)task->key, s->user);
}

static int login(struct tw_tasks *tasks, const char *sid, struct session *s)
{
    int rc = tw_tasks_set(tasks, sid, strlen(sid), s, TIMEOUT);
    printf("%3llu s  %s logs in: session %s, expires in %d s\n",
           (unsigned long long)tw_tasks_now(tasks), s->user, sid, TIMEOUT);
    return rc == 1 ? 0 : -1; /* 1: a new key */
}

static int request(struct tw_tasks *tasks, const char *sid)
{
    uint64_t due;
    int rc = tw_tasks_move(tasks, sid, strlen(sid), TIMEOUT);
    if (rc == 0 && tw_tasks_get(tasks, sid, strlen(sid), NULL, &due) == 0)
        printf("%3llu s  request on %s: now expires at %llu s\n",
               (unsigned long long)tw_tasks_now(tasks), sid, (unsigned long long)due);
    return rc;
}

int main(void)
{
    struct server srv = {.now = 0};
    struct tw_tasks_config cfg = {.execute = expire, .ctx = &srv}; /* byte-string keys */
    struct tw_tasks *tasks;
    int rc = tw_tasks_new(&tasks, &cfg);
    if (rc) {
        fprintf(stderr, "tw_tasks_new: %s\n", tw_strerror(rc));
        return 1;
    }
    struct session alice = {.user = "alice"}, bob = {.user = "bob"}, carol = {.user = "carol"};
    int bad = 0;
    bad |= login(tasks, "s-1001", &alice);
    bad |= login(tasks, "s-1002", &bob);
    bad |= login(tasks, "s-1003", &carol);

    /* The event loop, one turn per simulated second: advance time first
     * (expire() runs for every session due by now), then handle the turn's
     * events, whose timeouts count from now. */
    for (uint64_t t = 1; t <= 60; t++) {
        srv.now = t;
        tw_tasks_advance(tasks, t);
        if (t % 10 == 0 && t < 60) /* alice sends a request every 10 s */
            bad |= request(tasks, "s-1001");
        if (t == 20) { /* bob logs out: his task will not run */
            void *value = NULL;
            bad |= tw_tasks_remove(tasks, "s-1002", strlen("s-1002"), &value);
            struct session *s = value;
            if (s) {
                s->ended = t;
                s->how = "logged out";
                printf("%3llu s  %s logs out: session s-1002 removed\n", (unsigned long long)t,
                       s->user);
            }
        }
    }
    printf("%3llu s  pending: %zu session(s)\n", (unsigned long long)tw_tasks_now(tasks),
           tw_tasks_pending(tasks));
    /* Shutdown: every session still open goes to save(), none expires. */
    int64_t drained = tw_tasks_drain(tasks, save, &srv);
    tw_tasks_free(tasks);

    /* carol was idle from login: expired at exactly 30 s; bob left at 20 s;
     * alice's last request came at 50 s, so she was open at shutdown. */
    bad |= !(carol.how && strcmp(carol.how, "expired") == 0 && carol.ended == TIMEOUT);
    bad |= !(bob.how && strcmp(bob.how, "logged out") == 0 && bob.ended == 20);
    bad |= !(alice.how && strcmp(alice.how, "saved") == 0 && drained == 1);
    puts(bad ? "FAIL: a session did not end as scripted"
             : "ok: carol expired at 30 s, bob logged out at 20 s, alice saved at shutdown");
    return bad ? 1 : 0;
}
