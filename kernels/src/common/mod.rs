//! What the rooms share: the fp8 e4m3 codec of the pools ([`fp8`], public: the root crate's
//! host paths and tests use its host twins), tensor-core fragments ([`fragment`], public: the
//! `tensor_cores` bench probes the tiles through the same loads), lane and cube-wide
//! reductions, rounding in integer arithmetic, the widest vector a device loads, and the parsing
//! of the `ROPE_POOL_*` launch knobs of `tuning` builds.

pub mod fp8;
pub mod fragment;
pub(crate) mod launch;
pub(crate) mod reduce;
pub(crate) mod round;
#[cfg(feature = "tuning")]
pub(crate) mod tuning;
