//! The model: a HuggingFace checkpoint, a Llama-family decoder whose layers keep their keys and
//! values in pools written by the op, greedy generation over a ragged batch, and a standalone
//! LLaMA attention layer. Built on the op and the pool.

mod attention;
mod checkpoint;
mod config;
mod decoder;
mod generate;
mod kernels;
mod weights;

pub use attention::{LlamaAttention, LlamaAttentionConfig};
pub use checkpoint::{Checkpoint, CheckpointError};
pub use config::{DecoderConfig, SlidingWindow, WindowLayers};
pub use decoder::{Decoder, DecoderError, KvCache, StepToken};
/// The greedy step's argmax (`testing` builds, for the tests).
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use generate::argmax_rows;
pub use generate::{
    GenerateError, GenerateOptions, Generated, Request, Stats, generate, requests_from_json,
};
pub use kernels::{MatmulRoutine, add_rms_norm, project, project_with, rms_norm, silu_mul};
#[cfg(feature = "testing")]
pub(crate) use weights::Random;
