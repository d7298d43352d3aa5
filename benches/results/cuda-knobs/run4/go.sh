#!/usr/bin/env bash
# The binaries of run3 (target/go23c, 82bd128), on the machine start after run3 and run1: the
# profile of one 32768-token prompt (profile-32768.txt) and the attention launches of one
# 8192-token prompt (trace-8192.txt; ROPE_POOL_TRACE=1).
xz -T8 -d -c target/go23c/decode-cuda.xz > /tmp/d && chmod +x /tmp/d
timeout 200 /tmp/d --device cuda --fused-only --steps 2 --batches 1 --prompt 32768 --profile > $OUT/p.txt 2>&1; echo rc $?
grep -B2 -A16 "prefill of" $OUT/p.txt | head -60
ROPE_POOL_TRACE=1 timeout 100 /tmp/d --device cuda --fused-only --steps 2 --batches 1 --prompt 8192 > $OUT/t.txt 2>&1
sort $OUT/t.txt | uniq -c | sort -rn | head -20
