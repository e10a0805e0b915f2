#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# HACKING.md's tree is true: every file of include/ and src/ is listed in it
# (a line of the tree starting with its path), and every include/ or src/
# path it lists exists.
#
#   tests/test_hacking_tree.sh SOURCE_DIR
set -u
ROOT=${1:?source directory}
cd "$ROOT" || exit 1
listed=$(awk '/^## The tree/ { on = 1 } on && /^```/ { n++; if (n == 2) exit; next }
              on && n == 1 { print $1 }' HACKING.md | grep -E '^(src|include)/')
bad=0
for f in $(find include src -type f | sort); do
    grep -qxF "$f" <<<"$listed" || { echo "HACKING.md's tree lacks $f"; bad=1; }
done
for f in $listed; do
    [ -f "$f" ] || { echo "HACKING.md's tree lists $f, which does not exist"; bad=1; }
done
n=$(wc -l <<<"$listed")
[ "$bad" = 0 ] && echo "1 passed, 0 failed ($n files of include/ and src/ listed and present)" ||
    echo "0 passed, 1 failed"
exit "$bad"
