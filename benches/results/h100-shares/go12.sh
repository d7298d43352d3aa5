#!/usr/bin/env bash
# run from repo root: bash target/h200/go12.sh
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in suite decode; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== suite $(date +%T)"
timeout 150 /tmp/suite projections 2>&1 | grep -v XDG_RUNTIME | tail -8 | tee $OUT/suite.txt
echo "== probe $(date +%T)"
for w in 1 0 1; do
  echo "-- STAGED_WORDS=$w"
  ROPE_POOL_STAGED_WORDS=$w timeout 60 /tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 5,8,16,32,64 2>&1 | grep -E "^\| project" | tee -a $OUT/probe-$w.txt
done
echo "== decode $(date +%T)"
for w in 1 0 1; do
  echo "-- STAGED_WORDS=$w"
  ROPE_POOL_STAGED_WORDS=$w timeout 80 /tmp/decode --device vulkan --fused-only --steps 32 --batches 1,8,64 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-$w.txt
done
echo "== anchor $(date +%T)"
timeout 120 python3 target/h200/graph_decode_anchor.py 2>&1 | tail -20 | tee $OUT/anchor.txt
echo "== done $(date +%T)"
