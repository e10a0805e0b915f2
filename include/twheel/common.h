/* SPDX-License-Identifier: MIT */
/** @file
 * twheel: definitions shared by every layer.
 *
 * Version macros, the export macro, TW_NEVER, the error codes (one X-macro
 * list, negative values, with tw_strerror/tw_err_name) and the optional
 * allocator hook.
 *
 * Conventions every layer (tasks, clock, runner, cache, redis) follows, so
 * that what is learnt of one holds for the others:
 *  - new: `int x_new(struct x **out, ... cfg)`, the out pointer first;
 *    0 and *out set, or an error code.
 *  - free: `int x_free(struct x *)`. 0 when freed, and for NULL (a no-op, as
 *    free(3)); TW_EBUSY when the object cannot be freed from where the call
 *    is made or while others still use it (from its own callback or thread,
 *    a clock with members, a pool with runners), and nothing is done then.
 *    Every free returns int, those that cannot fail included (they return
 *    0), so a caller checks every free the same way. The core wheel lives
 *    in the caller's memory and has no free: tw_wheel_destroy returns the
 *    number of timers it detached.
 *  - stats: `int x_stats(const struct x *, struct x_stats *out)`. 0 with
 *    *out filled, TW_EINVAL for a NULL object or out (*out untouched), or an
 *    error of the layer's own, documented with the call (tw_redis_stats:
 *    TW_EIO, the rest filled).
 *  - keys: a key is `const void *key, size_t key_len`, in parameters and in
 *    struct fields alike; a batched call's array of lengths is `key_lens`.
 *  - units: one field name means one unit in every struct. Where a quantity
 *    is counted in different units by different layers, the name says which
 *    (`delay_ticks` in tw_tasks_item, `delay_ns` in tw_runner_item,
 *    `delay_ms` in tw_redis_item).
 */
#ifndef TWHEEL_COMMON_H
#define TWHEEL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Major version number (0: the API may still change between minor versions). */
#define TW_VERSION_MAJOR 0
/** Minor version number. */
#define TW_VERSION_MINOR 1
/** Patch version number. */
#define TW_VERSION_PATCH 0
/** The version as one number, 0xMMmmpp, as tw_version() returns it at run time. */
#define TW_VERSION_HEX \
    ((TW_VERSION_MAJOR << 16) | (TW_VERSION_MINOR << 8) | TW_VERSION_PATCH)

/** Everything the library exports carries TW_API; the rest is built with hidden
 * visibility. Define TW_STATIC_BUILD when vendoring the amalgamation. */
#if defined(TW_STATIC_BUILD)
#define TW_API
#elif defined(__GNUC__) || defined(__clang__)
#define TW_API __attribute__((visibility("default")))
#else
#define TW_API
#endif

/** The value meaning "no deadline" where a function returns a tick, a
 * deadline, an expiry or a timeout (tw_wheel_next_expiry,
 * tw_tasks_next_expiry, ...). Here, not in twheel/wheel.h, so that every
 * header that returns or mentions it (each includes this one) makes it
 * available. */
#define TW_NEVER UINT64_MAX

/** Error codes: every public call that can fail returns 0 (or a count) on
 * success and one of these negative values on failure.
 *
 * NULL, one rule for every layer:
 *  - a call that can fail returns TW_EINVAL for a NULL object or a NULL
 *    required argument, and changes nothing (a call returning a pointer
 *    returns NULL instead);
 *  - a getter, a call with no error return that reads a count, a time, a
 *    flag or a deadline, returns the value meaning "nothing" for a NULL
 *    object: 0 for counts and times, false for flags, TW_NEVER (UINT64_MAX)
 *    for deadlines, expiries and timeouts;
 *  - stats calls can fail: TW_EINVAL for a NULL object or out, which they
 *    leave untouched;
 *  - free calls ignore NULL and return 0, config_init calls ignore NULL
 *    (tw_wheel_destroy, which returns a count, returns TW_EINVAL).
 * Each header restates the rule for its own getters. */
#define TW_ERRNO_MAP(XX)                                                    \
    XX(EINVAL, -1, "invalid argument")                                      \
    XX(EBUSY, -2, "not allowed now: from a callback, or while still in use")  \
    XX(ERANGE, -3, "tick out of range: the clock is at its end")            \
    XX(ENOMEM, -4, "out of memory")                                         \
    XX(ENOENT, -5, "no such key")                                           \
    XX(ECLOSED, -6, "closed: stop has been called")                         \
    XX(EFULL, -7, "pending-task limit reached")                             \
    XX(E2BIG, -8, "key or payload too long")                                \
    XX(ESYS, -9, "system call failed (thread, clock or lock)")              \
    XX(EIO, -10, "server unreachable or connection lost: nothing written")  \
    XX(EPROTO, -11, "unexpected reply from the server")                     \
    XX(EUNKNOWN, -12, "outcome unknown: the call may have been applied")    \
    XX(EOOM, -13, "the server is out of memory (maxmemory)")                \
    XX(ECONFLICT, -14, "the server or queue is configured otherwise")       \
    XX(EAUTH, -15, "the server refused the credentials or lacks a permission") \
    XX(EREPLICAS, -16, "written on the master, not confirmed by enough replicas") \
    XX(ETLS, -17, "TLS failed: certificate not verified or refused, or no TLS")

