#!/usr/bin/env bash
# Builds, here (no GPU, no network, no CUDA toolkit needed), what the GPU device check runs,
# and packs it into .gpu/ (ignored by git) for a CUDA machine without Rust:
#   .gpu/pipetrain.gz      release `pipetrain` with `--features cuda`, stripped
#   .gpu/gpu-suite.gz      the GPU suite (tests/gpu.rs), dev profile (the build CI makes), stripped:
#                          a release test build would rebuild burn with the tests' extra
#                          `ndarray` feature (+25 min on 2 cores); the suite's time is on the GPU
#   .gpu/gpu-check.sh      the check itself (scripts/gpu-check.sh)
#   .gpu/peers/            the PyTorch peer of the GPU bench rows (scripts/peers/)
# Together they must stay under 64 MiB (the device machine's carry limit); this script fails
# if they do not. Usage, from the repository root:
#   bash scripts/gpu-pack.sh            # ~25 min cold on 2 cores, seconds when built
# Then, on the GPU machine, from the directory holding .gpu/:
#   bash .gpu/gpu-check.sh [OUTDIR]     # < 6 min; prints one table, writes OUTDIR/gpu-check.txt
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pipetrain/target}"
LIMIT=$((64 * 1024 * 1024))

cargo build --release --features cuda --bin pipetrain
suite=$(cargo test --features cuda --test gpu --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "gpu" and m.get("executable"):
        print(m["executable"])' | tail -1)
[ -n "$suite" ] || { echo "error: the GPU suite's test binary was not found" >&2; exit 1; }

rm -rf .gpu && mkdir -p .gpu/peers
strip -o .gpu/pipetrain "$CARGO_TARGET_DIR/release/pipetrain"
strip -o .gpu/gpu-suite "$suite"
gzip -9 .gpu/pipetrain .gpu/gpu-suite
cp scripts/gpu-check.sh .gpu/
cp scripts/peers/*.py .gpu/peers/
total=$(du -cb .gpu | tail -1 | cut -f1)
ls -l .gpu .gpu/peers
echo "packed: $total bytes in .gpu/ (limit $LIMIT)"
[ "$total" -lt "$LIMIT" ] || { echo "error: .gpu/ is over the 64 MiB carry limit" >&2; exit 1; }
