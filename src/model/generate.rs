//! Greedy generation with continuous batching over a [`Decoder`]: every request is admitted as
//! soon as the pool has rows for all of it (its prompt plus `max_new_tokens - 1` generated
//! tokens), prefilled in the step it joins — beside the decode tokens of the running sequences —
//! and decoded with the others until it has its tokens; then its rows are freed and the next
//! waiting request takes them. A request that could never fit the pool is an error; one that
//! does not fit yet waits (first come, first served).

use crate::model::decoder::{Kernels, LayerOps};
use crate::model::{Decoder, DecoderError, StepToken};
use crate::pool::KvPoolError;
use burn::tensor::{DType, Int, Tensor};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One request: a prompt and how many tokens to generate.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct Request {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate.
    pub max_new_tokens: usize,
}

/// The requests of a request file: `{"sequences": [{"prompt": [ids], "max_new_tokens": n},
/// ...]}` (ids and counts non-negative integers; other fields, such as an `expected.json`'s
/// `generated` and `logits`, are ignored).
pub fn requests_from_json(text: &str) -> Result<Vec<Request>, GenerateError> {
    #[derive(serde::Deserialize)]
    struct Requests {
        sequences: Vec<Request>,
    }
    serde_json::from_str::<Requests>(text)
        .map(|r| r.sequences)
        .map_err(|e| GenerateError::RequestFile(e.to_string()))
}

/// What a request generated.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Generated {
    /// The generated ids.
    pub generated: Vec<u32>,
    /// `logits[i]`: the logits `generated[i]` was chosen from (empty unless kept).
    pub logits: Vec<Vec<f32>>,
}

/// Why generation stopped.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A request file that is not valid JSON of the requests' format.
    #[error("invalid request file: {0}")]
    RequestFile(String),
    /// A request has an empty prompt.
    #[error("request {0} has an empty prompt")]
    EmptyPrompt(usize),
    /// A request needs more pool rows than the pool has, so it could never run.
    #[error("request {request} needs {needed} pool rows, the pool has {pool_rows}")]
    TooLong {
        /// The request.
        request: usize,
        /// Its prompt plus `max_new_tokens - 1`.
        needed: usize,
        /// The pool size.
        pool_rows: usize,
    },
    /// The pools the requests need (or `pool_rows` asks for) are more rows than slots address,
    /// or more memory than the device (on Flex, the system) can give.
    #[error(transparent)]
    Pool(#[from] KvPoolError),
    /// A step's results could not be read back from the device.
    #[error("reading a step's results back from the device failed: {0}")]
    ReadBack(String),
    /// The model refused a step.
    #[error(transparent)]
    Decoder(#[from] DecoderError),
}

/// Options of [`generate`].
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    /// Rows of each layer's pool (default: enough for every request at once).
    pub pool_rows: Option<usize>,
    /// Keep the logits of every generated token (read back each step); without, the argmax
    /// runs on the device and only the ids are read.
    pub keep_logits: bool,
    /// The most bytes the pools may take, a bound besides what the device can hold
    /// ([`memory_limit`](crate::pool::memory_limit)). Checked before anything is allocated.
    pub max_pool_bytes: Option<u64>,
}

/// Throughput of a run. A step that holds any prefill token counts as prefill time, a step of
/// decode tokens only as decode time.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Prompt tokens run.
    pub prefill_tokens: usize,
    /// Wall time of steps that held prompt tokens.
    pub prefill_time: Duration,
    /// Tokens decoded in decode-only steps.
    pub decode_tokens: usize,
    /// Wall time of decode-only steps.
    pub decode_time: Duration,
    /// Steps run.
    pub steps: usize,
    /// Requests finished so far.
    pub finished: usize,
    /// Tokens generated so far.
    pub generated: usize,
}

impl Stats {
    /// Prompt tokens per second.
    pub fn prefill_rate(&self) -> f64 {
        self.prefill_tokens as f64 / self.prefill_time.as_secs_f64().max(1e-12)
    }
    /// Decoded tokens per second.
    pub fn decode_rate(&self) -> f64 {
        self.decode_tokens as f64 / self.decode_time.as_secs_f64().max(1e-12)
    }
}

struct Running {
    request: usize,
    prefilled: bool,
    next_token: u32,
    position: usize,
}

/// Pool rows a request holds at its longest (saturated: a limit past `usize::MAX` is refused by
/// the pool size check, never wrapped).
fn rows_needed(request: &Request) -> usize {
    request
        .prompt
        .len()
        .saturating_add(request.max_new_tokens.saturating_sub(1))
}

/// The first index of the largest value (`torch.argmax`'s choice on ties).
fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
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

