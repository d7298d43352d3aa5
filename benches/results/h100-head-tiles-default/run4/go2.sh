#!/usr/bin/env bash
# c5860c5 suite on CUDA: CUDA-graph capture tests in their own process (a capture on the shared
# stream breaks other threads' work), the rest four threads a process.
xz -d -c target/go12/suite-cuda.xz > /tmp/suite-cuda && chmod +x /tmp/suite-cuda
(timeout 250 /tmp/suite-cuda --test-threads=1 captured > $OUT/captured.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/captured.txt) &
timeout 250 /tmp/suite-cuda --test-threads=4 --skip captured > $OUT/rest.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/rest.txt
wait
grep -E "FAILED|test result|rc " $OUT/captured.txt $OUT/rest.txt | head -30
grep -E "panicked" -A2 $OUT/rest.txt $OUT/captured.txt | head -40
