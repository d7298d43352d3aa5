#!/usr/bin/env bash
# cuda build of 1fca601 (no fusion stream): the staged kernel's knobs at 16/32/64 rows (matmul
# probe), ranked by a step's weighted µs at 64 rows; the anchor and decode with the default and
# the best knobs; the suite's checks of 2 blocks ahead and of f16 halves for fp8 on CUDA; fp8
# caches and weights with halves against integers; a batch-64 profile. Priority order, 575 s.
for b in decode-cuda suite-cuda; do xz -d -c target/go5/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-575} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; local left=$(( ${LIMIT:-575} + 15 - SECONDS )); [ $t -gt $left ] && t=$left; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
P="/tmp/decode-cuda --device cuda --fused-only --steps 1 --batches 1 --layers 1 --vocab 2048 --matmul-probe --probe-project-only --probe-rows 16,32,64"
S=ROPE_POOL_STAGED
for k in "X=0" "${S}_DEPTH=2" "${S}_DEPTH=3" "${S}_BLOCK=8" "${S}_BLOCK=8 ${S}_DEPTH=2" "${S}_SPLITS=8 ${S}_DEPTH=2" "${S}_PLANES=8 ${S}_DEPTH=2"; do
  T=40 run probe.txt "$k" $k $P
done
awk '/^== /{name=substr($0,4); sub(/:.*/,"",name)} /^\| project \| 64 \|/{split($0,c,"|"); w=(c[4]~/128256/)?1:32; t[name]+=w*c[5]; n5[name]++} END{for(n in t) if (n5[n]==5) printf "%.1f %s\n", t[n], n}' $OUT/probe.txt | sort -n > $OUT/rank.txt
BEST=$(head -1 $OUT/rank.txt | cut -d' ' -f2-); BEST=${BEST:-X=0}
echo "best: $BEST at ${SECONDS}s" > $OUT/best.txt
(cd target/go5 && timeout 80 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $?" >> $OUT/anchor.txt)
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt default X=0 $C
run dec.txt "best $BEST" $BEST $C
T=90 run suite.txt depth2-and-halves ROPE_POOL_STAGED_DEPTH=2 /tmp/suite-cuda --test-threads=1 projections_match_float64 decoders_with_staged every_fp8_code fp8_pools_match attention_over_fp8 fp8_projections
F="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,64 --fp8-cache 1,1 --fp8-weights"
run fp8.txt halves $BEST $F
run fp8.txt integers $BEST ROPE_POOL_FP8_DECODE=0 $F
run dec.txt default X=0 $C
run dec.txt "best $BEST" $BEST $C
T=60 run tf.txt prefill-products X=0 /tmp/decode-cuda --device cuda --fused-only --steps 1 --batches 1 --layers 1 --vocab 2048 --matmul-probe --probe-project-only --probe-rows 4096,32768
run att.txt cubes1024 $BEST ROPE_POOL_ATTENTION_CUBES=1024 /tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 64
cat $OUT/rank.txt $OUT/best.txt; grep -E "==|\| fused|rc " $OUT/dec.txt $OUT/fp8.txt $OUT/att.txt; tail -6 $OUT/anchor.txt
grep -E "^test |test result|panicked|rc |^== " $OUT/suite.txt | head -40
grep -E "^== |\| project" $OUT/tf.txt
