//! Every documented error, with its exact message, on every device; the pools a caller still
//! holds are unchanged after a refused call.

use crate::common::{Case, Inputs, devices, host};
use burn::tensor::{DType, Device, Int, Tensor};
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::{RopePoolConfig, RopePoolError, RopePoolInputs, rope_pool_fused};

fn base_case() -> Case {
    let config = RopePoolConfig::new(8, 4, 2);
    let mut case = Case::random(config, 3, 6, 100, 5);
    case.slots = vec![0, 2, 4];
    case
}

/// Runs `call` on fresh inputs of `case`, expecting `message`, and checks the pools held by the
/// test kept their contents.
fn expect(device: &Device, message: &str, call: impl FnOnce(Inputs) -> Result<(), RopePoolError>) {
    let case = base_case();
    let inputs = case.tensors(device, DType::F32);
    let (k_pool, v_pool) = (inputs.k_pool.clone(), inputs.v_pool.clone());
    let err = call(inputs).expect_err(message);
    assert_eq!(err.to_string(), message);
    let stored = case.rounded(DType::F32);
    assert_eq!(
        host(k_pool),
        stored.k_pool,
        "k_pool changed by a refused call"
    );
    assert_eq!(
        host(v_pool),
        stored.v_pool,
        "v_pool changed by a refused call"
    );
}

fn run(t: Inputs, config: &RopePoolConfig) -> Result<(), RopePoolError> {
    t.call(config).map(|_| ())
}

#[test]
fn documented_errors_in_order() {
    let cfg = base_case().config;
    for (_, device) in devices() {
        let d = &device;
        expect(d, "rope_pool_fused expects q/k/v to be 3-D", |t| {
            let q: Tensor<2> = t.q.clone().reshape([3, 32]);
            let inputs = RopePoolInputs {
                q: q.into_dispatch(),
                ..t.into_inputs(&cfg)
            };
            rope_pool_fused(inputs, &cfg).map(|_| ())
        });
        expect(
            d,
            "rope_pool_fused expects positions/slots to be 1-D",
            |t| {
                let positions: Tensor<2, Int> = t.positions.reshape([3, 1]);
                rope_pool_fused(
                    RopePoolInputs::new(t.q, t.k, t.v, positions, t.slots, t.k_pool, t.v_pool),
                    &cfg,
                )
                .map(|_| ())
            },
        );
        expect(d, "rope_pool_fused expects pool tensors to be 3-D", |t| {
            let v_pool: Tensor<4> = t.v_pool.clone().reshape([6, 2, 2, 4]);
            let inputs = RopePoolInputs {
                v_pool: PoolTensor::Float(v_pool.into_dispatch()),
                ..t.into_inputs(&cfg)
            };
            rope_pool_fused(inputs, &cfg).map(|_| ())
        });
        expect(
            d,
            "q shape must be [num_tokens, num_qo_heads, head_dim], got [3, 4, 8]",
            |t| run(t, &RopePoolConfig::new(8, 2, 2)),
        );
        expect(
            d,
            "k shape must be [num_tokens, num_kv_heads, head_dim], got [2, 2, 8]",
            |mut t| {
                t.k = t.k.slice([0..2]);
                run(t, &cfg)
            },
        );
        expect(
            d,
            "v shape must match k shape, got [3, 1, 8] vs [3, 2, 8]",
            |mut t| {
                t.v = t.v.slice([0..3, 0..1]);
                run(t, &cfg)
            },
        );
        expect(
            d,
            "positions/slots must have one entry per token",
            |mut t| {
                t.slots = t.slots.slice([0..2]);
                run(t, &cfg)
            },
        );
        expect(d, "k_pool has incompatible shape [6, 2, 4]", |mut t| {
            t.k_pool = t.k_pool.slice([0..6, 0..2, 0..4]);
            run(t, &cfg)
        });
        expect(
            d,
            "v_pool shape must match k_pool shape, got [5, 2, 8] vs [6, 2, 8]",
            |mut t| {
                t.v_pool = t.v_pool.slice([0..5]);
                run(t, &cfg)
            },
        );
        expect(d, "q/k/v dtypes must match", |mut t| {
            t.v = t.v.cast(DType::F16);
            run(t, &cfg)
        });
        expect(d, "pool dtypes must match q/k/v dtype", |mut t| {
            t.k_pool = t.k_pool.cast(DType::F16);
            run(t, &cfg)
        });
        // Beyond the seed list, same style.
        expect(d, "head_dim must be even and > 0, got 3", |t| {
            let q = t.q.slice([0..3, 0..4, 0..3]);
            let (k, v) = (t.k.slice([0..3, 0..2, 0..3]), t.v.slice([0..3, 0..2, 0..3]));
            let (kp, vp) = (
                t.k_pool.slice([0..6, 0..2, 0..3]),
                t.v_pool.slice([0..6, 0..2, 0..3]),
            );
            rope_pool_fused(
                RopePoolInputs::new(q, k, v, t.positions, t.slots, kp, vp),
                &RopePoolConfig::new(3, 4, 2),
            )
            .map(|_| ())
        });
        expect(d, "rope_base must be positive and finite, got NaN", |t| {
            run(t, &cfg.clone().with_rope_base(f64::NAN))
        });
        expect(d, "rope_base must be positive and finite, got -1", |t| {
            run(t, &cfg.clone().with_rope_base(-1.0))
        });
        expect(
            d,
            "slot 9 of token 1 is outside the pool of 6 rows",
            |mut t| {
                t.slots = Tensor::from_ints([0, 9, 4], d);
                run(t, &cfg.clone().with_check_slots(true))
            },
        );
        expect(
            d,
            "slot 4 is written by both token 0 and token 2",
            |mut t| {
                t.slots = Tensor::from_ints([4, -1, 4], d);
                run(t, &cfg.clone().with_check_slots(true))
            },
        );
        // The first failing check wins: wrong q heads and a dtype mismatch report the heads.
        expect(
            d,
            "q shape must be [num_tokens, num_qo_heads, head_dim], got [3, 4, 8]",
            |mut t| {
                t.k = t.k.cast(DType::F16);
                run(t, &RopePoolConfig::new(8, 3, 2))
            },
        );
    }
}

