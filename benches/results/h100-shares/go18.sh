#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/h200/decode.xz > /tmp/decode; chmod +x /tmp/decode
for c in new 256; do
  echo "-- probe cubes=$c $(date +%T)"
  if [ $c = new ]; then K=X=1; else K=ROPE_POOL_STAGED_CUBES=$c; fi
  env $K timeout 60 /tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 8,16 2>&1 | grep -E "^\| project" | tee -a $OUT/probe-$c.txt
done
for c in new 256 new 256; do
  echo "-- decode cubes=$c $(date +%T)"
  if [ $c = new ]; then K=X=1; else K=ROPE_POOL_STAGED_CUBES=$c; fi
  env $K timeout 40 /tmp/decode --device vulkan --fused-only --steps 64 --batches 8 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-$c.txt
done
echo "== anchor $(date +%T)"
timeout 60 python3 target/h200/graph_decode_anchor.py 2>&1 | tail -4 | tee $OUT/anchor.txt
echo "== done $(date +%T)"
