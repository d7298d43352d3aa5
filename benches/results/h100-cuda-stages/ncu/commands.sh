#!/usr/bin/env bash
# Nsight Compute counters (NVIDIA H100 80GB HBM3, driver 580.159.04), decode binary of 2713285
# built with `ROPE_POOL_CUDA_FUSION=0 scripts/cuda-build.sh decode`, on the machine start of
# ../run2 (the regexes of run2/go.sh named the kernels' Rust types and matched nothing; CubeCL's
# CUDA entry points are snake_case: `staged_rows_kernel_…`). Under ncu each kernel runs alone,
# launch by launch: durations are not a step's.
xz -d -c target/go7/decode-cuda.xz > /tmp/d && chmod +x /tmp/d
D="/tmp/d --device cuda --fused-only --steps 2"
stall=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
M+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size
M+=,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active
M+=,smsp__issue_active.avg.pct_of_peak_sustained_active
M+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
M+=,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
for r in long_scoreboard lg_throttle wait math_pipe_throttle short_scoreboard barrier mio_throttle \
  not_selected selected no_instruction; do M+=",${stall}_${r}_per_issue_active.ratio"; done
ncu --clock-control none -k regex:staged_rows --launch-count 10 --metrics $M --csv $D --batches 64 > staged.csv
ncu --clock-control none -k regex:matvec_fp8 --launch-count 6 --metrics $M --csv $D --batches 1 --fp8-weights > fp8.csv
ncu --clock-control none -k regex:tiles_product --launch-count 4 --metrics $M --csv $D --batches 1 > tiles.csv
