//! `pool_attention` on every device against its float64 reference: the golden cases (f32 within
//! 1e-5 on `out` and `lse`, invalid ones with their exact message), random ragged batches (empty
//! sequences, shared and unsorted rows, indices outside the pool, windows, caps, every head_dim
//! of the contract, f32 and f16), outputs over poisoned memory, and every documented error.

use crate::common::{Rng, devices, float_tensor, round_to, words_tensor};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::pool::{
    Fp8Decode, PoolAttentionConfig, PoolAttentionError, PoolAttentionInputs, PoolAttentionOutputs,
    PoolAttentionPlan, pool_attention,
};
use burn_rope_pool::testing::attention_reference::{BatchIndices, pool_attention_reference};
use burn_rope_pool::testing::reference::{e4m3_code, e4m3_value};
use burn_rope_pool::testing::{AttentionCase, attention_error};

fn golden_cases() -> Vec<(String, AttentionCase)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/attention");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/golden/attention")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "attention golden cases missing");
    files
        .into_iter()
        .map(|p| {
            assert!(AttentionCase::is_attention(&p).unwrap());
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, AttentionCase::load(&p).unwrap())
        })
        .collect()
}

#[test]
fn golden_cases_on_every_device() {
    for (device_name, device) in devices() {
        for (name, case) in golden_cases() {
            let result = case.run(&device, None);
            match (&case.expect_error, result) {
                (Some(message), Err(e)) => assert_eq!(&e.to_string(), message, "{name}"),
                (Some(message), Ok(_)) => {
                    panic!("{name} on {device_name}: ran, expected `{message}`")
                }
                (None, Err(e)) => panic!("{name} on {device_name}: {e}"),
                (None, Ok(actual)) => {
                    let expected = case.expected.as_ref().unwrap();
                    assert_eq!(actual.out.len(), expected.out.len(), "{name}");
                    assert_eq!(actual.lse.len(), expected.lse.len(), "{name}");
                    let err = attention_error(&actual, expected);
                    assert!(err <= 1e-5, "{name} on {device_name}: off by {err:e}");
                    // The reference agrees with the file too (it is the oracle of the random
                    // cases below).
                    let err = attention_error(&case.reference(), expected);
                    assert!(err <= 1e-9, "{name}: the reference is off by {err:e}");
                }
            }
        }
    }
}

/// A random batch: sequences with `n` queries and `L >= n` keys (some empty), rows drawn from
/// the pool with repeats (shared prefixes) and in any order, a few outside the pool.
struct Batch {
    qo_indptr: Vec<i64>,
    kv_indptr: Vec<i64>,
    kv_indices: Vec<i64>,
    num_tokens: usize,
}

fn random_batch(rng: &mut Rng, pool: usize, max_len: u64, causal: bool) -> Batch {
    let batch = 1 + rng.below(4) as usize;
    let (mut qo, mut kv, mut indices) = (vec![0i64], vec![0i64], Vec::new());
    for _ in 0..batch {
        let len = rng.below(max_len + 1) as i64;
        let n = match rng.below(3) {
            0 => len.min(1),                       // decode
            1 => len,                              // prefill
            _ => rng.below(len as u64 + 1) as i64, // extend
        };
        let n = if causal { n } else { rng.below(4) as i64 };
        for _ in 0..len {
            let row = match rng.below(20) {
                0 => pool as i64 + rng.below(3) as i64, // outside: masked
                1 => -1,
                _ => rng.below(pool as u64) as i64,
            };
            indices.push(row);
        }
        qo.push(qo.last().unwrap() + n);
        kv.push(kv.last().unwrap() + len);
    }
    Batch {
        num_tokens: *qo.last().unwrap() as usize,
        qo_indptr: qo,
        kv_indptr: kv,
        kv_indices: indices,
    }
}

/// Which CubeCL attention kernel a test runs (Flex has one path for all three).
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// The normal launch.
    Normal,
    /// `PoolAttentionConfig::portable_kernel`.
    Portable,
    /// `PoolAttentionConfig::query_tiles`: the query-tile kernel for every call it takes.
    QueryTiles,
    /// `PoolAttentionConfig::head_tiles = Some(false)`: the plane kernel where the normal launch
    /// takes the head-tile kernel (f16 decode through CUDA).
    Plane,
}

impl Kernel {
    fn config(self, config: PoolAttentionConfig) -> PoolAttentionConfig {
        match self {
            Kernel::Normal => config,
            Kernel::Portable => config.with_portable_kernel(true),
            Kernel::QueryTiles => config.with_query_tiles(Some(true)),
            Kernel::Plane => config.with_head_tiles(Some(false)),
        }
    }

    /// The kernels a test of each fp8 decode runs: the normal launch, the portable and
    /// query-tile kernels, and through CUDA the plane kernel too (the head-tile kernel, the
    /// normal launch of f16 decode there, always decodes to f16 halves).
    fn decoding_fp8() -> Vec<Kernel> {
        let mut kernels = vec![Kernel::Normal, Kernel::Portable, Kernel::QueryTiles];
        if cfg!(feature = "cuda") {
            kernels.push(Kernel::Plane);
        }
        kernels
    }
}

#[test]
fn random_batches_match_the_reference() {
    random_batches(Kernel::Normal);
    fp8_pools(Kernel::Normal, None);
    // Through CUDA the normal launch of f16 decode is the head-tile kernel: the plane kernel too.
    if cfg!(feature = "cuda") {
        random_batches(Kernel::Plane);
        fp8_pools(Kernel::Plane, None);
    }
}