/** The error codes, generated from TW_ERRNO_MAP: TW_ followed by the name.
 *
 * | code | value | meaning |
 * |---|---:|---|
 * | TW_EINVAL | -1 | invalid argument |
 * | TW_EBUSY | -2 | not allowed now: from a callback, or while still in use (advancing a wheel from its own callback; freeing a clock or pool that still has members or runners; dropping a queue a worker holds) |
 * | TW_ERANGE | -3 | tick out of range: the clock is at its end |
 * | TW_ENOMEM | -4 | out of memory |
 * | TW_ENOENT | -5 | no such key |
 * | TW_ECLOSED | -6 | closed: stop has been called |
 * | TW_EFULL | -7 | pending-task limit reached |
 * | TW_E2BIG | -8 | key or payload too long |
 * | TW_ESYS | -9 | system call failed (thread, clock or lock) |
 * | TW_EIO | -10 | server unreachable or connection lost before the call was sent: nothing written (Redis layer) |
 * | TW_EPROTO | -11 | unexpected reply from the server (Redis layer) |
 * | TW_EUNKNOWN | -12 | the call was sent and its reply lost (timeout, connection closed): it may or may not have been applied; retrying a set, move or remove is safe (Redis layer) |
 * | TW_EOOM | -13 | the server refused a write because it reached maxmemory (Redis layer) |
 * | TW_ECONFLICT | -14 | the server's or the queue's configuration conflicts with the client's: an evicting maxmemory-policy, or another partition count stored with the queue (Redis layer) |
 * | TW_EAUTH | -15 | the server refused the credentials (NOAUTH, WRONGPASS), or its ACL refused a command, key or channel the layer needs (NOPERM); the server's words: tw_redis_last_error, or tw_redis_config.errbuf for tw_redis_new (Redis layer) |
 * | TW_EREPLICAS | -16 | written on the master, but fewer replicas than tw_redis_config.wait_replicas confirmed it within wait_timeout_ms: applied, and kept unless a failover promotes a replica that lacks it; retrying is safe (Redis layer) |
 * | TW_ETLS | -17 | TLS failed: the server's certificate not verified (CA, host name: OpenSSL's words in the text), the client's certificate refused or missing, a TLS file unreadable, or TLS asked of a build without it (Redis layer) |
 */
enum tw_errno {
#define TW_ERRNO_ENUM_(name, value, text) TW_##name = (value),
    TW_ERRNO_MAP(TW_ERRNO_ENUM_)
#undef TW_ERRNO_ENUM_
};

/** A human-readable message for an error code; never NULL ("unknown error"
 * for a value that is not a twheel error code). */
TW_API const char *tw_strerror(int err);
/** The symbolic name ("TW_EINVAL"); "TW_UNKNOWN" for a value that is not one. */
TW_API const char *tw_err_name(int err);

/** Library version as "MAJOR.MINOR.PATCH", and as TW_VERSION_HEX. */
TW_API const char *tw_version_string(void);
/** The library's version as TW_VERSION_HEX: compare it with the macro to
 * check that the library linked is the one the headers describe. */
TW_API unsigned tw_version(void);

/** Optional allocator hook, Lua-style: one function does it all.
 *  - new_size > 0:  return a block of new_size bytes holding the first
 *                   min(old_size, new_size) bytes of ptr (ptr may be NULL);
 *                   NULL on failure, ptr untouched.
 *  - new_size == 0: free ptr (which may be NULL) and return NULL.
 *
 * The layers that allocate (tasks, runner, cache) take a const pointer to one;
 * NULL means the C library's realloc/free. The core wheel never allocates. */
typedef void *tw_alloc_fn(void *ctx, void *ptr, size_t old_size, size_t new_size);

/** An allocator: the hook and its context, passed by const pointer in the
 * configurations of tw_tasks, tw_runner and tw_cache (which copy it). */
struct tw_allocator {
    tw_alloc_fn *fn; /**< required: the hook */
    void *ctx;       /**< first argument of every call of fn */
};

#ifdef __cplusplus
}
#endif

#endif /* TWHEEL_COMMON_H */
