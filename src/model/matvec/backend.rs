//! The backend extension of the decoder's matrix-vector product: CubeCL (fusion-wrapped or
//! not) only; elsewhere the projection is Burn's matmul (see the module above).

use burn::backend::{Backend, ExtensionType, backend_extension, tensor::FloatTensor};
use burn::tensor::Shape;
use burn_fusion::custom::TensorSpec;

/// The tensors of one call.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(feature = "cube"))]
pub struct MatvecTensors<B: Backend> {
    /// The rows, `[m, in]`.
    pub x: FloatTensor<B>,
    /// The weight, `[out, in]`, x's dtype.
    pub w_t: FloatTensor<B>,
}

/// Burn backends with the decoder's matrix-vector kernel.
#[backend_extension(Cube: cfg(feature = "cube"), Fusion: cfg(feature = "cube"))]
pub trait MatvecBackend: Backend {
    /// `x · w_tᵀ`, `[m, out]` in x's dtype (the caller checked `matvec_fits`).
    #[fusion(meta = matvec_meta)]
    fn matvec(#[extension_type] inputs: MatvecTensors<Self>) -> FloatTensor<Self>;
}

/// Output metadata for the lazy (fusion) path.
fn matvec_meta(inputs: &MatvecTensorsMetadata) -> TensorSpec {
    let shape = Shape::from(vec![inputs.x.shape[0], inputs.w_t.shape[0]]);
    TensorSpec::new(shape, inputs.x.dtype)
}
