#!/usr/bin/env bash
# Runs the benchmark (and the PyTorch/Triton anchor, when given) on a GPU machine that has no Rust
# toolchain: build here first,
#   scripts/h200.sh pack
# which leaves stripped, compressed binaries in $ROPE_POOL_PACK_DIR (default `target/h200`); copy
# that folder and `.gl/` (the Vulkan loader as `.deb` packages, unpacked there by `vulkan_env`) to
# the same paths of a checkout on the GPU machine and run `scripts/h200.sh run` there.
# `scripts/h200.sh sweep` runs the tuning-knob sweep instead. `pack-attention` / `run-attention`
# do the same for the pool_attention bench and its anchor, `pack-decode` / `run-decode` for the
# decode bench (f16, fp8 caches, fp8 weights; prefill with and without the query-tile attention),
# the decoder's tests and the CUDA-graph anchor.
# Benchmark builds print each shape's launch once (kernel, tiles, the device's tensor-core
# configurations) with ROPE_POOL_TRACE=1.
# The anchors are optional: set ROPE_POOL_ANCHORS to a folder holding the PyTorch anchor scripts
# (`h200_anchor_bench.py`, `pool_attention_anchor.py`) and `pack` copies them into the pack.
set -euo pipefail
cd "$(dirname "$0")/.."
pack=${ROPE_POOL_PACK_DIR:-target/h200}
anchors=${ROPE_POOL_ANCHORS:-}
# Copies the anchor script $1 from $ROPE_POOL_ANCHORS into the pack, when both are there.
copy_anchor() {
  if [ -n "$anchors" ] && [ -f "$anchors/$1" ]; then cp "$anchors/$1" "$pack/"; fi
}
# The path of the binary a release build of "$@" produces (the last one cargo reports).
executable() {
  cargo build --release "$@" --message-format=json |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}
