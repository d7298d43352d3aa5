//! The decoder's oracle (`testing` builds): the same layer loop with Burn's tensor ops throughout
//! — RMSNorm, the projections as plain matmuls, SiLU·up, and the op's unfused path
//! ([`rope_pool_unfused`], the q/k norm as tensor ops too) — to check the kernels against.

use crate::model::decoder::LayerOps;
use crate::model::generate::generate_with;
use crate::model::kernels::{add_rms_norm_tensor_ops, rms_norm_tensor_ops, silu_mul_tensor_ops};
use crate::model::weights::Linear;
use crate::model::{Decoder, DecoderError, GenerateError, GenerateOptions, Generated, Request};
use crate::model::{Stats, StepToken};
use crate::op::unfused::rope_pool_unfused;
use crate::op::{
    Fp8PoolError, RefusedCall, RopePoolConfig, RopePoolInputs, RopePoolOutputs,
    check_rope_pool_fused,
};
use crate::pool::KvPool;
use burn::tensor::Tensor;

/// Burn's tensor ops for every operation of a layer.
struct TensorOps;

impl LayerOps for TensorOps {
    fn rms_norm(&self, x: Tensor<2>, w: &Tensor<1>, eps: f64) -> Tensor<2> {
        rms_norm_tensor_ops(x, w, eps)
    }
    fn add_rms_norm(
        &self,
        x: Tensor<2>,
        y: Tensor<2>,
        w: &Tensor<1>,
        eps: f64,
    ) -> (Tensor<2>, Tensor<2>) {
        add_rms_norm_tensor_ops(x, y, w, eps)
    }
    fn project(&self, linear: &Linear, x: Tensor<2>) -> Tensor<2> {
        linear.forward_matmul(x)
    }
    fn silu_mul(&self, gate_up: Tensor<2>) -> Tensor<2> {
        silu_mul_tensor_ops(gate_up)
    }
    fn rope(
        &self,
        inputs: RopePoolInputs,
        config: &RopePoolConfig,
    ) -> Result<RopePoolOutputs, RefusedCall> {
        // The unfused path writes float pools only: an fp8 pool is refused, kept.
        let fp8 = inputs.k_pool.fp8_scale().is_some();
        match check_rope_pool_fused(&inputs, config) {
            Ok(()) if fp8 => Err(RefusedCall {
                error: Fp8PoolError::Unfused.into(),
                inputs: Box::new(inputs),
            }),
            Ok(()) => Ok(rope_pool_unfused(inputs, config)),
            Err(error) => Err(RefusedCall {
                error,
                inputs: Box::new(inputs),
            }),
        }
    }
}

/// [`Decoder::step`] through the oracle: Burn's tensor ops and the op's unfused path (float
/// pools only: an fp8 pool is refused and left as it was).
pub fn step_unfused(
    decoder: &Decoder,
    tokens: &[StepToken],
    pool: &mut KvPool,
) -> Result<Tensor<2>, DecoderError> {
    decoder.step_with(&TensorOps, tokens, pool)
}

/// [`generate`](crate::model::generate) through the oracle ([`step_unfused`]).
pub fn generate_unfused(
    decoder: &Decoder,
    requests: &[Request],
    options: &GenerateOptions,
) -> Result<(Vec<Generated>, Stats), GenerateError> {
    generate_with(step_unfused, decoder, requests, options, |_| ())
}
