/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the cache: the input bytes become a cache
 * configuration and a sequence of operations (set, get, del, take, advance,
 * set_now) applied to a manual-clock cache and to the reference model of
 * tests/cache_model.h, which aborts at the first disagreement (single
 * threaded, fake clock). Layout: see cache_model.h. */
#include "cache_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct cmodel model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cm_run(&model, data, size);
    return 0;
}
