//! Matrix-vector products on fp8 weights for up to 8 rows on warp-level tensor-core products
//! (`mma.sync` m16n8k16, f16 × f16 → f32, through CubeCL's `MmaDefinition`): the weight's rows
//! are the product's 16 rows, the rows of `x` its 8 columns, so one instruction multiplies 256
//! decoded codes where [`super::fp8`]'s plane kernels spend two arithmetic instructions a code
//! (a decoded f16 widened to f32, then a multiply-add). The codes use [`super::fp8`]'s layout
//! (four e4m3 codes a `u32` word, one f32 scale a row and block of words).
//!
//! One cube of `planes` planes owns 16 weight rows (with `Silu`, 8 gate rows and their 8 up
//! rows); each plane walks a contiguous share of the inner size in chunks of 16 words (64
//! elements, four products of 16). In a chunk, lane `(g, t) = (lane / 4, lane % 4)` loads
//! words `4t … 4t + 3` (16 bytes) of weight rows `g` and `g + 8`, and product `s` takes word
//! `4t + s`: its codes 0 and 2 as the first operand's pair of inner positions `2t, 2t + 1`,
//! codes 1 and 3 as `2t + 8, 2t + 9` (each decoded as f16 halves, [`halves_pairs`]); `x`'s
//! fragment (row `g`, zeros past the rows) takes the same elements of the same word, so every
//! product pairs the right elements whatever inner position they are given. A chunk's products
//! are multiplied by their weight rows' scale once (with one block, once at the end). The
//! planes' accumulators meet in shared memory, are added in f32 and end as the plane kernels
//! end: rounded once to f16, or the SiLU of the gate times the up projection, or added to the
//! residual. The fragments' register layout is CUDA's: the launch takes this kernel through
//! CubeCL's CUDA runtime only, for f16 rows.

use super::matvec::{PlaneSums, normalised, row_scales, stage_normalised};
use crate::common::fp8::halves_pairs;
use crate::common::fragment::half_pair as pair;
use cubecl::cmma::MmaDefinition;
use cubecl::prelude::*;
use half::f16;

/// Words of a weight row a chunk: four products of 16 inner elements.
pub(crate) const CHUNK_WORDS: usize = 16;
/// Rows of `x` a product takes (its columns).
pub(crate) const TILE_X_ROWS: usize = 8;

/// What the kernel does with its sums (comptime).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum TilesEnd {
    /// `out = x · wᵀ`.
    Plain,
    /// `out = rmsnorm(x) · wᵀ`.
    Norm,
    /// `out = silu(gate) * up` of `rmsnorm(x)` and a stacked gate/up weight `[2m, k]`.
    Silu,
    /// `out = res + x · wᵀ`.
    Add,
}

/// The launch shape of [`matvec_fp8_tiles_kernel`] (comptime).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Fp8TilesShape {
    /// Rows of `x`, 1 to 8.
    pub(crate) rows: usize,
    /// Words of a weight row (`k / 4`), a multiple of `CHUNK_WORDS * planes * unroll`.
    pub(crate) k_words: usize,
    /// Planes a cube, each a contiguous share of the chunks.
    pub(crate) planes: usize,
    /// Chunks a plane loads before it multiplies them.
    pub(crate) unroll: usize,
    /// Words a scale block; a multiple of `CHUNK_WORDS`, or at least `k_words` (one block).
    pub(crate) block_words: usize,
    /// NaN codes decode to NaN (else ±480 × scale, for weights known to hold none).
    pub(crate) nan_codes: bool,
    /// The normalised rows staged in shared memory once a cube (else normalised where read).
    pub(crate) staged: bool,
    /// What is written.
    pub(crate) end: TilesEnd,
}

