/* The whole library as one translation unit, for embedders who vendor one
 * file (compile with -DTW_STATIC_BUILD) and for compilers that optimise
 * better across files. Every layer's source is listed once, here. */
#include "common.c"
#include "wheel.c"
