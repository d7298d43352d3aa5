#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in decode suite; do xz -d -c target/go/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
for c in 1 2 4; do
  echo "-- probe cols=$c $(date +%T)"
  ROPE_POOL_STAGED_COLS=$c timeout 80 /tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 8,16,32,64 > $OUT/probe-$c.txt 2>&1
  grep -E "^\| project" $OUT/probe-$c.txt
done
for c in 2 4; do
  echo "== suite cols=$c $(date +%T)"
  ROPE_POOL_STAGED_COLS=$c ROPE_POOL_EXPECT_TILES_PRODUCT=1 timeout 110 /tmp/suite projections_match_float64 staged_shares fp8_projections fused_projections > $OUT/suite-$c.txt 2>&1
  grep -E "^test |test result|panicked" -A3 $OUT/suite-$c.txt | grep -v "has been running"
done
for c in 1 2 4; do
  for batch in 8 64; do
    echo "-- decode cols=$c b$batch $(date +%T)"
    ROPE_POOL_STAGED_COLS=$c timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --batches $batch 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-$c.txt
  done
done
echo "== done $(date +%T)"
