#!/usr/bin/env bash
# Binaries of 06721f0 (warp-level staged products in their kept form, a knob: ROPE_POOL_STAGED_WARP=1):
# their float64 tests from 5 rows through CUDA, the decode table (default launch, and the staged kernel for A/B), the anchor.
for b in decode-cuda suite-cuda; do xz -T8 -d -c target/go17/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-300} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
D="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt "default (staged kernel) 1" X=1 $D
run dec.txt "warp-level staged products" ROPE_POOL_STAGED_WARP=1 $D
run dec.txt "default 2" X=1 $D
run dec.txt "warp-level staged products 2" ROPE_POOL_STAGED_WARP=1 $D
run dec.txt "warp-level, blocks of 4 tiles (fewer registers)" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_STAGED_BLOCK=4 $D
run dec.txt "staged, blocks of 4 tiles" ROPE_POOL_STAGED_BLOCK=4 $D
(cd target/go17 && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
grep -E "==|\| fused|rc " $OUT/dec.txt; tail -5 $OUT/anchor.txt
LIMIT=400 T=120 run suite.txt "warp tests from 5 rows" ROPE_POOL_STAGED_WARP=1 /tmp/suite-cuda --test-threads=1 --exact generate::projections_match_float64 generate::decoders_with_staged_shares_match_the_oracle generate::fused_projections_match_float64
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-300 | head -20
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
