//! The product of many rows (prefill) on tensor-core tiles: `out [m, n] = x [m, k] · wᵀ`
//! (`w [n, k]`, the weight as stored), for devices whose 16 × 16 × 16 tiles CubeCL reaches
//! through Vulkan's cooperative matrices.
//!
//! Why this shape (`benches/NOTES.md`, "Vulkan tensor-core ceiling"; `benches/tensor_cores.rs`):
//! through SPIR-V the tiles multiply at ~650 TFLOPS on an H100 from registers and from shared
//! memory, but a product staged through shared memory in vectors of 8 halves reached 124–181:
//! CubeCL's Vulkan target splits a vector of 8 halves into two of 4, so each global read and
//! shared store moves 8 bytes. Here x, w and the stage are 16-byte words (`Vector<u32, 4>`, 8
//! halves each) and the fragments are loaded from the words, and a block of 64 inner elements
//! gives 32 tile products a plane per pair of barriers: 264–278 TFLOPS on that GPU.
//!
//! The words need CubeCL's SPIR-V compiler: it counts a fragment load's stride in the pointer's
//! vectors (`cubecl-spirv-0.11.3` `src/ops/matrix.rs:31-49`), the CUDA compilers in the
//! fragment's elements. Through CUDA, where a vector of 8 halves is one 16-byte access, the
//! kernel reads vectors of 8 halves instead ([`super::launch::tiles_access`]).

use crate::common::fragment::{TILE, load_fragment, zero_accumulator};
use cubecl::prelude::*;

/// Tile rows a plane multiplies.
pub(crate) const PLANE_ROWS: usize = 4;
/// Tile columns a plane multiplies.
pub(crate) const PLANE_COLS: usize = 2;
/// Planes a cube down its rows.
pub(crate) const CUBE_ROW_PLANES: usize = 2;
/// Planes a cube across its columns.
pub(crate) const CUBE_COL_PLANES: usize = 4;
/// Output rows a cube owns.
pub(crate) const CUBE_ROWS: usize = TILE * PLANE_ROWS * CUBE_ROW_PLANES;
/// Output columns a cube owns.
pub(crate) const CUBE_COLS: usize = TILE * PLANE_COLS * CUBE_COL_PLANES;
/// Inner elements a block, unless the launch takes [`WIDE_BLOCK`].
pub(crate) const BLOCK: usize = 64;
/// The wider block a launch may take (inner sizes a multiple of it).
pub(crate) const WIDE_BLOCK: usize = 128;
/// Halves a 16-byte word.
pub(crate) const WORD_HALVES: usize = 8;
/// Row tiles of a group of cubes that walk the columns together (neighbours share x's rows).
const GROUP: usize = 8;
/// Planes a cube.
pub(crate) const PLANES: usize = CUBE_ROW_PLANES * CUBE_COL_PLANES;
/// Shared memory a cube stages through with `stages` stages of blocks of `block` inner
/// elements, bytes: x's and w's rows of a block (2-byte halves, padded by 8 against bank
/// conflicts) a stage, then a 16 × 16 f32 tile a plane for the epilogue.
pub(crate) const fn shared_bytes(stages: usize, block: usize) -> usize {
    stages * (CUBE_ROWS + CUBE_COLS) * (block + 8) * 2 + PLANES * TILE * TILE * 4
}

