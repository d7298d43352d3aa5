//! Products on fp8 weights: a projection's weight kept as e4m3 codes, four to a `u32` word
//! (`w [n, k / 4]`, element `4j + i` of a row in bits `8i..8i + 8` of word `j`), with one f32
//! scale per row and block of `block_words` words (`scales [n, ceil(k / 4 / block_words)]`;
//! HuggingFace's `[128, 128]` blocks, a per-channel or per-tensor scale all take this form).
//! Each code's value is `e4m3 value × scale` in f32, as the dequantized weight holds it
//! ([`unpack_e4m3`]); the matrix-vector kernels add a vector's products of a block's codes and
//! multiply the sum by its scale once (rounding otherwise than a product of the dequantized
//! weight, within the float64 tests' bounds).
//!
//! - [`matvec_fp8_kernel`](fn@matvec_fp8_kernel): the matrix-vector product of
//!   [`super::matvec`] for up to 16 rows, decoding the weight in registers: one byte per weight
//!   element read, once for all rows.
//! - [`dequantize_fp8_kernel`](fn@dequantize_fp8_kernel): the weight as floats `[n, k]`, for the
//!   products of more rows (a tensor-core routine then reads it).
//!
//! The staged tensor-core kernel ([`super::matvec`]) decodes fp8 weights too, as it stages them
//! (5 to 64 rows where it fits): the values `dequantize_fp8_kernel` writes.

use super::matvec::{
    PlaneSums, RowRead, plane_columns, row_scales, row_vector, stage_normalised, store_added,
    store_plane_sums, store_silu,
};
use crate::common::fp8::{Fp8Decode, decode_codes, decode_raw, unpack_e4m3};
use cubecl::ir::ElemType;
use cubecl::prelude::*;

/// `out [rows, n] = x [rows, k] · wᵀ` with `w` fp8 (`codes` and `scales` as above), as vectors
/// of `W` words, `shape.w_vectors` a row; `x` as vectors of `N` = 4 elements (one per word). The
/// cube is `(plane size, planes)` units; plane `UNIT_POS_Y` of cube `CUBE_POS` computes the
/// `cols` adjacent columns from `(CUBE_POS * planes + UNIT_POS_Y) * cols`; each unit keeps
/// `unroll * cols` weight loads in flight and decodes each word once for all rows.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn matvec_fp8_kernel<F: Float, N: Size, W: Size>(
    x: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, W>>,
    scales: &Tensor<f32>,
    out: &mut Tensor<F>,
    #[comptime] shape: Fp8Shape,
    #[comptime] sums: PlaneSums,
    #[define(F)] _dtype: ElemType,
) {
    // One weight row a column, no norm, whatever the host said.
    let shape = comptime!(Fp8Shape {
        pairs: 1,
        read: RowRead::Plain,
        ..shape
    });
    let (rows, cols) = comptime!((shape.rows, shape.cols));
    let n = codes.shape(0);
    let col0 = plane_columns(n, cols, sums);
    let acc = fp8_plain_products::<F, N, W>(x, codes, scales, col0, n, shape);
    store_plane_sums::<F, N>(&acc, out, n, col0, rows, cols, sums);
}

