/* SPDX-License-Identifier: MIT */
/* Big blocks: mapped 2 MB aligned with huge-page advice (see bigmem.h).
 *
 * A mapping of size + 2 MB is trimmed to a 2 MB aligned start and a page
 * rounded end; only whole aligned 2 MB stretches can become huge pages, so
 * the tail under 2 MB stays in small pages and nothing is wasted but that
 * rounding to a page. madvise failing (no THP in the kernel, or "never")
 * is harmless: the block is simply in small pages. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#endif
#include "common/bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(MAP_ANONYMOUS) && defined(MAP_ANON)
#define MAP_ANONYMOUS MAP_ANON
#endif
#if !defined(MAP_ANONYMOUS) && defined(__linux__) &&                                     \
    (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) || \
     defined(__riscv) || defined(__powerpc__) || defined(__s390x__))
/* A strict _POSIX_C_SOURCE build (the amalgamation) hides it: Linux's value
 * on these architectures. */
#define MAP_ANONYMOUS 0x20
#endif
#if defined(__linux__)
/* Linux's value, and madvise declared here too, so that a strict
 * _POSIX_C_SOURCE build (the amalgamation) still asks for huge pages. */
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
extern int madvise(void *addr, size_t len, int advice);
#endif

#ifdef MAP_ANONYMOUS
static size_t big_page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

static size_t big_round(size_t size)
{
    size_t pg = big_page();
    return (size + pg - 1) / pg * pg;
}
#endif

void *tw_big_map_(size_t size)
{
#ifndef MAP_ANONYMOUS
    return malloc(size); /* no anonymous mappings here: plain memory */
#else
    if (size > SIZE_MAX / 2)
        return NULL;
    size_t len = big_round(size);
    size_t map = len + TW_BIG_ALIGN;
    char *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)p + TW_BIG_ALIGN - 1) & ~(uintptr_t)(TW_BIG_ALIGN - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    size_t tail = map - (size_t)(a - p) - len;
    if (tail)
        munmap(a + len, tail);
    return a;
#endif
}

void tw_big_hugify_(void *p, size_t size)
{
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    size_t len = big_round(size);
    if (madvise(p, len, MADV_HUGEPAGE) == 0)
        (void)madvise(p, len, MADV_COLLAPSE);
#else
    (void)p;
    (void)size;
#endif
}

void tw_big_unmap_(void *p, size_t size)
{
    if (!p)
        return;
#ifdef MAP_ANONYMOUS
    munmap(p, big_round(size));
#else
    (void)size;
    free(p);
#endif
}

void *tw_big_alloc_(size_t size)
{
    if (size < TW_BIG_MIN)
        return malloc(size);
    void *p = tw_big_map_(size);
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (p)
        (void)madvise(p, big_round(size), MADV_HUGEPAGE);
#endif
    return p;
}

void tw_big_free_(void *p, size_t size)
{
    if (!p)
        return;
    if (size >= TW_BIG_MIN)
        tw_big_unmap_(p, size);
    else
        free(p);
}
