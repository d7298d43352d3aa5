#!/usr/bin/env bash
# group kernel measurement
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in pool_attention suite decode; do [ -f target/go/$b.xz ] && xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
PA="/tmp/pool_attention --device vulkan --decode-only --no-gather --quick"
run() { local name=$1; shift; echo "== $name: $*" >> $OUT/pa.txt; timeout 120 env "$@" >> $OUT/pa.txt 2>&1; echo "rc $?" >> $OUT/pa.txt; }
run base-f16 $PA --dtypes f16
run base-fp8 $PA --dtypes f16 --fp8
run group4-f16 ROPE_POOL_ATTENTION_GROUP=1 ROPE_POOL_TRACE=1 $PA --dtypes f16
run group4-fp8 ROPE_POOL_ATTENTION_GROUP=1 ROPE_POOL_TRACE=1 $PA --dtypes f16 --fp8
run group2-fp8 ROPE_POOL_ATTENTION_GROUP=1 ROPE_POOL_ATTENTION_GROUP_PLANES=2 $PA --dtypes f16 --fp8
run group8-fp8 ROPE_POOL_ATTENTION_GROUP=1 ROPE_POOL_ATTENTION_GROUP_PLANES=8 $PA --dtypes f16 --fp8
run group2-f16 ROPE_POOL_ATTENTION_GROUP=1 ROPE_POOL_ATTENTION_GROUP_PLANES=2 $PA --dtypes f16
run base-fp8-again $PA --dtypes f16 --fp8
ROPE_POOL_ATTENTION_GROUP=1 ROPE_POOL_TRACE=1 timeout 200 /tmp/suite pool_attention > $OUT/suite-group.txt 2>&1; echo "rc $?" >> $OUT/suite-group.txt
tail -5 $OUT/suite-group.txt
grep -v '^$' $OUT/pa.txt | grep -E '==|decode|rc ' | head -80
