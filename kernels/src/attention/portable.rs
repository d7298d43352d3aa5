//! Attention over the token-slot pool: each query row attends over pool rows named by
//! `kv_indices`, with no gather.
//!
//! The portable kernel, for devices without plane operations (the faster
//! [`attention_plane_kernel`](fn@super::plane::attention_plane_kernel) runs where they exist,
//! unless the launch is told otherwise: [`AttentionTuning::portable`](super::AttentionTuning)).
//! One cube owns one (query row, block of `heads` q heads of one kv head, chunk of the row's
//! visible keys), so each key and value row is loaded once for all of the block. The cube walks
//! its keys in tiles of `units` keys, every unit busy in every phase:
//! 1. scores — unit `u` scores key `u` of the tile against the block's queries (kept in shared
//!    memory, pre-scaled), in f32, with the soft cap;
//! 2. online softmax — the tile's maximum per head by a tree over the units; each unit rescales
//!    its running sums to the new maximum and turns its key's scores into weights;
//! 3. values — the units split into key groups of one row each: unit `u` adds vector
//!    `u % row_vectors` of the value rows of its group's keys (adjacent units read adjacent
//!    vectors of one row), each value vector once for all heads of the block.
//!
//! The units' partial sums are added once, at the end.
//!
//! A query whose keys are split over several cubes (flash-decoding: few rows, long contexts)
//! writes a normalised partial output and its log-sum-exp per chunk;
//! [`attention_merge`](fn@super::split::attention_merge) combines them. A key whose pool row is
//! outside the pool is masked, never read.

use super::split::cube_work;
use crate::common::fp8::{Fp8Decode, load_pool};
use crate::common::reduce::{cube_sum, lane_sum};
use cubecl::prelude::*;

