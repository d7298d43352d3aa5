//! The default benchmark: device time per call of the op and of the unfused path, one row per
//! shape, against the memory-bandwidth floor; the markdown table and the `--json` rows.

use crate::Args;
use crate::cases::{
    HEAD_DIM, Layout, MODELS, Shape, VARIANTS, burn_head_norm, fp8_pools, inputs, norm_weights,
    random_pools, variant_config,
};
use crate::instruments::{copy_bandwidth, copy_time, time_per_call};
use burn::tensor::{DType, Device, Tensor};
use burn_rope_pool::testing::unfused::rope_pool_unfused;
use burn_rope_pool::{RopePoolInputs, rope_pool_fused};
use serde::{Serialize, Serializer};
use std::fmt::Write as _;
use std::time::Duration;

/// One row of the table and of the `--json` file (there with the keys of the `rename`s, times
/// in µs, bandwidth in GB/s; [`Record`] adds the derived columns).
#[derive(Debug, Serialize)]
pub struct Row {
    device: String,
    #[serde(serialize_with = "debug")]
    dtype: DType,
    model: String,
    tokens: usize,
    pool: usize,
    bytes: usize,
    #[serde(rename = "fused_us", serialize_with = "micros")]
    fused: Duration,
    /// Burn's `x + 1` moving the same bytes in the row's dtype ([`copy_time`]).
    #[serde(rename = "copy_us", serialize_with = "micros")]
    copy: Duration,
    #[serde(rename = "unfused_us", serialize_with = "maybe_micros")]
    unfused: Option<Duration>,
    #[serde(rename = "copy_bandwidth_gbps", serialize_with = "giga")]
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

/// A [`Row`] as one object of the `--json` file: its fields, then its GB/s and fraction of the
/// floor (what `scripts/results_table.py` reads).
#[derive(Serialize)]
struct Record<'a> {
    #[serde(flatten)]
    row: &'a Row,
    gbps: f64,
    fraction_of_floor: f64,
}

impl<'a> From<&'a Row> for Record<'a> {
    fn from(row: &'a Row) -> Self {
        Self {
            row,
            gbps: round(row.gbps(), 1),
            fraction_of_floor: round(row.of_floor(), 4),
        }
    }
}

/// `x` to `digits` decimals (the JSON's precision: µs to 3, GB/s to 1, fractions to 4).
fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

fn debug<S: Serializer>(x: &impl std::fmt::Debug, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{x:?}"))
}

fn micros<S: Serializer>(t: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(t.as_secs_f64() * 1e6, 3))
}

fn maybe_micros<S: Serializer>(t: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => micros(t, s),
        None => s.serialize_none(),
    }
}

fn giga<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(round(x / 1e9, 1))
}

/// One row's call: its shape, its RoPE variant ([`VARIANTS`]), and whether the unfused path is
/// timed too.
struct Case {
    shape: Shape,
    variant: &'static str,
    unfused: bool,
}

/// What every row of a device shares.
struct Settings {
    /// Copy bandwidth (bytes per second) of the floor.
    bandwidth: f64,
    /// `--windows`.
    windows: usize,
    /// `--sequential-slots`.
    sequential_slots: bool,
}

/// The fewest bytes the op must move: read q, k, v, positions, slots; write q_rot, k_rot and the
/// k/v pool rows of every (valid) token. Per token and head row: q twice (read, write), kv five
/// times (read k and v; write k_rot, the k pool row and the v pool row).
fn min_bytes(shape: Shape) -> usize {
    let Shape { tokens, model, .. } = shape;
    tokens * HEAD_DIM * shape.dtype.size() * (2 * model.hq + 5 * model.hkv) + tokens * 8
}

