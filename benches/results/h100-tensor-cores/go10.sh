#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in suite decode; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== suite $(date +%T)"
ROPE_POOL_EXPECT_TILES_PRODUCT=1 timeout 60 /tmp/suite tiles_product 2>&1 | grep -v XDG_RUNTIME | tail -4 | tee $OUT/suite.txt
echo "== probe $(date +%T)"
timeout 70 /tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 512,4096 2>&1 | grep -E "^\| project" | tee $OUT/probe.txt
echo "== decode $(date +%T)"
timeout 60 /tmp/decode --device vulkan --fused-only --steps 8 --batches 1,8,64 2>&1 | grep -E "^\| fused" | tee $OUT/decode.txt
echo "== done $(date +%T)"
