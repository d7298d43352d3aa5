//! Host side of the fused kernel: the frequency table, the vector width and the launch.

use crate::angle::turn_table;
use crate::rope_pool::rope_pool_kernel;
use cubecl::client::Client;
use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::{CubeDim, calculate_cube_count_elemwise};

/// The sizes of one call, read off the tensor shapes by the caller (already validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopePoolGeometry {
    /// Tokens in the batch (`q.shape[0]`).
    pub num_tokens: usize,
    /// Query/output heads per token.
    pub num_qo_heads: usize,
    /// Key/value heads per token.
    pub num_kv_heads: usize,
    /// Elements per head; even.
    pub head_dim: usize,
    /// Rows of each pool.
    pub pool_size: usize,
}

impl RopePoolGeometry {
    /// Largest element count any tensor of the call holds, for the kernel's address width.
    pub fn max_len(&self) -> usize {
        let rows = self.num_tokens.max(self.pool_size);
        rows * self.num_qo_heads.max(self.num_kv_heads) * self.head_dim
    }
}

/// A numeric tuning override from the environment (benchmarks only; unset in normal use).
fn tuning_knob(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The widest vector the device loads efficiently for `elem_size`-byte elements that also
/// divides `half = head_dim / 2`, so a unit's vector never straddles the two halves of a row.
/// `ROPE_POOL_VECTOR` caps the width (for tuning).
pub fn vector_size(client: &Client, elem_size: usize, head_dim: usize) -> usize {
    let half = head_dim / 2;
    let cap = tuning_knob("ROPE_POOL_VECTOR").unwrap_or(usize::MAX);
    client
        .io_optimized_vector_sizes(elem_size)
        .find(|&n| n > 0 && n <= cap && half.is_multiple_of(n))
        .unwrap_or(1)
}

/// Units the launch aims to keep in flight: enough to fill a large GPU several times over.
const TARGET_UNITS: usize = 1 << 18;

/// The most heads one unit walks. Measured on the H200 (benches/NOTES.md, entry 6): groups of 4
/// strided heads were within a few percent of the best setting on every row at 4096 and 32768
/// tokens; whole-token groups (the trigonometry paid once per token) were 5–12% slower.
const MAX_HEADS_PER_UNIT: usize = 4;

/// How many heads one unit walks: enough that the batch puts about [`TARGET_UNITS`] units in
/// flight (one head per unit for small batches), at most [`MAX_HEADS_PER_UNIT`], so each unit's
/// cos/sin serve several heads. `ROPE_POOL_HEADS_PER_UNIT` overrides it (for tuning).
pub fn heads_per_unit(geometry: RopePoolGeometry, half_vectors: usize) -> usize {
    let heads = (geometry.num_qo_heads + geometry.num_kv_heads).max(1);
    if let Some(forced) = tuning_knob("ROPE_POOL_HEADS_PER_UNIT") {
        return forced.clamp(1, heads);
    }
    let all_split = geometry.num_tokens * heads * half_vectors;
    all_split
        .div_ceil(TARGET_UNITS)
        .clamp(1, MAX_HEADS_PER_UNIT.min(heads))
}

/// Whether a unit's heads are strided (every `groups`-th head, so the units of one token read
/// neighbouring heads at each step: the default, measured faster) or consecutive
/// (`ROPE_POOL_HEAD_ORDER=contiguous`, the earlier order, kept for A/B runs).
fn strided_heads() -> bool {
    std::env::var("ROPE_POOL_HEAD_ORDER").map_or(true, |v| v != "contiguous")
}

/// The device tensors of one call. Every tensor must be contiguous and of the shape the
/// contract gives it; `k_pool`/`v_pool` are written in place, so they must not alias any other
/// argument.
pub struct RopePoolArgs {
    /// `[T, Hq, D]`, float `F`.
    pub q: TensorArg,
    /// `[T, Hkv, D]`, float `F`.
    pub k: TensorArg,
    /// `[T, Hkv, D]`, float `F`.
    pub v: TensorArg,
    /// `[T]`, integer `I`.
    pub positions: TensorArg,
    /// `[T]`, integer `I`.
    pub slots: TensorArg,
    /// `[T, Hq, D]`, float `F`, written.
    pub q_out: TensorArg,
    /// `[T, Hkv, D]`, float `F`, written.
    pub k_out: TensorArg,
    /// `[P, Hkv, D]`, float `F`, rows of valid slots written.
    pub k_pool: TensorArg,
    /// `[P, Hkv, D]`, float `F`, rows of valid slots written.
    pub v_pool: TensorArg,
}

/// Enqueues the fused kernel on `client`. `float` and `int` are the element types of the float
/// tensors and of `positions`/`slots`. Does nothing for an empty batch.
///
/// Benchmark A/B switches (unset in normal use): `ROPE_POOL_NAIVE_ANGLES` swaps the exact angle
/// for the naive f32 one; `ROPE_POOL_HEAD_ORDER=contiguous` gives each unit a run of consecutive
/// heads instead of every `groups`-th head; `ROPE_POOL_CUBE_DIM` sets the units per cube;
/// `ROPE_POOL_VECTOR` and `ROPE_POOL_HEADS_PER_UNIT` override the vector width and the group.
///
/// # Safety
/// The tensors must be live, contiguous, of the shapes `geometry` describes, and the pools must
/// not alias an input: the kernel is launched unchecked. Slots are bounds-checked by the kernel
/// itself (a slot `< 0` or `>= pool_size` writes nothing).
pub unsafe fn launch_rope_pool(
    client: &Client,
    float: ElemType,
    int: ElemType,
    geometry: RopePoolGeometry,
    rope_base: f64,
    args: RopePoolArgs,
) {
    let RopePoolGeometry {
        num_tokens,
        head_dim,
        ..
    } = geometry;
    if num_tokens == 0 || head_dim < 2 {
        return;
    }
    let vector = vector_size(client, float.size(), head_dim);
    let half = head_dim / 2;
    let table = turn_table(head_dim, rope_base);
    let table = client.create_from_slice(f32::as_bytes(&table));
    let turns = unsafe { TensorArg::from_raw_parts(table, [1].into(), [3 * half].into()) };

    let heads = geometry.num_qo_heads + geometry.num_kv_heads;
    let group = heads_per_unit(geometry, half / vector);
    let units = num_tokens * heads.div_ceil(group) * (half / vector);
    let cube_dim = match tuning_knob("ROPE_POOL_CUBE_DIM") {
        Some(n) => CubeDim::new_1d(
            n.clamp(1, client.properties().hardware.max_units_per_cube as usize) as u32,
        ),
        None => CubeDim::new(client, units),
    };
    let cube_count = calculate_cube_count_elemwise(client, units, cube_dim);
    unsafe {
        rope_pool_kernel::launch_unchecked(
            client,
            cube_count,
            cube_dim,
            AddressType::from_len(geometry.max_len()),
            vector,
            args.q,
            args.k,
            args.v,
            args.positions,
            args.slots,
            turns,
            args.q_out,
            args.k_out,
            args.k_pool,
            args.v_pool,
            group as u32,
            strided_heads(),
            std::env::var_os("ROPE_POOL_NAIVE_ANGLES").is_none(),
            [float, int],
        );
    }
}
