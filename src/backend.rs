//! The backend extension: one trait method, routed by burn's dispatch to the CubeCL backend
//! (every runtime, fusion-wrapped or not) and to Flex.
//!
//! This is the unchecked, backend-level entry; [`rope_pool_fused`](crate::rope_pool_fused) is the
//! validated one users call.

#[cfg(feature = "cube")]
use burn::backend::fusion::custom::TensorSpec;
use burn::backend::{
    Backend, ExtensionType, backend_extension,
    tensor::{FloatTensor, IntTensor},
};

/// The scalar parameters a backend needs beyond the tensors (the head geometry is read off the
/// shapes).
#[derive(Clone, Debug, PartialEq)]
pub struct RopeParams {
    /// RoPE base θ.
    pub rope_base: f64,
}

/// The four outputs of the op as backend primitives.
#[derive(ExtensionType)]
#[extension_type(fusion: cfg(feature = "cube"))]
pub struct RopePoolPrimitives<B: Backend> {
    /// Rotated queries, `[T, Hq, D]`.
    pub q_rot: FloatTensor<B>,
    /// Rotated keys, `[T, Hkv, D]`.
    pub k_rot: FloatTensor<B>,
    /// The key pool with the rows of valid slots replaced by `k_rot`.
    pub k_pool: FloatTensor<B>,
    /// The value pool with the rows of valid slots replaced by `v`.
    pub v_pool: FloatTensor<B>,
}

/// Burn backends that implement the fused RoPE + KV-pool scatter.
#[backend_extension(
    Cube: cfg(feature = "cube"),
    Fusion: cfg(feature = "cube"),
    Flex: cfg(feature = "flex")
)]
pub trait RopePoolBackend: Backend {
    /// Rotates `q` and `k` (NeoX) at `positions` and writes `k_rot`/`v` into the pool rows named
    /// by `slots`; a slot `< 0` or `>= pool_size` writes nothing. The pools are updated in place
    /// when their handles are not shared, else copied first. Inputs are assumed valid (shapes,
    /// dtypes, one device): [`rope_pool_fused`](crate::rope_pool_fused) checks them.
    #[allow(clippy::too_many_arguments)]
    #[fusion(meta = rope_pool_meta)]
    fn rope_pool_fused(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        positions: IntTensor<Self>,
        slots: IntTensor<Self>,
        k_pool: FloatTensor<Self>,
        v_pool: FloatTensor<Self>,
        params: RopeParams,
    ) -> RopePoolPrimitives<Self>;
}

/// Output metadata for the lazy (fusion) path: each output has the shape and dtype of the input
/// it derives from.
#[cfg(feature = "cube")]
#[allow(clippy::too_many_arguments)]
fn rope_pool_meta(
    q: &TensorSpec,
    k: &TensorSpec,
    _v: &TensorSpec,
    _positions: &TensorSpec,
    _slots: &TensorSpec,
    k_pool: &TensorSpec,
    v_pool: &TensorSpec,
    _params: &RopeParams,
) -> RopePoolPrimitivesMetadata {
    RopePoolPrimitivesMetadata {
        q_rot: q.clone(),
        k_rot: k.clone(),
        k_pool: k_pool.clone(),
        v_pool: v_pool.clone(),
    }
}
