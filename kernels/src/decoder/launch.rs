//! Host side of the decoder's kernels: the room's launch knobs ([`DecoderTuning`]), whether a
//! product fits a kernel on a device, and the launches of the products, RMSNorm and the MLP
//! activation.

use super::act::silu_mul_kernel;
use super::fp8::{
    Fp8Shape, Fp8Words, dequantize_fp8_kernel, matvec_fp8_add_kernel, matvec_fp8_kernel,
    matvec_fp8_norm_kernel,
};
use super::fp8_mma::{
    CUBE_COLUMNS, Fp8MmaShape, GROUP, MMA_MAX_ROWS, mma_fp8_add_kernel, mma_fp8_kernel,
    mma_fp8_norm_kernel,
};
use super::matvec::{
    PlaneSums, RowRead, TILE, few_rows_kernel, matvec_add_kernel, matvec_kernel,
    matvec_norm_kernel, split_sum_kernel, staged_rows_kernel,
};
use super::norm::{add_rms_norm_kernel, rms_norm_kernel};
use super::product::{
    BLOCK, CUBE_COLS, CUBE_ROWS, PLANES, WIDE_BLOCK, shared_bytes, tiles_product_kernel,
};
use super::warp_rows::{CHUNK, GROUP_ROWS, WarpRowsShape, warp_rows_kernel};
use crate::LaunchTuning;
use crate::common::fp8::{FP8_VECTOR, Fp8Decode};
use crate::common::launch::{Compiler, has_tiles, warp_mma_f16, widest_vector};
use cubecl::client::Client;
use cubecl::features::Plane;
use cubecl::ir::{AddressType, ElemType, FloatKind, UIntKind};
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::{CubeDim, calculate_cube_count_elemwise};

/// The decoder launches' knobs. `DecoderTuning::default()` is the normal launch (what the H200
/// probes of `benches/NOTES.md` chose); the other settings exist for A/B benchmark runs.
/// Benchmark builds (cargo feature `tuning`) read the fields from `ROPE_POOL_*` environment
/// variables (`DecoderTuning::from_env`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecoderTuning {
    /// Few-rows product: the most column tiles a cube (`ROPE_POOL_FEW_COLS`, 1 to 4).
    pub few_rows_cols: Option<usize>,
    /// Few-rows product: planes a cube (`ROPE_POOL_FEW_PLANES`, 1 to 8).
    pub few_rows_planes: Option<usize>,
    /// Prefill products through SPIR-V: the forced cubek blueprint `[pm, pn, pk, sm, sn,
    /// buffers, sms]` of the decoder's wide stage (`ROPE_POOL_BLUEPRINT=pm,pn,pk/sm,sn/buffers/sms`);
    /// another k partition sums in another order, so not bit for bit. Read here, applied by the
    /// root crate (the wide stage is cubek's matmul, not a kernel of this crate).
    pub blueprint: Option<[u32; 7]>,
    /// Decode steps of up to 16 rows: `Some(0)` runs the norm, the projection, the activation
    /// and the residual add as separate launches instead of fused into the matrix-vector kernel
    /// (`ROPE_POOL_FUSED_PROJECTIONS=0`). Read here, applied by the root crate's decoder.
    pub fused_projections: Option<usize>,
    /// The most rows the norm is fused into the projection after it for
    /// (`ROPE_POOL_FUSED_NORM_ROWS`; default [`NORM_FUSED_MAX_ROWS`]). Applied by the root crate.
    pub fused_norm_rows: Option<usize>,
    /// Matrix-vector kernels: weight loads in flight a unit (`ROPE_POOL_MATVEC_LOADS`, 1 to 16;
    /// default 4, 2 on fp8 weights).
    pub matvec_loads: Option<usize>,
    /// Matrix-vector kernels on devices with plane operations: planes a cube
    /// (`ROPE_POOL_MATVEC_PLANES`, 1 to 32; default 8).
    pub matvec_planes: Option<usize>,
    /// fp8-weight matrix-vector kernels: the next iteration's codes loaded before this one's are
    /// decoded (`ROPE_POOL_MATVEC_PREFETCH=1`; default off).
    pub matvec_prefetch: bool,
    /// Matrix-vector kernels at one row: output columns a plane (`ROPE_POOL_MATVEC_COLS`, 1 to
    /// 8, at most the accumulators allow; default 1), each load of `x` serving them all.
    pub matvec_cols: Option<usize>,
    /// Norm-fused matrix-vector kernels: the normalised rows staged in shared memory once a cube
    /// (`ROPE_POOL_NORM_STAGED=1`) or normalised by every plane where it reads them (`=0`);
    /// default: staged where they take at most 16 KiB.
    pub norm_staged: Option<bool>,
    /// Every product from `staged_from` rows (`ROPE_POOL_STAGED_FROM`, 1 to 64; 65 and more: none)
    /// goes through the staged tensor-core kernel ([`StagedRows`]) where it fits, instead of the
    /// normal routing (the root crate's `STAGED_MIN_ROWS`). Applied by the root crate.
    pub staged_from: Option<usize>,
    /// Staged kernel: inner tiles a block, at most (`ROPE_POOL_STAGED_BLOCK`, 1 to 16; default 4,
    /// 8 through CUDA).
    pub staged_block: Option<usize>,
    /// Staged kernel: shares of the inner size (`ROPE_POOL_STAGED_SPLITS`, 1 to 16; default: the
    /// fewest shares, a power of two, that give the grid at least [`Self::staged_cubes`] cubes,
    /// at most 4 up to 16 rows and 8 past them, and at most the inner size's blocks).
    pub staged_splits: Option<usize>,
    /// Staged kernel: the cubes its shares aim for, with at most 8 shares at any row count
    /// (`ROPE_POOL_STAGED_CUBES`; unset: 1024 up to 16 rows with at most 4 shares, 256 past them
    /// with at most 8; `ROPE_POOL_STAGED_CUBES=256` is the rule before that split, at every row
    /// count).
    pub staged_cubes: Option<usize>,
    /// Staged kernel: planes (column tiles) a cube (`ROPE_POOL_STAGED_PLANES`, 1 to 8; default
    /// 4).
    pub staged_planes: Option<usize>,
    /// Staged kernel: groups of row tiles a cube's planes split (`ROPE_POOL_STAGED_ROW_PLANES`, 1
    /// or 2; default 1): with 2, twice the planes a cube, each with half the row tiles'
    /// accumulators and half the loads, where the device allows the units.
    pub staged_row_planes: Option<usize>,
    /// Staged products of f16 weights on warp-level tensor-core products, the weight loaded
    /// straight into registers (`warp_rows.rs`), where the device has f16 `mma.sync` through
    /// CUDA: `ROPE_POOL_STAGED_WARP=1` from 5 rows; default: never (on an H100, 2% faster at
    /// batch 64 in one machine start and 0.6–2.1% slower in another:
    /// `benches/results/h100-warp-kernels`, `benches/results/h100-warp-rows-tests`).
    pub staged_warp: Option<bool>,
    /// fp8-weight kernels: how codes are decoded; `None`, the normal launch,
    /// [`Fp8Decode::for_device`] (`ROPE_POOL_FP8_DECODE`, as the attention kernels read it).
    pub fp8_decode: Option<Fp8Decode>,
    /// fp8-weight products of up to 8 rows on warp-level tensor-core products where the device
    /// has f16 `mma.sync` through CUDA (`fp8_mma.rs`): `ROPE_POOL_FP8_MMA=1`; default: the
    /// matrix-vector kernels (the warp-level kernels have not yet run on a GPU: their float64
    /// tests and their speed are the runs of `benches/results/fp8-mma/`).
    pub fp8_mma: Option<bool>,
    /// Warps a cube of those kernels, splitting the inner size (`ROPE_POOL_FP8_MMA_WARPS`, 1 to
    /// 16; default 8).
    pub fp8_mma_warps: Option<usize>,
    /// Measurement only: the fp8-weight kernels read every weight as holding no NaN code
    /// (`ROPE_POOL_FP8_FINITE=1`).
    pub fp8_finite: bool,
    /// fp8 products the staged kernel would take decode the weight by a launch of its own
    /// before the float product instead (`ROPE_POOL_FP8_DEQUANTIZE=1`: the earlier launch, for
    /// A/B runs). Applied by the root crate.
    pub fp8_dequantize: bool,
    /// Products past the staged kernel's rows keep cubek's routine instead of
    /// [`launch_tiles_product`] (`ROPE_POOL_TILES_PRODUCT=0`: the earlier launch, for A/B runs).
    /// Applied by the root crate.
    pub tiles_product_off: bool,
    /// Shared stages of [`launch_tiles_product`] (`ROPE_POOL_TILES_STAGES`, 1 or 2; default 2
    /// through CUDA, 1 elsewhere), where the device's shared memory holds them (else 1).
    pub tiles_stages: Option<usize>,
    /// Inner elements a block of [`launch_tiles_product`] (`ROPE_POOL_TILES_BLOCK`, 64 or 128;
    /// default 64), where the inner size is a multiple of it and shared memory holds it (else 64).
    pub tiles_block: Option<usize>,
}

