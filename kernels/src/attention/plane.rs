//! Attention over the token-slot pool for devices with plane (warp / subgroup) operations: the
//! kernel decode runs on, with no cube-wide synchronisation inside its loop.
//!
//! One cube owns one (query row, block of `heads` q heads of one kv head, chunk of the row's
//! visible keys). Its units form key groups of `lanes` adjacent units (inside one plane); a key
//! group reads one key row and one value row at a time, each unit `vecs` vectors of them in loads
//! of `words` adjacent vectors (unit `lane` reads loads `lane`, `lane + lanes`, …; `words` is 1
//! but for fp8 pools, whose pool vectors hold several words of four codes), so the row's bytes
//! are read by adjacent units in one coalesced load and every byte once for all the block's
//! heads. Each unit holds its
//! vectors of the block's queries in registers; a key's score is the plane sum of the units'
//! partial dot products (`lanes` units, shuffle-xor). Every key group keeps its own online
//! softmax (running maximum, sum of weights, weighted values) over the keys it reads — keys
//! `kg`, `kg + key_groups`, … of the chunk, `steps` of them per iteration so several loads are
//! in flight — and the key groups are merged once, at the end, through shared memory.
//!
//! The split into chunks and its merge are those of the portable kernel ([`super::split`]): a
//! split launch writes normalised partial outputs and their log-sum-exps, combined by
//! [`attention_merge`](fn@super::split::attention_merge). A key whose pool row is outside the
//! pool is masked, never read.

use super::split::cube_work;
use crate::common::fp8::{Fp8Decode, pool_vector_raw};
use crate::common::reduce::lane_sum;
use cubecl::prelude::*;

/// The pool row of key `j` of a query whose keys start at entry `first` of `kv_indices`, or -1
/// when `j` is past `hi` or the row is outside the pool (masked, never read).
#[cube]
pub(super) fn pool_row(
    kv_indices: &Tensor<i32>,
    first: usize,
    j: usize,
    hi: usize,
    pool_size: usize,
) -> i32 {
    let mut row = i32::new(-1);
    if j < hi {
        let r = kv_indices[first + j];
        if r >= 0 && usize::cast_from(r) < pool_size {
            row = r;
        }
    }
    row
}

