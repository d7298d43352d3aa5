//! The same op written with plain Burn tensor ops (what a model does without this crate):
//! rotation from a cos/sin table (every variant: NeoX or GPT-J pairs, a pass-through tail, scaled
//! frequencies, M-RoPE rows), then `select_assign` of the rotated keys and the values into the
//! pools. Several kernels and intermediate tensors instead of one pass: the baseline the
//! benchmarks compare against, and an independent implementation for the model tests.

use crate::op::RopePoolConfig;
use crate::op::rope::{RopeFrequencies, RopeStyle};
use burn::tensor::{Int, Tensor, TensorData};
#[cfg(feature = "testing")]
use {
    crate::common::pool_tensor::PoolTensor,
    crate::op::backend::QkNorm,
    crate::op::norm::head_rms_norm,
    crate::op::{RopePoolInputs, RopePoolOutputs},
    burn::backend::{Dispatch, TensorMetadata},
    burn::tensor::IndexingUpdateOp,
};

/// `position * inv_freq` of every (token, frequency), `[T, half]`, f32, from positions
/// `[rows, T]` (one row, or M-RoPE's three): frequency `i` takes its row's position.
fn angles(positions: &Tensor<2>, inv_freq: &[f64], rope: &RopeFrequencies) -> Tensor<2> {
    let [rows, num_tokens] = positions.dims();
    let half = inv_freq.len();
    let device = positions.device();
    let mut angle = Tensor::<2>::zeros([num_tokens, half], &device);
    for r in 0..rows {
        let masked: Vec<f32> = (0..half)
            .map(|i| {
                if rope.row(i) == r {
                    inv_freq[i] as f32
                } else {
                    0.0
                }
            })
            .collect();
        let masked = Tensor::<1>::from_data(TensorData::new(masked, [half]), &device);
        let row = positions.clone().slice([r..r + 1, 0..num_tokens]);
        angle = angle + row.reshape([num_tokens, 1]) * masked.reshape([1, half]);
    }
    angle
}

/// `cos` and `sin` of every (token, frequency) angle times the attention factor, `[T, 1, half]`,
/// in the tensors' dtype, from the naive f32 angle `position * inv_freq`. LongRoPE's set is
/// chosen on the device from the positions' maximum (no read-back).
fn cos_sin<const P: usize>(
    positions: Tensor<P, Int>,
    like: &Tensor<3>,
    config: &RopePoolConfig,
) -> (Tensor<3>, Tensor<3>) {
    let rope = config.frequencies().expect("a valid config");
    let half = rope.inv_freq.len();
    let num_tokens = positions.dims()[P - 1];
    let rows = positions.shape().num_elements() / num_tokens.max(1);
    let as_rows = positions.clone().float().reshape([rows, num_tokens]);
    let mut angle = angles(&as_rows, &rope.inv_freq, &rope);
    if let Some((long, from)) = &rope.long {
        let long_angle = angles(&as_rows, long, &rope);
        let use_long = positions
            .max()
            .greater_equal_elem(*from)
            .reshape([1, 1])
            .expand([num_tokens, half]);
        angle = angle.mask_where(use_long, long_angle);
    }
    let scale = rope.attention_factor as f32;
    let dtype = like.dtype();
    let shape = [num_tokens, 1, half];
    (
        (angle.clone().cos() * scale).reshape(shape).cast(dtype),
        (angle.sin() * scale).reshape(shape).cast(dtype),
    )
}

