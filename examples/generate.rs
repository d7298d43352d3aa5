//! Text in, text out on a HuggingFace checkpoint (Llama 2/3/3.1, Mistral, Qwen2, Qwen3):
//! the checkpoint's tokenizer and chat template, sampling on the device, stop conditions, and
//! the text streamed as it is generated; continuous batching over every request.
//!
//! `cargo run --release --example generate -- --model DIR --prompt "Hi" [--chat] [--system S]
//!  [--temperature T --top-k K --top-p P --min-p M --repetition-penalty R --seed N]
//!  [--max-new-tokens N] [--stop STR]... [--tokenizer DIR] [--device D] [--dtype f32] [--tp N]
//!  [--fp8-cache K_SCALE,V_SCALE]`
//!
//! `--requests REQ.json` instead of `--prompt`: `{"sequences": [{"prompt": "text" or [ids]
//! or "messages": [{"role", "content"}...], "max_new_tokens": n, optional "temperature",
//! "top_k", "top_p", "min_p", "repetition_penalty", "seed", "stop": [...]}, ...]}`; settings a
//! request leaves out come from the command line. `--output OUT.json` writes
//! `{"sequences": [{"prompt_ids", "generated", "text", "finish_reason", "logits"?}, ...]}` in
//! request order (`logits` with `--logits`: the logits each generated id was drawn from).

mod common;

use burn::tensor::DType;
use burn_rope_pool::model::{
    Checkpoint, Decoder, Engine, EngineOptions, Event, FinishReason, GenerationRequest, Model,
    SamplingParams, ShardedDecoder, StopConditions,
};
use burn_rope_pool::testing::{device_by_name, dtype_by_name};
use burn_rope_pool::text::{ChatMessage, Tokenizer};
use clap::Parser;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Text generation with continuous batching on a HuggingFace checkpoint")]
struct Args {
    /// The checkpoint folder (config.json, model.safetensors or a sharded index).
    #[arg(long)]
    model: PathBuf,
    /// The tokenizer folder (tokenizer.json, tokenizer_config.json); default: the model's.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// One prompt; its text is streamed to stdout.
    #[arg(long, conflicts_with = "requests")]
    prompt: Option<String>,
    /// Requests from a JSON file (see the module docs).
    #[arg(long)]
    requests: Option<PathBuf>,
    /// Render the prompt through the tokenizer's chat template as a user message.
    #[arg(long)]
    chat: bool,
    /// A system message before the prompt (with --chat).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// 0: greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// 0: off.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// 1: off.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// 0: off.
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// 1: off.
    #[arg(long, default_value_t = 1.0)]
    repetition_penalty: f32,
    /// Same seed, same tokens on the same device.
    #[arg(long)]
    seed: Option<u64>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// A string that ends the generation (repeat the flag for several).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating past the model's end-of-sequence ids.
    #[arg(long)]
    ignore_eos: bool,
    /// flex, wgpu, vulkan, metal, cuda or default.
    #[arg(long, default_value = "default")]
    device: String,
    /// The dtype weights are converted to and the model runs in.
    #[arg(long, value_parser = dtype_by_name, default_value = "f32")]
    dtype: DType,
    #[command(flatten)]
    pool_and_ranks: common::PoolAndRanks,
    /// Rows of each layer's KV pool (default: every request at once). Requests that do not fit
    /// wait for a finished one's rows.
    #[arg(long)]
    pool_rows: Option<usize>,
    /// The most requests in one batch.
    #[arg(long, default_value_t = 64)]
    max_batch: usize,
    /// Chunked prefill: the most prompt tokens one step runs (default: whole prompts).
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// Write the generations here (JSON).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Keep the logits of every generated token in the output.
    #[arg(long, requires = "output")]
    logits: bool,
    /// No progress or statistics on stderr.
    #[arg(long)]
    quiet: bool,
}

/// A request of a request file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestSpec {
    #[serde(default)]
    prompt: Option<Prompt>,
    #[serde(default)]
    messages: Option<Vec<ChatMessage>>,
    max_new_tokens: Option<usize>,
    temperature: Option<f32>,
    top_k: Option<usize>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    repetition_penalty: Option<f32>,
    seed: Option<u64>,
    stop: Option<Vec<String>>,
    /// Fields of an `expected.json` (a checkpoint's reference generations): ignored.
    #[serde(default, rename = "generated")]
    _generated: serde_json::Value,
    #[serde(default, rename = "logits")]
    _logits: serde_json::Value,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

