#!/usr/bin/env bash
for b in decode-cuda pool_attention-cuda; do xz -d -c target/go10/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-300} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-40}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda --device cuda --decode-only --no-gather --dtypes f16 --quick"
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread
for s in "64 4096" "1 32768"; do set -- $s
 T=60 run ncu.txt "f16 $1x$2" X=0 ncu --clock-control none -k regex:attention --launch-count 4 --metrics $M --csv $A --seqs $1 --keys $2
 T=60 run ncu.txt "fp8 $1x$2" X=0 ncu --clock-control none -k regex:attention --launch-count 4 --metrics $M --csv $A --fp8 --seqs $1 --keys $2
 T=60 run ncu.txt "fp8 head tiles $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ncu --clock-control none -k regex:attention --launch-count 4 --metrics $M --csv $A --fp8 --seqs $1 --keys $2
 T=60 run ncu.txt "f16 head tiles $1x$2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ncu --clock-control none -k regex:attention --launch-count 4 --metrics $M --csv $A --seqs $1 --keys $2
done
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64 --fp8-cache 1,1"
run dec.txt "default" X=0 $C
run dec.txt "head tiles" ROPE_POOL_ATTENTION_HEAD_TILES=1 $C
grep -E "^==|rc |gpu__time_duration" $OUT/ncu.txt | awk -F'","' '/^==|rc /{print;next}{print $5, $(NF-2), $NF}' | head -60
grep -E "==|\| fused|rc " $OUT/dec.txt
