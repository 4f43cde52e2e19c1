#!/usr/bin/env python3
"""Old vs new `throughput` bench binaries, alternated in one session: per row, every run's
samples/s and the ratio of the medians.

    for i in 1 2 3; do for b in old new; do ./bench-$b --bench > runs/$b-$i.log; done; done
    python3 benches/compare_runs.py runs/old-*.log -- runs/new-*.log
"""
import re
import statistics
import sys


def parse(path):
    rows = {}
    for line in open(path):
        m = re.match(r"^(single|2 x single|gpipe|1f1b)\s+(\d+)\s+(\d+)\s+([\d.]+)", line)
        if m:
            rows[f"{m.group(1)} m={m.group(2)} p={m.group(3)}"] = float(m.group(4))
            continue
        m = re.match(r"^(\d+ x \d+, m=\d+(?:, ZeRO-1)?)\s+([\d.]+)", line)
        if m:
            rows["dp " + m.group(1)] = float(m.group(2))
    return rows


def main(argv):
    split = argv.index("--")
    old = [parse(p) for p in argv[:split]]
    new = [parse(p) for p in argv[split + 1 :]]
    print(f"{'row':26} {'old samples/s':>36} {'new samples/s':>36} {'new/old':>8}")
    for key in old[0]:
        o = [r[key] for r in old if key in r]
        n = [r[key] for r in new if key in r]
        ratio = statistics.median(n) / statistics.median(o)
        print(
            f"{key:26} {' '.join(f'{x:6.0f}' for x in o):>36} "
            f"{' '.join(f'{x:6.0f}' for x in n):>36} {ratio:8.2f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
