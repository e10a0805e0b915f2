#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Comments in src/ and include/ say what is and why, never when or how it was
# measured: no date, no time of day, no UTC, no machine load, no "was N, now
# M". The figures live in bench/README.md, the history in CHANGELOG.md.
#
#   tests/test_no_diaries.sh SOURCE_DIR
set -u
ROOT=${1:?source directory}
cd "$ROOT" || exit 1
pattern='\bUTC\b|\b[0-2][0-9]:[0-5][0-9]\b|\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b'
pattern="$pattern|\\bload (average )?[0-9]|\\b(was|from) [0-9.]+ ?[a-z]*,? now [0-9]"
if grep -rnE "$pattern" src include; then
    echo "0 passed, 1 failed: the lines above carry a date, a time or a load (figures go to bench/README.md, history to CHANGELOG.md)"
    exit 1
fi
echo "1 passed, 0 failed (no date, time of day or machine load in src/ and include/)"
