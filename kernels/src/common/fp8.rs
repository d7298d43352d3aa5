//! fp8 e4m3 (OCP FP8 "E4M3FN": 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no
//! infinities; `0x7F`/`0xFF` are NaN; largest finite 448) in integer arithmetic only, so every
//! backend — WGSL included, which has neither fp8 nor u8 — encodes and decodes the same bits:
//! - `e4m3_encode()`: f32 → code, round to nearest even, saturating (anything past 448, ∞
//!   included, becomes ±448; NaN stays NaN; f32 subnormals become ±0);
//! - four codes to a `u32`, element `i` of four in bits `8i..8i + 8` (the bytes of an fp8 tensor
//!   in memory on a little-endian machine), with one scale: stored code = e4m3(x · (1 / scale))
//!   (`pack_e4m3()`), read back exactly as code value × scale (`unpack_e4m3()`).
//!
//! Reads may instead go through f16 halves (`halves_raw()`) or CubeCL's fp8 type
//! (`native_raw()`) where the device runs them ([`Fp8Decode`]): the same values, before the
//! scale (`decode_raw()`; `decode_codes()` applies it).
//!
//! [`encode_host`] and [`decode_host`] are the same arithmetic on the host.

use super::launch::Compiler;
use super::round::shifted_to_even;
use cubecl::e4m3;
use cubecl::prelude::*;
use half::f16;

/// The vector width of a call with fp8 pools: four elements, one word of codes.
pub const FP8_VECTOR: usize = 4;

/// `2^-6` as f32 bits: the smallest normal e4m3 magnitude.
const MIN_NORMAL_BITS: u32 = 0x3C80_0000;
/// 448 as f32 bits: the largest finite e4m3 magnitude.
const MAX_BITS: u32 = 0x43E0_0000;
/// f32 exponent bias minus e4m3's (127 - 7), in place above the three mantissa bits.
const REBIAS: u32 = 120 << 3;

/// The e4m3 code (low 8 bits) of `x`: round to nearest even, saturating to ±448.
#[cube]
pub(crate) fn e4m3_encode(x: f32) -> u32 {
    let bits = u32::reinterpret(x);
    let sign = (bits >> 24) & 0x80;
    let mag = bits & 0x7FFF_FFFF;
    let m = mag.min(MAX_BITS);
    // Normal: round the 23-bit mantissa to 3 bits, to even; a carry moves into the exponent.
    let round = m + 0x7_FFFF + ((m >> 20) & 1);
    let normal = (round >> 20) - REBIAS;
    // Subnormal (below 2^-6): the magnitude in units of 2^-9, rounded to even. Its significand
    // `full` times 2^(exp - 150) is that many units shifted right by `141 - exp` (>= 21).
    let exp = m >> 23;
    let full = (m & 0x7F_FFFF) | 0x80_0000;
    // (Clamped to 1..=31 for every exponent: the result is only used below 2^-6.)
    let mut small = shifted_to_even(full, (141 - exp.min(140)).min(31));
    // f32 subnormals (exponent 0) are far below 2^-10: zero.
    small = select(exp == 0, 0, small);
    let code = select(m >= MIN_NORMAL_BITS, normal, small);
    sign | select(mag > 0x7F80_0000, 0x7F, code)
}

/// The values `x * inv_scale` (a vector of four) as one word of e4m3 codes, lane `i` in bits
/// `8i..8i + 8`.
#[cube]
pub(crate) fn pack_e4m3<N: Size>(x: Vector<f32, N>, inv_scale: f32) -> u32 {
    let n = N::value();
    let mut word = 0u32;
    #[unroll]
    for i in 0..comptime!(n.min(4)) {
        word |= e4m3_encode(x.extract(i) * inv_scale) << (8 * i as u32);
    }
    word
}

