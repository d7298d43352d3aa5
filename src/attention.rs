//! A LLaMA-style attention layer on the fused op: q/k/v/o projections without bias,
//! grouped-query heads, NeoX RoPE, keys and values kept in a token-slot [`KvPool`]. The forward
//! takes a ragged batch (continuous batching: tokens of several sequences, each with its sequence
//! id and position), calls `rope_pool_fused` once for the whole batch, then attends each new
//! token causally over its sequence's rows of the pool.

use crate::RopePoolConfig;
use crate::kv_pool::{KvPool, KvPoolError, SeqId};
use crate::unfused::rotate_unfused;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

/// One token of a ragged batch: which sequence it belongs to and its position there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// The sequence (request) the token belongs to.
    pub seq: SeqId,
    /// Its position in that sequence (0-based).
    pub position: usize,
}

/// The layer's geometry.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaAttentionConfig {
    /// Model width.
    pub hidden: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (divides `num_heads`).
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
            num_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            rope_base: 500_000.0,
        }
    }

    /// The op's parameters for this layer (its pool's config): rotated keys go to the pool
    /// only, since attention reads keys from the pool.
    pub fn rope(&self) -> RopePoolConfig {
        RopePoolConfig::new(self.head_dim, self.num_heads, self.num_kv_heads)
            .with_rope_base(self.rope_base)
            .with_k_rot(false)
    }

    /// A layer with random weights (burn's default Linear initialisation).
    pub fn init(&self, device: &Device) -> LlamaAttention {
        let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        let (q, kv) = (
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        );
        LlamaAttention {
            q_proj: linear(self.hidden, q),
            k_proj: linear(self.hidden, kv),
            v_proj: linear(self.hidden, kv),
            o_proj: linear(q, self.hidden),
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            rope_base: self.rope_base,
        }
    }
}

/// LLaMA attention (no bias, GQA, NeoX RoPE) over a [`KvPool`].
#[derive(Module, Debug)]
pub struct LlamaAttention {
    /// `hidden → num_heads * head_dim`.
    pub q_proj: Linear,
    /// `hidden → num_kv_heads * head_dim`.
    pub k_proj: Linear,
    /// `hidden → num_kv_heads * head_dim`.
    pub v_proj: Linear,
    /// `num_heads * head_dim → hidden`.
    pub o_proj: Linear,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    rope_base: f64,
}

/// Causal attention of `q: [n, Hq, D]` (positions `q_pos`) over `k, v: [L, Hkv, D]` (positions
/// `0..L`), GQA by repeating each kv head `Hq / Hkv` times. Returns `[n, Hq * D]`.
pub fn causal_attention(q: Tensor<3>, k: Tensor<3>, v: Tensor<3>, q_pos: &[usize]) -> Tensor<2> {
    let [n, hq, d] = q.dims();
    let [l, hkv, _] = k.dims();
    let group = hq / hkv;
    let device = q.device();
    // [H, n, D] x [H, D, L] -> [H, n, L]
    let repeat = |x: Tensor<3>| {
        x.swap_dims(0, 1)
            .reshape([hkv, 1, l, d])
            .repeat_dim(1, group)
            .reshape([hq, l, d])
    };
    let (k, v) = (repeat(k), repeat(v));
    let q = q.swap_dims(0, 1);
    let scores = q.matmul(k.swap_dims(1, 2)) / (d as f64).sqrt();
    let mask: Vec<bool> = q_pos
        .iter()
        .flat_map(|&p| (0..l).map(move |j| j > p))
        .collect();
    let mask = Tensor::<2, Bool>::from_data(TensorData::new(mask, [n, l]), &device)
        .reshape([1, n, l])
        .expand([hq, n, l]);
    let scores = scores.mask_fill(mask, f32::NEG_INFINITY);
    let out = softmax(scores, 2).matmul(v); // [H, n, D]
    out.swap_dims(0, 1).reshape([n, hq * d])
}

