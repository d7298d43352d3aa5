//! The Flex (pure-Rust CPU) implementation: one host pass per query head; scores rounded to
//! f32 as the GPU kernel's are, sums in f64.

use crate::common::flex::{Storage, dense, indices};
use crate::pool::attention::backend::{AttentionParams, AttentionTensors, PoolAttentionBackend};
use burn::backend::TensorMetadata;
use burn::tensor::{DType, Element};
use burn_flex::{Flex, FlexTensor, Layout};
use half::{bf16, f16};
use rope_pool_kernels::common::fp8::decode_host;

fn run<E: Storage + Element + bytemuck::Pod>(
    inputs: AttentionTensors<Flex>,
    params: AttentionParams,
) -> (FlexTensor, FlexTensor) {
    let (k_pool, k_scale) = inputs.k_pool.into_stored();
    let (v_pool, v_scale) = inputs.v_pool.into_stored();
    let q = dense(inputs.q);
    let (k_pool, v_pool) = (dense(k_pool), dense(v_pool));
    let (kv_indices, ranges) = (indices(inputs.kv_indices), indices(inputs.ranges));
    let [num_tokens, hq, d] = q.shape().dims();
    let [pool_size, hkv, _] = k_pool.shape().dims();
    let group = hq / hkv.max(1);
    let q_in = q.storage::<E>();
    let (k_in, v_in) = (
        Elements::<E>::of(&k_pool, k_scale),
        Elements::<E>::of(&v_pool, v_scale),
    );
    let mut out = vec![E::from_f32(0.0); num_tokens * hq * d];
    let mut lse = vec![f32::NEG_INFINITY; num_tokens * hq];
    let (mut scores, mut rows, mut acc) = (Vec::new(), Vec::new(), vec![0f64; d]);
    for t in 0..num_tokens {
        let (first, count) = (ranges[2 * t] as usize, ranges[2 * t + 1] as usize);
        rows.clear();
        rows.extend(
            kv_indices[first..first + count]
                .iter()
                .filter(|&&r| r >= 0 && (r as usize) < pool_size)
                .map(|&r| r as usize),
        );
        for h in 0..hq {
            let qh = &q_in[(t * hq + h) * d..][..d];
            let kv = h / group;
            scores.clear();
            scores.extend(rows.iter().map(|&r| {
                let k = (r * hkv + kv) * d;
                // f64 on the host: the sum of a long head row stays exact to f32 rounding.
                let dot: f64 = qh
                    .iter()
                    .enumerate()
                    .map(|(j, a)| a.to_f32() as f64 * k_in.value(k + j) as f64)
                    .sum();
                let s = (dot * params.sm_scale as f64) as f32;
                match params.soft_cap {
                    Some(cap) => cap * (s / cap).tanh(),
                    None => s,
                }
            }));
            if scores.is_empty() {
                continue;
            }
            let max = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
            acc.iter_mut().for_each(|a| *a = 0.0);
            let mut sum = 0f64;
            for (&r, &s) in rows.iter().zip(&scores) {
                let w = (s as f64 - max).exp();
                sum += w;
                let v = (r * hkv + kv) * d;
                for (j, a) in acc.iter_mut().enumerate() {
                    *a += w * v_in.value(v + j) as f64;
                }
            }
            lse[t * hq + h] = (max + sum.ln()) as f32;
            let o = &mut out[(t * hq + h) * d..][..d];
            for (o, a) in o.iter_mut().zip(&acc) {
                *o = E::from_f32((a / sum) as f32);
            }
        }
    }
    let out = FlexTensor::new(
        burn::tensor::Bytes::from_elems(out),
        Layout::contiguous(q.shape()),
        q.dtype(),
    );
    let lse = FlexTensor::new(
        burn::tensor::Bytes::from_elems(lse),
        Layout::contiguous([num_tokens, hq].into()),
        DType::F32,
    );
    (out, lse)
}

/// A pool's elements: float values of `E`, or fp8 words of four e4m3 codes and their scale.
enum Elements<'a, E> {
    Float(&'a [E]),
    Fp8(&'a [u32], f32),
}

impl<'a, E: Storage + Element + bytemuck::Pod> Elements<'a, E> {
    /// The elements of `pool`: fp8 words with `scale`, else values of `E`.
    fn of(pool: &'a FlexTensor, scale: Option<f32>) -> Self {
        match scale {
            Some(scale) => Elements::Fp8(pool.storage::<u32>(), scale),
            None => Elements::Float(pool.storage::<E>()),
        }
    }

    /// Element `i` (of the `[P, Hkv, D]` pool) as f32.
    fn value(&self, i: usize) -> f32 {
        match self {
            Elements::Float(values) => values[i].to_f32(),
            Elements::Fp8(words, scale) => {
                let code = (words[i / 4] >> (8 * (i % 4))) & 0xFF;
                decode_host(code as u8) * scale
            }
        }
    }
}

impl PoolAttentionBackend for Flex {
    fn pool_attention(
        inputs: AttentionTensors<Self>,
        params: AttentionParams,
    ) -> (FlexTensor, FlexTensor) {
        match inputs.q.dtype() {
            DType::F32 => run::<f32>(inputs, params),
            DType::F16 => run::<f16>(inputs, params),
            DType::BF16 => run::<bf16>(inputs, params),
            dtype => panic!("pool_attention: unsupported dtype {dtype:?} (validated upstream)"),
        }
    }
}
