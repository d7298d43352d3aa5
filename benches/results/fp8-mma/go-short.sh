#!/usr/bin/env bash
# fp8 weights on warp-level tensor-core products (kernels/src/decoder/fp8_mma.rs, turned on by
# ROPE_POOL_FP8_MMA=1), binaries of the commit that adds this script, built with
# `ROPE_POOL_CUDA_FUSION=0 ROPE_POOL_PACK_DIR=target/go26 scripts/cuda-build.sh decode|suite`
# (carry target/go26, with ../shared/anchors/graph_decode_anchor.py copied in): the fp8 tests
# through CUDA with the new kernels; fp8 weights at batch 1 with them and with the
# matrix-vector kernels (the default) in alternating processes, and at batch 8 with them up to
# 8 rows against the staged kernel from 5 rows;
# decode at batches 1, 8, 64 beside the CUDA-graph anchor. The
# short form of go.sh (no warps knobs, Nsight Compute or prefill rows).
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
grep -E "^==|\| fused|rc |panicked" $OUT/fp8w.txt | cut -c1-250
run dec.txt "decode 1" X=1 $A --batches 1,8,64
(cd target/go26 && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
grep -E "^==|\| fused|rc |panicked" $OUT/dec.txt | cut -c1-250; tail -6 $OUT/anchor.txt
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