/// [`matvec_fp8_kernel`](fn@matvec_fp8_kernel) of the RMSNorm of `x`'s rows, and with `pairs =
/// 2` the activation of a stacked gate/up weight: as the float kernel
/// [`matvec_norm_kernel`](fn@super::matvec::matvec_norm_kernel).
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matvec_fp8_norm_kernel<F: Float, N: Size, W: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, W>>,
    scales: &Tensor<f32>,
    out: &mut Tensor<F>,
    eps: f32,
    inv_hidden: f32,
    #[comptime] shape: Fp8Shape,
    #[comptime] sums: PlaneSums,
    #[define(F)] _dtype: ElemType,
) {
    // The rows are normalised here whatever the host said: where they are read, or staged.
    let shape = comptime!(Fp8Shape {
        read: match shape.read {
            RowRead::Staged => RowRead::Staged,
            _ => RowRead::Normalised,
        },
        ..shape
    });
    let (rows, cols, pairs) = comptime!((shape.rows, shape.cols, shape.pairs));
    let n = codes.shape(0) / pairs;
    let wv = W::value();
    let words = comptime!(shape.w_vectors * wv);
    // Before any plane leaves: the cube syncs.
    let norms = row_scales::<F, N>(x, eps, inv_hidden, rows, words, sums);
    let staged = comptime!(shape.read == RowRead::Staged);
    let mut rows_s =
        Shared::<[Vector<F, N>]>::new_slice(comptime!(if staged { rows * words } else { 1 }));
    if comptime!(staged) {
        stage_normalised::<F, N>(x, norm_w, &norms, &mut rows_s, rows, words, sums);
    }
    let col0 = plane_columns(n, cols, sums);
    let acc =
        fp8_plane_products::<F, N, W>(x, norm_w, &norms, &rows_s, codes, scales, col0, n, n, shape);
    if comptime!(pairs == 1) {
        store_plane_sums::<F, N>(&acc, out, n, col0, rows, cols, sums);
    } else {
        store_silu::<F, N>(&acc, out, n, col0, rows, cols, sums);
    }
}

/// [`matvec_fp8_kernel`](fn@matvec_fp8_kernel) added to the residual stream: as the float
/// kernel [`matvec_add_kernel`](fn@super::matvec::matvec_add_kernel).
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn matvec_fp8_add_kernel<F: Float, N: Size, W: Size>(
    x: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, W>>,
    scales: &Tensor<f32>,
    res: &Tensor<F>,
    out: &mut Tensor<F>,
    #[comptime] shape: Fp8Shape,
    #[comptime] sums: PlaneSums,
    #[define(F)] _dtype: ElemType,
) {
    // One weight row a column, no norm, whatever the host said.
    let shape = comptime!(Fp8Shape {
        pairs: 1,
        read: RowRead::Plain,
        ..shape
    });
    let n = codes.shape(0);
    let (rows, cols) = comptime!((shape.rows, shape.cols));
    let col0 = plane_columns(n, cols, sums);
    let acc = fp8_plain_products::<F, N, W>(x, codes, scales, col0, n, shape);
    store_added::<F, N>(&acc, res, out, n, col0, rows, cols, sums);
}

/// The launch shape of the fp8 matrix-vector kernels (comptime): `rows` rows, `cols` output
/// columns a plane each from `pairs` weight rows (2: gate and up), `unroll` loads in flight a
/// weight row (twice that with `prefetch`), rows of `w_vectors` vectors of words, how the codes
/// are read (`words`), and how the rows of `x` are read (normalised where read, or staged
/// normalised, by the norm kernel).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Fp8Shape {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) pairs: usize,
    pub(crate) unroll: usize,
    pub(crate) w_vectors: usize,
    pub(crate) read: RowRead,
    pub(crate) words: Fp8Words,
    /// The next iteration's codes loaded before this one's are decoded.
    pub(crate) prefetch: bool,
}

/// How a kernel reads an fp8 weight's codes (comptime): scales in blocks of `block_words`
/// words, codes decoded as `decode` says, NaN codes checked unless `nan_codes` is false (words
/// known to hold none).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct Fp8Words {
    pub(crate) block_words: usize,
    pub(crate) decode: Fp8Decode,
    pub(crate) nan_codes: bool,
}

/// [`fp8_plane_products`] of `x`'s rows as stored (`shape.read` plain, one weight row a column).
#[cube]
fn fp8_plain_products<F: Float, N: Size, W: Size>(
    x: &Tensor<Vector<F, N>>,
    codes: &Tensor<Vector<u32, W>>,
    scales: &Tensor<f32>,
    col0: usize,
    n: usize,
    #[comptime] shape: Fp8Shape,
) -> Array<Vector<f32, N>> {
    // `x` stands in for the norm weight the plain product does not read.
    let no_scales = Array::<f32>::new(1usize);
    let unstaged = Shared::<[Vector<F, N>]>::new_slice(1usize);
    fp8_plane_products::<F, N, W>(
        x, x, &no_scales, &unstaged, codes, scales, col0, n, 0, shape,
    )
}

