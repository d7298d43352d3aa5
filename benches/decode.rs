//! Prefill and decode throughput of a Llama-3-8B-shaped decoder (random weights) through
//! `generate`: batches of `--prompt`-token prompts decoded for `--steps` tokens, with the fused
//! RoPE + pool op and with the same model on the unfused tensor-op path. Wall-clock tokens/s
//! (each step reads its ids back), after a warm-up run of the same shapes.
//!
//! `cargo bench --bench decode -- [--device wgpu] [--dtype f16] [--batches 1,8,64] [--prompt 512]
//!  [--steps 64] [--layers 32] [--fp8-cache K,V] [--fp8-weights] [--profile] [--json OUT]
//!  [--tp N] [--model 8b|70b] [--long-prompt 32768 --prefill-chunks 0,2048,8192]`

#[cfg(feature = "profile")]
#[path = "host_profile/mod.rs"]
mod host_profile;
#[path = "rope_pool/instruments.rs"]
#[allow(dead_code)] // the decode bench uses the device timing loop only
mod instruments;

use burn::tensor::DType;
use burn_rope_pool::model::{
    Collective, Decoder, DecoderConfig, Engine, EngineOptions, Event, GenerateError,
    GenerateOptions, Generated, GenerationRequest, Model, Request, SamplingParams, Stats,
    StepToken, StopConditions, generate,
};
use burn_rope_pool::testing::{
    Rng, argmax_rows, device_by_name, generate_unfused, llama3_8b, llama3_70b, llama32_1b,
    random_decoder, random_fp8_decoder, random_sharded_decoder, ranks_by_name, step_graph_counts,
};
use clap::Parser;
use instruments::time_per_call;
use std::time::Instant;

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
    /// Decoder layers (default: the shape's, 32 or 80; fewer for a quick run on a CPU).
    #[arg(long)]
    layers: Option<usize>,
    /// Vocabulary size (128256 for the real shape; smaller for a quick run on a CPU).
    #[arg(long, default_value_t = 128_256)]
    vocab: usize,
    /// Only the fused path.
    #[arg(long)]
    fused_only: bool,
    /// Also time the projections alone — the decoder's weight shapes at the rows of
    /// `--probe-rows` — through each matmul routine `project` can run past the matrix-vector
    /// kernel (`ROPE_POOL_MATMUL` names one in `tuning` builds), each checked against the
    /// heuristic routine's output.
    #[arg(long)]
    matmul_probe: bool,
    /// `--matmul-probe` times `project` alone, not the routines.
    #[arg(long)]
    probe_project_only: bool,
    /// `--matmul-probe` also times the fused forms of a decode step's projections at the rows
    /// of `--probe-rows` up to 16: the norm before q/k/v, gate/up (with the activation) and the
    /// LM head, the residual add after o and down (`norm_project`, `project_add`).
    #[arg(long, requires = "matmul_probe")]
    probe_fused: bool,
    /// The rows `--matmul-probe` times.
    #[arg(long, value_delimiter = ',', default_values_t = [24usize, 64, 512, 32_768])]
    probe_rows: Vec<usize>,
    /// After the table, profile a few decode steps per batch, then the prefill of the same
    /// prompts into fresh pools: every kernel launched, its
    /// device time (CubeCL's launch observer, device timestamps), by kernel; and the step's
    /// wall time against the time the device was busy.
    #[arg(long)]
    profile: bool,
    /// After the table (feature `profile`), where a decode step's host time goes: this many
    /// seconds of batch-1 decode steps under the sampling profiler (`benches/host_profile/`),
    /// by thread and crate.
    #[arg(long)]
    host_profile: Option<f64>,
    /// Also run the fused path with fp8 e4m3 caches of these scales, `K_SCALE,V_SCALE` (path
    /// `fused fp8`).
    #[arg(long, value_delimiter = ',')]
    fp8_cache: Vec<f32>,
    /// Also run the fused path with the projections as fp8 weights (random e4m3 codes in blocks
    /// of 128, as an fp8 checkpoint loads on CubeCL devices; path `fused fp8-weights`).
    #[arg(long)]
    fp8_weights: bool,
    /// Also run the fused path with every decode step launched kernel by kernel (path `fused
    /// launched`), where the default path replays captured decode steps (CubeCL devices, builds
    /// without Burn's `fusion`)
    #[arg(long)]
    launched: bool,
    /// Tensor parallelism: also run the fused path split over this many GPUs (`DEVICE:0` …,
    /// shards drawn at random on each; path `fused tpN`), through Burn's all-reduce on `cuda`,
    /// summed in process elsewhere.
    #[arg(long, default_value_t = 1)]
    tp: usize,
    /// The model's shape: `8b` (Llama-3-8B), `70b` (Llama-3-70B; `--tp` only: it does not fit
    /// one GPU) or `1b` (Llama-3.2-1B; with `--vocab 2048` it fits a software Vulkan device).
    #[arg(long, default_value = "8b")]
    model: String,
    /// After the table, a prompt of this many tokens joins `--long-batch` requests that are
    /// decoding (prompts of `--prompt`) in an [`Engine`], once for each of `--prefill-chunks`:
    /// its time to first token, and how long the decoding requests waited between their tokens
    /// meanwhile against before it came.
    #[arg(long)]
    long_prompt: Option<usize>,
    /// Requests decoding when the long prompt comes.
    #[arg(long, default_value_t = 8)]
    long_batch: usize,
    /// `--long-prompt`: the engine's `prefill_chunk` settings to run, 0 for none (each prompt
    /// whole in its first step).
    #[arg(long, value_delimiter = ',', default_values_t = [0usize, 2048, 8192])]
    prefill_chunks: Vec<usize>,
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

