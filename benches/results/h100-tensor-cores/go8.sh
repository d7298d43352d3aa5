#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in suite decode tensor_cores; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== suite $(date +%T)"
timeout 40 /tmp/suite tiles_product 2>&1 | grep -v XDG_RUNTIME | tail -4 | tee $OUT/suite.txt
echo "== products $(date +%T)"
timeout 60 /tmp/tensor_cores --device vulkan --products-only 2>&1 | tee $OUT/tc.txt | grep "^|"
echo "== decode $(date +%T)"
timeout 60 /tmp/decode --device vulkan --fused-only --steps 8 --batches 1,8,64 2>&1 | grep -E "^\| fused" | tee $OUT/decode.txt
echo "== done $(date +%T)"
