//! Rope settings read from real `config.json` snippets (Llama-3.1-8B in both config forms,
//! Qwen2.5-7B with YaRN, Phi-3 mini 128k with LongRoPE, GPT-J-6B, Qwen2-VL-7B), checked against
//! the frequencies numpy computes from transformers' formulas (`scripts/generators/rope_fixture.py`, output
//! committed in `tests/fixtures/rope_frequencies.json`); and the documented errors of bad
//! scaling settings.

use burn_rope_pool::{RopePoolConfig, RopePoolError, RopeStyle};
use serde_json::Value;

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-300)
}

fn floats(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn hf_configs_give_the_frequencies_numpy_computes() {
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("rope_frequencies.json")).unwrap(),
    )
    .unwrap();
    let expected = expected.as_object().unwrap();
    assert!(expected.len() >= 6, "fixture incomplete");
    for (name, want) in expected {
        let config = RopePoolConfig::from_hf_config_file(fixtures().join("hf_configs").join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let count = |field: &str| want[field].as_u64().unwrap() as usize;
        assert_eq!(config.head_dim, count("head_dim"), "{name}: head_dim");
        assert_eq!(config.num_qo_heads, count("num_qo_heads"), "{name}");
        assert_eq!(config.num_kv_heads, count("num_kv_heads"), "{name}");
        assert_eq!(
            config.rotary_dim(),
            count("rotary_dim"),
            "{name}: rotary_dim"
        );
        let style = match want["style"].as_str().unwrap() {
            "gptj" => RopeStyle::Gptj,
            _ => RopeStyle::Neox,
        };
        assert_eq!(config.style, style, "{name}: style");
        let rope = config
            .frequencies()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let inv_freq = floats(&want["inv_freq"]);
        assert_eq!(rope.inv_freq.len(), inv_freq.len(), "{name}");
        for (i, (a, b)) in rope.inv_freq.iter().zip(&inv_freq).enumerate() {
            assert!(close(*a, *b), "{name}: inv_freq[{i}] {a} vs numpy {b}");
        }
        match (&rope.long, want["long_inv_freq"].is_null()) {
            (None, true) => {}
            (Some((long, from)), false) => {
                assert_eq!(*from as u64, want["long_from"].as_u64().unwrap(), "{name}");
                for (i, (a, b)) in long.iter().zip(&floats(&want["long_inv_freq"])).enumerate() {
                    assert!(close(*a, *b), "{name}: long inv_freq[{i}] {a} vs numpy {b}");
                }
            }
            (got, _) => panic!(
                "{name}: long set {got:?} vs numpy {}",
                want["long_inv_freq"]
            ),
        }
        let factor = want["attention_factor"].as_f64().unwrap();
        assert!(
            close(rope.attention_factor, factor),
            "{name}: attention factor {} vs numpy {factor}",
            rope.attention_factor
        );
        let rows: Option<Vec<u8>> = (!want["rows"].is_null()).then(|| {
            want["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_u64().unwrap() as u8)
                .collect()
        });
        assert_eq!(rope.rows, rows, "{name}: M-RoPE rows");
    }
}

#[test]
fn both_config_forms_give_one_config() {
    let read = |file: &str| {
        RopePoolConfig::from_hf_config_file(fixtures().join("hf_configs").join(file)).unwrap()
    };
    assert_eq!(
        read("llama31_8b.json"),
        read("llama31_8b_rope_parameters.json")
    );
}

#[test]
fn bad_scaling_settings_give_the_documented_errors() {
    let config = |scaling: &str| {
        RopePoolConfig::from_hf_config(&format!(
            r#"{{"hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 4096,
                "rope_theta": 10000.0, "rope_scaling": {scaling}}}"#
        ))
        .and_then(|c| c.frequencies().map(|_| c))
    };
    let cases = [
        (
            r#"{"rope_type": "dynamic", "factor": 2.0}"#,
            "invalid rope scaling: unknown rope_type `dynamic`",
        ),
        (
            r#"{"rope_type": "linear"}"#,
            "invalid rope scaling: missing field `factor` for rope_type `linear`",
        ),
        (
            r#"{"rope_type": "linear", "factor": -2.0}"#,
            "invalid rope scaling: factor must be positive and finite, got -2",
        ),
        (
            r#"{"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0],
                "original_max_position_embeddings": 1024}"#,
            "invalid rope scaling: short_factor has 1 entries, expected rotary_dim / 2 = 16",
        ),
        (
            r#"{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0}"#,
            "invalid rope scaling: missing field `original_max_position_embeddings` for rope_type `llama3`",
        ),
        (
            r#"{"rope_type": "default", "mrope_section": [4, 4, 4]}"#,
            "mrope_section must sum to rotary_dim / 2, got 12 for rotary_dim 32",
        ),
    ];
    for (scaling, message) in cases {
        let err = config(scaling).expect_err(scaling);
        assert_eq!(err.to_string(), message, "{scaling}");
    }
    let err = RopePoolConfig::new(8, 1, 1)
        .with_rotary_dim(Some(10))
        .frequencies()
        .unwrap_err();
    assert_eq!(
        err,
        RopePoolError::RotaryDim {
            rotary_dim: 10,
            head_dim: 8
        }
    );
    assert!(matches!(
        RopePoolConfig::from_hf_config("{}"),
        Err(RopePoolError::ModelConfig { .. })
    ));
}

/// The frequency cache keys the rounding dtype by name: F32 and I32 (one size) once shared an
/// entry, so the second config got the first one's rounded frequencies.
#[test]
fn the_frequency_cache_tells_rounding_dtypes_apart() {
    let base = RopePoolConfig::new(64, 1, 1).with_rope_base(12_345.0);
    let rounded = base
        .clone()
        .with_inv_freq_dtype(Some(burn::tensor::DType::F32))
        .frequencies()
        .unwrap();
    let same_size = base
        .clone()
        .with_inv_freq_dtype(Some(burn::tensor::DType::I32))
        .frequencies()
        .unwrap();
    let plain = base.frequencies().unwrap();
    assert_ne!(
        rounded.inv_freq, plain.inv_freq,
        "f32 rounding changes some frequency"
    );
    // Only float dtypes round: an integer one leaves the float64 frequencies.
    assert_eq!(same_size.inv_freq, plain.inv_freq);
}

/// Head counts that do not divide are refused by config parsing, not by a reshape later.
#[test]
fn indivisible_head_counts_are_refused() {
    let gqa = r#"{"hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 4}"#;
    let err = RopePoolConfig::from_hf_config(gqa).unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid model config: `num_attention_heads` (6) must be a multiple of `num_key_value_heads` (4)"
    );
    let hidden = r#"{"hidden_size": 50, "num_attention_heads": 8}"#;
    let err = RopePoolConfig::from_hf_config(hidden)
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid model config: `hidden_size` (50) must be a multiple of `num_attention_heads` (8) when `head_dim` is not given"
    );
}
