//! A Llama-family decoder on the fused op (Llama 2/3/3.1, Mistral, Qwen2, Qwen3): embeddings,
//! RMSNorm, attention (q/k/v/o projections with the checkpoint's biases, Qwen3's per-head q/k
//! RMSNorm before RoPE, GQA), SwiGLU MLP, final norm and LM head (tied or not). Each layer's keys
//! and values live in a token-slot pool written by [`rope_pool_fused`](crate::rope_pool_fused);
//! one [`Decoder::step`] runs a ragged batch — prefill and decode tokens of several sequences
//! together — and [`pool_attention`] reads the pool rows of each token's sequence in place (one
//! plan per step, used by every layer).

use crate::model::graph::StepGraphs;
use crate::model::kernels::{
    FusedForm, add_rms_norm, add_rms_norm_shares, fuses, fuses_fp8, norm_project, norm_project_fp8,
    project_add, project_add_fp8, rms_norm, shares_summed, silu_mul, silu_mul_shares,
};
use crate::model::weights::{FromCheckpoint, Layer, Linear, Weight, Weights};
use crate::model::{Checkpoint, CheckpointError, DecoderConfig};
use crate::op::{
    RefusedCall, RopePoolConfig, RopePoolError, RopePoolInputs, RopePoolOutputs,
    try_rope_pool_fused,
};
use crate::pool::{
    HostStep, KvPool, KvPoolError, PoolAttentionConfig, PoolAttentionError, PoolStorage, SeqId,
    SeqToken, StepPlan,
};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

