//! The engine thread: it owns the decoder and the [`Engine`], takes submissions and
//! cancellations from a channel, steps while anything waits or runs, and routes each event to
//! its request's channel; it blocks on the channel when idle.

use super::error::ApiError;
use super::metrics::{Metrics, Occupancy};
use crate::model::{
    Engine, EngineOptions, Event, FinishReason, GenerateError, GenerationRequest, Model, RequestId,
};
use crate::text::Tokenizer;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// What a request's channel carries; `index` is the choice.
#[derive(Debug)]
pub(crate) enum Output {
    /// A generated token and the text it completes (possibly empty).
    Token { index: usize, text: String },
    /// The choice finished (never `Cancelled`: a cancelled request's channel is gone).
    Finished {
        index: usize,
        reason: FinishReason,
        text: String,
    },
    /// The model failed; every choice of the request is over.
    Failed(String),
}

/// The submitted choices of one HTTP request: their ids (choice order) and one channel.
pub(crate) struct Submitted {
    pub ids: Vec<RequestId>,
    pub outputs: mpsc::UnboundedReceiver<Output>,
}

/// A message to the engine thread.
pub(crate) enum Command {
    /// Queue the choices of one HTTP request, all or none.
    Submit {
        requests: Vec<GenerationRequest>,
        arrived: Instant,
        reply: oneshot::Sender<Result<Submitted, ApiError>>,
    },
    /// Cancel requests (their client left): waiting ones leave the queue, running ones free
    /// their rows.
    Cancel(Vec<RequestId>),
    /// Stop once idle.
    Shutdown,
}

/// Where a request's events go.
struct Route {
    tx: mpsc::UnboundedSender<Output>,
    index: usize,
    arrived: Instant,
    last_token: Option<Instant>,
}

/// What the HTTP side needs to know of the engine.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EngineInfo {
    pub context: Option<usize>,
    pub pool_rows: usize,
    pub vocab_size: usize,
}

/// Settings of the engine thread.
pub(crate) struct WorkerOptions {
    pub engine: EngineOptions,
    pub max_queue: usize,
}

/// Runs the engine thread's loop: builds the engine (its result goes to `ready`), then serves
/// `commands` until [`Command::Shutdown`] (once idle) or until every sender is gone.
pub(crate) fn run<M: Model>(
    decoder: M,
    tokenizer: Arc<Tokenizer>,
    options: WorkerOptions,
    metrics: Arc<Metrics>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    ready: std::sync::mpsc::Sender<Result<EngineInfo, GenerateError>>,
) {
    let engine = match Engine::new(&decoder, Some(&tokenizer), options.engine) {
        Ok(engine) => engine,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let info = EngineInfo {
        context: engine.context(),
        pool_rows: engine.pool_rows(),
        vocab_size: decoder.config().vocab_size,
    };
    if ready.send(Ok(info)).is_err() {
        return;
    }
    let mut worker = Worker {
        engine,
        routes: HashMap::new(),
        max_queue: options.max_queue,
        metrics,
        shutdown: false,
    };
    loop {
        if worker.engine.is_idle() {
            if worker.shutdown {
                break;
            }
            match commands.blocking_recv() {
                Some(command) => worker.handle(command),
                None => break,
            }
        }
        while let Ok(command) = commands.try_recv() {
            worker.handle(command);
        }
        worker.publish();
        if !worker.engine.is_idle() {
            worker.step();
        }
    }
}

struct Worker<'a, M: Model> {
    engine: Engine<'a, M>,
    routes: HashMap<RequestId, Route>,
    max_queue: usize,
    metrics: Arc<Metrics>,
    shutdown: bool,
}

