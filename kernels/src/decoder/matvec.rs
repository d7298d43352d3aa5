//! Matrix-vector products for decode: `out [m, n] = x [m, k] · wᵀ` with the weight stored
//! `w [n, k]` (HuggingFace's `[out, in]`), for a few rows `m`. One plane per output column (a
//! few adjacent columns when there are several rows): its units read the column's weight row
//! in coalesced vectors (each byte of the weight once for
//! all `m` rows), multiply by the rows of `x` (small, served from cache), accumulate in f32 and
//! add their partial sums with a plane sum (through shared memory on devices without plane
//! operations). The weight streams at the memory bus's pace where Burn's tiled matmul, built
//! for large `m`, reaches a fraction of it. From 17 to 64 rows, [`few_rows_kernel`](fn@few_rows_kernel): the same single
//! read of the weight through tensor-core tiles. See benches/NOTES.md, 'Projections per row
//! count'. Their launches are in [`super::launch`].

use super::fp8::Fp8Words;
use crate::common::fp8::decode_codes;
pub(crate) use crate::common::fragment::TILE;
use crate::common::fragment::{load_fragment, zero_accumulator};
use crate::common::reduce::lane_sum;
use cubecl::ir::ElemType;
use cubecl::prelude::*;

/// How the lanes of a plane add up their values, a launch's choice (comptime): with the
/// device's plane operations (`shared` false), or where it has none or no fixed plane size,
/// through shared memory, the cube `planes` rows of `lanes` units and every plane taking part
/// (none leaves early).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct PlaneSums {
    pub(crate) lanes: usize,
    pub(crate) planes: usize,
    pub(crate) shared: bool,
}

/// `out [rows, n] = x [rows, k] · wᵀ`, `w [n, k]`; `x` and `w` as vectors of `N`, a row
/// `k_vectors` of them. The cube is `(plane size, planes)` units; plane `UNIT_POS_Y` of cube
/// `CUBE_POS` computes the `cols` adjacent columns from `(CUBE_POS * planes + UNIT_POS_Y) *
/// cols` (several columns per plane share each load of `x`). Each unit keeps `unroll * cols`
/// weight loads in flight.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matvec_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    out: &mut Tensor<F>,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] unroll: usize,
    #[comptime] k_vectors: usize,
    #[comptime] sums: PlaneSums,
    #[define(F)] _dtype: ElemType,
) {
    let n = w.shape(0);
    let col0 = plane_columns(n, cols, sums);
    let acc = plain_products::<F, N>(x, w, col0, n, rows, cols, unroll, k_vectors);
    store_plane_sums::<F, N>(&acc, out, n, col0, rows, cols, sums);
}

/// [`matvec_kernel`](fn@matvec_kernel) of the RMSNorm of `x`'s rows (weight `norm_w [k]`,
/// `eps`, `inv_hidden = 1 / k`), each normalised element rounded as the norm kernel rounds it
/// (`norm_w * cast(x * rsqrt(mean(x²) + eps))`): the decoder's norm and the projection after it
/// in one launch. The cube's units sum the rows' squares first (each row read once more a cube);
/// with `staged` they then write the normalised rows into shared memory once for the cube
/// ([`stage_normalised`]), else every plane normalises each element it reads.
/// With `pairs = 2` the weight is a stacked gate/up projection `[2m, k]` and `out [rows, m] =
/// cast(silu(gate)) * up` (as the activation kernel, `act.rs`): a plane's `cols` gate columns
/// from `col0` and their up columns `m` further.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matvec_norm_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    out: &mut Tensor<F>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] pairs: usize,
    #[comptime] unroll: usize,
    #[comptime] k_vectors: usize,
    #[comptime] sums: PlaneSums,
    #[comptime] staged: bool,
    #[define(F)] _dtype: ElemType,
) {
    let n = w.shape(0) / pairs;
    // Before any plane leaves: the cube syncs.
    let scales = row_scales::<F, N>(x, eps, inv_hidden, rows, k_vectors, sums);
    let mut rows_s =
        Shared::<[Vector<F, N>]>::new_slice(comptime!(if staged { rows * k_vectors } else { 1 }));
    if comptime!(staged) {
        stage_normalised::<F, N>(x, norm_w, &scales, &mut rows_s, rows, k_vectors, sums);
    }
    let col0 = plane_columns(n, cols, sums);
    let read = comptime!(if staged {
        RowRead::Staged
    } else {
        RowRead::Normalised
    });
    let acc = plane_products::<F, N>(
        x, norm_w, &scales, &rows_s, w, col0, n, n, rows, cols, pairs, unroll, k_vectors, read,
    );
    if comptime!(pairs == 1) {
        store_plane_sums::<F, N>(&acc, out, n, col0, rows, cols, sums);
    } else {
        store_silu::<F, N>(&acc, out, n, col0, rows, cols, sums);
    }
}