/// Why a decoder could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    /// The checkpoint could not be read, or does not match its config.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The rope settings of the config are refused.
    #[error(transparent)]
    Rope(#[from] RopePoolError),
    /// The pool refused the step: no tokens, a position out of order, too few free rows, or a
    /// refusal of the op or of attention (nothing was kept).
    #[error(transparent)]
    Pool(#[from] KvPoolError),
    /// A token id past the vocabulary.
    #[error("token id {token} is outside the vocabulary of {vocab_size}")]
    Token {
        /// The id.
        token: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// A pool made for another model (its layers or geometry differ from this decoder's).
    #[error("the pool does not fit this decoder: {0}")]
    Cache(String),
    /// A split over devices that cannot be made ([`ShardedDecoder::new`](crate::model::ShardedDecoder::new)).
    #[error("tensor parallelism: {0}")]
    Parallel(String),
}

impl From<PoolAttentionError> for DecoderError {
    fn from(e: PoolAttentionError) -> Self {
        DecoderError::Pool(e.into())
    }
}

/// One token of a step: its sequence, id and position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepToken {
    /// The sequence it belongs to.
    pub seq: SeqId,
    /// Token id.
    pub token: u32,
    /// Position in its sequence (its rows in the pool are `0..=position`).
    pub position: usize,
}

/// A step's residual stream between layers: `x`, and a projection's output not yet added to it
/// (the next norm adds it).
pub(crate) struct StepState {
    pub(crate) x: Tensor<2>,
    pub(crate) pending: Option<Pending>,
}

/// A projection's output not yet added to the residual stream.
pub(crate) enum Pending {
    /// The output, `[rows, n]`.
    Rows(Tensor<2>),
    /// The staged kernel's f32 shares of it, `[shares, rows, n]`, added by the kernel that adds
    /// the output ([`add_rms_norm_shares`]).
    Shares(Tensor<3>),
}

impl Pending {
    /// The output, `[rows, n]` of `dtype` (shares summed in tensor ops).
    fn into_rows(self, dtype: DType) -> Tensor<2> {
        match self {
            Self::Rows(y) => y,
            Self::Shares(shares) => shares_summed(shares, dtype),
        }
    }

    /// The rows `rows` of the output.
    fn select(self, rows: Tensor<1, Int>) -> Self {
        match self {
            Self::Rows(y) => Self::Rows(y.select(0, rows)),
            Self::Shares(shares) => Self::Shares(shares.select(1, rows)),
        }
    }
}

/// A decoder's weights on one device.
pub struct Decoder {
    /// The architecture.
    pub config: DecoderConfig,
    embed: Tensor<2>,
    layers: Vec<Layer>,
    norm: Tensor<1>,
    lm_head: Linear,
    device: Device,
    dtype: DType,
    fp8_cache: Option<(f32, f32)>,
    /// Decode steps captured for replay (see [`StepGraphs`]).
    graphs: StepGraphs,
}

/// The operations a decoder layer is made of: the production kernels ([`Kernels`]), or an
/// oracle of them (the tensor-op path of the `testing` feature). One layer loop runs either.
pub(crate) trait LayerOps {
    /// RMSNorm of each row of `x` with weight `w`.
    fn rms_norm(&self, x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2>;
    /// `(x + y, rms_norm(x + y))`.
    fn add_rms_norm(
        &self,
        x: Tensor<2>,
        y: Tensor<2>,
        w: &Tensor<1>,
        eps: f64,
    ) -> (Tensor<2>, Tensor<2>);
    /// `x · w_tᵀ (+ b)`.
    fn project(&self, linear: &Linear, x: Tensor<2>) -> Tensor<2>;
    /// `silu(gate) · up` of `[gate | up]`.
    fn silu_mul(&self, gate_up: Tensor<2>) -> Tensor<2>;
    /// The op: RoPE of q/k and the k/v pool write.
    fn rope(
        &self,
        inputs: RopePoolInputs,
        config: &RopePoolConfig,
    ) -> Result<RopePoolOutputs, RefusedCall>;
    /// `(x + y, rms_norm(x + y))` of a pending output `y`.
    fn add_pending_norm(
        &self,
        x: Tensor<2>,
        y: Pending,
        w: &Tensor<1>,
        eps: f64,
    ) -> (Tensor<2>, Tensor<2>) {
        let dtype = x.dtype();
        self.add_rms_norm(x, y.into_rows(dtype), w, eps)
    }
    /// `linear`'s projection of `x`, to be left pending.
    fn project_pending(&self, linear: &Linear, x: Tensor<2>) -> Pending {
        Pending::Rows(self.project(linear, x))
    }
    /// `linear`'s projection of `x`, and with `silu` the MLP activation of its halves.
    fn project_act(&self, linear: &Linear, x: Tensor<2>, silu: bool) -> Tensor<2> {
        project_then_act(self, linear, x, silu)
    }
    /// The norm (weight `w`) of the residual stream, its pending output added first, then
    /// `linear`'s projection of it and with `silu` the MLP activation of the projection's halves.
    fn norm_project(
        &self,
        state: &mut StepState,
        w: &Tensor<1>,
        eps: f64,
        linear: &Linear,
        silu: bool,
    ) -> Tensor<2> {
        norm_project_separately(self, state, w, eps, linear, silu)
    }
    /// `linear`'s projection of `x` for the residual stream: left pending, for the next norm to
    /// add.
    fn project_residual(&self, state: &mut StepState, linear: &Linear, x: Tensor<2>) {
        project_residual_separately(self, state, linear, x)
    }
}

/// [`LayerOps::norm_project`] as its steps, each through `ops`.
fn norm_project_separately(
    ops: &(impl LayerOps + ?Sized),
    state: &mut StepState,
    w: &Tensor<1>,
    eps: f64,
    linear: &Linear,
    silu: bool,
) -> Tensor<2> {
    let h = match state.pending.take() {
        Some(y) => {
            let (sum, h) = ops.add_pending_norm(state.x.clone(), y, w, eps);
            state.x = sum;
            h
        }
        None => ops.rms_norm(state.x.clone(), w, eps),
    };
    ops.project_act(linear, h, silu)
}

/// [`LayerOps::project_act`] as its steps, each through `ops`.
fn project_then_act(
    ops: &(impl LayerOps + ?Sized),
    linear: &Linear,
    x: Tensor<2>,
    silu: bool,
) -> Tensor<2> {
    let out = ops.project(linear, x);
    match silu {
        true => ops.silu_mul(out),
        false => out,
    }
}

/// [`LayerOps::project_residual`]: the projection left pending (a pending output before it added
/// to the stream first).
fn project_residual_separately(
    ops: &(impl LayerOps + ?Sized),
    state: &mut StepState,
    linear: &Linear,
    x: Tensor<2>,
) {
    if let Some(y) = state.pending.take() {
        let dtype = state.x.dtype();
        state.x = state.x.clone() + y.into_rows(dtype);
    }
    state.pending = Some(ops.project_pending(linear, x));
}

/// The production kernels: the fused op, the norm, matrix-vector and activation kernels where
/// the device has them (Burn's tensor ops elsewhere).
pub(crate) struct Kernels;

impl LayerOps for Kernels {
    fn rms_norm(&self, x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
        rms_norm(x, w, eps)
    }
    fn add_rms_norm(
        &self,
        x: Tensor<2>,
        y: Tensor<2>,
        w: &Tensor<1>,
        eps: f64,
    ) -> (Tensor<2>, Tensor<2>) {
        add_rms_norm(x, y, w, eps)
    }
    fn project(&self, linear: &Linear, x: Tensor<2>) -> Tensor<2> {
        linear.forward(x)
    }
    fn silu_mul(&self, gate_up: Tensor<2>) -> Tensor<2> {
        silu_mul(gate_up)
    }
    /// The staged kernel's shares summed in the norm's launch.
    fn add_pending_norm(
        &self,
        x: Tensor<2>,
        y: Pending,
        w: &Tensor<1>,
        eps: f64,
    ) -> (Tensor<2>, Tensor<2>) {
        match y {
            Pending::Rows(y) => add_rms_norm(x, y, w, eps),
            Pending::Shares(shares) => add_rms_norm_shares(x, shares, w, eps),
        }
    }
    /// Left as the staged kernel's shares where it splits the product, for the next norm's
    /// launch to add.
    fn project_pending(&self, linear: &Linear, x: Tensor<2>) -> Pending {
        match linear.forward_shares(&x) {
            Some(shares) => Pending::Shares(shares),
            None => Pending::Rows(linear.forward(x)),
        }
    }
    /// With `silu`, the staged kernel's shares summed in the activation's launch where it
    /// splits the product.
    fn project_act(&self, linear: &Linear, x: Tensor<2>, silu: bool) -> Tensor<2> {
        if silu && let Some(shares) = linear.forward_shares(&x) {
            return silu_mul_shares(shares, x.dtype());
        }
        project_then_act(self, linear, x, silu)
    }
    fn rope(
        &self,
        inputs: RopePoolInputs,
        config: &RopePoolConfig,
    ) -> Result<RopePoolOutputs, RefusedCall> {
        try_rope_pool_fused(inputs, config)
    }
    /// Nothing pending (and no bias with `silu`): `norm_project`, one launch where the
    /// matrix-vector kernel takes the rows and the same separate kernels elsewhere; else the
    /// separate kernels with the pending output added by the norm's launch.
    fn norm_project(
        &self,
        state: &mut StepState,
        w: &Tensor<1>,
        eps: f64,
        linear: &Linear,
        silu: bool,
    ) -> Tensor<2> {
        if state.pending.is_none() && (!silu || linear.b.is_none()) {
            let x = state.x.clone();
            return linear.bias(match &linear.w {
                Weight::Float(w_t) => norm_project(x, w, eps, w_t, silu),
                Weight::Fp8(w_fp8) => norm_project_fp8(x, w, eps, w_fp8, silu),
            });
        }
        norm_project_separately(self, state, w, eps, linear, silu)
    }
    /// Added to the stream in the projection's launch where the matrix-vector kernel takes the
    /// rows (a weight without bias), left pending elsewhere.
    fn project_residual(&self, state: &mut StepState, linear: &Linear, x: Tensor<2>) {
        if let (None, None) = (&state.pending, &linear.b) {
            match &linear.w {
                Weight::Float(w_t) if fuses(&x, w_t, FusedForm::Add) => {
                    state.x = project_add(x, w_t, state.x.clone());
                    return;
                }
                Weight::Fp8(w_fp8) if fuses_fp8(&x, w_fp8, FusedForm::Add) => {
                    state.x = project_add_fp8(x, w_fp8, state.x.clone());
                    return;
                }
                _ => {}
            }
        }
        project_residual_separately(self, state, linear, x)
    }
}

/// The vocabulary rows of rank `rank` of `ranks` (`r·V/N .. (r+1)·V/N`: never empty while
/// `ranks ≤ vocab`).
pub(crate) fn vocab_share(vocab: usize, rank: usize, ranks: usize) -> std::ops::Range<usize> {
    let at = |r: usize| ((r as u128 * vocab as u128) / ranks.max(1) as u128) as usize;
    at(rank)..at(rank + 1)
}

/// The pool's view of a step's tokens: each one's sequence and position.
pub(crate) fn seq_tokens(tokens: &[StepToken]) -> Vec<SeqToken> {
    tokens
        .iter()
        .map(|t| SeqToken {
            seq: t.seq,
            position: t.position,
        })
        .collect()
}

fn ints<const D: usize>(values: Vec<i64>, dims: [usize; D], device: &Device) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, dims), device)
}

