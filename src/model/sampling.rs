//! Sampling on the device with HuggingFace `generate` semantics: per row, transformers' logits
//! processors in its order — repetition penalty, temperature, top-k, top-p, min-p — then a
//! softmax, and one draw by inverse CDF with a uniform from the row's own [`SeqRng`].
//!
//! Everything runs as Burn tensor ops on the logits' device, each row with its own settings.
//! Per call the host uploads one `[S, 7]` table of settings and uniforms and, where a row has a
//! repetition penalty, an `[S, P]` table of its distinct previous ids; it reads back only the S
//! sampled ids. No sort runs: Burn's CubeCL backends sort on the host, so the top-k and top-p
//! cut-offs are found by bisection on the value of each row (a fixed number of masked row sums,
//! then an exact snap onto the row's values), and every reduction over a row runs in blocks of
//! 256 (one long reduction over a 128K-wide row is slow, see [`argmax_rows`]).
//!
//! Ties follow transformers: top-k keeps every token equal to the k-th largest; top-p keeps,
//! of the tokens tied at its cut-off, as many as its ascending cumulative sum does, the
//! highest ids first (the order of a stable ascending sort; torch's default sort breaks such
//! ties in no documented order).

use burn::tensor::{Bool, DType, FloatDType, IndexingUpdateOp, Int, Tensor, TensorData};

/// Row width multiple: every reduction over a row runs as blocks of this many, then the blocks.
const BLOCK: usize = 256;
/// Block of the two-level prefix sums (Burn's CubeCL cumsum costs the square of its length).
const PREFIX: usize = 64;
/// Bisection steps of a cut-off search (each one masked row sum).
const BISECTIONS: usize = 32;
/// Exact steps after the bisection, each onto the next value of the row above the lower bound.
const WALKS: usize = 2;

/// Columns of the per-row settings table.
const T: usize = 0;
const RP: usize = 1;
const TOP_K: usize = 2;
const TOP_P: usize = 3;
const MIN_P: usize = 4;
const GREEDY: usize = 5;
const UNIFORM: usize = 6;
const COLUMNS: usize = 7;

/// One sequence's sampling settings (HuggingFace `generate` semantics); every field has its
/// neutral default, so `{}` in JSON is plain sampling at temperature 1.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SamplingParams {
    /// Divides the logits; 0 is greedy (the argmax, after the repetition penalty). Default 1.
    pub temperature: f32,
    /// Keeps the `top_k` largest logits (and any tied with the last of them); 0 is off.
    pub top_k: usize,
    /// Keeps the smallest set of largest logits whose probability exceeds `top_p`; in (0, 1],
    /// 1 is off.
    pub top_p: f32,
    /// Keeps the tokens whose probability is at least `min_p` times the largest; in [0, 1],
    /// 0 is off.
    pub min_p: f32,
    /// Divides each positive logit of a previous token (prompt or generated) and multiplies
    /// each negative one, once per distinct id; > 0, 1 is off.
    pub repetition_penalty: f32,
    /// Seed of the sequence's [`SeqRng`]: the same seed draws the same tokens on the same
    /// device; `None` seeds from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0, the rest neutral.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Whether these settings take the argmax (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Checks every setting's range; the error names the field, its value and the range.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let invalid = |field, value: f32, expected| SamplingError::Invalid {
            field,
            value: value.to_string(),
            expected,
        };
        let t = self.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(invalid(
                "temperature",
                t,
                "a finite number >= 0 (0: greedy)",
            ));
        }
        let p = self.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(invalid("top_p", p, "a number in (0, 1] (1: off)"));
        }
        let m = self.min_p;
        if !(0.0..=1.0).contains(&m) {
            return Err(invalid("min_p", m, "a number in [0, 1] (0: off)"));
        }
        let r = self.repetition_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Err(invalid(
                "repetition_penalty",
                r,
                "a finite number > 0 (1: off)",
            ));
        }
        Ok(())
    }
}

