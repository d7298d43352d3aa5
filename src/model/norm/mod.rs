//! RMSNorm for the decoder: one CubeCL kernel per call on CubeCL devices (Burn's fused reduce
//! takes ~100 µs for one 4096-wide row on the H200: `benches/NOTES.md` entry 25), Burn tensor
//! ops elsewhere. Both compute transformers' `LlamaRMSNorm`: the mean of squares and the scaling
//! in f32, the normalised row rounded once to the input's dtype, then times the weight.

#[cfg(feature = "cube")]
mod backend;
#[cfg(feature = "cube")]
mod cube;

use burn::tensor::{DType, Tensor};

/// RMSNorm of the rows of `x [rows, hidden]` with weight `w [hidden]`, as transformers'
/// `LlamaRMSNorm`: `w * cast(x * rsqrt(mean(x², row) + eps))`, the mean and the scaling in f32,
/// the normalised row rounded once to x's dtype. One kernel launch on CubeCL devices (when `w`
/// has x's dtype, length and device), Burn tensor ops elsewhere (Flex, Autodiff) — which also
/// report a mismatched weight.
///
/// # Panics
/// When `w`'s length is not `x`'s row length (as Burn's own tensor ops do on a shape mismatch).
pub fn rms_norm(x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
    assert_eq!(
        w.dims()[0],
        x.dims()[1],
        "rms_norm: a weight of {} for rows of {}",
        w.dims()[0],
        x.dims()[1]
    );
    #[cfg(feature = "cube")]
    if matches!(
        x.device().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    ) && w.dtype() == x.dtype()
    {
        let inputs = backend::NormTensors {
            x: x.into_dispatch(),
            w: w.clone().into_dispatch(),
        };
        let out =
            <burn::backend::Dispatch as backend::RmsNormBackend>::rms_norm(inputs, eps as f32);
        return Tensor::from_dispatch(out);
    }
    rms_norm_tensor_ops(x, w, eps)
}

/// [`rms_norm`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn rms_norm_tensor_ops(x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
    let dtype = x.dtype();
    let x = x.cast(DType::F32);
    let scale = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip();
    (x * scale).cast(dtype) * w.clone().unsqueeze::<2>()
}
