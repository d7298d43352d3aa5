//! The Flex (pure-Rust CPU) implementation: the op as one host loop over dense buffers, with the
//! kernel's exact-angle table and the same f32 arithmetic (the table's host twin of the angle);
//! the q/k norm's sum of squares is added in row order (the kernel adds per-unit partial sums).

use crate::common::PoolTensor;
use crate::common::flex::{Storage, dense, indices};
use crate::op::backend::{Outputs, QkNorm, RopePoolBackend, RopePoolInputs, no_rows};
use crate::op::rope::{RopeFrequencies, RopeStyle};
use burn::backend::TensorMetadata;
use burn::tensor::{DType, Element};
use burn_flex::{Flex, FlexTensor, Layout};
use half::{bf16, f16};
use rope_pool_kernels::common::fp8::encode_host;
use std::sync::Arc;

/// Rotates every head row of `src` (one token's heads, `head_dim` each) into `dst` with the
/// token's cos/sin (`rotary_dim / 2` each): NeoX halves or GPT-J pairs over the first
/// `rotary_dim` elements, the rest copied.
fn rotate_rows<E: Storage, O: Storage>(
    src: &[E],
    dst: &mut [O],
    head_dim: usize,
    style: RopeStyle,
    cos: &[f32],
    sin: &[f32],
) {
    let half = cos.len();
    for (src, dst) in src
        .chunks_exact(head_dim)
        .zip(dst.chunks_exact_mut(head_dim))
    {
        for i in 0..half {
            let (lo, hi) = match style {
                RopeStyle::Neox => (i, i + half),
                RopeStyle::Gptj => (2 * i, 2 * i + 1),
            };
            let (a, b) = (src[lo].to_f32(), src[hi].to_f32());
            dst[lo] = O::from_f32(a * cos[i] - b * sin[i]);
            dst[hi] = O::from_f32(a * sin[i] + b * cos[i]);
        }
        for (d, s) in dst[2 * half..].iter_mut().zip(&src[2 * half..]) {
            *d = O::from_f32(s.to_f32());
        }
    }
}

/// Every head row of `x` (rows of `w.len()` elements) RMS-normalised as the q/k norm does:
/// `w · cast(x · rsqrt(mean(x²) + eps))`, the mean and scaling in f32, rounded to `E` once before
/// and once after the weight.
fn head_norm<E: Storage>(x: &[E], w: &[E], eps: f32) -> Vec<E> {
    let head_dim = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(head_dim) {
        let sum: f32 = row.iter().map(|v| v.to_f32() * v.to_f32()).sum();
        let scale = 1.0 / (sum / head_dim as f32 + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(v, w)| {
            let n = E::from_f32(v.to_f32() * scale);
            E::from_f32(n.to_f32() * w.to_f32())
        }));
    }
    out
}

