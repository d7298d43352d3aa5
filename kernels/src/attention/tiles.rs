//! Attention over the token-slot pool in query tiles (flash-attention style), for prefill: many
//! query rows of one sequence share each key and value tile, so the tile's products are matrix
//! products — on tensor cores (CubeCL's `cmma`, 16 × 16 × 16, f32 accumulation) where the device
//! has them.
//!
//! One cube owns one (tile of query rows, block of `heads` q heads of one kv head). Its `planes`
//! planes of [`LANES`] units each own 16 (row, head) pairs: plane `p` takes head `p % heads` of
//! rows `16 · (p / heads)` to `16 · (p / heads) + 15` of the tile, so the heads of a GQA group
//! share the cube's key and value tiles. The cube walks the union of its rows' key ranges (entries
//! of `kv_indices`) in tiles of `block_keys` keys:
//! 1. the tile's pool rows and their key and value rows, staged in shared memory in `F` (fp8
//!    pools decoded; a row outside the pool, or past the range, as zeros and masked);
//! 2. scores: each plane's `16 × block_keys` product of its queries and the keys, f32;
//! 3. online softmax: two units a row, each every other key of the tile — scale, soft cap, the row's
//!    own range as the mask (causal, sliding window, the sequence's keys), the running maximum
//!    moved only when the tile's passes it by a margin (`RESCALE_MARGIN`), the weights rounded
//!    to `F`, the running sums rescaled;
//! 4. values: each plane's `16 × head_dim` product of its weights and the value tile, added to
//!    its running output.
//!
//! With `tensor_cores` the two products are `cmma` tiles: the queries stay in registers as
//! fragments, the running output in accumulator fragments, rescaled through shared memory only
//! in the tiles where some row's maximum moved. Without it the same tiles are multiplied by the
//! units in f32 (each unit owning the elements the staged accumulators would give it): the same
//! staging, masks and rounding, so the kernel's logic runs and is tested on devices without
//! tensor cores. Every unit of a cube reaches every `sync_cube`: the loop bounds and the rescale
//! decision are the cube's, not a unit's.
//!
//! Rows of one tile may belong to different sequences (the kernel masks each row with its own
//! range): correct, but the cube then walks the union of their ranges, so the normal launch
//! uses this kernel only when every sequence with queries has a tile's worth of rows or more.
//! A key in the walk that a row does not see still meets that row's zero weight in the values'
//! product: a non-finite value there (never written by `rope_pool_fused`, whose rows the walk
//! covers in the engine's steps) would reach the row as NaN, where the other kernels never read
//! it (CONTRACT, `pool_attention`, Math).

use crate::common::fp8::{Fp8Decode, load_pool};
pub(crate) use crate::common::fragment::TILE;
use crate::common::fragment::{load_fragment, zero_accumulator};
use cubecl::prelude::*;

/// Units per plane the kernel is written for (a 16 × 16 tile's fragments spread over 32 lanes).
pub(crate) const LANES: usize = 32;

/// Elements of one staged `TILE × TILE` accumulator.
const TILE_ELEMS: usize = TILE * TILE;

/// How far past a row's running maximum a tile's maximum may go before the maximum moves and
/// the running output is rescaled (natural-log units): the weights `exp(s - m)` stay below
/// `e^8 ≈ 2981`, well inside f16, and the normalised output is the same; the shared-memory
/// rescale of the accumulator fragments runs in few tiles instead of whenever a maximum grows.
const RESCALE_MARGIN: f32 = 8.0;

/// Padding of a staged key, value or query row (elements): rows `head_dim + 8` apart, so any 8
/// consecutive rows of a fragment's load start in different shared-memory banks (a head of 128
/// f16 is 256 bytes, a whole number of bank rounds: unpadded, every row starts in the same bank);
/// a multiple of 8 keeps each row 16-byte aligned, as tensor-core loads require.
pub(crate) const KV_PAD: usize = 8;
/// Padding of a score row (f32 elements; a multiple of 4 keeps rows 16-byte aligned).
pub(crate) const S_PAD: usize = 4;
/// Padding of a weight row (`F` elements).
pub(crate) const P_PAD: usize = 8;

