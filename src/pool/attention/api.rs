//! The public entry: the config, every check in the contract's order, one dispatch (one a run
//! of short or long sequences where a step mixes them).

use crate::Dims;
use crate::common::PoolTensor;
use crate::op::check_pool_kinds;
use crate::pool::attention::backend::{AttentionParams, AttentionTensors, PoolAttentionBackend};
use crate::pool::attention::{PoolAttentionError, PoolAttentionPlan};
use burn::backend::{Dispatch, DispatchDevice, TensorMetadata};
use burn::config::Config;
use burn::tensor::{DType, Device, DispatchTensor, Int, Tensor};
use rope_pool_kernels::attention::AttentionLaunch;
pub use rope_pool_kernels::common::fp8::Fp8Decode;

/// Parameters of [`pool_attention`]: the head geometry the tensors must have, the scale, the
/// mask (causal, sliding window) and the logits soft cap.
///
/// ```
/// use burn_rope_pool::pool::PoolAttentionConfig;
/// // Llama-3-8B's attention: 32 q heads over 8 kv heads of 128, causal.
/// let config = PoolAttentionConfig::new(32, 8, 128);
/// assert_eq!(config.scale(), 1.0 / 128f64.sqrt());
/// // Gemma-2-style: a 4096-token window and a soft cap of 50.
/// let gemma = PoolAttentionConfig::new(8, 4, 256)
///     .with_sliding_window(Some(4096))
///     .with_logits_soft_cap(Some(50.0));
/// ```
#[derive(Config, Debug, PartialEq)]
pub struct PoolAttentionConfig {
    /// Query (and output) heads per token; a multiple of `num_kv_heads`.
    pub num_qo_heads: usize,
    /// Key/value heads per pool row.
    pub num_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Scale of `q · k`; `None`: `1 / sqrt(head_dim)`.
    pub sm_scale: Option<f64>,
    /// Query `i` of a sequence sees keys up to its own position only.
    #[config(default = true)]
    pub causal: bool,
    /// A window `W`: a query at position `p` sees keys after `p - W` only.
    pub sliding_window: Option<usize>,
    /// Scores become `cap * tanh(score / cap)` (Gemma 2).
    pub logits_soft_cap: Option<f64>,
    /// Checked mode: an entry of `kv_indices` outside the pool is an error (without it, such a
    /// key is never read: it is masked).
    #[config(default = false)]
    pub check_indices: bool,
    /// Tests and diagnostics: on CubeCL devices, run the portable attention kernel even where
    /// the device has plane operations (the kernel otherwise kept for devices without them; same
    /// results within f32 rounding, slower). Flex has one path and ignores it.
    #[config(default = false)]
    pub portable_kernel: bool,
    /// Tests and diagnostics: on CubeCL devices, `Some(true)` runs the query-tile kernel for
    /// every call whose `head_dim` is a multiple of 16 (its tile products on tensor cores for f16
    /// queries on devices with f16 16 × 16 × 16 tiles and planes of 32, in f32 by the GPU's units
    /// otherwise), `Some(false)` never; `None`, the normal launch, runs it for f16 prefill on
    /// such devices (the conditions: CONTRACT, `pool_attention`, Math). Through CubeCL's CUDA
    /// runtime, f16 queries over f16 or fp8 pools with a head a multiple of 32 up to 128 take its flash
    /// form (warp-level `mma.sync` products, the softmax in registers). `portable_kernel` wins
    /// over it. Flex has one path and ignores it.
    pub query_tiles: Option<bool>,
    /// Tests and diagnostics: through CubeCL's CUDA runtime, `None` (the normal launch) and
    /// `Some(true)` run the head-tile kernel (a GQA group's heads as the rows of warp-level
    /// tensor-core products) for every call it takes: f16 queries, a head of 64 or 128, at most
    /// 16 q heads a kv head, a device with f16 `mma.sync` 16 × 8 × 16; `Some(false)` never (the
    /// plane kernel instead). The query-tile kernel (prefill) and `portable_kernel` win over it.
    /// Other backends ignore it.
    pub head_tiles: Option<bool>,
    /// Tests and diagnostics: how fp8 pools are decoded on CubeCL devices; `None`, the normal
    /// launch, takes CubeCL's fp8 type where the device lists e4m3 tensor-core tiles (a sign of
    /// a hardware conversion), else f16 halves on NVIDIA GPUs through SPIR-V, else integer
    /// arithmetic (CONTRACT, `pool_attention`, Math). A device without f16 always takes
    /// integers, and halves asked of another device take integers. The same values every way.
    /// The head-tile kernel and the query tiles' flash form always decode to f16 halves; Flex
    /// has one path. They ignore it.
    pub fp8_decode: Option<Fp8Decode>,
}

