//! Benchmark of `rope_pool_fused` against the unfused Burn path, on every backend the build
//! enables (or `--device NAME`). Device time from the backend's profiler (timestamp queries on
//! wgpu), medians of repeated windows, random inputs; bytes, GB/s and the fraction of the
//! memory-bandwidth floor, with the copy bandwidth measured in the same run on the same device.
//!
//! `cargo bench --bench rope_pool -- [--device wgpu] [--quick] [--json OUT.json]`; the host cost
//! per call of back-to-back calls with `--host-cost`, and where it goes with
//! `cargo bench --features profile --bench rope_pool -- --profile [--profile-out DIR]`.

use burn::tensor::{DType, Device, Distribution, Int, Tensor, TensorData};
use burn_rope_pool::op::unfused::rope_pool_unfused;
use burn_rope_pool::testing::Rng;
use burn_rope_pool::{
    MRope, RopePoolConfig, RopePoolInputs, RopeScaling, RopeStyle, check_rope_pool_fused,
    rope_pool_fused,
};
use clap::Parser;
use std::fmt::Write as _;
use std::time::Duration;

#[cfg(feature = "profile")]
mod host_profile;

#[derive(Parser)]
struct Args {
    /// Devices to run on (default: every one this build enables, wgpu only when it has an adapter).
    #[arg(long)]
    device: Vec<String>,
    /// A short run for CPU backends: fewer token counts, smaller pools.
    #[arg(long)]
    quick: bool,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Timed windows per row (the median is reported).
    #[arg(long, default_value_t = 15)]
    windows: usize,
    /// Copy bandwidth (GB/s, bytes read + written) to take as the floor's ceiling instead of
    /// this program's own `x + 1` measurement, e.g. the PyTorch device-to-device copy the anchor
    /// script measures on the same device in the same run. Both are printed.
    #[arg(long)]
    copy_bandwidth: Option<f64>,
    /// Only these token counts (default: all of the run's).
    #[arg(long, value_delimiter = ',')]
    tokens: Vec<usize>,
    /// Skip the unfused baseline and the pool-size rows.
    #[arg(long)]
    fused_only: bool,
    /// Token `i` writes pool row `i` (streaming writes) instead of a random row of the pool:
    /// separates the cost of the scatter from the rest of the kernel.
    #[arg(long)]
    sequential_slots: bool,
    /// Also time the RoPE variants (GPT-J pairs, partial rotary 0.25, llama3, YaRN, LongRoPE,
    /// M-RoPE) on the llama3-8b shape beside plain NeoX, at these token counts (e.g. 4096,32768).
    #[arg(long, value_delimiter = ',')]
    variants: Vec<usize>,
    /// Instead of device time: the host-inclusive cost per call of N back-to-back calls with one
    /// sync at the end (what a decode step of N layers pays), for 1, 8, 32 and 512 tokens, beside
    /// Burn's `x + 1` and `x.sum_dim(2)` of q in the same loop (f16 and f32; llama3-8b and
    /// 70b-tp8 shapes), with heap allocations and kernel launches per call.
    #[arg(long)]
    host_cost: bool,
    /// With `--host-cost`: runs of each loop (taking turns); the table gives their median.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Instead of timing: where the host cost of a call goes, from an in-process sampling profile
    /// of the `--host-cost` loop (f16 llama3-8b, 1 and 32 tokens; the op, the op with `k_rot` off,
    /// Burn's `q + 1` and `q.sum_dim(2)`). Needs a build with the `profile` feature.
    #[arg(long)]
    profile: bool,
    /// With `--profile`: seconds of calls per loop.
    #[arg(long, default_value_t = 2.0)]
    profile_seconds: f64,
    /// With `--profile`: also write each loop's samples here as collapsed stacks.
    #[arg(long)]
    profile_out: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The process's heap allocations, counted (host-cost mode reports them per call).
struct CountingAllocator;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// Safety: forwards every call to the system allocator unchanged; only counts.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Heap allocations (all threads) so far.
fn allocations() -> u64 {
    ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Kernel launches of every CubeCL client, counted while a [`LaunchCounter`] observes.
static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts CubeCL's kernel launches (host-cost mode reports them per call).
#[cfg(feature = "cube")]
struct LaunchCounter;

#[cfg(feature = "cube")]
impl cubecl::logging::LaunchObserver for LaunchCounter {
    fn launched(&self, _kernel: &'static str) {
        LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Heap allocations and kernel launches so far.
fn counts() -> [u64; 2] {
    [
        allocations(),
        LAUNCHES.load(std::sync::atomic::Ordering::Relaxed),
    ]
}

/// CPU time (user + system, seconds) each thread of this process has used, summed by thread
/// name (CubeCL's device and stream threads, the main thread): a thread-level host profile.
fn thread_cpu() -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    let tick = 100.0; // USER_HZ on Linux
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return by_name;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let (Ok(stat), Ok(comm)) = (
            std::fs::read_to_string(path.join("stat")),
            std::fs::read_to_string(path.join("comm")),
        ) else {
            continue;
        };
        // Fields after the parenthesised name: state is field 3; utime, stime are 14 and 15.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // Thread names differ by an index (DSD-4-0); group by their prefix.
        let name = comm.trim().split('-').next().unwrap_or("").to_string();
        *by_name.entry(name).or_insert(0.0) += (ticks(11) + ticks(12)) / tick;
    }
    by_name
}

/// (name, q heads, kv heads), head_dim 128.
const MODELS: [(&str, usize, usize); 3] = [
    ("llama3-8b", 32, 8),
    ("llama3-70b-tp8", 8, 1),
    ("qwen2.5-7b", 28, 4),
];
const HEAD_DIM: usize = 128;

/// Median device time of one call of `f`, over `windows` profiling windows of one call each (one
/// call per window: fusion would otherwise merge the element-wise work of successive calls, and
/// a window over many small calls counts the host gaps between them).
fn time_per_call(device: &Device, windows: usize, mut f: impl FnMut() + Send) -> Duration {
    let mut samples = Vec::with_capacity(windows);
    for _ in 0..windows + 2 {
        let (_, duration) = device
            .profile_with(burn::tensor::ProfileOptions::default().flush(), || {
                f();
            })
            .expect("profile window");
        let ticks = futures_lite::future::block_on(duration.resolve());
        if let Some(ticks) = ticks {
            samples.push(ticks.duration());
        }
    }
    samples.drain(..2.min(samples.len())); // warm-up windows
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Device time of Burn's own element-wise copy moving `bytes` (read + written): `x + 1` over a
/// `dtype` tensor of `bytes / (2 * size)` elements, results kept alive until the window closes so
/// no work is skipped. What the same launch path reaches on the simplest memory-bound kernel with
/// the row's element type (an f16 copy moves half the bytes per lane of an f32 one).
fn copy_time(device: &Device, bytes: usize, windows: usize, dtype: DType) -> Duration {
    let elements = (bytes / (2 * dtype.size())).max(1);
    let x = Tensor::<1>::random([elements], Distribution::Default, (device, dtype));
    let mut kept = Vec::new();
    let t = time_per_call(device, windows, || kept.push(x.clone() + 1.0));
    drop(kept);
    t
}

/// Copy bandwidth (bytes read + written per second) of [`copy_time`] over `elements` f32.
fn copy_bandwidth(device: &Device, elements: usize, windows: usize) -> f64 {
    let bytes = 2 * elements * 4;
    bytes as f64 / copy_time(device, bytes, windows, DType::F32).as_secs_f64()
}

/// The variants of the `--variants` rows: plain NeoX first, then each variant on its own, as a
/// model's `config.json` would set it (head_dim 128, θ = 500000).
const VARIANTS: [&str; 9] = [
    "neox", "gptj", "partial", "llama3", "yarn", "longrope", "mrope", "views", "no-k-rot",
];

fn variant_config(variant: &str, hq: usize, hkv: usize) -> RopePoolConfig {
    let config = RopePoolConfig::new(HEAD_DIM, hq, hkv).with_rope_base(500_000.0);
    match variant {
        "gptj" => config.with_style(RopeStyle::Gptj),
        "partial" => config.with_rotary_dim(Some(HEAD_DIM / 4)),
        "llama3" => config.with_scaling(RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        }),
        "yarn" => config.with_scaling(RopeScaling::yarn(4.0, Some(32768.0), Some(131072.0))),
        "longrope" => config.with_scaling(RopeScaling::LongRope {
            short_factor: (0..HEAD_DIM / 2).map(|i| 1.0 + i as f64 / 64.0).collect(),
            long_factor: (0..HEAD_DIM / 2).map(|i| 1.0 + i as f64).collect(),
            original_max_position_embeddings: Some(4096.0),
            max_position_embeddings: Some(131072.0),
            attention_factor: None,
            factor: None,
        }),
        "mrope" => config.with_mrope(Some(MRope {
            section: [16, 24, 24],
            interleaved: false,
        })),
        // Keys to the pool rows only (what the attention layer and the decoder use).
        "no-k-rot" => config.with_k_rot(false),
        // "views": plain NeoX on q, k, v sliced from one fused QKV projection (see `inputs`).
        _ => config,
    }
}

struct Inputs {
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    positions: Tensor<1, Int>,
    /// M-RoPE rows `[3, T]` (the 1-D positions repeated with offsets).
    mrope_positions: Tensor<2, Int>,
    slots: Tensor<1, Int>,
}

#[allow(clippy::too_many_arguments)]
fn inputs(
    device: &Device,
    dtype: DType,
    tokens: usize,
    hq: usize,
    hkv: usize,
    pool: usize,
    seed: u64,
    sequential_slots: bool,
    views: bool,
) -> Inputs {
    let dist = Distribution::Normal(0.0, 1.0);
    let mut rng = Rng::from_state(seed | 1);
    let mut next = move || rng.next_u64();
    // Distinct valid slots (a partial Fisher–Yates over the pool, or rows 0, 1, 2, ... in
    // order), positions below 131072. The shuffle's draws are made in both orders, so the
    // positions, drawn after them, are the same either way and an A/B differs only in the slots.
    let mut rows: Vec<i32> = (0..pool as i32).collect();
    for i in 0..tokens {
        let j = i + (next() as usize) % (pool - i);
        if !sequential_slots {
            rows.swap(i, j);
        }
    }
    let slots = rows[..tokens].to_vec();
    let positions: Vec<i32> = (0..tokens).map(|_| (next() % 131_072) as i32).collect();
    let rows: Vec<i32> = (0..3)
        .flat_map(|r| positions.iter().map(move |p| p / (r + 1)))
        .collect();
    // With `views`, q, k and v are head slices of one `[T, Hq + 2·Hkv, D]` projection output.
    let (q, k, v) = if views {
        let qkv = Tensor::<3>::random([tokens, hq + 2 * hkv, HEAD_DIM], dist, (device, dtype));
        (
            qkv.clone().slice([0..tokens, 0..hq]),
            qkv.clone().slice([0..tokens, hq..hq + hkv]),
            qkv.slice([0..tokens, hq + hkv..hq + 2 * hkv]),
        )
    } else {
        (
            Tensor::random([tokens, hq, HEAD_DIM], dist, (device, dtype)),
            Tensor::random([tokens, hkv, HEAD_DIM], dist, (device, dtype)),
            Tensor::random([tokens, hkv, HEAD_DIM], dist, (device, dtype)),
        )
    };
    Inputs {
        mrope_positions: Tensor::from_data(TensorData::new(rows, [3, tokens]), device),
        q,
        k,
        v,
        positions: Tensor::from_data(TensorData::new(positions, [tokens]), device),
        slots: Tensor::from_data(TensorData::new(slots, [tokens]), device),
    }
}

/// Random normal k and v pools of `pool` rows, held in options so a call can take them.
fn random_pools(
    device: &Device,
    dtype: DType,
    pool: usize,
    hkv: usize,
) -> (Option<Tensor<3>>, Option<Tensor<3>>) {
    let pool = || {
        let dist = Distribution::Normal(0.0, 1.0);
        Some(Tensor::<3>::random(
            [pool, hkv, HEAD_DIM],
            dist,
            (device, dtype),
        ))
    };
    (pool(), pool())
}

#[derive(Debug)]
struct Row {
    device: String,
    dtype: DType,
    model: String,
    tokens: usize,
    pool: usize,
    bytes: usize,
    fused: Duration,
    /// Burn's `x + 1` moving the same bytes in the row's dtype ([`copy_time`]).
    copy: Duration,
    unfused: Option<Duration>,
    bandwidth: f64,
}

impl Row {
    fn floor(&self) -> f64 {
        self.bytes as f64 / self.bandwidth
    }
    fn gbps(&self) -> f64 {
        self.bytes as f64 / self.fused.as_secs_f64() / 1e9
    }
    fn of_floor(&self) -> f64 {
        self.floor() / self.fused.as_secs_f64()
    }
}

/// The fewest bytes the op must move: read q, k, v, positions, slots; write q_rot, k_rot and the
/// k/v pool rows of every (valid) token. Per token and head row: q twice (read, write), kv five
/// times (read k and v; write k_rot, the k pool row and the v pool row).
fn min_bytes(tokens: usize, hq: usize, hkv: usize, elem: usize) -> usize {
    tokens * HEAD_DIM * elem * (2 * hq + 5 * hkv) + tokens * 8
}

#[allow(clippy::too_many_arguments)]
fn bench_row(
    device: &Device,
    name: &str,
    dtype: DType,
    model: &'static str,
    variant: &'static str,
    hq: usize,
    hkv: usize,
    tokens: usize,
    pool: usize,
    with_unfused: bool,
    bandwidth: f64,
    windows: usize,
    sequential_slots: bool,
) -> Row {
    let config = variant_config(variant, hq, hkv);
    let mrope = config.mrope.is_some();
    let (mut k_pool, mut v_pool) = random_pools(device, dtype, pool, hkv);
    let x = inputs(
        device,
        dtype,
        tokens,
        hq,
        hkv,
        pool,
        tokens as u64 * 7919 + hq as u64,
        sequential_slots,
        variant == "views",
    );
    let windows = if tokens >= 4096 { windows } else { 3 * windows };
    let mut run = |fused: bool| {
        let (kp, vp) = (k_pool.take().unwrap(), v_pool.take().unwrap());
        let (q, k, v, slots) = (x.q.clone(), x.k.clone(), x.v.clone(), x.slots.clone());
        let inputs = if mrope {
            let rows = x.mrope_positions.clone();
            RopePoolInputs::new(q, k, v, rows, slots, kp, vp)
        } else {
            RopePoolInputs::new(q, k, v, x.positions.clone(), slots, kp, vp)
        };
        let out = if fused {
            rope_pool_fused(inputs, &config).expect("valid call")
        } else {
            rope_pool_unfused(inputs, &config)
        };
        k_pool = Some(out.k_pool);
        v_pool = Some(out.v_pool);
    };
    let fused = time_per_call(device, windows, || run(true));
    let unfused = with_unfused.then(|| time_per_call(device, windows.min(9), || run(false)));
    let mut bytes = min_bytes(tokens, hq, hkv, dtype.size());
    if !config.k_rot {
        bytes -= tokens * hkv * HEAD_DIM * dtype.size();
    }
    Row {
        device: name.to_string(),
        dtype,
        model: if variant == "neox" {
            model.to_string()
        } else {
            format!("{model} {variant}")
        },
        tokens,
        pool,
        bytes,
        fused,
        copy: copy_time(device, bytes, windows, dtype),
        unfused,
        bandwidth,
    }
}

/// Wall time per call of `calls` back-to-back `f(false)` with one sync at the end — `f(true)`,
/// which reads a result of that call back (what makes every queued call complete) — after 50
/// warm-up calls; and heap allocations per call (every thread's, the device's included).
fn wall_per_call(calls: usize, mut f: impl FnMut(bool)) -> PerCall {
    for i in 0..50 {
        f(i == 49);
    }
    let (start, before) = (std::time::Instant::now(), counts());
    for i in 0..calls {
        f(i + 1 == calls);
    }
    let wall = start.elapsed().as_secs_f64() / calls as f64;
    let after = counts();
    let per_call = |i: usize| (after[i] - before[i]) as f64 / calls as f64;
    PerCall {
        wall,
        allocations: per_call(0),
        launches: per_call(1),
    }
}

/// What one call of a loop costs ([`wall_per_call`]).
struct PerCall {
    /// Seconds of wall time.
    wall: f64,
    /// Heap allocations, every thread's.
    allocations: f64,
    /// Kernel launches (while a [`LaunchCounter`] observes; else 0).
    launches: f64,
}

/// One call of the op per `f(sync)` on `x`, pools passed through (in place), outputs kept alive
/// until the sync (`f(true)`, which reads q_rot back).
fn fused_loop<'a>(
    device: &Device,
    dtype: DType,
    x: &'a Inputs,
    config: &'a RopePoolConfig,
    pool: usize,
) -> impl FnMut(bool) + 'a {
    let (mut k_pool, mut v_pool) = random_pools(device, dtype, pool, config.num_kv_heads);
    let mut kept = Vec::new();
    move |sync| {
        let (kp, vp) = (k_pool.take().unwrap(), v_pool.take().unwrap());
        let inputs = RopePoolInputs::new(
            x.q.clone(),
            x.k.clone(),
            x.v.clone(),
            x.positions.clone(),
            x.slots.clone(),
            kp,
            vp,
        );
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
fn add_one(q: Tensor<3>) -> Tensor<3> {
    q + 1.0
}

/// Burn's `q.sum_dim(2)`: a reduction, which the fusion stream launches once per call (the
/// cost of one Burn kernel per call, what a custom op like ours cannot go below).
fn sum_last(q: Tensor<3>) -> Tensor<3> {
    q.sum_dim(2)
}

/// A Burn op of `q` ([`add_one`], [`sum_last`]) per `f(sync)`, outputs kept alive until the
/// sync (which reads one back).
fn burn_loop(q: &Tensor<3>, op: fn(Tensor<3>) -> Tensor<3>) -> impl FnMut(bool) + '_ {
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
    dtype: DType,
    x: &Inputs,
    config: &RopePoolConfig,
    pool: usize,
    calls: usize,
) -> PerCall {
    wall_per_call(calls, fused_loop(device, dtype, x, config, pool))
}

/// The median of `runs` (sorts them).
fn median(runs: &mut [f64]) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

/// The `--host-cost` table on `device`: the op as `rope_pool_fused` returns everything, with
/// `k_rot` off, and with `k_rot` off on q/k/v views of one fused QKV projection (what the
/// decoder's layers could pass), beside Burn's `q + 1` and `q.sum_dim(2)`.
fn host_cost(device: &Device, name: &str, quick: bool, repeats: usize) {
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
        for (model, hq, hkv) in [MODELS[0], MODELS[1]] {
            for tokens in [1usize, 8, 32, 512] {
                let calls = if tokens >= 512 { 200 } else { 2000 };
                let pool = if quick { 16_384 } else { 131_072 };
                let config = variant_config("neox", hq, hkv);
                let x = inputs(device, dtype, tokens, hq, hkv, pool, 7, false, false);
                let views = inputs(device, dtype, tokens, hq, hkv, pool, 7, false, true);
                let before = thread_cpu();
                let fused = fused_per_call(device, dtype, &x, &config, pool, calls);
                let after = thread_cpu();
                let busy: Vec<String> = after
                    .iter()
                    .map(|(name, t)| (name, t - before.get(name).copied().unwrap_or(0.0)))
                    .filter(|(_, t)| *t > 0.0)
                    .map(|(name, t)| format!("{name} {:.1}", t * 1e6 / (calls + 50) as f64))
                    .collect();
                threads.push(format!("{dtype:?} {model} {tokens}: {}", busy.join(", ")));
                let (kp, vp) = random_pools(device, dtype, pool, hkv);
                let (kp, vp) = (kp.unwrap(), vp.unwrap());
                let checked = wall_per_call(calls, |_| {
                    let inputs = RopePoolInputs::new(
                        x.q.clone(),
                        x.k.clone(),
                        x.v.clone(),
                        x.positions.clone(),
                        x.slots.clone(),
                        kp.clone(),
                        vp.clone(),
                    );
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
                        fused_runs
                            .push(fused_per_call(device, dtype, &x, &config, pool, calls).wall);
                    }
                    lean.push(fused_per_call(device, dtype, &x, &no_k_rot, pool, calls).wall);
                    lean_views
                        .push(fused_per_call(device, dtype, &views, &no_k_rot, pool, calls).wall);
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

/// The `--profile` tables on `device` (see [`host_profile`]).
#[cfg(feature = "profile")]
fn profile(device: &Device, name: &str, quick: bool, seconds: f64, out: Option<&std::path::Path>) {
    let (model, hq, hkv) = MODELS[0];
    let pool = if quick { 16_384 } else { 131_072 };
    let dtype = DType::F16;
    println!("\n### {name}: where a call's host time goes ({device:?}, {dtype:?} {model})");
    let config = variant_config("neox", hq, hkv);
    let no_k_rot = config.clone().with_k_rot(false);
    for tokens in [1usize, 32] {
        let x = inputs(device, dtype, tokens, hq, hkv, pool, 7, false, false);
        let title = |what: &str| format!("{what}, {tokens} tokens");
        let file = |what: &str| format!("{name}-{what}-{tokens}");
        let loops: [(&str, &str, Box<dyn FnMut(bool) + '_>); 4] = [
            (
                "rope_pool_fused",
                "fused",
                Box::new(fused_loop(device, dtype, &x, &config, pool)),
            ),
            (
                "rope_pool_fused, k_rot off",
                "no-k-rot",
                Box::new(fused_loop(device, dtype, &x, &no_k_rot, pool)),
            ),
            ("Burn's q + 1", "add", Box::new(burn_loop(&x.q, add_one))),
            (
                "Burn's q.sum_dim(2)",
                "sum",
                Box::new(burn_loop(&x.q, sum_last)),
            ),
        ];
        for (what, short, f) in loops {
            let text =
                host_profile::profile(thread_cpu, &title(what), &file(short), seconds, out, f);
            println!("{text}");
        }
    }
}

fn main() {
    let args = Args::parse();
    let names = if args.device.is_empty() {
        // Every device this build can open (flex, wgpu, cuda), GPUs only with a usable adapter.
        ["flex", "wgpu", "cuda"]
            .into_iter()
            .filter(|name| {
                burn_rope_pool::testing::device_by_name(name)
                    .is_ok_and(|d| *name == "flex" || burn_rope_pool::testing::device_works(&d))
            })
            .map(String::from)
            .collect()
    } else {
        args.device.clone()
    };
    if args.profile {
        #[cfg(feature = "profile")]
        for name in &names {
            let device = burn_rope_pool::testing::device_by_name(name).expect("device");
            profile(
                &device,
                name,
                args.quick,
                args.profile_seconds,
                args.profile_out.as_deref(),
            );
        }
        #[cfg(not(feature = "profile"))]
        eprintln!("--profile needs a build with the `profile` feature");
        return;
    }
    if args.host_cost {
        for name in &names {
            let device = burn_rope_pool::testing::device_by_name(name).expect("device");
            host_cost(&device, name, args.quick, args.repeats);
        }
        return;
    }
    let mut rows = Vec::new();
    let mut table = String::new();
    for name in &names {
        let device = burn_rope_pool::testing::device_by_name(name).expect("device");
        let cpu = name == "flex";
        let quick = args.quick || cpu;
        let measured = copy_bandwidth(&device, if quick { 1 << 24 } else { 1 << 28 }, args.windows);
        let bandwidth = args.copy_bandwidth.map_or(measured, |gbps| gbps * 1e9);
        let source = match args.copy_bandwidth {
            Some(_) => "given with --copy-bandwidth",
            None => "this run's `x + 1`",
        };
        let _ = writeln!(
            table,
            "\n### {name} ({device:?})\n\ncopy bandwidth: `x + 1` through Burn {:.1} GB/s; floor uses {:.1} GB/s ({source})\n",
            measured / 1e9,
            bandwidth / 1e9
        );
        let _ = writeln!(
            table,
            "| dtype | model | tokens | pool | fused µs | GB/s | % floor | copy µs (% floor) | unfused µs | speed-up |"
        );
        let _ = writeln!(
            table,
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        let tokens: &[usize] = if quick {
            &[1, 32, 512]
        } else {
            &[1, 32, 512, 4096, 32768]
        };
        let pool = if quick { 16_384 } else { 131_072 };
        let mut push = |row: Row, table: &mut String| {
            let (unfused, speedup) = match row.unfused {
                Some(u) => (
                    format!("{:.1}", u.as_secs_f64() * 1e6),
                    format!("{:.1}×", u.as_secs_f64() / row.fused.as_secs_f64()),
                ),
                None => ("–".into(), "–".into()),
            };
            let _ = writeln!(
                table,
                "| {:?} | {} | {} | {} | {:.1} | {:.0} | {:.0}% | {:.1} ({:.0}%) | {} | {} |",
                row.dtype,
                row.model,
                row.tokens,
                row.pool,
                row.fused.as_secs_f64() * 1e6,
                row.gbps(),
                100.0 * row.of_floor(),
                row.copy.as_secs_f64() * 1e6,
                100.0 * row.floor() / row.copy.as_secs_f64(),
                unfused,
                speedup
            );
            eprintln!("{row:?}");
            rows.push(row);
        };
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            if !device.supports_dtype(dtype) {
                let _ = writeln!(
                    table,
                    "| {dtype:?} | (not supported by this device) | | | | | | | | |"
                );
                continue;
            }
            for (model, hq, hkv) in MODELS {
                for &t in tokens
                    .iter()
                    .filter(|t| args.tokens.is_empty() || args.tokens.contains(t))
                {
                    push(
                        bench_row(
                            &device,
                            name,
                            dtype,
                            model,
                            "neox",
                            hq,
                            hkv,
                            t,
                            pool,
                            !args.fused_only,
                            bandwidth,
                            args.windows,
                            args.sequential_slots,
                        ),
                        &mut table,
                    );
                }
            }
        }
        // The variants beside plain NeoX, same shape and run (fused only).
        for dtype in [DType::F16, DType::F32] {
            for &t in &args.variants {
                for variant in VARIANTS {
                    if device.supports_dtype(dtype) {
                        let (model, hq, hkv) = MODELS[0];
                        let row = bench_row(
                            &device,
                            name,
                            dtype,
                            model,
                            variant,
                            hq,
                            hkv,
                            t,
                            pool,
                            false,
                            bandwidth,
                            args.windows,
                            args.sequential_slots,
                        );
                        push(row, &mut table);
                    }
                }
            }
        }
        // The pool size must not matter (in-place update): same call, small and huge pool
        // (Llama-3-70B/TP8 rows: 1 kv head, so a 1M-row f16 pool is 256 MiB per pool).
        let t = if quick { 512 } else { 4096 };
        let dtype = DType::F16;
        if device.supports_dtype(dtype) && !args.fused_only {
            for pool in if quick {
                [4096, 65_536]
            } else {
                [4096, 1_048_576]
            } {
                push(
                    bench_row(
                        &device,
                        name,
                        dtype,
                        "llama3-70b-tp8",
                        "neox",
                        8,
                        1,
                        t,
                        pool,
                        false,
                        bandwidth,
                        args.windows,
                        args.sequential_slots,
                    ),
                    &mut table,
                );
            }
        }
    }
    println!("{table}");
    if let Some(path) = args.json {
        let json: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "{{\"device\":\"{}\",\"dtype\":\"{:?}\",\"model\":\"{}\",\"tokens\":{},\"pool\":{},\"bytes\":{},\"fused_us\":{:.3},\"copy_us\":{:.3},\"unfused_us\":{},\"copy_bandwidth_gbps\":{:.1},\"gbps\":{:.1},\"fraction_of_floor\":{:.4}}}",
                    r.device, r.dtype, r.model, r.tokens, r.pool, r.bytes, r.fused.as_secs_f64() * 1e6,
                    r.copy.as_secs_f64() * 1e6,
                    r.unfused.map_or("null".into(), |u| format!("{:.3}", u.as_secs_f64() * 1e6)),
                    r.bandwidth / 1e9, r.gbps(), r.of_floor()
                )
            })
            .collect();
        std::fs::write(path, format!("[\n{}\n]\n", json.join(",\n"))).expect("write json");
    }
}
