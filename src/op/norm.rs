//! The q/k norm ([`QkNorm`](crate::QkNorm)) as Burn tensor ops on any backend's primitives: the
//! unfused path runs it on the dispatch backend, and under `Autodiff` the op runs it on the
//! autodiff backend before its kernel, so the norm's gradient — weights included — is Burn's
//! own.

use burn::backend::{Backend, TensorMetadata, tensor::FloatTensor};
use burn::tensor::{DType, FloatDType, Shape};

/// Every head row of `x` (`[T, H, D]`) as `w · cast(x · rsqrt(mean(x²) + eps))` with `w`
/// (`[D]`): the mean and the scaling in f32, rounded to `x`'s dtype before and after the weight,
/// as the kernel computes it.
// The autodiff backward and the unfused oracle are its callers.
#[cfg_attr(not(any(feature = "autodiff", feature = "testing")), allow(dead_code))]
pub(crate) fn head_rms_norm<B: Backend>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    eps: f64,
) -> FloatTensor<B> {
    let dtype = FloatDType::from(x.dtype());
    let head_dim = x.shape()[2];
    let wide = |t: FloatTensor<B>| match t.dtype() {
        DType::F32 => t,
        _ => B::float_cast(t, FloatDType::F32),
    };
    let narrow = |t: FloatTensor<B>| match dtype {
        FloatDType::F32 => t,
        _ => B::float_cast(t, dtype),
    };
    let x32 = wide(x);
    let mean = B::float_mean_dim(B::float_mul(x32.clone(), x32.clone()), 2);
    let scale = B::float_recip(B::float_sqrt(B::float_add_scalar(mean, eps.into())));
    let normed = narrow(B::float_mul(x32, scale));
    let weight = B::float_reshape(wide(weight), Shape::new([1, 1, head_dim]));
    narrow(B::float_mul(wide(normed), weight))
}
