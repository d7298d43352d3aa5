//! A Llama-family decoder on the fused op (Llama 2/3/3.1, Mistral, Qwen2, Qwen3): embeddings,
//! RMSNorm, attention (q/k/v/o projections with the checkpoint's biases, Qwen3's per-head q/k
//! RMSNorm before RoPE, GQA), SwiGLU MLP, final norm and LM head (tied or not). Each layer's keys
//! and values live in a token-slot pool written by [`rope_pool_fused`](crate::rope_pool_fused);
//! one [`Decoder::step`] runs a ragged batch — prefill and decode tokens of several sequences
//! together — and attention reads the pool rows of each token's sequence (a gather plus
//! matmuls, batched on the device: all single-token sequences in one batched attention, each
//! prefill in its own).

use crate::api::rope_pool_in_pools;
use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::kv_pool::{KvPoolError, SeqId, SlotAllocator};
use crate::unfused::rope_pool_unfused;
use crate::{RopePoolConfig, RopePoolError, check_rope_pool_fused};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Bool, DType, Device, Distribution, Int, Tensor, TensorData};
use serde_json::Value;

/// Why a decoder could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    /// The checkpoint could not be read, or does not match its config.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The rope settings of the config are refused.
    #[error(transparent)]
    Rope(#[from] RopePoolError),
    /// The pool has too few free rows (or a sequence is unknown).
    #[error(transparent)]
    Pool(#[from] KvPoolError),
    /// A step's tokens are not in the order [`Decoder::step`] takes them.
    #[error("invalid step: {0}")]
    Step(String),
}

/// The architecture of a decoder, from a HuggingFace `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// `llama`, `mistral`, `qwen2` or `qwen3`.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// The LM head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry biases (Qwen2; Llama's `attention_bias`, which adds o's too).
    pub qkv_bias: bool,
    /// The o projection carries a bias (Llama's `attention_bias`).
    pub o_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Heads, head size and RoPE variant: the fused op's config.
    pub rope: RopePoolConfig,
}

impl DecoderConfig {
    /// Reads a `config.json` (either rope form); an unsupported `model_type` or a missing field
    /// is an error naming it.
    pub fn from_hf_config(config: &Value) -> Result<Self, DecoderError> {
        let bad = |what: String| DecoderError::Checkpoint(CheckpointError::Config(what));
        let model_type = config["model_type"].as_str().unwrap_or("").to_string();
        if !matches!(model_type.as_str(), "llama" | "mistral" | "qwen2" | "qwen3") {
            return Err(bad(format!(
                "unsupported model_type `{model_type}` (supported: llama, mistral, qwen2, qwen3)"
            )));
        }
        let count = |name: &str| {
            config[name]
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| bad(format!("missing integer field `{name}`")))
        };
        let flag = |name: &str, default: bool| config[name].as_bool().unwrap_or(default);
        let attention_bias = flag("attention_bias", false);
        Ok(Self {
            vocab_size: count("vocab_size")?,
            hidden_size: count("hidden_size")?,
            intermediate_size: count("intermediate_size")?,
            num_layers: count("num_hidden_layers")?,
            rms_norm_eps: config["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            tie_word_embeddings: flag("tie_word_embeddings", false),
            qkv_bias: model_type == "qwen2" || attention_bias,
            o_bias: model_type != "qwen2" && attention_bias,
            qk_norm: model_type == "qwen3",
            rope: {
                // Attention reads keys from the pool: the op need not return them.
                let rope = RopePoolConfig::from_hf_config_value(config)?.with_k_rot(false);
                // transformers materialises a bf16/f16 checkpoint's rotary `inv_freq` buffer in
                // that dtype, and its generations (even in float64) use the rounded values.
                match config["dtype"].as_str().or(config["torch_dtype"].as_str()) {
                    Some("bfloat16") => rope.with_inv_freq_dtype(DType::BF16),
                    Some("float16") => rope.with_inv_freq_dtype(DType::F16),
                    _ => rope,
                }
            },
            model_type,
        })
    }

