#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/h200/tensor_cores.xz > /tmp/tensor_cores; chmod +x /tmp/tensor_cores
echo "== probe $(date +%T)"; timeout 400 /tmp/tensor_cores --device vulkan 2>&1 | tee $OUT/tc-vulkan.txt
echo "== done $(date +%T)"
