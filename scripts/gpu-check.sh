#!/usr/bin/env bash
# The device check: pipetrain's GPU rows beside PyTorch at both matmul precisions, the GPU suite,
# the --verify commands of issues 25 and 34 with both hand-offs, the replica drift count, and
# the kernels launched per step beside PyTorch's, from prebuilt binaries, on any CUDA machine
# (no Rust, no network). Every A/B of issue 34 is a run-time switch of the one binary:
# --matmul-precision fp32|tf32, --handoff host|device, --timing host|device.
# Prints one report and writes it to OUTDIR/gpu-check.txt (OUTDIR: $1, else $OUT, else .).
#
# Needs: .gpu/ as scripts/gpu-pack.sh makes it (this script sits in it), an NVIDIA driver,
# libnvrtc (found in PyTorch's wheels or a CUDA install), and python3 with torch for the
# PyTorch columns (left out, loudly, without it).
#
# Budget: CHECK_SECONDS (default 540). CHECK_SECTIONS picks the sections, which run in this
# order whatever order they are named in: diag16 (bf16's first use with cubecl's logs), suite,
# verify, bench16 (the bf16 rows beside torch.autocast), bench (fp32 beside PyTorch fp32), tf32
# (tf32 beside PyTorch tf32), device (--handoff device), counts; the default is
# "suite verify bench tf32 device counts". PIPETRAIN_GPU_SUITE_SECTIONS picks the suite's
# sections (tests/gpu.rs). A section
# that would start past the budget is skipped and says so. FP32_ONLY limits the fp32 bench to
# the rows whose name holds it (bench's --only); DRIFT_RUNS (default 5) sets the drift count's
# runs per hand-off; BENCH_AUTOTUNE_LEVEL, when set, is the bench rows' CUBECL_AUTOTUNE_LEVEL. With autotune on, the first use of every matmul shape tunes it (the H100 run of
# 2026-11-27 saw 18 s for one bench row's first step, and a tf32 bench whose first row did not
# finish in 110 s): cubecl keeps the results on disk, so a second check on the same machine is
# much faster. The suite runs at CUBECL_AUTOTUNE_LEVEL=minimal (correctness, not speed).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUTDIR=$(mkdir -p "${1:-${OUT:-.}}" && cd "${1:-${OUT:-.}}" && pwd)
WORK=$(mktemp -d)
REPORT="$OUTDIR/gpu-check.txt"
BUDGET=${CHECK_SECONDS:-540}
SECTIONS=" ${CHECK_SECTIONS:-suite verify bench tf32 device counts} "
# `want NAME`: whether section NAME was asked for.
want() { [[ $SECTIONS == *" $1 "* ]]; }
: >"$REPORT"
say() { printf '%s\n' "$*" | tee -a "$REPORT"; }
# `left N`: true if N more seconds fit in the budget; else says the section is skipped.
left() {
    if [ $((SECONDS + $1)) -le "$BUDGET" ]; then return 0; fi
    say "skipped: $2 (${SECONDS}s of the ${BUDGET}s budget spent)"
    return 1
}

gunzip -c "$HERE/pipetrain.gz" >"$WORK/pipetrain" && chmod +x "$WORK/pipetrain"
gunzip -c "$HERE/gpu-suite.gz" >"$WORK/gpu-suite" && chmod +x "$WORK/gpu-suite"
P="$WORK/pipetrain"

# libnvrtc: pipetrain's CUDA build compiles its kernels with NVRTC at run time.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
    for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null) \
        /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
            export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            break
        fi
    done
fi
[ -d /usr/local/cuda ] && export CUDA_PATH=/usr/local/cuda
# The autotune cache of every run below: one folder, so that later runs reuse what the first
# tuned (cubecl keeps it under the outermost Cargo.toml's target/, else the user cache).
cd "$WORK" || exit 1

say "pipetrain device check, $(date -u +%FT%TZ)"
say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
say ""

peer=(--compare-pytorch "$(command -v python3)" --peers "$HERE/peers")
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    say "note: python3 with a CUDA torch is not available here: pipetrain's rows only, no PyTorch column"
    peer=()
fi