/// `out [m, n] = x [m, k] · wᵀ` with f32 accumulators, rounded once to `F` (a 2-byte float): x
/// and w read as 16-byte words (`W` = u32, `N` = 4, `word_halves` = 2; `k_words = k / 8` words a
/// row). The cube of `CUBE_POS` owns a `CUBE_ROWS × CUBE_COLS` output tile (cubes past the last
/// tile leave); its 8 planes each multiply `PLANE_ROWS × PLANE_COLS` tiles of it. Each block of
/// `block` inner elements of the cube's rows of x and w is read by all units into registers one
/// block ahead, stored in shared memory as words (rows padded by 8 halves against bank
/// conflicts), and the fragments are loaded from the words. Rows of x past `m` read as zeros and are not written.
/// `n` must be a multiple of `CUBE_COLS`, `k` of `block` (a multiple of 16).
///
/// With `stages` = 2 the blocks alternate between two stages, one barrier a block (the stage a
/// block is stored into was last read two blocks before, behind the barrier of the block
/// between); with 1, a barrier before and after each block's products.
///
/// With `word_halves` = 1 the words are `N` = 8 halves (`W` = `F`) instead: what SPIR-V splits
/// into two 8-byte accesses (the measurement path of [`super::launch::TilesAccess::Halves`]).
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn tiles_product_kernel<F: Float, W: Numeric, N: Size>(
    x: &Tensor<Vector<W, N>>,
    w: &Tensor<Vector<W, N>>,
    out: &mut Tensor<F>,
    #[comptime] word_halves: usize,
    #[comptime] block: usize,
    #[comptime] stages: usize,
    #[define(F, W)] _dtypes: [ElemType; 2],
) {
    let m = out.shape(0);
    let n = out.shape(1);
    let k_words = x.shape(1);
    let row_words = block / WORD_HALVES;
    let ld = block + 8;
    let ld_words = ld / WORD_HALVES;
    let units = 32 * PLANES;
    let x_loads = comptime!((CUBE_ROWS * block / WORD_HALVES).div_ceil(units));
    let w_loads = comptime!((CUBE_COLS * block / WORD_HALVES).div_ceil(units));
    let x_stage = CUBE_ROWS * ld_words;
    let w_stage = CUBE_COLS * ld_words;
    let mut x_s = Shared::<[Vector<W, N>]>::new_aligned_slice(stages * x_stage, 16usize);
    let mut w_s = Shared::<[Vector<W, N>]>::new_aligned_slice(stages * w_stage, 16usize);
    let mut x_r = Array::<Vector<W, N>>::new(x_loads);
    let mut w_r = Array::<Vector<W, N>>::new(w_loads);

    // Grouped cube order: `GROUP` row tiles walk the column tiles together.
    let tiles_m = m.div_ceil(CUBE_ROWS);
    let tiles_n = n / CUBE_COLS;
    let cube = CUBE_POS;
    // The whole cube leaves together: the syncs below stay uniform.
    if cube >= tiles_m * tiles_n {
        terminate!();
    }
    let per_group = GROUP * tiles_n;
    let first_m = (cube / per_group) * GROUP;
    let group_rows = usize::min(tiles_m - first_m, GROUP);
    let m0 = (first_m + (cube % per_group) % group_rows) * CUBE_ROWS;
    let n0 = ((cube % per_group) / group_rows) * CUBE_COLS;
    let unit = UNIT_POS as usize;
    let blocks = k_words / row_words;

    // The first block's loads.
    #[unroll]
    for l in 0..x_loads {
        let i = unit + l * units;
        let row = m0 + i / row_words;
        let mut v = Vector::<W, N>::new(W::from_int(0));
        if i < CUBE_ROWS * row_words && row < m {
            v = x[row * k_words + i % row_words];
        }
        x_r[l] = v;
    }
    #[unroll]
    for l in 0..w_loads {
        let i = unit + l * units;
        let mut v = Vector::<W, N>::new(W::from_int(0));
        if i < CUBE_COLS * row_words {
            v = w[(n0 + i / row_words) * k_words + i % row_words];
        }
        w_r[l] = v;
    }

    let plane = UNIT_POS_Y as usize;
    let (pi, pj) = (plane / CUBE_COL_PLANES, plane % CUBE_COL_PLANES);
    let mut accs = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _ in 0..PLANE_ROWS * PLANE_COLS {
        accs.push(zero_accumulator());
    }
    let tile_words = TILE / WORD_HALVES;
    // The fragments' stride in `W` elements (CubeCL's SPIR-V compiler divides it by the vectors'
    // `N` lanes, giving the row in vectors).
    let stride = (ld / word_halves) as u32;
    let mut b = 0usize;
    while b < blocks {
        // The stage's last block is multiplied: it is free.
        let stage = b % stages;
        let (xo, wo) = (stage * x_stage, stage * w_stage);
        #[unroll]
        for l in 0..x_loads {
            let i = unit + l * units;
            if i < CUBE_ROWS * row_words {
                x_s[xo + (i / row_words) * ld_words + i % row_words] = x_r[l];
            }
        }
        #[unroll]
        for l in 0..w_loads {
            let i = unit + l * units;
            if i < CUBE_COLS * row_words {
                w_s[wo + (i / row_words) * ld_words + i % row_words] = w_r[l];
            }
        }
        sync_cube();
        // The next block's loads, in flight while this one is multiplied.
        if b + 1 < blocks {
            let k0 = (b + 1) * row_words;
            #[unroll]
            for l in 0..x_loads {
                let i = unit + l * units;
                let row = m0 + i / row_words;
                if i < CUBE_ROWS * row_words && row < m {
                    x_r[l] = x[row * k_words + k0 + i % row_words];
                }
            }
            #[unroll]
            for l in 0..w_loads {
                let i = unit + l * units;
                if i < CUBE_COLS * row_words {
                    w_r[l] = w[(n0 + i / row_words) * k_words + k0 + i % row_words];
                }
            }
        }
        #[unroll]
        for t in 0..block / TILE {
            let mut ws = Sequence::<cmma::Matrix<F>>::new();
            #[unroll]
            for j in 0..PLANE_COLS {
                let start = wo + ((pj * PLANE_COLS + j) * TILE) * ld_words + t * tile_words;
                ws.push(load_fragment::<F, Vector<W, N>>(
                    cmma::MatrixIdent::B,
                    cmma::MatrixLayout::ColMajor,
                    w_s.slice(start, start + (TILE - 1) * ld_words + tile_words),
                    stride,
                ));
            }
            #[unroll]
            for i in 0..PLANE_ROWS {
                let start = xo + ((pi * PLANE_ROWS + i) * TILE) * ld_words + t * tile_words;
                let f = load_fragment::<F, Vector<W, N>>(
                    cmma::MatrixIdent::A,
                    cmma::MatrixLayout::RowMajor,
                    x_s.slice(start, start + (TILE - 1) * ld_words + tile_words),
                    stride,
                );
                #[unroll]
                for j in 0..PLANE_COLS {
                    let acc = accs.index(i * PLANE_COLS + j);
                    cmma::execute(&f, ws.index(j), acc, acc);
                }
            }
        }
        if comptime![stages == 1] {
            sync_cube();
        }
        b += 1;
    }
    // Each plane's tiles through its own 16 × 16 of f32 shared memory, the rows below `m` out.
    let tile = TILE * TILE;
    let mut o_s = Shared::<[f32]>::new_slice(PLANES * tile);
    let lane = UNIT_POS_X as usize;
    #[unroll]
    for i in 0..PLANE_ROWS {
        #[unroll]
        for j in 0..PLANE_COLS {
            cmma::store(
                o_s.slice_mut(plane * tile, (plane + 1) * tile),
                accs.index(i * PLANE_COLS + j),
                TILE as u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_cube();
            let row0 = m0 + (pi * PLANE_ROWS + i) * TILE;
            let col0 = n0 + (pj * PLANE_COLS + j) * TILE;
            let mut e = lane;
            while e < tile {
                let row = row0 + e / TILE;
                if row < m {
                    out[row * n + col0 + e % TILE] = F::cast_from(o_s[plane * tile + e]);
                }
                e += 32;
            }
            sync_cube();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tiles_product_kernel;
    use crate::test_common as common;
    use cubecl::ir::{AddressType, ElemType, FloatKind};
    use cubecl::prelude::*;
    use std::sync::Arc;

    /// The product's fragments, loaded from shared memory as 16-byte words and as vectors of 8
    /// halves (one stage or two, blocks of 64 or 128), expanded and translated to CUDA C++ and
    /// SPIR-V text against the properties of a device with f16 16 × 16 × 16 tiles (no CUDA
    /// compiler runs here, and the word loads' stride is SPIR-V's); its arithmetic is checked by
    /// the root crate's `tiles_product_matches_float64` where it runs.
    #[test]
    fn tiles_product_kernel_expands_and_compiles_to_cuda_and_spirv() {
        let Some(client) = common::any_client("tiles product's CUDA check") else {
            return;
        };
        let (m, n, k) = (300usize, 256usize, 128usize);
        let f16 = ElemType::Float(FloatKind::F16);
        let u32_type = ElemType::UInt(cubecl::ir::UIntKind::U32);
        for (word, vector, word_halves, block, stages) in [
            (u32_type, 4usize, 2usize, 64usize, 1usize),
            (f16, 8, 1, 64, 1),
            (f16, 8, 1, 64, 2),
            (f16, 8, 1, 128, 2),
        ] {
            let kernel = tiles_product_kernel::create_dummy_kernel(
                common::properties_with_f16_tiles(&client),
                Arc::new(client.target_properties().clone()),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, 8),
                AddressType::U32,
                vector,
                common::dummy_tensor(&client, &[m, k / 8]),
                common::dummy_tensor(&client, &[n, k / 8]),
                common::dummy_tensor(&client, &[m, n]),
                word_halves,
                block,
                stages,
                [f16, word],
            );
            common::assert_tensor_core_kernel_compiles(
                kernel,
                &format!(
                    "tiles_product_kernel, words of {word:?}, blocks of {block}, {stages} stages"
                ),
            );
        }
    }
}