/// The attention of one (query row, head block, chunk) per cube (see the module doc);
/// `head_blocks` blocks of `heads` q heads make a kv head's group. Shapes:
/// `q [T, Hq, D]`, pools `[P, Hkv, D]` (all as vectors of `N`), `kv_indices [nnz]` i32,
/// `ranges [T, 2]` i32 (first entry in `kv_indices`, visible keys). Direct (`split` false):
/// writes `out [T, Hq, D]` and `lse [T, Hq]`. Split: writes `part_out [chunks, T, Hq, D]` (f32,
/// normalised) and `part_lse [chunks, T, Hq]`. `neg_inf` is `f32::NEG_INFINITY`, passed at run
/// time (WGSL has no infinity literal). `units` is a power of two and at least `row_vectors`.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_kernel<F: Float, P: Numeric, N: Size, M: Size>(
    q: &Tensor<Vector<F, N>>,
    k_pool: &Tensor<Vector<P, M>>,
    v_pool: &Tensor<Vector<P, M>>,
    kv_indices: &Tensor<i32>,
    ranges: &Tensor<i32>,
    out: &mut Tensor<Vector<F, N>>,
    lse: &mut Tensor<f32>,
    part_out: &mut Tensor<Vector<f32, N>>,
    part_lse: &mut Tensor<f32>,
    sm_scale: f32,
    soft_cap: f32,
    neg_inf: f32,
    chunk_keys: u32,
    num_chunks: u32,
    head_blocks: u32,
    k_scale: f32,
    v_scale: f32,
    #[comptime] heads: usize,
    #[comptime] units: usize,
    #[comptime] row_vectors: usize,
    #[comptime] split: bool,
    #[comptime] capped: bool,
    #[comptime] fp8: bool,
    #[comptime] fp8_decode: Fp8Decode,
    #[define(F, P)] _dtypes: [ElemType; 2],
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let pool_size = k_pool.shape(0);
    let num_kv_heads = k_pool.shape(1);
    let (t, g, head0, chunk) = cube_work(num_tokens, num_kv_heads, head_blocks as usize, heads);
    if chunk >= num_chunks as usize {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let first = usize::cast_from(ranges[2 * t]);
    let count = usize::cast_from(ranges[2 * t + 1]);
    let lo = chunk * (chunk_keys as usize);
    let hi = (lo + chunk_keys as usize).min(count);
    // Values: unit `u` owns vector `e` of the row for every `key_groups`-th key of a tile.
    let key_groups = comptime!(units / row_vectors);
    let e = u % row_vectors;
    let kg = u / row_vectors;

    let mut q_s = Shared::<[Vector<f32, N>]>::new_slice(heads * row_vectors);
    let mut s_s = Shared::<[f32]>::new_slice(heads * units);
    let mut max_s = Shared::<[f32]>::new_slice(heads * units);
    let mut rows_s = Shared::<[i32]>::new_slice(units);
    let mut acc_s = Shared::<[Vector<f32, N>]>::new_slice(units);

    for i in range_stepped(u, heads * row_vectors, units) {
        let h = i / row_vectors;
        let v = i % row_vectors;
        q_s[i] = Vector::<f32, N>::cast_from(q[(t * num_qo_heads + head0 + h) * row_vectors + v])
            * Vector::new(sm_scale);
    }
    // Running state, the same in every unit: the maximum per head; per unit: its share of the
    // sum of weights and of the weighted values.
    let mut m = Array::<f32>::new(heads);
    let mut l = Array::<f32>::new(heads);
    let mut acc = Array::<Vector<f32, N>>::new(heads);
    #[unroll]
    for h in 0..heads {
        m[h] = neg_inf;
        l[h] = f32::new(0.0);
        acc[h] = Vector::new(f32::new(0.0));
    }
    sync_cube();

    let mut base = lo;
    while base < hi {
        // 1. Unit `u` scores key `base + u` against every head of the block.
        let j = base + u;
        let mut row = i32::new(-1);
        if j < hi {
            let r = kv_indices[first + j];
            if r >= 0 && usize::cast_from(r) < pool_size {
                row = r;
            }
        }
        rows_s[u] = row;
        let k_row =
            (usize::cast_from(select(row >= 0, row, i32::new(0))) * num_kv_heads + g) * row_vectors;
        let mut dots = Array::<Vector<f32, N>>::new(heads);
        #[unroll]
        for h in 0..heads {
            dots[h] = Vector::new(f32::new(0.0));
        }
        if row >= 0 {
            for v in 0..row_vectors {
                let k = load_pool::<P, N, M>(k_pool, k_row + v, k_scale, fp8, fp8_decode);
                #[unroll]
                for h in 0..heads {
                    dots[h] += q_s[h * row_vectors + v] * k;
                }
            }
        }
        #[unroll]
        for h in 0..heads {
            let mut s = lane_sum::<N>(dots[h]);
            if capped {
                s = soft_cap * f32::tanh(s / soft_cap);
            }
            s = select(row >= 0, s, neg_inf);
            s_s[h * units + u] = s;
            max_s[h * units + u] = s;
        }
        sync_cube();
        // 2. The tile's maximum per head: a tree over the units.
        #[unroll]
        for level in 0..comptime!(units.trailing_zeros()) {
            let stride = comptime!(units >> (level + 1));
            if u < stride {
                #[unroll]
                for h in 0..heads {
                    let a = max_s[h * units + u];
                    let b = max_s[h * units + u + stride];
                    max_s[h * units + u] = select(b > a, b, a);
                }
            }
            sync_cube();
        }
        // 3. Weights against the new maximum; everything so far rescaled to it.
        #[unroll]
        for h in 0..heads {
            let tile_max = max_s[h * units];
            let m_new = select(tile_max > m[h], tile_max, m[h]);
            let empty = m_new == neg_inf;
            let rescale = select(empty, f32::new(1.0), f32::exp(m[h] - m_new));
            m[h] = m_new;
            acc[h] *= Vector::new(rescale);
            let s = s_s[h * units + u];
            let p = select(s == neg_inf, f32::new(0.0), f32::exp(s - m_new));
            l[h] = l[h] * rescale + p;
            s_s[h * units + u] = p;
        }
        sync_cube();
        // 4. Weighted values: unit `u` adds vector `e` of the value rows of keys `kg`,
        //    `kg + key_groups`, … of the tile.
        if kg < key_groups {
            for k in range_stepped(kg, units, key_groups) {
                let r = rows_s[k];
                if r >= 0 {
                    let at = (usize::cast_from(r) * num_kv_heads + g) * row_vectors + e;
                    let v = load_pool::<P, N, M>(v_pool, at, v_scale, fp8, fp8_decode);
                    #[unroll]
                    for h in 0..heads {
                        acc[h] += v * Vector::new(s_s[h * units + k]);
                    }
                }
            }
        }
        sync_cube();
        base += units;
    }

    // Sums over the units: the weights' (every unit's), the values' (per vector, over the key
    // groups). One head at a time through shared memory.
    #[unroll]
    for h in 0..heads {
        acc_s[u] = acc[h];
        let total = cube_sum(&mut max_s, l[h], units);
        let mut value = Vector::<f32, N>::new(f32::new(0.0));
        if u < row_vectors {
            for k in 0..key_groups {
                value += acc_s[k * row_vectors + u];
            }
        }
        let seen = total > 0.0;
        let value = select(seen, value / Vector::new(total), Vector::new(f32::new(0.0)));
        let log_sum = select(
            seen,
            m[h] + f32::ln(select(seen, total, f32::new(1.0))),
            neg_inf,
        );
        let head = t * num_qo_heads + head0 + h;
        if split {
            let at = chunk * num_tokens * num_qo_heads + head;
            if u < row_vectors {
                part_out[at * row_vectors + u] = value;
            }
            if u == 0 {
                part_lse[at] = log_sum;
            }
        } else {
            if u < row_vectors {
                out[head * row_vectors + u] = Vector::cast_from(value);
            }
            if u == 0 {
                lse[head] = log_sum;
            }
        }
        sync_cube();
    }
}
