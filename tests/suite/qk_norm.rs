//! The per-head q/k RMSNorm inside the op (Qwen3): every device and dtype against the float64
//! reference (with the dtype's two roundings of the norm emulated), odd heads and partial
//! rotary tails, many head groups, the unfused path, the documented refusals (nothing written),
//! and gradients under Autodiff against Burn's autodiff of the unfused path.

use crate::common::{
    Case, Rng, devices, dtypes, host, output_pairs, poison, round_to, to_host, ulp,
};
use burn::tensor::{DType, Device, Tensor, TensorData};
use burn_rope_pool::testing::reference::{ReferenceOutput, head_rms_norm, rope_pool_reference};
use burn_rope_pool::testing::unfused::rope_pool_unfused;
use burn_rope_pool::{
    MRope, RopePoolConfig, RopePoolError, RopePoolInputs, RopeStyle, rope_pool_fused,
    try_rope_pool_fused,
};

/// Norm weights around 1 (as trained ones are), a few negative.
fn norm_weights(rng: &mut Rng, head_dim: usize) -> Vec<f64> {
    rng.values(head_dim)
        .into_iter()
        .map(|x| if x < -0.9 { x } else { 1.0 + 0.5 * x })
        .collect()
}

/// `x`'s head rows through the norm as the kernel rounds it: the f64 mean and scale, the
/// normalised value rounded to `dtype`, times the weight, rounded again (f32: no rounding).
fn normed(x: &[f64], w: &[f64], eps: f64, dtype: DType) -> Vec<f64> {
    if dtype == DType::F32 {
        return head_rms_norm(x, w, eps);
    }
    let ones = vec![1.0; w.len()];
    head_rms_norm(x, &ones, eps)
        .chunks_exact(w.len())
        .flat_map(|row| {
            row.iter()
                .zip(w)
                .map(|(n, w)| round_to(round_to(*n, dtype) * w, dtype))
        })
        .collect()
}

/// The reference outputs of `case` with norm weights `[wq, wk]` (all as `dtype` holds them).
fn expected(case: &Case, [wq, wk]: &[Vec<f64>; 2], dtype: DType) -> ReferenceOutput {
    let eps = case.config.qk_norm_eps;
    let (q, k) = (
        normed(&case.q, wq, eps, dtype),
        normed(&case.k, wk, eps, dtype),
    );
    rope_pool_reference(
        &case.config,
        [&q, &k, &case.v],
        &case.positions,
        &case.slots,
        [&case.k_pool, &case.v_pool],
    )
}

/// The call of `case` with the norm on `device`, its outputs read back (free memory poisoned with
/// NaN first, so an unwritten output element shows).
fn run(
    case: &Case,
    weights: &[Vec<f64>; 2],
    device: &Device,
    dtype: DType,
    fused: bool,
) -> ReferenceOutput {
    poison(device, dtype, &[case.q_dims(), case.kv_dims()]);
    let d = case.config.head_dim;
    let [wq, wk] = weights.clone().map(|w| {
        let w: Vec<f32> = w.iter().map(|&x| x as f32).collect();
        Tensor::<1>::from_data(TensorData::new(w, [d]), (device, dtype))
    });
    let inputs = case
        .tensors(device, dtype)
        .into_inputs(&case.config)
        .with_qk_norm(wq, wk);
    if fused {
        to_host(rope_pool_fused(inputs, &case.config).unwrap())
    } else {
        to_host(rope_pool_unfused(inputs, &case.config))
    }
}

/// Element-wise, in head rows of `d`: within one rounding of `dtype` at the element, plus two
/// at the row's largest magnitude (the rotated pair's inputs are at most √2 times it), plus
/// `abs` for the f32 arithmetic (1e-5 for the kernel; the unfused path's sin/cos are the GPU's
/// own, 1e-4). The two: once in a while the kernel's f32 scale and the reference's
/// f64 one round a normalised value (or its product with the weight) to neighbouring values.
fn assert_near(
    actual: &ReferenceOutput,
    expected: &ReferenceOutput,
    dtype: DType,
    d: usize,
    abs: f64,
    what: &str,
) {
    for (name, a, e) in output_pairs(actual, expected) {
        assert_eq!(a.len(), e.len(), "{what}: {name} length");
        for (row, (a, e)) in a.chunks(d).zip(e.chunks(d)).enumerate() {
            let largest = e.iter().fold(0f64, |m, y| m.max(y.abs()));
            for (i, (&x, &y)) in a.iter().zip(e).enumerate() {
                let rounding = if dtype == DType::F32 {
                    0.0
                } else {
                    1.01 * ulp(x.abs().max(y.abs()), dtype)
                        + 2.0 * ulp(std::f64::consts::SQRT_2 * largest, dtype)
                };
                assert!(
                    (x - y).abs() <= rounding + abs,
                    "{what}: {name}[{}] = {x} vs {y}",
                    row * d + i
                );
            }
        }
    }
}

