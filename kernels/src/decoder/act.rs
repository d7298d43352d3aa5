//! The MLP activation of LLaMA-family models on a stacked gate/up projection:
//! `out = cast(silu(gate)) * up`, the SiLU (`g / (1 + exp(-g))`) in f32 rounded once to the
//! storage type, the product in the storage type (as transformers computes
//! `act_fn(gate_proj(x)) * up_proj(x)`). One unit per output vector. The launch is
//! [`super::launch::launch_silu_mul`].

use super::norm::shares_sum;
use cubecl::ir::ElemType;
use cubecl::prelude::*;

/// `gate_up [rows, 2m]` (as vectors of `N`, `m_vectors` per half) into `out [rows, m]`. With
/// `shares` ≥ 2, `gate_up` is the f32 shares of a staged product (`Y` = f32, `[shares, rows,
/// 2m]`), each element summed in share order and rounded once to `F` first (as the staged
/// launch's own sum; `f16`: `F` is f16, else f32); with 1, `Y` = `F`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub(crate) fn silu_mul_kernel<F: Float, Y: Float, N: Size>(
    gate_up: &Tensor<Vector<Y, N>>,
    out: &mut Tensor<Vector<F, N>>,
    #[comptime] m_vectors: usize,
    #[comptime] shares: usize,
    #[comptime] f16: bool,
    #[define(F, Y)] _dtypes: [ElemType; 2],
) {
    let i = ABSOLUTE_POS;
    let len = out.len();
    if i >= len {
        terminate!();
    }
    let row = i / m_vectors;
    let c = i % m_vectors;
    let at = row * 2 * m_vectors + c;
    let g = shares_sum::<Y, N>(gate_up, at, 2 * len, shares, f16);
    let s = g / (Vector::new(f32::new(1.0)) + Vector::exp(Vector::new(f32::new(0.0)) - g));
    // Values of `F` already: the cast is exact.
    let up = Vector::<F, N>::cast_from(shares_sum::<Y, N>(
        gate_up,
        at + m_vectors,
        2 * len,
        shares,
        f16,
    ));
    out[i] = Vector::<F, N>::cast_from(s) * up;
}
