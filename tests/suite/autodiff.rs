//! The op under Burn's `Autodiff` backend: gradients against Burn's own autodiff of the unfused
//! tensor-op path (`rope_pool_unfused`) on random inputs, every variant family, Flex and wgpu;
//! and a few training steps through the op.

use crate::common::{Case, Rng, devices};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::testing::unfused::rope_pool_unfused;
use burn_rope_pool::{
    MRope, QkNorm, RopePoolConfig, RopePoolInputs, RopeScaling, RopeStyle, rope_pool_fused,
};

/// The variants the gradients are checked on.
fn configs() -> Vec<(&'static str, RopePoolConfig)> {
    let base = || RopePoolConfig::new(16, 4, 2).with_rope_base(10_000.0);
    vec![
        ("neox", base()),
        ("gptj", base().with_style(RopeStyle::Gptj)),
        ("partial", base().with_rotary_dim(Some(8))),
        (
            "gptj partial",
            base().with_style(RopeStyle::Gptj).with_rotary_dim(Some(8)),
        ),
        (
            "yarn",
            base().with_scaling(RopeScaling::yarn(4.0, Some(64.0), Some(256.0))),
        ),
        (
            "longrope",
            base().with_scaling(RopeScaling::LongRope {
                short_factor: vec![1.0, 1.1, 1.3, 1.7, 2.0, 2.5, 3.0, 4.0],
                long_factor: vec![2.0, 2.2, 2.6, 3.4, 4.0, 5.0, 6.0, 8.0],
                original_max_position_embeddings: Some(16.0),
                max_position_embeddings: Some(64.0),
                attention_factor: None,
                factor: None,
            }),
        ),
        (
            "mrope",
            base().with_mrope(Some(MRope {
                section: [2, 3, 3],
                interleaved: false,
            })),
        ),
    ]
}

/// Random weights for a weighted-sum loss of an output.
fn weights(rng: &mut Rng, dims: [usize; 3], device: &Device) -> Tensor<3> {
    let values: Vec<f32> = rng
        .values(dims.iter().product())
        .into_iter()
        .map(|x| x as f32)
        .collect();
    Tensor::from_data(TensorData::new(values, dims), device)
}

fn positions(case: &Case, device: &Device) -> Tensor<2, Int> {
    let rows = case.positions.len() / case.num_tokens;
    Tensor::from_data(
        TensorData::new(case.positions.clone(), [rows, case.num_tokens]),
        device,
    )
}

/// Gradients of `q, k, v, k_pool, v_pool` for the loss `Σ w·out` over the four outputs, through
/// the fused op, or through the unfused path.
///
/// The unfused path cannot skip a token, so it writes skipped tokens into one extra scratch row
/// that the loss does not see: its gradients then equal those of a call that skips them.
fn grads(case: &Case, device: &Device, fused: bool, seed: u64) -> Vec<Vec<f32>> {
    let device = device.clone().autodiff();
    let t = case.tensors(&device, DType::F32);
    let [q, k, v, k_pool, v_pool] = [t.q, t.k, t.v, t.k_pool, t.v_pool].map(|x| x.require_grad());
    let mut rng = Rng::new(seed);
    let w_q = weights(&mut rng, case.q_dims(), &device);
    let w_k = weights(&mut rng, case.kv_dims(), &device);
    let w_kp = weights(&mut rng, case.pool_dims(), &device);
    let w_vp = weights(&mut rng, case.pool_dims(), &device);
    let pool = case.pool_size;
    let out = if fused {
        let positions = positions(case, &device);
        let positions = if case.config.mrope.is_some() {
            positions.into_dispatch()
        } else {
            positions.reshape([case.num_tokens]).into_dispatch()
        };
        let inputs = RopePoolInputs {
            q: q.clone().into_dispatch(),
            k: k.clone().into_dispatch(),
            v: v.clone().into_dispatch(),
            positions,
            slots: t.slots.into_dispatch(),
            k_pool: PoolTensor::Float(k_pool.clone().into_dispatch()),
            v_pool: PoolTensor::Float(v_pool.clone().into_dispatch()),
            qk_norm: QkNorm::None,
        };
        rope_pool_fused(inputs, &case.config).unwrap()
    } else {
        let scratch = pool as i64;
        let slots: Vec<i64> = case
            .slots
            .iter()
            .map(|&s| {
                if (0..scratch).contains(&s) {
                    s
                } else {
                    scratch
                }
            })
            .collect();
        let slots = Tensor::<1, Int>::from_data(TensorData::new(slots, [case.num_tokens]), &device);
        let [_, h, d] = case.pool_dims();
        let extra =
            |p: &Tensor<3>| Tensor::cat(vec![p.clone(), Tensor::zeros([1, h, d], &device)], 0);
        let positions = positions(case, &device);
        let mut out = if case.config.mrope.is_some() {
            rope_pool_unfused(
                RopePoolInputs::new(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    positions,
                    slots,
                    extra(&k_pool),
                    extra(&v_pool),
                ),
                &case.config,
            )
        } else {
            rope_pool_unfused(
                RopePoolInputs::new(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    positions.reshape([case.num_tokens]),
                    slots,
                    extra(&k_pool),
                    extra(&v_pool),
                ),
                &case.config,
            )
        };
        out.k_pool = out.k_pool.into_float().slice([0..pool]).into();
        out.v_pool = out.v_pool.into_float().slice([0..pool]).into();
        out
    };
    let loss = (out.q_rot * w_q).sum()
        + (out.k_rot * w_k).sum()
        + (out.k_pool.into_float() * w_kp).sum()
        + (out.v_pool.into_float() * w_vp).sum();
    let grads = loss.backward();
    [q, k, v, k_pool, v_pool]
        .iter()
        .map(|x| {
            x.grad(&grads)
                .expect("every input receives a gradient")
                .into_data()
                .convert::<f32>()
                .try_to_vec::<f32>()
                .unwrap()
        })
        .collect()
}

