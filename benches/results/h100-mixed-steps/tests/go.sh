#!/usr/bin/env bash
# Test and attention-bench binaries of the split mixed steps and lean head-tile rows, one carry
# (target/go24s; ROPE_POOL_CUDA_FUSION=0 ROPE_POOL_PACK_DIR=target/go24 scripts/cuda-build.sh
# suite|pool_attention): the pool_attention and engine tests and the generate tests against
# transformers through CUDA; pool_attention's decode rows on f16 and fp8 pools.
for b in suite-cuda pool_attention-cuda; do xz -T8 -d -c target/go24s/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-560} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16"
run att.txt "f16 and fp8 pools" X=1 $A --fp8
run att.txt "f16 and fp8 pools 2" X=1 $A --fp8
grep -E "^==|^\||rc |panicked" $OUT/att.txt | cut -c1-200 | head -40
T=330 run suite.txt "pool_attention, engine, generate" X=1 /tmp/suite-cuda --test-threads=1 pool_attention:: engine:: checkpoints_generate chunked_prefill batched_requests
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-300 | head -60
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
