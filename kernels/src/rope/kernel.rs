//! The fused kernel: rotation of q and k, plus the scatter of rotated k and raw v into the
//! token-slot KV pool, in one launch.
//!
//! One unit owns one token, a group of its heads and one *pair vector* `j`: `N` consecutive
//! frequencies `j*N .. j*N+N` and the two vectors of each head row that they rotate. It forms the
//! `N` angles and their cos/sin once, then walks the q heads and kv heads of its group with them,
//! so the trigonometry is paid once per (token, frequency, group). A group is every `groups`-th
//! head of the token: at each step the units of one token read neighbouring heads, and adjacent
//! units own adjacent vectors of the same head row, so the loads and stores of a warp are
//! contiguous runs of memory.
//!
//! The RoPE variants ([`RopeVariant`], comptime) plug in at the kernel's seams:
//! - [`pair_offsets()`]: which two vectors a unit rotates — NeoX halves `(j, j + R/2N)`, or
//!   GPT-J's neighbours `(2j, 2j + 1)` whose lanes hold interleaved pairs (`rotate_lanes`);
//! - the pass-through tail of a partial rotary head: units past the pair vectors copy two
//!   vectors of the tail each;
//! - the position of a frequency: one per token, or M-RoPE's row per frequency (masks in the
//!   table, [`lane_positions()`]);
//! - the frequency set: LongRoPE's short or long half of the table, chosen by the call's largest
//!   position (stored after the positions);
//! - [`rope_angle()`]: the exact angle (see [`super::angle`]), scaled by the attention factor;
//! - [`pool_row()`]: where a token's row lands in the pool.

use super::angle::{TURN_PARTS, is_big, lane_position_parts, position_parts, rope_angle};
use super::table::RopeVariant;
use crate::common::fp8::store_pool;
use cubecl::prelude::*;

/// Offsets, in vectors from the start of a head row, of the two vectors pair vector `j` rotates:
/// NeoX pairs element `i` with `i + rotary_dim / 2`; GPT-J pairs `2i` with `2i + 1`, so its two
/// vectors are neighbours and hold `N / 2` pairs each.
#[cube]
pub(crate) fn pair_offsets(
    j: usize,
    half_vectors: usize,
    #[comptime] interleaved: bool,
) -> (usize, usize) {
    if interleaved {
        (2 * j, 2 * j + 1)
    } else {
        (j, j + half_vectors)
    }
}

/// Row index in the pool of a token whose slot is `slot`, or `pool_size` (no row) when the
/// slot is negative or past the pool: such a token is never written. Compared in the slots' own
/// integer type, so a wide slot past the pool is never truncated into a row.
#[cube]
#[allow(clippy::collapsible_if)] // two plain branches in the kernel, no short-circuit needed
pub(crate) fn pool_row<I: Int>(slot: I, pool_size: usize) -> usize {
    let mut row = pool_size;
    if slot >= I::new(0) {
        if slot < I::cast_from(pool_size) {
            row = usize::cast_from(slot);
        }
    }
    row
}

/// Rotates the NeoX pairs `(a[l], b[l])` by the angles whose cosines and sines are `cos`, `sin`,
/// in f32 (the store rounds to the storage type once).
#[cube]
fn rotate<N: Size>(
    a: Vector<f32, N>,
    b: Vector<f32, N>,
    cos: Vector<f32, N>,
    sin: Vector<f32, N>,
) -> (Vector<f32, N>, Vector<f32, N>) {
    (a * cos - b * sin, a * sin + b * cos)
}

