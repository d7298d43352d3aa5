//! `--profile` (feature `profile`): where the host cost of a decode call goes. A loop of
//! back-to-back calls runs for a while under pprof-rs, an in-process sampling profiler (SIGPROF
//! on the process's CPU time: the running thread is sampled); no `perf` or kernel support is
//! needed, so it runs as well on the GPU machine. The kernel delivers at most one such signal
//! per scheduler tick (250 a second on the H200 machine), so the samples give each thread's
//! *shares*; the thread's CPU time itself comes from `/proc` over the same window.
//!
//! Per thread (the caller, CubeCL's stream and device threads) it prints the CPU time per call,
//! split into waiting (spinning, yielding or parked in CubeCL's channels) and work; the work by
//! the crate whose code caused it; and the functions with the most work, inclusive, each with
//! its hottest source line (when the build has line tables). With `--profile-out DIR` the samples
//! are also written as collapsed stacks (one file per loop; `inferno-flamegraph` or speedscope
//! draw them, `benches/profile_attribution.py` splits them by cause).

use pprof::{Frames, ProfilerGuardBuilder};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// Samples asked for per second of process CPU time (the kernel caps the rate at its tick).
const FREQUENCY: i32 = 1999;

/// Calls between syncs (the host-cost table's loops sync once per 2000 calls too).
const SYNC_EVERY: usize = 2000;

/// Functions whose own time (their innermost Rust frame, in a build without debug info where
/// the spin loops are inlined into them) is waiting rather than work: CubeCL's channel
/// (`cubecl_common::device::handle::channel`) — a client spinning on a full queue inside
/// `submit_inner`, a server spinning, yielding or parked in `Server::start`, a caller blocked on
/// a reply — and the thread and system calls under them.
const WAITING: [&str; 12] = [
    "ChannelDeviceHandle::submit_inner",
    "custom_channel::Server::start",
    "custom_channel::DeviceClient::enqueue",
    "oneshot",
    "spin_loop",
    "yield_now",
    "thread::park",
    "thread::sleep",
    "futex",
    "sched_yield",
    "nanosleep",
    "syscall",
];

/// Crates that do not say who caused the work (the standard library, allocators, hashing): a
/// sample in them is charged to the nearest caller outside them.
const NEUTRAL: [&str; 9] = [
    "std",
    "core",
    "alloc",
    "hashbrown",
    "libc",
    "??",
    "spin",
    "smallvec",
    "Unknown",
];

/// The crate of a demangled Rust symbol (`<a::B as c::D>::f` → `a`); `??` for other symbols.
fn crate_of(name: &str) -> &str {
    let name = name.trim_start_matches('<').trim_start_matches('&');
    let name = name.trim_start_matches("mut ").trim_start_matches("dyn ");
    match name.split_once("::") {
        Some((head, _)) if !head.contains(' ') && !head.is_empty() => head,
        _ => "??",
    }
}

/// A demangled name without its hash suffix and generic arguments, shortened for a table.
fn short(name: &str) -> String {
    let name = match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            head
        }
        _ => name,
    };
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' if !out.is_empty() && !out.ends_with([' ', '<']) => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    out
}

/// Thread names differ by an index (`DSD-4-0`): group by the prefix.
fn thread_group(frames: &Frames) -> String {
    let name = frames.thread_name_or_id();
    name.split('-').next().unwrap_or("").to_string()
}

#[derive(Default)]
struct ThreadStats {
    samples: u64,
    waiting: u64,
    by_crate: HashMap<String, u64>,
    /// Function → (inclusive work samples, samples by source line in it).
    functions: HashMap<String, (u64, HashMap<String, u64>)>,
}