/// Steps that mix decoding sequences with prompts and prefill chunks over a cached prefix (f16
/// calls on CubeCL devices are split into a launch a run of short or long sequences; through
/// CUDA the long runs of cases 0 and 2 take the query tiles): runs in any order, windows and
/// none, f32 and f16, against the reference, every row written over poisoned memory.
#[test]
fn steps_mixing_decode_rows_with_prompts_match_the_reference() {
    let mut rng = Rng::new(0x3a1e_d5e9);
    // (queries, keys) of each sequence: decode rows, whole prompts and chunks after a prefix.
    let layouts: [&[(i64, i64)]; 3] = [
        &[(1, 40), (1, 300), (1, 9), (150, 150), (130, 330)],
        &[(200, 200), (1, 77), (0, 12), (1, 500), (17, 17), (1, 3)],
        &[(1, 64), (520, 520), (2, 90), (1, 33), (200, 456), (1, 1)],
    ];
    for (device_name, device) in devices() {
        for (case, layout) in layouts.iter().enumerate() {
            let dtype = if case == 1 { DType::F32 } else { DType::F16 };
            if !device.supports_dtype(dtype) {
                println!("mixed step {case}: {device_name} has no {dtype:?}; not run there");
                continue;
            }
            let (hq, hkv, d) = if case == 2 { (16, 4, 64) } else { (32, 8, 128) };
            let mut config = PoolAttentionConfig::new(hq, hkv, d);
            if case == 1 {
                config.sliding_window = Some(100);
            }
            let pool = 600;
            let (mut qo, mut kv, mut indices) = (vec![0i64], vec![0i64], Vec::new());
            for &(n, len) in *layout {
                indices.extend((0..len).map(|_| rng.below(pool as u64) as i64));
                qo.push(qo.last().unwrap() + n);
                kv.push(kv.last().unwrap() + len);
            }
            let batch = Batch {
                num_tokens: *qo.last().unwrap() as usize,
                qo_indptr: qo,
                kv_indptr: kv,
                kv_indices: indices,
            };
            let what = format!("{device_name} mixed step {case} ({dtype:?}, {config:?})");
            let tolerance = if dtype == DType::F16 { 1e-2 } else { 1e-4 };
            check_float_batch(
                &device, &batch, &config, dtype, pool, &mut rng, tolerance, &what,
            );
        }
    }
}

/// fp8 pools decoded through CubeCL's fp8 type (the device's conversion where it has one,
/// CubeCL's software codec elsewhere), f16 halves (where the device takes them) and integer
/// arithmetic, each forced (`PoolAttentionConfig::fp8_decode`), through every kernel, against
/// the reference.
#[test]
fn fp8_pools_decode_alike_through_either_codec() {
    for kernel in Kernel::decoding_fp8() {
        fp8_pools(kernel, Some(Fp8Decode::Native));
        fp8_pools(kernel, Some(Fp8Decode::Halves));
    }
    fp8_pools(Kernel::Normal, Some(Fp8Decode::Integer));
}

/// Every e4m3 code, read through each decode and each kernel: one query over one key whose value
/// rows hold codes 0 to 255 (scale 1), so the output is the value rows themselves — each code's
/// exact value (NaN for the NaN codes; ±0 alike): f32 queries over one head of 256, and f16
/// queries (where the device has f16) over two heads of 128, the shape the query tiles' flash
/// form takes through CUDA (every e4m3 value is exact in f16). Where a device does not take a
/// decode (`Fp8Decode`'s rules), the launch falls back to integers and the case checks those.
#[test]
fn every_fp8_code_decodes_exactly() {
    for (device_name, device) in devices() {
        let plan = PoolAttentionPlan::new(
            TensorData::from([0i32, 1].as_slice()),
            TensorData::from([0i32, 1].as_slice()),
            TensorData::from([0i32].as_slice()),
            &device,
        );
        let codes: Vec<u32> = (0..64)
            .map(|w| (0..4).map(|i| ((4 * w + i) as u32) << (8 * i)).sum())
            .collect();
        for (dtype, heads, d) in [(DType::F32, 1usize, 256usize), (DType::F16, 2, 128)] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let words = |w: Vec<u32>| fp8_pool(&w, [1, heads, d], 1.0, &device);
            for decode in [Fp8Decode::Integer, Fp8Decode::Halves, Fp8Decode::Native] {
                for kernel in Kernel::decoding_fp8() {
                    let config = kernel.config(
                        PoolAttentionConfig::new(heads, heads, d).with_fp8_decode(Some(decode)),
                    );
                    let inputs = PoolAttentionInputs::new(
                        float_tensor(&vec![0.0; heads * d], [1, heads, d], &device, dtype),
                        words(vec![0; 64]),
                        words(codes.clone()),
                    );
                    let what = format!("{device_name} {dtype:?} {decode:?} {config:?}");
                    let out = pool_attention(inputs, &plan, &config)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let got: Vec<f32> = out.out.into_data().iter::<f32>().collect();
                    assert_eq!(got.len(), 256, "{what}");
                    for (code, got) in got.iter().enumerate() {
                        let want = e4m3_value(code as u8) as f32;
                        assert!(
                            got == &want || (got.is_nan() && want.is_nan()),
                            "{what}: code {code:#04x} read {got:e}, want {want:e}"
                        );
                    }
                }
            }
        }
    }
}

