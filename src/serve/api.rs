//! OpenAI's request fields, read one by one so that an error names its field, and the JSON of
//! the answers and stream chunks.

use super::error::ApiError;
use crate::model::SamplingParams;
use crate::text::ChatMessage;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The two generation endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }
}

/// The fields both endpoints share.
#[derive(Clone, Debug)]
pub(crate) struct Common {
    pub model: Option<String>,
    /// `max_completion_tokens`, else `max_tokens`, with the field's name.
    pub max_tokens: Option<(usize, &'static str)>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub n: usize,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// A prompt of `/v1/completions`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

/// The largest `n`.
pub(crate) const MAX_N: usize = 128;

/// The request body as a JSON object.
pub(crate) fn parse_body(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            format!(
                "We could not parse the JSON body of your request: {e}. The body must be a JSON \
                 object."
            ),
            None,
            None,
        )
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::invalid(
            format!(
                "The request body must be a JSON object, not {}.",
                type_name(&other)
            ),
            None,
            None,
        )),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field of type `T` (`null` or absent: `None`); `expected` names the type in the error.
fn field<T: DeserializeOwned>(
    map: &Map<String, Value>,
    name: &str,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|_| ApiError::invalid_type(name, expected, format!("got {}", type_name(v)))),
    }
}

/// A number field as f32.
fn number(map: &Map<String, Value>, name: &str) -> Result<Option<f32>, ApiError> {
    field::<f64>(map, name, "a number").map(|v| v.map(|v| v as f32))
}

/// An integer field that may be negative.
fn integer(map: &Map<String, Value>, name: &str) -> Result<Option<i64>, ApiError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u as i64))
            .map(Some)
            .ok_or_else(|| ApiError::invalid_type(name, "an integer", format!("got {n}"))),
        Some(v) => Err(ApiError::invalid_type(
            name,
            "an integer",
            format!("got {}", type_name(v)),
        )),
    }
}

/// A count field: an integer >= `min`.
fn count(map: &Map<String, Value>, name: &str, min: i64) -> Result<Option<usize>, ApiError> {
    match integer(map, name)? {
        None => Ok(None),
        Some(v) if v < min => Err(ApiError::invalid_value(
            name,
            format!("Invalid '{name}': {v}; expected an integer >= {min}."),
        )),
        Some(v) => Ok(Some(v as usize)),
    }
}

/// Refuses `name` unless it is absent or equal to `neutral` (a field this server does not
/// implement).
fn refuse_unless(map: &Map<String, Value>, name: &str, neutral: &[Value]) -> Result<(), ApiError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(()),
        Some(v) if neutral.contains(v) => Ok(()),
        Some(v) => Err(ApiError::unsupported(
            name,
            format!("'{name}' is not supported by this server (got {v})."),
        )),
    }
}

