//! Tensor parallelism on one machine: a decoder split over N ranks (here shards on one device,
//! summed in process) gives the logits and ids of the whole decoder at every step — the shipped
//! checkpoints at the rank counts their kv heads allow, a random model of 8 kv heads at 1, 2, 4
//! and 8 — and splits that cannot be made are refused.

use crate::common::devices;
use burn::tensor::{DType, Device};
use burn_rope_pool::model::{
    Checkpoint, Decoder, DecoderConfig, InProcess, ShardedDecoder, StepToken,
};
use burn_rope_pool::testing::{norm_relative_error, random_decoder};

fn load(name: &str, device: &Device) -> Decoder {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/models")
        .join(name);
    Decoder::load(&Checkpoint::open(dir).unwrap(), device, DType::F32).unwrap()
}

/// Two sequences prefilled together (prompts of 5 and 3 tokens), then `steps` greedy decode
/// steps of both, through the whole decoder and the sharded one side by side: each step's
/// logits within `tol` norm-relative, and the same argmax ids.
fn same_steps(whole: &Decoder, sharded: &ShardedDecoder, steps: usize, tol: f64, what: &str) {
    let vocab = whole.config.vocab_size as u32;
    let mut cache = whole.new_cache(64).unwrap();
    let mut shards = sharded.new_cache(64).unwrap();
    let prompts: [Vec<u32>; 2] = [vec![1, 7, 42, 9, 3], vec![5, 11, 2]];
    let mut tokens: Vec<StepToken> = Vec::new();
    for (seq, prompt) in prompts.iter().enumerate() {
        for (position, &token) in prompt.iter().enumerate() {
            tokens.push(StepToken {
                seq: seq as u64,
                position,
                token: token % vocab,
            });
        }
    }
    let mut next = [prompts[0].len(), prompts[1].len()];
    for step in 0..=steps {
        let want = whole.step(&tokens, &mut cache).unwrap();
        let got = sharded.step(&tokens, &mut shards).unwrap();
        assert_eq!(got.dims(), want.dims(), "{what} step {step}");
        let (g, w): (Vec<f64>, Vec<f64>) = (
            got.into_data().iter::<f64>().collect(),
            want.into_data().iter::<f64>().collect(),
        );
        let error = norm_relative_error(&g, &w);
        assert!(error <= tol, "{what} step {step}: logits {error:e} apart");
        let width = whole.config.vocab_size;
        let argmax = |v: &[f64]| {
            v.iter()
                .enumerate()
                .fold(0, |b, (i, x)| if *x > v[b] { i } else { b })
        };
        tokens = (0..2)
            .map(|seq| {
                let id = argmax(&w[seq * width..][..width]);
                assert_eq!(
                    argmax(&g[seq * width..][..width]),
                    id,
                    "{what} step {step} sequence {seq}: ids differ"
                );
                let token = StepToken {
                    seq: seq as u64,
                    position: next[seq],
                    token: id as u32,
                };
                next[seq] += 1;
                token
            })
            .collect();
    }
    assert_eq!(shards.available(), cache.available(), "{what}: rows");
    for seq in 0..2 {
        assert_eq!(
            shards.release(seq).unwrap(),
            cache.release(seq).unwrap(),
            "{what}"
        );
    }
}

/// `generate` drives every rank of a sharded checkpoint: transformers' ids and logits.
#[test]
fn sharded_checkpoints_generate_what_transformers_generates() {
    use burn_rope_pool::model::{GenerateOptions, generate};
    for (device_name, device) in devices() {
        let whole = load("llama31_tiny", &device);
        let sharded = ShardedDecoder::new(
            &whole,
            &[device.clone(), device.clone()],
            Box::new(InProcess),
        )
        .unwrap();
        let (requests, want) = crate::generate::expected("llama31_tiny");
        let options = GenerateOptions {
            keep_logits: true,
            ..Default::default()
        };
        let (got, _) = generate(&sharded, &requests, &options, |_| {}).unwrap();
        crate::generate::assert_same(&got, &want, 1e-4, &format!("2 ranks on {device_name}"));
    }
}