/// `out [rows, n]` of `x [rows, k]` (f16, vectors of four, one a word) and an fp8 weight
/// (`codes [n', k / 4]` as vectors of four words, `scales [n', blocks]`), ending as
/// `shape.end` says: `norm_w [k]` (vectors of four) with `Norm` and `Silu`, `res [rows, n]` with
/// `Add` (any live tensor otherwise). See the module doc. `n = n'`, or `n' / 2` with `Silu`.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matvec_fp8_tiles_kernel(
    x: &Tensor<Vector<f16, Const<4>>>,
    norm_w: &Tensor<Vector<f16, Const<4>>>,
    codes: &Tensor<Vector<u32, Const<4>>>,
    scales: &Tensor<f32>,
    res: &Tensor<f16>,
    out: &mut Tensor<f16>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] shape: Fp8TilesShape,
) {
    let (rows, k_words, planes, unroll) =
        comptime!((shape.rows, shape.k_words, shape.planes, shape.unroll));
    let end = comptime!(shape.end);
    let silu = comptime!(end == TilesEnd::Silu);
    let norm = comptime!(end == TilesEnd::Norm || end == TilesEnd::Silu);
    let one_block = comptime!(shape.block_words >= k_words);
    let block_words = comptime!(shape.block_words);
    let sums = comptime!(PlaneSums {
        lanes: 32,
        planes,
        shared: false,
    });
    let stacked = comptime!(if silu { 2usize } else { 1usize });
    let n = codes.shape(0) / stacked;
    let blocks = scales.shape(1);
    let lane = UNIT_POS_X as usize;
    let plane = UNIT_POS_Y as usize;
    let gl = lane / 4;
    let tl = lane % 4;

    // The rows' RMSNorm scales (every unit of the cube), and the normalised rows staged.
    let norms = if comptime!(norm) {
        row_scales::<f16, Const<4>>(x, eps, inv_hidden, rows, k_words, sums)
    } else {
        Array::<f32>::new(rows)
    };
    let staged = comptime!(norm && shape.staged);
    let mut rows_s = Shared::<[Vector<f16, Const<4>>]>::new_slice(comptime!(if staged {
        rows * k_words
    } else {
        1
    }));
    if comptime!(staged) {
        stage_normalised::<f16, Const<4>>(x, norm_w, &norms, &mut rows_s, rows, k_words, sums);
    }

    // This lane's weight rows (product rows `gl` and `gl + 8`) and output columns; a row past
    // the weight loads zeros.
    let mut w_rows = Array::<usize>::new(2usize);
    let mut live = Array::<bool>::new(2usize);
    #[unroll]
    for h in 0..2usize {
        let a = gl + comptime!(8 * h);
        let (row, col) = if comptime!(silu) {
            let col = CUBE_POS * 8 + gl;
            (col + comptime!(h) * n, col)
        } else {
            let col = CUBE_POS * 16 + a;
            (col, col)
        };
        live[h] = col < n;
        w_rows[h] = select(col < n, row, 0usize);
    }
    let x_live = gl < rows;
    let w_vectors = comptime!(k_words / 4);

    let def = MmaDefinition::<f16, f16, f32>::new(16usize, 8usize, 16usize);
    let zero_acc = Vector::<f32, Const<2>>::new(f32::new(0.0));
    let mut acc = Array::<Vector<f32, Const<2>>>::new(2usize);
    acc[0] = zero_acc;
    acc[1] = zero_acc;
    let chunks = comptime!(k_words / CHUNK_WORDS / planes);
    let first = plane * chunks;
    let zero_codes = Vector::<u32, Const<4>>::new(0u32);
    for c0 in range_stepped(first, first + chunks, unroll) {
        // Every chunk's codes in flight before any is decoded.
        let mut ws = Array::<Vector<u32, Const<4>>>::new(comptime!(2 * unroll));
        #[unroll]
        for u in 0..unroll {
            #[unroll]
            for h in 0..2usize {
                let mut v = zero_codes;
                if live[h] {
                    v = codes[w_rows[h] * w_vectors + (c0 + u) * 4 + tl];
                }
                ws[comptime!(2 * u + h)] = v;
            }
        }
        #[unroll]
        for u in 0..unroll {
            let ch = c0 + u;
            let mut part = Array::<Vector<f32, Const<2>>>::new(2usize);
            part[0] = zero_acc;
            part[1] = zero_acc;
            #[unroll]
            for s in 0..4usize {
                let word = ch * CHUNK_WORDS + tl * 4 + s;
                let mut a = Array::<Vector<f16, Const<2>>>::new(4usize);
                #[unroll]
                for h in 0..2usize {
                    let (even, odd) =
                        halves_pairs(ws[comptime!(2 * u + h)].extract(s), shape.nan_codes);
                    a[h] = even;
                    a[comptime!(2 + h)] = odd;
                }
                let xv = x_word(x, norm_w, &norms, &rows_s, gl, word, x_live, shape);
                let mut b = Array::<Vector<f16, Const<2>>>::new(2usize);
                b[0] = pair(xv.extract(0usize), xv.extract(2usize));
                b[1] = pair(xv.extract(1usize), xv.extract(3usize));
                let next = def.execute(&a, &b, &part);
                part[0] = next[0];
                part[1] = next[1];
            }
            if comptime!(one_block) {
                acc[0] += part[0];
                acc[1] += part[1];
            } else {
                let block = (ch * CHUNK_WORDS) / block_words;
                #[unroll]
                for h in 0..2usize {
                    let scale = scales[w_rows[h] * blocks + block];
                    acc[h] += part[h] * Vector::new(scale);
                }
            }
        }
    }
    // With one block, each weight row's scale once.
    if comptime!(one_block) {
        #[unroll]
        for h in 0..2usize {
            acc[h] *= Vector::new(scales[w_rows[h] * blocks]);
        }
    }

    // The planes' sums: product row `a`, column (row of `x`) `r` at `a * 8 + r`.
    let tile = comptime!(16 * TILE_X_ROWS);
    let mut red = Shared::<[f32]>::new_slice(comptime!(planes * 16 * TILE_X_ROWS));
    #[unroll]
    for h in 0..2usize {
        #[unroll]
        for i in 0..2usize {
            red[plane * tile + (gl + comptime!(8 * h)) * TILE_X_ROWS + 2 * tl + i] =
                acc[h].extract(i);
        }
    }
    sync_cube();
    // The decode's factor: halves are the codes' values times 2^-8.
    let factor = f32::new(256.0);
    let ends = comptime!(if silu { 8usize } else { 16usize });
    for unit in range_stepped(plane * 32 + lane, ends * TILE_X_ROWS, planes * 32) {
        let a = unit / TILE_X_ROWS;
        let r = unit % TILE_X_ROWS;
        if r < rows {
            let mut total = f32::new(0.0);
            for p in 0..planes {
                total += red[p * tile + unit];
            }
            total *= factor;
            match comptime!(end) {
                TilesEnd::Silu => {
                    let col = CUBE_POS * 8 + a;
                    let mut up = f32::new(0.0);
                    for p in 0..planes {
                        up += red[p * tile + unit + 8 * TILE_X_ROWS];
                    }
                    let gate = f32::cast_from(f16::cast_from(total));
                    let up = f16::cast_from(up * factor);
                    let s = gate / (f32::new(1.0) + f32::exp(f32::new(0.0) - gate));
                    if col < n {
                        out[r * n + col] = f16::cast_from(s) * up;
                    }
                }
                TilesEnd::Add => {
                    let col = CUBE_POS * 16 + a;
                    if col < n {
                        let at = r * n + col;
                        let s = f16::cast_from(total);
                        out[at] = f16::cast_from(f32::cast_from(res[at]) + f32::cast_from(s));
                    }
                }
                _ => {
                    let col = CUBE_POS * 16 + a;
                    if col < n {
                        out[r * n + col] = f16::cast_from(total);
                    }
                }
            }
        }
    }
}

