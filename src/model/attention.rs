//! A LLaMA-style attention layer on the fused op: q/k/v/o projections without bias,
//! grouped-query heads, NeoX RoPE, keys and values kept in a token-slot [`KvPool`]. The forward
//! runs one layer of a planned step ([`KvPool::plan_step`]: a ragged batch of several sequences'
//! tokens): `rope_pool_fused` once for the whole batch, then each new token attends causally
//! over its sequence's rows of the pool.

use crate::op::RopePoolConfig;
use crate::op::unfused::rotate_unfused;
use crate::pool::{
    KvPool, KvPoolError, MAX_HEAD_DIM, PoolAttentionConfig, PoolAttentionError, StepPlan,
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

    /// Forward of layer `layer` of a planned step ([`KvPool::plan_step`]): `hidden: [T, hidden]`
    /// in the step's batch order. Projects q/k/v, runs `rope_pool_fused` once for the batch
    /// (keys and values into the step's rows of `pool`'s layer `layer`), attends each token over
    /// its sequence's rows, and returns `[T, hidden]`. A refused call leaves the pools as they
    /// were; the step's rows stay allocated ([`KvPool::cancel_step`] gives them back).
    pub fn forward(
        &self,
        hidden: Tensor<2>,
        layer: usize,
        step: &StepPlan,
        pool: &mut KvPool,
    ) -> Result<Tensor<2>, KvPoolError> {
        let [t, _] = hidden.dims();
        let (hq, hkv, d) = (self.num_qo_heads, self.num_kv_heads, self.head_dim);
        let q = self.q_proj.forward(hidden.clone()).reshape([t, hq, d]);
        let k = self.k_proj.forward(hidden.clone()).reshape([t, hkv, d]);
        let v = self.v_proj.forward(hidden).reshape([t, hkv, d]);
        let (q_rot, _) = pool.write(layer, step, q, k, v, None)?;
        let attended = pool.attend(layer, step, q_rot, &self.attention())?;
        Ok(self.o_proj.forward(attended.reshape([t, hq * d])))
    }
}