/// [`matvec_kernel`](fn@matvec_kernel) added to the residual stream: `out = res + x · wᵀ`, the
/// product rounded once to `F` and the sum rounded once more (as the model's residual add): a
/// projection and the add after it in one launch.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matvec_add_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    res: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] unroll: usize,
    #[comptime] k_vectors: usize,
    #[comptime] sums: PlaneSums,
    #[define(F)] _dtype: ElemType,
) {
    let n = w.shape(0);
    let col0 = plane_columns(n, cols, sums);
    let acc = plain_products::<F, N>(x, w, col0, n, rows, cols, unroll, k_vectors);
    store_added::<F, N>(&acc, res, out, n, col0, rows, cols, sums);
}

/// The first of the `cols` output columns (of `n`) of this unit's plane. With plane operations
/// the plane leaves when it has none (a whole plane together: its plane sums stay uniform);
/// with shared-memory sums every plane stays (the cube syncs), its loads and stores guarded.
#[cube]
// Not collapsed: the outer condition is comptime (no branch in shared mode), the inner one not.
#[allow(clippy::collapsible_if)]
pub(crate) fn plane_columns(
    n: usize,
    #[comptime] cols: usize,
    #[comptime] sums: PlaneSums,
) -> usize {
    let col0 = (CUBE_POS * CUBE_DIM_Y as usize + UNIT_POS_Y as usize) * cols;
    if comptime!(!sums.shared) {
        if col0 >= n {
            terminate!();
        }
    }
    col0
}

/// The sums over the plane's lanes of each lane's `values[0..count]`, every lane given them:
/// plane sums, or through shared memory (two cube syncs, every plane of the cube taking part).
#[cube]
pub(crate) fn plane_totals(
    values: &Array<f32>,
    #[comptime] count: usize,
    #[comptime] sums: PlaneSums,
) -> Array<f32> {
    let mut totals = Array::<f32>::new(count);
    if comptime!(sums.shared) {
        let lanes = comptime!(sums.lanes);
        let mut red = Shared::<[f32]>::new_slice(comptime!(sums.planes * count * lanes));
        let lane = UNIT_POS_X as usize;
        let base = UNIT_POS_Y as usize * comptime!(count * lanes);
        #[unroll]
        for a in 0..count {
            red[base + a * lanes + lane] = values[a];
        }
        sync_cube();
        // Lane `a` adds value `a`'s row and leaves the total at its start (no lane reads
        // another's row before the sync).
        for a in range_stepped(lane, count, lanes) {
            let mut total = f32::new(0.0);
            for l in 0..lanes {
                total += red[base + a * lanes + l];
            }
            red[base + a * lanes] = total;
        }
        sync_cube();
        #[unroll]
        for a in 0..count {
            totals[a] = red[base + a * lanes];
        }
    } else {
        #[unroll]
        for a in 0..count {
            totals[a] = plane_sum(values[a]);
        }
    }
    totals
}

/// The lane sums of the first `count` accumulators.
#[cube]
fn lane_sums<N: Size>(acc: &Array<Vector<f32, N>>, #[comptime] count: usize) -> Array<f32> {
    let mut sums = Array::<f32>::new(count);
    #[unroll]
    for a in 0..count {
        sums[a] = lane_sum::<N>(acc[a]);
    }
    sums
}

/// How the matrix-vector kernels read the rows of `x` (comptime).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum RowRead {
    /// As stored.
    Plain,
    /// Each element normalised as RMSNorm rounds it where it is read, with its row's scale and
    /// the norm weight.
    Normalised,
    /// Normalised once a cube into shared memory ([`stage_normalised`]), read from there.
    Staged,
}

