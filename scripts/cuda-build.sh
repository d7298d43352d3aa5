#!/usr/bin/env bash
# MEASUREMENT ONLY — not for CI, not for users. Builds the benchmark with burn's `cuda` feature,
# so the H200 can run the kernel through CUDA and Nsight Compute (`ncu`) can read its counters,
# which the Vulkan path does not allow. cubecl-cuda pulls `tracel-llvm-bundler`, whose build
# script downloads LLVM 23 (impossible offline); this points it at Debian's LLVM 22 instead, an
# unsupported version mismatch. Output, in $ROPE_POOL_PACK_DIR (default `target/h200`, the folder
# `scripts/h200.sh` packs into): `bench-cuda.xz` (stripped, xz); with `decode`, only the decode
# bench (`decode-cuda.xz`), with `tensor_cores` the tensor-core probe (`tensor_cores-cuda.xz`),
# with `pool_attention` the attention bench (`pool_attention-cuda.xz`);
# with `suite`, only the test suite, CUDA its GPU device
# (`suite-cuda.xz`); with `all`, also the decode and pool_attention benches and the replay example
# (`{decode,attention,replay}-cuda.xz`).
# Run there: `xz -d -c target/h200/bench-cuda.xz > /tmp/bench-cuda; chmod +x /tmp/bench-cuda;
# /tmp/bench-cuda --device cuda --fused-only --tokens 4096` (under `ncu` for counters).
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${ROPE_POOL_PACK_DIR:-target/h200}
mkdir -p "$pack"
if ! [ -x /usr/lib/llvm-22/bin/llvm-config ]; then
  # A fresh machine's package lists may not know LLVM 22 yet.
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq llvm-22-dev libpolly-22-dev libzstd-dev >/dev/null
fi
export XDG_DATA_HOME="$PWD/target/cuda/xdg"
llvm="$XDG_DATA_HOME/tracel/tracel-llvm-23.1.0-4"
mkdir -p "$llvm/bin"
# Written once: a newer mtime on any of them reruns tracel-llvm-bundler's build script, which
# rebuilds CubeCL, cubek and Burn (~7 minutes a build instead of the crate's own).
if ! [ -e "$llvm/.tracel-llvm-installed" ]; then
  ln -sfn /usr/lib/llvm-22/include "$llvm/include"
  ln -sfn /usr/lib/llvm-22/lib "$llvm/lib"
  cat > "$llvm/bin/llvm-config" <<'WRAP'
#!/bin/sh
/usr/lib/llvm-22/bin/llvm-config "$@" | sed 's#/usr/lib/x86_64-linux-gnu/libz3.so#-lz3#g'
WRAP
  chmod +x "$llvm/bin/llvm-config"
  touch "$llvm/.tracel-llvm-installed"
fi
# ROPE_POOL_CUDA_CPP=1: CubeCL's C++ (NVRTC) backend (feature `cuda-cpp`), the binaries named
# `*-cuda-cpp`; at run time it needs a CUDA toolkit's headers, `CUDA_PATH` (include/, include/cccl).
cuda=cuda
suffix=cuda
if [ "${ROPE_POOL_CUDA_CPP:-}" = 1 ]; then cuda=cuda-cpp; suffix=cuda-cpp; fi
features=(--no-default-features --features $cuda,fusion,flex)
targets=(--bench rope_pool)
if [ "${1:-}" = all ]; then
  targets+=(--bench decode --bench pool_attention --example replay)
elif [ "${1:-}" = decode ] || [ "${1:-}" = tensor_cores ] || [ "${1:-}" = pool_attention ] \
  || [ "${1:-}" = suite ]; then
  # One feature set, so that the three share one build of burn; `suite`: the test suite with
  # CUDA as its GPU device (tests/suite/common.rs). ROPE_POOL_CUDA_FUSION=0: without Burn's
  # fusion stream (the build whose decode steps are captured as CUDA graphs).
  fusion=fusion
  if [ "${ROPE_POOL_CUDA_FUSION:-}" = 0 ]; then fusion=profile; fi
  features=(--no-default-features --features $cuda,$fusion,flex,autodiff,tuning)
  targets=(--bench "$1")
  if [ "$1" = suite ]; then targets=(--test suite); fi
fi
CARGO_TARGET_DIR=target/cuda cargo build --release "${features[@]}" "${targets[@]}"
newest() { ls -t target/cuda/release/$1 | grep -v '\.d$' | head -1; }
if [ "${1:-}" = decode ] || [ "${1:-}" = tensor_cores ] || [ "${1:-}" = pool_attention ] \
  || [ "${1:-}" = suite ]; then
  strip -o "$pack/$1-$suffix" "$(newest "deps/$1-*")"
  xz -T2 -6 -f "$pack/$1-$suffix"
  exit 0
fi
strip -o "$pack/bench-$suffix" "$(newest 'deps/rope_pool-*')"
packed=("$pack/bench-$suffix")
if [ "${1:-}" = all ]; then
  strip -o "$pack/decode-$suffix" "$(newest 'deps/decode-*')"
  strip -o "$pack/attention-$suffix" "$(newest 'deps/pool_attention-*')"
  strip -o "$pack/replay-$suffix" target/cuda/release/examples/replay
  packed+=("$pack/decode-$suffix" "$pack/attention-$suffix" "$pack/replay-$suffix")
fi
xz -T2 -6 -f "${packed[@]}"
ls -la "$pack"/*-$suffix.xz