/// The fused path of any model (a sharded one included): warm-up, then the timed run.
fn run_model<M: Model>(model: &M, batch: usize, args: &Args) -> Stats {
    let options = GenerateOptions::default();
    timed(model.config().vocab_size, batch, args, |requests| {
        generate(model, requests, &options, |_| {})
    })
}

fn run(model: &Decoder, fused: bool, batch: usize, args: &Args) -> Stats {
    let options = GenerateOptions::default();
    timed(
        model.config.vocab_size,
        batch,
        args,
        |requests| match fused {
            true => generate(model, requests, &options, |_| {}),
            false => generate_unfused(model, requests, &options),
        },
    )
}

/// `generate` over `batch` requests, timed: a warm-up of the same shapes and two decode steps
/// (kernels compiled, matmuls tuned), then `--steps` decode steps.
fn timed(
    vocab: usize,
    batch: usize,
    args: &Args,
    generate: impl Fn(&[Request]) -> Result<(Vec<Generated>, Stats), GenerateError>,
) -> Stats {
    generate(&requests(batch, args.prompt, 2, vocab)).expect("warm-up");
    generate(&requests(batch, args.prompt, args.steps, vocab))
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
    let (shape, name) = match args.model.as_str() {
        "8b" => (llama3_8b(), "Llama-3-8B"),
        "70b" => (llama3_70b(), "Llama-3-70B"),
        "1b" => (llama32_1b(), "Llama-3.2-1B"),
        other => panic!("--model {other}: 8b, 70b or 1b"),
    };
    if args.tp > 1 && (args.fp8_weights || !args.fp8_cache.is_empty() || args.profile) {
        panic!("--tp runs the fused path alone: no --fp8-weights, --fp8-cache or --profile");
    }
    let config = DecoderConfig {
        num_layers: args.layers.unwrap_or(shape.num_layers),
        vocab_size: args.vocab,
        ..shape
    };
    if args.tp > 1 {
        tensor_parallel(config, dtype, &args);
        return;
    }
    println!(
        "{name} shape, {} layers, {dtype:?} on {device:?}; prompts of {} tokens, {} decode steps\n",
        config.num_layers, args.prompt, args.steps
    );
    if args.matmul_probe {
        matmul_probe(&device, dtype, &args.probe_rows, args.probe_project_only);
        if args.probe_fused {
            fused_probe(&device, dtype, &args.probe_rows);
        }
    }
    println!(
        "| path | batch | prefill tok/s | decode tok/s | decode ms/step | enqueued ms: prefill / decode step |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let mut model = random_decoder(config.clone(), &device, dtype).expect("random weights");
    let mut rows = Vec::new();
    let mut paths = vec![("fused", true, None)];
    if !args.fused_only {
        paths.push(("unfused", false, None));
    }
    if let [k_scale, v_scale] = args.fp8_cache[..] {
        paths.push(("fused fp8", true, Some((k_scale, v_scale))));
    }
    if args.fp8_weights {
        paths.push(("fused fp8-weights", true, None));
    }
    if args.launched {
        paths.insert(1, ("fused launched", true, None));
    }
    for (path, fused, fp8) in paths {
        model = model.with_step_graphs(path != "fused launched");
        if path == "fused fp8-weights" {
            // One model at a time on the device: the float weights go first.
            drop(model);
            model = random_fp8_decoder(config.clone(), &device, dtype).expect("random weights");
        }
        model = model.with_fp8_cache(fp8);
        for &batch in &args.batches {
            let stats = run(&model, fused, batch, &args);
            rows.push(report(path, batch, dtype, config.num_layers, &stats, &args));
        }
    }
    if let Some(long) = args.long_prompt {
        model = model.with_fp8_cache(None).with_step_graphs(true);
        long_prompt(&model, long, &args);
    }
    let (captured, replayed, _) = step_graph_counts(&model);
    println!("\ndecode steps captured: {captured}, replayed: {replayed}");
    if args.profile {
        // Every kernel launched (a replayed step's launches are not observed one by one).
        model = model.with_fp8_cache(None).with_step_graphs(false);
        let weights = if args.fp8_weights { "fp8" } else { "float" };
        println!("\nProfile: the fused path, {weights} weights, float caches");
        for &batch in &args.batches {
            profile(&model, batch, &args);
        }
    }
    if let Some(seconds) = args.host_profile {
        host_profile_steps(&model.with_fp8_cache(None), seconds, &args);
    }
    if let Some(path) = &args.json {
        std::fs::write(path, format!("[\n{}\n]\n", rows.join(",\n"))).expect("write json");
    }
}

/// `--long-prompt`: for each `--prefill-chunks` setting, a warm-up then a timed run of
/// [`long_prompt_run`]; one row each.
fn long_prompt(model: &Decoder, long: usize, args: &Args) {
    println!(
        "\n{long}-token prompt joining {} decoding requests (prompts of {}):",
        args.long_batch, args.prompt
    );
    println!(
        "| prefill_chunk | time to first token ms | steps | decode step ms before: median | \
         while prefilling: median / longest |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for &chunk in &args.prefill_chunks {
        long_prompt_run(model, long, chunk, args); // kernels compiled, shapes tuned
        let run = long_prompt_run(model, long, chunk, args);
        let chunk = if chunk == 0 {
            "none".to_string()
        } else {
            chunk.to_string()
        };
        println!(
            "| {chunk} | {:.1} | {} | {:.2} | {:.2} / {:.2} |",
            run.ttft_ms, run.steps, run.before_ms, run.during_median_ms, run.during_max_ms
        );
    }
}

/// What [`long_prompt_run`] measured.
struct LongPromptRun {
    /// From the long prompt's submission to its first token.
    ttft_ms: f64,
    /// Engine steps until then.
    steps: usize,
    /// Median step before the long prompt came (decode tokens only).
    before_ms: f64,
    /// Median and longest step until its first token: what each decoding request waited
    /// between two of its tokens.
    during_median_ms: f64,
    during_max_ms: f64,
}

/// `long_batch` requests prefilled and decoding (16 steps timed), then one prompt of `long`
/// tokens submitted; every step timed until its first token. Each step reads its ids back.
fn long_prompt_run(model: &Decoder, long: usize, chunk: usize, args: &Args) -> LongPromptRun {
    let vocab = model.config.vocab_size;
    let per_step = if chunk == 0 { long } else { chunk.min(long) };
    let steps_after = long.div_ceil(per_step) + 8;
    let max_new_tokens = 32 + steps_after;
    let options = EngineOptions {
        pool_rows: args.long_batch * (args.prompt + max_new_tokens) + long + 64,
        max_batch: args.long_batch + 1,
        prefill_chunk: (chunk > 0).then_some(chunk),
        ..Default::default()
    };
    let mut engine = Engine::new(model, None, options).expect("engine");
    let request = |prompt: Vec<u32>, max_new_tokens| GenerationRequest {
        prompt,
        max_new_tokens,
        sampling: SamplingParams::greedy(),
        stop: StopConditions::default(),
    };
    for r in requests(args.long_batch, args.prompt, 0, vocab) {
        engine
            .submit(request(r.prompt, max_new_tokens))
            .expect("submit");
    }
    let timed_step = |engine: &mut Engine<'_>| {
        let start = Instant::now();
        let events = engine.step().expect("step");
        (start.elapsed().as_secs_f64() * 1e3, events)
    };
    // The prefill step, then 16 decode steps timed.
    timed_step(&mut engine);
    let mut before: Vec<f64> = (0..16).map(|_| timed_step(&mut engine).0).collect();
    let prompt = requests(1, long, 0, vocab).remove(0).prompt;
    let submitted = Instant::now();
    let id = engine
        .submit(request(prompt, 1))
        .expect("submit the long prompt");
    let mut during = Vec::new();
    loop {
        let (ms, events) = timed_step(&mut engine);
        during.push(ms);
        let first = events
            .iter()
            .any(|e| matches!(e, Event::Token { id: t, .. } if *t == id));
        if first {
            break;
        }
        assert!(
            during.len() <= steps_after,
            "no first token after {steps_after} steps"
        );
    }
    let ttft_ms = submitted.elapsed().as_secs_f64() * 1e3;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    LongPromptRun {
        ttft_ms,
        steps: during.len(),
        before_ms: median(&mut before),
        during_max_ms: during.iter().copied().fold(0.0, f64::max),
        during_median_ms: median(&mut during),
    }
}

