//! What a device can hold: pools are checked against it before they are allocated, so a size
//! the device cannot give is an error, not an aborted process.

use crate::pool::KvPoolError;
use burn::tensor::{DType, Device};

/// The bytes of `tensors` pools of `rows` rows of `heads × head_dim` elements of `dtype`
/// (`None` past `u64::MAX`).
pub(crate) fn pool_bytes(
    rows: usize,
    heads: usize,
    head_dim: usize,
    dtype: DType,
    tensors: usize,
) -> Option<u64> {
    [rows, heads, head_dim, dtype.size(), tensors]
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(u64::try_from(n).ok()?))
}

/// The memory the system reports available (`MemAvailable` of `/proc/meminfo`), where it can be
/// read: what a Flex (CPU) allocation can take without aborting the process.
#[cfg(feature = "flex")]
fn system_available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The most bytes `tensors` equal allocations on `device` may take together, and where the
/// figure comes from: on Flex the memory the system has available; on a CubeCL device the
/// memory its runtime says it can hold, and at most `tensors` times its largest allocation.
/// `None` where nothing is known (the allocation is then the runtime's to refuse).
pub fn memory_limit(device: &Device, tensors: u64) -> Option<(u64, &'static str)> {
    use burn::backend::DispatchDevice;
    #[cfg(not(feature = "cube"))]
    let _ = tensors; // only CubeCL runtimes report a largest allocation
    match device.as_dispatch().clone().inner() {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => {
            system_available_memory().map(|m| (m, "the system has available"))
        }
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(cube) => {
            let client = cube.client();
            let memory = &client.properties().memory;
            let per_allocation = memory.max_page_size.saturating_mul(tensors.max(1));
            Some(match memory.max_memory() {
                Some(total) if total < per_allocation => (total, "the device can hold"),
                _ => (
                    per_allocation,
                    "the device's largest allocations allow (one per pool)",
                ),
            })
        }
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// Refuses `rows`-row pools of `bytes` in all (as `tensors` equal allocations) that pass i32
/// slot addressing, the caller's `limit` if any, or [`memory_limit`] of `device`. The slot
/// allocator's free list (4 bytes a row, host memory) is counted too. The device's limit is its
/// capacity, not what is free after the weights: a pool that fits the capacity but not the free
/// memory is the runtime's to refuse.
pub(crate) fn check_pool_memory(
    device: &Device,
    rows: usize,
    bytes: Option<u64>,
    tensors: u64,
    limit: Option<u64>,
) -> Result<(), KvPoolError> {
    let max = i32::MAX as usize;
    if rows > max {
        return Err(KvPoolError::TooManyRows { rows, max });
    }
    let bytes = bytes.and_then(|b| b.checked_add(4 * rows as u64));
    let mut limits = limit
        .map(|limit| (limit, "allowed"))
        .into_iter()
        .chain(memory_limit(device, tensors));
    match limits.find(|&(limit, _)| bytes.is_none_or(|b| b > limit)) {
        Some((limit, source_of_limit)) => Err(KvPoolError::Memory {
            rows,
            bytes,
            limit,
            source_of_limit,
        }),
        None => Ok(()),
    }
}
