#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in suite decode decode-base; do xz -d -c target/h200/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
echo "== suite $(date +%T)"
timeout 100 /tmp/suite fused_projections fp8_projections checkpoints 2>&1 | grep -E "^test |test result" | tee $OUT/suite.txt
P="--device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 1 --probe-fused"
echo "== fused probe $(date +%T)"
for b in decode decode-base; do echo "-- $b"; timeout 40 /tmp/$b $P 2>&1 | grep -E "^\| (norm|o |down)" | tee -a $OUT/fused-probe-$b.txt; done
echo "== b1 $(date +%T)"
for b in decode decode-base decode decode-base; do
  echo "-- $b"; timeout 60 /tmp/$b --device vulkan --fused-only --steps 64 --fp8-weights --batches 1 2>&1 | grep -E "^\| fused" | tee -a $OUT/b1-$b.txt
done
echo "== anchor $(date +%T)"
timeout 100 python3 target/h200/graph_decode_anchor.py 2>&1 | tail -4 | tee $OUT/anchor.txt
echo "== done $(date +%T)"
