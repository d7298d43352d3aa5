//! The same op written with plain Burn tensor ops (what a model does without this crate): NeoX
//! rotation from a cos/sin table, then `select_assign` of the rotated keys and the values into
//! the pools. Several kernels and intermediate tensors instead of one pass: the baseline the
//! benchmarks compare against, and an independent implementation for the model tests.

use crate::{RopePoolConfig, RopePoolOutput};
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData};

/// `cos` and `sin` of every (token, frequency) angle, `[T, 1, D/2]`, in the tensors' dtype,
/// from the naive f32 angle `position * inv_freq`.
fn cos_sin(
    positions: Tensor<1, Int>,
    like: &Tensor<3>,
    config: &RopePoolConfig,
) -> (Tensor<3>, Tensor<3>) {
    let half = config.head_dim / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| {
            config
                .rope_base
                .powf(-2.0 * i as f64 / config.head_dim as f64) as f32
        })
        .collect();
    let device = like.device();
    let inv_freq = Tensor::<1>::from_data(TensorData::new(inv_freq, [half]), &device);
    let num_tokens = positions.dims()[0];
    let angle = positions.float().reshape([num_tokens, 1, 1]) * inv_freq.reshape([1, 1, half]);
    let dtype = like.dtype();
    (angle.clone().cos().cast(dtype), angle.sin().cast(dtype))
}

/// NeoX rotation of every head of `x: [T, H, D]`.
fn rotate(x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<3> {
    let [t, h, d] = x.dims();
    let x1 = x.clone().slice([0..t, 0..h, 0..d / 2]);
    let x2 = x.slice([0..t, 0..h, d / 2..d]);
    let out1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
    let out2 = x1 * sin.clone() + x2 * cos.clone();
    Tensor::cat(vec![out1, out2], 2)
}

/// NeoX rotation of every head of `x: [T, H, D]` at `positions`, with plain tensor ops.
pub fn rotate_unfused(
    x: Tensor<3>,
    positions: Tensor<1, Int>,
    config: &RopePoolConfig,
) -> Tensor<3> {
    let (cos, sin) = cos_sin(positions, &x, config);
    rotate(x, &cos, &sin)
}

/// `rope_pool_fused` with plain tensor ops. Every slot must be in `0..pool_size` (this path has
/// no way to skip a token without reading the slots back), and inputs are not validated.
#[allow(clippy::too_many_arguments)]
pub fn rope_pool_unfused(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    positions: Tensor<1, Int>,
    slots: Tensor<1, Int>,
    k_pool: Tensor<3>,
    v_pool: Tensor<3>,
    config: &RopePoolConfig,
) -> RopePoolOutput {
    let (cos, sin) = cos_sin(positions, &q, config);
    let q_rot = rotate(q, &cos, &sin);
    let k_rot = rotate(k, &cos, &sin);
    let k_pool = k_pool.select_assign(0, slots.clone(), k_rot.clone(), IndexingUpdateOp::Assign);
    let v_pool = v_pool.select_assign(0, slots, v, IndexingUpdateOp::Assign);
    RopePoolOutput {
        q_rot,
        k_rot,
        k_pool,
        v_pool,
    }
}