/// The cos/sin a unit's two vectors are rotated with, formed once per unit: NeoX uses the `N`
/// angles as they are for both vectors; GPT-J holds pair `l` in lanes `2l, 2l + 1` of the first
/// vector (angle lane `l`) and pair `N/2 + l` in those of the second, so each vector gets its
/// angles' cosines doubled (`[c0, c0, c1, c1, …]`) and sines doubled with the even lane negated
/// (`[-s0, s0, -s1, s1, …]`), and [`rotate_lanes`] turns it with one lane swap. With `N = 1`
/// the two vectors are one pair and NeoX's form serves.
#[cube]
#[allow(clippy::type_complexity)]
fn lane_angles<N: Size>(
    cos: Vector<f32, N>,
    sin: Vector<f32, N>,
    #[comptime] interleaved: bool,
) -> (
    Vector<f32, N>,
    Vector<f32, N>,
    Vector<f32, N>,
    Vector<f32, N>,
) {
    let n = N::value();
    let (mut c1, mut s1, mut c2, mut s2) = (cos, sin, cos, sin);
    if comptime!(interleaved && n > 1) {
        #[unroll]
        for l in 0..comptime!(n / 2) {
            let (even, odd, second) = comptime!((2 * l, 2 * l + 1, n / 2 + l));
            let (c, s) = (cos.extract(l), sin.extract(l));
            c1.insert(even, c);
            c1.insert(odd, c);
            s1.insert(even, -s);
            s1.insert(odd, s);
            let (c, s) = (cos.extract(second), sin.extract(second));
            c2.insert(even, c);
            c2.insert(odd, c);
            s2.insert(even, -s);
            s2.insert(odd, s);
        }
    }
    (c1, s1, c2, s2)
}

/// Rotates the GPT-J pairs in the lanes of `a` (`2l`, `2l + 1`) with [`lane_angles`]' `cos`,
/// `sin`: `a * cos + swap(a) * sin` in f32.
#[cube]
fn rotate_lanes<N: Size>(
    a: Vector<f32, N>,
    cos: Vector<f32, N>,
    sin: Vector<f32, N>,
) -> Vector<f32, N> {
    let n = N::value();
    let mut swapped = a;
    #[unroll]
    for l in 0..comptime!(n / 2) {
        let (even, odd) = comptime!((2 * l, 2 * l + 1));
        swapped.insert(even, a.extract(odd));
        swapped.insert(odd, a.extract(even));
    }
    a * cos + swapped * sin
}

/// The position of each of a unit's `N` frequencies: M-RoPE picks row 0, 1 or 2 of `positions`
/// (`[3, T]`) per frequency with the 0/1 masks `m0, m1, m2` (exactly one is 1), so
/// `m0*p0 + m1*p1 + m2*p2` is exact.
#[cube]
pub(crate) fn lane_positions<N: Size>(
    rows: (i32, i32, i32),
    m0: Vector<f32, N>,
    m1: Vector<f32, N>,
    m2: Vector<f32, N>,
) -> Vector<i32, N> {
    let (p0, p1, p2) = rows;
    Vector::<i32, N>::cast_from(m0) * Vector::new(p0)
        + Vector::<i32, N>::cast_from(m1) * Vector::new(p1)
        + Vector::<i32, N>::cast_from(m2) * Vector::new(p2)
}

