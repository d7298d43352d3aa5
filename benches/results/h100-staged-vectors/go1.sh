#!/usr/bin/env bash
# Staged products and query tiles with vectorised shared memory: tests, then the probes.
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode suite attention; do [ -f target/h200/$b.xz ] && xz -d -c target/h200/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
T=$OUT/tests.txt
for env in "" "ROPE_POOL_STAGED_FROM=1" "ROPE_POOL_STAGED_FROM=1 ROPE_POOL_STAGED_PLANES=8"; do
  echo "== $env projections" >> $T
  env $env timeout 120 /tmp/suite projections 2>&1 | grep -E "test |result|panicked|error" | tail -8 >> $T
done
echo "== query tiles" >> $T
timeout 150 /tmp/suite query_tile climbing 2>&1 | grep -E "test |result|panicked|error" | tail -8 >> $T
cat $T
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 1,4,8,16,24,32,64"
for env in "" "ROPE_POOL_STAGED_FROM=1" "ROPE_POOL_STAGED_FROM=1 ROPE_POOL_STAGED_PLANES=8" "ROPE_POOL_STAGED_FROM=1 ROPE_POOL_STAGED_BLOCK=4" "ROPE_POOL_STAGED_FROM=1 ROPE_POOL_STAGED_PLANES=8 ROPE_POOL_STAGED_BLOCK=4"; do
  echo "== $env" >> $OUT/probe.txt
  env $env timeout 120 /tmp/decode $P 2>&1 | grep -E "^\|" >> $OUT/probe.txt
done
echo "== attention prefill" >> $OUT/attention.txt
timeout 120 /tmp/attention --device vulkan --prefill-only --no-gather --dtypes f16 2>&1 | tail -12 >> $OUT/attention.txt
timeout 120 /tmp/attention --device vulkan --prefill-only --no-gather --dtypes f16 --query-tiles off 2>&1 | tail -12 >> $OUT/attention.txt
cat $OUT/attention.txt
