//! Attention of one query row over the token-slot pool with the heads of a GQA group as the rows
//! of warp-level tensor-core products (`mma.sync` m16n8k16, f16 × f16 → f32, through CubeCL's
//! `MmaDefinition`): the decode kernel of f16 queries through CubeCL's CUDA runtime.
//!
//! One cube of one plane (32 lanes) owns one (query row, kv head, chunk of the row's visible
//! keys). The group's heads are the product's rows (at most 16; rows past the group are zeros),
//! and the plane walks its keys in tiles of 16:
//! 1. scores `S = Q · Kᵀ`: two 16 × 8 products (keys 0–7 and 8–15 of the tile) over the head in
//!    steps of 16 elements; lane `(g, t) = (lane / 4, lane % 4)` loads key `g` (and `g + 8`)
//!    elements `t · D/4 …` of its row — a contiguous quarter of the row — and the query's
//!    fragments take the same elements, so the dot products pair the right elements whatever
//!    order the fragment slots name them in;
//! 2. online softmax: each lane holds two keys of each score tile for rows `g` and `g + 8`; the
//!    row's maximum is the plane's (two shuffles), its running sum a lane's share, added up at
//!    the end;
//! 3. values `O += P · V`: the weights (two f16 parts each, their rounding and the rest, so the
//!    sum keeps f32's precision) are the scores' accumulators as the next product's first operand
//!    (the register layouts agree), and `D / 8` pairs of products of 16 keys × 8 elements, lane
//!    `(g, t)` loading keys `2t, 2t + 1, 2t + 8, 2t + 9` of the tile, elements `g · D/8 …` (a
//!    contiguous eighth of the row): column `n` of output tile `j` is element `n · D/8 + j`.
//!
//! fp8 pools are decoded as f16 halves (each word of four codes into two f16 pairs, values
//! `2^-8` below the codes' own, NaN codes NaN: `common::fp8`), or with `native` by the device's
//! conversion of each pair of codes (CubeCL's fp8 type: CUDA's C++ backend on sm_89 and later,
//! the codes' own values), exact in f16 either way, with no widening to f32; the keys' factor
//! and scale multiply the scores, the values' the output. The fragments'
//! register layout is CUDA's (`mma.sync`): the launch takes this kernel through CubeCL's CUDA
//! runtime only. A key whose pool row is outside the pool is masked, never read; the split into
//! chunks and its merge are the other kernels' ([`super::split`]).

use super::plane::pool_row;
use super::split::cube_work;
use crate::common::fp8::{converted_pair, halves_pairs};
use crate::common::fragment::half_pair as pair;
use cubecl::cmma::MmaDefinition;
use cubecl::prelude::*;
use half::f16;

/// Keys a tile: two score products of 8 keys, one value product of 16.
pub(crate) const HEAD_TILE_KEYS: usize = 16;

/// The pool rows lane `(gl, tl)` reads in the key tile at `base` (masked past `hi` or outside the
/// pool: -1): `kr` of keys `gl` and `gl + 8`, `vr` of keys `2tl`, `2tl + 1`, `2tl + 8`, `2tl + 9`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn tile_rows(
    kv_indices: &Tensor<i32>,
    first: usize,
    base: usize,
    hi: usize,
    pool_size: usize,
    gl: usize,
    tl: usize,
    kr: &mut Array<i32>,
    vr: &mut Array<i32>,
) {
    kr[0] = pool_row(kv_indices, first, base + gl, hi, pool_size);
    kr[1] = pool_row(kv_indices, first, base + gl + 8, hi, pool_size);
    #[unroll]
    for i in 0..4usize {
        let key = comptime!((i % 2) + 8 * (i / 2));
        vr[i] = pool_row(kv_indices, first, base + 2 * tl + key, hi, pool_size);
    }
}