/// Word `word` of row `r` of `x` (four elements), as the kernel's end reads it: as stored,
/// normalised where read, or from the staged rows; zeros where `live` is false.
#[cube]
#[allow(clippy::too_many_arguments)]
fn x_word(
    x: &Tensor<Vector<f16, Const<4>>>,
    norm_w: &Tensor<Vector<f16, Const<4>>>,
    norms: &Array<f32>,
    rows_s: &Shared<[Vector<f16, Const<4>>]>,
    r: usize,
    word: usize,
    live: bool,
    #[comptime] shape: Fp8TilesShape,
) -> Vector<f16, Const<4>> {
    let k_words = comptime!(shape.k_words);
    let norm = comptime!(shape.end == TilesEnd::Norm || shape.end == TilesEnd::Silu);
    let mut v = Vector::<f16, Const<4>>::new(f16::new(0.0));
    if live {
        if comptime!(norm && shape.staged) {
            v = rows_s[r * k_words + word];
        } else if comptime!(norm) {
            v = normalised::<f16, Const<4>>(x[r * k_words + word], norms[r], norm_w[word]);
        } else {
            v = x[r * k_words + word];
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::{Fp8TilesShape, TilesEnd, matvec_fp8_tiles_kernel};
    use crate::test_common as common;
    use cubecl::ir::AddressType;
    use cubecl::prelude::*;

    /// The kernel expanded against CUDA's manual-`mma` register layout and a device listing f16
    /// `mma.sync` 16 × 8 × 16, and translated to CUDA C++ (no CUDA compiler runs here): every
    /// end, one and eight rows, staged and unstaged rows, blocks of two chunks and one block a
    /// row. Its arithmetic is checked by the root crate's projection tests through CUDA, with
    /// `ROPE_POOL_MATVEC_TILES=1`.
    #[test]
    fn matvec_fp8_tiles_kernel_expands_and_compiles_to_cuda() {
        let Some(client) = common::any_client("fp8 tiles product's CUDA check") else {
            return;
        };
        let (properties, target) = common::warp_mma_properties(&client);
        let (n, k) = (64usize, 1024usize);
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        for (end, rows, staged, block_words) in [
            (TilesEnd::Plain, 1usize, false, 32usize),
            (TilesEnd::Norm, 1, true, 256),
            (TilesEnd::Silu, 8, false, 32),
            (TilesEnd::Silu, 1, true, 256),
            (TilesEnd::Add, 3, false, 32),
        ] {
            let shape = Fp8TilesShape {
                rows,
                k_words: k / 4,
                planes: 4,
                unroll: 2,
                block_words,
                nan_codes: true,
                staged,
                end,
            };
            let kernel = matvec_fp8_tiles_kernel::create_dummy_kernel(
                properties.clone(),
                target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, 4),
                AddressType::U32,
                tensor(&[rows, k / 4]),
                tensor(&[k / 4]),
                tensor(&[n, k / 16]),
                tensor(&[n, (k / 4).div_ceil(block_words)]),
                tensor(&[rows, n]),
                tensor(&[rows, n]),
                1e-5,
                1.0 / k as f32,
                shape,
            );
            common::assert_warp_mma_kernel_compiles(
                kernel,
                &format!("{end:?}, {rows} rows, staged {staged}, blocks of {block_words}"),
            );
        }
    }
}
