//! Attention over the token-slot pool: each query row attends over pool rows named by
//! `kv_indices`, with no gather.
//!
//! One cube owns one (query row, kv head, chunk of the row's visible keys) and every q head that
//! reads its kv head (`group` of them), so each key and value row is loaded once for all of
//! them. The cube walks its keys in tiles of `units` keys:
//! 1. scores — unit `u` scores key `u` of the tile against the group's queries (kept in shared
//!    memory, pre-scaled), in f32, with the soft cap;
//! 2. online softmax — one unit per head takes the tile's maximum, rescales the running sum and
//!    turns the tile's scores into weights;
//! 3. values — unit `u` owns vector `u` of the head row and adds the tile's weighted value rows
//!    (adjacent units read adjacent vectors of one row).
//!
//! A query whose keys are split over several cubes (flash-decoding: few rows, long contexts)
//! writes a normalised partial output and its log-sum-exp per chunk; [`attention_merge`]
//! combines them. A key whose pool row is outside the pool is masked, never read.

use cubecl::prelude::*;

/// Sum of the lanes of `x`.
#[cube]
fn lane_sum<N: Size>(x: Vector<f32, N>) -> f32 {
    let mut sum = f32::new(0.0);
    #[unroll]
    for l in 0..N::value() {
        sum += x.extract(l);
    }
    sum
}