/// The pool row of entry `e` of `kv_indices`, or -1 when `e` is at or past `end` or the row is
/// outside the pool (masked, never read).
#[cube]
pub(super) fn entry_row(kv_indices: &Tensor<i32>, e: usize, end: usize, pool_size: usize) -> i32 {
    let mut row = i32::new(-1);
    if e < end {
        let r = kv_indices[e];
        if r >= 0 && usize::cast_from(r) < pool_size {
            row = r;
        }
    }
    row
}

/// The attention of one (tile of query rows, head block) per cube (see the module doc). Shapes:
/// `q [T, Hq, D]` and `out [T, Hq, D]` (`F`, as scalars), pools `[P, Hkv, D]` (as vectors of `M`:
/// float vectors of `N = M` elements, or fp8 words, `M = 1`, `N = 4`), `kv_indices [nnz]` i32,
/// `ranges [T, 2]` i32 (first entry in `kv_indices`, visible keys), `lse [T, Hq]` f32. The cube is
/// `LANES × planes` units; `planes` is a multiple of `heads`, `head_blocks` blocks of `heads` q
/// heads make a kv head's group, `head_dim` and `block_keys` are multiples of 16, `row_vectors` is
/// `head_dim / N`, and with `tensor_cores` `16 · planes ≤ 2 · block_keys` (the queries are staged
/// where the key and value tiles go). `neg_inf` is `f32::NEG_INFINITY`, passed at run time (WGSL
/// has no infinity literal).
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_tiles_kernel<F: Float, P: Numeric, N: Size, M: Size>(
    q: &Tensor<F>,
    k_pool: &Tensor<Vector<P, M>>,
    v_pool: &Tensor<Vector<P, M>>,
    kv_indices: &Tensor<i32>,
    ranges: &Tensor<i32>,
    out: &mut Tensor<F>,
    lse: &mut Tensor<f32>,
    sm_scale: f32,
    soft_cap: f32,
    neg_inf: f32,
    head_blocks: u32,
    k_scale: f32,
    v_scale: f32,
    #[comptime] heads: usize,
    #[comptime] planes: usize,
    #[comptime] block_keys: usize,
    #[comptime] head_dim: usize,
    #[comptime] row_vectors: usize,
    #[comptime] tensor_cores: bool,
    #[comptime] capped: bool,
    #[comptime] fp8: bool,
    #[comptime] fp8_decode: Fp8Decode,
    #[define(F, P)] _dtypes: [ElemType; 2],
) {
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let pool_size = k_pool.shape(0);
    let num_kv_heads = k_pool.shape(1);
    let tile_rows = comptime!(planes / heads * TILE);
    let tiles = num_tokens.div_ceil(tile_rows);
    // The whole cube leaves together: the syncs below stay uniform.
    if CUBE_POS >= tiles * num_kv_heads * head_blocks as usize {
        terminate!();
    }
    // The last row tiles (the most keys, causal) first.
    let tile = tiles - 1 - CUBE_POS % tiles;
    let block = CUBE_POS / tiles;
    let g = block / head_blocks as usize;
    let lane = UNIT_POS_X as usize;
    let plane = UNIT_POS_Y as usize;
    let u = plane * LANES + lane;
    let units = comptime!(planes * LANES);
    let head = block * heads + plane % heads;
    let t0 = tile * tile_rows + plane / heads * TILE;
    // Two units a row: this unit's row of the plane and its keys of each key tile (every other
    // one, from `half`).
    let i = lane / 2;
    let half = lane % 2;
    let t = t0 + i;
    let mut lo = 0usize;
    let mut hi = 0usize;
    if t < num_tokens {
        lo = usize::cast_from(ranges[2 * t]);
        hi = lo + usize::cast_from(ranges[2 * t + 1]);
    }

    // Padded rows (see `KV_PAD`): the staged key, value and query rows, the score rows, the
    // weight rows.
    let kv_row = comptime!(head_dim + KV_PAD);
    let s_row = comptime!(block_keys + S_PAD);
    let p_row = comptime!(block_keys + P_PAD);
    // The key and value tiles are stored as the pool's vectors of `N` (`nv` elements).
    let nv = comptime!(head_dim / row_vectors);
    let kv_rowv = comptime!(kv_row / nv);
    let kv_elemsv = comptime!(block_keys * kv_rowv);
    let tile_vectors = comptime!(TILE / nv);
    let score_elems = comptime!(TILE * s_row);
    let weight_elems = comptime!(TILE * p_row);
    let half_keys = comptime!(block_keys / 2);
    let key_tiles = comptime!(block_keys / TILE);
    let d_tiles = comptime!(head_dim / TILE);
    // Key tile, then value tile (at the start, the planes' queries).
    // (Tensor-core fragments load from and store to these: 128-byte aligned. The fragments are
    // loaded from vectors, with their alignment.)
    let mut kv_s = Shared::<[Vector<F, N>]>::new_aligned_slice(comptime!(2 * kv_elemsv), 128usize);
    // Per plane: the scores (or a staged accumulator), and the weights.
    let mut s_s = Shared::<[f32]>::new_aligned_slice(comptime!(planes * score_elems), 128usize);
    let mut p_s = Shared::<[F]>::new_aligned_slice(comptime!(planes * weight_elems), 128usize);
    let mut rows_s = Shared::<[i32]>::new_slice(block_keys);
    // The units' range bounds, then each pair's partial maxima and sums.
    let mut lo_s = Shared::<[u32]>::new_slice(units);
    let mut hi_s = Shared::<[u32]>::new_slice(units);
    let mut pair_s = Shared::<[f32]>::new_slice(units);
    // Per plane and row: the tile's rescale factor, at the end the sum of weights.
    let mut alpha_s = Shared::<[f32]>::new_slice(comptime!(planes * TILE));
    let mut flag_s = Shared::<[u32]>::new_slice(1usize);

    // The cube's entries of `kv_indices`: the union of its rows' ranges.
    // (A row that sees no key widens nothing.)
    lo_s[u] = select(hi > lo, u32::cast_from(lo), u32::MAX);
    hi_s[u] = select(hi > lo, u32::cast_from(hi), 0);
    sync_cube();
    let mut first = lo_s[0];
    let mut last = hi_s[0];
    for x in 1..units {
        first = first.min(lo_s[x]);
        last = last.max(hi_s[x]);
    }
    let s_base = plane * score_elems;
    let p_base = plane * weight_elems;

    // The queries as fragments (tensor cores), the running output: accumulator fragments, or
    // this unit's elements of them (row `i`, columns `8 · half` to `8 · half + 7` of each
    // 16-column tile).
    let mut q_frags = Sequence::<cmma::Matrix<F>>::new();
    let mut o_accs = Sequence::<cmma::Matrix<f32>>::new();
    let mut o = Array::<f32>::new(comptime!(if tensor_cores { 1 } else { head_dim / 2 }));
    if comptime!(tensor_cores) {
        let q_base = plane * TILE * kv_rowv;
        for e in range_stepped(lane, comptime!(TILE * row_vectors), LANES) {
            let tt = t0 + e / row_vectors;
            let mut x = Vector::<F, N>::new(F::new(0.0));
            if tt < num_tokens {
                let q0 = (tt * num_qo_heads + head) * head_dim + e % row_vectors * nv;
                #[unroll]
                for c in 0..nv {
                    x.insert(c, q[q0 + c]);
                }
            }
            kv_s[q_base + e / row_vectors * kv_rowv + e % row_vectors] = x;
        }
        sync_cube();
        #[unroll]
        for kc in 0..d_tiles {
            let at = q_base + kc * tile_vectors;
            q_frags.push(load_fragment::<F, Vector<F, N>>(
                cmma::MatrixIdent::A,
                cmma::MatrixLayout::RowMajor,
                kv_s.slice(at, at + (TILE - 1) * kv_rowv + tile_vectors),
                kv_row as u32,
            ));
            o_accs.push(zero_accumulator());
        }
        sync_cube();
    } else {
        #[unroll]
        for x in 0..comptime!(head_dim / 2) {
            o[x] = f32::new(0.0);
        }
    }

    // This unit's row: its running maximum and the running sum of its keys' weights.
    let mut m = neg_inf;
    let mut l = f32::new(0.0);
    let end = last as usize;
    let mut base = first as usize;
    // The first tile's pool rows (each tile stages the next one's).
    if u < block_keys {
        rows_s[u] = entry_row(kv_indices, first as usize + u, end, pool_size);
    }
    sync_cube();
    while base < end {
        // 1. The tile's key rows and value rows.
        if u == 0 {
            flag_s[0] = 0;
        }
        // Every load of the unit first (unrolled: their latencies overlap), then the stores.
        let total = comptime!(block_keys * row_vectors);
        let per_unit = comptime!(total.div_ceil(units));
        let mut ks = Array::<Vector<F, N>>::new(per_unit);
        let mut vs = Array::<Vector<F, N>>::new(per_unit);
        #[unroll]
        for it in 0..per_unit {
            let x = u + it * units;
            let mut kx = Vector::<f32, N>::new(f32::new(0.0));
            let mut vx = Vector::<f32, N>::new(f32::new(0.0));
            if x < total {
                let row = rows_s[x / row_vectors];
                if row >= 0 {
                    let at =
                        (usize::cast_from(row) * num_kv_heads + g) * row_vectors + x % row_vectors;
                    kx = load_pool::<P, N, M>(k_pool, at, k_scale, fp8, fp8_decode);
                    vx = load_pool::<P, N, M>(v_pool, at, v_scale, fp8, fp8_decode);
                }
            }
            ks[it] = Vector::<F, N>::cast_from(kx);
            vs[it] = Vector::<F, N>::cast_from(vx);
        }
        #[unroll]
        for it in 0..per_unit {
            let x = u + it * units;
            if x < total {
                let at = x / row_vectors * kv_rowv + x % row_vectors;
                kv_s[at] = ks[it];
                kv_s[kv_elemsv + at] = vs[it];
            }
        }
        sync_cube();

        // 2. Scores: the plane's 16 × block_keys product.
        if comptime!(tensor_cores) {
            #[unroll]
            for kt in 0..key_tiles {
                let acc = zero_accumulator::<f32>();
                #[unroll]
                for kc in 0..d_tiles {
                    let at = kt * TILE * kv_rowv + kc * tile_vectors;
                    let b = load_fragment::<F, Vector<F, N>>(
                        cmma::MatrixIdent::B,
                        cmma::MatrixLayout::ColMajor,
                        kv_s.slice(at, at + (TILE - 1) * kv_rowv + tile_vectors),
                        kv_row as u32,
                    );
                    cmma::execute(q_frags.index(kc), &b, &acc, &acc);
                }
                let at = s_base + kt * TILE;
                cmma::store(
                    s_s.slice_mut(at, at + (TILE - 1) * s_row + TILE),
                    &acc,
                    s_row as u32,
                    cmma::MatrixLayout::RowMajor,
                );
            }
        } else {
            for x in range_stepped(lane, comptime!(TILE * block_keys), LANES) {
                let tt = t0 + x / block_keys;
                let k0 = (x % block_keys) * kv_rowv;
                let mut dot = f32::new(0.0);
                if tt < num_tokens {
                    let q0 = (tt * num_qo_heads + head) * head_dim;
                    // 16 elements an iteration (a software Vulkan caps a unit's loop
                    // iterations).
                    for d0 in range_stepped(0, head_dim, TILE) {
                        #[unroll]
                        for dv in 0..tile_vectors {
                            let kx = kv_s[k0 + d0 / nv + dv];
                            #[unroll]
                            for c in 0..nv {
                                dot += f32::cast_from(q[q0 + d0 + dv * nv + c])
                                    * f32::cast_from(kx.extract(c));
                            }
                        }
                    }
                }
                s_s[s_base + x / block_keys * s_row + x % block_keys] = dot;
            }
        }
        sync_cube();

        // 3. Online softmax, two units a row, each every other key of the tile (the pair's
        // neighbouring words: fewer shared-memory bank conflicts than halves of the row).
        let row_at = s_base + i * s_row + half;
        let weights_at = p_base + i * p_row + half;
        let mut tile_max = neg_inf;
        for jj in 0..half_keys {
            let j = 2 * jj + half;
            let e = base + j;
            let mut s = s_s[row_at + 2 * jj] * sm_scale;
            if capped {
                s = soft_cap * f32::tanh(s / soft_cap);
            }
            s = select(rows_s[j] >= 0 && e >= lo && e < hi, s, neg_inf);
            s_s[row_at + 2 * jj] = s;
            tile_max = select(s > tile_max, s, tile_max);
        }
        pair_s[u] = tile_max;
        sync_cube();
        let other = pair_s[u ^ 1];
        tile_max = select(other > tile_max, other, tile_max);
        // The running maximum moves on the row's first keys (nothing to rescale yet), and
        // after that only when the tile's passes it by more than `RESCALE_MARGIN`.
        let unseen = m == neg_inf;
        let grows = !unseen && tile_max > m + RESCALE_MARGIN;
        let alpha = select(grows, f32::exp(m - tile_max), f32::new(1.0));
        m = select(unseen || grows, tile_max, m);
        l *= alpha;
        for jj in 0..half_keys {
            let s = s_s[row_at + 2 * jj];
            let p = select(s == neg_inf, f32::new(0.0), f32::exp(s - m));
            l += p;
            p_s[weights_at + 2 * jj] = F::cast_from(p);
        }
        if half == 0 {
            alpha_s[plane * TILE + i] = alpha;
            if grows {
                flag_s[0] = 1;
            }
        }
        sync_cube();

        // 4. Values: rescale the running output, then add the plane's weights × values.
        // (And the next tile's pool rows: this tile's were last read by the softmax.)
        if u < block_keys {
            rows_s[u] = entry_row(kv_indices, base + block_keys + u, end, pool_size);
        }
        if comptime!(tensor_cores) {
            if flag_s[0] == 1 {
                rescale_accumulators(
                    &mut o_accs,
                    &mut s_s,
                    &alpha_s,
                    s_base,
                    plane,
                    lane,
                    block_keys,
                    d_tiles,
                );
            }
            #[unroll]
            for kt in 0..key_tiles {
                let at = p_base + kt * TILE;
                let a = load_fragment::<F, F>(
                    cmma::MatrixIdent::A,
                    cmma::MatrixLayout::RowMajor,
                    p_s.slice(at, at + (TILE - 1) * p_row + TILE),
                    p_row as u32,
                );
                #[unroll]
                for dt in 0..d_tiles {
                    let at = kv_elemsv + kt * TILE * kv_rowv + dt * tile_vectors;
                    let b = load_fragment::<F, Vector<F, N>>(
                        cmma::MatrixIdent::B,
                        cmma::MatrixLayout::RowMajor,
                        kv_s.slice(at, at + (TILE - 1) * kv_rowv + tile_vectors),
                        kv_row as u32,
                    );
                    let acc = o_accs.index(dt);
                    cmma::execute(&a, &b, acc, acc);
                }
            }
        } else {
            let w_at = p_base + i * p_row;
            let v0 = kv_elemsv + half * comptime!(TILE / 2 / nv);
            #[unroll]
            for x in 0..comptime!(head_dim / 2) {
                o[x] *= alpha;
            }
            for j in 0..block_keys {
                let p = f32::cast_from(p_s[w_at + j]);
                #[unroll]
                for dt in 0..d_tiles {
                    #[unroll]
                    for cv in 0..comptime!(TILE / 2 / nv) {
                        let vx = kv_s[v0 + j * kv_rowv + dt * tile_vectors + cv];
                        #[unroll]
                        for c in 0..nv {
                            o[dt * (TILE / 2) + cv * nv + c] += p * f32::cast_from(vx.extract(c));
                        }
                    }
                }
            }
        }
        sync_cube();
        base += block_keys;
    }

    // The row's sum of weights (the pair's halves), its log-sum-exp, then the output.
    pair_s[u] = l;
    sync_cube();
    let total = l + pair_s[u ^ 1];
    let seen = total > 0.0;
    if half == 0 {
        alpha_s[plane * TILE + i] = total;
        if t < num_tokens {
            lse[t * num_qo_heads + head] = select(
                seen,
                m + f32::ln(select(seen, total, f32::new(1.0))),
                neg_inf,
            );
        }
    }
    sync_cube();
    if comptime!(tensor_cores) {
        let per_round = comptime!(block_keys / TILE);
        #[unroll]
        for round in 0..comptime!(d_tiles.div_ceil(per_round)) {
            stage_round(&o_accs, &mut s_s, s_base, round, block_keys, d_tiles);
            sync_cube();
            for x in range_stepped(lane, comptime!(per_round * TILE_ELEMS), LANES) {
                let dt = round * per_round + x / TILE_ELEMS;
                let r = (x % TILE_ELEMS) / TILE;
                let tt = t0 + r;
                if dt < d_tiles && tt < num_tokens {
                    let sum = alpha_s[plane * TILE + r];
                    let value = select(sum > 0.0, s_s[s_base + x] / sum, f32::new(0.0));
                    out[(tt * num_qo_heads + head) * head_dim + dt * TILE + x % TILE] =
                        F::cast_from(value);
                }
            }
            sync_cube();
        }
    } else if t < num_tokens {
        let at = (t * num_qo_heads + head) * head_dim + half * (TILE / 2);
        #[unroll]
        for dt in 0..d_tiles {
            #[unroll]
            for c in 0..comptime!(TILE / 2) {
                let value = select(seen, o[dt * (TILE / 2) + c] / total, f32::new(0.0));
                out[at + dt * TILE + c] = F::cast_from(value);
            }
        }
    }
}

