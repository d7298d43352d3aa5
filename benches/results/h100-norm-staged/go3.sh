#!/usr/bin/env bash
# norm-fused matvec: normalised rows staged in shared memory, A/B against per-element
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh); vulkan_env
for b in decode suite; do xz -d -c target/go/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; echo "== $name: $*" >> $OUT/$f; timeout 150 env "$@" >> $OUT/$f 2>&1; echo "rc $?" >> $OUT/$f; }
P="/tmp/decode --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 1 --probe-fused"
run probe.txt staged $P
run probe.txt per-element ROPE_POOL_NORM_STAGED=0 $P
D="/tmp/decode --device vulkan --fused-only --steps 64 --batches 1"
for i in 1 2; do
  run dec.txt staged $D
  run dec.txt per-element ROPE_POOL_NORM_STAGED=0 $D
done
run dec.txt staged-fp8w $D --fp8-weights
run dec.txt per-element-fp8w ROPE_POOL_NORM_STAGED=0 $D --fp8-weights
(cd target/go && timeout 200 python3 graph_decode_anchor.py --batches 1 > $OUT/anchor.txt 2>&1; echo "rc $?" >> $OUT/anchor.txt)
timeout 120 /tmp/suite fused_projections fp8_projections checkpoints_generate > $OUT/suite.txt 2>&1; echo "rc $?" >> $OUT/suite.txt
tail -3 $OUT/suite.txt; grep -E "==|norm|\| fused|rc " $OUT/probe.txt | head -40; grep -E "==|\| fused|rc " $OUT/dec.txt; tail -5 $OUT/anchor.txt
