//! The `Tensor`-level entry point: validation, backend check, then one dispatch call.

use crate::backend::{RopePoolBackend, RopePoolInputs};
use crate::rope::RopeFrequencies;
use crate::validate::{CallSignature, validate, validate_slots};
use crate::{Dims, RopePoolConfig, RopePoolError};
use burn::backend::Dispatch;
use burn::backend::TensorMetadata;
use burn::tensor::{DType, Device, DispatchTensor, Int, Tensor};
use std::sync::Arc;

/// A float tensor argument of any rank (the rank is checked at run time, so a wrong one gets
/// the documented error). Built from any `Tensor<D>` with `.into()`.
pub struct FloatArg {
    tensor: DispatchTensor,
    device: Device,
}

/// An integer tensor argument of any rank. Built from any `Tensor<D, Int>` with `.into()`.
pub struct IntArg {
    tensor: DispatchTensor,
    device: Device,
}

impl<const D: usize> From<Tensor<D>> for FloatArg {
    fn from(tensor: Tensor<D>) -> Self {
        let device = tensor.device();
        Self {
            tensor: tensor.into_dispatch(),
            device,
        }
    }
}

impl<const D: usize> From<Tensor<D, Int>> for IntArg {
    fn from(tensor: Tensor<D, Int>) -> Self {
        let device = tensor.device();
        Self {
            tensor: tensor.into_dispatch(),
            device,
        }
    }
}

fn dims(tensor: &DispatchTensor) -> Dims {
    Dims(tensor.shape().to_vec())
}

/// The outputs of [`rope_pool_fused`].
#[derive(Clone, Debug)]
pub struct RopePoolOutput {
    /// Rotated queries, `[num_tokens, num_qo_heads, head_dim]`.
    pub q_rot: Tensor<3>,
    /// Rotated keys, `[num_tokens, num_kv_heads, head_dim]` (`[0, num_kv_heads, head_dim]` when
    /// the config's `k_rot` is off).
    pub k_rot: Tensor<3>,
    /// The key pool, row `slots[t]` replaced by `k_rot[t]` for every valid slot.
    pub k_pool: Tensor<3>,
    /// The value pool, row `slots[t]` replaced by `v[t]` for every valid slot.
    pub v_pool: Tensor<3>,
}

