/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <twheel.h>

struct conn {
    int fd;
    struct tw_timer idle; /* embedded: no allocation per timer */
};

static void on_idle(struct tw_timer *t, void *arg)
{
    struct conn *c = tw_container_of(t, struct conn, idle);
    printf("tick %llu: closing idle fd %d\n", (unsigned long long)*(uint64_t *)arg, c->fd);
}

int main(void)
{
    struct tw_wheel wheel;
    uint64_t now = 0; /* one tick = 1 ms, say */
    struct conn a = {.fd = 3}, b = {.fd = 4};
    tw_wheel_init(&wheel, now);
    tw_timer_init(&a.idle, on_idle, &now);
    tw_timer_init(&b.idle, on_idle, &now);
    tw_arm_in(&wheel, &a.idle, now, 30000); /* 30 s idle timeout */
    tw_arm_in(&wheel, &b.idle, now, 30000);
    for (now = 1000; now <= 60000; now += 1000) {
        /* heartbeat: one store; tw_arm_in counts from our now, not
         * from the wheel's last advance (see wheel.h, "Time and event
         * loops") */
        if (now % 5000 == 0)
            tw_arm_in(&wheel, &a.idle, now, 30000);
        tw_wheel_advance(&wheel, now);
    }
    return tw_wheel_pending(&wheel) == 1 ? 0 : 1; /* a alive, b closed */
}