/// The fused op. Shapes are those of the contract; every tensor is contiguous except that, when
/// `strided`, q, k and v may have any token stride (a multiple of `N`) with their heads
/// contiguous:
/// `q [T, Hq, D]`, `k, v [T, Hkv, D]`, `slots [T]`, `positions [T]` (`[3, T]` for M-RoPE, plus
/// one trailing element, the call's largest position, for LongRoPE), `table` (f32,
/// [`RopeTable`](crate::rope::RopeTable)), `k_pool, v_pool [P, Hkv, D]` (updated in place), `q_out [T, Hq, D]`,
/// `k_out [T, Hkv, D]` (written only when `write_k_out`). `rotary_vectors = rotary_dim / N`; `N` divides `rotary_dim / 2` and
/// `D`.
///
/// A token's `Hq + Hkv` heads are split into groups of `heads_per_unit`; one unit handles one
/// (token, head group, pair vector), and with a partial rotary dimension one more unit per two
/// vectors of the pass-through tail. Larger groups pay the trigonometry fewer times; smaller ones
/// put more units in flight.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn rope_pool_kernel<F: Float, I: Int, P: Numeric, N: Size, M: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    positions: &Tensor<I>,
    slots: &Tensor<I>,
    table: &Tensor<Vector<f32, N>>,
    q_out: &mut Tensor<Vector<F, N>>,
    k_out: &mut Tensor<Vector<F, N>>,
    k_pool: &mut Tensor<Vector<P, M>>,
    v_pool: &mut Tensor<Vector<P, M>>,
    heads_per_unit: u32,
    rotary_vectors: u32,
    attention_factor: f32,
    long_from: i32,
    k_inv_scale: f32,
    v_inv_scale: f32,
    #[comptime] variant: RopeVariant,
    #[comptime] write_k_out: bool,
    #[comptime] strided: bool,
    #[comptime] fp8: bool,
    #[define(F, I, P)] _dtypes: [ElemType; 3],
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let num_kv_heads = k.shape(1);
    let pool_size = k_pool.shape(0);
    let row_vectors = q.shape(2) / q.vector_size();
    let rotary_vectors = rotary_vectors as usize;
    let unit_vectors = units_per_row(row_vectors, rotary_vectors, variant.partial);
    let groups = (num_qo_heads + num_kv_heads).div_ceil(heads_per_unit as usize);
    let num_heads = num_qo_heads + num_kv_heads;

    let unit_row = ABSOLUTE_POS / unit_vectors;
    let j = ABSOLUTE_POS % unit_vectors;
    let token = unit_row / groups;
    let group = unit_row % groups;
    if token >= num_tokens {
        terminate!();
    }

    let (lo, hi, pass, pool, angles) = unit_setup::<I, N>(
        positions,
        slots,
        table,
        token,
        j,
        (num_tokens, pool_size, rotary_vectors, row_vectors),
        attention_factor,
        long_from,
        variant,
    );

    // Outputs are dense; q, k and v may have any token stride (views of one fused QKV
    // projection): their heads are contiguous within a token.
    // (`strided` is comptime: dense calls index q, k and v as the outputs, with no stride read.)
    let vector = q.vector_size();
    let q_base = token * num_qo_heads * row_vectors;
    let mut q_in = q_base;
    if strided {
        q_in = token * (q.stride(0) / vector);
    }
    let mut head = group;
    while head < num_qo_heads {
        let row = q_base + head * row_vectors;
        let row_in = q_in + head * row_vectors;
        let (a, b) = turn::<F, N>(q[row_in + lo], q[row_in + hi], angles, pass, variant);
        q_out[row + lo] = Vector::cast_from(a);
        q_out[row + hi] = Vector::cast_from(b);
        head += groups;
    }

    let write = pool < pool_size;
    let kv_base = token * num_kv_heads * row_vectors;
    let mut k_in = kv_base;
    let mut v_in = kv_base;
    if strided {
        k_in = token * (k.stride(0) / vector);
        v_in = token * (v.stride(0) / vector);
    }
    let pool_base = pool * num_kv_heads * row_vectors;
    while head < num_heads {
        let h = head - num_qo_heads;
        let row = kv_base + h * row_vectors;
        let (k_row, v_row) = (k_in + h * row_vectors, v_in + h * row_vectors);
        // All four loads of the kv head before its first store: the compiler may not move a
        // load above a store to a buffer it cannot prove distinct, so a v load issued after the
        // k stores would add a memory round trip to this unit's chain. (v is read even when the
        // slot is skipped: one unused row read for a padding token, never a write.)
        let (k1, k2) = (k[k_row + lo], k[k_row + hi]);
        let (v1, v2) = (v[v_row + lo], v[v_row + hi]);
        let (a, b) = turn::<F, N>(k1, k2, angles, pass, variant);
        if write_k_out {
            k_out[row + lo] = Vector::cast_from(a);
            k_out[row + hi] = Vector::cast_from(b);
        }
        if write {
            let dst = pool_base + h * row_vectors;
            let (v1, v2) = (Vector::cast_from(v1), Vector::cast_from(v2));
            write_kv::<P, N, M>(
                k_pool,
                v_pool,
                dst,
                (lo, hi),
                (a, b, v1, v2),
                (k_inv_scale, v_inv_scale),
                fp8,
            );
        }
        head += groups;
    }
}