#[test]
fn sharded_checkpoints_step_as_the_whole_decoder() {
    // Llama (untied head), Qwen2 (q/k/v biases, tied), Qwen3 (q/k norms), an fp8 checkpoint
    // (on the GPU its shards keep q/k/v, gate/up, the LM head and down fp8; o's split, 48 of
    // 96 inputs, is not on its blocks of 32 and is dequantized).
    for name in [
        "llama31_tiny",
        "qwen2_tiny",
        "qwen3_tiny",
        "llama31_tiny_fp8",
    ] {
        for (device_name, device) in devices() {
            let whole = load(name, &device);
            for ranks in [1usize, 2] {
                let sharded =
                    ShardedDecoder::new(&whole, &vec![device.clone(); ranks], Box::new(InProcess))
                        .unwrap();
                let what = format!("{name} on {device_name}, {ranks} ranks");
                same_steps(&whole, &sharded, 6, 1e-5, &what);
                if name == "llama31_tiny_fp8" {
                    use burn_rope_pool::testing::fp8_projections;
                    let layers = whole.config.num_layers;
                    // fp8 on the GPU device (q/k/v, o, gate/up, down), floats on Flex.
                    let (all, split) = match fp8_projections(&whole) {
                        0 => (0, 0),
                        _ => (4 * layers, if ranks == 1 { 4 } else { 3 } * layers),
                    };
                    assert_eq!(fp8_projections(&whole), all, "{what}");
                    for rank in sharded.ranks() {
                        assert_eq!(fp8_projections(rank), split, "{what}");
                    }
                }
            }
        }
    }
}

/// A decoder loaded into host memory (Flex) splits onto the GPU: the way a model larger than one
/// GPU is loaded.
#[test]
fn a_decoder_on_the_host_shards_onto_the_gpu() {
    let Some((gpu_name, gpu)) = devices().into_iter().nth(1) else {
        return; // no GPU here: `devices()` has already failed or counted the skip
    };
    let host = load("llama31_tiny", &Device::flex());
    let whole = load("llama31_tiny", &gpu);
    let sharded = ShardedDecoder::new(&host, &[gpu.clone(), gpu], Box::new(InProcess)).unwrap();
    same_steps(
        &whole,
        &sharded,
        4,
        1e-5,
        &format!("flex → 2 ranks on {gpu_name}"),
    );
}

/// A small Llama-shaped config of 8 kv heads (16 q heads), for 1 to 8 ranks.
fn eight_kv_heads() -> DecoderConfig {
    let mut config = burn_rope_pool::testing::llama3_8b();
    config.num_layers = 2;
    config.hidden_size = 128;
    config.intermediate_size = 256;
    config.vocab_size = 203;
    config.rope.num_qo_heads = 16;
    config.rope.num_kv_heads = 8;
    config.rope.head_dim = 8;
    config
}

#[test]
fn a_model_of_eight_kv_heads_steps_alike_on_one_to_eight_ranks() {
    for (device_name, device) in devices() {
        // A vocabulary of 10 over 8 ranks: one or two LM-head rows a rank.
        for vocab in [203usize, 10] {
            let config = DecoderConfig {
                vocab_size: vocab,
                ..eight_kv_heads()
            };
            let whole = random_decoder(config, &device, DType::F32).unwrap();
            for ranks in [1usize, 2, 4, 8] {
                let devices = vec![device.clone(); ranks];
                let sharded = ShardedDecoder::new(&whole, &devices, Box::new(InProcess)).unwrap();
                let what = format!("8 kv heads, vocabulary {vocab}, {device_name}, {ranks} ranks");
                same_steps(&whole, &sharded, 4, 1e-5, &what);
                assert_eq!(sharded.ranks().len(), ranks);
                assert_eq!(sharded.ranks()[0].config.rope.num_kv_heads, 8 / ranks);
            }
        }
    }
}

