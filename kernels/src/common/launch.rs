//! Launch helpers shared by the rooms.

use cubecl::client::Client;
use cubecl::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind};

/// The CubeCL compiler `client`'s kernels go through, where a launch rule depends on it (CubeCL's
/// runtime names: `wgpu<spirv>`, `cuda`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compiler {
    /// CubeCL's SPIR-V compiler (wgpu on Vulkan).
    Spirv,
    /// CubeCL's CUDA runtime (Burn's `cuda` feature).
    Cuda,
    /// Any other (WGSL, MSL, HIP, the CPU).
    Other,
}

impl Compiler {
    /// The compiler of `client`'s runtime.
    pub(crate) fn of(client: &Client) -> Self {
        match client.name() {
            "wgpu<spirv>" => Self::Spirv,
            "cuda" => Self::Cuda,
            _ => Self::Other,
        }
    }
}

/// The widest vector, in elements, that `client`'s device loads well for `elem_size`-byte
/// elements and that `fits` accepts (1 when none does).
pub(crate) fn widest_vector(
    client: &Client,
    elem_size: usize,
    fits: impl Fn(usize) -> bool,
) -> usize {
    client
        .io_optimized_vector_sizes(elem_size)
        .find(|&n| n > 0 && fits(n))
        .unwrap_or(1)
}

/// Whether `client`'s device multiplies tensor-core tiles of `float` of `m × n × k` with f32
/// accumulation (CubeCL's `cmma`).
pub fn has_tiles(client: &Client, float: ElemType, [m, n, k]: [u32; 3]) -> bool {
    let tiles = MmaConfig {
        a_type: float,
        b_type: float,
        cd_type: ElemType::Float(FloatKind::F32),
        m,
        n,
        k,
    };
    client.properties().features.matmul.cmma.contains(&tiles)
}

/// Whether `client`'s device likely converts fp8 e4m3 in hardware. CubeCL reports no such flag
/// (`supports_type(e4m3)` holds almost everywhere, through its software codec), so this reads the
/// proxies it does expose: an e4m3 tensor-core configuration, which Vulkan drivers list only with
/// float8 support and CUDA's C++ backend on sm_89 and later.
pub(crate) fn converts_fp8(client: &Client) -> bool {
    let e4m3 = ElemType::Float(FloatKind::E4M3);
    let matmul = &client.properties().features.matmul;
    matmul
        .cmma
        .iter()
        .chain(&matmul.mma)
        .any(|c| c.a_type == e4m3)
}

/// Whether `client`'s device runs warp-level `mma.sync` 16 × 8 × 16 of f16 with f32
/// accumulation through CubeCL's CUDA runtime, on planes of 32: the register layout the
/// head-tile attention and the fp8 tiles product are written for.
pub(crate) fn warp_mma_f16(client: &Client) -> bool {
    let f16 = ElemType::Float(FloatKind::F16);
    let properties = client.properties();
    let hardware = &properties.hardware;
    Compiler::of(client) == Compiler::Cuda
        && hardware.plane_size_min == 32
        && hardware.plane_size_max == 32
        && properties.features.matmul.mma.iter().any(|c| {
            c.a_type == f16
                && c.b_type == f16
                && c.cd_type == ElemType::Float(FloatKind::F32)
                && (c.m, c.n, c.k) == (16, 8, 16)
        })
}
