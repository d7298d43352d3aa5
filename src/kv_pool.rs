//! A layer's token-slot KV pool: the k/v pool tensors, and the allocator that hands out their
//! rows to the tokens of running sequences (continuous batching).

use crate::api::rope_pool_in_pools;
use crate::{RopePoolConfig, RopePoolError};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use std::collections::HashMap;

/// Identifies a sequence (a request) in the batch.
pub type SeqId = u64;

/// Errors of the pool and its allocator.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum KvPoolError {
    /// Not enough free rows for the request; nothing was allocated.
    #[error("KV pool exhausted: {requested} slots requested, {available} free")]
    Exhausted { requested: usize, available: usize },
    /// The sequence holds no slots.
    #[error("sequence {seq} holds no slots in the KV pool")]
    UnknownSequence { seq: SeqId },
    /// The fused op refused the call (the pools are unchanged).
    #[error(transparent)]
    Op(#[from] RopePoolError),
}

/// Hands out the rows of a pool of `pool_size` rows to sequences, one row per token, and takes
/// a finished sequence's rows back for reuse. Allocation is all-or-nothing.
#[derive(Clone, Debug)]
pub struct SlotAllocator {
    free: Vec<i32>,
    owned: HashMap<SeqId, Vec<i32>>,
}

impl SlotAllocator {
    /// An allocator over rows `0..pool_size`, all free. Rows are handed out lowest first.
    pub fn new(pool_size: usize) -> Self {
        assert!(
            pool_size <= i32::MAX as usize,
            "pool rows are addressed with i32 slots"
        );
        Self {
            free: (0..pool_size as i32).rev().collect(),
            owned: HashMap::new(),
        }
    }

    /// Free rows.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// `n` more rows for `seq`, appended to the rows it already holds (one per new token, in
    /// position order). Running out is an error and allocates nothing.
    pub fn allocate(&mut self, seq: SeqId, n: usize) -> Result<Vec<i32>, KvPoolError> {
        if n > self.free.len() {
            return Err(KvPoolError::Exhausted {
                requested: n,
                available: self.free.len(),
            });
        }
        let rows: Vec<i32> = self
            .free
            .split_off(self.free.len() - n)
            .into_iter()
            .rev()
            .collect();
        self.owned.entry(seq).or_default().extend(&rows);
        Ok(rows)
    }

    /// Every row `seq` holds, in position order.
    pub fn rows(&self, seq: SeqId) -> Option<&[i32]> {
        self.owned.get(&seq).map(Vec::as_slice)
    }

    /// Returns the last `n` rows `seq` took (its newest tokens) to the free list: undoes an
    /// [`SlotAllocator::allocate`] whose tokens were not stored. A sequence left with no rows is
    /// forgotten.
    pub fn free_last(&mut self, seq: SeqId, n: usize) -> Result<(), KvPoolError> {
        let rows = self
            .owned
            .get_mut(&seq)
            .ok_or(KvPoolError::UnknownSequence { seq })?;
        let keep = rows.len().saturating_sub(n);
        let freed = rows.split_off(keep);
        if rows.is_empty() {
            self.owned.remove(&seq);
        }
        self.free.extend(freed.into_iter().rev());
        Ok(())
    }

    /// Returns all of `seq`'s rows to the free list; returns how many.
    pub fn release(&mut self, seq: SeqId) -> Result<usize, KvPoolError> {
        let rows = self
            .owned
            .remove(&seq)
            .ok_or(KvPoolError::UnknownSequence { seq })?;
        let n = rows.len();
        // Keep handing out low rows first: freed rows go back on top in order.
        self.free.extend(rows.into_iter().rev());
        Ok(n)
    }
}

/// One attention layer's KV pool: `k`/`v` tensors of `[pool_size, num_kv_heads, head_dim]` and
/// the allocator of their rows. [`KvPool::write`] runs the fused op and keeps the updated pools
/// (in place: the pool owns the only handle).
#[derive(Debug)]
pub struct KvPool {
    k: Option<Tensor<3>>,
    v: Option<Tensor<3>>,
    /// The allocator of the pool's rows.
    pub slots: SlotAllocator,
    config: RopePoolConfig,
}

impl KvPool {
    /// An empty pool of `pool_size` rows for a layer of geometry `config`, zero-filled.
    pub fn new(config: RopePoolConfig, pool_size: usize, device: &Device, dtype: DType) -> Self {
        let shape = [pool_size, config.num_kv_heads, config.head_dim];
        Self {
            k: Some(Tensor::zeros(shape, (device, dtype))),
            v: Some(Tensor::zeros(shape, (device, dtype))),
            slots: SlotAllocator::new(pool_size),
            config,
        }
    }

    /// The op's parameters for this pool.
    pub fn config(&self) -> &RopePoolConfig {
        &self.config
    }

    /// The key pool.
    pub fn k(&self) -> &Tensor<3> {
        self.k
            .as_ref()
            .expect("pool tensors are always present between calls")
    }

    /// The value pool.
    pub fn v(&self) -> &Tensor<3> {
        self.v
            .as_ref()
            .expect("pool tensors are always present between calls")
    }

    /// Rotates `q`/`k` at `positions` and stores rotated `k` and `v` at `slots` (host values,
    /// one per token; negative: not stored). Returns `(q_rot, k_rot)` (`k_rot` empty when the
    /// pool's config has `k_rot` off). A refused call leaves the pool as it was.
    pub fn write(
        &mut self,
        q: Tensor<3>,
        k: Tensor<3>,
        v: Tensor<3>,
        positions: &[i64],
        slots: &[i64],
    ) -> Result<(Tensor<3>, Tensor<3>), KvPoolError> {
        let device = q.device();
        let index = |values: &[i64]| {
            Tensor::<1, Int>::from_data(TensorData::new(values.to_vec(), [values.len()]), &device)
        };
        // M-RoPE positions come as three rows, one after the other.
        let positions: crate::IntArg = match self.config.mrope {
            Some(_) if positions.len().is_multiple_of(3) => {
                index(positions).reshape([3, positions.len() / 3]).into()
            }
            _ => index(positions).into(),
        };
        Ok(rope_pool_in_pools(
            q,
            k,
            v,
            positions,
            index(slots),
            &mut self.k,
            &mut self.v,
            &self.config,
        )?)
    }
}