/// The codes of a plane's weight rows this unit loads in one iteration from vector `base`
/// (`unroll` loads of each of `width` rows, `lanes` vectors apart; zeros past the row or past
/// column `n`), into `ws`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_codes<W: Size>(
    codes: &Tensor<Vector<u32, W>>,
    ws: &mut Array<Vector<u32, W>>,
    base: usize,
    col0: usize,
    n: usize,
    offset: usize,
    w_vectors: usize,
    #[comptime] unroll: usize,
    #[comptime] cols: usize,
    #[comptime] width: usize,
) {
    let lanes = CUBE_DIM_X as usize;
    #[unroll]
    for u in 0..unroll {
        let i = base + u * lanes;
        #[unroll]
        for j in 0..width {
            let c = comptime!(j % cols);
            let p = comptime!(j / cols);
            let mut v = Vector::<u32, W>::new(0u32);
            if i < w_vectors && col0 + c < n {
                v = codes[(col0 + c + p * offset) * w_vectors + i];
            }
            ws[u * width + j] = v;
        }
    }
}

/// This unit's share of a plane's products on an fp8 weight: accumulator `r * cols * pairs + p *
/// cols + c` holds row `r` of `x` times weight row `col0 + c + p * offset` decoded (columns
/// `col0 + c ≥ n` read zeros), lane by lane; the rows read as `shape.read` says
/// ([`row_vector`]: `row_scales` and `norm_w` normalise them, `rows_s` holds them staged). Where a
/// vector of words lies in one scale block, its products are added unscaled ([`decode_raw`])
/// and multiplied by the block's scale once.
#[cube]
#[allow(clippy::too_many_arguments)]
fn fp8_plane_products<F: Float, N: Size, W: Size>(
    x: &Tensor<Vector<F, N>>,
    norm_w: &Tensor<Vector<F, N>>,
    row_scales: &Array<f32>,
    rows_s: &Shared<[Vector<F, N>]>,
    codes: &Tensor<Vector<u32, W>>,
    scales: &Tensor<f32>,
    col0: usize,
    n: usize,
    offset: usize,
    #[comptime] shape: Fp8Shape,
) -> Array<Vector<f32, N>> {
    let (rows, cols, pairs, unroll) =
        comptime!((shape.rows, shape.cols, shape.pairs, shape.unroll));
    let (w_vectors, block_words) = comptime!((shape.w_vectors, shape.words.block_words));
    let (decode, nan_codes, read) =
        comptime!((shape.words.decode, shape.words.nan_codes, shape.read));
    let factor = comptime!(decode.raw_factor());
    let wv = W::value();
    let words = comptime!(w_vectors * wv);
    let width = comptime!(cols * pairs);
    // Whether a vector of words lies in one block (one scale a vector and column).
    let uniform = comptime!(block_words.is_multiple_of(wv));
    let blocks = scales.shape(1);
    let lane = UNIT_POS_X as usize;
    let lanes = CUBE_DIM_X as usize;
    let mut acc = Array::<Vector<f32, N>>::new(rows * width);
    #[unroll]
    for a in 0..rows * width {
        acc[a] = Vector::new(f32::new(0.0));
    }
    // Each of the plane's weight rows, for its scales: a column past `n` (its codes are zeros)
    // reads the last column's.
    let mut scale_rows = Array::<usize>::new(width);
    #[unroll]
    for j in 0..width {
        scale_rows[j] =
            usize::min(col0 + comptime!(j % cols), n - 1) + comptime!(j / cols) * offset;
    }
    let step = lanes * unroll;
    let prefetch = comptime!(shape.prefetch);
    let mut base = lane;
    // With `prefetch`, the next iteration's codes are loaded before this one's are decoded:
    // twice the loads in flight, the decoding's registers unchanged.
    let mut ahead =
        Array::<Vector<u32, W>>::new(comptime!(if prefetch { unroll * width } else { 1 }));
    if comptime!(prefetch) {
        load_codes::<W>(
            codes, &mut ahead, base, col0, n, offset, w_vectors, unroll, cols, width,
        );
    }
    while base < w_vectors {
        let mut ws = Array::<Vector<u32, W>>::new(unroll * width);
        if comptime!(prefetch) {
            #[unroll]
            for a in 0..unroll * width {
                ws[a] = ahead[a];
            }
            load_codes::<W>(
                codes,
                &mut ahead,
                base + step,
                col0,
                n,
                offset,
                w_vectors,
                unroll,
                cols,
                width,
            );
        } else {
            load_codes::<W>(
                codes, &mut ws, base, col0, n, offset, w_vectors, unroll, cols, width,
            );
        }
        #[unroll]
        for u in 0..unroll {
            let i = base + u * lanes;
            if i < w_vectors {
                let mut vector_scales = Array::<f32>::new(width);
                let mut sums =
                    Array::<Vector<f32, N>>::new(comptime!(if uniform { rows * width } else { 1 }));
                if comptime!(uniform) {
                    #[unroll]
                    for j in 0..width {
                        let at = scale_rows[j] * blocks + (i * wv) / block_words;
                        vector_scales[j] = scales[at] * f32::new(factor);
                    }
                    #[unroll]
                    for a in 0..rows * width {
                        sums[a] = Vector::new(f32::new(0.0));
                    }
                }
                #[unroll]
                for e in 0..wv {
                    let word = i * wv + e;
                    let mut decoded = Array::<Vector<f32, N>>::new(width);
                    #[unroll]
                    for j in 0..width {
                        let code = ws[u * width + j].extract(e);
                        if comptime!(uniform) {
                            decoded[j] = decode_raw::<N>(code, decode, nan_codes);
                        } else {
                            let scale = scales[scale_rows[j] * blocks + word / block_words];
                            decoded[j] = decode_codes::<N>(code, scale, decode, nan_codes);
                        }
                    }
                    #[unroll]
                    for r in 0..rows {
                        let xv =
                            row_vector::<F, N>(x, norm_w, row_scales, rows_s, r, word, words, read);
                        #[unroll]
                        for j in 0..width {
                            if comptime!(uniform) {
                                sums[r * width + j] += xv * decoded[j];
                            } else {
                                acc[r * width + j] += xv * decoded[j];
                            }
                        }
                    }
                }
                if comptime!(uniform) {
                    #[unroll]
                    for r in 0..rows {
                        #[unroll]
                        for j in 0..width {
                            acc[r * width + j] +=
                                sums[r * width + j] * Vector::new(vector_scales[j]);
                        }
                    }
                }
            }
        }
        base += step;
    }
    acc
}

