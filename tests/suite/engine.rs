//! The engine: transformers' chats through `llama31_tiny` with the `llama3_style` tokenizer
//! (`tests/text/chat_generate.json`, written by transformers; prompt ids, greedy ids and text
//! equal), stop conditions (eos ids, stop strings, the token budget, the context), seeded
//! sampling that repeats itself, cancellation that frees rows at once, and requests refused
//! with nothing queued.

use burn::tensor::{DType, Device};
use burn_rope_pool::model::{
    Checkpoint, Decoder, Engine, EngineOptions, Event, FinishReason, GenerateError,
    GenerationRequest, RequestId, SamplingParams, StopConditions,
};
use burn_rope_pool::text::{ChatMessage, Tokenizer};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn load(device: &Device) -> (Checkpoint, Decoder) {
    let checkpoint = Checkpoint::open(root().join("tests/models/llama31_tiny")).unwrap();
    let model = Decoder::load(&checkpoint, device, DType::F32).unwrap();
    (checkpoint, model)
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_dir(root().join("tests/text/tokenizers/llama3_style")).unwrap()
}

fn request(prompt: Vec<u32>, max_new_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        prompt,
        max_new_tokens,
        sampling: SamplingParams::greedy(),
        stop: StopConditions::default(),
    }
}

/// What each request got: ids, streamed text (finish text included), why it stopped.
#[derive(Clone, Debug, Default, PartialEq)]
struct Got {
    ids: Vec<u32>,
    text: String,
    reason: Option<FinishReason>,
}

fn run_all(engine: &mut Engine, n: usize) -> Vec<Got> {
    let mut got = vec![Got::default(); n];
    while !engine.is_idle() {
        for event in engine.step().unwrap() {
            match event {
                Event::Token {
                    id, token, text, ..
                } => {
                    got[id as usize].ids.push(token);
                    got[id as usize].text.push_str(&text);
                }
                Event::Finished { id, reason, text } => {
                    got[id as usize].text.push_str(&text);
                    got[id as usize].reason = Some(reason);
                }
            }
        }
    }
    assert_eq!(
        engine.rows_in_use(),
        0,
        "every finished request freed its rows"
    );
    got
}

fn options(pool_rows: usize) -> EngineOptions {
    EngineOptions {
        pool_rows,
        ..EngineOptions::default()
    }
}

#[test]
fn chats_equal_transformers() {
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/text/chat_generate.json")).unwrap(),
    )
    .unwrap();
    let tokenizer = tokenizer();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    for (name, device) in crate::common::devices() {
        let (checkpoint, model) = load(&device);
        let eos = checkpoint.eos_token_ids().unwrap();
        assert_eq!(eos, vec![2]);
        // The tokenizer's `<|begin_of_text|>` is id 0, the model's `pad_token_id`: transformers'
        // `generate`, given no attention mask, masks it out of the prompt, and so does the
        // engine with the checkpoint's padding id.
        let pad = checkpoint.pad_token_id().unwrap();
        assert_eq!(pad, Some(0));
        let engine_options = EngineOptions {
            pad_token_id: pad,
            ..options(256)
        };
        let mut engine = Engine::new(&model, Some(&tokenizer), engine_options).unwrap();
        let chats = reference["generations"].as_array().unwrap();
        for chat in chats {
            let messages: Vec<ChatMessage> =
                serde_json::from_value(chat["messages"].clone()).unwrap();
            let prompt = tokenizer.encode_chat(&messages, true).unwrap();
            assert_eq!(
                prompt,
                ids(&chat["prompt_ids"]),
                "{name}: the chat's prompt ids"
            );
            let mut r = request(prompt, 10);
            r.stop.eos_token_ids = eos.clone();
            engine.submit(r).unwrap();
        }
        let got = run_all(&mut engine, chats.len());
        for (chat, got) in chats.iter().zip(&got) {
            assert_eq!(
                got.ids,
                ids(&chat["generated_ids"]),
                "{name}: generated ids"
            );
            assert_eq!(got.text, chat["text"].as_str().unwrap(), "{name}: text");
            assert_eq!(got.reason, Some(FinishReason::Length));
        }
    }
}

