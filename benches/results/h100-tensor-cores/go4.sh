#!/usr/bin/env bash
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
xz -d -c target/h200/tensor_cores.xz > /tmp/tensor_cores; chmod +x /tmp/tensor_cores
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/clocks.csv &
timeout 100 /tmp/tensor_cores --device vulkan > $OUT/tc-1.txt 2>&1
for i in 2 3; do timeout 100 /tmp/tensor_cores --device vulkan --gemm-only > $OUT/tc-$i.txt 2>&1; done
kill %1
grep -h "8192" $OUT/tc-*.txt | sed 's/Gemm { //; s/, group: 8//'
