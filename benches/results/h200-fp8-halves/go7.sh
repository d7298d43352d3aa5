#!/usr/bin/env bash
# Call A: fp8 tests on the GPU (SPIR-V, no fusion), then fp8-pool attention rows per decode and
# words a load, then the gather + SDPA anchor.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
for b in suite attention decode; do xz -d -c target/h200/$b-7.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $o/gpu.txt
for t in fp8 random_batches; do
  timeout 150 /tmp/suite $t 2>&1 | grep -v XDG_RUNTIME | grep -E "^test |test result|panicked|expected" | head -30 | tee -a $o/suite.txt
done
A="--device vulkan --fp8 --decode-only --no-gather --dtypes f16"
for kv in "0 1" "2 1" "0 2" "2 2" "2 4" "1 2"; do
  set -- $kv
  echo "== FP8_DECODE=$1 FP8_WORDS=$2" | tee -a $o/attention.md
  ROPE_POOL_FP8_DECODE=$1 ROPE_POOL_ATTENTION_FP8_WORDS=$2 timeout 90 /tmp/attention $A 2>>$o/attention.log | grep -E '^\| decode' | tee -a $o/attention.md
done
timeout 120 python3 target/h200/pool_attention_anchor.py > $o/attention-anchor.txt 2>&1
tail -15 $o/attention-anchor.txt
