#!/usr/bin/env bash
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
for b in suite pool_attention; do xz -d -c target/go/$b.xz > /tmp/$b; chmod +x /tmp/$b; done
A="--device vulkan --decode-only --no-gather --quick --dtypes f16"
i=0
run() { i=$((i+1)); echo "== $i [$1] $2 $(date +%T)"; env $1 timeout 60 /tmp/pool_attention $A $2 > $OUT/att$i.txt 2>&1; grep -E "^\| " $OUT/att$i.txt | grep -v -- "---" | tail -6; }
run "X=0" ""
run "X=0" "--fp8"
run "ROPE_POOL_ATTENTION_DECODE_TILES=1" ""
run "ROPE_POOL_ATTENTION_DECODE_TILES=1" "--fp8"
run "ROPE_POOL_ATTENTION_DECODE_TILES=1 ROPE_POOL_ATTENTION_DECODE_KEYS=64" "--fp8"
run "ROPE_POOL_ATTENTION_DECODE_TILES=1 ROPE_POOL_ATTENTION_DECODE_KEYS=16" "--fp8"
echo "== suite decode tiles $(date +%T)"
ROPE_POOL_TRACE=1 ROPE_POOL_ATTENTION_DECODE_TILES=1 timeout 150 /tmp/suite pool_attention::random_batches pool_attention::fp8_pools pool_attention::golden pool_attention::every_fp8 --nocapture > $OUT/suite-dt.txt 2>&1
grep -E "^test |test result|panicked" -A3 $OUT/suite-dt.txt | grep -v "has been running" | tail -20
grep -o "kernel: Tiles {[^}]*}" $OUT/suite-dt.txt | sort | uniq -c
echo "== done $(date +%T)"
