//! Device time of `pool_attention` against the K/V-read floor, beside the gather path it
//! replaces (each sequence's rows gathered with `select`, kv heads expanded, matmul + mask +
//! f32 softmax + matmul: the crate's attention before `pool_attention`, and what a Burn user
//! writes), on the Llama-3-8B layer shape (32 q / 8 kv heads, head_dim 128), rows scattered at
//! random over the pool:
//! - decode at (batch, keys) = (1, 4096), (1, 32768), (8, 4096), (64, 1024), (64, 4096);
//! - prefill of one 4096-token prompt and of 64 prompts of 512 tokens (causal);
//!
//! in f16 and f32, with the host-inclusive cost per call of back-to-back calls. The gather path
//! is skipped ("-") where its largest buffer passes 1 GiB (wgpu's limit is 2 GiB per buffer). The floor is the
//! K/V rows' bytes (plus q and out) at the copy bandwidth measured in the same run. "plan µs" is
//! the host time of building a step's plan (its arrays and the indices' upload), paid once per
//! step for all layers.
//!
//! Prefill rows also give the attention's rate in TFLOPS (two products of 2 flops a visible
//! (query, key) pair per head element). `--query-tiles on|off` forces the query-tile kernel
//! for every row or keeps it off (`PoolAttentionConfig::query_tiles`); the default is the normal
//! launch.
//!
//! `cargo bench --bench pool_attention -- [--device wgpu] [--dtypes f16,f32] [--quick]
//!  [--decode-only | --prefill-only] [--seqs N] [--keys N] [--query-tiles auto|on|off]
//!  [--json OUT.json]`

#![allow(clippy::single_range_in_vec_init)] // `slice([a..b])` slices the first axis

#[path = "rope_pool/instruments.rs"]
#[allow(dead_code)] // the attention bench uses the timing loops, not every instrument
mod instruments;

use burn::tensor::activation::softmax;
use burn::tensor::{Bool, DType, Device, Distribution, Int, Tensor, TensorData};
use burn_rope_pool::pool::PoolTensor;
use burn_rope_pool::pool::{
    PoolAttentionConfig, PoolAttentionInputs, PoolAttentionPlan, pool_attention,
};
use burn_rope_pool::testing::{Rng, device_by_name, dtype_by_name};
use clap::Parser;
use instruments::{copy_bandwidth, copy_time, time_per_call, wall_per_call};
use serde::Serialize;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "default")]
    device: String,
    /// Comma-separated float dtypes.
    #[arg(long, default_value = "f16,f32")]
    dtypes: String,
    /// Fewer timing windows.
    #[arg(long)]
    quick: bool,
    /// Skip the gather path.
    #[arg(long)]
    no_gather: bool,
    /// Decode rows only.
    #[arg(long)]
    decode_only: bool,
    /// Prefill rows only.
    #[arg(long)]
    prefill_only: bool,
    /// Pools of fp8 e4m3 (queries in each of `--dtypes`): rows `F16 fp8`, floor at one byte a
    /// pool element; checked against the gather path over the decoded pools.
    #[arg(long)]
    fp8: bool,
    /// Only the rows of this many sequences (with `--keys`, of this many keys each): one shape
    /// under a profiler.
    #[arg(long)]
    seqs: Option<usize>,
    /// Only the rows of this many keys a sequence.
    #[arg(long)]
    keys: Option<usize>,
    /// `auto` (the normal launch), `on` (the query-tile kernel for every row) or `off`.
    #[arg(long, default_value = "auto")]
    query_tiles: String,
    /// Also write the rows as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

const HQ: usize = 32;
const HKV: usize = 8;
const D: usize = 128;

/// One batch shape: `seqs` sequences of `queries` new tokens over `keys` keys each.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    seqs: usize,
    queries: usize,
    keys: usize,
}

