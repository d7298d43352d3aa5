#!/usr/bin/env bash
# fp8 weights decoded while staged: tests, decode A/B against the dequantizing launch, anchor;
# the staged kernel's planes over inner tiles (probe); profile of fp8 weights.
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode suite; do xz -d -c target/h200/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/decode.txt
T=$OUT/tests.txt
timeout 150 /tmp/suite fp8 projections captured_ checkpoints 2>&1 | grep -E "^test |result|panicked|staged kernel" > $T
echo "== projections, ROPE_POOL_STAGED_KPLANES=4 ROPE_POOL_STAGED_BLOCK=16" >> $T
ROPE_POOL_STAGED_KPLANES=4 ROPE_POOL_STAGED_BLOCK=16 timeout 40 /tmp/suite projections 2>&1 | grep -E "^test |result|panicked" >> $T
cat $T
D="--device vulkan --fused-only --steps 64 --fp8-weights"
for env in "" "ROPE_POOL_FP8_DEQUANTIZE=1"; do
  echo "== decode $env" >> $OUT/decode.txt
  env $env timeout 110 /tmp/decode $D --batches 1,8,16,64 2>&1 | grep -E "^\|" >> $OUT/decode.txt
done
echo "== decode ROPE_POOL_STAGED_FROM=1 (batch 1 through the staged kernel)" >> $OUT/decode.txt
ROPE_POOL_STAGED_FROM=1 timeout 45 /tmp/decode $D --batches 1 2>&1 | grep -E "^\|" >> $OUT/decode.txt
echo "== anchor" >> $OUT/decode.txt
timeout 90 python3 target/h200/graph_decode_anchor.py 2>&1 | tail -8 >> $OUT/decode.txt
cat $OUT/decode.txt
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 8,64"
for env in "" "ROPE_POOL_STAGED_KPLANES=4 ROPE_POOL_STAGED_BLOCK=16" "ROPE_POOL_STAGED_KPLANES=2 ROPE_POOL_STAGED_BLOCK=8" "ROPE_POOL_STAGED_KPLANES=4 ROPE_POOL_STAGED_BLOCK=8"; do
  echo "== $env" >> $OUT/probe.txt
  env $env timeout 30 /tmp/decode $P 2>&1 | grep -E "^\| project" >> $OUT/probe.txt
done
cat $OUT/probe.txt
timeout 60 /tmp/decode --device vulkan --fused-only --steps 8 --fp8-weights --batches 1 --profile > $OUT/profile.txt 2>&1
tail -40 $OUT/profile.txt