impl<M: Model> Worker<'_, M> {
    /// The engine's occupancy into the metrics (before a step's events go out, so that a
    /// client that got its answer sees the rows it held freed).
    fn publish(&self) {
        self.metrics.occupancy(Occupancy {
            waiting: self.engine.waiting(),
            running: self.engine.running(),
            rows_in_use: self.engine.rows_in_use(),
        });
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Submit {
                requests,
                arrived,
                reply,
            } => {
                let submitted = self.submit(requests, arrived);
                if let Err(Ok(submitted)) = reply.send(submitted) {
                    // The client left while the request was being queued.
                    self.cancel(&submitted.ids);
                }
            }
            Command::Cancel(ids) => self.cancel(&ids),
            Command::Shutdown => self.shutdown = true,
        }
    }

    fn submit(
        &mut self,
        requests: Vec<GenerationRequest>,
        arrived: Instant,
    ) -> Result<Submitted, ApiError> {
        if self.shutdown {
            return Err(ApiError::unavailable());
        }
        if self.engine.waiting() + requests.len() > self.max_queue {
            return Err(ApiError::queue_full(self.max_queue));
        }
        let mut ids = Vec::with_capacity(requests.len());
        for request in requests {
            match self.engine.submit(request) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for &id in &ids {
                        self.engine.cancel(id);
                    }
                    return Err(refusal(e));
                }
            }
        }
        let (tx, outputs) = mpsc::unbounded_channel();
        for (index, &id) in ids.iter().enumerate() {
            self.routes.insert(
                id,
                Route {
                    tx: tx.clone(),
                    index,
                    arrived,
                    last_token: None,
                },
            );
        }
        Ok(Submitted { ids, outputs })
    }

    fn cancel(&mut self, ids: &[RequestId]) {
        for id in ids {
            if self.routes.remove(id).is_some() {
                self.engine.cancel(*id);
            }
        }
    }

    /// One engine step; its events go to their requests. A failed step fails every request.
    fn step(&mut self) {
        let events = match self.engine.step() {
            Ok(events) => events,
            Err(e) => {
                let message = format!("the model failed: {e}");
                for (id, route) in std::mem::take(&mut self.routes) {
                    self.engine.cancel(id);
                    let _ = route.tx.send(Output::Failed(message.clone()));
                }
                self.publish();
                return;
            }
        };
        self.publish();
        let now = Instant::now();
        let mut gone = Vec::new();
        for event in events {
            match event {
                Event::Token { id, text, .. } => {
                    let Some(route) = self.routes.get_mut(&id) else {
                        continue;
                    };
                    let latency = now - route.last_token.unwrap_or(route.arrived);
                    self.metrics.token(route.last_token.is_none(), latency);
                    route.last_token = Some(now);
                    let output = Output::Token {
                        index: route.index,
                        text,
                    };
                    if route.tx.send(output).is_err() {
                        gone.push(id);
                    }
                }
                Event::Finished { id, reason, text } => {
                    if let Some(route) = self.routes.remove(&id) {
                        let _ = route.tx.send(Output::Finished {
                            index: route.index,
                            reason,
                            text,
                        });
                    }
                }
            }
        }
        // Requests whose client is gone (their receiver dropped): free their rows now.
        if !gone.is_empty() {
            self.cancel(&gone);
            self.publish();
        }
    }
}

/// The engine's refusal of a request, as the API reports it (the HTTP side checks most of
/// these first, with the field named).
fn refusal(e: GenerateError) -> ApiError {
    match e {
        GenerateError::Sampling(e) => ApiError::invalid(e.to_string(), None, Some("invalid_value")),
        GenerateError::EmptyStopString => {
            ApiError::invalid_value("stop", "A stop string must not be empty.")
        }
        GenerateError::PromptPastContext { .. } | GenerateError::TooLong { .. } => {
            ApiError::invalid(e.to_string(), None, Some("context_length_exceeded"))
        }
        GenerateError::EmptyPrompt(_) | GenerateError::Decoder(_) => {
            ApiError::invalid(e.to_string(), None, Some("invalid_value"))
        }
        e => ApiError::server(e.to_string()),
    }
}
