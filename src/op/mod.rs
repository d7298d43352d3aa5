//! The op: the Burn extension a model adds — `rope_pool_fused`, its config and RoPE variants, its
//! checks and errors, the backend trait and its CubeCL, Flex and Autodiff implementations — and
//! its two oracles beside it: the float64 `reference` and the `unfused` tensor-op path (public
//! through `testing`).
//!
//! Depends on the `rope-pool-kernels` crate only; the pool and the model build on it.

mod api;
#[cfg(feature = "autodiff")]
mod autodiff;
mod backend;
mod config;
#[cfg(feature = "cube")]
pub(crate) mod cube;
mod error;
#[cfg(feature = "flex")]
pub(crate) mod flex;
mod hf_config;
mod norm;
#[cfg(feature = "testing")]
pub mod reference;
mod rope;
pub mod unfused;
mod validate;

pub use crate::common::{Fp8PoolError, PoolTensor};
pub(crate) use crate::common::{check_fp8_settings, check_pool_kinds};
pub use api::{RefusedCall, check_rope_pool_fused, rope_pool_fused, try_rope_pool_fused};
pub use backend::{QkNorm, RopePoolInputs, RopePoolOutputs};
pub use config::RopePoolConfig;
pub use error::{Dims, RopePoolError};
pub use rope::{MRope, RopeFrequencies, RopeScaling, RopeStyle};
