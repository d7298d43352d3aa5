#!/usr/bin/env bash
# Every fp8 code through every decode and kernel, the fused-projection and projection tests
# (staged sizes), fp8 tests, on the GPU.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
xz -d -c target/h200/suite-15.xz > /tmp/suite && chmod +x /tmp/suite
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $o/gpu.txt
for t in every_fp8_code fused_projections fp8 projections_match; do
  timeout 200 /tmp/suite $t 2>&1 | grep -v XDG_RUNTIME | grep -E "^test |test result|panicked|read |vs " | head -30 | tee -a $o/suite.txt
done
