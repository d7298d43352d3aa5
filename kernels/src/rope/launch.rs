//! Host side of the fused kernel: the frequency table's device copy, the vector width, the
//! room's launch knobs ([`RopeTuning`]) and the launch.

use super::kernel::{APPEND_MAX_UNITS, append_max, rope_pool_kernel};
use super::norm::rope_pool_norm_kernel;
use super::table::{RopeTable, RopeVariant};
use crate::common::fp8::FP8_VECTOR;
use crate::common::launch::widest_vector;
use cubecl::client::Client;
use cubecl::device::DeviceId;
use cubecl::ir::{AddressType, ElemType, UIntKind};
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::{CubeDim, calculate_cube_count_elemwise};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The fused kernel's launch knobs: how work is mapped to units. `RopeTuning::default()` is the
/// normal launch (what the H200 sweeps of `benches/NOTES.md` chose); every other setting exists
/// for A/B benchmark runs and gives the same results bit for bit. Benchmark builds (cargo
/// feature `tuning`) read the fields from `ROPE_POOL_*` environment variables
/// (`RopeTuning::from_env`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RopeTuning {
    /// Heads per unit instead of the rule of [`heads_per_unit`] (`ROPE_POOL_HEADS_PER_UNIT`;
    /// clamped to 1 ..= the token's heads).
    pub heads_per_unit: Option<usize>,
    /// Units per cube instead of CubeCL's element-wise default (`ROPE_POOL_CUBE_DIM`; clamped to
    /// 1 ..= the device's most units per cube).
    pub cube_dim: Option<usize>,
    /// Cap on the vector width, in elements (`ROPE_POOL_VECTOR`).
    pub max_vector: Option<usize>,
}

#[cfg(feature = "tuning")]
impl RopeTuning {
    /// The settings of the `ROPE_POOL_*` environment variables, read once per process (all unset:
    /// the defaults). Only in builds with the `tuning` feature: a server never changes its
    /// launch through its environment.
    pub fn from_env() -> Self {
        use crate::common::tuning::number;
        static TUNING: OnceLock<RopeTuning> = OnceLock::new();
        *TUNING.get_or_init(|| RopeTuning {
            heads_per_unit: number("ROPE_POOL_HEADS_PER_UNIT"),
            cube_dim: number("ROPE_POOL_CUBE_DIM"),
            max_vector: number("ROPE_POOL_VECTOR"),
        })
    }
}

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
    /// Elements between consecutive tokens of q, k and v: `H * head_dim` when dense, more for
    /// views of one fused QKV projection (heads stay contiguous within a token).
    pub token_strides: [usize; 3],
}

impl RopePoolGeometry {
    /// The geometry of the (validated) shapes `q [T, Hq, D]`, `k [T, Hkv, D]`, `k_pool [P, .., ..]`,
    /// with dense q, k and v.
    pub fn of(q: &[usize], k: &[usize], k_pool: &[usize]) -> Self {
        Self {
            num_tokens: q[0],
            num_qo_heads: q[1],
            num_kv_heads: k[1],
            head_dim: q[2],
            pool_size: k_pool[0],
            token_strides: [q[1] * q[2], k[1] * k[2], k[1] * k[2]],
        }
    }

    /// Whether q, k or v has a token stride other than its dense one (the kernel then reads
    /// the strides; dense calls compile without).
    pub(crate) fn strided(&self) -> bool {
        let (q_row, kv_row) = (
            self.num_qo_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        );
        self.token_strides != [q_row, kv_row, kv_row]
    }

    /// Largest element count any tensor of the call spans, for the kernel's address width.
    pub(crate) fn max_len(&self) -> usize {
        let rows = self.num_tokens.max(self.pool_size);
        let dense = rows * self.num_qo_heads.max(self.num_kv_heads) * self.head_dim;
        let widest = self.token_strides.into_iter().max().unwrap_or(0);
        dense.max(self.num_tokens * widest)
    }
}

