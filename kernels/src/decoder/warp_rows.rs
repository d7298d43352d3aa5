//! The staged kernel's products (`out [m, n] = x [m, k] · wᵀ`, `m ≤ 64`, f16) on warp-level
//! tensor-core products (`mma.sync` m16n8k16, f16 × f16 → f32, through CubeCL's
//! `MmaDefinition`): the weight's rows are the product's 16 rows, loaded by each lane straight
//! from global memory into the operand's registers (the next block's before this block's
//! products), and the rows of `x` its 8 columns, staged in shared memory by the cube.
//!
//! Why (`benches/NOTES.md`, "What binds the staged kernel"): `staged_rows_kernel` at 64 rows
//! waits on its shared-memory fragment loads (four of `x` and one of the weight for four `wmma`
//! products a plane and inner tile). Here the weight meets no shared stage and no fragment
//! load: a warp's 16 weight rows take two 16-byte loads a lane per 32 inner elements and serve
//! all of `x`'s row groups. Measured on an H100: 2% more decode tok/s at batch 64 than the
//! staged kernel, 2–3% fewer at batch 8 (`benches/results/h100-warp-kernels`), then 0.6–2.1%
//! fewer at batch 64 in another machine start (`benches/results/h100-warp-rows-tests`, where its
//! float64 tests passed through CUDA). A launch knob (`ROPE_POOL_STAGED_WARP=1`), not the
//! launch.
//!
//! The operand layout: in a chunk of 32 inner elements, lane `(g, t) = (lane / 4, lane % 4)`
//! loads elements `8t … 8t + 7` (16 bytes) of weight rows `g` and `g + 8`, and of `x`'s row
//! `8j + g` for each group `j` of 8 rows. Product `p` (0, 1) takes the lane's words `2p` and
//! `2p + 1` (elements `8t + 4p …`): the first as the operand's inner pair `2t, 2t + 1`, the
//! second as `2t + 8, 2t + 9`, in both operands, so every product pairs the same elements of
//! the weight and of `x`, and the two products of a chunk cover its 32 elements once. Rows of
//! `x` past `m` are staged as zeros and not written.

use crate::common::fragment::mma_accumulate;
use cubecl::prelude::*;
use half::f16;

/// Inner elements a chunk: two products of 16.
pub(crate) const CHUNK: usize = 32;
/// Rows of `x` a product takes (its columns).
pub(crate) const GROUP_ROWS: usize = 8;

/// The launch shape of [`warp_rows_kernel`] (comptime).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct WarpRowsShape {
    /// Groups of 8 rows of `x` (`m.div_ceil(8)`, 1 to 8).
    pub(crate) groups: usize,
    /// Warps a cube, each 16 weight rows.
    pub(crate) warps: usize,
    /// 16-byte words of a row of `x` and of the weight (`k / 8`).
    pub(crate) k_words: usize,
    /// Chunks a block: a share of the inner size is whole blocks; a block of `x` is staged at
    /// once and a block's weight words are loaded together.
    pub(crate) block_chunks: usize,
    /// Shares of the inner size.
    pub(crate) splits: usize,
}

impl WarpRowsShape {
    /// Weight rows (output columns) a cube.
    pub(crate) const fn cube_cols(&self) -> usize {
        16 * self.warps
    }

    /// The words between rows of a stage of `x`: a block's `4 · block_chunks` padded to 4 more
    /// than a multiple of 8 (the 8 lanes of a quarter plane read rows `g` and `g + 1` 64 bytes
    /// apart in the banks' 128: no bank twice).
    pub(crate) const fn x_row_stride(&self) -> usize {
        let words = 4 * self.block_chunks;
        words + (12 - words % 8) % 8
    }

    /// The 16-byte words of a stage of `x`.
    pub(crate) const fn x_stage_words(&self) -> usize {
        self.groups * GROUP_ROWS * self.x_row_stride()
    }

    /// The shared memory a cube takes, bytes: two stages of `x`.
    pub(crate) const fn shared_bytes(&self) -> usize {
        2 * 16 * self.x_stage_words()
    }
}

