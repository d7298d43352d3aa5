//! A LLaMA-style attention layer on the fused op: q/k/v/o projections without bias,
//! grouped-query heads, NeoX RoPE, keys and values kept in a token-slot [`KvPool`]. The forward
//! takes a ragged batch (continuous batching: tokens of several sequences, each with its sequence
//! id and position), calls `rope_pool_fused` once for the whole batch, then attends each new
//! token causally over its sequence's rows of the pool.

use crate::op::RopePoolConfig;
use crate::op::unfused::rotate_unfused;
use crate::pool::{
    KvPool, KvPoolError, MAX_HEAD_DIM, PoolAttentionConfig, PoolAttentionError,
    PoolAttentionInputs, PoolAttentionPlan, SeqId, SeqToken, pool_attention,
};
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, DType, Device, Int, Tensor, TensorData};

/// The layer's geometry.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaAttentionConfig {
    /// Model width.
    pub hidden: usize,
    /// Query heads.
    pub num_qo_heads: usize,
    /// Key/value heads (divides `num_qo_heads`).
    pub num_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// RoPE base θ.
    pub rope_base: f64,
}

impl LlamaAttentionConfig {
    /// The Llama-3-8B layer: hidden 4096, 32 q heads, 8 kv heads, head_dim 128, θ = 500000.
    pub fn llama3_8b() -> Self {
        Self {
            hidden: 4096,
            num_qo_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            rope_base: 500_000.0,
        }
    }

    /// The op's parameters for this layer (its pool's config): rotated keys go to the pool
    /// only, since attention reads keys from the pool.
    pub fn rope(&self) -> RopePoolConfig {
        RopePoolConfig::new(self.head_dim, self.num_qo_heads, self.num_kv_heads)
            .with_rope_base(self.rope_base)
            .with_k_rot(false)
    }

    /// A layer with random weights (burn's default Linear initialisation). Refused, before
    /// anything is allocated, when the heads do not group (`num_qo_heads` a positive multiple of
    /// a positive `num_kv_heads`) or `head_dim` is outside `1..=MAX_HEAD_DIM`.
    pub fn init(&self, device: &Device) -> Result<LlamaAttention, PoolAttentionError> {
        let (hq, hkv, d) = (self.num_qo_heads, self.num_kv_heads, self.head_dim);
        if hq == 0 || hkv == 0 || !hq.is_multiple_of(hkv) {
            return Err(PoolAttentionError::HeadRatio {
                num_qo_heads: hq,
                num_kv_heads: hkv,
            });
        }
        if d == 0 || d > MAX_HEAD_DIM {
            return Err(PoolAttentionError::Parameter {
                what: format!("head_dim must be in 1..={MAX_HEAD_DIM}, got {d}"),
            });
        }
        let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        let (q, kv) = (
            self.num_qo_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        );
        Ok(LlamaAttention {
            q_proj: linear(self.hidden, q),
            k_proj: linear(self.hidden, kv),
            v_proj: linear(self.hidden, kv),
            o_proj: linear(q, self.hidden),
            num_qo_heads: self.num_qo_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            rope_base: self.rope_base,
        })
    }
}

/// LLaMA attention (no bias, GQA, NeoX RoPE) over a [`KvPool`].
#[derive(Module, Debug)]
pub struct LlamaAttention {
    /// `hidden → num_qo_heads * head_dim`.
    pub q_proj: Linear,
    /// `hidden → num_kv_heads * head_dim`.
    pub k_proj: Linear,
    /// `hidden → num_kv_heads * head_dim`.
    pub v_proj: Linear,
    /// `num_qo_heads * head_dim → hidden`.
    pub o_proj: Linear,
    num_qo_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    rope_base: f64,
}

impl LlamaAttention {
    /// The layer's attention over the pool: causal, scale `1 / sqrt(head_dim)`.
    fn attention(&self) -> PoolAttentionConfig {
        PoolAttentionConfig::new(self.num_qo_heads, self.num_kv_heads, self.head_dim)
    }

    /// The same layer without the fused op or a pool: plain tensor ops (NeoX rotation, keys and
    /// values of the whole sequence kept as they are, kv heads expanded, causal softmax in f32)
    /// over one sequence `x: [n, hidden]` starting at position 0. The reference the fused path
    /// is checked against; it runs on any backend, Autodiff included.
    pub fn forward_unfused(&self, x: Tensor<2>) -> Tensor<2> {
        let [n, _] = x.dims();
        let device = x.device();
        let (hq, hkv, d) = (self.num_qo_heads, self.num_kv_heads, self.head_dim);
        let rope = RopePoolConfig::new(d, hq, hkv).with_rope_base(self.rope_base);
        let positions: Vec<i64> = (0..n as i64).collect();
        let positions = Tensor::<1, Int>::from_data(TensorData::new(positions, [n]), &device);
        let q = self.q_proj.forward(x.clone()).reshape([n, hq, d]);
        let k = self.k_proj.forward(x.clone()).reshape([n, hkv, d]);
        let v = self.v_proj.forward(x).reshape([n, hkv, d]);
        let q = rotate_unfused(q, positions.clone(), &rope).swap_dims(0, 1);
        let k = rotate_unfused(k, positions, &rope);
        // Each kv head repeated for the q heads that read it: [hq, n, d].
        let expand = |x: Tensor<3>| {
            x.reshape([n, hkv, 1, d])
                .expand([n, hkv, hq / hkv, d])
                .reshape([n, hq, d])
                .swap_dims(0, 1)
        };
        let scores = q.matmul(expand(k).swap_dims(1, 2)) * self.attention().scale();
        let future: Vec<bool> = (0..n).flat_map(|i| (0..n).map(move |j| j > i)).collect();
        let future = Tensor::<3, Bool>::from_data(TensorData::new(future, [1, n, n]), &device);
        let dtype = scores.dtype();
        let scores = scores
            .cast(DType::F32)
            .mask_fill(future.expand([hq, n, n]), f32::NEG_INFINITY);
        let out = softmax(scores, 2).cast(dtype).matmul(expand(v));
        self.o_proj
            .forward(out.swap_dims(0, 1).reshape([n, hq * d]))
    }