/// The widest vector the device loads efficiently for `elem_size`-byte elements that also
/// divides `rotary_dim / 2` (so a unit's vector never straddles the two halves of a row, nor
/// splits a GPT-J pair), `head_dim` (so the pass-through tail is whole vectors) and every token
/// stride of `geometry` (so strided q/k/v rows start on a vector), at most `max` elements.
pub(crate) fn vector_size(
    client: &Client,
    elem_size: usize,
    geometry: RopePoolGeometry,
    rotary_dim: usize,
    max: usize,
) -> usize {
    let half = rotary_dim / 2;
    let divides = |n: usize| {
        half.is_multiple_of(n)
            && geometry.head_dim.is_multiple_of(n)
            && geometry.token_strides.iter().all(|s| s.is_multiple_of(n))
    };
    widest_vector(client, elem_size, |n| n <= max && divides(n))
}

/// Units the launch aims to keep in flight: enough to fill a large GPU several times over.
const TARGET_UNITS: usize = 1 << 18;

/// The most heads one unit walks: 4 (strided groups of 4 were within 3% of the best of 15
/// settings on 11 of 12 H200 rows), or 2 for 4-byte elements when a token has at least 16 heads
/// (f32 llama3-8b and qwen2.5-7b: 0.2–2% faster; with fewer heads, 2-head groups leave a lone
/// remainder and were 13% slower on 9 heads). See benches/NOTES.md, 'Head groups per unit'.
fn max_heads_per_unit(elem_size: usize, heads: usize) -> usize {
    if elem_size >= 4 && heads >= 16 { 2 } else { 4 }
}

/// How many heads one unit walks: enough that the batch puts about 2^18 units in
/// flight (one head per unit for small batches), at most 4 — or 2 for `elem_size >= 4` when a
/// token has at least 16 heads — so each unit's cos/sin serve several heads.
pub fn heads_per_unit(geometry: RopePoolGeometry, half_vectors: usize, elem_size: usize) -> usize {
    let heads = (geometry.num_qo_heads + geometry.num_kv_heads).max(1);
    let all_split = geometry.num_tokens * heads * half_vectors;
    all_split
        .div_ceil(TARGET_UNITS)
        .clamp(1, max_heads_per_unit(elem_size, heads).min(heads))
}

/// The device copy of `table` on `client`'s device: uploaded on first use and kept for the life
/// of the process (`5 * rotary_dim / 2` f32 for plain RoPE, 1.25 KiB at head_dim 128), so a
/// call uploads nothing. At most [`MAX_CACHED_TABLES`] are kept; past that the cache starts
/// afresh.
fn table_on_device(client: &Client, table: &RopeTable) -> Handle {
    type Key = (DeviceId, TypeId, u64);
    static TABLES: OnceLock<Mutex<HashMap<Key, Handle>>> = OnceLock::new();
    let service = client.service_id();
    let key = (service.device, service.service, table.id);
    let mut tables = TABLES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if tables.len() >= MAX_CACHED_TABLES && !tables.contains_key(&key) {
        tables.clear();
    }
    tables
        .entry(key)
        .or_insert_with(|| client.create_from_slice(f32::as_bytes(&table.values)))
        .clone()
}

/// How many frequency tables stay uploaded.
const MAX_CACHED_TABLES: usize = 64;

