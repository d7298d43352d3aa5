//! The MLP activation of LLaMA-family models on a stacked gate/up projection:
//! `out = cast(silu(gate)) * up`, the SiLU (`g / (1 + exp(-g))`) in f32 rounded once to the
//! storage type, the product in the storage type (as transformers computes
//! `act_fn(gate_proj(x)) * up_proj(x)`). One unit per output vector.

use crate::launch::widest_vector;
use cubecl::client::Client;
use cubecl::ir::{AddressType, ElemType};
use cubecl::prelude::*;
use cubecl::{CubeDim, calculate_cube_count_elemwise};

/// `gate_up [rows, 2m]` (as vectors of `N`, `m_vectors` per half) into `out [rows, m]`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn silu_mul_kernel<F: Float, N: Size>(
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

/// Enqueues [`silu_mul_kernel`](fn@silu_mul_kernel) for `rows` rows of `m` outputs: `gate_up [rows, 2m]` and `out
/// [rows, m]`, contiguous, float `float` (`elem_size` bytes). Does nothing for an empty input.
///
/// # Safety
/// The tensors must be live and contiguous with those shapes, and `out` must not alias
/// `gate_up`.
pub unsafe fn launch_silu_mul(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    m: usize,
    gate_up: TensorArg,
    out: TensorArg,
) {
    if rows == 0 || m == 0 {
        return;
    }
    let vector = widest_vector(client, elem_size, |n| m.is_multiple_of(n));
    let units = rows * m / vector;
    let cube_dim = CubeDim::new(client, units);
    unsafe {
        silu_mul_kernel::launch_unchecked(
            client,
            calculate_cube_count_elemwise(client, units, cube_dim),
            cube_dim,
            AddressType::from_len(rows * 2 * m),
            vector,
            gate_up,
            out,
            m / vector,
            float,
        );
    }
}
