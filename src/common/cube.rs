//! CubeCL helpers every layer's launches use.

use rope_pool_kernels::LaunchTuning;

/// The kernels' launch knobs, one set per room of the kernels crate: the defaults, or in
/// benchmark builds (feature `tuning`) the `ROPE_POOL_*` environment variables, read once.
pub(crate) fn tuning() -> LaunchTuning {
    LaunchTuning::current()
}

/// Benchmark builds (feature `tuning`) with `ROPE_POOL_TRACE` set: `what` on stderr, once per
/// distinct text (which launch each shape of a run took, and the device's tensor-core tiles);
/// the variable is read once per process.
#[cfg(feature = "tuning")]
pub(crate) fn trace(what: impl FnOnce() -> String) {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static ON: OnceLock<bool> = OnceLock::new();
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    // Read once: this sits on every call's path in the builds that time the host cost.
    if !*ON.get_or_init(|| std::env::var_os("ROPE_POOL_TRACE").is_some()) {
        return;
    }
    let text = what();
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if seen.get_or_insert_with(HashSet::new).insert(text.clone()) {
        eprintln!("{text}");
    }
}

/// The CubeCL tensor behind `t` in builds without Burn's fusion stream (`None` for a tensor of
/// another backend): what a captured graph's buffers are checked and written through.
#[cfg(not(feature = "fusion"))]
pub(crate) fn cube_tensor(
    t: &burn::backend::DispatchTensor,
) -> Option<&burn_cubecl::tensor::CubeTensor> {
    use burn::backend::{BackendTensor, DispatchTensorKind};
    match &t.kind {
        DispatchTensorKind::Cube(BackendTensor::Float(c) | BackendTensor::Int(c)) => Some(c),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}