/// The portable attention kernel, which a GPU with plane operations never picks by itself,
/// forced on every device (`PoolAttentionConfig::portable_kernel`; on Flex the normal path):
/// the random batches above, then fp8 pools, against the reference.
#[test]
fn the_portable_kernel_matches_the_reference_on_every_device() {
    random_batches(Kernel::Portable);
    fp8_pools(Kernel::Portable, None);
}

/// The query-tile kernel, which runs by itself only for f16 prefill on devices with tensor-core
/// tiles, forced for every call on every device (`PoolAttentionConfig::query_tiles`; its tile
/// products on tensor cores for f16 where the device has them, by the units elsewhere; on Flex
/// the normal path): decode rows, prefill rows, tiles that straddle sequences, against the
/// reference.
#[test]
fn the_query_tile_kernel_matches_the_reference_on_every_device() {
    random_batches(Kernel::QueryTiles);
    fp8_pools(Kernel::QueryTiles, None);
}

/// Scores that climb along the keys — slowly, about the query-tile kernel's rescale margin per
/// tile, and by more than it every key — so the running maximum moves in many tiles and the
/// running output is rescaled (through shared memory on tensor cores), causal prompts of 200
/// tokens, f32 and f16, through the normal launch and the query-tile kernel, against the
/// reference.
#[test]
fn climbing_scores_rescale_the_running_output() {
    let (tokens, heads, d) = (200usize, 2usize, 64usize);
    let mut rng = Rng::new(7);
    for (device_name, device) in devices() {
        for dtype in [DType::F32, DType::F16] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            for climb in [0.02, 0.3, 12.0] {
                let round = |x: f64| round_to(x, dtype);
                // q ≈ 1 and key j ≈ climb · j / (d · sm_scale): score j ≈ climb · j.
                let sm_scale = 1.0 / (d as f64).sqrt();
                let q: Vec<f64> = (0..tokens * heads * d)
                    .map(|_| round(1.0 + 0.05 * rng.value()))
                    .collect();
                let k_pool: Vec<f64> = (0..tokens * d)
                    .map(|i| round((climb * (i / d) as f64 + rng.value()) / (d as f64 * sm_scale)))
                    .collect();
                let v_pool: Vec<f64> = (0..tokens * d).map(|_| round(rng.value())).collect();
                let indptr = [0i64, tokens as i64];
                let kv_indices: Vec<i64> = (0..tokens as i64).collect();
                let plan = PoolAttentionPlan::new(
                    TensorData::from(indptr.as_slice()),
                    TensorData::from(indptr.as_slice()),
                    TensorData::from(kv_indices.as_slice()),
                    &device,
                );
                for kernel in [Kernel::Normal, Kernel::QueryTiles] {
                    let config = kernel.config(PoolAttentionConfig::new(heads, 1, d));
                    let inputs = PoolAttentionInputs::new(
                        float_tensor(&q, [tokens, heads, d], &device, dtype),
                        float_tensor(&k_pool, [tokens, 1, d], &device, dtype),
                        float_tensor(&v_pool, [tokens, 1, d], &device, dtype),
                    );
                    let what = format!("{device_name} {dtype:?} climb {climb} {kernel:?}");
                    let out = pool_attention(inputs, &plan, &config)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let expected = pool_attention_reference(
                        &config,
                        &q,
                        [&k_pool, &v_pool],
                        BatchIndices {
                            qo_indptr: &indptr,
                            kv_indptr: &indptr,
                            kv_indices: &kv_indices,
                        },
                    );
                    let tolerance = if dtype == DType::F32 { 1e-4 } else { 1e-2 };
                    let out_host: Vec<f64> = out.out.into_data().iter::<f64>().collect();
                    for (i, (a, e)) in out_host.iter().zip(&expected.out).enumerate() {
                        assert!(
                            (a - e).abs() <= tolerance,
                            "{what}: out[{i}] = {a}, expected {e}"
                        );
                    }
                    let lse_host: Vec<f64> = out.lse.into_data().iter::<f64>().collect();
                    for (i, (a, e)) in lse_host.iter().zip(&expected.lse).enumerate() {
                        let ok = (a - e).abs() <= 1e-4 * e.abs().max(1.0);
                        assert!(ok, "{what}: lse[{i}] = {a}, expected {e}");
                    }
                }
            }
        }
    }
}

