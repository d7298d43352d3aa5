//! Support for the tests, examples and benchmarks (cargo feature `testing`, off by default; the
//! crate's own tests, examples and benches turn it on through a dev-dependency on the crate):
//! devices by name, the golden-file runner, error metrics, the one random generator, a
//! Llama-3-8B-shaped decoder with random weights — and the oracles: the float64 references of
//! both ops, the op's unfused tensor-op path, the decoder run through tensor ops, and the
//! decoder's kernels one by one (for the benchmarks' probes).

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

pub use crate::model::kernels::{
    Fp8Weight, MatmulRoutine, add_rms_norm, project, project_fp8, project_with, rms_norm, silu_mul,
};
pub use crate::model::oracle::{generate_unfused, step_unfused};
pub use crate::op::{reference, unfused};
pub use crate::pool::attention::reference as attention_reference;

/// The greedy step's argmax over each row of `logits` (`[S, vocab]` → `[S, 1]`).
pub fn argmax_rows(logits: burn::tensor::Tensor<2>) -> burn::tensor::Tensor<2, burn::tensor::Int> {
    crate::model::sampling::argmax_rows(logits)
}

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
        max_position_embeddings: None,
    }
}

/// A decoder of `config` with random weights (normal, σ = 0.02; norms 1), for benchmarks.
pub fn random_decoder(
    config: DecoderConfig,
    device: &Device,
    dtype: DType,
) -> Result<Decoder, DecoderError> {
    Decoder::build(
        config,
        &Random {
            device,
            dtype,
            fp8: false,
        },
    )
}

/// [`random_decoder`] with its projections as fp8 weights (random e4m3 codes, one scale a block
/// of 128 inner elements) on CubeCL devices, as an fp8 checkpoint loads there; the embeddings,
/// norms (and elsewhere the projections) as [`random_decoder`]'s.
pub fn random_fp8_decoder(
    config: DecoderConfig,
    device: &Device,
    dtype: DType,
) -> Result<Decoder, DecoderError> {
    Decoder::build(
        config,
        &Random {
            device,
            dtype,
            fp8: true,
        },
    )
}

/// A planned step's positions and slots (one per token, batch order), read back to the host.
pub fn step_slots(step: &crate::pool::StepPlan) -> (Vec<i64>, Vec<i64>) {
    let host = |t: &burn::tensor::Tensor<1, burn::tensor::Int>| {
        t.clone()
            .into_data()
            .convert::<i64>()
            .try_to_vec::<i64>()
            .expect("i64 values")
    };
    (host(&step.positions), host(&step.slots))
}
