//! An OpenAI-compatible HTTP server over the [`Engine`](crate::model::Engine) (cargo feature
//! `server`): `POST /v1/chat/completions`, `POST /v1/completions` (streamed as server-sent
//! events or whole), `GET /v1/models`, `GET /health` and `GET /metrics` (Prometheus text).
//!
//! The decoder, the tokenizer's decode streams and the engine live on one engine thread that
//! steps while anything waits or runs; the HTTP side (tokio, axum) checks each request, renders
//! and tokenizes its prompt, queues its choices with the engine thread and streams what they
//! generate. A request the engine refuses is refused before anything is queued, so no error
//! disturbs another request; a client that disconnects cancels its choices at once (their pool
//! rows are freed). `docs/CONTRACT.md` ("The server") lists every field, error and metric.
//!
//! ```no_run
//! use burn::tensor::{DType, Device};
//! use burn_rope_pool::serve::{ServeOptions, ServedModel, Server};
//! use std::path::Path;
//!
//! let dir = Path::new("path/to/checkpoint");
//! let model = ServedModel::load(dir, None, &Device::default(), DType::F32)?;
//! let options = ServeOptions { port: 0, ..ServeOptions::default() };
//! let server = Server::start(model, options)?;
//! println!("listening on http://{}", server.addr());
//! server.shutdown()?; // finishes what runs, then stops
//! # Ok::<(), burn_rope_pool::serve::ServeError>(())
//! ```

mod api;
mod error;
mod metrics;
mod worker;

use crate::model::{
    Checkpoint, Collective, Decoder, DecoderConfig, EngineOptions, GenerateError,
    GenerationRequest, RequestId, ShardedDecoder, StopConditions,
};
use crate::text::Tokenizer;
use api::{Delta, Endpoint, Head, Prompt};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use burn::tensor::{DType, Device};
use error::ApiError;
use metrics::Metrics;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
use worker::{Command, EngineInfo, Output, WorkerOptions};

/// The largest request body (a long prompt as token ids is a few MB of JSON).
const MAX_BODY: usize = 64 << 20;

/// The model a server runs: on one device, or split over several.
// One a server: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum ServedDecoder {
    /// A decoder on one device.
    Whole(Decoder),
    /// A decoder split over several devices (tensor parallelism).
    Sharded(ShardedDecoder),
}

impl ServedDecoder {
    /// The model's architecture.
    pub fn config(&self) -> &DecoderConfig {
        match self {
            Self::Whole(decoder) => &decoder.config,
            Self::Sharded(sharded) => sharded.config(),
        }
    }
}

/// What the server runs: a decoder, its tokenizer and the ids that end a generation.
pub struct ServedModel {
    /// The model.
    pub decoder: ServedDecoder,
    /// Its tokenizer (prompts, chat template, streamed text).
    pub tokenizer: Tokenizer,
    /// Ids that end a generation (`finish_reason` `stop`).
    pub eos_token_ids: Vec<u32>,
    /// A padding id taken out of every prompt
    /// ([`EngineOptions::pad_token_id`](crate::model::EngineOptions::pad_token_id)).
    pub pad_token_id: Option<u32>,
    /// The model's name in the API (`model` of requests and answers, `GET /v1/models`).
    pub name: String,
}

impl ServedModel {
    /// Loads a checkpoint folder onto `device` in `dtype`, with the tokenizer of
    /// `tokenizer_dir` (default: the checkpoint folder), the checkpoint's `eos_token_id` (else
    /// the tokenizer's eos token) and `pad_token_id`; the name is the folder's.
    pub fn load(
        model_dir: &Path,
        tokenizer_dir: Option<&Path>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, ServeError> {
        let load = |e: &dyn std::fmt::Display| ServeError::Load(e.to_string());
        let checkpoint = Checkpoint::open(model_dir).map_err(|e| load(&e))?;
        let tokenizer =
            Tokenizer::from_dir(tokenizer_dir.unwrap_or(model_dir)).map_err(|e| load(&e))?;
        let mut eos_token_ids = checkpoint.eos_token_ids().map_err(|e| load(&e))?;
        if eos_token_ids.is_empty() {
            eos_token_ids.extend(tokenizer.eos_token_id());
        }
        let pad_token_id = checkpoint.pad_token_id().map_err(|e| load(&e))?;
        let decoder = Decoder::load(&checkpoint, device, dtype).map_err(|e| load(&e))?;
        let name = model_dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| model_dir.display().to_string());
        Ok(Self {
            decoder: ServedDecoder::Whole(decoder),
            tokenizer,
            eos_token_ids,
            pad_token_id,
            name,
        })
    }

