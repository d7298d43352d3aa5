//! Every tuning variant of the launch ([`RopeTuning`]) gives the default launch's outputs bit
//! for bit: the variants only move work between units, the arithmetic of each element is the
//! same. Runs the real kernel on wgpu (Mesa's software Vulkan in CI); the default launch itself
//! is checked against the float64 reference by the root crate's tests.

mod common;
#[path = "../../src/testing/rng.rs"]
#[allow(dead_code)]
mod rng;

use cubecl::client::Client;
use cubecl::ir::{ElemType, FloatKind, IntKind};
use cubecl::prelude::*;
use rng::Rng;
use rope_pool_kernels::rope::{
    RopePoolArgs, RopePoolGeometry, RopeTable, RopeTuning, launch_rope_pool,
};

/// Host data of one call: f32 tensors, i32 positions and slots.
struct Case {
    geometry: RopePoolGeometry,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    positions: Vec<i32>,
    slots: Vec<i32>,
    k_pool: Vec<f32>,
    v_pool: Vec<f32>,
}

impl Case {
    fn random(geometry: RopePoolGeometry, seed: u64) -> Self {
        let mut rng = Rng::from_state(seed | 1);
        let mut next = move || rng.next_u64();
        let RopePoolGeometry {
            num_tokens: t,
            num_qo_heads: hq,
            num_kv_heads: hkv,
            head_dim: d,
            pool_size: p,
            ..
        } = geometry;
        let mut values = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| (next() % 2001) as f32 / 500.0 - 2.001)
                .collect()
        };
        let (q, k, v) = (values(t * hq * d), values(t * hkv * d), values(t * hkv * d));
        let (k_pool, v_pool) = (values(p * hkv * d), values(p * hkv * d));
        // Distinct valid slots, with skipped (negative) and out-of-pool ones mixed in.
        let mut rows: Vec<i32> = (0..p as i32).collect();
        let slots = (0..t)
            .map(|i| match next() % 6 {
                0 => -1,
                1 => p as i32 + (i % 3) as i32,
                _ if !rows.is_empty() => rows.swap_remove(next() as usize % rows.len()),
                _ => -2,
            })
            .collect();
        let positions = (0..t).map(|_| (next() % (1 << 20)) as i32).collect();
        Case {
            geometry,
            q,
            k,
            v,
            positions,
            slots,
            k_pool,
            v_pool,
        }
    }

    /// The call's outputs `q_rot, k_rot, k_pool, v_pool` as raw bytes, launched with `tuning`.
    fn run(&self, client: &Client, tuning: &RopeTuning) -> [Vec<u8>; 4] {
        let g = self.geometry;
        let tensor = |data: &[u8], dims: [usize; 3]| {
            let handle = client.create_from_slice(data);
            let strides = [dims[1] * dims[2], dims[2], 1];
            let arg =
                unsafe { TensorArg::from_raw_parts(handle.clone(), strides.into(), dims.into()) };
            (handle, arg)
        };
        let vector = |data: &[i32]| {
            let handle = client.create_from_slice(i32::as_bytes(data));
            unsafe { TensorArg::from_raw_parts(handle, [1].into(), [data.len()].into()) }
        };
        let half = g.head_dim / 2;
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| 500_000f64.powf(-2.0 * i as f64 / g.head_dim as f64))
            .collect();
        let q_dims = [g.num_tokens, g.num_qo_heads, g.head_dim];
        let kv_dims = [g.num_tokens, g.num_kv_heads, g.head_dim];
        let pool_dims = [g.pool_size, g.num_kv_heads, g.head_dim];
        let poison = |dims: [usize; 3]| vec![f32::NAN; dims.iter().product()];
        let (_, q) = tensor(f32::as_bytes(&self.q), q_dims);
        let (_, k) = tensor(f32::as_bytes(&self.k), kv_dims);
        let (_, v) = tensor(f32::as_bytes(&self.v), kv_dims);
        let (q_out_handle, q_out) = tensor(f32::as_bytes(&poison(q_dims)), q_dims);
        let (k_out_handle, k_out) = tensor(f32::as_bytes(&poison(kv_dims)), kv_dims);
        let (k_pool_handle, k_pool) = tensor(f32::as_bytes(&self.k_pool), pool_dims);
        let (v_pool_handle, v_pool) = tensor(f32::as_bytes(&self.v_pool), pool_dims);
        unsafe {
            launch_rope_pool(
                client,
                ElemType::Float(FloatKind::F32),
                ElemType::Int(IntKind::I32),
                g,
                &RopeTable::new(&inv_freq, None, None, false, 1.0),
                RopePoolArgs {
                    q,
                    k,
                    v,
                    positions: vector(&self.positions),
                    slots: vector(&self.slots),
                    q_out,
                    k_out,
                    k_pool,
                    v_pool,
                    write_k_out: true,
                    qk_norm: None,
                    fp8_scales: None,
                },
                tuning,
            );
        }
        [q_out_handle, k_out_handle, k_pool_handle, v_pool_handle]
            .map(|handle| client.read_one(handle).expect("read back").to_vec())
    }
}

#[test]
fn every_tuning_variant_matches_the_default_bit_for_bit() {
    let Some(client) = common::client("kernel variant test") else {
        return;
    };
    // (tokens, q heads, kv heads, head_dim, pool): GQA with an odd head count (groups that cross
    // from q to kv heads and uneven groups), MHA with head_dim 6 (vectors of 1), one token.
    let shapes = [(37, 7, 3, 16, 50), (19, 4, 4, 6, 8), (1, 32, 8, 128, 4)];
    let defaults = RopeTuning::default();
    let variants = [
        RopeTuning {
            heads_per_unit: Some(1),
            ..defaults
        },
        RopeTuning {
            heads_per_unit: Some(3),
            ..defaults
        },
        RopeTuning {
            heads_per_unit: Some(64),
            ..defaults
        },
        RopeTuning {
            heads_per_unit: Some(4),
            cube_dim: Some(64),
            ..defaults
        },
        RopeTuning {
            cube_dim: Some(40),
            heads_per_unit: Some(2),
            ..defaults
        },
        RopeTuning {
            max_vector: Some(1),
            heads_per_unit: Some(5),
            ..defaults
        },
        RopeTuning {
            max_vector: Some(2),
            ..defaults
        },
    ];
    for (i, (t, hq, hkv, d, p)) in shapes.into_iter().enumerate() {
        let geometry = RopePoolGeometry::of(&[t, hq, d], &[t, hkv, d], &[p, hkv, d]);
        let case = Case::random(geometry, 11 + i as u64);
        let expected = case.run(&client, &defaults);
        // Every output row was written or kept: no NaN left from the poisoned outputs.
        for (name, bytes) in ["q_rot", "k_rot"].iter().zip(&expected) {
            let values = f32::from_bytes(bytes);
            assert!(
                values.iter().all(|x| x.is_finite()),
                "{geometry:?}: {name} has unwritten elements"
            );
        }
        for tuning in &variants {
            let got = case.run(&client, tuning);
            for (name, (a, b)) in ["q_rot", "k_rot", "k_pool", "v_pool"]
                .iter()
                .zip(got.iter().zip(&expected))
            {
                assert!(
                    a == b,
                    "{geometry:?} {tuning:?}: {name} differs from the default launch"
                );
            }
        }
    }
}
