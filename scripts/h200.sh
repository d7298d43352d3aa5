#!/usr/bin/env bash
# Runs the benchmark (and the PyTorch/Triton anchor, when present) on the lent H200 through the
# `device` tool. Build here first:
#   scripts/h200.sh pack
# then run `scripts/h200.sh run` there with `.gl` and `.dev` carried (see the device README for
# the Vulkan loader packages in `.gl`). `scripts/h200.sh sweep` runs the tuning-knob sweep instead.
# `pack-attention` / `run-attention` do the same for the pool_attention bench and its anchor.
set -euo pipefail
cd "$(dirname "$0")/.."
# The path of the binary a release build of "$@" produces (the last one cargo reports).
executable() {
  cargo build --release "$@" --message-format=json |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}
# The WGSL-only build (the default build compiles SPIR-V on Vulkan).
wgsl=(--no-default-features --features wgpu,flex,autodiff)
# On the H200 machine: the Vulkan loader from the packages carried in .gl, and NVIDIA's ICD.
vulkan_env() {
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  export XDG_RUNTIME_DIR=/tmp
}
case "${1:-run}" in
  pack)
    # Builds the bench and the replay example twice — the WGSL build and the default build
    # (SPIR-V on Vulkan) — strips them and compresses them into .dev for the device tool to carry.
    mkdir -p .dev
    # The bench is built with `tuning` (launch knobs from ROPE_POOL_* for the sweep); the shipped
    # kernel and launch are the same as without it.
    strip -o .dev/bench "$(executable --bench rope_pool "${wgsl[@]}",tuning)"
    strip -o .dev/bench-vulkan "$(executable --bench rope_pool --features tuning)"
    strip -o .dev/replay "$(executable --example replay "${wgsl[@]}")"
    strip -o .dev/replay-vulkan "$(executable --example replay)"
    xz -T2 -6 -f .dev/bench .dev/bench-vulkan .dev/replay .dev/replay-vulkan
    [ -f ../shared/anchors/h200_anchor_bench.py ] && cp ../shared/anchors/h200_anchor_bench.py .dev/
    ls -la .dev
    ;;
  pack-attention)
    # The pool_attention bench, WGSL and SPIR-V builds, for `run-attention`.
    mkdir -p .dev
    # `tuning`: the launch knobs from ROPE_POOL_* (for `SWEEP`); the defaults are the shipped
    # launch. The test suite (default build) checks the kernels on the GPU itself.
    strip -o .dev/attention "$(executable --bench pool_attention "${wgsl[@]}",tuning)"
    strip -o .dev/attention-vulkan "$(executable --bench pool_attention --features tuning)"
    strip -o .dev/suite "$(executable --test suite)"
    xz -T2 -6 -f .dev/attention .dev/attention-vulkan .dev/suite
    cp ../shared/anchors/pool_attention_anchor.py .dev/
    ls -la .dev
    ;;
  run-attention)
    # Both builds of the pool_attention bench, then PyTorch's gather + SDPA anchor, in one call.
    vulkan_env
    for b in attention attention-vulkan suite; do
      [ -f ".dev/$b.xz" ] || continue
      xz -d -c ".dev/$b.xz" > "/tmp/$b"
      chmod +x "/tmp/$b"
    done
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    out=${OUT:-/tmp}
    shift || true
    if [ -x /tmp/suite ] && [ -z "${SKIP_TESTS:-}" ]; then
      # The attention tests (goldens, random batches, fuzz) with the GPU as the wgpu device.
      /tmp/suite pool_attention 2>&1 | grep -v XDG_RUNTIME | tail -15 | tee "$out/suite.txt"
    fi
    /tmp/attention-vulkan --device vulkan --json "$out/attention-vulkan.json" "$@" 2>"$out/attention.log" |
      tee "$out/attention-vulkan.md"
    /tmp/attention --device wgpu --json "$out/attention-wgpu.json" "$@" 2>>"$out/attention.log" |
      tee "$out/attention-wgpu.md"
    if [ -z "${SKIP_ANCHOR:-}" ]; then
      python3 .dev/pool_attention_anchor.py 2>&1 | tee "$out/attention-anchor.txt"
    fi
    if [ -n "${SWEEP:-}" ]; then
      # Knob sets separated by `;`, decode rows of the SPIR-V build, f16.
      IFS=';' read -r -a sweep <<< "$SWEEP"
      for knobs in "${sweep[@]}"; do
        echo "## knobs: $knobs" | tee -a "$out/sweep.md"
        env $knobs /tmp/attention-vulkan --device vulkan --decode-only --no-gather --quick \
          --dtypes f16 2>>"$out/attention.log" | grep -E '^\| decode' | tee -a "$out/sweep.md"
      done
    fi
    ;;
  run | sweep)
    vulkan_env
    for f in .dev/*.xz; do
      b=$(basename "$f" .xz)
      [ "$b" = bench-cuda ] && continue # measurement-only CUDA build: unpacked where it is used
      xz -d -c "$f" > "/tmp/$b"
      chmod +x "/tmp/$b"
    done
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
    out=${OUT:-/tmp}
    mode=$1
    shift || true
    if [ "$mode" = sweep ]; then
      # The kernel's tuning knobs (kernels/src/tuning.rs), one bench run each, fused rows only at
      # the sizes the bandwidth target is about. Extra arguments go to every run.
      # SWEEP (knob sets separated by `;`) replaces the list below; name the defaults with an
      # unused variable such as ROPE_POOL_DEFAULTS=1, since an empty SWEEP runs nothing. The list
      # starts with the defaults twice, so the sweep shows its run-to-run spread.
      # BENCH=bench-vulkan DEVICE=vulkan sweeps the SPIR-V path instead.
      default_sweep="ROPE_POOL_DEFAULTS=1;ROPE_POOL_DEFAULTS=1"
      default_sweep+=";ROPE_POOL_HEADS_PER_UNIT=1;ROPE_POOL_HEADS_PER_UNIT=2"
      default_sweep+=";ROPE_POOL_HEADS_PER_UNIT=4;ROPE_POOL_HEADS_PER_UNIT=40"
      default_sweep+=";ROPE_POOL_HEADS_PER_UNIT=10;ROPE_POOL_HEADS_PER_UNIT=20;ROPE_POOL_CUBE_DIM=128"
      default_sweep+=";ROPE_POOL_CUBE_DIM=512;ROPE_POOL_CUBE_DIM=1024;ROPE_POOL_VECTOR=2"
      IFS=';' read -r -a sweep <<< "${SWEEP-$default_sweep}"
      for knobs in "${sweep[@]}"; do
        echo "## knobs: ${knobs:-(defaults)}" | tee -a "$out/sweep.md"
        env $knobs "/tmp/${BENCH:-bench}" --device "${DEVICE:-wgpu}" --fused-only --tokens 4096,32768 --windows 9 "$@" \
          2>>"$out/bench.log" | grep -E '^\||copy bandwidth' | tee -a "$out/sweep.md"
      done
      exit 0
    fi
    /tmp/bench --device wgpu --json "$out/h200-wgpu.json" "$@" 2>"$out/bench.log" | tee "$out/h200-wgpu.md"
    /tmp/bench-vulkan --device vulkan --json "$out/h200-vulkan.json" "$@" 2>>"$out/bench.log" |
      tee "$out/h200-vulkan.md"
    if [ -f .dev/h200_anchor_bench.py ] && [ -z "${SKIP_ANCHOR:-}" ]; then
      PYTHONUNBUFFERED=1 python3 .dev/h200_anchor_bench.py > "$out/anchor.txt" 2>&1 || true
      tail -5 "$out/anchor.txt"
    fi
    ;;
esac
