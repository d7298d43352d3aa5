#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode decode-cuda; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
run() { local f=$1; local name=$2; shift 2; echo "== $name: $*" >> $OUT/$f; timeout ${T:-150} env "$@" >> $OUT/$f 2>&1; echo "rc $?" >> $OUT/$f; }
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
V="/tmp/decode --device vulkan --fused-only --steps 64 --batches 1,8,64"
K="ROPE_POOL_ATTENTION_CHUNK_TILES=1 ROPE_POOL_ATTENTION_STEPS=2"
run c.txt cuda-ct1-s2 $K $C
run c.txt cuda-ct1-s2-u64 $K ROPE_POOL_ATTENTION_UNITS=64 $C
run c.txt cuda-ct2-s2 ROPE_POOL_ATTENTION_CHUNK_TILES=2 ROPE_POOL_ATTENTION_STEPS=2 $C
run c.txt cuda-ct1-s2 $K $C
run v.txt vk-ct1-s2 $K $V
run v.txt vk-ct2 ROPE_POOL_ATTENTION_CHUNK_TILES=2 $V
run v.txt vk-ct2-s2 ROPE_POOL_ATTENTION_CHUNK_TILES=2 ROPE_POOL_ATTENTION_STEPS=2 $V
grep -E "==|\| fused|rc " $OUT/c.txt $OUT/v.txt