/// The device tensors of one call, of the shapes the contract gives them. Every tensor is
/// contiguous, except that q, k and v may have the token strides of the geometry (heads
/// contiguous within a token); `k_pool`/`v_pool` are written in place, so they must not alias any
/// other argument.
pub struct RopePoolArgs {
    /// `[T, Hq, D]`, float `F`.
    pub q: TensorArg,
    /// `[T, Hkv, D]`, float `F`.
    pub k: TensorArg,
    /// `[T, Hkv, D]`, float `F`.
    pub v: TensorArg,
    /// `[T]` (`[3, T]` for M-RoPE), integer `I`; for LongRoPE one more element after those, the
    /// call's largest position.
    pub positions: TensorArg,
    /// `[T]`, integer `I`.
    pub slots: TensorArg,
    /// `[T, Hq, D]`, float `F`, written.
    pub q_out: TensorArg,
    /// `[T, Hkv, D]`, float `F`, written when `write_k_out` (else any live buffer of `F`, never
    /// touched).
    pub k_out: TensorArg,
    /// `[P, Hkv, D]`, float `F` (fp8 pools: `[P, Hkv, D / 4]` u32 words, see `fp8_scales`),
    /// rows of valid slots written.
    pub k_pool: TensorArg,
    /// As `k_pool`.
    pub v_pool: TensorArg,
    /// Whether the rotated keys go to `k_out` too (else to the pool rows only).
    pub write_k_out: bool,
    /// The per-head RMSNorm of q and k before the rotation, when the call has one.
    pub qk_norm: Option<QkNormArgs>,
    /// fp8 e4m3 pools ([`crate::common::fp8`]: four codes to a u32 word) with these `(k_scale, v_scale)`:
    /// a stored code is e4m3(x · (1 / scale)). `None`: pools of the float type `F`.
    pub fp8_scales: Option<(f32, f32)>,
}

/// The q/k norm of a call (the fused kernel's norm variant, `rope/norm.rs`): weights `[D]`, float `F`, dense; `D` at
/// most [`MAX_NORM_HEAD_DIM`].
pub struct QkNormArgs {
    /// q's norm weight.
    pub q_weight: TensorArg,
    /// k's norm weight.
    pub k_weight: TensorArg,
    /// Added to the mean of squares before the reciprocal square root.
    pub eps: f32,
}

/// The largest head the q/k norm kernel takes: a (token, head group)'s units must fit one cube
/// row of at most 256 units (the smallest per-cube limit a WebGPU device may have) at vector
/// width 1.
pub const MAX_NORM_HEAD_DIM: usize = 2 * NORM_CUBE_UNITS;

/// Units of a q/k norm cube (the smallest per-cube limit a WebGPU device may have).
const NORM_CUBE_UNITS: usize = 256;

