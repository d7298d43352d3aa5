//! The OpenAI-compatible server, in process on 127.0.0.1 (`llama31_tiny` with the
//! `llama3_style` tokenizer on Flex), driven by a plain HTTP/1.1 client over `TcpStream`:
//! greedy chats equal to transformers' (`tests/text/chat_generate.json`) whole and streamed,
//! completions from text and ids, `n` with seeds, every error's status and JSON, the API key,
//! 429 past the queue, a disconnect that frees the request's rows, the context limit, metrics
//! and a graceful shutdown.

use crate::http::{
    Reply, get, metric, post, read_chunk, read_head, request, root, send, server, tiny_model,
    wait_for,
};
use burn::tensor::Device;
use burn_rope_pool::serve::{ServeOptions, ServedDecoder, Server};
use serde_json::{Value, json};
use std::io::BufReader;
use std::net::{SocketAddr, TcpStream};

fn reference() -> Value {
    let text = std::fs::read_to_string(root().join("tests/text/chat_generate.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The `data:` payloads of an event stream.
fn events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("{e:?}"))
                .to_string()
        })
        .collect()
}

fn chat_body(messages: &Value, extra: Value) -> Value {
    let mut body =
        json!({"model": "llama31_tiny", "messages": messages, "max_tokens": 10, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The concatenated text, finish reasons and usage of a streamed answer.
fn streamed(reply: &Reply, chat: bool) -> (Vec<String>, Vec<Value>, Option<Value>) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let events = events(&reply.body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut texts: Vec<String> = Vec::new();
    let mut reasons: Vec<Value> = Vec::new();
    let mut usage = None;
    for (i, event) in events[..events.len() - 1].iter().enumerate() {
        let chunk: Value = serde_json::from_str(event).unwrap();
        let object = if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        assert_eq!(chunk["object"], object);
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            assert_eq!(chunk["choices"], json!([]));
            usage = Some(u.clone());
            continue;
        }
        for choice in chunk["choices"].as_array().unwrap() {
            let index = choice["index"].as_u64().unwrap() as usize;
            if texts.len() <= index {
                texts.resize(index + 1, String::new());
                reasons.resize(index + 1, Value::Null);
            }
            assert!(reasons[index].is_null(), "a chunk after the finish reason");
            let text = match chat {
                true => {
                    let delta = &choice["delta"];
                    if i == index {
                        // Chat streams open with the role of each choice.
                        assert_eq!(delta["role"], "assistant", "{event}");
                    }
                    delta["content"].as_str().unwrap_or("")
                }
                false => choice["text"].as_str().unwrap(),
            };
            texts[index].push_str(text);
            reasons[index] = choice["finish_reason"].clone();
        }
    }
    (texts, reasons, usage)
}

#[test]
fn chats_equal_transformers_whole_and_streamed() {
    let server = server(ServeOptions::default());
    let addr = server.addr();
    let reference = reference();
    for (i, chat) in reference["generations"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let text = chat["text"].as_str().unwrap();
        // transformers' prompt ids, less the padding id 0 (`<|begin_of_text|>` here).
        let prompt_tokens = chat["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|&t| t != 0)
            .count();
        let reply = post(
            addr,
            "/v1/chat/completions",
            &chat_body(&chat["messages"], json!({})),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(reply.header("content-type"), Some("application/json"));
        let answer = reply.json();
        assert_eq!(answer["object"], "chat.completion");
        assert_eq!(answer["model"], "llama31_tiny");
        assert!(answer["id"].as_str().unwrap().starts_with("chatcmpl-"));
        let choice = &answer["choices"][0];
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], text, "chat {i}");
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(
            answer["usage"],
            json!({"prompt_tokens": prompt_tokens, "completion_tokens": 10,
                   "total_tokens": prompt_tokens + 10})
        );
        let body = chat_body(
            &chat["messages"],
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        );
        let (texts, reasons, usage) = streamed(&post(addr, "/v1/chat/completions", &body), true);
        assert_eq!(texts, [text], "chat {i} streamed");
        assert_eq!(reasons, [json!("length")]);
        assert_eq!(usage, Some(answer["usage"].clone()));
        // The same prompt as ids through /v1/completions (its padding id is taken out too).
        let body = json!({"prompt": chat["prompt_ids"], "max_tokens": 10, "temperature": 0});
        let answer = post(addr, "/v1/completions", &body).json();
        assert_eq!(answer["object"], "text_completion");
        assert_eq!(answer["choices"][0]["text"], text, "chat {i} as ids");
        let body = json!({"prompt": chat["prompt_ids"], "max_completion_tokens": 10,
                          "temperature": 0, "stream": true});
        let (texts, reasons, usage) = streamed(&post(addr, "/v1/completions", &body), false);
        assert_eq!(
            (texts, reasons, usage),
            (vec![text.to_string()], vec![json!("length")], None)
        );
    }
    assert_eq!(metric(addr, "burn_rope_pool_pool_rows_in_use"), 0.0);
    assert_eq!(
        metric(addr, "burn_rope_pool_generation_tokens_total"),
        120.0
    );
    assert_eq!(
        metric(
            addr,
            "burn_rope_pool_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"}"
        ),
        6.0
    );
    assert_eq!(
        metric(addr, "burn_rope_pool_time_to_first_token_seconds_count"),
        12.0
    );
    assert_eq!(
        metric(addr, "burn_rope_pool_inter_token_latency_seconds_count"),
        108.0
    );
    server.shutdown().unwrap();
}

/// The tiny model split over two ranks (in-process sums, on Flex) serves transformers' chats;
/// a model split already is not split again.
#[test]
fn a_sharded_model_serves_the_same_chats() {
    use burn_rope_pool::model::InProcess;
    let model = tiny_model();
    let flex = Device::flex();
    let model = model
        .shard(&[flex.clone(), flex.clone()], Box::new(InProcess))
        .unwrap();
    assert!(matches!(model.decoder, ServedDecoder::Sharded(_)));
    let server = Server::start(
        model,
        ServeOptions {
            port: 0,
            ..ServeOptions::default()
        },
    )
    .unwrap();
    let reference = reference();
    for (i, chat) in reference["generations"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let reply = post(
            server.addr(),
            "/v1/chat/completions",
            &chat_body(&chat["messages"], json!({})),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        let answer = reply.json();
        assert_eq!(
            answer["choices"][0]["message"]["content"], chat["text"],
            "chat {i}"
        );
    }
    server.shutdown().unwrap();
    let twice = tiny_model()
        .shard(std::slice::from_ref(&flex), Box::new(InProcess))
        .unwrap()
        .shard(&[flex], Box::new(InProcess));
    assert_eq!(
        twice.err().map(|e| e.to_string()).as_deref(),
        Some("cannot load the model: the model is split already")
    );
}

#[test]
fn completions_sample_with_seeds_and_stop() {
    let server = server(ServeOptions::default());
    let addr = server.addr();
    // n = 2 with seed s: the choices are seeds s and s + 1, repeatable.
    let body = json!({"prompt": "Hello world", "max_tokens": 12, "temperature": 1.0, "top_k": 50,
                      "seed": 7, "n": 2});
    let answer = post(addr, "/v1/completions", &body).json();
    let texts: Vec<&str> = (0..2)
        .map(|i| answer["choices"][i]["text"].as_str().unwrap())
        .collect();
    assert_eq!(answer["usage"]["completion_tokens"], 24);
    let again = post(addr, "/v1/completions", &body).json();
    assert_eq!(again["choices"], answer["choices"]);
    let one = |seed: u64| {
        let body = json!({"prompt": "Hello world", "max_tokens": 12, "temperature": 1.0,
                          "top_k": 50, "seed": seed});
        post(addr, "/v1/completions", &body).json()["choices"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(one(7), texts[0]);
    assert_eq!(one(8), texts[1]);
    // Streamed, the two choices interleave and each adds up to its whole text.
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let (streamed_texts, reasons, _) = streamed(&post(addr, "/v1/completions", &streaming), false);
    assert_eq!(streamed_texts, texts);
    assert_eq!(reasons, [json!("length"), json!("length")]);
    // A stop string: the text is cut before it, finish_reason `stop`.
    let greedy = json!({"prompt": "Hello world", "max_tokens": 12, "temperature": 0});
    let free = post(addr, "/v1/completions", &greedy).json()["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let chars: Vec<char> = free.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let mut body = greedy.clone();
    body["stop"] = json!([stop.clone(), "never in the text"]);
    let answer = post(addr, "/v1/completions", &body).json();
    assert_eq!(
        answer["choices"][0]["text"],
        free[..free.find(&stop).unwrap()]
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    // Several prompts: choices in prompt order.
    let body =
        json!({"prompt": ["Hello world", "Hello world"], "max_tokens": 12, "temperature": 0});
    let answer = post(addr, "/v1/completions", &body).json();
    assert_eq!(answer["choices"][0]["text"], free);
    assert_eq!(answer["choices"][1]["text"], free);
    assert_eq!(answer["choices"][1]["index"], 1);
    // Without max_tokens a completion makes 16 tokens.
    let body = json!({"prompt": "Hello world", "temperature": 0});
    assert_eq!(
        post(addr, "/v1/completions", &body).json()["usage"]["completion_tokens"],
        16
    );
    server.shutdown().unwrap();
}

#[test]
fn context_limit_stops_with_length() {
    // The model with a 64-token context (its config says 4096: a prompt that long takes minutes
    // on Flex in a debug build).
    let mut model = tiny_model();
    match &mut model.decoder {
        ServedDecoder::Whole(decoder) => decoder.config.max_position_embeddings = Some(64),
        ServedDecoder::Sharded(_) => unreachable!("loaded whole"),
    }
    let options = ServeOptions {
        port: 0,
        ..ServeOptions::default()
    };
    let server = Server::start(model, options).unwrap();
    let addr = server.addr();
    let prompt: Vec<u32> = (0..58).map(|i| 3 + (i * 7) % 300).collect();
    // A 58-token prompt has room for 6 tokens, whatever max_tokens says.
    let body = json!({"prompt": prompt, "max_tokens": 100, "temperature": 0});
    let answer = post(addr, "/v1/completions", &body).json();
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["completion_tokens"], 6);
    let body = json!({"prompt": prompt, "max_tokens": 100, "temperature": 0, "stream": true});
    let (texts, reasons, _) = streamed(&post(addr, "/v1/completions", &body), false);
    assert_eq!(texts[0], answer["choices"][0]["text"].as_str().unwrap());
    assert_eq!(reasons, [json!("length")]);
    // A chat without max_tokens runs to the context.
    let body = json!({"messages": [{"role": "user", "content": "Hi there!"}], "temperature": 0});
    let answer = post(addr, "/v1/chat/completions", &body).json();
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["total_tokens"], 64);
    // A prompt that fills the context is refused.
    let body = json!({"prompt": vec![5; 64]});
    let reply = post(addr, "/v1/completions", &body);
    check_error(
        &reply,
        400,
        "invalid_request_error",
        Some("prompt"),
        Some("context_length_exceeded"),
    );
    server.shutdown().unwrap();
}

/// Checks an error answer: status and `{"error": {"message", "type", "param", "code"}}`.
fn check_error(reply: &Reply, status: u16, kind: &str, param: Option<&str>, code: Option<&str>) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let body = reply.json();
    let error = &body["error"];
    assert_eq!(
        error.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["code", "message", "param", "type"],
        "{body}"
    );
    assert!(!error["message"].as_str().unwrap().is_empty());
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(error["param"], json!(param), "{body}");
    assert_eq!(error["code"], json!(code), "{body}");
}

#[test]
fn errors_as_openai_returns_them() {
    let server = server(ServeOptions {
        pool_rows: 512,
        ..ServeOptions::default()
    });
    let addr = server.addr();
    let chat = "/v1/chat/completions";
    let user = json!([{"role": "user", "content": "Hi"}]);
    let invalid = "invalid_request_error";
    // Malformed JSON, a body that is no object.
    let reply = request(addr, "POST", chat, &[], "{\"messages\": [");
    check_error(&reply, 400, invalid, None, None);
    let reply = request(addr, "POST", chat, &[], "[1, 2]");
    check_error(&reply, 400, invalid, None, None);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        // Wrong types.
        (
            chat,
            json!({"messages": user, "temperature": "hot"}),
            "temperature",
            "invalid_type",
        ),
        (chat, json!({"messages": "Hi"}), "messages", "invalid_type"),
        (
            chat,
            json!({"messages": user, "max_tokens": 1.5}),
            "max_tokens",
            "invalid_type",
        ),
        (
            chat,
            json!({"messages": user, "stream": "yes"}),
            "stream",
            "invalid_type",
        ),
        (
            chat,
            json!({"messages": user, "stop": 3}),
            "stop",
            "invalid_type",
        ),
        (
            chat,
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
            "invalid_type",
        ),
        (
            "/v1/completions",
            json!({"prompt": {"text": "Hi"}}),
            "prompt",
            "invalid_type",
        ),
        (
            "/v1/completions",
            json!({"prompt": [1, -2]}),
            "prompt",
            "invalid_type",
        ),
        // Missing fields.
        (chat, json!({}), "messages", "missing_required_parameter"),
        (
            "/v1/completions",
            json!({"max_tokens": 3}),
            "prompt",
            "missing_required_parameter",
        ),
        (
            chat,
            json!({"messages": [{"content": "Hi"}]}),
            "messages[0].role",
            "missing_required_parameter",
        ),
        // Invalid values.
        (
            chat,
            json!({"messages": user, "temperature": -1}),
            "temperature",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "top_p": 2}),
            "top_p",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "min_p": 1.5}),
            "min_p",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "repetition_penalty": 0}),
            "repetition_penalty",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "top_k": -3}),
            "top_k",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "max_tokens": 0}),
            "max_tokens",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "n": 0}),
            "n",
            "invalid_value",
        ),
        (
            chat,
            json!({"messages": user, "stop": ["ok", ""]}),
            "stop",
            "invalid_value",
        ),
        (chat, json!({"messages": []}), "messages", "invalid_value"),
        (
            "/v1/completions",
            json!({"prompt": [1, 5000]}),
            "prompt",
            "invalid_value",
        ),
        (
            "/v1/completions",
            json!({"prompt": []}),
            "prompt",
            "invalid_value",
        ),
        // Unknown model.
        (
            chat,
            json!({"messages": user, "model": "gpt-4o"}),
            "model",
            "model_not_found",
        ),
        // Past the pool (512 rows): the prompt, or the prompt with max_tokens.
        (
            "/v1/completions",
            json!({"prompt": vec![5; 600]}),
            "prompt",
            "context_length_exceeded",
        ),
        (
            chat,
            json!({"messages": user, "max_tokens": 1000}),
            "max_tokens",
            "context_length_exceeded",
        ),
        (
            chat,
            json!({"messages": user, "max_completion_tokens": 1000}),
            "max_completion_tokens",
            "context_length_exceeded",
        ),
        // Not supported.
        (
            chat,
            json!({"messages": user, "logprobs": true}),
            "logprobs",
            "unsupported_parameter",
        ),
        (
            chat,
            json!({"messages": user, "top_logprobs": 2}),
            "top_logprobs",
            "unsupported_parameter",
        ),
        (
            "/v1/completions",
            json!({"prompt": "Hi", "logprobs": 1}),
            "logprobs",
            "unsupported_parameter",
        ),
        (
            "/v1/completions",
            json!({"prompt": "Hi", "echo": true}),
            "echo",
            "unsupported_parameter",
        ),
        (
            chat,
            json!({"messages": user, "presence_penalty": 0.5}),
            "presence_penalty",
            "unsupported_parameter",
        ),
        (
            chat,
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages[0].content[0]",
            "unsupported_parameter",
        ),
    ];
    for (path, body, param, code) in &cases {
        let reply = post(addr, path, body);
        check_error(&reply, 400, invalid, Some(param), Some(code));
    }
    // Neutral values of unsupported fields are accepted.
    let body = json!({"messages": user, "max_tokens": 2, "frequency_penalty": 0, "logprobs": false,
                      "user": "me", "logit_bias": {}});
    assert_eq!(post(addr, chat, &body).status, 200);
    // Routes.
    check_error(
        &get(addr, "/v1/nothing"),
        404,
        invalid,
        None,
        Some("unknown_url"),
    );
    check_error(
        &post(addr, "/v1/models", &json!({})),
        405,
        invalid,
        None,
        Some("method_not_allowed"),
    );
    check_error(
        &get(addr, "/v1/models/other"),
        404,
        invalid,
        Some("model"),
        Some("model_not_found"),
    );
    assert_eq!(
        get(addr, "/v1/models/llama31_tiny").json()["id"],
        "llama31_tiny"
    );
    let models = get(addr, "/v1/models").json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "llama31_tiny");
    assert_eq!(get(addr, "/health").status, 200);
    // Nothing was queued; the errors are counted.
    assert_eq!(metric(addr, "burn_rope_pool_queue_length"), 0.0);
    let errors = metric(
        addr,
        "burn_rope_pool_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}",
    );
    assert!(errors >= 20.0, "{errors}");
    server.shutdown().unwrap();
}

