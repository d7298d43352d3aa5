#!/usr/bin/env bash
# c5860c5 (head tiles the normal launch of f16 decode through CUDA): the whole suite on CUDA, one test at a time.
xz -d -c target/go12/suite-cuda.xz > /tmp/suite-cuda && chmod +x /tmp/suite-cuda
timeout 270 /tmp/suite-cuda --test-threads=1 > $OUT/suite-serial.txt 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/suite-serial.txt
grep -E "FAILED|test result|rc " $OUT/suite-serial.txt | head -30