impl PoolAttentionConfig {
    /// The scale of the dot products: `sm_scale`, or `1 / sqrt(head_dim)`.
    pub fn scale(&self) -> f64 {
        self.sm_scale
            .unwrap_or(1.0 / (self.head_dim.max(1) as f64).sqrt())
    }
}

/// The tensors of a call: `q [T, Hq, D]` (typically the rotated queries of `rope_pool_fused`)
/// and the pools `[P, Hkv, D]` it wrote, of q's dtype, or fp8 ([`PoolTensor::Fp8`]: decoded in
/// registers, f32 math). Build it with [`PoolAttentionInputs::new`]; callers whose tensors may
/// have the wrong rank set the fields from [`Tensor::into_dispatch`].
#[derive(Debug)]
pub struct PoolAttentionInputs {
    /// Queries.
    pub q: DispatchTensor,
    /// Key pool.
    pub k_pool: PoolTensor,
    /// Value pool.
    pub v_pool: PoolTensor,
}

impl PoolAttentionInputs {
    /// The inputs of a call (the pools are read, never written: pass clones of the handles); a
    /// pool is a `Tensor<3>` or a [`PoolTensor`].
    pub fn new(q: Tensor<3>, k_pool: impl Into<PoolTensor>, v_pool: impl Into<PoolTensor>) -> Self {
        Self {
            q: q.into_dispatch(),
            k_pool: k_pool.into(),
            v_pool: v_pool.into(),
        }
    }
}

/// The outputs of [`pool_attention`].
#[derive(Clone, Debug)]
pub struct PoolAttentionOutputs {
    /// `[T, Hq, D]`, q's dtype; zeros for a query that sees no key.
    pub out: Tensor<3>,
    /// `[T, Hq]`, f32: `log(sum_j exp(s_j))` (natural log), `-inf` for a query that sees no key.
    pub lse: Tensor<2>,
}

fn dims(t: &DispatchTensor) -> Dims {
    Dims(t.shape().to_vec())
}

/// The kernels compute in f32: a parameter must be positive and finite there too.
fn positive(name: &str, value: Option<f64>) -> Result<(), PoolAttentionError> {
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(PoolAttentionError::Parameter {
            what: format!("{name} must be positive and finite, got {v}"),
        }),
        Some(v) if !((v as f32).is_finite() && v as f32 > 0.0) => {
            Err(PoolAttentionError::Parameter {
                what: format!("{name} must be positive and finite in f32, got {v:e}"),
            })
        }
        _ => Ok(()),
    }
}

/// The largest `head_dim` the op runs (the kernels hold a head row per unit group in
/// registers and shared memory; 512 covers every model we know of).
pub const MAX_HEAD_DIM: usize = 512;

