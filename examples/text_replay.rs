//! Replays the text references through the crate and writes the same JSON shapes back, so that
//! a reference folder can be checked from the command line (compare the output with the input).
//!
//! `cargo run --release --example text_replay -- --tokenizer DIR --output CASES.json`: every case
//! of `DIR/cases.json` — `encode` (`ids_with_special`, `ids`), `decode` (`text`,
//! `text_skip_special`), `chat` (`text`, `ids`, or `error`: our message) — recomputed from its
//! inputs.
//!
//! `cargo run --release --example text_replay -- --sampling sampling.json --output OUT.json
//! [--device D]`: every case's `kept_ids` and `kept_probs` recomputed on the device from its
//! `setting`, `previous_ids` and `logits`.

use burn::tensor::{Device, Tensor, TensorData};
use burn_rope_pool::model::{SamplingParams, probabilities};
use burn_rope_pool::testing::device_by_name;
use burn_rope_pool::text::{ChatMessage, Tokenizer};
use clap::Parser;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Replays tokenizer cases or sampling cases through the crate")]
struct Args {
    /// A tokenizer folder with `cases.json`.
    #[arg(long, conflicts_with = "sampling")]
    tokenizer: Option<PathBuf>,
    /// A `sampling.json` of transformers' processed distributions.
    #[arg(long)]
    sampling: Option<PathBuf>,
    /// Where to write the recomputed cases.
    #[arg(long)]
    output: PathBuf,
    /// flex, wgpu, vulkan, metal, cuda or default (sampling).
    #[arg(long, default_value = "flex")]
    device: String,
}

fn read(path: &std::path::Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn ids(v: &Value) -> Result<Vec<u32>, String> {
    v.as_array()
        .ok_or("ids must be an array")?
        .iter()
        .map(|x| {
            x.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("bad id {x}"))
        })
        .collect()
}

fn tokenizer_cases(dir: &std::path::Path) -> Result<Value, String> {
    let tokenizer = Tokenizer::from_dir(dir).map_err(|e| e.to_string())?;
    let cases = read(&dir.join("cases.json"))?;
    let list = |key: &str| cases[key].as_array().cloned().unwrap_or_default();
    let e = |e: burn_rope_pool::text::TextError| e.to_string();
    let mut encode = Vec::new();
    for case in list("encode") {
        let text = case["text"].as_str().ok_or("encode case without text")?;
        encode.push(json!({
            "text": text,
            "ids_with_special": tokenizer.encode(text, true).map_err(e)?,
            "ids": tokenizer.encode(text, false).map_err(e)?,
        }));
    }
    let mut decode = Vec::new();
    for case in list("decode") {
        let ids = ids(&case["ids"])?;
        decode.push(json!({
            "ids": ids,
            "text": tokenizer.decode(&ids, false).map_err(e)?,
            "text_skip_special": tokenizer.decode(&ids, true).map_err(e)?,
        }));
    }
    let mut chat = Vec::new();
    for case in list("chat") {
        let messages: Vec<ChatMessage> =
            serde_json::from_value(case["messages"].clone()).map_err(|e| e.to_string())?;
        let generation = case["add_generation_prompt"].as_bool().unwrap_or(false);
        let rendered = tokenizer.apply_chat_template(&messages, generation);
        chat.push(match rendered {
            Ok(text) => json!({
                "messages": messages,
                "add_generation_prompt": generation,
                "text": text,
                "ids": tokenizer.encode_chat(&messages, generation).map_err(e)?,
            }),
            Err(error) => json!({ "messages": messages, "error": error.to_string() }),
        });
    }
    Ok(json!({ "encode": encode, "decode": decode, "chat": chat }))
}

fn sampling_cases(path: &std::path::Path, device: &Device) -> Result<Value, String> {
    let reference = read(path)?;
    let mut out = Vec::new();
    for case in reference["cases"].as_array().ok_or("no cases")? {
        let setting: SamplingParams =
            serde_json::from_value(case["setting"].clone()).map_err(|e| e.to_string())?;
        let logits: Vec<f32> = case["logits"]
            .as_array()
            .ok_or("no logits")?
            .iter()
            .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
            .collect();
        let previous = ids(&case["previous_ids"])?;
        let n = logits.len();
        let logits = Tensor::<2>::from_data(TensorData::new(logits, [1, n]), device);
        let probs = probabilities(logits, &[setting], &[&previous]).map_err(|e| e.to_string())?;
        let probs: Vec<f32> = probs
            .into_data()
            .convert::<f32>()
            .try_into_vec()
            .map_err(|e| format!("{e:?}"))?;
        let kept: Vec<usize> = (0..n).filter(|&i| probs[i] > 0.0).collect();
        out.push(json!({
            "setting": case["setting"],
            "previous_ids": previous,
            "kept_ids": kept,
            "kept_probs": kept.iter().map(|&i| probs[i]).collect::<Vec<f32>>(),
        }));
    }
    Ok(json!({ "order": reference["order"], "cases": out }))
}

fn run(args: Args) -> Result<(), String> {
    let out = match (&args.tokenizer, &args.sampling) {
        (Some(dir), None) => tokenizer_cases(dir)?,
        (None, Some(path)) => sampling_cases(path, &device_by_name(&args.device)?)?,
        _ => return Err("give --tokenizer DIR or --sampling FILE".into()),
    };
    let text = serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?;
    std::fs::write(&args.output, text)
        .map_err(|e| format!("cannot write {}: {e}", args.output.display()))
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
