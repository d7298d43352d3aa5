#!/usr/bin/env bash
# binaries of 60bada4, cuda (no fusion stream): anchor; decode plane vs head tiles (and ahead); fp8-weight knobs at batch 1.
xz -d -c target/go11/decode-cuda.xz > /tmp/decode-cuda && chmod +x /tmp/decode-cuda
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/smi.txt 2>&1
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-480} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
(cd target/go11 && timeout 100 python3 graph_decode_anchor.py > $OUT/anchor.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/anchor.txt)
C="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64 --fp8-cache 1,1"
run dec.txt "default" X=0 $C
run dec.txt "head tiles" ROPE_POOL_ATTENTION_HEAD_TILES=1 $C
run dec.txt "head tiles ahead" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_ATTENTION_HEADS_AHEAD=1 $C
F="/tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1 --fp8-weights"
run fp8.txt "fp8 weights default" X=0 $F
run fp8.txt "fp8 weights prefetch" ROPE_POOL_MATVEC_PREFETCH=1 $F
run fp8.txt "fp8 weights loads 4" ROPE_POOL_MATVEC_LOADS=4 $F
run fp8.txt "fp8 weights prefetch loads 4" ROPE_POOL_MATVEC_PREFETCH=1 ROPE_POOL_MATVEC_LOADS=4 $F
run fp8.txt "fp8 weights loads 8" ROPE_POOL_MATVEC_LOADS=8 $F
run fp8.txt "fp8 weights cols 2" ROPE_POOL_MATVEC_COLS=2 $F
run fp8.txt "fp8 weights cols 2 loads 4" ROPE_POOL_MATVEC_COLS=2 ROPE_POOL_MATVEC_LOADS=4 $F
run fp8.txt "fp8 weights cols 4 loads 8" ROPE_POOL_MATVEC_COLS=4 ROPE_POOL_MATVEC_LOADS=8 $F
run fp8.txt "fp8 weights default again" X=0 $F
run dec.txt "head tiles, row planes 2" ROPE_POOL_ATTENTION_HEAD_TILES=1 ROPE_POOL_STAGED_ROW_PLANES=2 /tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 8,64
run dec.txt "default again" X=0 $C
tail -8 $OUT/anchor.txt
grep -E "==|\| fused|rc " $OUT/dec.txt $OUT/fp8.txt
