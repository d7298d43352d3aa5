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
pub fn project(x: Tensor<2>, w_t: &Tensor<2>) -> Tensor<2> {
    #[cfg(feature = "cube")]
    if x.dtype() == w_t.dtype()
        && let burn::backend::DispatchDevice::Cube(cube) = x.device().as_dispatch().clone().inner()
        && rope_pool_kernels::matvec_fits(&cube.client(), x.dims()[0])
    {
        let inputs = backend::MatvecTensors {
            x: x.into_dispatch(),
            w_t: w_t.clone().into_dispatch(),
        };
        let out = <burn::backend::Dispatch as backend::MatvecBackend>::matvec(inputs);
        return Tensor::from_dispatch(out);
    }
    x.matmul(w_t.clone().transpose())
}