/// The attention of one (query row, kv head, chunk) per cube (see the module doc). Shapes:
/// `q [T, Hq, D]`, pools `[P, Hkv, D]` (all as vectors of `N`), `kv_indices [nnz]` i32,
/// `ranges [T, 2]` i32 (first entry in `kv_indices`, visible keys). Direct (`split` false):
/// writes `out [T, Hq, D]` and `lse [T, Hq]`. Split: writes `part_out [chunks, T, Hq, D]` (f32,
/// normalised) and `part_lse [chunks, T, Hq]`. `neg_inf` is `f32::NEG_INFINITY`, passed at run
/// time (WGSL has no infinity literal).
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub fn attention_kernel<F: Float, N: Size>(
    q: &Tensor<Vector<F, N>>,
    k_pool: &Tensor<Vector<F, N>>,
    v_pool: &Tensor<Vector<F, N>>,
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
    #[comptime] group: usize,
    #[comptime] units: usize,
    #[comptime] row_vectors: usize,
    #[comptime] split: bool,
    #[comptime] capped: bool,
    #[define(F)] _dtype: ElemType,
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let pool_size = k_pool.shape(0);
    let num_kv_heads = k_pool.shape(1);
    let work = CUBE_POS;
    let t = work % num_tokens;
    let rest = work / num_tokens;
    let g = rest % num_kv_heads;
    let chunk = rest / num_kv_heads;
    if chunk >= num_chunks as usize {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let first = usize::cast_from(ranges[2 * t]);
    let count = usize::cast_from(ranges[2 * t + 1]);
    let lo = chunk * (chunk_keys as usize);
    let hi = (lo + chunk_keys as usize).min(count);

    let mut q_s = Shared::<[Vector<f32, N>]>::new_slice(group * row_vectors);
    let mut s_s = Shared::<[f32]>::new_slice(group * units);
    let mut rows_s = Shared::<[i32]>::new_slice(units);
    let mut m_s = Shared::<[f32]>::new_slice(group);
    let mut l_s = Shared::<[f32]>::new_slice(group);
    let mut r_s = Shared::<[f32]>::new_slice(group);

    let head0 = g * group;
    for i in range_stepped(u, group * row_vectors, units) {
        let h = i / row_vectors;
        let e = i % row_vectors;
        q_s[i] = Vector::<f32, N>::cast_from(q[(t * num_qo_heads + head0 + h) * row_vectors + e])
            * Vector::new(sm_scale);
    }
    for h in range_stepped(u, group, units) {
        m_s[h] = neg_inf;
        l_s[h] = f32::new(0.0);
    }
    let mut acc = Array::<Vector<f32, N>>::new(group);
    #[unroll]
    for h in 0..group {
        acc[h] = Vector::new(0.0);
    }
    sync_cube();

    let mut base = lo;
    while base < hi {
        // 1. Scores of key `base + u` against every head of the group.
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
        #[unroll]
        for h in 0..group {
            let mut dot = Vector::<f32, N>::new(0.0);
            if row >= 0 {
                for e in 0..row_vectors {
                    dot +=
                        q_s[h * row_vectors + e] * Vector::<f32, N>::cast_from(k_pool[k_row + e]);
                }
            }
            let mut s = lane_sum::<N>(dot);
            if capped {
                s = soft_cap * f32::tanh(s / soft_cap);
            }
            s_s[h * units + u] = select(row >= 0, s, neg_inf);
        }
        sync_cube();

        // 2. Online softmax, one unit per head.
        for h in range_stepped(u, group, units) {
            let m_old = m_s[h];
            let mut m_new = m_old;
            for k in 0..units {
                let s = s_s[h * units + k];
                m_new = select(s > m_new, s, m_new);
            }
            let empty = m_new == neg_inf;
            let rescale = select(empty, f32::new(1.0), f32::exp(m_old - m_new));
            let mut sum = f32::new(0.0);
            for k in 0..units {
                let s = s_s[h * units + k];
                let p = select(s == neg_inf, f32::new(0.0), f32::exp(s - m_new));
                s_s[h * units + k] = p;
                sum += p;
            }
            m_s[h] = m_new;
            l_s[h] = l_s[h] * rescale + sum;
            r_s[h] = rescale;
        }
        sync_cube();

        // 3. Weighted values: unit `u` owns vector `u` of the row.
        if u < row_vectors {
            #[unroll]
            for h in 0..group {
                let mut a = acc[h] * Vector::new(r_s[h]);
                for k in 0..units {
                    let r = rows_s[k];
                    if r >= 0 {
                        let v = v_pool[(usize::cast_from(r) * num_kv_heads + g) * row_vectors + u];
                        a += Vector::<f32, N>::cast_from(v) * Vector::new(s_s[h * units + k]);
                    }
                }
                acc[h] = a;
            }
        }
        sync_cube();
        base += units;
    }

    #[unroll]
    for h in 0..group {
        let l = l_s[h];
        let m = m_s[h];
        let seen = l > 0.0;
        let head = t * num_qo_heads + head0 + h;
        let value = select(seen, acc[h] / Vector::new(l), Vector::new(f32::new(0.0)));
        let log_sum = select(seen, m + f32::ln(select(seen, l, f32::new(1.0))), neg_inf);
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
    }
}

/// Combines the `chunks` partial outputs of each (query row, q head): one unit per output
/// vector. `part_out [chunks, T, Hq, D]` (normalised per chunk) and `part_lse [chunks, T, Hq]`
/// into `out [T, Hq, D]` and `lse [T, Hq]`; a row no chunk saw gets zeros and `neg_inf`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn attention_merge<F: Float, N: Size>(
    part_out: &Tensor<Vector<f32, N>>,
    part_lse: &Tensor<f32>,
    out: &mut Tensor<Vector<F, N>>,
    lse: &mut Tensor<f32>,
    neg_inf: f32,
    chunks: u32,
    #[comptime] row_vectors: usize,
    #[define(F)] _dtype: ElemType,
) {
    let chunks = chunks as usize;
    let heads = lse.len();
    let i = ABSOLUTE_POS;
    if i >= heads * row_vectors {
        terminate!();
    }
    let head = i / row_vectors;
    let e = i % row_vectors;
    let mut m = neg_inf;
    for c in 0..chunks {
        let x = part_lse[c * heads + head];
        m = select(x > m, x, m);
    }
    let seen = m != neg_inf;
    let mut sum = f32::new(0.0);
    let mut value = Vector::<f32, N>::new(0.0);
    if seen {
        for c in 0..chunks {
            let x = part_lse[c * heads + head];
            let w = select(x == neg_inf, f32::new(0.0), f32::exp(x - m));
            sum += w;
            value += part_out[(c * heads + head) * row_vectors + e] * Vector::new(w);
        }
        value /= Vector::new(sum);
    }
    out[i] = Vector::cast_from(value);
    if e == 0 {
        lse[head] = select(seen, m + f32::ln(select(seen, sum, f32::new(1.0))), neg_inf);
    }
}
