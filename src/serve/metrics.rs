//! The server's counters, gauges and latency histograms, written as Prometheus text.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// The metric names' prefix.
const PREFIX: &str = "burn_rope_pool";

/// Upper bounds (seconds) of the time-to-first-token buckets.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
];
/// Upper bounds (seconds) of the inter-token latency buckets.
const ITL_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

/// A cumulative histogram.
#[derive(Clone, Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, value: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if value <= *bound {
                *count += 1;
            }
        }
        self.sum += value;
        self.count += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {PREFIX}_{name} {help}");
        let _ = writeln!(out, "# TYPE {PREFIX}_{name} histogram");
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{PREFIX}_{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{PREFIX}_{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{PREFIX}_{name}_sum {}", self.sum);
        let _ = writeln!(out, "{PREFIX}_{name}_count {}", self.count);
    }
}

#[derive(Debug)]
struct Inner {
    /// Finished HTTP requests by (endpoint, status).
    requests: BTreeMap<(String, u16), u64>,
    prompt_tokens: u64,
    generation_tokens: u64,
    waiting: usize,
    running: usize,
    rows_in_use: usize,
    pool_rows: usize,
    ttft: Histogram,
    itl: Histogram,
}

/// The server's metrics, shared by the HTTP handlers and the engine thread.
#[derive(Debug)]
pub(crate) struct Metrics {
    inner: Mutex<Inner>,
}

/// The engine's occupancy after a loop of the engine thread.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Occupancy {
    pub waiting: usize,
    pub running: usize,
    pub rows_in_use: usize,
}

impl Metrics {
    pub fn new(pool_rows: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                requests: BTreeMap::new(),
                prompt_tokens: 0,
                generation_tokens: 0,
                waiting: 0,
                running: 0,
                rows_in_use: 0,
                pool_rows,
                ttft: Histogram::new(TTFT_BUCKETS),
                itl: Histogram::new(ITL_BUCKETS),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The data stays consistent even if a holder panicked: counters only.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A finished HTTP request (`499`: the client left before the answer was complete).
    pub fn request(&self, endpoint: &str, status: u16) {
        *self
            .lock()
            .requests
            .entry((endpoint.to_string(), status))
            .or_default() += 1;
    }

    pub fn prompt_tokens(&self, n: usize) {
        self.lock().prompt_tokens += n as u64;
    }

    /// A generated token; `first` since its request arrived, else since its previous token.
    pub fn token(&self, first: bool, latency: Duration) {
        let mut inner = self.lock();
        inner.generation_tokens += 1;
        match first {
            true => inner.ttft.observe(latency.as_secs_f64()),
            false => inner.itl.observe(latency.as_secs_f64()),
        }
    }

    pub fn occupancy(&self, occupancy: Occupancy) {
        let mut inner = self.lock();
        inner.waiting = occupancy.waiting;
        inner.running = occupancy.running;
        inner.rows_in_use = occupancy.rows_in_use;
    }

    /// Prometheus' text exposition format.
    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        let mut scalar = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(out, "# HELP {PREFIX}_{name} {help}");
            let _ = writeln!(out, "# TYPE {PREFIX}_{name} {kind}");
            let _ = writeln!(out, "{PREFIX}_{name} {value}");
        };
        scalar(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens submitted to the engine (each choice counts its prompt).",
            inner.prompt_tokens,
        );
        scalar(
            "generation_tokens_total",
            "counter",
            "Tokens generated.",
            inner.generation_tokens,
        );
        scalar(
            "queue_length",
            "gauge",
            "Requests waiting to start (queued for a batch place or pool rows).",
            inner.waiting as u64,
        );
        scalar(
            "running_requests",
            "gauge",
            "Requests in the running batch.",
            inner.running as u64,
        );
        scalar(
            "pool_rows_in_use",
            "gauge",
            "KV-pool rows held by running requests.",
            inner.rows_in_use as u64,
        );
        scalar(
            "pool_rows",
            "gauge",
            "KV-pool rows of each layer.",
            inner.pool_rows as u64,
        );
        let _ = writeln!(
            out,
            "# HELP {PREFIX}_requests_total HTTP requests answered, by endpoint and status \
             (499: the client disconnected first)."
        );
        let _ = writeln!(out, "# TYPE {PREFIX}_requests_total counter");
        for ((endpoint, status), count) in &inner.requests {
            let _ = writeln!(
                out,
                "{PREFIX}_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {count}"
            );
        }
        inner.ttft.write(
            &mut out,
            "time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token.",
        );
        inner.itl.write(
            &mut out,
            "inter_token_latency_seconds",
            "Time between two consecutive tokens of a request.",
        );
        out
    }
}
