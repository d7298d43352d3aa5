#!/usr/bin/env bash
# Decode binaries, one carry (target/go24): decode-cuda.xz of the split mixed steps and lean
# head-tile rows (ROPE_POOL_CUDA_FUSION=0 ROPE_POOL_PACK_DIR=target/go24 scripts/cuda-build.sh
# decode), decode-old.xz of 82bd128 (before both). Decode at batches 1, 8, 64, new and old in
# alternating processes, beside the CUDA-graph anchor; a 32768-token prompt joining 8 decoding
# requests, whole and in chunks of 2048 and 8192, new and old; the prefill rows; the attention
# launches of a 4096-token prompt joining 8 decoding requests (ROPE_POOL_TRACE=1). The tests and
# the attention bench: tests/go.sh.
for b in decode-cuda decode-old; do xz -T8 -d -c target/go24/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-560} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="--device cuda --fused-only --steps 64 --batches 1,8,64"
run dec.txt "new 1" X=1 /tmp/decode-cuda $A
run dec.txt "old 1" X=1 /tmp/decode-old $A
run dec.txt "new 2" X=1 /tmp/decode-cuda $A
run dec.txt "old 2" X=1 /tmp/decode-old $A
(cd target/go24 && timeout 60 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
grep -E "^==|\| fused|rc |panicked" $OUT/dec.txt | cut -c1-250; tail -6 $OUT/anchor.txt
L="--device cuda --fused-only --steps 2 --batches 8 --long-prompt 32768 --prefill-chunks 0,2048,8192"
T=120 run long.txt "new: a 32768-token prompt joining 8 decoding requests" X=1 /tmp/decode-cuda $L
grep -E "^==|^\||rc |panicked" $OUT/long.txt
run prefill.txt "prompts of 512" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 4 --batches 1,8,64 --prompt 512
run prefill.txt "one prompt of 4096" X=1 /tmp/decode-cuda --device cuda --fused-only --steps 4 --batches 1 --prompt 4096
grep -E "^==|\| fused|rc |panicked" $OUT/prefill.txt | cut -c1-250
T=60 run trace.txt "trace: a 4096-token prompt joining 8" ROPE_POOL_TRACE=1 /tmp/decode-cuda --device cuda --fused-only --steps 2 --batches 8 --long-prompt 4096 --prefill-chunks 0
grep -E "^ *->|^==|rc " $OUT/trace.txt | sort | uniq -c | sort -rn | cut -c1-250 | head -12
T=150 run long.txt "old: a 32768-token prompt joining 8 decoding requests" X=1 /tmp/decode-old $L
grep -E "^==|^\||rc |panicked" $OUT/long.txt | tail -12
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
