//! One batch step over a [`KvPool`]: the planner that checks a ragged batch, allocates its rows
//! all-or-nothing, and yields what every layer's call needs — the tokens' slots and positions on
//! the device and the [`PoolAttentionPlan`] — made once and reused by every layer.

use crate::pool::{KvPool, KvPoolError, PoolAttentionPlan, SeqId, SeqToken};
use burn::tensor::{Device, Int, Tensor, TensorData};

/// A planned step: a ragged batch whose tokens hold their pool rows. Made by
/// [`KvPool::plan_step`]; each layer writes through [`KvPool::write`] and attends through
/// [`KvPool::attend`] with it; [`KvPool::cancel_step`] gives its rows back if the step is not
/// run to the end.
#[derive(Debug)]
pub struct StepPlan {
    /// Each sequence of the batch in order of first appearance, with its count of new tokens.
    pub(crate) sequences: Vec<(SeqId, usize)>,
    /// The batch index of each sequence's last new token, sequences in the same order.
    last: Vec<usize>,
    /// Rows per token, in batch order (the op's `slots`).
    pub(crate) slots: Tensor<1, Int>,
    /// Positions per token, in batch order (the op's `positions`; `[3, T]` for M-RoPE).
    pub(crate) positions: Tensor<1, Int>,
    /// The attention plan: sequence `b`'s queries are its tokens (grouped), its keys every row
    /// it holds.
    pub(crate) attention: PoolAttentionPlan,
    /// Where the batch's tokens are not grouped by sequence: the batch rows in grouped order,
    /// and back.
    pub(crate) order: Option<(Tensor<1, Int>, Tensor<1, Int>)>,
    tokens: usize,
}

impl StepPlan {
    /// Tokens in the step.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The step's sequences in order of first appearance.
    pub fn sequences(&self) -> impl ExactSizeIterator<Item = SeqId> + '_ {
        self.sequences.iter().map(|&(seq, _)| seq)
    }

    /// The batch index of each sequence's last new token, in [`Self::sequences`] order (the rows
    /// whose outputs predict each sequence's next token).
    pub fn last_tokens(&self) -> &[usize] {
        &self.last
    }

    /// The step's attention plan (the same for every layer).
    pub fn attention_plan(&self) -> &PoolAttentionPlan {
        &self.attention
    }
}

fn ints(values: Vec<i64>, device: &Device) -> Tensor<1, Int> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

/// A planned step on the host: what [`StepPlan`] uploads.
#[derive(Clone, Debug)]
pub(crate) struct HostStep {
    pub(crate) sequences: Vec<(SeqId, usize)>,
    pub(crate) last: Vec<usize>,
    pub(crate) slots: Vec<i64>,
    pub(crate) positions: Vec<i64>,
    /// The attention plan's `qo_indptr`, `kv_indptr` and `kv_indices`.
    pub(crate) qo: Vec<i64>,
    pub(crate) kv: Vec<i64>,
    pub(crate) indices: Vec<i64>,
    /// Where the batch's tokens are not grouped by sequence: the batch rows in grouped order,
    /// and back.
    pub(crate) order: Option<(Vec<i64>, Vec<i64>)>,
}

impl HostStep {
    /// An index array of `n` zeros on `device`, in the dtype [`Self::upload`] gives its
    /// arrays (a captured step's input buffer).
    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    pub(crate) fn zeros(n: usize, device: &Device) -> Tensor<1, Int> {
        ints(vec![0; n], device)
    }

    /// Its arrays on `device`, each a fresh upload.
    pub(crate) fn upload(self, device: &Device) -> StepPlan {
        let data = |v: Vec<i64>| {
            let n = v.len();
            TensorData::new(v, [n])
        };
        let attention =
            PoolAttentionPlan::new(data(self.qo), data(self.kv), data(self.indices), device);
        let tokens = self.slots.len();
        StepPlan {
            sequences: self.sequences,
            last: self.last,
            slots: ints(self.slots, device),
            positions: ints(self.positions, device),
            attention,
            order: self
                .order
                .map(|(grouped, back)| (ints(grouped, device), ints(back, device))),
            tokens,
        }
    }

    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    /// The plan of a step whose device arrays are already in `slots`, `positions` and
    /// `attention` (a captured step's buffers, written before it runs).
    pub(crate) fn on_buffers(
        self,
        slots: Tensor<1, Int>,
        positions: Tensor<1, Int>,
        attention: PoolAttentionPlan,
    ) -> StepPlan {
        let tokens = self.slots.len();
        StepPlan {
            sequences: self.sequences,
            last: self.last,
            slots,
            positions,
            attention,
            order: None,
            tokens,
        }
    }
}

