/* SPDX-License-Identifier: MIT */
/* The installed Redis layer links and answers: no server listens on port 1,
 * so tw_redis_new must fail with TW_EIO (and allocate nothing). */
#include <stdio.h>
#include <twheel/redis.h>

int main(void)
{
    const char *servers[] = {"127.0.0.1:1"};
    struct tw_redis_config cfg;
    struct tw_redis *r = NULL;
    tw_redis_config_init(&cfg);
    cfg.servers = servers;
    cfg.nservers = 1;
    cfg.connect_timeout_ms = 200;
    cfg.command_timeout_ms = 400;
    int rc = tw_redis_new(&r, &cfg);
    if (rc != TW_EIO) {
        fprintf(stderr, "tw_redis_new: %s, expected TW_EIO\n", tw_err_name(rc));
        return 1;
    }
    return 0;
}