/// The config's rotation of every head of `x: [T, H, D]`.
fn rotate(x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>, config: &RopePoolConfig) -> Tensor<3> {
    let [t, h, d] = x.dims();
    let r = config.rotary_dim();
    let half = r / 2;
    let part = x.clone().slice([0..t, 0..h, 0..r]);
    let turn = |x1: Tensor<3>, x2: Tensor<3>| {
        (
            x1.clone() * cos.clone() - x2.clone() * sin.clone(),
            x1 * sin.clone() + x2 * cos.clone(),
        )
    };
    let rotated = match config.style {
        RopeStyle::Neox => {
            let x1 = part.clone().slice([0..t, 0..h, 0..half]);
            let x2 = part.slice([0..t, 0..h, half..r]);
            let (out1, out2) = turn(x1, x2);
            Tensor::cat(vec![out1, out2], 2)
        }
        RopeStyle::Gptj => {
            let pairs = part.reshape([t, h, half, 2]);
            let x1 = pairs
                .clone()
                .slice([0..t, 0..h, 0..half, 0..1])
                .reshape([t, h, half]);
            let x2 = pairs
                .slice([0..t, 0..h, 0..half, 1..2])
                .reshape([t, h, half]);
            let (out1, out2) = turn(x1, x2);
            Tensor::stack::<4>(vec![out1, out2], 3).reshape([t, h, r])
        }
    };
    if r < d {
        Tensor::cat(vec![rotated, x.slice([0..t, 0..h, r..d])], 2)
    } else {
        rotated
    }
}

/// The config's rotation of every head of `x: [T, H, D]` at `positions` (`[T]`, or `[3, T]`
/// with M-RoPE), with plain tensor ops.
///
/// # Panics
/// When `config` is invalid (see [`RopePoolConfig::frequencies`]).
pub fn rotate_unfused<const P: usize>(
    x: Tensor<3>,
    positions: Tensor<P, Int>,
    config: &RopePoolConfig,
) -> Tensor<3> {
    let (cos, sin) = cos_sin(positions, &x, config);
    rotate(x, &cos, &sin, config)
}

#[cfg(feature = "testing")]
/// `rope_pool_fused` with plain tensor ops (a q/k norm included). Every slot must be in `0..pool_size` (this path has
/// no way to skip a token without reading the slots back), and inputs are not validated.
///
/// # Panics
/// When `config` is invalid (see [`RopePoolConfig::frequencies`]), a tensor's rank is not the
/// contract's, or the pools are fp8 (this path writes float pools only).
pub fn rope_pool_unfused(inputs: RopePoolInputs, config: &RopePoolConfig) -> RopePoolOutputs {
    let (q, k) = match inputs.qk_norm {
        QkNorm::None => (inputs.q, inputs.k),
        QkNorm::Rms { q_weight, k_weight } => (
            head_rms_norm::<Dispatch>(inputs.q, q_weight, config.qk_norm_eps),
            head_rms_norm::<Dispatch>(inputs.k, k_weight, config.qk_norm_eps),
        ),
    };
    let float = |pool: PoolTensor| {
        pool.into_float_tensor()
            .expect("rope_pool_unfused writes float pools only (fp8 pools: rope_pool_fused)")
    };
    let (k_pool, v_pool) = (float(inputs.k_pool), float(inputs.v_pool));
    let [q, k, v] = [q, k, inputs.v].map(Tensor::<3>::from_dispatch);
    let (cos, sin) = match inputs.positions.shape().len() {
        1 => cos_sin(
            Tensor::<1, Int>::from_dispatch(inputs.positions),
            &q,
            config,
        ),
        _ => cos_sin(
            Tensor::<2, Int>::from_dispatch(inputs.positions),
            &q,
            config,
        ),
    };
    let slots = Tensor::<1, Int>::from_dispatch(inputs.slots);
    let q_rot = rotate(q, &cos, &sin, config);
    let k_rot = rotate(k, &cos, &sin, config);
    let k_pool = k_pool.select_assign(0, slots.clone(), k_rot.clone(), IndexingUpdateOp::Assign);
    let v_pool = v_pool.select_assign(0, slots, v, IndexingUpdateOp::Assign);
    RopePoolOutputs {
        q_rot,
        k_rot,
        k_pool: k_pool.into(),
        v_pool: v_pool.into(),
    }
}
