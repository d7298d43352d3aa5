#!/usr/bin/env bash
# fp8 pools, one or two words a load, alternated four rounds, in one call.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
xz -d -c target/h200/attention-9.xz > /tmp/attention && chmod +x /tmp/attention
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $o/gpu.txt
A="--device vulkan --decode-only --no-gather --dtypes f16 --fp8"
for i in 1 2 3 4; do
  for w in 1 2; do
    echo "== words $w run $i" | tee -a $o/attention.md
    ROPE_POOL_ATTENTION_FP8_WORDS=$w timeout 90 /tmp/attention $A 2>>$o/attention.log | grep -E '^\| decode' | cut -d'|' -f4,5,7 | tr '\n' ' ' | tee -a $o/attention.md; echo | tee -a $o/attention.md
  done
done