/// `--host-profile`: batch-1 decode steps (one sequence after a `--prompt`-token prompt, each
/// step's id read back) under the sampling profiler.
#[cfg(feature = "profile")]
fn host_profile_steps(model: &Decoder, seconds: f64, args: &Args) {
    let prompt: Vec<StepToken> = requests(1, args.prompt, 0, model.config.vocab_size)[0]
        .prompt
        .iter()
        .enumerate()
        .map(|(position, &token)| StepToken {
            seq: 0,
            token,
            position,
        })
        .collect();
    // Room for the profiler's warm-up and timing calls and ~400 steps a second of `seconds`.
    let steps = 500 + (seconds * 400.0) as usize;
    let mut cache = model.new_cache(args.prompt + steps).expect("pools");
    let logits = model.step(&prompt, &mut cache).expect("prefill");
    let read = |logits| {
        argmax_rows(logits)
            .into_data()
            .convert::<i64>()
            .iter::<i64>()
            .next()
    };
    let mut token = read(logits).expect("an id") as u32;
    let mut position = args.prompt;
    let text = host_profile::profile(
        instruments::thread_cpu,
        "decode step, batch 1",
        "decode-1",
        seconds,
        None,
        |_sync| {
            let tokens = [StepToken {
                seq: 0,
                token,
                position,
            }];
            let logits = model.step(&tokens, &mut cache).expect("step");
            token = read(logits).expect("an id") as u32;
            position += 1;
        },
    );
    println!("{text}");
}