/// Random ragged batches of every head_dim of the contract (GQA groups large enough to split
/// heads over cubes, windows, caps, long contexts that split, f32/f16/bf16) against the
/// reference, through `kernel`.
fn random_batches(kernel: Kernel) {
    let head_dims = [16usize, 64, 80, 96, 128, 256, 512];
    let mut rng = Rng::new(20_261_204);
    for (device_name, device) in devices() {
        for case in 0..28 {
            let d = head_dims[case % head_dims.len()];
            let hkv = 1 + rng.below(2) as usize;
            // Now and then a large GQA group (heads split over cubes).
            let group = if case % 9 == 4 {
                48
            } else {
                1 + rng.below(4) as usize
            };
            let hq = hkv * group;
            let causal = rng.below(4) != 0;
            let mut config =
                kernel.config(PoolAttentionConfig::new(hq, hkv, d).with_causal(causal));
            if rng.below(3) == 0 {
                // Small windows, and windows past any position (no wrap-around).
                config.sliding_window = Some(match rng.below(6) {
                    0 => usize::MAX,
                    1 => 1 << 63,
                    _ => 1 + rng.below(8) as usize,
                });
            }
            if rng.below(3) == 0 {
                config.logits_soft_cap = Some(0.5 + rng.below(30) as f64);
            }
            let dtype = match case % 6 {
                2 | 5 => DType::F16,
                4 => DType::BF16, // Flex (WGSL has no bf16: skipped there)
                _ => DType::F32,
            };
            if !device.supports_dtype(dtype) {
                continue;
            }
            let pool = 8 + rng.below(40) as usize;
            // Long contexts now and then, so split launches are covered too.
            let max_len = if case % 4 == 3 { 700 } else { 24 };
            let batch = random_batch(&mut rng, pool, max_len, causal);
            let what = format!(
                "{device_name} case {case} ({dtype:?}, d {d}, {hq}/{hkv} heads, {config:?})"
            );
            let tolerance = match dtype {
                DType::F32 => 1e-4,
                DType::F16 => 1e-2,
                _ => 2e-2,
            };
            check_float_batch(
                &device, &batch, &config, dtype, pool, &mut rng, tolerance, &what,
            );
        }
    }
}

/// Random batches over fp8 pools (e4m3 words, the kernels decode them in registers), f32 and f16
/// queries, against the reference over the decoded pools, through `kernel` and the decoding
/// `decode` asks for (`PoolAttentionConfig::fp8_decode`).
fn fp8_pools(kernel: Kernel, decode: Option<Fp8Decode>) {
    let mut rng = Rng::new(0x0f8a_77e0);
    for (device_name, device) in devices() {
        for case in 0..8 {
            // Heads of 80 and 96: rows of 20 and 24 words, some lanes idle in the plane kernel;
            // cases 3 and 7 (f16 queries, long contexts): heads the query tiles' flash form takes
            // through CUDA, over many key tiles.
            let d = [16usize, 80, 128, 128, 96, 64, 80, 96][case];
            let hkv = 1 + rng.below(2) as usize;
            let hq = hkv * (1 + rng.below(4) as usize);
            let causal = rng.below(4) != 0;
            let config = kernel.config(
                PoolAttentionConfig::new(hq, hkv, d)
                    .with_causal(causal)
                    .with_fp8_decode(decode),
            );
            // f16 queries every other case where the device has f16 (prefill's tensor-core path).
            let dtype = match case % 4 >= 2 && device.supports_dtype(DType::F16) {
                true => DType::F16,
                false => DType::F32,
            };
            let pool = 8 + rng.below(40) as usize;
            // Long contexts every other case: split launches and their merge.
            let max_len = if case % 2 == 1 { 700 } else { 24 };
            let batch = random_batch(&mut rng, pool, max_len, causal);
            let q: Vec<f64> = rng
                .values(batch.num_tokens * hq * d)
                .iter()
                .map(|&x| round_to(x, dtype))
                .collect();
            // Pools of e4m3 codes of `x / scale`; the reference reads their exact values.
            let (k_scale, v_scale) = (1.0 / 64.0, 1.0 / 32.0);
            let k_words = e4m3_words(&rng.values(pool * hkv * d), k_scale);
            let v_words = e4m3_words(&rng.values(pool * hkv * d), v_scale);
            let plan = PoolAttentionPlan::new(
                TensorData::from(batch.qo_indptr.as_slice()),
                TensorData::from(batch.kv_indptr.as_slice()),
                TensorData::from(batch.kv_indices.as_slice()),
                &device,
            );
            let words = |w: &[u32], scale: f32| fp8_pool(w, [pool, hkv, d], scale, &device);
            let inputs = PoolAttentionInputs::new(
                float_tensor(&q, [batch.num_tokens, hq, d], &device, dtype),
                words(&k_words, k_scale),
                words(&v_words, v_scale),
            );
            let what = format!(
                "{device_name} fp8 case {case} ({dtype:?} queries, d {d}, {hq}/{hkv} heads, \
                 {config:?})"
            );
            let out =
                pool_attention(inputs, &plan, &config).unwrap_or_else(|e| panic!("{what}: {e}"));
            let tolerance = if dtype == DType::F16 { 1e-2 } else { 1e-4 };
            assert_batch_near_reference(
                out,
                &config,
                &q,
                [
                    &e4m3_decoded(&k_words, k_scale),
                    &e4m3_decoded(&v_words, v_scale),
                ],
                &batch,
                tolerance,
                &what,
            );
        }
    }
}