/// Runs every request greedily through one continuous batch; results in request order.
/// `on_step` sees the running totals after every step (for a progress line).
pub fn generate(
    model: &Decoder,
    requests: &[Request],
    options: &GenerateOptions,
    on_step: impl FnMut(&Stats),
) -> Result<(Vec<Generated>, Stats), GenerateError> {
    generate_with(&Kernels, model, requests, options, on_step)
}

/// [`generate`] with the decoder's layers run through `ops`.
pub(crate) fn generate_with(
    ops: &impl LayerOps,
    model: &Decoder,
    requests: &[Request],
    options: &GenerateOptions,
    mut on_step: impl FnMut(&Stats),
) -> Result<(Vec<Generated>, Stats), GenerateError> {
    if let Some(i) = requests.iter().position(|r| r.prompt.is_empty()) {
        return Err(GenerateError::EmptyPrompt(i));
    }
    let total = requests
        .iter()
        .map(rows_needed)
        .fold(0usize, usize::saturating_add);
    let pool_rows = options.pool_rows.unwrap_or(total).max(1);
    if let Some((request, r)) = requests
        .iter()
        .enumerate()
        .find(|(_, r)| rows_needed(r) > pool_rows)
    {
        return Err(GenerateError::TooLong {
            request,
            needed: rows_needed(r),
            pool_rows,
        });
    }
    // Slot addressing and memory are checked before anything is allocated.
    let mut cache = model.new_cache_within(pool_rows, options.max_pool_bytes)?;
    let mut budget = pool_rows;
    let mut results = vec![Generated::default(); requests.len()];
    let mut waiting: VecDeque<usize> = (0..requests.len()).collect();
    let mut running: Vec<Running> = Vec::new();
    let mut stats = Stats::default();
    loop {
        while let Some(&i) = waiting.front() {
            let need = rows_needed(&requests[i]);
            if requests[i].max_new_tokens == 0 {
                waiting.pop_front();
                stats.finished += 1;
            } else if need <= budget {
                budget -= need;
                waiting.pop_front();
                running.push(Running {
                    request: i,
                    prefilled: false,
                    next_token: 0,
                    position: 0,
                });
            } else {
                break;
            }
        }
        if running.is_empty() {
            break;
        }
        let mut tokens = Vec::new();
        let mut prefill = 0;
        for r in &running {
            let seq = r.request as u64;
            if r.prefilled {
                tokens.push(StepToken {
                    seq,
                    token: r.next_token,
                    position: r.position,
                });
            } else {
                prefill += requests[r.request].prompt.len();
                tokens.extend(
                    requests[r.request]
                        .prompt
                        .iter()
                        .enumerate()
                        .map(|(p, &t)| StepToken {
                            seq,
                            token: t,
                            position: p,
                        }),
                );
            }
        }
        let start = Instant::now();
        let logits = model.step_with(ops, &tokens, &mut cache)?;
        let chosen: Vec<(u32, Vec<f32>)> = if options.keep_logits {
            let [s, vocab] = logits.dims();
            let values = logits
                .cast(DType::F32)
                .try_into_data()
                .map_err(|e| GenerateError::ReadBack(format!("the logits: {e:?}")))?
                .try_into_vec::<f32>()
                .map_err(|e| GenerateError::ReadBack(format!("the logits: {e:?}")))?;
            (0..s)
                .map(|i| {
                    let row = values[i * vocab..(i + 1) * vocab].to_vec();
                    (argmax(&row), row)
                })
                .collect()
        } else {
            let ids = argmax_rows(logits)
                .try_into_data()
                .map_err(|e| GenerateError::ReadBack(format!("the ids: {e:?}")))?
                .convert::<i64>()
                .try_into_vec::<i64>()
                .map_err(|e| GenerateError::ReadBack(format!("the ids: {e:?}")))?;
            ids.into_iter().map(|id| (id as u32, Vec::new())).collect()
        };
        let elapsed = start.elapsed();
        stats.steps += 1;
        if prefill > 0 {
            stats.prefill_tokens += prefill;
            stats.prefill_time += elapsed;
        } else {
            stats.decode_tokens += tokens.len();
            stats.decode_time += elapsed;
        }
        let mut still = Vec::with_capacity(running.len());
        for (mut r, (token, row)) in running.into_iter().zip(chosen) {
            let out = &mut results[r.request];
            out.generated.push(token);
            stats.generated += 1;
            if options.keep_logits {
                out.logits.push(row);
            }
            r.position = if r.prefilled {
                r.position + 1
            } else {
                requests[r.request].prompt.len()
            };
            r.prefilled = true;
            r.next_token = token;
            if out.generated.len() == requests[r.request].max_new_tokens {
                cache
                    .release(r.request as u64)
                    .map_err(DecoderError::from)?;
                budget += rows_needed(&requests[r.request]);
                stats.finished += 1;
            } else {
                still.push(r);
            }
        }
        running = still;
        on_step(&stats);
    }
    Ok((results, stats))
}