/// Stores round `round` of the plane's running output — accumulator fragments
/// `round · block_keys / 16` onwards, as many as the staging area holds — row-major into the
/// plane's staging area of `s_s` (fragment `k` of the round at `s_base + 256 k`).
#[cube]
fn stage_round(
    o_accs: &Sequence<cmma::Matrix<f32>>,
    s_s: &mut Shared<[f32]>,
    s_base: usize,
    #[comptime] round: usize,
    #[comptime] block_keys: usize,
    #[comptime] d_tiles: usize,
) {
    let per_round = comptime!(block_keys / TILE);
    #[unroll]
    for k in 0..per_round {
        let dt = comptime!(round * per_round + k);
        if comptime!(dt < d_tiles) {
            let at = s_base + k * TILE_ELEMS;
            cmma::store(
                s_s.slice_mut(at, at + TILE_ELEMS),
                o_accs.index(dt),
                TILE as u32,
                cmma::MatrixLayout::RowMajor,
            );
        }
    }
}

/// Multiplies each row of the plane's running output (its `d_tiles` accumulator fragments) by
/// that row's factor in `alpha_s`, through the plane's staging area of `s_s` (`block_keys / 16`
/// fragments at a time). Called by every unit of the cube (it syncs).
#[cube]
#[allow(clippy::too_many_arguments)]
fn rescale_accumulators(
    o_accs: &mut Sequence<cmma::Matrix<f32>>,
    s_s: &mut Shared<[f32]>,
    alpha_s: &Shared<[f32]>,
    s_base: usize,
    plane: usize,
    lane: usize,
    #[comptime] block_keys: usize,
    #[comptime] d_tiles: usize,
) {
    let per_round = comptime!(block_keys / TILE);
    #[unroll]
    for round in 0..comptime!(d_tiles.div_ceil(per_round)) {
        stage_round(&*o_accs, s_s, s_base, round, block_keys, d_tiles);
        sync_cube();
        for x in range_stepped(lane, comptime!(per_round * TILE_ELEMS), LANES) {
            let r = (x % TILE_ELEMS) / TILE;
            s_s[s_base + x] *= alpha_s[plane * TILE + r];
        }
        sync_cube();
        #[unroll]
        for k in 0..per_round {
            let dt = comptime!(round * per_round + k);
            if comptime!(dt < d_tiles) {
                let at = s_base + k * TILE_ELEMS;
                cmma::load_with_layout(
                    o_accs.index_mut(dt),
                    s_s.slice(at, at + TILE_ELEMS),
                    TILE as u32,
                    cmma::MatrixLayout::RowMajor,
                );
            }
        }
        sync_cube();
    }
}