/// The four values of a word of e4m3 codes (a vector of four), times `scale`, exactly, with no
/// f32 subnormal on the way (a device may flush those): each code's magnitude bits go under the
/// f32 exponent with the bias moved by 120 (`2^(e-7) · (1 + m/8)`, right for every normal code);
/// for a subnormal code (`e = 0`) that reads `2^-7 · (1 + m/8)`, and `2 · (x - 2^-7) = m · 2^-9`
/// is its value. The NaN codes (`0x7F`, `0xFF`) read ±480 this way (no e4m3 value) and are
/// replaced by NaN ([`codes_raw`] without `nan_codes`: words known to hold none).
#[cube]
pub(crate) fn unpack_e4m3<N: Size>(word: u32, scale: f32) -> Vector<f32, N> {
    codes_raw::<N>(word, true) * Vector::new(scale)
}

/// [`unpack_e4m3`] before the scale: the codes' values; without `nan_codes` the NaN codes read
/// ±480 (words known to hold none).
#[cube]
fn codes_raw<N: Size>(word: u32, #[comptime] nan_codes: bool) -> Vector<f32, N> {
    let n = N::value();
    let magnitudes = word & 0x7F7F_7F7F;
    let signs = word & 0x8080_8080;
    let mut x = Vector::<f32, N>::new(0.0);
    #[unroll]
    for i in 0..comptime!(n.min(4)) {
        let shift = comptime!(8 * i as u32);
        let bits = (((magnitudes >> shift) & 0x7F) << 20) + REBIASED;
        let v = f32::reinterpret(bits);
        let v = select(v < MIN_NORMAL, (v - HALF_MIN_NORMAL) * 2.0, v);
        let sign = ((signs >> shift) & 0x80) << 24;
        x.insert(i, f32::reinterpret(u32::reinterpret(v) | sign));
    }
    // The NaN codes, without a branch (a branch here costs the attention kernel its loads'
    // scheduling): any lane that reads ±480 becomes NaN.
    if comptime!(nan_codes) {
        let nan = f32::reinterpret(word | 0x7FC0_0000);
        #[unroll]
        for i in 0..comptime!(n.min(4)) {
            let v = x.extract(i);
            x.insert(i, select(f32::abs(v) == 480.0, nan, v));
        }
    }
    x
}

/// [`REBIAS`] in place under the f32 exponent (`120 << 23`).
const REBIASED: u32 = REBIAS << 20;
/// 2^-6, the smallest normal e4m3 magnitude.
const MIN_NORMAL: f32 = 0.015_625;
/// 2^-7.
const HALF_MIN_NORMAL: f32 = 0.007_812_5;

/// The four values of a word of e4m3 codes (a vector of four), before any scale, through
/// CubeCL's fp8 type: the device's own conversion where it has one (elsewhere CubeCL rewrites the
/// casts into a software codec). Through f16, which holds every e4m3 value exactly (Vulkan's
/// float8 extension keeps subnormal codes only when converting to f16). The same values as
/// [`unpack_e4m3`] before its scale, NaN codes included.
#[cube]
fn native_raw<N: Size>(word: u32) -> Vector<f32, N> {
    let codes = Vector::<e4m3, N>::reinterpret(word);
    Vector::<f32, N>::cast_from(Vector::<f16, N>::cast_from(codes))
}

/// The two e4m3 codes in the low 16 bits of `x` (the first in the low byte) as an f16 pair,
/// through CubeCL's fp8 type: one `cvt` of two codes where the device converts in hardware
/// (CUDA's C++ backend on sm_89 and later: `__nv_cvt_fp8x2_to_halfraw2`). Every e4m3 value,
/// NaN included, is exact in f16.
#[cube]
pub(crate) fn converted_pair(x: u32) -> Vector<f16, Const<2>> {
    let codes = Vector::<e4m3, Const<2>>::reinterpret(u16::cast_from(x & 0xFFFF));
    Vector::<f16, Const<2>>::cast_from(codes)
}

