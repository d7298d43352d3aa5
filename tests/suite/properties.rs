//! Random shapes against the f64 reference on every device: 1..=300 tokens, 1..=32 heads (GQA
//! and MHA), head_dim 2..=256, pools of 1..=4096 rows, negative and out-of-pool slots, positions
//! up to 65535, every dtype the device computes in. Outputs are poisoned with NaN first.

use crate::common::{Case, assert_close, devices, dtypes};
use burn::tensor::DType;
use burn_rope_pool::{MRope, RopePoolConfig, RopeScaling, RopeStyle};
use proptest::prelude::*;

fn check(case: &Case) {
    for (device_name, device) in devices() {
        for dtype in dtypes(&device) {
            let what = format!(
                "{device_name} {dtype:?} T={} Hq={} Hkv={} D={} P={}",
                case.num_tokens,
                case.config.num_qo_heads,
                case.config.num_kv_heads,
                case.config.head_dim,
                case.pool_size
            );
            let input = case.rounded(dtype);
            let out = input
                .run(&device, dtype)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let expected = input.reference();
            assert_close(&out, &expected, dtype, common_bound(dtype), &what);
            if dtype == DType::F32 {
                for (a, e) in out.q_rot.iter().zip(&expected.q_rot) {
                    assert!((a - e).abs() <= 1e-5, "{what}: q_rot {a} vs {e}");
                }
            }
        }
    }
}

fn common_bound(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        other => burn_rope_pool::testing::tolerance(other),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_shapes_match_reference(
        num_tokens in 1usize..=300,
        num_kv_heads in 1usize..=8,
        group in 1usize..=4,
        half in 1usize..=128,
        pool_size in 1usize..=4096,
        base in prop_oneof![Just(10_000.0), Just(500_000.0), 100.0f64..1e6],
        seed in any::<u64>(),
    ) {
        let config = RopePoolConfig::new(2 * half, num_kv_heads * group, num_kv_heads).with_rope_base(base);
        check(&Case::random(config, num_tokens, pool_size, 65536, seed));
    }
}

#[test]
fn odd_shapes() {
    // (tokens, q heads, kv heads, head_dim, pool)
    let shapes = [
        (1, 1, 1, 2, 1),     // the smallest call
        (1, 32, 8, 128, 16), // decode, Llama-3-8B heads
        (3, 1, 1, 256, 5),   // one head, widest head
        (5, 4, 4, 6, 9),     // MHA, head_dim whose half is odd
        (7, 28, 4, 128, 64), // Qwen2.5-7B GQA
        (300, 2, 1, 2, 4096),
    ];
    for (i, (t, hq, hkv, d, p)) in shapes.into_iter().enumerate() {
        let config = RopePoolConfig::new(d, hq, hkv).with_rope_base(500_000.0);
        check(&Case::random(config, t, p, 65536, i as u64 + 1));
    }
}

#[test]
fn long_positions_are_exact_to_f32_rounding() {
    // Positions across 0..2^24, the last one included, and several head sizes.
    for (i, head_dim) in [2usize, 16, 64, 128, 256].into_iter().enumerate() {
        let config = RopePoolConfig::new(head_dim, 2, 1).with_rope_base(if i % 2 == 0 {
            10_000.0
        } else {
            500_000.0
        });
        let mut case = Case::random(config, 64, 64, 1 << 24, 77 + i as u64);
        case.positions[0] = (1 << 24) - 1;
        case.positions[1] = 131_071;
        case.positions[2] = 1_000_000;
        check(&case);
    }
}

#[test]
fn large_batches_walk_strided_head_groups() {
    // Batches large enough that the launch gives each unit a strided group of several heads
    // (`heads_per_unit`); the shapes above are small enough for one head per unit. 32 + 8 heads
    // go in groups of 2 in f32 (of 4 in 2-byte dtypes); 7 + 3 heads in groups of at most 4 leave
    // uneven groups (4, 3, 3) and a group crossing from q to kv.
    use rope_pool_kernels::rope::{RopePoolGeometry, heads_per_unit};
    // (tokens, q heads, kv heads, head_dim, pool, heads per unit)
    let shapes = [(5000, 32, 8, 32, 6000, 2), (20_000, 7, 3, 32, 16_384, 4)];
    for (i, (t, hq, hkv, d, p, group)) in shapes.into_iter().enumerate() {
        let geometry = RopePoolGeometry::of(&[t, hq, d], &[t, hkv, d], &[p, hkv, d]);
        // With 4-wide f32 vectors (what wgpu picks).
        assert_eq!(heads_per_unit(geometry, d / 2 / 4, 4), group);
        let config = RopePoolConfig::new(d, hq, hkv).with_rope_base(500_000.0);
        check(&Case::random(config, t, p, 1 << 20, 900 + i as u64));
    }
}

