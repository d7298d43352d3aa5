//! # burn-rope-pool
//!
//! One fused op for LLM inference with [Burn](https://burn.dev): rotary position embedding (NeoX
//! or GPT-J pairs, partial rotary, linear/llama3/YaRN/LongRoPE scaling, M-RoPE) of the queries and
//! keys of a batch of tokens, plus the scatter of each token's rotated key and
//! raw value into its row of a token-slot KV pool — one GPU pass instead of four.
//!
//! ```no_run
//! use burn::tensor::{Device, Distribution, Int, Tensor};
//! use burn_rope_pool::{RopePoolConfig, rope_pool_fused};
//!
//! let device = Device::default();
//! let config = RopePoolConfig::new(128, 32, 8).with_rope_base(500_000.0);
//! let q = Tensor::<3>::random([4, 32, 128], Distribution::Default, &device);
//! let k = Tensor::<3>::random([4, 8, 128], Distribution::Default, &device);
//! let v = Tensor::<3>::random([4, 8, 128], Distribution::Default, &device);
//! let positions = Tensor::<1, Int>::from_ints([0, 1, 2, 3], &device);
//! let slots = Tensor::<1, Int>::from_ints([10, 11, -1, 12], &device); // -1: not cached
//! let k_pool = Tensor::<3>::zeros([1024, 8, 128], &device);
//! let v_pool = Tensor::<3>::zeros([1024, 8, 128], &device);
//! let out = rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, &config)?;
//! # Ok::<(), burn_rope_pool::RopePoolError>(())
//! ```
//!
//! Backends: the CubeCL backend (feature `wgpu`, `vulkan`, `metal` or `cuda`; fusion-wrapped by
//! default) runs the kernel of the `rope-pool-kernels` crate; `flex` runs a host loop; Burn's
//! `Autodiff` around either (feature `autodiff`, default) gives the op a backward (see the
//! `autodiff` section of the README). The math, the layouts and every error message follow the
//! project's SPEC.

#[cfg(not(any(feature = "cube", feature = "flex")))]
compile_error!(
    "burn-rope-pool needs at least one backend feature: wgpu, vulkan, metal, cuda or flex"
);

mod api;
pub mod attention;
#[cfg(feature = "autodiff")]
mod autodiff;
mod backend;
pub mod checkpoint;
mod config;
#[cfg(feature = "flex")]
mod cpu;
#[cfg(feature = "cube")]
mod cube;
pub mod decoder;
pub mod devices;
mod error;
#[cfg(feature = "flex")]
mod flex;
pub mod generate;
pub mod golden;
mod hf_config;
pub mod kv_pool;
pub mod reference;
pub mod rope;
pub mod unfused;
mod validate;

pub use api::{FloatArg, IntArg, RopePoolOutput, check_rope_pool_fused, rope_pool_fused};
pub use config::RopePoolConfig;
pub use error::{Dims, RopePoolError};
pub use rope::{MRope, RopeFrequencies, RopeScaling, RopeStyle};
