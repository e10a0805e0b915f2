#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Instructions per call of named functions, from callgrind output files.

    callgrind_calls.py OUT_FILE... --fn NAME [--fn NAME ...]

For each NAME: the calls made to it (summed over every call site and every
file) and the inclusive instruction count per call (the function and all it
calls). Instruction counts do not depend on how busy the machine is, so two
builds compared this way differ only by their code. The files must be
written with --compress-strings=no --compress-pos=no (scripts/bench-callgrind
does so).
"""
import sys


def parse(path, names, acc):
    cfn = None
    pending = None  # (name, calls): the next cost line is that call's inclusive cost
    with open(path, errors="replace") as f:
        for line in f:
            if pending:
                parts = line.split()
                if len(parts) >= 2:
                    name, calls = pending
                    acc[name][0] += calls
                    acc[name][1] += int(parts[1])
                pending = None
                continue
            if line.startswith("cfn="):
                cfn = line[4:].strip()
            elif line.startswith("calls=") and cfn in names:
                pending = (cfn, int(line[6:].split()[0]))


def main(argv):
    files, names = [], []
    it = iter(argv)
    for a in it:
        if a == "--fn":
            names.append(next(it))
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            files.append(a)
    if not files or not names:
        print(__doc__, file=sys.stderr)
        return 2
    acc = {n: [0, 0] for n in names}
    for p in files:
        parse(p, set(names), acc)
    for n in names:
        calls, ir = acc[n]
        per = ir / calls if calls else float("nan")
        print(f"{n}\t{calls}\t{per:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