/// The fields both endpoints share, checked.
pub(crate) fn parse_common(
    map: &Map<String, Value>,
    endpoint: Endpoint,
) -> Result<Common, ApiError> {
    let model = field::<String>(map, "model", "a string")?;
    let max_tokens = count(map, "max_tokens", 1)?;
    let max_completion_tokens = count(map, "max_completion_tokens", 1)?;
    let defaults = SamplingParams::default();
    let mut sampling = SamplingParams {
        temperature: number(map, "temperature")?.unwrap_or(defaults.temperature),
        top_p: number(map, "top_p")?.unwrap_or(defaults.top_p),
        min_p: number(map, "min_p")?.unwrap_or(defaults.min_p),
        repetition_penalty: number(map, "repetition_penalty")?
            .unwrap_or(defaults.repetition_penalty),
        ..defaults
    };
    // vLLM's convention: -1 (or 0) is off.
    sampling.top_k = match integer(map, "top_k")? {
        None | Some(-1) | Some(0) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid_value(
                "top_k",
                format!("Invalid 'top_k': {k}; expected an integer >= 1, or 0 or -1 for off."),
            ));
        }
    };
    sampling.seed = integer(map, "seed")?.map(|s| s as u64);
    if let Err(crate::model::SamplingError::Invalid {
        field,
        value,
        expected,
    }) = sampling.validate()
    {
        return Err(ApiError::invalid_value(
            field,
            format!("Invalid '{field}': {value}; expected {expected}."),
        ));
    }
    let stop = match map.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(v @ Value::Array(_)) => {
            serde_json::from_value::<Vec<String>>(v.clone()).map_err(|_| {
                ApiError::invalid_type(
                    "stop",
                    "a string or an array of strings",
                    "got another array",
                )
            })?
        }
        Some(v) => {
            return Err(ApiError::invalid_type(
                "stop",
                "a string or an array of strings",
                format!("got {}", type_name(v)),
            ));
        }
    };
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid_value(
            "stop",
            "Invalid 'stop': a stop string must not be empty.",
        ));
    }
    let n = count(map, "n", 1)?.unwrap_or(1);
    if n > MAX_N {
        return Err(ApiError::invalid_value(
            "n",
            format!("Invalid 'n': {n}; expected at most {MAX_N}."),
        ));
    }
    let stream = field::<bool>(map, "stream", "a boolean")?.unwrap_or(false);
    let include_usage = match map.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => field::<bool>(o, "include_usage", "a boolean")
            .map_err(|mut e| {
                e.param = Some("stream_options.include_usage".into());
                e
            })?
            .unwrap_or(false),
        Some(v) => {
            return Err(ApiError::invalid_type(
                "stream_options",
                "an object",
                format!("got {}", type_name(v)),
            ));
        }
    };
    // Per-token log probabilities would read every step's logits back from the device.
    let no_logprobs = "Log probabilities are not supported by this server.";
    match endpoint {
        Endpoint::Chat => {
            if field::<bool>(map, "logprobs", "a boolean")?.unwrap_or(false) {
                return Err(ApiError::unsupported("logprobs", no_logprobs));
            }
            if integer(map, "top_logprobs")?.is_some() {
                return Err(ApiError::unsupported("top_logprobs", no_logprobs));
            }
            refuse_unless(map, "tools", &[json!([])])?;
            refuse_unless(map, "response_format", &[json!({"type": "text"})])?;
        }
        Endpoint::Completions => {
            if integer(map, "logprobs")?.is_some() {
                return Err(ApiError::unsupported("logprobs", no_logprobs));
            }
            refuse_unless(map, "echo", &[json!(false)])?;
            refuse_unless(map, "suffix", &[json!("")])?;
            refuse_unless(map, "best_of", &[json!(1), json!(n)])?;
        }
    }
    refuse_unless(map, "frequency_penalty", &[json!(0), json!(0.0)])?;
    refuse_unless(map, "presence_penalty", &[json!(0), json!(0.0)])?;
    refuse_unless(map, "logit_bias", &[json!({})])?;
    Ok(Common {
        model,
        max_tokens: max_completion_tokens
            .map(|m| (m, "max_completion_tokens"))
            .or(max_tokens.map(|m| (m, "max_tokens"))),
        sampling,
        stop,
        n,
        stream,
        include_usage,
    })
}

/// `messages` of a chat request: each `{"role", "content"}` with content a string, an array of
/// `{"type": "text", "text"}` parts, or null.
pub(crate) fn parse_messages(map: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match map.get("messages") {
        None | Some(Value::Null) => return Err(ApiError::missing("messages")),
        Some(Value::Array(list)) => list,
        Some(v) => {
            return Err(ApiError::invalid_type(
                "messages",
                "an array",
                format!("got {}", type_name(v)),
            ));
        }
    };
    if list.is_empty() {
        return Err(ApiError::invalid_value(
            "messages",
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let param = format!("messages[{i}]");
            let Value::Object(m) = m else {
                return Err(ApiError::invalid_type(
                    &param,
                    "an object",
                    format!("got {}", type_name(m)),
                ));
            };
            let role = match m.get("role") {
                Some(Value::String(role)) => role.clone(),
                None | Some(Value::Null) => {
                    return Err(ApiError::missing(&format!("{param}.role")));
                }
                Some(v) => {
                    return Err(ApiError::invalid_type(
                        &format!("{param}.role"),
                        "a string",
                        format!("got {}", type_name(v)),
                    ));
                }
            };
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut text = String::new();
                    for (j, part) in parts.iter().enumerate() {
                        match (part.get("type"), part.get("text")) {
                            (Some(Value::String(t)), Some(Value::String(s))) if t == "text" => {
                                text.push_str(s)
                            }
                            _ => {
                                return Err(ApiError::unsupported(
                                    &format!("{param}.content[{j}]"),
                                    "Only text content parts ({\"type\": \"text\", \"text\": \
                                     ...}) are supported by this server.",
                                ));
                            }
                        }
                    }
                    text
                }
                Some(v) => {
                    return Err(ApiError::invalid_type(
                        &format!("{param}.content"),
                        "a string or an array of content parts",
                        format!("got {}", type_name(v)),
                    ));
                }
            };
            Ok(ChatMessage { role, content })
        })
        .collect()
}

