//! Parsing of the launch knobs of benchmark builds (cargo feature `tuning`). Each room has its
//! own knob struct ([`RopeTuning`](crate::rope::RopeTuning),
//! [`AttentionTuning`](crate::attention::AttentionTuning),
//! [`DecoderTuning`](crate::decoder::DecoderTuning)); its `Default` is the normal launch, and its
//! `from_env` reads the `ROPE_POOL_*` environment variables through the parsers here, once per
//! process.

/// The value of the environment variable `name`, when it is set and parses as a `T`.
pub(crate) fn number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Whether the environment variable `name` is set to 1.
pub(crate) fn flag(name: &str) -> bool {
    number::<usize>(name) == Some(1)
}

/// The `N` numbers of the environment variable `name`, separated by `/` or `,` (surrounding
/// spaces allowed), when it is set and holds exactly `N` of them.
pub(crate) fn numbers<const N: usize>(name: &str) -> Option<[u32; N]> {
    let text = std::env::var(name).ok()?;
    let values: Vec<u32> = text
        .split(['/', ','])
        .map(|v| v.trim().parse().ok())
        .collect::<Option<_>>()?;
    values.try_into().ok()
}

/// The fp8 decode `ROPE_POOL_FP8_DECODE` names: `0` integers, `1` CubeCL's fp8 type, `2` f16
/// halves.
pub(crate) fn fp8_decode() -> Option<crate::common::fp8::Fp8Decode> {
    use crate::common::fp8::Fp8Decode;
    match number::<usize>("ROPE_POOL_FP8_DECODE")? {
        0 => Some(Fp8Decode::Integer),
        1 => Some(Fp8Decode::Native),
        2 => Some(Fp8Decode::Halves),
        _ => None,
    }
}
