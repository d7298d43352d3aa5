//! The decoder on the checkpoints transformers wrote (`tests/models/`, copies of the project's
//! shared tiny models with transformers' own float64 greedy generations, and `qwen3_tiny`, written
//! the same way by `scripts/generators/make_tiny_qwen3.py` with transformers 5.17 on the H200 machine,
//! and two fp8 checkpoints, `llama31_tiny_fp8` and `llama31_tiny_fp8_channel`, written by
//! `scripts/generators/make_tiny_fp8*.py` with transformers 5.25):
//! generated ids equal and logits within 1e-4 norm-relative at every step, on every device, in
//! f32, fused and unfused; and the batching
//! itself — requests queued for a small pool, joining mid-run on reused rows, one-token prompts,
//! sequences finishing at different steps — against the same requests run alone; and the errors
//! of bad checkpoints.

use crate::common::float_tensor;
use burn::tensor::{DType, Device};
use burn_rope_pool::model::Decoder;
use burn_rope_pool::model::{Checkpoint, CheckpointError};
use burn_rope_pool::model::{GenerateError, GenerateOptions, Generated, Request, generate};
use burn_rope_pool::pool::KvPoolError;
use burn_rope_pool::testing::norm_relative_error;
use serde_json::Value;

fn model_dir(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/models")
        .join(name)
}

