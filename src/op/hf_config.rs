//! Rope settings from a HuggingFace `config.json`: both the `rope_parameters` form
//! (transformers ≥ 5) and the older `rope_theta` + `rope_scaling` + `partial_rotary_factor` form,
//! `head_dim` or `hidden_size / num_attention_heads`, GPT-J's own field names, and the
//! `text_config` of vision-language models.

use crate::op::rope::{MRope, RopeScaling, RopeStyle};
use crate::op::{RopePoolConfig, RopePoolError};
use serde_json::{Map, Value};

fn invalid(what: impl Into<String>) -> RopePoolError {
    RopePoolError::ModelConfig { what: what.into() }
}

fn scaling_error(what: impl Into<String>) -> RopePoolError {
    RopePoolError::RopeScaling { what: what.into() }
}

/// A number field of `object`, if present and not null.
fn number(object: &Map<String, Value>, name: &str) -> Option<f64> {
    object.get(name).and_then(Value::as_f64)
}

fn count(object: &Map<String, Value>, name: &str) -> Result<Option<usize>, RopePoolError> {
    match object.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            invalid(format!(
                "`{name}` must be a non-negative integer, got {value}"
            ))
        }),
    }
}

impl RopeScaling {
    /// The scaling and M-RoPE sections of a `rope_scaling` / `rope_parameters` object
    /// (`rope_type` or the older `type`; `default`/`mrope` carry only `mrope_section`).
    /// `max_position_embeddings` and `original_max_position_embeddings` are the config's top-level
    /// fields (Phi-3 keeps the original context there), used where the object lacks them.
    pub fn from_json(
        object: &Map<String, Value>,
        max_position_embeddings: Option<f64>,
        original_max_position_embeddings: Option<f64>,
    ) -> Result<(RopeScaling, Option<MRope>), RopePoolError> {
        let rope_type = object
            .get("rope_type")
            .or_else(|| object.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let max = number(object, "max_position_embeddings").or(max_position_embeddings);
        let original =
            number(object, "original_max_position_embeddings").or(original_max_position_embeddings);
        let required = |name: &str| {
            object.get(name).and_then(Value::as_f64).ok_or_else(|| {
                scaling_error(format!(
                    "missing field `{name}` for rope_type `{rope_type}`"
                ))
            })
        };
        let list = |name: &str| -> Result<Vec<f64>, RopePoolError> {
            let items = object.get(name).and_then(Value::as_array).ok_or_else(|| {
                scaling_error(format!(
                    "missing field `{name}` for rope_type `{rope_type}`"
                ))
            })?;
            items
                .iter()
                .map(|x| {
                    x.as_f64()
                        .ok_or_else(|| scaling_error(format!("`{name}` holds a non-number {x}")))
                })
                .collect()
        };
        let mrope = match object.get("mrope_section") {
            None | Some(Value::Null) => None,
            Some(section) => {
                let parts: Vec<usize> = section
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_u64().map(|n| n as usize))
                            .collect()
                    })
                    .unwrap_or_default();
                let section: [usize; 3] = parts.try_into().map_err(|_| {
                    scaling_error(format!("mrope_section must be 3 integers, got {section}"))
                })?;
                let interleaved = object
                    .get("mrope_interleaved")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Some(MRope {
                    section,
                    interleaved,
                })
            }
        };
        let scaling = match rope_type {
            "default" | "mrope" => RopeScaling::None,
            "linear" => RopeScaling::Linear {
                factor: required("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: required("factor")?,
                low_freq_factor: required("low_freq_factor")?,
                high_freq_factor: required("high_freq_factor")?,
                original_max_position_embeddings: original.ok_or_else(|| {
                    scaling_error(
                        "missing field `original_max_position_embeddings` for rope_type `llama3`",
                    )
                })?,
            },
            "yarn" => RopeScaling::Yarn {
                factor: required("factor")?,
                original_max_position_embeddings: original,
                max_position_embeddings: max,
                attention_factor: number(object, "attention_factor"),
                beta_fast: number(object, "beta_fast"),
                beta_slow: number(object, "beta_slow"),
                mscale: number(object, "mscale"),
                mscale_all_dim: number(object, "mscale_all_dim"),
                truncate: object.get("truncate").and_then(Value::as_bool),
            },
            "longrope" | "su" => RopeScaling::LongRope {
                short_factor: list("short_factor")?,
                long_factor: list("long_factor")?,
                original_max_position_embeddings: original,
                max_position_embeddings: max,
                attention_factor: number(object, "attention_factor"),
                factor: number(object, "factor"),
            },
            other => return Err(scaling_error(format!("unknown rope_type `{other}`"))),
        };
        Ok((scaling, mrope))
    }
}

