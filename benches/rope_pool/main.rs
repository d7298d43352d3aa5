//! Benchmark of `rope_pool_fused` against the unfused Burn path, on every backend the build
//! enables (or `--device NAME`). Device time from the backend's profiler (timestamp queries on
//! wgpu), medians of repeated windows, random inputs; bytes, GB/s and the fraction of the
//! memory-bandwidth floor, with the copy bandwidth measured in the same run on the same device.
//!
//! `cargo bench --bench rope_pool -- [--device wgpu] [--quick] [--json OUT.json]`; the host cost
//! per call of back-to-back calls with `--host-cost`, and where it goes with
//! `cargo bench --features profile --bench rope_pool -- --profile [--profile-out DIR]`.
//!
//! Source: this file (command line, dispatch); `instruments` (allocation and launch counters,
//! thread CPU time, the timing loops); `cases` (models, RoPE variants, random inputs);
//! `device_time` (the default table and `--json`); `host_cost` (`--host-cost`); `profile`
//! (`--profile`, over `benches/host_profile/`).

use clap::Parser;

mod cases;
mod device_time;
mod host_cost;
mod instruments;

#[cfg(feature = "profile")]
#[path = "../host_profile/mod.rs"]
mod host_profile;
#[cfg(feature = "profile")]
mod profile;

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
            profile::profile(
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
            host_cost::host_cost(&device, name, args.quick, args.repeats);
        }
        return;
    }
    device_time::device_time(&names, &args);
}
