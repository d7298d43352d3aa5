//! Products of a few rows on fp8 weights through warp-level tensor-core products (`mma.sync`
//! m16n8k16, f16 × f16 → f32, CUDA): the forms of [`super::fp8`]'s matrix-vector kernels (plain,
//! the norm before, the activation or the residual add after) for up to [`MMA_MAX_ROWS`] rows.
//!
//! Why: the matrix-vector kernels decode each code to f32 and multiply it by `x` in f32 (a
//! widening of the code, one of `x`, a multiply-add: about six instructions a code with the
//! decode), which through CUDA bounds them below the bandwidth at one row (Nsight Compute on an
//! H100: the short fp8 launches read at 50–70% of the peak, `benches/NOTES.md`). Here a code's
//! f16 half (the integer decode of [`halves_words`], about 1.5 instructions a code) is the
//! tensor-core operand itself: no widening and no multiply-add a code.
//!
//! The layout: the cube of `CUBE_POS` owns 16 output columns (weight rows `16 · CUBE_POS …`; a
//! stacked gate/up weight's gate and up rows both) and its `warps` warps split the inner size,
//! whole groups of [`GROUP`] elements each (one scale a group and row: the scale blocks are
//! whole groups). In a group's two spans of 64 elements, lane `(g, t) = (lane / 4, lane % 4)`
//! loads 16 bytes of codes (elements `16t … 16t + 15`) of weight rows `g` and `g + 8`, and the
//! 16 elements of `x`'s row `g` there (zeros past the rows). Product `q` (0 … 3) of a span
//! takes the lane's word `q`: its codes 0 and 2 as the operands' inner pair `2t, 2t + 1`, codes
//! 1 and 3 as `2t + 8, 2t + 9` (the pairs [`halves_words`] gives), and `x`'s elements in the same
//! order, so every product pairs the same elements of the weight and of `x`. A group's products
//! add into a fresh accumulator, multiplied by the rows' scales once; the warps' sums meet in
//! shared memory and warp 0 writes, rounded once.
//!
//! A launch knob (`DecoderTuning::fp8_mma`, `ROPE_POOL_FP8_MMA=1`), off by default: the kernels
//! compile to CUDA C++ in the unit test below, but have not yet run on a GPU (their float64
//! tests through CUDA and their speed are the runs of `benches/results/fp8-mma/`).

use super::matvec::{PlaneSums, RowRead, row_scales, stage_normalised};
use crate::common::fp8::{Fp8Decode, halves_words};
use crate::common::fragment::{half_pair, mma_accumulate};
use cubecl::ir::ElemType;
use cubecl::prelude::*;
use half::f16;

/// Inner elements a group: one scale a group and weight row, two spans of 64.
pub(crate) const GROUP: usize = 128;
/// The most rows of `x` the kernels take (the products' 8 columns).
pub(crate) const MMA_MAX_ROWS: usize = 8;
/// Output columns a cube (the products' 16 rows).
pub(crate) const CUBE_COLUMNS: usize = 16;

/// The launch shape of the kernels (comptime): `rows` rows of `x` (1 to 8), `pairs` weight rows a
/// column (2: gate and up), `warps` warps a cube over the inner size `k` (a multiple of
/// [`GROUP`]), `x`'s rows read as stored or staged normalised, scale blocks of `block_words`
/// words (a multiple of 32), NaN codes checked unless `nan_codes` is false (the decode is always
/// f16 halves).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Fp8MmaShape {
    pub(crate) rows: usize,
    pub(crate) pairs: usize,
    pub(crate) warps: usize,
    pub(crate) k: usize,
    pub(crate) read: RowRead,
    pub(crate) block_words: usize,
    pub(crate) nan_codes: bool,
}

