#!/usr/bin/env bash
# bf16 against fp32 on the CPU, pipetrain beside PyTorch (issue 35), alternating in one run:
# MLP-8x1024 on batch 256, one worker with one thread (pipetrain's `single device: 1 worker,
# m=1` row) against torch on one thread, in fp32 and under torch.autocast("cpu", bfloat16).
#
#   bash scripts/bench-bf16-cpu.sh [PYTHON]     # PYTHON: a python with torch (default
#                                               # /tmp/peer-venv/bin/python)
#
# Needs a release build (cargo build --release). Prints the CPU model, then one line per run.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PY=${1:-/tmp/peer-venv/bin/python}
P="$ROOT/target/release/pipetrain"
[ -x "$P" ] || { echo "build first: cargo build --release" >&2; exit 2; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
echo "torch: $("$PY" -c 'import torch; print(torch.__version__)')"
ours() {
    "$P" bench --only "single device: 1 worker, m=1 (" --steps 8 --warmup 2 --precision "$1" 2>/dev/null |
        awk -F'|' '/^[|] single device: 1 worker, m=1 [(]/ { gsub(/ /, "", $4); print $4; exit }'
}
theirs() {
    "$PY" "$HERE/peers/torch_gpu.py" --device cpu --threads 1 --width 1024 --layers 8 --batch 256 \
        --steps 8 --warmup 2 "$@" | "$PY" -c 'import json, sys; print(round(json.load(sys.stdin)["median"]))'
}
for rep in 1 2; do
    a=$(ours fp32); b=$(theirs); c=$(ours bf16); d=$(theirs --bf16)
    echo "rep $rep: pipetrain fp32 $a, torch fp32 $b, pipetrain bf16 $c, torch autocast bf16 $d samples/s"
done