#[cfg(not(feature = "profile"))]
fn host_profile_steps(_: &Decoder, _: f64, _: &Args) {
    panic!("--host-profile needs the `profile` feature");
}

/// Device time of each matmul routine on the decoder's projections (Llama-3-8B: q/k/v stacked,
/// o, gate/up stacked, down), weights stored `[out, in]` as the decoder holds them.
fn matmul_probe(device: &burn::tensor::Device, dtype: DType, rows: &[usize], project_only: bool) {
    use burn::tensor::{Distribution, Tensor};
    use burn_rope_pool::testing::{MatmulRoutine, project, project_with};
    println!(
        "| matmul routine | m | weight [out, in] | µs | weight GB/s | TFLOPS | max |Δ| vs heuristic |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
    let dist = Distribution::Normal(0.0, 0.02);
    let shapes = [
        [6144usize, 4096],
        [4096, 4096],
        [28_672, 4096],
        [4096, 14_336],
        [128_256, 4096],
    ];
    let weights: Vec<Tensor<2>> = shapes
        .iter()
        .map(|&shape| Tensor::random(shape, dist, (device, dtype)))
        .collect();
    // Clocks up before the first row: a second of the largest product.
    let x = Tensor::<2>::random([32_768, 4096], dist, (device, dtype));
    let start = std::time::Instant::now();
    while start.elapsed().as_secs_f64() < 1.0 {
        let _ = project_with(x.clone(), &weights[2], MatmulRoutine::Heuristic).into_data();
    }
    for &m in rows {
        for (w, [n, k]) in weights.iter().zip(shapes) {
            if n > 32_768 && m > 512 {
                continue; // the LM head runs for each sequence's last token only
            }
            let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), (device, dtype));
            // Checked on the first 256 rows, in f32; from 2048 rows (where the prefill routines
            // take over) on every row, in the dtype (a whole f32 copy of the largest output passes
            // what one buffer may hold).
            let whole = m >= 2048;
            let head = match whole {
                true => x.clone(),
                false => x.clone().narrow(0, 0, m.min(256)),
            };
            let reference = project_with(head.clone(), w, MatmulRoutine::Heuristic);
            // `project`'s own choice (the few-rows kernel up to 64 rows), then every routine.
            let routines = if project_only {
                &[][..]
            } else {
                &MatmulRoutine::ALL[..]
            };
            let paths = std::iter::once(None).chain(routines.iter().copied().map(Some));
            for routine in paths {
                let run = |x: Tensor<2>| match routine {
                    Some(routine) => project_with(x, w, routine),
                    None => project(x, w),
                };
                let out = run(head.clone());
                let diff = match whole {
                    true => (out - reference.clone()).abs().max().cast(DType::F32),
                    false => (out.cast(DType::F32) - reference.clone().cast(DType::F32))
                        .abs()
                        .max(),
                }
                .into_scalar::<f32>();
                let calls = if m >= 4096 { 2 } else { 20 };
                let t = seconds_per_call(device, calls, || run(x.clone()));
                let bytes = (n * k * dtype.size()) as f64;
                let flops = 2.0 * (m * n * k) as f64;
                println!(
                    "| {} | {m} | [{n}, {k}] | {:.1} | {:.0} | {:.1} | {diff:.2e} |",
                    routine.map_or("project", MatmulRoutine::name),
                    t * 1e6,
                    bytes / t / 1e9,
                    flops / t / 1e12
                );
            }
        }
    }
    println!();
}

