//! `pool_attention`: attention of a ragged batch of queries over keys and values that stay in the
//! token-slot pool — each sequence's context is a list of pool rows (`kv_indices`, in position
//! order), so sequences of any length share one pool and may share rows, and nothing is
//! gathered. Decode, prefill and extend (a prefix already in the pool plus new tokens) in one
//! call; GQA/MQA/MHA, causal, sliding window, logits soft cap; `out` and its `lse`.
//!
//! A [`PoolAttentionPlan`] holds a step's index arrays (host data the scheduler already has) and
//! what is derived from them — checks, each query's key range, the device copies — made once
//! and reused by every layer's call (FlashInfer's plan/run).

mod api;
mod backend;
#[cfg(feature = "cube")]
mod cube;
mod error;
#[cfg(feature = "flex")]
mod flex;
mod plan;
#[cfg(feature = "testing")]
pub mod reference;

pub use api::{
    Fp8Decode, MAX_HEAD_DIM, PoolAttentionConfig, PoolAttentionInputs, PoolAttentionOutputs,
    pool_attention,
};
pub use error::PoolAttentionError;
pub use plan::PoolAttentionPlan;
