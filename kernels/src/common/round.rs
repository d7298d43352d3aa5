//! Rounding in integer arithmetic, so that every device rounds the same bits: a conversion to a
//! narrower float and back did not round on the H100 through Vulkan (`benches/NOTES.md`,
//! "Split-K shares summed by the next kernel").

use cubecl::prelude::*;

/// `full >> shift` rounded to nearest, ties to even (`shift` in 1..=31).
#[cube]
pub(crate) fn shifted_to_even(full: u32, shift: u32) -> u32 {
    let units = full >> shift;
    let rest = full & ((1 << shift) - 1);
    let half = 1u32 << (shift - 1);
    let up = rest > half || (rest == half && (units & 1) == 1);
    units + select(up, 1, 0)
}

/// `x` rounded to the nearest f16 (ties to even; past 65504 an infinity), as an f32, in integer
/// arithmetic (a conversion to f16 and back may not round), as the staged launch's stored sum of
/// a product's shares is rounded.
#[cube]
pub(crate) fn round_to_f16(x: f32) -> f32 {
    let bits = u32::reinterpret(x);
    let sign = bits & 0x8000_0000;
    let mag = bits & 0x7FFF_FFFF;
    // Normal (2^-14 and up): the 23-bit mantissa rounded to 10 bits, to even; a carry moves into
    // the exponent; past the largest f16 (65504), infinity.
    let mut normal = (mag + 0xFFF + ((mag >> 13) & 1)) & 0xFFFF_E000;
    normal = select(normal > 0x477F_E000, 0x7F80_0000, normal);
    // Subnormal (below 2^-14): the magnitude in units of 2^-24, rounded to even. Its significand
    // `full` times 2^(exp - 150) is that many units shifted right by `126 - exp` (>= 14 there;
    // clamped to 1..=31 for every exponent, the result only used below 2^-14).
    let exp = mag >> 23;
    let full = (mag & 0x7F_FFFF) | 0x80_0000;
    let units = shifted_to_even(full, (126 - exp.min(125)).min(31));
    // At most 1024 units: exact in f32, and so is the product by 2^-24.
    let small = u32::reinterpret(f32::cast_from(units) * 5.960_464_5e-8);
    let rounded = select(mag >= 0x3880_0000, normal, small);
    // Infinities and NaNs as they are.
    f32::reinterpret(sign | select(mag >= 0x7F80_0000, mag, rounded))
}