# 0. bf16's first use on a GPU, watched (first, so that a stuck bf16 is known before the rest): one tiny bf16 run (2 steps, width 64) with cubecl's
#     compilation and autotune logs, to tell slow tuning from a hang (the 2026-11-27 check saw
#     no bf16 result within 240 s in the suite and 30 s from the CLI).
if want diag16 && left 100 "the bf16 first-use diagnosis"; then
    say "== bf16 first use: pipetrain train --precision bf16, 2 steps, width 64, cubecl's logs"
    dir=$(mktemp -d)
    printf '[compilation.logger]\nlevel = "basic"\nfile = "%s/cubecl.log"\n[autotune.logger]\nlevel = "minimal"\nfile = "%s/cubecl.log"\n' \
        "$dir" "$dir" >"$dir/cubecl.toml"
    start=$SECONDS
    (cd "$dir" && timeout 90 "$P" train --device cuda:0 --width 64 --steps 2 --precision bf16 --verify >"$dir/run.log" 2>&1)
    say "exit $? after $((SECONDS - start)) s; the run's last lines:"
    tail -5 "$dir/run.log" | tee -a "$REPORT"
    say "cubecl log: $( (wc -l <"$dir/cubecl.log") 2>/dev/null || echo 0) lines; its last 15:"
    tail -15 "$dir/cubecl.log" 2>/dev/null | cut -c1-200 | tee -a "$REPORT"
    tail -c 8000000 "$dir/cubecl.log" >"$OUTDIR/cubecl-bf16.log" 2>/dev/null
    say ""
fi

# 1. The GPU suite at fp32 (one table of its own, with its own verdicts).
if want suite && left 60 "the GPU suite"; then
    say "== GPU suite (tests/gpu.rs) at fp32, against single-device training on the same GPU"
    limit=$((BUDGET - SECONDS - 60))
    [ "$limit" -gt 240 ] && limit=240
    CUBECL_AUTOTUNE_LEVEL=${CUBECL_AUTOTUNE_LEVEL:-minimal} PIPETRAIN_GPU_SUITE_TABLE="$WORK/suite.txt" timeout "$limit" "$WORK/gpu-suite" \
        every_equivalence_case_on_the_gpu --nocapture --test-threads 1 >"$WORK/suite.log" 2>&1
    suite_rc=$?
    if [ -s "$WORK/suite.txt" ]; then
        grep -v ' ok$' "$WORK/suite.txt" | tee -a "$REPORT"
        say "(the rows that passed are in suite.txt)"
        cp "$WORK/suite.txt" "$OUTDIR/suite.txt"
    else
        say "no table (stopped before the end): the verdicts so far, failures first"
        grep -c '^ok: ' "$WORK/suite.log" | sed 's/^/passed so far: /' | tee -a "$REPORT"
        grep -v '^ok: ' "$WORK/suite.log" | tail -25 | tee -a "$REPORT"
    fi
    say "suite exit code: $suite_rc (124: stopped at its ${limit}s limit)"
    cp "$WORK/suite.log" "$OUTDIR/suite.log" 2>/dev/null
    say ""
fi

# 2. --verify (reference: the same GPU, at the same precision) and the replica drift.
verify_row() {
    left 30 "pipetrain train $*" || return 0
    local out rc diff start=$SECONDS
    out=$(timeout 120 "$P" train "$@" 2>&1)
    rc=$?
    diff=$(printf '%s\n' "$out" | sed -n 's/^verify: max_rel_diff=\([^ ]*\).*/\1/p' | tail -1)
    local verdict=ok
    [ "$rc" -eq 0 ] || verdict="FAILED (exit $rc: $(printf '%s\n' "$out" | grep -m1 -E 'FAILED|error' | cut -c1-120))"
    printf '%-100s  %-12s  %4ss  %s\n' "pipetrain train $*" "${diff:--}" "$((SECONDS - start))" "$verdict" | tee -a "$REPORT"
}
verify_section() {
say "== --verify (reference: the same GPU at the same matmul precision)"
printf '%-100s  %-12s  %5s  %s\n' "command" "max_rel_diff" "time" "verdict" | tee -a "$REPORT"
R=(--device cuda:0 --stages 1 --replicas 2 --micro-batches 1 --steps 10 --width 64 --verify --optimizer sgd --lr 0.01)
verify_row "${R[@]}" --handoff host
verify_row "${R[@]}" --handoff device
verify_row --device cuda:0 --stages 2 --replicas 2 --verify --handoff device
verify_row --device cuda:0 --stages 2 --micro-batches 4 --schedule zb-h1 --steps 5 --width 64 --verify --end-to-end
verify_row --device cuda:0 --stages 2 --micro-batches 4 --schedule zb-h1 --steps 5 --width 64 --verify --end-to-end --matmul-precision tf32
verify_row --device cuda:0 --model gpt --stages 2 --micro-batches 4 --steps 5 --verify --optimizer sgd --lr 0.01 --end-to-end
verify_row --device cuda:0 --stages 2 --micro-batches 4 --steps 5 --width 64 --verify --verify-device cpu
verify_row --device cuda:0 --stages 2 --micro-batches 4 --steps 5 --width 64 --verify --verify-device cpu --optimizer sgd --lr 0.01
verify_row --device cuda:0 --stages 2 --replicas 2 --micro-batches 4 --steps 5 --width 64 --verify --precision bf16
verify_row --device cuda:0 --model gpt --stages 2 --micro-batches 4 --steps 5 --verify --precision bf16
for handoff in host device; do
    left 40 "the drift count with --handoff $handoff" || continue
    drift=0 runs=0
    for ((i = 0; i < ${DRIFT_RUNS:-5}; i++)); do
        [ $((SECONDS + 8)) -le "$BUDGET" ] || break
        timeout 60 "$P" train "${R[@]}" --handoff "$handoff" >/dev/null 2>&1 || drift=$((drift + 1))
        runs=$((runs + 1))
    done
    say "replica drift, --handoff $handoff: $drift of $runs more runs of the first row failed"
done
say ""
}
want verify && verify_section

