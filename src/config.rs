//! The parameters of one `rope_pool_fused` call: what the user sets.

use crate::RopePoolError;
use crate::rope::{MRope, RopeFrequencies, RopeScaling, RopeStyle};
use burn::tensor::DType;
use std::sync::Arc;

/// Parameters of [`rope_pool_fused`](crate::rope_pool_fused): the head geometry the tensors must
/// have, the RoPE variant (base θ, pair style, rotary dimension, frequency scaling, M-RoPE), and
/// whether slots are checked on the host before the launch. A model's settings come in one line
/// from its `config.json` ([`RopePoolConfig::from_hf_config`]).
///
/// ```
/// use burn_rope_pool::{RopePoolConfig, RopeScaling, RopeStyle};
/// // Llama-3-8B: 32 query heads, 8 kv heads, head_dim 128, θ = 500000.
/// let config = RopePoolConfig::new(128, 32, 8).with_rope_base(500_000.0);
/// assert_eq!(config.rotary_dim(), 128);
/// // GPT-J-6B: interleaved pairs over the first 64 of 256 elements.
/// let gptj = RopePoolConfig::new(256, 16, 16)
///     .with_style(RopeStyle::Gptj)
///     .with_rotary_dim(64);
/// // Llama-2 with linear position interpolation.
/// let linear = RopePoolConfig::new(128, 32, 32).with_scaling(RopeScaling::Linear { factor: 4.0 });
/// ```
#[derive(Clone, Debug, PartialEq, derive_new::new)]
pub struct RopePoolConfig {
    /// Elements per head; even.
    pub head_dim: usize,
    /// Query (and output) heads per token.
    pub num_qo_heads: usize,
    /// Key/value heads per token (equal to `num_qo_heads` for MHA, fewer for GQA).
    pub num_kv_heads: usize,
    /// RoPE base θ: `inv_freq[i] = θ ^ (-2i / rotary_dim)` before scaling. Defaults to 10000.
    #[new(value = "10000.0")]
    pub rope_base: f64,
    /// Which elements form a pair (NeoX halves by default, or GPT-J's interleaved pairs).
    #[new(default)]
    pub style: RopeStyle,
    /// Elements rotated per head, from the start of the head (even, `2..=head_dim`); the rest
    /// pass through unchanged. `None`: the whole head.
    #[new(default)]
    pub rotary_dim: Option<usize>,
    /// Frequency scaling (`linear`, `llama3`, `yarn`, `longrope`); none by default.
    #[new(default)]
    pub scaling: RopeScaling,
    /// M-RoPE sections: `positions` is then `[3, num_tokens]`.
    #[new(default)]
    pub mrope: Option<MRope>,
    /// Rounds the inverse frequencies (after scaling) to this float dtype before use, as
    /// transformers does when it holds its rotary `inv_freq` buffer in a bf16 or f16 checkpoint's
    /// dtype; `None` (the default): float64 frequencies.
    #[new(default)]
    pub inv_freq_dtype: Option<DType>,
    /// Checked mode: read the slots back to the host before the launch and report a slot past
    /// the pool, or a slot used twice, as an error; positions of a 64-bit or `u32` tensor are
    /// read back too and one outside the i32 range is an error. Off by default (it costs a
    /// device sync). Without it such slots are still never written outside the pool, and a
    /// position outside i32 is taken as its low 32 bits (as an i32: the rotation of that
    /// position; every i32 position, negative ones included, rotates exactly).
    #[new(value = "false")]
    pub check_slots: bool,
    /// Whether the call returns the rotated keys. On (the default) `k_rot` is `[T, Hkv, D]`;
    /// off, the kernel writes the rotated keys only into the pool rows and `k_rot` comes back
    /// empty (`[0, Hkv, D]`): one output less to allocate and write, for callers that read keys
    /// from the pool only (the attention layer, the decoder).
    #[new(value = "true")]
    pub k_rot: bool,
}

impl RopePoolConfig {
    /// Sets the RoPE base θ.
    pub fn with_rope_base(mut self, rope_base: f64) -> Self {
        self.rope_base = rope_base;
        self
    }

    /// Sets the pair style.
    pub fn with_style(mut self, style: RopeStyle) -> Self {
        self.style = style;
        self
    }

    /// Rotates only the first `rotary_dim` elements of each head.
    pub fn with_rotary_dim(mut self, rotary_dim: usize) -> Self {
        self.rotary_dim = Some(rotary_dim);
        self
    }

    /// Sets the frequency scaling.
    pub fn with_scaling(mut self, scaling: RopeScaling) -> Self {
        self.scaling = scaling;
        self
    }

    /// Turns M-RoPE on with these sections.
    pub fn with_mrope(mut self, mrope: MRope) -> Self {
        self.mrope = Some(mrope);
        self
    }

    /// Rounds the inverse frequencies to `dtype` (see [`RopePoolConfig::inv_freq_dtype`]).
    pub fn with_inv_freq_dtype(mut self, dtype: DType) -> Self {
        self.inv_freq_dtype = Some(dtype);
        self
    }

    /// Returns the rotated keys or not (see [`RopePoolConfig::k_rot`]).
    pub fn with_k_rot(mut self, k_rot: bool) -> Self {
        self.k_rot = k_rot;
        self
    }

    /// Turns the checked mode (see [`RopePoolConfig::check_slots`]) on or off.
    pub fn with_check_slots(mut self, check_slots: bool) -> Self {
        self.check_slots = check_slots;
        self
    }

    /// Elements rotated per head: `rotary_dim`, or `head_dim` when unset.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim.unwrap_or(self.head_dim)
    }

    /// The frequencies of this config (float64, and the kernel's table), checked and cached per
    /// process: the errors of checks 12, 13 and 15 of the contract come from here.
    pub fn frequencies(&self) -> Result<Arc<RopeFrequencies>, RopePoolError> {
        RopeFrequencies::of(self)
    }
}
