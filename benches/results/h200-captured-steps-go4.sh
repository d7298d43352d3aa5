#!/usr/bin/env bash
# One device call: captured decode steps (replayed graphs) against the same steps launched kernel
# by kernel, in one binary (the build without Burn's fusion stream); the CUDA-graph anchor; the
# staged tensor-core kernel for 8-64 rows (probe and decode); the default build's rows; the GPU
# tests of captured steps and checkpoints; a host profile. Writes into $OUT as it goes.
set -u
cd "$(dirname "$0")/../.."
source <(sed -n '/^vulkan_env()/,/^}/p' scripts/h200.sh)
vulkan_env
for b in decode decode-graphs suite-unfused; do
  xz -d -c target/h200/$b.xz > /tmp/$b && chmod +x /tmp/$b
done
o=${OUT:-/tmp/o}; mkdir -p $o
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $o/rows.md
D() { local b=$1; shift; timeout 200 /tmp/$b --device vulkan --fused-only "$@" 2>>$o/log.txt; }
echo "== run 1 (graphs build)" | tee -a $o/rows.md
D decode-graphs --launched --steps 64 --batches 1,8,64 | grep -E '^\| fused|captured' | tee -a $o/rows.md
timeout 120 python3 target/h200/graph_decode_anchor.py > $o/anchor.txt 2>&1
tail -4 $o/anchor.txt
for s in 0 1; do
  echo "== probe, staged from row $s (0: off)" | tee -a $o/staged.md
  if [ $s = 0 ]; then e=ROPE_POOL_X=0; else e=ROPE_POOL_STAGED_FROM=1; fi
  env $e timeout 120 /tmp/decode-graphs --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe --probe-project-only --probe-rows 8,16,24,64 2>>$o/log.txt | grep -E '^\| project' | tee -a $o/staged.md
done
echo "== decode, staged from row 2, separate projections" | tee -a $o/staged.md
ROPE_POOL_STAGED_FROM=2 ROPE_POOL_FUSED_PROJECTIONS=0 D decode-graphs --launched --steps 32 --batches 8,64 | grep -E '^\| fused|captured' | tee -a $o/staged.md
echo "== run 2 (graphs build)" | tee -a $o/rows.md
D decode-graphs --launched --steps 64 --batches 1,8 | grep -E '^\| fused|captured' | tee -a $o/rows.md
echo "== default build (fusion stream)" | tee -a $o/rows.md
D decode --steps 64 --batches 1,8 | grep -E '^\| fused' | tee -a $o/rows.md
timeout 120 /tmp/suite-unfused captured_ checkpoints 2>&1 | grep -v XDG | tail -12 > $o/suite.txt
tail -3 $o/suite.txt
D decode-graphs --steps 4 --batches 1 --host-profile 3 > $o/host-profile.md
echo "== launched, ROPE_POOL_MATVEC_LOADS=8" | tee -a $o/ab.md
ROPE_POOL_MATVEC_LOADS=8 timeout 100 /tmp/decode-graphs --device vulkan --fused-only --steps 2 --batches 1,8 --profile 2>>$o/log.txt | grep -iE 'matvec|^profile' | tee -a $o/ab.md
echo end | tee -a $o/ab.md
