//! One LLaMA attention layer serving a ragged batch through `rope_pool_fused` and a KV pool:
//! a prefill of several sequences of different lengths, then decode steps, one sequence
//! finishing early and a new one reusing its pool rows. Every step is checked against the
//! unfused path (plain Burn ops, keys/values kept whole, no pool).
//!
//! `cargo run --release --example llama_attention -- [--device flex|wgpu|vulkan|metal] [--small]
//!  [--weights FILE.safetensors] [--save-weights FILE.safetensors] [--dump OUT.safetensors]`
//!
//! `--weights` reads HuggingFace-named tensors `q_proj.weight k_proj.weight v_proj.weight
//! o_proj.weight` (HF `[out, in]` layout; a `model.layers.N.self_attn.` prefix is accepted)
//! in f32, f16 or bf16; `--save-weights` writes the layer's weights in that layout; `--dump`
//! writes each phase's layer input, positions, sequence ids and output, for comparison with an
//! outside implementation (e.g. transformers' LlamaAttention with the same weights).

#![allow(clippy::single_range_in_vec_init)] // `slice([a..b])` slices the first axis

use burn::tensor::{DType, Distribution, Tensor};
use burn_rope_pool::model::Checkpoint;
use burn_rope_pool::model::{LlamaAttention, LlamaAttentionConfig};
use burn_rope_pool::pool::KvPool;
use burn_rope_pool::pool::SeqToken;
use burn_rope_pool::testing::device_by_name;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "LLaMA attention on the fused RoPE + KV-pool op")]
struct Args {
    /// flex, wgpu, vulkan, metal, cuda or default (falls back to flex without a GPU adapter).
    #[arg(long, default_value = "default")]
    device: String,
    /// A small layer (hidden 256, 8 q heads, 2 kv heads, head_dim 32) for a quick CPU run.
    #[arg(long)]
    small: bool,
    /// Decode steps after the prefill.
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Load the projections from a HuggingFace-named safetensors file.
    #[arg(long)]
    weights: Option<std::path::PathBuf>,
    /// Write the layer's projections (HF names and layout) to this safetensors file.
    #[arg(long)]
    save_weights: Option<std::path::PathBuf>,
    /// Write every phase's input, positions, sequence ids and output to this safetensors file.
    #[arg(long)]
    dump: Option<std::path::PathBuf>,
}

/// Loads `q_proj k_proj v_proj o_proj` (`.weight`, HF `[out, in]`, stored in f32, f16 or bf16,
/// optionally under a `model.layers.N.self_attn.` prefix) into `layer`.
fn load_weights(
    layer: &mut LlamaAttention,
    cfg: &LlamaAttentionConfig,
    path: &std::path::Path,
    device: &burn::tensor::Device,
) -> Result<(), String> {
    use burn::module::Param;
    let file = Checkpoint::from_file(path).map_err(|e| e.to_string())?;
    let (q, kv) = (
        cfg.num_qo_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
    );
    let load = |proj: &str, out: usize, inp: usize| -> Result<Param<Tensor<2>>, String> {
        let suffix = format!("{proj}.weight");
        let matches: Vec<&str> = file.names().filter(|n| n.ends_with(&suffix)).collect();
        let [name] = matches[..] else {
            return Err(format!(
                "{}: expected one `*{suffix}`, found {matches:?}",
                path.display()
            ));
        };
        let weight = file
            .tensor(name, [out, inp], device, burn::tensor::DType::F32)
            .map_err(|e| e.to_string())?;
        Ok(Param::from_tensor(weight.transpose()))
    };
    layer.q_proj.weight = load("q_proj", q, cfg.hidden)?;
    layer.k_proj.weight = load("k_proj", kv, cfg.hidden)?;
    layer.v_proj.weight = load("v_proj", kv, cfg.hidden)?;
    layer.o_proj.weight = load("o_proj", cfg.hidden, q)?;
    Ok(())
}

/// Named f32 tensors for a safetensors file.
#[derive(Default)]
struct Dump(Vec<(String, Vec<usize>, Vec<u8>)>);