#[derive(serde::Deserialize)]
struct RequestFile {
    sequences: Vec<RequestSpec>,
}

#[derive(Default, serde::Serialize)]
struct Output {
    prompt_ids: Vec<u32>,
    generated: Vec<u32>,
    text: String,
    finish_reason: Option<FinishReason>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    logits: Vec<Vec<f32>>,
}

/// The prompt ids of a request: ids as given, text encoded (with the tokenizer's special
/// tokens), messages through the chat template.
fn prompt_ids(
    tokenizer: Option<&Tokenizer>,
    prompt: Option<Prompt>,
    messages: Option<Vec<ChatMessage>>,
) -> Result<Vec<u32>, String> {
    let need = |what| tokenizer.ok_or_else(|| format!("{what} needs a tokenizer.json"));
    match (prompt, messages) {
        (Some(Prompt::Ids(ids)), None) => Ok(ids),
        (Some(Prompt::Text(text)), None) => need("a text prompt")?
            .encode(&text, true)
            .map_err(|e| e.to_string()),
        (None, Some(messages)) => need("a chat")?
            .encode_chat(&messages, true)
            .map_err(|e| e.to_string()),
        _ => Err("a request has either a prompt or messages".into()),
    }
}

fn run(args: Args) -> Result<(), String> {
    // Checked before the checkpoint loads.
    let fp8_cache = args.pool_and_ranks.fp8_cache()?;
    let device = device_by_name(&args.device)?;
    let checkpoint = Checkpoint::open(&args.model).map_err(|e| e.to_string())?;
    let tokenizer_dir = args.tokenizer.clone().unwrap_or_else(|| args.model.clone());
    let tokenizer = match Tokenizer::from_dir(&tokenizer_dir) {
        Ok(t) => Some(t),
        // A checkpoint without a tokenizer still takes ids.
        Err(_) if args.tokenizer.is_none() && !tokenizer_dir.join("tokenizer.json").exists() => {
            None
        }
        Err(e) => return Err(e.to_string()),
    };
    let tokenizer = tokenizer.as_ref();
    // transformers' choice: the checkpoint's `eos_token_id` (generation_config.json first).
    let eos = match args.ignore_eos {
        true => Vec::new(),
        false => checkpoint.eos_token_ids().map_err(|e| e.to_string())?,
    };
    let defaults = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repetition_penalty,
        seed: args.seed,
    };
    let mut requests = Vec::new();
    match (&args.prompt, &args.requests) {
        (Some(prompt), _) => {
            let (prompt, messages) = match args.chat {
                true => {
                    let system = args.system.iter().map(|s| ChatMessage {
                        role: "system".into(),
                        content: s.clone(),
                    });
                    let user = ChatMessage {
                        role: "user".into(),
                        content: prompt.clone(),
                    };
                    (None, Some(system.chain([user]).collect()))
                }
                false => (Some(Prompt::Text(prompt.clone())), None),
            };
            requests.push(GenerationRequest {
                prompt: prompt_ids(tokenizer, prompt, messages)?,
                max_new_tokens: args.max_new_tokens,
                sampling: defaults.clone(),
                stop: StopConditions {
                    eos_token_ids: eos.clone(),
                    stop_strings: args.stop.clone(),
                },
            });
        }
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let file: RequestFile = serde_json::from_str(&text)
                .map_err(|e| format!("{}: invalid request file: {e}", path.display()))?;
            for (i, spec) in file.sequences.into_iter().enumerate() {
                let prompt = prompt_ids(tokenizer, spec.prompt, spec.messages)
                    .map_err(|e| format!("request {i}: {e}"))?;
                requests.push(GenerationRequest {
                    prompt,
                    max_new_tokens: spec.max_new_tokens.unwrap_or(args.max_new_tokens),
                    sampling: SamplingParams {
                        temperature: spec.temperature.unwrap_or(defaults.temperature),
                        top_k: spec.top_k.unwrap_or(defaults.top_k),
                        top_p: spec.top_p.unwrap_or(defaults.top_p),
                        min_p: spec.min_p.unwrap_or(defaults.min_p),
                        repetition_penalty: spec
                            .repetition_penalty
                            .unwrap_or(defaults.repetition_penalty),
                        seed: spec.seed.or(defaults.seed),
                    },
                    stop: StopConditions {
                        eos_token_ids: eos.clone(),
                        stop_strings: spec.stop.unwrap_or_else(|| args.stop.clone()),
                    },
                });
            }
        }
        (None, None) => return Err("give --prompt or --requests".into()),
    }
    if let Some(ranks) = args.pool_and_ranks.ranks(&args.device, &args.model)? {
        let whole = Decoder::load(&checkpoint, &ranks.load, args.dtype)
            .map_err(|e| e.to_string())?
            .with_fp8_cache(fp8_cache);
        let model = ShardedDecoder::new(&whole, &ranks.devices, ranks.collective)
            .map_err(|e| e.to_string())?;
        drop(whole);
        return generate_all(&model, &checkpoint, tokenizer, requests, &args);
    }
    let model = Decoder::load(&checkpoint, &device, args.dtype)
        .map_err(|e| e.to_string())?
        .with_fp8_cache(fp8_cache);
    generate_all(&model, &checkpoint, tokenizer, requests, &args)
}

