//! A decoder's architecture, read from a HuggingFace `config.json`.

use crate::model::{CheckpointError, DecoderError};
use crate::op::RopePoolConfig;
use burn::tensor::DType;
use serde_json::Value;

/// The architecture of a decoder, from a HuggingFace `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct DecoderConfig {
    /// `llama`, `mistral`, `qwen2` or `qwen3`.
    pub model_type: String,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// The LM head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry biases (Qwen2; Llama's `attention_bias`, which adds o's too).
    pub qkv_bias: bool,
    /// The o projection carries a bias (Llama's `attention_bias`).
    pub o_bias: bool,
    /// Per-head RMSNorm of q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// Heads, head size and RoPE variant: the fused op's config.
    pub rope: RopePoolConfig,
}

impl DecoderConfig {
    /// Reads a `config.json` (either rope form); an unsupported `model_type` or a missing field
    /// is an error naming it.
    pub fn from_hf_config(config: &Value) -> Result<Self, DecoderError> {
        let bad = |what: String| DecoderError::Checkpoint(CheckpointError::Config(what));
        let model_type = config["model_type"].as_str().unwrap_or("").to_string();
        if !matches!(model_type.as_str(), "llama" | "mistral" | "qwen2" | "qwen3") {
            return Err(bad(format!(
                "unsupported model_type `{model_type}` (supported: llama, mistral, qwen2, qwen3)"
            )));
        }
        let count = |name: &str| {
            config[name]
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| bad(format!("missing integer field `{name}`")))
        };
        let flag = |name: &str, default: bool| config[name].as_bool().unwrap_or(default);
        let attention_bias = flag("attention_bias", false);
        Ok(Self {
            vocab_size: count("vocab_size")?,
            hidden_size: count("hidden_size")?,
            intermediate_size: count("intermediate_size")?,
            num_layers: count("num_hidden_layers")?,
            rms_norm_eps: config["rms_norm_eps"].as_f64().unwrap_or(1e-6),
            tie_word_embeddings: flag("tie_word_embeddings", false),
            qkv_bias: model_type == "qwen2" || attention_bias,
            o_bias: model_type != "qwen2" && attention_bias,
            qk_norm: model_type == "qwen3",
            rope: {
                // Attention reads keys from the pool: the op need not return them.
                let rope = RopePoolConfig::from_hf_config_value(config)?.with_k_rot(false);
                // transformers materialises a bf16/f16 checkpoint's rotary `inv_freq` buffer in
                // that dtype, and its generations (even in float64) use the rounded values.
                match config["dtype"].as_str().or(config["torch_dtype"].as_str()) {
                    Some("bfloat16") => rope.with_inv_freq_dtype(Some(DType::BF16)),
                    Some("float16") => rope.with_inv_freq_dtype(Some(DType::F16)),
                    _ => rope,
                }
            },
            model_type,
        })
    }
}
