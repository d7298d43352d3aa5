#!/usr/bin/env bash
for b in suite-cuda pool_attention-cuda; do xz -d -c target/go10/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-120} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-40}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16 --quick"
T=60 run suite.txt "head tiles test" X=0 /tmp/suite-cuda --test-threads=1 head_tile fp8_pools_decode random_batches
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread
for s in "64 4096" "1 32768" "1 4096" "8 4096" "64 1024"; do set -- $s
 for f in "" "--fp8"; do
  run ncu.txt "plane $f $1x$2" X=0 ncu --clock-control none -k regex:attention --launch-count 2 --metrics $M --csv $A $f --seqs $1 --keys $2
  run ncu.txt "heads $f $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ncu --clock-control none -k regex:attention --launch-count 2 --metrics $M --csv $A $f --seqs $1 --keys $2
 done
done
for c in 1024 1536; do for f in "" "--fp8"; do
  run ncu.txt "heads cubes $c $f 64x4096" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_CUBES=$c ncu --clock-control none -k regex:attention --launch-count 2 --metrics $M --csv $A $f --seqs 64 --keys 4096
done; done
T=60 run suite.txt "checkpoints, head tiles" ROPE_POOL_ATTENTION_HEAD_TILES=1 /tmp/suite-cuda --test-threads=1 checkpoints
grep -E "^test |test result|panicked|rc |^== " $OUT/suite.txt | head -30
grep -E "^==|gpu__time_duration|registers" $OUT/ncu.txt | awk -F'","' '/^==/{print;next}{print $5, $(NF-2), $NF}'
