//! Matrix-vector products for decode: `out [m, n] = x [m, k] · wᵀ` with the weight stored
//! `w [n, k]` (HuggingFace's `[out, in]`), for a few rows `m`. One plane per output column (a
//! few adjacent columns when there are several rows): its units read the column's weight row
//! in coalesced vectors (each byte of the weight once for
//! all `m` rows), multiply by the rows of `x` (small, served from cache), accumulate in f32 and
//! add their partial sums with a plane sum. No shared memory, no synchronisation: the weight
//! streams at the memory bus's pace where Burn's tiled matmul, built for large `m`, reaches a
//! fraction of it (`benches/NOTES.md` entry 25). From 17 to 64 rows,
//! [`few_rows_kernel`](fn@few_rows_kernel): the same single read of the weight through
//! tensor-core tiles (entry 27).

use crate::attention::lane_sum;
use crate::launch::widest_vector;
use crate::tuning::LaunchTuning;
use cubecl::calculate_cube_count_elemwise;
use cubecl::client::Client;
use cubecl::features::{MmaConfig, Plane};
use cubecl::ir::{AddressType, ElemType, FloatKind};
use cubecl::prelude::*;

/// The most rows a launch takes (each unit keeps one accumulator per row).
pub const MATVEC_MAX_ROWS: usize = 16;
/// Planes (output columns) per cube.
const PLANES_PER_CUBE: usize = 8;
/// Weight vectors each unit loads per iteration (in flight together), over its columns.
const LOADS: usize = 4;
/// The most accumulators (rows × columns, vectors) a unit keeps.
const ACCUMULATORS: usize = 16;

/// `out [rows, n] = x [rows, k] · wᵀ`, `w [n, k]`; `x` and `w` as vectors of `N`, a row
/// `k_vectors` of them. The cube is `(plane size, planes)` units; plane `UNIT_POS_Y` of cube
/// `CUBE_POS` computes the `cols` adjacent columns from `(CUBE_POS * planes + UNIT_POS_Y) *
/// cols` (several columns per plane share each load of `x`). Each unit keeps `unroll * cols`
/// weight loads in flight.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn matvec_kernel<F: Float, N: Size>(
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

/// Whether [`launch_matvec`] runs `rows` rows on `client`'s device: plane operations with one
/// fixed plane size, and at most [`MATVEC_MAX_ROWS`] rows.
pub fn matvec_fits(client: &Client, rows: usize) -> bool {
    let properties = client.properties();
    let hardware = &properties.hardware;
    (1..=MATVEC_MAX_ROWS).contains(&rows)
        && properties.features.plane.contains(Plane::Ops)
        && hardware.plane_size_min == hardware.plane_size_max
        && hardware.plane_size_min.is_power_of_two()
}

/// Enqueues `out [rows, n] = x [rows, k] · wᵀ` for `w [n, k]`, all contiguous of float
/// `float` (`elem_size` bytes). Does nothing for an empty product.
///
/// # Safety
/// [`matvec_fits`] must hold; the tensors must be live and contiguous with those shapes; `out`
/// must not alias `x` or `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_matvec(
    client: &Client,
    float: ElemType,
    elem_size: usize,
    rows: usize,
    k: usize,
    n: usize,
    x: TensorArg,
    w: TensorArg,
    out: TensorArg,
) {
    if rows == 0 || n == 0 || k == 0 {
        return;
    }
    let vector = widest_vector(client, elem_size, |n| k.is_multiple_of(n));
    let lanes = client.properties().hardware.plane_size_min;
    let cube_dim = CubeDim::new_2d(lanes, PLANES_PER_CUBE as u32);
    // Columns per plane: each load of x serves them all (x's loads, not the weight's, bound a
    // many-row product); one row streams best one column per plane with four loads in flight.
    // The H200 runs of `benches/NOTES.md` entry 25: at 8 rows two columns took 87 µs a launch
    // against 102 with one; at 1 row four columns took 59 against 37 with one.
    let cols = if rows == 1 {
        1
    } else {
        (ACCUMULATORS / rows).clamp(1, 2)
    };
    let unroll = (LOADS / cols).max(1);
    let cubes = n.div_ceil(PLANES_PER_CUBE * cols);
    unsafe {
        matvec_kernel::launch_unchecked(
            client,
            calculate_cube_count_elemwise(client, cubes * cube_dim.num_elems() as usize, cube_dim),
            cube_dim,
            AddressType::from_len((n * k).max(rows * k).max(rows * n)),
            vector,
            x,
            w,
            out,
            rows,
            cols,
            unroll,
            k / vector,
            float,
        );
    }
}

/// The side of a tensor-core tile ([`few_rows_kernel`](fn@few_rows_kernel)): 16 × 16 × 16, f32
/// accumulation.
const TILE: usize = 16;
/// The most rows [`launch_few_rows`] takes: four tiles of 16.
pub const FEW_ROWS_MAX: usize = 4 * TILE;
/// Planes of a [`few_rows_kernel`](fn@few_rows_kernel) cube: each takes one in `PLANES` of the
/// inner tiles.
const FEW_ROWS_PLANES: usize = 8;