/// `out [rows, n] = x [rows, k] · wᵀ` on an fp8 weight (`codes [n, k / 4]` bound as 16-byte
/// vectors, `scales` as [`super::fp8`] reads them), `x` as vectors of `N` = 8. See the module doc.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn mma_fp8_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, Const<4>>>,
    scales: &Tensor<f32>,
    out: &mut Tensor<F>,
    #[comptime] shape: Fp8MmaShape,
    #[define(F)] _dtype: ElemType,
) {
    let (totals, col0, n) = plain_totals::<F, N>(x, codes, scales, shape);
    #[unroll]
    for h in 0..2usize {
        #[unroll]
        for i in 0..2usize {
            let (at, written) = output_at(col0, n, comptime!(shape.rows), h, i);
            if written {
                out[at] = F::cast_from(totals[h].extract(i));
            }
        }
    }
}

/// [`mma_fp8_kernel`](fn@mma_fp8_kernel) of the RMSNorm of `x`'s rows (weight `norm_w [k]`,
/// rounded as the matrix-vector kernels round them, staged once a cube), and with `pairs = 2`
/// the activation of a stacked gate/up weight (`n` gate rows, then `n` up rows: `out = silu(gate)
/// · up`, each rounded to `F` first, as [`super::matvec`]'s `store_silu`).
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn mma_fp8_norm_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, Const<4>>>,
    scales: &Tensor<f32>,
    out: &mut Tensor<F>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] shape: Fp8MmaShape,
    #[define(F)] _dtype: ElemType,
) {
    let shape = comptime!(Fp8MmaShape {
        read: RowRead::Staged,
        ..shape
    });
    let (rows, pairs, warps) = comptime!((shape.rows, shape.pairs, shape.warps));
    let nv = N::value();
    let k_vectors = comptime!(shape.k / nv);
    let n = codes.shape(0) / pairs;
    // The whole cube leaves together, before any sync.
    let col0 = cube_columns(n);
    let sums = comptime!(PlaneSums {
        lanes: 32,
        planes: warps,
        shared: false,
    });
    let norms = row_scales::<F, N>(x, eps, inv_hidden, rows, k_vectors, sums);
    let mut rows_s = Shared::<[Vector<F, N>]>::new_slice(comptime!(rows * k_vectors));
    stage_normalised::<F, N>(x, norm_w, &norms, &mut rows_s, rows, k_vectors, sums);
    let acc = mma_fp8_products::<F, N>(x, &rows_s, codes, scales, col0, n, shape);
    let totals = warp_totals(&acc, comptime!(2 * pairs), warps);
    #[unroll]
    for h in 0..2usize {
        #[unroll]
        for i in 0..2usize {
            let (at, written) = output_at(col0, n, rows, h, i);
            if written {
                if comptime!(pairs == 1) {
                    out[at] = F::cast_from(totals[h].extract(i));
                } else {
                    let gate = F::cast_from(totals[h].extract(i));
                    let up = F::cast_from(totals[comptime!(2 + h)].extract(i));
                    let g = f32::cast_from(gate);
                    let s = g / (f32::new(1.0) + f32::exp(f32::new(0.0) - g));
                    out[at] = F::cast_from(s) * up;
                }
            }
        }
    }
}

/// [`mma_fp8_kernel`](fn@mma_fp8_kernel) added to the residual stream: `out = res + x · wᵀ`,
/// the product rounded to `F`, then the sum (as [`super::matvec`]'s `store_added`).
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn mma_fp8_add_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, Const<4>>>,
    scales: &Tensor<f32>,
    res: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] shape: Fp8MmaShape,
    #[define(F)] _dtype: ElemType,
) {
    let (totals, col0, n) = plain_totals::<F, N>(x, codes, scales, shape);
    #[unroll]
    for h in 0..2usize {
        #[unroll]
        for i in 0..2usize {
            let (at, written) = output_at(col0, n, comptime!(shape.rows), h, i);
            if written {
                let s = F::cast_from(totals[h].extract(i));
                out[at] = F::cast_from(f32::cast_from(res[at]) + f32::cast_from(s));
            }
        }
    }
}

/// The sums of the kernels without a norm (`x`'s rows as stored, one weight row a column), with
/// the cube's first output column and the output width `n`.
#[cube]
fn plain_totals<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, Const<4>>>,
    scales: &Tensor<f32>,
    #[comptime] shape: Fp8MmaShape,
) -> (Array<Vector<f32, Const<2>>>, usize, usize) {
    let shape = comptime!(Fp8MmaShape {
        pairs: 1,
        read: RowRead::Plain,
        ..shape
    });
    let n = codes.shape(0);
    let col0 = cube_columns(n);
    let unstaged = Shared::<[Vector<F, N>]>::new_slice(1usize);
    let acc = mma_fp8_products::<F, N>(x, &unstaged, codes, scales, col0, n, shape);
    (warp_totals(&acc, 2usize, comptime!(shape.warps)), col0, n)
}

