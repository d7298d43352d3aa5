//! # burn-rope-pool
//!
//! One fused op for LLM inference with [Burn](https://burn.dev): rotary position embedding (NeoX
//! or GPT-J pairs, partial rotary, linear/llama3/YaRN/LongRoPE scaling, M-RoPE) of the queries and
//! keys of a batch of tokens, plus the scatter of each token's rotated key and
//! raw value into its row of a token-slot KV pool — one GPU pass instead of four.
//!
//! ```no_run
//! use burn::tensor::{Device, Distribution, Int, Tensor};
//! use burn_rope_pool::{RopePoolConfig, RopePoolInputs, rope_pool_fused};
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
//! let inputs = RopePoolInputs::new(q, k, v, positions, slots, k_pool, v_pool);
//! let out = rope_pool_fused(inputs, &config)?; // out.q_rot, out.k_rot, out.k_pool, out.v_pool
//! assert_eq!(out.q_rot.dims(), [4, 32, 128]);
//! # Ok::<(), burn_rope_pool::RopePoolError>(())
//! ```
//!
//! The crate is three layers, each built on the one before: the op (the items at the root: the
//! Burn extension above, its config, checks and errors; source in `src/op/`), [`pool`] (the rows
//! the op writes: the KV pool and its allocator, the step planner, attention over the rows) and
//! [`model`] (checkpoint, decoder, generation), with [`text`] beside them (tokenizers and chat
//! templates: text in, text out). The oracles every path is checked against — the
//! float64 references and the unfused tensor-op paths — are in `testing` (cargo feature
//! `testing`). The contract — inputs, math, outputs, every error message in order — is
//! `docs/CONTRACT.md`.
//!
//! Backends: the CubeCL backend (feature `wgpu`, `vulkan`, `metal` or `cuda`; fusion-wrapped by
//! default) runs the kernel of the `rope-pool-kernels` crate; `flex` runs a host loop; Burn's
//! `Autodiff` around either (feature `autodiff`, default) gives the op a backward.

#![warn(missing_docs)]

#[cfg(not(any(feature = "cube", feature = "flex")))]
compile_error!(
    "burn-rope-pool needs at least one backend feature: wgpu, vulkan, metal, cuda or flex"
);

mod common;
pub mod model;
pub(crate) mod op;
pub mod pool;
#[cfg(feature = "server")]
pub mod serve;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;

pub use op::{
    Dims, MRope, QkNorm, RefusedCall, RopeFrequencies, RopePoolConfig, RopePoolError,
    RopePoolInputs, RopePoolOutputs, RopeScaling, RopeStyle, check_rope_pool_fused,
    rope_pool_fused, try_rope_pool_fused,
};