/// Random queries and pools of `pool` rows for `batch`, rounded to `dtype`, through
/// `pool_attention` with `config` on `device` over poisoned memory (every element must be
/// written), against the reference within `tolerance`.
#[allow(clippy::too_many_arguments)]
fn check_float_batch(
    device: &Device,
    batch: &Batch,
    config: &PoolAttentionConfig,
    dtype: DType,
    pool: usize,
    rng: &mut Rng,
    tolerance: f64,
    what: &str,
) {
    let (hq, hkv, d) = (config.num_qo_heads, config.num_kv_heads, config.head_dim);
    let round = |v: Vec<f64>| -> Vec<f64> { v.iter().map(|&x| round_to(x, dtype)).collect() };
    let q = round(rng.values(batch.num_tokens * hq * d));
    let k_pool = round(rng.values(pool * hkv * d));
    let v_pool = round(rng.values(pool * hkv * d));
    let plan = PoolAttentionPlan::new(
        TensorData::from(batch.qo_indptr.as_slice()),
        TensorData::from(batch.kv_indptr.as_slice()),
        TensorData::from(batch.kv_indices.as_slice()),
        device,
    );
    // Fresh outputs land on poisoned memory: every element must be written.
    let _ =
        Tensor::<3>::full([batch.num_tokens.max(1), hq, d], f32::NAN, (device, dtype)).into_data();
    let inputs = PoolAttentionInputs::new(
        float_tensor(&q, [batch.num_tokens, hq, d], device, dtype),
        float_tensor(&k_pool, [pool, hkv, d], device, dtype),
        float_tensor(&v_pool, [pool, hkv, d], device, dtype),
    );
    let out = pool_attention(inputs, &plan, config).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_batch_near_reference(out, config, &q, [&k_pool, &v_pool], batch, tolerance, what);
}

/// `out` against the float64 reference of `config` over `batch`, queries `q` and `pools` (keys,
/// values): every output element within `tolerance`, every log-sum-exp equal (both `-inf`) or
/// within 1e-4 of its magnitude (at least 1).
fn assert_batch_near_reference(
    out: PoolAttentionOutputs,
    config: &PoolAttentionConfig,
    q: &[f64],
    pools: [&[f64]; 2],
    batch: &Batch,
    tolerance: f64,
    what: &str,
) {
    let expected = pool_attention_reference(
        config,
        q,
        pools,
        BatchIndices {
            qo_indptr: &batch.qo_indptr,
            kv_indptr: &batch.kv_indptr,
            kv_indices: &batch.kv_indices,
        },
    );
    let out_host: Vec<f64> = out.out.into_data().iter::<f64>().collect();
    let lse_host: Vec<f64> = out.lse.into_data().iter::<f64>().collect();
    assert_eq!(out_host.len(), expected.out.len(), "{what}: out's length");
    assert_eq!(lse_host.len(), expected.lse.len(), "{what}: lse's length");
    for (i, (a, e)) in out_host.iter().zip(&expected.out).enumerate() {
        assert!(
            (a - e).abs() <= tolerance,
            "{what}: out[{i}] = {a}, expected {e}"
        );
    }
    for (i, (a, e)) in lse_host.iter().zip(&expected.lse).enumerate() {
        let ok = a == e || (a - e).abs() <= 1e-4 * e.abs().max(1.0);
        assert!(ok, "{what}: lse[{i}] = {a}, expected {e}");
    }
}

/// The e4m3 codes of `x / scale`, four to a word (element `4j + i` in bits `8i..8i + 8` of
/// word `j`).
fn e4m3_words(x: &[f64], scale: f32) -> Vec<u32> {
    let mut words = vec![0u32; x.len() / 4];
    for (i, &x) in x.iter().enumerate() {
        words[i / 4] |= u32::from(e4m3_code(x / scale as f64)) << (8 * (i % 4));
    }
    words
}

/// A pool of `words` (e4m3 codes, [`e4m3_words`]) of `[rows, heads, head_dim]` elements on
/// `device`, scale `scale`.
fn fp8_pool(words: &[u32], dims: [usize; 3], scale: f32, device: &Device) -> PoolTensor {
    PoolTensor::fp8(words_tensor(words, dims, device), scale)
}

/// The exact values of [`e4m3_words`]' codes times `scale`.
fn e4m3_decoded(words: &[u32], scale: f32) -> Vec<f64> {
    (0..4 * words.len())
        .map(|i| {
            let code = (words[i / 4] >> (8 * (i % 4))) as u8;
            e4m3_value(code) * scale as f64
        })
        .collect()
}

