//! Attention over the token-slot pool in query tiles for prefill on warp-level tensor-core
//! products (`mma.sync` m16n8k16, f16 × f16 → f32, through CubeCL's `MmaDefinition`), the
//! scores, weights and running output held in registers the whole walk (flash-attention 2's
//! form): f16 queries over f16 or fp8 pools through CubeCL's CUDA runtime.
//!
//! One cube owns one (tile of query rows, block of `heads` q heads of one kv head), as
//! [`super::tiles`]'s: warp `w` takes head `w % heads` of `16 · row_tiles` rows,
//! `16 · row_tiles · (w / heads)` onwards, so the heads of a GQA group share the cube's key and
//! value tiles. The cube walks the union of
//! its rows' key ranges (entries of `kv_indices`) in tiles of `block_keys` keys:
//! 1. the tile's key and value rows, read as 16-byte vectors by all units (fp8 pools: 8-byte
//!    vectors of codes, decoded exactly to f16 halves, `2^-8` times their values; the factor and
//!    the pools' scales multiply the scores and the output in f32) and stored in shared
//!    memory (rows one vector longer than the head: the 8 rows an `ldmatrix` phase reads start
//!    in 8 different 16-byte bank groups); a row outside the pool or past the walk as zeros;
//! 2. scores `S = Q · Kᵀ`: the warp's queries are the first operand, loaded once from `q` into
//!    registers (with two row tiles a warp: staged in shared memory once and read by `ldmatrix`
//!    each tile); the keys are read by `ldmatrix` (four 8 × 8 matrices: a key tile's 32
//!    elements of the head) as the second; `block_keys / 8` accumulators of 16 × 8;
//! 3. online softmax in registers: lane `(g, t) = (lane / 4, lane % 4)` holds keys `8j + 2t`,
//!    `8j + 2t + 1` of rows `g` and `g + 8`; scale, soft cap, the row's own range as the mask
//!    (causal, sliding window, the sequence's keys); the row's maximum over its four lanes (two
//!    shuffles); the running output rescaled where a maximum moved; the weights rounded to f16
//!    (as flash attention does: CONTRACT, `pool_attention`, Math);
//! 4. values `O += P · V`: the score accumulators are the next product's first operand (the
//!    register layouts agree: two score tiles make a 16-key step), the values read by
//!    `ldmatrix.trans` (pairs along the keys) as the second.
//!
//! Rows of one tile may belong to different sequences (each row is masked by its own range);
//! the launch takes this kernel where [`super::tiles`]'s would run (every sequence with queries
//! has a tile's worth of rows) and this one takes the call (`AttentionTuning::flash`). On an H100
//! it took 806 µs for one 4096-token Llama-3-8B prompt (170 TFLOPS) against 1736 µs with the
//! `cmma` query tiles (Nsight Compute; `benches/NOTES.md`, "Flash-form query tiles"). A key in
//! the walk that a row does not see meets that row's zero weight in the values' product, as in
//! [`super::tiles`]. The fragments' register layout is CUDA's: the launch takes this kernel
//! through CubeCL's CUDA runtime only.

use super::tiles::entry_row;
use crate::common::fp8::halves_words;
use crate::common::fragment::{TILE, mma_accumulate};
use cubecl::cmma::{MatrixIdent, MmaDefinition};
use cubecl::prelude::*;
use half::f16;

/// Units a warp.
const LANES: usize = 32;
/// Elements of a 16-byte vector of f16.
const VECTOR: usize = 8;

/// The launch shape of [`attention_flash_kernel`] (comptime).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct FlashShape {
    /// Warps a cube (a multiple of `heads`).
    pub(crate) warps: usize,
    /// q heads a cube (a divisor of the GQA group).
    pub(crate) heads: usize,
    /// Keys a tile (a multiple of 16).
    pub(crate) block_keys: usize,
    /// Elements a head (a multiple of 32, at most 128).
    pub(crate) head_dim: usize,
    /// Scores soft-capped (`soft_cap · tanh(s / soft_cap)`).
    pub(crate) capped: bool,
    /// Each tile's loads of the next tile's keys and values issued before its products, stored
    /// after them into a second stage (one barrier a tile instead of two).
    pub(crate) ahead: bool,
    /// Row tiles of 16 a warp (1 or 2): with 2, each key and value operand serves two products
    /// and the queries are read from shared memory each tile instead of held in registers.
    pub(crate) row_tiles: usize,
    /// Pools of e4m3 codes (words of four), decoded as f16 halves when staged.
    pub(crate) fp8: bool,
}