impl Dump {
    fn push(&mut self, name: String, dims: Vec<usize>, values: Vec<f32>) {
        self.0.push((
            name,
            dims,
            values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ));
    }
    fn tensor(&mut self, name: String, t: &Tensor<2>) {
        let dims = t.dims().to_vec();
        let values = t
            .clone()
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        self.push(name, dims, values);
    }
    fn tokens(&mut self, phase: &str, tokens: &[SeqToken]) {
        let n = tokens.len();
        self.push(
            format!("{phase}.positions"),
            vec![n],
            tokens.iter().map(|t| t.position as f32).collect(),
        );
        self.push(
            format!("{phase}.seq_ids"),
            vec![n],
            tokens.iter().map(|t| t.seq as f32).collect(),
        );
    }
    fn write(&self, path: &std::path::Path) -> Result<(), String> {
        let views = self
            .0
            .iter()
            .map(|(n, d, b)| {
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, d.clone(), b)
                    .map(|v| (n.as_str(), v))
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        safetensors::serialize_to_file(views, None, path).map_err(|e| e.to_string())
    }
}

/// The layer's projections in HF names and `[out, in]` layout.
fn save_weights(layer: &LlamaAttention, path: &std::path::Path) -> Result<(), String> {
    let mut dump = Dump::default();
    for (name, linear) in [
        ("q_proj", &layer.q_proj),
        ("k_proj", &layer.k_proj),
        ("v_proj", &layer.v_proj),
        ("o_proj", &layer.o_proj),
    ] {
        dump.tensor(format!("{name}.weight"), &linear.weight.val().transpose());
    }
    dump.write(path)
}

/// One running sequence: its id and every hidden state it has fed the layer so far.
struct Sequence {
    id: u64,
    inputs: Vec<Tensor<2>>,
    remaining: usize,
}

impl Sequence {
    fn len(&self) -> usize {
        self.inputs.iter().map(|x| x.dims()[0]).sum()
    }
}

/// Largest |fused − unfused| over the batch's output rows.
fn check(layer: &LlamaAttention, seqs: &[Sequence], tokens: &[SeqToken], out: &Tensor<2>) -> f32 {
    let mut worst = 0f32;
    for (row, token) in tokens.iter().enumerate() {
        let seq = seqs
            .iter()
            .find(|s| s.id == token.seq)
            .expect("token of a running sequence");
        let whole = Tensor::cat(seq.inputs.clone(), 0);
        let reference = layer
            .forward_unfused(whole)
            .slice([token.position..token.position + 1]);
        let err = (out.clone().slice([row..row + 1]) - reference)
            .abs()
            .max()
            .into_scalar::<f32>();
        worst = worst.max(err);
    }
    worst
}

fn main() -> ExitCode {
    let args = Args::parse();
    let device = match device_by_name(&args.device) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    println!("device: {device:?}");
    let cfg = if args.small {
        LlamaAttentionConfig {
            hidden: 256,
            num_qo_heads: 8,
            num_kv_heads: 2,
            head_dim: 32,
            rope_base: 500_000.0,
        }
    } else {
        LlamaAttentionConfig::llama3_8b()
    };
    println!(
        "layer: hidden {}, {} q heads, {} kv heads, head_dim {}, θ = {} ({})",
        cfg.hidden,
        cfg.num_qo_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
        cfg.rope_base,
        if args.weights.is_some() {
            "weights from file"
        } else {
            "random weights"
        }
    );
    let mut layer = match cfg.init(&device) {
        Ok(layer) => layer,
        Err(e) => {
            eprintln!("invalid layer: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &args.weights {
        if let Err(e) = load_weights(&mut layer, &cfg, path, &device) {
            eprintln!("cannot load {}: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("weights: {}", path.display());
    }
    if let Some(path) = &args.save_weights
        && let Err(e) = save_weights(&layer, path)
    {
        eprintln!("cannot write {}: {e}", path.display());
        return ExitCode::from(2);
    }
    let mut dump = Dump::default();
    let mut pool =
        KvPool::try_new(cfg.rope(), 1024, &device, DType::F32).expect("a pool of 1024 rows");
    let tolerance = 1e-3;
    let random =
        |n: usize| Tensor::<2>::random([n, cfg.hidden], Distribution::Normal(0.0, 1.0), &device);

    // Prefill: four sequences of different lengths; sequence 2 will finish after 2 decode steps.
    let prompts = [
        (1u64, 12usize, args.steps),
        (2, 5, 2),
        (3, 20, args.steps),
        (4, 7, args.steps),
    ];
    let mut seqs: Vec<Sequence> = Vec::new();
    let mut tokens = Vec::new();
    let mut batch = Vec::new();
    for (id, len, remaining) in prompts {
        let x = random(len);
        tokens.extend((0..len).map(|position| SeqToken { seq: id, position }));
        batch.push(x.clone());
        seqs.push(Sequence {
            id,
            inputs: vec![x],
            remaining,
        });
    }
    let start = Instant::now();
    let input = Tensor::cat(batch, 0);
    dump.tensor("prefill.input".into(), &input);
    dump.tokens("prefill", &tokens);
    let out = match pool
        .plan_step(&tokens)
        .and_then(|step| layer.forward(input, 0, &step, &mut pool))
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("prefill failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = out.clone().into_data(); // wait for the device
    let prefill_time = start.elapsed();
    dump.tensor("prefill.output".into(), &out);
    let err = check(&layer, &seqs, &tokens, &out);
    println!(
        "prefill: {} tokens of {} sequences, max abs error vs unfused {err:.2e}",
        tokens.len(),
        seqs.len()
    );
    if err.is_nan() || err > tolerance {
        eprintln!("FAIL: prefill error {err:.2e} > {tolerance:e}");
        return ExitCode::FAILURE;
    }
    let prefill_tokens = tokens.len();

    // Decode: one token per running sequence per step; a finished sequence frees its rows and a
    // new one (id 5, 3-token prompt) takes them over.
    let bar = ProgressBar::new(args.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("decode {bar:30} {pos}/{len} {msg}").expect("template"),
    );
    let (mut decode_tokens, mut decode_time) = (0usize, std::time::Duration::ZERO);
    let mut next_id = 5;
    for step in 0..args.steps {
        let mut tokens = Vec::new();
        let mut batch = Vec::new();
        for seq in seqs.iter_mut() {
            let x = random(1);
            tokens.push(SeqToken {
                seq: seq.id,
                position: seq.len(),
            });
            batch.push(x.clone());
            seq.inputs.push(x);
        }
        let start = Instant::now();
        let input = Tensor::cat(batch, 0);
        dump.tensor(format!("decode{step}.input"), &input);
        dump.tokens(&format!("decode{step}"), &tokens);
        let out = match pool
            .plan_step(&tokens)
            .and_then(|step| layer.forward(input, 0, &step, &mut pool))
        {
            Ok(out) => out,
            Err(e) => {
                bar.abandon();
                eprintln!("decode step {step} failed: {e}");
                return ExitCode::FAILURE;
            }
        };
        let _ = out.clone().into_data();
        decode_time += start.elapsed();
        decode_tokens += tokens.len();
        dump.tensor(format!("decode{step}.output"), &out);
        let err = check(&layer, &seqs, &tokens, &out);
        bar.suspend(|| {
            println!(
                "step {step}: {} tokens, max abs error vs unfused {err:.2e}",
                tokens.len()
            )
        });
        if err.is_nan() || err > tolerance {
            bar.abandon();
            eprintln!("FAIL: step {step} error {err:.2e} > {tolerance:e}");
            return ExitCode::FAILURE;
        }
        for seq in seqs.iter_mut() {
            seq.remaining = seq.remaining.saturating_sub(1);
        }
        let finished: Vec<u64> = seqs
            .iter()
            .filter(|s| s.remaining == 0)
            .map(|s| s.id)
            .collect();
        for id in finished {
            let freed = pool.release(id).expect("running sequence");
            seqs.retain(|s| s.id != id);
            bar.suspend(|| println!("sequence {id} finished: {freed} pool rows freed"));
            if step + 1 < args.steps {
                // A new request takes the freed rows: its prompt is prefilled with the next step's
                // batch (its 3 prompt tokens go in as one prefill now).
                let x = random(3);
                let tokens: Vec<SeqToken> = (0..3)
                    .map(|position| SeqToken {
                        seq: next_id,
                        position,
                    })
                    .collect();
                dump.tensor(format!("join{next_id}.input"), &x);
                dump.tokens(&format!("join{next_id}"), &tokens);
                let out = match pool
                    .plan_step(&tokens)
                    .and_then(|step| layer.forward(x.clone(), 0, &step, &mut pool))
                {
                    Ok(out) => out,
                    Err(e) => {
                        eprintln!("prefill of sequence {next_id} failed: {e}");
                        return ExitCode::FAILURE;
                    }
                };
                dump.tensor(format!("join{next_id}.output"), &out);
                seqs.push(Sequence {
                    id: next_id,
                    inputs: vec![x],
                    remaining: args.steps,
                });
                let err = check(&layer, &seqs, &tokens, &out);
                bar.suspend(|| {
                    println!("sequence {next_id} joined on reused rows: max abs error {err:.2e}")
                });
                if err.is_nan() || err > tolerance {
                    eprintln!("FAIL: error {err:.2e} > {tolerance:e}");
                    return ExitCode::FAILURE;
                }
                next_id += 1;
            }
        }
        bar.inc(1);
    }
    bar.finish_with_message("done");
    if let Some(path) = &args.dump {
        if let Err(e) = dump.write(path) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
        println!("dump: {}", path.display());
    }
    println!(
        "prefill {:.0} tokens/s, decode {:.0} tokens/s (wall clock, incl. projections and attention)",
        prefill_tokens as f64 / prefill_time.as_secs_f64(),
        decode_tokens as f64 / decode_time.as_secs_f64().max(1e-9)
    );
    println!("PASS: every step within {tolerance:e} of the unfused path");
    ExitCode::SUCCESS
}