/// The head-tile kernel (`PoolAttentionConfig::head_tiles`: a GQA group's heads as the rows of
/// warp-level tensor-core products, taken through CubeCL's CUDA runtime only; elsewhere the
/// normal launch runs and the test says so): f16 queries over f16 and fp8 pools, heads of 64
/// and 128, groups of 1 to 16 q heads, decode rows and prompts, windows, caps, contexts long
/// enough to split, rows outside the pool, against the reference.
#[test]
fn the_head_tile_kernel_matches_the_reference() {
    let mut rng = Rng::new(0x4ead_7113);
    for (device_name, device) in devices() {
        if !device.supports_dtype(DType::F16) {
            continue;
        }
        if device_name != "cuda" {
            println!(
                "head-tile kernel: not taken on {device_name} (CUDA only); normal launch checked"
            );
        }
        for case in 0..16 {
            let d = [64usize, 128][case % 2];
            let group = [1usize, 4, 8, 16, 3][case % 5];
            let hkv = 1 + rng.below(2) as usize;
            let hq = hkv * group;
            let fp8 = case % 3 != 0;
            let causal = rng.below(4) != 0;
            let mut config = PoolAttentionConfig::new(hq, hkv, d)
                .with_causal(causal)
                .with_head_tiles(Some(true));
            if case % 7 == 3 {
                config.sliding_window = Some(1 + rng.below(40) as usize);
            }
            if case % 5 == 2 {
                config.logits_soft_cap = Some(0.5 + rng.below(30) as f64);
            }
            let pool = 8 + rng.below(40) as usize;
            // Long contexts every other case: split launches and their merge.
            let max_len = if case % 2 == 1 { 300 } else { 40 };
            let batch = random_batch(&mut rng, pool, max_len, causal);
            let q: Vec<f64> = rng
                .values(batch.num_tokens * hq * d)
                .iter()
                .map(|&x| round_to(x, DType::F16))
                .collect();
            let (k_scale, v_scale) = (1.0 / 64.0, 1.0 / 32.0);
            let (k_values, v_values) = (rng.values(pool * hkv * d), rng.values(pool * hkv * d));
            let (inputs, k_ref, v_ref) = if fp8 {
                let (k_words, v_words) = (
                    e4m3_words(&k_values, k_scale),
                    e4m3_words(&v_values, v_scale),
                );
                let words = |w: &[u32], scale: f32| fp8_pool(w, [pool, hkv, d], scale, &device);
                let inputs = PoolAttentionInputs::new(
                    float_tensor(&q, [batch.num_tokens, hq, d], &device, DType::F16),
                    words(&k_words, k_scale),
                    words(&v_words, v_scale),
                );
                (
                    inputs,
                    e4m3_decoded(&k_words, k_scale),
                    e4m3_decoded(&v_words, v_scale),
                )
            } else {
                let round = |v: &[f64]| {
                    v.iter()
                        .map(|&x| round_to(x, DType::F16))
                        .collect::<Vec<_>>()
                };
                let (k_ref, v_ref) = (round(&k_values), round(&v_values));
                let inputs = PoolAttentionInputs::new(
                    float_tensor(&q, [batch.num_tokens, hq, d], &device, DType::F16),
                    float_tensor(&k_ref, [pool, hkv, d], &device, DType::F16),
                    float_tensor(&v_ref, [pool, hkv, d], &device, DType::F16),
                );
                (inputs, k_ref, v_ref)
            };
            let plan = PoolAttentionPlan::new(
                TensorData::from(batch.qo_indptr.as_slice()),
                TensorData::from(batch.kv_indptr.as_slice()),
                TensorData::from(batch.kv_indices.as_slice()),
                &device,
            );
            // Fresh outputs land on poisoned memory: every element must be written.
            let _ = Tensor::<3>::full(
                [batch.num_tokens.max(1), hq, d],
                f32::NAN,
                (&device, DType::F16),
            )
            .into_data();
            let what = format!(
                "{device_name} head tiles case {case} (fp8 {fp8}, d {d}, {hq}/{hkv} heads, {config:?})"
            );
            let out =
                pool_attention(inputs, &plan, &config).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_batch_near_reference(out, &config, &q, [&k_ref, &v_ref], &batch, 1e-2, &what);
        }
    }
}

fn expect_error(
    device: &Device,
    config: &PoolAttentionConfig,
    shapes: [&[usize]; 3],
    indices: [&[i64]; 3],
    message: &str,
) {
    let float = |dims: &[usize]| {
        let n = dims.iter().product();
        let data = TensorData::new(vec![0.5f32; n], dims.to_vec());
        match dims.len() {
            2 => Tensor::<2>::from_data(data, device).into_dispatch(),
            3 => Tensor::<3>::from_data(data, device).into_dispatch(),
            _ => Tensor::<4>::from_data(data, device).into_dispatch(),
        }
    };
    let plan = PoolAttentionPlan::new(
        TensorData::from(indices[0]),
        TensorData::from(indices[1]),
        TensorData::from(indices[2]),
        device,
    );
    let inputs = PoolAttentionInputs {
        q: float(shapes[0]),
        k_pool: PoolTensor::Float(float(shapes[1])),
        v_pool: PoolTensor::Float(float(shapes[2])),
    };
    let err: PoolAttentionError = pool_attention(inputs, &plan, config).unwrap_err();
    assert_eq!(err.to_string(), message);
}

