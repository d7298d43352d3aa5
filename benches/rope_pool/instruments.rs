//! The instruments: a counting global allocator, a CubeCL launch counter, per-thread CPU time,
//! and the timing loops (device time per call, copy time and bandwidth, host wall time per call).

use burn::tensor::{DType, Device, Distribution, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The process's heap allocations, counted (host-cost mode reports them per call).
struct CountingAllocator;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// Safety: forwards every call to the system allocator unchanged; only counts.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { std::alloc::System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Heap allocations (all threads) so far.
fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Kernel launches of every CubeCL client, counted while a [`LaunchCounter`] observes.
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Counts CubeCL's kernel launches (host-cost mode reports them per call).
#[cfg(feature = "cube")]
pub struct LaunchCounter;

#[cfg(feature = "cube")]
impl cubecl::logging::LaunchObserver for LaunchCounter {
    fn launched(&self, _kernel: &'static str) {
        LAUNCHES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Heap allocations and kernel launches so far.
fn counts() -> [u64; 2] {
    [allocations(), LAUNCHES.load(Ordering::Relaxed)]
}

/// CPU time (user + system, seconds) each thread of this process has used, summed by thread
/// name (CubeCL's device and stream threads, the main thread): a thread-level host profile.
pub fn thread_cpu() -> std::collections::BTreeMap<String, f64> {
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

/// Median device time of one call of `f`, over `windows` profiling windows of one call each (one
/// call per window: fusion would otherwise merge the element-wise work of successive calls, and
/// a window over many small calls counts the host gaps between them).
pub fn time_per_call(device: &Device, windows: usize, mut f: impl FnMut() + Send) -> Duration {
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
pub fn copy_time(device: &Device, bytes: usize, windows: usize, dtype: DType) -> Duration {
    let elements = (bytes / (2 * dtype.size())).max(1);
    let x = Tensor::<1>::random([elements], Distribution::Default, (device, dtype));
    let mut kept = Vec::new();
    let t = time_per_call(device, windows, || kept.push(x.clone() + 1.0));
    drop(kept);
    t
}

/// Copy bandwidth (bytes read + written per second) of [`copy_time`] over `elements` f32.
pub fn copy_bandwidth(device: &Device, elements: usize, windows: usize) -> f64 {
    let bytes = 2 * elements * 4;
    bytes as f64 / copy_time(device, bytes, windows, DType::F32).as_secs_f64()
}

/// What one call of a loop costs ([`wall_per_call`]).
pub struct PerCall {
    /// Seconds of wall time.
    pub wall: f64,
    /// Heap allocations, every thread's.
    pub allocations: f64,
    /// Kernel launches (while a [`LaunchCounter`] observes; else 0).
    pub launches: f64,
}

/// Wall time per call of `calls` back-to-back `f(false)` with one sync at the end — `f(true)`,
/// which reads a result of that call back (what makes every queued call complete) — after 50
/// warm-up calls; and heap allocations per call (every thread's, the device's included).
pub fn wall_per_call(calls: usize, mut f: impl FnMut(bool)) -> PerCall {
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

/// The median of `runs` (sorts them).
pub fn median(runs: &mut [f64]) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}
