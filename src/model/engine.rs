//! The engine: continuous batching over a [`Decoder`] with per-request sampling, stop
//! conditions and streamed text — the loop a server or a command-line front end drives.
//!
//! A request is admitted as soon as the pool has rows for all of it (its prompt plus
//! `max_new_tokens - 1` generated tokens) and the batch has room, first come first served; it is
//! prefilled in the step it joins, beside the decode tokens of the running sequences (or, with
//! [`EngineOptions::prefill_chunk`], over as many steps as its prompt has chunks), and decoded
//! with them until a stop condition holds. Then its rows are freed at once and the next
//! waiting request may take them. Each step samples every sequence's next token on the device
//! (only the ids are read back) and hands each request its token and the text it completes.

use crate::model::sampling::{SamplingParams, SeqRng, sample};
use crate::model::{Decoder, DecoderError, GenerateError, StepToken};
use crate::model::{DecoderConfig, ShardedCache, ShardedDecoder};
use crate::pool::{KvPool, KvPoolError, SeqId};
use crate::text::{DecodeStream, Tokenizer};
use burn::tensor::{DType, Tensor};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Identifies a request in an [`Engine`].
pub type RequestId = u64;

/// When a request stops besides its token budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopConditions {
    /// Ids that end the generation (the model's end-of-sequence tokens); the id is the last of
    /// the generated ids, and its text is not streamed.
    pub eos_token_ids: Vec<u32>,
    /// Strings that end the generation where they appear in the generated text (which is cut
    /// before them); they need the engine's tokenizer.
    pub stop_strings: Vec<String>,
}

/// One request: prompt ids, how many tokens at most, how to sample, when to stop.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationRequest {
    /// Prompt token ids (at least one).
    pub prompt: Vec<u32>,
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    /// The sampling settings (greedy: [`SamplingParams::greedy`]).
    pub sampling: SamplingParams,
    /// When to stop before `max_new_tokens`.
    pub stop: StopConditions,
}

/// Why a request stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It generated an end-of-sequence id.
    Eos,
    /// Its text reached a stop string.
    StopString,
    /// It generated `max_new_tokens` tokens.
    Length,
    /// Its sequence reached the model's context (`max_position_embeddings`).
    ContextLimit,
    /// It was cancelled.
    Cancelled,
}

impl FinishReason {
    /// OpenAI's name for it: `stop` (an eos id or a stop string) or `length` (a token budget or
    /// the context); a cancelled request has none.
    pub fn openai(self) -> Option<&'static str> {
        match self {
            FinishReason::Eos | FinishReason::StopString => Some("stop"),
            FinishReason::Length | FinishReason::ContextLimit => Some("length"),
            FinishReason::Cancelled => None,
        }
    }
}

/// What a step produced for one request.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A generated token and the text it completes (empty while a character or a possible stop
    /// string is incomplete, or without a tokenizer).
    Token {
        /// The request.
        id: RequestId,
        /// The token id.
        token: u32,
        /// New text.
        text: String,
        /// The logits the token was drawn from ([`EngineOptions::keep_logits`]).
        logits: Option<Vec<f32>>,
    },
    /// The request finished; its rows are free.
    Finished {
        /// The request.
        id: RequestId,
        /// Why.
        reason: FinishReason,
        /// Text held back until now (a partial stop-string match that did not complete).
        text: String,
    },
}

/// Options of an [`Engine`].
#[derive(Clone, Debug)]
pub struct EngineOptions {
    /// Rows of each layer's pool: the tokens all running requests may hold together.
    pub pool_rows: usize,
    /// The most requests in one batch.
    pub max_batch: usize,
    /// The most bytes the pools may take, a bound besides what the device can hold.
    pub max_pool_bytes: Option<u64>,
    /// Read back the logits of every generated token (tests and comparisons).
    pub keep_logits: bool,
    /// A padding id taken out of every prompt: such tokens take no row and no position, as
    /// transformers' `generate` treats them when it is given no attention mask
    /// ([`Checkpoint::pad_token_id`](crate::model::Checkpoint::pad_token_id)).
    pub pad_token_id: Option<u32>,
    /// Chunked prefill: the most prompt tokens one step runs, over all the requests prefilling
    /// in it. A longer prompt is run over several steps, each beside the running requests'
    /// decode tokens (which every step keeps), so a long prompt does not hold up their next
    /// tokens; the requests admitted first get the step's prompt tokens first, and a request
    /// samples its first token in the step that ends its prompt. `None`: every admitted prompt
    /// runs whole in its first step. `Some(0)` is refused by [`Engine::new`].
    pub prefill_chunk: Option<usize>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            pool_rows: 4096,
            max_batch: 64,
            max_pool_bytes: None,
            keep_logits: false,
            pad_token_id: None,
            prefill_chunk: None,
        }
    }
}

