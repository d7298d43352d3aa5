#!/usr/bin/env bash
# cuda build (no fusion stream) of 2713285 (the suite with the tiles product test's shapes of
# inner sizes a multiple of 128 added): tiles product with two stages through CUDA (default),
# blocks of 128 as a knob (ROPE_POOL_TILES_BLOCK). Its Nsight Compute lines matched no kernel
# (the Rust type names); ../ncu/commands.sh has the ones that did. Priority order; run with LIMIT=420.
for b in decode-cuda suite-cuda; do xz -d -c target/go7/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
which ncu >> $OUT/smi.txt 2>&1; ncu --version >> $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-560} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; local left=$(( ${LIMIT:-560} + 20 - SECONDS )); [ $t -gt $left ] && t=$left; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
D=/tmp/decode-cuda
C="$D --device cuda --fused-only --steps 64 --batches 1,8,64"
(cd target/go7 && timeout 90 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $?" >> $OUT/anchor.txt)
run dec.txt default X=0 $C
P="$D --device cuda --fused-only --steps 4 --batches 1,64"
for i in 1 2; do
  run pre.txt "stages2 block64 (default)" X=0 $P
  run pre.txt "stages2 block128" ROPE_POOL_TILES_BLOCK=128 $P
  run pre.txt "stages1 block64" ROPE_POOL_TILES_STAGES=1 $P
done
run dec.txt default X=0 $C
F="$D --device cuda --fused-only --steps 64 --batches 1,8,64 --fp8-cache 1,1 --fp8-weights"
run fp8.txt default X=0 $F
stall=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
M+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum
M+=,launch__registers_per_thread,launch__grid_size,launch__block_size,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
M+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
M+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
M+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum
for r in long_scoreboard lg_throttle wait math_pipe_throttle short_scoreboard barrier mio_throttle not_selected selected no_instruction dispatch_stall tex_throttle; do M+=",${stall}_${r}_per_issue_active.ratio"; done
T=120 run ncu-staged.txt "staged 64 rows" X=0 ncu --clock-control none -k regex:StagedRows --launch-count 6 --metrics $M --csv $D --device cuda --fused-only --steps 2 --batches 64
T=120 run ncu-fp8.txt "fp8 matvec 1 row" X=0 ncu --clock-control none -k regex:MatvecFp8 --launch-count 6 --metrics $M --csv $D --device cuda --fused-only --steps 2 --batches 1 --fp8-weights
T=100 run ncu-tiles.txt "tiles product 512 rows" X=0 ncu --clock-control none -k regex:TilesProduct --launch-count 4 --metrics $M --csv $D --device cuda --fused-only --steps 2 --batches 1
T=100 run suite.txt block128 ROPE_POOL_TILES_BLOCK=128 ROPE_POOL_EXPECT_TILES_PRODUCT=1 /tmp/suite-cuda --test-threads=1 tiles_product projections_match_float64
tail -6 $OUT/anchor.txt
grep -E "==|\| fused|rc " $OUT/dec.txt $OUT/pre.txt $OUT/fp8.txt
grep -E "^test |test result|panicked|rc |^== " $OUT/suite.txt | head
for f in ncu-staged ncu-fp8 ncu-tiles; do echo "## $f"; grep -E "^==|rc " $OUT/$f.txt; grep -c '"' $OUT/$f.txt; done
