//! Every golden case (tests/golden, a copy of the project's shared cases) on every device and
//! dtype: results within the contract's tolerance of the f64 expected values (f32 within 1e-5,
//! long positions included), invalid calls with exactly the expected message.

use crate::common::devices;
use burn::tensor::DType;
use burn_rope_pool::RopePoolError;
use burn_rope_pool::testing::{GoldenCase, Score, tolerance};

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

/// Hostile golden files (the runner is public): integer data where floats belong and the other
/// way round, 64-bit positions past i32, ranks up to 6 and past the loader's limit. Each one is
/// refused with a clear message or runs, never panics.
#[test]
fn malformed_golden_files_are_refused_not_panicked_on() {
    use burn_rope_pool::testing::GoldenError;
    use safetensors::{Dtype, tensor::TensorView};

    type Entry = (&'static str, Dtype, Vec<usize>, Vec<u8>);
    let f32s = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|i| (i as f32 * 0.25).to_le_bytes())
            .collect()
    };
    let ints = |v: &[i64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    // A valid call: T = 2, Hq = 2, Hkv = 1, D = 4, P = 3.
    let base = || -> Vec<Entry> {
        vec![
            ("q", Dtype::F32, vec![2, 2, 4], f32s(16)),
            ("k", Dtype::F32, vec![2, 1, 4], f32s(8)),
            ("v", Dtype::F32, vec![2, 1, 4], f32s(8)),
            ("positions", Dtype::I64, vec![2], ints(&[0, 1])),
            ("slots", Dtype::I64, vec![2], ints(&[0, 2])),
            ("k_pool", Dtype::F32, vec![3, 1, 4], f32s(12)),
            ("v_pool", Dtype::F32, vec![3, 1, 4], f32s(12)),
        ]
    };
    let dir = std::env::temp_dir().join(format!("rope-pool-bad-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, entries: Vec<Entry>| {
        let views: Vec<(String, TensorView<'_>)> = entries
            .iter()
            .map(|(n, dtype, dims, data)| {
                (
                    n.to_string(),
                    TensorView::new(*dtype, dims.clone(), data).unwrap(),
                )
            })
            .collect();
        let meta: std::collections::HashMap<String, String> = [
            ("head_dim", "4"),
            ("num_qo_heads", "2"),
            ("num_kv_heads", "1"),
            ("rope_base", "10000"),
            ("expect_error", "(any documented error)"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let path = dir.join(format!("{name}.safetensors"));
        safetensors::serialize_to_file(views, Some(meta), &path).unwrap();
        path
    };
    let replace = |name: &'static str, entry: Entry| {
        let mut entries = base();
        let at = entries.iter().position(|e| e.0 == name).unwrap();
        entries[at] = entry;
        entries
    };
    let refused_at_load = |path: std::path::PathBuf, message: &str| match GoldenCase::load(&path) {
        Err(GoldenError::Content(m)) => assert_eq!(m, message, "{}", path.display()),
        other => panic!("{}: expected a load error, got {other:?}", path.display()),
    };
    refused_at_load(
        write(
            "float_positions",
            replace("positions", ("positions", Dtype::F32, vec![2], f32s(2))),
        ),
        "input `positions` is stored as F32: it must be integers",
    );
    refused_at_load(
        write(
            "int_q",
            replace("q", ("q", Dtype::I64, vec![2, 2, 4], ints(&[1; 16]))),
        ),
        "input `q` is stored as I64: it must be floating point",
    );
    refused_at_load(
        write(
            "rank9_v",
            replace("v", ("v", Dtype::F32, vec![1; 9], f32s(1))),
        ),
        "input `v` has rank 9 (at most 8 is read)",
    );

    for (device_name, device) in devices() {
        let run = |path: &std::path::PathBuf, check: bool| {
            let mut case = GoldenCase::load(path).unwrap();
            case.config.check_slots = check;
            case.run(&device, None)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        // Ranks the op does not take get the contract's rank errors.
        let q5 = write(
            "rank5_q",
            replace("q", ("q", Dtype::F32, vec![2, 2, 4, 1, 1], f32s(16))),
        );
        let q6 = write(
            "rank6_q",
            replace("q", ("q", Dtype::F32, vec![2, 2, 1, 4, 1, 1], f32s(16))),
        );
        let s5 = write(
            "rank5_slots",
            replace(
                "slots",
                ("slots", Dtype::I64, vec![2, 1, 1, 1, 1], ints(&[0, 2])),
            ),
        );
        for path in [&q5, &q6] {
            assert_eq!(
                run(path, false),
                Err("rope_pool_fused expects q/k/v to be 3-D".into())
            );
        }
        assert_eq!(
            run(&s5, false),
            Err("rope_pool_fused expects positions/slots to be 1-D".into())
        );
        // A position past i32 in an i64 tensor: checked mode refuses it, unchecked mode rotates by
        // its low 32 bits; a device without i64 says so.
        let wide = write(
            "wide_position",
            replace(
                "positions",
                ("positions", Dtype::I64, vec![2], ints(&[0, (1 << 32) + 5])),
            ),
        );
        let no_i64 = format!("I64 is not supported on {device:?}");
        if device.supports_dtype(DType::I64) {
            assert_eq!(
                run(&wide, true),
                Err("position 4294967301 at positions[1] is outside the i32 range".into()),
                "{device_name}"
            );
            assert_eq!(run(&wide, false), Ok(()), "{device_name}");
        } else {
            assert_eq!(run(&wide, false), Err(no_i64), "{device_name}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