/// `out [n, k]` (vectors of `N` = 4 floats, one per word) = the fp8 weight (`codes`, `scales`) decoded and
/// scaled as above, rounded once to `F`. One unit per word.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
pub(crate) fn dequantize_fp8_kernel<F: Float, N: Size>(
    codes: &Tensor<u32>,
    scales: &Tensor<f32>,
    out: &mut Tensor<Vector<F, N>>,
    #[comptime] block_words: usize,
    #[define(F)] _dtype: ElemType,
) {
    let word = ABSOLUTE_POS;
    if word >= codes.len() {
        terminate!();
    }
    let words = codes.shape(1);
    let (row, j) = (word / words, word % words);
    let scale = scales[row * scales.shape(1) + j / block_words];
    out[word] = Vector::<F, N>::cast_from(unpack_e4m3::<N>(codes[word], scale));
}

#[cfg(test)]
mod tests {
    //! No device here need have plane operations: the matrix-vector kernels (fp8 and float) and
    //! the fp8 decoding are expanded and compiled to Metal
    //! Shading Language by CubeCL's MSL compiler (as `tests/msl.rs` does for the RoPE kernel),
    //! for every launch shape the decoder takes, so an expansion or type error shows without a
    //! GPU. Their arithmetic is checked against float64 by the root crate's
    //! `fp8_projections_match_float64` and `fused_projections_match_float64` where they run
    //! (lavapipe included, with shared-memory sums).

    use super::super::matvec::{
        PlaneSums, RowRead, matvec_add_kernel, matvec_kernel, matvec_norm_kernel,
    };
    use super::{
        Fp8Shape, Fp8Words, dequantize_fp8_kernel, matvec_fp8_add_kernel, matvec_fp8_kernel,
        matvec_fp8_norm_kernel,
    };
    use crate::common::fp8::Fp8Decode;
    use crate::test_common as common;
    use cubecl::Compiler as _;
    use cubecl::ir::{AddressType, ElemType, FloatKind};
    use cubecl::prelude::*;
    use cubecl_cpp::MslCompiler;
    use cubecl_cpp::shared::CompilationOptions;
    use std::sync::Arc;