#[test]
fn documented_errors_in_order() {
    let device = Device::flex();
    let d = &device;
    let cfg = PoolAttentionConfig::new(4, 2, 8);
    let good: [&[usize]; 3] = [&[3, 4, 8], &[16, 2, 8], &[16, 2, 8]];
    let idx: [&[i64]; 3] = [&[0, 1, 3], &[0, 4, 9], &[0, 1, 2, 3, 4, 5, 6, 7, 8]];
    expect_error(
        d,
        &cfg,
        [&[3, 32], good[1], good[2]],
        idx,
        "pool_attention expects q and the pools to be 3-D",
    );
    let plan_2d = PoolAttentionPlan::new(
        TensorData::new(vec![0i64, 1, 3, 3], [2, 2]),
        TensorData::from([0i64, 4, 9].as_slice()),
        TensorData::from(idx[2]),
        d,
    );
    let inputs = PoolAttentionInputs::new(
        Tensor::zeros([3, 4, 8], d),
        Tensor::zeros([16, 2, 8], d),
        Tensor::zeros([16, 2, 8], d),
    );
    assert_eq!(
        pool_attention(inputs, &plan_2d, &cfg)
            .unwrap_err()
            .to_string(),
        "pool_attention expects qo_indptr, kv_indptr and kv_indices to be 1-D"
    );
    expect_error(
        d,
        &cfg,
        [&[3, 4, 6], good[1], good[2]],
        idx,
        "q shape must be [num_tokens, num_qo_heads, head_dim], got [3, 4, 6]",
    );
    expect_error(
        d,
        &cfg,
        [good[0], &[16, 3, 8], &[16, 3, 8]],
        idx,
        "k_pool has incompatible shape [16, 3, 8]",
    );
    expect_error(
        d,
        &cfg,
        [good[0], good[1], &[15, 2, 8]],
        idx,
        "v_pool shape must match k_pool shape, got [15, 2, 8] vs [16, 2, 8]",
    );
    let odd = PoolAttentionConfig::new(3, 2, 8);
    expect_error(
        d,
        &odd,
        [&[3, 3, 8], good[1], good[2]],
        idx,
        "num_qo_heads must be a multiple of num_kv_heads, got 3 and 2",
    );
    expect_error(
        d,
        &cfg,
        good,
        [&[0, 3], &[0, 4, 9], idx[2]],
        "qo_indptr and kv_indptr must both have batch + 1 entries, got 2 and 3",
    );
    expect_error(
        d,
        &cfg,
        good,
        [&[0, 2, 1], &[0, 4, 9], idx[2]],
        "qo_indptr must start at 0, never decrease and end at num_tokens 3",
    );
    expect_error(
        d,
        &cfg,
        good,
        [&[0, 1, 3], &[0, 4, 8], idx[2]],
        "kv_indptr must start at 0, never decrease and end at len(kv_indices) 9",
    );
    expect_error(
        d,
        &cfg,
        good,
        [&[0, 1, 3], &[0, 8, 9], idx[2]],
        "sequence 1 has 2 queries but 1 keys",
    );
    let bad_scale = cfg.clone().with_sm_scale(Some(f64::NAN));
    expect_error(
        d,
        &bad_scale,
        good,
        idx,
        "invalid attention parameter: sm_scale must be positive and finite, got NaN",
    );
    let bad_cap = cfg.clone().with_logits_soft_cap(Some(-1.0));
    expect_error(
        d,
        &bad_cap,
        good,
        idx,
        "invalid attention parameter: logits_soft_cap must be positive and finite, got -1",
    );
    let huge_scale = cfg.clone().with_sm_scale(Some(1e39));
    expect_error(
        d,
        &huge_scale,
        good,
        idx,
        "invalid attention parameter: sm_scale must be positive and finite in f32, got 1e39",
    );
    let tiny_cap = cfg.clone().with_logits_soft_cap(Some(1e-50));
    expect_error(
        d,
        &tiny_cap,
        good,
        idx,
        "invalid attention parameter: logits_soft_cap must be positive and finite in f32, got 1e-50",
    );
    let wide = PoolAttentionConfig::new(4, 2, 520);
    expect_error(
        d,
        &wide,
        [&[3, 4, 520], &[16, 2, 520], &[16, 2, 520]],
        idx,
        "invalid attention parameter: head_dim 520 is larger than 512, the most pool_attention runs",
    );
    let bad_window = cfg.clone().with_sliding_window(Some(0));
    expect_error(
        d,
        &bad_window,
        good,
        idx,
        "invalid attention parameter: sliding_window must be at least 1",
    );
    let checked = cfg.clone().with_check_indices(true);
    expect_error(
        d,
        &checked,
        good,
        [idx[0], idx[1], &[0, 1, 2, 3, 4, 5, 6, 16, 8]],
        "kv index 16 at kv_indices[7] is outside the pool of 16 rows",
    );
    // Non-causal: fewer keys than queries is fine.
    let plan = PoolAttentionPlan::new(
        TensorData::from([0i64, 1, 3].as_slice()),
        TensorData::from([0i64, 8, 9].as_slice()),
        TensorData::from(idx[2]),
        d,
    );
    let inputs = PoolAttentionInputs::new(
        Tensor::ones([3, 4, 8], d),
        Tensor::ones([16, 2, 8], d),
        Tensor::ones([16, 2, 8], d),
    );
    assert!(pool_attention(inputs, &plan, &cfg.clone().with_causal(false)).is_ok());
}

#[cfg(feature = "autodiff")]
#[test]
fn autodiff_tensors_are_refused() {
    let device = Device::flex().autodiff();
    let plan = PoolAttentionPlan::new(
        TensorData::from([0i64, 1].as_slice()),
        TensorData::from([0i64, 1].as_slice()),
        TensorData::from([0i64].as_slice()),
        &device,
    );
    let inputs = PoolAttentionInputs::new(
        Tensor::zeros([1, 2, 8], &device),
        Tensor::zeros([4, 2, 8], &device),
        Tensor::zeros([4, 2, 8], &device),
    );
    let err = pool_attention(inputs, &plan, &PoolAttentionConfig::new(2, 2, 8)).unwrap_err();
    assert!(
        matches!(err, PoolAttentionError::UnsupportedBackend { .. }),
        "{err}"
    );
}

/// The documented messages of `pool_attention`, `{…}` standing for any text.
const DOCUMENTED: [&str; 13] = [
    "pool_attention expects q and the pools to be 3-D",
    "pool_attention expects qo_indptr, kv_indptr and kv_indices to be 1-D",
    "q shape must be [num_tokens, num_qo_heads, head_dim], got {…}",
    "k_pool has incompatible shape {…}",
    "v_pool shape must match k_pool shape, got {…} vs {…}",
    "num_qo_heads must be a multiple of num_kv_heads, got {…} and {…}",
    "qo_indptr and kv_indptr must both have batch + 1 entries, got {…} and {…}",
    "qo_indptr must start at 0, never decrease and end at num_tokens {…}",
    "kv_indptr must start at 0, never decrease and end at len(kv_indices) {…}",
    "sequence {…} has {…} queries but {…} keys",
    "q and pool dtypes must match",
    "invalid attention parameter: {…}",
    "kv index {…} at kv_indices[{…}] is outside the pool of {…} rows",
];

