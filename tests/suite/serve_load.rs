//! The server under load and under garbage (`llama31_tiny` with the `llama3_style` tokenizer on
//! Flex, in process): concurrent greedy streams equal their solo runs (or get a 429), the pool
//! and the queue drain after each round and after clients leave mid-stream, memory stays flat;
//! ~300 fuzzed bodies each get a 200 or an OpenAI error, never a 5xx or a dropped connection.

use crate::http::{
    Reply, get, metric, post, read_chunk, read_head, send, server, try_request, wait_for,
};
use burn_rope_pool::serve::ServeOptions;
use serde_json::{Value, json};
use std::io::BufReader;
use std::time::{Duration, Instant};

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";
const ROWS: &str = "burn_rope_pool_pool_rows_in_use";
const QUEUE: &str = "burn_rope_pool_queue_length";

/// Checks `{"error": {"message": string, "type": string, ...}}`.
fn check_openai_error(reply: &Reply, what: &str) {
    let body: Value = serde_json::from_str(&reply.body).unwrap_or_else(|e| {
        panic!(
            "{what}: {} error body is no JSON ({e}): {}",
            reply.status, reply.body
        )
    });
    let error = &body["error"];
    assert!(
        error["message"].is_string() && error["type"].is_string(),
        "{what}: {} error body {}",
        reply.status,
        reply.body
    );
}

/// The text of a whole answer (chat or completion).
fn whole_text(reply: &Reply, chat: bool) -> String {
    assert_eq!(reply.status, 200, "{}", reply.body);
    let answer = reply.json();
    let choice = &answer["choices"][0];
    let text = match chat {
        true => &choice["message"]["content"],
        false => &choice["text"],
    };
    text.as_str()
        .unwrap_or_else(|| panic!("no text: {answer}"))
        .to_string()
}

/// The concatenated text of choice 0 of an event stream, after checking its frame.
fn streamed_text(body: &str, chat: bool) -> String {
    let events: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").unwrap_or_else(|| panic!("{e:?}")))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
    let mut text = String::new();
    for event in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(event).unwrap_or_else(|e| panic!("{e}: {event}"));
        for choice in chunk["choices"].as_array().unwrap() {
            let part = match chat {
                true => choice["delta"]["content"].as_str(),
                false => choice["text"].as_str(),
            };
            text.push_str(part.unwrap_or(""));
        }
    }
    text
}

/// The six greedy requests: (path, body, chat).
fn load_requests() -> Vec<(&'static str, Value, bool)> {
    let chats = [
        "Hi there!",
        "What is the capital of France?",
        "Tell me a joke.",
    ];
    let prompts = ["Hello world", "Once upon a time", "The quick brown fox"];
    let mut requests = Vec::new();
    for content in chats {
        let body = json!({"messages": [{"role": "user", "content": content}], "max_tokens": 8,
                          "temperature": 0});
        requests.push((CHAT, body, true));
    }
    for prompt in prompts {
        let body = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0});
        requests.push((COMPLETIONS, body, false));
    }
    requests
}

/// The resident set size in bytes (`None` without `/proc/self/status`).
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Set in the process [`concurrent_streams_equal_their_solo_runs`] runs its body in.
const OWN_PROCESS: &str = "ROPE_POOL_SERVE_LOAD_OWN_PROCESS";

