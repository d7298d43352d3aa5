//! The one description of a call — [`RopePoolInputs`] and [`RopePoolOutputs`] — and the backend
//! extension: one trait method, routed by burn's dispatch to the CubeCL backend (every runtime,
//! fusion-wrapped or not), to Flex, and through Burn's `Autodiff`.
//!
//! The trait is the unchecked, backend-level entry and stays private to the crate (its
//! implementations trust their inputs' shapes and launch without bounds checks);
//! [`rope_pool_fused`](crate::rope_pool_fused) is the validated one users call.

use crate::common::pool_tensor::PoolTensor;
#[cfg(all(feature = "cube", feature = "fusion"))]
use crate::common::pool_tensor::PoolTensorMetadata;
use crate::op::rope::RopeFrequencies;
use burn::backend::{
    Backend, Dispatch, ExtensionType, backend_extension,
    tensor::{FloatTensor, IntTensor},
};
use burn::tensor::{Int, Shape, Tensor};
#[cfg(all(feature = "cube", feature = "fusion"))]
use burn_fusion::custom::TensorSpec;
use std::sync::Arc;

/// The inputs of one call (seven tensors, and the q/k norm's two weights when it has one), shared by every layer of the op: the public functions (with
/// `B = Dispatch`, the backend behind [`Tensor`]), validation, the backend trait and its
/// implementations.
///
/// Build it from tensors with [`RopePoolInputs::new`]; callers whose tensors may have the wrong
/// rank (to get the documented error rather than a compile error) set the fields from
/// [`Tensor::into_dispatch`].
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct RopePoolInputs<B: Backend = Dispatch> {
    /// Queries, `[T, Hq, D]`.
    pub q: FloatTensor<B>,
    /// Keys, `[T, Hkv, D]`.
    pub k: FloatTensor<B>,
    /// Values, `[T, Hkv, D]`.
    pub v: FloatTensor<B>,
    /// Positions, `[T]` (`[3, T]` with M-RoPE), any integer type.
    pub positions: IntTensor<B>,
    /// Pool row of each token, `[T]`, any integer type; `< 0` or `>= pool_size` writes nothing.
    pub slots: IntTensor<B>,
    /// Key pool, `[P, Hkv, D]` (float, or fp8: [`PoolTensor`]).
    #[extension_type]
    pub k_pool: PoolTensor<B>,
    /// Value pool, of `k_pool`'s kind and shape.
    #[extension_type]
    pub v_pool: PoolTensor<B>,
    /// The per-head RMSNorm of q and k before the rotation, if any.
    #[extension_type]
    pub qk_norm: QkNorm<B>,
}

/// The per-head RMSNorm a call applies to q and k before rotating them (Qwen3's `q_norm` and
/// `k_norm`): each head row `x` of `head_dim` elements becomes `w · cast(x · rsqrt(mean(x²) +
/// eps))`, the mean and the scaling in f32, the normalised row rounded to the tensors' dtype and
/// multiplied by the weight there (transformers' `Qwen3RMSNorm`); `eps` is the config's
/// [`qk_norm_eps`](crate::RopePoolConfig::qk_norm_eps). v is not normalised.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub enum QkNorm<B: Backend = Dispatch> {
    /// No norm: q and k are rotated as they come.
    None,
    /// Per-head RMSNorm with these weights, `[head_dim]` each, in q's dtype.
    Rms {
        /// q's norm weight (`q_norm.weight` of a Qwen3 layer).
        q_weight: FloatTensor<B>,
        /// k's norm weight (`k_norm.weight`).
        k_weight: FloatTensor<B>,
    },
}

impl<B: Backend> QkNorm<B> {
    /// The two weights, when the call has a norm.
    pub fn weights(&self) -> Option<[&FloatTensor<B>; 2]> {
        match self {
            QkNorm::None => None,
            QkNorm::Rms { q_weight, k_weight } => Some([q_weight, k_weight]),
        }
    }
}

impl RopePoolInputs<Dispatch> {
    /// The inputs of a call from tensors: `q [T, Hq, D]`, `k`, `v [T, Hkv, D]`, `positions [T]`
    /// (`[3, T]` with M-RoPE, so `P` is 1 or 2), `slots [T]`, `k_pool`, `v_pool [P, Hkv, D]`
    /// (a `Tensor<3>`, or an fp8 [`PoolTensor`]).
    pub fn new<const P: usize>(
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        positions: Tensor<P, Int>,
        slots: Tensor<1, Int>,
        k_pool: impl Into<PoolTensor>,
        v_pool: impl Into<PoolTensor>,
    ) -> Self {
        Self {
            q: q.into_dispatch(),
            k: k.into_dispatch(),
            v: v.into_dispatch(),
            positions: positions.into_dispatch(),
            slots: slots.into_dispatch(),
            k_pool: k_pool.into(),
            v_pool: v_pool.into(),
            qk_norm: QkNorm::None,
        }
    }

