#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in decode decode-base; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 1 --probe-fused"
for b in decode decode-base decode; do echo "-- $b $(date +%T)"; timeout 100 /tmp/$b $P > $OUT/fused-probe-$b.txt 2>&1; grep -E "^\| (norm|o |down)" $OUT/fused-probe-$b.txt; done
echo "== done $(date +%T)"
