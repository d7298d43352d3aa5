//! The product of many rows (prefill), `out [m, n] = x [m, k] · wᵀ` (f16, `w [n, k]` as stored),
//! on warp-level tensor-core products (`mma.sync` m16n8k16, f16 × f16 → f32) with their operands
//! loaded from shared memory by `ldmatrix`, through CubeCL's CUDA runtime.
//!
//! Why (`benches/NOTES.md`, "CUDA build"): the `cmma` tiles product (`product.rs`) runs one cube
//! of 8 planes a multiprocessor with its tensor pipe active 47–49% of the time, each plane
//! multiplying a 64 × 32 tile: 6 fragment loads a step of 16 inner elements for 16 products of
//! m16n8k16. Here a warp owns a 64 × 64 tile: 4 `ldmatrix.x4` of `x` and 4 of `w` a step for 32
//! products, the way CUTLASS's Ampere kernels tile a warp.
//!
//! The cube owns 128 rows × `64 · warps_n` columns (warps 2 × `warps_n`); blocks of 32 inner
//! elements of its rows of `x` and `w` are read by all units as vectors of 8 halves into
//! registers one block ahead, stored into one of two shared stages (rows padded by 8 halves: the
//! 8 rows an `ldmatrix` reads meet no bank twice), one barrier a block. `ldmatrix.x4` gives a
//! lane the first operand's four registers of a 16 × 16 tile of `x` (matrices: rows 0–7 and
//! 8–15 at inner 0–7, then at 8–15) and the second operand's two registers for each of two
//! 8-column tiles of `w` (read as stored, rows of `w` being the product's columns). Rows of `x`
//! past `m` read as zeros and are not written.

use cubecl::cmma::{MatrixIdent, MmaDefinition};
use cubecl::prelude::*;
use half::f16;

/// Inner elements a block.
pub(crate) const WARP_BLOCK: usize = 32;
/// Rows of the output a cube owns.
pub(crate) const WARP_CUBE_ROWS: usize = 128;
/// Rows and columns of the output a warp owns.
pub(crate) const WARP_TILE: usize = 64;
/// Halves a row of a stage is padded by.
const PAD: usize = 8;

/// Shared memory of a cube with `warps_n` warps across its columns, bytes: two stages of its
/// rows of `x` and `w` (blocks of [`WARP_BLOCK`], rows padded by 8 halves).
pub(crate) const fn warp_product_shared_bytes(warps_n: usize) -> usize {
    2 * (WARP_CUBE_ROWS + WARP_TILE * warps_n) * (WARP_BLOCK + PAD) * 2
}

