//! An OpenAI-compatible HTTP server on a HuggingFace checkpoint (`burn_rope_pool::serve`):
//! `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`, `GET /health`,
//! `GET /metrics`, continuous batching over every request.
//!
//! `cargo run --release --example serve --features server -- --model DIR [--tokenizer DIR]
//!  [--host 127.0.0.1] [--port 8000] [--device D] [--dtype f32] [--pool-rows N] [--max-batch N]
//!  [--max-queue N] [--api-key KEY] [--default-max-tokens N] [--served-model-name NAME]
//!  [--prefill-chunk N] [--tp N] [--fp8-cache K_SCALE,V_SCALE]`
//!
//! SIGINT or SIGTERM stops it gracefully: no new connections, the requests in flight finish,
//! exit status 0.

mod common;

use burn::tensor::DType;
use burn_rope_pool::serve::{ServeOptions, ServedDecoder, ServedModel};
use burn_rope_pool::testing::{device_by_name, dtype_by_name};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    about = "An OpenAI-compatible server with continuous batching on a HuggingFace checkpoint"
)]
struct Args {
    /// The checkpoint folder (config.json, model.safetensors or a sharded index).
    #[arg(long)]
    model: PathBuf,
    /// The tokenizer folder (tokenizer.json, tokenizer_config.json); default: the model's.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port (0: any free one).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// flex, wgpu, vulkan, metal, cuda or default.
    #[arg(long, default_value = "default")]
    device: String,
    /// The dtype weights are converted to and the model runs in.
    #[arg(long, value_parser = dtype_by_name, default_value = "f32")]
    dtype: DType,
    #[command(flatten)]
    pool_and_ranks: common::PoolAndRanks,
    /// Rows of each layer's KV pool: the tokens all running requests hold together.
    #[arg(long, default_value_t = ServeOptions::default().pool_rows)]
    pool_rows: usize,
    /// The most requests in one batch.
    #[arg(long, default_value_t = ServeOptions::default().max_batch)]
    max_batch: usize,
    /// The most requests waiting to start; past it, 429.
    #[arg(long, default_value_t = ServeOptions::default().max_queue)]
    max_queue: usize,
    /// Clients must send `Authorization: Bearer KEY` on /v1/*.
    #[arg(long)]
    api_key: Option<String>,
    /// `max_tokens` of requests that give none (default: the rest of the context for a chat,
    /// 16 for a completion; a chat's rows are reserved for all of them).
    #[arg(long)]
    default_max_tokens: Option<usize>,
    /// Chunked prefill: the most prompt tokens one step runs; 0: every prompt whole in its
    /// first step.
    #[arg(long, default_value_t = 2048)]
    prefill_chunk: usize,
    /// The model's name in the API (default: the model folder's name).
    #[arg(long)]
    served_model_name: Option<String>,
}

fn run(args: Args) -> Result<(), String> {
    // Checked before the checkpoint loads.
    let fp8_cache = args.pool_and_ranks.fp8_cache()?;
    let ranks = args.pool_and_ranks.ranks(&args.device, &args.model)?;
    let device = match &ranks {
        None => device_by_name(&args.device)?,
        Some(ranks) => ranks.load.clone(),
    };
    eprintln!("loading {} onto {device:?}", args.model.display());
    let mut model = ServedModel::load(&args.model, args.tokenizer.as_deref(), &device, args.dtype)
        .map_err(|e| e.to_string())?;
    if let ServedDecoder::Whole(decoder) = model.decoder {
        model.decoder = ServedDecoder::Whole(decoder.with_fp8_cache(fp8_cache));
    }
    if let Some(ranks) = ranks {
        eprintln!("splitting it over {:?}", ranks.devices);
        model = model
            .shard(&ranks.devices, ranks.collective)
            .map_err(|e| e.to_string())?;
    }
    if let Some(name) = args.served_model_name {
        model.name = name;
    }
    eprintln!("serving `{}`", model.name);
    let options = ServeOptions {
        host: args.host,
        port: args.port,
        pool_rows: args.pool_rows,
        max_batch: args.max_batch,
        max_queue: args.max_queue,
        max_pool_bytes: None,
        api_key: args.api_key,
        default_max_tokens: args.default_max_tokens,
        prefill_chunk: (args.prefill_chunk > 0).then_some(args.prefill_chunk),
    };
    burn_rope_pool::serve::run(model, options).map_err(|e| e.to_string())
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