const SHAPES: [Shape; 7] = [
    Shape {
        name: "decode",
        seqs: 1,
        queries: 1,
        keys: 4096,
    },
    Shape {
        name: "decode",
        seqs: 1,
        queries: 1,
        keys: 32768,
    },
    Shape {
        name: "decode",
        seqs: 8,
        queries: 1,
        keys: 4096,
    },
    Shape {
        name: "decode",
        seqs: 64,
        queries: 1,
        keys: 1024,
    },
    Shape {
        name: "decode",
        seqs: 64,
        queries: 1,
        keys: 4096,
    },
    Shape {
        name: "prefill",
        seqs: 1,
        queries: 4096,
        keys: 4096,
    },
    Shape {
        name: "prefill",
        seqs: 64,
        queries: 512,
        keys: 512,
    },
];

#[derive(Serialize)]
struct Row {
    kind: &'static str,
    dtype: String,
    batch: usize,
    keys: usize,
    queries: usize,
    device_us: f64,
    gb_per_s: f64,
    floor_us: f64,
    floor_pct: f64,
    tflops: f64,
    gather_us: Option<f64>,
    host_us_per_call: f64,
    plan_us: f64,
}

/// The batch's pools (random rows, `keys` per sequence scattered over a pool with 1024 spare
/// rows), its queries and its plan.
struct Batch {
    q: Tensor<3>,
    /// The pools as the op reads them (float, or fp8).
    k_pool: PoolTensor,
    v_pool: PoolTensor,
    /// The pools' values as floats of q's dtype, for the gather path.
    k_float: Tensor<3>,
    v_float: Tensor<3>,
    rows: Vec<i64>,
    plan: PoolAttentionPlan,
}

/// An fp8 pool of `rows` rows of random finite codes of magnitude 2^-3 to 2^3 (scale 1/4), and
/// its decoded values in `dtype`.
fn fp8_pool(device: &Device, rows: usize, dtype: DType, rng: &mut Rng) -> (PoolTensor, Tensor<3>) {
    let code = |r: u64| ((r & 0x80) | ((4 + (r >> 8) % 6) << 3) | ((r >> 16) & 7)) as u32;
    let words: Vec<u32> = (0..rows * HKV * D / 4)
        .map(|_| {
            let r = rng.next_u64();
            (0..4).fold(0, |w, i| w | code(r >> (20 * i)) << (8 * i))
        })
        .collect();
    let words = Tensor::<3, Int>::from_data(
        TensorData::new(words, [rows, HKV, D / 4]),
        (device, DType::U32),
    );
    let pool = PoolTensor::fp8(words, 0.25);
    let values = pool.clone().into_float().cast(dtype);
    (pool, values)
}

fn batch(device: &Device, dtype: DType, shape: Shape, fp8: bool, rng: &mut Rng) -> Batch {
    let pool = shape.seqs * shape.keys + 1024;
    let mut rows: Vec<i64> = (0..pool as i64).collect();
    for i in 0..shape.seqs * shape.keys {
        let j = i + rng.below((pool - i) as u64) as usize;
        rows.swap(i, j);
    }
    rows.truncate(shape.seqs * shape.keys);
    let normal = Distribution::Normal(0.0, 1.0);
    let tokens = shape.seqs * shape.queries;
    let plan = batch_plan(device, shape, &rows);
    let ((k_pool, k_float), (v_pool, v_float)) = if fp8 {
        (
            fp8_pool(device, pool, dtype, rng),
            fp8_pool(device, pool, dtype, rng),
        )
    } else {
        let float = || {
            let t = Tensor::<3>::random([pool, HKV, D], normal, (device, dtype));
            (t.clone().into(), t)
        };
        (float(), float())
    };
    Batch {
        q: Tensor::random([tokens, HQ, D], normal, (device, dtype)),
        k_pool,
        v_pool,
        k_float,
        v_float,
        rows,
        plan,
    }
}

/// The plan of `shape`'s batch over pool `rows`.
fn batch_plan(device: &Device, shape: Shape, rows: &[i64]) -> PoolAttentionPlan {
    let qo: Vec<i64> = (0..=shape.seqs)
        .map(|b| (b * shape.queries) as i64)
        .collect();
    let kv: Vec<i64> = (0..=shape.seqs).map(|b| (b * shape.keys) as i64).collect();
    PoolAttentionPlan::new(
        TensorData::from(qo.as_slice()),
        TensorData::from(kv.as_slice()),
        TensorData::from(rows),
        device,
    )
}