impl RopePoolConfig {
    /// The op's config for a HuggingFace model from the text of its `config.json`: head counts,
    /// `head_dim` (or `hidden_size / num_attention_heads`), `rope_theta`, the rotary dimension
    /// (`partial_rotary_factor`, or GPT-J's `rotary_dim`), the pair style (GPT-J for
    /// `model_type: "gptj"`), the scaling and M-RoPE sections, in either the `rope_parameters` or
    /// the `rope_theta` + `rope_scaling` form. A vision-language config is read from its
    /// `text_config`. `rms_norm_eps`, when given, is the epsilon of a q/k norm.
    ///
    /// ```
    /// let config = burn_rope_pool::RopePoolConfig::from_hf_config(r#"{
    ///     "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    ///     "max_position_embeddings": 131072, "rope_theta": 500000.0,
    ///     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ///                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    /// }"#)?;
    /// assert_eq!((config.head_dim, config.num_qo_heads, config.num_kv_heads), (128, 32, 8));
    /// # Ok::<(), burn_rope_pool::RopePoolError>(())
    /// ```
    pub fn from_hf_config(json: &str) -> Result<Self, RopePoolError> {
        let value: Value =
            serde_json::from_str(json).map_err(|e| invalid(format!("not JSON: {e}")))?;
        Self::from_hf_config_value(&value)
    }

    /// [`RopePoolConfig::from_hf_config`] on a file.
    pub fn from_hf_config_file(path: impl AsRef<std::path::Path>) -> Result<Self, RopePoolError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        Self::from_hf_config(&text)
    }

    /// [`RopePoolConfig::from_hf_config`] on parsed JSON.
    pub fn from_hf_config_value(value: &Value) -> Result<Self, RopePoolError> {
        let mut root = value
            .as_object()
            .ok_or_else(|| invalid("the config is not a JSON object"))?;
        if !root.contains_key("num_attention_heads")
            && !root.contains_key("n_head")
            && let Some(text) = root.get("text_config").and_then(Value::as_object)
        {
            root = text;
        }
        let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("");
        let gptj = model_type == "gptj";
        let heads = count(root, "num_attention_heads")?
            .or(count(root, "n_head")?)
            .ok_or_else(|| invalid("missing `num_attention_heads`"))?;
        if heads == 0 {
            return Err(invalid("`num_attention_heads` must be > 0"));
        }
        let kv_heads = count(root, "num_key_value_heads")?.unwrap_or(heads);
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(invalid(format!(
                "`num_attention_heads` ({heads}) must be a multiple of `num_key_value_heads` ({kv_heads})"
            )));
        }
        let head_dim = match count(root, "head_dim")? {
            Some(d) => d,
            None => {
                let hidden = count(root, "hidden_size")?
                    .or(count(root, "n_embd")?)
                    .ok_or_else(|| invalid("missing `head_dim` and `hidden_size`"))?;
                if !hidden.is_multiple_of(heads) {
                    return Err(invalid(format!(
                        "`hidden_size` ({hidden}) must be a multiple of `num_attention_heads` ({heads}) when `head_dim` is not given"
                    )));
                }
                hidden / heads
            }
        };
        let max_position = number(root, "max_position_embeddings").or(number(root, "n_positions"));
        let original = number(root, "original_max_position_embeddings");
        let parameters = root.get("rope_parameters").and_then(Value::as_object);
        let scaling_object =
            parameters.or_else(|| root.get("rope_scaling").and_then(Value::as_object));
        let rope_base = parameters
            .and_then(|p| number(p, "rope_theta"))
            .or(number(root, "rope_theta"))
            .unwrap_or(10_000.0);
        let partial = parameters
            .and_then(|p| number(p, "partial_rotary_factor"))
            .or(number(root, "partial_rotary_factor"))
            .unwrap_or(1.0);
        let rotary_dim = match (gptj, count(root, "rotary_dim")?) {
            (true, Some(rotary_dim)) => rotary_dim,
            _ => (head_dim as f64 * partial) as usize,
        };
        let (scaling, mrope) = match scaling_object {
            Some(object) => RopeScaling::from_json(object, max_position, original)?,
            None => (RopeScaling::None, None),
        };
        let mut config = RopePoolConfig::new(head_dim, heads, kv_heads)
            .with_rope_base(rope_base)
            .with_scaling(scaling)
            .with_style(if gptj {
                RopeStyle::Gptj
            } else {
                RopeStyle::Neox
            });
        if rotary_dim != head_dim {
            config = config.with_rotary_dim(Some(rotary_dim));
        }
        if let Some(mrope) = mrope {
            config = config.with_mrope(Some(mrope));
        }
        // The q/k norm (Qwen3) uses the model's RMSNorm epsilon.
        if let Some(eps) = number(root, "rms_norm_eps") {
            config = config.with_qk_norm_eps(eps);
        }
        Ok(config)
    }
}
