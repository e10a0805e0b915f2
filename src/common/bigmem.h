/* SPDX-License-Identifier: MIT */
/* Internal: big blocks that the TLB can cover (src/common/bigmem.c).
 *
 * At 10^6 keys the hash indexes and the entry pools of tw_tasks and tw_cache
 * are tens of megabytes read in random order, and with 4 KB pages nearly
 * every keyed call misses the TLB as well as the cache (in a virtual machine
 * a TLB miss is a two-dimensional page walk: several more DRAM reads).
 * Linux's transparent huge pages are often "madvise" only, and glibc's
 * malloc does not madvise, so a block of TW_BIG_MIN bytes or more is mapped
 * here on its own, 2 MB aligned, with madvise(MADV_HUGEPAGE): the kernel may
 * then back each whole 2 MB of it with one huge page. Smaller blocks come
 * from malloc, so a small instance stays small.
 *
 * These are the library's own default; a user's tw_allocator is always used
 * instead when one is given (no madvise then: the user's memory is theirs).
 * Nothing here has state: whether huge pages are granted is the kernel's
 * business, asked per block.
 */
#ifndef TWHEEL_BIGMEM_H
#define TWHEEL_BIGMEM_H

#include <stddef.h>

/* Blocks of at least this many bytes are mapped with huge-page advice. */
#define TW_BIG_MIN ((size_t)2 << 20)
#define TW_BIG_ALIGN ((size_t)2 << 20)

/* A block of size bytes (> 0): mapped (zero-filled, TW_BIG_ALIGN aligned)
 * when size >= TW_BIG_MIN, else malloc'd (not zeroed). NULL on failure. */
void *tw_big_alloc_(size_t size);
/* Free a block of tw_big_alloc_ (p may be NULL); size as allocated. */
void tw_big_free_(void *p, size_t size);

/* A pool that fills a block piece by piece: tw_big_map_ maps size bytes
 * (TW_BIG_ALIGN aligned, zero-filled) *without* huge-page advice, so only
 * the pages written are resident; once the pool has filled it,
 * tw_big_hugify_ advises huge pages and asks the kernel (Linux 6.1+,
 * MADV_COLLAPSE) to collapse it now, a copy of at most 2 MB once per block
 * (older kernels collapse it later, in the background, or never).
 * tw_big_unmap_ frees it. Without anonymous mappings these are malloc and
 * free, and hugify does nothing. */
void *tw_big_map_(size_t size);
void tw_big_hugify_(void *p, size_t size);
void tw_big_unmap_(void *p, size_t size);

#endif /* TWHEEL_BIGMEM_H */
