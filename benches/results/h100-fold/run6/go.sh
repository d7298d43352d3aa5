#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/go/suite.xz > /tmp/suite; chmod +x /tmp/suite
echo "== suite $(date +%T)"
ROPE_POOL_EXPECT_TILES_PRODUCT=1 timeout 150 /tmp/suite shares add_rms_norm silu_mul --nocapture > $OUT/suite-full.txt 2>&1
grep -E "^test |test result|panicked|fp8 codes|splits" -A3 $OUT/suite-full.txt | grep -v "has been running" | tail -30
echo "== done $(date +%T)"
