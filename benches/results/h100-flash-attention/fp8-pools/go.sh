#!/usr/bin/env bash
# Binaries of e8126f8. The flash kernel on fp8 pools (codes staged as f16 halves): the suite's query-tile and fp8 attention tests through
# CUDA, then pool_attention's prefill rows on fp8 pools, flash against the cmma query tiles.
for b in pool_attention-cuda suite-cuda; do xz -T8 -d -c target/go22/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-300} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-40}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
T=200 run suite.txt "query-tile and fp8 tests (flash on fp8 pools)" X=1 /tmp/suite-cuda --test-threads=1 pool_attention::the_query_tile_kernel pool_attention::climbing_scores fp8
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-400 | head -20
A="/tmp/pool_attention-cuda --device cuda --prefill-only --no-gather --dtypes f16"
run att.txt "flash, fp8 pools" ROPE_POOL_TRACE=1 $A --fp8
run att.txt "cmma query tiles, fp8 pools" ROPE_POOL_ATTENTION_FLASH=0 $A --fp8
run att.txt "flash, fp8 pools 2" X=1 $A --fp8
run att.txt "cmma query tiles, fp8 pools 2" ROPE_POOL_ATTENTION_FLASH=0 $A --fp8
grep -E "^==|^\| prefill|rc |-> |panicked" $OUT/att.txt | cut -c1-200
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
