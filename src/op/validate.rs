//! The argument checks of `rope_pool_fused`, in the order the contract lists them. Pure
//! functions of shapes, dtypes and host values: nothing here touches a device.

use crate::common::pool_tensor::{Fp8PoolError, check_pool_kinds};
use crate::op::backend::RopePoolInputs;
use crate::op::rope::RopeFrequencies;
use crate::op::{Dims, RopePoolConfig, RopePoolError};
use burn::backend::{Backend, TensorMetadata};
use burn::tensor::{DType, Shape};
use rope_pool_kernels::rope::MAX_NORM_HEAD_DIM;
use std::sync::Arc;

impl<B: Backend> RopePoolInputs<B> {
    /// Checks shapes, dtypes and the config — checks 1 to 15 of the contract and the float
    /// dtype, in the contract's order — returning the first failure, or the call's frequencies.
    pub(crate) fn validate(
        &self,
        config: &RopePoolConfig,
    ) -> Result<Arc<RopeFrequencies>, RopePoolError> {
        let dims = |shape: Shape| Dims(shape.to_vec());
        let [q, k, v] = [&self.q, &self.k, &self.v].map(|t| dims(t.shape()));
        let [k_pool, v_pool] = [&self.k_pool, &self.v_pool].map(|p| dims(p.stored_shape()));
        let [positions, slots] = [&self.positions, &self.slots].map(|t| dims(t.shape()));
        let [dk_pool, dv_pool] = [&self.k_pool, &self.v_pool].map(|p| p.stored_dtype());
        let dtypes = [
            self.q.dtype(),
            self.k.dtype(),
            self.v.dtype(),
            dk_pool,
            dv_pool,
        ];
        // Checked in its place among the shape checks (the pools' shapes depend on it).
        let kinds = check_pool_kinds(
            &self.k_pool,
            &self.v_pool,
            config.head_dim,
            Some(config.rotary_dim()),
        );
        let frequencies = validate_signature(
            [&q, &k, &v, &positions, &slots, &k_pool, &v_pool],
            dtypes,
            kinds,
            config,
        )?;
        if let Some(weights) = self.qk_norm.weights() {
            validate_norm(
                weights.map(|w| dims(w.shape())),
                weights.map(|w| w.dtype()),
                dtypes[0],
                config,
            )?;
        }
        Ok(frequencies)
    }
}

/// The checks of a call with a q/k norm (after every other shape, dtype and config check): the
/// weights' shapes and dtypes, the epsilon, the head size the kernel takes.
fn validate_norm(
    [q_norm, k_norm]: [Dims; 2],
    [dq, dk]: [DType; 2],
    dtype: DType,
    config: &RopePoolConfig,
) -> Result<(), RopePoolError> {
    let head_dim = config.head_dim;
    if q_norm.0[..] != [head_dim] || k_norm.0[..] != [head_dim] {
        return Err(RopePoolError::QkNormShape {
            head_dim,
            q_norm,
            k_norm,
        });
    }
    if dq != dtype || dk != dtype {
        return Err(RopePoolError::QkNormDtype {
            qkv: dtype,
            q_norm: dq,
            k_norm: dk,
        });
    }
    let eps = config.qk_norm_eps;
    if !(eps >= 0.0 && (eps as f32).is_finite()) {
        return Err(RopePoolError::QkNormEps { eps });
    }
    if head_dim > MAX_NORM_HEAD_DIM {
        return Err(RopePoolError::QkNormHeadDim { head_dim });
    }
    Ok(())
}

