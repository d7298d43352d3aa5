#!/usr/bin/env bash
# MEASUREMENT ONLY — Nsight Compute counters for the fused kernel and Burn's same-bytes copy on
# the H200, through the CUDA build of the bench (`scripts/cuda-build.sh` makes
# `bench-cuda.xz` in $ROPE_POOL_PACK_DIR, default `target/h200`; copy it to the same path on the
# GPU machine). Run there: `scripts/ncu.sh [bench args]`; CSV on stdout. With ROPE_POOL_VECTOR=4
# the f16/bf16 kernel runs 4-wide as it does through WGSL (CUDA's default is 8-wide).
# Metrics: duration, DRAM throughput, registers, occupancy, issue utilisation and the warp stall
# reasons (warps stalled per issued instruction, by reason).
set -euo pipefail
cd "$(dirname "$0")/.."
xz -d -c "${ROPE_POOL_PACK_DIR:-target/h200}/bench-cuda.xz" > /tmp/bench-cuda
chmod +x /tmp/bench-cuda
stall=smsp__average_warps_issue_stalled
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
for reason in long_scoreboard lg_throttle wait math_pipe_throttle short_scoreboard drain \
  not_selected selected mio_throttle no_instruction dispatch_stall branch_resolving; do
  metrics+=",${stall}_${reason}_per_issue_active.ratio"
done
ncu --clock-control none -k 'regex:rope_pool|scalar_binop' --metrics "$metrics" --csv \
  /tmp/bench-cuda --device cuda --fused-only --windows 1 "$@"