/// Checks 16 to 26, in order, then the dtype, device and checked-mode checks.
fn check(
    inputs: &PoolAttentionInputs,
    plan: &PoolAttentionPlan,
    config: &PoolAttentionConfig,
) -> Result<(), PoolAttentionError> {
    let q = dims(&inputs.q);
    let [k_pool, v_pool] = [&inputs.k_pool, &inputs.v_pool].map(|p| dims(p.stored()));
    if [&q, &k_pool, &v_pool].iter().any(|d| d.0.len() != 3) {
        return Err(PoolAttentionError::Rank { q, k_pool, v_pool });
    }
    plan.check_ranks()?;
    let (hq, hkv, d) = (config.num_qo_heads, config.num_kv_heads, config.head_dim);
    if q.0[1] != hq || q.0[2] != d {
        return Err(PoolAttentionError::QShape { q });
    }
    // The pools' kinds (fp8: their own checks), then their shapes: an fp8 pool stores a head
    // row as `head_dim / 4` words.
    let fp8 = check_pool_kinds(&inputs.k_pool, &inputs.v_pool, d, None)?;
    let row = if fp8 { d / 4 } else { d };
    if k_pool.0[1] != hkv || k_pool.0[2] != row {
        return Err(PoolAttentionError::KPoolShape { k_pool });
    }
    if v_pool != k_pool {
        return Err(PoolAttentionError::VPoolShape { v_pool, k_pool });
    }
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        return Err(PoolAttentionError::HeadRatio {
            num_qo_heads: hq,
            num_kv_heads: hkv,
        });
    }
    plan.check_indptr(q.0[0], config.causal)?;
    let dtypes = [
        inputs.q.dtype(),
        inputs.k_pool.stored_dtype(),
        inputs.v_pool.stored_dtype(),
    ];
    if !fp8 && (dtypes[1] != dtypes[0] || dtypes[2] != dtypes[0]) {
        return Err(PoolAttentionError::Dtype {
            q: dtypes[0],
            k_pool: dtypes[1],
            v_pool: dtypes[2],
        });
    }
    positive("sm_scale", config.sm_scale)?;
    positive("logits_soft_cap", config.logits_soft_cap)?;
    let parameter = |what: &str| {
        Err(PoolAttentionError::Parameter {
            what: what.to_string(),
        })
    };
    if config.sliding_window == Some(0) {
        return parameter("sliding_window must be at least 1");
    }
    if d == 0 || hq == 0 {
        return parameter("head_dim and num_qo_heads must be positive");
    }
    if d > MAX_HEAD_DIM {
        return parameter(&format!(
            "head_dim {d} is larger than {MAX_HEAD_DIM}, the most pool_attention runs"
        ));
    }
    if !matches!(dtypes[0], DType::F32 | DType::F16 | DType::BF16) {
        return Err(PoolAttentionError::FloatDtype { dtype: dtypes[0] });
    }
    let on = inputs.q.device();
    let plan_device = plan.device().as_dispatch().clone();
    let [k_on, v_on] = [&inputs.k_pool, &inputs.v_pool].map(|p| p.stored().device());
    if k_on != on || v_on != on || plan_device != on {
        return Err(PoolAttentionError::DeviceMismatch);
    }
    let device = Device::new(on.clone());
    check_backend(&on, &device)?;
    if !device.supports_dtype(dtypes[0]) {
        return Err(PoolAttentionError::DeviceDtype {
            dtype: dtypes[0],
            device: format!("{device:?}"),
        });
    }
    if config.check_indices {
        let pool_size = k_pool.0[0];
        if let Some((at, &index)) = plan
            .kv_indices()
            .iter()
            .enumerate()
            .find(|(_, r)| !u64::try_from(**r).is_ok_and(|r| r < pool_size as u64))
        {
            return Err(PoolAttentionError::IndexOutOfPool {
                index,
                at,
                pool_size,
            });
        }
    }
    Ok(())
}

/// Fails unless this build implements the op for the device's backend; Autodiff is refused
/// (inference only).
fn check_backend(on: &DispatchDevice, device: &Device) -> Result<(), PoolAttentionError> {
    let unsupported = |why: &str| {
        Err(PoolAttentionError::UnsupportedBackend {
            device: format!("{device:?}"),
            why: why.to_string(),
        })
    };
    match on {
        #[cfg(feature = "autodiff")]
        DispatchDevice::Autodiff(_) => {
            unsupported("it is inference only (no backward): run it on the inner backend")
        }
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(_) => Ok(()),
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => Ok(()),
        #[allow(unreachable_patterns)]
        _ => unsupported("enable the burn-rope-pool feature of that backend"),
    }
}

