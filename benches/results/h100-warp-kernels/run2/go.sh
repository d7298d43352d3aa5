#!/usr/bin/env bash
# CubeCL's C++ (NVRTC) backend (ROPE_POOL_CUDA_CPP=1 builds): CUDA headers from NVIDIA's pip wheels (12.8:
# cuda_runtime + cuda_nvcc's crt + cccl, carried), the device's own libnvrtc (torch's wheel). The head-tile
# attention on fp8 pools with the hardware e4m3 conversion (the default there) against f16 halves, f16 rows beside.
mkdir -p /tmp/cudatk && tar -xJf target/gocpp/cudatk.tar.xz -C /tmp/cudatk
export CUDA_PATH=/tmp/cudatk
lib=$(python3 -c "import nvidia.cuda_nvrtc as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
echo "nvrtc dir: $lib"; ls $lib 2>&1 | head; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
mkdir -p /tmp/nvrtclib; for f in $lib/libnvrtc.so.*; do case $f in *builtins*) ;; *) ln -sf $f /tmp/nvrtclib/libnvrtc.so; ln -sf $f /tmp/nvrtclib/$(basename $f | sed 's/\.so\.\([0-9]*\).*/.so.\1/');; esac; done
ls -la /tmp/nvrtclib
export LD_LIBRARY_PATH=/tmp/nvrtclib:$lib:${LD_LIBRARY_PATH:-}
for b in pool_attention-cuda-cpp suite-cuda-cpp; do [ -f target/gocpp/$b.xz ] && xz -T8 -d -c target/gocpp/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
run() { local f=$1; local name=$2; shift 2; if [ $SECONDS -gt ${LIMIT:-300} ]; then echo "== $name: skipped at ${SECONDS}s" >> $OUT/$f; return; fi; echo "== $name: $*" >> $OUT/$f; local t=${T:-60}; timeout $t env "$@" >> $OUT/$f 2>&1; echo "rc $? at ${SECONDS}s" >> $OUT/$f; }
A="/tmp/pool_attention-cuda-cpp --device cuda --decode-only --no-gather --dtypes f16"
T=90 run att.txt "native (default)" X=1 $A --quick --fp8
T=60 run att.txt "halves" ROPE_POOL_FP8_DECODE=2 $A --quick --fp8
T=60 run att.txt "f16 pools" X=1 $A --quick
T=60 run att.txt "native again" X=1 $A --quick --fp8
grep -vE "^\s*$" $OUT/att.txt | head -80
[ -x /tmp/suite-cuda-cpp ] && T=150 run suite.txt "cpp suite: head tiles, fp8 attention" X=1 /tmp/suite-cuda-cpp --test-threads=1 the_head_tile fp8_pools_decode_alike every_fp8_code
grep -E "^==|^test |test result|rc |panicked" $OUT/suite.txt 2>/dev/null | grep -v " ok$" | head -40
M=gpu__time_duration.sum,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
for d in 1 2; do LIMIT=500 T=40 run ncu.txt "ncu decode $d" ROPE_POOL_FP8_DECODE=$d ncu --clock-control none -k regex:attention_heads --launch-count 2 --metrics $M --csv $A --fp8 --quick --seqs 64 --keys 4096; done
grep -E "==|gpu__time|issue_active|registers|dram" $OUT/ncu.txt | awk -F'","' '/^==/{print;next}{print $5, $(NF-2), $NF}'
echo "done at ${SECONDS}s"
