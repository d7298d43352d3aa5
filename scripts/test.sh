#!/usr/bin/env bash
# The project's test command (README). Installs what a fresh Debian/Ubuntu machine lacks for the
# wgpu tests to run the real CubeCL kernel on Mesa's software Vulkan (lavapipe), then runs the
# whole test suite. A missing GPU adapter fails the GPU tests (CI=true or not), so that a green
# run never hides GPU cases that did not run; ROPE_POOL_ALLOW_NO_GPU=1 skips them instead (Flex
# only), each skipping test saying so on stderr and each test binary printing how many GPU cases
# it skipped when it exits. Any adapter counts, Mesa's software Vulkan (lavapipe) included. With
# CI=true the lints and feature builds run too: rustfmt, clippy on the default and the WGSL-only
# builds and rustdoc (warnings denied), and a Flex-only build (no GPU crates); and the server
# under the official `openai` Python client (scripts/openai_client_test.sh).
#
# Which GPU build the suite runs: the default build compiles SPIR-V on Vulkan, and lavapipe
# 22.3 (what a machine without a GPU gets here) segfaults creating SPIR-V pipelines that use
# workgroup memory, so where no hardware Vulkan driver is found the suite runs the WGSL build
# (`--no-default-features --features wgpu,fusion,flex,autodiff`) instead. ROPE_POOL_TEST_FEATURES
# (cargo arguments, e.g. "--no-default-features --features wgpu,flex") overrides the choice.
set -euo pipefail
cd "$(dirname "$0")/.."

have_vulkan() {
  ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' && ls /usr/share/vulkan/icd.d/*.json >/dev/null 2>&1
}

# apt as root, or through passwordless sudo on a runner that is not root.
as_root=()
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
fi
if ! have_vulkan; then
  if { [ "$(id -u)" = 0 ] || [ ${#as_root[@]} -gt 0 ]; } && command -v apt-get >/dev/null; then
    echo "installing Mesa's software Vulkan driver (mesa-vulkan-drivers, libvulkan1)"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
  else
    echo "no Vulkan driver found: install it with" >&2
    echo "  sudo apt-get install -y mesa-vulkan-drivers libvulkan1" >&2
    echo "(without it the wgpu tests fail; ROPE_POOL_ALLOW_NO_GPU=1 skips them)" >&2
  fi
fi

# wgpu's Vulkan loader warns without a runtime dir; give it one.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
# A clean checkout builds ~2.5 GB under target/; say what room there is, so a full disk shows.
df -h . 2>/dev/null | tail -1 | awk '{print "disk free for target/: " $4}'
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

# A hardware Vulkan driver: a GPU device node and an ICD that drives it (NVIDIA's beside
# /dev/nvidia0; Mesa's RADV or ANV beside a DRM render node), or an ICD named by the Vulkan
# loader's variables. Mesa installs its ICDs whether or not the hardware is there, and a CUDA
# container has /dev/nvidia0 without NVIDIA's Vulkan ICD: neither counts alone.
hardware_vulkan() {
  local dirs=(/usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/share/vulkan/icd.d)
  local nvidia=() mesa=()
  for d in "${dirs[@]}"; do
    nvidia+=("$d"/nvidia*.json)
    mesa+=("$d"/radeon*.json "$d"/intel*.json)
  done
  local node icd
  for node in /dev/nvidia0 /dev/dri/renderD* /dev/kfd; do
    [ -e "$node" ] || continue
    [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && return 0
    case "$node" in
      /dev/nvidia0) for icd in "${nvidia[@]}"; do [ -e "$icd" ] && return 0; done ;;
      *) for icd in "${mesa[@]}"; do [ -e "$icd" ] && return 0; done ;;
    esac
  done
  return 1
}
if [ -n "${ROPE_POOL_TEST_FEATURES+x}" ]; then
  read -r -a build <<< "$ROPE_POOL_TEST_FEATURES"
elif hardware_vulkan || [ "$(uname)" = Darwin ]; then
  build=()
else
  echo "no hardware Vulkan driver: the suite runs the WGSL build (SPIR-V crashes lavapipe 22.3)"
  build=(--no-default-features --features wgpu,fusion,flex,autodiff)
fi

step() { echo "== $*"; "$@"; }
if [ "${CI:-}" = true ]; then
  # The lint components of the toolchain, where rustup can add them.
  for component in rustfmt clippy; do
    cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$component"
  done
  step cargo fmt --all --check
fi
step cargo test --workspace ${build[@]+"${build[@]}"} "$@"
if [ "${CI:-}" = true ]; then
  # The server under the official `openai` Python client (PyPI is reachable in CI).
  step scripts/openai_client_test.sh ${build[@]+"${build[@]}"}
fi
if [ "${CI:-}" = true ] && [ -z "${ROPE_POOL_TEST_FEATURES+x}" ]; then
  # The same GPU build without Burn's fusion stream (each launch leaves from the caller's
  # thread; the build the decode figures favour): the decoder and the checkpoints end to end.
  if [ ${#build[@]} -eq 0 ]; then
    unfused=(--no-default-features --features vulkan,flex,autodiff)
  else
    unfused=(--no-default-features --features wgpu,flex,autodiff)
  fi
  step cargo test --test suite "${unfused[@]}" -- generate checkpoints projections
fi
if [ "${CI:-}" = true ]; then
  step cargo clippy --workspace --all-targets -- -D warnings
  step cargo clippy --workspace --all-targets --no-default-features --features wgpu,fusion,flex,autodiff -- -D warnings
  step env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
  step cargo check --no-default-features --features flex
fi
