//! The exact-angle method (host twin of the kernel's) against float64 over the whole i32
//! position range (negative positions included) and head sizes 2..=256: within a few f32
//! roundings of the true angle mod 2π.

#[path = "../../src/testing/rng.rs"]
#[allow(dead_code)]
mod rng;
use rng::Rng;
use rope_pool_kernels::rope::{host_angle, split_turns};
use std::f64::consts::TAU;

fn distance(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(TAU);
    d.min(TAU - d)
}

#[test]
fn exact_angle_error_is_at_f32_rounding_level() {
    let mut rng = Rng::from_state(0x1234_5678_9abc_def0);
    let mut next = || rng.next_u64();
    let mut worst = 0f64;
    for head_dim in (2..=256).step_by(2) {
        for base in [10_000f64, 500_000.0, 1e6] {
            let half = head_dim / 2;
            let inv_freq: Vec<f64> = (0..half)
                .map(|i| base.powf(-2.0 * i as f64 / head_dim as f64))
                .collect();
            let table = split_turns(&inv_freq);
            let mut positions: Vec<i32> = (0..32).map(|_| (next() % (1 << 24)) as i32).collect();
            positions.extend((0..32).map(|_| next() as u32 as i32));
            positions.extend([0, 1, -1, 4095, 4096, 131_071, (1 << 24) - 1, 1 << 24]);
            positions.extend([-(1 << 24), i32::MAX, i32::MIN, i32::MIN + 1, -4097]);
            for &p in &positions {
                for i in 0..half {
                    let truth = p as f64 * f64::powf(base, -2.0 * i as f64 / head_dim as f64);
                    let angle = host_angle(p, std::array::from_fn(|j| table[j * half + i]));
                    worst = worst.max(distance(angle as f64, truth));
                }
            }
        }
    }
    // A handful of f32 roundings of numbers below one turn: ~1e-6 rad.
    eprintln!("worst angle error {worst:e} rad");
    assert!(worst < 2e-6, "worst angle error {worst:e} rad");
}