#[cfg(feature = "tuning")]
impl DecoderTuning {
    /// The settings of the `ROPE_POOL_*` environment variables, read once per process (all unset:
    /// the defaults). Only in builds with the `tuning` feature: a server never changes its
    /// launch through its environment.
    pub fn from_env() -> Self {
        use crate::common::tuning::{number, numbers};
        static TUNING: std::sync::OnceLock<DecoderTuning> = std::sync::OnceLock::new();
        *TUNING.get_or_init(|| DecoderTuning {
            few_rows_cols: number("ROPE_POOL_FEW_COLS"),
            few_rows_planes: number("ROPE_POOL_FEW_PLANES"),
            blueprint: numbers("ROPE_POOL_BLUEPRINT"),
            fused_projections: number("ROPE_POOL_FUSED_PROJECTIONS"),
            fused_norm_rows: number("ROPE_POOL_FUSED_NORM_ROWS"),
            matvec_loads: number("ROPE_POOL_MATVEC_LOADS").filter(|n| (1..=16).contains(n)),
            matvec_planes: number("ROPE_POOL_MATVEC_PLANES").filter(|n| (1..=32).contains(n)),
            matvec_prefetch: crate::common::tuning::flag("ROPE_POOL_MATVEC_PREFETCH"),
            matvec_cols: number("ROPE_POOL_MATVEC_COLS").filter(|n| (1..=8).contains(n)),
            norm_staged: number::<usize>("ROPE_POOL_NORM_STAGED").map(|v| v == 1),
            staged_from: number("ROPE_POOL_STAGED_FROM").filter(|n| *n >= 1),
            staged_block: number("ROPE_POOL_STAGED_BLOCK").filter(|n| (1..=16).contains(n)),
            staged_splits: number("ROPE_POOL_STAGED_SPLITS").filter(|n| (1..=16).contains(n)),
            staged_cubes: number("ROPE_POOL_STAGED_CUBES").filter(|n| *n >= 1),
            staged_planes: number("ROPE_POOL_STAGED_PLANES").filter(|n| (1..=8).contains(n)),
            staged_row_planes: number("ROPE_POOL_STAGED_ROW_PLANES").filter(|n| [1, 2].contains(n)),
            staged_warp: number::<usize>("ROPE_POOL_STAGED_WARP").map(|v| v == 1),
            fp8_decode: crate::common::tuning::fp8_decode(),
            fp8_mma: number::<usize>("ROPE_POOL_FP8_MMA").map(|v| v == 1),
            fp8_mma_warps: number("ROPE_POOL_FP8_MMA_WARPS").filter(|n| (1..=16).contains(n)),
            fp8_finite: crate::common::tuning::flag("ROPE_POOL_FP8_FINITE"),
            fp8_dequantize: crate::common::tuning::flag("ROPE_POOL_FP8_DEQUANTIZE"),
            tiles_product_off: number("ROPE_POOL_TILES_PRODUCT") == Some(0),
            tiles_stages: number("ROPE_POOL_TILES_STAGES").filter(|n| [1, 2].contains(n)),
            tiles_block: number("ROPE_POOL_TILES_BLOCK"),
        })
    }
}

/// The most rows a launch takes (each unit keeps one accumulator per row).
pub const MATVEC_MAX_ROWS: usize = 16;
/// The most rows the decoder fuses the norm into a projection for (`launch_matvec_norm`): each
/// plane normalises every element it reads, arithmetic that grows with the rows, where the
/// separate norm launch costs the host the same at any row count. One row: a batch-1 step is
/// host-bound, and past one row the kernel is bound by its arithmetic (`benches/NOTES.md`,
/// 'Projections per row count'). Benchmark builds sweep it (`ROPE_POOL_FUSED_NORM_ROWS`).
pub const NORM_FUSED_MAX_ROWS: usize = 1;
/// Planes (output columns) per cube.
const PLANES_PER_CUBE: usize = 8;
/// Units of a "plane" where the device has no plane operations (its lanes add through shared
/// memory).
const SHARED_LANES: usize = 32;
/// Such planes per cube: 4 keeps each sum's shared memory (planes × accumulators × lanes of
/// f32, at most [`ACCUMULATORS`] a lane) at 8 KiB.
const SHARED_PLANES: usize = 4;
/// The most shared memory a matrix-vector kernel takes with shared-memory sums: two sums (the
/// norm's over the cube and the product's over each plane, at most [`ACCUMULATORS`] values a
/// unit each), 16 KiB (WebGPU's default limit).
const SHARED_SUMS_BYTES: usize = 2 * SHARED_PLANES * ACCUMULATORS * SHARED_LANES * 4;
/// The most shared memory a matrix-vector kernel takes with plane sums: one f32 a plane (at most
/// 32 a cube) and accumulator.
const PLANE_SUMS_BYTES: usize = 32 * ACCUMULATORS * 4;
/// Weight vectors each unit loads per iteration (in flight together), over its columns.
const LOADS: usize = 4;
/// The same for the fp8-weight kernels, each load 16 bytes of codes: fewer, for the registers
/// their decoding takes (H200, batch 1, `decode --fp8-weights`: 196–198 tok/s with 2 against
/// 186–189 with 4, 188 with 1 and 169 with 8; `benches/RESULTS.md`, "fp8 weights through the
/// staged kernel").
const FP8_LOADS: usize = 2;
/// The most accumulators (rows × columns, vectors) a unit keeps.
const ACCUMULATORS: usize = 16;

/// Whether [`launch_matvec`] runs `rows` rows on `client`'s device: at most
/// [`MATVEC_MAX_ROWS`], and a device with plane operations of one fixed, power-of-two size or,
/// without them (a plane's lanes then add through shared memory), cubes of 4 × 32 units and 16
/// KiB of shared memory.
pub fn matvec_fits(client: &Client, rows: usize) -> bool {
    let sums = plane_sums(client);
    let hardware = &client.properties().hardware;
    let cube = sums.lanes * sums.planes;
    (1..=MATVEC_MAX_ROWS).contains(&rows)
        && (!sums.shared
            || hardware.max_units_per_cube as usize >= cube
                && hardware.max_cube_dim.0 as usize >= sums.lanes
                && hardware.max_cube_dim.1 as usize >= sums.planes
                && hardware.max_shared_memory_size >= SHARED_SUMS_BYTES)
}

/// How the matrix-vector kernels' planes add their lanes on `client`'s device: plane sums where
/// it has plane operations with one fixed, power-of-two plane size; else through shared memory,
/// cubes of [`SHARED_PLANES`] planes of [`SHARED_LANES`] units (every plane taking part).
fn plane_sums(client: &Client) -> PlaneSums {
    let properties = client.properties();
    let hardware = &properties.hardware;
    let native = properties.features.plane.contains(Plane::Ops)
        && hardware.plane_size_min == hardware.plane_size_max
        && hardware.plane_size_min.is_power_of_two();
    match native {
        true => PlaneSums {
            lanes: hardware.plane_size_min as usize,
            planes: LaunchTuning::current()
                .decoder
                .matvec_planes
                .unwrap_or(PLANES_PER_CUBE),
            shared: false,
        },
        false => PlaneSums {
            lanes: SHARED_LANES,
            planes: SHARED_PLANES,
            shared: true,
        },
    }
}

/// Whether [`launch_matvec_norm`] with `silu` runs `rows` rows on `client`'s device:
/// [`matvec_fits`], and with `silu` (two accumulators a row and column) at most 8 rows.
pub fn matvec_norm_fits(client: &Client, rows: usize, silu: bool) -> bool {
    matvec_fits(client, rows) && rows * (1 + silu as usize) <= ACCUMULATORS
}