/// `out = x · wᵀ` (`x [m, k]`, `w [n, k]` f16, both bound as 16-byte words, `k / 8` a row) for
/// `m ≤ 8 · groups`: the cube of `CUBE_POS` owns `16 · warps` weight rows and one of `splits`
/// shares of the inner size (blocks `share · blocks / splits …`, as `staged_rows_kernel` splits
/// it); warp `UNIT_POS_Y` owns 16 of the rows. Each block of `x`'s rows is read by the cube's
/// units one block ahead into registers and stored into one of two shared stages (one barrier a
/// block). Written rounded once to `O` into `out [m, n]` with one share, as f32 into
/// `out [splits · m, n]` (share `s` at rows `s · m …`) with several. See the module doc.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn warp_rows_kernel<O: Float>(
    x: &Tensor<Vector<u32, Const<4>>>,
    w: &Tensor<Vector<u32, Const<4>>>,
    out: &mut Tensor<O>,
    #[comptime] shape: WarpRowsShape,
    #[define(O)] _dtype: ElemType,
) {
    let (groups, block_chunks, splits) =
        comptime!((shape.groups, shape.block_chunks, shape.splits));
    let m = x.shape(0);
    let n = w.shape(0);
    let cube_cols = comptime!(shape.cube_cols());
    let col_groups = n / cube_cols;
    let share = CUBE_POS / col_groups;
    // The whole cube leaves together: the syncs below stay uniform.
    if share >= splits {
        terminate!();
    }
    let lane = UNIT_POS_X as usize;
    let g = lane / 4;
    let t = lane % 4;
    let col0 = (CUBE_POS % col_groups) * cube_cols + UNIT_POS_Y as usize * 16;
    let blocks = comptime!(shape.k_words / (4 * block_chunks));
    let first = share * blocks / splits;
    let end = (share + 1) * blocks / splits;

    // `x`'s staged rows (8 · groups, zeros past `m`): two stages.
    let row_words = comptime!(4 * block_chunks);
    let ld = comptime!(shape.x_row_stride());
    let stage_words = comptime!(shape.x_stage_words());
    let units = comptime!(32 * shape.warps);
    let staged_words = comptime!(GROUP_ROWS * groups * row_words);
    let x_loads = comptime!(staged_words.div_ceil(units));
    let mut x_s =
        Shared::<[Vector<u32, Const<4>>]>::new_aligned_slice(comptime!(2 * stage_words), 16usize);
    let mut x_r = Array::<Vector<u32, Const<4>>>::new(x_loads);
    let unit = UNIT_POS as usize;
    // Block `first` lies in the row (`share < splits`) even where the share is empty.
    load_x_block(x, &mut x_r, first, unit, shape);
    let words = comptime!(block_chunks * 2);
    let mut cur = Array::<Vector<u32, Const<4>>>::new(words);
    let mut next = Array::<Vector<u32, Const<4>>>::new(words);
    load_block(w, &mut next, col0, first, g, t, shape);

    let mut acc = Array::<Vector<f32, Const<2>>>::new(comptime!(groups * 2));
    #[unroll]
    for i in 0..comptime!(groups * 2) {
        acc[i] = Vector::new(f32::new(0.0));
    }
    for b in first..end {
        // The stage written here was last read two blocks before, behind the barrier between.
        let stage = ((b - first) % 2) * stage_words;
        #[unroll]
        for l in 0..x_loads {
            let i = unit + l * units;
            if i < staged_words {
                x_s[stage + (i / row_words) * ld + i % row_words] = x_r[l];
            }
        }
        sync_cube();
        #[unroll]
        for i in 0..words {
            cur[i] = next[i];
        }
        // The next block's loads, in flight while this one is multiplied.
        if b + 1 < end {
            load_x_block(x, &mut x_r, b + 1, unit, shape);
            load_block(w, &mut next, col0, b + 1, g, t, shape);
        }
        #[unroll]
        for u in 0..block_chunks {
            #[unroll]
            for j in 0..groups {
                let xv = x_s[stage + (comptime!(GROUP_ROWS * j) + g) * ld + u * 4 + t];
                let (w0, w1) = (cur[comptime!(2 * u)], cur[comptime!(2 * u + 1)]);
                #[unroll]
                for p in 0..2usize {
                    let mut af = Array::<Vector<f16, Const<2>>>::new(4usize);
                    af[0] = Vector::<f16, Const<2>>::reinterpret(w0.extract(2 * p));
                    af[1] = Vector::<f16, Const<2>>::reinterpret(w1.extract(2 * p));
                    af[2] = Vector::<f16, Const<2>>::reinterpret(w0.extract(2 * p + 1));
                    af[3] = Vector::<f16, Const<2>>::reinterpret(w1.extract(2 * p + 1));
                    let mut bf = Array::<Vector<f16, Const<2>>>::new(2usize);
                    bf[0] = Vector::<f16, Const<2>>::reinterpret(xv.extract(2 * p));
                    bf[1] = Vector::<f16, Const<2>>::reinterpret(xv.extract(2 * p + 1));
                    mma_accumulate(&af, &bf, &mut acc, comptime!(2 * j));
                }
            }
        }
    }

    // Accumulator `(j, h)` holds weight row `col0 + g + 8h` times `x`'s rows `8j + 2t` and
    // `8j + 2t + 1`.
    let base = share * m;
    #[unroll]
    for j in 0..groups {
        #[unroll]
        for h in 0..2usize {
            let col = col0 + comptime!(8 * h) + g;
            let v = acc[comptime!(2 * j + h)];
            #[unroll]
            for i in 0..2usize {
                let row = comptime!(GROUP_ROWS * j + i) + 2 * t;
                if row < m {
                    out[(base + row) * n + col] = O::cast_from(v.extract(i));
                }
            }
        }
    }
}

