#!/usr/bin/env bash
# Binaries of bafdd94 (ROPE_POOL_CUDA_FUSION=0 scripts/cuda-build.sh suite|decode). Flash-form query tiles (attention_flash_kernel, knob ROPE_POOL_ATTENTION_FLASH=1;
# with the ahead variant): the suite's query-tile tests through CUDA with the knob, prefill through the decoder
# against the cmma query tiles in alternating processes, Nsight Compute of both kernels at one 4096-token prompt, the anchor.
for b in decode-cuda suite-cuda; do xz -T8 -d -c target/go20/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-480} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
D="/tmp/decode-cuda --device cuda --fused-only --steps 4 --batches 1,64"
L="/tmp/decode-cuda --device cuda --fused-only --steps 4 --batches 1 --prompt 4096"
run dec.txt "cmma query tiles" ROPE_POOL_TRACE=1 $D
run dec.txt "flash" ROPE_POOL_TRACE=1 ROPE_POOL_ATTENTION_FLASH=1 $D
run dec.txt "4096: cmma query tiles" X=1 $L
run dec.txt "4096: flash" ROPE_POOL_ATTENTION_FLASH=1 $L
run dec.txt "4096: flash ahead" ROPE_POOL_ATTENTION_FLASH=1 ROPE_POOL_ATTENTION_FLASH_AHEAD=1 $L
run dec.txt "4096: flash 8 warps" ROPE_POOL_ATTENTION_FLASH=1 ROPE_POOL_ATTENTION_FLASH_WARPS=8 $L
run dec.txt "4096: flash ahead 8 warps" ROPE_POOL_ATTENTION_FLASH=1 ROPE_POOL_ATTENTION_FLASH_AHEAD=1 ROPE_POOL_ATTENTION_FLASH_WARPS=8 $L
grep -E "^==|\| fused|rc |-> |panicked" $OUT/dec.txt | cut -c1-250
T=200 run suite.txt "query-tile tests, flash" ROPE_POOL_ATTENTION_FLASH=1 /tmp/suite-cuda --test-threads=1 pool_attention::the_query_tile_kernel pool_attention::climbing_scores
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-400 | head -20
M=gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
S="/tmp/decode-cuda --device cuda --fused-only --steps 1 --batches 1 --prompt 4096 --layers 2"
LIMIT=440 T=50 run ncu.txt "ncu flash" ROPE_POOL_ATTENTION_FLASH=1 ncu --clock-control none -k regex:attention_flash --launch-count 2 --metrics $M --csv $S
LIMIT=460 T=40 run ncu.txt "ncu cmma tiles" X=1 ncu --clock-control none -k regex:attention_tiles --launch-count 2 --metrics $M --csv $S
grep -E "^==|attention_" $OUT/ncu.txt | awk -F'","' '{print $5, $(NF-2), $NF}' | cut -c1-200 | head -30
(cd target/go20 && timeout 40 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
tail -5 $OUT/anchor.txt; cat $OUT/smi.txt; echo "done at ${SECONDS}s"
