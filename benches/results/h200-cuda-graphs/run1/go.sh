#!/usr/bin/env bash
# the default build (SPIR-V) beside burn's cuda feature (no fusion stream: captured steps as CUDA graphs),
# same machine, anchor in the same run; then batch-1 attention split knobs (SPIR-V)
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode decode-cuda; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; echo "== $name: $*" >> $OUT/$f; timeout ${T:-150} env "$@" >> $OUT/$f 2>&1; echo "rc $?" >> $OUT/$f; }
V="/tmp/decode --device vulkan --fused-only --steps 64 --batches 1,8,64"
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt vulkan-warm $V
T=240 run dec.txt cuda-1 $C
run dec.txt vulkan-1 $V
T=200 run dec.txt cuda-2 $C
(cd target/go && timeout 200 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $?" >> $OUT/anchor.txt)
D="/tmp/decode --device vulkan --fused-only --steps 64 --batches 1"
for k in 8 1 2 64; do run ct.txt ct$k ROPE_POOL_ATTENTION_CHUNK_TILES=$k $D; done
grep -E "==|\| fused|rc |rror|anic" $OUT/dec.txt | head -60; tail -8 $OUT/anchor.txt; grep -E "==|\| fused|rc " $OUT/ct.txt