/// Block `b`'s words of `x`'s rows `0 … 8 · groups` (zeros past `m`) into `into`: word `i` of
/// the block (row `i / (4 · block_chunks)`) at `into[l]` for `i = unit + l · 32 · warps`.
#[cube]
fn load_x_block(
    x: &Tensor<Vector<u32, Const<4>>>,
    into: &mut Array<Vector<u32, Const<4>>>,
    b: usize,
    unit: usize,
    #[comptime] shape: WarpRowsShape,
) {
    let row_words = comptime!(4 * shape.block_chunks);
    let units = comptime!(32 * shape.warps);
    let total = comptime!(GROUP_ROWS * shape.groups * row_words);
    let m = x.shape(0);
    #[unroll]
    for l in 0..comptime!(total.div_ceil(units)) {
        let i = unit + l * units;
        let row = i / row_words;
        let mut v = Vector::<u32, Const<4>>::new(0u32);
        if i < total && row < m {
            v = x[row * comptime!(shape.k_words) + b * row_words + i % row_words];
        }
        into[l] = v;
    }
}

/// Block `b`'s weight words of this lane into `into`: for each chunk `u`, the 16 bytes at
/// inner word `(b · block_chunks + u) · 4 + t` of weight rows `col0 + g` (`into[2u]`) and
/// `col0 + g + 8` (`into[2u + 1]`).
#[cube]
fn load_block(
    w: &Tensor<Vector<u32, Const<4>>>,
    into: &mut Array<Vector<u32, Const<4>>>,
    col0: usize,
    b: usize,
    g: usize,
    t: usize,
    #[comptime] shape: WarpRowsShape,
) {
    let (k_words, block_chunks) = comptime!((shape.k_words, shape.block_chunks));
    #[unroll]
    for u in 0..block_chunks {
        let word = (b * block_chunks + u) * 4 + t;
        #[unroll]
        for h in 0..2usize {
            let row = col0 + comptime!(8 * h) + g;
            into[comptime!(2 * u + h)] = w[row * k_words + word];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{WarpRowsShape, warp_rows_kernel};
    use crate::test_common as common;
    use cubecl::ir::{AddressType, ElemType, FloatKind};
    use cubecl::prelude::*;

    /// The kernel expanded against CUDA's manual-`mma` register layout and a device listing f16
    /// `mma.sync` 16 × 8 × 16, and translated to CUDA C++ (no CUDA compiler runs here): one,
    /// five and eight row groups, one share and several. Its arithmetic is checked by the root
    /// crate's projection tests through CUDA with `ROPE_POOL_STAGED_WARP=1` (from 5 rows).
    #[test]
    fn warp_rows_kernel_expands_and_compiles_to_cuda() {
        let Some(client) = common::any_client("warp rows product's CUDA check") else {
            return;
        };
        let (properties, target) = common::warp_mma_properties(&client);
        let (n, k) = (128usize, 1024usize);
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        for (groups, warps, splits, out) in [
            (1usize, 4usize, 1usize, FloatKind::F16),
            (8, 4, 4, FloatKind::F32),
            (5, 2, 1, FloatKind::F16),
        ] {
            let shape = WarpRowsShape {
                groups,
                warps,
                k_words: k / 8,
                block_chunks: 4,
                splits,
            };
            let m = groups * 8 - 3;
            let kernel = warp_rows_kernel::create_dummy_kernel(
                properties.clone(),
                target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, shape.warps as u32),
                AddressType::U32,
                tensor(&[m, k / 8]),
                tensor(&[n, k / 8]),
                tensor(&[splits * m, n]),
                shape,
                ElemType::Float(out),
            );
            common::assert_warp_mma_kernel_compiles(
                kernel,
                &format!("{groups} groups, {warps} warps, {splits} shares"),
            );
        }
    }
}