/// The op in one pass over the batch: every row of `q_rot` and `k_rot`, and the pool rows of the
/// tokens whose slot is in `0..pool_size`.
fn run<E: Storage + Element + bytemuck::Pod>(
    inputs: RopePoolInputs<Flex>,
    rope: &RopeFrequencies,
    k_rot: bool,
    qk_norm_eps: f32,
) -> Outputs<Flex> {
    let (q, k, v) = (dense(inputs.q), dense(inputs.k), dense(inputs.v));
    let norm = match inputs.qk_norm {
        QkNorm::None => None,
        QkNorm::Rms { q_weight, k_weight } => Some([dense(q_weight), dense(k_weight)]),
    };
    // The pools (fp8: their words) and the fp8 scales (validation pairs the two pools' kinds).
    let (k_pool, k_scale) = inputs.k_pool.into_stored();
    let (v_pool, v_scale) = inputs.v_pool.into_stored();
    let (mut k_pool, mut v_pool) = (dense(k_pool), dense(v_pool));
    let scales = k_scale.zip(v_scale);
    let (positions, slots) = (indices(inputs.positions), indices(inputs.slots));
    let [num_tokens, num_qo_heads, head_dim] = q.shape().dims();
    let (q_row, kv_row) = (num_qo_heads * head_dim, k.shape()[1] * head_dim);
    let pool_size = k_pool.shape()[0];
    let mut q_out = vec![E::from_f32(0.0); q.shape().num_elements()];
    let mut k_out = vec![E::from_f32(0.0); k.shape().num_elements()];
    let (mut q_in, mut k_in, v_in) = (q.storage::<E>(), k.storage::<E>(), v.storage::<E>());
    let normed = norm.as_ref().map(|[wq, wk]| {
        let eps = qk_norm_eps;
        [(q_in, wq), (k_in, wk)].map(|(x, w)| head_norm(x, w.storage::<E>(), eps))
    });
    if let Some([nq, nk]) = &normed {
        (q_in, k_in) = (nq, nk);
    }
    // Copy-on-write: a pool still held elsewhere is copied here, never changed under its other
    // holder.
    let mut rows = match scales {
        Some((ks, vs)) => Rows::Fp8(
            k_pool.storage_mut::<u32>(),
            v_pool.storage_mut::<u32>(),
            (1.0 / ks, 1.0 / vs),
        ),
        None => Rows::Float(k_pool.storage_mut::<E>(), v_pool.storage_mut::<E>()),
    };
    // fp8: a token's rotated keys in f32, encoded from there as the kernel does.
    let mut k_f32 = vec![0f32; kv_row];
    let table = &rope.table;
    let half = table.half();
    // Like the kernel, every position is an i32 (a wider one wraps), the largest one included.
    let max_position = positions
        .iter()
        .map(|&p| p as i32)
        .max()
        .unwrap_or(i32::MIN);
    let long = table.uses_long(max_position as i64);
    let (mut cos, mut sin) = (vec![0f32; half], vec![0f32; half]);
    for (token, &slot) in slots.iter().enumerate() {
        // Frequency `i` turns at its M-RoPE row's position (row 0 without M-RoPE).
        let position = |i: usize| positions[rope.row(i) * num_tokens + token] as i32;
        table.cos_sin(position, long, &mut cos, &mut sin);
        let (qs, ks) = (token * q_row, token * kv_row);
        let (q_src, q_dst) = (&q_in[qs..qs + q_row], &mut q_out[qs..qs + q_row]);
        rotate_rows(q_src, q_dst, head_dim, rope.style, &cos, &sin);
        let (k_src, k_dst) = (&k_in[ks..ks + kv_row], &mut k_out[ks..ks + kv_row]);
        rotate_rows(k_src, k_dst, head_dim, rope.style, &cos, &sin);
        if slot >= 0 && (slot as u64) < pool_size as u64 {
            let ps = slot as usize * kv_row;
            match &mut rows {
                Rows::Float(k_rows, v_rows) => {
                    k_rows[ps..ps + kv_row].copy_from_slice(&k_out[ks..ks + kv_row]);
                    v_rows[ps..ps + kv_row].copy_from_slice(&v_in[ks..ks + kv_row]);
                }
                Rows::Fp8(k_words, v_words, (k_inv, v_inv)) => {
                    let k_src = &k_in[ks..ks + kv_row];
                    rotate_rows(k_src, &mut k_f32, head_dim, rope.style, &cos, &sin);
                    let words = ps / 4..(ps + kv_row) / 4;
                    pack(k_f32.iter().copied(), *k_inv, &mut k_words[words.clone()]);
                    let v_src = v_in[ks..ks + kv_row].iter().map(|x| x.to_f32());
                    pack(v_src, *v_inv, &mut v_words[words]);
                }
            }
        }
    }
    let output = |values: Vec<E>, like: &FlexTensor| {
        FlexTensor::new(
            burn::tensor::Bytes::from_elems(values),
            Layout::contiguous(like.shape()),
            like.dtype(),
        )
    };
    // The host loop forms the rotated keys anyway (the pool rows copy them); without k_rot the
    // output is the empty `[0, Hkv, D]`.
    let k_rot = if k_rot {
        output(k_out, &k)
    } else {
        FlexTensor::new(
            burn::tensor::Bytes::from_elems(Vec::<E>::new()),
            Layout::contiguous(no_rows(&k.shape())),
            k.dtype(),
        )
    };
    (
        output(q_out, &q),
        k_rot,
        PoolTensor::from_stored(k_pool, k_scale),
        PoolTensor::from_stored(v_pool, v_scale),
    )
}

/// The pool rows a call writes: float rows of `E`, or fp8 words with the `1 / scale`s.
enum Rows<'a, E> {
    Float(&'a mut [E], &'a mut [E]),
    Fp8(&'a mut [u32], &'a mut [u32], (f32, f32)),
}

/// `values · inv_scale` as e4m3 codes, four to a word of `out` (the kernel's packing).
fn pack(values: impl Iterator<Item = f32>, inv_scale: f32, out: &mut [u32]) {
    out.fill(0);
    for (i, x) in values.enumerate() {
        out[i / 4] |= u32::from(encode_host(x * inv_scale)) << (8 * (i % 4));
    }
}

impl RopePoolBackend for Flex {
    fn rope_pool_fused(
        inputs: RopePoolInputs<Self>,
        rope: Arc<RopeFrequencies>,
        k_rot: bool,
        qk_norm_eps: f32,
    ) -> Outputs<Self> {
        let eps = qk_norm_eps;
        match inputs.q.dtype() {
            DType::F32 => run::<f32>(inputs, &rope, k_rot, eps),
            DType::F16 => run::<f16>(inputs, &rope, k_rot, eps),
            DType::BF16 => run::<bf16>(inputs, &rope, k_rot, eps),
            dtype => panic!("rope_pool_fused: unsupported dtype {dtype:?} (validated upstream)"),
        }
    }
}
