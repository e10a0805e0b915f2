/* SPDX-License-Identifier: MIT */
/* Random seeds for the keyed hashes of every layer (see hash.h), and the
 * Redis layer's request ids. Static inline: the Redis layer is a library of
 * its own, linked against libtwheel's exported API only, so it cannot call
 * a hidden function of libtwheel; each library gets its own copy. */
#ifndef TWHEEL_COMMON_RANDOM_H
#define TWHEEL_COMMON_RANDOM_H

#include <fcntl.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

/* Two random 64-bit words: getrandom, /dev/urandom, at worst the clock and
 * an address. No global state. */
static inline void tw_random_seed_(uint64_t out[2])
{
    unsigned char *p = (unsigned char *)out;
    size_t got = 0;
#if defined(__linux__)
    while (got < 16) {
        ssize_t n = getrandom(p + got, 16 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
#endif
    if (got < 16) {
        int fd = open("/dev/urandom", O_RDONLY);
        if (fd >= 0) {
            while (got < 16) {
                ssize_t n = read(fd, p + got, 16 - got);
                if (n <= 0)
                    break;
                got += (size_t)n;
            }
            close(fd);
        }
    }
    if (got < 16) {
        /* ISO C's clocks only: this header is included by files whose
         * feature macros differ */
        out[0] = (uint64_t)time(NULL) * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)clock();
        out[1] = (uint64_t)(uintptr_t)out * UINT64_C(0xbf58476d1ce4e5b9) ^ out[0];
    }
}

#endif /* TWHEEL_COMMON_RANDOM_H */
