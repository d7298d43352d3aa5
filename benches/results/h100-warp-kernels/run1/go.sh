#!/usr/bin/env bash
# Binaries of the tree after 101981a (the warp product of many rows, ROPE_POOL_TILES_WARP=2|4, added): the warp-level staged products (ROPE_POOL_STAGED_WARP=1, _TILES, _AHEAD, _SHARED) and the fp8
# tiles product (ROPE_POOL_MATVEC_TILES=1): their float64 tests through CUDA, decode A/B in alternating processes, the anchor.
for b in decode-cuda suite-cuda; do xz -T8 -d -c target/go16/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-480} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
S="/tmp/suite-cuda --test-threads=1"
T=100 run suite.txt "warp tests" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_TILES_WARP=4 $S --exact generate::projections_match_float64 generate::staged_shares_match_float64 generate::decoders_with_staged_shares_match_the_oracle generate::tiles_product_matches_float64
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | grep -v " ok$" | head -30
D="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 8,64"
run dec.txt "staged" ROPE_POOL_STAGED_WARP=0 $D
run dec.txt "warp" ROPE_POOL_STAGED_WARP=1 $D
run dec.txt "warp shared" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_STAGED_WARP_SHARED=1 $D
run dec.txt "warp ahead" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_STAGED_WARP_AHEAD=1 $D
run dec.txt "warp 2 tiles" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_STAGED_WARP_TILES=2 $D
run dec.txt "warp shared ahead" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_STAGED_WARP_SHARED=1 ROPE_POOL_STAGED_WARP_AHEAD=1 $D
run dec.txt "staged again" ROPE_POOL_STAGED_WARP=0 $D
grep -E "==|\| fused|rc " $OUT/dec.txt
P="/tmp/decode-cuda --device cuda --fused-only --steps 4 --batches 1,64"
run pre.txt "tiles product" ROPE_POOL_TILES_WARP=0 $P
run pre.txt "warp product 4" ROPE_POOL_TILES_WARP=4 $P
run pre.txt "warp product 2" ROPE_POOL_TILES_WARP=2 $P
run pre.txt "tiles product again" ROPE_POOL_TILES_WARP=0 $P
grep -E "==|\| fused|rc " $OUT/pre.txt
(cd target/go16 && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt); tail -8 $OUT/anchor.txt
T=90 run suite.txt "tiles tests" ROPE_POOL_MATVEC_TILES=1 $S fp8_projections fp8_nan fused_projections the_head_tile
T=60 run suite.txt "warp tests, 2 tiles ahead, shared" ROPE_POOL_STAGED_WARP=1 ROPE_POOL_STAGED_WARP_TILES=2 ROPE_POOL_STAGED_WARP_AHEAD=1 ROPE_POOL_STAGED_WARP_SHARED=1 $S --exact generate::projections_match_float64 generate::staged_shares_match_float64
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | grep -v " ok$" | head -40
F="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1 --fp8-weights"
for i in 1 2; do
  run fp8.txt "plane kernels $i" ROPE_POOL_MATVEC_TILES=0 $F
  run fp8.txt "tiles $i" ROPE_POOL_MATVEC_TILES=1 $F
done
grep -E "==|\| fused|rc " $OUT/fp8.txt
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__grid_size,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for t in 0 1; do LIMIT=540 T=40 run ncu.txt "ncu warp $t" ROPE_POOL_STAGED_WARP=$t ncu --clock-control none -k regex:"staged_rows|warp_rows" --launch-count 8 --metrics $M --csv /tmp/decode-cuda --device cuda --fused-only --steps 2 --batches 64; done
grep -E "==|gpu__time|dram__|issue_active|registers" $OUT/ncu.txt | awk -F'","' '/^==/{print;next}{print $5, $(NF-2), $NF}'
cat $OUT/smi.txt
echo "done at ${SECONDS}s"
