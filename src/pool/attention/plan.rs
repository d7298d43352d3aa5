//! The plan of one step's attention: its index arrays on the host, checked against a call's
//! shapes and config, each query's key range, and their device copies — made once, used by
//! every layer.

use crate::Dims;
use crate::pool::attention::PoolAttentionError;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use std::sync::{Arc, Mutex};

/// An integer array on the host: its shape (any rank, so a wrong one is reported) and values.
#[derive(Clone, Debug)]
struct HostIndex {
    dims: Dims,
    values: Vec<i64>,
}

impl HostIndex {
    fn of(data: TensorData) -> Self {
        let dims = Dims(data.shape().to_vec());
        // Every integer type widens to i64; a u64 past i64::MAX saturates (it is past any pool).
        let values = match data.dtype() {
            DType::U64 => data
                .iter::<u64>()
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
                .collect(),
            _ => data.iter::<i64>().collect(),
        };
        Self { dims, values }
    }
}

/// What the kernels read for one (token count, causal, window): each query's first entry in
/// `kv_indices` and its number of visible keys, `[T, 2]` i32, the largest such count, and the
/// fewest queries of any sequence that has queries (0 for none); and, made on first use for
/// each threshold of short sequences, the launches of a call split into runs of short and long
/// sequences ([`PoolAttentionPlan::parts`]).
#[derive(Debug)]
pub(crate) struct Ranges {
    pub ranges: Tensor<2, Int>,
    pub max_keys: usize,
    pub min_query_rows: usize,
    parts: Mutex<Vec<(usize, Arc<[RangesPart]>)>>,
}

impl Ranges {
    fn new(ranges: Tensor<2, Int>, max_keys: usize, min_query_rows: usize) -> Self {
        Self {
            ranges,
            max_keys,
            min_query_rows,
            parts: Mutex::new(Vec::new()),
        }
    }
}

/// One launch of a split call: query rows `rows` (whole sequences), their rows of
/// [`Ranges::ranges`], the largest visible key count among them and their fewest queries of a
/// sequence.
#[derive(Clone, Debug)]
pub(crate) struct RangesPart {
    pub rows: std::ops::Range<usize>,
    pub ranges: Tensor<2, Int>,
    pub max_keys: usize,
    pub min_query_rows: usize,
}

/// A run of long sequences holding fewer query rows than this is launched with the short
/// sequences beside it: 8 row tiles of 16, below which the query-tile kernels do not pay
/// anyway (they want 128 cubes or more).
const SPLIT_MIN_LONG_ROWS: usize = 128;
/// The most launches a split call makes; a batch that alternates short and long runs more often
/// runs as one launch.
const MAX_PARTS: usize = 8;

type RangesKey = (usize, bool, Option<usize>);

/// How many (token count, causal, window) settings a plan keeps ranges for.
const CACHED_RANGES: usize = 4;

/// One step's batch as attention reads it: sequence `b`'s queries are rows
/// `qo_indptr[b]..qo_indptr[b + 1]` of `q`, its keys the pool rows
/// `kv_indices[kv_indptr[b]..kv_indptr[b + 1]]`, in position order. Built once per step from
/// host data and passed to every layer's [`pool_attention`](crate::pool::pool_attention) call;
/// the checks and uploads it needs are made on first use and kept.
#[derive(Debug)]
pub struct PoolAttentionPlan {
    qo_indptr: HostIndex,
    kv_indptr: HostIndex,
    kv_indices: HostIndex,
    device: Device,
    /// `kv_indices` on the device, i32; an entry outside `0..=i32::MAX` becomes -1 (masked).
    indices_on_device: Tensor<1, Int>,
    ranges: Mutex<Vec<(RangesKey, Arc<Ranges>)>>,
}

impl PoolAttentionPlan {
    /// The plan of a batch on `device`. The arrays may have any integer type; their shapes
    /// and values are checked by each call (checks 17 and 21 to 24 of the contract), so a
    /// plan of bad arrays is refused by the call with the documented error.
    pub fn new(
        qo_indptr: TensorData,
        kv_indptr: TensorData,
        kv_indices: TensorData,
        device: &Device,
    ) -> Self {
        let kv_indices = HostIndex::of(kv_indices);
        let on_device: Vec<i32> = kv_indices
            .values
            .iter()
            .map(|&r| i32::try_from(r).unwrap_or(-1))
            .collect();
        let len = on_device.len();
        // A zero-length upload is refused by some runtimes: one masked entry stands in.
        let on_device = if len == 0 { vec![-1] } else { on_device };
        let n = on_device.len();
        Self {
            qo_indptr: HostIndex::of(qo_indptr),
            kv_indptr: HostIndex::of(kv_indptr),
            indices_on_device: Tensor::from_data(
                TensorData::new(on_device, [n]),
                (device, DType::I32),
            ),
            kv_indices,
            device: device.clone(),
            ranges: Mutex::new(Vec::new()),
        }
    }

