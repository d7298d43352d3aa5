//! The model: a HuggingFace checkpoint, a Llama-family decoder whose layers keep their keys and
//! values in a [`KvPool`](crate::pool::KvPool) written by the op, greedy generation over a
//! ragged batch, and a standalone LLaMA attention layer. Built on the op and the pool.

mod attention;
mod checkpoint;
mod config;
mod decoder;
mod engine;
mod generate;
mod graph;
pub(crate) mod kernels;
#[cfg(feature = "testing")]
pub(crate) mod oracle;
pub(crate) mod parallel;
pub(crate) mod sampling;
mod weights;

pub use attention::{LlamaAttention, LlamaAttentionConfig};
pub use checkpoint::{Checkpoint, CheckpointError, Quantization};
pub use config::{DecoderConfig, SlidingWindow, WindowLayers};
#[cfg(feature = "testing")]
pub(crate) use decoder::vocab_share;
pub use decoder::{Decoder, DecoderError, StepToken};
pub use engine::{
    Cache, Engine, EngineOptions, Event, FinishReason, GenerationRequest, Model, RequestId, Stats,
    StopConditions,
};
pub use generate::{
    GenerateError, GenerateOptions, Generated, Request, generate, requests_from_json,
};
pub use parallel::{BurnAllReduce, Collective, InProcess, ShardedCache, ShardedDecoder};
pub use sampling::{SamplingError, SamplingParams, SeqRng, probabilities, sample};
#[cfg(feature = "testing")]
pub(crate) use weights::Random;