/// [`RopePoolInputs::validate`] on the shapes (in field order; the pools' as stored) and dtypes
/// (q, k, v, k_pool, v_pool) of a call, and the verdict on the pools' kinds (`Ok(true)`: fp8).
fn validate_signature(
    shapes: [&Dims; 7],
    dtypes: [DType; 5],
    kinds: Result<bool, Fp8PoolError>,
    config: &RopePoolConfig,
) -> Result<Arc<RopeFrequencies>, RopePoolError> {
    let [sq, sk, sv, spositions, sslots, sk_pool, sv_pool] = shapes;
    let (q, k, v) = (&sq.0, &sk.0, &sv.0);
    let (k_pool, v_pool) = (&sk_pool.0, &sv_pool.0);
    if q.len() != 3 || k.len() != 3 || v.len() != 3 {
        return Err(RopePoolError::QkvRank {
            q: sq.clone(),
            k: sk.clone(),
            v: sv.clone(),
        });
    }
    // With M-RoPE, check 14 replaces check 2 for positions; slots stay 1-D.
    let mrope = config.mrope.is_some();
    if (!mrope && spositions.0.len() != 1) || sslots.0.len() != 1 {
        return Err(RopePoolError::IndexRank {
            positions: spositions.clone(),
            slots: sslots.clone(),
        });
    }
    if mrope && spositions.0[..] != [3, q[0]] {
        return Err(RopePoolError::MropePositions {
            positions: spositions.clone(),
        });
    }
    if k_pool.len() != 3 || v_pool.len() != 3 {
        return Err(RopePoolError::PoolRank {
            k_pool: sk_pool.clone(),
            v_pool: sv_pool.clone(),
        });
    }
    let num_tokens = q[0];
    if q[1] != config.num_qo_heads || q[2] != config.head_dim {
        return Err(RopePoolError::QShape { q: sq.clone() });
    }
    if k[..] != [num_tokens, config.num_kv_heads, config.head_dim] {
        return Err(RopePoolError::KShape { k: sk.clone() });
    }
    if v != k {
        return Err(RopePoolError::VShape {
            v: sv.clone(),
            k: sk.clone(),
        });
    }
    let positions = *spositions.0.last().unwrap_or(&0);
    if positions != num_tokens || sslots.0[0] != num_tokens {
        return Err(RopePoolError::IndexLen {
            num_tokens,
            positions,
            slots: sslots.0[0],
        });
    }
    // The pools' kinds (fp8: their own checks), then their shapes: an fp8 pool stores a head
    // row as `head_dim / 4` words.
    let fp8 = kinds?;
    let row = match fp8 {
        true => config.head_dim / 4,
        false => config.head_dim,
    };
    if k_pool[1] != config.num_kv_heads || k_pool[2] != row {
        return Err(RopePoolError::KPoolShape {
            k_pool: sk_pool.clone(),
        });
    }
    if v_pool != k_pool {
        return Err(RopePoolError::VPoolShape {
            v_pool: sv_pool.clone(),
            k_pool: sk_pool.clone(),
        });
    }
    let [dq, dk, dv, dkp, dvp] = dtypes;
    if dq != dk || dq != dv {
        return Err(RopePoolError::QkvDtype {
            q: dq,
            k: dk,
            v: dv,
        });
    }
    // fp8 pools: their own checks (run by `validate` before this); float ones: q's dtype.
    if !fp8 && (dkp != dq || dvp != dq) {
        return Err(RopePoolError::PoolDtype {
            qkv: dq,
            k_pool: dkp,
            v_pool: dvp,
        });
    }
    validate_config(config)?;
    let frequencies = config.frequencies()?;
    if !matches!(dq, DType::F32 | DType::F16 | DType::BF16) {
        return Err(RopePoolError::FloatDtype { dtype: dq });
    }
    Ok(frequencies)
}

/// The checks of the config alone (after the shape and dtype checks of the contract).
fn validate_config(config: &RopePoolConfig) -> Result<(), RopePoolError> {
    if config.head_dim == 0 || !config.head_dim.is_multiple_of(2) {
        return Err(RopePoolError::HeadDim {
            head_dim: config.head_dim,
        });
    }
    if config.num_qo_heads == 0 || config.num_kv_heads == 0 {
        return Err(RopePoolError::HeadCount {
            num_qo_heads: config.num_qo_heads,
            num_kv_heads: config.num_kv_heads,
        });
    }
    if !(config.rope_base.is_finite() && config.rope_base > 0.0) {
        return Err(RopePoolError::RopeBase {
            rope_base: config.rope_base,
        });
    }
    Ok(())
}

/// Checked mode: every non-negative slot must be inside the pool and used once.
pub(crate) fn validate_slots(slots: &[i64], pool_size: usize) -> Result<(), RopePoolError> {
    let mut owner = std::collections::HashMap::with_capacity(slots.len());
    for (token, &slot) in slots.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        if slot as u64 >= pool_size as u64 {
            return Err(RopePoolError::SlotOutOfRange {
                token,
                slot,
                pool_size,
            });
        }
        if let Some(first) = owner.insert(slot, token) {
            return Err(RopePoolError::DuplicateSlot {
                slot,
                first,
                second: token,
            });
        }
    }
    Ok(())
}