fn bench_row(device: &Device, name: &str, case: Case, settings: &Settings) -> Row {
    let Case {
        shape,
        variant,
        unfused: with_unfused,
    } = case;
    let Shape {
        dtype,
        tokens,
        model,
        pool,
    } = shape;
    let config = variant_config(variant, model);
    let mrope = config.mrope.is_some();
    let (mut k_pool, mut v_pool) = if variant == "fp8-pool" {
        fp8_pools(device, shape)
    } else {
        random_pools(device, shape)
    };
    let layout = Layout {
        seed: tokens as u64 * 7919 + model.hq as u64,
        sequential_slots: settings.sequential_slots,
        views: variant == "views",
    };
    let x = inputs(device, shape, layout);
    let norm = (variant == "qk-norm").then(|| norm_weights(device, dtype, 17));
    let windows = if tokens >= 4096 {
        settings.windows
    } else {
        3 * settings.windows
    };
    let mut run = |fused: bool| {
        let (kp, vp) = (k_pool.take().unwrap(), v_pool.take().unwrap());
        let (q, k, v, slots) = (x.q.clone(), x.k.clone(), x.v.clone(), x.slots.clone());
        let inputs = if mrope {
            let rows = x.mrope_positions.clone();
            RopePoolInputs::new(q, k, v, rows, slots, kp, vp)
        } else {
            RopePoolInputs::new(q, k, v, x.positions.clone(), slots, kp, vp)
        };
        let out = match (&norm, fused) {
            // The fused norm, against Burn's norm ops on q and k before the op.
            (Some([wq, wk]), true) => {
                let inputs = inputs.with_qk_norm(wq.clone(), wk.clone());
                rope_pool_fused(inputs, &config).expect("valid call")
            }
            (Some([wq, wk]), false) => {
                let eps = config.qk_norm_eps;
                let inputs = RopePoolInputs {
                    q: burn_head_norm(Tensor::from_dispatch(inputs.q), wq, eps).into_dispatch(),
                    k: burn_head_norm(Tensor::from_dispatch(inputs.k), wk, eps).into_dispatch(),
                    ..inputs
                };
                rope_pool_fused(inputs, &config).expect("valid call")
            }
            (None, true) => rope_pool_fused(inputs, &config).expect("valid call"),
            (None, false) => rope_pool_unfused(inputs, &config),
        };
        k_pool = Some(out.k_pool);
        v_pool = Some(out.v_pool);
    };
    let fused = time_per_call(device, windows, || run(true));
    let unfused = with_unfused.then(|| time_per_call(device, windows.min(9), || run(false)));
    let mut bytes = min_bytes(shape);
    if !config.k_rot {
        bytes -= tokens * model.hkv * HEAD_DIM * dtype.size();
    }
    if variant == "fp8-pool" {
        // The two pool rows per kv head are one byte an element.
        bytes -= 2 * tokens * model.hkv * HEAD_DIM * (dtype.size() - 1);
    }
    Row {
        device: name.to_string(),
        dtype,
        model: if variant == "neox" {
            model.name.to_string()
        } else {
            format!("{} {variant}", model.name)
        },
        tokens,
        pool,
        bytes,
        fused,
        copy: copy_time(device, bytes, windows, dtype),
        unfused,
        bandwidth: settings.bandwidth,
    }
}

/// Appends `row` to `table` (and its debug form to stderr).
fn table_line(row: &Row, table: &mut String) {
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
}

/// The default run: a table per device in `names` (printed once all are done) and, with
/// `--json`, every row.
pub fn device_time(names: &[String], args: &Args) {
    let mut rows = Vec::new();
    let mut table = String::new();
    for name in names {
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
        let settings = Settings {
            bandwidth,
            windows: args.windows,
            sequential_slots: args.sequential_slots,
        };
        let tokens: &[usize] = if quick {
            &[1, 32, 512]
        } else {
            &[1, 32, 512, 4096, 32768]
        };
        let pool = if quick { 16_384 } else { 131_072 };
        let mut push = |case: Case, table: &mut String| {
            let row = bench_row(&device, name, case, &settings);
            table_line(&row, table);
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
            for model in MODELS {
                for &tokens in tokens
                    .iter()
                    .filter(|t| args.tokens.is_empty() || args.tokens.contains(t))
                {
                    let shape = Shape {
                        dtype,
                        tokens,
                        model,
                        pool,
                    };
                    let case = Case {
                        shape,
                        variant: "neox",
                        unfused: !args.fused_only,
                    };
                    push(case, &mut table);
                }
            }
        }
        // The variants beside plain NeoX, same shape and run (fused only, but for the q/k
        // norm, timed beside Burn's norm ops + the op).
        for dtype in [DType::F16, DType::F32] {
            for &tokens in &args.variants {
                for variant in VARIANTS {
                    if device.supports_dtype(dtype) {
                        let shape = Shape {
                            dtype,
                            tokens,
                            model: MODELS[0],
                            pool,
                        };
                        // The q/k norm's "unfused" column: Burn's norm ops, then the op.
                        let case = Case {
                            shape,
                            variant,
                            unfused: variant == "qk-norm",
                        };
                        push(case, &mut table);
                    }
                }
            }
        }
        // The pool size must not matter (in-place update): same call, small and huge pool
        // (Llama-3-70B/TP8 rows: 1 kv head, so a 1M-row f16 pool is 256 MiB per pool).
        let tokens = if quick { 512 } else { 4096 };
        let dtype = DType::F16;
        if device.supports_dtype(dtype) && !args.fused_only {
            for pool in if quick {
                [4096, 65_536]
            } else {
                [4096, 1_048_576]
            } {
                let shape = Shape {
                    dtype,
                    tokens,
                    model: MODELS[1], // llama3-70b-tp8
                    pool,
                };
                let case = Case {
                    shape,
                    variant: "neox",
                    unfused: false,
                };
                push(case, &mut table);
            }
        }
    }
    println!("{table}");
    if let Some(path) = &args.json {
        // One row per line.
        let json: Vec<String> = rows
            .iter()
            .map(|row| serde_json::to_string(&Record::from(row)).expect("row as JSON"))
            .collect();
        std::fs::write(path, format!("[\n{}\n]\n", json.join(",\n"))).expect("write json");
    }
}
