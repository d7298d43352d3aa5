#!/usr/bin/env bash
# cuda build (no fusion stream) of the tree with the head-tile attention kernel (knob, default
# off). Correctness first (suite on CUDA), then pool_attention decode rows with and without it.
for b in suite-cuda pool_attention-cuda; do xz -d -c target/go10/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-330} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-40}; local left=$(( ${LIMIT:-330} + 20 - SECONDS )); [ $t -gt $left ] && t=$left; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16 --quick"
T=90 run suite.txt "head tiles test" X=0 /tmp/suite-cuda --test-threads=1 head_tile
run att.txt "f16" X=0 $A
run att.txt "f16 head tiles" ROPE_POOL_ATTENTION_HEAD_TILES=1 $A
run att.txt "fp8" X=0 $A --fp8
run att.txt "fp8 head tiles" ROPE_POOL_ATTENTION_HEAD_TILES=1 $A --fp8
T=120 run suite.txt "pool_attention tests, head tiles for every call" ROPE_POOL_ATTENTION_HEAD_TILES=1 /tmp/suite-cuda --test-threads=1 pool_attention
run att.txt "f16 head tiles cubes 4096" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_CUBES=4096 $A
run att.txt "fp8 head tiles cubes 4096" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_CUBES=4096 $A --fp8
grep -E "^test |test result|panicked|rc |^== |not taken" $OUT/suite.txt | head -40
grep -E "==|\| decode|rc " $OUT/att.txt