/// How a kernel decodes fp8 e4m3 words: a launch's choice (comptime), the same values
/// (NaN codes included) every way. The root crate's `PoolAttentionConfig::fp8_decode` takes it.
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Fp8Decode {
    /// Integer arithmetic into f32 bits (`codes_raw`, as `unpack_e4m3`): every device, WGSL
    /// without f16 included.
    Integer,
    /// Each code's bits moved under an f16's exponent, two codes to a word, then widened
    /// (`halves_raw`): NVIDIA GPUs through SPIR-V ([`Self::on_device`]); about half the
    /// integer codec's operations.
    Halves,
    /// CubeCL's fp8 type (`native_raw`): the device's own conversion where it has one,
    /// CubeCL's software codec elsewhere.
    Native,
}

impl Fp8Decode {
    /// The normal choice on `client`'s device: the fp8 type where the device likely converts
    /// in hardware and has f16, else f16 halves where [`Self::on_device`] keeps them, else
    /// integers.
    pub fn for_device(client: &cubecl::client::Client) -> Self {
        match crate::common::launch::converts_fp8(client) {
            true => Self::Native.on_device(client),
            false => Self::Halves.on_device(client),
        }
    }

    /// What [`decode_raw`] values are multiplied by to give the codes' values: `2^8` for f16
    /// halves, 1 otherwise.
    pub(crate) fn raw_factor(self) -> f32 {
        match self {
            Self::Halves => 256.0,
            Self::Integer | Self::Native => 1.0,
        }
    }

    /// `self` where `client`'s device runs it, else [`Self::Integer`]: the fp8 type needs f16;
    /// f16 halves need f16 and either CubeCL's SPIR-V compiler on an NVIDIA GPU or its CUDA
    /// runtime. Through WGSL, naga on Mesa's lavapipe reads the pair's bitcast as one f32; the
    /// subnormal codes are f16 subnormals, which a Vulkan driver may flush when widening them
    /// (CubeCL declares no denormal mode), and NVIDIA's driver is where every code was checked
    /// (H100, H200); CUDA widens f16 subnormals exactly (`cvt.f32.f16`), checked through burn's
    /// `cuda` feature on an H100; the MSL compiler's bitcast of a pair is not checked.
    pub fn on_device(self, client: &cubecl::client::Client) -> Self {
        let properties = client.properties();
        let f16 = properties.supports_type(cubecl::ir::ElemType::Float(cubecl::ir::FloatKind::F16));
        let nvidia = properties
            .identity
            .physical
            .as_ref()
            .and_then(|card| card.vendor)
            == Some(cubecl::ir::PciVendor::Nvidia);
        match self {
            Self::Native if f16 => self,
            Self::Halves if f16 => match Compiler::of(client) {
                Compiler::Cuda => self,
                Compiler::Spirv if nvidia => self,
                _ => Self::Integer,
            },
            _ => Self::Integer,
        }
    }
}

/// A word's four e4m3 codes as two f16 pairs, codes (0, 2) and (1, 3), each value `2^-8` times
/// the code's, as [`halves_raw`] describes (NaN codes NaN with `nan_codes`); the head-tile
/// attention kernel feeds them to f16 tensor-core products as they are.
#[cube]
pub(crate) fn halves_pairs(
    word: u32,
    #[comptime] nan_codes: bool,
) -> (Vector<f16, Const<2>>, Vector<f16, Const<2>>) {
    let (even, odd) = halves_words(word, nan_codes);
    (
        Vector::<f16, Const<2>>::reinterpret(even),
        Vector::<f16, Const<2>>::reinterpret(odd),
    )
}

/// [`halves_pairs`]' two pairs as the bits of two f16 each (the first code in the low half).
#[cube]
pub(crate) fn halves_words(word: u32, #[comptime] nan_codes: bool) -> (u32, u32) {
    let mut even = word & 0x007F_007F;
    let mut odd = word & 0x7F00_7F00;
    if comptime!(nan_codes) {
        even |= (even + 0x0001_0001) & 0x0080_0080;
        odd |= (odd + 0x0100_0100) & 0x8000_8000;
    }
    (
        (even << 7) | ((word & 0x0080_0080) << 8),
        (odd >> 1) | (word & 0x8000_8000),
    )
}