/// The plane layout of the matrix-vector kernels for `rows` rows and `n` output columns, each
/// from `pairs` weight rows (2: gate and up): the cube (a plane a row of it), the cube count,
/// columns per plane, weight loads in flight per weight row (of `loads` a unit unless the tuning
/// names a number), and how a plane adds its lanes.
fn matvec_shape(
    client: &Client,
    rows: usize,
    n: usize,
    pairs: usize,
    loads: usize,
) -> (CubeDim, CubeCount, usize, usize, PlaneSums) {
    let sums = plane_sums(client);
    let cube_dim = CubeDim::new_2d(sums.lanes as u32, sums.planes as u32);
    // Columns per plane: each load of x serves them all (x's loads, not the weight's, bound a
    // many-row product); one row streams best one column per plane with four loads in flight.
    // The H200 runs (see benches/NOTES.md, 'Projections per row count'): at 8 rows two columns
    // took 87 µs a launch against 102 with one; at 1 row four columns took 59 against 37 with
    // one.
    let cols = if rows == 1 {
        LaunchTuning::current()
            .decoder
            .matvec_cols
            .map_or(1, |c| c.min(ACCUMULATORS / pairs))
    } else {
        (ACCUMULATORS / (rows * pairs)).clamp(1, 2)
    };
    let loads = LaunchTuning::current()
        .decoder
        .matvec_loads
        .unwrap_or(loads);
    let unroll = (loads / (cols * pairs)).max(1);
    let cubes = n.div_ceil(sums.planes * cols);
    let count = grid(client, cubes, cube_dim);
    (cube_dim, count, cols, unroll, sums)
}

/// Enqueues `out [rows, n] = x [rows, k] · wᵀ` for `w [n, k]`, all contiguous of float
/// `float` (`elem_size` bytes). Does nothing for an empty product.
///
/// # Safety
/// [`matvec_fits`] must hold; the tensors must be live and contiguous with those shapes; `out`
/// must not alias `x` or `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    k: usize,
    n: usize,
    x: TensorArg,
    w: TensorArg,
    out: TensorArg,
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let vector = widest_vector(client, elem_size, |n| k.is_multiple_of(n));
    let (cube_dim, cube_count, cols, unroll, sums) = matvec_shape(client, rows, n, 1, LOADS);
    unsafe {
        matvec_kernel::launch_unchecked(
            client,
            cube_count,
            cube_dim,
            AddressType::from_len((n * k).max(rows * k).max(rows * n)),
            vector,
            x,
            w,
            out,
            rows,
            cols,
            unroll,
            k / vector,
            sums,
            float,
        );
    }
}

/// Enqueues `out = rms_norm(x, norm_w, eps) · wᵀ` (the norm as [`launch_rms_norm`] rounds
/// it) for `x [rows, k]`, `norm_w [k]` and `w [n, k]`; with `silu`, `w` is a stacked gate/up
/// weight `[2m, k]` (`n = 2m`) and `out [rows, m] = cast(silu(gate)) * up` (as
/// [`launch_silu_mul`]). All contiguous of float `float` (`elem_size` bytes). Does nothing for
/// an empty product.
///
/// # Safety
/// [`matvec_norm_fits`] must hold for `silu`, `n` must be even with `silu`; the tensors must be
/// live and contiguous with those shapes; `out` must not alias an input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec_norm(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    k: usize,
    n: usize,
    eps: f32,
    silu: bool,
    [x, norm_w, w, out]: [TensorArg; 4],
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let pairs = 1 + silu as usize;
    let vector = widest_vector(client, elem_size, |n| k.is_multiple_of(n));
    let (cube_dim, cube_count, cols, unroll, sums) =
        matvec_shape(client, rows, n / pairs, pairs, LOADS);
    let staged = rows_staged(client, sums, rows * k * elem_size);
    unsafe {
        matvec_norm_kernel::launch_unchecked(
            client,
            cube_count,
            cube_dim,
            AddressType::from_len((n * k).max(rows * k).max(rows * n)),
            vector,
            x,
            norm_w,
            w,
            out,
            eps,
            1.0 / k as f32,
            rows,
            cols,
            pairs,
            unroll,
            k / vector,
            sums,
            staged,
            float,
        );
    }
}

/// The norm-fused matrix-vector kernels' rows are worth staging in shared memory where they take
/// at most this many bytes (a 4096-wide row of f32 and up to two of f16), and where the device's
/// shared memory holds them beside the kernel's sums ([`rows_staged`]).
const STAGED_ROWS_BYTES: usize = 16 * 1024;

/// Whether a norm-fused matrix-vector launch stages its normalised rows (`bytes` of them) in
/// shared memory: where they fit beside the kernel's sums (`sums`) in the device's shared
/// memory, as [`DecoderTuning::norm_staged`] says, else where they take at most
/// [`STAGED_ROWS_BYTES`].
fn rows_staged(client: &Client, sums: PlaneSums, bytes: usize) -> bool {
    let reserved = match sums.shared {
        true => SHARED_SUMS_BYTES,
        false => PLANE_SUMS_BYTES,
    };
    bytes + reserved <= client.properties().hardware.max_shared_memory_size
        && LaunchTuning::current()
            .decoder
            .norm_staged
            .unwrap_or(bytes <= STAGED_ROWS_BYTES)
}

/// Elements of `x` a load of the warp-level fp8 kernels (16 bytes of f16).
const MMA_X_VECTOR: usize = 8;
/// The most bytes of normalised rows the warp-level fp8 norm kernel stages in shared memory.
const MMA_STAGED_BYTES: usize = 32 * 1024;
/// Warps a cube of the warp-level fp8 kernels unless the tuning says otherwise.
const MMA_WARPS: usize = 8;

/// The warp-level fp8 kernels' launch (`fp8_mma.rs`) for `rows` rows of `k` and a weight of `n`
/// rows in `pairs` (`n / pairs` output columns), `x`'s rows read as `read` says, where they take
/// it: f16 rows, at most [`MMA_MAX_ROWS`], f16 `mma.sync` m16n8k16 through CUDA, `k` a multiple
/// of [`GROUP`], scale blocks of whole groups (`block_words` a multiple of 32), staged rows
/// within [`MMA_STAGED_BYTES`]; where the tuning turns them on ([`DecoderTuning::fp8_mma`]).
fn fp8_mma_launch(
    client: &Client,
    float: ElemType,
    [rows, k, n]: [usize; 3],
    pairs: usize,
    words: Fp8Words,
    read: RowRead,
) -> Option<(CubeDim, CubeCount, Fp8MmaShape)> {
    let tuning = LaunchTuning::current().decoder;
    let staged_bytes = match read {
        RowRead::Plain => 0,
        _ => rows * k * float.size(),
    };
    let fits = tuning.fp8_mma == Some(true)
        && float == ElemType::Float(FloatKind::F16)
        && (1..=MMA_MAX_ROWS).contains(&rows)
        && k.is_multiple_of(GROUP)
        && words.block_words.is_multiple_of(GROUP / FP8_VECTOR)
        && n.is_multiple_of(pairs)
        && staged_bytes <= MMA_STAGED_BYTES
        && warp_mma_f16(client);
    if !fits {
        return None;
    }
    let warps = tuning
        .fp8_mma_warps
        .unwrap_or(MMA_WARPS)
        .min(k / GROUP)
        .max(1);
    let shape = Fp8MmaShape {
        rows,
        pairs,
        warps,
        k,
        read,
        block_words: words.block_words,
        nan_codes: words.nan_codes,
    };
    let red_bytes = warps * 2 * pairs * 32 * 8;
    let hardware = &client.properties().hardware;
    if staged_bytes + red_bytes + PLANE_SUMS_BYTES > hardware.max_shared_memory_size
        || hardware.max_units_per_cube < 32 * warps as u32
    {
        return None;
    }
    let cube_dim = CubeDim::new_2d(32, warps as u32);
    let cubes = (n / pairs).div_ceil(CUBE_COLUMNS);
    Some((cube_dim, grid(client, cubes, cube_dim), shape))
}

