#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in suite decode; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== suite $(date +%T)"
timeout 60 /tmp/suite tiles_product 2>&1 | grep -v XDG_RUNTIME | tail -6 | tee $OUT/suite.txt
echo "== probe $(date +%T)"
timeout 100 /tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 512,32768 2>&1 | grep -E "^\| project" | tee $OUT/probe.txt
for i in 1 2; do
  echo "== decode tiles $i $(date +%T)"
  timeout 90 /tmp/decode --device vulkan --fused-only --steps 16 --batches 1,8,64 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-tiles.txt
  echo "== decode cubek $i $(date +%T)"
  ROPE_POOL_TILES_PRODUCT=0 timeout 90 /tmp/decode --device vulkan --fused-only --steps 16 --batches 1,8,64 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-cubek.txt
done
echo "== anchor $(date +%T)"
timeout 120 python3 target/h200/graph_decode_anchor.py > $OUT/anchor.txt 2>&1; tail -8 $OUT/anchor.txt
echo "== done $(date +%T)"
