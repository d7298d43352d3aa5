//! The model path under hostile input, on Flex against the shipped tiny checkpoints:
//! - fuzz: random request files (malformed JSON, empty and long prompts, ids outside the
//!   vocabulary, zero and huge limits, small pools) and random edits of `config.json` (fields
//!   missing, zero, huge, negative, of the wrong type; rope and window settings). Every case is
//!   an error or a generation equal to the same requests run one at a time; none panics. CI runs
//!   `MODEL_FUZZ_CASES` cases (default 300).
//! - soak: many requests of mixed lengths through a small pool, so requests join while others
//!   decode and every row is reused many times; each generation equals its run alone, and
//!   running the whole batch again gives the same results. `MODEL_SOAK_REQUESTS` (default 80)
//!   sets the load.

use crate::common::Rng;
use burn::tensor::{DType, Device};
use burn_rope_pool::model::{
    Checkpoint, Decoder, GenerateOptions, Generated, Request, generate, requests_from_json,
};
use serde_json::{Value, json};

fn model_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/models")
        .join(name)
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Ids equal; logits equal within `tol` (both NaN counts as equal: a config with a negative
/// epsilon may make them so, alone or batched).
fn same(a: &Generated, b: &Generated, tol: f32) -> bool {
    a.generated == b.generated
        && a.logits.len() == b.logits.len()
        && a.logits.iter().zip(&b.logits).all(|(x, y)| {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| {
                    (p.is_nan() && q.is_nan()) || (p - q).abs() <= tol * (1.0 + q.abs())
                })
        })
}

/// Runs `requests` batched; when that succeeds (true), each request alone must give the same.
fn check_batch(
    model: &Decoder,
    requests: &[Request],
    pool_rows: Option<usize>,
    what: &str,
) -> bool {
    let options = GenerateOptions {
        pool_rows,
        keep_logits: true,
        ..GenerateOptions::default()
    };
    let Ok((batched, _)) = generate(model, requests, &options, |_| {}) else {
        return false;
    };
    assert_eq!(batched.len(), requests.len(), "{what}");
    for (i, (request, got)) in requests.iter().zip(&batched).enumerate() {
        let (alone, _) = generate(model, std::slice::from_ref(request), &options, |_| {})
            .unwrap_or_else(|e| panic!("{what}: request {i} batched but not alone: {e}"));
        assert!(
            same(got, &alone[0], 1e-5),
            "{what}: request {i} batched {:?} vs alone {:?}",
            got.generated,
            alone[0].generated
        );
    }
    true
}

fn random_requests(rng: &mut Rng, vocab: u64) -> Vec<Request> {
    (0..rng.below(4))
        .map(|_| {
            let len = match rng.below(8) {
                0 => 0,
                1 => 12 + rng.below(8) as usize,
                _ => 1 + rng.below(5) as usize,
            };
            let prompt = (0..len)
                .map(|_| match rng.below(20) {
                    0 => vocab as u32,
                    1 => u32::MAX,
                    _ => rng.below(vocab) as u32,
                })
                .collect();
            let max_new_tokens = match rng.below(10) {
                0 => 0,
                1 => 1_000_000_000,
                2 => usize::MAX,
                _ => 1 + rng.below(5) as usize,
            };
            Request {
                prompt,
                max_new_tokens,
            }
        })
        .collect()
}

/// A request file's text: valid JSON of `requests`, now and then damaged.
fn request_text(rng: &mut Rng, requests: &[Request]) -> String {
    let valid = json!({
        "sequences": requests.iter().map(|r| json!({
            "prompt": r.prompt,
            "max_new_tokens": r.max_new_tokens,
        })).collect::<Vec<_>>()
    })
    .to_string();
    match rng.below(8) {
        0 => valid[..rng.below(valid.len() as u64 + 1) as usize].to_string(),
        1 => valid.replacen("max_new_tokens", "max_tokens", 1),
        2 => valid.replacen(':', ":-", 1),
        3 => valid.replacen("[", "[1.5,", 1),
        4 => "{\"sequences\": {}}".to_string(),
        _ => valid,
    }
}

/// A random damaging value for a config field.
fn hostile_value(rng: &mut Rng) -> Option<Value> {
    match rng.below(10) {
        0 => None,
        1 => Some(json!(0)),
        2 => Some(json!(1_000_000_000_000u64)),
        3 => Some(json!(-1)),
        4 => Some(json!("x")),
        5 => Some(json!(1.5)),
        6 => Some(json!([])),
        7 => Some(json!({})),
        8 => Some(json!(true)),
        _ => Some(json!(1 + rng.below(8))),
    }
}

const FIELDS: [&str; 20] = [
    "num_attention_heads",
    "num_key_value_heads",
    "hidden_size",
    "head_dim",
    "intermediate_size",
    "num_hidden_layers",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "partial_rotary_factor",
    "max_position_embeddings",
    "model_type",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "tie_word_embeddings",
    "torch_dtype",
];

enum Outcome {
    Generated,
    RequestsRefused,
    Refused,
}