/// Whether the fp8-weight launches ([`launch_matvec_fp8`] and its fused forms) take `rows`
/// rows of `k` times an fp8 weight of `n` rows in blocks of `block_words` words through the
/// warp-level tensor-core kernels on `client`'s device (`fp8_mma.rs`), rather than the
/// matrix-vector kernels.
pub fn fp8_mma_takes(
    client: &Client,
    float: ElemType,
    [rows, k, n]: [usize; 3],
    block_words: usize,
) -> bool {
    let words = weight_decode(client, block_words, true);
    fp8_mma_launch(client, float, [rows, k, n], 1, words, RowRead::Plain).is_some()
}

/// Enqueues `out = res + x · wᵀ` for `x [rows, k]`, `w [n, k]` and `res`, `out [rows, n]`, all
/// contiguous of float `float` (`elem_size` bytes): the product rounded to `float`, then the
/// residual add. Does nothing for an empty product.
///
/// # Safety
/// [`matvec_fits`] must hold; the tensors must be live and contiguous with those shapes; `out`
/// must not alias an input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec_add(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    k: usize,
    n: usize,
    [x, w, res, out]: [TensorArg; 4],
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let vector = widest_vector(client, elem_size, |n| k.is_multiple_of(n));
    let (cube_dim, cube_count, cols, unroll, sums) = matvec_shape(client, rows, n, 1, LOADS);
    unsafe {
        matvec_add_kernel::launch_unchecked(
            client,
            cube_count,
            cube_dim,
            AddressType::from_len((n * k).max(rows * k).max(rows * n)),
            vector,
            x,
            w,
            res,
            out,
            rows,
            cols,
            unroll,
            k / vector,
            sums,
            float,
        );
    }
}

/// Enqueues `out [rows, n] = x [rows, k] · wᵀ` for an fp8 weight (`decoder/fp8.rs`): `w [n, k /
/// 4]` words of e4m3 codes (`U32`), `scales [n, ceil(k / 4 / block_words)]` f32, `x` and `out`
/// contiguous of float `float`, decoded in registers. The same plane layout as
/// [`launch_matvec`]. Without `nan_codes` the NaN codes (`0x7F`, `0xFF`) read as ±480 × scale:
/// for weights known to hold none (one check fewer a code). Does nothing for an empty product.
///
/// # Safety
/// [`matvec_fits`] must hold, `k` must be a multiple of 4 and `block_words` at least 1; the
/// tensors must be live and contiguous with those shapes; `out` must not alias an input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec_fp8(
    client: &Client,
    float: ElemType,
    rows: usize,
    k: usize,
    n: usize,
    block_words: usize,
    nan_codes: bool,
    [x, w, scales, out]: [TensorArg; 4],
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let address = AddressType::from_len((n * k).max(rows * k).max(rows * n));
    let words = weight_decode(client, block_words, nan_codes);
    if let Some((cube_dim, count, shape)) =
        fp8_mma_launch(client, float, [rows, k, n], 1, words, RowRead::Plain)
    {
        unsafe {
            mma_fp8_kernel::launch_unchecked(
                client,
                count,
                cube_dim,
                address,
                MMA_X_VECTOR,
                x,
                w,
                scales,
                out,
                shape,
                float,
            );
        }
        return;
    }
    let (cube_dim, cube_count, w_vector, shape, sums) =
        fp8_plain_shape(client, [rows, k, n], words);
    unsafe {
        matvec_fp8_kernel::launch_unchecked(
            client, cube_count, cube_dim, address, FP8_VECTOR, w_vector, x, w, scales, out, shape,
            sums, float,
        );
    }
}

/// Enqueues [`launch_matvec_norm`]'s product on an fp8 weight (codes and scales as
/// [`launch_matvec_fp8`]; with `silu` a stacked gate/up weight, `n = 2m` rows, `out [rows, m]`):
/// `x`'s rows normalised with `norm_w [k]` and `eps`, decoded in registers. Does nothing for an
/// empty product.
///
/// # Safety
/// [`matvec_norm_fits`] must hold for `silu`, `n` must be even with `silu`, `k` a multiple of 4
/// and `block_words` at least 1; the tensors must be live and contiguous with those shapes; `out`
/// must not alias an input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec_fp8_norm(
    client: &Client,
    float: ElemType,
    rows: usize,
    k: usize,
    n: usize,
    block_words: usize,
    nan_codes: bool,
    eps: f32,
    silu: bool,
    [x, norm_w, w, scales, out]: [TensorArg; 5],
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let address = AddressType::from_len((n * k).max(rows * k).max(rows * n));
    let pairs = 1 + silu as usize;
    let words = weight_decode(client, block_words, nan_codes);
    if let Some((cube_dim, count, shape)) =
        fp8_mma_launch(client, float, [rows, k, n], pairs, words, RowRead::Staged)
    {
        unsafe {
            mma_fp8_norm_kernel::launch_unchecked(
                client,
                count,
                cube_dim,
                address,
                MMA_X_VECTOR,
                x,
                norm_w,
                w,
                scales,
                out,
                eps,
                1.0 / k as f32,
                shape,
                float,
            );
        }
        return;
    }
    let read = match rows_staged(client, plane_sums(client), rows * k * float.size()) {
        true => RowRead::Staged,
        false => RowRead::Normalised,
    };
    let (cube_dim, cube_count, w_vector, shape, sums) =
        fp8_shape(client, [rows, k, n], words, pairs, read);
    unsafe {
        matvec_fp8_norm_kernel::launch_unchecked(
            client,
            cube_count,
            cube_dim,
            address,
            FP8_VECTOR,
            w_vector,
            x,
            norm_w,
            w,
            scales,
            out,
            eps,
            1.0 / k as f32,
            shape,
            sums,
            float,
        );
    }
}

/// Enqueues [`launch_matvec_add`]'s product on an fp8 weight (codes and scales as
/// [`launch_matvec_fp8`]): `out = res + x · wᵀ`, decoded in registers. Does nothing for an
/// empty product.
///
/// # Safety
/// [`matvec_fits`] must hold, `k` must be a multiple of 4 and `block_words` at least 1; the
/// tensors must be live and contiguous with those shapes; `out` must not alias an input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec_fp8_add(
    client: &Client,
    float: ElemType,
    rows: usize,
    k: usize,
    n: usize,
    block_words: usize,
    nan_codes: bool,
    [x, w, scales, res, out]: [TensorArg; 5],
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let address = AddressType::from_len((n * k).max(rows * k).max(rows * n));
    let words = weight_decode(client, block_words, nan_codes);
    if let Some((cube_dim, count, shape)) =
        fp8_mma_launch(client, float, [rows, k, n], 1, words, RowRead::Plain)
    {
        unsafe {
            mma_fp8_add_kernel::launch_unchecked(
                client,
                count,
                cube_dim,
                address,
                MMA_X_VECTOR,
                x,
                w,
                scales,
                res,
                out,
                shape,
                float,
            );
        }
        return;
    }
    let (cube_dim, cube_count, w_vector, shape, sums) =
        fp8_plain_shape(client, [rows, k, n], words);
    unsafe {
        matvec_fp8_add_kernel::launch_unchecked(
            client, cube_count, cube_dim, address, FP8_VECTOR, w_vector, x, w, scales, res, out,
            shape, sums, float,
        );
    }
}

/// The fp8 matrix-vector kernels' launch for `rows` rows of `k` and a weight of `n` rows in
/// `pairs` (`n / pairs` output columns): the cube, the cube count, words a load, the kernel's
/// comptime shape (`read`: how the rows of `x` are read; the codes read as `words` says) and how
/// a plane adds its lanes.
fn fp8_shape(
    client: &Client,
    [rows, k, n]: [usize; 3],
    words: Fp8Words,
    pairs: usize,
    read: RowRead,
) -> (CubeDim, CubeCount, usize, Fp8Shape, PlaneSums) {
    let row_words = k / FP8_VECTOR;
    // Words a load: up to four (16 bytes), as the float kernel's widest vectors.
    let w_vector = widest_vector(client, 4, |n| n <= 4 && row_words.is_multiple_of(n));
    let (cube_dim, cube_count, cols, unroll, sums) =
        matvec_shape(client, rows, n / pairs, pairs, FP8_LOADS);
    let shape = Fp8Shape {
        rows,
        cols,
        pairs,
        unroll,
        w_vectors: row_words / w_vector,
        read,
        words,
        prefetch: LaunchTuning::current().decoder.matvec_prefetch,
    };
    (cube_dim, cube_count, w_vector, shape, sums)
}

