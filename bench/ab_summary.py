#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The summary of a scripts/bench-ab run, from its logs.

    ab_summary.py DIR [--all]

DIR holds rR-old-WORK.log and rR-new-WORK.log (and rR-LABEL-coreK/ with
bench_twheel's wK.csv). Per figure: the median over the rounds of each
build, and the median (lowest - highest) of the per-round cost ratios
new / old: > 1 means the new build is slower in that round; and the ratio
of the two builds' best rounds (the least disturbed run of each, which on a
shared machine is often the steadier figure). A rate (ops/s) is turned into
a cost (old / new). Without --all, bench_twheel's figures at
1e3 and 1e4 timers (a few microseconds a cell) are left out.
"""
import csv
import glob
import os
import re
import statistics
import sys

COST, RATE = 1, -1


def core(d, out):
    for path in sorted(glob.glob(os.path.join(d, "w[1-4].csv"))):
        wl = os.path.basename(path)[:2].upper()
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get("status") != "ok":
                    continue
                n = int(row["n"])
                for col, v in row.items():
                    if col.endswith(" ns") or col.endswith(" us") or col == "ms/60s":
                        out[f"{wl} {row['impl']} 1e{len(str(n)) - 1} {col}"] = (float(v), COST)


def keyed(text, out):
    for m in re.finditer(r"^csv,batch,(\w+),(\w+),\d+,\d+,([\d.]+),([\d.]+)", text, re.M):
        keys, op, s, b = m.groups()
        out[f"W5 {keys} {op} single ns"] = (float(s), COST)
        out[f"W5 {keys} {op} batched ns"] = (float(b), COST)


def w6(text, out):
    for m in re.finditer(r"^zipf 0.99, +(\d+)% writes, (\w+) *, (\d) threads? *: +([\d.]+) M ops/s",
                         text, re.M):
        w, lock, t, v = m.groups()
        out[f"W6 zipf {w}% writes, {lock}, {t} thr, M ops/s"] = (float(v), RATE)
    for m in re.finditer(r"slack shift (\d)[^:]*: ([\d.]+) ns per key", text):
        out[f"W6 expiry, slack shift {m.group(1)}, ns/key"] = (float(m.group(2)), COST)
    m = re.search(r"reads during it: \d+, p50 ([\d.]+) us, p99 ([\d.]+) us", text)
    if m:
        out["W6 mass expiry, read p50 us"] = (float(m.group(1)), COST)
        out["W6 mass expiry, read p99 us"] = (float(m.group(2)), COST)
    m = re.search(r"gone ([\d.]+) s after the last was due", text)
    if m:
        out["W6 mass expiry, gone after the last due, s"] = (float(m.group(1)), COST)


def runner(text, out):
    for m in re.finditer(r"^csv,w8,twheel,(\d+),(\d+),(\d+),([\d.]+),([\d.]+),([\d.]+),\d+,([\d.]+)",
                         text, re.M):
        p, _, ops, p50, p99, mx, lw = m.groups()
        out[f"W8 runner {p} prod, M ops/s"] = (float(ops) / 1e6, RATE)
        out[f"W8 runner {p} prod, lateness p50 ms"] = (float(p50), COST)
        out[f"W8 runner {p} prod, lateness p99 ms"] = (float(p99), COST)


def cache(text, out):
    for m in re.finditer(r"^zipf 0.99, (\d+/\d+), +(\d) threads? *: +([\d.]+) M ops/s, +([\d.]+) CPU",
                         text, re.M):
        mix, t, ops, ns = m.groups()
        out[f"W8 cache {mix}, {t} thr, M ops/s"] = (float(ops), RATE)
        out[f"W8 cache {mix}, {t} thr, CPU ns/op"] = (float(ns), COST)
    for m in re.finditer(r"^hot set \(1,000 keys\), 100% get, (\d) threads? *: +([\d.]+) M ops/s, ([\d.]+)",
                         text, re.M):
        out[f"W8 cache hot set, {m.group(1)} thr, CPU ns/get"] = (float(m.group(3)), COST)
    for m in re.finditer(r"uniform: (\w+) +([\d.]+) ns/op", text):
        out[f"W8 cache uniform {m.group(1)} ns"] = (float(m.group(2)), COST)


def w7(text, out):
    m = re.search(r"twheel spread: p50/p99/max ([\d.]+)/([\d.]+)/([\d.]+) ms, Redis CPU ([\d.]+) s "
                  r"per 1e5 tasks, ([\d.]+) script calls per task \(([\d.]+) us in scripts\), (\d+) claim",
                  text)
    if m:
        v = [float(x) for x in m.groups()]
        out["W7 spread lateness p50 ms"] = (v[0], COST)
        out["W7 spread lateness p99 ms"] = (v[1], COST)
        out["W7 spread lateness max ms"] = (v[2], COST)
        out["W7 Redis CPU s per 1e5 tasks"] = (v[3], COST)
        out["W7 script calls per task"] = (v[4], COST)
        out["W7 us in scripts per task"] = (v[5], COST)
        out["W7 claim calls"] = (v[6], COST)
    m = re.search(r"per task: ([\d.]+) commands, (\d+) AOF bytes, (\d+) bytes in", text)
    if m:
        out["W7 Redis commands per task"] = (float(m.group(1)), COST)
        out["W7 AOF bytes per task"] = (float(m.group(2)), COST)


PARSERS = {"keyed": keyed, "w6": w6, "runner": runner, "cache": cache, "w7": w7}


def figures(d, r, label):
    out = {}
    for cdir in sorted(glob.glob(os.path.join(d, f"r{r}-{label}-core*"))):
        if os.path.isdir(cdir):
            core(cdir, out)
    for work, parse in PARSERS.items():
        p = os.path.join(d, f"r{r}-{label}-{work}.log")
        if os.path.exists(p):
            with open(p, errors="replace") as f:
                parse(f.read(), out)
    return out


def fmt(x):
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    d, full = argv[0], "--all" in argv
    rounds = sorted({int(m.group(1)) for p in os.listdir(d)
                     for m in [re.match(r"r(\d+)-", p)] if m})
    per = {}  # name -> list of (old, new, kind), one per round with both
    order = []
    for r in rounds:
        old, new = figures(d, r, "old"), figures(d, r, "new")
        for k, (o, kind) in old.items():
            if k in new:
                if k not in per:
                    per[k] = []
                    order.append(k)
                per[k].append((o, new[k][0], kind))
    print(f"{len(rounds)} rounds; cost ratio = new / old per round (a rate inverted), "
          "median (lowest - highest); best: the best round of each; > 1: new slower\n")
    print("| figure | old median | new median | cost ratio new/old | range | best new/best old |")
    print("|---|--:|--:|--:|--:|--:|")
    for k in order:
        if not full and re.match(r"W[1-4] \S+ 1e[34] ", k):
            continue
        rows = per[k]
        ratios = []
        for o, n, kind in rows:
            if o > 0 and n > 0:
                ratios.append(n / o if kind == COST else o / n)
        om = statistics.median(o for o, _, _ in rows)
        nm = statistics.median(n for _, n, _ in rows)
        kind = rows[0][2]
        best = min if kind == COST else max
        bo, bn = best(o for o, _, _ in rows), best(n for _, n, _ in rows)
        b = "-"
        if bo > 0 and bn > 0:
            b = f"{(bn / bo if kind == COST else bo / bn):.3f}"
        if ratios:
            print(f"| {k} | {fmt(om)} | {fmt(nm)} | {statistics.median(ratios):.3f} | "
                  f"{min(ratios):.2f}-{max(ratios):.2f} | {b} |")
        else:
            print(f"| {k} | {fmt(om)} | {fmt(nm)} | - | - | {b} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