/// Vector `i` of row `r` of `x` in f32, read as `read` says (`scales`, `norm_w`: the row's
/// RMSNorm scale and the norm weight; `rows_s`: the rows [`stage_normalised`] wrote, `k_vectors`
/// vectors a row).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn row_vector<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    scales: &Array<f32>,
    rows_s: &Shared<[Vector<F, N>]>,
    r: usize,
    i: usize,
    #[comptime] k_vectors: usize,
    #[comptime] read: RowRead,
) -> Vector<f32, N> {
    match comptime!(read) {
        RowRead::Plain => Vector::<f32, N>::cast_from(x[r * k_vectors + i]),
        RowRead::Normalised => Vector::<f32, N>::cast_from(normalised::<F, N>(
            x[r * k_vectors + i],
            scales[r],
            norm_w[i],
        )),
        RowRead::Staged => Vector::<f32, N>::cast_from(rows_s[r * k_vectors + i]),
    }
}

/// A vector `x` of a row normalised as RMSNorm rounds it: `cast(x * scale) * norm_w` (the row's
/// scale, the norm weight's vector), the one place both row reads that normalise take it from.
#[cube]
pub(crate) fn normalised<F: Float, N: Size>(
    x: Vector<F, N>,
    scale: f32,
    norm_w: Vector<F, N>,
) -> Vector<F, N> {
    Vector::<F, N>::cast_from(Vector::<f32, N>::cast_from(x) * Vector::new(scale)) * norm_w
}

/// `rows` rows of `x` (`k_vectors` vectors each) normalised as [`row_vector`] normalises them,
/// written once into `rows_s` by every unit of the cube, then a cube sync: call it before any
/// plane leaves.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn stage_normalised<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    scales: &Array<f32>,
    rows_s: &mut Shared<[Vector<F, N>]>,
    #[comptime] rows: usize,
    #[comptime] k_vectors: usize,
    #[comptime] sums: PlaneSums,
) {
    let units = comptime!(sums.lanes * sums.planes);
    let unit = UNIT_POS_Y as usize * comptime!(sums.lanes) + UNIT_POS_X as usize;
    #[unroll]
    for r in 0..rows {
        for i in range_stepped(unit, k_vectors, units) {
            rows_s[r * k_vectors + i] =
                normalised::<F, N>(x[r * k_vectors + i], scales[r], norm_w[i]);
        }
    }
    sync_cube();
}

/// [`plane_products`] of `x`'s rows as stored, one weight row a column.
#[cube]
#[allow(clippy::too_many_arguments)]
fn plain_products<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    col0: usize,
    n: usize,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] unroll: usize,
    #[comptime] k_vectors: usize,
) -> Array<Vector<f32, N>> {
    // `x` stands in for the norm weight the plain product does not read.
    let no_scales = Array::<f32>::new(1usize);
    let unstaged = Shared::<[Vector<F, N>]>::new_slice(1usize);
    plane_products::<F, N>(
        x,
        x,
        &no_scales,
        &unstaged,
        w,
        col0,
        n,
        0,
        rows,
        cols,
        1usize,
        unroll,
        k_vectors,
        RowRead::Plain,
    )
}

/// This unit's share of a plane's products: accumulator `r * cols * pairs + p * cols + c` holds
/// row `r` of `x` times weight row `col0 + c + p * offset` (columns `col0 + c ≥ n` read zeros),
/// lane by lane, the rows read as `read` says ([`row_vector`]). Each unit keeps `unroll * cols
/// * pairs` weight loads in flight.
#[cube]
#[allow(clippy::too_many_arguments)]
fn plane_products<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    scales: &Array<f32>,
    rows_s: &Shared<[Vector<F, N>]>,
    w: &Tensor<Vector<F, N>>,
    col0: usize,
    n: usize,
    offset: usize,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] pairs: usize,
    #[comptime] unroll: usize,
    #[comptime] k_vectors: usize,
    #[comptime] read: RowRead,
) -> Array<Vector<f32, N>> {
    let lane = UNIT_POS_X as usize;
    let lanes = CUBE_DIM_X as usize;
    let width = comptime!(cols * pairs);
    let mut acc = Array::<Vector<f32, N>>::new(rows * width);
    #[unroll]
    for a in 0..rows * width {
        acc[a] = Vector::new(f32::new(0.0));
    }
    let step = lanes * unroll;
    let mut base = lane;
    while base < k_vectors {
        let mut ws = Array::<Vector<f32, N>>::new(unroll * width);
        #[unroll]
        for u in 0..unroll {
            let i = base + u * lanes;
            #[unroll]
            for j in 0..width {
                let c = comptime!(j % cols);
                let p = comptime!(j / cols);
                let mut v = Vector::<f32, N>::new(f32::new(0.0));
                if i < k_vectors && col0 + c < n {
                    v = Vector::<f32, N>::cast_from(w[(col0 + c + p * offset) * k_vectors + i]);
                }
                ws[u * width + j] = v;
            }
        }
        #[unroll]
        for u in 0..unroll {
            let i = base + u * lanes;
            if i < k_vectors {
                #[unroll]
                for r in 0..rows {
                    let xv = row_vector::<F, N>(x, norm_w, scales, rows_s, r, i, k_vectors, read);
                    #[unroll]
                    for j in 0..width {
                        acc[r * width + j] += xv * ws[u * width + j];
                    }
                }
            }
        }
        base += step;
    }
    acc
}

