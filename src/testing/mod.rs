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
pub use devices::{device_by_name, device_works, dtype_by_name, ranks_by_name, wgpu_refusal};
pub use golden::{GoldenCase, GoldenError, HostTensor, MAX_RANK, Score, tolerance};
pub use metrics::{max_abs_error, norm_relative_error};
pub use rng::Rng;

pub use crate::model::kernels::{
    Fp8Weight, FusedForm, MatmulRoutine, add_rms_norm, add_rms_norm_shares, fp8_tensor_cores_take,
    fuses, fuses_fp8, norm_project, norm_project_fp8, project, project_add, project_add_fp8,
    project_fp8, project_fp8_shares, project_shares, project_with, rms_norm, silu_mul,
    silu_mul_shares, staged_takes, staged_takes_fp8, tiles_product_takes,
};
pub use crate::model::oracle::{generate_unfused, step_unfused};
pub use crate::op::{reference, unfused};
pub use crate::pool::attention::reference as attention_reference;

/// How many of `decoder`'s projections (each layer's q/k/v, o, gate/up, down, and the LM head)
/// it holds as fp8 weights.
pub fn fp8_projections(decoder: &crate::model::Decoder) -> usize {
    decoder.fp8_projections()
}

/// The decode steps `decoder` captured, those it replayed, and the captured steps it keeps ([`Decoder::with_step_graphs`](crate::model::Decoder::with_step_graphs)).
pub fn step_graph_counts(decoder: &crate::model::Decoder) -> (usize, usize, usize) {
    decoder.step_graph_counts()
}

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

/// A Llama-3.2-1B-shaped config (16 layers, hidden 2048, 32/8 heads of 64, MLP 8192, vocab
/// 128256, θ = 500000, the LM head tied to the embeddings): a model small enough for a software
/// Vulkan device's buffer limits (with a smaller vocabulary).
pub fn llama32_1b() -> DecoderConfig {
    let mut config = llama3_8b();
    config.hidden_size = 2048;
    config.intermediate_size = 8192;
    config.num_layers = 16;
    config.tie_word_embeddings = true;
    config.rope = RopePoolConfig::new(64, 32, 8)
        .with_rope_base(500_000.0)
        .with_k_rot(false);
    config
}

/// A Llama-3-70B-shaped config (80 layers, hidden 8192, 64/8 heads of 128, MLP 28672, vocab
/// 128256, θ = 500000): the tensor-parallel benchmark's large model.
pub fn llama3_70b() -> DecoderConfig {
    let mut config = llama3_8b();
    config.hidden_size = 8192;
    config.intermediate_size = 28_672;
    config.num_layers = 80;
    config.rope = RopePoolConfig::new(128, 64, 8)
        .with_rope_base(500_000.0)
        .with_k_rot(false);
    config
}

/// A decoder of `config` with random weights (normal, σ = 0.02; norms 1), for benchmarks.
pub fn random_decoder(
    config: DecoderConfig,
    device: &Device,
    dtype: DType,
) -> Result<Decoder, DecoderError> {
    random_with(config, device, dtype, false)
}

/// [`random_decoder`] with its projections as fp8 weights (random e4m3 codes, one scale a block
/// of 128 inner elements) on CubeCL devices, as an fp8 checkpoint loads there; the embeddings,
/// norms (and elsewhere the projections) as [`random_decoder`]'s.
pub fn random_fp8_decoder(
    config: DecoderConfig,
    device: &Device,
    dtype: DType,
) -> Result<Decoder, DecoderError> {
    random_with(config, device, dtype, true)
}

fn random_with(
    config: DecoderConfig,
    device: &Device,
    dtype: DType,
    fp8: bool,
) -> Result<Decoder, DecoderError> {
    let weights = Random {
        device,
        dtype,
        fp8,
        lm_head_rows: None,
    };
    Decoder::build(config, &weights)
}

/// A model of `config`'s shape split over `devices` ([`crate::model::ShardedDecoder`]) for
/// timing: each rank's shard drawn at random on its device directly (no whole model is built,
/// so a model past one device's memory shards too). Each rank draws its own embeddings and
/// norms, so the ranks' residual streams differ: the shapes and the work are a split model's,
/// the values are not. Refused as [`crate::model::ShardedDecoder::new`] refuses.
pub fn random_sharded_decoder(
    config: DecoderConfig,
    devices: &[Device],
    dtype: DType,
    collective: Box<dyn crate::model::Collective>,
) -> Result<crate::model::ShardedDecoder, DecoderError> {
    let ranks = devices.len();
    crate::model::parallel::check(
        &config,
        devices,
        Decoder::shard_bytes_of(&config, dtype, ranks),
    )?;
    let shards = devices
        .iter()
        .enumerate()
        .map(|(r, device)| {
            let weights = Random {
                device,
                dtype,
                fp8: false,
                lm_head_rows: Some(crate::model::vocab_share(config.vocab_size, r, ranks)),
            };
            Decoder::build(config.shard(ranks), &weights)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut config = config;
    config.rope.qk_norm_eps = config.rms_norm_eps;
    Ok(crate::model::ShardedDecoder::from_ranks(
        config, shards, collective,
    ))
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