/// The requests through one engine over `model`; the text streamed or printed, the output file
/// written.
fn generate_all<M: Model>(
    model: &M,
    checkpoint: &Checkpoint,
    tokenizer: Option<&Tokenizer>,
    requests: Vec<GenerationRequest>,
    args: &Args,
) -> Result<(), String> {
    let rows = |r: &GenerationRequest| r.prompt.len() + r.max_new_tokens.saturating_sub(1);
    let options = EngineOptions {
        pool_rows: args
            .pool_rows
            .unwrap_or_else(|| requests.iter().map(rows).sum::<usize>())
            .max(1),
        max_batch: args.max_batch,
        max_pool_bytes: None,
        keep_logits: args.logits,
        // transformers' `generate` without an attention mask: padding ids leave the prompt.
        pad_token_id: checkpoint.pad_token_id().map_err(|e| e.to_string())?,
        prefill_chunk: args.prefill_chunk,
    };
    let mut engine = Engine::new(model, tokenizer, options).map_err(|e| e.to_string())?;
    let mut outputs: Vec<Output> = Vec::new();
    for (i, request) in requests.into_iter().enumerate() {
        outputs.push(Output {
            prompt_ids: request.prompt.clone(),
            ..Output::default()
        });
        engine
            .submit(request)
            .map_err(|e| format!("request {i}: {e}"))?;
    }
    // One request streams its text as it comes; several print theirs at the end.
    let stream = outputs.len() == 1 && args.output.is_none();
    let mut stdout = std::io::stdout().lock();
    while !engine.is_idle() {
        for event in engine.step().map_err(|e| e.to_string())? {
            let (id, text) = match event {
                Event::Token {
                    id,
                    token,
                    text,
                    logits,
                } => {
                    let out = &mut outputs[id as usize];
                    out.generated.push(token);
                    out.logits.extend(logits);
                    (id, text)
                }
                Event::Finished { id, reason, text } => {
                    outputs[id as usize].finish_reason = Some(reason);
                    (id, text)
                }
            };
            outputs[id as usize].text.push_str(&text);
            if stream {
                write!(stdout, "{text}").and_then(|()| stdout.flush()).ok();
            }
        }
    }
    if stream {
        writeln!(stdout).ok();
    }
    if !args.quiet {
        let stats = engine.stats();
        eprintln!(
            "{} requests, {} steps: prefill {} tokens at {:.0} tok/s, decode {} tokens at {:.0} tok/s",
            outputs.len(),
            stats.steps,
            stats.prefill_tokens,
            stats.prefill_rate(),
            stats.decode_tokens,
            stats.decode_rate()
        );
    }
    match &args.output {
        Some(path) => {
            let json = serde_json::json!({ "sequences": outputs });
            std::fs::write(path, json.to_string())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        }
        None if !stream => {
            for (i, out) in outputs.iter().enumerate() {
                match tokenizer {
                    Some(_) => println!("{i}: {:?}", out.text),
                    None => println!("{i}: {:?}", out.generated),
                }
            }
            Ok(())
        }
        None => Ok(()),
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