/// Runs the load test's body in a process of its own (this test binary, filtered to this one
/// test), so the RSS it bounds is the server's and its clients', not that of the suite's other
/// tests running beside it in one process.
#[test]
fn concurrent_streams_equal_their_solo_runs() {
    if std::env::var_os(OWN_PROCESS).is_some() {
        return load_round_trips();
    }
    let name = "serve_load::concurrent_streams_equal_their_solo_runs";
    let exe = std::env::current_exe().expect("the test binary's path");
    let run = std::process::Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(OWN_PROCESS, "1")
        .output()
        .expect("the test binary runs again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("{text}");
    assert!(run.status.success(), "{name} failed in its own process");
    assert!(
        text.contains("test result: ok. 1 passed"),
        "{name} did not run in its own process"
    );
}

/// The body of [`concurrent_streams_equal_their_solo_runs`].
fn load_round_trips() {
    let server = server(ServeOptions {
        pool_rows: 1024,
        max_batch: 4,
        max_queue: 4,
        ..ServeOptions::default()
    });
    let addr = server.addr();
    let requests = load_requests();
    let solo: Vec<String> = requests
        .iter()
        .map(|(path, body, chat)| whole_text(&post(addr, path, body), *chat))
        .collect();
    let mut rss_after = Vec::new();
    for round in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let threads: Vec<_> = requests
            .iter()
            .cloned()
            .map(|(path, mut body, chat)| {
                body["stream"] = json!(true);
                std::thread::spawn(move || {
                    let reply = try_request(addr, "POST", path, &[], body.to_string().as_bytes())
                        .unwrap_or_else(|e| panic!("round {round}: {path} {body}: {e}"));
                    (reply, chat)
                })
            })
            .collect();
        let mut successes = 0;
        let mut refused = 0;
        for (i, thread) in threads.into_iter().enumerate() {
            while !thread.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "round {round}: request {i} hangs"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            let (reply, chat) = thread.join().unwrap();
            match reply.status {
                200 => {
                    assert_eq!(
                        reply.header("content-type"),
                        Some("text/event-stream"),
                        "{}",
                        reply.body
                    );
                    assert_eq!(
                        streamed_text(&reply.body, chat),
                        solo[i],
                        "round {round}: request {i}"
                    );
                    successes += 1;
                }
                429 => {
                    check_openai_error(&reply, "429");
                    refused += 1;
                }
                status => panic!("round {round}: request {i}: {status} {}", reply.body),
            }
        }
        eprintln!("round {round}: {successes} equal to their solo runs, {refused} refused (429)");
        assert!(successes >= 2, "round {round}: only {successes} successes");
        wait_for(addr, ROWS, 0.0);
        wait_for(addr, QUEUE, 0.0);
        rss_after.push(rss());
    }
    // Clients that leave after the first chunk: their rows are freed.
    let body = json!({"messages": [{"role": "user", "content": "Hi there!"}], "max_tokens": 200,
                      "temperature": 0, "stream": true})
    .to_string();
    let streams: Vec<_> = (0..3)
        .map(|_| {
            let mut reader =
                BufReader::new(send(addr, "POST", CHAT, &[], body.as_bytes()).unwrap());
            let (status, _) = read_head(&mut reader).unwrap();
            assert_eq!(status, 200);
            read_chunk(&mut reader).unwrap().unwrap();
            reader
        })
        .collect();
    drop(streams);
    wait_for(addr, ROWS, 0.0);
    wait_for(addr, QUEUE, 0.0);
    // The server still answers as before.
    let (path, body, chat) = &requests[0];
    assert_eq!(whole_text(&post(addr, path, body), *chat), solo[0]);
    if let [Some(first), Some(second)] = rss_after[..] {
        eprintln!("RSS after round 1: {first} B, after round 2: {second} B");
        assert!(
            second <= first + (64 << 20),
            "RSS grew from {first} to {second} bytes"
        );
    }
    server.shutdown().unwrap();
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// Random unicode, control characters included.
    fn unicode(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| {
                let c = match self.below(4) {
                    0 => self.below(0x20) as u32,
                    1 => 0x20 + self.below(0x60) as u32,
                    2 => 0x80 + self.below(0x3000) as u32,
                    _ => self.below(0x11_0000) as u32,
                };
                char::from_u32(c).unwrap_or('\u{FFFD}')
            })
            .collect()
    }

    /// A raw JSON value of any (mostly wrong) type.
    fn weird(&mut self) -> String {
        match self.below(20) {
            0 => "\"12\"".into(),
            1 => self
                .pick(&["\"NaN\"", "\"Infinity\"", "\"-inf\"", "\"1e999\""])
                .to_string(),
            2 => "[]".into(),
            3 => "[1, \"two\", null, {}]".into(),
            4 => "{}".into(),
            5 => "{\"a\": {\"b\": [1]}}".into(),
            6 => "null".into(),
            7 => "true".into(),
            8 => "false".into(),
            9 => self
                .pick(&[
                    "1e308",
                    "-1e308",
                    "18446744073709551616",
                    "99999999999999999999999999",
                ])
                .to_string(),
            10 => self
                .pick(&["-1", "-5", "-0.0", "-9223372036854775809"])
                .to_string(),
            11 => self.pick(&["0", "1", "2", "0.5", "1.5", "3"]).to_string(),
            12 => {
                let len = 1 + self.below(40);
                serde_json::to_string(&self.unicode(len)).unwrap()
            }
            13 => serde_json::to_string(&"x".repeat(100_000)).unwrap(),
            14 => format!("{}{}", "[".repeat(200), "]".repeat(200)),
            15 => format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200)),
            16 => "[\"Hi\", 5]".into(),
            17 => "[[1, 2], [3]]".into(),
            18 => "[{\"role\": \"user\", \"content\": null}]".into(),
            _ => "\"\"".into(),
        }
    }
}