    #[cfg_attr(not(all(feature = "cube", not(feature = "fusion"))), allow(dead_code))]
    /// A plan whose device arrays are already uploaded: `indices_on_device` holds `kv_indices`
    /// as i32 (at its start: a longer buffer is fine), and `ranges` the
    /// [`Self::query_ranges`] of its queries, causal, without a window, as i32 `[T, 2]`, for a
    /// launch planned for up to `max_keys` keys a query (a captured step's buffers, written
    /// before it runs; `max_keys` at least the largest count).
    pub(crate) fn on_buffers(
        qo_indptr: Vec<i64>,
        kv_indptr: Vec<i64>,
        kv_indices: Vec<i64>,
        indices_on_device: Tensor<1, Int>,
        ranges: Tensor<2, Int>,
        max_keys: usize,
        device: &Device,
    ) -> Self {
        let host = |values: Vec<i64>| HostIndex {
            dims: Dims(vec![values.len()]),
            values,
        };
        let num_tokens = qo_indptr.last().map_or(0, |&t| t.max(0) as usize);
        let plan = Self {
            qo_indptr: host(qo_indptr),
            kv_indptr: host(kv_indptr),
            kv_indices: host(kv_indices),
            device: device.clone(),
            indices_on_device,
            ranges: Mutex::new(Vec::new()),
        };
        let ranges = Arc::new(Ranges::new(ranges, max_keys, plan.min_query_rows()));
        plan.ranges
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(((num_tokens, true, None), ranges));
        plan
    }