#[test]
fn zero_heads_are_refused() {
    let device = Device::flex();
    let cfg = RopePoolConfig::new(4, 0, 0);
    let inputs = RopePoolInputs::new(
        Tensor::<3>::zeros([2, 0, 4], &device),
        Tensor::<3>::zeros([2, 0, 4], &device),
        Tensor::<3>::zeros([2, 0, 4], &device),
        Tensor::<1, Int>::from_ints([0, 1], &device),
        Tensor::<1, Int>::from_ints([0, 1], &device),
        Tensor::<3>::zeros([3, 0, 4], &device),
        Tensor::<3>::zeros([3, 0, 4], &device),
    );
    let err = rope_pool_fused(inputs, &cfg).unwrap_err();
    assert_eq!(
        err.to_string(),
        "num_qo_heads and num_kv_heads must be > 0, got 0 and 0"
    );
}

#[test]
fn tensors_on_two_devices_are_refused() {
    let Some(gpu) = crate::common::gpu_device() else {
        return;
    };
    let case = base_case();
    let cpu = Device::flex();
    let mut t = case.tensors(&cpu, DType::F32);
    t.v_pool = t.v_pool.to_device(&gpu);
    let err = t.call(&case.config).unwrap_err();
    assert_eq!(err.to_string(), "all tensors must be on one device");
}

/// The checks of the RoPE variants (12–15 of the contract), with their exact messages, before
/// anything is written.
#[test]
fn variant_errors() {
    use burn_rope_pool::{MRope, RopeScaling};
    let cfg = base_case().config;
    let mrope = MRope {
        section: [1, 1, 2],
        interleaved: false,
    };
    for (_, device) in devices() {
        let d = &device;
        expect(
            d,
            "rotary_dim must be even and in 2..=head_dim, got 7 for head_dim 8",
            |t| run(t, &cfg.clone().with_rotary_dim(Some(7))),
        );
        expect(
            d,
            "rotary_dim must be even and in 2..=head_dim, got 10 for head_dim 8",
            |t| run(t, &cfg.clone().with_rotary_dim(Some(10))),
        );
        expect(
            d,
            "mrope_section must sum to rotary_dim / 2, got 5 for rotary_dim 8",
            |t| {
                let cfg = cfg.clone().with_mrope(Some(MRope {
                    section: [1, 2, 2],
                    interleaved: true,
                }));
                let positions: Tensor<2, Int> = t.positions.repeat_dim(0, 3).reshape([3, 3]);
                rope_pool_fused(
                    RopePoolInputs::new(t.q, t.k, t.v, positions, t.slots, t.k_pool, t.v_pool),
                    &cfg,
                )
                .map(|_| ())
            },
        );
        // With M-RoPE, 1-D positions (or the wrong row count) get check 14's message.
        expect(
            d,
            "positions must be [3, num_tokens] for mrope, got [3]",
            |t| {
                let cfg = cfg.clone().with_mrope(Some(mrope));
                rope_pool_fused(
                    RopePoolInputs::new(t.q, t.k, t.v, t.positions, t.slots, t.k_pool, t.v_pool),
                    &cfg,
                )
                .map(|_| ())
            },
        );
        expect(
            d,
            "invalid rope scaling: factor must be positive and finite, got NaN",
            |t| {
                run(
                    t,
                    &cfg.clone()
                        .with_scaling(RopeScaling::Linear { factor: f64::NAN }),
                )
            },
        );
        expect(
            d,
            "invalid rope scaling: long_factor has 3 entries, expected rotary_dim / 2 = 4",
            |t| {
                run(
                    t,
                    &cfg.clone().with_scaling(RopeScaling::LongRope {
                        short_factor: vec![1.0; 4],
                        long_factor: vec![1.0; 3],
                        original_max_position_embeddings: Some(64.0),
                        max_position_embeddings: None,
                        attention_factor: None,
                        factor: None,
                    }),
                )
            },
        );
    }
}