#[test]
fn hostile_requests_and_configs_give_errors_or_the_runs_alone() {
    let cases = env_count("MODEL_FUZZ_CASES", 300);
    let mut rng = Rng::new(0x6d6f_6465_6c66);
    let names = ["llama31_tiny", "qwen2_tiny"];
    let checkpoints: Vec<Checkpoint> = names
        .iter()
        .map(|n| Checkpoint::open(model_dir(n)).unwrap())
        .collect();
    let device = Device::flex();
    let (mut refused, mut ran, mut generated) = (0, 0, 0);
    for case in 0..cases {
        let which = rng.below(2) as usize;
        let mut config = checkpoints[which].config.clone();
        let mut edits = Vec::new();
        for _ in 0..rng.below(3) {
            let field = FIELDS[rng.below(FIELDS.len() as u64) as usize];
            let value = hostile_value(&mut rng);
            match &value {
                None => {
                    config.as_object_mut().unwrap().remove(field);
                }
                Some(v) => config[field] = v.clone(),
            }
            edits.push(format!("{field} = {value:?}"));
        }
        let vocab = config["vocab_size"]
            .as_u64()
            .unwrap_or(64)
            .clamp(1, 1 << 20);
        let requests = random_requests(&mut rng, vocab);
        let text = request_text(&mut rng, &requests);
        let pool_rows = (rng.below(4) == 0).then(|| rng.below(40) as usize);
        let what = format!(
            "case {case}: {} with {edits:?}, requests {text}, pool_rows {pool_rows:?}",
            names[which]
        );
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let requests = match requests_from_json(&text) {
                Ok(r) => r,
                Err(e) => {
                    assert!(e.to_string().starts_with("invalid request file: "), "{e}");
                    return Outcome::Refused;
                }
            };
            let mut checkpoint = Checkpoint::open(model_dir(names[which])).unwrap();
            checkpoint.config = config.clone();
            let model = match Decoder::load(&checkpoint, &device, DType::F32) {
                Ok(model) => model,
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    return Outcome::Refused;
                }
            };
            if check_batch(&model, &requests, pool_rows, &what) {
                Outcome::Generated
            } else {
                Outcome::RequestsRefused
            }
        }));
        match outcome {
            Ok(Outcome::Generated) => generated += 1,
            Ok(Outcome::RequestsRefused) => ran += 1,
            Ok(Outcome::Refused) => refused += 1,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("{what}: panicked: {message}");
            }
        }
    }
    eprintln!(
        "model fuzz: {cases} cases: {generated} generated (equal to the runs alone), {ran} \
         loaded but their requests refused, {refused} request file or config refused"
    );
    assert!(
        generated > cases / 20 && refused > cases / 10,
        "{generated} generated, {refused} refused"
    );
}

#[test]
fn a_busy_small_pool_gives_every_request_its_run_alone() {
    let count = env_count("MODEL_SOAK_REQUESTS", 80);
    for (name, device) in crate::common::devices() {
        soak(name, &device, count);
    }
}

/// `count` mixed requests through a 24-row pool on `device`, three times: each generation
/// equals its run alone and the other runs; on a CubeCL device the memory in use and reserved
/// after the third run is no more than after the second (pool rows and buffers reused).
fn soak(name: &str, device: &Device, count: usize) {
    let model = Decoder::load(
        &Checkpoint::open(model_dir("llama31_tiny")).unwrap(),
        device,
        DType::F32,
    )
    .unwrap();
    let vocab = model.config.vocab_size as u64;
    let mut rng = Rng::new(0x736f_616b);
    let requests: Vec<Request> = (0..count)
        .map(|_| Request {
            prompt: (0..1 + rng.below(10))
                .map(|_| rng.below(vocab) as u32)
                .collect(),
            max_new_tokens: 1 + rng.below(12) as usize,
        })
        .collect();
    // The longest request needs 21 rows: 24 rows hold one to a few requests at a time, so
    // requests keep joining mid-run on rows others just freed.
    let pool_rows = 24;
    let rows_used: usize = requests
        .iter()
        .map(|r| r.prompt.len() + r.max_new_tokens - 1)
        .sum();
    let options = GenerateOptions {
        pool_rows: Some(pool_rows),
        keep_logits: true,
        ..GenerateOptions::default()
    };
    let (first, stats) = generate(&model, &requests, &options, |_| {}).unwrap();
    assert_eq!(stats.finished, count);
    let (second, _) = generate(&model, &requests, &options, |_| {}).unwrap();
    let after_second = crate::common::memory(device);
    let (third, _) = generate(&model, &requests, &options, |_| {}).unwrap();
    let after_third = crate::common::memory(device);
    if let (Some(a), Some(b)) = (after_second, after_third) {
        assert!(
            b.0 <= a.0 && b.1 <= a.1,
            "{name}: memory grew from {a:?} to {b:?}"
        );
    }
    for (i, request) in requests.iter().enumerate() {
        let (alone, _) = generate(&model, std::slice::from_ref(request), &options, |_| {}).unwrap();
        assert!(
            same(&first[i], &alone[0], 1e-5),
            "{name} request {i}: batched vs alone"
        );
        assert!(
            same(&first[i], &second[i], 0.0),
            "{name} request {i}: run to run"
        );
        assert!(
            same(&first[i], &third[i], 0.0),
            "{name} request {i}: run to run"
        );
    }
    eprintln!(
        "model soak {name}: {count} requests, {} steps, {rows_used} row uses over {pool_rows} rows ({:.0} per row); memory (in use, reserved) after runs 2 and 3: {after_second:?} {after_third:?}",
        stats.steps,
        rows_used as f64 / pool_rows as f64
    );
}
