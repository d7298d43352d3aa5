//! Exact RoPE angles in f32 arithmetic (no float64, no fma: Metal and WGSL have neither
//! reliably), for every i32 position, negative ones included.
//!
//! The naive angle `f32(position) * f32(inv_freq)` is off by up to ~4e-3 rad at position 131071
//! and ~0.03 rad at 10^6. Here the angle is formed in *turns* (`position * inv_freq / 2π`) from
//! products that are exact in f32, each reduced modulo one turn exactly:
//!
//! - host, in f64: `f = inv_freq / 2π` split into `f1 + f2 + f3`, where `f1` and `f2` carry 12
//!   significant bits each and `f3` the rest (rounded to f32); for large positions also
//!   `f1 + f2 + g3 + g4`, `g3` the next 12 bits and `g4` the rest;
//! - device: the position's two's-complement bits split into `p_lo = p & 0xfff`,
//!   `p_mid = p & 0xfff000` and `p_top = p & !0xffffff` (each exact in f32 with at most 12
//!   significant bits; `p_top` is 0 below 2^24), so `p_mid*f1`, `p_lo*f1`, `p_mid*f2`, `p_lo*f2`
//!   are exact; each loses its whole turns exactly (`x - round(x)`); `(p_mid + p_lo) * f3` is at
//!   most two turns, so its rounding is at f32's level; the sum of the fractions is reduced once
//!   more and scaled by 2π into `[-π, π]`, where f32 sin/cos are accurate;
//! - only when `p_top ≠ 0` (|p| ≥ 2^24, or p < 0), on a branch that reads `g3` and `g4` (the
//!   common path reads three parts, as below 2^24 it always did): `p_top*f1`, `p_top*f2` and
//!   `p_top*g3` are exact too and reduced the same way, and `p_top*g4` is below a quarter of a
//!   turn.
//!
//! The result is within a few f32 roundings of the true angle modulo 2π for every i32 position
//! (tested over the whole range: `kernels/tests/angle.rs`). [`host_angle`] is the same algorithm
//! on the host (used by the Flex backend and to test the method over the range cheaply).

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

/// Segments of the per-frequency constants: `[f1 | f2 | f3 | g3 | g4]`.
pub(crate) const TURN_PARTS: usize = 5;

/// The per-frequency constants of the kernel: `[f1 | f2 | f3 | g3 | g4]`, each `inv_freq.len()`
/// long, with `f1 + f2 + f3 = inv_freq[i] / 2π` to ~2^-48 relative and `f1 + f2 + g3 + g4` to
/// ~2^-60.
pub fn split_turns(inv_freq: &[f64]) -> Vec<f32> {
    let half = inv_freq.len();
    let mut table = vec![0f32; TURN_PARTS * half];
    for (i, &inv_freq) in inv_freq.iter().enumerate() {
        let f = inv_freq / std::f64::consts::TAU;
        let f1 = leading_bits(f);
        let f2 = leading_bits(f - f1);
        let g3 = leading_bits(f - f1 - f2);
        table[i] = f1 as f32;
        table[half + i] = f2 as f32;
        table[2 * half + i] = (f - f1 - f2) as f32;
        table[3 * half + i] = g3 as f32;
        table[4 * half + i] = (f - f1 - f2 - g3) as f32;
    }
    table
}

/// `x` minus its nearest integer: exact in floating point, in `[-0.5, 0.5]`.
fn frac(x: f32) -> f32 {
    x - x.round_ties_even()
}

/// The angle (radians, in `[-π, π]`) of `position` for the frequency with parts `f` of
/// [`split_turns`]; the host twin of the kernel's `rope_angle`.
pub fn host_angle(position: i32, f: [f32; TURN_PARTS]) -> f32 {
    let [f1, f2, f3, g3, g4] = f;
    let p_low = (position & 0xff_ffff) as f32;
    let p_lo = (position & 0xfff) as f32;
    let p_mid = (position & 0xff_f000) as f32;
    let small = p_low * f3 + frac(p_lo * f2);
    let mut turns = ((small + frac(p_mid * f2)) + frac(p_lo * f1)) + frac(p_mid * f1);
    let top = position & !0xff_ffff;
    if top != 0 {
        let p_top = top as f32;
        turns += ((p_top * g4 + frac(p_top * g3)) + frac(p_top * f2)) + frac(p_top * f1);
    }
    frac(turns) * std::f32::consts::TAU
}

#[cube]
fn frac_vector<N: Size>(x: Vector<f32, N>) -> Vector<f32, N> {
    x - x.round()
}

/// The parts of a position the angle needs, as f32 vectors (one value broadcast to the `N`
/// lanes, or one per lane): `(low, mid, lo, top, big)` with `low = p & 0xffffff`,
/// `mid = p & 0xfff000`, `lo = p & 0xfff`, `top = p & !0xffffff`, and `big` whether any lane's
/// `top` is non-zero.
pub(crate) type PositionParts<N> = (
    Vector<f32, N>,
    Vector<f32, N>,
    Vector<f32, N>,
    Vector<f32, N>,
    bool,
);

/// [`PositionParts`] of one position for all `N` lanes: one scalar conversion each.
#[cube]
pub(crate) fn position_parts<N: Size>(position: i32) -> PositionParts<N> {
    let top = position & -16777216i32;
    (
        Vector::new(f32::cast_from(position & 16777215i32)),
        Vector::new(f32::cast_from(position & 16773120i32)),
        Vector::new(f32::cast_from(position & 4095i32)),
        Vector::new(f32::cast_from(top)),
        top != 0,
    )
}

/// [`PositionParts`] of a position per lane (M-RoPE gives the lanes of one unit different rows);
/// `big` is given by the caller (whether any of the rows' positions has a non-zero `top`).
#[cube]
pub(crate) fn lane_position_parts<N: Size>(
    position: Vector<i32, N>,
    big: bool,
) -> PositionParts<N> {
    (
        Vector::cast_from(position & Vector::new(16777215i32)),
        Vector::cast_from(position & Vector::new(16773120i32)),
        Vector::cast_from(position & Vector::new(4095i32)),
        Vector::cast_from(position & Vector::new(-16777216i32)),
        big,
    )
}

/// Whether `position` needs the `top` terms of the angle (|p| ≥ 2^24 or p < 0).
#[cube]
pub(crate) fn is_big(position: i32) -> bool {
    (position & -16777216i32) != 0
}

/// The angles (radians, in `[-π, π]`) of `N` frequencies at the positions whose parts are
/// `parts`, with the frequency parts at `table[at + j * step]` (`j` the part of
/// [`split_turns`]); see the module docs.
#[cube]
pub(crate) fn rope_angle<N: Size>(
    parts: PositionParts<N>,
    table: &Tensor<Vector<f32, N>>,
    at: usize,
    step: usize,
) -> Vector<f32, N> {
    let (low, mid, lo, top, big) = parts;
    let (f1, f2, f3) = (table[at], table[at + step], table[at + 2 * step]);
    let small = low * f3 + frac_vector::<N>(lo * f2);
    let mut turns = ((small + frac_vector::<N>(mid * f2)) + frac_vector::<N>(lo * f1))
        + frac_vector::<N>(mid * f1);
    if big {
        let (g3, g4) = (table[at + 3 * step], table[at + 4 * step]);
        turns += ((top * g4 + frac_vector::<N>(top * g3)) + frac_vector::<N>(top * f2))
            + frac_vector::<N>(top * f1);
    }
    frac_vector::<N>(turns) * Vector::new(core::f32::consts::TAU)
}