impl FlashShape {
    /// Query rows a cube.
    pub(crate) const fn tile_rows(&self) -> usize {
        self.warps / self.heads * TILE * self.row_tiles
    }

    /// 16-byte vectors between staged key, value (or query) rows: the head's and one more.
    pub(crate) const fn row_stride(&self) -> usize {
        self.head_dim / VECTOR + 1
    }

    /// Stages of key and value tiles: two with [`Self::ahead`].
    pub(crate) const fn stages(&self) -> usize {
        if self.ahead { 2 } else { 1 }
    }

    /// 16-byte vectors of the warps' staged queries (several row tiles a warp; else none).
    pub(crate) const fn query_vectors(&self) -> usize {
        if self.row_tiles > 1 {
            self.warps * TILE * self.row_tiles * self.row_stride()
        } else {
            0
        }
    }

    /// The shared memory a cube takes, bytes: the stages of key and value tiles, the staged
    /// queries, three sets of a tile's pool rows, the warps' range bounds.
    pub(crate) const fn shared_bytes(&self) -> usize {
        (self.stages() * 2 * self.block_keys * self.row_stride() + self.query_vectors()) * 16
            + 3 * 4 * self.block_keys
            + 8 * self.warps
    }
}

/// The attention of one (tile of query rows, head block) per cube (see the module doc). Shapes:
/// `q [T, Hq, D]` and `out [T, Hq, D]` f16 (`q_vectors` the same queries as 16-byte vectors),
/// pools `[P, Hkv, D / 8]` vectors of `M` words (4: 8 f16; 2, `fp8`: 8 e4m3 codes) — their
/// values times `k_factor` and `v_factor` (1 for f16; an fp8 pool's scale times `2^8`, the
/// halves' factor) are the keys and values —
/// `kv_indices [nnz]` i32, `ranges [T, 2]` i32 (first entry in `kv_indices`, visible keys),
/// `lse [T, Hq]` f32; `head_blocks` blocks of `heads` q heads make a kv head's group. The cube
/// is `32 × warps` units. `neg_inf` is `f32::NEG_INFINITY`, passed at run time.
#[cube(launch_unchecked, create_dummy_kernel, address_type = "dynamic")]
#[allow(clippy::too_many_arguments, clippy::collapsible_if)]
pub(crate) fn attention_flash_kernel<M: Size>(
    q: &Tensor<f16>,
    q_vectors: &Tensor<Vector<f16, Const<8>>>,
    k_pool: &Tensor<Vector<u32, M>>,
    v_pool: &Tensor<Vector<u32, M>>,
    kv_indices: &Tensor<i32>,
    ranges: &Tensor<i32>,
    out: &mut Tensor<f16>,
    lse: &mut Tensor<f32>,
    sm_scale: f32,
    soft_cap: f32,
    neg_inf: f32,
    head_blocks: u32,
    k_factor: f32,
    v_factor: f32,
    #[comptime] shape: FlashShape,
) {
    let (warps, heads, block_keys, head_dim, capped, ahead, row_tiles) = comptime!((
        shape.warps,
        shape.heads,
        shape.block_keys,
        shape.head_dim,
        shape.capped,
        shape.ahead,
        shape.row_tiles
    ));
    let num_tokens = q.shape(0);
    let num_qo_heads = q.shape(1);
    let pool_size = k_pool.shape(0);
    let num_kv_heads = k_pool.shape(1);
    let tile_rows = comptime!(shape.tile_rows());
    let tiles = num_tokens.div_ceil(tile_rows);
    // The whole cube leaves together: the syncs below stay uniform.
    if CUBE_POS >= tiles * num_kv_heads * head_blocks as usize {
        terminate!();
    }
    // The last row tiles (the most keys, causal) first.
    let tile = tiles - 1 - CUBE_POS % tiles;
    let block = CUBE_POS / tiles;
    let kv = block / head_blocks as usize;
    let lane = UNIT_POS_X as usize;
    let warp = UNIT_POS_Y as usize;
    let unit = warp * LANES + lane;
    let gl = lane / 4;
    let tl = lane % 4;
    let head = block * heads + warp % heads;
    let warp_rows = comptime!(TILE * row_tiles);
    let t0 = tile * tile_rows + warp / heads * warp_rows;

    let row_vectors = comptime!(head_dim / VECTOR);
    let ld = comptime!(shape.row_stride());
    // A stage: the key tile, then the value tile (`kv_stage` vectors each); past the stages,
    // with several row tiles, each warp's queries.
    let kv_stage = comptime!(block_keys * ld);
    let stage = comptime!(2 * kv_stage);
    let key_tiles = comptime!(block_keys / 8);
    let key_steps = comptime!(block_keys / 16);
    let d_steps = comptime!(head_dim / 16);
    let out_tiles = comptime!(head_dim / 8);
    let q_shared = comptime!(row_tiles > 1);
    let q_at = comptime!(shape.stages() * stage) + warp * comptime!(warp_rows * ld);
    let mut kv_s = Shared::<[Vector<f16, Const<8>>]>::new_aligned_slice(
        comptime!(shape.stages() * stage + shape.query_vectors()),
        16usize,
    );
    let mut rows_s = Shared::<[i32]>::new_slice(comptime!(3 * block_keys));
    let mut bounds_s = Shared::<[u32]>::new_slice(comptime!(2 * warps));

    // The lane's rows `16rt + gl` and `16rt + gl + 8` (slot `2rt + r`): their key ranges.
    let mut lo = Array::<usize>::new(comptime!(2 * row_tiles));
    let mut hi = Array::<usize>::new(comptime!(2 * row_tiles));
    #[unroll]
    for x in 0..comptime!(2 * row_tiles) {
        let t = t0 + gl + comptime!(TILE * (x / 2) + 8 * (x % 2));
        lo[x] = 0;
        hi[x] = 0;
        if t < num_tokens {
            lo[x] = usize::cast_from(ranges[2 * t]);
            hi[x] = lo[x] + usize::cast_from(ranges[2 * t + 1]);
        }
    }
    // A row that sees no key widens nothing.
    let mut first = select(hi[0] > lo[0], u32::cast_from(lo[0]), u32::MAX);
    let mut last = select(hi[0] > lo[0], u32::cast_from(hi[0]), 0u32);
    #[unroll]
    for x in 1..comptime!(2 * row_tiles) {
        first = first.min(select(hi[x] > lo[x], u32::cast_from(lo[x]), u32::MAX));
        last = last.max(select(hi[x] > lo[x], u32::cast_from(hi[x]), 0u32));
    }
    // The cube's walk: the union of its rows' ranges.
    first = plane_min(first);
    last = plane_max(last);
    if lane == 0 {
        bounds_s[2 * warp] = first;
        bounds_s[2 * warp + 1] = last;
    }

    // The warp's queries as the first operand of the scores. One row tile: held in registers,
    // step `s` (elements `16s…`) in slots `4s…4s + 3` — rows `gl`, `gl + 8`, elements `2tl,
    // 2tl + 1`, then `2tl + 8, 2tl + 9`. Several: staged in shared memory, read by `ldmatrix`.
    let mut qf =
        Array::<Vector<f16, Const<2>>>::new(comptime!(if q_shared { 1 } else { 4 * d_steps }));
    if comptime!(q_shared) {
        #[unroll]
        for it in 0..comptime!(warp_rows * row_vectors / LANES) {
            let x = lane + it * LANES;
            let t = t0 + x / row_vectors;
            let mut v = Vector::<f16, Const<8>>::new(f16::new(0.0));
            if t < num_tokens {
                v = q_vectors[(t * num_qo_heads + head) * row_vectors + x % row_vectors];
            }
            kv_s[q_at + x / row_vectors * ld + x % row_vectors] = v;
        }
    } else {
        #[unroll]
        for s in 0..d_steps {
            #[unroll]
            for i in 0..4usize {
                let r = comptime!(i % 2);
                let e = comptime!(16 * s + 8 * (i / 2)) + 2 * tl;
                let t = t0 + gl + comptime!(8 * r);
                let mut x = Vector::<f16, Const<2>>::new(f16::new(0.0));
                if t < num_tokens {
                    let at = (t * num_qo_heads + head) * head_dim + e;
                    x.insert(0usize, q[at]);
                    x.insert(1usize, q[at + 1]);
                }
                qf[comptime!(4 * s + i)] = x;
            }
        }
    }
    sync_cube();
    #[unroll]
    for w in 0..warps {
        first = first.min(bounds_s[comptime!(2 * w)]);
        last = last.max(bounds_s[comptime!(2 * w + 1)]);
    }
    let end = last as usize;

    let def = MmaDefinition::<f16, f16, f32>::new(16usize, 8usize, 16usize);
    // Running output: row tile `rt`, tile `j` (elements `8j…`) in slots `2(rt · out_tiles + j)`
    // (row `gl`) and the next (row `gl + 8`), columns `2tl`, `2tl + 1`.
    let mut o = Array::<Vector<f32, Const<2>>>::new(comptime!(2 * row_tiles * out_tiles));
    #[unroll]
    for a in 0..comptime!(2 * row_tiles * out_tiles) {
        o[a] = Vector::new(f32::new(0.0));
    }
    // Per row (slot `2rt + r`): the running maximum (its four lanes') and this lane's share of
    // the sum.
    let mut m = Array::<f32>::new(comptime!(2 * row_tiles));
    let mut l = Array::<f32>::new(comptime!(2 * row_tiles));
    #[unroll]
    for x in 0..comptime!(2 * row_tiles) {
        m[x] = neg_inf;
        l[x] = f32::new(0.0);
    }

    // The pool rows of tile `n` are in set `n % 3` of `rows_s`, written a tile or two ahead;
    // its keys and values in stage `n % stages` of `kv_s`.
    let mut base = first as usize;
    if unit < block_keys {
        rows_s[unit] = entry_row(kv_indices, base + unit, end, pool_size);
    }
    sync_cube();
    let loads = comptime!((block_keys * row_vectors).div_ceil(warps * LANES));
    let mut ks = Array::<Vector<f16, Const<8>>>::new(loads);
    let mut vs = Array::<Vector<f16, Const<8>>>::new(loads);
    if comptime!(ahead) {
        // Tile 0 staged before the walk; each tile then loads the next one's.
        load_tile(
            k_pool, v_pool, &rows_s, 0, kv, unit, &mut ks, &mut vs, shape,
        );
        if unit < block_keys {
            rows_s[block_keys + unit] =
                entry_row(kv_indices, base + block_keys + unit, end, pool_size);
        }
        store_tile(&mut kv_s, 0, unit, &ks, &vs, shape);
        sync_cube();
    }
    let mut n = 0usize;
    while base < end {
        let rows_at = (n % 3) * block_keys;
        let mut stage_at = 0usize;
        let more = base + block_keys < end;
        if comptime!(ahead) {
            stage_at = (n % 2) * stage;
            // The next tile's keys and values, in flight during this tile's products.
            if more {
                let next_rows = ((n + 1) % 3) * block_keys;
                load_tile(
                    k_pool, v_pool, &rows_s, next_rows, kv, unit, &mut ks, &mut vs, shape,
                );
                if unit < block_keys {
                    rows_s[((n + 2) % 3) * block_keys + unit] =
                        entry_row(kv_indices, base + 2 * block_keys + unit, end, pool_size);
                }
            }
        } else {
            // 1. The tile's key and value rows: every load first, then the stores.
            load_tile(
                k_pool, v_pool, &rows_s, rows_at, kv, unit, &mut ks, &mut vs, shape,
            );
            if unit < block_keys {
                rows_s[((n + 1) % 3) * block_keys + unit] =
                    entry_row(kv_indices, base + block_keys + unit, end, pool_size);
            }
            store_tile(&mut kv_s, 0, unit, &ks, &vs, shape);
            sync_cube();
        }

        // 2. Scores: row tile `rt`, key tile `j` (keys `8j…`) in slots `2(rt · key_tiles + j)`
        // (row `gl`) and the next (row `gl + 8`). Each chunk `c` of 32 elements: the queries'
        // operands of its two steps, then each key tile's (one `ldmatrix` for all row tiles).
        let mut sc = Array::<Vector<f32, Const<2>>>::new(comptime!(2 * row_tiles * key_tiles));
        #[unroll]
        for x in 0..comptime!(2 * row_tiles * key_tiles) {
            sc[x] = Vector::new(f32::new(0.0));
        }
        #[unroll]
        for c in 0..comptime!(head_dim / 32) {
            // Step `2c + h` of row tile `rt` in slots `4(2rt + h)…`.
            let mut a = Array::<Vector<f16, Const<2>>>::new(comptime!(8 * row_tiles));
            #[unroll]
            for rt in 0..row_tiles {
                #[unroll]
                for h in 0..2usize {
                    let at = comptime!(4 * (2 * rt + h));
                    if comptime!(q_shared) {
                        // Matrices: rows `16rt…` and `16rt + 8…` of elements `16(2c + h)…`,
                        // then of `16(2c + h) + 8…`.
                        let row = comptime!(TILE * rt) + lane % 8 + 8 * ((lane / 8) % 2);
                        let q4 = def.load_matrix::<Vector<f16, Const<8>>, Const<2>>(
                            &kv_s[q_at + row * ld + comptime!(2 * (2 * c + h)) + lane / 16
                                ..q_at + row * ld + comptime!(2 * (2 * c + h)) + lane / 16 + 1],
                            MatrixIdent::A,
                            4usize,
                            false,
                        );
                        #[unroll]
                        for i in 0..4usize {
                            a[at + i] = q4[i];
                        }
                    } else {
                        #[unroll]
                        for i in 0..4usize {
                            a[at + i] = qf[comptime!(4 * (2 * c + h) + i)];
                        }
                    }
                }
            }
            #[unroll]
            for j in 0..key_tiles {
                // Matrix `lane / 8`: elements `32c + 8 · (lane / 8)…` of keys `8j…8j + 7`.
                let at =
                    stage_at + (comptime!(8 * j) + lane % 8) * ld + comptime!(4 * c) + lane / 8;
                let b4 = def.load_matrix::<Vector<f16, Const<8>>, Const<2>>(
                    &kv_s[at..at + 1],
                    MatrixIdent::B,
                    4usize,
                    false,
                );
                #[unroll]
                for rt in 0..row_tiles {
                    let slot = comptime!(2 * (rt * key_tiles + j));
                    #[unroll]
                    for h in 0..2usize {
                        let mut af = Array::<Vector<f16, Const<2>>>::new(4usize);
                        #[unroll]
                        for i in 0..4usize {
                            af[i] = a[comptime!(4 * (2 * rt + h) + i)];
                        }
                        let mut b = Array::<Vector<f16, Const<2>>>::new(2usize);
                        b[0] = b4[comptime!(2 * h)];
                        b[1] = b4[comptime!(2 * h + 1)];
                        mma_accumulate(&af, &b, &mut sc, slot);
                    }
                }
            }
        }

        // 3. Online softmax per row: scale, cap, mask; the four lanes' maximum; the weights.
        let mut valid = Array::<bool>::new(comptime!(2 * key_tiles));
        #[unroll]
        for j in 0..key_tiles {
            #[unroll]
            for i in 0..2usize {
                valid[comptime!(2 * j + i)] = rows_s[rows_at + comptime!(8 * j + i) + 2 * tl] >= 0;
            }
        }
        let mut rescale = Array::<f32>::new(comptime!(2 * row_tiles));
        let mut pf = Array::<Vector<f16, Const<2>>>::new(comptime!(2 * row_tiles * key_tiles));
        let mut moved = false;
        #[unroll]
        for x in 0..comptime!(2 * row_tiles) {
            let (rt, r) = comptime!((x / 2, x % 2));
            let mut top = m[x];
            #[unroll]
            for j in 0..key_tiles {
                let slot = comptime!(2 * (rt * key_tiles + j) + r);
                let mut v = sc[slot];
                #[unroll]
                for i in 0..2usize {
                    let e = base + comptime!(8 * j + i) + 2 * tl;
                    let mut y = v.extract(i) * sm_scale * k_factor;
                    if capped {
                        y = soft_cap * f32::tanh(y / soft_cap);
                    }
                    let y = select(
                        valid[comptime!(2 * j + i)] && e >= lo[x] && e < hi[x],
                        y,
                        neg_inf,
                    );
                    v.insert(i, y);
                    top = select(y > top, y, top);
                }
                sc[slot] = v;
            }
            let other = plane_shuffle_xor(top, 1u32);
            top = select(other > top, other, top);
            let other = plane_shuffle_xor(top, 2u32);
            top = select(other > top, other, top);
            rescale[x] = select(top == neg_inf, f32::new(1.0), f32::exp(m[x] - top));
            moved = moved || rescale[x] != f32::new(1.0);
            m[x] = top;
            let mut sum = l[x] * rescale[x];
            #[unroll]
            for j in 0..key_tiles {
                let slot = comptime!(2 * (rt * key_tiles + j) + r);
                let mut w = Vector::<f32, Const<2>>::new(f32::new(0.0));
                #[unroll]
                for i in 0..2usize {
                    let y = sc[slot].extract(i);
                    let e = select(y == neg_inf, f32::new(0.0), f32::exp(y - top));
                    w.insert(i, e);
                    sum += e;
                }
                pf[slot] = Vector::<f16, Const<2>>::cast_from(w);
            }
            l[x] = sum;
        }
        // The running output rescaled where a row's maximum moved (a factor of exactly 1
        // elsewhere: skipped when no row of the warp moved, the same bits).
        if plane_any(moved) {
            #[unroll]
            for rt in 0..row_tiles {
                #[unroll]
                for j in 0..out_tiles {
                    let slot = comptime!(2 * (rt * out_tiles + j));
                    o[slot] *= Vector::new(rescale[comptime!(2 * rt)]);
                    o[slot + 1] *= Vector::new(rescale[comptime!(2 * rt + 1)]);
                }
            }
        }

        // 4. Values: step `kk` (keys `16kk…`) takes score tiles `2kk` and `2kk + 1` of each row
        // tile as its first operand; matrices of `ldmatrix.trans`: keys `16kk…` and `16kk + 8…`
        // of elements `16c…`, then of `16c + 8…` (one load for all row tiles).
        #[unroll]
        for kk in 0..key_steps {
            let mut a = Array::<Vector<f16, Const<2>>>::new(comptime!(4 * row_tiles));
            #[unroll]
            for rt in 0..row_tiles {
                #[unroll]
                for i in 0..4usize {
                    a[comptime!(4 * rt + i)] = pf[comptime!(2 * (rt * key_tiles + 2 * kk) + i)];
                }
            }
            #[unroll]
            for c in 0..d_steps {
                let key = comptime!(16 * kk) + lane % 8 + 8 * ((lane / 8) % 2);
                let at = stage_at + kv_stage + key * ld + comptime!(2 * c) + lane / 16;
                let b4 = def.load_matrix::<Vector<f16, Const<8>>, Const<2>>(
                    &kv_s[at..at + 1],
                    MatrixIdent::B,
                    4usize,
                    true,
                );
                #[unroll]
                for rt in 0..row_tiles {
                    let mut af = Array::<Vector<f16, Const<2>>>::new(4usize);
                    #[unroll]
                    for i in 0..4usize {
                        af[i] = a[comptime!(4 * rt + i)];
                    }
                    #[unroll]
                    for h in 0..2usize {
                        let slot = comptime!(2 * (rt * out_tiles + 2 * c + h));
                        let mut b = Array::<Vector<f16, Const<2>>>::new(2usize);
                        b[0] = b4[comptime!(2 * h)];
                        b[1] = b4[comptime!(2 * h + 1)];
                        mma_accumulate(&af, &b, &mut o, slot);
                    }
                }
            }
        }
        if comptime!(ahead) {
            if more {
                store_tile(&mut kv_s, (1 - n % 2) * stage, unit, &ks, &vs, shape);
            }
        }
        // Every warp is done with this tile's rows before the next tile's are stored.
        sync_cube();
        n += 1;
        base += block_keys;
    }

    // Each row's sum over its four lanes, its log-sum-exp, the normalised output.
    #[unroll]
    for x in 0..comptime!(2 * row_tiles) {
        let (rt, r) = comptime!((x / 2, x % 2));
        let mut total = l[x];
        total += plane_shuffle_xor(total, 1u32);
        total += plane_shuffle_xor(total, 2u32);
        let t = t0 + gl + comptime!(TILE * rt + 8 * r);
        if t < num_tokens {
            let seen = total > 0.0;
            let norm = select(
                seen,
                v_factor / select(seen, total, f32::new(1.0)),
                f32::new(0.0),
            );
            let row = (t * num_qo_heads + head) * head_dim;
            #[unroll]
            for j in 0..out_tiles {
                let v = o[comptime!(2 * (rt * out_tiles + j) + r)];
                #[unroll]
                for i in 0..2usize {
                    out[row + comptime!(8 * j + i) + 2 * tl] = f16::cast_from(v.extract(i) * norm);
                }
            }
            if tl == 0 {
                lse[t * num_qo_heads + head] = select(
                    seen,
                    m[x] + f32::ln(select(seen, total, f32::new(1.0))),
                    neg_inf,
                );
            }
        }
    }
}

