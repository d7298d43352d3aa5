//! The MLP activation of LLaMA-family models on a stacked gate/up projection:
//! `out = cast(silu(gate)) * up`, the SiLU (`g / (1 + exp(-g))`) in f32 rounded once to the
//! storage type, the product in the storage type (as transformers computes
//! `act_fn(gate_proj(x)) * up_proj(x)`). One unit per output vector. The launch is
//! [`super::launch::launch_silu_mul`].

use cubecl::ir::ElemType;
use cubecl::prelude::*;

/// `gate_up [rows, 2m]` (as vectors of `N`, `m_vectors` per half) into `out [rows, m]`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub(crate) fn silu_mul_kernel<F: Float, N: Size>(
    gate_up: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    #[comptime] m_vectors: usize,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    if i >= out.len() {
        terminate!();
    }
    let row = i / m_vectors;
    let c = i % m_vectors;
    let g = Vector::<f32, N>::cast_from(gate_up[row * 2 * m_vectors + c]);
    let s = g / (Vector::new(f32::new(1.0)) + Vector::exp(Vector::new(f32::new(0.0)) - g));
    out[i] = Vector::<F, N>::cast_from(s) * gate_up[row * 2 * m_vectors + m_vectors + c];
}
