//! The split of long contexts, shared by both attention kernels (flash-decoding: few rows, long
//! contexts): which (query row, head block, chunk) a cube owns ([`cube_work`]), and the merge of
//! the chunks' normalised partial outputs and log-sum-exps ([`attention_merge`](fn@attention_merge)).

use crate::common::reduce::{cube_max, cube_sum};
use cubecl::prelude::*;

/// This cube's share of an attention call: `(t, g, head0, chunk)` — query row `t`, kv head `g`,
/// the first q head `head0` of its block, and the chunk of the row's keys. Cubes run row
/// fastest, then head block (a kv head's `blocks` blocks of `heads` q heads adjacent), then
/// chunk; a cube past the last chunk has `chunk >= num_chunks` and leaves.
#[cube]
pub(crate) fn cube_work(
    num_tokens: usize,
    num_kv_heads: usize,
    blocks: usize,
    #[comptime] heads: usize,
) -> (usize, usize, usize, usize) {
    let t = CUBE_POS % num_tokens;
    let rest = CUBE_POS / num_tokens;
    let block = rest % (num_kv_heads * blocks);
    let chunk = rest / (num_kv_heads * blocks);
    (t, block / blocks, block * heads, chunk)
}

/// Combines the `chunks` partial outputs of each (query row, q head), one cube of `units` units
/// per head: `part_out [chunks, T, Hq, D]` (normalised per chunk) and `part_lse [chunks, T, Hq]`
/// into `out [T, Hq, D]` and `lse [T, Hq]`; a row no chunk saw gets zeros and `neg_inf`. The
/// chunks are spread over the units in every phase (their maximum, their weights, the weighted
/// vectors: unit `u` adds vector `u % row_vectors` of every `units / row_vectors`-th chunk), so
/// a long split costs a few round trips to memory, not one per chunk. `units` is a power of two
/// and at least `row_vectors`; `max_chunks` is at least `chunks`.
#[cube(launch_unchecked, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_merge<F: Float, N: Size>(
    part_out: &Tensor<Vector<f32, N>>,
    part_lse: &Tensor<f32>,
    out: &mut Tensor<Vector<F, N>>,
    lse: &mut Tensor<f32>,
    neg_inf: f32,
    chunks: u32,
    #[comptime] units: usize,
    #[comptime] max_chunks: usize,
    #[comptime] row_vectors: usize,
    #[define(F)] _dtype: ElemType,
) {
    let chunks = chunks as usize;
    let heads = lse.len();
    let head = CUBE_POS;
    if head >= heads {
        terminate!();
    }
    let u = UNIT_POS as usize;
    let mut red = Shared::<[f32]>::new_slice(units);
    let mut w_s = Shared::<[f32]>::new_slice(max_chunks);
    let mut acc_s = Shared::<[Vector<f32, N>]>::new_slice(units);
    // 1. The largest partial log-sum-exp.
    let mut m = neg_inf;
    for c in range_stepped(u, chunks, units) {
        let x = part_lse[c * heads + head];
        m = select(x > m, x, m);
    }
    let top = cube_max(&mut red, m, units);
    let seen = top != neg_inf;
    sync_cube();
    // 2. Each chunk's weight against it, and their sum.
    let mut sum = f32::new(0.0);
    for c in range_stepped(u, chunks, units) {
        let x = part_lse[c * heads + head];
        let w = select(x == neg_inf, f32::new(0.0), f32::exp(x - top));
        w_s[c] = w;
        sum += w;
    }
    let total = cube_sum(&mut red, sum, units);
    // 3. The weighted partial outputs: chunk group `u / row_vectors`, vector `u % row_vectors`.
    let groups = comptime!(units / row_vectors);
    let cg = u / row_vectors;
    let e = u % row_vectors;
    let mut acc = Vector::<f32, N>::new(f32::new(0.0));
    if seen && cg < groups {
        for c in range_stepped(cg, chunks, groups) {
            acc += part_out[(c * heads + head) * row_vectors + e] * Vector::new(w_s[c]);
        }
    }
    acc_s[u] = acc;
    sync_cube();
    if u < row_vectors {
        let mut value = Vector::<f32, N>::new(f32::new(0.0));
        for k in 0..groups {
            value += acc_s[k * row_vectors + u];
        }
        let value = select(seen, value / Vector::new(total), Vector::new(f32::new(0.0)));
        out[head * row_vectors + u] = Vector::cast_from(value);
    }
    if u == 0 {
        lse[head] = select(
            seen,
            top + f32::ln(select(seen, total, f32::new(1.0))),
            neg_inf,
        );
    }
}
