/* SPDX-License-Identifier: MIT */
/* The whole library as one translation unit, for embedders who vendor one
 * file (compile with -DTW_STATIC_BUILD) and for compilers that optimise
 * better across files. Every layer's source is listed once, here. */
/* Before any system header: the cache needs POSIX (clock_gettime, threads). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "common.c"
#include "wheel.c"
#include "tasks.c"
#include "runner.c"
#include "cache_map.c"
#include "random.c"
#include "clock.c"
#include "cache_epoch.c"
#include "cache.c"