# The WGSL-only build (the default build compiles SPIR-V on Vulkan).
wgsl=(--no-default-features --features wgpu,fusion,flex,autodiff)
# On the H200 machine: the Vulkan loader from the packages carried in .gl, and NVIDIA's ICD.
vulkan_env() {
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  export XDG_RUNTIME_DIR=/tmp
}
# Packs the files of the output folder $1 into one archive there, `results.tgz`, when there are
# more than 8 of them (runners that copy results back may take only a few files).
bundle() {
  [ "$(find "$1" -maxdepth 1 -type f | wc -l)" -gt 8 ] || return 0
  tar czf /tmp/results.tgz -C "$1" . && find "$1" -maxdepth 1 -type f -delete &&
    mv /tmp/results.tgz "$1/"
}
# On the H200 machine: the Vulkan environment, the named binaries of the pack unpacked into /tmp
# (those the pack has), and the GPU's clocks.
unpack() {
  vulkan_env
  for b in "$@"; do
    [ -f "$pack/$b.xz" ] || continue
    xz -d -c "$pack/$b.xz" > "/tmp/$b"
    chmod +x "/tmp/$b"
  done
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
}
case "${1:-run}" in
  pack)
    # Builds the bench and the replay example twice — the WGSL build and the default build
    # (SPIR-V on Vulkan) — strips them and compresses them into the pack folder.
    mkdir -p "$pack"
    # The bench is built with `tuning` (launch knobs from ROPE_POOL_* for the sweep); the shipped
    # kernel and launch are the same as without it.
    strip -o "$pack/bench" "$(executable --bench rope_pool "${wgsl[@]}",tuning)"
    strip -o "$pack/bench-vulkan" "$(executable --bench rope_pool --features tuning)"
    strip -o "$pack/replay" "$(executable --example replay "${wgsl[@]}")"
    strip -o "$pack/replay-vulkan" "$(executable --example replay)"
    xz -T2 -6 -f "$pack/bench" "$pack/bench-vulkan" "$pack/replay" "$pack/replay-vulkan"
    copy_anchor h200_anchor_bench.py
    ls -la "$pack"
    ;;
  pack-attention)
    # The pool_attention bench, WGSL and SPIR-V builds, for `run-attention`.
    mkdir -p "$pack"
    # `tuning`: the launch knobs from ROPE_POOL_* (for `SWEEP`); the defaults are the shipped
    # launch. The test suite (default build) checks the kernels on the GPU itself.
    strip -o "$pack/attention" "$(executable --bench pool_attention "${wgsl[@]}",tuning)"
    strip -o "$pack/attention-vulkan" "$(executable --bench pool_attention --features tuning)"
    strip -o "$pack/suite" "$(executable --test suite)"
    xz -T2 -6 -f "$pack/attention" "$pack/attention-vulkan" "$pack/suite"
    copy_anchor pool_attention_anchor.py
    ls -la "$pack"
    ;;
  pack-decode)
    # The decode bench (default build: SPIR-V on Vulkan, `tuning` for the knobs, `profile` for
    # --host-profile) and the test suite (default build), for `run-decode`; the CUDA-graph anchor
    # when ROPE_POOL_ANCHORS has it.
    mkdir -p "$pack"
    # Function names kept (`--strip-debug`): `--host-profile` names the frames from them.
    strip --strip-debug -o "$pack/decode" "$(executable --bench decode --features tuning,profile)"
    # The same without Burn's fusion stream: each launch leaves from the caller's thread.
    strip --strip-debug -o "$pack/decode-unfused" "$(executable --bench decode \
      --no-default-features --features vulkan,flex,autodiff,tuning,profile)"
    strip -o "$pack/suite" "$(executable --test suite)"
    xz -T2 -6 -f "$pack/decode" "$pack/decode-unfused" "$pack/suite"
    copy_anchor graph_decode_anchor.py
    ls -la "$pack"
    ;;
  run-decode)
    # On the GPU: the decoder's kernel and checkpoint tests (TESTS, a filter of the suite; unset:
    # projections, the tiles product (which must run there), fp8 and the checkpoints), the
    # decode bench with fp8 caches and fp8 weights
    # beside f16 (extra arguments go to it, not to the A/B), its prefill rows again without the
    # query-tile attention, its decode rows without the fused projections and the build without
    # Burn's fusion stream against the default (SKIP_AB=1 skips them), the batch-1 profiles, then
    # the CUDA-graph anchor, in one call.
    unpack decode decode-unfused suite
    out=${OUT:-/tmp}
    shift || true
    if [ -x /tmp/suite ] && [ -z "${SKIP_TESTS:-}" ]; then
      for t in ${TESTS:-projections tiles_product fp8 checkpoints}; do
        ROPE_POOL_EXPECT_TILES_PRODUCT=1 /tmp/suite "$t" 2>&1 | grep -v XDG_RUNTIME | tail -8 |
          tee -a "$out/suite.txt"
      done
    fi
    /tmp/decode --device vulkan --fused-only --fp8-cache 0.05,0.05 --fp8-weights \
      --json "$out/decode.json" "$@" 2>"$out/decode.log" | tee "$out/decode.md"
    if [ -z "${SKIP_AB:-}" ] && [ -x /tmp/decode-unfused ]; then
      # With and without Burn's fusion stream, alternated three times: batch 1 moves with the
      # host between processes. Without it, captured decode steps (path `fused`, the default
      # there) against every step launched (`fused launched`).
      for i in 1 2 3; do
        for b in decode decode-unfused; do
          launched=$([ $b = decode-unfused ] && echo --launched || true)
          /tmp/$b --device vulkan --fused-only --steps 64 --batches 1,8 $launched \
            2>>"$out/decode.log" | grep '^| fused' | sed "s/^/$b /" |
            tee -a "$out/decode-fusion-ab.md"
        done
      done
      # The projections of the staged tensor-core kernel against the shipped ones.
      for from in 0 1; do
        ROPE_POOL_STAGED_FROM=$([ $from = 1 ] && echo 1 || echo 65) /tmp/decode-unfused \
          --device vulkan --fused-only --steps 1 --batches 1 --layers 1 --matmul-probe \
          --probe-project-only --probe-rows 8,16,24,64 2>>"$out/decode.log" |
          grep '^| project' | sed "s/^/staged-$from /" | tee -a "$out/staged.md"
      done
    fi
    if [ -z "${SKIP_AB:-}" ]; then
      # Prefill without the query-tile attention (the per-row kernels): the A/B of its rows.
      ROPE_POOL_ATTENTION_TILES=0 /tmp/decode --device vulkan --fused-only --steps 2 \
        --batches 1,64 --json "$out/decode-no-tiles.json" 2>>"$out/decode.log" |
        tee "$out/decode-no-tiles.md"
      # Decode with the norm, activation and residual add as separate launches (0) and fused
      # into the projections (1), alternated twice: batch 1 moves with the host between runs.
      for i in 1 2; do
        for fused in 1 0; do
          ROPE_POOL_FUSED_PROJECTIONS=$fused /tmp/decode --device vulkan --fused-only --steps 32 \
            --batches 1,8 2>>"$out/decode.log" | grep '^| fused' | sed "s/^/fused=$fused /" |
            tee -a "$out/decode-fused-ab.md"
        done
        # The norm fused at up to 16 rows too (the default fuses it at one row).
        ROPE_POOL_FUSED_NORM_ROWS=16 /tmp/decode --device vulkan --fused-only --steps 32 \
          --batches 8 2>>"$out/decode.log" | grep '^| fused' | sed "s/^/norm-rows=16 /" |
          tee -a "$out/decode-fused-ab.md"
      done
    fi
    # Where a batch-1 step goes: launches and device time by kernel, then host CPU by thread.
    /tmp/decode --device vulkan --fused-only --steps 2 --batches 1 --profile --host-profile 4 \
      > "$out/decode-profile.md" 2>>"$out/decode.log" || true
    if [ -f "$pack/graph_decode_anchor.py" ] && [ -z "${SKIP_ANCHOR:-}" ]; then
      PYTHONUNBUFFERED=1 python3 "$pack/graph_decode_anchor.py" > "$out/anchor.txt" 2>&1 || true
      tail -20 "$out/anchor.txt"
    fi
    bundle "$out"
    ;;
  run-attention)
    # Both builds of the pool_attention bench (extra arguments go to them), the fp8 rows with
    # either decode and the f16 prefill rows without the query-tile kernel (the A/B runs, with
    # their own arguments), then PyTorch's gather + SDPA anchor, in one call.
    unpack attention attention-vulkan suite
    out=${OUT:-/tmp}
    shift || true
    if [ -x /tmp/suite ] && [ -z "${SKIP_TESTS:-}" ]; then
      # The attention tests (goldens, random batches, fuzz) with the GPU as the wgpu device.
      /tmp/suite pool_attention 2>&1 | grep -v XDG_RUNTIME | tail -15 | tee "$out/suite.txt"
    fi
    /tmp/attention-vulkan --device vulkan --json "$out/attention-vulkan.json" "$@" 2>"$out/attention.log" |
      tee "$out/attention-vulkan.md"
    # fp8 pools decoded through integers, CubeCL's fp8 type and f16 halves: the A/B.
    for decode in 0 1 2; do
      ROPE_POOL_FP8_DECODE=$decode /tmp/attention-vulkan --device vulkan --fp8 --no-gather \
        --dtypes f16 --json "$out/attention-vulkan-fp8-decode$decode.json" 2>>"$out/attention.log" |
        tee "$out/attention-vulkan-fp8-decode$decode.md"
    done
    # The prefill rows again without the query-tile kernel (the per-row kernels), f16: the A/B.
    /tmp/attention-vulkan --device vulkan --prefill-only --no-gather --dtypes f16 --query-tiles off \
      --json "$out/attention-vulkan-no-tiles.json" 2>>"$out/attention.log" |
      tee "$out/attention-vulkan-no-tiles.md"
    if [ -x /tmp/attention ]; then # the WGSL build, when packed
      /tmp/attention --device wgpu --json "$out/attention-wgpu.json" "$@" 2>>"$out/attention.log" |
        tee "$out/attention-wgpu.md"
    fi
    if [ -f "$pack/pool_attention_anchor.py" ] && [ -z "${SKIP_ANCHOR:-}" ]; then
      python3 "$pack/pool_attention_anchor.py" 2>&1 | tee "$out/attention-anchor.txt"
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
    bundle "$out"
    ;;
  run | sweep)
    vulkan_env
    for f in "$pack"/*.xz; do
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
    if [ -f "$pack/h200_anchor_bench.py" ] && [ -z "${SKIP_ANCHOR:-}" ]; then
      PYTHONUNBUFFERED=1 python3 "$pack/h200_anchor_bench.py" > "$out/anchor.txt" 2>&1 || true
      tail -5 "$out/anchor.txt"
    fi
    ;;
esac
