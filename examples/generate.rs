//! Greedy generation with continuous batching on a HuggingFace checkpoint (Llama 2/3/3.1,
//! Mistral, Qwen2, Qwen3), every layer's RoPE and KV-pool write through `rope_pool_fused`.
//!
//! `cargo run --release --example generate -- --model DIR --requests REQ.json --device D
//!  --dtype f32 --output OUT.json [--pool-rows N] [--quiet]`
//!
//! `REQ.json`: `{"sequences": [{"prompt": [ids], "max_new_tokens": n}, ...]}`;
//! `OUT.json`: `{"sequences": [{"generated": [ids], "logits": [[vocab floats] × n]}, ...]}` in
//! request order, `logits[i]` the logits `generated[i]` was chosen from.

use burn::tensor::DType;
use burn_rope_pool::model::Checkpoint;
use burn_rope_pool::model::Decoder;
use burn_rope_pool::model::{GenerateOptions, Generated, generate, requests_from_json};
use burn_rope_pool::testing::{device_by_name, dtype_by_name};
use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Greedy generation with continuous batching on a HuggingFace checkpoint")]
struct Args {
    /// The checkpoint folder (config.json, model.safetensors or a sharded index).
    #[arg(long)]
    model: std::path::PathBuf,
    /// The requests (JSON, see the module docs).
    #[arg(long)]
    requests: std::path::PathBuf,
    /// flex, wgpu, vulkan, metal, cuda or default.
    #[arg(long, default_value = "default")]
    device: String,
    /// The dtype weights are converted to and the model runs in.
    #[arg(long, value_parser = dtype_by_name, default_value = "f32")]
    dtype: DType,
    /// Write the generations here (JSON); without, print the ids.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
    /// Rows of each layer's KV pool (default: every request at once). Requests that do not fit
    /// wait for a finished one's rows.
    #[arg(long)]
    pool_rows: Option<usize>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(serde::Serialize)]
struct Output {
    sequences: Vec<Generated>,
}

fn run(args: Args) -> Result<(), String> {
    let device = device_by_name(&args.device)?;
    let dtype = args.dtype;
    let text = std::fs::read_to_string(&args.requests)
        .map_err(|e| format!("cannot read {}: {e}", args.requests.display()))?;
    let requests =
        requests_from_json(&text).map_err(|e| format!("{}: {e}", args.requests.display()))?;
    let checkpoint = Checkpoint::open(&args.model).map_err(|e| e.to_string())?;
    let model = Decoder::load(&checkpoint, &device, dtype).map_err(|e| e.to_string())?;
    let total: usize = requests.iter().map(|r| r.max_new_tokens).sum();
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} tokens {msg}")
                .map_err(|e| e.to_string())?,
        );
        bar
    };
    let options = GenerateOptions {
        pool_rows: args.pool_rows,
        keep_logits: true,
        ..GenerateOptions::default()
    };
    let (results, stats) = generate(&model, &requests, &options, |stats| {
        bar.set_position(stats.generated as u64);
        bar.set_message(format!(
            "prefill {:.0} tok/s, decode {:.0} tok/s, {} done",
            stats.prefill_rate(),
            stats.decode_rate(),
            stats.finished
        ));
    })
    .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    if !args.quiet {
        eprintln!(
            "{} requests, {} steps: prefill {} tokens at {:.0} tok/s, decode {} tokens at {:.0} tok/s",
            results.len(),
            stats.steps,
            stats.prefill_tokens,
            stats.prefill_rate(),
            stats.decode_tokens,
            stats.decode_rate()
        );
    }
    match &args.output {
        Some(path) => {
            let json =
                serde_json::to_string(&Output { sequences: results }).map_err(|e| e.to_string())?;
            std::fs::write(path, json).map_err(|e| format!("cannot write {}: {e}", path.display()))
        }
        None => {
            for (i, r) in results.iter().enumerate() {
                println!("{i}: {:?}", r.generated);
            }
            Ok(())
        }
    }
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