fn documented(message: &str) -> bool {
    DOCUMENTED.iter().any(|template| {
        let parts: Vec<&str> = template.split("{…}").collect();
        let mut rest = message;
        for (i, part) in parts.iter().enumerate() {
            match rest.find(part) {
                Some(0) => rest = &rest[part.len()..],
                Some(at) if i > 0 => rest = &rest[at + part.len()..],
                _ => return false,
            }
        }
        parts.last().is_some_and(|p| p.is_empty()) || rest.is_empty()
    })
}

/// A hostile value for an index array: small, negative, past the pool, or huge.
fn hostile(rng: &mut Rng, pool: usize) -> i64 {
    match rng.below(8) {
        0 => -(rng.below(5) as i64) - 1,
        1 => i64::MAX - rng.below(3) as i64,
        2 => pool as i64 + rng.below(4) as i64,
        3 => i32::MAX as i64 + rng.below(4) as i64,
        _ => rng.below(pool as u64 + 1) as i64,
    }
}

/// Lying plans and odd calls: indptrs of the wrong length, decreasing, negative or huge,
/// indices outside the pool, negative or repeated, windows and caps: a documented error or the
/// reference's answer, never a panic or an out-of-bounds read.
#[test]
fn fuzzed_plans_give_documented_errors_or_the_reference() {
    let cases = crate::common::env_count("POOL_ATTENTION_FUZZ_CASES", 48);
    let mut rng = Rng::new(0xa77e_f022);
    for (device_name, device) in devices() {
        for case in 0..cases {
            let (hkv, d) = (1 + rng.below(2) as usize, [16, 32][rng.below(2) as usize]);
            let hq = hkv * (1 + rng.below(3) as usize);
            let pool = 1 + rng.below(12) as usize;
            let causal = rng.below(3) != 0;
            let mut config = PoolAttentionConfig::new(hq, hkv, d)
                .with_causal(causal)
                .with_check_indices(rng.below(4) == 0);
            if rng.below(4) == 0 {
                config.sliding_window = Some(rng.below(4) as usize);
            }
            if rng.below(5) == 0 {
                config.logits_soft_cap =
                    Some([0.0, -1.0, 30.0, f64::INFINITY][rng.below(4) as usize]);
            }
            // A well-formed batch, then lies in it.
            let mut batch = random_batch(&mut rng, pool, 10, causal);
            let lie = rng.below(6);
            match lie {
                0 => batch.qo_indptr.push(batch.num_tokens as i64),
                1 => {
                    let at = rng.below(batch.kv_indptr.len() as u64) as usize;
                    batch.kv_indptr[at] = hostile(&mut rng, pool);
                }
                2 => {
                    let at = rng.below(batch.qo_indptr.len() as u64) as usize;
                    batch.qo_indptr[at] = hostile(&mut rng, pool);
                }
                3 if !batch.kv_indices.is_empty() => {
                    let at = rng.below(batch.kv_indices.len() as u64) as usize;
                    batch.kv_indices[at] = hostile(&mut rng, pool);
                }
                _ => {}
            }
            let q_rows = if rng.below(8) == 0 {
                batch.num_tokens + 1
            } else {
                batch.num_tokens
            };
            let q = rng.values(q_rows * hq * d);
            let (k_pool, v_pool) = (rng.values(pool * hkv * d), rng.values(pool * hkv * d));
            let plan = PoolAttentionPlan::new(
                TensorData::from(batch.qo_indptr.as_slice()),
                TensorData::from(batch.kv_indptr.as_slice()),
                TensorData::from(batch.kv_indices.as_slice()),
                &device,
            );
            let inputs = PoolAttentionInputs::new(
                float_tensor(&q, [q_rows, hq, d], &device, DType::F32),
                float_tensor(&k_pool, [pool, hkv, d], &device, DType::F32),
                float_tensor(&v_pool, [pool, hkv, d], &device, DType::F32),
            );
            let what = format!("{device_name} case {case} (lie {lie}, {config:?})");
            match pool_attention(inputs, &plan, &config) {
                Err(e) => {
                    let message = e.to_string();
                    assert!(
                        documented(&message),
                        "{what}: undocumented error `{message}`"
                    );
                }
                Ok(out) => {
                    let round =
                        |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| x as f32 as f64).collect() };
                    let expected = pool_attention_reference(
                        &config,
                        &round(&q),
                        [&round(&k_pool), &round(&v_pool)],
                        BatchIndices {
                            qo_indptr: &batch.qo_indptr,
                            kv_indptr: &batch.kv_indptr,
                            kv_indices: &batch.kv_indices,
                        },
                    );
                    let got: Vec<f64> = out.out.into_data().iter::<f64>().collect();
                    for (a, e) in got.iter().zip(&expected.out) {
                        assert!((a - e).abs() <= 1e-4, "{what}: out {a} vs {e}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_message_matcher_is_strict() {
    assert!(documented("sequence 3 has 4 queries but 2 keys"));
    assert!(documented(
        "invalid attention parameter: sm_scale must be positive and finite, got 0"
    ));
    assert!(!documented("sequence 3 has 4 queries"));
    assert!(!documented(
        "index out of bounds: the len is 3 but the index is 7"
    ));
}
