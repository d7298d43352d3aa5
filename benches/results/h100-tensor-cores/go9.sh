#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
xz -d -c target/h200/decode.xz > /tmp/decode; chmod +x /tmp/decode
for i in 1 2 3 4 5; do
  echo "== decode b1 $i $(date +%T)"
  timeout 40 /tmp/decode --device vulkan --fused-only --steps 8 --batches 1 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-b1.txt
done
echo "== anchor $(date +%T)"
timeout 120 python3 target/h200/graph_decode_anchor.py > $OUT/anchor.txt 2>&1; tail -4 $OUT/anchor.txt
echo "== done $(date +%T)"