    /// These inputs with a per-head RMSNorm of q and k before the rotation ([`QkNorm::Rms`]):
    /// `q_weight`, `k_weight` are `[head_dim]`, in q's dtype; the epsilon is the config's
    /// [`qk_norm_eps`](crate::RopePoolConfig::qk_norm_eps).
    pub fn with_qk_norm(self, q_weight: Tensor<1>, k_weight: Tensor<1>) -> Self {
        Self {
            qk_norm: QkNorm::Rms {
                q_weight: q_weight.into_dispatch(),
                k_weight: k_weight.into_dispatch(),
            },
            ..self
        }
    }
}

/// The four outputs of one call, as tensors.
#[derive(Clone, Debug)]
pub struct RopePoolOutputs {
    /// Rotated queries, `[T, Hq, D]`.
    pub q_rot: Tensor<3>,
    /// Rotated keys, `[T, Hkv, D]` (`[0, Hkv, D]` when the config's `k_rot` is off).
    pub k_rot: Tensor<3>,
    /// The key pool, row `slots[t]` replaced by the rotated `k[t]` for every valid slot (of the
    /// input pool's kind: float, or fp8 codes of the rotated keys).
    pub k_pool: PoolTensor,
    /// The value pool, row `slots[t]` replaced by `v[t]` for every valid slot.
    pub v_pool: PoolTensor,
}

/// What the backend returns: [`RopePoolOutputs`]' four fields in order, `(q_rot, k_rot, k_pool,
/// v_pool)`, as `B`'s primitives.
pub(crate) type Outputs<B> = (FloatTensor<B>, FloatTensor<B>, PoolTensor<B>, PoolTensor<B>);

impl From<Outputs<Dispatch>> for RopePoolOutputs {
    fn from((q_rot, k_rot, k_pool, v_pool): Outputs<Dispatch>) -> Self {
        Self {
            q_rot: Tensor::from_dispatch(q_rot),
            k_rot: Tensor::from_dispatch(k_rot),
            k_pool,
            v_pool,
        }
    }
}

/// Burn backends that implement the fused RoPE + KV-pool scatter.
#[backend_extension(
    Cube: cfg(feature = "cube"),
    Fusion: cfg(all(feature = "cube", feature = "fusion")),
    Flex: cfg(feature = "flex"),
    Autodiff: cfg(feature = "autodiff")
)]
pub trait RopePoolBackend: Backend {
    /// Rotates `q` and `k` at `positions` with `rope`'s frequencies and writes `k_rot`/`v` into
    /// the pool rows named by `slots`; a slot `< 0` or `>= pool_size` writes nothing. The pools
    /// are updated in place when their handles are not shared, else copied first. Inputs are
    /// assumed valid (shapes, dtypes, one device, positions and slots of one integer type, `rope`
    /// made from the config the shapes follow): the crate reaches this only through
    /// [`rope_pool_fused`](crate::rope_pool_fused)'s checks or with inputs it built itself (the
    /// autodiff backward).
    /// With `k_rot` false the rotated keys go to the pool rows only and the `k_rot` output is
    /// empty. With [`QkNorm::Rms`] each head of q and k is normalised first (epsilon
    /// `qk_norm_eps`). Returns `(q_rot, k_rot, k_pool, v_pool)`, as [`RopePoolOutputs`] names them.
    #[fusion(meta = rope_pool_meta)]
    #[allow(clippy::type_complexity)]
    fn rope_pool_fused(
        #[extension_type] inputs: RopePoolInputs<Self>,
        rope: Arc<RopeFrequencies>,
        k_rot: bool,
        qk_norm_eps: f32,
    ) -> (
        FloatTensor<Self>,
        FloatTensor<Self>,
        PoolTensor<Self>,
        PoolTensor<Self>,
    );
}

/// Output metadata for the lazy (fusion) path: each output has the shape and dtype of the input
/// it derives from.
#[cfg(all(feature = "cube", feature = "fusion"))]
fn rope_pool_meta(
    inputs: &RopePoolInputsMetadata,
    _rope: &Arc<RopeFrequencies>,
    k_rot: &bool,
    _qk_norm_eps: &f32,
) -> (
    TensorSpec,
    TensorSpec,
    PoolTensorMetadata,
    PoolTensorMetadata,
) {
    let mut k_rot_meta = inputs.k.clone();
    if !*k_rot {
        k_rot_meta.shape = no_rows(&k_rot_meta.shape);
    }
    (
        inputs.q.clone(),
        k_rot_meta,
        inputs.k_pool.clone(),
        inputs.v_pool.clone(),
    )
}

/// `shape` with no rows: `[0, H, D]` (the `k_rot` output of a call that does not return it).
pub(crate) fn no_rows(shape: &Shape) -> Shape {
    let mut dims = shape.to_vec();
    if let Some(rows) = dims.first_mut() {
        *rows = 0;
    }
    Shape::from(dims)
}