/// Device seconds a call of `f`, timed in windows of `calls` calls (the device stays busy
/// between them; `time_per_call`'s median of 3 windows).
fn seconds_per_call(
    device: &burn::tensor::Device,
    calls: usize,
    f: impl Fn() -> burn::tensor::Tensor<2> + Sync,
) -> f64 {
    time_per_call(device, 3, || {
        for _ in 0..calls {
            let _ = f();
        }
    })
    .as_secs_f64()
        / calls as f64
}

/// Device time of the fused forms of a decode step's projections (`--probe-fused`), each beside
/// `project` alone on the same weight, at the rows of `rows` up to 16; whether the form ran as one
/// launch (`fuses`) is printed with it.
fn fused_probe(device: &burn::tensor::Device, dtype: DType, rows: &[usize]) {
    use burn::tensor::{Distribution, Tensor};
    use burn_rope_pool::testing::{FusedForm, fuses, norm_project, project, project_add};
    println!(
        "| form | m | weight [out, in] | µs | weight GB/s | one launch | `project` alone, µs |"
    );
    println!("| --- | ---: | --- | ---: | ---: | --- | ---: |");
    let dist = Distribution::Normal(0.0, 0.02);
    // (name, [out, in], form): the decoder's order within a layer, then the LM head.
    let forms = [
        (
            "norm + q/k/v",
            [6144usize, 4096],
            FusedForm::Norm { silu: false },
        ),
        ("o + add", [4096, 4096], FusedForm::Add),
        (
            "norm + gate/up + SiLU",
            [28_672, 4096],
            FusedForm::Norm { silu: true },
        ),
        ("down + add", [4096, 14_336], FusedForm::Add),
        (
            "norm + LM head",
            [128_256, 4096],
            FusedForm::Norm { silu: false },
        ),
    ];
    let weights: Vec<Tensor<2>> = forms
        .iter()
        .map(|(_, shape, _)| Tensor::random(*shape, dist, (device, dtype)))
        .collect();
    for &m in rows.iter().filter(|m| **m <= 16) {
        for ((name, [n, k], form), w) in forms.into_iter().zip(&weights) {
            let x = Tensor::<2>::random([m, k], Distribution::Normal(0.0, 1.0), (device, dtype));
            let norm_w = Tensor::<1>::random([k], Distribution::Normal(1.0, 0.1), (device, dtype));
            let residual = Tensor::<2>::random([m, n], dist, (device, dtype));
            let t = seconds_per_call(device, 20, || match form {
                FusedForm::Norm { silu } => norm_project(x.clone(), &norm_w, 1e-5, w, silu),
                FusedForm::Add => project_add(x.clone(), w, residual.clone()),
            });
            let alone = seconds_per_call(device, 20, || project(x.clone(), w));
            println!(
                "| {name} | {m} | [{n}, {k}] | {:.1} | {:.0} | {} | {:.1} |",
                t * 1e6,
                (n * k * dtype.size()) as f64 / t / 1e9,
                fuses(&x, w, form),
                alone * 1e6
            );
        }
    }
    println!();
}

