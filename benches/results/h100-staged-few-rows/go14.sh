#!/usr/bin/env bash
# Staged kernel for every projection at 4, 6 and 8 rows against the launch now, alternated.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
o=${OUT:-/tmp/o}; mkdir -p $o
xz -d -c target/h200/decode-13.xz > /tmp/decode && chmod +x /tmp/decode
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $o/gpu.txt
for i in 1 2; do
  for b in 4 6 8; do
    for from in "" $b; do
      echo "== batch $b staged_from=${from:-default} run $i" | tee -a $o/decode.md
      env ${from:+ROPE_POOL_STAGED_FROM=$from} timeout 60 /tmp/decode --device vulkan --fused-only --steps 64 --batches $b 2>>$o/decode.log | grep '^| fused' | tee -a $o/decode.md
    done
  done
done
