#!/usr/bin/env bash
# binaries of d6fdd0a (merge over more units, rows-ahead knob). Head tiles with two-part weights
# against the checkpoints; ncu of plane / heads / heads ahead.
for b in suite-cuda pool_attention-cuda; do xz -d -c target/go11/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-420} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
T=100 run suite.txt "head tiles forced" ROPE_POOL_ATTENTION_HEAD_TILES=1 /tmp/suite-cuda --test-threads=1 checkpoints_generate head_tile chunked_prefill fp8_pools random_batches
T=60 run suite.txt "head tiles ahead" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_HEADS_AHEAD=1 /tmp/suite-cuda --test-threads=1 checkpoints_generate head_tile fp8_pools random_batches
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16 --quick"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread
N="ncu --clock-control none -k regex:attention --launch-count 2 --metrics $M --csv"
for s in "1 32768" "64 4096"; do set -- $s
 for f in "" "--fp8"; do
  run ncu.txt "plane $f $1x$2" X=0 $N $A $f --seqs $1 --keys $2
  run ncu.txt "heads $f $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 $N $A $f --seqs $1 --keys $2
  run ncu.txt "heads ahead $f $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_HEADS_AHEAD=1 $N $A $f --seqs $1 --keys $2
 done
done
for c in 768 1024; do
  run ncu.txt "heads cubes $c --fp8 1x32768" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_CUBES=$c $N $A --fp8 --seqs 1 --keys 32768
  run ncu.txt "heads ahead cubes $c --fp8 1x32768" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_HEADS_AHEAD=1 ROPE_POOL_ATTENTION_CUBES=$c $N $A --fp8 --seqs 1 --keys 32768
done
for s in "8 4096" "64 1024" "1 4096"; do set -- $s
  run ncu.txt "plane $1x$2" X=0 $N $A --seqs $1 --keys $2
  run ncu.txt "heads ahead --fp8 $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_HEADS_AHEAD=1 $N $A --fp8 --seqs $1 --keys $2
  run ncu.txt "heads --fp8 $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 $N $A --fp8 --seqs $1 --keys $2
  run ncu.txt "heads f16 $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 $N $A --seqs $1 --keys $2
  run ncu.txt "heads ahead f16 $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_HEADS_AHEAD=1 $N $A --seqs $1 --keys $2
done
grep -E "^test |test result|panicked|rc |norm-rel|^==" $OUT/suite.txt | head -40
grep -E "^==|gpu__time_duration|registers" $OUT/ncu.txt | awk -F'","' '/^==/{print;next}{print $5, $(NF-2), $NF}'