pub(crate) fn expected(name: &str) -> (Vec<Request>, Vec<Generated>) {
    let text = std::fs::read_to_string(model_dir(name).join("expected.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    let mut requests = Vec::new();
    let mut outputs = Vec::new();
    for s in json["sequences"].as_array().unwrap() {
        let ids = |v: &Value| -> Vec<u32> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        requests.push(Request {
            prompt: ids(&s["prompt"]),
            max_new_tokens: s["max_new_tokens"].as_u64().unwrap() as usize,
        });
        let logits = s["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect();
        outputs.push(Generated {
            generated: ids(&s["generated"]),
            logits,
        });
    }
    (requests, outputs)
}

fn load(name: &str, device: &Device) -> Decoder {
    let checkpoint = Checkpoint::open(model_dir(name)).unwrap();
    Decoder::load(&checkpoint, device, DType::F32).unwrap()
}

fn run(model: &Decoder, requests: &[Request], pool_rows: Option<usize>) -> Vec<Generated> {
    run_through(model, requests, pool_rows, true)
}

/// [`generate`] through the production kernels (`fused`) or the oracle: Burn's tensor ops
/// throughout and the op's unfused path, the q/k norm as tensor ops too.
fn run_through(
    model: &Decoder,
    requests: &[Request],
    pool_rows: Option<usize>,
    fused: bool,
) -> Vec<Generated> {
    let options = GenerateOptions {
        pool_rows,
        keep_logits: true,
        ..GenerateOptions::default()
    };
    match fused {
        true => generate(model, requests, &options, |_| {}).unwrap().0,
        false => {
            let unfused = burn_rope_pool::testing::generate_unfused(model, requests, &options);
            unfused.unwrap().0
        }
    }
}

/// Ids equal; logits within `tol` norm-relative at every step.
pub(crate) fn assert_same(got: &[Generated], want: &[Generated], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.generated, w.generated, "{what}: request {i} ids");
        assert_eq!(g.logits.len(), w.logits.len(), "{what}: request {i} steps");
        for (step, (a, b)) in g.logits.iter().zip(&w.logits).enumerate() {
            let a: Vec<f64> = a.iter().map(|&x| x as f64).collect();
            let b: Vec<f64> = b.iter().map(|&x| x as f64).collect();
            let err = norm_relative_error(&a, &b);
            assert!(
                err <= tol,
                "{what}: request {i} step {step}: logits norm-rel {err:e}"
            );
        }
    }
}

#[test]
fn checkpoints_generate_what_transformers_generates() {
    for (device_name, device) in crate::common::devices() {
        for name in [
            "llama31_tiny",
            "llama31_tiny_bf16",
            "qwen2_tiny",
            "qwen3_tiny",
            "llama31_tiny_fp8",
            "llama31_tiny_fp8_channel",
        ] {
            let (requests, want) = expected(name);
            // The decoder, and its oracle.
            let model = load(name, &device);
            for fused in [true, false] {
                let got = run_through(&model, &requests, None, fused);
                let what = format!("{name} on {device_name}, fused {fused}");
                assert_same(&got, &want, 1e-4, &what);
            }
        }
    }
}

/// Chunked prefill: prompts run over several steps (one token a step, chunks that end
/// mid-prompt, a chunk past every prompt) beside the decoding sequences still generate
/// transformers' ids, with its logits within 1e-4 at every step.
#[test]
fn chunked_prefill_generates_what_transformers_generates() {
    for (device_name, device) in crate::common::devices() {
        for name in ["llama31_tiny", "qwen3_tiny"] {
            let (requests, want) = expected(name);
            let model = load(name, &device);
            for chunk in [1, 3, 7, 1000] {
                let options = GenerateOptions {
                    keep_logits: true,
                    prefill_chunk: Some(chunk),
                    ..GenerateOptions::default()
                };
                let got = generate(&model, &requests, &options, |_| {}).unwrap().0;
                let what = format!("{name} on {device_name}, prefill chunks of {chunk}");
                assert_same(&got, &want, 1e-4, &what);
            }
        }
    }
}

#[test]
fn a_small_pool_queues_requests_and_reuses_rows() {
    for (device_name, device) in crate::common::devices() {
        let (requests, want) = expected("llama31_tiny");
        let model = load("llama31_tiny", &device);
        // Room for the largest request alone: the others wait, join mid-run when rows free up
        // (on rows another sequence used), and every result is still transformers'.
        let largest = requests
            .iter()
            .map(|r| r.prompt.len() + r.max_new_tokens - 1)
            .max()
            .unwrap();
        for pool_rows in [largest, largest + 8] {
            let got = run(&model, &requests, Some(pool_rows));
            assert_same(
                &got,
                &want,
                1e-4,
                &format!("{device_name}, pool of {pool_rows} rows"),
            );
        }
        let err = generate(
            &model,
            &requests,
            &GenerateOptions {
                pool_rows: Some(largest - 1),
                keep_logits: false,
                ..GenerateOptions::default()
            },
            |_| {},
        )
        .unwrap_err();
        assert!(
            matches!(err, GenerateError::TooLong { needed, .. } if needed == largest),
            "{err}"
        );
    }
}

#[test]
fn batched_requests_match_the_same_requests_alone() {
    // One-token prompts, a request joining while others decode (pool for two at a time), and
    // sequences finishing at different steps: each result equals the request run on its own.
    let requests = vec![
        Request {
            prompt: vec![17],
            max_new_tokens: 6,
        },
        Request {
            prompt: vec![3, 141, 59, 26, 5],
            max_new_tokens: 3,
        },
        Request {
            prompt: vec![200],
            max_new_tokens: 1,
        },
        Request {
            prompt: vec![9, 9, 9],
            max_new_tokens: 8,
        },
    ];
    for (device_name, device) in crate::common::devices() {
        let model = load("qwen2_tiny", &device);
        let alone: Vec<Generated> = requests
            .iter()
            .flat_map(|r| run(&model, std::slice::from_ref(r), None))
            .collect();
        let together = run(&model, &requests, Some(16));
        assert_same(
            &together,
            &alone,
            1e-5,
            &format!("{device_name}: batched vs alone"),
        );
    }
}

/// Decode steps replayed from captured graphs (CubeCL devices, builds without Burn's `fusion`)
/// generate what the same steps launched kernel by kernel generate: batches that shrink as
/// requests finish and grow as one joins, sequences whose keys cross a bucket, a fresh pool per
/// run, fp8 weights, Qwen3's q/k norm. Elsewhere nothing is captured, and the test says so.
#[test]
fn captured_decode_steps_match_launched_steps() {
    let requests = vec![
        Request {
            prompt: vec![5, 17, 300, 41],
            max_new_tokens: 70,
        },
        Request {
            prompt: vec![3, 141],
            max_new_tokens: 5,
        },
        Request {
            prompt: vec![200, 7, 7],
            max_new_tokens: 30,
        },
    ];
    let capture = cfg!(not(feature = "fusion"));
    for (device_name, device) in crate::common::devices() {
        let gpu = device_name != "flex";
        for name in ["llama31_tiny", "qwen3_tiny", "llama31_tiny_fp8"] {
            let launched = load(name, &device).with_step_graphs(false);
            let captured = load(name, &device);
            // A pool for two sequences at a time: the third joins when the second finishes.
            let want = run(&launched, &requests, Some(96));
            let got = run(&captured, &requests, Some(96));
            let what = format!("{name} on {device_name}: captured vs launched");
            assert_same(&got, &want, 1e-5, &what);
            let again = run(&captured, &requests, Some(96));
            assert_same(&again, &want, 1e-5, &format!("{what}, second pool"));
            let launched_counts = burn_rope_pool::testing::step_graph_counts(&launched);
            assert_eq!(launched_counts, (0, 0, 0), "{what}: graphs off");
            let (captures, replays, kept) = burn_rope_pool::testing::step_graph_counts(&captured);
            // The runs' pools are gone: a new pool lets their captured steps go.
            drop(captured.new_cache(8).unwrap());
            let (_, _, kept_after) = burn_rope_pool::testing::step_graph_counts(&captured);
            assert_eq!(kept_after, 0, "{what}: steps kept over dropped pools");
            if capture && gpu {
                // Batch sizes 2 and 1, keys past 64, twice (one pool each run): several
                // captures, most steps replayed.
                assert!(captures >= 4, "{what}: {captures} captures");
                assert!(kept >= 1, "{what}: {kept} kept");
                assert!(replays >= 150, "{what}: {replays} replays");
            } else {
                assert_eq!((captures, replays, kept), (0, 0, 0), "{what}");
                eprintln!("{what}: no graph capture in this build or on this device");
            }
        }
    }
}

/// A captured step is not replayed over pools a caller holds a clone of (the write copies them
/// into new buffers): the next steps are captured over the new buffers, and every step's logits
/// equal the launched decoder's.
#[test]
fn captured_steps_follow_pools_into_new_buffers() {
    use burn_rope_pool::model::StepToken;
    for (device_name, device) in crate::common::devices() {
        let launched = load("llama31_tiny", &device).with_step_graphs(false);
        let captured = load("llama31_tiny", &device);
        let (mut a, mut b) = (
            launched.new_cache(64).unwrap(),
            captured.new_cache(64).unwrap(),
        );
        let mut held = Vec::new();
        for position in 0..12 {
            let tokens = [
                StepToken {
                    seq: 0,
                    token: 11 + position as u32,
                    position,
                },
                StepToken {
                    seq: 1,
                    token: 90 + position as u32,
                    position,
                },
            ];
            if position == 6 {
                // A clone of a layer's pools, held across the next steps: it keeps its values.
                let k = b.k(0).clone();
                let before = pool_values(&k);
                held.push((k, before));
            }
            let want = launched.step(&tokens, &mut a).unwrap();
            let got = captured.step(&tokens, &mut b).unwrap();
            let [want, got] = [want, got].map(|t| {
                let v: Vec<f32> = t.into_data().convert::<f32>().iter::<f32>().collect();
                v.iter().map(|&x| x as f64).collect::<Vec<_>>()
            });
            let err = norm_relative_error(&got, &want);
            assert!(err <= 1e-5, "{device_name}, position {position}: {err:e}");
        }
        for (k, before) in held {
            assert_eq!(
                pool_values(&k),
                before,
                "{device_name}: a held pool changed"
            );
        }
        let (captures, replays, _) = burn_rope_pool::testing::step_graph_counts(&captured);
        if cfg!(not(feature = "fusion")) && device_name != "flex" {
            // Captured before the clone and again over the new buffers.
            assert!(
                captures >= 2 && replays >= 6,
                "{captures} captures, {replays} replays"
            );
        } else {
            eprintln!("{device_name}: no graph capture in this build or on this device");
        }
    }
}

fn pool_values(pool: &burn_rope_pool::pool::PoolTensor) -> Vec<f32> {
    let t = pool.clone().into_float_tensor().expect("a float pool");
    t.into_data().convert::<f32>().iter::<f32>().collect()
}

#[test]
fn bad_checkpoints_give_clear_errors() {
    let dir = std::env::temp_dir().join(format!("rope-pool-bad-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        model_dir("llama31_tiny").join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(model_dir("llama31_tiny").join("config.json")).unwrap(),
    )
    .unwrap();
    let with = |field: &str, value: Value| {
        let mut c = config.clone();
        c[field] = value;
        std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
        let checkpoint = Checkpoint::open(&dir).unwrap();
        Decoder::load(&checkpoint, &Device::flex(), DType::F32)
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(
        with("model_type", "gpt2".into()).as_deref(),
        Some(
            "config.json: unsupported model_type `gpt2` (supported: llama, mistral, qwen2, qwen3)"
        )
    );
    assert_eq!(
        with("num_hidden_layers", 4.into()).as_deref(),
        Some("tensor `model.layers.3.input_layernorm.weight` is missing from the checkpoint")
    );
    // Named before anything is allocated for a billion layers (this aborted the process).
    assert_eq!(
        with("num_hidden_layers", 1_000_000_000.into()).as_deref(),
        Some(
            "tensor `model.layers.999999999.input_layernorm.weight` is missing from the checkpoint"
        )
    );
    // GQA needs the q heads to be a multiple of the kv heads (this panicked in a reshape).
    let gqa = with("num_key_value_heads", 4.into()).unwrap();
    assert!(
        gqa.contains("must be a multiple of `num_key_value_heads` (4)"),
        "{gqa}"
    );
    let shape = with("intermediate_size", 100.into()).unwrap();
    assert!(
        shape.starts_with("tensor `model.layers.0.mlp.gate_proj.weight` has shape [192, 96]"),
        "{shape}"
    );
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert!(matches!(
        Checkpoint::open(&dir),
        Err(CheckpointError::Io { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_sharded_checkpoint_loads_like_the_single_file() {
    // llama31_tiny split into two shards with a `model.safetensors.index.json`.
    let dir = std::env::temp_dir().join(format!("rope-pool-sharded-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = model_dir("llama31_tiny");
    std::fs::copy(source.join("config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(source.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = tensors.names().into_iter().map(String::from).collect();
    names.sort();
    let mut weight_map = serde_json::Map::new();
    for (shard, part) in names.chunks(names.len().div_ceil(2)).enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", shard + 1);
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = part
            .iter()
            .map(|n| (n.clone(), tensors.tensor(n).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, None, &dir.join(&file)).unwrap();
        for n in part {
            weight_map.insert(n.clone(), Value::String(file.clone()));
        }
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();

    let device = Device::flex();
    let (requests, _) = expected("llama31_tiny");
    let sharded = Decoder::load(&Checkpoint::open(&dir).unwrap(), &device, DType::F32).unwrap();
    let single = load("llama31_tiny", &device);
    assert_same(
        &run(&sharded, &requests, None),
        &run(&single, &requests, None),
        0.0,
        "sharded vs single file",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// An fp8 checkpoint in compressed-tensors' layout (`weight_scale` beside each e4m3 weight, a
/// `compressed-tensors` config) loads as the same weights as in HuggingFace's fine-grained FP8
/// layout (`llama31_tiny_fp8`, whose generations are transformers'); fp8 checkpoints the loader
/// cannot read are refused with the reason: another quantization method or format, a missing
/// scale, a scale grid that does not fit the weight or the config's blocks.
#[test]
fn fp8_checkpoints_in_either_layout_load_and_bad_ones_are_refused() {
    let dir = std::env::temp_dir().join(format!("rope-pool-fp8-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = model_dir("llama31_tiny_fp8");
    let bytes = std::fs::read(source.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    // Every tensor, the scales renamed `*.weight_scale_inv` -> `*.weight_scale` unless `keep`
    // says otherwise (`None`: left out).
    let write = |rename: &dyn Fn(&str) -> Option<String>| {
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
            .names()
            .into_iter()
            .filter_map(|n| rename(n).map(|to| (to, tensors.tensor(n).unwrap())))
            .collect();
        safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    };
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap())
            .unwrap();
    let load_with = |quantization: Value| {
        let mut c = config.clone();
        c["quantization_config"] = quantization;
        std::fs::write(dir.join("config.json"), c.to_string()).unwrap();
        let checkpoint = Checkpoint::open(&dir).unwrap();
        Decoder::load(&checkpoint, &Device::flex(), DType::F32)
    };
    let compressed = serde_json::json!({
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "block",
                        "block_structure": [32, 32], "symmetric": true, "dynamic": false},
        }},
        "ignore": ["lm_head"],
    });
    write(&|n: &str| Some(n.replace("weight_scale_inv", "weight_scale")));
    let model = load_with(compressed.clone()).unwrap();
    let (requests, want) = expected("llama31_tiny_fp8");
    assert_same(
        &run(&model, &requests, None),
        &want,
        1e-4,
        "compressed-tensors layout",
    );

    let error = |quantization: Value| load_with(quantization).err().map(|e| e.to_string());
    let mut fp8 = config["quantization_config"].clone();
    assert_eq!(
        error(serde_json::json!({"quant_method": "awq", "bits": 4})).as_deref(),
        Some(
            "config.json: quantization_config: quant_method `awq` (fp8 and compressed-tensors float8 are read)"
        )
    );
    fp8["fmt"] = "e5m2".into();
    assert_eq!(
        error(fp8.clone()).as_deref(),
        Some("config.json: quantization_config: fmt \"e5m2\" (e4m3 is read)")
    );
    let mut int8 = compressed.clone();
    int8["config_groups"]["group_0"]["weights"]["type"] = "int".into();
    assert!(error(int8).unwrap().contains("8-bit int weights"));
    // compressed-tensors' own block size is read: blocks of 64 need a 2 x 2 grid for q_proj.
    let mut blocks64 = compressed.clone();
    blocks64["config_groups"]["group_0"]["weights"]["block_structure"] =
        serde_json::json!([64, 64]);
    assert_eq!(
        error(blocks64).as_deref(),
        Some(
            "tensor `model.layers.0.self_attn.q_proj.weight_scale` has shape [3, 3], the config implies [2, 2]"
        )
    );
    let mut zero = compressed.clone();
    zero["config_groups"]["group_0"]["weights"]["block_structure"] = serde_json::json!([0, 32]);
    assert_eq!(
        error(zero).as_deref(),
        Some(
            "config.json: quantization_config: group `group_0` has block_structure [0,32] (two positive sizes)"
        )
    );
    let mut asymmetric = compressed.clone();
    asymmetric["config_groups"]["group_0"]["weights"]["symmetric"] = false.into();
    assert_eq!(
        error(asymmetric).as_deref(),
        Some(
            "config.json: quantization_config: group `group_0` has asymmetric weights (a zero point; symmetric ones are read)"
        )
    );
    let mut mixed = compressed.clone();
    mixed["config_groups"]["group_1"] = mixed["config_groups"]["group_0"].clone();
    mixed["config_groups"]["group_1"]["weights"]["strategy"] = "channel".into();
    assert_eq!(
        error(mixed).as_deref(),
        Some(
            "config.json: quantization_config: groups quantize by different blocks or strategies (one is read)"
        )
    );
    // By channel (no block size named): a grid of 5 x 3 scales does not divide q_proj's 96 rows.
    let mut channel = compressed.clone();
    channel["config_groups"]["group_0"]["weights"]["strategy"] = "channel".into();
    let ones = vec![0u8; 15 * 4];
    let uneven =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![5, 3], &ones).unwrap();
    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .names()
        .into_iter()
        .filter(|n| *n != "model.layers.0.self_attn.q_proj.weight_scale_inv")
        .map(|n| {
            (
                n.replace("weight_scale_inv", "weight_scale"),
                tensors.tensor(n).unwrap(),
            )
        })
        .collect();
    views.push((
        "model.layers.0.self_attn.q_proj.weight_scale".into(),
        uneven,
    ));
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    assert_eq!(
        error(channel).as_deref(),
        Some(
            "config.json: `model.layers.0.self_attn.q_proj.weight_scale` is a grid of [5, 3] scales, which does not divide the weight [96, 96] evenly, and the quantization_config names no block size"
        )
    );
    // The fine-grained layout's config over the renamed scales: no `weight_scale_inv`... but
    // `weight_scale` is read too, so leave the scales out to miss them.
    fp8["fmt"] = "e4m3".into();
    write(&|n: &str| (!n.ends_with("_scale_inv")).then(|| n.to_string()));
    assert_eq!(
        error(fp8.clone()).as_deref(),
        Some(
            "tensor `model.layers.0.self_attn.q_proj.weight_scale_inv` is missing from the checkpoint"
        )
    );
    // Blocks of 16 need a 6 x 6 grid of scales for q_proj; the file has 3 x 3.
    write(&|n: &str| Some(n.to_string()));
    fp8["weight_block_size"] = serde_json::json!([16, 16]);
    assert_eq!(
        error(fp8.clone()).as_deref(),
        Some(
            "tensor `model.layers.0.self_attn.q_proj.weight_scale_inv` has shape [3, 3], the config implies [6, 6]"
        )
    );
    fp8["weight_block_size"] = serde_json::json!([0, 32]);
    assert!(error(fp8).unwrap().contains("weight_block_size [0,32]"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Limits past what a pool can address are refused before anything is allocated (a request of
/// 10^12 new tokens aborted the process; two near `usize::MAX` overflowed the sum of rows).
#[test]
fn impossible_limits_are_refused() {
    let model = load("llama31_tiny", &Device::flex());
    let request = |max_new_tokens| Request {
        prompt: vec![1, 2, 3],
        max_new_tokens,
    };
    for requests in [
        vec![request(1_000_000_000_000)],
        vec![request(usize::MAX - 1), request(usize::MAX - 1)],
    ] {
        let err = generate(&model, &requests, &GenerateOptions::default(), |_| {}).unwrap_err();
        assert!(
            matches!(err, GenerateError::Pool(KvPoolError::TooManyRows { .. })),
            "{err}"
        );
    }
    // Addressable but past what memory holds: refused before the allocation (a billion rows of
    // this model's pools aborted the process on Flex).
    let err = generate(
        &model,
        &[request(1_000_000_000)],
        &GenerateOptions::default(),
        |_| {},
    )
    .unwrap_err();
    assert!(
        matches!(err, GenerateError::Pool(KvPoolError::Memory { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains("the system has available"),
        "{err}"
    );
    let options = GenerateOptions {
        max_pool_bytes: Some(1000),
        ..GenerateOptions::default()
    };
    let err = generate(&model, &[request(4)], &options, |_| {}).unwrap_err();
    let bytes = model.cache_bytes(6).unwrap() + 4 * 6; // the pools and the free list
    assert_eq!(
        err.to_string(),
        format!("pools of 6 rows need {bytes} bytes, more than the 1000 bytes allowed")
    );
    let options = GenerateOptions {
        pool_rows: Some(usize::MAX),
        ..GenerateOptions::default()
    };
    let err = generate(&model, &[request(4)], &options, |_| {}).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "a pool of {} rows is more than the {} rows slots can address",
            usize::MAX,
            i32::MAX
        )
    );
}

/// Sliding windows as transformers reads them from `config.json`, and the decoder applying
/// them: a window wider than every context changes nothing; a narrow one on the layers it
/// names changes the logits; bad window fields are refused with the field's name.
#[test]
fn sliding_windows_follow_the_config() {
    let device = Device::flex();
    let (requests, want) = expected("qwen2_tiny");
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut checkpoint = Checkpoint::open(model_dir("qwen2_tiny")).unwrap();
        edit(&mut checkpoint.config);
        Decoder::load(&checkpoint, &device, DType::F32)
    };
    // Off unless `use_sliding_window` (Qwen2), whatever `sliding_window` says.
    let off = with(&|c| c["sliding_window"] = 2.into()).unwrap();
    assert_eq!(off.config.window(0), None);
    assert_same(&run(&off, &requests, None), &want, 1e-4, "window off");
    // Wider than any context: the same generations.
    let wide = with(&|c| {
        c["use_sliding_window"] = true.into();
        c["sliding_window"] = 4096.into();
        c["layer_types"] = Value::Null;
        c["max_window_layers"] = 0.into();
    })
    .unwrap();
    assert_eq!(wide.config.window(2), Some(4096));
    assert_same(&run(&wide, &requests, None), &want, 1e-4, "wide window");
    // Two positions on the last layer only (`layer_types`): different logits.
    let narrow = with(&|c| {
        c["use_sliding_window"] = true.into();
        c["sliding_window"] = 2.into();
        c["layer_types"] =
            serde_json::json!(["full_attention", "full_attention", "sliding_attention"]);
    })
    .unwrap();
    let windows: Vec<_> = (0..3).map(|l| narrow.config.window(l)).collect();
    assert_eq!(windows, [None, None, Some(2)]);
    let long = requests
        .iter()
        .position(|r| r.prompt.len() > 2)
        .expect("a prompt longer than the window");
    let got = run(&narrow, &requests[long..=long], None);
    let a: Vec<f64> = got[0].logits[0].iter().map(|&x| x as f64).collect();
    let b: Vec<f64> = want[long].logits[0].iter().map(|&x| x as f64).collect();
    assert!(
        norm_relative_error(&a, &b) > 1e-3,
        "the window changed nothing"
    );
    for (edit, message) in [
        (
            serde_json::json!({"model_type": "mistral", "sliding_window": 0}),
            "config.json: `sliding_window` must be a positive integer or null, got 0",
        ),
        (
            serde_json::json!({"use_sliding_window": true, "sliding_window": 8, "layer_types": ["full_attention"]}),
            "config.json: `layer_types` has 1 entries for 3 layers",
        ),
        (
            serde_json::json!({"use_sliding_window": true, "sliding_window": 8, "layer_types": ["full_attention", "x", "full_attention"]}),
            "config.json: `layer_types` entries must be \"sliding_attention\" or \"full_attention\", got \"x\"",
        ),
    ] {
        let err = with(&|c| {
            for (k, v) in edit.as_object().unwrap() {
                c[k] = v.clone();
            }
        })
        .err()
        .map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some(message));
    }
}

/// `add_rms_norm`'s outputs `(sum, out)` for rows `x`, the added values `y` (each a value of
/// `dtype`) and the weight `w`, against float64: the sum rounded once to the dtype, exactly; then
/// its norm with transformers' rounding, within the dtype's tolerance.
fn assert_add_rms_norm(
    what: &str,
    dtype: DType,
    [x, y, w]: [&[f64]; 3],
    eps: f64,
    (sum, out): (burn::tensor::Tensor<2>, burn::tensor::Tensor<2>),
) {
    let round = |v: f64| crate::common::round_to(v, dtype);
    let hidden = w.len();
    let [sum, out] = [sum, out].map(|t| t.into_data().iter::<f64>().collect::<Vec<_>>());
    for r in 0..x.len() / hidden {
        let s: Vec<f64> = (0..hidden)
            .map(|c| round(x[r * hidden + c] + y[r * hidden + c]))
            .collect();
        let mean = s.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
        let inv = 1.0 / (mean + eps).sqrt();
        for c in 0..hidden {
            let at = r * hidden + c;
            assert_eq!(sum[at], s[c], "{what}: sum at ({r}, {c})");
            let want = round(round(s[c] * inv) * w[c]);
            let tol = if dtype == DType::F32 { 1e-5 } else { 2e-3 } * (1.0 + want.abs());
            assert!(
                (out[at] - want).abs() <= tol,
                "{what} at ({r}, {c}): {} vs {want}",
                out[at]
            );
        }
    }
}

/// The residual add and its norm in one launch: the sum rounded once to the dtype, then the norm
/// of that sum, against float64 (the residual stream returned too); and the same of a staged
/// product's f32 shares (`[shares, rows, hidden]`, summed in the norm's launch, each sum rounded
/// once to the dtype first). The shares are multiples of 2^-10 below 8 in magnitude, so their
/// f32 sum (below 64) is exact in any order.
#[test]
fn add_rms_norm_matches_float64() {
    use burn_rope_pool::testing::{add_rms_norm, add_rms_norm_shares};
    let mut rng = burn_rope_pool::testing::Rng::new(78);
    for (name, device) in crate::common::devices() {
        // (shares, rows, hidden); no shares: `y` is a plain output of the dtype.
        for (shares, rows, hidden) in [
            (0usize, 1usize, 4096usize),
            (0, 3, 7),
            (0, 17, 96),
            (0, 64, 128),
            (2, 1, 4096),
            (4, 3, 7),
            (8, 17, 96),
        ] {
            for dtype in [DType::F32, DType::F16] {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let round = |v: f64| crate::common::round_to(v, dtype);
                let len = rows * hidden;
                let x: Vec<f64> = rng.values(len).into_iter().map(round).collect();
                let w: Vec<f64> = rng.values(hidden).into_iter().map(round).collect();
                let eps = 1e-5;
                let xt = float_tensor(&x, [rows, hidden], &device, dtype);
                let wt = float_tensor(&w, [hidden], &device, dtype);
                let (y, got) = match shares {
                    0 => {
                        let y: Vec<f64> = rng.values(len).into_iter().map(round).collect();
                        let yt = float_tensor(&y, [rows, hidden], &device, dtype);
                        (y, add_rms_norm(xt, yt, &wt, eps))
                    }
                    _ => {
                        let y: Vec<f64> = rng
                            .values(shares * len)
                            .into_iter()
                            .map(|v| (v * 4096.0).round() / 1024.0)
                            .collect();
                        let yt = float_tensor(&y, [shares, rows, hidden], &device, DType::F32);
                        // The shares' sums, each rounded once to the dtype.
                        let summed = (0..len)
                            .map(|at| round((0..shares).map(|p| y[p * len + at]).sum()))
                            .collect();
                        (summed, add_rms_norm_shares(xt, yt, &wt, eps))
                    }
                };
                let what = format!("{name} {dtype:?} {shares} shares [{rows}, {hidden}]");
                assert_add_rms_norm(&what, dtype, [&x, &y, &w], eps, got);
            }
        }
    }
}

/// The decoder's RMSNorm (one kernel on CubeCL devices, tensor ops on Flex) against float64
/// with transformers' rounding (normalised row rounded to the dtype, then times the weight), on
/// odd widths and many rows.
#[test]
fn rms_norm_matches_float64() {
    use burn_rope_pool::testing::rms_norm;
    let mut rng = burn_rope_pool::testing::Rng::new(77);
    for (name, device) in crate::common::devices() {
        for (rows, hidden) in [(1usize, 4096usize), (3, 7), (17, 96), (5, 5000), (64, 128)] {
            for dtype in [DType::F32, DType::F16] {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let round = |v: f64| crate::common::round_to(v, dtype);
                let x: Vec<f64> = rng.values(rows * hidden).into_iter().map(round).collect();
                let w: Vec<f64> = rng.values(hidden).into_iter().map(round).collect();
                let eps = 1e-5;
                let xt = float_tensor(&x, [rows, hidden], &device, dtype);
                let wt = float_tensor(&w, [hidden], &device, dtype);
                let got: Vec<f64> = rms_norm(xt, &wt, eps).into_data().iter::<f64>().collect();
                for r in 0..rows {
                    let row = &x[r * hidden..][..hidden];
                    let mean = row.iter().map(|v| v * v).sum::<f64>() / hidden as f64;
                    let inv = 1.0 / (mean + eps).sqrt();
                    for c in 0..hidden {
                        let want = round(round(row[c] * inv) * w[c]);
                        let a = got[r * hidden + c];
                        let tol =
                            if dtype == DType::F32 { 1e-5 } else { 2e-3 } * (1.0 + want.abs());
                        assert!(
                            (a - want).abs() <= tol,
                            "{name} {dtype:?} [{rows}, {hidden}] at ({r}, {c}): {a} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// `out` (`x [m, k] · wᵀ` of `dtype`, `w [n, k]`; both as their `dtype` values) against the
/// float64 product rounded to `dtype`, within 1e-5 (f32) or 2e-3 (f16) of one plus the sum of
/// the terms' magnitudes; `what` names the device and path in a failure.
fn assert_product_matches(
    what: &str,
    dtype: DType,
    x: &[f64],
    w: &[f64],
    [m, k, n]: [usize; 3],
    out: burn::tensor::Tensor<2>,
) {
    let got: Vec<f64> = out.into_data().iter::<f64>().collect();
    let base = if dtype == DType::F32 { 1e-5 } else { 2e-3 };
    for r in 0..m {
        for c in 0..n {
            let terms = (0..k).map(|i| x[r * k + i] * w[c * k + i]);
            let (dot, scale) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + f64::abs(t)));
            let want = crate::common::round_to(dot, dtype);
            let a = got[r * n + c];
            assert!(
                (a - want).abs() <= base * (1.0 + scale),
                "{what} {dtype:?} [{m}, {k}]·[{n}, {k}]ᵀ at ({r}, {c}): {a} vs {want}"
            );
        }
    }
}

/// The decoder's projection `x · w_tᵀ` (a matrix-vector kernel for up to 16 rows where the
/// device has plane operations, Burn's matmul otherwise) against float64, across the row limit
/// and odd widths.
#[test]
fn projections_match_float64() {
    use burn_rope_pool::testing::{MatmulRoutine, project, project_with};
    let mut rng = burn_rope_pool::testing::Rng::new(78);
    for (name, device) in crate::common::devices() {
        for (m, k, n) in [
            (1usize, 4096usize, 300usize),
            (3, 7, 9),
            (16, 130, 33),
            (17, 64, 5),
            (8, 4100, 1),
            (40, 64, 300),
            (64, 96, 40),
            // Sizes the tensor-core kernel for 17–64 rows takes (where the device has it).
            (20, 32, 48),
            (49, 1024, 80),
            (64, 256, 32),
            (33, 64, 128),
            (24, 160, 64),
            // Sizes the staged tensor-core kernel takes (f16, where the device has the tiles):
            // 9–16 rows of any shape, split-K included; 17–64 rows of q/k/v- and o-like shapes.
            (12, 256, 192),
            (10, 1024, 128),
            (16, 512, 1024),
            (48, 512, 640),
            // Row counts that leave a group of 8 rows part-filled, and a long inner size in
            // shares (the warp-level staged products through CUDA, `ROPE_POOL_STAGED_WARP=1`).
            (5, 256, 64),
            (37, 256, 128),
            (64, 4096, 256),
            // The tensor-core product of many rows (f16, widths a multiple of 128, inner sizes of
            // 64; through SPIR-V), cubek's wide stage where the inner size is not a multiple of
            // 64 (f16, 2048 rows, SPIR-V), and a size both leave to cubek's own choice.
            (2048, 64, 256),
            (2048, 96, 256),
            (2050, 48, 130),
        ] {
            for dtype in [DType::F32, DType::F16] {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let round = |v: f64| crate::common::round_to(v, dtype);
                let x: Vec<f64> = rng.values(m * k).into_iter().map(round).collect();
                let w: Vec<f64> = rng.values(n * k).into_iter().map(round).collect();
                let tensor = |v: &[f64], dims: [usize; 2]| float_tensor(v, dims, &device, dtype);
                // `project`'s own choice, and past 16 rows every matmul routine by name (one that
                // refuses the device leaves the product to Burn's matmul).
                let mut runs = vec![("project", project(tensor(&x, [m, k]), &tensor(&w, [n, k])))];
                if m > 16 {
                    for routine in MatmulRoutine::ALL {
                        let out = project_with(tensor(&x, [m, k]), &tensor(&w, [n, k]), routine);
                        runs.push((routine.name(), out));
                    }
                }
                for (path, out) in runs {
                    assert_product_matches(
                        &format!("{name} {path}"),
                        dtype,
                        &x,
                        &w,
                        [m, k, n],
                        out,
                    );
                }
            }
        }
    }
}

/// Products of many rows (prefill) where the tensor-core product of
/// `rope_pool_kernels::decoder::launch_tiles_product` takes them (f16, 128-multiple widths,
/// 64-multiple inner sizes, through CubeCL's SPIR-V or CUDA compilers): row counts that leave a partial
/// tile of 128 and of 16, more row tiles than a group of cubes walks together, and odd and even
/// counts of inner blocks (the stages alternate through CUDA), against float64. Elsewhere the
/// product runs through cubek, checked the same way; with
/// `ROPE_POOL_EXPECT_TILES_PRODUCT` set (the GPU runs of `benches/`) every GPU device must take
/// them, so a run on the device it was written for cannot pass without it.
#[test]
fn tiles_product_matches_float64() {
    use burn_rope_pool::testing::{project, tiles_product_takes};
    let expect = std::env::var_os("ROPE_POOL_EXPECT_TILES_PRODUCT").is_some();
    let mut rng = burn_rope_pool::testing::Rng::new(79);
    for (name, device) in crate::common::devices() {
        let dtype = DType::F16;
        if !device.supports_dtype(dtype) {
            continue;
        }
        for (m, k, n) in [
            (65usize, 64usize, 128usize),
            (300, 192, 384),
            (1000, 320, 640),
            (1100, 64, 256),
            // Inner sizes a multiple of 128: what blocks of 128 take (`ROPE_POOL_TILES_BLOCK`).
            (257, 384, 256),
            (70, 1024, 128),
            // A long inner size, several blocks of 128 columns.
            (129, 2048, 512),
        ] {
            let round = |v: f64| crate::common::round_to(v, dtype);
            let x: Vec<f64> = rng.values(m * k).into_iter().map(round).collect();
            let w: Vec<f64> = rng.values(n * k).into_iter().map(round).collect();
            let xt = float_tensor(&x, [m, k], &device, dtype);
            assert!(
                !expect || name == "flex" || tiles_product_takes(&xt, [m, k, n]),
                "{name}: the tensor-core product of many rows does not take [{m}, {k}]·[{n}, {k}]ᵀ"
            );
            let out = project(xt, &float_tensor(&w, [n, k], &device, dtype));
            assert_product_matches(name, dtype, &x, &w, [m, k, n], out);
        }
    }
}

/// The decode step's fused forms of the projection, on float and fp8 weights (the matrix-vector kernel with the norm
/// before it, the activation or the residual add after it, in one launch where `fuses` says so;
/// the separate functions elsewhere) against float64 with the model's rounding at each step,
/// across the row limits (one row with the norm, 16 with the add) and odd widths.
#[test]
fn fused_projections_match_float64() {
    use burn_rope_pool::testing::{
        FusedForm, fuses, fuses_fp8, norm_project, norm_project_fp8, project_add, project_add_fp8,
        staged_takes, staged_takes_fp8,
    };
    // Large enough to move the norm past the f32 tolerance (the rows' mean square is ~1).
    const EPS: f64 = 0.1;
    let mut rng = burn_rope_pool::testing::Rng::new(81);
    for (name, device) in crate::common::devices() {
        // Float weights, then fp8 weights (inner sizes a multiple of 4, blocks of `block_k`).
        for (fp8, m, k, n, block_k) in [
            (false, 1usize, 4096usize, 300usize, 0usize),
            // Past 16 KiB of f32 (4104 > 4096 elements) the norm-fused kernel normalises each
            // element where it reads it, below it stages the normalised row once a cube.
            (false, 1, 4104, 40, 0),
            (false, 1, 7, 11, 0),
            (false, 1, 130, 34, 0),
            (false, 3, 7, 10, 0),
            (false, 3, 7, 11, 0),
            (false, 8, 130, 34, 0),
            (false, 9, 64, 12, 0),
            (false, 16, 260, 21, 0),
            // The staged tensor-core kernel's sizes (f16 where the device has the tiles): the
            // residual add then follows the product.
            (false, 12, 256, 192, 0),
            (false, 16, 128, 64, 0),
            (false, 17, 32, 8, 0),
            (true, 1, 2048, 300, 128),
            (true, 1, 4104, 34, 8),
            (true, 1, 8, 10, 4),
            (true, 1, 132, 34, 32),
            (true, 3, 8, 10, 4),
            (true, 3, 8, 11, 8),
            // One block a row, 65 chunks of 64, and at one row the norm over a staged row and
            // (past 16 KiB of f16) over rows normalised where read.
            (true, 3, 256, 40, 256),
            (true, 4, 4160, 24, 128),
            (true, 1, 4096, 40, 4096),
            (true, 1, 8256, 16, 128),
            (true, 8, 132, 34, 32),
            (true, 9, 64, 12, 64),
            (true, 16, 260, 21, 260),
            (true, 17, 32, 8, 32),
            // The staged kernel's sizes on fp8 weights (decoded as they are staged).
            (true, 8, 128, 64, 32),
            (true, 12, 256, 192, 128),
        ] {
            let fp8 = fp8.then(|| random_fp8_weight(&mut rng, n, k, block_k, &device));
            for dtype in [DType::F32, DType::F16] {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let round = |v: f64| crate::common::round_to(v, dtype);
                let base = if dtype == DType::F32 { 1e-5 } else { 2e-3 };
                let x: Vec<f64> = rng.values(m * k).into_iter().map(round).collect();
                let norm_w: Vec<f64> = rng.values(k).into_iter().map(round).collect();
                let w: Vec<f64> = match &fp8 {
                    Some((_, w)) => w.clone(),
                    None => rng.values(n * k).into_iter().map(round).collect(),
                };
                let res: Vec<f64> = rng.values(m * n).into_iter().map(round).collect();
                let tensor = |v: &[f64], dims: [usize; 2]| float_tensor(v, dims, &device, dtype);
                let (xt, wt) = (tensor(&x, [m, k]), tensor(&w, [n, k]));
                let nt = float_tensor(&norm_w, [k], &device, dtype);
                let fused = |form| match &fp8 {
                    Some((weight, _)) => fuses_fp8(&xt, weight, form),
                    None => fuses(&xt, &wt, form),
                };
                // Every GPU device adds the residual in the product's launch up to 16 rows (not
                // where the staged tensor-core kernel takes the float product), and fuses the
                // norm (and the activation, asked of even widths only: gate and up halves) at one
                // row.
                let gpu = name != "flex";
                let staged = match &fp8 {
                    Some(_) => staged_takes_fp8(&xt, [m, k, n]),
                    None => staged_takes(&xt, [m, k, n]),
                };
                let even = n % 2 == 0;
                let norm = |silu| FusedForm::Norm { silu };
                assert_eq!(
                    [
                        fused(FusedForm::Add),
                        fused(norm(false)),
                        even && fused(norm(true))
                    ],
                    [
                        gpu && m <= 16 && !staged,
                        gpu && m == 1,
                        gpu && m == 1 && even
                    ],
                    "{name} {m} rows"
                );
                // (x · wᵀ)[r, c] and the sum of the magnitudes of its terms, over rows `h`.
                let dot = |h: &[f64], r: usize, c: usize| -> (f64, f64) {
                    let terms = (0..k).map(|i| h[r * k + i] * w[c * k + i]);
                    terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()))
                };
                // The norm as transformers rounds it.
                let mut h = vec![0.0; m * k];
                for r in 0..m {
                    let row = &x[r * k..][..k];
                    let inv =
                        1.0 / (row.iter().map(|v| v * v).sum::<f64>() / k as f64 + EPS).sqrt();
                    for i in 0..k {
                        h[r * k + i] = round(round(row[i] * inv) * norm_w[i]);
                    }
                }
                let get = |t: burn::tensor::Tensor<2>| -> Vec<f64> {
                    t.into_data().iter::<f64>().collect()
                };
                let normed = |silu| {
                    get(match &fp8 {
                        Some((weight, _)) => norm_project_fp8(xt.clone(), &nt, EPS, weight, silu),
                        None => norm_project(xt.clone(), &nt, EPS, &wt, silu),
                    })
                };
                let added = get(match &fp8 {
                    Some((weight, _)) => project_add_fp8(xt.clone(), weight, tensor(&res, [m, n])),
                    None => project_add(xt.clone(), &wt, tensor(&res, [m, n])),
                });
                let half = if even { n / 2 } else { 0 };
                let (act, normed) = (if even { normed(true) } else { Vec::new() }, normed(false));
                assert_eq!(
                    [normed.len(), act.len(), added.len()],
                    [m * n, m * half, m * n]
                );
                let kind = if fp8.is_some() { "fp8" } else { "float" };
                for r in 0..m {
                    for c in 0..n {
                        let at =
                            format!("{name} {dtype:?} [{m}, {k}]·{kind}[{n}, {k}]ᵀ at ({r}, {c})");
                        let (d, scale) = dot(&h, r, c);
                        let got = normed[r * n + c];
                        assert!(
                            (got - round(d)).abs() <= base * (1.0 + scale),
                            "norm_project {at}: {got} vs {}",
                            round(d)
                        );
                        let (d, scale) = dot(&x, r, c);
                        let want = round(res[r * n + c] + round(d));
                        let got = added[r * n + c];
                        assert!(
                            (got - want).abs() <= base * (1.0 + scale),
                            "project_add {at}: {got} vs {want}"
                        );
                        if c < half {
                            let ((g, sg), (u, su)) = (dot(&h, r, c), dot(&h, r, half + c));
                            let (g, u) = (round(g), round(u));
                            let want = round(round(g / (1.0 + (-g).exp())) * u);
                            let got = act[r * half + c];
                            let tol = base * (1.0 + sg + su) * (1.0 + g.abs() + u.abs());
                            assert!(
                                (got - want).abs() <= tol,
                                "norm_project + silu {at}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A random fp8 weight `[n, k]` in blocks of `block_k` on `device` (every finite code, not the
/// NaN codes; scales from 2^-14 to 2^-6, so f16 products stay finite) and its values, decoded on
/// the host.
fn random_fp8_weight(
    rng: &mut burn_rope_pool::testing::Rng,
    n: usize,
    k: usize,
    block_k: usize,
    device: &Device,
) -> (burn_rope_pool::testing::Fp8Weight, Vec<f64>) {
    use burn::tensor::{Int, Tensor, TensorData};
    use rope_pool_kernels::common::fp8::decode_host;
    let codes: Vec<u8> = (0..n * k)
        .map(|_| {
            let c = (rng.values(1)[0].abs() * 1e6) as u32 as u8;
            if c & 0x7F == 0x7F { c ^ 1 } else { c }
        })
        .collect();
    let blocks = k.div_ceil(block_k);
    let scales: Vec<f32> = rng
        .values(n * blocks)
        .into_iter()
        .map(|v| 2f32.powf((v.abs() * 8.0).min(8.0) as f32 - 14.0))
        .collect();
    let w: Vec<f64> = (0..n * k)
        .map(|i| {
            let (r, c) = (i / k, i % k);
            (decode_host(codes[i]) * scales[r * blocks + c / block_k]) as f64
        })
        .collect();
    let words: Vec<u32> = codes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let weight = burn_rope_pool::testing::Fp8Weight::new(
        Tensor::<2, Int>::from_data(TensorData::new(words, [n, k / 4]), (device, DType::U32)),
        Tensor::<2>::from_data(TensorData::new(scales, [n, blocks]), (device, DType::F32)),
        block_k,
    );
    (weight, w)
}

/// An fp8 weight made with `Fp8Weight::new` may hold NaN codes: a NaN code reaches its output
/// column as NaN through every fp8 product (plain, with the residual add, with the norm), where
/// loaded weights without NaN codes skip the check.
#[test]
fn fp8_nan_codes_give_nan() {
    use burn::tensor::{Int, Tensor, TensorData};
    use burn_rope_pool::testing::{Fp8Weight, norm_project_fp8, project_add_fp8, project_fp8};
    for (name, device) in crate::common::devices() {
        let (n, k) = (64usize, 128usize);
        // Column 1 holds 0x7F in its first word, column 2 0xFF in its last; codes 0x38 (1.0)
        // elsewhere.
        let mut words = vec![0x3838_3838u32; n * k / 4];
        words[k / 4] = 0x3838_387F;
        words[3 * k / 4 - 1] = 0xFF38_3838;
        let codes =
            Tensor::<2, Int>::from_data(TensorData::new(words, [n, k / 4]), (&device, DType::U32));
        let scales = Tensor::<2>::from_data(
            TensorData::new(vec![1.0f32; n], [n, 1]),
            (&device, DType::F32),
        );
        let weight = Fp8Weight::new(codes, scales, k);
        // Eight rows of f16: the staged tensor-core kernel's decoding, where it runs.
        // Two rows of f16: the matrix-vector kernel's decoding with f16 rows.
        for (m, dtype) in [
            (1usize, DType::F32),
            (3, DType::F32),
            (2, DType::F16),
            (8, DType::F16),
        ] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let x = || float_tensor(&vec![0.5; m * k], [m, k], &device, dtype);
            let norm_w = float_tensor(&vec![1.0; k], [k], &device, dtype);
            let residual = float_tensor(&vec![0.0; m * n], [m, n], &device, dtype);
            let outs = [
                ("plain", project_fp8(x(), &weight)),
                ("add", project_add_fp8(x(), &weight, residual)),
                ("norm", norm_project_fp8(x(), &norm_w, 1e-5, &weight, false)),
            ];
            for (path, out) in outs {
                let got: Vec<f32> = out.into_data().iter::<f32>().collect();
                for r in 0..m {
                    for c in 0..n {
                        let v = got[r * n + c];
                        assert_eq!(
                            v.is_nan(),
                            c == 1 || c == 2,
                            "{name} {path} {m} rows of {dtype:?}: ({r}, {c}) = {v}"
                        );
                    }
                }
            }
        }
    }
}

/// The projection on an fp8 weight (e4m3 codes with a scale per row and block: decoded while
/// staged by the staged tensor-core kernel where it takes the product, decoded in registers for
/// up to 16 rows where the device has the matrix-vector kernel, decoded into the run dtype and
/// multiplied past that, dequantized in tensor ops elsewhere) against float64 over the decoded
/// weight, for blocks of 4, 32, 96 and 128 elements and one per row, across the row limits, odd
/// output widths and the staged kernel's shapes (split inner sizes, blocks of 1 and 3 tiles, a
/// scale a word), and (through CUDA, where turned on) the warp-level tensor-core kernels' few
/// rows; the tensor-op dequantization equals the host's decoding exactly. Where the
/// staged kernel decodes, its output equals, bit for bit, the staged product of the weight
/// dequantized to the run dtype (the same values, multiplied in the same order).
#[test]
fn fp8_projections_match_float64() {
    use burn_rope_pool::testing::{
        fp8_tensor_cores_take, project, project_fp8, staged_takes, staged_takes_fp8,
    };
    let mut rng = burn_rope_pool::testing::Rng::new(80);
    for (name, device) in crate::common::devices() {
        let (mut staged, mut warp_level) = (0, 0);
        for (m, k, n, block_k) in [
            (1usize, 4096usize, 300usize, 128usize),
            (3, 8, 9, 4),
            (16, 132, 33, 32),
            (16, 1024, 9, 128),
            (5, 260, 17, 260),
            (8, 4100, 1, 128),
            (17, 64, 5, 32),
            (20, 32, 48, 32),
            (64, 256, 32, 128),
            // Few rows with one scale block a row, and 65 chunks of 64 elements.
            (2, 1024, 48, 1024),
            (4, 4160, 40, 128),
            (40, 68, 300, 4),
            (130, 96, 40, 96),
            (8, 256, 128, 128),
            (48, 1024, 64, 32),
            (5, 64, 192, 4),
            (64, 4112, 64, 128),
            (33, 96, 64, 96),
            // Through CUDA with `ROPE_POOL_FP8_MMA=1`, the warp-level tensor-core kernels (f16,
            // up to 8 rows, whole groups of 128 elements): 3 groups over 3 warps, blocks of two.
            (3, 384, 40, 128),
            (4, 1024, 24, 256),
        ] {
            let (weight, w) = random_fp8_weight(&mut rng, n, k, block_k, &device);
            let dense: Vec<f64> = weight
                .dequantize(DType::F32)
                .into_data()
                .iter::<f64>()
                .collect();
            assert_eq!(
                dense, w,
                "{name} dequantize [{n}, {k}] in blocks of {block_k}"
            );
            for dtype in [DType::F32, DType::F16] {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let round = |v: f64| crate::common::round_to(v, dtype);
                let x: Vec<f64> = rng.values(m * k).into_iter().map(round).collect();
                let x_t = float_tensor(&x, [m, k], &device, dtype);
                warp_level += fp8_tensor_cores_take(&x_t, &weight) as usize;
                let got: Vec<f64> = project_fp8(x_t.clone(), &weight)
                    .into_data()
                    .iter::<f64>()
                    .collect();
                // Every product the staged kernel takes on a float weight, it takes on fp8 codes
                // (GPUs load vectors of 4 or 8 of 2-byte elements).
                assert_eq!(
                    staged_takes_fp8(&x_t, [m, k, n]),
                    staged_takes(&x_t, [m, k, n]),
                    "{name} {dtype:?} [{m}, {k}]·fp8[{n}, {k}]ᵀ: staged on fp8 codes as on floats"
                );
                if staged_takes_fp8(&x_t, [m, k, n]) {
                    staged += 1;
                    let dequantized: Vec<f64> = project(x_t, &weight.dequantize(dtype))
                        .into_data()
                        .iter::<f64>()
                        .collect();
                    assert!(
                        got.iter()
                            .zip(&dequantized)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{name} {dtype:?} [{m}, {k}]·fp8[{n}, {k}]ᵀ (blocks of {block_k}): staged \
                         decoding differs from the staged product of the dequantized weight"
                    );
                }
                for r in 0..m {
                    for c in 0..n {
                        let dot: f64 = (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum();
                        let scale: f64 = (0..k).map(|i| (x[r * k + i] * w[c * k + i]).abs()).sum();
                        let want = round(dot);
                        // f16: the weight may be rounded to f16 before the product (from 5 rows
                        // where the staged kernel takes it, past 16 rows elsewhere).
                        let tol = if dtype == DType::F32 { 1e-5 } else { 2e-3 } * (1.0 + scale);
                        let a = got[r * n + c];
                        assert!(
                            (a - want).abs() <= tol,
                            "{name} {dtype:?} [{m}, {k}]·fp8[{n}, {k}]ᵀ (blocks of {block_k}) at ({r}, {c}): {a} vs {want}"
                        );
                    }
                }
            }
        }
        if staged == 0 {
            eprintln!(
                "{name}: the staged kernel took no fp8 product here (no f16 tensor-core tiles)"
            );
        }
        match warp_level {
            0 => eprintln!(
                "{name}: the warp-level fp8 kernels took no product here (CUDA, ROPE_POOL_FP8_MMA=1)"
            ),
            w => eprintln!("{name}: the warp-level fp8 kernels took {w} products"),
        }
    }
}

/// The greedy step's two-stage argmax equals a host argmax (first index on ties), with and
/// without padding of the last block.
#[test]
fn argmax_in_two_stages_is_the_first_maximum() {
    use burn::tensor::{Tensor, TensorData};
    use burn_rope_pool::testing::argmax_rows;
    let mut rng = burn_rope_pool::testing::Rng::new(79);
    for (name, device) in crate::common::devices() {
        for vocab in [1000usize, 1025, 4096, 128_256] {
            let rows = 3;
            let mut x: Vec<f32> = rng
                .values(rows * vocab)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            // Ties: row 1's maximum twice, in different blocks; row 2's in one block.
            x[vocab + 5] = 100.0;
            x[vocab + vocab - 1] = 100.0;
            x[2 * vocab + 700] = 50.0;
            x[2 * vocab + 701] = 50.0;
            let t = Tensor::<2>::from_data(TensorData::new(x.clone(), [rows, vocab]), &device);
            let got: Vec<i64> = argmax_rows(t)
                .into_data()
                .convert::<i64>()
                .iter::<i64>()
                .collect();
            for r in 0..rows {
                let row = &x[r * vocab..][..vocab];
                let best = row
                    .iter()
                    .enumerate()
                    .fold(0, |b, (i, v)| if *v > row[b] { i } else { b });
                assert_eq!(got[r], best as i64, "{name} vocab {vocab} row {r}");
            }
        }
    }
}

/// The decoder's kernels read nothing they should not: mismatched shapes panic with the shapes
/// (documented, as Burn's own ops), on every backend alike, and an empty inner size gives zeros.
#[test]
fn kernels_fall_back_on_shapes_they_do_not_take() {
    use burn::tensor::Tensor;
    use burn_rope_pool::testing::{project, rms_norm};
    for (name, device) in crate::common::devices() {
        let x = Tensor::<2>::ones([2, 0], &device);
        let w = Tensor::<2>::ones([3, 0], &device);
        let y: Vec<f32> = project(x, &w).into_data().iter::<f32>().collect();
        assert_eq!(y, vec![0.0; 6], "{name}");
        let mismatch = std::panic::catch_unwind(|| {
            let x = Tensor::<2>::ones([1, 64], &device);
            let _ = project(x, &Tensor::<2>::ones([8, 16], &device)).into_data();
        });
        assert!(
            mismatch.is_err(),
            "{name}: a [1, 64] · [8, 16]ᵀ product ran"
        );
        let mismatch = std::panic::catch_unwind(|| {
            let x = Tensor::<2>::ones([1, 64], &device);
            let _ = rms_norm(x, &Tensor::<1>::ones([16], &device), 1e-6).into_data();
        });
        assert!(
            mismatch.is_err(),
            "{name}: a 16-wide weight normalised 64-wide rows"
        );
    }
}

/// The shares' sum is rounded to f16 as a conversion rounds (to nearest, ties to even;
/// subnormals; past 65504 an infinity) before it is added, whatever the device's compiler does
/// with a conversion to f16 and back: a row of zeros plus shares `[v, 0]` is `v` rounded, for
/// values at every edge; a row of ones plus shares `[v, 0]` is `1 + f16(v)` rounded, not
/// `1 + v` rounded once, for values where the two differ.
#[test]
fn shares_round_to_f16_as_a_conversion_does() {
    use burn_rope_pool::testing::add_rms_norm_shares;
    use half::f16;
    let mut edges: Vec<f32> = vec![
        0.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        -(1.0 + 2f32.powi(-11)),
        65504.0,
        65519.99,
        65520.0,
        -70000.0,
        f32::INFINITY,
        2f32.powi(-14),
        2f32.powi(-14) - 2f32.powi(-25),
        2f32.powi(-14) - 2f32.powi(-26),
        2f32.powi(-24),
        2f32.powi(-25),
        3.0 * 2f32.powi(-25),
        2f32.powi(-25) + 2f32.powi(-40),
        2f32.powi(-26),
        1e-30,
        1e-40,
        -5.0 * 2f32.powi(-25),
        0.1,
        1234.567,
    ];
    let mut rng = burn_rope_pool::testing::Rng::new(84);
    edges.extend(
        rng.values(233)
            .into_iter()
            .enumerate()
            .map(|(i, v)| (v * 2f64.powi(i as i32 % 40 - 24)) as f32),
    );
    // Near half an ulp of 1 (2^-11), where rounding v first moves the sum across the tie.
    let ties: Vec<f32> = (1..=64)
        .flat_map(|k| [1.0, -1.0].map(|sign| sign * (2f32.powi(-11) + k as f32 * 2f32.powi(-24))))
        .collect();
    // `base + v` as the kernel must give it: v rounded to f16, added, the sum rounded.
    let want = |base: f64, v: f32| f16::from_f64(base + f16::from_f32(v).to_f64()).to_f32();
    assert!(
        ties.iter()
            .any(|&v| f16::from_f64(1.0 + v as f64).to_f32() != want(1.0, v)),
        "the tie values do not tell one rounding from two"
    );
    for (name, device) in crate::common::devices() {
        if !device.supports_dtype(DType::F16) {
            continue;
        }
        for (base, values) in [(0.0, &edges), (1.0, &ties)] {
            let hidden = values.len();
            let mut shares: Vec<f64> = values.iter().map(|&v| v as f64).collect();
            shares.extend(std::iter::repeat_n(0.0, hidden));
            let x = float_tensor(&vec![base; hidden], [1, hidden], &device, DType::F16);
            let y = float_tensor(&shares, [2, 1, hidden], &device, DType::F32);
            let w = float_tensor(&vec![1.0; hidden], [hidden], &device, DType::F16);
            let (sum, _) = add_rms_norm_shares(x, y, &w, 1e-5);
            let sum: Vec<f32> = sum.into_data().iter::<f32>().collect();
            for (&v, got) in values.iter().zip(sum) {
                let want = want(base, v);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{name}: {base} + {v:e} rounded to {got:e}, not {want:e}"
                );
            }
        }
    }
}

/// A decoder whose projections the staged kernel splits in shares (f16, hidden 256, MLP 512; 8
/// sequences: prefill of 48 rows, then decode steps of 8), generated through the production
/// kernels, where o, gate/up and down leave their shares for the next kernel, against the
/// oracle (Burn's tensor ops throughout): logits within the f16 runs' tolerance at every step
/// both fed the same tokens.
/// Where no device splits the o projection the test says so; with
/// `ROPE_POOL_EXPECT_TILES_PRODUCT` set (the GPU runs of `benches/`) it fails.
#[test]
fn decoders_with_staged_shares_match_the_oracle() {
    use burn_rope_pool::testing::{llama3_8b, project_shares, random_decoder};
    let mut config = llama3_8b();
    config.vocab_size = 512;
    config.hidden_size = 256;
    config.intermediate_size = 512;
    config.num_layers = 2;
    config.rope = burn_rope_pool::RopePoolConfig::new(64, 4, 2).with_rope_base(500_000.0);
    let requests: Vec<Request> = (0..8u32)
        .map(|i| Request {
            prompt: (0..6).map(|t| (i * 37 + t * 11) % 512).collect(),
            max_new_tokens: 4,
        })
        .collect();
    let mut split = 0;
    for (name, device) in crate::common::devices() {
        let dtype = DType::F16;
        if !device.supports_dtype(dtype) {
            continue;
        }
        let x = float_tensor(&vec![0.5; 8 * 256], [8, 256], &device, dtype);
        let w = float_tensor(&vec![0.5; 256 * 256], [256, 256], &device, dtype);
        split += project_shares(&x, &w).is_some() as usize;
        let model = random_decoder(config.clone(), &device, dtype).unwrap();
        let got = run_through(&model, &requests, None, true);
        let want = run_through(&model, &requests, None, false);
        // Each request's steps while both paths fed it the same tokens: the random weights'
        // logits lie close, and f16 rounding may pick another id, after which the inputs differ.
        let mut decode_steps = 0;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.logits.len(), w.logits.len(), "{name}: request {i} steps");
            for (step, (a, b)) in g.logits.iter().zip(&w.logits).enumerate() {
                let a: Vec<f64> = a.iter().map(|&x| x as f64).collect();
                let b: Vec<f64> = b.iter().map(|&x| x as f64).collect();
                let err = norm_relative_error(&a, &b);
                assert!(
                    err <= 2e-2,
                    "{name}: request {i} step {step}: logits norm-rel {err:e}"
                );
                decode_steps += (step > 0) as usize;
                if g.generated[step] != w.generated[step] {
                    break;
                }
            }
        }
        assert!(
            decode_steps > 0,
            "{name}: every request left the oracle's ids at its prefill"
        );
    }
    shares_ran(
        "decoders_with_staged_shares_match_the_oracle",
        split,
        "split the o projection",
    );
}

/// The end of a test of the staged kernel's shares, which ran `ran` times here: none fails the
/// test with `ROPE_POOL_EXPECT_TILES_PRODUCT` set (the GPU runs of `benches/`, on devices that
/// take them), else is said on stderr.
fn shares_ran(test: &str, ran: usize, what: &str) {
    let expect = std::env::var_os("ROPE_POOL_EXPECT_TILES_PRODUCT").is_some();
    assert!(
        ran > 0 || !expect,
        "ROPE_POOL_EXPECT_TILES_PRODUCT: no device here {what} in shares"
    );
    eprintln!("{test}: {ran} cases {what} in shares");
}

/// The staged kernel's shares left for the next kernel (`project_shares`, `project_fp8_shares`:
/// where a GPU device splits an f16 product in 2 or more shares), on a float weight and on an
/// fp8 one: their sum against float64, and the norm and the activation that add them equal, bit
/// for bit, the same kernels on `project`'s (`project_fp8`'s) output (the staged launch summing
/// its shares itself). Where no device splits these products the test
/// says so; with `ROPE_POOL_EXPECT_TILES_PRODUCT` set (the GPU runs of `benches/`) it fails.
#[test]
fn staged_shares_match_float64() {
    use burn_rope_pool::testing::{
        add_rms_norm, add_rms_norm_shares, project, project_fp8, project_fp8_shares,
        project_shares, silu_mul, silu_mul_shares,
    };
    let mut rng = burn_rope_pool::testing::Rng::new(83);
    let (mut ran, mut ran_fp8) = (0, 0);
    for (name, device) in crate::common::devices() {
        let dtype = DType::F16;
        if !device.supports_dtype(dtype) {
            continue;
        }
        for (m, k, n) in [
            (8usize, 1024usize, 256usize),
            (12, 512, 192),
            (40, 1024, 128),
        ] {
            let round = |v: f64| crate::common::round_to(v, dtype);
            let x: Vec<f64> = rng.values(m * k).into_iter().map(round).collect();
            let w: Vec<f64> = rng.values(n * k).into_iter().map(round).collect();
            let (fp8, w8) = random_fp8_weight(&mut rng, n, k, 128, &device);
            let r: Vec<f64> = rng.values(m * n).into_iter().map(round).collect();
            let norm_w: Vec<f64> = rng.values(n).into_iter().map(round).collect();
            let [xt, wt, rt] = [(&x, [m, k]), (&w, [n, k]), (&r, [m, n])]
                .map(|(v, dims)| float_tensor(v, dims, &device, dtype));
            let nt = float_tensor(&norm_w, [n], &device, dtype);
            // The float weight, then the fp8 one (its values decoded to f16 as the kernel
            // stages them).
            let runs = [
                (
                    "f16",
                    project_shares(&xt, &wt),
                    project(xt.clone(), &wt),
                    w.clone(),
                ),
                (
                    "fp8",
                    project_fp8_shares(&xt, &fp8),
                    project_fp8(xt.clone(), &fp8),
                    w8.iter().map(|&v| round(v)).collect(),
                ),
            ];
            for (weight, shares, plain, w) in runs {
                let Some(shares) = shares else {
                    continue;
                };
                ran += 1;
                ran_fp8 += (weight == "fp8") as usize;
                let what = format!("{name} {weight} [{m}, {k}, {n}]");
                let [s, _, _] = shares.dims();
                let got: Vec<f64> = shares.clone().into_data().iter::<f64>().collect();
                let summed: Vec<f64> = (0..m * n)
                    .map(|at| (0..s).map(|p| got[p * m * n + at]).sum())
                    .collect();
                let want: Vec<f64> = (0..m * n)
                    .map(|at| {
                        let (i, j) = (at / n, at % n);
                        (0..k).map(|e| x[i * k + e] * w[j * k + e]).sum()
                    })
                    .collect();
                let err = norm_relative_error(&summed, &want);
                assert!(err <= 1e-5, "{what}, {s} shares: {err:.3e}");
                let bits = |t: burn::tensor::Tensor<2>| {
                    t.into_data()
                        .iter::<f32>()
                        .map(f32::to_bits)
                        .collect::<Vec<_>>()
                };
                let (sum_a, out_a) = add_rms_norm(rt.clone(), plain.clone(), &nt, 1e-5);
                let (sum_b, out_b) = add_rms_norm_shares(rt.clone(), shares.clone(), &nt, 1e-5);
                assert_eq!(bits(sum_a), bits(sum_b), "{what}: the sums");
                assert_eq!(bits(out_a), bits(out_b), "{what}: the norms");
                assert_eq!(
                    bits(silu_mul(plain)),
                    bits(silu_mul_shares(shares, dtype)),
                    "{what}: the activations"
                );
            }
        }
    }
    let test = "staged_shares_match_float64";
    shares_ran(test, ran, "split a product");
    shares_ran(test, ran_fp8, "split a product on fp8 codes");
}

/// The MLP activation `cast(silu(gate)) * up` (one kernel on CubeCL devices, tensor ops on
/// Flex) against float64 with transformers' rounding, odd widths included; and the same of a
/// staged gate/up product's f32 shares (`[shares, rows, 2m]`, summed in the activation's launch,
/// each sum rounded once to the dtype first; multiples of 2^-10, exact in any order).
#[test]
fn silu_mul_matches_float64() {
    use burn_rope_pool::testing::{silu_mul, silu_mul_shares};
    let mut rng = burn_rope_pool::testing::Rng::new(80);
    for (name, device) in crate::common::devices() {
        // (shares, rows, m); no shares: a plain `[rows, 2m]` of the dtype.
        for (shares, rows, m) in [
            (0usize, 1usize, 14336usize),
            (0, 3, 7),
            (0, 17, 96),
            (0, 64, 130),
            (2, 1, 14336),
            (4, 3, 7),
            (8, 17, 96),
        ] {
            for dtype in [DType::F32, DType::F16] {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let round = |v: f64| crate::common::round_to(v, dtype);
                let len = rows * 2 * m;
                // The gate and up values the kernel must see, and its output.
                let (x, out): (Vec<f64>, _) = match shares {
                    0 => {
                        let x: Vec<f64> = rng
                            .values(len)
                            .into_iter()
                            .map(|v| round(4.0 * v))
                            .collect();
                        let t = float_tensor(&x, [rows, 2 * m], &device, dtype);
                        (x, silu_mul(t))
                    }
                    _ => {
                        let y: Vec<f64> = rng
                            .values(shares * len)
                            .into_iter()
                            .map(|v| (v * 4096.0).round() / 1024.0)
                            .collect();
                        let t = float_tensor(&y, [shares, rows, 2 * m], &device, DType::F32);
                        let summed = (0..len)
                            .map(|at| round((0..shares).map(|p| y[p * len + at]).sum()))
                            .collect();
                        (summed, silu_mul_shares(t, dtype))
                    }
                };
                assert_eq!(out.dtype(), dtype, "{name}");
                let got: Vec<f64> = out.into_data().iter::<f64>().collect();
                assert_eq!(got.len(), rows * m, "{name}");
                for r in 0..rows {
                    for c in 0..m {
                        let (g, u) = (x[r * 2 * m + c], x[r * 2 * m + m + c]);
                        let want = round(round(g / (1.0 + (-g).exp())) * u);
                        let a = got[r * m + c];
                        let tol =
                            if dtype == DType::F32 { 1e-5 } else { 2e-3 } * (1.0 + want.abs());
                        assert!(
                            (a - want).abs() <= tol,
                            "{name} {dtype:?} {shares} shares [{rows}, {m}] at ({r}, {c}): {a} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
