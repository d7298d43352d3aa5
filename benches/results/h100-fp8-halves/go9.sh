#!/usr/bin/env bash
# f16 and fp8 pools (defaults: f16 halves, one word a load) alternated, then fp8 weights at
# batch 1 with and without the NaN-code check against f16, then the CUDA-graph anchor.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
for b in attention decode; do xz -d -c target/h200/$b-9.xz > /tmp/$b && chmod +x /tmp/$b; done
A="--device vulkan --decode-only --no-gather --dtypes f16"
for i in 1 2; do
  for f in "" --fp8; do
    echo "== pools ${f:-f16} run $i" | tee -a $o/attention.md
    timeout 90 /tmp/attention $A $f 2>>$o/attention.log | grep -E '^\| decode' | tee -a $o/attention.md
  done
done
D="--device vulkan --fused-only --steps 64 --batches 1"
for i in 1 2; do
  for fin in 0 1; do
    ROPE_POOL_FP8_FINITE=$fin timeout 60 /tmp/decode $D --fp8-weights 2>>$o/decode.log | grep '^| fused' | sed "s/^/finite=$fin /" | tee -a $o/fp8w.md
  done
done
PYTHONUNBUFFERED=1 timeout 200 python3 target/h200/graph_decode_anchor.py > $o/anchor.txt 2>&1
tail -4 $o/anchor.txt