/// Why sampling refused its input.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SamplingError {
    /// A setting outside its range.
    #[error("sampling setting `{field}` is {value}: expected {expected}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Its value, as written.
        value: String,
        /// The range it must be in.
        expected: &'static str,
    },
    /// The error of one row of a batch.
    #[error("row {row}: {error}")]
    Row {
        /// The row.
        row: usize,
        /// What is wrong with it.
        error: Box<SamplingError>,
    },
    /// A per-row list whose length is not the number of logit rows.
    #[error("{what}: {got} for {rows} rows of logits")]
    Rows {
        /// The list (`params`, `previous`, `uniforms`).
        what: &'static str,
        /// Its length.
        got: usize,
        /// The rows of the logits.
        rows: usize,
    },
    /// A previous token id of a penalized row outside the vocabulary.
    #[error("row {row}: previous token id {id} is outside the vocabulary of {vocab}")]
    Token {
        /// The row.
        row: usize,
        /// The id.
        id: u32,
        /// The width of the logits.
        vocab: usize,
    },
    /// Logits of width 0.
    #[error("the logits have no vocabulary (shape [{rows}, 0])")]
    EmptyVocab {
        /// The rows of the logits.
        rows: usize,
    },
    /// Reading the sampled ids back failed.
    #[error("reading the sampled ids back failed: {0}")]
    ReadBack(String),
}

/// A sequence's random stream: xoshiro256** seeded through SplitMix64 (Vigna's recommended
/// seeding), giving uniforms in [0, 1) with 24 random bits.
#[derive(Clone, Debug)]
pub struct SeqRng {
    state: [u64; 4],
}