/// Output `(h, i)` of this lane (`x`'s row `2t + i`, column `col0 + g + 8h`, of [`warp_totals`]'
/// slot `h`, or `2 + h` for the up rows): its index in `out [rows, n]`, and whether it is
/// written (warp 0 writes, within the rows and columns).
#[cube]
fn output_at(
    col0: usize,
    n: usize,
    #[comptime] rows: usize,
    #[comptime] h: usize,
    #[comptime] i: usize,
) -> (usize, bool) {
    let (g, t) = lane_position();
    let row = 2 * t + i;
    let col = col0 + g + h * 8;
    (row * n + col, UNIT_POS_Y == 0 && row < rows && col < n)
}

/// The cube's first output column; the whole cube leaves past `n`.
#[cube]
fn cube_columns(n: usize) -> usize {
    let col0 = CUBE_POS * CUBE_COLUMNS;
    if col0 >= n {
        terminate!();
    }
    col0
}

/// This lane's `(g, t)`: the products' row `g` (and `g + 8`) and inner pair `t`.
#[cube]
fn lane_position() -> (usize, usize) {
    let lane = UNIT_POS_X as usize;
    (lane / 4, lane % 4)
}

/// The sums over the cube's warps (in warp order) of each lane's `acc[0..slots]`, through shared
/// memory (one cube sync; every warp of the cube taking part).
#[cube]
fn warp_totals(
    acc: &Array<Vector<f32, Const<2>>>,
    #[comptime] slots: usize,
    #[comptime] warps: usize,
) -> Array<Vector<f32, Const<2>>> {
    let mut red = Shared::<[Vector<f32, Const<2>>]>::new_slice(comptime!(warps * slots * 32));
    let lane = UNIT_POS_X as usize;
    let warp = UNIT_POS_Y as usize;
    #[unroll]
    for s in 0..slots {
        red[(warp * slots + s) * 32 + lane] = acc[s];
    }
    sync_cube();
    let mut totals = Array::<Vector<f32, Const<2>>>::new(slots);
    #[unroll]
    for s in 0..slots {
        let mut sum = red[s * 32 + lane];
        #[unroll]
        for w in 1..warps {
            sum += red[(w * slots + s) * 32 + lane];
        }
        totals[s] = sum;
    }
    totals
}

/// Group `i`'s codes this lane loads into `into`: slot `2p + h` (weight row `col0 + g + 8h + p ·
/// n`, zeros past column `n`) at `into[2 · slot + s]` for span `s`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_group(
    codes: &Tensor<Vector<u32, Const<4>>>,
    into: &mut Array<Vector<u32, Const<4>>>,
    col0: usize,
    n: usize,
    i: usize,
    g: usize,
    t: usize,
    #[comptime] shape: Fp8MmaShape,
) {
    let row_vectors = comptime!(shape.k / 16);
    #[unroll]
    for p in 0..shape.pairs {
        #[unroll]
        for h in 0..2usize {
            let col = col0 + g + comptime!(8 * h);
            #[unroll]
            for s in 0..2usize {
                let mut v = Vector::<u32, Const<4>>::new(0u32);
                if col < n {
                    v = codes[(col + p * n) * row_vectors + i * 8 + comptime!(4 * s) + t];
                }
                into[comptime!(2 * (2 * p + h) + s)] = v;
            }
        }
    }
}