/// A JSON object from raw values.
fn object(fields: &[(String, String)]) -> String {
    let fields: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}: {v}", serde_json::to_string(k).unwrap()))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// A fuzzed body for an endpoint (raw bytes: they need not be JSON, nor UTF-8).
fn fuzz_body(rng: &mut Rng, chat: bool) -> Vec<u8> {
    let content = match rng.below(3) {
        0 => "\"Hi there!\"".to_string(),
        _ => {
            let len = 1 + rng.below(30);
            serde_json::to_string(&rng.unicode(len)).unwrap()
        }
    };
    let mut fields: Vec<(String, String)> = match chat {
        true => vec![(
            "messages".into(),
            format!("[{{\"role\": \"user\", \"content\": {content}}}]"),
        )],
        false => vec![("prompt".into(), content)],
    };
    fields.push(("max_tokens".into(), (1 + rng.below(3)).to_string()));
    fields.push(("temperature".into(), "0".into()));
    let keys = [
        "model",
        "messages",
        "prompt",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "n",
        "stream",
        "stream_options",
        "stop",
        "seed",
        "repetition_penalty",
        "frequency_penalty",
        "presence_penalty",
        "logprobs",
        "top_logprobs",
        "echo",
        "logit_bias",
        "user",
        "suffix",
        "best_of",
        "tools",
        "response_format",
    ];
    match rng.below(10) {
        // Malformed JSON: truncated, a byte changed, invalid UTF-8, not an object, empty.
        0 => {
            let text = object(&fields).into_bytes();
            let mut bytes = match rng.below(6) {
                0 => text[..rng.below(text.len())].to_vec(),
                1 => {
                    let mut t = text.clone();
                    let i = rng.below(t.len());
                    t[i] = *rng.pick(b"{}[]\",:\\\0\x01\xff\xc3 ");
                    t
                }
                2 => {
                    let mut t = text.clone();
                    let i = rng.below(t.len());
                    t.splice(i..i, [0xc3, 0x28, 0xff, 0xfe]);
                    t
                }
                3 => rng
                    .pick(&[
                        "null", "[]", "\"str\"", "123", "true", "{", "}", "{{}}", "{\"a\"}",
                    ])
                    .as_bytes()
                    .to_vec(),
                4 => Vec::new(),
                _ => {
                    let control: String = (0..20).map(|_| rng.below(0x20) as u8 as char).collect();
                    format!("{{\"prompt\": \"{control}\", \"messages\": \"{control}\"}}")
                        .into_bytes()
                }
            };
            bytes.truncate(200_000);
            bytes
        }
        // Missing required fields.
        1 => {
            fields.remove(0);
            if rng.below(2) == 0 {
                let key = rng.pick(&keys).to_string();
                fields.push((key, rng.weird()));
            }
            object(&fields).into_bytes()
        }
        // Wrong message shapes.
        2 if chat => {
            let role = rng.weird();
            let content = rng.weird();
            let message = match rng.below(4) {
                0 => format!("[{{\"role\": {role}, \"content\": \"Hi\"}}]"),
                1 => format!("[{{\"role\": \"user\", \"content\": {content}}}]"),
                2 => format!("[{{\"role\": {role}, \"content\": {content}}}]"),
                _ => format!("[{content}]"),
            };
            fields[0].1 = message;
            object(&fields).into_bytes()
        }
        // Valid, with small generations (sometimes streamed, several choices or stop strings).
        3 => {
            match rng.below(4) {
                0 => fields.push(("stream".into(), "true".into())),
                1 => fields.push(("n".into(), (1 + rng.below(3)).to_string())),
                2 => fields.push((
                    "stop".into(),
                    serde_json::to_string(&[rng.unicode(2)]).unwrap(),
                )),
                _ => fields.push(("seed".into(), rng.next().to_string())),
            }
            object(&fields).into_bytes()
        }
        // One to three fields of wrong types or values (a key may repeat).
        _ => {
            for _ in 0..1 + rng.below(3) {
                let key = rng.pick(&keys).to_string();
                let value = rng.weird();
                match fields.iter_mut().find(|(k, _)| *k == key) {
                    Some(field) if rng.below(4) > 0 => field.1 = value,
                    _ => fields.push((key, value)),
                }
            }
            object(&fields).into_bytes()
        }
    }
}

