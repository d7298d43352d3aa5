#!/usr/bin/env bash
# The unrun depth experiment (binaries of a30d39f + benches/experiments/staged-depth.patch): probe A/B.
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
xz -d -c target/h200/decode.xz > /tmp/decode && chmod +x /tmp/decode
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/probe.txt
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 8,64"
for env in "" "ROPE_POOL_STAGED_DEPTH=2" "" "ROPE_POOL_STAGED_DEPTH=2"; do
  echo "== $env" >> $OUT/probe.txt
  env $env timeout 45 /tmp/decode $P 2>&1 | grep -E "^\| project" >> $OUT/probe.txt
done
cat $OUT/probe.txt
