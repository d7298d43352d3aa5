//! A slow float64 reference of `pool_attention`, straight from the contract's math: the oracle
//! of the tests and of the `replay` example. It forms each query's visible keys itself (not
//! from the plan's ranges), so it checks the plan too.

use crate::pool::PoolAttentionConfig;

/// The outputs of [`pool_attention_reference`], dense row-major in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionReference {
    /// `[T, Hq, D]`.
    pub out: Vec<f64>,
    /// `[T, Hq]`; `-inf` where a query sees no key.
    pub lse: Vec<f64>,
}

/// The index arrays of a batch, as the contract names them.
#[derive(Clone, Copy, Debug)]
pub struct BatchIndices<'a> {
    /// Sequence `b`'s queries are rows `qo_indptr[b]..qo_indptr[b + 1]`.
    pub qo_indptr: &'a [i64],
    /// Sequence `b`'s keys are `kv_indices[kv_indptr[b]..kv_indptr[b + 1]]`.
    pub kv_indptr: &'a [i64],
    /// Pool rows, in position order.
    pub kv_indices: &'a [i64],
}

/// `pool_attention` in f64 on dense row-major buffers: `q [T, Hq, D]`, pools
/// `[P, Hkv, D]` (`P = k_pool.len() / (Hkv * D)`), for a batch that passes the op's checks. An
/// index outside the pool is masked, as the op does without checked mode.
pub fn pool_attention_reference(
    config: &PoolAttentionConfig,
    q: &[f64],
    [k_pool, v_pool]: [&[f64]; 2],
    batch: BatchIndices<'_>,
) -> AttentionReference {
    let (hq, hkv, d) = (config.num_qo_heads, config.num_kv_heads, config.head_dim);
    let group = hq / hkv.max(1);
    let row = hkv * d;
    let pool_size = k_pool.len().checked_div(row).unwrap_or(0);
    let num_tokens = q.len().checked_div(hq * d).unwrap_or(0);
    let scale = config.scale();
    let mut out = vec![0.0; num_tokens * hq * d];
    let mut lse = vec![f64::NEG_INFINITY; num_tokens * hq];
    let BatchIndices {
        qo_indptr,
        kv_indptr,
        kv_indices,
    } = batch;
    for b in 0..qo_indptr.len().saturating_sub(1) {
        let (q0, n) = (qo_indptr[b], qo_indptr[b + 1] - qo_indptr[b]);
        let (k0, len) = (kv_indptr[b], kv_indptr[b + 1] - kv_indptr[b]);
        for i in 0..n {
            let t = (q0 + i) as usize;
            let p = len - n + i;
            let visible = |j: i64| {
                (!config.causal || j <= p)
                    && config
                        .sliding_window
                        .is_none_or(|w| j > p.saturating_sub(i64::try_from(w).unwrap_or(i64::MAX)))
            };
            let keys: Vec<usize> = (0..len)
                .filter(|&j| visible(j))
                .map(|j| kv_indices[(k0 + j) as usize])
                .filter(|&r| r >= 0 && (r as usize) < pool_size)
                .map(|r| r as usize)
                .collect();
            for h in 0..hq {
                let qh = &q[(t * hq + h) * d..][..d];
                let kv = h / group;
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&r| {
                        let k = &k_pool[r * row + kv * d..][..d];
                        let s = scale * qh.iter().zip(k).map(|(a, b)| a * b).sum::<f64>();
                        match config.logits_soft_cap {
                            Some(cap) => cap * (s / cap).tanh(),
                            None => s,
                        }
                    })
                    .collect();
                if scores.is_empty() {
                    continue;
                }
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = weights.iter().sum();
                lse[t * hq + h] = max + sum.ln();
                let o = &mut out[(t * hq + h) * d..][..d];
                for (&r, w) in keys.iter().zip(&weights) {
                    let v = &v_pool[r * row + kv * d..][..d];
                    for (o, v) in o.iter_mut().zip(v) {
                        *o += w / sum * v;
                    }
                }
            }
        }
    }
    AttentionReference { out, lse }
}
