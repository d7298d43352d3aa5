#!/usr/bin/env bash
# Binaries of dbeb330. Flash-form query tiles with two row tiles a warp (ROPE_POOL_ATTENTION_FLASH_ROWS=2: each key and value operand
# serves two products, the queries read from shared memory each tile): the suite's query-tile tests through CUDA,
# then pool_attention's prefill rows against the launch (one row tile), Nsight Compute.
for b in pool_attention-cuda suite-cuda; do xz -T8 -d -c target/go21/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-330} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-40}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda --device cuda --prefill-only --no-gather --dtypes f16"
run att.txt "flash (launch)" ROPE_POOL_TRACE=1 $A
run att.txt "rows 2, 32 keys" ROPE_POOL_TRACE=1 ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_KEYS=32 $A
run att.txt "rows 2, 64 keys" ROPE_POOL_ATTENTION_FLASH_ROWS=2 $A
run att.txt "rows 2, 32 keys, ahead" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_KEYS=32 ROPE_POOL_ATTENTION_FLASH_AHEAD=1 $A
run att.txt "rows 2, 64 keys, ahead" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_AHEAD=1 $A
run att.txt "flash (launch) 2" X=1 $A
run att.txt "rows 2, 32 keys 2" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_KEYS=32 $A
grep -E "^==|^\| prefill|rc |-> |panicked" $OUT/att.txt | cut -c1-200
T=80 run suite.txt "query-tile tests, rows 2, 32 keys" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_KEYS=32 /tmp/suite-cuda --test-threads=1 pool_attention::the_query_tile_kernel pool_attention::climbing_scores
T=80 run suite.txt "query-tile tests, rows 2, 64 keys, ahead, 8 warps" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_AHEAD=1 ROPE_POOL_ATTENTION_FLASH_WARPS=8 /tmp/suite-cuda --test-threads=1 pool_attention::the_query_tile_kernel pool_attention::climbing_scores
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-400 | head -20
M=gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
T=40 run ncu.txt "ncu rows 2, 32 keys" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ROPE_POOL_ATTENTION_FLASH_KEYS=32 ncu --clock-control none -k regex:attention_flash --launch-count 2 --metrics $M --csv $A --seqs 1
T=40 run ncu.txt "ncu rows 2, 64 keys" ROPE_POOL_ATTENTION_FLASH_ROWS=2 ncu --clock-control none -k regex:attention_flash --launch-count 2 --metrics $M --csv $A --seqs 1
grep attention_flash $OUT/ncu.txt | python3 -c "
import sys,csv
for r in csv.reader(sys.stdin):
    if len(r)>14: print(r[8], r[12], r[14])
"
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