    /// `define` compiles to MSL with an entry point named `what`.
    fn assert_msl(kernel: impl CubeKernel, what: &str) {
        let source = MslCompiler::default()
            .compile(kernel.define(), &CompilationOptions::default())
            .unwrap_or_else(|e| panic!("{what} compiles to MSL: {e:?}"))
            .to_string();
        assert!(
            source.contains(&format!("[[kernel]] void {what}")),
            "{what}"
        );
    }

    #[test]
    fn matvec_kernels_expand_and_compile_to_msl() {
        // The arguments are built on a wgpu client (its properties); any adapter will do.
        let Some(client) = common::any_client("matrix-vector kernels' MSL check") else {
            return;
        };
        let tensor = |dims: [usize; 2]| common::dummy_tensor(&client, &dims);
        // Plane sums, and the shared-memory sums of devices without plane operations.
        let plane_sums = [false, true].map(|shared| PlaneSums {
            lanes: 32,
            planes: 8 / (1 + shared as usize),
            shared,
        });
        for (float, sums) in [FloatKind::F32, FloatKind::F16]
            .into_iter()
            .flat_map(|f| plane_sums.map(|s| (f, s)))
        {
            for (rows, cols, unroll, prefetch) in [
                (1usize, 1usize, 4usize, false),
                (1, 1, 2, true),
                (3, 2, 2, true),
                (16, 1, 4, false),
            ] {
                for (w_vector, block_words) in [(4usize, 32usize), (2, 8), (1, 1), (4, 65), (4, 2)]
                {
                    let (n, k) = (40usize, 4 * 4 * 64);
                    let shape = |pairs: usize, read: RowRead| Fp8Shape {
                        rows,
                        cols,
                        pairs,
                        unroll,
                        w_vectors: k / 4 / w_vector,
                        read,
                        words: Fp8Words {
                            block_words,
                            decode: Fp8Decode::Integer,
                            nan_codes: true,
                        },
                        prefetch,
                    };
                    let what = format!(
                        "{float:?} rows {rows} vector {w_vector} blocks of {block_words} words"
                    );
                    let kernel = matvec_fp8_kernel::create_dummy_kernel(
                        Arc::new(client.properties().clone()),
                        Arc::new(client.target_properties().clone()),
                        CubeCount::Static(1, 1, 1),
                        CubeDim::new_2d(sums.lanes as u32, sums.planes as u32),
                        AddressType::U32,
                        4,
                        w_vector,
                        tensor([rows, k]),
                        tensor([n, k / 4]),
                        tensor([n, (k / 4).div_ceil(block_words)]),
                        tensor([rows, n]),
                        shape(1, RowRead::Plain),
                        sums,
                        ElemType::Float(float),
                    );
                    let source = MslCompiler::default()
                        .compile(kernel.define(), &CompilationOptions::default())
                        .unwrap_or_else(|e| panic!("matvec_fp8_kernel, {what}: {e:?}"))
                        .to_string();
                    assert!(
                        source.contains("[[kernel]] void matvec_fp8_kernel"),
                        "{what}: no entry point"
                    );
                    // The fused forms: the norm before (with and without the activation
                    // after), and the residual add after; one weight layout is enough for
                    // their parts.
                    if (w_vector, block_words) != (4, 32) {
                        continue;
                    }
                    for (pairs, read) in [1usize, 2]
                        .into_iter()
                        .flat_map(|p| [RowRead::Normalised, RowRead::Staged].map(|r| (p, r)))
                    {
                        let kernel = matvec_fp8_norm_kernel::create_dummy_kernel(
                            Arc::new(client.properties().clone()),
                            Arc::new(client.target_properties().clone()),
                            CubeCount::Static(1, 1, 1),
                            CubeDim::new_2d(sums.lanes as u32, sums.planes as u32),
                            AddressType::U32,
                            4,
                            w_vector,
                            tensor([rows, k]),
                            tensor([1, k]),
                            tensor([n, k / 4]),
                            tensor([n, (k / 4).div_ceil(block_words)]),
                            tensor([rows, n / pairs]),
                            1e-5,
                            1.0 / k as f32,
                            shape(pairs, read),
                            sums,
                            ElemType::Float(float),
                        );
                        assert_msl(kernel, "matvec_fp8_norm_kernel");
                    }
                    let kernel = matvec_fp8_add_kernel::create_dummy_kernel(
                        Arc::new(client.properties().clone()),
                        Arc::new(client.target_properties().clone()),
                        CubeCount::Static(1, 1, 1),
                        CubeDim::new_2d(sums.lanes as u32, sums.planes as u32),
                        AddressType::U32,
                        4,
                        w_vector,
                        tensor([rows, k]),
                        tensor([n, k / 4]),
                        tensor([n, (k / 4).div_ceil(block_words)]),
                        tensor([rows, n]),
                        tensor([rows, n]),
                        shape(1, RowRead::Plain),
                        sums,
                        ElemType::Float(float),
                    );
                    assert_msl(kernel, "matvec_fp8_add_kernel");
                }
            }
            for (rows, cols, unroll, vector) in [(1usize, 1usize, 4usize, 4usize), (8, 2, 2, 8)] {
                let (n, k) = (40usize, 256usize);
                let kernel = matvec_kernel::create_dummy_kernel(
                    Arc::new(client.properties().clone()),
                    Arc::new(client.target_properties().clone()),
                    CubeCount::Static(1, 1, 1),
                    CubeDim::new_2d(sums.lanes as u32, sums.planes as u32),
                    AddressType::U32,
                    vector,
                    tensor([rows, k]),
                    tensor([n, k]),
                    tensor([rows, n]),
                    rows,
                    cols,
                    unroll,
                    k / vector,
                    sums,
                    ElemType::Float(float),
                );
                let source = MslCompiler::default()
                    .compile(kernel.define(), &CompilationOptions::default())
                    .expect("matvec_kernel compiles to MSL")
                    .to_string();
                assert!(source.contains("[[kernel]] void matvec_kernel"));
                for (pairs, staged) in [(1usize, false), (1, true), (2, false), (2, true)] {
                    let kernel = matvec_norm_kernel::create_dummy_kernel(
                        Arc::new(client.properties().clone()),
                        Arc::new(client.target_properties().clone()),
                        CubeCount::Static(1, 1, 1),
                        CubeDim::new_2d(sums.lanes as u32, sums.planes as u32),
                        AddressType::U32,
                        vector,
                        tensor([rows, k]),
                        tensor([1, k]),
                        tensor([n, k]),
                        tensor([rows, n / pairs]),
                        1e-5,
                        1.0 / k as f32,
                        rows,
                        cols,
                        pairs,
                        unroll,
                        k / vector,
                        sums,
                        staged,
                        ElemType::Float(float),
                    );
                    assert_msl(kernel, "matvec_norm_kernel");
                }
                let kernel = matvec_add_kernel::create_dummy_kernel(
                    Arc::new(client.properties().clone()),
                    Arc::new(client.target_properties().clone()),
                    CubeCount::Static(1, 1, 1),
                    CubeDim::new_2d(sums.lanes as u32, sums.planes as u32),
                    AddressType::U32,
                    vector,
                    tensor([rows, k]),
                    tensor([n, k]),
                    tensor([rows, n]),
                    tensor([rows, n]),
                    rows,
                    cols,
                    unroll,
                    k / vector,
                    sums,
                    ElemType::Float(float),
                );
                assert_msl(kernel, "matvec_add_kernel");
            }
            let kernel = dequantize_fp8_kernel::create_dummy_kernel(
                Arc::new(client.properties().clone()),
                Arc::new(client.target_properties().clone()),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(256),
                AddressType::U32,
                4,
                tensor([40, 64]),
                tensor([40, 2]),
                tensor([40, 256]),
                32,
                ElemType::Float(float),
            );
            let source = MslCompiler::default()
                .compile(kernel.define(), &CompilationOptions::default())
                .expect("dequantize_fp8_kernel compiles to MSL")
                .to_string();
            assert!(source.contains("[[kernel]] void dequantize_fp8_kernel"));
        }
    }