fn configs() -> Vec<(&'static str, RopePoolConfig, usize, usize)> {
    let c = RopePoolConfig::new;
    vec![
        ("qwen3 heads", c(128, 8, 2).with_rope_base(1e6), 5, 9),
        (
            "gptj partial",
            c(16, 4, 2)
                .with_style(RopeStyle::Gptj)
                .with_rotary_dim(Some(8)),
            4,
            6,
        ),
        ("odd tail", c(10, 3, 1).with_rotary_dim(Some(4)), 7, 8),
        ("head_dim 2", c(2, 2, 1), 3, 4),
        ("head_dim 512", c(512, 2, 1), 3, 5),
        (
            "mrope",
            c(16, 4, 2).with_mrope(Some(MRope {
                section: [2, 3, 3],
                interleaved: false,
            })),
            3,
            4,
        ),
        // Enough units that each walks two heads; many cubes.
        ("head groups", c(64, 16, 4), 1700, 1800),
    ]
}

#[test]
fn qk_norm_matches_reference_everywhere() {
    for (name, config, tokens, pool) in configs() {
        let config = config.with_qk_norm_eps(1e-5);
        let case = Case::random(config.clone(), tokens, pool, 1 << 20, 7);
        let mut rng = Rng::new(11);
        let weights = [0, 1].map(|_| norm_weights(&mut rng, config.head_dim));
        for (device_name, device) in devices() {
            for dtype in dtypes(&device) {
                let rounded = case.rounded(dtype);
                let w = weights
                    .clone()
                    .map(|w| w.iter().map(|&x| round_to(x, dtype)).collect::<Vec<_>>());
                let want = expected(&rounded, &w, dtype);
                let what = format!("{name} on {device_name} {dtype:?}");
                let d = config.head_dim;
                assert_near(
                    &run(&rounded, &w, &device, dtype, true),
                    &want,
                    dtype,
                    d,
                    1e-5,
                    &what,
                );
                // The unfused path rounds each tensor op in half types: compared in f32.
                if tokens < 100 && dtype == DType::F32 {
                    let what = format!("{what} (unfused)");
                    // The unfused path cannot skip a token, and its naive f32 angles are exact
                    // only at small positions: every slot valid, positions below 64.
                    let mut all_written = rounded.clone();
                    all_written.slots = (0..tokens as i64).collect();
                    all_written.positions.iter_mut().for_each(|p| *p %= 64);
                    let want = expected(&all_written, &w, dtype);
                    let got = run(&all_written, &w, &device, dtype, false);
                    // The unfused path writes every slot: compare the rotations only.
                    for (a, e) in [(&got.q_rot, &want.q_rot), (&got.k_rot, &want.k_rot)] {
                        let (a, e) = (
                            ReferenceOutput {
                                q_rot: a.clone(),
                                k_rot: vec![],
                                k_pool: vec![],
                                v_pool: vec![],
                            },
                            ReferenceOutput {
                                q_rot: e.clone(),
                                k_rot: vec![],
                                k_pool: vec![],
                                v_pool: vec![],
                            },
                        );
                        assert_near(&a, &e, dtype, d, 1e-4, &what);
                    }
                }
            }
        }
    }
}

/// A call whose norm arguments are wrong: its documented message, and the pools handed back
/// unchanged.
fn refused(device: &Device, config: &RopePoolConfig, weights: [(usize, DType); 2], message: &str) {
    let case = Case::random(config.clone(), 3, 4, 100, 3);
    let [wq, wk] = weights.map(|(len, dtype)| {
        Tensor::<1>::from_data(TensorData::new(vec![1f32; len], [len]), (device, dtype))
    });
    let inputs = case
        .tensors(device, DType::F32)
        .into_inputs(config)
        .with_qk_norm(wq, wk);
    let refused = try_rope_pool_fused(inputs, config).expect_err("a refused call");
    assert!(
        refused.error.to_string().starts_with(message),
        "{} vs {message}",
        refused.error
    );
    let k_pool = host(refused.inputs.k_pool.into_float());
    let want: Vec<f64> = case.k_pool.iter().map(|&x| x as f32 as f64).collect();
    assert_eq!(k_pool, want, "{message}: the pool changed");
}

