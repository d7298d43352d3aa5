#!/usr/bin/env bash
# the whole CUDA suite at db08c1f, tests in parallel (run6) and one at a time (run7, --test-threads=1)
xz -d -c target/go3/suite-cuda.xz > /tmp/suite-cuda; chmod +x /tmp/suite-cuda
timeout 230 /tmp/suite-cuda > $OUT/suite-all.txt 2>&1   # run6
timeout 200 /tmp/suite-cuda --test-threads=1 > $OUT/suite-serial.txt 2>&1   # run7
