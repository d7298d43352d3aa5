#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode decode-cuda; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
run() { local f=$1; local name=$2; shift 2; echo "== $name: $*" >> $OUT/$f; timeout ${T:-150} env "$@" >> $OUT/$f 2>&1; echo "rc $?" >> $OUT/$f; }
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt cuda-3 $C
run dec.txt cuda-ct2 ROPE_POOL_ATTENTION_CHUNK_TILES=2 $C
D="/tmp/decode --device vulkan --fused-only --steps 64 --batches 1,8"
for k in 2 8 4 2 8; do run ct.txt ct$k ROPE_POOL_ATTENTION_CHUNK_TILES=$k $D; done
T=200 run prof.txt cuda-prof /tmp/decode-cuda --device cuda --fused-only --steps 8 --batches 1,64 --profile
grep -E "==|\| fused|rc |rror|anic" $OUT/dec.txt; grep -E "==|\| fused|rc " $OUT/ct.txt; grep -vE "^\s*$" $OUT/prof.txt | head -80
