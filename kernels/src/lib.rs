//! CubeCL kernels of `burn-rope-pool`. Depends on CubeCL alone, so the kernels can be launched,
//! tested and compiled to WGSL, SPIR-V, CUDA or Metal Shading Language without Burn.
//!
//! The crate is laid out in rooms that mirror the root crate's layers; each room holds its
//! kernels, their launch beside them (`launch.rs`: the host side, what the root crate calls) and
//! its own launch knobs:
//!
//! - [`rope`] — the op (`src/op`): rotary position embedding of q and k (NeoX or GPT-J pairs,
//!   partial rotary, scaled frequencies, LongRoPE, M-RoPE, an optional q/k RMSNorm) fused with
//!   the scatter of k/v into a token-slot KV pool; knobs [`rope::RopeTuning`];
//! - [`attention`] — the pool (`src/pool/attention`): attention over the pool rows, the plane
//!   kernel and the portable one, the split of long contexts; knobs
//!   [`attention::AttentionTuning`];
//! - [`decoder`] — the model (`src/model/kernels`): the decode step's matrix-vector and few-rows
//!   products, RMSNorm and the MLP activation; knobs [`decoder::DecoderTuning`];
//! - [`common`] — what the rooms share: the fp8 e4m3 codec of the pools ([`common::fp8`]), the
//!   reductions, the widest vector a device loads and the parsing of the knobs.
//!
//! Every knob struct's `Default` is the normal launch; benchmark builds (cargo feature `tuning`)
//! read the knobs from `ROPE_POOL_*` environment variables (`LaunchTuning::from_env` for all
//! three rooms at once).

pub mod attention;
pub mod common;
pub mod decoder;
pub mod rope;

/// Every room's launch knobs together, as the root crate reads them once for all its launches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchTuning {
    /// The fused RoPE + pool kernel's.
    pub rope: rope::RopeTuning,
    /// The attention kernels'.
    pub attention: attention::AttentionTuning,
    /// The decoder kernels'.
    pub decoder: decoder::DecoderTuning,
}

impl LaunchTuning {
    /// The knobs of this process: `LaunchTuning::from_env` in builds with the `tuning`
    /// feature, the defaults (the normal launch) otherwise.
    pub fn current() -> Self {
        #[cfg(feature = "tuning")]
        return Self::from_env();
        #[cfg(not(feature = "tuning"))]
        Self::default()
    }
}

#[cfg(feature = "tuning")]
impl LaunchTuning {
    /// Each room's `from_env`: the settings of the `ROPE_POOL_*` environment variables, read once
    /// per process (all unset: the defaults). Only in builds with the `tuning` feature: a server
    /// never changes its launch through its environment.
    pub fn from_env() -> Self {
        Self {
            rope: rope::RopeTuning::from_env(),
            attention: attention::AttentionTuning::from_env(),
            decoder: decoder::DecoderTuning::from_env(),
        }
    }
}

// The kernel tests' adapter lookup (a missing adapter fails a test unless
// ROPE_POOL_ALLOW_NO_GPU=1, which skips it and says so), for the unit tests that compile kernels.
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
mod test_common;