impl KvPool {
    /// Plans one step: `tokens[t]` is the sequence and position of batch row `t`. Each
    /// sequence's new tokens come in position order (they may interleave with other sequences'),
    /// continuing where its rows end (a new sequence starts at 0). Allocates one row per token,
    /// all or nothing; a refused batch takes no rows. Errors: [`KvPoolError::EmptyStep`],
    /// [`KvPoolError::Position`], [`KvPoolError::Exhausted`].
    pub fn plan_step(&mut self, tokens: &[SeqToken]) -> Result<StepPlan, KvPoolError> {
        let device = self.device().clone();
        Ok(self.plan_host(tokens)?.upload(&device))
    }

    /// [`Self::plan_step`] on the host: the rows are allocated, nothing is uploaded.
    pub(crate) fn plan_host(&mut self, tokens: &[SeqToken]) -> Result<HostStep, KvPoolError> {
        if tokens.is_empty() {
            return Err(KvPoolError::EmptyStep);
        }
        // Sequences in order of first appearance: (seq, rows held, batch rows).
        let mut groups: Vec<(SeqId, usize, Vec<usize>)> = Vec::new();
        for (i, token) in tokens.iter().enumerate() {
            let group = match groups.iter().position(|g| g.0 == token.seq) {
                Some(g) => &mut groups[g],
                None => {
                    let held = self.slots.rows(token.seq).map_or(0, <[i32]>::len);
                    groups.push((token.seq, held, Vec::new()));
                    groups.last_mut().expect("just pushed")
                }
            };
            let expected = group.1 + group.2.len();
            if token.position != expected {
                return Err(KvPoolError::Position {
                    seq: token.seq,
                    position: token.position,
                    expected,
                });
            }
            group.2.push(i);
        }
        let available = self.slots.available();
        if tokens.len() > available {
            return Err(KvPoolError::Exhausted {
                requested: tokens.len(),
                available,
            });
        }
        let mut slots = vec![0i64; tokens.len()];
        for (seq, _, rows) in &groups {
            let taken = self.slots.allocate(*seq, rows.len())?;
            for (&i, &row) in rows.iter().zip(&taken) {
                slots[i] = row as i64;
            }
        }
        let (mut qo, mut kv, mut indices) = (vec![0i64], vec![0i64], Vec::new());
        for (seq, _, rows) in &groups {
            let held = self.slots.rows(*seq).unwrap_or(&[]);
            indices.extend(held.iter().map(|&r| r as i64));
            qo.push(qo[qo.len() - 1] + rows.len() as i64);
            kv.push(indices.len() as i64);
        }
        let grouped: Vec<i64> = groups
            .iter()
            .flat_map(|g| g.2.iter().map(|&i| i as i64))
            .collect();
        let order = match grouped.iter().enumerate().all(|(at, &i)| at as i64 == i) {
            true => None,
            false => {
                let mut back = vec![0i64; grouped.len()];
                for (at, &i) in grouped.iter().enumerate() {
                    back[i as usize] = at as i64;
                }
                Some((grouped, back))
            }
        };
        Ok(HostStep {
            last: groups
                .iter()
                .map(|g| *g.2.last().expect("a token"))
                .collect(),
            sequences: groups.iter().map(|g| (g.0, g.2.len())).collect(),
            slots,
            positions: tokens.iter().map(|t| t.position as i64).collect(),
            qo,
            kv,
            indices,
            order,
        })
    }

    /// Gives back the rows `step` took: for a step that was planned and not run to the end
    /// (what its layers wrote to those rows is never read).
    pub fn cancel_step(&mut self, step: StepPlan) {
        self.cancel_rows(&step.sequences);
    }

    /// Gives back the rows of a step's `sequences` (each with its count of new tokens).
    pub(crate) fn cancel_rows(&mut self, sequences: &[(SeqId, usize)]) {
        for &(seq, n) in sequences {
            // The rows were allocated to `seq` by this pool's planner: it holds them.
            let _ = self.slots.free_last(seq, n);
        }
    }
}