    /// The model split over `devices` ([`ShardedDecoder::new`]; a model loaded into host
    /// memory, `Device::flex()`, moves to them), its sums through `collective`. A model split
    /// already is refused.
    pub fn shard(
        self,
        devices: &[Device],
        collective: Box<dyn Collective>,
    ) -> Result<Self, ServeError> {
        let ServedDecoder::Whole(whole) = &self.decoder else {
            return Err(ServeError::Load("the model is split already".into()));
        };
        let sharded = ShardedDecoder::new(whole, devices, collective)
            .map_err(|e| ServeError::Load(e.to_string()))?;
        Ok(Self {
            decoder: ServedDecoder::Sharded(sharded),
            ..self
        })
    }
}

/// Settings of a [`Server`].
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The address to listen on.
    pub host: String,
    /// The port (0: any free one, see [`Server::addr`]).
    pub port: u16,
    /// Rows of each layer's KV pool: the tokens all running requests hold together; a request
    /// is admitted when the pool has rows for its prompt and `max_tokens - 1` more.
    pub pool_rows: usize,
    /// The most requests in one batch step (at least 1).
    pub max_batch: usize,
    /// The most requests waiting to start (a request counts from its submission to its first
    /// step; at least 1); past it, 429.
    pub max_queue: usize,
    /// The most bytes the pools may take.
    pub max_pool_bytes: Option<u64>,
    /// The key clients must send as `Authorization: Bearer KEY` on `/v1/*` (none: open).
    pub api_key: Option<String>,
    /// `max_tokens` of a request that gives none (none: OpenAI's defaults, the rest of the
    /// context for a chat and 16 for a completion). The pool rows a request may need are
    /// reserved when it starts, so a chat without `max_tokens` holds the rows of a whole
    /// context: a bound here lets more such requests run at once.
    pub default_max_tokens: Option<usize>,
    /// Chunked prefill: the most prompt tokens one step runs
    /// ([`EngineOptions::prefill_chunk`]; none: every prompt whole in its first step). Default
    /// 2048: on an H100 a 32768-token prompt joining 8 decoding requests held their next token
    /// 3.19 s whole, and 223 ms (median; 310 at most) a step in chunks of 2048, for a first
    /// token 8% later (Llama-3-8B shape; `benches/RESULTS.md`, "Prompts beside decoding
    /// requests").
    pub prefill_chunk: Option<usize>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8000,
            pool_rows: 8192,
            max_batch: 64,
            max_queue: 256,
            max_pool_bytes: None,
            api_key: None,
            default_max_tokens: None,
            prefill_chunk: Some(2048),
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The checkpoint or tokenizer could not be loaded.
    #[error("cannot load the model: {0}")]
    Load(String),
    /// The engine could not be built (its pools do not fit, for one).
    #[error(transparent)]
    Engine(#[from] GenerateError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// `host:port`.
        addr: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The runtime or the listener failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A server thread panicked.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
}

/// A running server: its HTTP threads and its engine thread.
pub struct Server {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<Result<(), ServeError>>>,
}

impl Server {
    /// Builds the engine, binds `host:port` and serves in background threads; returns once
    /// it listens. [`Server::shutdown`] (or dropping it) stops it gracefully.
    pub fn start(model: ServedModel, options: ServeOptions) -> Result<Self, ServeError> {
        start(model, options, false)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections, lets every request in flight finish, then stops the
    /// engine; returns when all has stopped.
    pub fn shutdown(mut self) -> Result<(), ServeError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.join()
    }