    /// A Llama-3-8B-shaped config (32 layers, hidden 4096, 32/8 heads of 128, MLP 14336, vocab
    /// 128256, θ = 500000): the benchmark's model.
    pub fn llama3_8b() -> Self {
        Self {
            model_type: "llama".into(),
            vocab_size: 128_256,
            hidden_size: 4096,
            intermediate_size: 14_336,
            num_layers: 32,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            qkv_bias: false,
            o_bias: false,
            qk_norm: false,
            rope: RopePoolConfig::new(128, 32, 8)
                .with_rope_base(500_000.0)
                .with_k_rot(false),
        }
    }
}

/// `x @ w (+ b)` with `w` stored `[in, out]`.
#[derive(Debug, Clone)]
struct Linear {
    w: Tensor<2>,
    b: Option<Tensor<1>>,
}

impl Linear {
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let y = x.matmul(self.w.clone());
        match &self.b {
            Some(b) => y + b.clone().unsqueeze::<2>(),
            None => y,
        }
    }
}

#[derive(Debug, Clone)]
struct Layer {
    input_norm: Tensor<1>,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    q_norm: Option<Tensor<1>>,
    k_norm: Option<Tensor<1>>,
    post_norm: Tensor<1>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// RMSNorm over the last axis of `x: [n, d]`, computed in f32 and scaled by `w` in `x`'s dtype
/// (as transformers does).
fn rms_norm(x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
    let dtype = x.dtype();
    let x = x.cast(DType::F32);
    let scale = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip();
    (x * scale).cast(dtype) * w.clone().unsqueeze::<2>()
}

/// The pools of every layer and the allocator of their rows (one row per token, shared by all
/// layers).
pub struct KvCache {
    k: Vec<Option<Tensor<3>>>,
    v: Vec<Option<Tensor<3>>>,
    /// The rows of the pools, per sequence.
    pub slots: SlotAllocator,
    pool_rows: usize,
}

impl KvCache {
    /// Rows of each pool.
    pub fn pool_rows(&self) -> usize {
        self.pool_rows
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

/// The batched attention of a step's single-token (decode) sequences.
struct DecodePlan {
    /// Their batch rows `[B]`.
    rows: Tensor<1, Int>,
    /// Their pool rows `[B * L]` (padded).
    idx: Tensor<1, Int>,
    /// The padding `[B, 1, 1, L]` (true: masked).
    mask: Tensor<4, Bool>,
    /// B.
    batch: usize,
    /// L.
    len: usize,
}

/// The attention of one step, planned on the host once and used by every layer.
struct Plan {
    /// The decode sequences, batched.
    decode: Option<DecodePlan>,
    /// Per prefill sequence: its batch rows, its pool rows `[L]`, the causal mask
    /// `[1, 1, n, L]`.
    prefill: Vec<(Tensor<1, Int>, Tensor<1, Int>, Tensor<4, Bool>)>,
    /// Batch order of the concatenated outputs (decode first, then the prefills).
    order: Tensor<1, Int>,
    /// Batch row of each sequence's last token, in order of first appearance.
    last: Tensor<1, Int>,
}

/// A decoder's weights on one device.
pub struct Decoder {
    /// The architecture.
    pub config: DecoderConfig,
    embed: Tensor<2>,
    layers: Vec<Layer>,
    norm: Tensor<1>,
    lm_head: Tensor<2>,
    device: Device,
    dtype: DType,
    fused: bool,
}

fn ints<const D: usize>(values: Vec<i64>, dims: [usize; D], device: &Device) -> Tensor<D, Int> {
    Tensor::from_data(TensorData::new(values, dims), device)
}

fn bools<const D: usize>(values: Vec<bool>, dims: [usize; D], device: &Device) -> Tensor<D, Bool> {
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
        Self::build(
            config,
            &FromCheckpoint {
                checkpoint,
                device,
                dtype,
            },
        )
    }

    /// A decoder of `config` with random weights (normal, σ = 0.02; norms 1), for benchmarks.
    pub fn random(
        config: DecoderConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, DecoderError> {
        Self::build(config, &Random { device, dtype })
    }

    /// Builds the model from `weights`.
    fn build(config: DecoderConfig, weights: &impl Weights) -> Result<Self, DecoderError> {
        let (h, m) = (config.hidden_size, config.intermediate_size);
        let rope = &config.rope;
        let (q_out, kv_out) = (
            rope.num_qo_heads * rope.head_dim,
            rope.num_kv_heads * rope.head_dim,
        );
        let mut layers = Vec::with_capacity(config.num_layers);
        for l in 0..config.num_layers {
            let p = format!("model.layers.{l}");
            let norm = |name: &str, n: usize| weights.norm(&format!("{p}.{name}.weight"), n);
            let linear = |name: &str, i: usize, o: usize, bias: bool| {
                weights.linear(&format!("{p}.{name}"), i, o, bias)
            };
            let qk_norm = |which: &str| {
                config
                    .qk_norm
                    .then(|| norm(&format!("self_attn.{which}_norm"), rope.head_dim))
                    .transpose()
            };
            layers.push(Layer {
                input_norm: norm("input_layernorm", h)?,
                q: linear("self_attn.q_proj", h, q_out, config.qkv_bias)?,
                k: linear("self_attn.k_proj", h, kv_out, config.qkv_bias)?,
                v: linear("self_attn.v_proj", h, kv_out, config.qkv_bias)?,
                o: linear("self_attn.o_proj", q_out, h, config.o_bias)?,
                q_norm: qk_norm("q")?,
                k_norm: qk_norm("k")?,
                post_norm: norm("post_attention_layernorm", h)?,
                gate: linear("mlp.gate_proj", h, m, false)?,
                up: linear("mlp.up_proj", h, m, false)?,
                down: linear("mlp.down_proj", m, h, false)?,
            });
        }
        let embed = weights.embed(config.vocab_size, h)?;
        let lm_head = if config.tie_word_embeddings {
            embed.clone().transpose()
        } else {
            weights.linear("lm_head", h, config.vocab_size, false)?.w
        };
        Ok(Self {
            embed,
            layers,
            norm: weights.norm("model.norm.weight", h)?,
            lm_head,
            device: weights.device().clone(),
            dtype: weights.dtype(),
            fused: true,
            config,
        })
    }

    /// Runs RoPE and the pool writes with the fused op (the default) or, for comparison, with
    /// plain Burn tensor ops ([`rope_pool_unfused`]).
    pub fn with_fused(mut self, fused: bool) -> Self {
        self.fused = fused;
        self
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Empty pools of `pool_rows` rows for every layer.
    pub fn new_cache(&self, pool_rows: usize) -> KvCache {
        let rope = &self.config.rope;
        let shape = [pool_rows, rope.num_kv_heads, rope.head_dim];
        let zeros = || Some(Tensor::<3>::zeros(shape, (&self.device, self.dtype)));
        KvCache {
            k: (0..self.layers.len()).map(|_| zeros()).collect(),
            v: (0..self.layers.len()).map(|_| zeros()).collect(),
            slots: SlotAllocator::new(pool_rows),
            pool_rows,
        }
    }

    /// Runs one step: `tokens` of several sequences, each sequence's tokens contiguous and in
    /// position order, continuing where its rows in the pool end (a new sequence starts at
    /// position 0). Allocates one pool row per token (all or nothing) and returns the logits
    /// `[S, vocab]` of each sequence's last token, sequences in order of first appearance.
    pub fn step(
        &self,
        tokens: &[StepToken],
        cache: &mut KvCache,
    ) -> Result<Tensor<2>, DecoderError> {
        if tokens.is_empty() {
            return Err(DecoderError::Step("no tokens".into()));
        }
        if let Some(t) = tokens
            .iter()
            .find(|t| t.token as usize >= self.config.vocab_size)
        {
            return Err(DecoderError::Step(format!(
                "token id {} is outside the vocabulary of {}",
                t.token, self.config.vocab_size
            )));
        }
        // Sequences in order, each a contiguous run continuing its rows.
        let mut groups: Vec<(SeqId, Vec<usize>)> = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            match groups.last_mut() {
                Some((seq, rows)) if *seq == t.seq => rows.push(i),
                _ => {
                    if groups.iter().any(|(s, _)| *s == t.seq) {
                        return Err(DecoderError::Step(format!(
                            "the tokens of sequence {} are not contiguous",
                            t.seq
                        )));
                    }
                    groups.push((t.seq, vec![i]));
                }
            }
        }
        for (seq, rows) in &groups {
            let held = cache.slots.rows(*seq).map_or(0, <[i32]>::len);
            for (k, &i) in rows.iter().enumerate() {
                if tokens[i].position != held + k {
                    return Err(DecoderError::Step(format!(
                        "sequence {seq}: token at position {} where position {} comes next",
                        tokens[i].position,
                        held + k
                    )));
                }
            }
        }
        if tokens.len() > cache.slots.available() {
            return Err(KvPoolError::Exhausted {
                requested: tokens.len(),
                available: cache.slots.available(),
            }
            .into());
        }
        let mut slots = Vec::with_capacity(tokens.len());
        for (seq, rows) in &groups {
            slots.extend(
                cache
                    .slots
                    .allocate(*seq, rows.len())?
                    .iter()
                    .map(|&r| r as i64),
            );
        }
        let result = self.run_step(tokens, &groups, slots, cache);
        if result.is_err() {
            // The step stored nothing a later step reads: give its rows back.
            for (seq, rows) in &groups {
                cache.slots.free_last(*seq, rows.len())?;
            }
        }
        result
    }

    /// The layers of [`Decoder::step`] on tokens whose rows are allocated (`slots`).
    fn run_step(
        &self,
        tokens: &[StepToken],
        groups: &[(SeqId, Vec<usize>)],
        slots: Vec<i64>,
        cache: &mut KvCache,
    ) -> Result<Tensor<2>, DecoderError> {
        let plan = self.plan(tokens, groups, &cache.slots);

        let device = &self.device;
        let t = tokens.len();
        let rope = &self.config.rope;
        let (hq, hkv, d) = (rope.num_qo_heads, rope.num_kv_heads, rope.head_dim);
        let ids = ints(tokens.iter().map(|t| t.token as i64).collect(), [t], device);
        let positions = ints(
            tokens.iter().map(|t| t.position as i64).collect(),
            [t],
            device,
        );
        let slots = ints(slots, [t], device);
        let eps = self.config.rms_norm_eps;
        let mut x = self.embed.clone().select(0, ids);
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(x.clone(), &layer.input_norm, eps);
            let head_norm = |y: Tensor<2>, heads: usize, w: &Option<Tensor<1>>| match w {
                Some(w) => rms_norm(y.reshape([t * heads, d]), w, eps).reshape([t, heads, d]),
                None => y.reshape([t, heads, d]),
            };
            let q = head_norm(layer.q.forward(h.clone()), hq, &layer.q_norm);
            let k = head_norm(layer.k.forward(h.clone()), hkv, &layer.k_norm);
            let v = layer.v.forward(h).reshape([t, hkv, d]);
            let (k_pool, v_pool) = (&mut cache.k[l], &mut cache.v[l]);
            let q_rot = if self.fused {
                let positions = positions.clone();
                rope_pool_in_pools(q, k, v, positions, slots.clone(), k_pool, v_pool, rope)?.0
            } else {
                let (Some(kp), Some(vp)) = (k_pool.take(), v_pool.take()) else {
                    return Err(DecoderError::Step("the cache lost its pools".into()));
                };
                if let Err(e) =
                    check_rope_pool_fused(&q, &k, &v, &positions, &slots, &kp, &vp, rope)
                {
                    (*k_pool, *v_pool) = (Some(kp), Some(vp));
                    return Err(e.into());
                }
                let out =
                    rope_pool_unfused(q, k, v, positions.clone(), slots.clone(), kp, vp, rope);
                (*k_pool, *v_pool) = (Some(out.k_pool), Some(out.v_pool));
                out.q_rot
            };
            let (Some(k_pool), Some(v_pool)) = (k_pool.as_ref(), v_pool.as_ref()) else {
                return Err(DecoderError::Step("the cache lost its pools".into()));
            };
            let attended = self.attend(q_rot, k_pool, v_pool, &plan);
            x = x + layer.o.forward(attended);
            let h = rms_norm(x.clone(), &layer.post_norm, eps);
            let mlp = silu(layer.gate.forward(h.clone())) * layer.up.forward(h);
            x = x + layer.down.forward(mlp);
        }
        let last = rms_norm(x.select(0, plan.last), &self.norm, eps);
        Ok(last.matmul(self.lm_head.clone()))
    }

    /// The step's attention plan (host index work, one upload per tensor).
    fn plan(
        &self,
        tokens: &[StepToken],
        groups: &[(SeqId, Vec<usize>)],
        slots: &SlotAllocator,
    ) -> Plan {
        let device = &self.device;
        let rows_of = |seq: SeqId| slots.rows(seq).unwrap_or(&[]);
        let decode: Vec<&(SeqId, Vec<usize>)> =
            groups.iter().filter(|(_, r)| r.len() == 1).collect();
        let mut order_src: Vec<usize> = Vec::with_capacity(tokens.len());
        let decode = (!decode.is_empty()).then(|| {
            let b = decode.len();
            let l = decode
                .iter()
                .map(|(s, _)| rows_of(*s).len())
                .max()
                .unwrap_or(1);
            let (mut idx, mut mask) = (Vec::with_capacity(b * l), Vec::with_capacity(b * l));
            for (seq, rows) in &decode {
                order_src.push(rows[0]);
                let held = rows_of(*seq);
                for j in 0..l {
                    idx.push(*held.get(j).unwrap_or(&held[0]) as i64);
                    mask.push(j >= held.len());
                }
            }
            let batch_rows = decode.iter().map(|(_, r)| r[0] as i64).collect();
            DecodePlan {
                rows: ints(batch_rows, [b], device),
                idx: ints(idx, [b * l], device),
                mask: bools(mask, [b, 1, 1, l], device),
                batch: b,
                len: l,
            }
        });
        let mut prefill = Vec::new();
        for (seq, rows) in groups.iter().filter(|(_, r)| r.len() > 1) {
            let held = rows_of(*seq);
            let (n, l) = (rows.len(), held.len());
            let mask = rows
                .iter()
                .flat_map(|&i| (0..l).map(move |j| j > tokens[i].position))
                .collect();
            order_src.extend(rows);
            prefill.push((
                ints(rows.iter().map(|&i| i as i64).collect(), [n], device),
                ints(held.iter().map(|&r| r as i64).collect(), [l], device),
                bools(mask, [1, 1, n, l], device),
            ));
        }
        let mut order = vec![0i64; tokens.len()];
        for (at, &i) in order_src.iter().enumerate() {
            order[i] = at as i64;
        }
        let last = groups
            .iter()
            .map(|(_, r)| *r.last().unwrap() as i64)
            .collect();
        Plan {
            decode,
            prefill,
            order: ints(order, [tokens.len()], device),
            last: ints(last, [groups.len()], device),
        }
    }

    /// Scaled dot-product attention of `q: [B, Hq, n, D]` over `k, v: [B, Hkv, L, D]` with GQA
    /// and `mask` (true: masked) `[B, 1, n, L]`; returns `[B, Hq, n, D]`.
    fn sdpa(&self, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, mask: Tensor<4, Bool>) -> Tensor<4> {
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

    /// Attention of the step's rotated queries `[T, Hq, D]` over the pools; `[T, Hq * D]`.
    fn attend(
        &self,
        q: Tensor<3>,
        k_pool: &Tensor<3>,
        v_pool: &Tensor<3>,
        plan: &Plan,
    ) -> Tensor<2> {
        let [_, hq, d] = q.dims();
        let hkv = k_pool.dims()[1];
        let mut parts = Vec::new();
        if let Some(DecodePlan {
            rows,
            idx,
            mask,
            batch: b,
            len: l,
        }) = &plan.decode
        {
            let gather = |pool: &Tensor<3>| {
                pool.clone()
                    .select(0, idx.clone())
                    .reshape([*b, *l, hkv, d])
                    .swap_dims(1, 2)
            };
            let q = q.clone().select(0, rows.clone()).reshape([*b, hq, 1, d]);
            let out = self.sdpa(q, gather(k_pool), gather(v_pool), mask.clone());
            parts.push(out.reshape([*b, hq * d]));
        }
        for (rows, held, mask) in &plan.prefill {
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
            let out = self.sdpa(q, gather(k_pool), gather(v_pool), mask.clone());
            parts.push(out.reshape([hq, n, d]).swap_dims(0, 1).reshape([n, hq * d]));
        }
        Tensor::cat(parts, 0).select(0, plan.order.clone())
    }
}

/// Where [`Decoder::build`] takes its weights from.
trait Weights {
    fn device(&self) -> &Device;
    fn dtype(&self) -> DType;
    /// A norm's weight `[n]`.
    fn norm(&self, name: &str, n: usize) -> Result<Tensor<1>, DecoderError>;
    /// Projection `name` (`name.weight`, `name.bias`) from `i` to `o` features.
    fn linear(&self, name: &str, i: usize, o: usize, bias: bool) -> Result<Linear, DecoderError>;
    /// The embedding matrix `[vocab, hidden]`.
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError>;
}

struct FromCheckpoint<'a> {
    checkpoint: &'a Checkpoint,
    device: &'a Device,
    dtype: DType,
}

impl Weights for FromCheckpoint<'_> {
    fn device(&self) -> &Device {
        self.device
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn norm(&self, name: &str, n: usize) -> Result<Tensor<1>, DecoderError> {
        Ok(self.checkpoint.tensor(name, [n], self.device, self.dtype)?)
    }
    fn linear(&self, name: &str, i: usize, o: usize, bias: bool) -> Result<Linear, DecoderError> {
        // HF stores projections `[out, in]`; the decoder multiplies by `[in, out]`.
        let w = self
            .checkpoint
            .tensor(&format!("{name}.weight"), [o, i], self.device, self.dtype)?
            .transpose();
        let b = bias
            .then(|| self.norm(&format!("{name}.bias"), o))
            .transpose()?;
        Ok(Linear { w, b })
    }
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError> {
        let name = "model.embed_tokens.weight";
        Ok(self
            .checkpoint
            .tensor(name, [vocab, hidden], self.device, self.dtype)?)
    }
}

struct Random<'a> {
    device: &'a Device,
    dtype: DType,
}

impl Weights for Random<'_> {
    fn device(&self) -> &Device {
        self.device
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn norm(&self, _: &str, n: usize) -> Result<Tensor<1>, DecoderError> {
        Ok(Tensor::ones([n], (self.device, self.dtype)))
    }
    fn linear(&self, _: &str, i: usize, o: usize, bias: bool) -> Result<Linear, DecoderError> {
        let normal = Distribution::Normal(0.0, 0.02);
        Ok(Linear {
            w: Tensor::random([i, o], normal, (self.device, self.dtype)),
            b: bias.then(|| Tensor::zeros([o], (self.device, self.dtype))),
        })
    }
    fn embed(&self, vocab: usize, hidden: usize) -> Result<Tensor<2>, DecoderError> {
        let normal = Distribution::Normal(0.0, 0.02);
        Ok(Tensor::random(
            [vocab, hidden],
            normal,
            (self.device, self.dtype),
        ))
    }
}
