#!/usr/bin/env bash
# full decode/prefill table at 03fbf6b with the anchor in the same run; fp8 weights; attention rows
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode pool_attention; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; echo "== $name: $*" >> $OUT/$f; timeout 170 env "$@" >> $OUT/$f 2>&1; echo "rc $?" >> $OUT/$f; }
D="/tmp/decode --device vulkan --fused-only --steps 64"
for i in 1 2 3; do run dec.txt f16-$i $D --batches 1,8,64; done
for i in 1; do run dec.txt fp8w-$i $D --batches 1 --fp8-weights; done
(cd target/go && timeout 240 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $?" >> $OUT/anchor.txt)
PA="/tmp/pool_attention --device vulkan --decode-only --no-gather --quick"
run pa.txt f16 $PA --dtypes f16
run pa.txt fp8 $PA --dtypes f16 --fp8
grep -E "==|\| fused|rc " $OUT/dec.txt; tail -6 $OUT/anchor.txt; grep -E "==|decode" $OUT/pa.txt
