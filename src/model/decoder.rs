//! A Llama-family decoder on the fused op (Llama 2/3/3.1, Mistral, Qwen2, Qwen3): embeddings,
//! RMSNorm, attention (q/k/v/o projections with the checkpoint's biases, Qwen3's per-head q/k
//! RMSNorm before RoPE, GQA), SwiGLU MLP, final norm and LM head (tied or not). Each layer's keys
//! and values live in a token-slot pool written by [`rope_pool_fused`](crate::rope_pool_fused);
//! one [`Decoder::step`] runs a ragged batch — prefill and decode tokens of several sequences
//! together — and [`pool_attention`] reads the pool rows of each token's sequence in place (one
//! plan per step, used by every layer).

use crate::model::kernels::{
    add_rms_norm, add_rms_norm_tensor_ops, rms_norm, rms_norm_tensor_ops, silu_mul,
    silu_mul_tensor_ops,
};
use crate::model::weights::{FromCheckpoint, Layer, Linear, Weights};
use crate::model::{Checkpoint, CheckpointError, DecoderConfig};
use crate::op::unfused::rope_pool_unfused;
use crate::op::{
    Fp8PoolError, PoolTensor, RefusedCall, RopePoolError, RopePoolInputs, check_fp8_settings,
    check_rope_pool_fused, try_rope_pool_fused,
};
use crate::pool::{
    KvPoolError, PoolAttentionConfig, PoolAttentionError, PoolAttentionInputs, PoolAttentionPlan,
    SeqId, SlotAllocator, check_pool_memory, pool_attention, pool_bytes,
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
    /// The pool has too few free rows (or a sequence is unknown).
    #[error(transparent)]
    Pool(#[from] KvPoolError),
    /// Attention over the pool refused the step.
    #[error(transparent)]
    Attention(#[from] PoolAttentionError),
    /// A step's tokens are not in the order [`Decoder::step`] takes them.
    #[error("invalid step: {0}")]
    Step(String),
}

/// The pools of every layer and the allocator of their rows (one row per token, shared by all
/// layers).
pub struct KvCache {
    k: Vec<Option<PoolTensor>>,
    v: Vec<Option<PoolTensor>>,
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
    fused: bool,
    fp8_cache: Option<(f32, f32)>,
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
        let lm_head = if config.tie_word_embeddings {
            Linear {
                w_t: embed.clone(),
                b: None,
            }
        } else {
            weights.linear(&[("lm_head", config.vocab_size)], h, false)?
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
            fused: true,
            fp8_cache: None,
            config,
        })
    }

    /// Runs RoPE and the pool writes with the fused op (the default) or, for comparison, with
    /// plain Burn tensor ops ([`rope_pool_unfused`]).
    pub fn with_fused(mut self, fused: bool) -> Self {
        self.fused = fused;
        self
    }

    /// Caches made by [`Self::new_cache`] keep keys and values as fp8 e4m3 with these `(k_scale,
    /// v_scale)` ([`PoolTensor::Fp8`]: half the bytes of f16, and half the bytes attention reads
    /// each step), or in the weights' dtype (`None`, the default). Fused mode only: the unfused
    /// comparison path keeps float caches.
    pub fn with_fp8_cache(mut self, scales: Option<(f32, f32)>) -> Self {
        self.fp8_cache = scales;
        self
    }

    /// The fp8 scales of this decoder's caches, if they are fp8.
    fn fp8_scales(&self) -> Option<(f32, f32)> {
        self.fp8_cache.filter(|_| self.fused)
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The bytes of [`Self::new_cache`]`(pool_rows)`: keys and values of every layer (`None`
    /// past `u64::MAX`).
    pub fn cache_bytes(&self, pool_rows: usize) -> Option<u64> {
        let rope = &self.config.rope;
        let tensors = 2 * self.layers.len();
        // An fp8 pool holds one byte per element.
        let dtype = match self.fp8_scales() {
            Some(_) => DType::U8,
            None => self.dtype,
        };
        pool_bytes(pool_rows, rope.num_kv_heads, rope.head_dim, dtype, tensors)
    }

    /// Empty pools of `pool_rows` rows for every layer, refused before anything is allocated
    /// past i32 slots or past what the device can hold
    /// ([`memory_limit`](crate::pool::memory_limit)).
    pub fn new_cache(&self, pool_rows: usize) -> Result<KvCache, KvPoolError> {
        self.new_cache_within(pool_rows, None)
    }

    /// [`Self::new_cache`], also refused past `limit` bytes if given.
    pub(crate) fn new_cache_within(
        &self,
        pool_rows: usize,
        limit: Option<u64>,
    ) -> Result<KvCache, KvPoolError> {
        let tensors = 2 * self.layers.len() as u64;
        if let Some((k_scale, v_scale)) = self.fp8_scales() {
            let rope = &self.config.rope;
            let rotary_dim = Some(rope.rotary_dim());
            check_fp8_settings(rope.head_dim, rotary_dim, [k_scale, v_scale])
                .map_err(|e| KvPoolError::Op(e.into()))?;
        }
        let bytes = self.cache_bytes(pool_rows);
        check_pool_memory(&self.device, pool_rows, bytes, tensors, limit)?;
        let rope = &self.config.rope;
        let shape = [pool_rows, rope.num_kv_heads, rope.head_dim];
        let slots = SlotAllocator::try_new(pool_rows)?;
        let zeros = |fp8_scale: Option<f32>| {
            Some(match fp8_scale {
                Some(scale) => PoolTensor::fp8_zeros(shape, scale, &self.device),
                None => Tensor::<3>::zeros(shape, (&self.device, self.dtype)).into(),
            })
        };
        let scales = self.fp8_scales();
        Ok(KvCache {
            k: (0..self.layers.len())
                .map(|_| zeros(scales.map(|s| s.0)))
                .collect(),
            v: (0..self.layers.len())
                .map(|_| zeros(scales.map(|s| s.1)))
                .collect(),
            slots,
            pool_rows,
        })
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

    /// The step's attention plan: each sequence's batch rows (contiguous, in order) and every
    /// pool row it holds, its new tokens' last.
    fn attention_plan(
        &self,
        groups: &[(SeqId, Vec<usize>)],
        slots: &SlotAllocator,
    ) -> PoolAttentionPlan {
        let (mut qo, mut kv, mut indices) = (vec![0i64], vec![0i64], Vec::new());
        for (seq, rows) in groups {
            let held = slots.rows(*seq).unwrap_or(&[]);
            indices.extend(held.iter().map(|&r| r as i64));
            qo.push(qo[qo.len() - 1] + rows.len() as i64);
            kv.push(indices.len() as i64);
        }
        let data = |v: Vec<i64>| {
            let n = v.len();
            TensorData::new(v, [n])
        };
        PoolAttentionPlan::new(data(qo), data(kv), data(indices), &self.device)
    }

    /// The layers of [`Decoder::step`] on tokens whose rows are allocated (`slots`).
    fn run_step(
        &self,
        tokens: &[StepToken],
        groups: &[(SeqId, Vec<usize>)],
        slots: Vec<i64>,
        cache: &mut KvCache,
    ) -> Result<Tensor<2>, DecoderError> {
        let plan = self.attention_plan(groups, &cache.slots);
        let attention = PoolAttentionConfig::new(
            self.config.rope.num_qo_heads,
            self.config.rope.num_kv_heads,
            self.config.rope.head_dim,
        );
        let last: Vec<i64> = groups
            .iter()
            .map(|(_, rows)| rows.last().map_or(0, |&r| r as i64))
            .collect();
        let last = ints(last, [groups.len()], &self.device);

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
        // The unfused mode is Burn tensor ops throughout (the oracle); the fused one runs the
        // norm kernel where there is one.
        let fused = self.fused;
        let rms_norm = |x: Tensor<2>, w: &Tensor<1>, eps: f64| {
            if fused {
                rms_norm(x, w, eps)
            } else {
                rms_norm_tensor_ops(x, w, eps)
            }
        };
        // The residual add and the norm after it: one kernel in fused mode.
        let add_rms_norm = |x: Tensor<2>, y: Tensor<2>, w: &Tensor<1>| {
            if fused {
                add_rms_norm(x, y, w, eps)
            } else {
                add_rms_norm_tensor_ops(x, y, w, eps)
            }
        };
        let project = |linear: &Linear, x: Tensor<2>| {
            if fused {
                linear.forward(x)
            } else {
                linear.forward_matmul(x)
            }
        };
        let mut x = self.embed.clone().select(0, ids);
        // A layer's MLP output, added to the residual stream by the next layer's input norm.
        let mut mlp_out: Option<Tensor<2>> = None;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = match mlp_out.take() {
                Some(y) => {
                    let (sum, h) = add_rms_norm(x, y, &layer.input_norm);
                    x = sum;
                    h
                }
                None => rms_norm(x.clone(), &layer.input_norm, eps),
            };
            // One projection; q, k and v are views of its columns (the op reads them in place).
            let qkv = project(&layer.qkv, h);
            let (q_end, k_end) = (hq * d, (hq + hkv) * d);
            let q = qkv.clone().slice([0..t, 0..q_end]).reshape([t, hq, d]);
            let k = qkv.clone().slice([0..t, q_end..k_end]).reshape([t, hkv, d]);
            let v = qkv
                .slice([0..t, k_end..k_end + hkv * d])
                .reshape([t, hkv, d]);
            let (k_pool, v_pool) = (&mut cache.k[l], &mut cache.v[l]);
            let (Some(kp), Some(vp)) = (k_pool.take(), v_pool.take()) else {
                return Err(DecoderError::Step("the cache lost its pools".into()));
            };
            let mut inputs = RopePoolInputs::new(q, k, v, positions.clone(), slots.clone(), kp, vp);
            // Qwen3's per-head q/k norm runs inside the op (its epsilon is the config's
            // `rms_norm_eps`, read into the rope config).
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                inputs = inputs.with_qk_norm(qn.clone(), kn.clone());
            }
            // The pools go in as their only handles (updated in place) and come back either way.
            let out = if self.fused {
                try_rope_pool_fused(inputs, rope)
            } else {
                // The unfused path writes float pools only: an fp8 cache is refused, kept.
                let fp8 = inputs.k_pool.fp8_scale().is_some();
                match check_rope_pool_fused(&inputs, rope) {
                    Ok(()) if fp8 => Err(RefusedCall {
                        error: Fp8PoolError::Unfused.into(),
                        inputs: Box::new(inputs),
                    }),
                    Ok(()) => Ok(rope_pool_unfused(inputs, rope)),
                    Err(error) => Err(RefusedCall {
                        error,
                        inputs: Box::new(inputs),
                    }),
                }
            };
            let (q_rot, kp, vp) = match out {
                Ok(out) => (out.q_rot, out.k_pool, out.v_pool),
                Err(refused) => {
                    let RefusedCall { error, inputs } = refused;
                    (*k_pool, *v_pool) = (Some(inputs.k_pool), Some(inputs.v_pool));
                    return Err(error.into());
                }
            };
            let inputs = PoolAttentionInputs::new(q_rot, kp.clone(), vp.clone());
            let window = self.config.window(l);
            let attended = match window {
                None => pool_attention(inputs, &plan, &attention),
                Some(w) => {
                    let windowed = attention.clone().with_sliding_window(Some(w));
                    pool_attention(inputs, &plan, &windowed)
                }
            };
            (*k_pool, *v_pool) = (Some(kp), Some(vp));
            let attended = attended?.out.reshape([t, hq * d]);
            let (sum, h) = add_rms_norm(x, project(&layer.o, attended), &layer.post_norm);
            x = sum;
            let gate_up = project(&layer.gate_up, h);
            let mlp = if fused {
                silu_mul(gate_up)
            } else {
                silu_mul_tensor_ops(gate_up)
            };
            mlp_out = Some(project(&layer.down, mlp));
        }
        if let Some(y) = mlp_out {
            x = x + y;
        }
        let last = rms_norm(x.select(0, last), &self.norm, eps);
        Ok(project(&self.lm_head, last))
    }
}