/// Every launch's name and its device-time measurement, kept unread until the steps are over.
#[derive(Default)]
struct Launches(std::sync::Mutex<Vec<(&'static str, Option<cubecl::logging::ProfileDuration>)>>);

impl cubecl::logging::LaunchObserver for Launches {
    fn launched(&self, kernel: &'static str) {
        self.0.lock().unwrap().push((kernel, None));
    }
    fn timing(&self) -> cubecl::logging::TimingRequest {
        cubecl::logging::TimingRequest::Deferred
    }
    fn profiled(&self, kernel: &'static str, profile: cubecl::logging::ProfileDuration) {
        let mut launches = self.0.lock().unwrap();
        if let Some(last) = launches
            .iter_mut()
            .rev()
            .find(|(k, p)| *k == kernel && p.is_none())
        {
            last.1 = Some(profile);
        }
    }
}

/// Profiles `STEPS` decode steps of `batch` sequences (prompts prefilled first), then the
/// prefill of the same prompts into fresh pools: launches and device time by kernel, the
/// device's busy time against the wall time.
fn profile(model: &Decoder, batch: usize, args: &Args) {
    const STEPS: usize = 4;
    let vocab = model.config.vocab_size;
    let requests = requests(batch, args.prompt, STEPS + 4, vocab);
    let mut cache = model
        .new_cache(batch * (args.prompt + STEPS + 4))
        .expect("pools");
    let step = |cache: &mut burn_rope_pool::pool::KvPool, tokens: Vec<StepToken>| {
        let logits = model.step(&tokens, cache).expect("step");
        let ids = argmax_rows(logits).into_data().convert::<i64>();
        ids.iter::<i64>().map(|i| i as u32).collect::<Vec<u32>>()
    };
    let prefill: Vec<StepToken> = requests
        .iter()
        .enumerate()
        .flat_map(|(seq, r)| {
            r.prompt
                .iter()
                .enumerate()
                .map(move |(p, &token)| StepToken {
                    seq: seq as u64,
                    token,
                    position: p,
                })
        })
        .collect();
    let mut next = step(&mut cache, prefill.clone());
    let mut position = args.prompt;
    let decode_tokens = |next: &[u32], position: usize| -> Vec<StepToken> {
        next.iter()
            .enumerate()
            .map(|(seq, &token)| StepToken {
                seq: seq as u64,
                token,
                position,
            })
            .collect()
    };
    // Warm-up steps (kernels compiled, matmuls tuned at this batch).
    for _ in 0..2 {
        next = step(&mut cache, decode_tokens(&next, position));
        position += 1;
    }
    let launches = std::sync::Arc::new(Launches::default());
    let start = std::time::Instant::now();
    {
        let _watch = cubecl::logging::LaunchObservation::new(launches.clone());
        for _ in 0..STEPS {
            next = step(&mut cache, decode_tokens(&next, position));
            position += 1;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    print_profile(
        &format!("batch {batch}: {STEPS} decode steps"),
        &launches,
        wall,
        STEPS,
    );
    // The prefill again, into fresh pools (its kernels compiled by the first one).
    drop(cache);
    let mut cache = model
        .new_cache(batch * (args.prompt + STEPS + 4))
        .expect("pools");
    let launches = std::sync::Arc::new(Launches::default());
    let start = std::time::Instant::now();
    {
        let _watch = cubecl::logging::LaunchObservation::new(launches.clone());
        step(&mut cache, prefill);
    }
    let wall = start.elapsed().as_secs_f64();
    print_profile(
        &format!(
            "batch {batch}: the prefill of {} tokens",
            batch * args.prompt
        ),
        &launches,
        wall,
        1,
    );
}

/// Prints what `launches` recorded over `steps` steps of `wall` seconds: launches and device time
/// by kernel, the device's busy time against the wall time.
fn print_profile(what: &str, launches: &Launches, wall: f64, steps: usize) {
    let wall = wall / steps as f64;
    let launches = std::mem::take(&mut *launches.0.lock().unwrap());
    let count = launches.len();
    let mut by_kernel: std::collections::BTreeMap<String, (usize, f64)> = Default::default();
    let (mut busy, mut untimed, mut system) = (0.0, 0, 0);
    for (kernel, measured) in launches {
        let name =
            cubecl::config::type_name_format(kernel, cubecl::config::TypeNameFormatLevel::Short);
        let entry = by_kernel.entry(name).or_default();
        entry.0 += 1;
        let Some(measured) = measured else {
            untimed += 1;
            continue;
        };
        if measured.timing_method() == cubecl::logging::TimingMethod::System {
            system += 1;
        }
        match futures_lite::future::block_on(measured.resolve()) {
            Some(ticks) => {
                let t = ticks.duration().as_secs_f64();
                entry.1 += t;
                busy += t;
            }
            None => untimed += 1,
        }
    }
    println!(
        "\nprofile, {what}: {:.2} ms wall per step (launch timing on), {:.1} launches per step, \
         device busy {:.2} ms per step ({:.0}% of the wall); {untimed} launches untimed, {system} \
         timed by the host clock",
        wall * 1e3,
        count as f64 / steps as f64,
        busy * 1e3 / steps as f64,
        100.0 * busy / steps as f64 / wall
    );
    println!("| kernel | launches per step | device µs per step | µs per launch |");
    println!("| --- | ---: | ---: | ---: |");
    let mut rows: Vec<_> = by_kernel.into_iter().collect();
    rows.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    for (name, (n, t)) in rows {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            n as f64 / steps as f64,
            t * 1e6 / steps as f64,
            t * 1e6 / n.max(1) as f64
        );
    }
}

/// `--tp N`: the fused path split over `DEVICE:0` … `DEVICE:N-1`, shards drawn at random on
/// each GPU; each batch twice, the second time with the sums over ranks skipped (`fused tpN,
/// no sums`: the same work less the communication, numerically meaningless), so that the
/// difference is what the sums cost a step.
fn tensor_parallel(config: DecoderConfig, dtype: DType, args: &Args) {
    let (devices, inner) = ranks_by_name(&args.device, args.tp).expect("ranks");
    let skip = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let collective = Box::new(Skippable {
        inner,
        skip: skip.clone(),
    });
    let layers = config.num_layers;
    let model = random_sharded_decoder(config, &devices, dtype, collective).expect("shards");
    println!(
        "| path | batch | prefill tok/s | decode tok/s | decode ms/step | enqueued ms: prefill / decode step |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let mut rows = Vec::new();
    for &batch in &args.batches {
        let mut ms = [0.0; 2];
        for (i, skipped) in [false, true].into_iter().enumerate() {
            skip.store(skipped, std::sync::atomic::Ordering::Relaxed);
            let path = match skipped {
                false => format!("fused tp{}", args.tp),
                true => format!("fused tp{}, no sums", args.tp),
            };
            let stats = run_model(&model, batch, args);
            ms[i] = 1e3 * stats.decode_time.as_secs_f64() / args.steps.max(1) as f64;
            rows.push(report(&path, batch, dtype, layers, &stats, args));
        }
        println!(
            "| sums over ranks, batch {batch} | | | | {:.2} ms a step |",
            ms[0] - ms[1]
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, format!("[\n{}\n]\n", rows.join(",\n"))).expect("write json");
    }
}

/// A collective whose sums can be skipped (each rank keeps its own part): for timing the
/// communication only.
struct Skippable {
    inner: Box<dyn Collective>,
    skip: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Collective for Skippable {
    fn devices(&self) -> Option<&[burn::tensor::Device]> {
        self.inner.devices()
    }
    fn all_reduce_sum(&self, parts: Vec<burn::tensor::Tensor<2>>) -> Vec<burn::tensor::Tensor<2>> {
        match self.skip.load(std::sync::atomic::Ordering::Relaxed) {
            true => parts,
            false => self.inner.all_reduce_sum(parts),
        }
    }
}

/// Prints a table row of `stats` and returns it as JSON.
fn report(
    path: &str,
    batch: usize,
    dtype: DType,
    layers: usize,
    stats: &Stats,
    args: &Args,
) -> String {
    let steps = args.steps.max(1) as f64;
    let ms = 1e3 * stats.decode_time.as_secs_f64() / steps;
    // The caller's share of the prefill (one step: the prompts in one batch) and of a decode step.
    let prefill_enqueued = 1e3 * stats.prefill_enqueue_time.as_secs_f64();
    let decode_enqueued = 1e3 * stats.decode_enqueue_time.as_secs_f64() / steps;
    println!(
        "| {path} | {batch} | {:.0} | {:.1} | {ms:.2} | {prefill_enqueued:.1} / {decode_enqueued:.2} |",
        stats.prefill_rate(),
        stats.decode_rate()
    );
    format!(
        "{{\"path\":\"{path}\",\"model\":\"{}\",\"batch\":{batch},\"dtype\":\"{dtype:?}\",\"layers\":{layers},\"prompt\":{},\"steps\":{},\"prefill_tok_s\":{:.1},\"decode_tok_s\":{:.2},\"decode_ms_per_step\":{ms:.3},\"prefill_enqueue_ms\":{prefill_enqueued:.3},\"decode_enqueue_ms_per_step\":{decode_enqueued:.3}}}",
        args.model,
        args.prompt,
        args.steps,
        stats.prefill_rate(),
        stats.decode_rate()
    )
}
