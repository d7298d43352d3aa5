//! Exact RoPE angles in f32 arithmetic (no float64, no fma: Metal and WGSL have neither
//! reliably).
//!
//! The naive angle `f32(position) * f32(inv_freq)` is off by up to ~4e-3 rad at position 131071
//! and ~0.03 rad at 10^6. Here the angle is formed in *turns* (`position * inv_freq / 2π`) from
//! products that are exact in f32, each reduced modulo one turn exactly:
//!
//! - host, in f64: `f = inv_freq / 2π` split into `f1 + f2 + f3`, where `f1` and `f2` carry 12
//!   significant bits each and `f3` the rest (rounded to f32);
//! - device: `position = p_hi + p_lo` with `p_lo = position & 0xfff` (both exact in f32, with at
//!   most 12 significant bits each below 2^24), so `p_hi*f1`, `p_lo*f1`, `p_hi*f2`, `p_lo*f2`
//!   are exact; each loses its whole turns exactly (`x - round(x)`); `position * f3` is below
//!   one turn's 2^-24 relative error; the sum of the fractions is reduced once more and scaled
//!   by 2π into `[-π, π]`, where f32 sin/cos are accurate.
//!
//! The result is within a few f32 roundings of the true angle modulo 2π for every position
//! below 2^24 (beyond, `p_hi` has more than 12 bits and the error grows gracefully). [`host_angle`] is the same algorithm on the host (used by the Flex backend and to
//! test the method over the whole position range cheaply).

use cubecl::prelude::*;

/// Significant bits kept in each of the two leading parts of a frequency.
const PART_BITS: i32 = 12;

/// `x` rounded to `PART_BITS` significant bits (towards zero), exactly representable in f32.
fn leading_bits(x: f64) -> f64 {
    // Below f32's normal range the part would not fit f32 anyway (and the scale would overflow).
    if x.abs() < f32::MIN_POSITIVE as f64 {
        return 0.0;
    }
    let scale = 2f64.powi(PART_BITS - 1 - x.abs().log2().floor() as i32);
    (x * scale).trunc() / scale
}

/// The per-frequency constants of the kernel: `[f1 | f2 | f3]`, each `inv_freq.len()` long, with
/// `f1 + f2 + f3 = inv_freq[i] / 2π` to ~2^-48 relative.
pub fn split_turns(inv_freq: &[f64]) -> Vec<f32> {
    let half = inv_freq.len();
    let mut table = vec![0f32; 3 * half];
    for (i, &inv_freq) in inv_freq.iter().enumerate() {
        let f = inv_freq / std::f64::consts::TAU;
        let f1 = leading_bits(f);
        let f2 = leading_bits(f - f1);
        table[i] = f1 as f32;
        table[half + i] = f2 as f32;
        table[2 * half + i] = (f - f1 - f2) as f32;
    }
    table
}

/// `x` minus its nearest integer: exact in floating point, in `[-0.5, 0.5]`.
fn frac(x: f32) -> f32 {
    x - x.round_ties_even()
}

/// The angle (radians, in `[-π, π]`) of `position` for the frequency with parts `f1, f2, f3` of
/// [`split_turns`]; the host twin of the kernel's `rope_angle`.
pub fn host_angle(position: i32, f1: f32, f2: f32, f3: f32) -> f32 {
    let p_lo = (position & 0xfff) as f32;
    let p_hi = (position & !0xfff) as f32;
    let small = position as f32 * f3 + frac(p_lo * f2);
    let turns = ((small + frac(p_hi * f2)) + frac(p_lo * f1)) + frac(p_hi * f1);
    frac(turns) * std::f32::consts::TAU
}

#[cube]
fn frac_vector<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    x - x.round()
}

/// `position` as the three f32 vectors the angle needs, `(p, p_hi, p_lo)` with
/// `p_lo = position & 0xfff`: one scalar conversion each, broadcast to the `N` lanes.
#[cube]
pub fn position_parts<N: Size>(position: i32) -> (Vector<f32, N>, Vector<f32, N>, Vector<f32, N>) {
    (
        Vector::new(f32::cast_from(position)),
        Vector::new(f32::cast_from(position & -4096i32)),
        Vector::new(f32::cast_from(position & 4095i32)),
    )
}

/// [`position_parts()`] of a position per lane (M-RoPE gives the lanes of one unit different
/// rows).
#[cube]
pub fn lane_position_parts<N: Size>(
    position: Vector<i32, N>,
) -> (Vector<f32, N>, Vector<f32, N>, Vector<f32, N>) {
    (
        Vector::cast_from(position),
        Vector::cast_from(position & Vector::new(-4096i32)),
        Vector::cast_from(position & Vector::new(4095i32)),
    )
}

/// The angles (radians, in `[-π, π]`) of `N` frequencies at the positions whose parts are
/// `(p, p_hi, p_lo)` ([`position_parts()`]); see the module docs.
#[cube]
pub fn rope_angle<N: Size>(
    parts: (Vector<f32, N>, Vector<f32, N>, Vector<f32, N>),
    f1: Vector<f32, N>,
    f2: Vector<f32, N>,
    f3: Vector<f32, N>,
) -> Vector<f32, N> {
    let (p, p_hi, p_lo) = parts;
    let small = p * f3 + frac_vector::<N>(p_lo * f2);
    let turns = ((small + frac_vector::<N>(p_hi * f2)) + frac_vector::<N>(p_lo * f1))
        + frac_vector::<N>(p_hi * f1);
    frac_vector::<N>(turns) * Vector::new(core::f32::consts::TAU)
}