/// The part of a unit's work that does not depend on its heads: its two vectors `lo`, `hi`
/// (offsets in a head row), whether they are pass-through tail vectors, the pool row of its
/// token ([`pool_row()`]), and the cos/sin of its angles ([`lane_angles`]' four vectors).
/// `sizes` is `(num_tokens, pool_size, rotary_vectors, row_vectors)`.
#[cube]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn unit_setup<I: Int, N: Size>(
    positions: &Tensor<I>,
    slots: &Tensor<I>,
    table: &Tensor<Vector<f32, N>>,
    token: usize,
    j: usize,
    sizes: (usize, usize, usize, usize),
    attention_factor: f32,
    long_from: i32,
    #[comptime] variant: RopeVariant,
) -> (
    usize,
    usize,
    bool,
    usize,
    (
        Vector<f32, N>,
        Vector<f32, N>,
        Vector<f32, N>,
        Vector<f32, N>,
    ),
) {
    let RopeVariant {
        interleaved,
        partial,
        mrope,
        long_short,
    } = variant;
    let (num_tokens, pool_size, rotary_vectors, row_vectors) = sizes;
    let half_vectors = rotary_vectors / 2;
    // The token's positions and slot are loaded together, up front: none waits on the heads.
    let mut parts = position_parts::<N>(i32::cast_from(positions[token]));
    let pool = pool_row::<I>(slots[token], pool_size);
    let mut set = 0;
    if long_short {
        let mut last = num_tokens;
        if mrope {
            last = 3 * num_tokens;
        }
        if i32::cast_from(positions[last]) >= long_from {
            set = TURN_PARTS * half_vectors;
        }
    }
    // A unit of the pass-through tail copies vectors `lo` and `hi = lo + 1` of each head (`hi =
    // lo` for the last one of an odd tail); its angle is computed for the last frequency and
    // discarded.
    let (mut lo, mut hi) = pair_offsets(j, half_vectors, interleaved);
    let mut pass = false;
    let mut f = j;
    if partial {
        pass = j >= half_vectors;
        if pass {
            lo = rotary_vectors + 2 * (j - half_vectors);
            hi = (lo + 1).min(row_vectors - 1);
            f = half_vectors - 1;
        }
    }
    if mrope {
        let mut masks = TURN_PARTS * half_vectors;
        if long_short {
            masks = 2 * TURN_PARTS * half_vectors;
        }
        let r0 = i32::cast_from(positions[token]);
        let r1 = i32::cast_from(positions[num_tokens + token]);
        let r2 = i32::cast_from(positions[2 * num_tokens + token]);
        let big = is_big(r0) || is_big(r1) || is_big(r2);
        let position = lane_positions::<N>(
            (r0, r1, r2),
            table[masks + f],
            table[masks + half_vectors + f],
            table[masks + 2 * half_vectors + f],
        );
        parts = lane_position_parts::<N>(position, big);
    }
    let angle = rope_angle::<N>(parts, table, set + f, half_vectors);
    let cos = angle.cos() * Vector::new(attention_factor);
    let sin = angle.sin() * Vector::new(attention_factor);
    (lo, hi, pass, pool, lane_angles::<N>(cos, sin, interleaved))
}

/// The rotation of the variant — NeoX halves, or GPT-J lane pairs (with [`lane_angles`]) — of a
/// unit's two vectors, in f32, or the vectors unchanged when they are `pass`-through tail
/// vectors. The caller's store rounds once (to the storage type, or to fp8).
#[cube]
#[allow(clippy::type_complexity, clippy::collapsible_if)]
pub(crate) fn turn<F: Float, N: Size>(
    x1: Vector<F, N>,
    x2: Vector<F, N>,
    angles: (
        Vector<f32, N>,
        Vector<f32, N>,
        Vector<f32, N>,
        Vector<f32, N>,
    ),
    pass: bool,
    #[comptime] variant: RopeVariant,
) -> (Vector<f32, N>, Vector<f32, N>) {
    let (c1, s1, c2, s2) = angles;
    let n = N::value();
    let (a, b) = (
        Vector::<f32, N>::cast_from(x1),
        Vector::<f32, N>::cast_from(x2),
    );
    let turned = if comptime!(variant.interleaved && n > 1) {
        (rotate_lanes::<N>(a, c1, s1), rotate_lanes::<N>(b, c2, s2))
    } else {
        rotate::<N>(a, b, c1, s1)
    };
    let (mut a2, mut b2) = turned;
    // `if partial { if pass { .. } }`: the outer condition is comptime, the inner one runtime.
    if variant.partial {
        if pass {
            a2 = a;
            b2 = b;
        }
    }
    (a2, b2)
}