/// The gather path: per sequence, its rows selected from the pools, kv heads expanded, scores,
/// causal mask, f32 softmax, values.
fn gather_attention(b: &Batch, shape: Shape) -> Tensor<3> {
    let device = b.q.device();
    let (n, l) = (shape.queries, shape.keys);
    let mut parts = Vec::with_capacity(shape.seqs);
    let mask: Vec<bool> = (0..n)
        .flat_map(|i| (0..l).map(move |j| j > l - n + i))
        .collect();
    let mask = Tensor::<4, Bool>::from_data(TensorData::new(mask, [1, 1, n, l]), &device);
    // Decode batches run as one batched attention (as the decoder did); prefills one by one.
    let groups = if n == 1 { 1 } else { shape.seqs };
    let per = shape.seqs / groups;
    for g in 0..groups {
        let rows = &b.rows[g * per * l..(g + 1) * per * l];
        let idx = Tensor::<1, Int>::from_data(TensorData::new(rows.to_vec(), [per * l]), &device);
        let gather = |pool: &Tensor<3>| {
            pool.clone()
                .select(0, idx.clone())
                .reshape([per, l, HKV, D])
                .swap_dims(1, 2)
                .reshape([per, HKV, 1, l, D])
                .expand([per, HKV, HQ / HKV, l, D])
                .reshape([per, HQ, l, D])
        };
        let q =
            b.q.clone()
                .slice([g * per * n..(g + 1) * per * n])
                .reshape([per, n, HQ, D])
                .swap_dims(1, 2);
        let scores = q.matmul(gather(&b.k_float).swap_dims(2, 3)) * (1.0 / (D as f64).sqrt());
        let scores = scores.mask_fill(mask.clone().expand([per, HQ, n, l]), f32::NEG_INFINITY);
        let dtype = scores.dtype();
        let out = softmax(scores.cast(DType::F32), 3)
            .cast(dtype)
            .matmul(gather(&b.v_float));
        parts.push(out.swap_dims(1, 2).reshape([per * n, HQ, D]));
    }
    Tensor::cat(parts, 0)
}