/// Profiles about `seconds` of back-to-back calls of `f` (after a warm-up) and returns the tables
/// under `title`; `f(true)` must sync and may then drop what it kept. With `out`, writes the
/// collapsed stacks to `out/<file>.folded`.
pub fn profile(
    cpu: fn() -> BTreeMap<String, f64>,
    title: &str,
    file: &str,
    seconds: f64,
    out: Option<&Path>,
    mut f: impl FnMut(bool),
) -> String {
    for i in 0..100 {
        f(i == 99);
    }
    // Calls in the window: about `seconds` of them, from a short timing run.
    let start = Instant::now();
    for i in 0..200 {
        f(i == 199);
    }
    let per_call = start.elapsed().as_secs_f64() / 200.0;
    let calls = ((seconds / per_call) as usize).max(200);

    let guard = ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .expect("profiler starts");
    let (start, cpu_before) = (Instant::now(), cpu());
    for i in 0..calls {
        // A sync each `SYNC_EVERY` calls, as a decoder reads its logits once per step of layers.
        f((i + 1) % SYNC_EVERY == 0 || i + 1 == calls);
    }
    let (wall, cpu_after) = (start.elapsed(), cpu());
    let report = guard.report().build().expect("profile report");
    drop(guard);

    let mut threads: BTreeMap<String, ThreadStats> = BTreeMap::new();
    let mut folded = String::new();
    for (frames, &count) in &report.data {
        let count = count.max(0) as u64;
        let group = thread_group(frames);
        // Innermost first; each frame's inlined functions innermost first too.
        let symbols: Vec<(String, String)> = frames
            .frames
            .iter()
            .flatten()
            .map(|s| {
                let line = match (s.filename.as_ref(), s.lineno) {
                    (Some(file), Some(line)) => {
                        let file = file.to_string_lossy();
                        // Paths from the registry: keep `crate-x.y.z/src/...`.
                        let file = file.rsplit("/registry/src/").next().unwrap_or(&file);
                        let file = file.split_once('/').map_or(file, |(_, rest)| rest);
                        format!("{file}:{line}")
                    }
                    _ => String::new(),
                };
                (short(&s.name()), line)
            })
            .collect();
        let _ = writeln!(
            folded,
            "{group};{} {count}",
            symbols
                .iter()
                .rev()
                .map(|(n, _)| n.replace(';', ":"))
                .collect::<Vec<_>>()
                .join(";")
        );
        let stats = threads.entry(group).or_default();
        stats.samples += count;
        // The innermost frame, and the innermost Rust frame when that one is a C function.
        let leaf = symbols.first().map(|(n, _)| n.as_str()).unwrap_or("");
        let rust_leaf = symbols
            .iter()
            .map(|(n, _)| n.as_str())
            .find(|n| crate_of(n) != "??")
            .unwrap_or("");
        let waits = leaf.is_empty()
            || [leaf, rust_leaf]
                .iter()
                .any(|n| WAITING.iter().any(|w| n.contains(w)));
        if waits {
            stats.waiting += count;
            continue;
        }
        let owner = symbols
            .iter()
            .map(|(n, _)| crate_of(n))
            .find(|c| !NEUTRAL.contains(c))
            .unwrap_or("std/libc/driver");
        *stats.by_crate.entry(owner.to_string()).or_default() += count;
        let mut seen = HashSet::new();
        for (name, line) in &symbols {
            if !seen.insert(name.as_str()) {
                continue;
            }
            let entry = stats.functions.entry(name.clone()).or_default();
            entry.0 += count;
            if !line.is_empty() {
                *entry.1.entry(line.clone()).or_default() += count;
            }
        }
    }
    if let Some(dir) = out {
        let _ = std::fs::create_dir_all(dir);
        let _ = std::fs::write(dir.join(format!("{file}.folded")), &folded);
    }

    // µs per call of one sample of each thread: its CPU time over the window, per call, shared
    // out over its samples.
    let scale: BTreeMap<&String, f64> = threads
        .iter()
        .map(|(name, stats)| {
            let seconds = cpu_after.get(name).copied().unwrap_or(0.0)
                - cpu_before.get(name).copied().unwrap_or(0.0);
            (
                name,
                seconds * 1e6 / calls as f64 / stats.samples.max(1) as f64,
            )
        })
        .collect();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\n#### {title}\n\n{calls} calls, {:.1} µs/call wall ({} ms).\n",
        wall.as_secs_f64() * 1e6 / calls as f64,
        wall.as_millis(),
    );
    let _ = writeln!(
        text,
        "| thread | samples | CPU µs/call | waiting | work | work by crate (µs/call) |"
    );
    let _ = writeln!(text, "| --- | ---: | ---: | ---: | ---: | --- |");
    for (name, stats) in &threads {
        let us = |n: u64| n as f64 * scale[name];
        let mut crates: Vec<_> = stats.by_crate.iter().collect();
        crates.sort_by(|a, b| b.1.cmp(a.1));
        let crates: Vec<String> = crates
            .iter()
            .filter(|(_, n)| us(**n) >= 0.05)
            .map(|(c, n)| format!("{c} {:.1}", us(**n)))
            .collect();
        let _ = writeln!(
            text,
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {} |",
            stats.samples,
            us(stats.samples),
            us(stats.waiting),
            us(stats.samples - stats.waiting),
            crates.join(", ")
        );
    }
    for (name, stats) in &threads {
        let work = stats.samples - stats.waiting;
        if (work as f64) < 20.0 {
            continue;
        }
        let _ = writeln!(
            text,
            "\nHeaviest functions of {name}'s work (inclusive µs/call, hottest line):\n"
        );
        let mut functions: Vec<_> = stats.functions.iter().collect();
        functions.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(b.0)));
        for (function, (n, lines)) in functions.into_iter().take(40) {
            let line = lines
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(l, _)| l.as_str())
                .unwrap_or("");
            let _ = writeln!(text, "- {:.2} `{function}` {line}", *n as f64 * scale[name]);
        }
    }
    text
}
