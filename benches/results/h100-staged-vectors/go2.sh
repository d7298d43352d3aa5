#!/usr/bin/env bash
# Staged routing from 5 rows, block 4: probe sweep, decode against the anchor, tests.
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode suite; do xz -d -c target/h200/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/decode.txt
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 1,4,8,16,32,64"
for env in "" "ROPE_POOL_STAGED_BLOCK=2" "ROPE_POOL_STAGED_CUBES=1024" "ROPE_POOL_STAGED_PLANES=2" "ROPE_POOL_STAGED_CUBES=1024 ROPE_POOL_STAGED_BLOCK=2"; do
  echo "== $env" >> $OUT/probe.txt
  env $env timeout 100 /tmp/decode $P 2>&1 | grep -E "^\| project" >> $OUT/probe.txt
done
D="--device vulkan --fused-only --steps 64"
for env in "" "ROPE_POOL_STAGED_FROM=65" "" ; do
  echo "== decode $env" >> $OUT/decode.txt
  env $env timeout 150 /tmp/decode $D --batches 1,8,64 2>&1 | grep -E "^\|" >> $OUT/decode.txt
done
echo "== anchor" >> $OUT/decode.txt
timeout 200 python3 target/h200/graph_decode_anchor.py 2>&1 | tail -8 >> $OUT/decode.txt
echo "== decode batch 1 again" >> $OUT/decode.txt
timeout 60 /tmp/decode $D --batches 1 2>&1 | grep -E "^\| fused" >> $OUT/decode.txt
cat $OUT/decode.txt
T=$OUT/tests.txt
timeout 200 /tmp/suite projections captured_ checkpoints 2>&1 | grep -E "^test |result|panicked" | tail -20 > $T
cat $T
