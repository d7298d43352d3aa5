//! A slow float64 reference of the op, straight from the contract's math: the oracle of the
//! tests and of the `replay` example.

use crate::RopePoolConfig;

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

/// Rotates every head row of `x` (rows of `head_dim`, one token per `row_len` elements).
fn rotate(x: &[f64], positions: &[i64], row_len: usize, config: &RopePoolConfig) -> Vec<f64> {
    let d = config.head_dim;
    let half = d / 2;
    let mut out = x.to_vec();
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..row_len / d {
            let base = t * row_len + h * d;
            for i in 0..half {
                let inv_freq = config.rope_base.powf(-2.0 * i as f64 / d as f64);
                let (s, c) = (pos as f64 * inv_freq).sin_cos();
                let (x1, x2) = (x[base + i], x[base + i + half]);
                out[base + i] = x1 * c - x2 * s;
                out[base + i + half] = x1 * s + x2 * c;
            }
        }
    }
    out
}

/// The op in f64 on dense row-major buffers whose shapes follow `config` (`q.len() / (Hq * D)`
/// tokens, `k_pool.len() / (Hkv * D)` pool rows).
#[allow(clippy::too_many_arguments)]
pub fn rope_pool_reference(
    config: &RopePoolConfig,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    positions: &[i64],
    slots: &[i64],
    k_pool: &[f64],
    v_pool: &[f64],
) -> ReferenceOutput {
    let kv_row = config.num_kv_heads * config.head_dim;
    let q_rot = rotate(q, positions, config.num_qo_heads * config.head_dim, config);
    let k_rot = rotate(k, positions, kv_row, config);
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

/// Norm-relative error `‖actual − expected‖ / ‖expected‖` (absolute norm when `expected` is 0).
pub fn norm_relative_error(actual: &[f64], expected: &[f64]) -> f64 {
    let diff: f64 = actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e) * (a - e))
        .sum();
    let norm: f64 = expected.iter().map(|e| e * e).sum();
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// Largest `|actual − expected|`; NaN anywhere makes it NaN.
pub fn max_abs_error(actual: &[f64], expected: &[f64]) -> f64 {
    actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, |m: f64, d| {
            if d.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(d)
            }
        })
}