/// A refused step keeps no row in any rank's pool; a cache of another rank count is refused.
#[test]
fn refused_sharded_steps_keep_no_rows() {
    let flex = Device::flex();
    let whole = load("llama31_tiny", &flex);
    let two = [flex.clone(), flex.clone()];
    let sharded = ShardedDecoder::new(&whole, &two, Box::new(InProcess)).unwrap();
    let mut cache = sharded.new_cache(16).unwrap();
    let token = |seq, position, token| StepToken {
        seq,
        position,
        token,
    };
    sharded
        .step(&[token(0, 0, 5), token(0, 1, 6)], &mut cache)
        .unwrap();
    let rows = |cache: &burn_rope_pool::model::ShardedCache| {
        (0..2)
            .map(|r| cache.rank(r).unwrap().available())
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&cache), [14, 14]);
    let cases: [(Vec<StepToken>, &str); 3] = [
        (
            vec![token(1, 0, 5), token(1, 1, 320)],
            "an id past the vocabulary",
        ),
        (
            vec![token(1, 0, 5), token(0, 5, 6)],
            "a position out of order",
        ),
        (
            (0..15).map(|p| token(2, p, 1)).collect(),
            "more rows than are free",
        ),
    ];
    for (tokens, why) in cases {
        assert!(sharded.step(&tokens, &mut cache).is_err(), "{why}");
        assert_eq!(rows(&cache), [14, 14], "{why}");
    }
    let one =
        ShardedDecoder::new(&whole, std::slice::from_ref(&flex), Box::new(InProcess)).unwrap();
    let mut other = one.new_cache(16).unwrap();
    let error = sharded.step(&[token(0, 0, 5)], &mut other).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the pool does not fit this decoder: 1 pools for 2 ranks"
    );
    assert_eq!(cache.release(0).unwrap(), 2);
    assert_eq!(rows(&cache), [16, 16]);
}

/// Shards drawn at random on their devices directly (the benchmarks' models past one device):
/// the whole vocabulary's logits, gathered from the ranks' LM head rows, tied or not.
#[test]
fn random_shards_built_directly_give_the_whole_vocabulary() {
    use burn_rope_pool::testing::random_sharded_decoder;
    let flex = Device::flex();
    for tied in [false, true] {
        let mut config = eight_kv_heads();
        config.tie_word_embeddings = tied;
        for ranks in [1usize, 2, 4, 8] {
            let sharded = random_sharded_decoder(
                config.clone(),
                &vec![flex.clone(); ranks],
                DType::F32,
                Box::new(InProcess),
            )
            .unwrap();
            let mut cache = sharded.new_cache(8).unwrap();
            let tokens: Vec<StepToken> = (0..3)
                .map(|position| StepToken {
                    seq: 0,
                    position,
                    token: 202 - position as u32,
                })
                .collect();
            let logits = sharded.step(&tokens, &mut cache).unwrap();
            assert_eq!(logits.dims(), [1, 203], "{ranks} ranks, tied {tied}");
            let values: Vec<f32> = logits.into_data().iter::<f32>().collect();
            assert!(
                values.iter().all(|v| v.is_finite()),
                "{ranks} ranks, tied {tied}"
            );
        }
    }
    let refused = random_sharded_decoder(
        eight_kv_heads(),
        &vec![flex; 3],
        DType::F32,
        Box::new(InProcess),
    );
    assert!(refused.is_err());
}

#[test]
fn splits_that_cannot_be_made_are_refused() {
    let flex = Device::flex();
    let whole = load("llama31_tiny", &flex);
    let error = |devices: &[Device], model: &Decoder| {
        ShardedDecoder::new(model, devices, Box::new(InProcess))
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(
        error(&[], &whole).as_deref(),
        Some("tensor parallelism: no devices")
    );
    // 2 kv heads: 3 and 4 ranks do not divide them.
    for ranks in [3usize, 4] {
        assert_eq!(
            error(&vec![flex.clone(); ranks], &whole).as_deref(),
            Some(
                format!(
                    "tensor parallelism: {ranks} ranks do not divide 2 kv heads and an MLP of 192 (or outnumber a vocabulary of 320)"
                )
                .as_str()
            )
        );
    }
    if let Some((_, gpu)) = devices().into_iter().nth(1) {
        let message = error(&[flex.clone(), gpu], &whole).unwrap();
        assert!(
            message.starts_with("tensor parallelism: devices of different kinds"),
            "{message}"
        );
    }
    // Shards past the machine's memory: a config of 2^40 layers (refused before any weight
    // moves).
    let mut huge = load("llama31_tiny", &flex);
    huge.config.num_layers = 1 << 40;
    let message = error(&[flex.clone(), flex.clone()], &huge).unwrap();
    assert!(
        message.starts_with("tensor parallelism: shards of "),
        "{message}"
    );
    // Burn's all-reduce is CUDA's.
    let message = burn_rope_pool::model::BurnAllReduce::new(vec![flex])
        .err()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("tensor parallelism: Burn's all-reduce runs on CUDA devices"),
        "{message}"
    );
}