/// Throughput of the steps so far. A step that holds any prefill token counts as prefill time,
/// a step of decode tokens only as decode time.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Prompt tokens run.
    pub prefill_tokens: usize,
    /// Wall time of steps that held prompt tokens.
    pub prefill_time: Duration,
    /// Of `prefill_time`, the time until the decoder's step returned: the caller's share (its
    /// work enqueued), before waiting for the device and reading back.
    pub prefill_enqueue_time: Duration,
    /// Tokens decoded in decode-only steps.
    pub decode_tokens: usize,
    /// Wall time of decode-only steps.
    pub decode_time: Duration,
    /// Of `decode_time`, the time until the decoder's step returned (as `prefill_enqueue_time`).
    pub decode_enqueue_time: Duration,
    /// Steps run.
    pub steps: usize,
    /// Requests finished.
    pub finished: usize,
    /// Tokens generated.
    pub generated: usize,
}

impl Stats {
    /// Prompt tokens per second.
    pub fn prefill_rate(&self) -> f64 {
        self.prefill_tokens as f64 / self.prefill_time.as_secs_f64().max(1e-12)
    }

    /// Decode tokens per second.
    pub fn decode_rate(&self) -> f64 {
        self.decode_tokens as f64 / self.decode_time.as_secs_f64().max(1e-12)
    }
}

/// What an [`Engine`] (and [`generate`](crate::model::generate)) runs: a decoder on one device
/// ([`Decoder`]) or split over several ([`ShardedDecoder`](crate::model::ShardedDecoder)).
pub trait Model {
    /// Its keys and values.
    type Cache: Cache;
    /// The architecture (the engine checks requests against its vocabulary and context).
    fn config(&self) -> &DecoderConfig;
    /// An empty cache of `pool_rows` rows, refused before anything is allocated past i32 slots,
    /// the device's memory or `limit` bytes.
    fn new_cache_within(
        &self,
        pool_rows: usize,
        limit: Option<u64>,
    ) -> Result<Self::Cache, KvPoolError>;
    /// One ragged step ([`Decoder::step`]): the logits `[S, vocab]` of each sequence's last
    /// token.
    fn step(
        &self,
        tokens: &[StepToken],
        cache: &mut Self::Cache,
    ) -> Result<Tensor<2>, DecoderError>;
}

/// A [`Model`]'s cache as the engine uses it.
pub trait Cache {
    /// Rows free.
    fn available(&self) -> usize;
    /// Frees sequence `seq`'s rows; the rows freed.
    fn release(&mut self, seq: SeqId) -> Result<usize, KvPoolError>;
}

impl Model for Decoder {
    type Cache = KvPool;
    fn config(&self) -> &DecoderConfig {
        &self.config
    }
    fn new_cache_within(
        &self,
        pool_rows: usize,
        limit: Option<u64>,
    ) -> Result<KvPool, KvPoolError> {
        Decoder::new_cache_within(self, pool_rows, limit)
    }
    fn step(&self, tokens: &[StepToken], cache: &mut KvPool) -> Result<Tensor<2>, DecoderError> {
        Decoder::step(self, tokens, cache)
    }
}

impl Cache for KvPool {
    fn available(&self) -> usize {
        KvPool::available(self)
    }
    fn release(&mut self, seq: SeqId) -> Result<usize, KvPoolError> {
        KvPool::release(self, seq)
    }
}

impl Model for ShardedDecoder {
    type Cache = ShardedCache;
    fn config(&self) -> &DecoderConfig {
        ShardedDecoder::config(self)
    }
    fn new_cache_within(
        &self,
        pool_rows: usize,
        limit: Option<u64>,
    ) -> Result<ShardedCache, KvPoolError> {
        ShardedDecoder::new_cache_within(self, pool_rows, limit)
    }
    fn step(
        &self,
        tokens: &[StepToken],
        cache: &mut ShardedCache,
    ) -> Result<Tensor<2>, DecoderError> {
        ShardedDecoder::step(self, tokens, cache)
    }
}

impl Cache for ShardedCache {
    fn available(&self) -> usize {
        ShardedCache::available(self)
    }
    fn release(&mut self, seq: SeqId) -> Result<usize, KvPoolError> {
        ShardedCache::release(self, seq)
    }
}

/// How a step runs the model: [`Model::step`], or an oracle of it.
pub(crate) type StepFn<M> =
    fn(&M, &[StepToken], &mut <M as Model>::Cache) -> Result<Tensor<2>, DecoderError>;

