//! The launch's tuning knobs: how work is mapped to units. The defaults are what the H200 sweep
//! chose (`benches/NOTES.md`); every other setting exists for A/B benchmark runs and gives the
//! same results bit for bit, except `naive_angles`, which swaps the exact angle for the naive one.

use std::sync::OnceLock;

/// Overrides of the launch's choices. `LaunchTuning::default()` is the normal launch; the
/// benchmarks set fields through `ROPE_POOL_*` environment variables ([`LaunchTuning::from_env`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchTuning {
    /// Heads per unit instead of the rule of [`crate::heads_per_unit`]
    /// (`ROPE_POOL_HEADS_PER_UNIT`).
    pub heads_per_unit: Option<usize>,
    /// A unit walks a run of consecutive heads instead of every `groups`-th head
    /// (`ROPE_POOL_HEAD_ORDER=contiguous`).
    pub contiguous_heads: bool,
    /// Units per cube instead of CubeCL's element-wise default (`ROPE_POOL_CUBE_DIM`).
    pub cube_dim: Option<usize>,
    /// Cap on the vector width, in elements (`ROPE_POOL_VECTOR`).
    pub max_vector: Option<usize>,
    /// The naive f32 angle `position * inv_freq` instead of the exact one
    /// (`ROPE_POOL_NAIVE_ANGLES=1`): only for measuring what the exact angle costs.
    pub naive_angles: bool,
}

impl LaunchTuning {
    /// The settings of the `ROPE_POOL_*` environment variables, read once per process (all unset:
    /// the defaults).
    pub fn from_env() -> Self {
        static TUNING: OnceLock<LaunchTuning> = OnceLock::new();
        *TUNING.get_or_init(|| {
            let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
            let flag = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0");
            LaunchTuning {
                heads_per_unit: number("ROPE_POOL_HEADS_PER_UNIT"),
                contiguous_heads: std::env::var("ROPE_POOL_HEAD_ORDER")
                    .is_ok_and(|v| v == "contiguous"),
                cube_dim: number("ROPE_POOL_CUBE_DIM"),
                max_vector: number("ROPE_POOL_VECTOR"),
                naive_angles: flag("ROPE_POOL_NAIVE_ANGLES"),
            }
        })
    }
}