    /// The staged kernel's tensor-core fragments, loaded from shared vectors, expanded and
    /// compiled to CUDA C++ and SPIR-V against the properties of a device with f16 16 × 16 × 16
    /// tiles (one share writing `out` in f16, several writing f32 partials; the planes over one or
    /// two groups of row tiles), on an f16 weight
    /// and on an fp8 weight (words of codes decoded each way, one or two words a load, a scale a
    /// vector or a word); its arithmetic is checked by the root crate's projection tests where
    /// it runs.
    #[test]
    fn staged_rows_kernel_expands_and_compiles_to_cuda_and_spirv() {
        use super::super::matvec::staged_rows_kernel;
        let Some(client) = common::any_client("staged kernel's CUDA check") else {
            return;
        };
        let (m, n, k) = (40usize, 128usize, 512usize);
        let f16 = ElemType::Float(FloatKind::F16);
        let u32_type = ElemType::UInt(cubecl::ir::UIntKind::U32);
        let fp8 = |decode, block_words, nan_codes| Fp8Words {
            block_words,
            decode,
            nan_codes,
        };
        for (splits, row_planes, out_type, vector, words) in [
            (1usize, 1usize, f16, 4usize, None),
            (2, 2, ElemType::Float(FloatKind::F32), 8, None),
            (1, 1, f16, 8, Some(fp8(Fp8Decode::Halves, 32, true))),
            (
                2,
                1,
                ElemType::Float(FloatKind::F32),
                4,
                Some(fp8(Fp8Decode::Integer, 1, false)),
            ),
            (1, 2, f16, 8, Some(fp8(Fp8Decode::Native, 1, true))),
        ] {
            let (w_type, w_vector, scales) = match words {
                Some(_) => (
                    u32_type,
                    vector / 4,
                    Some(common::dummy_tensor(&client, &[n, k / 128])),
                ),
                None => (f16, vector, None),
            };
            let kernel = staged_rows_kernel::create_dummy_kernel(
                common::properties_with_f16_tiles(&client),
                Arc::new(client.target_properties().clone()),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, 4 * row_planes as u32),
                AddressType::U32,
                vector,
                w_vector,
                common::dummy_tensor(&client, &[m, k / vector]),
                common::dummy_tensor(&client, &[n, k / vector]),
                scales.into(),
                common::dummy_tensor(&client, &[splits * m, n]),
                m.div_ceil(16),
                4,
                row_planes,
                8,
                splits,
                k / vector,
                vector,
                words,
                [f16, out_type, w_type],
            );
            common::assert_tensor_core_kernel_compiles(
                kernel,
                &format!(
                    "staged_rows_kernel, {splits} shares, {row_planes} row groups, \
                     vectors of {vector}, {words:?}"
                ),
            );
        }
    }

    /// The few-rows kernel's tensor-core fragments, expanded and compiled to CUDA C++ (`cmma`
    /// becomes `wmma`) against the properties of a device with f16 16 × 16 × 16 tiles; its
    /// arithmetic is checked by the root crate's projection tests where it runs.
    #[test]
    fn few_rows_kernel_expands_and_compiles_to_cuda_and_spirv() {
        use super::super::matvec::few_rows_kernel;
        let Some(client) = common::any_client("few-rows kernel's CUDA check") else {
            return;
        };
        let (m, n, k) = (24usize, 64usize, 256usize);
        let kernel = few_rows_kernel::create_dummy_kernel(
            common::properties_with_f16_tiles(&client),
            Arc::new(client.target_properties().clone()),
            CubeCount::Static(1, 1, 1),
            CubeDim::new_2d(32, 8),
            AddressType::U32,
            common::dummy_tensor(&client, &[m, k]),
            common::dummy_tensor(&client, &[n, k]),
            common::dummy_tensor(&client, &[m, n]),
            2,
            2,
            8,
            ElemType::Float(FloatKind::F16),
        );
        common::assert_tensor_core_kernel_compiles(kernel, "few_rows_kernel");
    }
}
