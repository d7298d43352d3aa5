//! fp8 e4m3 pools on every device and dtype: the op's writes against the float64 reference and
//! its independent encoder (a written code is the nearest one, bit-exact where the value is not
//! within f32 rounding of a tie; values with a power-of-two scale bit-exact), rows not written
//! untouched to the bit; `pool_attention` over an fp8 pool against the float64 reference on the
//! decoded pool and, for the quantization itself, within the stated bound of the unquantized
//! result; the documented refusals; a decoder with fp8 caches.

use crate::common::{Case, Rng, assert_close, devices, dtypes, host, round_to, words_tensor};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::pool::{
    PoolAttentionConfig, PoolAttentionInputs, PoolAttentionPlan, pool_attention,
};
use burn_rope_pool::testing::attention_reference::{BatchIndices, pool_attention_reference};
use burn_rope_pool::testing::reference::{ReferenceOutput, e4m3_code, e4m3_value};
use burn_rope_pool::{
    MRope, RopePoolConfig, RopePoolInputs, RopeStyle, rope_pool_fused, try_rope_pool_fused,
};

/// Random words for a pool of `[rows, heads, head_dim]`: the sentinel every unwritten row must
/// keep.
fn random_words(rng: &mut Rng, [rows, heads, head_dim]: [usize; 3]) -> Vec<u32> {
    (0..rows * heads * head_dim / 4)
        .map(|_| rng.next_u64() as u32)
        .collect()
}

fn read_words(pool: PoolTensor) -> (Vec<u32>, f32) {
    match pool {
        PoolTensor::Fp8 { words, scale } => {
            let words = Tensor::<3, Int>::from_dispatch(words);
            (words.into_data().try_to_vec::<u32>().unwrap(), scale)
        }
        PoolTensor::Float(_) => panic!("an fp8 call returned a float pool"),
    }
}

/// The code of element `i` of packed words.
fn code(words: &[u32], i: usize) -> u8 {
    ((words[i / 4] >> (8 * (i % 4))) & 0xFF) as u8
}

/// The distance between consecutive e4m3 values around `|x|` (x in code units).
fn step(x: f64) -> f64 {
    let a = x.abs().min(448.0);
    if a < 2f64.powi(-6) {
        2f64.powi(-9)
    } else {
        2f64.powi(a.log2().floor() as i32 - 3)
    }
}

/// Checks a written fp8 row against its float64 reference values `want` (not yet scaled): the
/// stored code is e4m3(want / scale) — exactly when `exact`, else the nearest code up to f32
/// rounding (a value within 1e-5 of a step of a tie may round either way).
fn check_row(words: &[u32], start: usize, want: &[f64], scale: f32, exact: bool, what: &str) {
    for (j, &w) in want.iter().enumerate() {
        let got = code(words, start + j);
        let x = w / scale as f64;
        let expected = e4m3_code(x);
        if got == expected {
            continue;
        }
        let value = e4m3_value(got);
        let near = (value - x.clamp(-448.0, 448.0)).abs() <= step(x) * (0.5 + 1e-5);
        assert!(
            !exact && near,
            "{what}: element {j} of the row = {got:#04x} ({value}), want {expected:#04x} for {x}"
        );
    }
}

fn configs() -> Vec<(&'static str, RopePoolConfig)> {
    let c = RopePoolConfig::new;
    vec![
        ("llama heads", c(128, 8, 2).with_rope_base(500_000.0)),
        (
            "gptj partial",
            c(16, 4, 2)
                .with_style(RopeStyle::Gptj)
                .with_rotary_dim(Some(8)),
        ),
        ("head_dim 8", c(8, 3, 1)),
        (
            "mrope",
            c(16, 4, 2).with_mrope(Some(MRope {
                section: [2, 3, 3],
                interleaved: false,
            })),
        ),
    ]
}