    /// The fewest queries of any sequence that has queries (0 for none).
    fn min_query_rows(&self) -> usize {
        self.qo_indptr
            .values
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]))
            .filter(|&n| n > 0)
            .min()
            .map_or(0, |n| usize::try_from(n).unwrap_or(0))
    }

    /// The query rows of each launch of a call whose batch mixes short sequences (fewer than
    /// `short_rows` queries) with long ones, and each launch's fewest queries of a sequence:
    /// consecutive sequences of one kind make a run, a run of long sequences holding fewer than
    /// [`SPLIT_MIN_LONG_ROWS`] rows counts as short, and adjacent runs of one kind merge. Empty
    /// for one launch: one kind only, or more than [`MAX_PARTS`] runs. Sequences without
    /// queries take no row and join any run. `qo` is a `qo_indptr` that passed
    /// [`Self::check_indptr`].
    fn split_rows(qo: &[i64], short_rows: usize) -> Vec<(std::ops::Range<usize>, usize)> {
        // (rows, fewest queries of a sequence, long) of each run.
        type Run = (std::ops::Range<usize>, usize, bool);
        fn push(runs: &mut Vec<Run>, rows: std::ops::Range<usize>, min: usize, long: bool) {
            match runs.last_mut() {
                Some((r, m, kind)) if *kind == long => {
                    r.end = rows.end;
                    *m = (*m).min(min);
                }
                _ => runs.push((rows, min, long)),
            }
        }
        let mut runs: Vec<Run> = Vec::new();
        for w in qo.windows(2) {
            let (start, end) = (w[0].max(0) as usize, w[1].max(0) as usize);
            let n = end.saturating_sub(start);
            if n > 0 {
                push(&mut runs, start..end, n, n >= short_rows);
            }
        }
        // Long runs too small for the query tiles count as short.
        let mut merged = Vec::with_capacity(runs.len());
        for (rows, min, long) in runs {
            let long = long && rows.len() >= SPLIT_MIN_LONG_ROWS;
            push(&mut merged, rows, min, long);
        }
        if merged.len() < 2 || merged.len() > MAX_PARTS {
            return Vec::new();
        }
        merged
            .into_iter()
            .map(|(rows, min, _)| (rows, min))
            .collect()
    }

    /// The launches of a call over `ranges` (this plan's [`Self::ranges`] for `causal` and
    /// `window`) whose long sequences have `short_rows` queries or more (see
    /// [`Self::split_rows`]); empty for one launch. Made on first use for each `short_rows`
    /// and kept.
    pub(crate) fn parts(
        &self,
        ranges: &Ranges,
        causal: bool,
        window: Option<usize>,
        short_rows: usize,
    ) -> Arc<[RangesPart]> {
        let mut cached = ranges
            .parts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, parts)) = cached.iter().find(|(k, _)| *k == short_rows) {
            return parts.clone();
        }
        let split = Self::split_rows(&self.qo_indptr.values, short_rows);
        let parts: Arc<[RangesPart]> = if split.is_empty() {
            Arc::new([])
        } else {
            let host = self.query_ranges(causal, window);
            split
                .into_iter()
                .map(|(rows, min_query_rows)| RangesPart {
                    ranges: ranges.ranges.clone().slice([rows.clone(), 0..2]),
                    max_keys: host[rows.clone()]
                        .iter()
                        .map(|r| r[1] as usize)
                        .max()
                        .unwrap_or(0),
                    min_query_rows,
                    rows,
                })
                .collect()
        };
        cached.push((short_rows, parts.clone()));
        parts
    }

    /// The plan's device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Sequences in the batch (`qo_indptr`'s entries minus one; 0 for a malformed plan).
    pub fn batch(&self) -> usize {
        self.qo_indptr.values.len().saturating_sub(1)
    }

    pub(crate) fn indices_on_device(&self) -> &Tensor<1, Int> {
        &self.indices_on_device
    }

    pub(crate) fn kv_indices(&self) -> &[i64] {
        &self.kv_indices.values
    }

    /// Check 17: every array 1-D.
    pub(crate) fn check_ranks(&self) -> Result<(), PoolAttentionError> {
        let one_d = [&self.qo_indptr, &self.kv_indptr, &self.kv_indices]
            .iter()
            .all(|a| a.dims.0.len() == 1);
        if one_d {
            Ok(())
        } else {
            Err(PoolAttentionError::IndexRank {
                qo_indptr: self.qo_indptr.dims.clone(),
                kv_indptr: self.kv_indptr.dims.clone(),
                kv_indices: self.kv_indices.dims.clone(),
            })
        }
    }

    /// Checks 21 to 24 for a call of `num_tokens` queries.
    pub(crate) fn check_indptr(
        &self,
        num_tokens: usize,
        causal: bool,
    ) -> Result<(), PoolAttentionError> {
        let (qo, kv) = (&self.qo_indptr.values, &self.kv_indptr.values);
        if qo.len() != kv.len() || qo.is_empty() {
            return Err(PoolAttentionError::IndptrLen {
                qo: qo.len(),
                kv: kv.len(),
            });
        }
        let well_formed = |indptr: &[i64], end: usize| {
            indptr[0] == 0
                && indptr.windows(2).all(|w| w[0] <= w[1])
                && u64::try_from(indptr[indptr.len() - 1]).is_ok_and(|e| e == end as u64)
        };
        if !well_formed(qo, num_tokens) {
            return Err(PoolAttentionError::QoIndptr { num_tokens });
        }
        let nnz = self.kv_indices.values.len();
        if !well_formed(kv, nnz) {
            return Err(PoolAttentionError::KvIndptr { nnz });
        }
        if causal {
            for (seq, (q, k)) in qo.windows(2).zip(kv.windows(2)).enumerate() {
                let (queries, keys) = ((q[1] - q[0]) as usize, (k[1] - k[0]) as usize);
                if queries > keys {
                    return Err(PoolAttentionError::TooFewKeys { seq, queries, keys });
                }
            }
        }
        Ok(())
    }

    /// Each query's visible keys as `(first entry in kv_indices, count)`, for a plan that
    /// passed [`Self::check_indptr`]: query `i` of a sequence of `n` queries and `L` keys sits at
    /// position `p = L - n + i`; causal, it sees keys `j <= p`; with a window `W`, keys
    /// `j > p - W`.
    pub(crate) fn query_ranges(&self, causal: bool, window: Option<usize>) -> Vec<[i64; 2]> {
        Self::ranges_of(
            &self.qo_indptr.values,
            &self.kv_indptr.values,
            causal,
            window,
        )
    }

    /// [`Self::query_ranges`] of the arrays `qo` and `kv` (`qo_indptr`, `kv_indptr`).
    pub(crate) fn ranges_of(
        qo: &[i64],
        kv: &[i64],
        causal: bool,
        window: Option<usize>,
    ) -> Vec<[i64; 2]> {
        let mut ranges = Vec::with_capacity(*qo.last().unwrap_or(&0) as usize);
        for (q, k) in qo.windows(2).zip(kv.windows(2)) {
            let (n, len) = (q[1] - q[0], k[1] - k[0]);
            for i in 0..n {
                let p = len - n + i;
                let hi = if causal { (p + 1).min(len) } else { len };
                // Saturating: a window of any size (up to usize::MAX) means "no earlier limit".
                let lo = window.map_or(0, |w| {
                    let w = i64::try_from(w).unwrap_or(i64::MAX);
                    p.saturating_sub(w).saturating_add(1).max(0)
                });
                let count = (hi - lo).max(0);
                ranges.push([k[0] + lo, count]);
            }
        }
        ranges
    }

    /// [`Self::query_ranges`] on the device, made on first use for each (token count, causal,
    /// window) and kept.
    pub(crate) fn ranges(
        &self,
        num_tokens: usize,
        causal: bool,
        window: Option<usize>,
    ) -> Arc<Ranges> {
        let key = (num_tokens, causal, window);
        let mut cached = self
            .ranges
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, ranges)) = cached.iter().find(|(k, _)| *k == key) {
            return ranges.clone();
        }
        let host = self.query_ranges(causal, window);
        let max_keys = host.iter().map(|r| r[1] as usize).max().unwrap_or(0);
        let min_query_rows = self.min_query_rows();
        // Entries and counts fit i32: nnz entries were uploaded as i32 indices.
        let flat: Vec<i32> = host
            .iter()
            .flat_map(|r| r.map(|x| i32::try_from(x).unwrap_or(i32::MAX)))
            .collect();
        let rows = host.len().max(1);
        let flat = if flat.is_empty() { vec![0, 0] } else { flat };
        let ranges = Arc::new(Ranges::new(
            Tensor::from_data(TensorData::new(flat, [rows, 2]), (&self.device, DType::I32)),
            max_keys,
            min_query_rows,
        ));
        // A model may alternate a few settings (sliding and global layers): keep the last few.
        if cached.len() == CACHED_RANGES {
            cached.remove(0);
        }
        cached.push((key, ranges.clone()));
        ranges
    }
}