impl Decoder {
    /// Loads a HuggingFace checkpoint folder, weights converted to `dtype` on `device`.
    pub fn load(
        checkpoint: &Checkpoint,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, DecoderError> {
        let config = DecoderConfig::from_hf_config(&checkpoint.config)?;
        // The last layer's tensors must be there before anything is built: a `num_hidden_layers`
        // past the checkpoint is named, not allocated for.
        if let Some(last) = config.num_layers.checked_sub(1) {
            let name = format!("model.layers.{last}.input_layernorm.weight");
            if !checkpoint.contains(&name) {
                return Err(CheckpointError::MissingTensor(name).into());
            }
        }
        Self::build(
            config,
            &FromCheckpoint {
                checkpoint,
                device,
                dtype,
            },
        )
    }

    /// Builds the model from `weights`.
    pub(crate) fn build(
        mut config: DecoderConfig,
        weights: &impl Weights,
    ) -> Result<Self, DecoderError> {
        let (h, m) = (config.hidden_size, config.intermediate_size);
        let rope = &config.rope;
        let (q_out, kv_out) = (
            rope.num_qo_heads * rope.head_dim,
            rope.num_kv_heads * rope.head_dim,
        );
        let mut layers = Vec::new();
        for l in 0..config.num_layers {
            let p = format!("model.layers.{l}");
            let norm = |name: &str, n: usize| weights.norm(&format!("{p}.{name}.weight"), n);
            let linear = |parts: &[(&str, usize)], i: usize, bias: bool| {
                let names: Vec<String> = parts.iter().map(|(n, _)| format!("{p}.{n}")).collect();
                let parts: Vec<(&str, usize)> = names
                    .iter()
                    .zip(parts)
                    .map(|(n, &(_, o))| (n.as_str(), o))
                    .collect();
                weights.linear(&parts, i, bias)
            };
            let qk_norm = |which: &str| {
                config
                    .qk_norm
                    .then(|| norm(&format!("self_attn.{which}_norm"), rope.head_dim))
                    .transpose()
            };
            let qkv = [
                ("self_attn.q_proj", q_out),
                ("self_attn.k_proj", kv_out),
                ("self_attn.v_proj", kv_out),
            ];
            let gate_up = [("mlp.gate_proj", m), ("mlp.up_proj", m)];
            layers.push(Layer {
                input_norm: norm("input_layernorm", h)?,
                qkv: linear(&qkv, h, config.qkv_bias)?,
                o: linear(&[("self_attn.o_proj", h)], q_out, config.o_bias)?,
                q_norm: qk_norm("q")?,
                k_norm: qk_norm("k")?,
                post_norm: norm("post_attention_layernorm", h)?,
                gate_up: linear(&gate_up, h, false)?,
                down: linear(&[("mlp.down_proj", h)], m, false)?,
            });
        }
        let embed = weights.embed(config.vocab_size, h)?;
        let head_rows = weights.lm_head_rows(config.vocab_size);
        let lm_head = if config.tie_word_embeddings {
            let w = match head_rows == (0..config.vocab_size) {
                true => embed.clone(),
                false => embed.clone().slice([head_rows, 0..h]),
            };
            Linear {
                w: Weight::Float(w),
                b: None,
            }
        } else {
            weights.linear(&[("lm_head", head_rows.len())], h, false)?
        };
        // The op's q/k norm uses the model's RMSNorm epsilon.
        config.rope.qk_norm_eps = config.rms_norm_eps;
        Ok(Self {
            embed,
            layers,
            norm: weights.norm("model.norm.weight", h)?,
            lm_head,
            device: weights.device().clone(),
            dtype: weights.dtype(),
            fp8_cache: None,
            graphs: StepGraphs::default(),
            config,
        })
    }

    /// Shard `rank` of `ranks` (Megatron-style) on `device` (an fp8 projection of this decoder
    /// stays fp8 on a CubeCL device: split by rows always, by input columns where the split
    /// falls on its words and on whole blocks or inside one; else floats of the decoder's
    /// dtype): q/k/v by heads (kv heads `rank · Hkv/ranks ..`
    /// and their q groups) and gate/up by output columns, o and down by input columns (their
    /// biases on rank 0), the LM head by vocabulary rows ([`vocab_share`]); norms
    /// and embeddings whole. The caller checked that `ranks` divides the kv heads and the MLP
    /// width and is at most the vocabulary.
    pub(crate) fn shard(&self, rank: usize, ranks: usize, device: &Device) -> Decoder {
        let rope = &self.config.rope;
        let (hq, hkv, d) = (rope.num_qo_heads, rope.num_kv_heads, rope.head_dim);
        let m = self.config.intermediate_size;
        let (qn, kvn, mn) = (hq / ranks, hkv / ranks, m / ranks);
        let (q_out, kv_out) = (hq * d, hkv * d);
        let q = rank * qn * d..(rank + 1) * qn * d;
        let k = q_out + rank * kvn * d..q_out + (rank + 1) * kvn * d;
        let v = q_out + kv_out + rank * kvn * d..q_out + kv_out + (rank + 1) * kvn * d;
        let mlp = rank * mn..(rank + 1) * mn;
        let vocab_rows = vocab_share(self.config.vocab_size, rank, ranks);
        let dtype = self.dtype;
        let whole = |t: &Tensor<1>| t.clone().to_device(device);
        let layers = self
            .layers
            .iter()
            .map(|layer| Layer {
                input_norm: whole(&layer.input_norm),
                qkv: layer
                    .qkv
                    .rows(&[q.clone(), k.clone(), v.clone()], device, dtype),
                o: layer.o.columns(q.clone(), rank == 0, device, dtype),
                q_norm: layer.q_norm.as_ref().map(whole),
                k_norm: layer.k_norm.as_ref().map(whole),
                post_norm: whole(&layer.post_norm),
                gate_up: layer.gate_up.rows(
                    &[mlp.clone(), m + mlp.start..m + mlp.end],
                    device,
                    dtype,
                ),
                down: layer.down.columns(mlp.clone(), rank == 0, device, dtype),
            })
            .collect();
        Decoder {
            config: self.config.shard(ranks),
            embed: self.embed.clone().to_device(device),
            layers,
            norm: whole(&self.norm),
            lm_head: self.lm_head.rows(&[vocab_rows], device, dtype),
            device: device.clone(),
            dtype,
            fp8_cache: self.fp8_cache,
            graphs: StepGraphs::default(),
        }
    }

    /// Caches made by [`Self::new_cache`] keep keys and values as fp8 e4m3 with these `(k_scale,
    /// v_scale)` ([`PoolTensor::Fp8`](crate::pool::PoolTensor::Fp8): half the bytes of f16, and
    /// half the bytes attention reads each step), or in the weights' dtype (`None`, the default).
    pub fn with_fp8_cache(mut self, scales: Option<(f32, f32)>) -> Self {
        self.fp8_cache = scales;
        self
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// How [`Self::new_cache`] stores keys and values.
    fn storage(&self) -> PoolStorage {
        match self.fp8_cache {
            Some((k_scale, v_scale)) => PoolStorage::Fp8 { k_scale, v_scale },
            None => PoolStorage::Float(self.dtype),
        }
    }

    /// The bytes of [`Self::new_cache`]`(pool_rows)`: keys and values of every layer (`None`
    /// past `u64::MAX`).
    pub fn cache_bytes(&self, pool_rows: usize) -> Option<u64> {
        let layers = self.layers.len();
        KvPool::bytes(&self.config.rope, layers, pool_rows, self.storage())
    }

    /// An empty [`KvPool`] of `pool_rows` rows for every layer, refused before anything is
    /// allocated past i32 slots or past what the device can hold
    /// ([`memory_limit`](crate::pool::memory_limit)).
    pub fn new_cache(&self, pool_rows: usize) -> Result<KvPool, KvPoolError> {
        self.new_cache_within(pool_rows, None)
    }

    /// [`Self::new_cache`], also refused past `limit` bytes if given.
    pub(crate) fn new_cache_within(
        &self,
        pool_rows: usize,
        limit: Option<u64>,
    ) -> Result<KvPool, KvPoolError> {
        // Steps captured over pools that are gone let their memory go first.
        self.graphs.prune();
        let (rope, layers) = (self.config.rope.clone(), self.layers.len());
        KvPool::with_layers(rope, layers, pool_rows, &self.device, self.storage(), limit)
    }

    /// Runs one step: `tokens` of several sequences, each sequence's tokens in position order
    /// (they may interleave), continuing where its rows in the pool end (a new sequence starts
    /// at position 0). Allocates one pool row per token (all or nothing: a refused step keeps
    /// no rows) and returns the logits `[S, vocab]` of each sequence's last token, sequences in
    /// order of first appearance.
    pub fn step(
        &self,
        tokens: &[StepToken],
        cache: &mut KvPool,
    ) -> Result<Tensor<2>, DecoderError> {
        if let Some(result) = self.graphs.step(self, tokens, cache) {
            return result;
        }
        self.step_with(&Kernels, tokens, cache)
    }

    /// [`Self::step`] through `ops`.
    pub(crate) fn step_with(
        &self,
        ops: &impl LayerOps,
        tokens: &[StepToken],
        cache: &mut KvPool,
    ) -> Result<Tensor<2>, DecoderError> {
        self.check_step(tokens, cache)?;
        let host = cache.plan_host(&seq_tokens(tokens))?;
        self.run_host_step(ops, tokens, host, cache)
    }

    /// [`Self::step_with`] of a step already planned on the host (its rows allocated): its
    /// arrays uploaded, its layers run, its rows given back if it fails (the step stored
    /// nothing a later step reads).
    pub(crate) fn run_host_step(
        &self,
        ops: &impl LayerOps,
        tokens: &[StepToken],
        host: HostStep,
        cache: &mut KvPool,
    ) -> Result<Tensor<2>, DecoderError> {
        let step = host.upload(&cache.device().clone());
        let result = self.run_step(ops, self.token_ids(tokens), &step, cache);
        if result.is_err() {
            cache.cancel_step(step);
        }
        result
    }

    /// Captured decode steps on (the default) or off: on CubeCL devices, in builds without
    /// Burn's `fusion`, decode steps (each sequence one token) of a shape seen at the step
    /// before are replayed from a graph captured once instead of launched kernel by kernel (the
    /// same kernels; attention planned for a bucket of key counts; CONTRACT, "Captured decode
    /// steps"). Elsewhere this changes nothing.
    pub fn with_step_graphs(self, on: bool) -> Self {
        self.graphs.set_enabled(on);
        self
    }

    /// Decode steps captured and replayed so far ([`Self::with_step_graphs`]).
    #[cfg(feature = "testing")]
    pub(crate) fn step_graph_counts(&self) -> (usize, usize, usize) {
        self.graphs.counts()
    }

    /// The checks of a step before anything is planned: token ids inside the vocabulary, a
    /// cache made for this decoder.
    pub(crate) fn check_step(
        &self,
        tokens: &[StepToken],
        cache: &KvPool,
    ) -> Result<(), DecoderError> {
        let vocab_size = self.config.vocab_size;
        if let Some(t) = tokens.iter().find(|t| t.token as usize >= vocab_size) {
            return Err(DecoderError::Token {
                token: t.token,
                vocab_size,
            });
        }
        if cache.layers() != self.layers.len() || cache.config() != &self.config.rope {
            return Err(DecoderError::Cache(format!(
                "{} layers of {:?}, the decoder has {} layers of {:?}",
                cache.layers(),
                cache.config(),
                self.layers.len(),
                self.config.rope
            )));
        }
        Ok(())
    }

    /// The bytes of the weights of one of `ranks` shards ([`Self::shard`]), as floats of the
    /// decoder's dtype.
    pub(crate) fn shard_bytes(&self, ranks: usize) -> u64 {
        Self::shard_bytes_of(&self.config, self.dtype, ranks)
    }

    /// [`Self::shard_bytes`] of a decoder of `config` in `dtype`.
    pub(crate) fn shard_bytes_of(c: &DecoderConfig, dtype: DType, ranks: usize) -> u64 {
        let [h, m, d, hq, hkv, n, vocab, layers] = [
            c.hidden_size,
            c.intermediate_size,
            c.rope.head_dim,
            c.rope.num_qo_heads,
            c.rope.num_kv_heads,
            ranks.max(1),
            c.vocab_size,
            c.num_layers,
        ]
        .map(|v| v as u64);
        let mul = |a: u64, b: u64| a.saturating_mul(b);
        let projections = mul(mul(hq.saturating_add(mul(2, hkv)), d), h)
            .saturating_add(mul(mul(h, hq), d))
            .saturating_add(mul(mul(3, m), h));
        let layer = (projections / n).saturating_add(mul(2, h));
        let head = mul(vocab, h).saturating_add(mul(vocab.div_ceil(n), h));
        let elements = mul(layers, layer).saturating_add(head).saturating_add(h);
        mul(elements, dtype.size() as u64)
    }

    /// The decoder's layers.
    pub(crate) fn layer_count(&self) -> usize {
        self.layers.len()
    }

    /// The projections held as fp8 weights (each layer's q/k/v, o, gate/up, down, and the LM
    /// head).
    #[cfg(feature = "testing")]
    pub(crate) fn fp8_projections(&self) -> usize {
        let fp8 = |l: &Linear| matches!(l.w, Weight::Fp8(_)) as usize;
        let layers: usize = self
            .layers
            .iter()
            .map(|l| fp8(&l.qkv) + fp8(&l.o) + fp8(&l.gate_up) + fp8(&l.down))
            .sum();
        layers + fp8(&self.lm_head)
    }

    /// The layers of a planned step whose token ids are `ids` (`[T]`, batch order).
    pub(crate) fn run_step(
        &self,
        ops: &impl LayerOps,
        ids: Tensor<1, Int>,
        step: &StepPlan,
        cache: &mut KvPool,
    ) -> Result<Tensor<2>, DecoderError> {
        let mut state = self.embed_ids(ids);
        for (l, layer) in self.layers.iter().enumerate() {
            let attended = self.attention(ops, l, &mut state, step, cache)?;
            ops.project_residual(&mut state, &layer.o, attended);
            let act = self.mlp_in(ops, l, &mut state);
            ops.project_residual(&mut state, &layer.down, act);
        }
        Ok(self.logits(ops, state, step))
    }

    /// The residual stream of a step's tokens: their embeddings.
    pub(crate) fn embed_step(&self, tokens: &[StepToken]) -> StepState {
        self.embed_ids(self.token_ids(tokens))
    }

    /// A step's token ids on the device.
    fn token_ids(&self, tokens: &[StepToken]) -> Tensor<1, Int> {
        let ids: Vec<i64> = tokens.iter().map(|t| t.token as i64).collect();
        ints(ids, [tokens.len()], &self.device)
    }

    /// The residual stream of tokens `ids`: their embeddings.
    fn embed_ids(&self, ids: Tensor<1, Int>) -> StepState {
        StepState {
            x: self.embed.clone().select(0, ids),
            pending: None,
        }
    }

    /// Layer `l` up to its attention output projection (of this decoder's heads: a shard's
    /// partial sum).
    pub(crate) fn attention_half(
        &self,
        ops: &impl LayerOps,
        l: usize,
        state: &mut StepState,
        step: &StepPlan,
        cache: &mut KvPool,
    ) -> Result<Tensor<2>, DecoderError> {
        let attended = self.attention(ops, l, state, step, cache)?;
        Ok(ops.project(&self.layers[l].o, attended))
    }

    /// Layer `l`'s attention before its output projection, `[tokens, heads · head_dim]`: the
    /// pending output added to the residual stream, the input norm, q/k/v, the op's RoPE and
    /// pool write, attention.
    fn attention(
        &self,
        ops: &impl LayerOps,
        l: usize,
        state: &mut StepState,
        step: &StepPlan,
        cache: &mut KvPool,
    ) -> Result<Tensor<2>, DecoderError> {
        let layer = &self.layers[l];
        let eps = self.config.rms_norm_eps;
        let rope = &self.config.rope;
        let (hq, hkv, d) = (rope.num_qo_heads, rope.num_kv_heads, rope.head_dim);
        let t = state.x.dims()[0];
        // One projection; q, k and v are views of its columns (the op reads them in place).
        let qkv = ops.norm_project(state, &layer.input_norm, eps, &layer.qkv, false);
        let (q_end, k_end) = (hq * d, (hq + hkv) * d);
        let q = qkv.clone().slice([0..t, 0..q_end]).reshape([t, hq, d]);
        let k = qkv.clone().slice([0..t, q_end..k_end]).reshape([t, hkv, d]);
        let v = qkv
            .slice([0..t, k_end..k_end + hkv * d])
            .reshape([t, hkv, d]);
        // Qwen3's per-head q/k norm runs inside the op (its epsilon is the config's
        // `rms_norm_eps`, read into the rope config).
        let qk_norm = match (&layer.q_norm, &layer.k_norm) {
            (Some(qn), Some(kn)) => Some((qn.clone(), kn.clone())),
            _ => None,
        };
        let rope = |inputs, config: &_| ops.rope(inputs, config);
        let (q_rot, _) = cache.write_using(l, step, q, k, v, qk_norm, rope)?;
        let attention = PoolAttentionConfig::new(hq, hkv, d);
        let attended = match self.config.window(l) {
            None => cache.attend(l, step, q_rot, &attention)?,
            Some(w) => {
                let windowed = attention.with_sliding_window(Some(w));
                cache.attend(l, step, q_rot, &windowed)?
            }
        };
        Ok(attended.reshape([t, hq * d]))
    }

    /// Layer `l` after attention: `o` (summed over shards) added to the residual stream, the
    /// post-attention norm and the MLP; returns its output (of this decoder's share of the MLP:
    /// a shard's partial sum), added to the stream by the next layer.
    pub(crate) fn mlp_half(
        &self,
        ops: &impl LayerOps,
        l: usize,
        state: &mut StepState,
        o: Tensor<2>,
    ) -> Tensor<2> {
        state.pending = Some(Pending::Rows(o));
        let act = self.mlp_in(ops, l, state);
        ops.project(&self.layers[l].down, act)
    }

    /// Layer `l`'s MLP before its down projection: the pending output added to the residual
    /// stream, the post-attention norm, gate/up and the activation.
    fn mlp_in(&self, ops: &impl LayerOps, l: usize, state: &mut StepState) -> Tensor<2> {
        let layer = &self.layers[l];
        let eps = self.config.rms_norm_eps;
        ops.norm_project(state, &layer.post_norm, eps, &layer.gate_up, true)
    }

    /// The logits of each sequence's last token (of this decoder's LM head: a shard's columns).
    pub(crate) fn logits(
        &self,
        ops: &impl LayerOps,
        state: StepState,
        step: &StepPlan,
    ) -> Tensor<2> {
        let last_tokens = step.last_tokens();
        // The last tokens' rows of the stream (and of the output pending for it), their norm and
        // the LM head; every row where each token is its sequence's last, in order (decoding).
        let every_row = last_tokens.iter().enumerate().all(|(at, &i)| at == i)
            && last_tokens.len() == state.x.dims()[0];
        let mut rows = match every_row {
            true => state,
            false => {
                let last: Vec<i64> = last_tokens.iter().map(|&i| i as i64).collect();
                let last = ints(last, [last_tokens.len()], &self.device);
                StepState {
                    x: state.x.select(0, last.clone()),
                    pending: state.pending.map(|y| y.select(last)),
                }
            }
        };
        let eps = self.config.rms_norm_eps;
        ops.norm_project(&mut rows, &self.norm, eps, &self.lm_head, false)
    }
}
