//! Pool semantics: in-place update without disturbing other holders, skipped and out-of-pool
//! slots; q, k and v given as views of one fused QKV projection.

use crate::common::{Case, assert_close, devices, host};
use burn::tensor::{DType, Tensor};
use burn_rope_pool::{RopePoolConfig, RopePoolInputs, rope_pool_fused};

#[test]
fn an_earlier_clone_of_the_pool_is_unchanged() {
    for (name, device) in devices() {
        let config = RopePoolConfig::new(16, 4, 2);
        let mut case = Case::random(config.clone(), 4, 8, 1000, 11);
        case.slots = vec![1, 3, 5, 7];
        let t = case.tensors(&device, DType::F32);
        let (k_clone, v_clone) = (t.k_pool.clone(), t.v_pool.clone());
        let out = crate::common::to_host(t.call(&config).unwrap());
        let stored = case.rounded(DType::F32);
        assert_close(&out, &stored.reference(), DType::F32, 1e-5, name);
        assert_eq!(host(k_clone), stored.k_pool, "{name}: k_pool clone changed");
        assert_eq!(host(v_clone), stored.v_pool, "{name}: v_pool clone changed");
    }
}

#[test]
fn successive_calls_update_the_pool_they_return() {
    for (name, device) in devices() {
        let config = RopePoolConfig::new(8, 2, 1);
        let first = Case::random(config.clone(), 3, 6, 50, 21);
        let mut second = Case::random(config.clone(), 3, 6, 50, 22);
        let mut first = first;
        first.slots = vec![0, 1, 2];
        second.slots = vec![3, -1, 4];
        let a = first.tensors(&device, DType::F32);
        let out = a.call(&config).unwrap();
        let mut b = second.tensors(&device, DType::F32);
        b.k_pool = out.k_pool.into_float();
        b.v_pool = out.v_pool.into_float();
        let out = crate::common::to_host(b.call(&config).unwrap());
        let mut expected_case = second.clone();
        let after_first = first.rounded(DType::F32).reference();
        expected_case.k_pool = after_first.k_pool;
        expected_case.v_pool = after_first.v_pool;
        let expected = expected_case.rounded(DType::F32).reference();
        assert_close(&out, &expected, DType::F32, 1e-5, name);
    }
}

#[test]
fn slots_past_the_pool_and_negative_slots_write_nothing() {
    for (name, device) in devices() {
        let config = RopePoolConfig::new(8, 2, 2);
        let mut case = Case::random(config.clone(), 6, 4, 100, 31);
        case.slots = vec![4, 5, 1000, i32::MAX as i64, -1, i32::MIN as i64];
        let out = case.run(&device, DType::F32).unwrap();
        let stored = case.rounded(DType::F32);
        assert_eq!(out.k_pool, stored.k_pool, "{name}: k_pool written");
        assert_eq!(out.v_pool, stored.v_pool, "{name}: v_pool written");
        assert_close(&out, &stored.reference(), DType::F32, 1e-5, name);
    }
}

/// The unfused Burn baseline (plain tensor ops) computes the same op: it is what the benchmark
/// compares against, so it must be right too.
#[test]
fn unfused_baseline_matches_the_fused_op() {
    use burn_rope_pool::testing::unfused::rope_pool_unfused;
    for (name, device) in devices() {
        let config = RopePoolConfig::new(16, 4, 2).with_rope_base(10_000.0);
        let mut case = Case::random(config.clone(), 5, 8, 2000, 51);
        case.slots = vec![6, 0, 3, 7, 1];
        let t = case.tensors(&device, DType::F32);
        let out = rope_pool_unfused(
            RopePoolInputs::new(t.q, t.k, t.v, t.positions, t.slots, t.k_pool, t.v_pool),
            &config,
        );
        // The unfused path forms the angle naively in f32: 1e-4 covers positions below 2000.
        assert_close(
            &crate::common::to_host(out),
            &case.rounded(DType::F32).reference(),
            DType::F32,
            1e-4,
            name,
        );
    }
}

/// q, k and v as views of one fused QKV projection `[T, Hq + 2·Hkv, D]` (token stride wider than
/// a row; the CubeCL kernel reads them in place): the same results as dense copies, on every
/// device, including a lone token and a tail of odd widths.
#[test]
fn views_of_a_fused_qkv_projection() {
    for (name, device) in devices() {
        for (hq, hkv, d, tokens) in [(8, 2, 32, 9), (4, 4, 16, 1), (6, 3, 8, 5)] {
            let config = RopePoolConfig::new(d, hq, hkv).with_rope_base(10_000.0);
            let case = Case::random(config.clone(), tokens, 16, 5000, 61).rounded(DType::F32);
            let width = hq + 2 * hkv;
            let mut rng = crate::common::Rng::new(62);
            let values: Vec<f32> = rng
                .values(tokens * width * d)
                .into_iter()
                .map(|x| x as f32)
                .collect();
            let qkv = Tensor::<3>::from_data(
                burn::tensor::TensorData::new(values, [tokens, width, d]),
                &device,
            );
            let q = qkv.clone().slice([0..tokens, 0..hq]);
            let k = qkv.clone().slice([0..tokens, hq..hq + hkv]);
            let v = qkv.clone().slice([0..tokens, hq + hkv..width]);
            let t = case.tensors(&device, DType::F32);
            let run = |q: Tensor<3>, k: Tensor<3>, v: Tensor<3>| {
                let out = rope_pool_fused(
                    RopePoolInputs::new(
                        q,
                        k,
                        v,
                        t.positions.clone(),
                        t.slots.clone(),
                        t.k_pool.clone(),
                        t.v_pool.clone(),
                    ),
                    &config,
                )
                .unwrap();
                crate::common::to_host(out)
            };
            let dense = |x: Tensor<3>| Tensor::<3>::from_data(x.into_data(), &device);
            let from_views = run(q.clone(), k.clone(), v.clone());
            let from_copies = run(dense(q), dense(k), dense(v));
            assert_eq!(from_views, from_copies, "{name} {hq}/{hkv}/{d}");
        }
    }
}
