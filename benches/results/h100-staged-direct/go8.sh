#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
[ -x /tmp/decode ] || { xz -d -c target/go/decode.xz > /tmp/decode; chmod +x /tmp/decode; }
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows ${ROWS:-8,16,64}"
i=0
for cfg in "ROPE_POOL_STAGED_DIRECT=4" "ROPE_POOL_STAGED_DIRECT=2" "ROPE_POOL_STAGED_DIRECT=8 ROPE_POOL_STAGED_BLOCK=8" $EXTRA; do
  i=$((i+1)); echo "== probe $i [$cfg] $(date +%T)"
  env $cfg timeout 120 /tmp/decode $P > $OUT/probe$i.txt 2>&1
  grep "| project" $OUT/probe$i.txt
done
echo "== done $(date +%T)"