/// The keys' quarters (rows `kr`, vectors `kq…` of each) and the values' eighths (rows `vr`,
/// vectors `ve…`) of kv head `kv` into `kw` and `vw`; a masked row (-1) loads zeros.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_tile<P: Numeric, M: Size>(
    k_pool: &Tensor<Vector<P, M>>,
    v_pool: &Tensor<Vector<P, M>>,
    num_kv_heads: usize,
    kv: usize,
    kq: usize,
    ve: usize,
    kr: &Array<i32>,
    vr: &Array<i32>,
    kw: &mut Array<Vector<P, M>>,
    vw: &mut Array<Vector<P, M>>,
    #[comptime] quarter: usize,
    #[comptime] eighth: usize,
    #[comptime] row_vecs: usize,
) {
    load_rows(
        k_pool,
        num_kv_heads,
        kv,
        kq,
        kr,
        kw,
        2usize,
        quarter,
        row_vecs,
    );
    load_rows(
        v_pool,
        num_kv_heads,
        kv,
        ve,
        vr,
        vw,
        4usize,
        eighth,
        row_vecs,
    );
}

/// Vectors `at…at + count` of kv head `kv` in each of the `n` pool `rows` into `out` (row `r`'s
/// at `r · count`); a masked row (-1) loads zeros.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_rows<P: Numeric, M: Size>(
    pool: &Tensor<Vector<P, M>>,
    num_kv_heads: usize,
    kv: usize,
    at: usize,
    rows: &Array<i32>,
    out: &mut Array<Vector<P, M>>,
    #[comptime] n: usize,
    #[comptime] count: usize,
    #[comptime] row_vecs: usize,
) {
    #[unroll]
    for r in 0..n {
        let row = rows[r];
        #[unroll]
        for i in 0..count {
            let mut w = Vector::<P, M>::new(P::from_int(0));
            if row >= 0 {
                w = pool[(usize::cast_from(row) * num_kv_heads + kv) * row_vecs + at + i];
            }
            out[r * count + i] = w;
        }
    }
}

/// Element `e` of a float pool's vector `v` (`P` = f16) as f16.
#[cube]
fn half_at<P: Numeric, M: Size>(v: Vector<P, M>, #[comptime] e: usize) -> f16 {
    f16::cast_from(v.extract(e))
}

