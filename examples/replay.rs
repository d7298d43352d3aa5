//! Runs one golden case (see SPEC.md) through `rope_pool_fused` and scores it against its f64
//! expected outputs.
//!
//! `cargo run --release --example replay -- CASE.safetensors [--device flex|wgpu|vulkan|metal|default]
//!  [--dtype f32|f16|bf16] [--output OUT.safetensors]`

use burn::tensor::DType;
use burn_rope_pool::testing::{GoldenCase, Score, tolerance};
use burn_rope_pool::testing::{device_by_name, dtype_by_name};
use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Replay a rope_pool_fused golden case")]
struct Args {
    /// The golden safetensors file.
    case: std::path::PathBuf,
    /// flex, wgpu, vulkan, metal, cuda or default.
    #[arg(long, default_value = "default")]
    device: String,
    /// Storage dtype of the float tensors (default: as stored in the file).
    #[arg(long, value_parser = dtype_by_name)]
    dtype: Option<DType>,
    /// Write q_rot k_rot k_pool v_pool (F32) to this safetensors file.
    #[arg(long)]
    output: Option<std::path::PathBuf>,
}

fn write_output(
    path: &std::path::Path,
    case: &GoldenCase,
    out: &burn_rope_pool::reference::ReferenceOutput,
) -> Result<(), String> {
    let shape = |name: &str| case.inputs[name].dims.clone();
    let tensors: Vec<(&str, Vec<usize>, Vec<u8>)> = [
        ("q_rot", shape("q"), &out.q_rot),
        ("k_rot", shape("k"), &out.k_rot),
        ("k_pool", shape("k_pool"), &out.k_pool),
        ("v_pool", shape("v_pool"), &out.v_pool),
    ]
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

fn main() -> ExitCode {
    let args = Args::parse();
    let case = match GoldenCase::load(&args.case) {
        Ok(case) => case,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let device = match device_by_name(&args.device) {
        Ok(device) => device,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let dtype = args.dtype;
    println!(
        "case {} on {device:?}, dtype {dtype:?}",
        args.case.display()
    );
    let result = case.run(&device, dtype);
    if let Some(expected) = &case.expect_error {
        return match result {
            Err(e) if e.to_string() == *expected => {
                println!("error (as expected): {e}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                println!("wrong error: got `{e}`, expected `{expected}`");
                ExitCode::FAILURE
            }
            Ok(_) => {
                println!("no error, expected `{expected}`");
                ExitCode::FAILURE
            }
        };
    }
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            println!("unexpected error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let expected = case.expected.as_ref().expect("checked at load");
    let score = Score::new(&out, expected);
    let tol = tolerance(dtype.unwrap_or(case.inputs["q"].dtype));
    for (name, abs, rel) in &score.outputs {
        println!("{name:>7}: max abs {abs:.3e}  norm-rel {rel:.3e}");
    }
    if let Some(path) = &args.output
        && let Err(e) = write_output(path, &case, &out)
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
