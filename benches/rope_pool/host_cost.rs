//! `--host-cost`: the host-inclusive cost per call of back-to-back calls with one sync at the
//! end, beside Burn's own `q + 1` and `q.sum_dim(2)`; and the loops (also `--profile`'s).

use crate::cases::{Inputs, Layout, MODELS, Shape, inputs, random_pools, variant_config};
#[cfg(feature = "cube")]
use crate::instruments::LaunchCounter;
use crate::instruments::{PerCall, median, thread_cpu, wall_per_call};
use burn::tensor::{DType, Device, Tensor};
use burn_rope_pool::{RopePoolConfig, check_rope_pool_fused, rope_pool_fused};

/// One call of the op per `f(sync)` on `x` (of `shape`), pools passed through (in place),
/// outputs kept alive until the sync (`f(true)`, which reads q_rot back).
pub fn fused_loop<'a>(
    device: &Device,
    shape: Shape,
    x: &'a Inputs,
    config: &'a RopePoolConfig,
) -> impl FnMut(bool) + 'a {
    let (mut k_pool, mut v_pool) = random_pools(device, shape);
    let mut kept = Vec::new();
    move |sync| {
        let (kp, vp) = (k_pool.take().unwrap(), v_pool.take().unwrap());
        let inputs = x.call(kp, vp);
        let out = rope_pool_fused(inputs, config).expect("valid call");
        k_pool = Some(out.k_pool);
        v_pool = Some(out.v_pool);
        kept.push((out.q_rot, out.k_rot));
        if sync {
            let _ = kept[kept.len() - 1].0.clone().slice(0..1).into_data();
            kept.clear();
        }
    }
}

/// Burn's `q + 1`: the fusion stream merges ~50 of them into one kernel (0.02 launches per
/// call on the H200), so it is a floor for any op that launches a kernel of its own.
pub fn add_one(q: Tensor<3>) -> Tensor<3> {
    q + 1.0
}

/// Burn's `q.sum_dim(2)`: a reduction, which the fusion stream launches once per call (the
/// cost of one Burn kernel per call, what a custom op like ours cannot go below).
pub fn sum_last(q: Tensor<3>) -> Tensor<3> {
    q.sum_dim(2)
}

/// A Burn op of `q` ([`add_one`], [`sum_last`]) per `f(sync)`, outputs kept alive until the
/// sync (which reads one back).
pub fn burn_loop(q: &Tensor<3>, op: fn(Tensor<3>) -> Tensor<3>) -> impl FnMut(bool) + '_ {
    let mut kept = Vec::new();
    move |sync| {
        kept.push(op(q.clone()));
        if sync {
            let _ = kept[kept.len() - 1].clone().slice(0..1).into_data();
            kept.clear();
        }
    }
}

/// Host-inclusive cost per call of `calls` back-to-back fused calls ([`fused_loop`]).
fn fused_per_call(
    device: &Device,
    shape: Shape,
    x: &Inputs,
    config: &RopePoolConfig,
    calls: usize,
) -> PerCall {
    wall_per_call(calls, fused_loop(device, shape, x, config))
}