#[test]
fn api_key() {
    let server = server(ServeOptions {
        api_key: Some("sk-test".into()),
        default_max_tokens: Some(3),
        ..ServeOptions::default()
    });
    let addr = server.addr();
    let body =
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).to_string();
    let path = "/v1/chat/completions";
    let invalid = "invalid_request_error";
    let reply = request(addr, "POST", path, &[], &body);
    check_error(&reply, 401, invalid, None, Some("invalid_api_key"));
    let reply = request(
        addr,
        "POST",
        path,
        &[("Authorization", "Bearer sk-wrong")],
        &body,
    );
    check_error(&reply, 401, invalid, None, Some("invalid_api_key"));
    let reply = request(addr, "GET", "/v1/models", &[], "");
    check_error(&reply, 401, invalid, None, Some("invalid_api_key"));
    let reply = request(
        addr,
        "POST",
        path,
        &[("Authorization", "Bearer sk-test")],
        &body,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(get(addr, "/health").status, 200);
    assert_eq!(get(addr, "/metrics").status, 200);
    // The server's default max_tokens for a request that gives none.
    let body = json!({"messages": [{"role": "user", "content": "Hi there!"}], "temperature": 0});
    let reply = request(
        addr,
        "POST",
        path,
        &[("Authorization", "Bearer sk-test")],
        &body.to_string(),
    );
    assert_eq!(reply.json()["usage"]["completion_tokens"], 3);
    server.shutdown().unwrap();
}

