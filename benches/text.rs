//! Text in, text out, measured: the cost of sampling a step on the device (batch × vocab logits
//! to one id per row, the ids read back) for greedy and for each setting, and the tokenizer's
//! encode throughput on the host.
//!
//! `cargo bench --bench text -- [--device D] [--vocab 128256] [--batches 1,64] [--iters 50]
//!  [--tokenizer tests/text/tokenizers/llama3_style] [--megabytes 4]`

use burn::tensor::{DType, Distribution, Tensor};
use burn_rope_pool::model::{SamplingParams, sample};
use burn_rope_pool::testing::{device_by_name, dtype_by_name};
use burn_rope_pool::text::Tokenizer;
use clap::Parser;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "default")]
    device: String,
    /// Vocabulary (Llama 3's 128256).
    #[arg(long, default_value_t = 128_256)]
    vocab: usize,
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 64])]
    batches: Vec<usize>,
    /// Timed calls per setting (after warm-up calls).
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// f32, f16 or bf16 logits.
    #[arg(long, value_parser = dtype_by_name, default_value = "f32")]
    dtype: DType,
    /// The tokenizer folder the encode throughput is measured with.
    #[arg(long, default_value = "tests/text/tokenizers/llama3_style")]
    tokenizer: std::path::PathBuf,
    /// Megabytes of text to encode.
    #[arg(long, default_value_t = 4)]
    megabytes: usize,
}

fn main() {
    let args = Args::parse();
    let device = device_by_name(&args.device).expect("device");
    let dtype = args.dtype;
    println!(
        "sampling a step: logits [batch, {}] {dtype:?} on {device:?}, ids read back; mean of {} calls\n",
        args.vocab, args.iters
    );
    println!("| setting | batch | ms / step | × greedy |");
    println!("| --- | ---: | ---: | ---: |");
    let settings: Vec<(&str, SamplingParams)> = vec![
        ("greedy", SamplingParams::greedy()),
        (
            "temperature 0.8",
            SamplingParams {
                temperature: 0.8,
                ..SamplingParams::default()
            },
        ),
        (
            "top_k 50",
            SamplingParams {
                top_k: 50,
                ..SamplingParams::default()
            },
        ),
        (
            "top_p 0.95",
            SamplingParams {
                top_p: 0.95,
                ..SamplingParams::default()
            },
        ),
        (
            "min_p 0.05",
            SamplingParams {
                min_p: 0.05,
                ..SamplingParams::default()
            },
        ),
        (
            "repetition_penalty 1.1 (512 ids)",
            SamplingParams {
                repetition_penalty: 1.1,
                ..SamplingParams::default()
            },
        ),
        (
            "t 0.7, top_k 50, top_p 0.9, min_p 0.05",
            SamplingParams {
                temperature: 0.7,
                top_k: 50,
                top_p: 0.9,
                min_p: 0.05,
                ..SamplingParams::default()
            },
        ),
    ];
    let history: Vec<u32> = (0..512u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % args.vocab as u32)
        .collect();
    for &batch in &args.batches {
        let logits = Tensor::<2>::random(
            [batch, args.vocab],
            Distribution::Normal(0.0, 3.0),
            (&device, dtype),
        );
        let mut greedy_ms = None;
        for (name, params) in &settings {
            let params = vec![params.clone(); batch];
            let previous: Vec<&[u32]> = (0..batch)
                .map(|_| match params[0].repetition_penalty == 1.0 {
                    true => &[][..],
                    false => &history[..],
                })
                .collect();
            let uniforms: Vec<f32> = (0..batch)
                .map(|i| (i as f32 + 0.5) / batch as f32)
                .collect();
            let run = || sample(logits.clone(), &params, &previous, &uniforms).expect("sample");
            for _ in 0..3 {
                run();
            }
            let start = Instant::now();
            for _ in 0..args.iters {
                run();
            }
            let ms = 1e3 * start.elapsed().as_secs_f64() / args.iters.max(1) as f64;
            let base = *greedy_ms.get_or_insert(ms);
            println!("| {name} | {batch} | {ms:.3} | {:.1} |", ms / base);
        }
    }

    let tokenizer = Tokenizer::from_dir(&args.tokenizer).expect("tokenizer");
    let sample_text = "The rotary embedding turns each pair of a head's dimensions by an angle. \
        Café crème, naïve façade — 日本語のテキスト、한국어 문장, emoji 🦀🔥. \
        fn main() { let x = vec![1, 2, 3]; println!(\"{x:?}\"); }\n";
    let mut text = String::new();
    while text.len() < args.megabytes << 20 {
        text.push_str(sample_text);
    }
    println!(
        "\ntokenizer `{}` (vocab {}): encode throughput on the host, one thread\n",
        args.tokenizer.display(),
        tokenizer.vocab_size()
    );
    println!("| input | MB | MB/s |");
    println!("| --- | ---: | ---: |");
    let mb = text.len() as f64 / (1u64 << 20) as f64;
    let start = Instant::now();
    let ids = tokenizer.encode(&text, false).expect("encode");
    let whole = mb / start.elapsed().as_secs_f64();
    println!("| one string ({} ids) | {mb:.1} | {whole:.2} |", ids.len());
    let mut cut = 0;
    let mut pieces = Vec::new();
    while cut < text.len() {
        let mut end = (cut + 4096).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        pieces.push(&text[cut..end]);
        cut = end;
    }
    let start = Instant::now();
    for piece in &pieces {
        tokenizer.encode(piece, true).expect("encode");
    }
    let prompts = mb / start.elapsed().as_secs_f64();
    println!("| 4 KB prompts | {mb:.1} | {prompts:.2} |");
}