impl SeqRng {
    /// The stream of `seed`, or, for `None`, of a seed from the OS's randomness (std's hasher
    /// keys), the clock and a process counter.
    pub fn new(seed: Option<u64>) -> Self {
        let mut x = seed.unwrap_or_else(entropy);
        let mut splitmix = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Self {
            state: [splitmix(), splitmix(), splitmix(), splitmix()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// A uniform in [0, 1): the top 24 bits of the next draw, a multiple of 2^-24.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
    }
}

/// A seed nobody chose: std's randomly keyed hasher over the clock and a counter.
fn entropy() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(nanos);
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// The distribution each row's settings leave, `[S, V]` f32 on the logits' device: repetition
/// penalty over `previous[i]` (the row's prompt and generated ids; ignored where the penalty is
/// 1), temperature, top-k, top-p, min-p, softmax, as transformers' processors in its order;
/// rows of greedy settings are one-hot at the argmax of the penalized logits. The logits stay on
/// the device.
pub fn probabilities(
    logits: Tensor<2>,
    params: &[SamplingParams],
    previous: &[&[u32]],
) -> Result<Tensor<2>, SamplingError> {
    let [s, v] = logits.dims();
    let plan = Plan::new(s, v, params, previous, None)?;
    if s == 0 {
        return Ok(logits.cast(DType::F32));
    }
    let probs = match plan.all_greedy {
        true => {
            let (x, _) = plan.prepare(logits);
            one_hot(argmax_rows(x), s, plan.width)
        }
        false => plan.distribution(logits).0,
    };
    Ok(probs.slice([0..s, 0..v]))
}

/// Draws one token per row from [`probabilities`] with the row's uniform `uniforms[i]` in
/// [0, 1) (the first id whose cumulative probability exceeds `u` times the row's total, on the
/// device); greedy rows take the argmax. Reads back only the S ids.
pub fn sample(
    logits: Tensor<2>,
    params: &[SamplingParams],
    previous: &[&[u32]],
    uniforms: &[f32],
) -> Result<Vec<u32>, SamplingError> {
    let [s, v] = logits.dims();
    let plan = Plan::new(s, v, params, previous, Some(uniforms))?;
    if s == 0 {
        return Ok(Vec::new());
    }
    let ids = match plan.all_greedy {
        true => {
            let (x, _) = plan.prepare(logits);
            argmax_rows(x)
        }
        false => {
            let (probs, settings) = plan.distribution(logits);
            let cdf = prefix_sum(probs);
            let w = plan.width;
            let total = cdf.clone().slice([0..s, w - 1..w]).expand([s, w]);
            let target = column(&settings, UNIFORM).expand([s, w]) * total.clone();
            // The first id whose cumulative sum passes the target: the count of those at or
            // below it, short of the total (a target rounded up to the total takes the last
            // id of positive probability). Both bounds pick an id whose cumulative sum rose.
            let below = cdf.clone().lower_equal(target).bool_and(cdf.lower(total));
            row_sum(as_f32(below)).int()
        }
    };
    let ids = ids
        .try_into_data()
        .map_err(|e| SamplingError::ReadBack(format!("{e:?}")))?
        .convert::<i64>()
        .try_into_vec::<i64>()
        .map_err(|e| SamplingError::ReadBack(format!("{e:?}")))?;
    Ok(ids
        .into_iter()
        .map(|id| (id as u32).min(v as u32 - 1))
        .collect())
}

/// A call's checked input: what goes to the device, and which processors any row needs.
struct Plan {
    rows: usize,
    vocab: usize,
    /// `vocab` plus at least one column of `-inf` (the sink of the penalty's padding), rounded
    /// up to a multiple of [`BLOCK`].
    width: usize,
    /// `[S, COLUMNS]` f32: the per-row settings, neutral where a row does not use them.
    table: TensorData,
    /// `[S, P]`: each penalized row's distinct previous ids, padded with `vocab` (the sink).
    penalized: Option<TensorData>,
    temperature: bool,
    top_k: bool,
    top_p: bool,
    min_p: bool,
    any_greedy: bool,
    all_greedy: bool,
}

impl Plan {
    /// Checks the input and lays out what goes to the device.
    fn new(
        rows: usize,
        vocab: usize,
        params: &[SamplingParams],
        previous: &[&[u32]],
        uniforms: Option<&[f32]>,
    ) -> Result<Self, SamplingError> {
        let count = |what, got| match got == rows {
            true => Ok(()),
            false => Err(SamplingError::Rows { what, got, rows }),
        };
        count("params", params.len())?;
        count("previous", previous.len())?;
        if let Some(u) = uniforms {
            count("uniforms", u.len())?;
        }
        if vocab == 0 {
            return Err(SamplingError::EmptyVocab { rows });
        }
        let in_row = |row, error| SamplingError::Row {
            row,
            error: Box::new(error),
        };
        let width = (vocab + 1).div_ceil(BLOCK) * BLOCK;
        let mut table = Vec::with_capacity(rows * COLUMNS);
        let mut ids: Vec<Vec<u32>> = Vec::with_capacity(rows);
        let mut flags = [false; 4];
        let (mut any_greedy, mut all_greedy) = (false, true);
        for (row, p) in params.iter().enumerate() {
            p.validate().map_err(|e| in_row(row, e))?;
            let u = uniforms.map_or(0.0, |u| u[row]);
            if !(0.0..1.0).contains(&u) {
                let error = SamplingError::Invalid {
                    field: "uniform",
                    value: u.to_string(),
                    expected: "a number in [0, 1)",
                };
                return Err(in_row(row, error));
            }
            let mut distinct = Vec::new();
            if p.repetition_penalty != 1.0 {
                distinct = previous[row].to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                if let Some(&id) = distinct.last().filter(|&&id| id as usize >= vocab) {
                    return Err(SamplingError::Token { row, id, vocab });
                }
            }
            ids.push(distinct);
            let greedy = p.is_greedy();
            any_greedy |= greedy;
            all_greedy &= greedy;
            let sampled = !greedy;
            let top_k = sampled && p.top_k > 0 && p.top_k < vocab;
            let top_p = sampled && p.top_p < 1.0;
            let min_p = sampled && p.min_p > 0.0;
            let temperature = sampled && p.temperature != 1.0;
            for (flag, on) in flags.iter_mut().zip([temperature, top_k, top_p, min_p]) {
                *flag |= on;
            }
            table.extend([
                if sampled { p.temperature } else { 1.0 },
                p.repetition_penalty,
                // Off: more than the row has, so that every cut-off keeps the whole row.
                if top_k {
                    p.top_k as f32
                } else {
                    width as f32 + 1.0
                },
                // The limit of transformers' ascending cumulative sum (`cum <= 1 - top_p` is
                // removed); off: below any sum.
                if top_p {
                    (1.0 - f64::from(p.top_p)) as f32
                } else {
                    -1.0
                },
                if min_p { p.min_p } else { 0.0 },
                if greedy { 1.0 } else { 0.0 },
                u,
            ]);
        }
        let p = ids.iter().map(Vec::len).max().unwrap_or(0);
        let penalized = (p > 0).then(|| {
            let mut index = Vec::with_capacity(rows * p);
            for row in &ids {
                index.extend(row.iter().map(|&id| i64::from(id)));
                index.extend(std::iter::repeat_n(vocab as i64, p - row.len()));
            }
            TensorData::new(index, [rows, p])
        });
        let [temperature, top_k, top_p, min_p] = flags;
        Ok(Self {
            rows,
            vocab,
            width,
            table: TensorData::new(table, [rows, COLUMNS]),
            penalized,
            temperature,
            top_k,
            top_p,
            min_p,
            any_greedy,
            all_greedy: all_greedy && rows > 0,
        })
    }

    /// The logits in f32, padded with `-inf` to the plan's width, the repetition penalty
    /// applied; and the settings table, on the logits' device.
    fn prepare(&self, logits: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        let device = logits.device();
        let (s, v, w) = (self.rows, self.vocab, self.width);
        let settings = Tensor::<2>::from_data(self.table.clone(), (&device, DType::F32));
        let pad = Tensor::full([s, w - v], f32::NEG_INFINITY, (&device, DType::F32));
        let mut x = Tensor::cat(vec![logits.cast(DType::F32), pad], 1);
        if let Some(index) = &self.penalized {
            // transformers: gather, `score < 0 ? score * p : score / p`, scatter back. The
            // padding points at a `-inf` column, which the penalty leaves `-inf`.
            let index = Tensor::<2, Int>::from_data(index.clone(), &device);
            let p = index.dims()[1];
            let rp = column(&settings, RP).expand([s, p]);
            let g = x.clone().gather(1, index.clone());
            let penalized = (g.clone() / rp.clone()).mask_where(g.clone().lower_elem(0.0), g * rp);
            x = x.scatter(1, index, penalized, IndexingUpdateOp::Assign);
        }
        (x, settings)
    }

    /// The `[S, width]` distribution (see [`probabilities`]), zero in the padding; and the
    /// settings table on the device.
    fn distribution(&self, logits: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
        let (s, w) = (self.rows, self.width);
        let (mut x, settings) = self.prepare(logits);
        let greedy = self.any_greedy.then(|| argmax_rows(x.clone()));
        if self.temperature {
            x = x / column(&settings, T).expand([s, w]);
        }
        let neg_inf = f32::NEG_INFINITY;
        if self.top_k {
            // transformers: remove `scores < topk(scores, k).values[-1]`. The k-th largest is
            // the least value with fewer than k values above it.
            let k = column(&settings, TOP_K);
            let cut = cut_off(&x, |v| {
                row_sum(as_f32(x.clone().greater(v.expand([s, w])))).lower(k.clone())
            });
            x = x.clone().mask_fill(x.lower(cut.expand([s, w])), neg_inf);
        }
        if self.top_p {
            // transformers: ascending sort, `cum = softmax.cumsum()`, remove `cum <= 1 - p`
            // (the largest always kept). A token's `cum` is the row's total less the mass
            // ahead of it in that order: the mass above its value, and its ties of higher id.
            let limit = column(&settings, TOP_P);
            let probs = softmax_rows(x.clone());
            let total = row_sum(probs.clone());
            let above =
                |v: Tensor<2>| row_sum(probs.clone().mask_fill(x.clone().lower_equal(v), 0.0));
            let kept = |ahead: Tensor<2>| {
                (total.clone().expand(ahead.dims()) - ahead).greater(limit.clone().expand([s, w]))
            };
            let cut = cut_off(&x, |v| {
                (total.clone() - above(v.expand([s, w]))).greater(limit.clone())
            });
            let cut_w = cut.clone().expand([s, w]);
            let mass = above(cut_w.clone()).expand([s, w]);
            let ties = x.clone().equal(cut_w.clone());
            let tie_prob = row_max(probs.mask_fill(ties.clone().bool_not(), 0.0)).expand([s, w]);
            let ties_f = as_f32(ties.clone());
            let tie_count = row_sum(ties_f.clone()).expand([s, w]);
            let later_ties = tie_count - prefix_sum(ties_f);
            let top = cut_w
                .clone()
                .greater_equal(row_max(x.clone()).expand([s, w]));
            let first = later_ties.clone().lower_elem(0.5).bool_and(top);
            let keep_tie = kept(mass + later_ties * tie_prob).bool_or(first);
            let keep = x.clone().greater(cut_w).bool_or(ties.bool_and(keep_tie));
            x = x.mask_fill(keep.bool_not(), neg_inf);
        }
        if self.min_p {
            // transformers: remove `softmax < min_p * max(softmax)`.
            let probs = softmax_rows(x.clone());
            let floor = row_max(probs.clone()) * column(&settings, MIN_P);
            x = x.mask_fill(probs.lower(floor.expand([s, w])), neg_inf);
        }
        let probs = softmax_rows(x);
        let probs = match greedy {
            Some(ids) => {
                let greedy = column(&settings, GREEDY).greater_elem(0.5).expand([s, w]);
                probs.mask_where(greedy, one_hot(ids, s, w))
            }
            None => probs,
        };
        (probs, settings)
    }
}

/// Column `c` of `settings`, `[S, 1]`.
fn column(settings: &Tensor<2>, c: usize) -> Tensor<2> {
    let [s, _] = settings.dims();
    settings.clone().slice([0..s, c..c + 1])
}

/// 1 where `mask` holds, else 0, in f32 (exact counts, whatever the default float type).
fn as_f32(mask: Tensor<2, Bool>) -> Tensor<2> {
    mask.cast(FloatDType::F32)
}

/// `[S, width]`: 1 at each row's id of `ids [S, 1]`, 0 elsewhere.
fn one_hot(ids: Tensor<2, Int>, s: usize, width: usize) -> Tensor<2> {
    let device = ids.device();
    let zeros = Tensor::<2>::zeros([s, width], (&device, DType::F32));
    let ones = Tensor::<2>::ones([s, 1], (&device, DType::F32));
    zeros.scatter(1, ids, ones, IndexingUpdateOp::Add)
}

/// Reduces each row of `x [S, W]` (`W` a multiple of [`BLOCK`]) to `[S, 1]` in two short
/// reductions: each block, then the blocks.
fn blocked(x: Tensor<2>, reduce: impl Fn(Tensor<3>, usize) -> Tensor<3>) -> Tensor<2> {
    let [s, w] = x.dims();
    let blocks = w / BLOCK;
    let within = reduce(x.reshape([s, blocks, BLOCK]), 2).reshape([s, 1, blocks]);
    reduce(within, 2).reshape([s, 1])
}

fn row_sum(x: Tensor<2>) -> Tensor<2> {
    blocked(x, |t, d| t.sum_dim(d))
}

fn row_max(x: Tensor<2>) -> Tensor<2> {
    blocked(x, |t, d| t.max_dim(d))
}

fn row_min(x: Tensor<2>) -> Tensor<2> {
    blocked(x, |t, d| t.min_dim(d))
}

/// The softmax of each row, as torch's: `exp(x - max) / sum`.
fn softmax_rows(x: Tensor<2>) -> Tensor<2> {
    let [s, w] = x.dims();
    let e = (x.clone() - row_max(x).expand([s, w])).exp();
    let z = row_sum(e.clone()).expand([s, w]);
    e / z
}

/// The inclusive prefix sum of each row, in blocks of [`PREFIX`] and then over the blocks'
/// totals, each sequential; a block's last sum is the next block's offset, so that the sums of
/// non-negative terms never decrease.
fn prefix_sum(x: Tensor<2>) -> Tensor<2> {
    let [s, w] = x.dims();
    let blocks = w / PREFIX;
    let local = x.reshape([s, blocks, PREFIX]).cumsum(2);
    let totals = local
        .clone()
        .slice([0..s, 0..blocks, PREFIX - 1..PREFIX])
        .reshape([s, blocks]);
    let device = totals.device();
    let zero = Tensor::<2>::zeros([s, 1], (&device, DType::F32));
    let offsets = match blocks {
        1 => zero,
        _ => Tensor::cat(vec![zero, totals.cumsum(1).slice([0..s, 0..blocks - 1])], 1),
    };
    (local + offsets.reshape([s, blocks, 1]).expand([s, blocks, PREFIX])).reshape([s, w])
}

/// Per row of `x [S, W]`, the least value `c` of the row for which `holds(c)` (`[S, 1]` in,
/// `[S, 1]` bool out; monotone: false below some value, true from it on, true at the row's
/// maximum). Bisection on the value between the least finite value of the row and its
/// maximum, then [`WALKS`] exact steps onto the row's values above the lower bound, then the
/// least value above it.
fn cut_off(x: &Tensor<2>, holds: impl Fn(Tensor<2>) -> Tensor<2, Bool>) -> Tensor<2> {
    let [s, w] = x.dims();
    let finite = x
        .clone()
        .mask_fill(x.clone().equal_elem(f32::NEG_INFINITY), f32::INFINITY);
    let least = row_min(finite);
    let mut hi = row_max(x.clone());
    let mut lo = least.clone() - (least.abs() + 1.0);
    for _ in 0..BISECTIONS {
        let mid = lo.clone() + (hi.clone() - lo.clone()) * 0.5;
        let yes = holds(mid.clone());
        hi = hi.mask_where(yes.clone(), mid.clone());
        lo = mid.mask_where(yes, lo);
    }
    let next = |lo: Tensor<2>| {
        let above = x.clone().lower_equal(lo.expand([s, w]));
        row_min(x.clone().mask_fill(above, f32::INFINITY))
    };
    for _ in 0..WALKS {
        let candidate = next(lo.clone());
        let yes = holds(candidate.clone());
        lo = candidate.mask_where(yes, lo);
    }
    next(lo)
}

/// Row-wise argmax of `logits [s, vocab]` (`[s, 1]`, the first index on ties), in two short
/// reductions: the best of each block of 256, then the best block. Burn's one-pass argmax over
/// a 128K-wide row ran as one long reduction, 3.4 ms a step on the H200 (`benches/NOTES.md`,
/// 'Decoder kernels').
pub fn argmax_rows(logits: Tensor<2>) -> Tensor<2, Int> {
    const BLOCK: usize = 256;
    let [s, vocab] = logits.dims();
    if vocab <= 4 * BLOCK {
        return logits.argmax(1);
    }
    let blocks = vocab.div_ceil(BLOCK);
    let pad = blocks * BLOCK - vocab;
    let logits = if pad > 0 {
        let low = Tensor::full(
            [s, pad],
            f32::NEG_INFINITY,
            (&logits.device(), logits.dtype()),
        );
        Tensor::cat(vec![logits, low], 1)
    } else {
        logits
    };
    let blocked = logits.reshape([s, blocks, BLOCK]);
    let within = blocked.clone().argmax(2);
    let block = blocked.max_dim(2).argmax(1);
    let index = within.gather(1, block.clone());
    (block * BLOCK as i64 + index).reshape([s, 1])
}
