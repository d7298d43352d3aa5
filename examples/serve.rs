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

use burn::tensor::DType;
use burn_rope_pool::model::{BurnAllReduce, Collective, InProcess};
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
    /// Keys and values as fp8 e4m3 in the KV pools, with these scales `K_SCALE,V_SCALE` (a
    /// stored code is e4m3(x / scale); half the bytes of f16). Default: the run dtype.
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        value_name = "K_SCALE,V_SCALE"
    )]
    fp8_cache: Option<Vec<f32>>,
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
    /// Chunked prefill: the most prompt tokens one step runs (default: whole prompts).
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// The model's name in the API (default: the model folder's name).
    #[arg(long)]
    served_model_name: Option<String>,
    /// Tensor parallelism: the model split over this many GPUs (`DEVICE:0` …; read into host
    /// memory first), summed by Burn's all-reduce on `cuda`, in process elsewhere.
    #[arg(long, default_value_t = 1)]
    tp: usize,
}

fn run(args: Args) -> Result<(), String> {
    // Checked before the checkpoint loads.
    let fp8_cache = fp8_scales(&args.fp8_cache)?;
    let device = match args.tp {
        1 => device_by_name(&args.device)?,
        // Host memory first (where the build has Flex, else the first GPU; an fp8 checkpoint the
        // first GPU, where its projections stay fp8 for the shards), then the shards.
        _ => {
            let first_gpu = || device_by_name(&format!("{}:0", args.device));
            match quantized(&args.model) {
                true => first_gpu()?,
                false => device_by_name("flex").or_else(|_| first_gpu())?,
            }
        }
    };
    eprintln!("loading {} onto {device:?}", args.model.display());
    let mut model = ServedModel::load(&args.model, args.tokenizer.as_deref(), &device, args.dtype)
        .map_err(|e| e.to_string())?;
    if let ServedDecoder::Whole(decoder) = model.decoder {
        model.decoder = ServedDecoder::Whole(decoder.with_fp8_cache(fp8_cache));
    }
    if args.tp > 1 {
        let devices = (0..args.tp)
            .map(|i| device_by_name(&format!("{}:{i}", args.device)))
            .collect::<Result<Vec<_>, _>>()?;
        let collective: Box<dyn Collective> = match args.device.as_str() {
            "cuda" => Box::new(BurnAllReduce::new(devices.clone()).map_err(|e| e.to_string())?),
            _ => Box::new(InProcess),
        };
        eprintln!("splitting it over {devices:?}");
        model = model
            .shard(&devices, collective)
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
        prefill_chunk: args.prefill_chunk,
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

/// `--fp8-cache K_SCALE,V_SCALE` as the decoder takes it.
fn fp8_scales(scales: &Option<Vec<f32>>) -> Result<Option<(f32, f32)>, String> {
    match scales.as_deref() {
        None => Ok(None),
        Some(&[k, v]) => Ok(Some((k, v))),
        Some(other) => Err(format!("--fp8-cache takes K_SCALE,V_SCALE, got {other:?}")),
    }
}

/// Whether the checkpoint's `config.json` declares a `quantization_config` (read alone, before
/// the weights).
fn quantized(model: &std::path::Path) -> bool {
    std::fs::read_to_string(model.join("config.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|config| !config["quantization_config"].is_null())
}