/// Starts a long greedy stream and reads until its first text; the connection is the request.
fn start_stream(addr: SocketAddr) -> BufReader<TcpStream> {
    let body = json!({"messages": [{"role": "user", "content": "Hi there!"}], "max_tokens": 4000,
                      "temperature": 0, "stream": true});
    let mut reader = BufReader::new(
        send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            body.to_string().as_bytes(),
        )
        .unwrap(),
    );
    let (status, _) = read_head(&mut reader).unwrap();
    assert_eq!(status, 200);
    let mut seen = String::new();
    while !seen.contains("\"content\":\" k\"") {
        seen.push_str(&String::from_utf8(read_chunk(&mut reader).unwrap().unwrap()).unwrap());
    }
    reader
}

#[test]
fn queue_full_and_disconnect() {
    let server = server(ServeOptions {
        max_batch: 1,
        max_queue: 1,
        ..ServeOptions::default()
    });
    let addr = server.addr();
    let running = start_stream(addr);
    assert!(metric(addr, "burn_rope_pool_pool_rows_in_use") > 0.0);
    assert_eq!(metric(addr, "burn_rope_pool_running_requests"), 1.0);
    // A second request waits for the batch's one place; a third finds the queue full.
    let waiting = std::thread::spawn(move || {
        let body = json!({"prompt": "Hello", "max_tokens": 3, "temperature": 0});
        post(addr, "/v1/completions", &body)
    });
    wait_for(addr, "burn_rope_pool_queue_length", 1.0);
    let body = json!({"prompt": "Hello", "max_tokens": 3});
    let reply = post(addr, "/v1/completions", &body);
    check_error(&reply, 429, "requests", None, Some("rate_limit_exceeded"));
    // The streaming client leaves: its request is cancelled, its rows freed, and the waiting
    // one runs.
    drop(running);
    let reply = waiting.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["usage"]["completion_tokens"], 3);
    wait_for(addr, "burn_rope_pool_pool_rows_in_use", 0.0);
    let cancelled =
        "burn_rope_pool_requests_total{endpoint=\"/v1/chat/completions\",status=\"499\"}";
    wait_for(addr, cancelled, 1.0);
    // A client that leaves a whole (non-streamed) answer early cancels it too.
    let body = json!({"prompt": "Hello", "max_tokens": 4000, "temperature": 0});
    let stream = send(
        addr,
        "POST",
        "/v1/completions",
        &[],
        body.to_string().as_bytes(),
    )
    .unwrap();
    wait_for(addr, "burn_rope_pool_running_requests", 1.0);
    drop(stream);
    wait_for(addr, "burn_rope_pool_running_requests", 0.0);
    assert_eq!(metric(addr, "burn_rope_pool_pool_rows_in_use"), 0.0);
    let left = "burn_rope_pool_requests_total{endpoint=\"/v1/completions\",status=\"499\"}";
    wait_for(addr, left, 1.0);
    assert!(metric(addr, "burn_rope_pool_generation_tokens_total") < 4000.0);
    server.shutdown().unwrap();
}

