//! CubeCL helpers every layer's launches use.

use rope_pool_kernels::LaunchTuning;

/// The kernels' launch knobs, one set per room of the kernels crate: the defaults, or in
/// benchmark builds (feature `tuning`) the `ROPE_POOL_*` environment variables, read once.
pub(crate) fn tuning() -> LaunchTuning {
    #[cfg(feature = "tuning")]
    return LaunchTuning::from_env();
    #[cfg(not(feature = "tuning"))]
    LaunchTuning::default()
}
