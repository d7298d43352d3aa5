//! Matrix-vector products for decode: `out [m, n] = x [m, k] · wᵀ` with the weight stored
//! `w [n, k]` (HuggingFace's `[out, in]`), for a few rows `m`. One plane per output column (a
//! few adjacent columns when there are several rows): its units read the column's weight row
//! in coalesced vectors (each byte of the weight once for
//! all `m` rows), multiply by the rows of `x` (small, served from cache), accumulate in f32 and
//! add their partial sums with a plane sum. No shared memory, no synchronisation: the weight
//! streams at the memory bus's pace where Burn's tiled matmul, built for large `m`, reaches a
//! fraction of it (`benches/NOTES.md` entry 25).

use crate::attention::lane_sum;
use crate::launch::widest_vector;
use cubecl::calculate_cube_count_elemwise;
use cubecl::client::Client;
use cubecl::features::Plane;
use cubecl::ir::{AddressType, ElemType};
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
