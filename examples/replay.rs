//! Runs one golden case (`docs/CONTRACT.md`, "Golden files") through `rope_pool_fused`, or
//! through `pool_attention` when its metadata says `op = pool_attention`, and scores it against
//! its f64 expected outputs.
//!
//! `cargo run --release --example replay -- CASE.safetensors [--device flex|wgpu|vulkan|metal|default]
//!  [--dtype f32|f16|bf16] [--output OUT.safetensors]`

use burn::tensor::DType;
use burn_rope_pool::testing::{AttentionCase, GoldenCase, Score, attention_error, tolerance};
use burn_rope_pool::testing::{device_by_name, dtype_by_name};
use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Replay a rope_pool_fused or pool_attention golden case")]
struct Args {
    /// The golden safetensors file.
    case: std::path::PathBuf,
    /// flex, wgpu, vulkan, metal, cuda or default.
    #[arg(long, default_value = "default")]
    device: String,
    /// Storage dtype of the float tensors (default: as stored in the file).
    #[arg(long, value_parser = dtype_by_name)]
    dtype: Option<DType>,
    /// Write the outputs (F32) to this safetensors file: q_rot k_rot k_pool v_pool, or out lse.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
}

/// Writes `outputs` (name, shape, values) as F32 tensors.
fn write_output(
    path: &std::path::Path,
    outputs: Vec<(&str, Vec<usize>, &Vec<f64>)>,
) -> Result<(), String> {
    let tensors: Vec<(&str, Vec<usize>, Vec<u8>)> = outputs
        .into_iter()
        .map(|(n, s, v)| {
            (
                n,
                s,
                v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
            )
        })
        .collect();
    let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, s, b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b)
                .map(|view| (*n, view))
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    safetensors::serialize_to_file(views, None, path).map_err(|e| e.to_string())
}

/// A run's outputs to score, or the verdict already reached: a case that must be refused with
/// `expect_error` passes when it is, with exactly that message; a valid case fails on an error.
fn outputs<T, E: std::fmt::Display>(
    result: Result<T, E>,
    expect_error: Option<&String>,
) -> Result<T, ExitCode> {
    match (result, expect_error) {
        (Err(e), Some(expected)) if e.to_string() == *expected => {
            println!("error (as expected): {e}");
            Err(ExitCode::SUCCESS)
        }
        (Err(e), Some(expected)) => {
            println!("wrong error: got `{e}`, expected `{expected}`");
            Err(ExitCode::FAILURE)
        }
        (Ok(_), Some(expected)) => {
            println!("no error, expected `{expected}`");
            Err(ExitCode::FAILURE)
        }
        (Err(e), None) => {
            println!("unexpected error: {e}");
            Err(ExitCode::FAILURE)
        }
        (Ok(out), None) => Ok(out),
    }
}

/// Replays a `pool_attention` case: `out` and `lse` within 1e-5 in f32 (looser for f16/bf16).
fn replay_attention(args: &Args, device: &burn::tensor::Device) -> ExitCode {
    let case = match AttentionCase::load(&args.case) {
        Ok(case) => case,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let out = match outputs(case.run(device, args.dtype), case.expect_error.as_ref()) {
        Ok(out) => out,
        Err(verdict) => return verdict,
    };
    let expected = case.expected.as_ref().expect("checked at load");
    if let Some(path) = &args.output {
        let q = case.inputs["q"].dims.clone();
        let outputs = vec![
            ("out", q.clone(), &out.out),
            ("lse", q[..2].to_vec(), &out.lse),
        ];
        if let Err(e) = write_output(path, outputs) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    let worst = attention_error(&out, expected);
    let tol = match args.dtype {
        None | Some(DType::F32) => 1e-5,
        Some(_) => 5e-2,
    };
    if worst <= tol {
        println!("PASS (out and lse: max abs {worst:.3e} <= {tol:.0e})");
        ExitCode::SUCCESS
    } else {
        println!("FAIL (out and lse: max abs {worst:.3e} > {tol:.0e})");
        ExitCode::FAILURE
    }
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
    println!(
        "case {} on {device:?}, dtype {:?}",
        args.case.display(),
        args.dtype
    );
    match AttentionCase::is_attention(&args.case) {
        Ok(true) => return replay_attention(&args, &device),
        Ok(false) => {}
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    }
    let case = match GoldenCase::load(&args.case) {
        Ok(case) => case,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let dtype = args.dtype;
    let out = match outputs(case.run(&device, dtype), case.expect_error.as_ref()) {
        Ok(out) => out,
        Err(verdict) => return verdict,
    };
    let expected = case.expected.as_ref().expect("checked at load");
    let score = Score::new(&out, expected);
    let tol = tolerance(dtype.unwrap_or(case.inputs["q"].dtype));
    for (name, abs, rel) in &score.outputs {
        println!("{name:>7}: max abs {abs:.3e}  norm-rel {rel:.3e}");
    }
    if let Some(path) = &args.output
        && let Err(e) = write_output(path, {
            let shape = |name: &str| case.inputs[name].dims.clone();
            vec![
                ("q_rot", shape("q"), &out.q_rot),
                ("k_rot", shape("k"), &out.k_rot),
                ("k_pool", shape("k_pool"), &out.k_pool),
                ("v_pool", shape("v_pool"), &out.v_pool),
            ]
        })
    {
        eprintln!("cannot write {}: {e}", path.display());
        return ExitCode::from(2);
    }
    let worst = score.worst();
    if worst <= tol {
        println!("PASS (worst norm-rel {worst:.3e} <= {tol:.0e})");
        ExitCode::SUCCESS
    } else {
        println!("FAIL (worst norm-rel {worst:.3e} > {tol:.0e})");
        ExitCode::FAILURE
    }
}
