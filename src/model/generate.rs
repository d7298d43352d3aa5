//! Greedy generation of token ids over the [`Engine`](crate::model::Engine): every request
//! through one continuous batch (admitted as soon as the pool has rows for all of it, first
//! come first served), results in request order. A request that could never fit the pool is an
//! error; one that does not fit yet waits.

use crate::model::engine::{Model, StepFn};
use crate::model::sampling::SamplingError;
use crate::model::{
    DecoderError, Engine, EngineOptions, Event, GenerationRequest, SamplingParams, Stats,
    StopConditions,
};
use crate::pool::KvPoolError;
use crate::text::TextError;

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
    /// A prompt that fills the model's context leaves no room for a token.
    #[error("the prompt has {prompt} tokens, the model's context is {context}")]
    PromptPastContext {
        /// Prompt tokens.
        prompt: usize,
        /// `max_position_embeddings`.
        context: usize,
    },
    /// Invalid sampling settings.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// Stop strings given to an engine without a tokenizer.
    #[error("stop strings need a tokenizer")]
    StopStringsNeedTokenizer,
    /// A chunked prefill of no prompt tokens a step ([`EngineOptions::prefill_chunk`] of 0).
    #[error("a prefill chunk must hold at least one prompt token")]
    PrefillChunk,
    /// An empty stop string (it would stop at once).
    #[error("a stop string must not be empty")]
    EmptyStopString,
    /// Decoding the generated text failed.
    #[error(transparent)]
    Text(#[from] TextError),
}

/// Options of [`generate`].
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    /// Rows of each layer's pool (default: enough for every request at once).
    pub pool_rows: Option<usize>,
    /// Keep the logits of every generated token (read back each step); without, only the ids
    /// are read.
    pub keep_logits: bool,
    /// The most bytes the pools may take, a bound besides what the device can hold
    /// ([`memory_limit`](crate::pool::memory_limit)). Checked before anything is allocated.
    pub max_pool_bytes: Option<u64>,
    /// Chunked prefill: the most prompt tokens a step runs ([`EngineOptions::prefill_chunk`];
    /// `None`: every prompt whole in its first step).
    pub prefill_chunk: Option<usize>,
}

/// Runs every request greedily through one continuous batch; results in request order.
/// `on_step` sees the running totals after every step (for a progress line).
pub fn generate<M: Model>(
    model: &M,
    requests: &[Request],
    options: &GenerateOptions,
    on_step: impl FnMut(&Stats),
) -> Result<(Vec<Generated>, Stats), GenerateError> {
    generate_with(M::step, model, requests, options, on_step)
}

/// [`generate`] with the decoder's steps run through `step`.
pub(crate) fn generate_with<M: Model>(
    step: StepFn<M>,
    model: &M,
    requests: &[Request],
    options: &GenerateOptions,
    mut on_step: impl FnMut(&Stats),
) -> Result<(Vec<Generated>, Stats), GenerateError> {
    if let Some(i) = requests.iter().position(|r| r.prompt.is_empty()) {
        return Err(GenerateError::EmptyPrompt(i));
    }
    let needed = |r: &Request| {
        r.prompt
            .len()
            .saturating_add(r.max_new_tokens.saturating_sub(1))
    };
    let total = requests
        .iter()
        .map(needed)
        .fold(0usize, usize::saturating_add);
    let pool_rows = options.pool_rows.unwrap_or(total).max(1);
    if let Some((request, r)) = requests
        .iter()
        .enumerate()
        .find(|(_, r)| needed(r) > pool_rows)
    {
        return Err(GenerateError::TooLong {
            request,
            needed: needed(r),
            pool_rows,
        });
    }
    let engine_options = EngineOptions {
        pool_rows,
        max_batch: requests.len().max(1),
        max_pool_bytes: options.max_pool_bytes,
        keep_logits: options.keep_logits,
        pad_token_id: None,
        prefill_chunk: options.prefill_chunk,
    };
    // Slot addressing and memory are checked before anything is allocated.
    let mut engine = Engine::with_step(model, None, engine_options, step)?;
    for r in requests {
        engine.submit(GenerationRequest {
            prompt: r.prompt.clone(),
            max_new_tokens: r.max_new_tokens,
            sampling: SamplingParams::greedy(),
            stop: StopConditions::default(),
        })?;
    }
    let mut results = vec![Generated::default(); requests.len()];
    while !engine.is_idle() {
        for event in engine.step()? {
            if let Event::Token {
                id, token, logits, ..
            } = event
            {
                let out = &mut results[id as usize];
                out.generated.push(token);
                out.logits.extend(logits);
            }
        }
        on_step(engine.stats());
    }
    Ok((results, engine.stats().clone()))
}
