#!/usr/bin/env bash
# MPI against in-process at the same layout: MLP-8x1024 (the CLI's default model), batch 256,
# SGD, remat never, 1 thread per worker. Runs the release binary built with `--features mpi`,
# alternating in-process and MPI runs of each layout ROUNDS times in one session, and prints
# each run's median samples/s (the CLI's `done:` line: median over the steps, first excluded).
#
#   cargo build --release --features mpi
#   bash benches/mpi_vs_in_process.sh [ROUNDS] [STEPS]
#
# Layouts are replicas × stages: 2 × 1 (data parallel, 2 processes) and 2 × 2 (4 processes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-3}
STEPS=${2:-8}
BIN=${PIPETRAIN:-${CARGO_TARGET_DIR:-target}/release/pipetrain}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
COMMON=(train --batch 256 --micro-batches 4 --remat never --steps "$STEPS" --threads 1)

median() { sed -n 's/.*median \([0-9.]*\) samples\/s.*/\1/p'; }

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u +%FT%TZ)"
echo "layout  runner      round  samples/s"
for round in $(seq "$ROUNDS"); do
    for layout in "2 1" "2 2"; do
        read -r r p <<<"$layout"
        args=("${COMMON[@]}" --replicas "$r" --stages "$p")
        [ "$p" -gt 1 ] && args+=(--balance 5,4)
        np=$((r * p))
        inproc=$("$BIN" "${args[@]}" | median)
        mpi=$(mpirun -np "$np" "$BIN" "${args[@]}" | median)
        printf '%sx%s     in-process  %5s  %s\n' "$r" "$p" "$round" "$inproc"
        printf '%sx%s     mpi -np %-3s %5s  %s\n' "$r" "$p" "$np" "$round" "$mpi"
    done
done
