#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode-cuda; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
run() { local f=$1; local name=$2; shift 2; echo "== $name: $*" >> $OUT/$f; timeout ${T:-150} env "$@" >> $OUT/$f 2>&1; echo "rc $?" >> $OUT/$f; }
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8"
for k in 1 2 4 2 1 8; do run ct.txt cuda-ct$k ROPE_POOL_ATTENTION_CHUNK_TILES=$k $C; done
C64="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 64"
run b64.txt default $C64
run b64.txt steps2 ROPE_POOL_ATTENTION_STEPS=2 $C64
run b64.txt steps1 ROPE_POOL_ATTENTION_STEPS=1 $C64
run b64.txt lanes32 ROPE_POOL_ATTENTION_LANES=32 $C64
run b64.txt units256 ROPE_POOL_ATTENTION_UNITS=256 $C64
run b64.txt units64 ROPE_POOL_ATTENTION_UNITS=64 $C64
grep -E "==|\| fused|rc " $OUT/ct.txt $OUT/b64.txt
