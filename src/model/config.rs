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
    /// Sliding-window attention, if the config turns it on (Mistral's `sliding_window`;
    /// Qwen2/Qwen3's `use_sliding_window` with `max_window_layers` or `layer_types`).
    pub sliding_window: Option<SlidingWindow>,
    /// The context: positions the model was made for (`max_position_embeddings`, if given).
    pub max_position_embeddings: Option<usize>,
}

/// Which layers attend over a window of the last `size` positions (query at `p` sees keys
/// `j > p - size`, transformers' convention); the others attend over the whole context.
#[derive(Clone, Debug, PartialEq)]
pub struct SlidingWindow {
    /// Window size in positions (at least 1).
    pub size: usize,
    /// The layers it applies to.
    pub layers: WindowLayers,
}

/// The layers a [`SlidingWindow`] applies to.
#[derive(Clone, Debug, PartialEq)]
pub enum WindowLayers {
    /// Every layer (Mistral).
    All,
    /// Layers from this index on (Qwen2/Qwen3 `max_window_layers`).
    From(usize),
    /// Per layer, from `layer_types` (`true`: `"sliding_attention"`).
    Listed(Vec<bool>),
}

/// The sliding window `config` turns on, as transformers reads it: Mistral applies a non-null
/// `sliding_window` to every layer; Qwen2/Qwen3 only with `use_sliding_window`, to the layers
/// `layer_types` marks `"sliding_attention"` or else those from `max_window_layers` on; Llama
/// has none.
fn sliding_window(
    config: &Value,
    model_type: &str,
    num_layers: usize,
) -> Result<Option<SlidingWindow>, String> {
    let mistral = match model_type {
        "mistral" => true,
        "qwen2" | "qwen3" => false,
        // Llama has no sliding window: the field is ignored, as transformers does.
        _ => return Ok(None),
    };
    let size = match &config["sliding_window"] {
        Value::Null => return Ok(None),
        v => v.as_u64().filter(|&w| w >= 1).ok_or_else(|| {
            format!("`sliding_window` must be a positive integer or null, got {v}")
        })?,
    };
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    let layers = if mistral {
        WindowLayers::All
    } else {
        if !config["use_sliding_window"].as_bool().unwrap_or(false) {
            return Ok(None);
        }
        match &config["layer_types"] {
            Value::Null => {
                // transformers' default for Qwen2 and Qwen3 is 28.
                let first = match &config["max_window_layers"] {
                    Value::Null => 28,
                    v => v.as_u64().ok_or_else(|| {
                        format!("`max_window_layers` must be a non-negative integer, got {v}")
                    })?,
                };
                WindowLayers::From(usize::try_from(first).unwrap_or(usize::MAX))
            }
            Value::Array(types) => {
                if types.len() != num_layers {
                    return Err(format!(
                        "`layer_types` has {} entries for {num_layers} layers",
                        types.len()
                    ));
                }
                let layers = types
                    .iter()
                    .map(|t| match t.as_str() {
                        Some("sliding_attention") => Ok(true),
                        Some("full_attention") => Ok(false),
                        _ => Err(format!(
                            "`layer_types` entries must be \"sliding_attention\" or \
                             \"full_attention\", got {t}"
                        )),
                    })
                    .collect::<Result<_, _>>()?;
                WindowLayers::Listed(layers)
            }
            v => return Err(format!("`layer_types` must be a list, got {v}")),
        }
    };
    Ok(Some(SlidingWindow { size, layers }))
}

impl DecoderConfig {
    /// The config of one of `ranks` tensor-parallel shards: the q and kv heads and the MLP
    /// width divided by `ranks` (the caller checked that they divide).
    pub(crate) fn shard(&self, ranks: usize) -> DecoderConfig {
        let mut config = self.clone();
        config.rope.num_qo_heads /= ranks;
        config.rope.num_kv_heads /= ranks;
        config.intermediate_size /= ranks;
        config
    }

    /// The window of layer `layer`, if it has one.
    pub fn window(&self, layer: usize) -> Option<usize> {
        let window = self.sliding_window.as_ref()?;
        let on = match &window.layers {
            WindowLayers::All => true,
            WindowLayers::From(first) => layer >= *first,
            WindowLayers::Listed(layers) => layers.get(layer).copied().unwrap_or(false),
        };
        on.then_some(window.size)
    }

    /// Reads a `config.json` (either rope form); an unsupported `model_type` or a missing field
    /// is an error naming it.
    pub fn from_hf_config(config: &Value) -> Result<Self, DecoderError> {
        let bad = |what: String| DecoderError::Checkpoint(CheckpointError::Config(what));
        // Quantized weights are dequantized on load: refused here if stored another way.
        super::checkpoint::Quantization::from_config(config)?;
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
        let num_layers = count("num_hidden_layers")?;
        let sliding_window = sliding_window(config, &model_type, num_layers).map_err(bad)?;
        Ok(Self {
            vocab_size: count("vocab_size")?,
            hidden_size: count("hidden_size")?,
            intermediate_size: count("intermediate_size")?,
            num_layers,
            sliding_window,
            max_position_embeddings: config["max_position_embeddings"]
                .as_u64()
                .map(|n| n as usize),
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