/// Writes a kv head's two vectors of keys (`a`, `b`) and values (`v1`, `v2`) at vectors `lo`, `hi`
/// of the pool row starting at vector `dst`; `inv_scales` are the fp8 pools' `1 / scale` (keys,
/// values; unused for float pools).
#[cube]
#[allow(clippy::type_complexity)]
pub(crate) fn write_kv<P: Numeric, N: Size, M: Size>(
    k_pool: &mut Tensor<Vector<P, M>>,
    v_pool: &mut Tensor<Vector<P, M>>,
    dst: usize,
    at: (usize, usize),
    values: (
        Vector<f32, N>,
        Vector<f32, N>,
        Vector<f32, N>,
        Vector<f32, N>,
    ),
    inv_scales: (f32, f32),
    #[comptime] fp8: bool,
) {
    let (lo, hi) = at;
    let (a, b, v1, v2) = values;
    let (k_inv, v_inv) = inv_scales;
    store_pool::<P, N, M>(k_pool, dst + lo, a, k_inv, fp8);
    store_pool::<P, N, M>(k_pool, dst + hi, b, k_inv, fp8);
    store_pool::<P, N, M>(v_pool, dst + lo, v1, v_inv, fp8);
    store_pool::<P, N, M>(v_pool, dst + hi, v2, v_inv, fp8);
}

/// Units per (token, head group): one per pair vector, plus with a partial rotary dimension one
/// per two vectors of the pass-through tail.
#[cube]
pub(crate) fn units_per_row(
    row_vectors: usize,
    rotary_vectors: usize,
    #[comptime] partial: bool,
) -> usize {
    let mut units = rotary_vectors / 2;
    if partial {
        units += (row_vectors - rotary_vectors).div_ceil(2);
    }
    units
}

/// Units of the [`append_max()`] cube (a power of two: its tree reduction has 8 levels).
pub(crate) const APPEND_MAX_UNITS: usize = 256;
const _: () = assert!(APPEND_MAX_UNITS == 1 << 8);

/// Copies `positions` (`len` elements) to `out` and writes their maximum, as i32 (the kernel
/// reads every position as i32), at `out[len]`: the LongRoPE launch's positions, whose last
/// element picks the frequency set on the device. One cube of [`APPEND_MAX_UNITS`] units: strided
/// copy with a running maximum per unit, then a tree reduction in shared memory.
#[cube(launch_unchecked, address_type = "dynamic")]
pub(crate) fn append_max<I: Int>(
    positions: &Tensor<I>,
    out: &mut Tensor<I>,
    #[define(I)] _dtype: ElemType,
) {
    let len = positions.len();
    let unit = UNIT_POS as usize;
    let mut best = i32::new(i32::MIN as i64);
    for i in range_stepped(unit, len, APPEND_MAX_UNITS) {
        let p = positions[i];
        out[i] = p;
        let p = i32::cast_from(p);
        best = select(p > best, p, best);
    }
    let mut shared = Shared::<[i32]>::new_slice(APPEND_MAX_UNITS);
    shared[unit] = best;
    sync_cube();
    #[unroll]
    for level in 0..8u32 {
        let stride = comptime!(APPEND_MAX_UNITS >> (level + 1));
        if unit < stride {
            let mine = shared[unit];
            let other = shared[unit + stride];
            shared[unit] = select(other > mine, other, mine);
        }
        sync_cube();
    }
    if unit == 0 {
        out[len] = I::cast_from(shared[0]);
    }
}
