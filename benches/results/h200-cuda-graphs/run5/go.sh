#!/usr/bin/env bash
# burn's cuda feature at db08c1f: the tiles product through CUDA against float64 and the
# checkpoints against transformers, then one decode table row set
for b in decode-cuda suite-cuda; do xz -d -c target/go3/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/smi.txt 2>&1
echo "== ROPE_POOL_EXPECT_TILES_PRODUCT=1 suite-cuda tiles_product checkpoints_generate" > $OUT/suite.txt
ROPE_POOL_EXPECT_TILES_PRODUCT=1 timeout 45 /tmp/suite-cuda tiles_product checkpoints_generate >> $OUT/suite.txt 2>&1; echo "rc $?" >> $OUT/suite.txt
grep -E "^test |test result|panicked|rc " $OUT/suite.txt | head -20
echo "== decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64" > $OUT/dec.txt
timeout 30 /tmp/decode-cuda --device cuda --fused-only --steps 64 --batches 1,8,64 >> $OUT/dec.txt 2>&1; echo "rc $?" >> $OUT/dec.txt
grep -E "==|\| fused|rc " $OUT/dec.txt