/// This warp's share of the cube's products: accumulator `2p + h` holds, as `mma.sync`'s
/// accumulator layout gives it, weight row `col0 + g + 8h + p · n` (zeros past `n`) times `x`'s
/// rows `2t` and `2t + 1` over the warp's groups, each group's sum multiplied by its scale.
#[cube]
#[allow(clippy::too_many_arguments)]
fn mma_fp8_products<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    rows_s: &Shared<[Vector<F, N>]>,
    codes: &Tensor<Vector<u32, Const<4>>>,
    scales: &Tensor<f32>,
    col0: usize,
    n: usize,
    #[comptime] shape: Fp8MmaShape,
) -> Array<Vector<f32, Const<2>>> {
    let (rows, pairs, warps) = comptime!((shape.rows, shape.pairs, shape.warps));
    let (block_words, nan_codes) = comptime!((shape.block_words, shape.nan_codes));
    let nv = N::value();
    let k_vectors = comptime!(shape.k / nv);
    let groups = comptime!(shape.k / GROUP);
    let slots = comptime!(2 * pairs);
    let factor = comptime!(Fp8Decode::Halves.raw_factor());
    let staged = comptime!(shape.read == RowRead::Staged);
    let (g, t) = lane_position();
    let warp = UNIT_POS_Y as usize;
    let first = warp * groups / warps;
    let end = (warp + 1) * groups / warps;
    let blocks = scales.shape(1);

    // Each slot's weight row for its scales: a column past `n` (its codes are zeros) reads the
    // last column's.
    let mut scale_rows = Array::<usize>::new(slots);
    #[unroll]
    for p in 0..pairs {
        #[unroll]
        for h in 0..2usize {
            scale_rows[comptime!(2 * p + h)] =
                (usize::min(col0 + g + comptime!(8 * h), n - 1) + p * n) * blocks;
        }
    }
    let mut acc = Array::<Vector<f32, Const<2>>>::new(slots);
    #[unroll]
    for a in 0..slots {
        acc[a] = Vector::new(f32::new(0.0));
    }
    let loads = comptime!(2 * slots);
    let mut next = Array::<Vector<u32, Const<4>>>::new(loads);
    if first < end {
        load_group(codes, &mut next, col0, n, first, g, t, shape);
    }
    for i in first..end {
        let mut cur = Array::<Vector<u32, Const<4>>>::new(loads);
        #[unroll]
        for a in 0..loads {
            cur[a] = next[a];
        }
        // The next group's codes, in flight while this one's are multiplied.
        if i + 1 < end {
            load_group(codes, &mut next, col0, n, i + 1, g, t, shape);
        }
        // x's elements `128i + 64s + 16t + 8v …` of row `g` (zeros past the rows).
        let mut xs = Array::<Vector<F, N>>::new(4usize);
        #[unroll]
        for s in 0..2usize {
            #[unroll]
            for v in 0..2usize {
                let at = g * k_vectors + i * 16 + comptime!(8 * s + v) + 2 * t;
                let mut value = Vector::<F, N>::new(F::new(0.0));
                if g < rows {
                    if comptime!(staged) {
                        value = rows_s[at];
                    } else {
                        value = x[at];
                    }
                }
                xs[comptime!(2 * s + v)] = value;
            }
        }
        let mut part = Array::<Vector<f32, Const<2>>>::new(slots);
        #[unroll]
        for a in 0..slots {
            part[a] = Vector::new(f32::new(0.0));
        }
        #[unroll]
        for s in 0..2usize {
            #[unroll]
            for q in 0..4usize {
                let xv = xs[comptime!(2 * s + q / 2)];
                let o = comptime!(4 * (q % 2));
                let mut bf = Array::<Vector<f16, Const<2>>>::new(2usize);
                bf[0] = half_pair(
                    f16::cast_from(xv.extract(o)),
                    f16::cast_from(xv.extract(comptime!(o + 2))),
                );
                bf[1] = half_pair(
                    f16::cast_from(xv.extract(comptime!(o + 1))),
                    f16::cast_from(xv.extract(comptime!(o + 3))),
                );
                #[unroll]
                for p in 0..pairs {
                    let (e0, o0) =
                        halves_words(cur[comptime!(2 * (2 * p) + s)].extract(q), nan_codes);
                    let (e1, o1) =
                        halves_words(cur[comptime!(2 * (2 * p + 1) + s)].extract(q), nan_codes);
                    let mut af = Array::<Vector<f16, Const<2>>>::new(4usize);
                    af[0] = Vector::<f16, Const<2>>::reinterpret(e0);
                    af[1] = Vector::<f16, Const<2>>::reinterpret(e1);
                    af[2] = Vector::<f16, Const<2>>::reinterpret(o0);
                    af[3] = Vector::<f16, Const<2>>::reinterpret(o1);
                    mma_accumulate(&af, &bf, &mut part, comptime!(2 * p));
                }
            }
        }
        // One scale a group and row (the blocks are whole groups).
        let block = (i * comptime!(GROUP / 4)) / block_words;
        #[unroll]
        for a in 0..slots {
            let scale = scales[scale_rows[a] + block] * f32::new(factor);
            acc[a] += part[a] * Vector::new(scale);
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::super::matvec::RowRead;
    use super::{Fp8MmaShape, mma_fp8_add_kernel, mma_fp8_kernel, mma_fp8_norm_kernel};
    use crate::test_common as common;
    use cubecl::ir::{AddressType, ElemType, FloatKind};
    use cubecl::prelude::*;

    /// The three kernels expanded against CUDA's manual-`mma` register layout and a device listing
    /// f16 `mma.sync` 16 × 8 × 16, and translated to CUDA C++ (no CUDA compiler runs here): one
    /// row and eight, one warp and eight, with and without NaN codes, gate/up pairs. Their
    /// arithmetic is checked against float64 by the root crate's `fp8_projections_match_float64`
    /// and `fused_projections_match_float64` through CUDA.
    #[test]
    fn mma_fp8_kernels_expand_and_compile_to_cuda() {
        let Some(client) = common::any_client("warp-level fp8 products' CUDA check") else {
            return;
        };
        let (properties, target) = common::warp_mma_properties(&client);
        let f16 = ElemType::Float(FloatKind::F16);
        let (n, k) = (48usize, 1024usize);
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        for (rows, warps, nan_codes, block_words) in [
            (1usize, 8usize, true, 32usize),
            (8, 1, false, 256),
            (3, 4, true, 64),
        ] {
            let shape = |pairs: usize, read: RowRead| Fp8MmaShape {
                rows,
                pairs,
                warps,
                k,
                read,
                block_words,
                nan_codes,
            };
            let what = format!("{rows} rows, {warps} warps, blocks of {block_words} words");
            let dim = CubeDim::new_2d(32, warps as u32);
            let count = || CubeCount::Static(1, 1, 1);
            let scales = || tensor(&[n, k / 4 / block_words]);
            common::assert_warp_mma_kernel_compiles(
                mma_fp8_kernel::create_dummy_kernel(
                    properties.clone(),
                    target.clone(),
                    count(),
                    dim,
                    AddressType::U32,
                    8,
                    tensor(&[rows, k]),
                    tensor(&[n, k / 4]),
                    scales(),
                    tensor(&[rows, n]),
                    shape(1, RowRead::Plain),
                    f16,
                ),
                &format!("plain, {what}"),
            );
            common::assert_warp_mma_kernel_compiles(
                mma_fp8_add_kernel::create_dummy_kernel(
                    properties.clone(),
                    target.clone(),
                    count(),
                    dim,
                    AddressType::U32,
                    8,
                    tensor(&[rows, k]),
                    tensor(&[n, k / 4]),
                    scales(),
                    tensor(&[rows, n]),
                    tensor(&[rows, n]),
                    shape(1, RowRead::Plain),
                    f16,
                ),
                &format!("add, {what}"),
            );
            for pairs in [1usize, 2] {
                common::assert_warp_mma_kernel_compiles(
                    mma_fp8_norm_kernel::create_dummy_kernel(
                        properties.clone(),
                        target.clone(),
                        count(),
                        dim,
                        AddressType::U32,
                        8,
                        tensor(&[rows, k]),
                        tensor(&[k]),
                        tensor(&[n, k / 4]),
                        scales(),
                        tensor(&[rows, n / pairs]),
                        0.1,
                        1.0 / k as f32,
                        shape(pairs, RowRead::Staged),
                        f16,
                    ),
                    &format!("norm, {pairs} weight rows a column, {what}"),
                );
            }
        }
    }
}
