//! The launch's tuning knobs: how work is mapped to units. The defaults are what the H200 sweep
//! chose (`benches/NOTES.md`); every other setting exists for A/B benchmark runs and gives the
//! same results bit for bit.

/// Overrides of the launch's choices. `LaunchTuning::default()` is the normal launch; benchmark
/// builds (cargo feature `tuning`) read fields from `ROPE_POOL_*` environment variables
/// (`LaunchTuning::from_env`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchTuning {
    /// Heads per unit instead of the rule of [`crate::heads_per_unit`]
    /// (`ROPE_POOL_HEADS_PER_UNIT`).
    pub heads_per_unit: Option<usize>,
    /// Units per cube instead of CubeCL's element-wise default (`ROPE_POOL_CUBE_DIM`).
    pub cube_dim: Option<usize>,
    /// Cap on the vector width, in elements (`ROPE_POOL_VECTOR`).
    pub max_vector: Option<usize>,
    /// Attention: the most key tiles a split chunk holds (portable kernel), the fewest
    /// iterations (plane kernel) (`ROPE_POOL_ATTENTION_CHUNK_TILES`).
    pub attention_chunk_tiles: Option<usize>,
    /// Attention: the most cubes a split aims for (`ROPE_POOL_ATTENTION_CUBES`).
    pub attention_cubes: Option<usize>,
    /// Attention, plane kernel: units per cube (`ROPE_POOL_ATTENTION_UNITS`).
    pub attention_units: Option<usize>,
    /// Attention, plane kernel: keys per key group per iteration
    /// (`ROPE_POOL_ATTENTION_STEPS`).
    pub attention_steps: Option<usize>,
    /// Attention, plane kernel: the most units per key (`ROPE_POOL_ATTENTION_LANES`).
    pub attention_lanes: Option<usize>,
    /// Attention: the portable kernel even where planes exist
    /// (`ROPE_POOL_ATTENTION_PORTABLE=1`).
    pub attention_portable: bool,
    /// Few-rows product: the most column tiles a cube (`ROPE_POOL_FEW_COLS`, 1 to 4).
    pub few_rows_cols: Option<usize>,
    /// Few-rows product: planes a cube (`ROPE_POOL_FEW_PLANES`, 1 to 8).
    pub few_rows_planes: Option<usize>,
    /// Prefill products through SPIR-V: the forced cubek blueprint `[pm, pn, pk, sm, sn,
    /// buffers, sms]` of the decoder's wide stage (`ROPE_POOL_BLUEPRINT=pm,pn,pk/sm,sn/buffers/sms`);
    /// another k partition sums in another order, so not bit for bit.
    pub blueprint: Option<[u32; 7]>,
}

#[cfg(feature = "tuning")]
impl LaunchTuning {
    /// The settings of the `ROPE_POOL_*` environment variables, read once per process (all unset:
    /// the defaults). Only in builds with the `tuning` feature: a server never changes its
    /// launch through its environment.
    pub fn from_env() -> Self {
        static TUNING: std::sync::OnceLock<LaunchTuning> = std::sync::OnceLock::new();
        *TUNING.get_or_init(|| {
            let number = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
            LaunchTuning {
                heads_per_unit: number("ROPE_POOL_HEADS_PER_UNIT"),
                cube_dim: number("ROPE_POOL_CUBE_DIM"),
                max_vector: number("ROPE_POOL_VECTOR"),
                attention_chunk_tiles: number("ROPE_POOL_ATTENTION_CHUNK_TILES"),
                attention_cubes: number("ROPE_POOL_ATTENTION_CUBES"),
                attention_units: number("ROPE_POOL_ATTENTION_UNITS"),
                attention_steps: number("ROPE_POOL_ATTENTION_STEPS"),
                attention_lanes: number("ROPE_POOL_ATTENTION_LANES"),
                attention_portable: number("ROPE_POOL_ATTENTION_PORTABLE") == Some(1),
                few_rows_cols: number("ROPE_POOL_FEW_COLS"),
                few_rows_planes: number("ROPE_POOL_FEW_PLANES"),
                blueprint: std::env::var("ROPE_POOL_BLUEPRINT").ok().and_then(|text| {
                    let values: Vec<u32> = text
                        .split(['/', ','])
                        .map(|v| v.trim().parse().ok())
                        .collect::<Option<_>>()?;
                    values.try_into().ok()
                }),
            }
        })
    }
}