/// Each of the `rows` rows' RMSNorm scale `rsqrt(mean(x²) + eps)` (`x` as vectors of `N`,
/// `k_vectors` a row, `inv_hidden = 1 / k`), every unit of the cube given them: the cube's units
/// sum strided vectors of the rows (each row read once a cube), then add their sums over the
/// cube. Every unit of the cube must call it (a cube sync): before any plane leaves.
#[cube]
pub(crate) fn row_scales<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] rows: usize,
    #[comptime] k_vectors: usize,
    #[comptime] sums: PlaneSums,
) -> Array<f32> {
    let units = comptime!(sums.lanes * sums.planes);
    let unit = UNIT_POS_Y as usize * comptime!(sums.lanes) + UNIT_POS_X as usize;
    let mut squares = Array::<f32>::new(rows);
    #[unroll]
    for r in 0..rows {
        let mut sum = f32::new(0.0);
        for i in range_stepped(unit, k_vectors, units) {
            let v = Vector::<f32, N>::cast_from(x[r * k_vectors + i]);
            sum += lane_sum::<N>(v * v);
        }
        squares[r] = sum;
    }
    let mut scales = cube_totals(&squares, rows, sums);
    #[unroll]
    for r in 0..rows {
        scales[r] = f32::new(1.0) / f32::sqrt(scales[r] * inv_hidden + eps);
    }
    scales
}

/// The sums over the cube's units of each unit's `values[0..count]`, every unit given them:
/// plane sums then the planes' totals through shared memory, or with shared-memory sums one
/// table of every unit's values (two cube syncs; every unit of the cube taking part, none having
/// left).
#[cube]
fn cube_totals(
    values: &Array<f32>,
    #[comptime] count: usize,
    #[comptime] sums: PlaneSums,
) -> Array<f32> {
    let (lanes, planes) = comptime!((sums.lanes, sums.planes));
    let lane = UNIT_POS_X as usize;
    let plane = UNIT_POS_Y as usize;
    let mut totals = Array::<f32>::new(count);
    if comptime!(sums.shared) {
        let units = comptime!(lanes * planes);
        let unit = plane * lanes + lane;
        let mut red = Shared::<[f32]>::new_slice(comptime!(count * lanes * planes));
        #[unroll]
        for a in 0..count {
            red[a * units + unit] = values[a];
        }
        sync_cube();
        // Unit `a` adds value `a`'s row and leaves the total at its start (no unit reads another's
        // row before the sync).
        for a in range_stepped(unit, count, units) {
            let mut total = f32::new(0.0);
            for u in 0..units {
                total += red[a * units + u];
            }
            red[a * units] = total;
        }
        sync_cube();
        #[unroll]
        for a in 0..count {
            totals[a] = red[a * units];
        }
    } else {
        let mut red = Shared::<[f32]>::new_slice(comptime!(count * planes));
        #[unroll]
        for a in 0..count {
            let s = plane_sum(values[a]);
            if lane == 0 {
                red[a * planes + plane] = s;
            }
        }
        sync_cube();
        #[unroll]
        for a in 0..count {
            let mut total = f32::new(0.0);
            for p in 0..planes {
                total += red[a * planes + p];
            }
            totals[a] = total;
        }
    }
    totals
}