/// [`fp8_shape`] of the kernels without a norm or an activation: one weight row a column, `x`'s
/// rows as stored.
fn fp8_plain_shape(
    client: &Client,
    dims: [usize; 3],
    words: Fp8Words,
) -> (CubeDim, CubeCount, usize, Fp8Shape, PlaneSums) {
    fp8_shape(client, dims, words, 1, RowRead::Plain)
}

/// How the fp8-weight kernels read codes on `client`'s device: scales in blocks of `block_words`
/// words, the decode ([`Fp8Decode::for_device`] unless the tuning names one), NaN codes checked
/// where the weight may hold them (`nan_codes`, unless the measurement-only `fp8_finite` is set).
fn weight_decode(client: &Client, block_words: usize, nan_codes: bool) -> Fp8Words {
    let tuning = LaunchTuning::current().decoder;
    let decode = tuning
        .fp8_decode
        .map_or_else(|| Fp8Decode::for_device(client), |d| d.on_device(client));
    Fp8Words {
        block_words,
        decode,
        nan_codes: nan_codes && !tuning.fp8_finite,
    }
}

/// Enqueues the decoding of an fp8 weight (`decoder/fp8.rs`; `w [n, k / 4]`, `scales` as
/// [`launch_matvec_fp8`]) into `out [n, k]`, contiguous of float `float`. Does nothing for an
/// empty weight.
///
/// # Safety
/// `k` must be a multiple of 4 and `block_words` at least 1; the tensors must be live and
/// contiguous with those shapes; `out` must not alias an input.
pub unsafe fn launch_dequantize_fp8(
    client: &Client,
    float: ElemType,
    n: usize,
    k: usize,
    block_words: usize,
    [w, scales, out]: [TensorArg; 3],
) {
    let words = n * (k / FP8_VECTOR);
    if words == 0 {
        return;
    }
    let cube_dim = CubeDim::new(client, words);
    unsafe {
        dequantize_fp8_kernel::launch_unchecked(
            client,
            calculate_cube_count_elemwise(client, words, cube_dim),
            cube_dim,
            AddressType::from_len(n * k),
            FP8_VECTOR,
            w,
            scales,
            out,
            block_words,
            float,
        );
    }
}

/// The most rows [`launch_few_rows`] takes: four tiles of 16.
const FEW_ROWS_MAX: usize = 4 * TILE;
/// Planes of a `few_rows_kernel` cube: each takes one in `PLANES` of the
/// inner tiles.
const FEW_ROWS_PLANES: usize = 8;

/// Whether [`launch_few_rows`] takes `x [rows, k] · wᵀ` (`w [n, k]`) of float `float` on
/// `client`'s device: `16 < rows ≤ 64`, `k` and `n` multiples of 16, `float` f16 (the type the
/// kernel was checked and measured in on a GPU; bf16 and f32 go elsewhere), tensor-core tiles of
/// f16 with f32 accumulation (16 × 16 × 16), planes of one fixed size.
pub fn few_rows_fits(client: &Client, float: ElemType, rows: usize, k: usize, n: usize) -> bool {
    let hardware = &client.properties().hardware;
    let tile = TILE as u32;
    float == ElemType::Float(FloatKind::F16)
        && (TILE + 1..=FEW_ROWS_MAX).contains(&rows)
        && k.is_multiple_of(TILE)
        && n.is_multiple_of(TILE)
        && k > 0
        && n > 0
        && hardware.plane_size_min == hardware.plane_size_max
        && (hardware.max_units_per_cube as usize)
            >= hardware.plane_size_min as usize * FEW_ROWS_PLANES
        && has_tiles(client, float, [tile; 3])
}

/// Enqueues the few-rows kernel (`decoder/matvec.rs`): `out [rows, n] = x [rows, k] · wᵀ` for
/// `w [n, k]`, all contiguous of float `float`; up to four column tiles a cube (outputs wider than
/// the input) or two (others), the most that divides the output's tiles. `tuning` is
/// [`DecoderTuning::default`] in normal use (benchmark builds override it).
///
/// # Safety
/// [`few_rows_fits`] must hold; the tensors must be live and contiguous with those shapes; `out`
/// must not alias `x` or `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_few_rows(
    client: &Client,
    float: ElemType,
    rows: usize,
    k: usize,
    n: usize,
    x: TensorArg,
    w: TensorArg,
    out: TensorArg,
    tuning: &DecoderTuning,
) {
    let lanes = client.properties().hardware.plane_size_min;
    // Column tiles per cube: four for outputs wider than the input, else two (the H200 probe,
    // see benches/NOTES.md, 'Projections per row count': q/k/v 86 µs at 64 rows with four, 118
    // with two; o and down 60 and 197 µs with two, 84 and 280 with four).
    let cols = tuning
        .few_rows_cols
        .unwrap_or(if n > k { 4 } else { 2 })
        .clamp(1, 4);
    let planes = tuning
        .few_rows_planes
        .unwrap_or(FEW_ROWS_PLANES)
        .clamp(1, FEW_ROWS_PLANES);
    // Column tiles per cube: the most of `cols` that divides the output's tiles.
    let cols = (1..=cols)
        .rev()
        .find(|c| (n / TILE).is_multiple_of(*c))
        .unwrap_or(1);
    let cube_dim = CubeDim::new_2d(lanes, planes as u32);
    let cubes = n / (TILE * cols);
    unsafe {
        few_rows_kernel::launch_unchecked(
            client,
            grid(client, cubes, cube_dim),
            cube_dim,
            AddressType::from_len((n * k).max(rows * k).max(rows * n)),
            x,
            w,
            out,
            rows.div_ceil(TILE),
            cols,
            planes,
            float,
        );
    }
}

/// The grid of `cubes` cubes of `cube_dim` on `client`'s device, rounded up to its grid's
/// shape (the kernels launched on it let the cubes past `cubes` leave).
fn grid(client: &Client, cubes: usize, cube_dim: CubeDim) -> CubeCount {
    calculate_cube_count_elemwise(client, cubes * cube_dim.num_elems() as usize, cube_dim)
}

/// The staged kernel's launch for one shape: column tiles a cube (one a plane), inner tiles a
/// block, shares of the inner size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedRows {
    rows: usize,
    k: usize,
    n: usize,
    planes: usize,
    row_planes: usize,
    block: usize,
    splits: usize,
    /// Float weights through `warp_rows_kernel`.
    warp: bool,
}

/// Planes (column tiles) of a staged cube.
const STAGED_PLANES: usize = 4;
/// Cubes the staged launch's shares aim for past [`STAGED_FEW_ROWS`] rows.
const STAGED_CUBES: usize = 256;
/// The most shares the staged launch takes past [`STAGED_FEW_ROWS`] rows unless told.
const STAGED_MAX_SPLITS: usize = 8;
/// Up to this many rows the staged launch's shares aim for [`STAGED_FEW_CUBES`] cubes, at most
/// [`STAGED_FEW_MAX_SPLITS`] shares: of unsharded Llama-3-8B's products only gate/up (448
/// column groups) then takes 4 shares instead of 1, which an H100 probe measured faster at 8
/// rows (111.1 µs against 132.0), while q/k/v, o and down, already at 4, were slower with 8
/// (`benches/RESULTS.md`, "Shares of the staged kernel at 8 rows"). Other shapes (smaller or
/// sharded models) may take other shares than before; they were not measured.
const STAGED_FEW_ROWS: usize = 16;
/// Cubes the staged launch's shares aim for up to [`STAGED_FEW_ROWS`] rows.
const STAGED_FEW_CUBES: usize = 1024;
/// The most shares the staged launch takes up to [`STAGED_FEW_ROWS`] rows unless told.
const STAGED_FEW_MAX_SPLITS: usize = 4;
/// Inner tiles a staged block, at most, but through CUDA (measured through SPIR-V: the H100 probe
/// of `benches/RESULTS.md`, "Staged products from shared vectors", 4 beat 8 at every row count
/// but 32).
const STAGED_BLOCK: usize = 4;
/// The same through CubeCL's CUDA runtime: 8 (`benches/RESULTS.md`, "Staged blocks and fp8
/// halves through CUDA": on an H100, decode 1074.9–1086.7 tok/s at batch 8 against
/// 983.0–989.3 with 4, and 5861.1–5914.7 at batch 64 against 5771.8–5822.7; blocks of 16 and
/// loads held further ahead were slower at 64).
const STAGED_CUDA_BLOCK: usize = 8;