/// The attention of one (query row, kv head, chunk) per cube of one plane (see the module doc).
/// Shapes as [`attention_plane_kernel`](fn@super::plane::attention_plane_kernel): `q [T, Hq, D]`
/// f16 as vectors of four, pools `[P, Hkv, D]` (f16 pools as vectors of `M` = 8 halves; fp8
/// pools as vectors of `M` = 4 words), `kv_indices [nnz]`, `ranges [T, 2]`; outputs as vectors of
/// four, direct or split. `d` is 64 or 128; `group` (q heads per kv head) at most 16.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_heads_kernel<P: Numeric, M: Size>(
    q: &Tensor<Vector<f16, Const<4>>>,
    k_pool: &Tensor<Vector<P, M>>,
    v_pool: &Tensor<Vector<P, M>>,
    kv_indices: &Tensor<i32>,
    ranges: &Tensor<i32>,
    out: &mut Tensor<Vector<f16, Const<4>>>,
    lse: &mut Tensor<f32>,
    part_out: &mut Tensor<Vector<f32, Const<4>>>,
    part_lse: &mut Tensor<f32>,
    sm_scale: f32,
    soft_cap: f32,
    neg_inf: f32,
    chunk_keys: u32,
    num_chunks: u32,
    k_scale: f32,
    v_scale: f32,
    #[comptime] group: usize,
    #[comptime] d: usize,
    #[comptime] split: bool,
    #[comptime] capped: bool,
    #[comptime] fp8: bool,
    #[comptime] native: bool,
    #[comptime] lean: bool,
    #[define(P)] _pool: ElemType,
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let pool_size = k_pool.shape(0);
    let num_kv_heads = k_pool.shape(1);
    let (tok, kv, head0, chunk) = cube_work(num_tokens, num_kv_heads, 1usize, group);
    if chunk >= num_chunks as usize {
        terminate!();
    }
    let lane = UNIT_POS_PLANE as usize;
    let gl = lane / 4;
    let tl = lane % 4;
    let two_rows = comptime!(group > 8);
    // Whether the output accumulators of rows 8–15 are kept: with `lean` only where the group has
    // such rows (else the products' rows past the group start from zeros each tile and are
    // dropped, 32 registers a unit fewer at heads of 128).
    let rows_past_8 = comptime!(two_rows || !lean);
    let steps = comptime!(d / 16);
    let out_tiles = comptime!(d / 8);
    // Pool vectors a row, and the vectors of a lane's quarter (keys) and eighth (values).
    let mv = M::value();
    let row_vecs = comptime!(if fp8 { d / 4 / mv } else { d / mv });
    let quarter = comptime!(row_vecs / 4);
    let eighth = comptime!(row_vecs / 8);
    let first = usize::cast_from(ranges[2 * tok]);
    let count = usize::cast_from(ranges[2 * tok + 1]);
    let lo = chunk * (chunk_keys as usize);
    let hi = (lo + chunk_keys as usize).min(count);
    // f16 halves hold the codes' values times 2^-8; the device's conversion, the values.
    let halves = comptime!(fp8 && !native);
    let factor = comptime!(if halves { 256.0f32 } else { 1.0f32 });
    let score_scale = sm_scale * k_scale * f32::new(factor);

    // The query's fragments, step `c` in slots `4c..4c + 4`: rows `gl` and `gl + 8` (zeros past
    // the group), elements `tl · D/4 + 4c …` in the order the keys' fragments take them.
    let zero2 = Vector::<f16, Const<2>>::new(f16::new(0.0));
    let mut qf = Array::<Vector<f16, Const<2>>>::new(comptime!(4 * steps));
    let rows_held = comptime!(if two_rows { 2usize } else { 1usize });
    #[unroll]
    for c in 0..steps {
        qf[4 * c + 1] = zero2;
        qf[4 * c + 3] = zero2;
        #[unroll]
        for r in 0..rows_held {
            let row = gl + comptime!(r * 8);
            let mut x = Vector::<f16, Const<4>>::new(f16::new(0.0));
            if row < group {
                x = q[((tok * num_qo_heads + head0 + row) * d) / 4 + tl * comptime!(d / 16) + c];
            }
            // Keys decoded as f16 halves pair elements (0, 2) and (1, 3); from f16 pools or the
            // device's conversion (0, 1), (2, 3).
            if comptime!(halves) {
                qf[4 * c + r] = pair(x.extract(0usize), x.extract(2usize));
                qf[4 * c + 2 + r] = pair(x.extract(1usize), x.extract(3usize));
            } else {
                qf[4 * c + r] = pair(x.extract(0usize), x.extract(1usize));
                qf[4 * c + 2 + r] = pair(x.extract(2usize), x.extract(3usize));
            }
        }
    }

    let def = MmaDefinition::<f16, f16, f32>::new(16usize, 8usize, 16usize);
    // Running output: tile `j`'s accumulator in slots `2j` (row `gl`) and `2j + 1` (row `gl + 8`).
    let mut o = Array::<Vector<f32, Const<2>>>::new(comptime!(2 * out_tiles));
    #[unroll]
    for a in 0..comptime!(2 * out_tiles) {
        o[a] = Vector::new(f32::new(0.0));
    }
    // Per row (`gl`, `gl + 8`): running maximum (the plane's) and this lane's share of the sum.
    let mut m = Array::<f32>::new(2usize);
    let mut l = Array::<f32>::new(2usize);
    #[unroll]
    for r in 0..2usize {
        m[r] = neg_inf;
        l[r] = f32::new(0.0);
    }

    let mut base = lo;
    // Pool rows of the tile at `base`: keys `gl`, `gl + 8` (scores), `2tl, 2tl + 1, 2tl + 8,
    // 2tl + 9` (values and this lane's scores); each iteration loads the next tile's while its
    // own keys and values are on their way.
    let mut kr = Array::<i32>::new(2usize);
    let mut vr = Array::<i32>::new(4usize);
    tile_rows(
        kv_indices, first, base, hi, pool_size, gl, tl, &mut kr, &mut vr,
    );
    // Uniform bounds: every lane runs every iteration (the shuffles and products are the plane's).
    while base < hi {
        let mut kw = Array::<Vector<P, M>>::new(comptime!(2 * quarter));
        let mut vw = Array::<Vector<P, M>>::new(comptime!(4 * eighth));
        load_tile(
            k_pool,
            v_pool,
            num_kv_heads,
            kv,
            tl * quarter,
            gl * eighth,
            &kr,
            &vr,
            &mut kw,
            &mut vw,
            quarter,
            eighth,
            row_vecs,
        );
        let mut kr_next = Array::<i32>::new(2usize);
        let mut vr_next = Array::<i32>::new(4usize);
        tile_rows(
            kv_indices,
            first,
            base + HEAD_TILE_KEYS,
            hi,
            pool_size,
            gl,
            tl,
            &mut kr_next,
            &mut vr_next,
        );

        // Scores: tile `s` (keys `8s..8s + 8`), its accumulator rows `gl` and `gl + 8`, keys
        // `2tl` and `2tl + 1`.
        let mut sc = Array::<Vector<f32, Const<2>>>::new(4usize);
        #[unroll]
        for s in 0..2usize {
            let mut acc = Array::<Vector<f32, Const<2>>>::new(2usize);
            acc[0] = Vector::new(f32::new(0.0));
            acc[1] = Vector::new(f32::new(0.0));
            #[unroll]
            for c in 0..steps {
                let mut b = Array::<Vector<f16, Const<2>>>::new(2usize);
                if comptime!(fp8) {
                    // Step `c` of the lane's quarter: word `c` (vector `c / M`, word `c % M`).
                    let word = u32::cast_from(
                        kw[comptime!(s * quarter + c / mv)].extract(comptime!(c % mv)),
                    );
                    if comptime!(native) {
                        b[0] = converted_pair(word);
                        b[1] = converted_pair(word >> 16);
                    } else {
                        let (even, odd) = halves_pairs(word, true);
                        b[0] = even;
                        b[1] = odd;
                    }
                } else {
                    // Elements `4c..4c + 4` of the quarter: vector `4c / M`.
                    let v = kw[comptime!(s * quarter + 4 * c / mv)];
                    let e = comptime!((4 * c) % mv);
                    b[0] = pair(half_at::<P, M>(v, e), half_at::<P, M>(v, comptime!(e + 1)));
                    b[1] = pair(
                        half_at::<P, M>(v, comptime!(e + 2)),
                        half_at::<P, M>(v, comptime!(e + 3)),
                    );
                }
                let mut a = Array::<Vector<f16, Const<2>>>::new(4usize);
                #[unroll]
                for i in 0..4usize {
                    a[i] = qf[4 * c + i];
                }
                let next = def.execute(&a, &b, &acc);
                acc[0] = next[0];
                acc[1] = next[1];
            }
            sc[2 * s] = acc[0];
            sc[2 * s + 1] = acc[1];
        }

        // Online softmax per row: scale, cap, mask; the plane's tile maximum; the weights.
        let mut p = Array::<Vector<f32, Const<2>>>::new(4usize);
        let mut rescale = Array::<f32>::new(2usize);
        rescale[1] = f32::new(1.0);
        p[1] = Vector::new(f32::new(0.0));
        p[3] = Vector::new(f32::new(0.0));
        // Rows past 8 only where the group has them.
        #[unroll]
        for r in 0..rows_held {
            let mut top = m[r];
            #[unroll]
            for s in 0..2usize {
                #[unroll]
                for i in 0..2usize {
                    let mut x = sc[2 * s + r].extract(i) * score_scale;
                    if capped {
                        x = soft_cap * f32::tanh(x / soft_cap);
                    }
                    let x = select(vr[comptime!(2 * s + i)] >= 0, x, neg_inf);
                    let mut v = sc[2 * s + r];
                    v.insert(i, x);
                    sc[2 * s + r] = v;
                    top = select(x > top, x, top);
                }
            }
            let other = plane_shuffle_xor(top, 1u32);
            top = select(other > top, other, top);
            let other = plane_shuffle_xor(top, 2u32);
            top = select(other > top, other, top);
            rescale[r] = select(top == neg_inf, f32::new(1.0), f32::exp(m[r] - top));
            m[r] = top;
            let mut sum = l[r] * rescale[r];
            #[unroll]
            for s in 0..2usize {
                let mut w = Vector::<f32, Const<2>>::new(f32::new(0.0));
                #[unroll]
                for i in 0..2usize {
                    let x = sc[2 * s + r].extract(i);
                    let e = select(x == neg_inf, f32::new(0.0), f32::exp(x - top));
                    w.insert(i, e);
                    sum += e;
                }
                p[2 * s + r] = w;
            }
            l[r] = sum;
        }
        // The weights as the values' first operand: rows `gl`, `gl + 8`; keys `2tl…` of the
        // first score tile, then of the second. Each weight is the sum of two f16 parts (`pa` its
        // rounding, `pl` the rest), one product each, so the weighted sum keeps f32's precision.
        let mut pa = Array::<Vector<f16, Const<2>>>::new(4usize);
        let mut pl = Array::<Vector<f16, Const<2>>>::new(4usize);
        #[unroll]
        for i in 0..4usize {
            let high = Vector::<f16, Const<2>>::cast_from(p[i]);
            pa[i] = high;
            pl[i] =
                Vector::<f16, Const<2>>::cast_from(p[i] - Vector::<f32, Const<2>>::cast_from(high));
        }
        if !two_rows {
            pa[1] = zero2;
            pa[3] = zero2;
            pl[1] = zero2;
            pl[3] = zero2;
        }
        // The running outputs rescaled where a row's maximum moved (a factor of exactly 1
        // elsewhere: skipped when no row of the plane moved, the same bits).
        if !plane_all(rescale[0] == f32::new(1.0) && rescale[1] == f32::new(1.0)) {
            #[unroll]
            for j in 0..out_tiles {
                o[2 * j] *= Vector::new(rescale[0]);
                if comptime!(rows_past_8) {
                    o[2 * j + 1] *= Vector::new(rescale[1]);
                }
            }
        }
        // Values: output tile `j` is element `j` of each lane's eighth.
        #[unroll]
        for j in 0..out_tiles {
            let mut b = Array::<Vector<f16, Const<2>>>::new(2usize);
            if comptime!(fp8) {
                // Byte `j % 4` of word `j / 4` of keys (2tl, 2tl + 1) and (2tl + 8, 2tl + 9).
                let (vec_at, w) = comptime!((j / 4 / mv, (j / 4) % mv));
                #[unroll]
                for h in 0..2usize {
                    let wa = u32::cast_from(vw[comptime!(2 * h * eighth + vec_at)].extract(w));
                    let wb =
                        u32::cast_from(vw[comptime!((2 * h + 1) * eighth + vec_at)].extract(w));
                    if comptime!(native) {
                        // Byte `j % 4` of each key's word: the pair (a, b) of one element.
                        let shift = comptime!(8 * (j % 4) as u32);
                        let x = ((wa >> shift) & 0xFF) | (((wb >> shift) & 0xFF) << 8);
                        b[h] = converted_pair(x);
                    } else {
                        // Bytes (a0, a1, b0, b1) or (a2, a3, b2, b3): pairs (a, b) of one
                        // element.
                        let mut x = (wa >> 16) | (wb & 0xFFFF_0000);
                        if comptime!(j % 4 < 2) {
                            x = (wa & 0xFFFF) | (wb << 16);
                        }
                        let (even, odd) = halves_pairs(x, true);
                        b[h] = odd;
                        if comptime!(j % 2 == 0) {
                            b[h] = even;
                        }
                    }
                }
            } else {
                let (vec_at, e) = comptime!((j / mv, j % mv));
                #[unroll]
                for h in 0..2usize {
                    b[h] = pair(
                        half_at::<P, M>(vw[comptime!(2 * h * eighth + vec_at)], e),
                        half_at::<P, M>(vw[comptime!((2 * h + 1) * eighth + vec_at)], e),
                    );
                }
            }
            let mut acc = Array::<Vector<f32, Const<2>>>::new(2usize);
            acc[0] = o[2 * j];
            acc[1] = Vector::new(f32::new(0.0));
            if comptime!(rows_past_8) {
                acc[1] = o[2 * j + 1];
            }
            let high = def.execute(&pa, &b, &acc);
            let next = def.execute(&pl, &b, &high);
            o[2 * j] = next[0];
            if comptime!(rows_past_8) {
                o[2 * j + 1] = next[1];
            }
        }
        #[unroll]
        for i in 0..2usize {
            kr[i] = kr_next[i];
        }
        #[unroll]
        for i in 0..4usize {
            vr[i] = vr_next[i];
        }
        base += comptime!(HEAD_TILE_KEYS);
    }

    // Each row's sum over its four lanes; the normalised output, `v`'s factor and scale.
    #[unroll]
    for r in 0..rows_held {
        let mut total = l[r];
        total += plane_shuffle_xor(total, 1u32);
        total += plane_shuffle_xor(total, 2u32);
        let row = gl + comptime!(r * 8);
        if row < group {
            let seen = total > 0.0;
            let head = tok * num_qo_heads + head0 + row;
            let norm = select(
                seen,
                f32::new(factor) * v_scale / select(seen, total, f32::new(1.0)),
                f32::new(0.0),
            );
            // Lane `tl` holds columns `2tl` and `2tl + 1` of every tile: elements
            // `(2tl + i) · D/8 + j`, as vectors of four.
            #[unroll]
            for i in 0..2usize {
                #[unroll]
                for vq in 0..comptime!(out_tiles / 4) {
                    let mut value = Vector::<f32, Const<4>>::new(f32::new(0.0));
                    #[unroll]
                    for e in 0..4usize {
                        value.insert(e, o[comptime!(2 * (4 * vq + e) + r)].extract(i) * norm);
                    }
                    let at = (head * d + (2 * tl + i) * out_tiles) / 4 + vq;
                    if split {
                        part_out[(chunk * num_tokens * num_qo_heads * d) / 4 + at] = value;
                    } else {
                        out[at] = Vector::cast_from(value);
                    }
                }
            }
            if tl == 0 {
                let log_sum = select(
                    seen,
                    m[r] + f32::ln(select(seen, total, f32::new(1.0))),
                    neg_inf,
                );
                if split {
                    part_lse[chunk * num_tokens * num_qo_heads + head] = log_sum;
                } else {
                    lse[head] = log_sum;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attention_heads_kernel;
    use crate::test_common as common;
    use cubecl::ir::{AddressType, ElemType, FloatKind, UIntKind};
    use cubecl::prelude::*;

    /// The kernel expanded against CUDA's manual-`mma` register layout and a device listing
    /// f16 `mma.sync` 16 × 8 × 16, and translated to CUDA C++ (no CUDA compiler runs here): f16
    /// and fp8 pools, heads of 64 and 128, groups of 4 and 16, direct and split, capped. Its
    /// arithmetic is checked by the root crate's attention tests through CUDA, where it is the
    /// normal launch of f16 decode (and `PoolAttentionConfig::head_tiles` forces it).
    #[test]
    fn attention_heads_kernel_expands_and_compiles_to_cuda() {
        let Some(client) = common::any_client("head-tile attention's CUDA check") else {
            return;
        };
        let (properties, target) = common::warp_mma_properties(&client);
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        for (fp8, native, d, group, split, capped, lean) in [
            (false, false, 128usize, 4usize, false, false, false),
            (true, false, 128, 4, true, false, true),
            (true, true, 128, 4, false, false, true),
            (false, false, 128, 4, false, false, true),
            (true, false, 64, 16, false, true, true),
            (true, true, 64, 16, true, false, false),
            (false, false, 64, 16, true, false, false),
        ] {
            let (pool_vector, pool_elem) = match fp8 {
                true => ((d / 32).min(4), ElemType::UInt(UIntKind::U32)),
                false => (8, ElemType::Float(FloatKind::F16)),
            };
            let row = if fp8 { d / 4 / pool_vector } else { d / 8 };
            let kernel = attention_heads_kernel::create_dummy_kernel(
                properties.clone(),
                target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(32),
                AddressType::U32,
                pool_vector,
                tensor(&[3, 2 * group, d / 4]),
                tensor(&[10, 2, row]),
                tensor(&[10, 2, row]),
                tensor(&[6]),
                tensor(&[3, 2]),
                tensor(&[3, 2 * group, d / 4]),
                tensor(&[3, 2 * group]),
                tensor(&[2, 3, 2 * group, d / 4]),
                tensor(&[2, 3, 2 * group]),
                0.1,
                30.0,
                f32::NEG_INFINITY,
                16,
                2,
                1.0,
                1.0,
                group,
                d,
                split,
                capped,
                fp8,
                native,
                lean,
                pool_elem,
            );
            common::assert_warp_mma_kernel_compiles(
                kernel,
                &format!(
                    "fp8 {fp8} (native {native}), head {d}, group {group}, split {split}, lean {lean}"
                ),
            );
        }
    }
}
