//! The server's cost: a Llama-3-8B-shaped decoder (random weights) served over HTTP on the
//! loopback, `c` concurrent completions of `--prompt` ids and `--tokens` greedy tokens each, beside
//! the engine alone (`generate`) on the same requests in the same process. Throughput is
//! generated tokens over a round's wall time; time to first token and inter-token latency are the
//! server's own `/metrics` histograms (mean over the round).
//!
//! `cargo bench --bench serve --features server -- [--device D] [--batches 1,8,64]
//!  [--prompt 512] [--tokens 64] [--layers 32] [--vocab 128256] [--prefill-chunk N]`

use burn::tensor::DType;
use burn_rope_pool::model::{DecoderConfig, GenerateOptions, Request, generate};
use burn_rope_pool::serve::{ServeOptions, ServedDecoder, ServedModel, Server};
use burn_rope_pool::testing::{Rng, device_by_name, llama3_8b, random_decoder};
use burn_rope_pool::text::Tokenizer;
use clap::Parser;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "default")]
    device: String,
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 8, 64])]
    batches: Vec<usize>,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 512)]
    prompt: usize,
    /// Generated tokens per request.
    #[arg(long, default_value_t = 64)]
    tokens: usize,
    /// Decoder layers (32 for the real shape).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Vocabulary (128256 for the real shape).
    #[arg(long, default_value_t = 128_256)]
    vocab: usize,
    /// The tokenizer the server holds (prompts are ids; generated ids past its vocabulary
    /// decode to nothing).
    #[arg(long, default_value = "tests/text/tokenizers/llama3_style")]
    tokenizer: std::path::PathBuf,
    /// Chunked prefill: the most prompt tokens a step runs, in the server and the engine alike
    /// (default: whole prompts).
    #[arg(long)]
    prefill_chunk: Option<usize>,
}

/// One HTTP/1.1 request on its own connection; the status and the body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let status = answer[9..12].parse().expect("status");
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// `sum` and `count` of a histogram of `/metrics`.
fn histogram(metrics: &str, name: &str) -> (f64, f64) {
    let value = |suffix: &str| {
        let key = format!("burn_rope_pool_{name}_{suffix} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    (value("sum"), value("count"))
}

fn prompts(batch: usize, prompt: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = Rng::new(seed);
    (0..batch)
        .map(|_| {
            (0..prompt)
                .map(|_| (rng.next_u64() % vocab as u64) as u32)
                .collect()
        })
        .collect()
}

fn main() {
    let args = Args::parse();
    let device = device_by_name(&args.device).expect("device");
    let config = DecoderConfig {
        num_layers: args.layers,
        vocab_size: args.vocab,
        ..llama3_8b()
    };
    let decoder = random_decoder(config, &device, DType::F16).expect("random weights");
    println!(
        "Llama-3-8B shape, {} layers, f16 on {device:?}; {} prompt ids and {} greedy tokens a request\n",
        args.layers, args.prompt, args.tokens
    );

    // The engine alone, on the same requests.
    let mut engine_rates = Vec::new();
    for &batch in &args.batches {
        let requests: Vec<Request> = prompts(batch, args.prompt, args.vocab, 7)
            .into_iter()
            .map(|prompt| Request {
                prompt,
                max_new_tokens: args.tokens,
            })
            .collect();
        let options = GenerateOptions {
            prefill_chunk: args.prefill_chunk,
            ..GenerateOptions::default()
        };
        generate(&decoder, &requests[..1], &options, |_| {}).expect("warm-up");
        let start = Instant::now();
        let (out, _) = generate(&decoder, &requests, &options, |_| {}).expect("run");
        let tokens: usize = out.iter().map(|g| g.generated.len()).sum();
        engine_rates.push(tokens as f64 / start.elapsed().as_secs_f64());
    }

    let model = ServedModel {
        decoder: ServedDecoder::Whole(decoder),
        tokenizer: Tokenizer::from_dir(&args.tokenizer).expect("tokenizer"),
        eos_token_ids: Vec::new(),
        pad_token_id: None,
        name: "llama3-8b-random".into(),
    };
    let max = args.batches.iter().copied().max().unwrap_or(1);
    let options = ServeOptions {
        host: "127.0.0.1".into(),
        port: 0,
        pool_rows: max * (args.prompt + args.tokens),
        max_batch: max,
        max_queue: 2 * max,
        prefill_chunk: args.prefill_chunk,
        ..ServeOptions::default()
    };
    let server = Server::start(model, options).expect("server");
    let addr = server.addr();
    println!(
        "| concurrent requests | server tok/s | engine alone tok/s | server / engine | TTFT ms | ITL ms |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for (&batch, engine) in args.batches.iter().zip(engine_rates) {
        let body = |prompt: &[u32], tokens: usize| {
            serde_json::json!({
                "model": "llama3-8b-random", "prompt": prompt, "max_tokens": tokens,
                "temperature": 0,
            })
            .to_string()
        };
        let prompts = prompts(batch, args.prompt, args.vocab, 7);
        let warm = body(&prompts[0], 2);
        assert_eq!(http(addr, "POST", "/v1/completions", &warm).0, 200);
        let (_, before) = http(addr, "GET", "/metrics", "");
        let start = Instant::now();
        let tokens: usize = std::thread::scope(|s| {
            let handles: Vec<_> = prompts
                .iter()
                .map(|p| {
                    let body = body(p, args.tokens);
                    s.spawn(move || {
                        let (status, answer) = http(addr, "POST", "/v1/completions", &body);
                        assert_eq!(status, 200, "{answer}");
                        let json: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
                        json["usage"]["completion_tokens"].as_u64().unwrap_or(0) as usize
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("client")).sum()
        });
        let rate = tokens as f64 / start.elapsed().as_secs_f64();
        let (_, after) = http(addr, "GET", "/metrics", "");
        let mean = |name: &str| {
            let (s0, c0) = histogram(&before, name);
            let (s1, c1) = histogram(&after, name);
            1e3 * (s1 - s0) / (c1 - c0).max(1.0)
        };
        println!(
            "| {batch} | {rate:.1} | {engine:.1} | {:.2} | {:.1} | {:.2} |",
            rate / engine,
            mean("time_to_first_token_seconds"),
            mean("inter_token_latency_seconds")
        );
    }
    server.shutdown().expect("shutdown");
}