/// The attention of one (query row, head block, chunk) per cube (see the module doc). Shapes as
/// [`attention_kernel`](fn@super::portable::attention_kernel): `q [T, Hq, D]`, pools
/// `[P, Hkv, D]` (float pools as vectors of `M = N`; fp8 pools as vectors of `M = words` words,
/// `N = 4`), `kv_indices [nnz]`, `ranges [T, 2]`; direct or split outputs. The cube has `units`
/// units (a multiple of `lanes`); `lanes` is a power of two no larger than the device's smallest
/// plane; `row_vectors` is a multiple of `words`, and `vecs` is `row_vectors / words / lanes`
/// rounded up, times `words`; `head_blocks` blocks of `heads` q heads make a kv head's group.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_plane_kernel<F: Float, P: Numeric, N: Size, M: Size>(
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
    #[comptime] lanes: usize,
    #[comptime] vecs: usize,
    #[comptime] steps: usize,
    #[comptime] row_vectors: usize,
    #[comptime] split: bool,
    #[comptime] capped: bool,
    #[comptime] words: usize,
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
    let lane = u % lanes;
    let kg = u / lanes;
    let key_groups = comptime!(units / lanes);
    let first = usize::cast_from(ranges[2 * t]);
    let count = usize::cast_from(ranges[2 * t + 1]);
    let lo = chunk * (chunk_keys as usize);
    let hi = (lo + chunk_keys as usize).min(count);

    // fp8 codes are decoded without their scale ([`pool_vector_raw`]): the queries carry k's
    // scale and the decode's factor, the output v's.
    let factor = comptime!(if fp8 { fp8_decode.raw_factor() } else { 1.0 });
    // This unit's vectors of the block's queries, pre-scaled; zero past the row.
    let loads = comptime!(vecs / words);
    let row_loads = comptime!(row_vectors / words);
    let mut qr = Array::<Vector<f32, N>>::new(heads * vecs);
    #[unroll]
    for h in 0..heads {
        #[unroll]
        for i in 0..vecs {
            let e = (lane + comptime!(i / words) * lanes) * words + comptime!(i % words);
            let mut x = Vector::<f32, N>::new(f32::new(0.0));
            if e < row_vectors {
                x = Vector::<f32, N>::cast_from(
                    q[(t * num_qo_heads + head0 + h) * row_vectors + e],
                ) * Vector::new(sm_scale * k_scale * f32::new(factor));
            }
            qr[h * vecs + i] = x;
        }
    }
    // The key group's online softmax: per head its maximum and sum of weights (the same in all
    // its units), and this unit's vectors of the weighted values.
    let mut m = Array::<f32>::new(heads);
    let mut l = Array::<f32>::new(heads);
    let mut acc = Array::<Vector<f32, N>>::new(heads * vecs);
    #[unroll]
    for h in 0..heads {
        m[h] = neg_inf;
        l[h] = f32::new(0.0);
        #[unroll]
        for i in 0..vecs {
            acc[h * vecs + i] = Vector::new(f32::new(0.0));
        }
    }

    let stride = comptime!(key_groups * steps);
    // The pool rows of this key group's keys for the first iteration; each iteration then loads
    // the next one's while its keys and values are on their way (the row indices are one memory
    // round trip ahead of the rows themselves).
    let mut rows = Array::<i32>::new(steps);
    #[unroll]
    for s in 0..steps {
        rows[s] = pool_row(kv_indices, first, lo + s * key_groups + kg, hi, pool_size);
    }
    let mut base = lo;
    // The loop's bounds are the same in every unit: the shuffles run in uniform control flow.
    while base < hi {
        // Loads first: `steps` keys and values of this key group, and the next rows.
        let mut ks = Array::<Vector<f32, N>>::new(steps * vecs);
        let mut vs = Array::<Vector<f32, N>>::new(steps * vecs);
        #[unroll]
        for s in 0..steps {
            let row = rows[s];
            #[unroll]
            for i in 0..loads {
                let c = lane + i * lanes;
                let mut kw = Vector::<P, M>::new(P::from_int(0));
                let mut vw = Vector::<P, M>::new(P::from_int(0));
                if row >= 0 && c < row_loads {
                    let at = (usize::cast_from(row) * num_kv_heads + g) * row_loads + c;
                    kw = k_pool[at];
                    vw = v_pool[at];
                }
                #[unroll]
                for w in 0..words {
                    let slot = s * vecs + i * words + w;
                    ks[slot] = pool_vector_raw::<P, N, M>(kw, w, fp8, fp8_decode);
                    vs[slot] = pool_vector_raw::<P, N, M>(vw, w, fp8, fp8_decode);
                }
            }
        }
        let mut next = Array::<i32>::new(steps);
        #[unroll]
        for s in 0..steps {
            next[s] = pool_row(
                kv_indices,
                first,
                base + stride + s * key_groups + kg,
                hi,
                pool_size,
            );
        }
        // Scores: the units' partial dots, summed over the key group's lanes.
        let mut scores = Array::<f32>::new(steps * heads);
        #[unroll]
        for s in 0..steps {
            #[unroll]
            for h in 0..heads {
                let mut d = Vector::<f32, N>::new(f32::new(0.0));
                #[unroll]
                for i in 0..vecs {
                    d += qr[h * vecs + i] * ks[s * vecs + i];
                }
                let mut x = lane_sum::<N>(d);
                #[unroll]
                for level in 0..comptime!(lanes.trailing_zeros()) {
                    x += plane_shuffle_xor(x, comptime!((lanes >> (level + 1)) as u32));
                }
                if capped {
                    x = soft_cap * f32::tanh(x / soft_cap);
                }
                scores[s * heads + h] = select(rows[s] >= 0, x, neg_inf);
            }
        }
        // The online softmax over the step's keys.
        #[unroll]
        for h in 0..heads {
            let mut top = m[h];
            #[unroll]
            for s in 0..steps {
                let x = scores[s * heads + h];
                top = select(x > top, x, top);
            }
            let rescale = select(top == neg_inf, f32::new(1.0), f32::exp(m[h] - top));
            m[h] = top;
            let mut sum = l[h] * rescale;
            #[unroll]
            for i in 0..vecs {
                acc[h * vecs + i] *= Vector::new(rescale);
            }
            #[unroll]
            for s in 0..steps {
                let x = scores[s * heads + h];
                let p = select(x == neg_inf, f32::new(0.0), f32::exp(x - top));
                sum += p;
                #[unroll]
                for i in 0..vecs {
                    acc[h * vecs + i] += vs[s * vecs + i] * Vector::new(p);
                }
            }
            l[h] = sum;
        }
        #[unroll]
        for s in 0..steps {
            rows[s] = next[s];
        }
        base += stride;
    }

    // The key groups merged: maxima and sums through shared memory, then per head the value
    // vectors, rescaled to the common maximum and added over the key groups.
    let mut m_s = Shared::<[f32]>::new_slice(key_groups * heads);
    let mut l_s = Shared::<[f32]>::new_slice(key_groups * heads);
    let mut acc_s = Shared::<[Vector<f32, N>]>::new_slice(units * vecs);
    if lane == 0 {
        #[unroll]
        for h in 0..heads {
            m_s[kg * heads + h] = m[h];
            l_s[kg * heads + h] = l[h];
        }
    }
    sync_cube();
    #[unroll]
    for h in 0..heads {
        let mut top = neg_inf;
        for k in 0..key_groups {
            let x = m_s[k * heads + h];
            top = select(x > top, x, top);
        }
        let mut total = f32::new(0.0);
        for k in 0..key_groups {
            let x = m_s[k * heads + h];
            total += select(
                x == neg_inf,
                f32::new(0.0),
                l_s[k * heads + h] * f32::exp(x - top),
            );
        }
        let mine = select(m[h] == neg_inf, f32::new(0.0), f32::exp(m[h] - top));
        #[unroll]
        for i in 0..vecs {
            acc_s[u * vecs + i] = acc[h * vecs + i] * Vector::new(mine);
        }
        sync_cube();
        let seen = total > 0.0;
        let head = t * num_qo_heads + head0 + h;
        // Vector `e` of the row, in load `c = e / words`, lives in unit `c % lanes`'s slot
        // `(c / lanes) * words + e % words` of each group.
        for e in range_stepped(u, row_vectors, units) {
            let c = e / words;
            let at = (c % lanes) * vecs + (c / lanes) * words + e % words;
            let mut value = Vector::<f32, N>::new(f32::new(0.0));
            for k in 0..key_groups {
                value += acc_s[k * lanes * vecs + at];
            }
            let mut value = select(seen, value / Vector::new(total), Vector::new(f32::new(0.0)));
            if comptime!(fp8) {
                value *= Vector::new(v_scale * f32::new(factor));
            }
            if split {
                part_out[(chunk * num_tokens * num_qo_heads + head) * row_vectors + e] = value;
            } else {
                out[head * row_vectors + e] = Vector::cast_from(value);
            }
        }
        if u == 0 {
            let log_sum = select(
                seen,
                top + f32::ln(select(seen, total, f32::new(1.0))),
                neg_inf,
            );
            if split {
                part_lse[chunk * num_tokens * num_qo_heads + head] = log_sum;
            } else {
                lse[head] = log_sum;
            }
        }
        sync_cube();
    }
}
