//! The pool: [`KvPool`] (the rows the op writes, every layer's, and their allocator), the step
//! planner ([`KvPool::plan_step`] → [`StepPlan`]) and [`pool_attention`], the op that reads the
//! rows. Built on the op; the model builds on it.

pub(crate) mod attention;
mod kv_pool;
mod memory;
mod slots;
mod step;

pub use crate::op::{Fp8PoolError, PoolTensor};
pub use attention::{
    Fp8Decode, MAX_HEAD_DIM, PoolAttentionConfig, PoolAttentionError, PoolAttentionInputs,
    PoolAttentionOutputs, PoolAttentionPlan, pool_attention,
};
pub use kv_pool::KvPool;
pub(crate) use kv_pool::PoolStorage;
pub use memory::memory_limit;
pub(crate) use memory::{check_pool_memory, pool_bytes};
pub use slots::{SeqId, SeqToken};
pub(crate) use step::HostStep;
pub use step::StepPlan;

use crate::op::RopePoolError;

/// Errors of the pool and its allocator.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KvPoolError {
    /// Not enough free rows for the request; nothing was allocated.
    #[error("KV pool exhausted: {requested} slots requested, {available} free")]
    Exhausted {
        /// Rows requested.
        requested: usize,
        /// Rows free.
        available: usize,
    },
    /// A step of no tokens.
    #[error("a step needs at least one token")]
    EmptyStep,
    /// A layer the pool does not have.
    #[error("layer {layer} of a pool of {layers} layers")]
    Layer {
        /// The layer asked for.
        layer: usize,
        /// The pool's layers.
        layers: usize,
    },
    /// The sequence holds no slots.
    #[error("sequence {seq} holds no slots in the KV pool")]
    UnknownSequence {
        /// The sequence.
        seq: SeqId,
    },
    /// A token's position is not the one its sequence's rows reach (the layer takes each
    /// sequence's new tokens in position order, continuing its rows).
    #[error("sequence {seq}: token at position {position} where position {expected} comes next")]
    Position {
        /// The sequence.
        seq: SeqId,
        /// The token's position.
        position: usize,
        /// The position its sequence's rows reach.
        expected: usize,
    },
    /// A pool of more rows than i32 slots address.
    #[error("a pool of {rows} rows is more than the {max} rows slots can address")]
    TooManyRows {
        /// The rows asked for.
        rows: usize,
        /// The most rows a pool can have (`i32::MAX`).
        max: usize,
    },
    /// Pools that need more memory than the device (or, on Flex, the system) can give.
    #[error(
        "pools of {rows} rows need {} bytes, more than the {limit} bytes {source_of_limit}",
        bytes.map_or("more than u64::MAX".to_string(), |b| b.to_string())
    )]
    Memory {
        /// The rows asked for.
        rows: usize,
        /// The bytes they need (`None`: past `u64::MAX`).
        bytes: Option<u64>,
        /// The limit.
        limit: u64,
        /// Where the limit comes from.
        source_of_limit: &'static str,
    },
    /// The fused op refused the call (the pools are unchanged).
    #[error(transparent)]
    Op(#[from] RopePoolError),
    /// Attention over the pool refused the call.
    #[error(transparent)]
    Attention(#[from] PoolAttentionError),
}
