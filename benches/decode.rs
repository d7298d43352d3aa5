//! Prefill and decode throughput of a Llama-3-8B-shaped decoder (random weights) through
//! `generate`: batches of `--prompt`-token prompts decoded for `--steps` tokens, with the fused
//! RoPE + pool op and with the same model on the unfused tensor-op path. Wall-clock tokens/s
//! (each step reads its ids back), after a warm-up run of the same shapes.
//!
//! `cargo bench --bench decode -- [--device wgpu] [--dtype f16] [--batches 1,8,64] [--prompt 512]
//!  [--steps 64] [--layers 32] [--json OUT]`

use burn::tensor::DType;
use burn_rope_pool::model::{Decoder, DecoderConfig, GenerateOptions, Request, Stats, generate};
use burn_rope_pool::testing::{Rng, device_by_name, llama3_8b, random_decoder};
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "default")]
    device: String,
    /// f32, f16 or bf16.
    #[arg(long, default_value = "f16")]
    dtype: String,
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 8, 64])]
    batches: Vec<usize>,
    #[arg(long, default_value_t = 512)]
    prompt: usize,
    #[arg(long, default_value_t = 64)]
    steps: usize,
    /// Decoder layers (32 for the real shape; fewer for a quick run on a CPU).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Only the fused path.
    #[arg(long)]
    fused_only: bool,
    /// Also time Burn's matmul alone: `[m, 4096] × [4096, 14336]` (the MLP's gate projection)
    /// for m = 1, 8, 64, 32768 — what a decode or prefill step is made of.
    #[arg(long)]
    matmul_probe: bool,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn requests(batch: usize, prompt: usize, steps: usize, vocab: usize) -> Vec<Request> {
    let mut rng = Rng::from_state(0x2545_f491_4f6c_dd1d);
    (0..batch)
        .map(|_| Request {
            prompt: (0..prompt)
                .map(|_| rng.below(vocab as u64) as u32)
                .collect(),
            // The first token comes from the prefill step, the rest from `steps` decode steps.
            max_new_tokens: steps + 1,
        })
        .collect()
}

fn run(model: &Decoder, batch: usize, args: &Args) -> Stats {
    let vocab = model.config.vocab_size;
    let options = GenerateOptions::default();
    // Warm-up: the same shapes, two decode steps (kernels compiled, matmuls tuned).
    generate(
        model,
        &requests(batch, args.prompt, 2, vocab),
        &options,
        |_| {},
    )
    .expect("warm-up");
    generate(
        model,
        &requests(batch, args.prompt, args.steps, vocab),
        &options,
        |_| {},
    )
    .expect("run")
    .1
}

fn main() {
    let args = Args::parse();
    let device = device_by_name(&args.device).expect("device");
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "bf16" => DType::BF16,
        _ => DType::F16,
    };
    let config = DecoderConfig {
        num_layers: args.layers,
        ..llama3_8b()
    };
    println!(
        "Llama-3-8B shape, {} layers, {dtype:?} on {device:?}; prompts of {} tokens, {} decode steps\n",
        args.layers, args.prompt, args.steps
    );
    if args.matmul_probe {
        println!("| matmul [m, 4096] × [4096, 14336] | m | µs | weight GB/s | TFLOPS |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        let dist = burn::tensor::Distribution::Normal(0.0, 0.02);
        let w = burn::tensor::Tensor::<2>::random([4096, 14_336], dist, (&device, dtype));
        for m in [1usize, 8, 64, 32_768] {
            let x = burn::tensor::Tensor::<2>::random([m, 4096], dist, (&device, dtype));
            let mut samples = Vec::new();
            for _ in 0..7 {
                let (_, duration) = device
                    .profile_with(burn::tensor::ProfileOptions::default().flush(), || {
                        let _ = x.clone().matmul(w.clone());
                    })
                    .expect("profile window");
                if let Some(t) = futures_lite::future::block_on(duration.resolve()) {
                    samples.push(t.duration().as_secs_f64());
                }
            }
            samples.drain(..2.min(samples.len()));
            samples.sort_by(f64::total_cmp);
            let t = samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN);
            let bytes = 4096.0 * 14_336.0 * dtype.size() as f64;
            let flops = 2.0 * m as f64 * 4096.0 * 14_336.0;
            println!(
                "| {dtype:?} | {m} | {:.1} | {:.0} | {:.1} |",
                t * 1e6,
                bytes / t / 1e9,
                flops / t / 1e12
            );
        }
        println!();
    }
    println!("| path | batch | prefill tok/s | decode tok/s | decode ms/step |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut model = random_decoder(config, &device, dtype).expect("random weights");
    let mut rows = Vec::new();
    for fused in [true, false] {
        if !fused && args.fused_only {
            continue;
        }
        model = model.with_fused(fused);
        let path = if fused { "fused" } else { "unfused" };
        for &batch in &args.batches {
            let stats = run(&model, batch, &args);
            let ms = 1e3 * stats.decode_time.as_secs_f64() / args.steps.max(1) as f64;
            println!(
                "| {path} | {batch} | {:.0} | {:.1} | {ms:.2} |",
                stats.prefill_rate(),
                stats.decode_rate()
            );
            rows.push(format!(
                "{{\"path\":\"{path}\",\"batch\":{batch},\"dtype\":\"{dtype:?}\",\"layers\":{},\"prompt\":{},\"steps\":{},\"prefill_tok_s\":{:.1},\"decode_tok_s\":{:.2},\"decode_ms_per_step\":{ms:.3}}}",
                args.layers, args.prompt, args.steps, stats.prefill_rate(), stats.decode_rate()
            ));
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, format!("[\n{}\n]\n", rows.join(",\n"))).expect("write json");
    }
}