/// Where a call may be split into launches over runs of short and long sequences, the fewest
/// queries of a long sequence: a row tile of the query-tile kernels
/// ([`AttentionLaunch::query_tile_rows`]), for f16 queries on a CubeCL device with the query
/// tiles allowed (the only calls whose kernel a split can change); `None` elsewhere.
fn split_short_rows(q: &DispatchTensor, config: &PoolAttentionConfig) -> Option<usize> {
    let cube = match q.device() {
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(_) => true,
        #[allow(unreachable_patterns)]
        _ => false,
    };
    let tiles_allowed = !config.portable_kernel && config.query_tiles != Some(false);
    (cube && tiles_allowed && q.dtype() == DType::F16)
        .then(|| AttentionLaunch::query_tile_rows(config.num_qo_heads / config.num_kv_heads.max(1)))
}

/// Attention of the queries `q` over the pool rows `plan` names for each sequence (see
/// [`PoolAttentionPlan`]): for query `i` of a sequence with `n` queries and `L` keys, at
/// position `p = L - n + i`, over its visible keys `j` (`j <= p` when causal, `j > p - W` with a
/// window `W`), `s_j = sm_scale * q · k_j` (then `cap * tanh(s_j / cap)` with a soft cap),
/// `out = Σ softmax(s)_j v_j` and `lse = log Σ exp(s_j)`; q head `h` reads kv head
/// `h / (num_qo_heads / num_kv_heads)`. Arithmetic in f32, `out` rounded once to q's dtype.
///
/// Every argument is checked first (the contract's checks 16 to 26, then dtype, device and, in
/// checked mode, the indices); on error nothing runs. Without checked mode an index outside
/// the pool is never read: that key is masked. Inference only: Autodiff tensors are refused.
pub fn pool_attention(
    inputs: PoolAttentionInputs,
    plan: &PoolAttentionPlan,
    config: &PoolAttentionConfig,
) -> Result<PoolAttentionOutputs, PoolAttentionError> {
    check(&inputs, plan, config)?;
    let num_tokens = inputs.q.shape()[0];
    let ranges = plan.ranges(num_tokens, config.causal, config.sliding_window);
    let kv_indices = plan.indices_on_device().clone().into_dispatch();
    let params = AttentionParams {
        sm_scale: config.scale() as f32,
        soft_cap: config.logits_soft_cap.map(|c| c as f32),
        max_keys: ranges.max_keys,
        min_query_rows: ranges.min_query_rows,
        portable_kernel: config.portable_kernel,
        query_tiles: config.query_tiles,
        head_tiles: config.head_tiles,
        fp8_decode: config.fp8_decode,
    };
    // A step that mixes short and long sequences: one launch a run of each kind, each taking
    // the kernel its rows call for (every row's result is independent of the others).
    let parts = split_short_rows(&inputs.q, config)
        .map(|short_rows| plan.parts(&ranges, config.causal, config.sliding_window, short_rows))
        .filter(|parts| !parts.is_empty());
    let PoolAttentionInputs { q, k_pool, v_pool } = inputs;
    let launch = |q: DispatchTensor, ranges: &Tensor<2, Int>, max_keys, min_query_rows| {
        let tensors = AttentionTensors {
            q,
            k_pool: k_pool.clone(),
            v_pool: v_pool.clone(),
            kv_indices: kv_indices.clone(),
            ranges: ranges.clone().into_dispatch(),
        };
        let params = AttentionParams {
            max_keys,
            min_query_rows,
            ..params
        };
        let (out, lse) = <Dispatch as PoolAttentionBackend>::pool_attention(tensors, params);
        (Tensor::from_dispatch(out), Tensor::from_dispatch(lse))
    };
    let (out, lse) = match parts {
        None => launch(q, &ranges.ranges, ranges.max_keys, ranges.min_query_rows),
        Some(parts) => {
            let q = Tensor::<3>::from_dispatch(q);
            let (outs, lses): (Vec<_>, Vec<_>) = parts
                .iter()
                .map(|part| {
                    let rows = q.clone().slice([part.rows.clone()]).into_dispatch();
                    launch(rows, &part.ranges, part.max_keys, part.min_query_rows)
                })
                .unzip();
            (Tensor::cat(outs, 0), Tensor::cat(lses, 0))
        }
    };
    Ok(PoolAttentionOutputs { out, lse })
}