#[test]
fn stop_conditions_end_a_request_and_free_its_rows() {
    let device = Device::flex();
    let (_, model) = load(&device);
    let tokenizer = tokenizer();
    let prompt = tokenizer.encode("Café and code", true).unwrap();
    let mut engine = Engine::new(&model, Some(&tokenizer), options(128)).unwrap();
    engine.submit(request(prompt.clone(), 12)).unwrap();
    let free = run_all(&mut engine, 1).remove(0);
    assert_eq!(free.ids.len(), 12);
    assert_eq!(free.reason, Some(FinishReason::Length));
    assert_eq!(free.text, tokenizer.decode(&free.ids, true).unwrap());

    // An eos id: the request stops on it (the id is generated, its text is not streamed).
    let mut r = request(prompt.clone(), 12);
    r.stop.eos_token_ids = vec![free.ids[3]];
    let first = free.ids.iter().position(|&t| t == free.ids[3]).unwrap();
    let mut engine = Engine::new(&model, Some(&tokenizer), options(128)).unwrap();
    engine.submit(r).unwrap();
    let got = run_all(&mut engine, 1).remove(0);
    assert_eq!(got.ids, free.ids[..=first]);
    assert_eq!(got.reason, Some(FinishReason::Eos));

    // A stop string from the middle of the free run's text: the text is cut before it.
    let chars: Vec<char> = free.text.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let at = free.text.find(&stop).unwrap();
    let mut r = request(prompt.clone(), 12);
    r.stop.stop_strings = vec![stop.clone()];
    let mut engine = Engine::new(&model, Some(&tokenizer), options(128)).unwrap();
    engine.submit(r).unwrap();
    let got = run_all(&mut engine, 1).remove(0);
    assert_eq!(got.reason, Some(FinishReason::StopString), "stop {stop:?}");
    assert_eq!(got.text, free.text[..at], "stop {stop:?}");
    assert_eq!(got.ids, free.ids[..got.ids.len()]);

    // The model's context: a sequence stops when it fills it.
    let mut short = load(&device).1;
    short.config.max_position_embeddings = Some(prompt.len() + 3);
    let mut engine = Engine::new(&short, Some(&tokenizer), options(128)).unwrap();
    engine.submit(request(prompt.clone(), 12)).unwrap();
    let got = run_all(&mut engine, 1).remove(0);
    assert_eq!(got.ids, free.ids[..3]);
    assert_eq!(got.reason, Some(FinishReason::ContextLimit));
}

#[test]
fn seeded_sampling_repeats_itself_and_cancel_frees_rows() {
    let device = Device::flex();
    let (_, model) = load(&device);
    let sampled = |seed| {
        let mut r = request(vec![5, 6, 7], 16);
        r.sampling = SamplingParams {
            temperature: 0.9,
            top_p: 0.95,
            seed: Some(seed),
            ..SamplingParams::default()
        };
        r
    };
    let mut engine = Engine::new(&model, None, options(64)).unwrap();
    // The same request twice in one batch and once alone: the same ids each time.
    for _ in 0..2 {
        engine.submit(sampled(7)).unwrap();
    }
    let got = run_all(&mut engine, 2);
    assert_eq!(got[0].ids, got[1].ids);
    let mut engine = Engine::new(&model, None, options(64)).unwrap();
    engine.submit(sampled(7)).unwrap();
    assert_eq!(run_all(&mut engine, 1)[0].ids, got[0].ids);

    // Cancelling a running request frees its rows at once; the other runs to its end.
    let mut engine = Engine::new(&model, None, options(64)).unwrap();
    let a: RequestId = engine.submit(request(vec![5, 6, 7], 20)).unwrap();
    let b = engine.submit(request(vec![8, 9], 4)).unwrap();
    engine.step().unwrap();
    assert_eq!(engine.rows_in_use(), 5);
    assert!(engine.cancel(a));
    assert_eq!(engine.rows_in_use(), 2);
    assert!(!engine.cancel(a), "a cancelled request is gone");
    let mut ids = 1;
    while !engine.is_idle() {
        for event in engine.step().unwrap() {
            match event {
                Event::Token { id, .. } => {
                    assert_eq!(id, b);
                    ids += 1;
                }
                Event::Finished { id, reason, .. } => {
                    assert_eq!((id, reason), (b, FinishReason::Length))
                }
            }
        }
    }
    assert_eq!(ids, 4);
    assert_eq!(engine.rows_in_use(), 0);
}

#[test]
fn bad_requests_are_refused_and_queue_nothing() {
    let device = Device::flex();
    let (_, model) = load(&device);
    let tokenizer = tokenizer();
    let mut engine = Engine::new(&model, None, options(32)).unwrap();
    let with = |f: &dyn Fn(&mut GenerationRequest)| {
        let mut r = request(vec![5, 6], 4);
        f(&mut r);
        r
    };
    let cases: Vec<(GenerationRequest, &str)> = vec![
        (with(&|r| r.prompt.clear()), "empty prompt"),
        (
            with(&|r| r.prompt.push(100_000)),
            "token id 100000 is outside the vocabulary of 320",
        ),
        (
            with(&|r| r.prompt = vec![5; 4096]),
            "the prompt has 4096 tokens, the model's context is 4096",
        ),
        (with(&|r| r.sampling.top_p = 0.0), "top_p"),
        (with(&|r| r.sampling.temperature = -1.0), "temperature"),
        (with(&|r| r.sampling.temperature = f32::NAN), "temperature"),
        (with(&|r| r.sampling.min_p = 2.0), "min_p"),
        (
            with(&|r| r.sampling.repetition_penalty = 0.0),
            "repetition_penalty",
        ),
        (
            with(&|r| r.stop.stop_strings = vec!["x".into()]),
            "stop strings need a tokenizer",
        ),
        (
            with(&|r| r.max_new_tokens = 40),
            "needs 41 pool rows, the pool has 32",
        ),
    ];
    for (r, message) in cases {
        let err: GenerateError = engine.submit(r).unwrap_err();
        assert!(err.to_string().contains(message), "{err} (want {message})");
        assert!(engine.is_idle(), "a refused request queues nothing");
    }
    let mut engine = Engine::new(&model, Some(&tokenizer), options(32)).unwrap();
    let err = engine
        .submit(with(&|r| r.stop.stop_strings = vec![String::new()]))
        .unwrap_err();
    assert_eq!(err.to_string(), "a stop string must not be empty");
    assert!(engine.is_idle());
}