/// The `--host-cost` table on `device`: the op as `rope_pool_fused` returns everything, with
/// `k_rot` off, and with `k_rot` off on q/k/v views of one fused QKV projection (what the
/// decoder's layers could pass), beside Burn's `q + 1` and `q.sum_dim(2)`.
pub fn host_cost(device: &Device, name: &str, quick: bool, repeats: usize) {
    println!("\n### {name}: host-inclusive cost per call ({device:?}), median of {repeats} runs\n");
    println!(
        "| dtype | model | tokens | calls | fused µs/call (range) | no k_rot | no k_rot, QKV views | `q + 1` µs/call (range) | `q.sum_dim(2)` µs/call | fused − `q + 1` | allocations/call fused, `q + 1` | kernel launches/call fused, `q + 1` | checks only µs/call (allocations) |"
    );
    println!(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    // Counts launches for the whole table (a relaxed load and a lock per launch).
    #[cfg(feature = "cube")]
    let _launches = cubecl::logging::LaunchObservation::new(std::sync::Arc::new(LaunchCounter));
    let mut threads = Vec::new();
    for dtype in [DType::F16, DType::F32] {
        if !device.supports_dtype(dtype) {
            continue;
        }
        for model in [MODELS[0], MODELS[1]] {
            for tokens in [1usize, 8, 32, 512] {
                let calls = if tokens >= 512 { 200 } else { 2000 };
                let pool = if quick { 16_384 } else { 131_072 };
                let shape = Shape {
                    dtype,
                    tokens,
                    model,
                    pool,
                };
                let config = variant_config("neox", model);
                let x = inputs(device, shape, Layout::random(7));
                let views = Layout {
                    views: true,
                    ..Layout::random(7)
                };
                let views = inputs(device, shape, views);
                let before = thread_cpu();
                let fused = fused_per_call(device, shape, &x, &config, calls);
                let after = thread_cpu();
                let busy: Vec<String> = after
                    .iter()
                    .map(|(name, t)| (name, t - before.get(name).copied().unwrap_or(0.0)))
                    .filter(|(_, t)| *t > 0.0)
                    .map(|(name, t)| format!("{name} {:.1}", t * 1e6 / (calls + 50) as f64))
                    .collect();
                let model = model.name;
                threads.push(format!("{dtype:?} {model} {tokens}: {}", busy.join(", ")));
                let (kp, vp) = random_pools(device, shape);
                let (kp, vp) = (kp.unwrap(), vp.unwrap());
                let checked = wall_per_call(calls, |_| {
                    let inputs = x.call(kp.clone(), vp.clone());
                    check_rope_pool_fused(&inputs, &config).expect("valid call");
                });
                let no_k_rot = config.clone().with_k_rot(false);
                // The loops take turns, `repeats` times; each column is the median of its runs
                // (the fused and `q + 1` columns with their range).
                let (mut fused_runs, mut lean, mut lean_views, mut add, mut sum) = (
                    vec![fused.wall],
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                    Vec::new(),
                );
                let mut add_counts = (0.0, 0.0);
                for repeat in 0..repeats.max(1) {
                    if repeat > 0 {
                        fused_runs.push(fused_per_call(device, shape, &x, &config, calls).wall);
                    }
                    lean.push(fused_per_call(device, shape, &x, &no_k_rot, calls).wall);
                    lean_views.push(fused_per_call(device, shape, &views, &no_k_rot, calls).wall);
                    let per_call = wall_per_call(calls, burn_loop(&x.q, add_one));
                    add.push(per_call.wall);
                    add_counts = (per_call.allocations, per_call.launches);
                    sum.push(wall_per_call(calls, burn_loop(&x.q, sum_last)).wall);
                }
                let us = |runs: &mut Vec<f64>| median(runs) * 1e6;
                let range = |runs: &[f64]| {
                    let (lo, hi) = runs
                        .iter()
                        .fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
                    format!("{:.0}–{:.0}", lo * 1e6, hi * 1e6)
                };
                let (fused_us, add_us) = (us(&mut fused_runs), us(&mut add));
                println!(
                    "| {dtype:?} | {model} | {tokens} | {calls} | {fused_us:.1} ({}) | {:.1} | {:.1} | {add_us:.1} ({}) | {:.1} | {:+.1} | {:.0}, {:.0} | {:.2}, {:.2} | {:.2} ({:.0}) |",
                    range(&fused_runs),
                    us(&mut lean),
                    us(&mut lean_views),
                    range(&add),
                    us(&mut sum),
                    fused_us - add_us,
                    fused.allocations,
                    add_counts.0,
                    fused.launches,
                    add_counts.1,
                    checked.wall * 1e6,
                    checked.allocations,
                );
            }
        }
    }
    println!("\nCPU µs per fused call by thread (main = the caller; CubeCL's DSU/DSD threads):\n");
    for line in threads {
        println!("- {line}");
    }
}