/// The key and value vectors of the tile whose pool rows are at `rows_at` in `rows_s` into
/// `ks` and `vs` as f16 (vector `unit + i · units` of the tile at `[i]`; a masked row as zeros):
/// 16-byte vectors of f16 pools, or words of e4m3 codes (8 to a vector) decoded as f16 halves,
/// exact at `2^-8` times the codes' values.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_tile<M: Size>(
    k_pool: &Tensor<Vector<u32, M>>,
    v_pool: &Tensor<Vector<u32, M>>,
    rows_s: &Shared<[i32]>,
    rows_at: usize,
    kv: usize,
    unit: usize,
    ks: &mut Array<Vector<f16, Const<8>>>,
    vs: &mut Array<Vector<f16, Const<8>>>,
    #[comptime] shape: FlashShape,
) {
    let row_vectors = comptime!(shape.head_dim / VECTOR);
    let total = comptime!(shape.block_keys * row_vectors);
    let units = comptime!(shape.warps * LANES);
    let num_kv_heads = k_pool.shape(1);
    #[unroll]
    for it in 0..comptime!(total.div_ceil(units)) {
        let x = unit + it * units;
        let mut kx = Vector::<u32, M>::new(0u32);
        let mut vx = Vector::<u32, M>::new(0u32);
        if x < total {
            let row = rows_s[rows_at + x / row_vectors];
            if row >= 0 {
                let at =
                    (usize::cast_from(row) * num_kv_heads + kv) * row_vectors + x % row_vectors;
                kx = k_pool[at];
                vx = v_pool[at];
            }
        }
        ks[it] = as_halves::<M>(kx, shape.fp8);
        vs[it] = as_halves::<M>(vx, shape.fp8);
    }
}

