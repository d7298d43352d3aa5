//! The fused kernel: NeoX rotation of q and k, plus the scatter of rotated k and raw v into
//! the token-slot KV pool, in one launch.
//!
//! One unit owns one token, a group of its heads and `N` consecutive rotation pairs
//! (frequencies `j*N .. j*N+N`). It forms the `N` angles and their cos/sin once, then walks the
//! q heads and kv heads of its group with them, so the trigonometry is paid once per (token,
//! frequency, group). A group is every `groups`-th head of the token: at each step the units of
//! one token read neighbouring heads, and adjacent units own adjacent frequencies of the same
//! head row, so the loads and stores of a warp are contiguous runs of memory.
//!
//! Variants of the op (interleaved GPT-J pairs, a partial rotary dimension, scaled frequencies,
//! a paged pool layout) plug in at the three seams below as comptime options of this kernel:
//! [`pair_offsets()`] (which two elements form a pair), [`rope_angle()`] (the angle of a pair, exact
//! at long context: see [`crate::angle`]) and
//! [`pool_row()`] (where a token's row lands in the pool).

use crate::angle::{naive_angle, rope_angle};
use cubecl::prelude::*;

/// Offsets, in vectors from the start of a head row, of the two halves of pair vector `j`
/// (NeoX layout: element `i` pairs with element `i + head_dim / 2`).
#[cube]
pub fn pair_offsets(j: usize, half_vectors: usize) -> (usize, usize) {
    (j, j + half_vectors)
}

/// Row index in the pool of a token whose slot is `slot`, or `pool_size` (no row) when the
/// slot is negative or past the pool: such a token is never written.
#[cube]
pub fn pool_row<I: Int>(slot: I, pool_size: usize) -> usize {
    let mut row = pool_size;
    if slot >= I::new(0) {
        let candidate = usize::cast_from(slot);
        if candidate < pool_size {
            row = candidate;
        }
    }
    row
}

/// Rotates the pair `(x1, x2)` by the angle whose cosine and sine are `cos`, `sin`, in f32,
/// and rounds the result to the storage type once.
#[cube]
fn rotate<F: Float, N: Size>(
    x1: Vector<F, N>,
    x2: Vector<F, N>,
    cos: Vector<f32, N>,
    sin: Vector<f32, N>,
) -> (Vector<F, N>, Vector<F, N>) {
    let a = Vector::<f32, N>::cast_from(x1);
    let b = Vector::<f32, N>::cast_from(x2);
    (
        Vector::cast_from(a * cos - b * sin),
        Vector::cast_from(a * sin + b * cos),
    )
}

/// The fused op. All tensors are contiguous; shapes are those of the contract:
/// `q [T, Hq, D]`, `k, v [T, Hkv, D]`, `positions, slots [T]`, `turns [3 * D/2]` (f32,
/// [`crate::angle::turn_table`]), `k_pool, v_pool [P, Hkv, D]` (updated in place),
/// `q_out [T, Hq, D]`, `k_out [T, Hkv, D]`. `N` must divide `D / 2`.
///
/// A token's `Hq + Hkv` heads are split into groups of `heads_per_unit`; one unit handles one
/// (token, head group, pair vector). Larger groups pay the trigonometry fewer times; smaller
/// ones put more units in flight. With `strided_heads` (what launches use) a group is every
/// `groups`-th head, so the units of one token read neighbouring heads at each step; without, a
/// run of `heads_per_unit` consecutive heads. `exact_angles = false` forms the angle the naive
/// way (`position * inv_freq` in f32), for measuring what the exact angle costs; launches use the
/// exact one.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn rope_pool_kernel<F: Float, I: Int, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k: &Tensor<Vector<F, N>>,
    v: &Tensor<Vector<F, N>>,
    positions: &Tensor<I>,
    slots: &Tensor<I>,
    turns: &Tensor<Vector<f32, N>>,
    q_out: &mut Tensor<Vector<F, N>>,
    k_out: &mut Tensor<Vector<F, N>>,
    k_pool: &mut Tensor<Vector<F, N>>,
    v_pool: &mut Tensor<Vector<F, N>>,
    heads_per_unit: u32,
    #[comptime] strided_heads: bool,
    #[comptime] exact_angles: bool,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let num_kv_heads = k.shape(1);
    let pool_size = k_pool.shape(0);
    let row_vectors = q.shape(2) / q.vector_size();
    let half_vectors = row_vectors / 2;
    let group_size = heads_per_unit as usize;
    let num_heads = num_qo_heads + num_kv_heads;
    let groups = num_heads.div_ceil(group_size);

    let unit_row = ABSOLUTE_POS / half_vectors;
    let j = ABSOLUTE_POS % half_vectors;
    let token = unit_row / groups;
    let group = unit_row % groups;
    if token >= num_tokens {
        terminate!();
    }
    // This unit's heads: `start, start + step, ...` below `stop`; q heads first, then kv heads.
    let (start, step, stop) = if strided_heads {
        (group, groups, num_heads)
    } else {
        let first = group * group_size;
        (first, 1, num_heads.min(first + group_size))
    };

    let (f1, f2, f3) = (
        turns[j],
        turns[half_vectors + j],
        turns[2 * half_vectors + j],
    );
    // The token's position and slot are loaded together, up front: neither waits on the other
    // or on the heads.
    let position = i32::cast_from(positions[token]);
    let pool = pool_row::<I>(slots[token], pool_size);
    let angle = if exact_angles {
        rope_angle::<N>(position, f1, f2, f3)
    } else {
        naive_angle::<N>(position, f1, f2, f3)
    };
    let cos = angle.cos();
    let sin = angle.sin();
    let (lo, hi) = pair_offsets(j, half_vectors);

    let q_base = token * num_qo_heads * row_vectors;
    let q_stop = num_qo_heads.min(stop);
    let mut head = start;
    while head < q_stop {
        let row = q_base + head * row_vectors;
        let (a, b) = rotate::<F, N>(q[row + lo], q[row + hi], cos, sin);
        q_out[row + lo] = a;
        q_out[row + hi] = b;
        head += step;
    }

    let write = pool < pool_size;
    let kv_base = token * num_kv_heads * row_vectors;
    let pool_base = pool * num_kv_heads * row_vectors;
    while head < stop {
        let h = head - num_qo_heads;
        let row = kv_base + h * row_vectors;
        // All four loads of the kv head before its first store: the compiler may not move a
        // load above a store to a buffer it cannot prove distinct, so a v load issued after the
        // k stores would add a memory round trip to this unit's chain. (v is read even when the
        // slot is skipped: one unused row read for a padding token, never a write.)
        let (k1, k2) = (k[row + lo], k[row + hi]);
        let (v1, v2) = (v[row + lo], v[row + hi]);
        let (a, b) = rotate::<F, N>(k1, k2, cos, sin);
        k_out[row + lo] = a;
        k_out[row + hi] = b;
        if write {
            let dst = pool_base + h * row_vectors;
            k_pool[dst + lo] = a;
            k_pool[dst + hi] = b;
            v_pool[dst + lo] = v1;
            v_pool[dst + hi] = v2;
        }
        head += step;
    }
}
