//! The allocator of pool rows: one row per token of a running sequence (continuous batching).

use crate::pool::KvPoolError;
use std::collections::HashMap;

/// Identifies a sequence (a request) in the batch.
pub type SeqId = u64;

/// A token's place in a ragged batch: its sequence and its position there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqToken {
    /// The sequence (request) the token belongs to.
    pub seq: SeqId,
    /// Its position in that sequence (0-based).
    pub position: usize,
}

/// Hands out the rows of a pool of `pool_size` rows to sequences, one row per token, and takes
/// a finished sequence's rows back for reuse. Allocation is all-or-nothing.
#[derive(Clone, Debug)]
pub(crate) struct SlotAllocator {
    free: Vec<i32>,
    owned: HashMap<SeqId, Vec<i32>>,
}

impl SlotAllocator {
    /// An allocator over rows `0..pool_size`, all free, handed out lowest first; refuses more
    /// rows than i32 slots address.
    pub fn try_new(pool_size: usize) -> Result<Self, KvPoolError> {
        let max = i32::MAX as usize;
        if pool_size > max {
            return Err(KvPoolError::TooManyRows {
                rows: pool_size,
                max,
            });
        }
        Ok(Self {
            free: (0..pool_size as i32).rev().collect(),
            owned: HashMap::new(),
        })
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
