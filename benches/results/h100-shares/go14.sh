#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/h200/decode.xz > /tmp/decode; chmod +x /tmp/decode
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only"
echo "== fused probe $(date +%T)"
timeout 90 /tmp/decode $P --probe-fused --probe-rows 1,4 2>&1 | grep -E "^\| " | tee $OUT/fused-probe.txt
echo "== staged sweep $(date +%T)"
for knobs in "X=1" "ROPE_POOL_STAGED_PLANES=8" "ROPE_POOL_STAGED_CUBES=512" "ROPE_POOL_STAGED_CUBES=1024" "ROPE_POOL_STAGED_PLANES=8 ROPE_POOL_STAGED_CUBES=512" "ROPE_POOL_STAGED_PLANES=8 ROPE_POOL_STAGED_BLOCK=2" "ROPE_POOL_STAGED_SPLITS=1"; do
  echo "-- $knobs"
  env $knobs timeout 60 /tmp/decode $P --probe-rows 8,64 2>&1 | grep -E "^\| project" | tee -a "$OUT/sweep.txt"
done
echo "== done $(date +%T)"