/// `prompt` of a completions request: a string, an array of token ids, an array of strings or
/// an array of arrays of token ids (one choice set per prompt).
pub(crate) fn parse_prompts(map: &Map<String, Value>) -> Result<Vec<Prompt>, ApiError> {
    let expected = "a string, an array of token ids, an array of strings or an array of arrays \
                    of token ids";
    let wrong =
        |v: &Value| ApiError::invalid_type("prompt", expected, format!("got {}", type_name(v)));
    let ids = |list: &[Value]| -> Option<Vec<u32>> {
        list.iter()
            .map(|x| x.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    };
    let prompts = match map.get("prompt") {
        None | Some(Value::Null) => return Err(ApiError::missing("prompt")),
        Some(Value::String(s)) => vec![Prompt::Text(s.clone())],
        Some(Value::Array(list)) if list.is_empty() => Vec::new(),
        Some(Value::Array(list)) => match &list[0] {
            Value::Number(_) => vec![Prompt::Ids(ids(list).ok_or_else(|| {
                ApiError::invalid_type("prompt", "token ids (integers >= 0)", "got another value")
            })?)],
            Value::String(_) => list
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(Prompt::Text(s.clone())),
                    v => Err(wrong(v)),
                })
                .collect::<Result<_, _>>()?,
            Value::Array(_) => list
                .iter()
                .map(|v| match v {
                    Value::Array(l) => ids(l).map(Prompt::Ids).ok_or_else(|| {
                        ApiError::invalid_type(
                            "prompt",
                            "token ids (integers >= 0)",
                            "got another value",
                        )
                    }),
                    v => Err(wrong(v)),
                })
                .collect::<Result<_, _>>()?,
            v => return Err(wrong(v)),
        },
        Some(v) => return Err(wrong(v)),
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid_value(
            "prompt",
            "Invalid 'prompt': it must not be empty.",
        ));
    }
    Ok(prompts)
}

/// `usage` of an answer.
pub(crate) fn usage(prompt_tokens: usize, completion_tokens: usize) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// The identity of one answer: its id, creation time and model.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub endpoint: Endpoint,
}

impl Head {
    /// A whole answer of `choices` (each `(text, finish_reason)`).
    pub fn answer(&self, choices: &[(String, Option<&str>)], usage: Value) -> Value {
        let choices: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(index, (text, reason))| match self.endpoint {
                Endpoint::Chat => json!({
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": null,
                    "finish_reason": reason,
                }),
                Endpoint::Completions => json!({
                    "index": index,
                    "text": text,
                    "logprobs": null,
                    "finish_reason": reason,
                }),
            })
            .collect();
        json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion",
                Endpoint::Completions => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage,
        })
    }

    /// A stream chunk of one choice: its role (chat, first), new text, or its finish reason.
    pub fn chunk(&self, index: usize, delta: Delta<'_>, include_usage: bool) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let (delta, reason) = match delta {
                    Delta::Role => (json!({"role": "assistant", "content": ""}), None),
                    Delta::Text(text) => (json!({"content": text}), None),
                    Delta::Finish(reason) => (json!({}), reason),
                };
                json!({"index": index, "delta": delta, "logprobs": null, "finish_reason": reason})
            }
            Endpoint::Completions => {
                let (text, reason) = match delta {
                    Delta::Role => ("", None),
                    Delta::Text(text) => (text, None),
                    Delta::Finish(reason) => ("", reason),
                };
                json!({"index": index, "text": text, "logprobs": null, "finish_reason": reason})
            }
        };
        let mut chunk = self.chunk_head(vec![choice]);
        if include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The last chunk of a stream with `stream_options.include_usage`: no choices, the usage.
    pub fn usage_chunk(&self, usage: Value) -> Value {
        let mut chunk = self.chunk_head(Vec::new());
        chunk["usage"] = usage;
        chunk
    }

    fn chunk_head(&self, choices: Vec<Value>) -> Value {
        json!({
            "id": self.id,
            "object": match self.endpoint {
                Endpoint::Chat => "chat.completion.chunk",
                Endpoint::Completions => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }
}

/// What a stream chunk carries for its choice.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Delta<'a> {
    /// Chat's first chunk: `{"role": "assistant", "content": ""}`.
    Role,
    Text(&'a str),
    Finish(Option<&'a str>),
}
