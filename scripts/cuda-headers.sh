#!/usr/bin/env bash
# MEASUREMENT ONLY. CubeCL's C++ (NVRTC) backend (`ROPE_POOL_CUDA_CPP=1 scripts/cuda-build.sh`)
# compiles kernels at run time against a CUDA toolkit's headers (`$CUDA_PATH/include`, and
# `include/cccl`). The device machine has NVRTC (torch's wheel) but no toolkit, so this assembles
# the headers here from NVIDIA's pip wheels (version $CUDA_WHEELS, default 12.8) into
# `$1/cudatk.tar.xz` (~1.4 MB): cuda_runtime's headers, cuda_nvcc's `crt/`, cccl as `cccl/`.
# On the device: `tar -xJf cudatk.tar.xz -C /tmp/cudatk; export CUDA_PATH=/tmp/cudatk`, and
# NVRTC on `LD_LIBRARY_PATH` as `libnvrtc.so` (`target/gocpp/go.sh` shows both).
set -euo pipefail
out=${1:?usage: scripts/cuda-headers.sh <folder>}
version=${CUDA_WHEELS:-12.8}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps -d "$work/wheels" \
  "nvidia-cuda-runtime-cu12==$version.*" "nvidia-cuda-nvcc-cu12==$version.*" \
  "nvidia-cuda-cccl-cu12==$version.*"
for w in "$work"/wheels/*.whl; do python3 -m zipfile -e "$w" "$work/x"; done
mkdir -p "$work/tk/include/cccl"
cp -r "$work"/x/nvidia/cuda_runtime/include/. "$work/x/nvidia/cuda_nvcc/include/." "$work/tk/include/"
cp -r "$work"/x/nvidia/cuda_cccl/include/. "$work/tk/include/cccl/"
find "$work/tk" -name __init__.py -delete
mkdir -p "$out"
tar -cJf "$out/cudatk.tar.xz" -C "$work/tk" include
ls -la "$out/cudatk.tar.xz"
