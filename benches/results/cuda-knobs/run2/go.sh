#!/usr/bin/env bash
# Binaries of 3dc9a7c (the kernels of 3bc539e) (ROPE_POOL_CUDA_FUSION=0 scripts/cuda-build.sh suite|pool_attention|decode).
# The knobs built and not yet run on a GPU, and the fp8 attention cases not yet run through CUDA:
# decode A/B with the staged kernel's row planes (ROPE_POOL_STAGED_ROW_PLANES=2) in alternating
# processes, fp8 weights at batch 1 with more loads a unit, a batch-64 profile, the anchor; then
# the suite's fp8 tests (flash kernel over many key tiles), the head-tile test with lean rows and
# the projection tests with row planes; Nsight Compute of the head-tile kernel lean or not.
for b in suite-cuda pool_attention-cuda; do xz -T8 -d -c target/go23b/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-540} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
S=/tmp/suite-cuda
T=200 run suite.txt "fp8 tests" X=1 $S --test-threads=1 fp8
T=60 run suite.txt "head tiles, lean rows" ROPE_POOL_ATTENTION_HEADS_LEAN=1 $S --test-threads=1 the_head_tile_kernel
T=120 run suite.txt "projections, row planes 2" ROPE_POOL_STAGED_ROW_PLANES=2 $S --test-threads=1 projections
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-300 | head -40
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16 --quick"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
N="ncu --clock-control none -k regex:attention --launch-count 2 --metrics $M --csv"
for s in "64 4096" "1 32768"; do set -- $s
 for f in "" "--fp8"; do
  T=40 run ncu.txt "lean 0 $f $1x$2" X=0 $N $A $f --seqs $1 --keys $2
  T=40 run ncu.txt "lean 1 $f $1x$2" ROPE_POOL_ATTENTION_HEADS_LEAN=1 $N $A $f --seqs $1 --keys $2
 done
done
grep -E "^==|gpu__time_duration|registers" $OUT/ncu.txt | cut -c1-220 | head -40
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
