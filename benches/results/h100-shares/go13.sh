#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/h200/decode.xz > /tmp/decode; chmod +x /tmp/decode
echo "== profile $(date +%T)"
timeout 150 /tmp/decode --device vulkan --fused-only --steps 8 --batches 1,8,64 --profile > $OUT/profile.txt 2>&1; tail -5 $OUT/profile.txt
echo "== ab $(date +%T)"
for f in 1 0 1 0; do
  echo "-- FUSED_PROJECTIONS=$f"
  ROPE_POOL_FUSED_PROJECTIONS=$f timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --batches 1,8 2>&1 | grep -E "^\| fused" | tee -a $OUT/ab-fused-$f.txt
done
for c in 1 2 8 64; do
  echo "-- CHUNK_TILES=$c"
  ROPE_POOL_ATTENTION_CHUNK_TILES=$c timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --batches 1 2>&1 | grep -E "^\| fused" | tee -a $OUT/ab-chunk-$c.txt
done
echo "== done $(date +%T)"