/// `out [m, n] = x [m, k] · wᵀ`, f32 sums rounded once to f16: `x [m, k]`, `w [n, k]` as vectors
/// of 8 halves (`k / 8` a row), `out` as pairs of halves. `n` a multiple of `64 · warps_n`, `k`
/// of [`WARP_BLOCK`]; cubes past the last tile leave. See the module doc.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn warp_product_kernel(
    x: &Tensor<Vector<f16, Const<8>>>,
    w: &Tensor<Vector<f16, Const<8>>>,
    out: &mut Tensor<Vector<f16, Const<2>>>,
    #[comptime] warps_n: usize,
) {
    let m = x.shape(0);
    let n = w.shape(0);
    let k_vectors = x.shape(1);
    let cube_cols = comptime!(WARP_TILE * warps_n);
    let tiles_m = m.div_ceil(WARP_CUBE_ROWS);
    let tiles_n = n / cube_cols;
    // Column tiles walk fastest: neighbouring cubes share rows of `x`.
    let cube = CUBE_POS;
    if cube >= tiles_m * tiles_n {
        terminate!();
    }
    let m0 = (cube / tiles_n) * WARP_CUBE_ROWS;
    let n0 = (cube % tiles_n) * cube_cols;

    let units = comptime!(32 * 2 * warps_n);
    let row_vectors = comptime!(WARP_BLOCK / 8);
    let ld = comptime!(WARP_BLOCK + PAD);
    let ldv = comptime!(ld / 8);
    let x_stage = comptime!(WARP_CUBE_ROWS * ldv);
    let w_stage = comptime!(cube_cols * ldv);
    let x_loads = comptime!((WARP_CUBE_ROWS * row_vectors).div_ceil(units));
    let w_loads = comptime!((cube_cols * row_vectors).div_ceil(units));
    let mut x_s = Shared::<[Vector<f16, Const<8>>]>::new_aligned_slice(2 * x_stage, 16usize);
    let mut w_s = Shared::<[Vector<f16, Const<8>>]>::new_aligned_slice(2 * w_stage, 16usize);
    let mut x_r = Array::<Vector<f16, Const<8>>>::new(x_loads);
    let mut w_r = Array::<Vector<f16, Const<8>>>::new(w_loads);
    let unit = UNIT_POS as usize;
    let blocks = k_vectors / row_vectors;
    let zero = Vector::<f16, Const<8>>::new(f16::new(0.0));

    // The first block's loads.
    #[unroll]
    for l in 0..x_loads {
        let i = unit + l * units;
        let row = m0 + i / row_vectors;
        let mut v = zero;
        if i < comptime!(WARP_CUBE_ROWS * row_vectors) && row < m {
            v = x[row * k_vectors + i % row_vectors];
        }
        x_r[l] = v;
    }
    #[unroll]
    for l in 0..w_loads {
        let i = unit + l * units;
        let mut v = zero;
        if i < comptime!(cube_cols * row_vectors) {
            v = w[(n0 + i / row_vectors) * k_vectors + i % row_vectors];
        }
        w_r[l] = v;
    }

    let lane = UNIT_POS_X as usize;
    let warp = UNIT_POS_Y as usize;
    let (wm, wn) = (warp / warps_n, warp % warps_n);
    // This lane's `ldmatrix` row: matrix `q = lane / 8`, row `lane % 8` of it. For `x`:
    // matrices (rows 0–7, inner 0–7), (8–15, 0–7), (0–7, 8–15), (8–15, 8–15); for `w`: (columns
    // 0–7, inner 0–7), (0–7, 8–15), (8–15, 0–7), (8–15, 8–15).
    let q = lane / 8;
    let x_row = wm * WARP_TILE + lane % 8 + 8 * (q % 2);
    let x_col = q / 2;
    let w_row = wn * WARP_TILE + lane % 8 + 8 * (q / 2);
    let w_col = q % 2;

    let def = MmaDefinition::<f16, f16, f32>::new(16usize, 8usize, 16usize);
    // Accumulator of row tile `i` (16 rows) and column tile `j` (8 columns): slots `2(8i + j)`
    // (row `g`) and `+ 1` (row `g + 8`), columns `2t, 2t + 1`.
    let mut acc = Array::<Vector<f32, Const<2>>>::new(64usize);
    #[unroll]
    for a in 0..64usize {
        acc[a] = Vector::new(f32::new(0.0));
    }
    let mut b = 0usize;
    while b < blocks {
        let stage = b % 2;
        let (xo, wo) = (stage * x_stage, stage * w_stage);
        #[unroll]
        for l in 0..x_loads {
            let i = unit + l * units;
            if i < comptime!(WARP_CUBE_ROWS * row_vectors) {
                x_s[xo + (i / row_vectors) * ldv + i % row_vectors] = x_r[l];
            }
        }
        #[unroll]
        for l in 0..w_loads {
            let i = unit + l * units;
            if i < comptime!(cube_cols * row_vectors) {
                w_s[wo + (i / row_vectors) * ldv + i % row_vectors] = w_r[l];
            }
        }
        // The stage written here was last read two blocks before, behind the barrier between.
        sync_cube();
        if b + 1 < blocks {
            let kv0 = (b + 1) * row_vectors;
            #[unroll]
            for l in 0..x_loads {
                let i = unit + l * units;
                let row = m0 + i / row_vectors;
                if i < comptime!(WARP_CUBE_ROWS * row_vectors) && row < m {
                    x_r[l] = x[row * k_vectors + kv0 + i % row_vectors];
                }
            }
            #[unroll]
            for l in 0..w_loads {
                let i = unit + l * units;
                if i < comptime!(cube_cols * row_vectors) {
                    w_r[l] = w[(n0 + i / row_vectors) * k_vectors + kv0 + i % row_vectors];
                }
            }
        }
        #[unroll]
        for s in 0..comptime!(WARP_BLOCK / 16) {
            let mut xf = Array::<Vector<f16, Const<2>>>::new(16usize);
            #[unroll]
            for i in 0..4usize {
                let at = xo + (x_row + 16 * i) * ldv + 2 * s + x_col;
                let regs = def.load_matrix::<Vector<f16, Const<8>>, Const<2>>(
                    &x_s[at..at + 1],
                    MatrixIdent::A,
                    4usize,
                    false,
                );
                #[unroll]
                for r in 0..4usize {
                    xf[4 * i + r] = regs[r];
                }
            }
            let mut wf = Array::<Vector<f16, Const<2>>>::new(16usize);
            #[unroll]
            for jj in 0..4usize {
                let at = wo + (w_row + 16 * jj) * ldv + 2 * s + w_col;
                let regs = def.load_matrix::<Vector<f16, Const<8>>, Const<2>>(
                    &w_s[at..at + 1],
                    MatrixIdent::B,
                    4usize,
                    false,
                );
                #[unroll]
                for r in 0..4usize {
                    wf[4 * jj + r] = regs[r];
                }
            }
            #[unroll]
            for i in 0..4usize {
                let mut a = Array::<Vector<f16, Const<2>>>::new(4usize);
                #[unroll]
                for r in 0..4usize {
                    a[r] = xf[4 * i + r];
                }
                #[unroll]
                for j in 0..8usize {
                    // Column tile `j` is matrices 0, 1 (even `j`) or 2, 3 of load `j / 2`.
                    let mut bf = Array::<Vector<f16, Const<2>>>::new(2usize);
                    bf[0] = wf[comptime!(4 * (j / 2) + 2 * (j % 2))];
                    bf[1] = wf[comptime!(4 * (j / 2) + 2 * (j % 2) + 1)];
                    let at = comptime!(2 * (8 * i + j));
                    let mut c = Array::<Vector<f32, Const<2>>>::new(2usize);
                    c[0] = acc[at];
                    c[1] = acc[at + 1];
                    let d = def.execute(&a, &bf, &c);
                    acc[at] = d[0];
                    acc[at + 1] = d[1];
                }
            }
        }
        b += 1;
    }

    // Lane `(g, t)` holds rows `g` and `g + 8` of each row tile, columns `2t, 2t + 1` of each
    // column tile: pairs of halves.
    let g = lane / 4;
    let t = lane % 4;
    #[unroll]
    for i in 0..4usize {
        #[unroll]
        for h in 0..2usize {
            let row = m0 + wm * WARP_TILE + comptime!(16 * i + 8 * h) + g;
            if row < m {
                #[unroll]
                for j in 0..8usize {
                    let col = n0 + wn * WARP_TILE + comptime!(8 * j) + 2 * t;
                    out[(row * n + col) / 2] =
                        Vector::<f16, Const<2>>::cast_from(acc[comptime!(2 * (8 * i + j) + h)]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::warp_product_kernel;
    use crate::test_common as common;
    use cubecl::ir::AddressType;
    use cubecl::prelude::*;

    /// The kernel expanded against CUDA's manual-`mma` register layout and a device listing f16
    /// `mma.sync` 16 × 8 × 16, and translated to CUDA C++ (no CUDA compiler runs here), with 2
    /// and 4 warps across a cube's columns. Its arithmetic is checked by the root crate's
    /// `tiles_product_matches_float64` through CUDA, with `ROPE_POOL_TILES_WARP=2` and `=4`.
    #[test]
    fn warp_product_kernel_expands_and_compiles_to_cuda() {
        let Some(client) = common::any_client("warp product's CUDA check") else {
            return;
        };
        let (properties, target) = common::warp_mma_properties(&client);
        let (m, n, k) = (300usize, 512usize, 256usize);
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        for warps_n in [2usize, 4] {
            let kernel = warp_product_kernel::create_dummy_kernel(
                properties.clone(),
                target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, 2 * warps_n as u32),
                AddressType::U32,
                tensor(&[m, k / 8]),
                tensor(&[n, k / 8]),
                tensor(&[m, n / 2]),
                warps_n,
            );
            common::assert_warp_mma_kernel_compiles(kernel, &format!("{warps_n} warps across"));
        }
    }
}
