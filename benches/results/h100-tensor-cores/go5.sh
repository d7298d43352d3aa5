#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in tensor_cores tensor_cores-cuda; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/clocks.csv &
echo "== vulkan $(date +%T)"; timeout 200 /tmp/tensor_cores --device vulkan > $OUT/tc.txt 2>&1
echo "== cuda $(date +%T)"; timeout 150 /tmp/tensor_cores-cuda --device cuda > $OUT/tc-cuda.txt 2>&1
kill %1
sed 's/Gemm { //; s/, group: 8//' $OUT/tc.txt $OUT/tc-cuda.txt | grep -v "^$"
if grep -q H200 $OUT/gpu.txt; then
  xz -d -c target/h200/decode.xz > /tmp/decode; chmod +x /tmp/decode
  for i in 1 2 3; do
    echo "== fp8 weights b1 run $i $(date +%T)"
    timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --fp8-weights --batches 1 2>&1 | tail -8 | tee -a $OUT/fp8w-b1.txt
  done
fi
echo "== done $(date +%T)"
