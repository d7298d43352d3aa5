//! The argument checks of `rope_pool_fused`, in the order the contract lists them. Pure
//! functions of shapes, dtypes and host values: nothing here touches a device.

use crate::rope::RopeFrequencies;
use crate::{Dims, RopePoolConfig, RopePoolError};
use burn::tensor::DType;
use std::sync::Arc;

/// What validation needs to know of one call's tensors.
#[derive(Clone, Debug)]
pub(crate) struct CallSignature {
    pub q: Dims,
    pub k: Dims,
    pub v: Dims,
    pub positions: Dims,
    pub slots: Dims,
    pub k_pool: Dims,
    pub v_pool: Dims,
    /// dtypes of q, k, v, k_pool, v_pool.
    pub dtypes: [DType; 5],
}

/// Checks shapes, dtypes and the config, returning the first failure in contract order, or the
/// call's frequencies.
pub(crate) fn validate(
    sig: &CallSignature,
    config: &RopePoolConfig,
) -> Result<Arc<RopeFrequencies>, RopePoolError> {
    let (q, k, v) = (&sig.q.0, &sig.k.0, &sig.v.0);
    let (k_pool, v_pool) = (&sig.k_pool.0, &sig.v_pool.0);
    if q.len() != 3 || k.len() != 3 || v.len() != 3 {
        return Err(RopePoolError::QkvRank {
            q: sig.q.clone(),
            k: sig.k.clone(),
            v: sig.v.clone(),
        });
    }
    // With M-RoPE, check 14 replaces check 2 for positions; slots stay 1-D.
    let mrope = config.mrope.is_some();
    if (!mrope && sig.positions.0.len() != 1) || sig.slots.0.len() != 1 {
        return Err(RopePoolError::IndexRank {
            positions: sig.positions.clone(),
            slots: sig.slots.clone(),
        });
    }
    if mrope && sig.positions.0[..] != [3, q[0]] {
        return Err(RopePoolError::MropePositions {
            positions: sig.positions.clone(),
        });
    }
    if k_pool.len() != 3 || v_pool.len() != 3 {
        return Err(RopePoolError::PoolRank {
            k_pool: sig.k_pool.clone(),
            v_pool: sig.v_pool.clone(),
        });
    }
    let num_tokens = q[0];
    if q[1] != config.num_qo_heads || q[2] != config.head_dim {
        return Err(RopePoolError::QShape { q: sig.q.clone() });
    }
    if k[..] != [num_tokens, config.num_kv_heads, config.head_dim] {
        return Err(RopePoolError::KShape { k: sig.k.clone() });
    }
    if v != k {
        return Err(RopePoolError::VShape {
            v: sig.v.clone(),
            k: sig.k.clone(),
        });
    }
    let positions = *sig.positions.0.last().unwrap_or(&0);
    if positions != num_tokens || sig.slots.0[0] != num_tokens {
        return Err(RopePoolError::IndexLen {
            num_tokens,
            positions,
            slots: sig.slots.0[0],
        });
    }
    if k_pool[1] != config.num_kv_heads || k_pool[2] != config.head_dim {
        return Err(RopePoolError::KPoolShape {
            k_pool: sig.k_pool.clone(),
        });
    }
    if v_pool != k_pool {
        return Err(RopePoolError::VPoolShape {
            v_pool: sig.v_pool.clone(),
            k_pool: sig.k_pool.clone(),
        });
    }
    let [dq, dk, dv, dkp, dvp] = sig.dtypes;
    if dq != dk || dq != dv {
        return Err(RopePoolError::QkvDtype {
            q: dq,
            k: dk,
            v: dv,
        });
    }
    if dkp != dq || dvp != dq {
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
