/* SPDX-License-Identifier: MIT */
/* Internal: the keyed hashes every layer uses (tasks, runner, cache), and
 * the per-instance random seed they are keyed with. Not installed; the hash
 * flooding test includes it to build colliding keys for a known seed.
 *
 * - Byte strings: SipHash-1-3 (Aumasson & Bernstein; 1 compression round and 3
 *   finalisation rounds, the variant Rust's HashMap and Redis use): a keyed PRF,
 *   so without the 128-bit seed an attacker cannot pick colliding keys.
 * - Short byte strings where speed matters more (the cache's table):
 *   tw_hash_mum, a seeded multiply-mix hash (below: what it resists).
 * - Integers: splitmix64's finaliser (Stafford's "mix13") with both seed words
 *   folded in; a bijection for a fixed seed, cheap (2 multiplies), and every
 *   output bit depends on every key and seed bit. Not a PRF.
 */
#ifndef TWHEEL_HASH_H
#define TWHEEL_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t tw_hash_rotl_(uint64_t x, unsigned b)
{
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t tw_hash_load64le_(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
#else
    uint64_t v = 0;
    for (unsigned i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
#endif
}

#define TW_SIPROUND_(v0, v1, v2, v3)                                             \
    do {                                                                          \
        v0 += v1;                                                                 \
        v1 = tw_hash_rotl_(v1, 13);                                               \
        v1 ^= v0;                                                                 \
        v0 = tw_hash_rotl_(v0, 32);                                               \
        v2 += v3;                                                                 \
        v3 = tw_hash_rotl_(v3, 16);                                               \
        v3 ^= v2;                                                                 \
        v0 += v3;                                                                 \
        v3 = tw_hash_rotl_(v3, 21);                                               \
        v3 ^= v0;                                                                 \
        v2 += v1;                                                                 \
        v1 = tw_hash_rotl_(v1, 17);                                               \
        v1 ^= v2;                                                                 \
        v2 = tw_hash_rotl_(v2, 32);                                               \
    } while (0)

/* SipHash-1-3's last word b (the tail bytes, the length in the top byte)
 * and its finalization, from the state after the full words. */
static inline uint64_t tw_siphash13_end_(uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3,
                                         uint64_t b)
{
    v3 ^= b;
    TW_SIPROUND_(v0, v1, v2, v3);
    v0 ^= b;
    v2 ^= 0xff;
    TW_SIPROUND_(v0, v1, v2, v3);
    TW_SIPROUND_(v0, v1, v2, v3);
    TW_SIPROUND_(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* SipHash-1-3 of in[0..len) under the key (k0, k1). */
static inline uint64_t tw_siphash13(const void *in, size_t len, uint64_t k0, uint64_t k1)
{
    const unsigned char *p = in;
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ k1;
    const unsigned char *end = p + (len & ~(size_t)7);
    for (; p != end; p += 8) {
        uint64_t m = tw_hash_load64le_(p);
        v3 ^= m;
        TW_SIPROUND_(v0, v1, v2, v3);
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)p[6] << 48; /* fall through */
    case 6: b |= (uint64_t)p[5] << 40; /* fall through */
    case 5: b |= (uint64_t)p[4] << 32; /* fall through */
    case 4: b |= (uint64_t)p[3] << 24; /* fall through */
    case 3: b |= (uint64_t)p[2] << 16; /* fall through */
    case 2: b |= (uint64_t)p[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)p[0]; break;
    default: break;
    }
    return tw_siphash13_end_(v0, v1, v2, v3, b);
}

/* Seeded mixer for integer keys. */
static inline uint64_t tw_hash_int(uint64_t key, uint64_t k0, uint64_t k1)
{
    uint64_t x = key ^ k0;
    x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x ^= k1;
    x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Home slot of hash h in an index of `cap` slots (Lemire's fast range
 * reduction of the high 32 bits; cap need not be a power of two). */
static inline uint32_t tw_hash_home(uint64_t h, uint32_t cap)
{
    return (uint32_t)(((h >> 32) * (uint64_t)cap) >> 32);
}

/* The seeds come from tw_random_seed_ (common/random.h). */

/* ---- tw_hash_mum: a seeded multiply-mix hash for short keys --------------
 *
 * For the cache's table, where SipHash-1-3 would be a third of a hit's
 * instructions. Same family as wyhash and rapidhash (a
 * 64x64->128-bit multiply folded by xor), written here: keys up to 16
 * bytes are read as two (overlapping) words a and b, longer ones fold 16
 * bytes a step into the state, and the result is
 *
 *     mix(lo ^ C0 ^ len, hi ^ C1),  (lo, hi) = (a ^ s1) * (b ^ state)
 *
 * with s1 and the initial state derived from the 128-bit per-instance seed
 * (tw_hash_mum_seed). Both operands of every multiply carry a secret word:
 * wyhash/rapidhash xor a public constant into one of them, so a key word
 * equal to that constant zeroes the product whatever the rest of the key
 * (a seed-independent multicollision); here that needs the secret.
 *
 * Flooding resistance: weaker than SipHash, which is a PRF (colliding keys
 * cannot be found without the seed, even by one who sees many hashes).
 * This is not a PRF: with the seed secret and random per instance, an
 * attacker who cannot observe hashes has no known way to build colliding
 * keys, but one who can measure hash-dependent timing learns more than
 * from SipHash. That is the level of Go's maps (AES-based memhash, or a
 * wyhash-derived fallback, under a per-process random seed). */

#if !defined(__SIZEOF_INT128__) || defined(TW_HASH_MUM64_TEST)
/* (*a, *b) = the low and high words of *a * *b, from 32-bit halves (for
 * compilers without a 128-bit type; test_cache_hit defines
 * TW_HASH_MUM64_TEST to compare it with the 128-bit product). */
static inline void tw_hash_mum64_(uint64_t *a, uint64_t *b)
{
    uint64_t ha = *a >> 32, hb = *b >> 32, la = (uint32_t)*a, lb = (uint32_t)*b;
    uint64_t rh = ha * hb, rm0 = ha * lb, rm1 = hb * la, rl = la * lb;
    uint64_t t = rl + (rm0 << 32), c = t < rl;
    uint64_t lo = t + (rm1 << 32);
    c += lo < t;
    *a = lo;
    *b = rh + (rm0 >> 32) + (rm1 >> 32) + c;
}
#endif

/* (*a, *b) = the low and high words of *a * *b. */
static inline void tw_hash_mum_(uint64_t *a, uint64_t *b)
{
#if defined(__SIZEOF_INT128__)
    __uint128_t r = (__uint128_t)*a * *b;
    *a = (uint64_t)r;
    *b = (uint64_t)(r >> 64);
#else
    tw_hash_mum64_(a, b);
#endif
}

static inline uint64_t tw_hash_mix_(uint64_t a, uint64_t b)
{
    tw_hash_mum_(&a, &b);
    return a ^ b;
}

#define TW_HASH_MUM_C0 UINT64_C(0x2d358dccaa6c78a5)
#define TW_HASH_MUM_C1 UINT64_C(0x8bb84b93962eacc9)
#define TW_HASH_MUM_C2 UINT64_C(0x4b33a62ed433d4a3)

/* The two secret words of tw_hash_mum, from a 128-bit random seed (once per
 * instance): out[0] the initial state, out[1] s1. */
static inline void tw_hash_mum_seed(const uint64_t seed[2], uint64_t out[2])
{
    out[0] = seed[0] ^ tw_hash_mix_(seed[0] ^ TW_HASH_MUM_C0, seed[1] ^ TW_HASH_MUM_C1);
    out[1] = seed[1] ^ tw_hash_mix_(seed[1] ^ TW_HASH_MUM_C2, out[0] ^ TW_HASH_MUM_C0);
}

static inline uint64_t tw_hash_load32le_(const unsigned char *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#else
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
#endif
}

/* tw_hash_mum of in[0..len) under the secret words k (tw_hash_mum_seed).
 * Reads no byte outside in[0..len). */
static inline uint64_t tw_hash_mum(const void *in, size_t len, const uint64_t k[2])
{
    const unsigned char *p = in;
    uint64_t state = k[0], a, b;
    if (len <= 16) {
        if (len >= 4) {
            size_t d = (len >> 3) << 2; /* 0 for 4-7 bytes, 4 for 8-16 */
            a = (tw_hash_load32le_(p) << 32) | tw_hash_load32le_(p + d);
            b = (tw_hash_load32le_(p + len - 4) << 32) | tw_hash_load32le_(p + len - 4 - d);
        } else if (len > 0) {
            a = ((uint64_t)p[0] << 16) | ((uint64_t)p[len >> 1] << 8) | p[len - 1];
            b = 0;
        } else {
            a = b = 0;
        }
    } else {
        size_t n = len;
        while (n > 16) {
            state = tw_hash_mix_(tw_hash_load64le_(p) ^ k[1], tw_hash_load64le_(p + 8) ^ state);
            p += 16;
            n -= 16;
        }
        a = tw_hash_load64le_(p + n - 16);
        b = tw_hash_load64le_(p + n - 8);
    }
    a ^= k[1];
    b ^= state;
    tw_hash_mum_(&a, &b);
    return tw_hash_mix_(a ^ TW_HASH_MUM_C0 ^ (uint64_t)len, b ^ TW_HASH_MUM_C1);
}

#endif /* TWHEEL_HASH_H */