/// Where the staged kernel writes: `out` (one share), the shares left for the next kernel, or
/// the shares then their sum into `out`.
enum StagedTarget {
    Out(TensorArg),
    Shares(TensorArg),
    Summed {
        partials: TensorBinding,
        out: TensorArg,
    },
}

impl StagedRows {
    /// The launch of `out [rows, n] = x [rows, k] · wᵀ` (`w [n, k]`) through
    /// `staged_rows_kernel` (the root crate routes products to it): `None` unless
    /// `1 ≤ rows ≤ 64`, `float` is f16 with 16 × 16 × 16 tensor-core tiles, planes of 32, `n` a
    /// multiple of 16 × the planes (64 unless tuned) and `k` of 16 (rows past `rows` are read as
    /// zeros).
    pub fn new(
        client: &Client,
        float: ElemType,
        rows: usize,
        k: usize,
        n: usize,
        tuning: &DecoderTuning,
    ) -> Option<Self> {
        let hardware = &client.properties().hardware;
        let tile = TILE as u32;
        let planes = tuning.staged_planes.unwrap_or(STAGED_PLANES);
        let fits = float == ElemType::Float(FloatKind::F16)
            && (1..=FEW_ROWS_MAX).contains(&rows)
            && k.is_multiple_of(TILE)
            && k > 0
            && n.is_multiple_of(TILE * planes)
            && n > 0
            && hardware.plane_size_min == 32
            && hardware.plane_size_max == 32
            && hardware.max_units_per_cube as usize >= 32 * planes
            && has_tiles(client, float, [tile; 3]);
        if !fits {
            return None;
        }
        let k_tiles = k / TILE;
        let m_tiles = rows.div_ceil(TILE);
        let row_planes = tuning
            .staged_row_planes
            .filter(|r| hardware.max_units_per_cube as usize >= 32 * planes * r)
            .unwrap_or(1);
        let x_rows = TILE * m_tiles.div_ceil(row_planes) * row_planes;
        let bytes = |b: usize| {
            (TILE * planes + x_rows) * (TILE * b + 8) * 2 + planes * row_planes * TILE * TILE * 4
        };
        let most = tuning.staged_block.unwrap_or(match Compiler::of(client) {
            Compiler::Cuda => STAGED_CUDA_BLOCK,
            _ => STAGED_BLOCK,
        });
        let block = (1..=most)
            .rev()
            .find(|b| k_tiles.is_multiple_of(*b) && bytes(*b) <= hardware.max_shared_memory_size)?;
        let groups = n / (TILE * planes);
        let blocks = (k_tiles / block).max(1);
        let splits = match tuning.staged_splits {
            Some(s) => s.min(blocks),
            None => {
                let (cubes, most) = match (tuning.staged_cubes, rows <= STAGED_FEW_ROWS) {
                    (Some(cubes), _) => (cubes, STAGED_MAX_SPLITS),
                    (None, true) => (STAGED_FEW_CUBES, STAGED_FEW_MAX_SPLITS),
                    (None, false) => (STAGED_CUBES, STAGED_MAX_SPLITS),
                };
                let most_splits = blocks.min(most);
                let mut s = 1;
                while groups * s < cubes && s * 2 <= most_splits {
                    s *= 2;
                }
                s
            }
        };
        let mut staged = Self {
            rows,
            k,
            n,
            planes,
            row_planes,
            block,
            splits,
            warp: false,
        };
        staged.warp = tuning.staged_warp == Some(true)
            && warp_mma_f16(client)
            && block.is_multiple_of(2)
            && k.is_multiple_of(CHUNK)
            && staged.warp_shape().shared_bytes() <= hardware.max_shared_memory_size;
        Some(staged)
    }

    /// The launch shape of `warp_rows_kernel` for this product: the staged launch's cubes,
    /// shares and blocks (blocks of an even count of inner tiles).
    fn warp_shape(&self) -> WarpRowsShape {
        WarpRowsShape {
            groups: self.rows.div_ceil(GROUP_ROWS),
            warps: self.planes,
            k_words: self.k / 8,
            block_chunks: TILE * self.block / CHUNK,
            splits: self.splits,
        }
    }

    /// The f32 elements of the scratch buffer [`Self::launch`] needs for the shares' partial
    /// sums (0: none, the kernel writes `out` itself).
    pub fn partials(&self) -> usize {
        match self.splits {
            1 => 0,
            s => s * self.rows * self.n,
        }
    }

    /// Whether the launch also takes an fp8 weight ([`Self::launch_fp8`]): the device loads
    /// vectors of 4 or 8 of `x` (a whole word of codes, or two, a load).
    pub fn takes_fp8(&self, client: &Client) -> bool {
        self.vector(client, true) >= FP8_VECTOR
    }

    /// The vector width of `x`'s loads (and of the weight's elements a load): rows of the staged
    /// blocks are padded by 8 elements, so vectors of up to 8; with `fp8`, whole words of codes.
    fn vector(&self, client: &Client, fp8: bool) -> usize {
        let (k, block) = (self.k, TILE * self.block);
        widest_vector(client, 2, |v| {
            k.is_multiple_of(v)
                && block.is_multiple_of(v)
                && 8 % v == 0
                && (!fp8 || v.is_multiple_of(FP8_VECTOR))
        })
    }

    /// The shares of the inner size the launch splits the product into (1: none).
    pub fn shares(&self) -> usize {
        self.splits
    }

    /// Enqueues the product, then with several shares their sum into `out`; `partials` holds
    /// at least [`Self::partials`] f32 elements (`None` when that is 0).
    ///
    /// # Panics
    /// Without `partials` where [`Self::partials`] is not 0.
    ///
    /// # Safety
    /// The tensors must be live and contiguous with the shapes of [`Self::new`], of float
    /// `float`; `out` and `partials` must alias neither each other nor `x` or `w`.
    pub unsafe fn launch(
        &self,
        client: &Client,
        float: ElemType,
        [x, w, out]: [TensorArg; 3],
        partials: Option<TensorBinding>,
    ) {
        let target = self.summed(out, partials);
        unsafe { self.enqueue(client, float, [x, w], None, target) }
    }

    /// Enqueues the product's [`Self::shares`] partial sums into `shares [shares, rows, n]` f32
    /// and leaves them there: the next kernel adds them ([`Residual::shares`],
    /// [`launch_silu_mul`]), one launch fewer than [`Self::launch`].
    ///
    /// # Panics
    /// With one share.
    ///
    /// # Safety
    /// As [`Self::launch`], `shares` contiguous, [`Self::partials`] elements, aliasing nothing.
    pub unsafe fn launch_shares(
        &self,
        client: &Client,
        float: ElemType,
        [x, w, shares]: [TensorArg; 3],
    ) {
        assert!(self.splits > 1, "one share: the product is its own output");
        unsafe { self.enqueue(client, float, [x, w], None, StagedTarget::Shares(shares)) }
    }