    fn join(&mut self) -> Result<(), ServeError> {
        match self.thread.take() {
            Some(thread) => thread.join().map_err(|_| ServeError::Panicked("server"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let _ = self.join();
    }
}

/// Serves `model` until SIGINT or SIGTERM, then shuts down gracefully (no new connections,
/// requests in flight finish) and returns.
pub fn run(model: ServedModel, options: ServeOptions) -> Result<(), ServeError> {
    let mut server = start(model, options, true)?;
    eprintln!("listening on http://{}", server.addr);
    let result = server.join();
    server.shutdown = None;
    result
}

fn start(model: ServedModel, options: ServeOptions, signals: bool) -> Result<Server, ServeError> {
    let ServedModel {
        decoder,
        tokenizer,
        eos_token_ids,
        pad_token_id,
        name,
    } = model;
    let tokenizer = Arc::new(tokenizer);
    let metrics = Arc::new(Metrics::new(options.pool_rows));
    let (commands, receiver) = mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let worker_options = WorkerOptions {
        engine: EngineOptions {
            pool_rows: options.pool_rows,
            max_batch: options.max_batch.max(1),
            max_pool_bytes: options.max_pool_bytes,
            keep_logits: false,
            pad_token_id,
            prefill_chunk: options.prefill_chunk,
        },
        max_queue: options.max_queue.max(1),
    };
    let engine = {
        let (tokenizer, metrics) = (tokenizer.clone(), metrics.clone());
        std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || match decoder {
                ServedDecoder::Whole(decoder) => worker::run(
                    decoder,
                    tokenizer,
                    worker_options,
                    metrics,
                    receiver,
                    ready_tx,
                ),
                ServedDecoder::Sharded(decoder) => worker::run(
                    decoder,
                    tokenizer,
                    worker_options,
                    metrics,
                    receiver,
                    ready_tx,
                ),
            })?
    };
    let stop_engine = |commands: &mpsc::UnboundedSender<Command>, engine: JoinHandle<()>| {
        let _ = commands.send(Command::Shutdown);
        engine.join().map_err(|_| ServeError::Panicked("engine"))
    };
    let info = match ready_rx.recv() {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => {
            stop_engine(&commands, engine)?;
            return Err(e.into());
        }
        Err(_) => {
            let stopped = stop_engine(&commands, engine);
            return Err(stopped.err().unwrap_or(ServeError::Panicked("engine")));
        }
    };
    let addr_text = format!("{}:{}", options.host, options.port);
    let setup = || -> Result<_, ServeError> {
        let listener = std::net::TcpListener::bind(&addr_text)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| ServeError::Bind {
                addr: addr_text.clone(),
                source,
            })?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("serve")
            .build()?;
        // The handlers are installed now, before anyone is told the address.
        let signals = match signals {
            true => Some(Signals::install(&runtime)?),
            false => None,
        };
        Ok((listener, addr, runtime, signals))
    };
    let (listener, addr, runtime, signals) = match setup() {
        Ok(setup) => setup,
        Err(e) => {
            stop_engine(&commands, engine)?;
            return Err(e);
        }
    };
    let state = Arc::new(AppState {
        tokenizer,
        commands: commands.clone(),
        metrics,
        model_name: name,
        api_key: options.api_key,
        info,
        eos_token_ids,
        pad_token_id,
        default_max_tokens: options.default_max_tokens,
        created: unix_time(),
    });
    let app = router(state);
    let (shutdown_tx, shutdown_rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("serve".into())
        .spawn(move || {
            let served = runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown_signal(shutdown_rx, signals))
                    .await
            });
            // Every connection is closed: nothing runs; the engine stops.
            drop(runtime);
            let stopped = stop_engine(&commands, engine);
            served?;
            stopped
        })?;
    Ok(Server {
        addr,
        shutdown: Some(shutdown_tx),
        thread: Some(thread),
    })
}

