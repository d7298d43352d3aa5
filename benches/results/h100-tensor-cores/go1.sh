#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
for b in tensor_cores decode-cuda; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,utilization.gpu --format=csv -lms 250 > $OUT/clocks.csv &
smi=$!
echo "== vulkan probe 1 $(date +%T)"; timeout 150 /tmp/tensor_cores --device vulkan 2>&1 | tee $OUT/tc-vulkan-1.txt
echo "== vulkan probe 2 $(date +%T)"; timeout 150 /tmp/tensor_cores --device vulkan 2>&1 | tee $OUT/tc-vulkan-2.txt
echo "== cublas $(date +%T)"; timeout 150 python3 target/h200/cublas_anchor.py 2>&1 | tee $OUT/cublas.txt
echo "== end $(date +%T)"
kill $smi
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
if [ -n "$NCU" ]; then
  m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
  m+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  m+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum
  m+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  m+=,smsp__inst_executed.sum,sm__cycles_elapsed.avg.per_second,launch__shared_mem_per_block_static,launch__grid_size,launch__block_size
  for r in long_scoreboard lg_throttle wait math_pipe_throttle short_scoreboard mio_throttle barrier not_selected selected no_instruction; do
    m+=",smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  for rows in 64 8; do
    echo "== ncu staged rows $rows $(date +%T)"
    timeout 200 $NCU --clock-control none -k 'regex:staged|matmul|few_rows' --launch-skip 0 --launch-count 12 --metrics "$m" --csv \
      /tmp/decode-cuda --device cuda --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows $rows > $OUT/ncu-staged-$rows.csv 2> $OUT/ncu-staged-$rows.err
    tail -3 $OUT/ncu-staged-$rows.err; wc -l $OUT/ncu-staged-$rows.csv
  done
fi
if grep -q H200 $OUT/gpu.txt; then
  xz -d -c target/h200/decode.xz > /tmp/decode; chmod +x /tmp/decode
  for i in 1 2 3; do
    echo "== fp8 weights b1 run $i $(date +%T)"
    timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --fp8-weights --batches 1 2>&1 | tail -8 | tee -a $OUT/fp8w-b1.txt
  done
fi
echo "== done $(date +%T)"
