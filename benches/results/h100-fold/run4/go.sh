#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in decode decode-prev; do xz -d -c target/go/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
for i in 1 2 3; do
  for b in decode decode-prev; do
    echo "-- $b $i $(date +%T)"
    timeout 90 /tmp/$b --device vulkan --fused-only --steps 64 --batches 1,8,64 2>&1 | grep -E "^\| fused" | tee -a $OUT/decode-$b.txt
  done
done
for i in 1 2; do
  echo "-- fp8 $i $(date +%T)"
  timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --batches 1 --fp8-weights 2>&1 | grep -E "^\| fused" | tee -a $OUT/fp8.txt
done
echo "== anchor $(date +%T)"
timeout 70 python3 target/go/graph_decode_anchor.py 2>&1 | tail -4 | tee $OUT/anchor.txt
echo "== done $(date +%T)"