/// SIGINT and SIGTERM (SIGINT alone off Unix), listened for from their installation on.
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn install(runtime: &tokio::runtime::Runtime) -> std::io::Result<Self> {
        let _context = runtime.enter();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves when the server is to stop: its [`Server`] says so (or is dropped), or on one of
/// `signals`.
async fn shutdown_signal(stop: oneshot::Receiver<()>, signals: Option<Signals>) {
    let Some(signals) = signals else {
        let _ = stop.await;
        return;
    };
    tokio::select! {
        _ = stop => {}
        () = signals.recv() => {}
    }
    eprintln!("shutting down: no new connections, finishing the requests in flight");
}

/// What every handler shares.
struct AppState {
    tokenizer: Arc<Tokenizer>,
    commands: mpsc::UnboundedSender<Command>,
    metrics: Arc<Metrics>,
    model_name: String,
    api_key: Option<String>,
    info: EngineInfo,
    eos_token_ids: Vec<u32>,
    pad_token_id: Option<u32>,
    default_max_tokens: Option<usize>,
    created: u64,
}

impl AppState {
    /// Checks `Authorization: Bearer KEY` where the server has a key.
    fn authorize(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(key) = &self.api_key else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        match given {
            None => Err(ApiError::unauthorized(
                "You didn't provide an API key. You need to provide your API key in an \
                 Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            )),
            Some(given) if given == key => Ok(()),
            Some(_) => Err(ApiError::unauthorized("Incorrect API key provided.")),
        }
    }
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{*model}", get(model))
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .fallback(unknown_url)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

fn unix_time() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A JSON answer.
fn json_response(status: StatusCode, value: &serde_json::Value) -> Response {
    let mut response = (status, value.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Counts an answer in the metrics and returns it.
fn counted(state: &AppState, endpoint: &str, response: Response) -> Response {
    state.metrics.request(endpoint, response.status().as_u16());
    response
}

async fn unknown_url(State(state): State<Arc<AppState>>, method: Method, uri: Uri) -> Response {
    let response = ApiError::unknown_url(method.as_str(), uri.path()).into_response();
    counted(&state, "unknown", response)
}

async fn method_not_allowed(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
) -> Response {
    let response = ApiError::method_not_allowed(method.as_str(), uri.path()).into_response();
    counted(&state, uri.path(), response)
}

async fn health() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> Response {
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

impl AppState {
    /// The model's entry of `GET /v1/models`.
    fn model_card(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "burn-rope-pool",
            "max_model_len": self.info.context,
        })
    }
}

async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let response = match state.authorize(&headers) {
        Ok(()) => json_response(
            StatusCode::OK,
            &serde_json::json!({"object": "list", "data": [state.model_card()]}),
        ),
        Err(e) => e.into_response(),
    };
    counted(&state, "/v1/models", response)
}

async fn model(
    State(state): State<Arc<AppState>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let response = match state.authorize(&headers) {
        Err(e) => e.into_response(),
        Ok(()) if name == state.model_name => json_response(StatusCode::OK, &state.model_card()),
        Ok(()) => ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{name}` does not exist."),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
        .into_response(),
    };
    counted(&state, "/v1/models/{model}", response)
}

async fn chat(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(state, Endpoint::Chat, headers, body).await
}

async fn completions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    generate(state, Endpoint::Completions, headers, body).await
}

async fn generate(
    state: Arc<AppState>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let arrived = Instant::now();
    // Dropped before the answer is ready (the client left): counted as 499.
    let mut left = ClientLeft {
        state: state.clone(),
        endpoint,
        armed: true,
    };
    let response = match generate_inner(&state, endpoint, &headers, body, arrived).await {
        Ok(response) => response,
        Err(e) => counted(&state, endpoint.path(), e.into_response()),
    };
    left.armed = false;
    response
}

/// Counts a request whose handler is dropped before it answers (status 499).
struct ClientLeft {
    state: Arc<AppState>,
    endpoint: Endpoint,
    armed: bool,
}

impl Drop for ClientLeft {
    fn drop(&mut self) {
        if self.armed {
            self.state.metrics.request(self.endpoint.path(), 499);
        }
    }
}

/// What a request asks to continue: a chat (rendered through the chat template) or prompts.
enum Input {
    Chat(Vec<crate::text::ChatMessage>),
    Prompts(Vec<Prompt>),
}

/// A new answer id (`chatcmpl-…`, `cmpl-…`).
fn answer_id(endpoint: Endpoint) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let prefix = match endpoint {
        Endpoint::Chat => "chatcmpl",
        Endpoint::Completions => "cmpl",
    };
    format!("{prefix}-{:08x}{n:016x}", nanos)
}

/// Checks, tokenizes and queues a request, then answers it whole or as a stream.
async fn generate_inner(
    state: &Arc<AppState>,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    arrived: Instant,
) -> Result<Response, ApiError> {
    state.authorize(headers)?;
    let body = body.map_err(|e| ApiError {
        status: e.status(),
        message: e.body_text(),
        kind: "invalid_request_error",
        param: None,
        code: (e.status() == StatusCode::PAYLOAD_TOO_LARGE).then_some("request_too_large"),
    })?;
    let map = api::parse_body(&body)?;
    let common = api::parse_common(&map, endpoint)?;
    if let Some(model) = &common.model
        && *model != state.model_name
    {
        return Err(ApiError::invalid(
            format!(
                "The model `{model}` does not exist (this server serves `{}`).",
                state.model_name
            ),
            Some("model"),
            Some("model_not_found"),
        ));
    }
    let (param, input) = match endpoint {
        Endpoint::Chat => ("messages", Input::Chat(api::parse_messages(&map)?)),
        Endpoint::Completions => ("prompt", Input::Prompts(api::parse_prompts(&map)?)),
    };
    let prompts = tokenize(state, input, param).await?;
    let mut requests = Vec::new();
    let mut prompt_tokens = 0;
    for mut prompt in prompts {
        if let Some(pad) = state.pad_token_id {
            prompt.retain(|&t| t != pad);
        }
        let max_new_tokens = check_prompt(state, &prompt, common.max_tokens, endpoint, param)?;
        prompt_tokens += prompt.len();
        for i in 0..common.n {
            let mut sampling = common.sampling.clone();
            sampling.seed = sampling.seed.map(|s| s.wrapping_add(i as u64));
            requests.push(GenerationRequest {
                prompt: prompt.clone(),
                max_new_tokens,
                sampling,
                stop: StopConditions {
                    eos_token_ids: state.eos_token_ids.clone(),
                    stop_strings: common.stop.clone(),
                },
            });
        }
    }
    let prefilled: usize = requests.iter().map(|r| r.prompt.len()).sum();
    let (reply, replied) = oneshot::channel();
    state
        .commands
        .send(Command::Submit {
            requests,
            arrived,
            reply,
        })
        .map_err(|_| ApiError::unavailable())?;
    let submitted = replied.await.map_err(|_| ApiError::unavailable())??;
    state.metrics.prompt_tokens(prefilled);
    let guard = CancelGuard {
        finished: vec![false; submitted.ids.len()],
        ids: submitted.ids,
        commands: state.commands.clone(),
    };
    let head = Head {
        id: answer_id(endpoint),
        created: unix_time(),
        model: state.model_name.clone(),
        endpoint,
    };
    match common.stream {
        true => Ok(stream_answer(SseStream {
            head,
            outputs: submitted.outputs,
            guard,
            pending: VecDeque::new(),
            done: false,
            prompt_tokens,
            completion_tokens: 0,
            include_usage: common.include_usage,
            metrics: state.metrics.clone(),
            status: 499,
        })),
        false => {
            let answer = whole_answer(head, submitted.outputs, guard, prompt_tokens).await?;
            Ok(counted(
                state,
                endpoint.path(),
                json_response(StatusCode::OK, &answer),
            ))
        }
    }
}

/// The prompt ids of a request: a chat rendered through the chat template, texts encoded with
/// the tokenizer's special tokens, ids as they are. Off the async workers (a long prompt takes
/// a while).
async fn tokenize(
    state: &AppState,
    input: Input,
    param: &'static str,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let tokenizer = state.tokenizer.clone();
    tokio::task::spawn_blocking(move || {
        let failed = |e: crate::text::TextError| {
            ApiError::invalid(e.to_string(), Some(param), Some("invalid_value"))
        };
        match input {
            Input::Chat(messages) => Ok(vec![
                tokenizer.encode_chat(&messages, true).map_err(failed)?,
            ]),
            Input::Prompts(prompts) => prompts
                .into_iter()
                .map(|p| match p {
                    Prompt::Text(text) => tokenizer.encode(&text, true).map_err(failed),
                    Prompt::Ids(ids) => Ok(ids),
                })
                .collect(),
        }
    })
    .await
    .map_err(|e| ApiError::server(format!("tokenizing failed: {e}")))?
}

/// A streamed answer: chat streams open with each choice's role.
fn stream_answer(mut stream: SseStream) -> Response {
    if stream.head.endpoint == Endpoint::Chat {
        for index in 0..stream.guard.ids.len() {
            let chunk = stream.head.chunk(index, Delta::Role, stream.include_usage);
            stream.push(&chunk);
        }
    }
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A whole answer, once every choice has finished.
async fn whole_answer(
    head: Head,
    mut outputs: mpsc::UnboundedReceiver<Output>,
    mut guard: CancelGuard,
    prompt_tokens: usize,
) -> Result<serde_json::Value, ApiError> {
    let choices = guard.ids.len();
    let mut texts = vec![String::new(); choices];
    let mut reasons = vec![None; choices];
    let mut completion_tokens = 0;
    while !guard.all_finished() {
        match outputs.recv().await {
            Some(Output::Token { index, text }) => {
                texts[index].push_str(&text);
                completion_tokens += 1;
            }
            Some(Output::Finished {
                index,
                reason,
                text,
            }) => {
                texts[index].push_str(&text);
                reasons[index] = reason.openai();
                guard.finished[index] = true;
            }
            Some(Output::Failed(message)) => {
                guard.finish_all();
                return Err(ApiError::server(message));
            }
            None => {
                guard.finish_all();
                return Err(ApiError::unavailable());
            }
        }
    }
    let choices: Vec<(String, Option<&str>)> = texts.into_iter().zip(reasons).collect();
    Ok(head.answer(&choices, api::usage(prompt_tokens, completion_tokens)))
}

/// Checks a prompt (pad ids already out) against the vocabulary, the context and the pool;
/// returns the `max_new_tokens` to run: `max_tokens` (default: the server's default, else the
/// rest of the context for a chat and 16 for a completion, within the pool) cut to the rest of
/// the context, where the request stops with `length`.
fn check_prompt(
    state: &AppState,
    prompt: &[u32],
    max_tokens: Option<(usize, &str)>,
    endpoint: Endpoint,
    param: &str,
) -> Result<usize, ApiError> {
    let info = &state.info;
    let context_exceeded =
        |message: String| ApiError::invalid(message, Some(param), Some("context_length_exceeded"));
    if prompt.is_empty() {
        return Err(ApiError::invalid_value(
            param,
            format!("Invalid '{param}': the prompt has no tokens."),
        ));
    }
    if let Some(&id) = prompt.iter().find(|&&t| t as usize >= info.vocab_size) {
        return Err(ApiError::invalid_value(
            param,
            format!(
                "Invalid '{param}': token id {id} is past the vocabulary ({} ids).",
                info.vocab_size
            ),
        ));
    }
    let p = prompt.len();
    if let Some(context) = info.context
        && p >= context
    {
        return Err(context_exceeded(format!(
            "This model's maximum context length is {context} tokens. However, your prompt has \
             {p} tokens, which leaves no room for a completion."
        )));
    }
    if p > info.pool_rows {
        return Err(context_exceeded(format!(
            "Your prompt has {p} tokens; the server's KV pool holds {} tokens.",
            info.pool_rows
        )));
    }
    let room_context = info.context.map_or(usize::MAX, |c| c - p);
    let room_pool = info.pool_rows + 1 - p;
    let default = match (state.default_max_tokens, endpoint) {
        (Some(max), _) => max.max(1),
        (None, Endpoint::Chat) => usize::MAX,
        (None, Endpoint::Completions) => 16,
    };
    match max_tokens {
        None => Ok(default.min(room_context).min(room_pool)),
        Some((max, name)) => {
            let run = max.min(room_context);
            if run > room_pool {
                return Err(ApiError::invalid(
                    format!(
                        "Invalid '{name}': {max}. The prompt has {p} tokens, and the server's KV \
                         pool holds {} tokens: at most {room_pool} can be generated for this \
                         prompt.",
                        info.pool_rows
                    ),
                    Some(name),
                    Some("context_length_exceeded"),
                ));
            }
            Ok(run)
        }
    }
}

/// Cancels the choices of a request that have not finished when it is dropped (its client
/// left: the handler or the stream was dropped).
struct CancelGuard {
    ids: Vec<RequestId>,
    finished: Vec<bool>,
    commands: mpsc::UnboundedSender<Command>,
}

impl CancelGuard {
    fn all_finished(&self) -> bool {
        self.finished.iter().all(|&f| f)
    }

    fn finish_all(&mut self) {
        self.finished.iter_mut().for_each(|f| *f = true);
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let open: Vec<RequestId> = self
            .ids
            .iter()
            .zip(&self.finished)
            .filter(|(_, f)| !**f)
            .map(|(&id, _)| id)
            .collect();
        if !open.is_empty() {
            let _ = self.commands.send(Command::Cancel(open));
        }
    }
}

/// The server-sent events of a streamed answer: `data: {chunk}` per piece of text and per
/// finished choice, the usage chunk if asked, then `data: [DONE]`.
struct SseStream {
    head: Head,
    outputs: mpsc::UnboundedReceiver<Output>,
    guard: CancelGuard,
    pending: VecDeque<Bytes>,
    done: bool,
    prompt_tokens: usize,
    completion_tokens: usize,
    include_usage: bool,
    metrics: Arc<Metrics>,
    /// The status the metrics count when the stream is dropped: 499 until it completes.
    status: u16,
}

impl SseStream {
    fn push(&mut self, value: &serde_json::Value) {
        self.pending
            .push_back(Bytes::from(format!("data: {value}\n\n")));
    }

    fn end(&mut self) {
        self.pending
            .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
        self.done = true;
    }

    fn on_output(&mut self, output: Option<Output>) {
        let usage = self.include_usage;
        match output {
            Some(Output::Token { index, text }) => {
                self.completion_tokens += 1;
                if !text.is_empty() {
                    let chunk = self.head.chunk(index, Delta::Text(&text), usage);
                    self.push(&chunk);
                }
            }
            Some(Output::Finished {
                index,
                reason,
                text,
            }) => {
                if !text.is_empty() {
                    let chunk = self.head.chunk(index, Delta::Text(&text), usage);
                    self.push(&chunk);
                }
                let chunk = self
                    .head
                    .chunk(index, Delta::Finish(reason.openai()), usage);
                self.push(&chunk);
                self.guard.finished[index] = true;
                if self.guard.all_finished() {
                    if usage {
                        let chunk = self
                            .head
                            .usage_chunk(api::usage(self.prompt_tokens, self.completion_tokens));
                        self.push(&chunk);
                    }
                    self.status = 200;
                    self.end();
                }
            }
            Some(Output::Failed(message)) => {
                self.guard.finish_all();
                let error = ApiError::server(message);
                self.status = error.status.as_u16();
                self.push(&error.body());
                self.end();
            }
            None => {
                self.guard.finish_all();
                let error = ApiError::unavailable();
                self.status = error.status.as_u16();
                self.push(&error.body());
                self.end();
            }
        }
    }
}

impl futures_core::Stream for SseStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(bytes) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(bytes)));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.outputs.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(output) => this.on_output(output),
            }
        }
    }
}

impl Drop for SseStream {
    fn drop(&mut self) {
        self.metrics.request(self.head.endpoint.path(), self.status);
    }
}
