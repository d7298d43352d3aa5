#!/usr/bin/env bash
# Prefill products through CubeCL's C++ backend (binaries of 06721f0, ROPE_POOL_CUDA_CPP=1 ROPE_POOL_CUDA_FUSION=0
# scripts/cuda-build.sh decode): cubek's TMA / async routines and Burn's autotuned matmul against the tiles product,
# at m = 32768 (64 prompts of 512) on the four Llama-3-8B projections, then prefill rows with the routine forced.
mkdir -p /tmp/cudatk && tar -xJf target/gocpp2/cudatk.tar.xz -C /tmp/cudatk
export CUDA_PATH=/tmp/cudatk
xz -T8 -d -c target/gocpp2/decode-cuda-cpp.xz > /tmp/decode-cpp && chmod +x /tmp/decode-cpp
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-500} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-90}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
P="/tmp/decode-cpp --device cuda --fused-only --steps 2 --batches 1,64"
for r in tiles simple-tma-mma double-tma-mma specialized-tma-mma heuristic; do
  T=100 run pre.txt "prefill, $r" ROPE_POOL_MATMUL=$r $P
done
grep -E "==|\| fused|rc |refused" $OUT/pre.txt | cut -c1-250
T=240 run probe.txt "matmul probe, m 32768" X=1 /tmp/decode-cpp --device cuda --fused-only --steps 2 --batches 1 --matmul-probe --probe-rows 32768
grep -E "==|^\| |rc |refused" $OUT/probe.txt | cut -c1-250
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