    /// [`Self::launch`] on an fp8 weight (`codes [n, k / 4]` and `scales [n, ceil(k / 4 /
    /// block_words)]`, as [`launch_matvec_fp8`] reads them), decoded as it is staged: the values
    /// [`launch_dequantize_fp8`] writes, multiplied as [`Self::launch`] multiplies them.
    ///
    /// # Panics
    /// Unless [`Self::takes_fp8`] on `client`'s device.
    ///
    /// # Safety
    /// As [`Self::launch`], with `codes` and `scales` of those shapes (`block_words` ≥ 1).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_fp8(
        &self,
        client: &Client,
        float: ElemType,
        [x, codes, scales, out]: [TensorArg; 4],
        block_words: usize,
        nan_codes: bool,
        partials: Option<TensorBinding>,
    ) {
        let target = self.summed(out, partials);
        let fp8 = self.fp8_weight(client, scales, block_words, nan_codes);
        unsafe { self.enqueue(client, float, [x, codes], Some(fp8), target) }
    }

    /// [`Self::launch_shares`] on an fp8 weight, read as [`Self::launch_fp8`] reads it.
    ///
    /// # Panics
    /// With one share, or unless [`Self::takes_fp8`] on `client`'s device.
    ///
    /// # Safety
    /// As [`Self::launch_fp8`] and [`Self::launch_shares`].
    pub unsafe fn launch_fp8_shares(
        &self,
        client: &Client,
        float: ElemType,
        [x, codes, scales, shares]: [TensorArg; 4],
        block_words: usize,
        nan_codes: bool,
    ) {
        assert!(self.splits > 1, "one share: the product is its own output");
        let fp8 = self.fp8_weight(client, scales, block_words, nan_codes);
        let target = StagedTarget::Shares(shares);
        unsafe { self.enqueue(client, float, [x, codes], Some(fp8), target) }
    }

    /// Where [`Self::launch`] writes: `out` itself with one share, else `partials`, then their
    /// sum into `out`.
    fn summed(&self, out: TensorArg, partials: Option<TensorBinding>) -> StagedTarget {
        match (self.splits, partials) {
            (1, _) => StagedTarget::Out(out),
            (_, Some(partials)) => StagedTarget::Summed { partials, out },
            (_, None) => panic!(
                "{} shares need a buffer for their partial sums",
                self.splits
            ),
        }
    }

    /// An fp8 weight's scales and how its codes are read on `client`'s device.
    fn fp8_weight(
        &self,
        client: &Client,
        scales: TensorArg,
        block_words: usize,
        nan_codes: bool,
    ) -> (TensorArg, Fp8Words) {
        assert!(
            self.takes_fp8(client),
            "the staged launch takes no fp8 codes on this device (see StagedRows::takes_fp8)"
        );
        (scales, weight_decode(client, block_words, nan_codes))
    }

    /// The product of `x` and `w` into `target`, with `fp8` the weight's scales and how its
    /// codes are read.
    unsafe fn enqueue(
        &self,
        client: &Client,
        float: ElemType,
        [x, w]: [TensorArg; 2],
        fp8: Option<(TensorArg, Fp8Words)>,
        target: StagedTarget,
    ) {
        let (rows, k, n) = (self.rows, self.k, self.n);
        let address = AddressType::from_len((n * k).max(rows * k).max(self.splits * rows * n));
        let f32 = ElemType::Float(FloatKind::F32);
        let (target, sum) = match target {
            StagedTarget::Out(out) => (out, None),
            StagedTarget::Shares(shares) => (shares, None),
            StagedTarget::Summed { partials, out } => {
                (partials.clone().into_tensor_arg(), Some((partials, out)))
            }
        };
        let target_type = if self.splits > 1 { f32 } else { float };
        if self.warp && fp8.is_none() {
            let shape = self.warp_shape();
            let cube_dim = CubeDim::new_2d(32, shape.warps as u32);
            let cubes = n / shape.cube_cols() * self.splits;
            // Rows of `k / 8` 16-byte words (contiguous rows, as `Self::launch` requires).
            let words = |arg: TensorArg, rows: usize| match arg {
                TensorArg::Handle { mut handle } => {
                    handle.shape = [rows, k / 8].into();
                    handle.strides = [k / 8, 1].into();
                    TensorArg::Handle { handle }
                }
                alias => alias,
            };
            unsafe {
                warp_rows_kernel::launch_unchecked(
                    client,
                    grid(client, cubes, cube_dim),
                    cube_dim,
                    address,
                    words(x, rows),
                    words(w, n),
                    target,
                    shape,
                    target_type,
                );
            }
        } else {
            unsafe {
                self.enqueue_staged(client, float, address, [x, w], fp8, target, target_type)
            };
        }
        let Some((partials, out)) = sum else { return };
        let vector = widest_vector(client, 4, |v| n.is_multiple_of(v));
        let units = rows * n / vector;
        let sum_dim = CubeDim::new(client, units);
        unsafe {
            split_sum_kernel::launch_unchecked(
                client,
                calculate_cube_count_elemwise(client, units, sum_dim),
                sum_dim,
                AddressType::from_len(self.splits * rows * n),
                vector,
                partials.into_tensor_arg(),
                out,
                self.splits,
                float,
            );
        }
    }

    /// `staged_rows_kernel`'s launch of the product into `target` (of `target_type`), indexed
    /// with `address`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn enqueue_staged(
        &self,
        client: &Client,
        float: ElemType,
        address: AddressType,
        [x, w]: [TensorArg; 2],
        fp8: Option<(TensorArg, Fp8Words)>,
        target: TensorArg,
        target_type: ElemType,
    ) {
        let (rows, k, n) = (self.rows, self.k, self.n);
        let vector = self.vector(client, fp8.is_some());
        // The weight's elements: `vector` floats a load, or `vector / 4` words of codes.
        let (w_type, w_vector, scales, words) = match fp8 {
            Some((scales, words)) => (
                ElemType::UInt(UIntKind::U32),
                vector / FP8_VECTOR,
                Some(scales),
                Some(words),
            ),
            None => (float, vector, None, None),
        };
        let cube_dim = CubeDim::new_2d(32, (self.planes * self.row_planes) as u32);
        let cubes = n / (TILE * self.planes) * self.splits;
        unsafe {
            staged_rows_kernel::launch_unchecked(
                client,
                grid(client, cubes, cube_dim),
                cube_dim,
                address,
                vector,
                w_vector,
                x,
                w,
                scales.into(),
                target,
                rows.div_ceil(TILE),
                self.planes,
                self.row_planes,
                self.block,
                self.splits,
                k / vector,
                vector,
                words,
                [float, target_type, w_type],
            );
        }
    }
}

/// What [`launch_rms_norm`] adds to its rows first: `y`, written with them into `sum` (`x`'s
/// shape, contiguous, float `float`).
pub struct Residual {
    /// What is added: `x`'s shape and float, or with `shares` ≥ 2 the f32 shares of a staged
    /// product, `[shares, rows, hidden]` ([`StagedRows::launch_shares`]).
    pub y: TensorArg,
    /// The sum `x + y`, rounded once to the float.
    pub sum: TensorArg,
    /// `y`'s shares: 1 for a plain output; else summed in share order in f32 and rounded once
    /// to the float before the add, the values the staged launch's own sum writes.
    pub shares: usize,
}

/// Enqueues the RMSNorm of the `rows` rows of `hidden` elements of `x` (contiguous, float
/// `float`) with weight `w [hidden]` into `out` (contiguous, `x`'s shape); with a `residual`, of
/// `sum = x + y` instead, `sum` written too. Does nothing for an empty input.
///
/// # Panics
/// With 2 or more shares of `y` and a float neither f16 nor f32.
///
/// # Safety
/// The tensors must be live and contiguous with those shapes, and `out` and `sum` must alias
/// neither each other nor an input.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_rms_norm(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    hidden: usize,
    eps: f32,
    [x, w, out]: [TensorArg; 3],
    residual: Option<Residual>,
) {
    if rows == 0 || hidden == 0 {
        return;
    }
    let shares = residual.as_ref().map_or(1, |r| r.shares.max(1));
    let (y_type, elem_size, f16) = shares_read(float, elem_size, shares);
    let vector = widest_vector(client, elem_size, |n| hidden.is_multiple_of(n));
    let row_vectors = hidden / vector;
    let units = row_vectors.next_power_of_two().clamp(32, 256);
    let cube_dim = CubeDim::new_1d(units as u32);
    let count = calculate_cube_count_elemwise(client, rows * units, cube_dim);
    let address = AddressType::from_len(shares * rows * hidden);
    let inv_hidden = 1.0 / hidden as f32;
    unsafe {
        match residual {
            None => rms_norm_kernel::launch_unchecked(
                client,
                count,
                cube_dim,
                address,
                vector,
                x,
                w,
                out,
                eps,
                inv_hidden,
                units,
                row_vectors,
                float,
            ),
            Some(Residual { y, sum, .. }) => add_rms_norm_kernel::launch_unchecked(
                client,
                count,
                cube_dim,
                address,
                vector,
                x,
                y,
                w,
                sum,
                out,
                eps,
                inv_hidden,
                units,
                row_vectors,
                shares,
                f16,
                [float, y_type],
            ),
        }
    }
}

/// How a kernel of float `float` (`elem_size` bytes) reads a product's output in `shares`: its
/// element type, the element size its vectors are chosen for (f32 shares in vectors of as many
/// lanes as the float's), and whether their sum is rounded to f16 (else `float` is f32, or one
/// share is `float` itself).
///
/// # Panics
/// With shares of a float neither f16 nor f32 (the staged kernel's shares are f16 products').
fn shares_read(float: ElemType, elem_size: usize, shares: usize) -> (ElemType, usize, bool) {
    let f16 = ElemType::Float(FloatKind::F16);
    let f32 = ElemType::Float(FloatKind::F32);
    match shares {
        1 => (float, elem_size, false),
        _ => {
            assert!(
                float == f16 || float == f32,
                "shares are summed into f16 or f32, not {float:?}"
            );
            (f32, elem_size.max(4), float == f16)
        }
    }
}

