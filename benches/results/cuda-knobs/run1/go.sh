#!/usr/bin/env bash
# Binaries of 82bd128 (the library and kernels of 3bc539e; ROPE_POOL_CUDA_FUSION=0
# scripts/cuda-build.sh pool_attention|decode). Knobs built and not yet run on a GPU: decode A/B
# with the staged kernel's row planes (ROPE_POOL_STAGED_ROW_PLANES=2) in alternating processes,
# fp8 weights at batch 1 with 4 loads a unit (2 is the launch), a 32768-token prompt joining 8
# decoding requests with and without chunked prefill, a batch-64 profile, the CUDA-graph anchor;
# Nsight Compute of the head-tile kernel with and without lean rows
# (ROPE_POOL_ATTENTION_HEADS_LEAN=1).
for b in decode-cuda pool_attention-cuda; do xz -T8 -d -c target/go23/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-540} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
D="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt "default 1" X=1 $D
run dec.txt "row planes 2" ROPE_POOL_STAGED_ROW_PLANES=2 $D
run dec.txt "default 2" X=1 $D
run dec.txt "row planes 2, 2" ROPE_POOL_STAGED_ROW_PLANES=2 $D
F="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1 --fp8-weights"
run fp8w.txt "fp8 weights, default loads" X=1 $F
run fp8w.txt "fp8 weights, 4 loads" ROPE_POOL_MATVEC_LOADS=4 $F
run fp8w.txt "fp8 weights, default loads 2" X=1 $F
run fp8w.txt "fp8 weights, 4 loads 2" ROPE_POOL_MATVEC_LOADS=4 $F
T=150 run long.txt "a 32768-token prompt joining 8 decoding requests" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 2 --batches 8 --long-prompt 32768 --prefill-chunks 0,2048,8192
run prof.txt "batch 64 profile" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 8 --batches 64 --profile
(cd target/go23 && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
grep -E "^==|^\||rc |panicked" $OUT/long.txt; grep -E "^==|\| fused|rc |panicked" $OUT/dec.txt $OUT/fp8w.txt | cut -c1-250; tail -6 $OUT/anchor.txt
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
