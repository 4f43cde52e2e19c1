#!/usr/bin/env bash
# The device check (issue 46): one run of at most 8 minutes (the device tool's timeout_s 500)
# that reaches every section, each time-boxed so that a hang in one still reaches the next, each
# with its budget printed. From the prebuilt release binary of scripts/gpu-pack.sh, on any CUDA
# machine (no Rust, no network). Prints one report and writes it to OUTDIR/gpu-check.txt
# (OUTDIR: $1, else $OUT, else .). Sections, in this order:
#   1. libs    the GPU and its libraries (driver, libnvrtc, libcublas and libcublasLt, found in
#              PyTorch's nvidia/cu13/lib the way libnvrtc is), the NCCL probe (nccl-probe.py),
#              then bf16's first use: the doctor's bf16 cases with its heartbeat and cubecl's
#              compilation and autotune logs (OUTDIR/cubecl-bf16.log);
#   2. doctor  `pipetrain doctor --device cuda:0`: the equivalence sweep, one line per case;
#   3. verify  the --verify rows, each with its max_rel_diff and seconds;
#   3b. diag   (only when named) the --verify rows that failed on the H200 of 2026-11-28, each
#              beside the switches that tell their causes apart: --gemm burn, --handoff host,
#              SGD, 1 stage, 1 step, one micro-batch; every --verify row also prints its worst
#              step and parameter tensor, and its whole output goes to logs/verify.log;
#   4. drift   the replica command DRIFT_RUNS (10) more times per hand-off, failures counted;
#   5. bench   the GPU bench rows (MLP-8x1024 b256, MLP-8x4096 b4096, the GPT, 2 stages and 2
#              replicas on one GPU) at fp32, tf32 and bf16, each with PIPETRAIN_GEMM=cublas and
#              =burn, PyTorch at the same setting alternating beside, 2 repetitions;
#   6. cache   the kernel cache and the logs in OUTDIR.
# The kernel cache is PIPETRAIN_CACHE_DIR (default OUTDIR/cache), seeded from the pack's
# cache.tar.gz (the newest one committed under docs/device-checks/cache/) when it is empty, so a
# second run on a warm cache compiles and tunes (almost) nothing.
#
# Switches: CHECK_SECTIONS (default "libs doctor verify drift bench cache"; they run in the
# order above whatever order they are named in), BUDGET_<SECTION> (seconds, e.g.
# BUDGET_DOCTOR=200), DOCTOR_ARGS (e.g. "--quick", "--sections models,checkpoints"),
# DRIFT_RUNS (10), BENCH_PRECISIONS ("fp32 tf32 bf16"), BENCH_GEMMS ("cublas burn"),
# BENCH_STEPS (3), BENCH_WARMUP (1), BENCH_REPS (2), BENCH_ONLY (the bench's --only: rows whose
# name holds it), BENCH_BURN_ONLY (the --only of the burn runs alone, e.g. "x4096, batch").
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUTDIR=$(mkdir -p "${1:-${OUT:-.}}" && cd "${1:-${OUT:-.}}" && pwd)
WORK=$(mktemp -d)
REPORT="$OUTDIR/gpu-check.txt"
SECTIONS=" ${CHECK_SECTIONS:-libs doctor verify drift bench cache} "
LOGS="$OUTDIR/logs"
mkdir -p "$LOGS"
: >"$REPORT"
say() { printf '%s\n' "$*" | tee -a "$REPORT"; }
# The device tool brings back at most 8 files, each under 16 MiB, at most 2 folders down: under
# it (OUTDIR is $OUT) the logs, the bench tables and the cubecl log go back as OUTDIR/logs.tar.gz
# and the kernel cache as OUTDIR/cache.tar.gz (split into 15 MiB parts cache.tar.gz.part-NN when
# larger; `cat cache.tar.gz.part-* | tar xz` joins them), and the loose copies are removed.
# Elsewhere (PACK_OUT=0, the default when OUTDIR is not $OUT) everything stays loose as well.
PACK_OUT=${PACK_OUT:-$([ -n "${OUT:-}" ] && [ "$OUTDIR" = "$(cd "$OUT" 2>/dev/null && pwd)" ] && echo 1 || echo 0)}
pack_out() {
    [ -n "${PACKED:-}" ] && return
    PACKED=1
    (cd "$OUTDIR" && tar czf logs.tar.gz logs $(ls bench-*.md cubecl-bf16.log 2>/dev/null)) 2>/dev/null
    if [ -d "${PIPETRAIN_CACHE_DIR:-}" ]; then
        tar czf "$OUTDIR/cache.tar.gz" -C "$PIPETRAIN_CACHE_DIR" . 2>/dev/null
        if [ "$(stat -c %s "$OUTDIR/cache.tar.gz")" -gt $((15 * 1024 * 1024)) ]; then
            split -b 15M -d "$OUTDIR/cache.tar.gz" "$OUTDIR/cache.tar.gz.part-" && rm -f "$OUTDIR/cache.tar.gz"
        fi
    fi
    if [ "$PACK_OUT" = 1 ]; then
        rm -rf "$LOGS" "$OUTDIR"/bench-*.md "$OUTDIR/cubecl-bf16.log"
        [[ ${PIPETRAIN_CACHE_DIR:-} == "$OUTDIR"/* ]] && rm -rf "$PIPETRAIN_CACHE_DIR"
    fi
    echo "packed into $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' ')" | tee -a "$REPORT"
}
# A check stopped from outside (the device tool's timeout) still packs what it has.
trap 'say "stopped by a signal at ${SECONDS} s"; pack_out; exit 143' TERM INT

want() { [[ $SECTIONS == *" $1 "* ]]; }

# Budgets in seconds: together 455 s, under the 480 s the device tool's 500 s leaves after the
# unpacking and the machine's start.
B_LIBS=${BUDGET_LIBS:-30}
B_BF16=${BUDGET_BF16:-45}
B_DOCTOR=${BUDGET_DOCTOR:-120}
B_VERIFY=${BUDGET_VERIFY:-70}
B_DIAG=${BUDGET_DIAG:-60}
B_DRIFT=${BUDGET_DRIFT:-50}
B_BENCH=${BUDGET_BENCH:-130}
B_CACHE=${BUDGET_CACHE:-10}
SECTION_END=0
# `section N NAME BUDGET`: starts a section that must end within BUDGET seconds.
section() {
    SECTION_END=$((SECONDS + $3))
    say ""
    say "== $1. $2 (budget $3 s; at ${SECONDS} s of the check)"
}
# `left`: seconds left in the current section (at least 1, so a late command ends at once).
left() {
    local l=$((SECTION_END - SECONDS))
    [ "$l" -ge 1 ] && echo "$l" || echo 1
}
# `box LIMIT CMD...`: CMD under `timeout`, at most LIMIT seconds and never past the section's end.
box() {
    local limit=$1 l
    shift
    l=$(left)
    [ "$limit" -lt "$l" ] && l=$limit
    timeout -k 5 "$l" "$@"
}
ended() { say "-- $1 ended after $((SECONDS - $2)) s (exit ${3:-0}; 124: its time box)"; }

gunzip -c "$HERE/pipetrain.gz" >"$WORK/pipetrain" && chmod +x "$WORK/pipetrain"
P="$WORK/pipetrain"

# The libraries: libnvrtc (kernels compiled at run time) and libcublas/libcublasLt (the cuBLAS
# GEMMs), from the loader, PyTorch's wheels (nvidia/cu13/lib) or a CUDA install.
lib_dirs=$(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null)
for lib in libnvrtc libcublas libcublasLt; do
    ldconfig -p 2>/dev/null | grep -q "$lib\.so" && continue
    for d in $lib_dirs /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        if ls "$d/$lib".so* >/dev/null 2>&1; then
            [[ ":${LD_LIBRARY_PATH:-}:" == *":$d:"* ]] || export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            break
        fi
    done
done
[ -d /usr/local/cuda ] && export CUDA_PATH=/usr/local/cuda

# The kernel cache of every run below, seeded from the pack's when empty.
export PIPETRAIN_CACHE_DIR=${PIPETRAIN_CACHE_DIR:-$OUTDIR/cache}
mkdir -p "$PIPETRAIN_CACHE_DIR"
seeded="empty (cold)"
if [ -z "$(ls -A "$PIPETRAIN_CACHE_DIR")" ] && [ -f "$HERE/cache.tar.gz" ]; then
    tar xzf "$HERE/cache.tar.gz" -C "$PIPETRAIN_CACHE_DIR" && seeded="seeded from the pack's cache.tar.gz ($(cat "$HERE/cache.name" 2>/dev/null))"
elif [ -n "$(ls -A "$PIPETRAIN_CACHE_DIR")" ]; then
    seeded="already there"
fi
cd "$WORK" || exit 1

say "pipetrain device check, $(date -u +%FT%TZ); budget: libs $B_LIBS + bf16 $B_BF16 + doctor $B_DOCTOR + verify $B_VERIFY + drift $B_DRIFT + bench $B_BENCH + cache $B_CACHE s"
say "kernel cache: $PIPETRAIN_CACHE_DIR, $seeded"

peer=(--compare-pytorch "$(command -v python3)" --peers "$HERE/peers")
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    say "note: python3 with a CUDA torch is not available here: no PyTorch column, no NCCL probe"
    peer=()
fi

# 1. The GPU, its libraries, the NCCL probe; then bf16's first use, with the heartbeat.
if want libs; then
    section 1 "the GPU and its libraries" "$B_LIBS"
    say "GPU: $(box 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
    say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
    for lib in libcuda libnvrtc libcublas libcublasLt; do
        found=$(ldconfig -p 2>/dev/null | grep -m1 "$lib\.so" | sed 's/.*=> //')
        for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
            [ -z "$found" ] && found=$(ls "$d/$lib".so* 2>/dev/null | head -1)
        done
        say "$lib: ${found:-NOT FOUND}"
    done
    say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    if [ ${#peer[@]} -gt 0 ]; then
        box 25 python3 "$HERE/nccl-probe.py" 2>"$LOGS/nccl-probe.log" | tee -a "$REPORT"
        [ "${PIPESTATUS[0]}" -eq 124 ] && say "nccl probe: no answer within its time box (log: logs/nccl-probe.log)"
    fi

    section 1b "bf16 first use: the doctor's bf16 cases, heartbeat every 5 s, cubecl's logs" "$B_BF16"
    dir=$(mktemp -d)
    printf '[compilation.logger]\nlevel = "basic"\nfile = "%s/cubecl.log"\n[autotune.logger]\nlevel = "minimal"\nfile = "%s/cubecl.log"\n' \
        "$dir" "$dir" >"$dir/cubecl.toml"
    start=$SECONDS
    (cd "$dir" && box "$B_BF16" "$P" doctor --device cuda:0 --quick --sections mixed_precision) \
        >"$LOGS/bf16-first-use.log" 2>&1
    rc=$?
    grep -E '^(ok|FAILED|heartbeat|error)' "$LOGS/bf16-first-use.log" | tail -12 | tee -a "$REPORT"
    ended "bf16 first use" "$start" "$rc"
    say "cubecl log: $( (wc -l <"$dir/cubecl.log") 2>/dev/null || echo 0) lines; its last 5:"
    tail -5 "$dir/cubecl.log" 2>/dev/null | cut -c1-200 | tee -a "$REPORT"
    tail -c 4000000 "$dir/cubecl.log" >"$OUTDIR/cubecl-bf16.log" 2>/dev/null
fi

# 2. The doctor: every case as it ends, then its table's failures.
if want doctor; then
    section 2 "pipetrain doctor --device cuda:0 ${DOCTOR_ARGS:-}" "$B_DOCTOR"
    start=$SECONDS
    # shellcheck disable=SC2086
    box "$B_DOCTOR" "$P" doctor --device cuda:0 ${DOCTOR_ARGS:-} >"$LOGS/doctor.log" 2>"$LOGS/doctor.err"
    rc=$?
    say "$(grep -cE '^ok ' "$LOGS/doctor.log") cases ok, $(grep -cE '^FAILED ' "$LOGS/doctor.log") failed so far; the failures and the last lines:"
    grep -E '^FAILED ' "$LOGS/doctor.log" | tee -a "$REPORT"
    grep -E 'passed, [0-9]+ failed$' "$LOGS/doctor.log" | tee -a "$REPORT"
    tail -2 "$LOGS/doctor.err" | tee -a "$REPORT"
    ended "doctor" "$start" "$rc"
fi

# 3. --verify (reference: the same GPU, at the same precision).
verify_row() {
    local out rc diff start=$SECONDS
    out=$(box 30 "$P" train "$@" 2>&1)
    rc=$?
    diff=$(printf '%s\n' "$out" | sed -n 's/^verify: max_rel_diff=\([^ ]*\).*/\1/p' | tail -1)
    local verdict=ok
    [ "$rc" -eq 0 ] || verdict="FAILED (exit $rc: $(printf '%s\n' "$out" | grep -m1 -E 'FAILED|error' | cut -c1-120))"
    printf '%-96s  %-12s  %4ss  %s\n' "train $*" "${diff:--}" "$((SECONDS - start))" "$verdict" | tee -a "$REPORT"
    # Where the worst difference was: its step and parameter tensor.
    printf '%s\n' "$out" | grep -m1 -E '^ *\((per step|end to end)' | sed 's/^ */    /' | tee -a "$REPORT"
    printf '%s\n' "== train $*" "$out" >>"$LOGS/verify.log"
}
R=(--device cuda:0 --stages 1 --replicas 2 --micro-batches 1 --steps 10 --width 64 --verify --optimizer sgd --lr 0.01)
if want verify; then
    section 3 "the --verify rows (reference: the same GPU at the same precision)" "$B_VERIFY"
    verify_row "${R[@]}" --handoff host
    verify_row "${R[@]}" --handoff device
    verify_row --device cuda:0 --stages 2 --replicas 2 --verify --handoff device
    verify_row --device cuda:0 --stages 2 --micro-batches 4 --schedule zb-h1 --steps 5 --width 64 --verify --end-to-end
    verify_row --device cuda:0 --model gpt --stages 2 --micro-batches 4 --steps 5 --verify --optimizer sgd --lr 0.01 --end-to-end
    verify_row --device cuda:0 --stages 2 --micro-batches 4 --steps 5 --width 64 --verify --verify-device cpu --optimizer sgd --lr 0.01
    verify_row --device cuda:0 --stages 2 --replicas 2 --micro-batches 4 --steps 5 --width 64 --verify --precision bf16
fi

# 3b. The failing --verify rows beside the switches that tell their causes apart.
if want diag; then
    section 3b "the failing --verify rows, switch by switch" "$B_DIAG"
    C=(--device cuda:0 --width 64 --verify --verify-device cpu --optimizer sgd)
    verify_row "${C[@]}" --stages 1 --micro-batches 1 --steps 1 --lr 0.01
    verify_row "${C[@]}" --stages 1 --micro-batches 1 --steps 1 --lr 0.01 --gemm burn
    verify_row "${C[@]}" --stages 2 --micro-batches 4 --steps 2 --lr 0.01
    D=(--device cuda:0 --stages 2 --replicas 2 --verify --steps 3)
    verify_row "${D[@]}" --handoff device
    verify_row "${D[@]}" --handoff device --gemm burn
    verify_row "${D[@]}" --handoff host
    verify_row "${D[@]}" --handoff device --optimizer sgd --lr 0.01
    verify_row "${D[@]}" --replicas 1 --handoff device
    # The same batch shape on both sides (one micro-batch): rounding of another summation order
    # is then ruled out.
    verify_row "${D[@]}" --replicas 1 --micro-batches 1 --handoff device
fi

# 4. The replica drift: the first --verify row DRIFT_RUNS more times per hand-off.
if want drift; then
    section 4 "the replica drift, ${DRIFT_RUNS:-10} runs per hand-off" "$B_DRIFT"
    for handoff in host device; do
        drift=0 runs=0
        for ((i = 0; i < ${DRIFT_RUNS:-10}; i++)); do
            [ $((SECTION_END - SECONDS)) -ge 3 ] || break
            box 20 "$P" train "${R[@]}" --handoff "$handoff" >/dev/null 2>&1 || drift=$((drift + 1))
            runs=$((runs + 1))
        done
        say "replica drift, --handoff $handoff: $drift of $runs runs failed"
    done
fi

# 5. The bench rows beside PyTorch: each precision × GEMM backend, 2 repetitions.
if want bench; then
    section 5 "bench rows beside PyTorch: ${BENCH_PRECISIONS:-fp32 tf32 bf16} × PIPETRAIN_GEMM=${BENCH_GEMMS:-cublas burn}" "$B_BENCH"
    set -- ${BENCH_PRECISIONS:-fp32 tf32 bf16}
    runs=$(($# * $(wc -w <<<"${BENCH_GEMMS:-cublas burn}")))
    for precision in ${BENCH_PRECISIONS:-fp32 tf32 bf16}; do
        case $precision in
        fp32) flags=(--matmul-precision fp32) ;;
        tf32) flags=(--matmul-precision tf32) ;;
        bf16) flags=(--precision bf16) ;;
        esac
        for gemm in ${BENCH_GEMMS:-cublas burn}; do
            # What the earlier runs left of the section, shared among the runs still to come.
            each=$(($(left) / runs))
            runs=$((runs - 1))
            say "-- $precision, PIPETRAIN_GEMM=$gemm (time box ${each} s)"
            start=$SECONDS
            only=${BENCH_ONLY:-}
            [ "$gemm" = burn ] && only=${BENCH_BURN_ONLY:-$only}
            box "$each" env PIPETRAIN_GEMM="$gemm" "$P" bench --device cuda:0 --steps "${BENCH_STEPS:-3}" \
                --warmup "${BENCH_WARMUP:-1}" --reps "${BENCH_REPS:-2}" ${only:+--only "$only"} \
                "${flags[@]}" --out "$OUTDIR/bench-$precision-$gemm.md" "${peer[@]}" >"$LOGS/bench-$precision-$gemm.log" 2>&1
            rc=$?
            # The table when it ended; else the rows measured before its time box.
            grep -E '^\|' "$LOGS/bench-$precision-$gemm.log" | tee -a "$REPORT" ||
                grep -E '^bench:' "$LOGS/bench-$precision-$gemm.log" | tee -a "$REPORT"
            ended "bench $precision $gemm" "$start" "$rc"
        done
    done
fi

# 6. The cache and the logs to OUTDIR.
if want cache; then
    section 6 "the kernel cache and the logs" "$B_CACHE"
    say "kernel cache: $PIPETRAIN_CACHE_DIR: $(find "$PIPETRAIN_CACHE_DIR" -type f | wc -l) files, $(du -sh "$PIPETRAIN_CACHE_DIR" | cut -f1)"
    [[ $PIPETRAIN_CACHE_DIR == "$OUTDIR"/* ]] || box 8 cp -r "$PIPETRAIN_CACHE_DIR" "$OUTDIR/cache"
    say "logs: $(ls "$LOGS" | tr '\n' ' ')"
    pack_out
fi

say ""
say "device check written to $REPORT in ${SECONDS} s (logs in $LOGS, the cache in $OUTDIR/cache)"
