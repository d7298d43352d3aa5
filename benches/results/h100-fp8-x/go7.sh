#!/usr/bin/env bash
# fp8 batch 1: x in shared memory, interleaved words (decode2), against x in the loop.
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
xz -d -c target/h200/decode2.xz > /tmp/decode2 && chmod +x /tmp/decode2
nvidia-smi --query-gpu=name,driver_version --format=csv
D="--device vulkan --fused-only --steps 64 --fp8-weights --batches 1"
for round in 1 2; do
  for v in shared shared0; do
    echo "== $v round $round"
    case $v in
      shared) timeout 30 /tmp/decode2 $D ;;
      shared0) ROPE_POOL_FP8_X_SHARED=0 timeout 30 /tmp/decode2 $D ;;
    esac 2>&1 | grep -E "^\| fused"
  done
done
echo "== shared ROPE_POOL_MATVEC_LOADS=4"; ROPE_POOL_MATVEC_LOADS=4 timeout 30 /tmp/decode2 $D 2>&1 | grep -E "^\| fused"
xz -d -c target/h200/pool_attention.xz > /tmp/pool_attention && chmod +x /tmp/pool_attention
A="--device vulkan --decode-only --no-gather --dtypes f16 --quick"
for v in f16 fp8 f16 fp8; do
  echo "== attention $v"
  case $v in
    f16) timeout 40 /tmp/pool_attention $A ;;
    fp8) timeout 40 /tmp/pool_attention $A --fp8 ;;
  esac 2>&1 | grep -E "^\| decode"
done