#[test]
fn fuzzed_bodies_get_openai_errors() {
    let server = server(ServeOptions {
        pool_rows: 512,
        default_max_tokens: Some(4),
        ..ServeOptions::default()
    });
    let addr = server.addr();
    let greedy = json!({"messages": [{"role": "user", "content": "Hi there!"}], "max_tokens": 8,
                        "temperature": 0});
    let before = whole_text(&post(addr, CHAT, &greedy), true);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut errors) = (0, 0);
    for i in 0..300 {
        let chat = i % 2 == 0;
        let path = if chat { CHAT } else { COMPLETIONS };
        let body = fuzz_body(&mut rng, chat);
        let shown = String::from_utf8_lossy(&body[..body.len().min(400)]).into_owned();
        let what = format!("case {i} {path} {shown:?}");
        let reply = try_request(addr, "POST", path, &[], &body)
            .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        match reply.status {
            200 => {
                let text = match reply.header("content-type") {
                    Some("text/event-stream") => streamed_text(&reply.body, chat),
                    _ => {
                        let answer: Value = serde_json::from_str(&reply.body)
                            .unwrap_or_else(|e| panic!("{what}: {e}: {}", reply.body));
                        let object = if chat {
                            "chat.completion"
                        } else {
                            "text_completion"
                        };
                        assert_eq!(answer["object"], object, "{what}: {answer}");
                        assert!(answer["choices"].as_array().is_some_and(|c| !c.is_empty()));
                        whole_text(&reply, chat)
                    }
                };
                let _ = text;
                ok += 1;
            }
            400..=499 => {
                check_openai_error(&reply, &what);
                errors += 1;
            }
            status => panic!("{what}: {status} {}", reply.body),
        }
    }
    eprintln!("fuzz: {ok} answered 200, {errors} refused with 4xx");
    assert!(ok > 0 && errors > 0, "{ok} {errors}");
    assert_eq!(get(addr, "/health").status, 200);
    assert_eq!(whole_text(&post(addr, CHAT, &greedy), true), before);
    assert_eq!(metric(addr, ROWS), 0.0);
    assert_eq!(metric(addr, QUEUE), 0.0);
    server.shutdown().unwrap();
}