/// The activation's last step: accumulators `acc[r * 2 * cols + c]` (gate) and `[r * 2 * cols +
/// cols + c]` (up) summed over the plane, each rounded to `F`, and `cast(silu(gate)) * up`
/// written by lane 0 at `out[r * n + col0 + c]` (columns past `n` skipped).
#[cube]
pub(crate) fn store_silu<F: Float, N: Size>(
    acc: &Array<Vector<f32, N>>,
    out: &mut Tensor<F>,
    n: usize,
    col0: usize,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] sums: PlaneSums,
) {
    let totals = plane_totals(&lane_sums::<N>(acc, rows * 2 * cols), rows * 2 * cols, sums);
    let lane = UNIT_POS_X as usize;
    #[unroll]
    for r in 0..rows {
        #[unroll]
        for c in 0..cols {
            let gate = F::cast_from(totals[r * 2 * cols + c]);
            let up = F::cast_from(totals[r * 2 * cols + cols + c]);
            let g = f32::cast_from(gate);
            let s = g / (f32::new(1.0) + f32::exp(f32::new(0.0) - g));
            if lane == 0 && col0 + c < n {
                out[r * n + col0 + c] = F::cast_from(s) * up;
            }
        }
    }
}

/// The residual add's last step: accumulator `acc[r * cols + c]` summed over the plane, rounded
/// to `F`, added to `res` at its place and rounded again, written by lane 0 at `out[r * n +
/// col0 + c]` (columns past `n` skipped).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_added<F: Float, N: Size>(
    acc: &Array<Vector<f32, N>>,
    res: &Tensor<F>,
    out: &mut Tensor<F>,
    n: usize,
    col0: usize,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] sums: PlaneSums,
) {
    let totals = plane_totals(&lane_sums::<N>(acc, rows * cols), rows * cols, sums);
    let lane = UNIT_POS_X as usize;
    #[unroll]
    for r in 0..rows {
        #[unroll]
        for c in 0..cols {
            let s = F::cast_from(totals[r * cols + c]);
            if lane == 0 && col0 + c < n {
                let at = r * n + col0 + c;
                out[at] = F::cast_from(f32::cast_from(res[at]) + f32::cast_from(s));
            }
        }
    }
}

/// The matrix-vector kernels' last step: each (row, column) accumulator `acc[r * cols + c]`
/// summed over its lanes and the plane, written by lane 0 at `out[r * n + col0 + c]` (columns
/// past `n` skipped).
#[cube]
pub(crate) fn store_plane_sums<F: Float, N: Size>(
    acc: &Array<Vector<f32, N>>,
    out: &mut Tensor<F>,
    n: usize,
    col0: usize,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] sums: PlaneSums,
) {
    let totals = plane_totals(&lane_sums::<N>(acc, rows * cols), rows * cols, sums);
    let lane = UNIT_POS_X as usize;
    #[unroll]
    for r in 0..rows {
        #[unroll]
        for c in 0..cols {
            if lane == 0 && col0 + c < n {
                out[r * n + col0 + c] = F::cast_from(totals[r * cols + c]);
            }
        }
    }
}