/// The four values of a word of e4m3 codes (a vector of four) times `2^-8`, through f16 halves:
/// codes 0 and 2, then 1 and 3, sixteen bits apart, each magnitude moved under an f16's exponent
/// (shift 7) and its sign onto the f16 sign, as CubeCL's own fp4 decode does. Each lands on
/// exactly its value times `2^-8` (the exponent biases differ by 8; a subnormal code is an f16
/// subnormal of the same digits), widened exactly to f32 ([`Fp8Decode::raw_factor`] is the
/// `2^8`). With `nan_codes`, the NaN codes become NaN in the integer bits: a magnitude of `0x7F`
/// is the only one a 1 carries into bit 7, and with that bit set it lands on the f16 `0x7F80`
/// (`0xFF80` negative), a NaN, which widens to an f32 NaN (three integer operations a pair,
/// against a compare and a select an element); without, they read ±1.875 (±480 once scaled).
#[cube]
fn halves_raw<N: Size>(word: u32, #[comptime] nan_codes: bool) -> Vector<f32, N> {
    let (even, odd) = halves_pairs(word, nan_codes);
    let even = Vector::<f32, Const<2>>::cast_from(even);
    let odd = Vector::<f32, Const<2>>::cast_from(odd);
    let mut x = Vector::<f32, N>::new(0.0);
    x.insert(0usize, even.extract(0usize));
    x.insert(1usize, odd.extract(0usize));
    x.insert(2usize, even.extract(1usize));
    x.insert(3usize, odd.extract(1usize));
    x
}

/// The four values of a word of e4m3 codes (a vector of four) times `scale`, as `decode` reads
/// them ([`decode_raw`], then one multiply by `scale · raw_factor`).
#[cube]
pub(crate) fn decode_word<N: Size>(
    word: u32,
    scale: f32,
    #[comptime] decode: Fp8Decode,
) -> Vector<f32, N> {
    decode_codes::<N>(word, scale, decode, true)
}

/// [`decode_word`]; without `nan_codes`, integers and f16 halves read the NaN codes as ±480
/// (words known to hold none).
#[cube]
pub(crate) fn decode_codes<N: Size>(
    word: u32,
    scale: f32,
    #[comptime] decode: Fp8Decode,
    #[comptime] nan_codes: bool,
) -> Vector<f32, N> {
    let factor = comptime!(decode.raw_factor());
    decode_raw::<N>(word, decode, nan_codes) * Vector::new(scale * f32::new(factor))
}

/// A word's four codes as `decode` reads them before any scale: each value divided by
/// [`Fp8Decode::raw_factor`] (f16 halves sit `2^8` below their values), NaN codes as
/// [`decode_codes`] reads them. A kernel that adds many of them under one scale multiplies
/// once, by `scale · raw_factor`.
#[cube]
pub(crate) fn decode_raw<N: Size>(
    word: u32,
    #[comptime] decode: Fp8Decode,
    #[comptime] nan_codes: bool,
) -> Vector<f32, N> {
    if comptime!(decode == Fp8Decode::Native) {
        native_raw::<N>(word)
    } else if comptime!(decode == Fp8Decode::Halves) {
        halves_raw::<N>(word, nan_codes)
    } else {
        codes_raw::<N>(word, nan_codes)
    }
}

/// Vector `at` of a pool as f32: a float pool's vector (`P` its float type, `M = N`), or with
/// `fp8` the first word of vector `at` (`P` = u32, `N = 4`) decoded as `decode` says, times
/// `scale`.
#[cube]
pub(crate) fn load_pool<P: Numeric, N: Size, M: Size>(
    pool: &Tensor<Vector<P, M>>,
    at: usize,
    scale: f32,
    #[comptime] fp8: bool,
    #[comptime] decode: Fp8Decode,
) -> Vector<f32, N> {
    if comptime!(fp8) {
        decode_word::<N>(u32::cast_from(pool[at].extract(0usize)), scale, decode)
    } else {
        Vector::<f32, N>::cast_from(pool[at])
    }
}

