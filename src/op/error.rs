//! The errors of the op: one variant per documented message.

use crate::common::pool_tensor::Fp8PoolError;
use burn::tensor::DType;
use core::fmt;

/// A tensor shape that prints as `[a, b, c]`, the form the error messages use.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dims(pub Vec<usize>);

impl fmt::Display for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl<const D: usize> From<[usize; D]> for Dims {
    fn from(dims: [usize; D]) -> Self {
        Dims(dims.to_vec())
    }
}

/// Why a call was refused, or a config could not be read. A call is checked before any kernel
/// runs, in the order of the variants below (`docs/CONTRACT.md` numbers the checks); nothing is
/// written when one is returned. Two variants come from elsewhere too: [`RopePoolError::ReadBack`]
/// also reports a failed read of outputs (the golden runner), and [`RopePoolError::ModelConfig`]
/// comes only from reading a `config.json`
/// ([`RopePoolConfig::from_hf_config`](crate::RopePoolConfig::from_hf_config)). `Display` gives
/// the documented text.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RopePoolError {
    /// One of q, k, v is not 3-D.
    #[error("rope_pool_fused expects q/k/v to be 3-D")]
    QkvRank {
        /// q's shape.
        q: Dims,
        /// k's shape.
        k: Dims,
        /// v's shape.
        v: Dims,
    },
    /// positions or slots is not 1-D.
    #[error("rope_pool_fused expects positions/slots to be 1-D")]
    IndexRank {
        /// positions' shape.
        positions: Dims,
        /// slots' shape.
        slots: Dims,
    },
    /// With M-RoPE, `positions` is not `[3, num_tokens]` (check 14).
    #[error("positions must be [3, num_tokens] for mrope, got {positions}")]
    MropePositions {
        /// positions' shape.
        positions: Dims,
    },
    /// k_pool or v_pool is not 3-D.
    #[error("rope_pool_fused expects pool tensors to be 3-D")]
    PoolRank {
        /// k_pool's shape.
        k_pool: Dims,
        /// v_pool's shape.
        v_pool: Dims,
    },
    /// q's head count or head size differs from the config.
    #[error("q shape must be [num_tokens, num_qo_heads, head_dim], got {q}")]
    QShape {
        /// q's shape.
        q: Dims,
    },
    /// k's token count, head count or head size is off.
    #[error("k shape must be [num_tokens, num_kv_heads, head_dim], got {k}")]
    KShape {
        /// k's shape.
        k: Dims,
    },
    /// v's shape differs from k's.
    #[error("v shape must match k shape, got {v} vs {k}")]
    VShape {
        /// v's shape.
        v: Dims,
        /// k's shape.
        k: Dims,
    },
    /// positions or slots does not have one entry per token.
    #[error("positions/slots must have one entry per token")]
    IndexLen {
        /// Tokens in the call (q's first dimension).
        num_tokens: usize,
        /// Entries of positions (its last dimension).
        positions: usize,
        /// Entries of slots.
        slots: usize,
    },
    /// k_pool's head count or head size differs from the config.
    #[error("k_pool has incompatible shape {k_pool}")]
    KPoolShape {
        /// k_pool's shape.
        k_pool: Dims,
    },
    /// v_pool's shape differs from k_pool's.
    #[error("v_pool shape must match k_pool shape, got {v_pool} vs {k_pool}")]
    VPoolShape {
        /// v_pool's shape.
        v_pool: Dims,
        /// k_pool's shape.
        k_pool: Dims,
    },
    /// q, k and v do not share one dtype.
    #[error("q/k/v dtypes must match")]
    QkvDtype {
        /// q's dtype.
        q: DType,
        /// k's dtype.
        k: DType,
        /// v's dtype.
        v: DType,
    },
    /// A pool's dtype differs from q's.
    #[error("pool dtypes must match q/k/v dtype")]
    PoolDtype {
        /// The dtype of q/k/v.
        qkv: DType,
        /// k_pool's dtype.
        k_pool: DType,
        /// v_pool's dtype.
        v_pool: DType,
    },
    /// The pools' kinds or their fp8 settings are refused ([`Fp8PoolError`]).
    #[error(transparent)]
    Fp8Pool(#[from] Fp8PoolError),
    /// `head_dim` is odd or zero.
    #[error("head_dim must be even and > 0, got {head_dim}")]
    HeadDim {
        /// The config's head_dim.
        head_dim: usize,
    },
    /// A head count is zero.
    #[error("num_qo_heads and num_kv_heads must be > 0, got {num_qo_heads} and {num_kv_heads}")]
    HeadCount {
        /// The config's query head count.
        num_qo_heads: usize,
        /// The config's kv head count.
        num_kv_heads: usize,
    },
    /// `rope_base` is zero, negative, infinite or NaN.
    #[error("rope_base must be positive and finite, got {rope_base}")]
    RopeBase {
        /// The config's rope_base.
        rope_base: f64,
    },
    /// `rotary_dim` is odd, below 2 or above `head_dim` (check 12).
    #[error(
        "rotary_dim must be even and in 2..=head_dim, got {rotary_dim} for head_dim {head_dim}"
    )]
    RotaryDim {
        /// The rotary dimension.
        rotary_dim: usize,
        /// The config's head_dim.
        head_dim: usize,
    },
    /// The M-RoPE sections do not cover the rotated frequencies (check 13).
    #[error("mrope_section must sum to rotary_dim / 2, got {sum} for rotary_dim {rotary_dim}")]
    MropeSection {
        /// The sections' sum.
        sum: usize,
        /// The rotary dimension.
        rotary_dim: usize,
    },
    /// A scaling field is missing, not positive and finite, of the wrong length, or the
    /// `rope_type` is unknown; or the frequencies it yields are not finite (check 15).
    #[error("invalid rope scaling: {what}")]
    RopeScaling {
        /// What is wrong.
        what: String,
    },
    /// The float dtype is not one the op computes in.
    #[error("rope_pool_fused supports f32, f16 and bf16 tensors, got {dtype:?}")]
    FloatDtype {
        /// The dtype.
        dtype: DType,
    },
    /// A q/k norm weight is not `[head_dim]`.
    #[error("q_norm/k_norm weights must be [head_dim] = [{head_dim}], got {q_norm} and {k_norm}")]
    QkNormShape {
        /// The config's head_dim.
        head_dim: usize,
        /// q_norm's shape.
        q_norm: Dims,
        /// k_norm's shape.
        k_norm: Dims,
    },
    /// A q/k norm weight's dtype is not q's.
    #[error("q_norm/k_norm weight dtypes must match q/k/v dtype")]
    QkNormDtype {
        /// The dtype of q/k/v.
        qkv: DType,
        /// q_norm's dtype.
        q_norm: DType,
        /// k_norm's dtype.
        k_norm: DType,
    },
    /// `qk_norm_eps` is negative, NaN, or not finite once rounded to f32.
    #[error("qk_norm_eps must be >= 0 and finite in f32, got {eps}")]
    QkNormEps {
        /// The config's qk_norm_eps.
        eps: f64,
    },
    /// The fused q/k norm takes heads of at most 512 elements.
    #[error("the fused q/k norm supports head_dim up to 512, got {head_dim}")]
    QkNormHeadDim {
        /// The config's head_dim.
        head_dim: usize,
    },
    /// The tensors are not all on one device.
    #[error("all tensors must be on one device")]
    DeviceMismatch,
    /// The tensors live on a backend this build of the crate does not implement the op for.
    #[error(
        "rope_pool_fused is not available on {device}: enable the burn-rope-pool feature of that backend"
    )]
    UnsupportedBackend {
        /// The device, in its `Debug` form.
        device: String,
    },
    /// The device cannot compute in this dtype (e.g. bf16 on WGSL, which has no bf16 type).
    #[error("{dtype:?} is not supported on {device}")]
    DeviceDtype {
        /// The dtype.
        dtype: DType,
        /// The device, in its `Debug` form.
        device: String,
    },
    /// Checked mode: a position (of a 64-bit or `u32` tensor) does not fit i32 (a `u64` past
    /// `i64::MAX` shows as `i64::MAX`).
    #[error("position {position} at positions[{index}] is outside the i32 range")]
    PositionRange {
        /// Index into positions.
        index: usize,
        /// The position.
        position: i64,
    },
    /// A read-back failed: checked mode's slots or positions, or the golden runner's outputs.
    #[error("cannot read back from the device: {what}")]
    ReadBack {
        /// What is wrong.
        what: String,
    },
    /// Checked mode: a token's slot is past the end of the pool.
    #[error("slot {slot} of token {token} is outside the pool of {pool_size} rows")]
    SlotOutOfRange {
        /// The token (index into the call's batch).
        token: usize,
        /// The slot.
        slot: i64,
        /// Rows of the pool.
        pool_size: usize,
    },
    /// Checked mode: two tokens of the call write the same pool row.
    #[error("slot {slot} is written by both token {first} and token {second}")]
    DuplicateSlot {
        /// The slot.
        slot: i64,
        /// The first token naming the slot.
        first: usize,
        /// The second token naming it.
        second: usize,
    },
    /// A HuggingFace `config.json` lacks a field the op needs or holds one of the wrong kind.
    #[error("invalid model config: {what}")]
    ModelConfig {
        /// What is wrong.
        what: String,
    },
}
