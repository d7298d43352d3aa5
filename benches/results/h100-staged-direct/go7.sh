#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/go/suite.xz > /tmp/suite; chmod +x /tmp/suite
xz -d -c target/go/decode.xz > /tmp/decode; chmod +x /tmp/decode
echo "== suite direct $(date +%T)"
ROPE_POOL_STAGED_DIRECT=4 ROPE_POOL_EXPECT_TILES_PRODUCT=1 timeout 150 /tmp/suite projections staged shares --nocapture > $OUT/suite-direct.txt 2>&1
grep -E "^test |test result|panicked" -A3 $OUT/suite-direct.txt | grep -v "has been running" | tail -30
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 8,16,32,64"
for cfg in "" "ROPE_POOL_STAGED_DIRECT=4" "ROPE_POOL_STAGED_DIRECT=2" "ROPE_POOL_STAGED_DIRECT=4 ROPE_POOL_STAGED_CHUNK=2" "ROPE_POOL_STAGED_DIRECT=4 ROPE_POOL_STAGED_BLOCK=8" "ROPE_POOL_STAGED_DIRECT=8 ROPE_POOL_STAGED_BLOCK=8"; do
  echo "== probe [$cfg] $(date +%T)"
  env $cfg timeout 120 /tmp/decode $P > $OUT/probe-"${cfg// /_}".txt 2>&1
  grep -iE "rows|µs|us " $OUT/probe-"${cfg// /_}".txt | head -40
done
echo "== done $(date +%T)"
