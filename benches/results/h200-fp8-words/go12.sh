#!/usr/bin/env bash
# Plane-kernel lanes and steps on fp8 (two words a load) and f16 pools, one call.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
xz -d -c target/h200/attention-9.xz > /tmp/attention && chmod +x /tmp/attention
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $o/gpu.txt
A="--device vulkan --decode-only --no-gather --dtypes f16"
run() { echo "== $*" | tee -a $o/attention.md; env "$@" timeout 90 /tmp/attention $A $F 2>>$o/attention.log | grep -E '^\| decode' | cut -d'|' -f4,5,7 | tr '\n' ' ' | tee -a $o/attention.md; echo | tee -a $o/attention.md; }
F=--fp8
for k in "X=0" "ROPE_POOL_ATTENTION_LANES=8" "ROPE_POOL_ATTENTION_LANES=4" "ROPE_POOL_ATTENTION_STEPS=2" "ROPE_POOL_ATTENTION_STEPS=8" "ROPE_POOL_ATTENTION_UNITS=256" "ROPE_POOL_ATTENTION_UNITS=64"; do
  run ROPE_POOL_ATTENTION_FP8_WORDS=2 $k
done
run ROPE_POOL_ATTENTION_FP8_WORDS=4 ROPE_POOL_ATTENTION_LANES=4
F=
for k in "X=0" "ROPE_POOL_ATTENTION_LANES=8" "ROPE_POOL_ATTENTION_LANES=4" "ROPE_POOL_ATTENTION_STEPS=2"; do
  run $k
done
