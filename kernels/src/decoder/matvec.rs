//! Matrix-vector products for decode: `out [m, n] = x [m, k] · wᵀ` with the weight stored
//! `w [n, k]` (HuggingFace's `[out, in]`), for a few rows `m`. One plane per output column (a
//! few adjacent columns when there are several rows): its units read the column's weight row
//! in coalesced vectors (each byte of the weight once for
//! all `m` rows), multiply by the rows of `x` (small, served from cache), accumulate in f32 and
//! add their partial sums with a plane sum. No shared memory, no synchronisation: the weight
//! streams at the memory bus's pace where Burn's tiled matmul, built for large `m`, reaches a
//! fraction of it. From 17 to 64 rows, [`few_rows_kernel`](fn@few_rows_kernel): the same single
//! read of the weight through tensor-core tiles. See benches/NOTES.md, 'Projections per row
//! count'. Their launches are in [`super::launch`].

pub(crate) use crate::common::fragment::TILE;
use crate::common::fragment::{load_fragment, zero_accumulator};
use crate::common::reduce::lane_sum;
use cubecl::ir::ElemType;
use cubecl::prelude::*;

/// `out [rows, n] = x [rows, k] · wᵀ`, `w [n, k]`; `x` and `w` as vectors of `N`, a row
/// `k_vectors` of them. The cube is `(plane size, planes)` units; plane `UNIT_POS_Y` of cube
/// `CUBE_POS` computes the `cols` adjacent columns from `(CUBE_POS * planes + UNIT_POS_Y) *
/// cols` (several columns per plane share each load of `x`). Each unit keeps `unroll * cols`
/// weight loads in flight.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn matvec_kernel<F: Float, N: Size>(
    x: &Tensor<Vector<F, N>>,
    w: &Tensor<Vector<F, N>>,
    out: &mut Tensor<F>,
    #[comptime] rows: usize,
    #[comptime] cols: usize,
    #[comptime] unroll: usize,
    #[comptime] k_vectors: usize,
    #[define(F)] _dtype: ElemType,
) {
    let n = w.shape(0);
    let col0 = (CUBE_POS * CUBE_DIM_Y as usize + UNIT_POS_Y as usize) * cols;
    // A whole plane leaves together (its columns are the plane's): the plane sums below stay
    // uniform.
    if col0 >= n {
        terminate!();
    }
    let lane = UNIT_POS_X as usize;
    let lanes = CUBE_DIM_X as usize;
    let mut acc = Array::<Vector<f32, N>>::new(rows * cols);
    #[unroll]
    for a in 0..rows * cols {
        acc[a] = Vector::new(f32::new(0.0));
    }
    let step = lanes * unroll;
    let mut base = lane;
    while base < k_vectors {
        let mut ws = Array::<Vector<f32, N>>::new(unroll * cols);
        #[unroll]
        for u in 0..unroll {
            let i = base + u * lanes;
            #[unroll]
            for c in 0..cols {
                let mut v = Vector::<f32, N>::new(f32::new(0.0));
                if i < k_vectors && col0 + c < n {
                    v = Vector::<f32, N>::cast_from(w[(col0 + c) * k_vectors + i]);
                }
                ws[u * cols + c] = v;
            }
        }
        #[unroll]
        for u in 0..unroll {
            let i = base + u * lanes;
            if i < k_vectors {
                #[unroll]
                for r in 0..rows {
                    let xv = Vector::<f32, N>::cast_from(x[r * k_vectors + i]);
                    #[unroll]
                    for c in 0..cols {
                        acc[r * cols + c] += xv * ws[u * cols + c];
                    }
                }
            }
        }
        base += step;
    }
    store_plane_sums::<F, N>(&acc, out, n, col0, rows, cols);
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
) {
    let lane = UNIT_POS_X as usize;
    #[unroll]
    for r in 0..rows {
        #[unroll]
        for c in 0..cols {
            let s = plane_sum(lane_sum::<N>(acc[r * cols + c]));
            if lane == 0 && col0 + c < n {
                out[r * n + col0 + c] = F::cast_from(s);
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
            bs.push(load_fragment::<F>(
                cmma::MatrixIdent::B,
                cmma::MatrixLayout::ColMajor,
                w.slice(w0, w0 + (TILE - 1) * k + TILE),
                stride,
            ));
        }
        #[unroll]
        for r in 0..m_tiles {
            let x0 = usize::min(r * TILE, m - TILE) * k + k0;
            let a = load_fragment::<F>(
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
