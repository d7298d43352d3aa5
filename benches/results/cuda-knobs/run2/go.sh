#!/usr/bin/env bash
# Binaries of 82bd128 (the library and kernels of 3bc539e; ROPE_POOL_CUDA_FUSION=0
# scripts/cuda-build.sh suite). The fp8 attention cases with f16 queries not yet run through
# CUDA (the flash kernel over many key tiles; every code through f16 queries), the head-tile test
# with lean rows, the projection tests with the staged kernel's row planes.
for b in suite-cuda; do xz -T8 -d -c target/go23b/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-540} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
S=/tmp/suite-cuda
T=200 run suite.txt "fp8 tests" X=1 $S --test-threads=1 fp8
T=60 run suite.txt "head tiles, lean rows" ROPE_POOL_ATTENTION_HEADS_LEAN=1 $S --test-threads=1 the_head_tile_kernel
T=120 run suite.txt "projections, row planes 2" ROPE_POOL_STAGED_ROW_PLANES=2 $S --test-threads=1 projections
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt | cut -c1-300 | head -40
cat $OUT/smi.txt; echo "done at ${SECONDS}s"
