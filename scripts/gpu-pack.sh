#!/usr/bin/env bash
# Builds, here (no GPU, no network, no CUDA toolkit needed), what the GPU device check runs,
# and packs it into .gpu/ (ignored by git) for a CUDA machine without Rust:
#   .gpu/pipetrain.gz      release `pipetrain` with `--features cuda`, stripped: the one binary
#                          (the GPU suite's cases are `pipetrain doctor`'s, issue 46)
#   .gpu/gpu-check.sh      the check itself (scripts/gpu-check.sh)
#   .gpu/nccl-probe.py     the NCCL probe (two ranks on one GPU)
#   .gpu/peers/            the PyTorch peer of the GPU bench rows (scripts/peers/)
#   .gpu/cache.tar.gz      the newest kernel cache committed under docs/device-checks/cache/
#                          (one DATE-GPU.tar.gz per check, as the check returns it: cubecl's
#                          cache database, 25+ MB loose, ~4 MB gzipped), if there is one;
#                          .gpu/cache.name names it
# Together they must stay under 64 MiB (the device machine's carry limit); this script prints
# the size and fails if they do not. Usage, from the repository root:
#   bash scripts/gpu-pack.sh            # ~15 min cold on 2 cores, seconds when built
# Then, on the GPU machine, from the directory holding .gpu/:
#   bash .gpu/gpu-check.sh [OUTDIR]     # <= 8 min; prints one report, writes OUTDIR/gpu-check.txt
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/pipetrain/target}"
LIMIT=$((64 * 1024 * 1024))

cargo build --release --features cuda --bin pipetrain

rm -rf .gpu && mkdir -p .gpu/peers
strip -o .gpu/pipetrain "$CARGO_TARGET_DIR/release/pipetrain"
gzip -9 .gpu/pipetrain
cp scripts/gpu-check.sh scripts/nccl-probe.py .gpu/
cp scripts/peers/*.py .gpu/peers/
# The newest committed cache (names sort by date): a DATE-GPU.tar.gz as the check returned it,
# or a DATE-GPU/ folder. (With none committed, find fails on a missing folder, which pipefail
# must not turn into the script's failure.)
cache=$({ find docs/device-checks/cache -mindepth 1 -maxdepth 1 \( -type d -o -name '*.tar.gz' \) 2>/dev/null || true; } | sort | tail -1)
if [ -n "$cache" ]; then
    if [ -d "$cache" ]; then tar czf .gpu/cache.tar.gz -C "$cache" .; else cp "$cache" .gpu/cache.tar.gz; fi
    basename "$cache" .tar.gz >.gpu/cache.name
    echo "kernel cache: $cache, $(du -b .gpu/cache.tar.gz | cut -f1) bytes packed"
else
    echo "kernel cache: none committed under docs/device-checks/cache/ (the check starts cold)"
fi
total=$(du -cb .gpu | tail -1 | cut -f1)
if [ "$total" -ge "$LIMIT" ] && [ -f .gpu/cache.tar.gz ]; then
    echo "warning: with the cache the pack is $total bytes, over $LIMIT: the cache is left out (the check starts cold)" >&2
    rm -f .gpu/cache.tar.gz .gpu/cache.name
    total=$(du -cb .gpu | tail -1 | cut -f1)
fi
ls -l .gpu .gpu/peers
echo "packed: $total bytes in .gpu/ (limit $LIMIT, $((total * 100 / LIMIT)) % of it)"
[ "$total" -lt "$LIMIT" ] || { echo "error: .gpu/ is over the 64 MiB carry limit" >&2; exit 1; }
