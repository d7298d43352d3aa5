//! A long run of back-to-back calls (mixed sizes, pool rows reused, pools kept in place) with
//! the device memory flat after warm-up and the pools equal to a float64 mirror at the end; and
//! the op called from four threads on one device, equal to the same calls made serially.
//!
//! CI runs `ROPE_POOL_SOAK_CALLS` (default 2000) calls per device; the README gives the figures
//! of a longer run.

use crate::common::{Rng, devices, host, memory, own_gpu_device};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_rope_pool::testing::norm_relative_error;
use burn_rope_pool::testing::reference::rope_pool_reference;
use burn_rope_pool::{RopePoolConfig, RopePoolInputs, rope_pool_fused};

const POOL_ROWS: usize = 64;

fn config() -> RopePoolConfig {
    RopePoolConfig::new(16, 4, 2).with_rope_base(500_000.0)
}

/// Call `i` of a job: its host inputs (`T` cycles through 1, 3, 8, 17; slots walk the pool, so
/// rows are reused; every fifth token is skipped).
struct Step {
    tokens: usize,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    positions: Vec<i64>,
    slots: Vec<i64>,
}

impl Step {
    fn new(rng: &mut Rng, i: usize) -> Self {
        let config = config();
        let tokens = [1, 3, 8, 17][i % 4];
        let (hq, hkv, d) = (config.num_qo_heads, config.num_kv_heads, config.head_dim);
        // Values exact in f32, so the host mirror holds what the device holds.
        let mut values =
            |n: usize| -> Vec<f64> { rng.values(n).into_iter().map(|x| x as f32 as f64).collect() };
        Self {
            tokens,
            q: values(tokens * hq * d),
            k: values(tokens * hkv * d),
            v: values(tokens * hkv * d),
            positions: (0..tokens).map(|t| (i * 17 + t) as i64).collect(),
            slots: (0..tokens)
                .map(|t| match (i + t) % 5 {
                    4 => -1,
                    _ => ((i * 17 + t) % POOL_ROWS) as i64,
                })
                .collect(),
        }
    }

    fn float(values: &[f64], dims: [usize; 3], device: &Device) -> Tensor<3> {
        let values: Vec<f32> = values.iter().map(|&x| x as f32).collect();
        Tensor::from_data(TensorData::new(values, dims), device)
    }

    /// Runs the call on the device pools (updated in place), returning `q_rot`.
    fn run(&self, device: &Device, pools: &mut (Tensor<3>, Tensor<3>)) -> Tensor<3> {
        let c = config();
        let (q_dims, kv_dims) = (
            [self.tokens, c.num_qo_heads, c.head_dim],
            [self.tokens, c.num_kv_heads, c.head_dim],
        );
        let int =
            |v: &[i64]| Tensor::<1, Int>::from_data(TensorData::new(v.to_vec(), [v.len()]), device);
        let (k_pool, v_pool) = pools.clone();
        let out = rope_pool_fused(
            RopePoolInputs::new(
                Self::float(&self.q, q_dims, device),
                Self::float(&self.k, kv_dims, device),
                Self::float(&self.v, kv_dims, device),
                int(&self.positions),
                int(&self.slots),
                k_pool,
                v_pool,
            ),
            &c,
        )
        .expect("a valid call");
        *pools = (out.k_pool.into_float(), out.v_pool.into_float());
        out.q_rot
    }
}

fn zero_pools(device: &Device) -> (Tensor<3>, Tensor<3>) {
    let c = config();
    let dims = [POOL_ROWS, c.num_kv_heads, c.head_dim];
    (Tensor::zeros(dims, device), Tensor::zeros(dims, device))
}

#[test]
fn back_to_back_calls_keep_memory_flat_and_pools_exact() {
    let calls = crate::common::env_count("ROPE_POOL_SOAK_CALLS", 2000);
    let c = config();
    // The GPU device with memory of its own: the tests beside this one allocate on the default.
    let mut devices = vec![("flex", Device::flex())];
    if let Some(device) = own_gpu_device() {
        devices.push((crate::common::GPU, device));
    }
    for (name, device) in devices {
        let mut rng = Rng::new(77);
        let mut pools = zero_pools(&device);
        // The float64 mirror of the pools, advanced by the reference call by call.
        let mut mirror = (
            vec![0.0; POOL_ROWS * c.num_kv_heads * c.head_dim],
            vec![0.0; POOL_ROWS * c.num_kv_heads * c.head_dim],
        );
        let checkpoint = (calls / 10).max(1);
        let mut samples = Vec::new();
        let start = std::time::Instant::now();
        for i in 0..calls {
            let step = Step::new(&mut rng, i);
            let q_rot = step.run(&device, &mut pools);
            let expected = rope_pool_reference(
                &c,
                [&step.q, &step.k, &step.v],
                &step.positions,
                &step.slots,
                [&mirror.0, &mirror.1],
            );
            mirror = (expected.k_pool, expected.v_pool);
            if (i + 1) % checkpoint == 0 {
                // Reading q_rot back waits for every call so far.
                let err = norm_relative_error(&host(q_rot), &expected.q_rot);
                assert!(err <= 1e-5, "{name} call {i}: q_rot off by {err:e}");
                if let Some(sample) = memory(&device) {
                    samples.push(sample);
                }
            }
        }
        let elapsed = start.elapsed();
        for (device_pool, mirror_pool) in [(pools.0, &mirror.0), (pools.1, &mirror.1)] {
            let err = norm_relative_error(&host(device_pool), mirror_pool);
            assert!(
                err <= 1e-5,
                "{name}: pool off by {err:e} after {calls} calls"
            );
        }
        eprintln!(
            "soak {name}: {calls} calls in {elapsed:.1?}; memory (in use, reserved) at each tenth: {samples:?}"
        );
        // After the first fifth (warm-up: every size seen many times, the allocator's pools
        // grown to their working size), the memory in use and reserved never grows.
        if let Some((&(in_use, reserved), later)) = samples.get(2..).and_then(|s| s.split_first()) {
            for &(now_in_use, now_reserved) in later {
                assert!(
                    now_in_use <= in_use && now_reserved <= reserved,
                    "{name}: memory grew from {:?} to {:?}",
                    (in_use, reserved),
                    (now_in_use, now_reserved)
                );
            }
        }
    }
}

/// `calls` calls of job `seed` on `device`: the final pools and the last q_rot.
fn job(device: &Device, seed: u64, calls: usize) -> Vec<Vec<f64>> {
    let mut rng = Rng::new(seed);
    let mut pools = zero_pools(device);
    let mut last = None;
    for i in 0..calls {
        last = Some(Step::new(&mut rng, i).run(device, &mut pools));
    }
    vec![host(pools.0), host(pools.1), host(last.expect("calls > 0"))]
}

#[test]
fn calls_from_four_threads_equal_serial_calls() {
    const CALLS: usize = 40;
    for (name, device) in devices() {
        let serial: Vec<_> = (0..4).map(|seed| job(&device, seed, CALLS)).collect();
        let threaded: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|seed| {
                    let device = device.clone();
                    scope.spawn(move || job(&device, seed, CALLS))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no thread panics"))
                .collect()
        });
        assert_eq!(
            serial, threaded,
            "{name}: threaded calls differ from serial ones"
        );
    }
}