    /// Forward over a ragged batch: `hidden: [T, hidden]`, `tokens[t]` the sequence and position
    /// of row `t` (a sequence's new tokens in position order, continuing where its rows in the
    /// pool end). Allocates a pool row for every token, runs `rope_pool_fused` once for the
    /// batch, attends each token over its sequence, and returns `[T, hidden]`.
    pub fn forward(
        &self,
        hidden: Tensor<2>,
        tokens: &[SeqToken],
        pool: &mut KvPool,
    ) -> Result<Tensor<2>, KvPoolError> {
        let [t, _] = hidden.dims();
        let (hq, hkv, d) = (self.num_qo_heads, self.num_kv_heads, self.head_dim);
        let q = self.q_proj.forward(hidden.clone()).reshape([t, hq, d]);
        let k = self.k_proj.forward(hidden.clone()).reshape([t, hkv, d]);
        let v = self.v_proj.forward(hidden).reshape([t, hkv, d]);

        // Each sequence's new tokens continue where its rows end, in order: anything else would
        // rotate a key for one position and attend as if it sat at another.
        let mut next: Vec<(SeqId, usize)> = Vec::new();
        for token in tokens {
            let at = match next.iter_mut().find(|(seq, _)| *seq == token.seq) {
                Some((_, at)) => at,
                None => {
                    let held = pool.slots.rows(token.seq).map_or(0, <[i32]>::len);
                    next.push((token.seq, held));
                    &mut next.last_mut().expect("just pushed").1
                }
            };
            if token.position != *at {
                return Err(KvPoolError::Position {
                    seq: token.seq,
                    position: token.position,
                    expected: *at,
                });
            }
            *at += 1;
        }
        // One pool row per token (all-or-nothing for the batch).
        let needed = tokens.len();
        if needed > pool.slots.available() {
            return Err(KvPoolError::Exhausted {
                requested: needed,
                available: pool.slots.available(),
            });
        }
        let mut slots = Vec::with_capacity(needed);
        for token in tokens {
            slots.push(pool.slots.allocate(token.seq, 1)?[0] as i64);
        }
        let positions: Vec<i64> = tokens.iter().map(|t| t.position as i64).collect();
        let (q_rot, _) = match pool.write(q, k, v, &positions, &slots) {
            Ok(out) => out,
            Err(e) => {
                // Nothing was stored: give the rows taken above back.
                for token in tokens {
                    pool.slots.free_last(token.seq, 1)?;
                }
                return Err(e);
            }
        };

        // Each sequence's new tokens as one contiguous run of rows (first appearance order),
        // attended over the rows the sequence holds, then put back in batch order.
        let mut order: Vec<(SeqId, Vec<usize>)> = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            match order.iter_mut().find(|(seq, _)| *seq == token.seq) {
                Some((_, rows)) => rows.push(i),
                None => order.push((token.seq, vec![i])),
            }
        }
        let (mut qo, mut kv, mut indices) = (vec![0i64], vec![0i64], Vec::new());
        for (seq, rows) in &order {
            let held = pool.slots.rows(*seq).unwrap_or(&[]);
            indices.extend(held.iter().map(|&r| r as i64));
            qo.push(qo[qo.len() - 1] + rows.len() as i64);
            kv.push(indices.len() as i64);
        }
        let device = q_rot.device();
        let grouped: Vec<i64> = order
            .iter()
            .flat_map(|(_, r)| r.iter().map(|&i| i as i64))
            .collect();
        let in_order = grouped.iter().enumerate().all(|(at, &i)| at as i64 == i);
        let q_rot = if in_order {
            q_rot
        } else {
            let index = TensorData::new(grouped.clone(), [t]);
            q_rot.select(0, Tensor::<1, Int>::from_data(index, &device))
        };
        let nnz = indices.len();
        let plan = PoolAttentionPlan::new(
            TensorData::new(qo.clone(), [qo.len()]),
            TensorData::new(kv.clone(), [kv.len()]),
            TensorData::new(indices, [nnz]),
            &device,
        );
        let inputs = PoolAttentionInputs::new(q_rot, pool.k().clone(), pool.v().clone());
        let attended = match pool_attention(inputs, &plan, &self.attention()) {
            Ok(out) => out.out.reshape([t, hq * d]),
            Err(e) => {
                // Refused (an Autodiff device, say): the batch leaves no rows behind.
                for token in tokens {
                    pool.slots.free_last(token.seq, 1)?;
                }
                return Err(e.into());
            }
        };
        let attended = if in_order {
            attended
        } else {
            let mut back = vec![0i64; t];
            for (at, &i) in grouped.iter().enumerate() {
                back[i as usize] = at as i64;
            }
            let back = Tensor::<1, Int>::from_data(TensorData::new(back, [t]), &device);
            attended.select(0, back)
        };
        Ok(self.o_proj.forward(attended))
    }
}