/// `out [m, n] = x [m, k] · wᵀ` (`w [n, k]`) for `16 < m ≤ 64` rows with tensor-core tiles: the
/// cube of `CUBE_POS` owns `cols` tiles of 16 output columns; each of its `planes` planes walks
/// one in `planes` of the 16-wide inner tiles, loading the weight's `16 × 16` tiles once (read
/// column-major from the stored rows) for all `m_tiles` row tiles of `x` (small, served from
/// cache; each row tile loaded once for the `cols` column tiles), one f32 accumulator per (row
/// tile, column tile). The planes' partial products meet in shared memory, one column tile at a
/// time, are added in f32 and rounded once. The last row tile starts at `m - 16` (it overlaps the
/// one before when 16 does not divide `m`; its rows already written are skipped), so no read
/// passes `x`.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn few_rows_kernel<F: Float>(
    x: &Tensor<F>,
    w: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] m_tiles: usize,
    #[comptime] cols: usize,
    #[comptime] planes: usize,
    #[define(F)] _dtype: ElemType,
) {
    let m = x.shape(0);
    let k = x.shape(1);
    let n = w.shape(0);
    let n0 = CUBE_POS * TILE * cols;
    // The whole cube leaves together: the syncs below stay uniform.
    if n0 >= n {
        terminate!();
    }
    let mut accs = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _ in 0..m_tiles * cols {
        accs.push(zero_accumulator());
    }
    let k_tiles = k / TILE;
    let stride = k as u32;
    let mut t = UNIT_POS_Y as usize;
    while t < k_tiles {
        let k0 = t * TILE;
        let mut bs = Sequence::<cmma::Matrix<F>>::new();
        #[unroll]
        for c in 0..cols {
            let w0 = (n0 + c * TILE) * k + k0;
            bs.push(load_fragment::<F, F>(
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::ColMajor,
                w.slice(w0, w0 + (TILE - 1) * k + TILE),
                stride,
            ));
        }
        #[unroll]
        for r in 0..m_tiles {
            let x0 = usize::min(r * TILE, m - TILE) * k + k0;
            let a = load_fragment::<F, F>(
                cmma::MatrixIdent::A,
                cmma::MatrixLayout::RowMajor,
                x.slice(x0, x0 + (TILE - 1) * k + TILE),
                stride,
            );
            #[unroll]
            for c in 0..cols {
                let acc = accs.index(r * cols + c);
                cmma::execute(&a, bs.index(c), acc, acc);
            }
        }
        t += planes;
    }
    // Column tile by column tile: each plane's row tiles, then the sum over planes.
    let tile_elems = TILE * TILE;
    let cells = m_tiles * tile_elems;
    let mut partial = Shared::<[f32]>::new_slice(planes * cells);
    let plane = UNIT_POS_Y as usize;
    #[unroll]
    for c in 0..cols {
        #[unroll]
        for r in 0..m_tiles {
            let start = plane * cells + r * tile_elems;
            cmma::store(
                partial.slice_mut(start, start + tile_elems),
                accs.index(r * cols + c),
                TILE as u32,
                cmma::MatrixLayout::RowMajor,
            );
        }
        sync_cube();
        let mut e = UNIT_POS as usize;
        while e < cells {
            let r = e / tile_elems;
            let row = usize::min(r * TILE, m - TILE) + (e % tile_elems) / TILE;
            // Rows below `r * TILE` of the last (overlapping) tile belong to the tile before it.
            if row >= r * TILE {
                let mut s = f32::new(0.0);
                for p in 0..planes {
                    s += partial[p * cells + e];
                }
                out[row * n + n0 + c * TILE + e % TILE] = F::cast_from(s);
            }
            e += CUBE_DIM as usize;
        }
        sync_cube();
    }
}

/// `out = Σ_s partials[s]` over the `splits` shares of [`staged_rows_kernel`](fn@staged_rows_kernel),
/// in share order, in f32, rounded once; one unit per output vector of `N`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub(crate) fn split_sum_kernel<F: Float, N: Size>(
    partials: &Tensor<Vector<f32, N>>,
    out: &mut Tensor<Vector<F, N>>,
    #[comptime] splits: usize,
    #[define(F)] _dtype: ElemType,
) {
    let i = ABSOLUTE_POS;
    let len = out.len();
    if i >= len {
        terminate!();
    }
    let mut s = partials[i];
    #[unroll]
    for p in 1..splits {
        s += partials[p * len + i];
    }
    out[i] = Vector::<F, N>::cast_from(s);
}