/// Enqueues the SiLU-times-up kernel (`decoder/act.rs`) for `rows` rows of `m` outputs:
/// `gate_up [rows, 2m]` and `out [rows, m]`, contiguous, float `float` (`elem_size` bytes); with
/// `shares` ≥ 2, `gate_up` is instead the f32 shares of a staged product, `[shares, rows, 2m]`
/// ([`StagedRows::launch_shares`]), summed as [`Residual::shares`] says. Does nothing for an
/// empty input.
///
/// # Panics
/// With 2 or more shares and a float neither f16 nor f32.
///
/// # Safety
/// The tensors must be live and contiguous with those shapes, and `out` must not alias
/// `gate_up`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_silu_mul(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    m: usize,
    gate_up: TensorArg,
    out: TensorArg,
    shares: usize,
) {
    if rows == 0 || m == 0 {
        return;
    }
    let shares = shares.max(1);
    let (y_type, elem_size, f16) = shares_read(float, elem_size, shares);
    let vector = widest_vector(client, elem_size, |n| m.is_multiple_of(n));
    let units = rows * m / vector;
    let cube_dim = CubeDim::new(client, units);
    unsafe {
        silu_mul_kernel::launch_unchecked(
            client,
            calculate_cube_count_elemwise(client, units, cube_dim),
            cube_dim,
            AddressType::from_len(shares * rows * 2 * m),
            vector,
            gate_up,
            out,
            m / vector,
            shares,
            f16,
            [float, y_type],
        );
    }
}

/// Whether `client`'s device has planes of exactly 32 units and 16 × 16 × 16 f16 tensor-core
/// tiles with f32 accumulation: the tiles the products here were written for.
fn tiles_of_32(client: &Client) -> bool {
    let hardware = &client.properties().hardware;
    hardware.plane_size_min == 32
        && hardware.plane_size_max == 32
        && has_tiles(client, ElemType::Float(FloatKind::F16), [16, 16, 16])
}

/// Whether `client`'s device multiplies f16 tensor-core tiles the way the Vulkan products here
/// were measured: CubeCL's SPIR-V compiler, planes of 32, 16 × 16 × 16 tiles with f32
/// accumulation.
pub fn spirv_tiles(client: &Client) -> bool {
    Compiler::of(client) == Compiler::Spirv && tiles_of_32(client)
}

/// How [`launch_tiles_product`] reads its operands on `client`'s device, where it runs there:
/// 16-byte words through CubeCL's SPIR-V compiler ([`spirv_tiles`]; the words' fragment stride
/// is SPIR-V's: `kernels/src/decoder/product.rs`), vectors of 8 halves through CubeCL's CUDA
/// compilers (one 16-byte access there) on planes of 32 with 16 × 16 × 16 f16 tiles; `None`
/// elsewhere (not measured).
fn tiles_access(client: &Client) -> Option<TilesAccess> {
    match Compiler::of(client) {
        Compiler::Spirv => tiles_of_32(client).then_some(TilesAccess::Words),
        Compiler::Cuda => tiles_of_32(client).then_some(TilesAccess::Halves),
        Compiler::Other => None,
    }
}

/// How [`launch_tiles_product`] reads `x [m, k] · wᵀ` (`w [n, k]`) of `float` on `client`'s
/// device, where it takes the product: f16; `n` a positive multiple of 128 and `k` of 64 (no
/// bounds checks on either; any `m`); CubeCL's SPIR-V compiler (16-byte words) or CUDA runtime
/// (vectors of 8 halves) on planes of 32 with 16 × 16 × 16 f16 tiles; and the 45 KB of shared
/// memory one stage of blocks of 64 takes (more stages or wider blocks only where
/// [`launch_tiles_product`] finds room for them). `None` where it does not.
pub fn tiles_product_access(
    client: &Client,
    float: ElemType,
    [m, k, n]: [usize; 3],
) -> Option<TilesAccess> {
    let fits = float == ElemType::Float(FloatKind::F16)
        && m > 0
        && n > 0
        && k > 0
        && n.is_multiple_of(CUBE_COLS)
        && k.is_multiple_of(BLOCK)
        && client.properties().hardware.max_shared_memory_size >= shared_bytes(1, BLOCK);
    if fits { tiles_access(client) } else { None }
}

/// Shared stages of [`launch_tiles_product`] through CubeCL's CUDA runtime: two, one barrier a
/// block (`benches/RESULTS.md`, "Two shared stages for the tiles product, and staged column
/// tiles, through CUDA": on an H100, prefill of 64 prompts of 512 1.048–1.053× one stage's);
/// elsewhere one (two need 82 KB of shared memory, past the 48 KB CubeCL's wgpu runtime offers).
const TILES_CUDA_STAGES: usize = 2;

/// The blocks (inner elements) and shared stages [`launch_tiles_product`] takes for an inner
/// size `k` on `client`'s device: as tuned ([`DecoderTuning::tiles_block`],
/// [`DecoderTuning::tiles_stages`]), else blocks of [`BLOCK`] and [`TILES_CUDA_STAGES`] through
/// CUDA, one stage elsewhere; each only where `k` and the device's shared memory hold it.
fn tiles_plan(client: &Client, k: usize) -> (usize, usize) {
    let tuning = crate::LaunchTuning::current().decoder;
    let shared = client.properties().hardware.max_shared_memory_size;
    let block = tuning
        .tiles_block
        .filter(|b| [BLOCK, WIDE_BLOCK].contains(b))
        .filter(|b| k.is_multiple_of(*b) && shared >= shared_bytes(1, *b))
        .unwrap_or(BLOCK);
    let stages = tuning.tiles_stages.unwrap_or(match Compiler::of(client) {
        Compiler::Cuda => TILES_CUDA_STAGES,
        _ => 1,
    });
    let stages = if shared >= shared_bytes(stages, block) {
        stages
    } else {
        1
    };
    (block, stages)
}

/// How [`launch_tiles_product`] reads and stages its operands ([`tiles_product_access`] says
/// which a device takes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TilesAccess {
    /// 16-byte words, `Vector<u32, 4>` (the launch through SPIR-V).
    Words,
    /// Vectors of 8 halves: one 16-byte access through CUDA (the launch there); through SPIR-V
    /// two 8-byte ones (measurement only).
    Halves,
}

/// `out [m, n] = x [m, k] · wᵀ` on tensor-core tiles, 128 × 128 outputs a cube (the product of
/// `kernels/src/decoder/product.rs`), x, w and out given as their buffers (read as rows of 8
/// halves: 16-byte words or vectors of 8, as `access` says).
///
/// # Safety
///
/// [`tiles_product_access`] is `Some` for `[m, k, n]`; `x`, `w` hold contiguous f16 `[m, k]`,
/// `[n, k]` from 16-byte-aligned offsets; `out` a contiguous `[m, n]` buffer of `float` (f16).
pub unsafe fn launch_tiles_product(
    client: &Client,
    float: ElemType,
    [m, k, n]: [usize; 3],
    access: TilesAccess,
    [x, w, out]: [&Handle; 3],
) {
    let rows = |h: &Handle, rows: usize| unsafe {
        TensorArg::from_raw_parts(h.clone(), [k / 8, 1].into(), [rows, k / 8].into())
    };
    let out = unsafe { TensorArg::from_raw_parts(out.clone(), [n, 1].into(), [m, n].into()) };
    let cubes = m.div_ceil(CUBE_ROWS) * (n / CUBE_COLS);
    let cube_dim = CubeDim::new_2d(32, PLANES as u32);
    let (block, stages) = tiles_plan(client, k);
    let (word, vector, word_halves) = match access {
        TilesAccess::Words => (ElemType::UInt(UIntKind::U32), 4, 2),
        TilesAccess::Halves => (float, 8, 1),
    };
    unsafe {
        tiles_product_kernel::launch_unchecked(
            client,
            // Cubes past the last tile (the count rounded to the grid's shape) leave at once.
            grid(client, cubes, cube_dim),
            cube_dim,
            AddressType::from_len((m * k).max(n * k).max(m * n)),
            vector,
            rows(x, m),
            rows(w, n),
            out,
            word_halves,
            block,
            stages,
            [float, word],
        );
    }
}
