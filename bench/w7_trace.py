#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a Redis-layer worker's lateness comes from, stage by stage.

Build the layer with -DTW_RR_TRACE (a debug build: each worker then writes,
at stop, one line per started task and per claim call to
$TW_RR_TRACE_FILE.<pid>), run a load, and give this script the prefix:

  cmake -S . -B build-trace -DCMAKE_BUILD_TYPE=RelWithDebInfo \\
        -DCMAKE_C_FLAGS=-DTW_RR_TRACE -DTWHEEL_BUILD_BENCH=ON -DTWHEEL_BUILD_REDIS=ON
  cmake --build build-trace -j2 --target w7_redis w7_worker
  TW_RR_TRACE_FILE=/tmp/tr build-trace/bench/w7_redis --spread-only \\
        --n 20000 --min-ms 1000 --max-ms 12800
  bench/w7_trace.py /tmp/tr

A line: due_ms due_local_ns fired_ns take_ns sent_ns reply_ns srv_us off_us
batch thread [exec_ns] (local times on CLOCK_MONOTONIC; srv_us the server's
TIME in START; off_us the best lower bound of server - local clock; exec_ns
when execute was called, absent in traces of builds before start_ahead_ms;
thread: the executor that ran it, since the armed queue not always the one
that started it). thread 9999 is a claim call: sent_ns and reply_ns span it, batch is the
tasks it returned.

Stages of a start, in us on the server's clock: cons (local due time vs due:
the clock bound's slack), wheel (fired vs local due: negative when the start
goes out ahead of the due time), fifo (waiting for an executor), req (sent
until the script ran), rep (script until the reply was read), hold (reply
read until execute: the wait for the due time, and earlier tasks of the
batch); e2e = due to execute (to the reply read without exec_ns). The
lateness itself splits into rlate (how late the reply was already: max(0,
reply read - due)) and wlate (the rest, after the reply: the first idle
executor's wake-up at the due time, earlier tasks of its batch).
"""
import glob
import sys
from collections import Counter


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    starts, claims = [], {}
    for f in sorted(glob.glob(sys.argv[1] + ".*")):
        claims[f] = []
        for line in open(f):
            a = list(map(int, line.split()))
            due, dl, fi, tk, se, rp, sv, off, b, th = a[:10]
            ex = a[10] if len(a) > 10 else rp
            if th == 9999:
                claims[f].append((se, rp, b))
                continue
            du = due * 1000
            e2e = ex / 1000 + off - du
            rlate = max(0, rp / 1000 + off - du)
            starts.append(dict(f=f, fired=fi, e2e=e2e, cons=dl / 1000 + off - du,
                               wheel=(fi - dl) / 1000, fifo=(tk - fi) / 1000,
                               req=sv - (se / 1000 + off), rep=rp / 1000 + off - sv,
                               hold=(ex - rp) / 1000, rlate=rlate, wlate=e2e - rlate))
    if not starts:
        print("no records")
        return 1
    n = len(starts)
    keys = ["e2e", "cons", "wheel", "fifo", "req", "rep", "hold", "rlate", "wlate"]
    print("%d starts" % n)
    for k in keys:
        v = sorted(s[k] for s in starts)
        print("%6s p50 %8.0f p90 %8.0f p99 %8.0f max %8.0f us"
              % (k, v[n // 2], v[int(0.9 * (n - 1))], v[int(0.99 * (n - 1))], v[-1]))
    starts.sort(key=lambda s: s["e2e"])
    tail = starts[int(0.99 * n):]
    print("the tail (e2e >= p99, %d starts), mean per stage:" % len(tail))
    for k in keys:
        print("%6s %8.0f us" % (k, sum(s[k] for s in tail) / len(tail)))
    print("largest stage in the tail:",
          dict(Counter(max(keys[1:6], key=lambda k: s[k]) for s in tail)))
    print("where the tail's lateness arose:",
          dict(Counter("rlate" if s["rlate"] >= s["wlate"] else "wlate" for s in tail)))
    # when: bursts of tail starts against claim rounds, per worker
    for f, cl in claims.items():
        mine = sorted(s["fired"] for s in tail if s["f"] == f)
        t0 = min([s["fired"] for s in starts if s["f"] == f] + [c[0] for c in cl] or [0])
        bursts = []
        for t in mine:
            t = (t - t0) / 1e6
            if bursts and t - bursts[-1][1] < 20:
                bursts[-1][1] = t
                bursts[-1][2] += 1
            else:
                bursts.append([t, t, 1])
        rounds = []
        for se, rp, b in sorted(cl):
            t, d = (se - t0) / 1e6, (rp - se) / 1e6
            if rounds and t - rounds[-1][1] < 5:
                rounds[-1][1] = t + d
                rounds[-1][2] += b
                rounds[-1][3] += 1
            else:
                rounds.append([t, t + d, b, 1])
        print("%s: tail bursts at ms (+length, starts): %s" % (
            f, " ".join("%.0f(+%.0f,%d)" % tuple(x) for x in bursts[:30])))
        print("%s: claim calls back to back at ms (+span, tasks, calls): %s" % (
            f, " ".join("%.0f(+%.0f,%d,%d)" % tuple(x) for x in rounds[:30])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