# 3. The bench rows beside PyTorch at each matmul precision (the peer's allow_tf32 the same),
#    our tensors handed over by host copy, then the two multi-worker rows by device copy.
bench() {
    local name=$1 file=$2 limit=$3
    shift 3
    left "$limit" "bench $name" || return 0
    local level=()
    [ -n "${BENCH_AUTOTUNE_LEVEL:-}" ] && level=(env CUBECL_AUTOTUNE_LEVEL="$BENCH_AUTOTUNE_LEVEL")
    say "== bench: $name (autotune level: ${BENCH_AUTOTUNE_LEVEL:-the cubecl default})"
    timeout "$limit" "${level[@]}" "$P" bench --device cuda:0 --steps 6 --warmup 2 --out "$OUTDIR/$file" "$@" \
        >"$WORK/bench.log" 2>&1
    say "bench exit code: $?"
    tee -a "$REPORT" <"$WORK/bench.log"
    say ""
}
# Mixed precision (issue 35): bf16 beside torch.autocast(bfloat16); its bar is >= 1.0x the peer at
# MLP-8x4096 b4096 and >= 2x pipetrain's own fp32 row there (bench-fp32.md).
want bench16 && bench "bf16, beside PyTorch autocast(bfloat16)" bench-bf16.md 200 --precision bf16 "${peer[@]}"
fp32_only=()
fp32_limit=200
[ -n "${FP32_ONLY:-}" ] && fp32_only=(--only "$FP32_ONLY") && fp32_limit=120
want bench && bench "fp32, --handoff host, beside PyTorch fp32" bench-fp32.md "$fp32_limit" --matmul-precision fp32 "${fp32_only[@]}" "${peer[@]}"
want tf32 && bench "tf32, --handoff host, beside PyTorch tf32" bench-tf32.md 200 --matmul-precision tf32 "${peer[@]}"
want device && bench "fp32, --handoff device (pipetrain alone)" bench-fp32-device.md 90 --matmul-precision fp32 --handoff device --only "on 1 GPU"

# 4. Kernels launched per step, MLP-8x1024 batch 256, SGD, one GPU: pipetrain from cubecl's
#    kernel log (its profiling logger at level `minimal` logs every kernel that runs), PyTorch
#    from torch.profiler; both the difference between 6 and 2 steps, over 4.
if want counts && left 40 "the kernel counts"; then
    say "== kernels per step: MLP-8x1024, batch 256, 1 GPU, SGD (steps 3-6)"
    count() {
        local dir
        dir=$(mktemp -d)
        printf '[profiling.logger]\nlevel = "minimal"\nfile = "%s/kernels.log"\n' "$dir" >"$dir/cubecl.toml"
        (cd "$dir" && timeout 60 "$P" train --device cuda:0 --width 1024 --hidden-layers 8 --batch 256 \
            --steps "$1" --optimizer sgd --lr 0.01 --timing host >/dev/null 2>&1)
        wc -l <"$dir/kernels.log" 2>/dev/null || echo 0
    }
    two=$(count 2)
    six=$(count 6)
    say "pipetrain: $(((six - two) / 4)) kernel-log lines per step ($two lines for 2 steps, $six for 6)"
    python3 - <<'PY' 2>&1 | tee -a "$REPORT"
try:
    import torch, torch.nn as nn
    from torch.profiler import profile, ProfilerActivity
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    blocks = []
    for _ in range(8):
        blocks += [nn.Linear(1024, 1024), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 1024, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)
    def step():
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(4):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"PyTorch {torch.__version__}: {len(kernels) / 4:.0f} CUDA kernels per step (torch.profiler)")
except Exception as e:
    print(f"PyTorch kernel count: not measured ({e})")
PY
fi

say ""
say "device check written to $REPORT in ${SECONDS}s (the suite's table and log: $OUTDIR/suite.txt, suite.log)"
