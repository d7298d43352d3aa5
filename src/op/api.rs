//! The public entry points: every check of a call, then one dispatch of the backend trait.

use crate::op::backend::{RopePoolBackend, RopePoolInputs, RopePoolOutputs};
use crate::op::rope::RopeFrequencies;
use crate::op::validate::validate_slots;
use crate::op::{RopePoolConfig, RopePoolError};
use burn::backend::{Dispatch, DispatchDevice, TensorMetadata};
use burn::tensor::{DType, Device, DispatchTensor, Int, Tensor};
use std::fmt;
use std::sync::Arc;

/// Fails unless this build implements the op for `device`'s backend (an `Autodiff` device: for
/// the backend it wraps).
fn check_backend(device: &Device) -> Result<(), RopePoolError> {
    match device.as_dispatch().clone().inner() {
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(_) => Ok(()),
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => Ok(()),
        #[allow(unreachable_patterns)]
        _ => Err(RopePoolError::UnsupportedBackend {
            device: format!("{device:?}"),
        }),
    }
}

/// The values of an integer tensor as host integers (checked mode only: this reads the device).
/// A failed read is an error, never "no values". `u64` values past `i64::MAX` saturate to it
/// (they are out of every range checked here anyway).
fn host_ints(tensor: &DispatchTensor, name: &str) -> Result<Vec<i64>, RopePoolError> {
    let read_back = |e: String| RopePoolError::ReadBack {
        what: format!("{name}: {e}"),
    };
    let data = match tensor.shape().len() {
        1 => Tensor::<1, Int>::from_dispatch(tensor.clone()).try_into_data(),
        _ => Tensor::<2, Int>::from_dispatch(tensor.clone()).try_into_data(),
    }
    .map_err(|e| read_back(format!("{e:?}")))?;
    let values = match data.dtype() {
        DType::U64 => data.try_to_vec::<u64>().map(|v| {
            v.into_iter()
                .map(|x| i64::try_from(x).unwrap_or(i64::MAX))
                .collect()
        }),
        DType::I64 => data.try_to_vec::<i64>(),
        // Every other integer type widens to i64 exactly.
        _ => data.convert::<i64>().try_to_vec::<i64>(),
    };
    values.map_err(|e| read_back(format!("{e:?}")))
}

/// Whether an integer dtype holds values outside i32.
fn wider_than_i32(dtype: DType) -> bool {
    matches!(dtype, DType::I64 | DType::U64 | DType::U32)
}

/// The one integer type the kernel reads positions and slots in: i32 when both fit it, else i64
/// where the device has it (else i32: wider values wrap, see `check_slots`).
fn kernel_int_dtype(positions: DType, slots: DType, device: &Device) -> DType {
    if (wider_than_i32(positions) || wider_than_i32(slots)) && device.supports_dtype(DType::I64) {
        DType::I64
    } else {
        DType::I32
    }
}

/// The device a tensor lives on.
fn device_of(tensor: &DispatchTensor) -> DispatchDevice {
    tensor.device()
}

/// Every check of a call, in the contract's order; reads the slots back in checked mode.
/// Returns the call's frequencies.
fn check(
    inputs: &RopePoolInputs,
    config: &RopePoolConfig,
) -> Result<Arc<RopeFrequencies>, RopePoolError> {
    let rope = inputs.validate(config)?;
    let on = device_of(&inputs.q);
    let others = [
        &inputs.k,
        &inputs.v,
        &inputs.positions,
        &inputs.slots,
        inputs.k_pool.stored(),
        inputs.v_pool.stored(),
    ];
    let weights = inputs.qk_norm.weights().into_iter().flatten();
    if others
        .into_iter()
        .chain(weights)
        .any(|t| device_of(t) != on)
    {
        return Err(RopePoolError::DeviceMismatch);
    }
    let device = Device::new(on);
    check_backend(&device)?;
    let dtype = inputs.q.dtype();
    if !device.supports_dtype(dtype) {
        return Err(RopePoolError::DeviceDtype {
            dtype,
            device: format!("{device:?}"),
        });
    }
    if config.check_slots {
        if wider_than_i32(inputs.positions.dtype()) {
            let values = host_ints(&inputs.positions, "positions")?;
            if let Some((index, &position)) = values
                .iter()
                .enumerate()
                .find(|(_, p)| i32::try_from(**p).is_err())
            {
                return Err(RopePoolError::PositionRange { index, position });
            }
        }
        let pool_size = inputs.k_pool.stored_shape()[0];
        validate_slots(&host_ints(&inputs.slots, "slots")?, pool_size)?;
    }
    Ok(rope)
}

