#!/usr/bin/env bash
# head tiles the normal launch of f16 decode through CUDA (c5860c5): ncu of the
# launch now against the plane kernel (HEAD_TILES=0), then the suite on CUDA.
for b in suite-cuda pool_attention-cuda; do xz -d -c target/go12/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-420} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16 --quick"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread
N="ncu --clock-control none -k regex:attention --launch-count 2 --metrics $M --csv"
for s in "64 4096" "1 32768"; do set -- $s
 for f in "" "--fp8"; do
  run ncu.txt "launch now $f $1x$2" X=0 $N $A $f --seqs $1 --keys $2
  run ncu.txt "plane kernel $f $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=0 $N $A $f --seqs $1 --keys $2
 done
done
T=330 run suite.txt "suite on CUDA" X=0 /tmp/suite-cuda --test-threads=4
grep -E "^==|gpu__time_duration" $OUT/ncu.txt | awk -F'","' '/^==/{print substr($0,1,70);next}{print $5, $(NF-2), $NF}'
grep -E "FAILED|failed|panicked|test result|rc |^==" $OUT/suite.txt | head -40
