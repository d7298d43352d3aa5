#!/usr/bin/env bash
# decode with attention knobs
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
D="/tmp/decode --device vulkan --fused-only --steps 32 --batches 8,64"
run() { local name=$1; shift; echo "== $name: $*" >> $OUT/dec.txt; timeout 170 env "$@" >> $OUT/dec.txt 2>&1; echo "rc $?" >> $OUT/dec.txt; }
run base $D --fp8-cache 1,1
run chunk4 ROPE_POOL_ATTENTION_CHUNK_TILES=4 $D
run cubes1024 ROPE_POOL_ATTENTION_CUBES=1024 $D
grep -E '==|decode|rc ' $OUT/dec.txt | head -60