/// `out [m, n] = x [m, k] · wᵀ` (`w [n, k]`) for `m ≤ 16 · m_tiles` rows with tensor-core tiles,
/// both operands staged through shared memory: the cube owns `planes` tiles of 16 output columns
/// and one of `splits` shares of the inner size, walked in blocks of `k_tiles` inner tiles; its
/// `planes · row_planes` planes each own one column tile and one of `row_planes` groups of the
/// row tiles. Each block of the weight (`16 · planes` rows) and of `x` (every row; rows past
/// `m` as zeros) is read by all units in coalesced vectors of `N`, the next block's loads issued
/// before the current block's products, and stored in shared memory as those vectors (rows
/// padded by 8 elements against bank conflicts; the fragments are loaded from the vectors, with
/// their alignment). Each plane multiplies its column tile by its row tiles, one f32
/// accumulator per row tile over the whole share, so the planes never meet (with `row_planes`
/// 2, half the accumulators and half the loads a unit: fewer registers, more warps an SM); the
/// result goes through shared memory to the rows below `m`: rounded once into `out [m, n]` (`O`
/// = `F`) with one share, as f32 into `out [splits, m, n]` (`O` = f32) with several, summed by
/// [`split_sum_kernel`](fn@split_sum_kernel) or by the kernel that reads the product next
/// (`super::launch::Residual`, `super::launch::launch_silu_mul`).
///
/// With `fp8`, `w` is an fp8 weight (`P` = u32, `M = N / 4` words a vector: the same `N`
/// elements a load) and `scales` its scales, laid out as [`super::fp8`] says: each loaded vector
/// is decoded, scaled in f32 and rounded once to `F` as it is stored (the values
/// [`dequantize_fp8_kernel`](fn@super::fp8::dequantize_fp8_kernel) writes), so the product reads
/// one byte a weight element. Without, `P` = `F` and `M = N`.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn staged_rows_kernel<F: Float, O: Float, N: Size, P: Numeric, M: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<P, M>>,
    scales: ComptimeOption<&Tensor<f32>>,
    out: &mut Tensor<O>,
    #[comptime] m_tiles: usize,
    #[comptime] planes: usize,
    #[comptime] row_planes: usize,
    #[comptime] k_tiles: usize,
    #[comptime] splits: usize,
    #[comptime] k_vectors: usize,
    #[comptime] vector: usize,
    #[comptime] fp8: Option<Fp8Words>,
    #[define(F, O, P)] _dtypes: [ElemType; 3],
) {
    let m = x.shape(0);
    let n = w.shape(0);
    let groups = n / (TILE * planes);
    let share = CUBE_POS / groups;
    // The whole cube leaves together: the syncs below stay uniform.
    if share >= splits {
        terminate!();
    }
    let n0 = (CUBE_POS % groups) * TILE * planes;
    let block = TILE * k_tiles;
    let block_vectors = block / vector;
    let ld = block + 8;
    let ldv = ld / vector;
    let w_rows = TILE * planes;
    // Row tiles a plane multiplies; x's stage padded to `row_planes` times that (rows past `m`
    // are zeros, never written out).
    let plane_tiles = comptime!(m_tiles.div_ceil(row_planes));
    let x_rows = TILE * plane_tiles * row_planes;
    let units = 32 * planes * row_planes;
    let w_loads = comptime!((w_rows * block_vectors).div_ceil(units));
    let x_loads = comptime!((x_rows * block_vectors).div_ceil(units));
    let mut w_s = Shared::<[Vector<F, N>]>::new_aligned_slice(w_rows * ldv, 16usize);
    let mut x_s = Shared::<[Vector<F, N>]>::new_aligned_slice(x_rows * ldv, 16usize);
    let mut w_r = Array::<Vector<P, M>>::new(w_loads);
    let mut x_r = Array::<Vector<F, N>>::new(x_loads);
    let unit = UNIT_POS as usize;
    let blocks = k_vectors / block_vectors;
    let first = share * blocks / splits;
    let end = (share + 1) * blocks / splits;

    let mut accs = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _ in 0..plane_tiles {
        accs.push(zero_accumulator());
    }
    // The first block's loads.
    let mut kv0 = first * block_vectors;
    #[unroll]
    for l in 0..w_loads {
        let i = unit + l * units;
        let mut v = Vector::<P, M>::new(P::from_int(0));
        if i < w_rows * block_vectors {
            v = w[(n0 + i / block_vectors) * k_vectors + kv0 + i % block_vectors];
        }
        w_r[l] = v;
    }
    #[unroll]
    for l in 0..x_loads {
        let i = unit + l * units;
        let row = i / block_vectors;
        let mut v = Vector::<F, N>::new(F::new(0.0));
        if i < x_rows * block_vectors && row < m {
            v = x[row * k_vectors + kv0 + i % block_vectors];
        }
        x_r[l] = v;
    }
    // This plane's column tile, and its group of row tiles.
    let plane = UNIT_POS_Y as usize % planes;
    let row0 = (UNIT_POS_Y as usize / planes) * plane_tiles;
    let mut b = first;
    while b < end {
        // The block before is multiplied: its shared memory is free.
        sync_cube();
        #[unroll]
        for l in 0..w_loads {
            let i = unit + l * units;
            if i < w_rows * block_vectors {
                let (row, kv) = (i / block_vectors, i % block_vectors);
                w_s[row * ldv + kv] = staged_weight::<F, N, P, M>(
                    w_r[l],
                    scales,
                    n0 + row,
                    (b * block_vectors + kv) * vector,
                    fp8,
                );
            }
        }
        #[unroll]
        for l in 0..x_loads {
            let i = unit + l * units;
            if i < x_rows * block_vectors {
                x_s[(i / block_vectors) * ldv + i % block_vectors] = x_r[l];
            }
        }
        sync_cube();
        // The next block's loads, in flight while this one is multiplied.
        if b + 1 < end {
            kv0 = (b + 1) * block_vectors;
            #[unroll]
            for l in 0..w_loads {
                let i = unit + l * units;
                if i < w_rows * block_vectors {
                    w_r[l] = w[(n0 + i / block_vectors) * k_vectors + kv0 + i % block_vectors];
                }
            }
            #[unroll]
            for l in 0..x_loads {
                let i = unit + l * units;
                let row = i / block_vectors;
                if i < x_rows * block_vectors && row < m {
                    x_r[l] = x[row * k_vectors + kv0 + i % block_vectors];
                }
            }
        }
        #[unroll]
        for t in 0..k_tiles {
            let tile_vectors = comptime!(TILE / vector);
            let w0 = plane * TILE * ldv + t * tile_vectors;
            let bt = load_fragment::<F, Vector<F, N>>(
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::ColMajor,
                w_s.slice(w0, w0 + (TILE - 1) * ldv + tile_vectors),
                ld as u32,
            );
            #[unroll]
            for r in 0..plane_tiles {
                let x0 = (row0 + r) * TILE * ldv + t * tile_vectors;
                let at = load_fragment::<F, Vector<F, N>>(
                    cmma::MatrixIdent::A,
                    cmma::MatrixLayout::RowMajor,
                    x_s.slice(x0, x0 + (TILE - 1) * ldv + tile_vectors),
                    ld as u32,
                );
                let acc = accs.index(r);
                cmma::execute(&at, &bt, acc, acc);
            }
        }
        b += 1;
    }
    // Each plane's row tiles through its own 16 × 16 of shared memory, the rows below `m` out.
    let tile_elems = TILE * TILE;
    let mut o_s = Shared::<[f32]>::new_slice(planes * row_planes * tile_elems);
    let lane = UNIT_POS_X as usize;
    let col = n0 + plane * TILE;
    let own = UNIT_POS_Y as usize * tile_elems;
    #[unroll]
    for r in 0..plane_tiles {
        sync_cube();
        cmma::store(
            o_s.slice_mut(own, own + tile_elems),
            accs.index(r),
            TILE as u32,
            cmma::MatrixLayout::RowMajor,
        );
        sync_cube();
        let mut e = lane;
        while e < tile_elems {
            let row = (row0 + r) * TILE + e / TILE;
            if row < m {
                out[(share * m + row) * n + col + e % TILE] = O::cast_from(o_s[own + e]);
            }
            e += 32;
        }
    }
}

