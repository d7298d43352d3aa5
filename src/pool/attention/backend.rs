//! The backend extension of `pool_attention`: one trait method, routed by burn's dispatch to the
//! CubeCL backend (fusion-wrapped or not) and to Flex. Inference only: there is no Autodiff
//! implementation, and the public function refuses Autodiff tensors before dispatch.

use crate::common::PoolTensor;
use burn::backend::{
    Backend, ExtensionType, backend_extension,
    tensor::{FloatTensor, IntTensor},
};
#[cfg(all(feature = "cube", feature = "fusion"))]
use burn::tensor::{DType, Shape};
#[cfg(all(feature = "cube", feature = "fusion"))]
use burn_fusion::custom::TensorSpec;

/// The tensors of one call as the backend reads them.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(all(feature = "cube", feature = "fusion")))]
pub struct AttentionTensors<B: Backend> {
    /// Queries, `[T, Hq, D]`.
    pub q: FloatTensor<B>,
    /// Key pool, `[P, Hkv, D]` (float, or fp8 words `[P, Hkv, D / 4]`).
    #[extension_type]
    pub k_pool: PoolTensor<B>,
    /// Value pool, of `k_pool`'s kind and shape.
    #[extension_type]
    pub v_pool: PoolTensor<B>,
    /// The batch's pool rows, `[nnz]` i32 (an entry outside the pool is masked).
    pub kv_indices: IntTensor<B>,
    /// Each query's first entry in `kv_indices` and visible key count, `[T, 2]` i32.
    pub ranges: IntTensor<B>,
}

/// The scalars of one call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    /// Scale of the dot products.
    pub sm_scale: f32,
    /// Logits soft cap, if any.
    pub soft_cap: Option<f32>,
    /// The largest visible key count of any query (sizes the split of long contexts).
    pub max_keys: usize,
    /// The fewest query rows of any sequence with queries (0 for none).
    pub min_query_rows: usize,
    /// [`PoolAttentionConfig::portable_kernel`](crate::pool::PoolAttentionConfig): CubeCL runs
    /// the portable kernel even where the device has plane operations (Flex has one path).
    pub portable_kernel: bool,
    /// [`PoolAttentionConfig::query_tiles`](crate::pool::PoolAttentionConfig).
    pub query_tiles: Option<bool>,
    /// [`PoolAttentionConfig::head_tiles`](crate::pool::PoolAttentionConfig).
    pub head_tiles: Option<bool>,
    /// [`PoolAttentionConfig::fp8_decode`](crate::pool::PoolAttentionConfig).
    pub fp8_decode: Option<crate::pool::Fp8Decode>,
}

/// Burn backends that implement attention over the token-slot pool.
#[backend_extension(
    Cube: cfg(feature = "cube"),
    Fusion: cfg(all(feature = "cube", feature = "fusion")),
    Flex: cfg(feature = "flex")
)]
pub trait PoolAttentionBackend: Backend {
    /// `(out [T, Hq, D] in q's dtype, lse [T, Hq] f32)` of valid inputs (checked by
    /// [`pool_attention`](crate::pool::pool_attention)); a query with no visible key gets zeros
    /// and `lse = -inf`.
    #[fusion(meta = attention_meta)]
    fn pool_attention(
        #[extension_type] inputs: AttentionTensors<Self>,
        params: AttentionParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// Output metadata for the lazy (fusion) path.
#[cfg(all(feature = "cube", feature = "fusion"))]
fn attention_meta(
    inputs: &AttentionTensorsMetadata,
    _params: &AttentionParams,
) -> (TensorSpec, TensorSpec) {
    let q = inputs.q.clone();
    let lse = Shape::from(vec![q.shape[0], q.shape[1]]);
    (q, TensorSpec::new(lse, DType::F32))
}