/// `out [m, n] = x [m, k] · wᵀ` (`w [n, k]`) for `16 < m ≤ 64` rows with tensor-core tiles: the
/// cube of `CUBE_POS` owns `cols` tiles of 16 output columns; each of its `planes` planes walks
/// one in `planes` of the 16-wide inner tiles, loading the weight's `16 × 16` tiles once (read
/// column-major from the stored rows) for all `m_tiles` row tiles of `x` (small, served from
/// cache; each row tile loaded once for the `cols` column tiles), one f32 accumulator per (row
/// tile, column tile). The planes' partial products meet in shared memory, one column tile at a
/// time, are added in f32 and rounded once. The last row tile starts at `m - 16` (it overlaps the
/// one before when 16 does not divide `m`; its rows already written are skipped), so no read
/// passes `x`.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn few_rows_kernel<F: Float>(
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
        accs.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            TILE,
            TILE,
            TILE,
            cmma::MatrixLayout::Undefined,
            f32::new(0.0),
        ));
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
            bs.push(cmma::Matrix::<F>::from_slice(
                cmma::MatrixIdent::B,
                TILE,
                TILE,
                TILE,
                cmma::MatrixLayout::ColMajor,
                w.slice(w0, w0 + (TILE - 1) * k + TILE),
                stride,
            ));
        }
        #[unroll]
        for r in 0..m_tiles {
            let x0 = usize::min(r * TILE, m - TILE) * k + k0;
            let a = cmma::Matrix::<F>::from_slice(
                cmma::MatrixIdent::A,
                TILE,
                TILE,
                TILE,
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

/// Whether [`launch_few_rows`] takes `x [rows, k] · wᵀ` (`w [n, k]`) of float `float` on
/// `client`'s device: `16 < rows ≤ 64`, `k` and `n` multiples of 16, `float` f16 (the type the
/// kernel was checked and measured in on a GPU; bf16 and f32 go elsewhere), tensor-core tiles of
/// f16 with f32 accumulation (16 × 16 × 16), planes of one fixed size.
pub fn few_rows_fits(client: &Client, float: ElemType, rows: usize, k: usize, n: usize) -> bool {
    let hardware = &client.properties().hardware;
    let tile = TILE as u32;
    float == ElemType::Float(FloatKind::F16)
        && (TILE + 1..=FEW_ROWS_MAX).contains(&rows)
        && k.is_multiple_of(TILE)
        && n.is_multiple_of(TILE)
        && k > 0
        && n > 0
        && hardware.plane_size_min == hardware.plane_size_max
        && (hardware.max_units_per_cube as usize)
            >= hardware.plane_size_min as usize * FEW_ROWS_PLANES
        && has_tiles(client, float, [tile; 3])
}

/// Whether `client`'s device multiplies tensor-core tiles of `float` of `m × n × k` with f32
/// accumulation (CubeCL's `cmma`).
pub fn has_tiles(client: &Client, float: ElemType, [m, n, k]: [u32; 3]) -> bool {
    let tiles = MmaConfig {
        a_type: float,
        b_type: float,
        cd_type: ElemType::Float(FloatKind::F32),
        m,
        n,
        k,
    };
    client.properties().features.matmul.cmma.contains(&tiles)
}

/// Enqueues [`few_rows_kernel`](fn@few_rows_kernel): `out [rows, n] = x [rows, k] · wᵀ` for
/// `w [n, k]`, all contiguous of float `float`; up to four column tiles a cube (outputs wider than
/// the input) or two (others), the most that divides the output's tiles. `tuning` is
/// [`LaunchTuning::default`] in normal use (benchmark builds override it).
///
/// # Safety
/// [`few_rows_fits`] must hold; the tensors must be live and contiguous with those shapes; `out`
/// must not alias `x` or `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_few_rows(
    client: &Client,
    float: ElemType,
    rows: usize,
    k: usize,
    n: usize,
    x: TensorArg,
    w: TensorArg,
    out: TensorArg,
    tuning: &LaunchTuning,
) {
    let lanes = client.properties().hardware.plane_size_min;
    // Column tiles per cube: four for outputs wider than the input, else two (the H200 probe of
    // `benches/NOTES.md` entry 27: q/k/v 86 µs at 64 rows with four, 118 with two; o and down
    // 60 and 197 µs with two, 84 and 280 with four).
    let cols = tuning
        .few_rows_cols
        .unwrap_or(if n > k { 4 } else { 2 })
        .clamp(1, 4);
    let planes = tuning
        .few_rows_planes
        .unwrap_or(FEW_ROWS_PLANES)
        .clamp(1, FEW_ROWS_PLANES);
    // Column tiles per cube: the most of `cols` that divides the output's tiles.
    let cols = (1..=cols)
        .rev()
        .find(|c| (n / TILE).is_multiple_of(*c))
        .unwrap_or(1);
    let cube_dim = CubeDim::new_2d(lanes, planes as u32);
    let cubes = n / (TILE * cols);
    unsafe {
        few_rows_kernel::launch_unchecked(
            client,
            calculate_cube_count_elemwise(client, cubes * cube_dim.num_elems() as usize, cube_dim),
            cube_dim,
            AddressType::from_len((n * k).max(rows * k).max(rows * n)),
            x,
            w,
            out,
            rows.div_ceil(TILE),
            cols,
            planes,
            float,
        );
    }
}
