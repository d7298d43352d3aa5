//! The decoder's projections, `x · wᵀ` with the weight stored `[out, in]` (HuggingFace's
//! layout): a matrix-vector kernel for the few rows of a decode step on CubeCL devices with
//! plane operations (Burn's matmul streams the weight at ~0.9 TB/s there on the H200:
//! `benches/NOTES.md` entry 25), Burn's matmul on the transposed view otherwise.

#[cfg(feature = "cube")]
mod backend;
#[cfg(feature = "cube")]
mod cube;

use burn::tensor::Tensor;

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
        let out = <burn::backend::Dispatch as backend::MatvecBackend>::matvec(inputs);
        return Tensor::from_dispatch(out);
    }
    x.matmul(w_t.clone().transpose())
}

/// Whether the kernel takes `x · w_tᵀ`: one dtype, matching inner sizes (anything else goes to
/// Burn's matmul, which reports the mismatch), a non-empty product, both on one CubeCL device
/// (not Autodiff: the kernel has no backward) whose planes fit `x`'s rows.
#[cfg(feature = "cube")]
fn matvec_applies(x: &Tensor<2>, w_t: &Tensor<2>) -> bool {
    let ([m, k], [n, k_w]) = (x.dims(), w_t.dims());
    let device = x.device();
    x.dtype() == w_t.dtype()
        && k == k_w
        && k > 0
        && n > 0
        && device == w_t.device()
        && match device.as_dispatch() {
            burn::backend::DispatchDevice::Cube(cube) => {
                rope_pool_kernels::matvec_fits(&cube.client(), m)
            }
            _ => false,
        }
}
