#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in decode decode-prev suite; do xz -d -c target/go/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== suite $(date +%T)"
ROPE_POOL_EXPECT_TILES_PRODUCT=1 timeout 200 /tmp/suite projections captured_ checkpoints fp8 shares add_rms_norm silu_mul staged tiles_product 2>&1 | grep -E "^test |test result|panicked|skipped" | tee $OUT/suite.txt
for i in 1 2; do
  for b in decode decode-prev; do
    for batch in 8 64; do
      echo "-- $b b$batch $(date +%T)"
      timeout 60 /tmp/$b --device vulkan --fused-only --steps 64 --batches $batch 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-$b.txt
    done
  done
done
echo "== profile $(date +%T)"
timeout 90 /tmp/decode --device vulkan --fused-only --steps 8 --batches 8,64 --profile > $OUT/profile.txt 2>&1
echo "== anchor $(date +%T)"
timeout 70 python3 target/go/graph_decode_anchor.py 2>&1 | tail -4 | tee $OUT/anchor.txt
echo "== done $(date +%T)"