/// A random RoPE variant for a head of `head_dim` elements: pair style, rotary dimension, scaling
/// and M-RoPE sections, each drawn from `pick`.
fn variant(head_dim: usize, pick: [u64; 5]) -> RopePoolConfig {
    let half_max = head_dim / 2;
    // An even rotary dimension in 2..=head_dim, the whole head half of the time.
    let rotary_dim = if pick[0].is_multiple_of(2) {
        head_dim
    } else {
        2 * (1 + pick[0] as usize / 2 % half_max)
    };
    let half = rotary_dim / 2;
    let mut config = RopePoolConfig::new(head_dim, 4, 2)
        .with_rope_base(if pick[1].is_multiple_of(2) {
            10_000.0
        } else {
            1e6
        })
        .with_rotary_dim(Some(rotary_dim));
    if pick[1].is_multiple_of(3) {
        config = config.with_style(RopeStyle::Gptj);
    }
    config = config.with_scaling(match pick[2] % 5 {
        0 => RopeScaling::None,
        1 => RopeScaling::Linear { factor: 2.5 },
        2 => RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 512.0,
        },
        3 => {
            let mut yarn = RopeScaling::yarn(4.0, Some(2048.0), Some(8192.0));
            if let RopeScaling::Yarn { truncate, .. } = &mut yarn {
                *truncate = Some(pick[3].is_multiple_of(2));
            }
            yarn
        }
        _ => RopeScaling::LongRope {
            short_factor: (0..half).map(|i| 1.0 + i as f64 / 8.0).collect(),
            long_factor: (0..half).map(|i| 1.0 + i as f64).collect(),
            // Half the calls cross it, half stay below (positions are drawn below 2^16 or 2^24).
            original_max_position_embeddings: Some(if pick[3].is_multiple_of(2) {
                1024.0
            } else {
                1e9
            }),
            max_position_embeddings: Some(131_072.0),
            attention_factor: None,
            factor: None,
        },
    });
    if pick[4].is_multiple_of(3) {
        let t = half / 3;
        let h = (half - t) / 2;
        config = config.with_mrope(Some(MRope {
            section: [t, h, half - t - h],
            interleaved: pick[4].is_multiple_of(2),
        }));
    }
    config
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every variant (and their combinations) on random shapes against the f64 reference, on
    /// every device and dtype, positions up to 2^16 or near 2^24.
    #[test]
    fn random_variants_match_reference(
        num_tokens in 1usize..=64,
        half in 1usize..=64,
        pool_size in 1usize..=256,
        pick in any::<[u64; 5]>(),
        long in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let config = variant(2 * half, pick);
        let max_position = if long { 1 << 24 } else { 1 << 16 };
        let mut case = Case::random(config, num_tokens, pool_size, max_position, seed);
        if long {
            case.positions[0] = (1 << 24) - 1;
        }
        check(&case);
    }
}

#[test]
fn each_variant_at_long_positions() {
    // One case per variant flag with 128-element heads, positions near 2^24, then over all of i32.
    for (i, pick) in [
        [0, 1, 0, 0, 1],
        [0, 3, 0, 0, 1],
        [1, 1, 0, 0, 1],
        [3, 1, 2, 0, 1],
        [0, 1, 3, 0, 1],
        [0, 1, 4, 0, 1],
        [0, 1, 0, 0, 3],
        [0, 1, 0, 0, 0],
        [5, 3, 4, 1, 3],
    ]
    .into_iter()
    .enumerate()
    {
        let config = variant(128, pick);
        let mut case = Case::random(config, 40, 64, 1 << 24, 300 + i as u64);
        case.positions[0] = (1 << 24) - 1;
        case.positions[1] = (1 << 24) - 4096;
        check(&case);
        // The whole i32 range: past 2^24, the extremes, negative positions (rotation by a
        // negative angle).
        let mut rng = crate::common::Rng::new(900 + i as u64);
        for p in case.positions.iter_mut() {
            *p = rng.next_u64() as i32 as i64;
        }
        let extremes = [
            i32::MAX as i64,
            i32::MIN as i64,
            -1,
            1 << 24,
            -(1 << 24) - 1,
        ];
        case.positions[..extremes.len()].copy_from_slice(&extremes);
        check(&case);
    }
}