#[cfg(test)]
mod tests {
    use super::PoolAttentionPlan;

    /// `qo_indptr` of sequences with `counts` queries.
    fn indptr(counts: &[i64]) -> Vec<i64> {
        let mut qo = vec![0];
        for &n in counts {
            qo.push(qo.last().unwrap() + n);
        }
        qo
    }

    fn split(counts: &[i64]) -> Vec<(std::ops::Range<usize>, usize)> {
        PoolAttentionPlan::split_rows(&indptr(counts), 16)
    }

    #[test]
    fn runs_of_short_and_long_sequences_cover_the_rows_in_order() {
        // Decode rows, a prompt, an empty sequence, decode rows again.
        assert_eq!(
            split(&[1, 1, 200, 0, 1, 3]),
            [(0..2, 1), (2..202, 200), (202..206, 1)]
        );
        // A sequence of 15 queries is short, of 16 long.
        assert_eq!(split(&[15, 130]), [(0..15, 15), (15..145, 130)]);
        assert_eq!(split(&[16, 112, 1]), [(0..128, 16), (128..129, 1)]);
        // Long runs of 127 rows count as short: one launch.
        assert!(split(&[1, 127, 1]).is_empty());
        assert_eq!(
            split(&[1, 100, 28, 1]),
            [(0..1, 1), (1..129, 28), (129..130, 1)]
        );
        // A long run too small joins its short neighbours.
        assert_eq!(split(&[1, 20, 1, 300]), [(0..22, 1), (22..322, 300)]);
        // One kind only, or no rows: one launch.
        assert!(split(&[1, 1, 1]).is_empty());
        assert!(split(&[512, 512]).is_empty());
        assert!(split(&[]).is_empty());
        assert!(split(&[0, 0]).is_empty());
    }

    #[test]
    fn more_than_eight_runs_run_as_one_launch() {
        let eight: Vec<i64> = [1, 200].repeat(4);
        assert_eq!(split(&eight).len(), 8);
        let nine: Vec<i64> = [1, 200].repeat(4).into_iter().chain([1]).collect();
        assert!(split(&nine).is_empty());
    }
}