#[test]
fn qk_norm_refusals_are_documented() {
    for (_, device) in devices() {
        let d = &device;
        let config = RopePoolConfig::new(8, 4, 2);
        let f32_ = DType::F32;
        refused(
            d,
            &config,
            [(10, f32_), (8, f32_)],
            "q_norm/k_norm weights must be [head_dim] = [8], got [10] and [8]",
        );
        refused(
            d,
            &config,
            [(8, f32_), (8, DType::F16)],
            "q_norm/k_norm weight dtypes must match q/k/v dtype",
        );
        for eps in [f64::NAN, -1e-6, 1e39] {
            refused(
                d,
                &config.clone().with_qk_norm_eps(eps),
                [(8, f32_), (8, f32_)],
                &format!("qk_norm_eps must be >= 0 and finite in f32, got {eps}"),
            );
        }
        refused(
            d,
            &RopePoolConfig::new(514, 2, 1),
            [(514, f32_), (514, f32_)],
            "the fused q/k norm supports head_dim up to 512, got 514",
        );
    }
    let error = RopePoolError::QkNormHeadDim { head_dim: 600 };
    assert_eq!(
        error.to_string(),
        "the fused q/k norm supports head_dim up to 512, got 600"
    );
}

/// Gradients of q, k and both norm weights for `Σ w·q_rot + Σ w·k_rot`, fused or unfused.
fn norm_grads(case: &Case, device: &Device, fused: bool) -> Vec<Vec<f32>> {
    let device = device.clone().autodiff();
    let d = case.config.head_dim;
    let mut rng = Rng::new(5);
    let t = case.tensors(&device, DType::F32);
    let (q, k) = (t.q.clone().require_grad(), t.k.clone().require_grad());
    let w = |rng: &mut Rng| {
        let values: Vec<f32> = norm_weights(rng, d).iter().map(|&x| x as f32).collect();
        Tensor::<1>::from_data(TensorData::new(values, [d]), &device).require_grad()
    };
    let (wq, wk) = (w(&mut rng), w(&mut rng));
    let loss_weights = |dims: [usize; 3], rng: &mut Rng| {
        let values: Vec<f32> = rng
            .values(dims.iter().product())
            .iter()
            .map(|&x| x as f32)
            .collect();
        Tensor::<3>::from_data(TensorData::new(values, dims), &device)
    };
    let (lq, lk) = (
        loss_weights(case.q_dims(), &mut rng),
        loss_weights(case.kv_dims(), &mut rng),
    );
    let inputs = RopePoolInputs::new(
        q.clone(),
        k.clone(),
        t.v,
        t.positions,
        t.slots,
        t.k_pool,
        t.v_pool,
    )
    .with_qk_norm(wq.clone(), wk.clone());
    let out = if fused {
        rope_pool_fused(inputs, &case.config).unwrap()
    } else {
        rope_pool_unfused(inputs, &case.config)
    };
    let loss = (out.q_rot * lq).sum() + (out.k_rot * lk).sum();
    let grads = loss.backward();
    let values = |g: Option<Vec<f32>>| g.expect("a gradient");
    // (`try_to_vec` reads f32: the gradients are f32 here.)
    vec![
        values(q.grad(&grads).map(|g| g.into_data().try_to_vec().unwrap())),
        values(k.grad(&grads).map(|g| g.into_data().try_to_vec().unwrap())),
        values(wq.grad(&grads).map(|g| g.into_data().try_to_vec().unwrap())),
        values(wk.grad(&grads).map(|g| g.into_data().try_to_vec().unwrap())),
    ]
}

#[test]
fn qk_norm_gradients_match_burn_autodiff() {
    let config = RopePoolConfig::new(16, 4, 2).with_rotary_dim(Some(12));
    // Every slot valid and distinct: the unfused path writes them all too.
    let mut case = Case::random(config, 5, 6, 1000, 21);
    case.slots = vec![4, 0, 2, 5, 1];
    for (name, device) in devices() {
        let fused = norm_grads(&case, &device, true);
        let unfused = norm_grads(&case, &device, false);
        for (which, (a, b)) in ["q", "k", "q_weight", "k_weight"]
            .iter()
            .zip(fused.iter().zip(&unfused))
        {
            let a: Vec<f64> = a.iter().map(|&x| x as f64).collect();
            let b: Vec<f64> = b.iter().map(|&x| x as f64).collect();
            let err = burn_rope_pool::testing::norm_relative_error(&a, &b);
            // Both gradients are f32 tensor-op chains, summed in different orders on a GPU.
            assert!(err < 1e-4, "{name}: d{which} off by {err:e}");
        }
    }
}
