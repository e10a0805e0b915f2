/* SPDX-License-Identifier: MIT */
/* Self-test of the Redis test fixture: a server starts, answers, keeps an AOF
 * over SIGKILL + restart on the same port, stops and leaves nothing behind; a
 * spawned worker can be SIGKILLed and reaped; a three-master cluster starts,
 * spreads keys and moves a slot with its keys. */
#define _GNU_SOURCE
#include "fixture.h"
#include "test.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_server_aof_restart(void)
{
    struct rfx_server s;
    struct rfx_options o = {.appendonly = true, .appendfsync = "always"};
    CHECK_EQ_INT(rfx_start(&s, &o), 0);
    if (s.pid <= 0)
        return;
    CHECK(s.port > 0);
    CHECK(strncmp(rfx_addr(&s), "127.0.0.1:", 10) == 0);
    CHECK_EQ_INT(rfx_command(&s, "SET k v1"), 0);
    uint64_t t = 0;
    CHECK_EQ_INT(rfx_time_us(&s, &t), 0);
    CHECK(t > rfx_realtime_us() - 60000000u && t < rfx_realtime_us() + 60000000u);
    int port = s.port;
    CHECK_EQ_INT(rfx_kill(&s), 0);
    CHECK(s.pid == 0);
    CHECK_EQ_INT(rfx_restart(&s), 0);
    CHECK_EQ_INT(s.port, port);
    redisContext *c = rfx_connect(&s);
    CHECK(c != NULL);
    if (c) {
        redisReply *r = redisCommand(c, "GET k");
        CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "v1") == 0);
        if (r)
            freeReplyObject(r);
        redisFree(c);
    }
    double mem = 0;
    CHECK_EQ_INT(rfx_info_double(&s, "used_memory", &mem), 0);
    CHECK(mem > 0);
    char dir[256];
    snprintf(dir, sizeof dir, "%s", s.dir);
    pid_t pid = s.pid;
    CHECK_EQ_INT(rfx_stop(&s), 0);
    struct stat st;
    CHECK(stat(dir, &st) != 0);
    CHECK(kill(pid, 0) != 0);
    CHECK_EQ_INT(rfx_stop(&s), 0); /* idempotent */
}

static void test_spawn_kill(void)
{
    char *argv[] = {"sleep", "30", NULL};
    pid_t pid = 0;
    CHECK_EQ_INT(rfx_spawn(&pid, argv, NULL), 0);
    CHECK(pid > 0);
    CHECK_EQ_INT(rfx_wait(pid, 50, NULL), -1); /* still running */
    CHECK_EQ_INT(rfx_signal(pid, SIGKILL), 0);
    int status = 0;
    CHECK_EQ_INT(rfx_wait(pid, 5000, &status), 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void test_cluster_migrate(void)
{
    struct rfx_cluster c;
    CHECK_EQ_INT(rfx_cluster_start(&c, 3), 0);
    if (c.n != 3)
        return;
    /* keys spread over the masters, each written to the owner of its slot */
    for (int i = 0; i < 300; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "key:%d", i);
        int owner = rfx_cluster_owner(&c, rfx_key_slot(key, (size_t)len));
        CHECK(owner >= 0);
        if (owner >= 0)
            CHECK_EQ_INT(rfx_command(&c.node[owner], "SET %s %d", key, i), 0);
    }
    for (size_t i = 0; i < 3; i++) {
        uint64_t n = 0;
        CHECK_EQ_INT(rfx_dbsize(&c.node[i], &n), 0);
        CHECK(n > 50);
    }
    CHECK_EQ_INT(rfx_key_slot("{user1000}.following", 20), rfx_key_slot("user1000", 8));
    CHECK_EQ_INT(rfx_key_slot("foo", 3), 12182); /* CLUSTER KEYSLOT foo */
    int slot = rfx_cluster_busy_slot(&c, 0);
    CHECK(slot >= 0);
    if (slot >= 0) {
        CHECK_EQ_INT(rfx_cluster_migrate_slot(&c, (unsigned)slot, 1), 0);
        CHECK_EQ_INT(rfx_cluster_owner(&c, (unsigned)slot), 1);
        redisContext *ctx = rfx_connect(&c.node[1]);
        CHECK(ctx != NULL);
        if (ctx) {
            redisReply *r = redisCommand(ctx, "CLUSTER COUNTKEYSINSLOT %d", slot);
            CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0);
            if (r)
                freeReplyObject(r);
            redisFree(ctx);
        }
    }
    CHECK_EQ_INT(rfx_cluster_stop(&c), 0);
}

int main(void)
{
    RUN(test_server_aof_restart);
    RUN(test_spawn_kill);
    RUN(test_cluster_migrate);
    return test_summary();
}
