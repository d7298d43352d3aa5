#!/usr/bin/env bash
# fp8 weights on warp-level tensor-core products (kernels/src/decoder/fp8_mma.rs, turned on by
# ROPE_POOL_FP8_MMA=1), binaries of the commit that adds this script, built with
# `ROPE_POOL_CUDA_FUSION=0 ROPE_POOL_PACK_DIR=target/go26 scripts/cuda-build.sh decode|suite`
# (carry target/go26, with ../shared/anchors/graph_decode_anchor.py copied in): the fp8 tests
# through CUDA with the new kernels; fp8 weights at batch 1 with them and with the
# matrix-vector kernels (the default) in alternating processes, and at batch 8 with them up to
# 8 rows against the staged kernel from 5 rows;
# 4 and 16 warps a cube; Nsight Compute of the fp8
# launches of a batch-1 step; decode at batches 1, 8, 64 beside the CUDA-graph anchor;
# the prefill rows. SHORT=1 leaves out the warps knobs, Nsight Compute, the second decode
# process and the prefill rows.
for b in decode-cuda suite-cuda; do xz -T8 -d -c target/go26/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-560} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
T=150 run suite.txt "fp8 projections" ROPE_POOL_FP8_MMA=1 /tmp/suite-cuda --test-threads=1 --nocapture fp8_projections fused_projections fp8_nan_codes fp8_checkpoints
grep -E "^test |test result|warp-level|rc |panicked" $OUT/suite.txt | cut -c1-300
A="/tmp/decode-cuda --device cuda --fused-only --steps 64"
for i in 1 2; do
 run fp8w.txt "mma $i" ROPE_POOL_FP8_MMA=1 $A --batches 1 --fp8-weights
 run fp8w.txt "matrix-vector $i" X=1 $A --batches 1 --fp8-weights
done
run fp8w.txt "batch 8, staged from 5 rows" X=1 $A --batches 8 --fp8-weights
run fp8w.txt "batch 8, mma to 8 rows" ROPE_POOL_FP8_MMA=1 ROPE_POOL_STAGED_FROM=9 $A --batches 8 --fp8-weights
[ -z "$SHORT" ] && run fp8w.txt "mma, 4 warps" ROPE_POOL_FP8_MMA=1 ROPE_POOL_FP8_MMA_WARPS=4 $A --batches 1 --fp8-weights
[ -z "$SHORT" ] && run fp8w.txt "mma, 16 warps" ROPE_POOL_FP8_MMA=1 ROPE_POOL_FP8_MMA_WARPS=16 $A --batches 1 --fp8-weights
grep -E "^==|\| fused|rc |panicked" $OUT/fp8w.txt | cut -c1-250
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size
[ -z "$SHORT" ] && for v in 1 0; do T=90 run ncu.txt "fp8 launches, mma=$v" ROPE_POOL_FP8_MMA=$v ncu --clock-control none -k regex:fp8 --launch-skip 200 --launch-count 10 --metrics $M --csv $A --steps 4 --batches 1 --fp8-weights; done
grep -E "^==|gpu__time|dram__|grid_size|registers" $OUT/ncu.txt | cut -c1-40,100-260 | head -90
run dec.txt "decode 1" X=1 $A --batches 1,8,64
(cd target/go26 && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
[ -z "$SHORT" ] && run dec.txt "decode 2" X=1 $A --batches 1,8,64
grep -E "^==|\| fused|rc |panicked" $OUT/dec.txt | cut -c1-250; tail -6 $OUT/anchor.txt
[ -z "$SHORT" ] && run prefill.txt "prompts of 512" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 4 --batches 1,8,64 --prompt 512
grep -E "^==|\| fused|rc |panicked" $OUT/prefill.txt | cut -c1-250
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
