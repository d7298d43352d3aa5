#!/usr/bin/env bash
# Matrix-vector knobs at batch 1 and 8 (launched steps, --profile), the build without fusion.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
xz -d -c target/h200/decode-graphs.xz > /tmp/decode-graphs && chmod +x /tmp/decode-graphs
o=${OUT:-/tmp/o}; mkdir -p $o
for k in ROPE_POOL_X=0 ROPE_POOL_MATVEC_LOADS=16 ROPE_POOL_MATVEC_PLANES=4 ROPE_POOL_MATVEC_LOADS=2; do
  echo "== $k" | tee -a $o/knobs.md
  env $k timeout 60 /tmp/decode-graphs --device vulkan --fused-only --steps 2 --batches 1,8 --profile 2>/dev/null | grep -iE 'matvec|^profile, batch [18]: 4' | tee -a $o/knobs.md
done
