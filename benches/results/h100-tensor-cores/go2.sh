#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in tensor_cores decode; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== probe $(date +%T)"; timeout 300 /tmp/tensor_cores --device vulkan 2>&1 | tee $OUT/tc-vulkan.txt
echo "== decode matmul probe $(date +%T)"; timeout 150 /tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 32768 2>&1 | tail -20 | tee $OUT/decode-probe.txt
echo "== cublas $(date +%T)"; timeout 100 python3 target/h200/cublas_anchor.py 2>&1 | tee $OUT/cublas.txt
echo "== done $(date +%T)"
