#!/usr/bin/env bash
# Call B: decode through the build without fusion (captured steps): f16, fp8 caches, fp8 weights
# (f16 halves, then integers), the fused-projection A/B, then the CUDA-graph anchor.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
[ -x /tmp/decode ] || { xz -d -c target/h200/decode-7.xz > /tmp/decode && chmod +x /tmp/decode; }
D="--device vulkan --fused-only --steps 64"
timeout 240 /tmp/decode $D --batches 1,8,64 --fp8-cache 0.05,0.05 --fp8-weights --json $o/decode.json 2>>$o/decode.log | tee $o/decode.md
for i in 1 2; do
  for d in 0 2; do
    ROPE_POOL_FP8_DECODE=$d timeout 60 /tmp/decode $D --batches 1 --fp8-weights 2>>$o/decode.log | grep '^| fused' | sed "s/^/decode=$d /" | tee -a $o/fp8w.md
  done
  for f in 1 0; do
    ROPE_POOL_FUSED_PROJECTIONS=$f timeout 60 /tmp/decode $D --batches 1,8 2>>$o/decode.log | grep '^| fused' | sed "s/^/fused=$f /" | tee -a $o/fused.md
  done
done
PYTHONUNBUFFERED=1 timeout 200 python3 target/h200/graph_decode_anchor.py > $o/anchor.txt 2>&1
tail -12 $o/anchor.txt