/// Chunked prefill: a long prompt runs a chunk a step while a running request keeps getting a
/// token every step; each request's tokens equal the same request run alone with whole-prompt
/// prefill, greedy and seeded sampling alike (a step that ends no prompt draws no random number
/// for it); a chunk of 0 is refused before anything is allocated.
#[test]
fn chunked_prefill_keeps_decoding_and_changes_no_token() {
    for (name, device) in crate::common::devices() {
        let (_, model) = load(&device);
        let sampled = |prompt: Vec<u32>, n: usize, seed: u64| {
            let mut r = request(prompt, n);
            r.sampling = SamplingParams {
                temperature: 0.9,
                top_p: 0.95,
                seed: Some(seed),
                ..SamplingParams::default()
            };
            r
        };
        let short: Vec<u32> = vec![5, 17, 99];
        // Long enough that its chunks of 150 and its whole prompt, beside decoding requests,
        // make steps with a run of 128 query rows or more (an f16 model on a CubeCL device
        // splits them into launches over short and long sequences; this one is f32).
        let long: Vec<u32> = (0..170).map(|i| 3 + (i * 13) % 200).collect();
        let requests = [
            request(short.clone(), 24),
            sampled(long.clone(), 6, 7),
            request(long[..9].to_vec(), 5),
            sampled(short.clone(), 12, 11),
        ];
        // Alone, whole prompts.
        let alone: Vec<Got> = requests
            .iter()
            .map(|r| {
                let mut engine = Engine::new(&model, None, options(256)).unwrap();
                engine.submit(r.clone()).unwrap();
                run_all(&mut engine, 1).remove(0)
            })
            .collect();
        for chunk in [1usize, 4, 8, 150, 1000] {
            let engine_options = EngineOptions {
                prefill_chunk: Some(chunk),
                ..options(256)
            };
            let mut engine = Engine::new(&model, None, engine_options).unwrap();
            let mut got = vec![Got::default(); requests.len()];
            // The first request decodes before the others arrive.
            engine.submit(requests[0].clone()).unwrap();
            let mut steps_to_first = None;
            let mut step = 0;
            while !engine.is_idle() {
                if step == 2 {
                    for r in &requests[1..] {
                        engine.submit(r.clone()).unwrap();
                    }
                }
                let events = engine.step().unwrap();
                step += 1;
                let first_running = !got[0].ids.is_empty() && got[0].reason.is_none();
                let mut first_got_token = false;
                for event in events {
                    match event {
                        Event::Token { id, token, .. } => {
                            got[id as usize].ids.push(token);
                            first_got_token |= id == 0;
                            if id == 1 && steps_to_first.is_none() {
                                steps_to_first = Some(step - 2);
                            }
                        }
                        Event::Finished { id, reason, .. } => {
                            got[id as usize].reason = Some(reason)
                        }
                    }
                }
                assert!(
                    !first_running || first_got_token,
                    "{name}, chunk {chunk}: the running request got no token in step {step}"
                );
            }
            assert_eq!(engine.rows_in_use(), 0, "{name}, chunk {chunk}: rows freed");
            for (i, (g, a)) in got.iter().zip(&alone).enumerate() {
                assert_eq!(g.ids, a.ids, "{name}, chunk {chunk}: request {i}");
                assert_eq!(g.reason, a.reason, "{name}, chunk {chunk}: request {i}");
            }
            // The long prompt's first token comes in the step that runs its last chunk (the
            // prompts admitted with it share each step's chunk, the earliest first).
            if chunk < long.len() {
                assert!(
                    steps_to_first.unwrap() >= long.len().div_ceil(chunk),
                    "{name}, chunk {chunk}: the long prompt sampled before its prompt ended"
                );
            } else {
                assert_eq!(steps_to_first, Some(1), "{name}, chunk {chunk}");
            }
        }
        let zero = EngineOptions {
            prefill_chunk: Some(0),
            ..options(64)
        };
        assert!(matches!(
            Engine::new(&model, None, zero),
            Err(GenerateError::PrefillChunk)
        ));
    }
}