fn main() {
    let args = Args::parse();
    let device = device_by_name(&args.device).expect("device");
    let windows = if args.quick { 5 } else { 15 };
    let bandwidth = copy_bandwidth(&device, 1 << 26, windows);
    // The device time of one launch doing nearly nothing (`x + 1` on one f32): what a call's
    // fixed cost is measured against (a split call launches twice).
    let one_launch = copy_time(&device, 8, windows, DType::F32);
    println!(
        "device {device:?}\ncopy bandwidth {:.0} GB/s\none launch (x + 1, one element) {:.1} µs\n",
        bandwidth / 1e9,
        one_launch.as_secs_f64() * 1e6
    );
    println!(
        "| kind | dtype | batch | keys | queries | device µs | GB/s | floor µs | % of floor | TFLOPS | gather µs | host µs/call | plan µs |"
    );
    println!(
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let query_tiles = match args.query_tiles.as_str() {
        "auto" => None,
        "on" => Some(true),
        "off" => Some(false),
        other => panic!("--query-tiles takes auto, on or off, got `{other}`"),
    };
    let config = PoolAttentionConfig::new(HQ, HKV, D).with_query_tiles(query_tiles);
    let mut rng = Rng::from_state(0x5eed_a77e);
    let mut rows = Vec::new();
    for dtype in args.dtypes.split(',') {
        let dtype = dtype_by_name(dtype).expect("dtype");
        if !device.supports_dtype(dtype) {
            println!("({dtype:?} is not supported on this device)");
            continue;
        }
        for shape in SHAPES {
            if (args.decode_only && shape.queries > 1)
                || (args.prefill_only && shape.queries == 1)
                || args.seqs.is_some_and(|s| s != shape.seqs)
                || args.keys.is_some_and(|k| k != shape.keys)
            {
                continue;
            }
            let b = batch(&device, dtype, shape, args.fp8, &mut rng);
            let call = || {
                let inputs =
                    PoolAttentionInputs::new(b.q.clone(), b.k_pool.clone(), b.v_pool.clone());
                pool_attention(inputs, &b.plan, &config)
                    .expect("valid call")
                    .out
            };
            // The gather path's largest buffer (its expanded keys, or its f32 scores) must fit
            // one wgpu buffer (2 GiB); past 1 GiB it is not run.
            let per = if shape.queries == 1 { shape.seqs } else { 1 };
            let expanded = per * HQ * shape.keys * D * dtype.size();
            let scores = per * HQ * shape.queries * shape.keys * 4;
            let run_gather = !args.no_gather && expanded.max(scores) <= 1 << 30;
            // Correct before timed: the gather path and the op agree.
            let gather_check = run_gather.then(|| gather_attention(&b, shape));
            if let Some(expected) = &gather_check {
                let diff = (call() - expected.clone()).abs().max().into_scalar::<f32>();
                assert!(
                    diff < 0.05,
                    "pool_attention and the gather path differ by {diff}"
                );
            }
            drop(gather_check);
            let mut kept = Vec::new();
            let t = time_per_call(&device, windows, || kept.push(call())).as_secs_f64();
            kept.clear();
            let gather = run_gather.then(|| {
                let t = time_per_call(&device, windows, || kept.push(gather_attention(&b, shape)));
                kept.clear();
                t.as_secs_f64()
            });
            let host = wall_per_call(if args.quick { 50 } else { 300 }, |sync| {
                let out = call();
                if sync {
                    let _ = out.slice([0..1]).into_data();
                }
            });
            // The plan's host cost, once per step: the host arrays and the indices' upload
            // (the first call adds each query's key range, O(T) host work and one upload).
            let plans = if args.quick { 3 } else { 10 };
            let plan_start = std::time::Instant::now();
            for _ in 0..plans {
                drop(batch_plan(&device, shape, &b.rows));
            }
            let plan_us = plan_start.elapsed().as_secs_f64() * 1e6 / plans as f64;
            let elem = dtype.size();
            let pool_elem = if args.fp8 { 1 } else { elem };
            let tokens = shape.seqs * shape.queries;
            let bytes =
                2 * shape.seqs * shape.keys * HKV * D * pool_elem + 2 * tokens * HQ * D * elem;
            let floor = bytes as f64 / bandwidth;
            // Causal: query i of n over L keys sees L - n + i + 1 of them.
            let visible: usize = (0..shape.queries)
                .map(|i| shape.keys - shape.queries + i + 1)
                .sum();
            let flops = 4.0 * (shape.seqs * visible * HQ * D) as f64;
            let row = Row {
                kind: shape.name,
                dtype: format!("{dtype:?}{}", if args.fp8 { " fp8" } else { "" }),
                batch: shape.seqs,
                keys: shape.keys,
                queries: shape.queries,
                device_us: t * 1e6,
                gb_per_s: bytes as f64 / t / 1e9,
                floor_us: floor * 1e6,
                floor_pct: 100.0 * floor / t,
                tflops: flops / t / 1e12,
                gather_us: gather.map(|g| g * 1e6),
                host_us_per_call: host.wall * 1e6,
                plan_us,
            };
            println!(
                "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.0}% | {:.1} | {} | {:.1} | {:.0} |",
                row.kind,
                row.dtype,
                row.batch,
                row.keys,
                row.queries,
                row.device_us,
                row.gb_per_s,
                row.floor_us,
                row.floor_pct,
                row.tflops,
                row.gather_us.map_or("-".into(), |g| format!("{g:.1}")),
                row.host_us_per_call,
                row.plan_us
            );
            rows.push(row);
        }
    }
    if let Some(path) = args.json {
        let json = serde_json::to_string_pretty(&rows).expect("rows as JSON");
        std::fs::write(path, json + "\n").expect("write json");
    }
}
