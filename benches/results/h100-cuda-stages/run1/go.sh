#!/usr/bin/env bash
# cuda build (no fusion stream) of 9d51651: staged column tiles a plane (ROPE_POOL_STAGED_COLS),
# tiles product stages (ROPE_POOL_TILES_STAGES). Priority order, 570 s.
for b in decode-cuda suite-cuda; do xz -d -c target/go6/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-570} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; local left=$(( ${LIMIT:-570} + 20 - SECONDS )); [ $t -gt $left ] && t=$left; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
D=/tmp/decode-cuda
C="$D --device cuda --fused-only --steps 64 --batches 1,8,64"
S=ROPE_POOL_STAGED
(cd target/go6 && timeout 90 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $?" >> $OUT/anchor.txt)
for i in 1 2; do
  run dec.txt cols1 X=0 $C
  run dec.txt cols2 ${S}_COLS=2 $C
  run dec.txt cols4 ${S}_COLS=4 $C
done
C64="$D --device cuda --fused-only --steps 64 --batches 64"
run dec.txt "cols2 block4" ${S}_COLS=2 ${S}_BLOCK=4 $C64
run dec.txt "cols4 block4" ${S}_COLS=4 ${S}_BLOCK=4 $C64
run dec.txt "cols2 cubes512" ${S}_COLS=2 ${S}_CUBES=512 $C64
run dec.txt "cols4 cubes512" ${S}_COLS=4 ${S}_CUBES=512 $C64
P="$D --device cuda --fused-only --steps 4 --batches 1,64"
for i in 1 2; do
  run pre.txt stages1 X=0 $P
  run pre.txt stages2 ROPE_POOL_TILES_STAGES=2 $P
done
T=150 run suite.txt cols2-stages2 ${S}_COLS=2 ROPE_POOL_TILES_STAGES=2 /tmp/suite-cuda --test-threads=1 projections_match_float64 fused_projections_match_float64 decoders_with_staged tiles_product fp8_projections
run prof.txt "fp8 weights b1 profile" X=0 $D --device cuda --fused-only --steps 16 --batches 1 --fp8-weights --profile
run prof.txt "b64 profile cols2" ${S}_COLS=2 $D --device cuda --fused-only --steps 8 --batches 64 --profile
F="$D --device cuda --fused-only --steps 64 --batches 1,8,64 --fp8-cache 1,1 --fp8-weights"
run fp8.txt "fp8 cols2" ${S}_COLS=2 $F
T=100 run suite.txt cols4 ${S}_COLS=4 /tmp/suite-cuda --test-threads=1 projections_match_float64 fused_projections_match_float64 fp8_projections
grep -E "^test |test result|panicked|rc |^== " $OUT/suite.txt | head -40
tail -8 $OUT/anchor.txt
grep -E "==|\| fused|rc " $OUT/dec.txt $OUT/pre.txt $OUT/fp8.txt
grep -E "==|profile|Profile|^\| [A-Z]" $OUT/prof.txt | head -70
