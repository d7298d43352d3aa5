#!/usr/bin/env bash
# Binaries of 82bd128 (the library and kernels of 3bc539e; ROPE_POOL_CUDA_FUSION=0
# scripts/cuda-build.sh pool_attention|suite), one carry of 46 MB: the head-tile kernel with
# lean rows (ROPE_POOL_ATTENTION_HEADS_LEAN=1), its test through CUDA, then Nsight Compute of
# the kernel with and without them at 64 × 4096 and 1 × 32768 on f16 and fp8 pools. The decode
# runs waiting beside it: run3/.
for b in pool_attention-cuda suite-cuda; do xz -T8 -d -c target/go23b/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-540} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
T=60 run suite.txt "head tiles, lean rows" ROPE_POOL_ATTENTION_HEADS_LEAN=1 /tmp/suite-cuda --test-threads=1 the_head_tile_kernel
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-300 | head -20
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
