#!/usr/bin/env bash
# f16 and fp8 pools (defaults) alternated, three rounds, in one call.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
xz -d -c target/h200/attention-9.xz > /tmp/attention && chmod +x /tmp/attention
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $o/gpu.txt
A="--device vulkan --decode-only --no-gather --dtypes f16"
for i in 1 2 3; do
  for f in "" --fp8; do
    echo "== pools ${f:-f16} run $i" | tee -a $o/attention.md
    timeout 90 /tmp/attention $A $f 2>>$o/attention.log | grep -E '^\| decode' | tee -a $o/attention.md
  done
done