/// Fails unless this build implements the op for `device`'s backend (an `Autodiff` device: for
/// the backend it wraps).
fn check_backend(device: &Device) -> Result<(), RopePoolError> {
    use burn::backend::DispatchDevice;
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

/// The seven arguments of one call, before validation.
struct Args {
    q: FloatArg,
    k: FloatArg,
    v: FloatArg,
    positions: IntArg,
    slots: IntArg,
    k_pool: FloatArg,
    v_pool: FloatArg,
}

impl Args {
    /// Every check of a call, in the contract's order; reads the slots back in checked mode.
    /// Returns the call's frequencies.
    fn check(&self, config: &RopePoolConfig) -> Result<Arc<RopeFrequencies>, RopePoolError> {
        let Args {
            q,
            k,
            v,
            positions,
            slots,
            k_pool,
            v_pool,
        } = self;
        let signature = CallSignature {
            q: dims(&q.tensor),
            k: dims(&k.tensor),
            v: dims(&v.tensor),
            positions: dims(&positions.tensor),
            slots: dims(&slots.tensor),
            k_pool: dims(&k_pool.tensor),
            v_pool: dims(&v_pool.tensor),
            dtypes: [q, k, v, k_pool, v_pool].map(|t| t.tensor.dtype()),
        };
        let rope = validate(&signature, config)?;
        let devices = [&k.device, &v.device, &k_pool.device, &v_pool.device];
        if devices.iter().any(|d| **d != q.device)
            || positions.device != q.device
            || slots.device != q.device
        {
            return Err(RopePoolError::DeviceMismatch);
        }
        check_backend(&q.device)?;
        let dtype = signature.dtypes[0];
        if !q.device.supports_dtype(dtype) {
            return Err(RopePoolError::DeviceDtype {
                dtype,
                device: format!("{:?}", q.device),
            });
        }
        if config.check_slots {
            if wider_than_i32(positions.tensor.dtype()) {
                let values = host_ints(&positions.tensor, "positions")?;
                if let Some((index, &position)) = values
                    .iter()
                    .enumerate()
                    .find(|(_, p)| i32::try_from(**p).is_err())
                {
                    return Err(RopePoolError::PositionRange { index, position });
                }
            }
            validate_slots(&host_ints(&slots.tensor, "slots")?, signature.k_pool.0[0])?;
        }
        Ok(rope)
    }

    /// The op on arguments [`Args::check`] has accepted, with the frequencies it returned.
    fn run_checked(self, rope: Arc<RopeFrequencies>, config: &RopePoolConfig) -> RopePoolOutput {
        // The kernel reads positions and slots with one integer type.
        let int_dtype = kernel_int_dtype(
            self.positions.tensor.dtype(),
            self.slots.tensor.dtype(),
            &self.q.device,
        );
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
        let positions = as_kernel_int(self.positions.tensor);
        let slots = as_kernel_int(self.slots.tensor);
        let inputs = RopePoolInputs {
            q: self.q.tensor,
            k: self.k.tensor,
            v: self.v.tensor,
            positions,
            slots,
            k_pool: self.k_pool.tensor,
            v_pool: self.v_pool.tensor,
        };
        let out = <Dispatch as RopePoolBackend>::rope_pool_fused(inputs, rope, config.k_rot);
        RopePoolOutput {
            q_rot: Tensor::from_dispatch(out.q_rot),
            k_rot: Tensor::from_dispatch(out.k_rot),
            k_pool: Tensor::from_dispatch(out.k_pool),
            v_pool: Tensor::from_dispatch(out.v_pool),
        }
    }
}

/// [`rope_pool_fused`] on pools a caller keeps (a KV pool, a decoder's cache): checked while the
/// pools are only borrowed, so a refused call leaves them in place unchanged; an accepted one
/// takes them as the only handle (updated in place) and puts the new pools back. Returns
/// `(q_rot, k_rot)`. Checks once, unlike [`check_rope_pool_fused`] then [`rope_pool_fused`].
///
/// # Panics
/// When a pool is `None` (the callers keep both present between calls).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rope_pool_in_pools(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    positions: impl Into<IntArg>,
    slots: Tensor<1, Int>,
    k_pool: &mut Option<Tensor<3>>,
    v_pool: &mut Option<Tensor<3>>,
    config: &RopePoolConfig,
) -> Result<(Tensor<3>, Tensor<3>), RopePoolError> {
    let present = "the caller's pools are present";
    let args = Args {
        q: q.into(),
        k: k.into(),
        v: v.into(),
        positions: positions.into(),
        slots: slots.into(),
        k_pool: k_pool.clone().expect(present).into(),
        v_pool: v_pool.clone().expect(present).into(),
    };
    let rope = args.check(config)?;
    // The borrowed handles go before the run, so the pools are not shared during it.
    drop(args.k_pool);
    drop(args.v_pool);
    let out = Args {
        k_pool: k_pool.take().expect(present).into(),
        v_pool: v_pool.take().expect(present).into(),
        ..args
    }
    .run_checked(rope, config);
    *k_pool = Some(out.k_pool);
    *v_pool = Some(out.v_pool);
    Ok((out.q_rot, out.k_rot))
}

/// Runs every check of [`rope_pool_fused`] on borrowed tensors, without running the op: for
/// callers that must keep their pools when a call would be refused (the pools passed to
/// `rope_pool_fused` are consumed, error or not). `positions` is `[T]`, or `[3, T]` with M-RoPE.
#[allow(clippy::too_many_arguments)]
pub fn check_rope_pool_fused<const P: usize>(
    q: &Tensor<3>,
    k: &Tensor<3>,
    v: &Tensor<3>,
    positions: &Tensor<P, Int>,
    slots: &Tensor<1, Int>,
    k_pool: &Tensor<3>,
    v_pool: &Tensor<3>,
    config: &RopePoolConfig,
) -> Result<(), RopePoolError> {
    Args {
        q: q.clone().into(),
        k: k.clone().into(),
        v: v.clone().into(),
        positions: positions.clone().into(),
        slots: slots.clone().into(),
        k_pool: k_pool.clone().into(),
        v_pool: v_pool.clone().into(),
    }
    .check(config)
    .map(|_| ())
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
/// - `k_pool`, `v_pool: [pool_size, num_kv_heads, head_dim]`, the dtype of `q`.
///
/// The pools are taken by value: when the caller holds no other handle to them they are updated
/// in place (no copy of the pool); a pool still shared elsewhere is copied first, so no other
/// holder sees it change. Every argument is checked before anything runs; on error nothing is
/// written and the error's `Display` is the documented message.
#[allow(clippy::too_many_arguments)]
pub fn rope_pool_fused(
    q: impl Into<FloatArg>,
    k: impl Into<FloatArg>,
    v: impl Into<FloatArg>,
    positions: impl Into<IntArg>,
    slots: impl Into<IntArg>,
    k_pool: impl Into<FloatArg>,
    v_pool: impl Into<FloatArg>,
    config: &RopePoolConfig,
) -> Result<RopePoolOutput, RopePoolError> {
    let args = Args {
        q: q.into(),
        k: k.into(),
        v: v.into(),
        positions: positions.into(),
        slots: slots.into(),
        k_pool: k_pool.into(),
        v_pool: v_pool.into(),
    };
    let rope = args.check(config)?;
    Ok(args.run_checked(rope, config))
}
