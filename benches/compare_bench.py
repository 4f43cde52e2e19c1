#!/usr/bin/env python3
"""Old vs new `pipetrain bench` documents (--out FILE), alternated in one session on an idle
machine: per row, every run's samples/s and the ratio of the medians, then the median and the
geometric mean of the row ratios.

    for i in 1 2 3; do for b in old new; do ./pipetrain-$b bench --gpt-width 0 \
        --micro-batches 1,8 --steps 6 --out runs/$b-$i.md; done; done
    python3 benches/compare_bench.py runs/old-*.md -- runs/new-*.md
"""
import re, statistics, sys
def parse(p):
    rows = {}
    for line in open(p):
        c = [x.strip() for x in line.strip().strip('|').split('|')]
        if len(c) > 3 and re.fullmatch(r'\d+', c[2] or '') and c[0] not in ('configuration',):
            rows[c[0]] = float(c[2])
    return rows
argv = sys.argv[1:]; k = argv.index('--')
old = [parse(p) for p in argv[:k]]; new = [parse(p) for p in argv[k+1:]]
ratios = []
print(f"{'row':70} {'old':>22} {'new':>22} {'new/old':>8}")
for key in old[0]:
    o = [r[key] for r in old if key in r]; n = [r[key] for r in new if key in r]
    if not n: continue
    r = statistics.median(n) / statistics.median(o); ratios.append(r)
    print(f"{key[:70]:70} {' '.join(f'{x:6.0f}' for x in o):>22} {' '.join(f'{x:6.0f}' for x in n):>22} {r:8.2f}")
print(f"median of row ratios: {statistics.median(ratios):.3f} over {len(ratios)} rows; geometric mean {statistics.geometric_mean(ratios):.3f}")
