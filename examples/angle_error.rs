//! Angle error vs position: the naive f32 angle `f32(position) * f32(inv_freq)` against the
//! exact split-and-reduce angle the kernel and the Flex backend use (its host twin,
//! `rope_pool_kernels::rope::host_angle`), both against float64. Prints a markdown table.
//!
//! `cargo run --release --example angle_error`

use burn_rope_pool::RopePoolConfig;
use rope_pool_kernels::rope::{RopeTable, host_angle};
use std::f64::consts::{PI, TAU};

/// `|a - b|` modulo 2π, in `[0, π]`.
fn angle_distance(a: f64, b: f64) -> f64 {
    let d = (a - b).rem_euclid(TAU);
    d.min(TAU - d)
}

fn main() {
    let head_dim = 128;
    println!("| position | naive f32 angle, max error (rad) | exact f32 angle, max error (rad) |");
    println!("| ---: | ---: | ---: |");
    let positions = [
        1_000i32,
        32_767,
        131_071,
        1_000_000,
        (1 << 24) - 1,
        (1 << 28) + 3,
    ];
    for position in positions.into_iter().chain([i32::MAX, -5, i32::MIN]) {
        let (mut naive, mut exact) = (0f64, 0f64);
        for base in [10_000.0, 500_000.0] {
            let config = RopePoolConfig::new(head_dim, 1, 1).with_rope_base(base);
            let inv_freq = &config.frequencies().expect("a valid config").inv_freq;
            let table = RopeTable::new(inv_freq, None, None, false, 1.0);
            let table = table.values();
            let half = head_dim / 2;
            for i in 0..half {
                let inv_freq = f64::powf(base, -2.0 * i as f64 / head_dim as f64);
                let truth = position as f64 * inv_freq;
                let n = position as f32 * inv_freq as f32;
                let e = host_angle(position, std::array::from_fn(|j| table[j * half + i]));
                naive = naive.max(angle_distance(n as f64, truth));
                exact = exact.max(angle_distance(e as f64, truth));
            }
        }
        assert!(exact <= PI);
        println!("| {position} | {naive:.2e} | {exact:.2e} |");
    }
    println!("\n(head_dim {head_dim}, θ = 10000 and 500000, max over all frequencies)");
}