#[test]
fn fp8_pools_match_the_reference_everywhere() {
    // Keys at a scale off the powers of two; values at 1/16, where the encode is exact.
    let (k_scale, v_scale) = (0.05f32, 0.0625f32);
    for (name, config) in configs() {
        let (tokens, pool) = (9, 12);
        let case = Case::random(config.clone(), tokens, pool, 1 << 20, 31);
        let dims = case.pool_dims();
        let mut rng = Rng::new(5);
        let (k_words, v_words) = (random_words(&mut rng, dims), random_words(&mut rng, dims));
        for (device_name, device) in devices() {
            for dtype in dtypes(&device) {
                let what = format!("{name} on {device_name} {dtype:?}");
                let rounded = case.rounded(dtype);
                let want = rounded.reference();
                let t = rounded.tensors(&device, dtype);
                let inputs = RopePoolInputs::new(
                    t.q,
                    t.k,
                    t.v,
                    Tensor::<1, Int>::empty([0], &device),
                    t.slots,
                    PoolTensor::fp8(words_tensor(&k_words, dims, &device), k_scale),
                    PoolTensor::fp8(words_tensor(&v_words, dims, &device), v_scale),
                );
                let positions = match config.mrope {
                    Some(_) => {
                        let p = Tensor::<1, Int>::from_data(
                            TensorData::new(rounded.positions.clone(), [3 * tokens]),
                            &device,
                        );
                        p.reshape([3, tokens]).into_dispatch()
                    }
                    None => Tensor::<1, Int>::from_data(
                        TensorData::new(rounded.positions.clone(), [tokens]),
                        &device,
                    )
                    .into_dispatch(),
                };
                let out = rope_pool_fused(
                    RopePoolInputs {
                        positions,
                        ..inputs
                    },
                    &config,
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                let floats = ReferenceOutput {
                    q_rot: host(out.q_rot),
                    k_rot: host(out.k_rot),
                    k_pool: want.k_pool.clone(),
                    v_pool: want.v_pool.clone(),
                };
                let rel = match dtype {
                    DType::F32 => 1e-5,
                    other => burn_rope_pool::testing::tolerance(other),
                };
                assert_close(&floats, &want, dtype, rel, &what);
                let (kw, ks) = read_words(out.k_pool);
                let (vw, vs) = read_words(out.v_pool);
                assert_eq!((ks, vs), (k_scale, v_scale), "{what}: scales");
                let row = dims[1] * dims[2];
                let written: Vec<Option<usize>> = (0..pool)
                    .map(|r| rounded.slots.iter().position(|&s| s == r as i64))
                    .collect();
                for (r, token) in written.iter().enumerate() {
                    let range = r * row / 4..(r + 1) * row / 4;
                    match token {
                        None => {
                            assert_eq!(
                                kw[range.clone()],
                                k_words[range.clone()],
                                "{what}: k row {r}"
                            );
                            assert_eq!(vw[range.clone()], v_words[range], "{what}: v row {r}");
                        }
                        Some(t) => {
                            let k_rot = &want.k_rot[t * row..(t + 1) * row];
                            let v = &rounded.v[t * row..(t + 1) * row];
                            check_row(
                                &kw,
                                r * row,
                                k_rot,
                                k_scale,
                                false,
                                &format!("{what}: k row {r}"),
                            );
                            check_row(
                                &vw,
                                r * row,
                                v,
                                v_scale,
                                true,
                                &format!("{what}: v row {r}"),
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Saturation and the extremes: values past ±448 · scale store ±448, tiny ones subnormal codes,
/// NaN a NaN code — through the op's value path (bit-exact, power-of-two scale).
#[test]
fn fp8_writes_saturate_and_keep_subnormals() {
    let config = RopePoolConfig::new(8, 1, 1);
    let values = [
        1e6,
        -1e6,
        500.0,
        448.0,
        3e-3,
        -1e-3,
        2f64.powi(-10),
        f64::NAN,
    ];
    for (device_name, device) in devices() {
        let v = Tensor::<3>::from_data(
            TensorData::new(
                values.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                [1, 1, 8],
            ),
            &device,
        );
        let zeros = || Tensor::<3>::zeros([1, 1, 8], &device);
        let inputs = RopePoolInputs::new(
            zeros(),
            zeros(),
            v,
            Tensor::<1, Int>::from_ints([0], &device),
            Tensor::<1, Int>::from_ints([0], &device),
            PoolTensor::fp8_zeros([1, 1, 8], 1.0, &device),
            PoolTensor::fp8_zeros([1, 1, 8], 1.0, &device),
        );
        let out = rope_pool_fused(inputs, &config).unwrap();
        let (words, _) = read_words(out.v_pool);
        let codes: Vec<u8> = (0..8).map(|i| code(&words, i)).collect();
        let want: Vec<u8> = values.iter().map(|&x| e4m3_code(x as f32 as f64)).collect();
        assert_eq!(codes[..7], want[..7], "{device_name}");
        assert_eq!(codes[7] & 0x7F, 0x7F, "{device_name}: NaN");
        assert_eq!(
            &codes[..4],
            &[0x7E, 0xFE, 0x7E, 0x7E],
            "{device_name}: saturation"
        );
    }
}

#[test]
fn fp8_refusals_are_documented() {
    for (_, device) in devices() {
        let d = &device;
        let config = RopePoolConfig::new(8, 2, 1);
        let case = Case::random(config.clone(), 2, 4, 100, 3);
        let call = |config: &RopePoolConfig, k_pool: PoolTensor, v_pool: PoolTensor| {
            let t = case.tensors(d, DType::F32);
            let inputs = RopePoolInputs::new(t.q, t.k, t.v, t.positions, t.slots, k_pool, v_pool);
            let refused = try_rope_pool_fused(inputs, config).expect_err("refused");
            // The pools come back as they went in.
            assert!(matches!(
                refused.inputs.k_pool,
                PoolTensor::Fp8 { .. } | PoolTensor::Float(_)
            ));
            refused.error.to_string()
        };
        let fp8 = |scale: f32| PoolTensor::fp8_zeros([4, 1, 8], scale, d);
        let float = || PoolTensor::float(Tensor::zeros([4, 1, 8], d));
        assert_eq!(
            call(&config, fp8(1.0), float()),
            "k_pool and v_pool must both be float or both be fp8"
        );
        let i32_words = PoolTensor::fp8(Tensor::<3, Int>::zeros([4, 1, 2], (d, DType::I32)), 1.0);
        assert_eq!(
            call(&config, i32_words, fp8(1.0)),
            "fp8 pools are U32 words, got I32 and U32"
        );
        for scale in [
            0.0,
            -1.0,
            f32::NAN,
            f32::INFINITY,
            1e-40,
            1e31,
            2f32.powi(-101),
        ] {
            assert_eq!(
                call(&config, fp8(1.0), fp8(scale)),
                format!("fp8 pool scales must be in 2^-100..=2^100, got {scale}")
            );
        }
        let wrong_shape = PoolTensor::fp8(Tensor::<3, Int>::zeros([4, 1, 8], (d, DType::U32)), 1.0);
        assert_eq!(
            call(&config, wrong_shape.clone(), wrong_shape),
            "k_pool has incompatible shape [4, 1, 8]"
        );
        let partial = config.clone().with_rotary_dim(Some(4));
        assert_eq!(
            call(&partial, fp8(1.0), fp8(1.0)),
            "fp8 pools need rotary_dim / 2 to be a multiple of 4, got rotary_dim 4"
        );
        let odd = RopePoolConfig::new(6, 2, 1);
        let odd_case = Case::random(odd.clone(), 2, 4, 100, 3);
        let t = odd_case.tensors(d, DType::F32);
        let pool = || PoolTensor::fp8(Tensor::<3, Int>::zeros([4, 1, 1], (d, DType::U32)), 1.0);
        let inputs = RopePoolInputs::new(t.q, t.k, t.v, t.positions, t.slots, pool(), pool());
        assert_eq!(
            rope_pool_fused(inputs, &odd).unwrap_err().to_string(),
            "fp8 pools need head_dim to be a multiple of 4, got 6"
        );
        // pool_attention: the same checks on its pools.
        let attention = PoolAttentionConfig::new(2, 1, 8);
        let plan = PoolAttentionPlan::new(
            TensorData::from([0i64, 1]),
            TensorData::from([0i64, 2]),
            TensorData::from([0i64, 1]),
            d,
        );
        let q = Tensor::<3>::zeros([1, 2, 8], d);
        let inputs = PoolAttentionInputs::new(q, fp8(1.0), float());
        assert_eq!(
            pool_attention(inputs, &plan, &attention)
                .unwrap_err()
                .to_string(),
            "k_pool and v_pool must both be float or both be fp8"
        );
    }
}

#[test]
fn attention_over_fp8_pools_is_the_decoded_pools_attention() {
    let (hq, hkv, d) = (8, 2, 64);
    let config = PoolAttentionConfig::new(hq, hkv, d);
    let pool = 40;
    let mut rng = Rng::new(77);
    // Two sequences: a decode row over 23 keys, a prefill of 5 over 17.
    let (qo, kv) = ([0i64, 1, 6], [0i64, 23, 40]);
    let mut rows: Vec<i64> = (0..pool as i64).collect();
    for i in (1..rows.len()).rev() {
        rows.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let tokens = 6;
    let q: Vec<f64> = rng.values(tokens * hq * d);
    let k: Vec<f64> = rng.values(pool * hkv * d).iter().map(|x| 3.0 * x).collect();
    let v: Vec<f64> = rng.values(pool * hkv * d);
    let (k_scale, v_scale) = (0.02f32, 0.01f32);
    let encode = |x: &[f64], scale: f32| -> Vec<u32> {
        let mut words = vec![0u32; x.len() / 4];
        for (i, &x) in x.iter().enumerate() {
            words[i / 4] |= u32::from(e4m3_code(x / scale as f64)) << (8 * (i % 4));
        }
        words
    };
    let decode = |words: &[u32], n: usize, scale: f32| -> Vec<f64> {
        (0..n)
            .map(|i| e4m3_value(code(words, i)) * scale as f64)
            .collect()
    };
    let (kw, vw) = (encode(&k, k_scale), encode(&v, v_scale));
    let (kd, vd) = (decode(&kw, k.len(), k_scale), decode(&vw, v.len(), v_scale));
    // Pools of every finite code (subnormals and ±448 among them), for the decode's exactness.
    let mut any_code = || {
        let c = (rng.next_u64() % 254) as u32;
        c + u32::from(c >= 0x7F) // skip 0x7F; 0xFF is past 253 + 1
    };
    let random_words = |any_code: &mut dyn FnMut() -> u32| -> Vec<u32> {
        (0..pool * hkv * d / 4)
            .map(|_| (0..4).fold(0, |w, i| w | any_code() << (8 * i)))
            .collect()
    };
    let (rkw, rvw) = (random_words(&mut any_code), random_words(&mut any_code));
    let (rkd, rvd) = (
        decode(&rkw, k.len(), k_scale),
        decode(&rvw, v.len(), v_scale),
    );
    let batch = BatchIndices {
        qo_indptr: &qo,
        kv_indptr: &kv,
        kv_indices: &rows,
    };
    for (device_name, device) in devices() {
        for dtype in dtypes(&device) {
            let what = format!("{device_name} {dtype:?}");
            let qr: Vec<f64> = q.iter().map(|&x| round_to(x, dtype)).collect();
            let q_t = Tensor::<3>::from_data(
                TensorData::new(
                    qr.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                    [tokens, hq, d],
                ),
                (&device, dtype),
            );
            let dims = [pool, hkv, d];
            let plan = PoolAttentionPlan::new(
                TensorData::from(qo),
                TensorData::from(kv),
                TensorData::new(rows.clone(), [rows.len()]),
                &device,
            );
            let attend = |kw: &[u32], vw: &[u32]| {
                let inputs = PoolAttentionInputs::new(
                    q_t.clone(),
                    PoolTensor::fp8(words_tensor(kw, dims, &device), k_scale),
                    PoolTensor::fp8(words_tensor(vw, dims, &device), v_scale),
                );
                let out = pool_attention(inputs, &plan, &config).unwrap();
                out.out
                    .into_data()
                    .convert::<f64>()
                    .try_to_vec::<f64>()
                    .unwrap()
            };
            // The output's rounding to `dtype` (and f32 sums in another order).
            let rel = match dtype {
                DType::BF16 => 2f64.powi(-8),
                DType::F16 => 2f64.powi(-10),
                _ => 1e-6,
            };
            // Against the decoded pools (every code): the float arithmetic only.
            let exact = pool_attention_reference(&config, &qr, [&rkd, &rvd], batch);
            for (i, (a, b)) in attend(&rkw, &rvw).iter().zip(&exact.out).enumerate() {
                let bound = b.abs() * rel + 1e-5;
                assert!((a - b).abs() <= bound, "{what}: out[{i}] {a} vs {b}");
            }
            let got = attend(&kw, &vw);
            let unquantized = pool_attention_reference(&config, &qr, [&k, &v], batch);
            // Against the unquantized pools: each score moves by at most Δ = scale · |q · δk|,
            // so each softmax weight by a factor within e^{±2Δ}; with |δv| ≤ δ the output moves
            // by at most δ + (e^{2Δ} - 1) · max|v|.
            for t in 0..tokens {
                for h in 0..hq {
                    let g = h / (hq / hkv);
                    let seq = if t == 0 { 0 } else { 1 };
                    let keys = &rows[kv[seq] as usize..kv[seq + 1] as usize];
                    let qv = &qr[(t * hq + h) * d..][..d];
                    let (mut delta, mut dv, mut vmax) = (0f64, 0f64, 0f64);
                    for &r in keys {
                        let at = (r as usize * hkv + g) * d;
                        let dot: f64 = (0..d).map(|j| qv[j] * (kd[at + j] - k[at + j])).sum();
                        delta = delta.max(config.scale() * dot.abs());
                        for j in 0..d {
                            dv = dv.max((vd[at + j] - v[at + j]).abs());
                            vmax = vmax.max(v[at + j].abs());
                        }
                    }
                    let bound = dv + ((2.0 * delta).exp() - 1.0) * vmax;
                    for j in 0..d {
                        let i = (t * hq + h) * d + j;
                        let err = (got[i] - unquantized.out[i]).abs();
                        let bound = bound + got[i].abs() * rel + 1e-5;
                        assert!(err <= bound, "{what}: out[{i}] moved {err} > {bound}");
                    }
                }
            }
        }
    }
}

/// The decoder with fp8 caches on the shipped checkpoints: it runs every request, and its
/// first-token logits stay within 10% (norm-relative) of the float cache's (the quantization of the
/// prompt's keys and values is all that differs at the first step).
#[test]
fn decoders_with_fp8_caches_stay_near_the_float_ones() {
    use burn_rope_pool::model::{Checkpoint, Decoder, GenerateOptions, Request, generate};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models");
    let requests = [Request {
        prompt: vec![1, 313, 45, 67, 100, 178, 23, 14],
        max_new_tokens: 4,
    }];
    let options = GenerateOptions {
        keep_logits: true,
        ..GenerateOptions::default()
    };
    for (device_name, device) in devices() {
        for name in ["llama31_tiny", "qwen2_tiny", "qwen3_tiny"] {
            let checkpoint = Checkpoint::open(dir.join(name)).unwrap();
            let model = Decoder::load(&checkpoint, &device, DType::F32).unwrap();
            let float = generate(&model, &requests, &options, |_| {}).unwrap().0;
            let model = model.with_fp8_cache(Some((1.0 / 32.0, 1.0 / 32.0)));
            let fp8 = generate(&model, &requests, &options, |_| {}).unwrap().0;
            assert_eq!(fp8[0].generated.len(), 4, "{name} on {device_name}");
            let [a, b] = [&fp8[0].logits[0], &float[0].logits[0]]
                .map(|l| l.iter().map(|&x| x as f64).collect::<Vec<_>>());
            let err = burn_rope_pool::testing::norm_relative_error(&a, &b);
            eprintln!("{name} on {device_name}: first-token logits, fp8 vs float cache: {err:.2e}");
            assert!(err > 0.0 && err < 0.1, "{name} on {device_name}: {err:e}");
        }
    }
}

/// An fp8 cache made by the fused decoder and stepped by the unfused one is refused with the
/// documented error, and the cache keeps its pools: the fused decoder then runs on it.
#[test]
fn an_unfused_decoder_refuses_fp8_caches_and_keeps_them() {
    use burn_rope_pool::model::{Checkpoint, Decoder, StepToken};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/llama31_tiny");
    let device = Device::flex();
    let checkpoint = Checkpoint::open(dir).unwrap();
    let model = Decoder::load(&checkpoint, &device, DType::F32)
        .unwrap()
        .with_fp8_cache(Some((1.0 / 32.0, 1.0 / 32.0)));
    let mut cache = model.new_cache(16).unwrap();
    let tokens = [StepToken {
        seq: 0,
        token: 5,
        position: 0,
    }];
    let err = burn_rope_pool::testing::step_unfused(&model, &tokens, &mut cache).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the unfused tensor-op path takes float pools only, not fp8"
    );
    assert_eq!(cache.available(), 16, "the refused step took no rows");
    let logits = model.step(&tokens, &mut cache).unwrap();
    assert_eq!(logits.dims()[0], 1);
}

/// fp8 calls on q, k, v sliced from one fused QKV projection whose row is not a whole number of
/// words (a stride of 4n + 2 elements) equal the same call on dense copies, bit for bit. (Burn's
/// fusion hands the op these slices already materialised; the op copies a view whose token
/// stride is not whole words itself, and the kernel launch skips such a call.)
#[test]
fn fp8_calls_on_views_of_any_stride_equal_dense_calls() {
    let (hq, hkv, d, t) = (4, 2, 16, 5);
    let config = RopePoolConfig::new(d, hq, hkv);
    for (device_name, device) in devices() {
        let width = (hq + 2 * hkv) * d + 2;
        let mut rng = Rng::new(9);
        let values: Vec<f32> = rng.values(t * width).iter().map(|&x| x as f32).collect();
        let qkv = Tensor::<2>::from_data(TensorData::new(values, [t, width]), &device);
        let part = |from: usize, heads: usize| {
            qkv.clone()
                .slice([0..t, from * d..(from + heads) * d])
                .reshape([t, heads, d])
        };
        let (q, k, v) = (part(0, hq), part(hq, hkv), part(hq + hkv, hkv));
        let run = |q: Tensor<3>, k: Tensor<3>, v: Tensor<3>| {
            let inputs = RopePoolInputs::new(
                q,
                k,
                v,
                Tensor::<1, Int>::from_ints([3, 4, 5, 6, 7], &device),
                Tensor::<1, Int>::from_ints([0, 1, 2, 3, 4], &device),
                PoolTensor::fp8_zeros([6, hkv, d], 0.25, &device),
                PoolTensor::fp8_zeros([6, hkv, d], 0.25, &device),
            );
            let out = rope_pool_fused(inputs, &config).unwrap();
            (
                host(out.q_rot),
                read_words(out.k_pool).0,
                read_words(out.v_pool).0,
            )
        };
        let dense = |x: &Tensor<3>| Tensor::<3>::from_data(x.to_data(), &device);
        let want = run(dense(&q), dense(&k), dense(&v));
        assert_eq!(run(q, k, v), want, "{device_name}");
    }
}

/// Words of random codes (none of them NaN) in a tensor of `dims` and `dtype` (`U32`, or `I32`
/// holding the same bits): the sentinel of a fuzzed fp8 pool.
fn sentinel_words(
    dims: [usize; 3],
    dtype: DType,
    device: &Device,
    rng: &mut Rng,
) -> (Tensor<3, Int>, Vec<u32>) {
    let n: usize = dims.iter().product();
    let words: Vec<u32> = (0..n)
        .map(|_| rng.next_u64() as u32 & 0x7E7E_7E7E)
        .collect();
    let data = match dtype {
        DType::I32 => TensorData::new(words.iter().map(|&w| w as i32).collect::<Vec<_>>(), dims),
        _ => TensorData::new(words.clone(), dims),
    };
    (Tensor::<3, Int>::from_data(data, (device, dtype)), words)
}

/// A fuzzer over the fp8 and q/k norm settings: pool kinds (float, fp8, mixed), the words'
/// dtype and shape, scales (sane and broken), q/k norm weights (absent, right, wrong shape or
/// dtype), epsilons, head sizes and rotary dims, on every device. Every call either returns a
/// documented message with its pools handed back unchanged, or runs: then every pool row no
/// valid slot names keeps its sentinel words, and every other one holds codes of finite values.
#[test]
fn fp8_and_norm_calls_fuzzed() {
    use crate::fuzz::{DOCUMENTED, matches};
    let cases = crate::common::env_count("FP8_FUZZ_CASES", 200);
    for (device_name, device) in devices() {
        let d = &device;
        // Calls refused, and fp8 calls that ran: the fuzzer must reach both.
        let (mut refusals, mut fp8_runs) = (0, 0);
        for seed in 0..cases as u64 {
            let mut rng = Rng::new(seed * 7919 + 1);
            let pick = |rng: &mut Rng, n: u64| rng.below(n) as usize;
            // Half the calls are well-formed; the others break some settings.
            let sane = rng.below(2) == 0;
            let broken = |rng: &mut Rng| !sane && rng.below(3) == 0;
            let head_dim = match broken(&mut rng) {
                true => [2, 6, 10][pick(&mut rng, 3)],
                false => [4, 8, 16, 16][pick(&mut rng, 4)],
            };
            let (hkv, group) = ([1, 2][pick(&mut rng, 2)], [1, 2, 4][pick(&mut rng, 3)]);
            let mut config = RopePoolConfig::new(head_dim, hkv * group, hkv);
            if rng.below(3) == 0 {
                let rotary = match broken(&mut rng) {
                    true => 2 * (1 + pick(&mut rng, head_dim as u64 / 2)),
                    false => 8 * (1 + pick(&mut rng, (head_dim as u64 / 8).max(1))),
                };
                config = config.with_rotary_dim(Some(rotary.min(head_dim)));
            }
            if rng.below(3) == 0 {
                config = config.with_style(RopeStyle::Gptj);
            }
            if broken(&mut rng) {
                config = config.with_qk_norm_eps([-1.0, f64::NAN, 1e40][pick(&mut rng, 3)]);
            }
            let (tokens, rows) = (1 + pick(&mut rng, 5), 1 + pick(&mut rng, 6));
            let case = Case::random(config.clone(), tokens, rows, 1 << 16, seed);
            let scale = |rng: &mut Rng| match broken(rng) {
                true => [0.0f32, f32::NAN, 1e-35, 1e35, -1.0][pick(rng, 5)],
                false => [0.05f32, 0.25, 1.0][pick(rng, 3)],
            };
            let words_dims = |rng: &mut Rng| {
                let mut dims = [rows, hkv, head_dim / 4];
                if broken(rng) {
                    dims[2] = head_dim;
                }
                dims
            };
            let word_dtype = |rng: &mut Rng| match broken(rng) {
                true => DType::I32,
                false => DType::U32,
            };
            // Both fp8, both float, or (broken) mixed.
            let kinds = match broken(&mut rng) {
                true => 3,
                false => [0, 1, 2][pick(&mut rng, 3)],
            };
            let fp8_pool = |rng: &mut Rng| {
                let (dims, dtype, s) = (words_dims(rng), word_dtype(rng), scale(rng));
                let (t, words) = sentinel_words(dims, dtype, d, rng);
                (PoolTensor::fp8(t, s), Some(words))
            };
            let float_pool = || {
                let t = case.tensors(d, DType::F32).k_pool;
                (PoolTensor::from(t), None)
            };
            let ((k_pool, k_words), (v_pool, v_words)) = match kinds {
                2 => (float_pool(), float_pool()),
                3 => (fp8_pool(&mut rng), float_pool()),
                _ => (fp8_pool(&mut rng), fp8_pool(&mut rng)),
            };
            let t = case.tensors(d, DType::F32);
            let mut inputs =
                RopePoolInputs::new(t.q, t.k, t.v, t.positions, t.slots, k_pool, v_pool);
            if rng.below(2) == 0 {
                let len = if broken(&mut rng) {
                    head_dim + 2
                } else {
                    head_dim
                };
                let dtype = if broken(&mut rng) {
                    DType::F16
                } else {
                    DType::F32
                };
                let w =
                    |_| Tensor::<1>::from_data(TensorData::new(vec![1f32; len], [len]), (d, dtype));
                let [wq, wk] = [0, 1].map(w);
                inputs = inputs.with_qk_norm(wq, wk);
            }
            let what = format!("{device_name} seed {seed}: {config:?}");
            let stored = |pool: PoolTensor| match pool {
                PoolTensor::Fp8 { .. } => Some(read_words(pool).0),
                PoolTensor::Float(_) => None,
            };
            match try_rope_pool_fused(inputs, &config) {
                Err(refused) => {
                    refusals += 1;
                    let message = refused.error.to_string();
                    assert!(
                        DOCUMENTED.iter().any(|t| matches(t, &message)),
                        "{what}: undocumented `{message}`"
                    );
                    let inputs = refused.inputs;
                    // The I32-word pools read back as their bits too.
                    let bits = |pool: PoolTensor| match pool {
                        PoolTensor::Fp8 { words, .. } => {
                            let words = Tensor::<3, Int>::from_dispatch(words);
                            Some(
                                // Converted on the host: WGSL has no i64 to cast to.
                                words
                                    .into_data()
                                    .iter::<i64>()
                                    .map(|w| w as u32)
                                    .collect::<Vec<_>>(),
                            )
                        }
                        PoolTensor::Float(_) => None,
                    };
                    assert_eq!(bits(inputs.k_pool), k_words, "{what}: k pool changed");
                    assert_eq!(bits(inputs.v_pool), v_words, "{what}: v pool changed");
                }
                Ok(out) => {
                    let (k, v) = (stored(out.k_pool), stored(out.v_pool));
                    let (Some(k), Some(v), Some(k0), Some(v0)) = (k, v, k_words, v_words) else {
                        continue;
                    };
                    fp8_runs += 1;
                    let row = hkv * head_dim / 4;
                    for r in 0..rows {
                        let written = case.slots.contains(&(r as i64));
                        let range = r * row..(r + 1) * row;
                        for (words, before) in [(&k, &k0), (&v, &v0)] {
                            if written {
                                // Random inputs of |x| <= 1 at a sane scale: no NaN code.
                                let nan = words[range.clone()]
                                    .iter()
                                    .any(|w| (0..4).any(|i| (w >> (8 * i)) & 0x7F == 0x7F));
                                assert!(!nan, "{what}: row {r} holds a NaN code");
                            } else {
                                assert_eq!(
                                    words[range.clone()],
                                    before[range.clone()],
                                    "{what}: row {r}"
                                );
                            }
                        }
                    }
                }
            }
        }
        eprintln!("{device_name}: {refusals} refused, {fp8_runs} fp8 calls ran");
        assert!(
            refusals > 0 && fp8_runs > 0,
            "{device_name}: {refusals}, {fp8_runs}"
        );
    }
}
