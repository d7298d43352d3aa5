//! The backend extension of the decoder's RMSNorm: CubeCL (fusion-wrapped or not) only; other
//! backends run Burn tensor ops (see the module above).

use burn::backend::{Backend, ExtensionType, backend_extension, tensor::FloatTensor};
#[cfg(feature = "cube")]
use burn_fusion::custom::TensorSpec;

/// The tensors of one call.
#[derive(Debug, ExtensionType)]
#[extension_type(fusion: cfg(feature = "cube"))]
pub struct NormTensors<B: Backend> {
    /// Rows to normalise, `[rows, hidden]`.
    pub x: FloatTensor<B>,
    /// Weight, `[hidden]`, x's dtype.
    pub w: FloatTensor<B>,
}

/// Burn backends with the decoder's RMSNorm kernel.
#[backend_extension(Cube: cfg(feature = "cube"), Fusion: cfg(feature = "cube"))]
pub trait RmsNormBackend: Backend {
    /// `w * cast(x * rsqrt(mean(x²) + eps))`, x's shape and dtype.
    #[fusion(meta = norm_meta)]
    fn rms_norm(#[extension_type] inputs: NormTensors<Self>, eps: f32) -> FloatTensor<Self>;
}

/// Output metadata for the lazy (fusion) path.
#[cfg(feature = "cube")]
fn norm_meta(inputs: &NormTensorsMetadata, _eps: &f32) -> TensorSpec {
    inputs.x.clone()
}
