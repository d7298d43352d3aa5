//! Support for the tests, examples and benchmarks (cargo feature `testing`, off by default; the
//! crate's own tests, examples and benches turn it on through a dev-dependency on the crate):
//! devices by name, the golden-file runner, error metrics against the float64 reference, the
//! one random generator, and a Llama-3-8B-shaped decoder with random weights.

mod attention_golden;
mod devices;
mod golden;
mod metrics;
mod rng;

pub use attention_golden::{AttentionCase, attention_error};
pub use devices::{device_by_name, device_works, dtype_by_name, wgpu_refusal};
pub use golden::{GoldenCase, GoldenError, HostTensor, MAX_RANK, Score, tolerance};
pub use metrics::{max_abs_error, norm_relative_error};
pub use rng::Rng;

use crate::model::{Decoder, DecoderConfig, DecoderError, Random};
use crate::op::RopePoolConfig;
use burn::tensor::{DType, Device};

/// A Llama-3-8B-shaped config (32 layers, hidden 4096, 32/8 heads of 128, MLP 14336, vocab
/// 128256, θ = 500000): the decode benchmark's model.
pub fn llama3_8b() -> DecoderConfig {
    DecoderConfig {
        model_type: "llama".into(),
        vocab_size: 128_256,
        hidden_size: 4096,
        intermediate_size: 14_336,
        num_layers: 32,
        rms_norm_eps: 1e-5,
        tie_word_embeddings: false,
        qkv_bias: false,
        o_bias: false,
        qk_norm: false,
        rope: RopePoolConfig::new(128, 32, 8)
            .with_rope_base(500_000.0)
            .with_k_rot(false),
        sliding_window: None,
    }
}

/// A decoder of `config` with random weights (normal, σ = 0.02; norms 1), for benchmarks.
pub fn random_decoder(
    config: DecoderConfig,
    device: &Device,
    dtype: DType,
) -> Result<Decoder, DecoderError> {
    Decoder::build(config, &Random { device, dtype })
}