/// The op's gradients on every device against Burn's autodiff of the unfused path on Flex. The
/// oracle runs on Flex because the unfused path takes `cos`/`sin` of f32 angles in Burn's ops,
/// which a GPU evaluates with its own approximations: on the H200 through SPIR-V its gradients
/// were 7e-5 (relative) off the op's at positions up to 64, where Flex's agree to 1e-5.
#[test]
fn gradients_match_unfused_autodiff() {
    let names = ["q", "k", "v", "k_pool", "v_pool"];
    let devices = devices();
    for (variant, config) in configs() {
        for (seed, (tokens, pool)) in [(1, 5), (7, 12), (33, 40)].into_iter().enumerate() {
            let seed = seed as u64 + 100;
            // Positions past LongRoPE's threshold (16) in the last case: the long set. Kept
            // small because the unfused path's f32 angle `p·f` loses ~p·2^-24 radians.
            let max_position = if tokens > 20 { 64 } else { 12 };
            let case = Case::random(config.clone(), tokens, pool, max_position, seed);
            let unfused = grads(&case, &Device::flex(), false, seed);
            for (device_name, device) in &devices {
                let fused = grads(&case, device, true, seed);
                for ((name, a), e) in names.iter().zip(&fused).zip(&unfused) {
                    assert_eq!(a.len(), e.len());
                    for (i, (a, e)) in a.iter().zip(e).enumerate() {
                        assert!(
                            (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                            "{device_name} {variant} T={tokens}: d{name}[{i}] {a} vs {e}"
                        );
                    }
                }
            }
        }
    }
}

/// The gradient a skipped token's value receives is zero, and the pool passes its gradient
/// through unchanged where nothing was written: checked directly, not only against the
/// unfused path.
#[test]
fn skipped_tokens_and_untouched_rows() {
    for (device_name, device) in devices() {
        let device = device.autodiff();
        let config = RopePoolConfig::new(8, 2, 1);
        let v = Tensor::<3>::ones([3, 1, 8], &device).require_grad();
        let v_pool = Tensor::<3>::zeros([4, 1, 8], &device).require_grad();
        let q = Tensor::<3>::ones([3, 2, 8], &device);
        let k = Tensor::<3>::ones([3, 1, 8], &device);
        let k_pool = Tensor::<3>::zeros([4, 1, 8], &device);
        let positions = Tensor::<1, Int>::from_ints([0, 1, 2], &device);
        let slots = Tensor::<1, Int>::from_ints([2, -1, 7], &device);
        let out = rope_pool_fused(
            RopePoolInputs::new(q, k, v.clone(), positions, slots, k_pool, v_pool.clone()),
            &config,
        )
        .unwrap();
        let row_weights =
            Tensor::<1>::from_floats([1.0, 2.0, 3.0, 4.0], &device).reshape([4, 1, 1]);
        let grads = (out.v_pool.into_float() * row_weights).sum().backward();
        let dv = v
            .grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let dpool = v_pool
            .grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let expect_dv: Vec<f32> = [3.0, 0.0, 0.0].iter().flat_map(|&x| [x; 8]).collect();
        let expect_pool: Vec<f32> = [1.0, 2.0, 0.0, 4.0].iter().flat_map(|&x| [x; 8]).collect();
        assert_eq!(dv, expect_dv, "{device_name}: dv");
        assert_eq!(dpool, expect_pool, "{device_name}: dv_pool");
    }
}

/// A tiny attention-shaped model trained through the op on Flex: learnable q/k/v projections,
/// keys and values written to the pool, attention over the pool, plain SGD; the loss goes down.
#[test]
fn training_through_the_op_lowers_the_loss() {
    let device = Device::flex().autodiff();
    let (tokens, dim, heads, head_dim) = (6, 16, 2, 8);
    // Keys are read from the pool only: the op does not return k_rot.
    let config = RopePoolConfig::new(head_dim, heads, heads).with_k_rot(false);
    let mut rng = Rng::new(9);
    let mut random = |dims: [usize; 2], scale: f32| {
        let values: Vec<f32> = rng
            .values(dims[0] * dims[1])
            .into_iter()
            .map(|x| scale * x as f32)
            .collect();
        Tensor::<2>::from_data(TensorData::new(values, dims), &device)
    };
    let mut w: Vec<Tensor<2>> = (0..3).map(|_| random([dim, dim], 0.2)).collect();
    let (x, target) = (random([tokens, dim], 1.0), random([tokens, dim], 1.0));
    let positions = Tensor::<1, Int>::arange(0..tokens as i64, &device);
    let slots = Tensor::<1, Int>::arange(0..tokens as i64, &device);
    let loss_of = |w: &[Tensor<2>]| {
        let split = |w: &Tensor<2>| {
            x.clone()
                .matmul(w.clone())
                .reshape([tokens, heads, head_dim])
        };
        let pool = || Tensor::<3>::zeros([tokens, heads, head_dim], &device);
        let out = rope_pool_fused(
            RopePoolInputs::new(
                split(&w[0]),
                split(&w[1]),
                split(&w[2]),
                positions.clone(),
                slots.clone(),
                pool(),
                pool(),
            ),
            &config,
        )
        .unwrap();
        let q = out.q_rot.swap_dims(0, 1); // [H, T, D]
        let k = out.k_pool.into_float().swap_dims(0, 1);
        let v = out.v_pool.into_float().swap_dims(0, 1);
        let scores = q.matmul(k.swap_dims(1, 2)) / (head_dim as f64).sqrt();
        let attended = burn::tensor::activation::softmax(scores, 2).matmul(v);
        let y = attended.swap_dims(0, 1).reshape([tokens, dim]);
        (y - target.clone()).powi_scalar(2).mean()
    };
    let first = loss_of(&w).into_scalar::<f32>();
    for _ in 0..30 {
        let params: Vec<Tensor<2>> = w.iter().map(|w| w.clone().require_grad()).collect();
        let grads = loss_of(&params).backward();
        w = params
            .iter()
            .map(|p| {
                let grad = p.grad(&grads).expect("each projection has a gradient");
                (p.clone().inner() - grad * 0.5).autodiff()
            })
            .collect();
    }
    let last = loss_of(&w).into_scalar::<f32>();
    assert!(last < 0.8 * first, "loss {first} → {last}");
}

/// At large positions (to 2^24 − 1, where the unfused path's f32 angles are off) the gradient is
/// checked against the f64 reference instead: rotating `dq` forward again must give back
/// `attention_factor² · w` (the rotation is orthogonal up to that factor).
#[test]
fn gradients_at_large_positions_invert_the_rotation() {
    for (device_name, device) in devices() {
        for (variant, config) in configs() {
            let case = Case::random(config.clone(), 9, 4, 1 << 24, 5);
            let ad = device.clone().autodiff();
            let t = case.tensors(&ad, DType::F32);
            let q = t.q.require_grad();
            let w: Vec<f64> = Rng::new(6).values(case.q.len());
            let w_tensor = case.float(&w, case.q_dims(), &ad, DType::F32);
            let rows = case.positions.len() / case.num_tokens;
            let positions = Tensor::<2, Int>::from_data(
                TensorData::new(case.positions.clone(), [rows, case.num_tokens]),
                &ad,
            );
            let positions = if rows == 3 {
                positions.into_dispatch()
            } else {
                positions.reshape([case.num_tokens]).into_dispatch()
            };
            let inputs = RopePoolInputs {
                q: q.clone().into_dispatch(),
                k: t.k.into_dispatch(),
                v: t.v.into_dispatch(),
                positions,
                slots: t.slots.into_dispatch(),
                k_pool: t.k_pool.into(),
                v_pool: t.v_pool.into(),
                qk_norm: QkNorm::None,
            };
            let out = rope_pool_fused(inputs, &config).unwrap();
            let grads = (out.q_rot * w_tensor).sum().backward();
            let dq: Vec<f64> = q
                .grad(&grads)
                .unwrap()
                .into_data()
                .convert::<f64>()
                .try_to_vec::<f64>()
                .unwrap();
            let again = Case {
                q: dq,
                ..case.clone()
            }
            .reference()
            .q_rot;
            let factor = config.frequencies().unwrap().attention_factor;
            let scale = factor * factor;
            let err = again
                .iter()
                .zip(&w)
                .map(|(a, w)| (a - scale * w).powi(2))
                .sum::<f64>()
                .sqrt();
            let norm = w.iter().map(|w| (scale * w).powi(2)).sum::<f64>().sqrt();
            assert!(
                err <= 1e-5 * norm,
                "{device_name} {variant}: norm-relative error {}",
                err / norm
            );
        }
    }
}
