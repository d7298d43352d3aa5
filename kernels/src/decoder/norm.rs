//! RMSNorm of rows (LLaMA's, as transformers computes it): `out = w * cast(x * rsqrt(mean(x²) +
//! eps))`, the sum and the scaling in f32, the normalised row rounded once to the storage type
//! and multiplied by the weight there. One cube per row; the units sum strided vectors of the
//! row, a tree in shared memory adds their sums. The launch is [`super::launch::launch_rms_norm`].

use crate::common::reduce::{cube_sum, lane_sum};
use crate::common::round::round_to_f16;
use cubecl::ir::ElemType;
use cubecl::prelude::*;

/// One row of `x [rows, hidden]` per cube into `out` (same shape), `w [hidden]`, all as vectors
/// of `N`; a row is `row_vectors` vectors, `inv_hidden` is `1 / hidden`. `units` is a power of
/// two.
#[cube(launch_unchecked, address_type = "dynamic")]
pub(crate) fn rms_norm_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] units: usize,
    #[comptime] row_vectors: usize,
    #[define(F)] _dtype: ElemType,
) {
    let row = CUBE_POS;
    if row >= x.shape(0) {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let base = row * row_vectors;
    let mut sum = f32::new(0.0);
    for i in range_stepped(u, row_vectors, units) {
        let v = Vector::<f32, N>::cast_from(x[base + i]);
        sum += lane_sum::<N>(v * v);
    }
    let inv = row_scale(sum, eps, inv_hidden, units);
    scale_row(x, w, out, base, inv, units, row_vectors);
}

/// `out = w * cast(src * inv)` over the row of `src` from `base`, each unit its strided vectors
/// (the ones it read or wrote for the row's sum).
#[cube]
fn scale_row<F: Float, N: Size>(
    src: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    base: usize,
    inv: f32,
    #[comptime] units: usize,
    #[comptime] row_vectors: usize,
) {
    for i in range_stepped(UNIT_POS as usize, row_vectors, units) {
        let v = Vector::<f32, N>::cast_from(src[base + i]) * Vector::new(inv);
        out[base + i] = Vector::<F, N>::cast_from(v) * w[i];
    }
}

/// A row's `rsqrt(mean(x²) + eps)` from each unit's sum of squares of it, added over the cube
/// (`units` units).
#[cube]
fn row_scale(squares: f32, eps: f32, inv_hidden: f32, #[comptime] units: usize) -> f32 {
    let mut red = Shared::<[f32]>::new_slice(units);
    let total = cube_sum(&mut red, squares, units);
    f32::new(1.0) / f32::sqrt(total * inv_hidden + eps)
}

/// [`rms_norm_kernel`](fn@rms_norm_kernel) of the residual sum: `sum = x + y` (rounded once to `F`, as the model's
/// residual add), written, and its RMSNorm into `out`: the decoder's add-then-norm in one launch.
/// With `shares` ≥ 2, `y` is the f32 shares of a staged product (`Y` = f32, `[shares, rows,
/// hidden]`), summed in share order in f32 and rounded once to `F` first (what the staged
/// launch's [`split_sum_kernel`](fn@super::matvec::split_sum_kernel) stores; `f16`: `F` is f16,
/// else f32); with 1, `Y` = `F`.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn add_rms_norm_kernel<F: Float, Y: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    y: &Tensor<Vector<Y, N>>,
    w: &Tensor<Vector<F, N>>,
    sum: &mut Tensor<Vector<F, N>>,
    out: &mut Tensor<Vector<F, N>>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] units: usize,
    #[comptime] row_vectors: usize,
    #[comptime] shares: usize,
    #[comptime] f16: bool,
    #[define(F, Y)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    if row >= x.shape(0) {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let base = row * row_vectors;
    let len = x.len();
    let mut squares = f32::new(0.0);
    for i in range_stepped(u, row_vectors, units) {
        let a = Vector::<f32, N>::cast_from(x[base + i])
            + shares_sum::<Y, N>(y, base + i, len, shares, f16);
        let s = Vector::<F, N>::cast_from(a);
        sum[base + i] = s;
        let v = Vector::<f32, N>::cast_from(s);
        squares += lane_sum::<N>(v * v);
    }
    let inv = row_scale(squares, eps, inv_hidden, units);
    // Each unit reads back only the vectors it wrote.
    scale_row(&*sum, w, out, base, inv, units, row_vectors);
}

/// Vector `i` of a product's output `y`, as f32 values of `F`: with `shares` = 1 `y[i]` itself
/// (`Y` = `F`); else the sum of its `shares` f32 shares (`len` vectors apart), in share order,
/// rounded once to `F`: with `f16`, through [`round_to_f16`] (`F` is f16); else `F` is f32.
#[cube]
pub(crate) fn shares_sum<Y: Float, N: Size>(
    y: &Tensor<Vector<Y, N>>,
    i: usize,
    len: usize,
    #[comptime] shares: usize,
    #[comptime] f16: bool,
) -> Vector<f32, N> {
    let mut s = Vector::<f32, N>::cast_from(y[i]);
    #[unroll]
    for p in 1..shares {
        s += Vector::<f32, N>::cast_from(y[p * len + i]);
    }
    if comptime!(shares > 1 && f16) {
        #[unroll]
        for l in 0..N::value() {
            s.insert(l, round_to_f16(s.extract(l)));
        }
    }
    s
}