/// A request while it waits or runs.
struct Sequence<'t> {
    id: RequestId,
    request: GenerationRequest,
    generated: Vec<u32>,
    /// Prompt tokens in the pool.
    prefilled: usize,
    rng: SeqRng,
    stream: Option<DecodeStream<'t>>,
    /// The text decoded so far and how much of it was handed out.
    text: String,
    sent: usize,
}

/// Continuous batching over a decoder: [`Engine::submit`] requests, [`Engine::step`] until
/// [`Engine::is_idle`], [`Engine::cancel`] any time.
pub struct Engine<'a, M: Model = Decoder> {
    decoder: &'a M,
    tokenizer: Option<&'a Tokenizer>,
    pool: M::Cache,
    options: EngineOptions,
    step_fn: StepFn<M>,
    waiting: VecDeque<Sequence<'a>>,
    running: Vec<Sequence<'a>>,
    /// Pool rows not promised to a running request.
    budget: usize,
    next_id: RequestId,
    stats: Stats,
}

/// The rows a request may hold: its prompt and every generated token but the last.
fn rows_needed(request: &GenerationRequest) -> usize {
    request
        .prompt
        .len()
        .saturating_add(request.max_new_tokens.saturating_sub(1))
}

impl<'a, M: Model> Engine<'a, M> {
    /// An engine over `decoder` with pools of `options.pool_rows` rows (refused before anything
    /// is allocated past i32 slots, the device's memory or `max_pool_bytes`; a `prefill_chunk` of
    /// 0 is refused too). Without a tokenizer it streams ids only and refuses stop strings.
    pub fn new(
        decoder: &'a M,
        tokenizer: Option<&'a Tokenizer>,
        options: EngineOptions,
    ) -> Result<Self, GenerateError> {
        Self::with_step(decoder, tokenizer, options, M::step)
    }

    /// [`Self::new`] whose steps run through `step_fn`.
    pub(crate) fn with_step(
        decoder: &'a M,
        tokenizer: Option<&'a Tokenizer>,
        options: EngineOptions,
        step_fn: StepFn<M>,
    ) -> Result<Self, GenerateError> {
        if options.prefill_chunk == Some(0) {
            return Err(GenerateError::PrefillChunk);
        }
        let pool = decoder.new_cache_within(options.pool_rows, options.max_pool_bytes)?;
        Ok(Self {
            decoder,
            tokenizer,
            budget: options.pool_rows,
            pool,
            options,
            step_fn,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            stats: Stats::default(),
        })
    }

    /// The pool's rows.
    pub fn pool_rows(&self) -> usize {
        self.options.pool_rows
    }

    /// Rows in use by running requests.
    pub fn rows_in_use(&self) -> usize {
        self.options.pool_rows - self.pool.available()
    }

    /// Requests waiting for rows or a place in the batch.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Nothing waits or runs.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// The throughput so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The model's context: `max_position_embeddings`, if its config has one.
    pub fn context(&self) -> Option<usize> {
        self.decoder.config().max_position_embeddings
    }