/// The op on inputs [`check`] has accepted, with the frequencies it returned.
fn run_checked(
    inputs: RopePoolInputs,
    rope: Arc<RopeFrequencies>,
    config: &RopePoolConfig,
) -> RopePoolOutputs {
    // The kernel reads positions and slots with one integer type.
    let device = Device::new(device_of(&inputs.q));
    let int_dtype = kernel_int_dtype(inputs.positions.dtype(), inputs.slots.dtype(), &device);
    // Positions are `[T]` or (M-RoPE) `[3, T]`, slots `[T]`.
    let as_kernel_int = |tensor: DispatchTensor| match tensor.shape().len() {
        _ if tensor.dtype() == int_dtype => tensor,
        1 => Tensor::<1, Int>::from_dispatch(tensor)
            .cast(int_dtype)
            .into_dispatch(),
        _ => Tensor::<2, Int>::from_dispatch(tensor)
            .cast(int_dtype)
            .into_dispatch(),
    };
    let inputs = RopePoolInputs {
        positions: as_kernel_int(inputs.positions),
        slots: as_kernel_int(inputs.slots),
        ..inputs
    };
    // `check` accepted the epsilon as a finite f32.
    let eps = config.qk_norm_eps as f32;
    <Dispatch as RopePoolBackend>::rope_pool_fused(inputs, rope, config.k_rot, eps).into()
}

/// A call [`try_rope_pool_fused`] refused: why, and its inputs, untouched, so a caller keeps
/// its pools. Converts into its [`RopePoolError`] with `?`.
pub struct RefusedCall {
    /// Why the call was refused (its `Display` is the documented message).
    pub error: RopePoolError,
    /// The call's inputs as they were passed: nothing was written.
    pub inputs: Box<RopePoolInputs>,
}

impl fmt::Debug for RefusedCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefusedCall")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for RefusedCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for RefusedCall {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<RefusedCall> for RopePoolError {
    fn from(refused: RefusedCall) -> Self {
        refused.error
    }
}

/// Applies rotary position embedding (the config's variant) to `q` and `k` and writes each
/// token's rotated key and raw value into row `slots[t]` of the KV pools, in one pass (one kernel
/// launch on GPU).
///
/// - `q: [num_tokens, num_qo_heads, head_dim]`, `k`, `v: [num_tokens, num_kv_heads, head_dim]`,
///   f32, f16 or bf16, one dtype;
/// - `positions: [num_tokens]` integers (`[3, num_tokens]` with M-RoPE), `slots: [num_tokens]`
///   integers; a slot `< 0` means "do not write", and a slot `>= pool_size` is never written (in
///   checked mode it is an error);
/// - `k_pool`, `v_pool: [pool_size, num_kv_heads, head_dim]` ([`PoolTensor`](crate::pool::PoolTensor)s):
///   of `q`'s dtype, or both fp8 e4m3 (their rows hold the codes of the f32 rotated keys and of the
///   values);
/// - optionally ([`RopePoolInputs::with_qk_norm`]) q/k norm weights `[head_dim]` in `q`'s dtype:
///   each head of q and k is RMS-normalised before it is rotated (Qwen3), in the same launch.
///
/// The pools are taken by value: when the caller holds no other handle to them they are updated
/// in place (no copy of the pool); a pool still shared elsewhere is copied first, so no other
/// holder sees it change. Every argument is checked before anything runs; on error nothing is
/// written, the inputs are dropped, and the error's `Display` is the documented message
/// (`docs/CONTRACT.md`). To keep the pools of a refused call, use [`try_rope_pool_fused`].
pub fn rope_pool_fused(
    inputs: RopePoolInputs,
    config: &RopePoolConfig,
) -> Result<RopePoolOutputs, RopePoolError> {
    try_rope_pool_fused(inputs, config).map_err(RopePoolError::from)
}

/// [`rope_pool_fused`] that hands a refused call's inputs back ([`RefusedCall`]): a caller
/// that keeps pools between calls (a KV pool, a decoder's cache) passes its only handles, so
/// an accepted call updates them in place, and a refused one returns them unchanged. Checks
/// once.
pub fn try_rope_pool_fused(
    inputs: RopePoolInputs,
    config: &RopePoolConfig,
) -> Result<RopePoolOutputs, RefusedCall> {
    match check(&inputs, config) {
        Ok(rope) => Ok(run_checked(inputs, rope, config)),
        Err(error) => Err(RefusedCall {
            error,
            inputs: Box::new(inputs),
        }),
    }
}

/// Runs every check of [`rope_pool_fused`] on borrowed inputs, without running the op.
pub fn check_rope_pool_fused(
    inputs: &RopePoolInputs,
    config: &RopePoolConfig,
) -> Result<(), RopePoolError> {
    check(inputs, config).map(|_| ())
}
