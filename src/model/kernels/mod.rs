//! The decoder's own kernels (`rope-pool-kernels`: `norm.rs`, `matvec.rs`, `act.rs`) for the
//! steps where Burn's ops were slow on the H200 (`benches/NOTES.md` entry 25): RMSNorm (Burn's
//! fused reduce took ~52 µs a row), the projections of a decode step (Burn's matmul streamed
//! the weights at 0.53 TB/s) and the MLP's SiLU-times-up (six element-wise launches a layer).
//! Each runs as one launch on CubeCL devices, with Burn tensor ops as the fallback elsewhere
//! (Flex, Autodiff) and as the decoder's tensor-op mode.

#[cfg(feature = "cube")]
mod backend;
#[cfg(feature = "cube")]
mod cube;

use burn::tensor::activation::silu;
use burn::tensor::{DType, Tensor};

/// Whether tensors on `x`'s device go to the kernels: a CubeCL device, not wrapped in Autodiff
/// (the kernels have no backward).
#[cfg(feature = "cube")]
fn on_cube<const D: usize>(x: &Tensor<D>) -> bool {
    matches!(
        x.device().as_dispatch(),
        burn::backend::DispatchDevice::Cube(_)
    )
}

/// RMSNorm of the rows of `x [rows, hidden]` with weight `w [hidden]`, as transformers'
/// `LlamaRMSNorm`: `w * cast(x * rsqrt(mean(x², row) + eps))`, the mean and the scaling in f32,
/// the normalised row rounded once to x's dtype. One kernel launch on CubeCL devices (when `w`
/// has x's dtype and device), Burn tensor ops elsewhere (Flex, Autodiff).
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
    if on_cube(&x) && w.dtype() == x.dtype() && w.device() == x.device() {
        let inputs = backend::NormTensors {
            x: x.into_dispatch(),
            w: w.clone().into_dispatch(),
        };
        let out =
            <burn::backend::Dispatch as backend::DecoderKernels>::rms_norm(inputs, eps as f32);
        return Tensor::from_dispatch(out);
    }
    rms_norm_tensor_ops(x, w, eps)
}

/// The residual add and the norm after it, `(s, rms_norm(s))` with `s = x + y` (rounded to x's
/// dtype, as the model's residual add): one kernel launch on CubeCL devices (when `y` and `w`
/// have x's dtype and device), Burn tensor ops elsewhere.
///
/// # Panics
/// When `y`'s shape is not `x`'s, or `w`'s length is not `x`'s row length.
pub fn add_rms_norm(x: Tensor<2>, y: Tensor<2>, w: &Tensor<1>, eps: f64) -> (Tensor<2>, Tensor<2>) {
    assert_eq!(
        x.dims(),
        y.dims(),
        "add_rms_norm: {:?} + {:?}",
        x.dims(),
        y.dims()
    );
    assert_eq!(
        w.dims()[0],
        x.dims()[1],
        "add_rms_norm: a weight of {} for rows of {}",
        w.dims()[0],
        x.dims()[1]
    );
    #[cfg(feature = "cube")]
    if on_cube(&x)
        && [y.dtype(), w.dtype()] == [x.dtype(); 2]
        && y.device() == x.device()
        && w.device() == x.device()
    {
        let inputs = backend::AddNormTensors {
            x: x.into_dispatch(),
            y: y.into_dispatch(),
            w: w.clone().into_dispatch(),
        };
        let (sum, out) =
            <burn::backend::Dispatch as backend::DecoderKernels>::add_rms_norm(inputs, eps as f32);
        return (Tensor::from_dispatch(sum), Tensor::from_dispatch(out));
    }
    add_rms_norm_tensor_ops(x, y, w, eps)
}

/// [`add_rms_norm`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn add_rms_norm_tensor_ops(
    x: Tensor<2>,
    y: Tensor<2>,
    w: &Tensor<1>,
    eps: f64,
) -> (Tensor<2>, Tensor<2>) {
    let sum = x + y;
    let out = rms_norm_tensor_ops(sum.clone(), w, eps);
    (sum, out)
}

/// [`rms_norm`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn rms_norm_tensor_ops(x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
    let dtype = x.dtype();
    let x = x.cast(DType::F32);
    let scale = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip();
    (x * scale).cast(dtype) * w.clone().unsqueeze::<2>()
}

/// `x [m, in] · w_tᵀ` for a weight stored `w_t [out, in]` (HuggingFace's layout): `[m, out]`
/// in x's dtype, accumulated in f32. For up to 16 rows on a CubeCL device with plane
/// operations, one matrix-vector kernel that reads each weight byte once for all rows; else
/// Burn's matmul on the transposed view.
///
/// # Panics
/// When the inner sizes differ (as Burn's matmul does).
pub fn project(x: Tensor<2>, w_t: &Tensor<2>) -> Tensor<2> {
    assert_eq!(
        x.dims()[1],
        w_t.dims()[1],
        "project: rows of {} against a weight of rows of {}",
        x.dims()[1],
        w_t.dims()[1]
    );
    #[cfg(feature = "cube")]
    if matvec_applies(&x, w_t) {
        let inputs = backend::MatvecTensors {
            x: x.into_dispatch(),
            w_t: w_t.clone().into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::matvec(inputs);
        return Tensor::from_dispatch(out);
    }
    x.matmul(w_t.clone().transpose())
}

/// Whether the kernel takes `x · w_tᵀ`: one dtype and device, a non-empty product, a CubeCL
/// device (not Autodiff-wrapped) whose planes fit `x`'s rows.
#[cfg(feature = "cube")]
fn matvec_applies(x: &Tensor<2>, w_t: &Tensor<2>) -> bool {
    let ([m, k], [n, _]) = (x.dims(), w_t.dims());
    x.dtype() == w_t.dtype()
        && k > 0
        && n > 0
        && x.device() == w_t.device()
        && match x.device().as_dispatch() {
            burn::backend::DispatchDevice::Cube(cube) => {
                rope_pool_kernels::matvec_fits(&cube.client(), m)
            }
            _ => false,
        }
}

/// The MLP's activation of a stacked `gate_up [rows, 2m]` (gate columns, then up): `[rows, m]`,
/// `cast(silu(gate)) * up` as transformers computes `act_fn(gate_proj(x)) * up_proj(x)` — the
/// SiLU in f32 rounded once to the dtype, the product in the dtype. One launch on CubeCL
/// devices, Burn tensor ops elsewhere.
///
/// # Panics
/// When `gate_up`'s width is odd.
pub fn silu_mul(gate_up: Tensor<2>) -> Tensor<2> {
    let width = gate_up.dims()[1];
    assert!(
        width.is_multiple_of(2),
        "silu_mul: gate and up side by side need an even width, got {width}"
    );
    #[cfg(feature = "cube")]
    if on_cube(&gate_up) && gate_up.dims()[0] > 0 && width > 0 {
        let inputs = backend::ActTensors {
            gate_up: gate_up.into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::DecoderKernels>::silu_mul(inputs);
        return Tensor::from_dispatch(out);
    }
    silu_mul_tensor_ops(gate_up)
}

/// [`silu_mul`] in Burn tensor ops (any backend, Autodiff included).
pub(crate) fn silu_mul_tensor_ops(gate_up: Tensor<2>) -> Tensor<2> {
    let [rows, width] = gate_up.dims();
    let m = width / 2;
    silu(gate_up.clone().slice([0..rows, 0..m])) * gate_up.slice([0..rows, m..2 * m])
}