    /// Queues a request; refused, with nothing queued, when it has an empty prompt (once any
    /// padding id is taken out), an id past
    /// the vocabulary, a prompt that fills the model's context, invalid sampling settings, stop
    /// strings without a tokenizer, or needs more rows than the pool has.
    pub fn submit(&mut self, mut request: GenerationRequest) -> Result<RequestId, GenerateError> {
        let id = self.next_id;
        if let Some(pad) = self.options.pad_token_id {
            request.prompt.retain(|&t| t != pad);
        }
        if request.prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt(id as usize));
        }
        let vocab_size = self.decoder.config().vocab_size;
        if let Some(&token) = request.prompt.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(DecoderError::Token { token, vocab_size }.into());
        }
        if let Some(context) = self.context()
            && request.prompt.len() >= context
        {
            return Err(GenerateError::PromptPastContext {
                prompt: request.prompt.len(),
                context,
            });
        }
        request.sampling.validate()?;
        if !request.stop.stop_strings.is_empty() && self.tokenizer.is_none() {
            return Err(GenerateError::StopStringsNeedTokenizer);
        }
        if request.stop.stop_strings.iter().any(String::is_empty) {
            return Err(GenerateError::EmptyStopString);
        }
        let needed = rows_needed(&request);
        if needed > self.options.pool_rows {
            return Err(GenerateError::TooLong {
                request: id as usize,
                needed,
                pool_rows: self.options.pool_rows,
            });
        }
        self.next_id += 1;
        let skip_special = true;
        self.waiting.push_back(Sequence {
            id,
            rng: SeqRng::new(request.sampling.seed),
            stream: self.tokenizer.map(|t| t.decode_stream(skip_special)),
            request,
            generated: Vec::new(),
            prefilled: 0,
            text: String::new(),
            sent: 0,
        });
        Ok(id)
    }

    /// Cancels a request: a waiting one leaves the queue, a running one frees its rows at once.
    /// Returns whether it was there.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return true;
        }
        match self.running.iter().position(|s| s.id == id) {
            Some(i) => {
                let seq = self.running.remove(i);
                self.retire(&seq);
                true
            }
            None => false,
        }
    }

    /// Frees a finished sequence's rows and budget.
    fn retire(&mut self, seq: &Sequence<'a>) {
        if seq.prefilled > 0 {
            // The sequence holds rows since its first prefill step.
            let _ = self.pool.release(seq.id);
        }
        self.budget += rows_needed(&seq.request);
        self.stats.finished += 1;
    }

    /// Admits what fits, runs one batch step, samples every running sequence's next token and
    /// returns what each request got. A request of `max_new_tokens == 0` finishes at once. A
    /// step the decoder refuses keeps no rows and is returned as the error.
    pub fn step(&mut self) -> Result<Vec<Event>, GenerateError> {
        let mut events = Vec::new();
        while let Some(seq) = self.waiting.front() {
            let need = rows_needed(&seq.request);
            if seq.request.max_new_tokens == 0 {
                let seq = self.waiting.pop_front().expect("a front");
                self.stats.finished += 1;
                events.push(Event::Finished {
                    id: seq.id,
                    reason: FinishReason::Length,
                    text: String::new(),
                });
            } else if need <= self.budget && self.running.len() < self.options.max_batch {
                self.budget -= need;
                let seq = self.waiting.pop_front().expect("a front");
                self.running.push(seq);
            } else {
                break;
            }
        }
        if self.running.is_empty() {
            return Ok(events);
        }
        // Each running sequence's tokens this step: its decode token, or the next chunk of its
        // prompt within the step's prompt budget (none once the budget is spent).
        let mut tokens = Vec::new();
        let mut prefill = 0;
        let mut budget = self.options.prefill_chunk.unwrap_or(usize::MAX);
        // Per running sequence: prompt tokens it runs this step, and whether it samples.
        let mut plan = Vec::with_capacity(self.running.len());
        for seq in &self.running {
            let prompt = &seq.request.prompt;
            if seq.prefilled == prompt.len() {
                tokens.push(StepToken {
                    seq: seq.id,
                    token: *seq
                        .generated
                        .last()
                        .expect("a prefilled sequence has a token"),
                    position: prompt.len() + seq.generated.len() - 1,
                });
                plan.push((0, true));
                continue;
            }
            let take = (prompt.len() - seq.prefilled).min(budget);
            budget -= take;
            prefill += take;
            let chunk = seq.prefilled..seq.prefilled + take;
            tokens.extend(
                prompt[chunk.clone()]
                    .iter()
                    .zip(chunk)
                    .map(|(&t, p)| StepToken {
                        seq: seq.id,
                        token: t,
                        position: p,
                    }),
            );
            plan.push((take, seq.prefilled + take == prompt.len()));
        }
        let start = Instant::now();
        let logits = (self.step_fn)(self.decoder, &tokens, &mut self.pool)?;
        let enqueued = start.elapsed();
        // The step's logits rows are its sequences in running order; the rows of sequences still
        // prefilling are dropped.
        let in_step = plan.iter().filter(|&&(take, sampled)| take > 0 || sampled);
        let rows: Vec<i64> = in_step
            .enumerate()
            .filter(|(_, (_, sampled))| *sampled)
            .map(|(row, _)| row as i64)
            .collect();
        let logits = match rows.len() == logits.dims()[0] {
            true => logits,
            false => {
                let n = rows.len();
                let device = logits.device();
                let rows = Tensor::from_data(burn::tensor::TensorData::new(rows, [n]), &device);
                logits.select(0, rows)
            }
        };
        let sampling = || {
            self.running
                .iter()
                .zip(&plan)
                .filter(|(_, (_, sampled))| *sampled)
                .map(|(s, _)| s)
        };
        let kept = match self.options.keep_logits && logits.dims()[0] > 0 {
            true => Some(read_rows(logits.clone())?),
            false => None,
        };
        let params: Vec<SamplingParams> = sampling().map(|s| s.request.sampling.clone()).collect();
        let previous: Vec<Vec<u32>> = sampling()
            .map(|s| match s.request.sampling.repetition_penalty == 1.0 {
                true => Vec::new(),
                false => [&s.request.prompt[..], &s.generated[..]].concat(),
            })
            .collect();
        let previous: Vec<&[u32]> = previous.iter().map(Vec::as_slice).collect();
        let uniforms: Vec<f32> = self
            .running
            .iter_mut()
            .zip(&plan)
            .filter(|(_, (_, sampled))| *sampled)
            .map(|(s, _)| s.rng.uniform())
            .collect();
        let ids = match params.is_empty() {
            true => Vec::new(),
            false => sample(logits, &params, &previous, &uniforms)?,
        };
        let elapsed = start.elapsed();
        self.stats.steps += 1;
        if prefill > 0 {
            self.stats.prefill_tokens += prefill;
            self.stats.prefill_time += elapsed;
            self.stats.prefill_enqueue_time += enqueued;
        } else {
            self.stats.decode_tokens += tokens.len();
            self.stats.decode_time += elapsed;
            self.stats.decode_enqueue_time += enqueued;
        }
        let mut kept = kept.map(Vec::into_iter);
        let context = self.context();
        let running = std::mem::take(&mut self.running);
        let mut ids = ids.into_iter();
        for (mut seq, (take, sampled)) in running.into_iter().zip(plan) {
            seq.prefilled += take;
            if !sampled {
                self.running.push(seq);
                continue;
            }
            let token = ids.next().expect("one id per sampling sequence");
            seq.generated.push(token);
            self.stats.generated += 1;
            let logits = kept.as_mut().and_then(Iterator::next);
            let eos = seq.request.stop.eos_token_ids.contains(&token);
            let (text, stopped) = match eos {
                true => (String::new(), false),
                false => seq.advance_text(token)?,
            };
            events.push(Event::Token {
                id: seq.id,
                token,
                text,
                logits,
            });
            let length = seq.generated.len() >= seq.request.max_new_tokens;
            let full = context.is_some_and(|c| seq.request.prompt.len() + seq.generated.len() >= c);
            let reason = match () {
                _ if eos => Some(FinishReason::Eos),
                _ if stopped => Some(FinishReason::StopString),
                _ if length => Some(FinishReason::Length),
                _ if full => Some(FinishReason::ContextLimit),
                _ => None,
            };
            match reason {
                Some(reason) => {
                    let text = match reason {
                        FinishReason::StopString => String::new(),
                        _ => seq.text[seq.sent..].to_string(),
                    };
                    self.retire(&seq);
                    events.push(Event::Finished {
                        id: seq.id,
                        reason,
                        text,
                    });
                }
                None => self.running.push(seq),
            }
        }
        Ok(events)
    }
}

