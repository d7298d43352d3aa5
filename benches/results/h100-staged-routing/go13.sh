#!/usr/bin/env bash
# Staged routing: the decoder's tests on the GPU, then decode at 8-64 rows with the routing
# (default) and without it (ROPE_POOL_STAGED_FROM=65), alternated, then the CUDA-graph anchor.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
for b in suite decode; do xz -d -c target/h200/$b-13.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $o/gpu.txt
for t in projections captured_ checkpoints fused_projections; do
  timeout 200 /tmp/suite $t 2>&1 | grep -v XDG_RUNTIME | grep -E "^test |test result|panicked| vs " | head -30 | tee -a $o/suite.txt
done
D="--device vulkan --fused-only --steps 64 --batches 8,12,16,32,64"
for i in 1 2; do
  for from in "" 65; do
    echo "== staged_from=${from:-default} run $i" | tee -a $o/decode.md
    env ${from:+ROPE_POOL_STAGED_FROM=$from} timeout 150 /tmp/decode $D 2>>$o/decode.log | grep '^| fused' | tee -a $o/decode.md
  done
done
PYTHONUNBUFFERED=1 timeout 200 python3 target/h200/graph_decode_anchor.py > $o/anchor.txt 2>&1
tail -4 $o/anchor.txt
