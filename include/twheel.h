/* SPDX-License-Identifier: MIT */
/* twheel: timing wheels for C. One include for every layer. */
#ifndef TWHEEL_H
#define TWHEEL_H

#include "twheel/common.h"
#include "twheel/wheel.h"
#include "twheel/tasks.h"
#include "twheel/runner.h"
#include "twheel/clock.h"
#include "twheel/cache.h"

#endif /* TWHEEL_H */