/// A 16-byte vector of f16 (`M` = 4 words), or two words of e4m3 codes (`M` = 2, `fp8`) as the
/// 8 f16 halves of their codes in order.
#[cube]
fn as_halves<M: Size>(raw: Vector<u32, M>, #[comptime] fp8: bool) -> Vector<f16, Const<8>> {
    let mut words = Vector::<u32, Const<4>>::new(0u32);
    if comptime!(fp8) {
        #[unroll]
        for w in 0..2usize {
            // Codes (0, 2) and (1, 3) of the word, then pairs (0, 1) and (2, 3).
            let (even, odd) = halves_words(raw.extract(w), true);
            words.insert(comptime!(2 * w), (even & 0xFFFF) | (odd << 16));
            words.insert(comptime!(2 * w + 1), (even >> 16) | (odd & 0xFFFF_0000));
        }
    } else {
        #[unroll]
        for w in 0..4usize {
            words.insert(w, raw.extract(w));
        }
    }
    Vector::<f16, Const<8>>::reinterpret(words)
}

/// `ks` and `vs` (as [`load_tile`] loaded them) into the stage at `stage_at` of `kv_s`: the key
/// rows, then the value rows, `row_stride` vectors apart.
#[cube]
fn store_tile(
    kv_s: &mut Shared<[Vector<f16, Const<8>>]>,
    stage_at: usize,
    unit: usize,
    ks: &Array<Vector<f16, Const<8>>>,
    vs: &Array<Vector<f16, Const<8>>>,
    #[comptime] shape: FlashShape,
) {
    let row_vectors = comptime!(shape.head_dim / VECTOR);
    let total = comptime!(shape.block_keys * row_vectors);
    let units = comptime!(shape.warps * LANES);
    let ld = comptime!(shape.row_stride());
    let kv_stage = comptime!(shape.block_keys * ld);
    #[unroll]
    for it in 0..comptime!(total.div_ceil(units)) {
        let x = unit + it * units;
        if x < total {
            let at = stage_at + x / row_vectors * ld + x % row_vectors;
            kv_s[at] = ks[it];
            kv_s[at + kv_stage] = vs[it];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FlashShape, attention_flash_kernel};
    use crate::test_common as common;
    use cubecl::ir::AddressType;
    use cubecl::prelude::*;

    /// The kernel expanded against CUDA's manual-`mma` register layout and a device listing f16
    /// `mma.sync` 16 × 8 × 16, and translated to CUDA C++ (no CUDA compiler runs here): Llama's
    /// head of 128 with its group of 4, a head of 64 on 8 warps of 2 heads, a capped head of 96;
    /// f16 and fp8 pools, one and two row tiles, loads ahead or not.
    /// Its arithmetic is checked by the root crate's query-tile tests through CUDA.
    #[test]
    fn attention_flash_kernel_expands_and_compiles_to_cuda() {
        let Some(client) = common::any_client("flash attention's CUDA check") else {
            return;
        };
        let (properties, target) = common::warp_mma_properties(&client);
        let tensor = |dims: &[usize]| common::dummy_tensor(&client, dims);
        for (warps, heads, block_keys, head_dim, capped, ahead, row_tiles, fp8) in [
            (
                4usize, 4usize, 64usize, 128usize, false, false, 1usize, false,
            ),
            (4, 4, 64, 128, false, true, 1, true),
            (4, 4, 32, 128, false, false, 2, false),
            (8, 2, 32, 64, false, true, 2, true),
            (4, 1, 64, 96, true, false, 1, false),
        ] {
            let shape = FlashShape {
                warps,
                heads,
                block_keys,
                head_dim,
                capped,
                ahead,
                row_tiles,
                fp8,
            };
            let words = if fp8 { 2 } else { 4 };
            let kernel = attention_flash_kernel::create_dummy_kernel(
                properties.clone(),
                target.clone(),
                CubeCount::Static(1, 1, 1),
                CubeDim::new_2d(32, warps as u32),
                AddressType::U32,
                words,
                tensor(&[40, 8, head_dim]),
                tensor(&[40, 8, head_dim / 8]),
                tensor(&[64, 2, head_dim / 8]),
                tensor(&[64, 2, head_dim / 8]),
                tensor(&[100]),
                tensor(&[40, 2]),
                tensor(&[40, 8, head_dim]),
                tensor(&[40, 8]),
                0.1,
                30.0,
                f32::NEG_INFINITY,
                (4 / heads) as u32,
                1.0,
                1.0,
                shape,
            );
            common::assert_warp_mma_kernel_compiles(
                kernel,
                &format!(
                    "attention_flash_kernel, {warps} warps, head {head_dim}, {block_keys} keys, \
                     ahead {ahead}, {row_tiles} row tiles, fp8 {fp8}"
                ),
            );
        }
    }
}
