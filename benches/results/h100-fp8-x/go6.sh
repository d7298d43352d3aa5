#!/usr/bin/env bash
# One run: tests; fp8 batch-1 A/B (x in shared memory or in the loop); attention decode rows
# (fp8 beside f16; items before and after decoding at use; 4 words a load); the decode table
# (f16, fp8 caches, fp8 weights) beside the CUDA-graph anchor.
cd "$(dirname "$0")"
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode pool_attention pool_attention2 suite; do xz -d -c target/h200/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
T=$OUT/tests.txt
timeout 110 /tmp/suite fp8 projections 2>&1 | grep -E "^test |result|panicked" > $T; cat $T
D="--device vulkan --fused-only --steps 64 --fp8-weights --batches 1"
for round in 1 2; do
  for v in new shared0; do
    echo "== $v round $round" >> $OUT/b1.txt
    case $v in
      new) timeout 30 /tmp/decode $D ;;
      shared0) ROPE_POOL_FP8_X_SHARED=0 timeout 30 /tmp/decode $D ;;
    esac 2>&1 | grep -E "^\|" >> $OUT/b1.txt
  done
done
for ct in 1 2 4; do
  echo "== f16 ROPE_POOL_ATTENTION_CHUNK_TILES=$ct" >> $OUT/b1.txt
  ROPE_POOL_ATTENTION_CHUNK_TILES=$ct timeout 30 /tmp/decode --device vulkan --fused-only --steps 64 --batches 1 2>&1 | grep -E "^\|" >> $OUT/b1.txt
done
cat $OUT/b1.txt
A="--device vulkan --fp8 --decode-only --no-gather --dtypes f16 --quick"
for v in 2 1 2w4; do
  echo "== attention $v" >> $OUT/attention.txt
  case $v in
    1) timeout 40 /tmp/pool_attention $A ;;
    2) timeout 40 /tmp/pool_attention2 $A ;;
    2w4) ROPE_POOL_ATTENTION_FP8_WORDS=4 timeout 40 /tmp/pool_attention2 $A ;;
  esac 2>&1 | grep -E "^\|" >> $OUT/attention.txt
done
cat $OUT/attention.txt
timeout 150 /tmp/decode --device vulkan --fused-only --steps 64 --fp8-weights --fp8-cache 0.05,0.05 --batches 1,8,64 2>&1 | grep -E "^\|" > $OUT/decode.txt
cat $OUT/decode.txt
timeout 90 python3 target/h200/graph_decode_anchor.py > $OUT/anchor.txt 2>&1; tail -8 $OUT/anchor.txt
