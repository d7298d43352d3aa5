#!/usr/bin/env bash
# Binaries of 82bd128 (the library and kernels of 3bc539e; ROPE_POOL_CUDA_FUSION=0
# scripts/cuda-build.sh suite|decode), in one machine start: decode A/B with the staged kernel's
# row planes (ROPE_POOL_STAGED_ROW_PLANES=2) in alternating processes, the CUDA-graph anchor, a
# 32768-token prompt joining 8 decoding requests with and without chunked prefill; the suite's
# fp8 tests through CUDA (the fp8 cases with f16 queries take the flash kernel over many key
# tiles); fp8 weights at batch 1 with 4 loads a unit (2 is the launch); the projection tests with
# row planes; a batch-64 profile. In this order: the decode A/B and the anchor, the fp8 tests,
# the long prompt, the rest.
for b in decode-cuda suite-cuda; do xz -T8 -d -c target/go23c/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-560} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
D="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt "default 1" X=1 $D
run dec.txt "row planes 2" ROPE_POOL_STAGED_ROW_PLANES=2 $D
run dec.txt "default 2" X=1 $D
run dec.txt "row planes 2, 2" ROPE_POOL_STAGED_ROW_PLANES=2 $D
(cd target/go23c && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
grep -E "^==|\| fused|rc |panicked" $OUT/dec.txt | cut -c1-250; tail -6 $OUT/anchor.txt
T=200 run suite.txt "fp8 tests" X=1 /tmp/suite-cuda --test-threads=1 fp8
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-300 | head -40
T=150 run long.txt "a 32768-token prompt joining 8 decoding requests" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 2 --batches 8 --long-prompt 32768 --prefill-chunks 0,2048,8192
grep -E "^==|^\||rc |panicked" $OUT/long.txt
F="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1 --fp8-weights"
run fp8w.txt "fp8 weights, default loads" X=1 $F
run fp8w.txt "fp8 weights, 4 loads" ROPE_POOL_MATVEC_LOADS=4 $F
run fp8w.txt "fp8 weights, default loads 2" X=1 $F
run fp8w.txt "fp8 weights, 4 loads 2" ROPE_POOL_MATVEC_LOADS=4 $F
grep -E "^==|\| fused|rc |panicked" $OUT/fp8w.txt | cut -c1-250
T=120 run suite2.txt "projections, row planes 2" ROPE_POOL_STAGED_ROW_PLANES=2 /tmp/suite-cuda --test-threads=1 projections
grep -E "^==|^test |test result|rc |panicked" $OUT/suite2.txt | cut -c1-300 | head -20
T=40 run prof.txt "batch 64 profile" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 8 --batches 64 --profile
grep -A40 "Profile" $OUT/prof.txt | head -50
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