impl LlamaAttention {
    /// The same layer without the fused op or a pool: plain tensor ops (NeoX rotation, keys and
    /// values of the whole sequence kept as they are) over one sequence `x: [n, hidden]` starting
    /// at position 0. The reference the fused path is checked against.
    pub fn forward_unfused(&self, x: Tensor<2>) -> Tensor<2> {
        let [n, _] = x.dims();
        let device = x.device();
        let (hq, hkv, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let rope = RopePoolConfig::new(d, hq, hkv).with_rope_base(self.rope_base);
        let positions: Vec<i64> = (0..n as i64).collect();
        let positions = Tensor::<1, Int>::from_data(TensorData::new(positions, [n]), &device);
        let q = self.q_proj.forward(x.clone()).reshape([n, hq, d]);
        let k = self.k_proj.forward(x.clone()).reshape([n, hkv, d]);
        let v = self.v_proj.forward(x).reshape([n, hkv, d]);
        let q = rotate_unfused(q, positions.clone(), &rope);
        let k = rotate_unfused(k, positions, &rope);
        let q_pos: Vec<usize> = (0..n).collect();
        self.o_proj.forward(causal_attention(q, k, v, &q_pos))
    }

    /// Forward over a ragged batch: `hidden: [T, hidden]`, `tokens[t]` the sequence and position
    /// of row `t` (a sequence's new tokens in position order, continuing where its rows in the
    /// pool end). Allocates a pool row for every token, runs `rope_pool_fused` once for the
    /// batch, attends each token over its sequence, and returns `[T, hidden]`.
    pub fn forward(
        &self,
        hidden: Tensor<2>,
        tokens: &[TokenInfo],
        pool: &mut KvPool,
    ) -> Result<Tensor<2>, KvPoolError> {
        let [t, _] = hidden.dims();
        let (hq, hkv, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        let q = self.q_proj.forward(hidden.clone()).reshape([t, hq, d]);
        let k = self.k_proj.forward(hidden.clone()).reshape([t, hkv, d]);
        let v = self.v_proj.forward(hidden).reshape([t, hkv, d]);

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

        // Attention, one sequence at a time, over its rows of the pool.
        let device = q_rot.device();
        let mut order: Vec<SeqId> = Vec::new();
        for token in tokens {
            if !order.contains(&token.seq) {
                order.push(token.seq);
            }
        }
        let mut outputs: Vec<(Vec<usize>, Tensor<2>)> = Vec::new();
        for seq in order {
            let rows_idx: Vec<usize> = (0..t).filter(|&i| tokens[i].seq == seq).collect();
            let q_pos: Vec<usize> = rows_idx.iter().map(|&i| tokens[i].position).collect();
            let len = q_pos.iter().max().map_or(0, |p| p + 1);
            let rows = pool.slots.rows(seq).expect("allocated above");
            let rows: Vec<i64> = rows[..len].iter().map(|&r| r as i64).collect();
            let rows = Tensor::<1, Int>::from_data(TensorData::new(rows, [len]), &device);
            let k = pool.k().clone().select(0, rows.clone());
            let v = pool.v().clone().select(0, rows);
            let sel: Vec<i64> = rows_idx.iter().map(|&i| i as i64).collect();
            let sel = Tensor::<1, Int>::from_data(TensorData::new(sel, [rows_idx.len()]), &device);
            let q = q_rot.clone().select(0, sel);
            outputs.push((rows_idx, causal_attention(q, k, v, &q_pos)));
        }
        // Back to batch order.
        let mut index = vec![0i64; t];
        let mut parts = Vec::new();
        let mut at = 0;
        for (rows_idx, out) in outputs {
            for (j, &i) in rows_idx.iter().enumerate() {
                index[i] = (at + j) as i64;
            }
            at += rows_idx.len();
            parts.push(out);
        }
        let index = Tensor::<1, Int>::from_data(TensorData::new(index, [t]), &device);
        let attended = Tensor::cat(parts, 0).select(0, index);
        Ok(self.o_proj.forward(attended))
    }
}
