//! Attention of a step's rotated queries over their sequences' pool rows, the one attention of
//! the crate (the attention layer and the decoder both use it): the rows are gathered with
//! `select`, kv heads expanded to every q head (GQA), scores masked causally and by padding,
//! softmax in f32 (as transformers does), all planned on the host once per step and reused by
//! every layer.

use crate::pool::SeqId;
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};

/// A token's place in a ragged batch: its sequence and its position there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqToken {
    /// The sequence (request) the token belongs to.
    pub seq: SeqId,
    /// Its position in that sequence (0-based).
    pub position: usize,
}

/// One sequence of a step as attention reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeqRows<'a> {
    /// The batch rows of its new tokens, in position order (at least one).
    pub batch_rows: &'a [usize],
    /// Every pool row it holds, in position order, its new tokens' rows last (at least as many
    /// as `batch_rows`).
    pub pool_rows: &'a [i32],
}

/// The batched attention of a step's single-token (decode) sequences.
struct DecodePlan {
    /// Their batch rows `[B]`.
    rows: Tensor<1, Int>,
    /// Their pool rows `[B * L]` (padded with each sequence's first row).
    idx: Tensor<1, Int>,
    /// The padding `[B, 1, 1, L]` (true: masked).
    mask: Tensor<4, Bool>,
    /// B.
    batch: usize,
    /// L.
    len: usize,
}

/// One multi-token (prefill or extend) sequence.
struct PrefillPlan {
    /// Its batch rows `[n]`.
    rows: Tensor<1, Int>,
    /// Its pool rows `[L]`.
    held: Tensor<1, Int>,
    /// The causal mask `[1, 1, n, L]` (true: masked).
    mask: Tensor<4, Bool>,
}

/// The attention of one step, planned on the host once (index work, one upload per tensor) and
/// used by every layer.
pub(crate) struct AttentionPlan {
    /// The decode sequences, batched.
    decode: Option<DecodePlan>,
    /// Each multi-token sequence.
    prefill: Vec<PrefillPlan>,
    /// Batch order of the concatenated outputs (decode first, then the prefills).
    order: Tensor<1, Int>,
}

fn ints<const D: usize>(values: Vec<i64>, dims: [usize; D], device: &Device) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, dims), device)
}

fn bools<const D: usize>(values: Vec<bool>, dims: [usize; D], device: &Device) -> Tensor<D, Bool> {
    Tensor::from_data(TensorData::new(values, dims), device)
}

impl AttentionPlan {
    /// The plan of a step of `num_tokens` batch rows made of `seqs` (every batch row in exactly
    /// one sequence, each sequence as [`SeqRows`] describes).
    pub fn new(seqs: &[SeqRows<'_>], num_tokens: usize, device: &Device) -> Self {
        let decode: Vec<&SeqRows<'_>> = seqs.iter().filter(|s| s.batch_rows.len() == 1).collect();
        let mut order_src: Vec<usize> = Vec::with_capacity(num_tokens);
        let decode = (!decode.is_empty()).then(|| {
            let b = decode.len();
            let l = decode.iter().map(|s| s.pool_rows.len()).max().unwrap_or(1);
            let (mut idx, mut mask) = (Vec::with_capacity(b * l), Vec::with_capacity(b * l));
            for seq in &decode {
                order_src.push(seq.batch_rows[0]);
                let held = seq.pool_rows;
                for j in 0..l {
                    idx.push(held.get(j).or(held.first()).map_or(0, |&r| r as i64));
                    mask.push(j >= held.len());
                }
            }
            let batch_rows = decode.iter().map(|s| s.batch_rows[0] as i64).collect();
            DecodePlan {
                rows: ints(batch_rows, [b], device),
                idx: ints(idx, [b * l], device),
                mask: bools(mask, [b, 1, 1, l], device),
                batch: b,
                len: l,
            }
        });
        let mut prefill = Vec::new();
        for seq in seqs.iter().filter(|s| s.batch_rows.len() > 1) {
            let (n, l) = (seq.batch_rows.len(), seq.pool_rows.len());
            // New token k sits at position l - n + k and sees the rows up to it.
            let first = l.saturating_sub(n);
            let mask = (0..n)
                .flat_map(|k| (0..l).map(move |j| j > first + k))
                .collect();
            order_src.extend(seq.batch_rows);
            let rows = seq.batch_rows.iter().map(|&i| i as i64).collect();
            let held = seq.pool_rows.iter().map(|&r| r as i64).collect();
            prefill.push(PrefillPlan {
                rows: ints(rows, [n], device),
                held: ints(held, [l], device),
                mask: bools(mask, [1, 1, n, l], device),
            });
        }
        let mut order = vec![0i64; num_tokens];
        for (at, &i) in order_src.iter().enumerate() {
            order[i] = at as i64;
        }
        Self {
            decode,
            prefill,
            order: ints(order, [num_tokens], device),
        }
    }

    /// Attention of the step's rotated queries `q: [T, Hq, D]` over the pools
    /// `[P, Hkv, D]`; returns `[T, Hq * D]` in batch order.
    pub fn attend(&self, q: Tensor<3>, k_pool: &Tensor<3>, v_pool: &Tensor<3>) -> Tensor<2> {
        let [_, hq, d] = q.dims();
        let hkv = k_pool.dims()[1];
        let mut parts = Vec::new();
        if let Some(DecodePlan {
            rows,
            idx,
            mask,
            batch: b,
            len: l,
        }) = &self.decode
        {
            let gather = |pool: &Tensor<3>| {
                pool.clone()
                    .select(0, idx.clone())
                    .reshape([*b, *l, hkv, d])
                    .swap_dims(1, 2)
            };
            let q = q.clone().select(0, rows.clone()).reshape([*b, hq, 1, d]);
            let out = sdpa(q, gather(k_pool), gather(v_pool), mask.clone());
            parts.push(out.reshape([*b, hq * d]));
        }
        for PrefillPlan { rows, held, mask } in &self.prefill {
            let n = rows.dims()[0];
            let l = held.dims()[0];
            let gather = |pool: &Tensor<3>| {
                pool.clone()
                    .select(0, held.clone())
                    .reshape([1, l, hkv, d])
                    .swap_dims(1, 2)
            };
            let q = q
                .clone()
                .select(0, rows.clone())
                .swap_dims(0, 1)
                .reshape([1, hq, n, d]);
            let out = sdpa(q, gather(k_pool), gather(v_pool), mask.clone());
            parts.push(out.reshape([hq, n, d]).swap_dims(0, 1).reshape([n, hq * d]));
        }
        Tensor::cat(parts, 0).select(0, self.order.clone())
    }
}

/// Scaled dot-product attention of `q: [B, Hq, n, D]` over `k, v: [B, Hkv, L, D]` with GQA
/// and `mask` (true: masked) `[B, 1, n, L]`; softmax in f32. Returns `[B, Hq, n, D]`.
fn sdpa(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<4, Bool>) -> Tensor<4> {
    let [b, hq, n, d] = q.dims();
    let [_, hkv, l, _] = k.dims();
    let repeat = |x: Tensor<4>| {
        x.reshape([b, hkv, 1, l, d])
            .expand([b, hkv, hq / hkv, l, d])
            .reshape([b, hq, l, d])
    };
    let scores = q.matmul(repeat(k).swap_dims(2, 3)) * (1.0 / (d as f64).sqrt());
    let scores = scores.mask_fill(mask.expand([b, hq, n, l]), f32::NEG_INFINITY);
    let dtype = scores.dtype();
    softmax(scores.cast(DType::F32), 3)
        .cast(dtype)
        .matmul(repeat(v))
}
