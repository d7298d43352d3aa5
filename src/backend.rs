//! The backend extension: one trait method, routed by burn's dispatch to the CubeCL backend
//! (every runtime, fusion-wrapped or not) and to Flex.
//!
//! This is the unchecked, backend-level entry, private to the crate (its implementations trust
//! their inputs' shapes and launch without bounds checks); [`rope_pool_fused`](crate::rope_pool_fused)
//! is the validated one users call.

use crate::rope::RopeFrequencies;
use burn::backend::{
    Backend, ExtensionType, backend_extension,
    tensor::{FloatTensor, IntTensor},
};
use std::sync::Arc;

/// The seven inputs of the op as backend primitives.
#[derive(ExtensionType)]
#[extension_type(fusion: cfg(feature = "cube"))]
pub struct RopePoolInputs<B: Backend> {
    /// Queries, `[T, Hq, D]`.
    pub q: FloatTensor<B>,
    /// Keys, `[T, Hkv, D]`.
    pub k: FloatTensor<B>,
    /// Values, `[T, Hkv, D]`.
    pub v: FloatTensor<B>,
    /// Positions, `[T]` (`[3, T]` with M-RoPE).
    pub positions: IntTensor<B>,
    /// Pool row of each token, `[T]`; `< 0` or `>= pool_size` writes nothing.
    pub slots: IntTensor<B>,
    /// Key pool, `[P, Hkv, D]`.
    pub k_pool: FloatTensor<B>,
    /// Value pool, `[P, Hkv, D]`.
    pub v_pool: FloatTensor<B>,
}

/// The four outputs of the op as backend primitives.
#[derive(ExtensionType)]
#[extension_type(fusion: cfg(feature = "cube"))]
pub struct RopePoolOutputs<B: Backend> {
    /// Rotated queries, `[T, Hq, D]`.
    pub q_rot: FloatTensor<B>,
    /// Rotated keys, `[T, Hkv, D]` (`[0, Hkv, D]` when the call does not return them).
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
    /// empty.
    #[fusion(meta = rope_pool_meta)]
    fn rope_pool_fused(
        #[extension_type] inputs: RopePoolInputs<Self>,
        rope: Arc<RopeFrequencies>,
        k_rot: bool,
    ) -> RopePoolOutputs<Self>;
}

/// Output metadata for the lazy (fusion) path: each output has the shape and dtype of the input
/// it derives from.
#[cfg(feature = "cube")]
fn rope_pool_meta(
    inputs: &RopePoolInputsMetadata,
    _rope: &Arc<RopeFrequencies>,
    k_rot: &bool,
) -> RopePoolOutputsMetadata {
    let mut k_rot_meta = inputs.k.clone();
    if !*k_rot {
        k_rot_meta.shape = no_rows(&k_rot_meta.shape);
    }
    RopePoolOutputsMetadata {
        q_rot: inputs.q.clone(),
        k_rot: k_rot_meta,
        k_pool: inputs.k_pool.clone(),
        v_pool: inputs.v_pool.clone(),
    }
}

/// `shape` with no rows: `[0, H, D]` (the `k_rot` output of a call that does not return it).
pub(crate) fn no_rows(shape: &burn::tensor::Shape) -> burn::tensor::Shape {
    let mut dims = shape.to_vec();
    if let Some(rows) = dims.first_mut() {
        *rows = 0;
    }
    burn::tensor::Shape::from(dims)
}