/// The `N` weight elements of `raw`, the vector of weight row `row` from element `at`, as `F`:
/// `raw` itself for a float weight; with `fp8` its `M` words of codes decoded as
/// `fp8.decode` says, each times its row and block's scale in f32, rounded once to `F`.
#[cube]
fn staged_weight<F: Float, N: Size, P: Numeric, M: Size>(
    raw: Vector<P, M>,
    scales: ComptimeOption<&Tensor<f32>>,
    row: usize,
    at: usize,
    #[comptime] fp8: Option<Fp8Words>,
) -> Vector<F, N> {
    match comptime!(fp8) {
        Some(codes) => {
            let scales = scales.unwrap();
            let blocks = scales.shape(1);
            let mut v = Vector::<F, N>::new(F::new(0.0));
            #[unroll]
            for e in 0..M::value() {
                let word = at / 4 + e;
                let scale = scales[row * blocks + word / codes.block_words];
                let d = decode_codes::<Const<4>>(
                    u32::cast_from(raw.extract(e)),
                    scale,
                    codes.decode,
                    codes.nan_codes,
                );
                #[unroll]
                for i in 0..4 {
                    v.insert(e * 4 + i, F::cast_from(d.extract(i)));
                }
            }
            v
        }
        None => Vector::<F, N>::cast_from(raw),
    }
}
