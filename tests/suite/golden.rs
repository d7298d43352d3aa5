//! Every golden case (tests/golden, a copy of the project's shared cases) on every device and
//! dtype: results within the contract's tolerance of the f64 expected values (f32 within 1e-5,
//! long positions included), invalid calls with exactly the expected message.

use burn::tensor::DType;
use burn_rope_pool::RopePoolError;
use burn_rope_pool::golden::{GoldenCase, Score, tolerance};

/// The cases of `tests/golden/{sub}`, at least `min` of them.
fn cases_in(sub: &str, min: usize) -> Vec<(String, GoldenCase)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(sub);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/golden")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    assert!(
        files.len() >= min,
        "golden cases missing in {}",
        dir.display()
    );
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, GoldenCase::load(&p).unwrap())
        })
        .collect()
}

#[test]
fn golden_cases_on_every_device_and_dtype() {
    run_cases(cases_in("", 7));
}

/// The variant cases (GPT-J pairs, partial rotary, llama3 and YaRN scaling, M-RoPE, a bad
/// rotary_dim), whose expectations come from transformers' own rope functions.
#[test]
fn variant_golden_cases_on_every_device_and_dtype() {
    run_cases(cases_in("variants", 6));
}

fn run_cases(cases: Vec<(String, GoldenCase)>) {
    for (device_name, device) in crate::common::devices() {
        for (name, case) in &cases {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let what = format!("{name} on {device_name} as {dtype:?}");
                let result = case.run(&device, Some(dtype));
                if let Some(expected) = &case.expect_error {
                    assert_eq!(result.unwrap_err().to_string(), *expected, "{what}");
                    continue;
                }
                if !device.supports_dtype(dtype) {
                    assert!(
                        matches!(result, Err(RopePoolError::DeviceDtype { .. })),
                        "{what}: an unsupported dtype must be refused"
                    );
                    continue;
                }
                let out = result.unwrap_or_else(|e| panic!("{what}: {e}"));
                let score = Score::new(&out, case.expected.as_ref().unwrap());
                let bound = if dtype == DType::F32 {
                    1e-5
                } else {
                    tolerance(dtype)
                };
                println!("{what}: {:?}", score.outputs);
                assert!(
                    score.worst() <= bound,
                    "{what}: {:?} > {bound:e}",
                    score.outputs
                );
            }
        }
    }
}
