/* SPDX-License-Identifier: MIT */
/** @file
 * twheel: timing wheels for C. One include for every layer. */
/** @mainpage twheel API reference
 *
 * Timing wheels for C, in layers; each is usable on its own and depends only
 * on the layers below it. Pick one:
 *
 * | layer | header | for |
 * |---|---|---|
 * | core wheel, struct tw_wheel | twheel/wheel.h | timeouts inside one event loop: intrusive timers, no threads, no clock, no allocation |
 * | keyed tasks, struct tw_tasks | twheel/tasks.h | delayed tasks by key (go-zero's TimingWheel API), one thread |
 * | runner, struct tw_runner | twheel/runner.h | the same from any thread, on CLOCK_MONOTONIC, with an executor pool |
 * | TTL cache, struct tw_cache | twheel/cache.h | expiring key/value data: TTL, LRU cap, loader with single flight |
 * | durable tasks, struct tw_redis | twheel/redis.h | delayed tasks kept in Redis, shared by worker processes (library twheel_redis) |
 *
 * twheel/common.h holds what every layer shares: the error codes (enum
 * tw_errno, tw_strerror()), the version and the allocator hook. Include
 * twheel.h for every in-process layer, twheel/redis.h for the durable one.
 *
 * Each header opens with its layer's rules, threads and costs; docs/contracts.md
 * in the source tree states every layer's contract, and README.md shows a quick
 * start per layer.
 */
#ifndef TWHEEL_H
#define TWHEEL_H

#include "twheel/common.h"
#include "twheel/wheel.h"
#include "twheel/tasks.h"
#include "twheel/runner.h"
#include "twheel/clock.h"
#include "twheel/cache.h"

#endif /* TWHEEL_H */