#[cfg(test)]
mod tests {
    //! The tensor-core variant runs only where a device has `cmma` tiles (none of this crate's
    //! test machines without a GPU): it is expanded here for the launch shapes the query-tile
    //! launch picks and compiled to CUDA C++ by CubeCL's C++ compiler (`cmma` becomes `wmma`) and
    //! to SPIR-V by its Vulkan compiler (cooperative matrices), so an expansion or lowering error
    //! shows without a GPU. Its results are checked against float64
    //! by the root crate's `the_query_tile_kernel_matches_the_reference_on_every_device` where it
    //! runs; the same kernel without tensor cores runs in those tests everywhere.

    use super::attention_tiles_kernel;
    use crate::common::fp8::Fp8Decode;
    use crate::test_common as common;
    use cubecl::ir::{AddressType, ElemType, FloatKind, UIntKind};
    use cubecl::prelude::*;
    use std::sync::Arc;

    #[test]
    fn tensor_core_variant_expands_and_compiles_to_cuda_and_spirv() {
        // The arguments are built on a wgpu client (its properties); any adapter will do.
        let Some(client) = common::any_client("query-tile kernel's CUDA check") else {
            return;
        };
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        // (head_dim, planes, heads, block_keys, fp8, capped): Llama's 128 with its GQA group of
        // 4, a head of 80 (an odd number of 16-column tiles), Gemma's 256 with a soft cap, and
        // fp8 pools (decoded through CubeCL's fp8 type).
        let shapes = [
            (128usize, 4usize, 4usize, 32usize, false, false),
            (80, 4, 2, 32, false, false),
            (256, 2, 2, 16, false, true),
            (128, 4, 1, 32, true, false),
        ];
        let properties = common::properties_with_f16_tiles(&client);
        for (d, planes, heads, block_keys, fp8, capped) in shapes {
            let (pool_vector, words, pool_elem) = match fp8 {
                true => (1usize, d / 4, ElemType::UInt(UIntKind::U32)),
                false => (4, d, ElemType::Float(FloatKind::F16)),
            };
            let kernel = attention_tiles_kernel::create_dummy_kernel(
                properties.clone(),
                Arc::new(client.target_properties().clone()),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, planes as u32),
                AddressType::U32,
                4,
                pool_vector,
                tensor(&[40, 8, d]),
                tensor(&[64, 2, words]),
                tensor(&[64, 2, words]),
                tensor(&[100]),
                tensor(&[40, 2]),
                tensor(&[40, 8, d]),
                tensor(&[40, 8]),
                0.1,
                30.0,
                f32::NEG_INFINITY,
                (4 / heads) as u32,
                1.0,
                1.0,
                heads,
                planes,
                block_keys,
                d,
                d / 4,
                true,
                capped,
                fp8,
                match fp8 {
                    true => Fp8Decode::Native,
                    false => Fp8Decode::Integer,
                },
                [ElemType::Float(FloatKind::F16), pool_elem],
            );
            common::assert_tensor_core_kernel_compiles(
                kernel,
                &format!("attention_tiles_kernel, head_dim {d}, {planes} planes"),
            );
        }
    }
}
