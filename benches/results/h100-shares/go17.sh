#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/h200/decode-base.xz > /tmp/decode; chmod +x /tmp/decode
for knobs in "X=1" "ROPE_POOL_ATTENTION_CUBES=1024" "ROPE_POOL_ATTENTION_STEPS=4" "ROPE_POOL_ATTENTION_UNITS=64" "ROPE_POOL_ATTENTION_CUBES=1024 ROPE_POOL_ATTENTION_CHUNK_TILES=4" "X=1"; do
  echo "-- $knobs $(date +%T)"
  env $knobs timeout 60 /tmp/decode --device vulkan --fused-only --steps 32 --batches 8,64 2>&1 | grep -E "^\| fused" | tee -a "$OUT/attention-knobs.txt"
done
echo "== done $(date +%T)"