impl Sequence<'_> {
    /// Decodes `token` into the sequence's text; returns the text that may be handed out now
    /// (none of a possible stop string's start) and whether a stop string completed (the text
    /// is then cut before it).
    fn advance_text(&mut self, token: u32) -> Result<(String, bool), GenerateError> {
        let Some(stream) = self.stream.as_mut() else {
            return Ok((String::new(), false));
        };
        if let Some(piece) = stream.step(token)? {
            self.text.push_str(&piece);
        }
        let stops = &self.request.stop.stop_strings;
        // A stop string may start in text already handed out only if it was held back: search
        // from where the longest stop string could begin.
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.sent.saturating_sub(longest);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        let hit = stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|at| from + at))
            .min();
        if let Some(at) = hit {
            let at = at.max(self.sent);
            let out = self.text[self.sent..at].to_string();
            self.text.truncate(at);
            self.sent = at;
            return Ok((out, true));
        }
        // Hold back the longest suffix that begins a stop string.
        let mut end = self.text.len();
        for s in stops {
            for k in (1..s.len()).rev() {
                if s.is_char_boundary(k) && self.text.ends_with(&s[..k]) {
                    end = end.min(self.text.len() - k);
                    break;
                }
            }
        }
        let end = end.max(self.sent);
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        Ok((out, false))
    }
}

/// The rows of `logits [S, V]` as f32 on the host.
fn read_rows(logits: Tensor<2>) -> Result<Vec<Vec<f32>>, GenerateError> {
    let [_, vocab] = logits.dims();
    let values = logits
        .cast(DType::F32)
        .try_into_data()
        .map_err(|e| GenerateError::ReadBack(format!("the logits: {e:?}")))?
        .try_into_vec::<f32>()
        .map_err(|e| GenerateError::ReadBack(format!("the logits: {e:?}")))?;
    Ok(values.chunks(vocab.max(1)).map(<[f32]>::to_vec).collect())
}