#[test]
fn graceful_shutdown_finishes_streams() {
    let server = server(ServeOptions::default());
    let addr = server.addr();
    let body = json!({"messages": [{"role": "user", "content": "Hi there!"}], "max_tokens": 200,
                      "temperature": 0, "stream": true});
    let mut reader = BufReader::new(
        send(
            addr,
            "POST",
            "/v1/chat/completions",
            &[],
            body.to_string().as_bytes(),
        )
        .unwrap(),
    );
    let (status, _) = read_head(&mut reader).unwrap();
    assert_eq!(status, 200);
    let first = read_chunk(&mut reader).unwrap().unwrap();
    let stopping = std::thread::spawn(move || server.shutdown());
    let mut body = String::from_utf8(first).unwrap();
    while let Some(chunk) = read_chunk(&mut reader).unwrap() {
        body.push_str(&String::from_utf8(chunk).unwrap());
    }
    let reply = Reply {
        status,
        headers: vec![("content-type".into(), "text/event-stream".into())],
        body,
    };
    let (texts, reasons, _) = streamed(&reply, true);
    assert_eq!(reasons, [json!("length")]);
    assert!(texts[0].starts_with(" kYl p kYl\r"));
    stopping.join().unwrap().unwrap();
    assert!(
        TcpStream::connect(addr).is_err(),
        "still listening after the shutdown"
    );
}