/// A pool's vector `value` as f32 before any scale: a float pool's (`P` its float type, `M =
/// N`), or with `fp8` its word `w` (`P` = u32, `M` words, `N = 4`) as [`decode_raw`] reads it
/// (NaN codes included: a kernel multiplies its sums by `scale · decode.raw_factor()` once).
#[cube]
pub(crate) fn pool_vector_raw<P: Numeric, N: Size, M: Size>(
    value: Vector<P, M>,
    #[comptime] w: usize,
    #[comptime] fp8: bool,
    #[comptime] decode: Fp8Decode,
) -> Vector<f32, N> {
    if comptime!(fp8) {
        decode_raw::<N>(u32::cast_from(value.extract(w)), decode, true)
    } else {
        Vector::<f32, N>::cast_from(value)
    }
}

/// Stores `x` (a unit's vector, f32) at vector `at` of a pool: rounded to the pool's float type
/// `P` (vectors of `M = N`), or with `fp8` as one word of e4m3 codes of `x * inv_scale` (`P` =
/// u32, `M = 1`, `N = 4`).
#[cube]
pub(crate) fn store_pool<P: Numeric, N: Size, M: Size>(
    pool: &mut Tensor<Vector<P, M>>,
    at: usize,
    x: Vector<f32, N>,
    inv_scale: f32,
    #[comptime] fp8: bool,
) {
    if comptime!(fp8) {
        pool[at] = Vector::<P, M>::cast_from(pack_e4m3::<N>(x, inv_scale));
    } else {
        pool[at] = Vector::<P, M>::cast_from(x);
    }
}

/// Encodes `x` (f32 in vectors of four, `4 · out.len()` elements) times `inv_scale` into `out`, one word per four
/// elements: a float tensor into an fp8 pool's layout.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn encode_e4m3_kernel<N: Size>(
    x: &Tensor<Vector<f32, N>>,
    out: &mut Tensor<u32>,
    inv_scale: f32,
) {
    if ABSOLUTE_POS < out.len() {
        out[ABSOLUTE_POS] = pack_e4m3::<N>(x[ABSOLUTE_POS], inv_scale);
    }
}

/// Decodes `words` (one per four elements) times `scale` into `out` (f32 in vectors of four): an
/// fp8 pool read back as floats, as `decode` says.
#[cube(launch_unchecked, address_type = "dynamic")]
pub fn decode_e4m3_kernel<N: Size>(
    words: &Tensor<u32>,
    out: &mut Tensor<Vector<f32, N>>,
    scale: f32,
    #[comptime] decode: Fp8Decode,
) {
    if ABSOLUTE_POS < words.len() {
        out[ABSOLUTE_POS] = decode_word::<N>(words[ABSOLUTE_POS], scale, decode);
    }
}

/// The device encode (`e4m3_encode()`) on the host.
pub fn encode_host(x: f32) -> u8 {
    let bits = x.to_bits();
    let sign = (bits >> 24) & 0x80;
    let mag = bits & 0x7FFF_FFFF;
    if mag > 0x7F80_0000 {
        return (sign | 0x7F) as u8;
    }
    let m = mag.min(MAX_BITS);
    let code = if m >= MIN_NORMAL_BITS {
        ((m + 0x7_FFFF + ((m >> 20) & 1)) >> 20) - REBIAS
    } else {
        let exp = m >> 23;
        if exp == 0 {
            0
        } else {
            let full = (m & 0x7F_FFFF) | 0x80_0000;
            let shift = (141 - exp).min(31);
            let (units, rest, half) = (full >> shift, full & ((1 << shift) - 1), 1 << (shift - 1));
            units + u32::from(rest > half || (rest == half && units & 1 == 1))
        }
    };
    (sign | code) as u8
}

/// The device decode's (`unpack_e4m3()`) value of one code, on the host.
pub fn decode_host(code: u8) -> f32 {
    let code = u32::from(code);
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp, mantissa) = ((code >> 3) & 0xF, code & 7);
    if code & 0x7F == 0x7F {
        f32::NAN
    } else if exp == 0 {
        sign * mantissa as f32 * 0.001_953_125
    } else {
        sign * f32::from_bits(((exp + 120) << 23) | (mantissa << 20))
    }
}
