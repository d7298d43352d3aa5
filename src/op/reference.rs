//! A slow float64 reference of the op, straight from the contract's math: the oracle of the
//! tests and of the `replay` example. Its frequencies are [`RopeFrequencies`]' float64 ones;
//! the angle, the pairs and the pass-through tail are formed here in f64, independently of the
//! kernel's exact-angle table. The fp8 e4m3 encoder and decoder here are written from the
//! format's definition, in f64, independently of the kernels' integer arithmetic.

use crate::op::RopePoolConfig;
use crate::op::rope::{RopeFrequencies, RopeStyle};

/// The four outputs of [`rope_pool_reference`], dense row-major in f64.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceOutput {
    /// `[T, Hq, D]`
    pub q_rot: Vec<f64>,
    /// `[T, Hkv, D]`
    pub k_rot: Vec<f64>,
    /// `[P, Hkv, D]`
    pub k_pool: Vec<f64>,
    /// `[P, Hkv, D]`
    pub v_pool: Vec<f64>,
}

/// Rotates every head row of `x` (rows of `head_dim`, one token per `row_len` elements) at
/// `positions` (`[T]`, or `[3, T]` with M-RoPE), in f64 from the contract's math.
fn rotate(
    x: &[f64],
    positions: &[i64],
    row_len: usize,
    config: &RopePoolConfig,
    rope: &RopeFrequencies,
) -> Vec<f64> {
    let d = config.head_dim;
    let half = config.rotary_dim() / 2;
    let num_tokens = x.len().checked_div(row_len).unwrap_or(0);
    let max_position = positions.iter().copied().max().unwrap_or(0);
    let inv_freq = rope.inv_freq_at(max_position);
    let scale = rope.attention_factor;
    let mut out = x.to_vec();
    for t in 0..num_tokens {
        for h in 0..row_len / d {
            let base = t * row_len + h * d;
            for (i, &inv_freq) in inv_freq.iter().enumerate() {
                let position = positions[rope.row(i) * num_tokens + t];
                let (s, c) = (position as f64 * inv_freq).sin_cos();
                let (s, c) = (s * scale, c * scale);
                let (lo, hi) = match rope.style {
                    RopeStyle::Neox => (base + i, base + i + half),
                    RopeStyle::Gptj => (base + 2 * i, base + 2 * i + 1),
                };
                let (x1, x2) = (x[lo], x[hi]);
                out[lo] = x1 * c - x2 * s;
                out[hi] = x1 * s + x2 * c;
            }
        }
    }
    out
}

/// The q/k norm in f64: every head row of `x` (rows of `weight.len()` elements) as
/// `weight · x / sqrt(mean(x²) + eps)`, with no rounding. The reference of a call with a q/k norm
/// is [`rope_pool_reference`] on `q` and `k` passed through this.
pub fn head_rms_norm(x: &[f64], weight: &[f64], eps: f64) -> Vec<f64> {
    let d = weight.len();
    x.chunks_exact(d)
        .flat_map(|row| {
            let mean = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
            let scale = 1.0 / (mean + eps).sqrt();
            row.iter().zip(weight).map(move |(v, w)| w * (v * scale))
        })
        .collect()
}

/// The op in f64 on dense row-major buffers whose shapes follow `config` (`q.len() / (Hq * D)`
/// tokens, `k_pool.len() / (Hkv * D)` pool rows; `positions` `[T]`, or `[3, T]` with M-RoPE).
///
/// # Panics
/// When `config` is invalid (see [`RopePoolConfig::frequencies`]).
pub fn rope_pool_reference(
    config: &RopePoolConfig,
    [q, k, v]: [&[f64]; 3],
    positions: &[i64],
    slots: &[i64],
    [k_pool, v_pool]: [&[f64]; 2],
) -> ReferenceOutput {
    let rope = config.frequencies().expect("a valid config");
    let kv_row = config.num_kv_heads * config.head_dim;
    let q_row = config.num_qo_heads * config.head_dim;
    let q_rot = rotate(q, positions, q_row, config, &rope);
    let k_rot = rotate(k, positions, kv_row, config, &rope);
    let (mut k_pool, mut v_pool) = (k_pool.to_vec(), v_pool.to_vec());
    let pool_size = k_pool.len() / kv_row;
    for (t, &slot) in slots.iter().enumerate() {
        if slot >= 0 && (slot as usize) < pool_size {
            let (dst, src) = (slot as usize * kv_row, t * kv_row);
            k_pool[dst..dst + kv_row].copy_from_slice(&k_rot[src..src + kv_row]);
            v_pool[dst..dst + kv_row].copy_from_slice(&v[src..src + kv_row]);
        }
    }
    ReferenceOutput {
        q_rot,
        k_rot,
        k_pool,
        v_pool,
    }
}

/// The value of e4m3 code `code`, from the format's definition (NaN for `0x7F`, `0xFF`): the
/// host reference the kernels' integer decoder is checked against.
pub fn e4m3_value(code: u8) -> f64 {
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exponent, mantissa) = (i32::from((code >> 3) & 0xF), f64::from(code & 7));
    if code & 0x7F == 0x7F {
        f64::NAN
    } else if exponent == 0 {
        sign * mantissa * 2f64.powi(-9)
    } else {
        sign * (1.0 + mantissa / 8.0) * 2f64.powi(exponent - 7)
    }
}

/// The e4m3 code of `x` (float64), from the format's definition: round to nearest even,
/// saturating to ±448, NaN to `0x7F` (with the sign). The host reference of the kernels' encoder.
pub fn e4m3_code(x: f64) -> u8 {
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return sign | 0x7F;
    }
    let a = x.abs().min(448.0);
    if a == 0.0 {
        return sign;
    }
    // Below 2^-6 the quantum stays 2^-9 (subnormals).
    let exponent = a.log2().floor().max(-6.0) as i32;
    let quantum = 2f64.powi(exponent - 3);
    let units = (a / quantum).round_ties_even();
    let value = units * quantum;
    if value < 2f64.powi(-6) {
        return sign | units as u8;
    }
    let exponent = value.log2().floor() as i32;
    let mantissa = (value / 2f64.powi(exponent) * 8.0) as u8 - 8;
    sign | (((exponent + 7) as u8) << 3) | mantissa
}