/// Enqueues the fused kernel of `rope`'s variant on `client`. `float` and `int` are the element
/// types of the float tensors and of `positions`/`slots`. `tuning` is [`RopeTuning::default`]
/// in normal use (benchmark builds override it). Does nothing for an empty batch.
///
/// # Safety
/// The tensors must be live, of the shapes and token strides `geometry` describes (dense
/// otherwise, see [`RopePoolArgs`]), and the pools must not alias an input: the kernel is
/// launched unchecked. With fp8 pools, `head_dim` and `rotary_dim / 2` are multiples of 4 (the
/// call is skipped otherwise) and so is every token stride. Slots are bounds-checked by the kernel
/// itself (a slot `< 0` or `>= pool_size` writes nothing).
pub unsafe fn launch_rope_pool(
    client: &Client,
    float: ElemType,
    int: ElemType,
    geometry: RopePoolGeometry,
    rope: &RopeTable,
    args: RopePoolArgs,
    tuning: &RopeTuning,
) {
    let RopePoolGeometry {
        num_tokens,
        head_dim,
        ..
    } = geometry;
    let rotary_dim = rope.rotary_dim;
    if num_tokens == 0 || rotary_dim < 2 || rotary_dim > head_dim {
        return;
    }
    // fp8 words are vectors of four: shapes that do not hold them are never launched.
    let whole = |n: usize| n.is_multiple_of(FP8_VECTOR);
    let fp8_fits = whole(head_dim)
        && whole(rotary_dim / 2)
        && geometry.token_strides.iter().all(|&s| whole(s));
    if args.fp8_scales.is_some() && !fp8_fits {
        return;
    }
    let max_vector = tuning.max_vector.unwrap_or(usize::MAX);
    // fp8 pools: a unit's vector is one word of four codes (the call's shapes allow four).
    let vector = match args.fp8_scales {
        Some(_) => FP8_VECTOR,
        None => vector_size(client, float.size(), geometry, rotary_dim, max_vector),
    };
    // The pools' element type and vector width, and the codes' `1 / scale`.
    let (pool_elem, pool_vector, (k_inv, v_inv), fp8) = match args.fp8_scales {
        Some((k, v)) => (ElemType::UInt(UIntKind::U32), 1, (1.0 / k, 1.0 / v), true),
        None => (float, vector, (1.0, 1.0), false),
    };
    let half = rotary_dim / 2;
    let handle = table_on_device(client, rope);
    let table_len = rope.values.len();
    let table = unsafe { TensorArg::from_raw_parts(handle, [1].into(), [table_len].into()) };

    let heads = geometry.num_qo_heads + geometry.num_kv_heads;
    let group = match tuning.heads_per_unit {
        Some(forced) => forced.clamp(1, heads.max(1)),
        None => heads_per_unit(geometry, half / vector, float.size()),
    };
    let unit_vectors = half / vector + ((head_dim - rotary_dim) / vector).div_ceil(2);
    let units = num_tokens * heads.div_ceil(group) * unit_vectors;
    let cube_dim = match tuning.cube_dim {
        Some(n) => CubeDim::new_1d(
            n.clamp(1, client.properties().hardware.max_units_per_cube as usize) as u32,
        ),
        None => CubeDim::new(client, units),
    };
    // The tail is whatever of the head the table does not rotate.
    let variant = RopeVariant {
        partial: rotary_dim < head_dim,
        ..rope.variant
    };
    let address = AddressType::from_len(geometry.max_len());
    let scalars = (
        group as u32,
        (rotary_dim / vector) as u32,
        rope.attention_factor,
        rope.long_from,
    );
    if let Some(norm) = args.qk_norm {
        let row_units = units / (num_tokens * heads.div_ceil(group));
        let max_units = client.properties().hardware.max_units_per_cube as usize;
        let rows = (NORM_CUBE_UNITS.min(max_units) / row_units).max(1);
        let cube_dim = CubeDim::new_2d(row_units as u32, rows as u32);
        let cubes = (num_tokens * heads.div_ceil(group)).div_ceil(rows);
        let cube_count = calculate_cube_count_elemwise(client, cubes * row_units * rows, cube_dim);
        unsafe {
            rope_pool_norm_kernel::launch_unchecked(
                client,
                cube_count,
                cube_dim,
                address,
                vector,
                pool_vector,
                args.q,
                args.k,
                args.v,
                args.positions,
                args.slots,
                table,
                norm.q_weight,
                norm.k_weight,
                args.q_out,
                args.k_out,
                args.k_pool,
                args.v_pool,
                scalars.0,
                scalars.1,
                scalars.2,
                scalars.3,
                k_inv,
                v_inv,
                norm.eps,
                variant,
                args.write_k_out,
                geometry.strided(),
                fp8,
                row_units,
                rows,
                [float, int, pool_elem],
            );
        }
        return;
    }
    let cube_count = calculate_cube_count_elemwise(client, units, cube_dim);
    unsafe {
        rope_pool_kernel::launch_unchecked(
            client,
            cube_count,
            cube_dim,
            address,
            vector,
            pool_vector,
            args.q,
            args.k,
            args.v,
            args.positions,
            args.slots,
            table,
            args.q_out,
            args.k_out,
            args.k_pool,
            args.v_pool,
            scalars.0,
            scalars.1,
            scalars.2,
            scalars.3,
            k_inv,
            v_inv,
            variant,
            args.write_k_out,
            geometry.strided(),
            fp8,
            [float, int, pool_elem],
        );
    }
}

/// Enqueues the copy of `positions` (`len` elements of `int`) into `out` (`len + 1` elements)
/// with their maximum appended: the positions of a LongRoPE launch ([`RopePoolArgs::positions`]).
/// Does nothing for `len == 0`.
///
/// # Safety
/// `positions` and `out` must be live, contiguous, of `len` and `len + 1` elements, distinct.
pub unsafe fn launch_append_max(
    client: &Client,
    int: ElemType,
    len: usize,
    positions: TensorArg,
    out: TensorArg,
) {
    if len == 0 {
        return;
    }
    unsafe {
        append_max::launch_unchecked(
            client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(APPEND_MAX_UNITS as u32),
            AddressType::from_len(len + 1),
            positions,
            out,
            int,
        );
    }
}
