//! `burn_rope_pool::text` against HuggingFace's own output (`tests/text/tokenizers/*/cases.json`,
//! written by `tokenizers` 0.23.2 and `transformers` 5.17): encode, decode, chat templates;
//! incremental decoding; SentencePiece-like tokenizers; hostile folders and files.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use burn_rope_pool::text::{ChatMessage, TextError, Tokenizer};
use serde::Deserialize;
use serde_json::json;

const NAMES: [&str; 2] = ["llama3_style", "chatml_style"];

fn reference_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/text/tokenizers")
        .join(name)
}

fn load(name: &str) -> Tokenizer {
    Tokenizer::from_dir(reference_dir(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[derive(Deserialize)]
struct Cases {
    encode: Vec<EncodeCase>,
    decode: Vec<DecodeCase>,
    chat: Vec<ChatCase>,
}

#[derive(Deserialize)]
struct EncodeCase {
    text: String,
    ids_with_special: Vec<u32>,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct DecodeCase {
    ids: Vec<u32>,
    text: String,
    text_skip_special: String,
}

#[derive(Deserialize)]
struct ChatCase {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    add_generation_prompt: bool,
    text: Option<String>,
    ids: Option<Vec<u32>>,
    error: Option<String>,
}

fn cases(name: &str) -> Cases {
    let path = reference_dir(name).join("cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A fresh folder under the system's temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "burn-rope-pool-text-{tag}-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, file: &str, contents: impl AsRef<[u8]>) -> &Self {
        std::fs::write(self.0.join(file), contents).unwrap();
        self
    }

    /// The llama3_style `tokenizer.json` with `config` as `tokenizer_config.json`.
    fn with_config(tag: &str, config: serde_json::Value) -> Self {
        let dir = Self::new(tag);
        let tokenizer = std::fs::read(reference_dir("llama3_style").join("tokenizer.json"));
        dir.write("tokenizer.json", tokenizer.unwrap());
        dir.write("tokenizer_config.json", config.to_string());
        dir
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Streams `ids` and checks the pieces against `decode(ids)`: they concatenate to it, none is
/// empty and none has a U+FFFD that `decode` does not have. Returns the pieces.
fn check_stream(tokenizer: &Tokenizer, ids: &[u32], skip_special_tokens: bool) -> Vec<String> {
    let expected = tokenizer.decode(ids, skip_special_tokens).unwrap();
    let mut stream = tokenizer.decode_stream(skip_special_tokens);
    let mut pieces = Vec::new();
    for &id in ids {
        if let Some(piece) = stream.step(id).unwrap() {
            pieces.push(piece);
        }
    }
    if let Some(rest) = stream.finish().unwrap() {
        pieces.push(rest);
    }
    assert_eq!(pieces.concat(), expected, "ids {ids:?}, pieces {pieces:?}");
    for piece in &pieces {
        assert!(!piece.is_empty(), "ids {ids:?}: an empty piece");
        if piece.contains('\u{FFFD}') {
            assert!(
                expected.contains('\u{FFFD}'),
                "ids {ids:?}: piece {piece:?} has U+FFFD, decode has none"
            );
        }
    }
    pieces
}

#[test]
fn reference_cases_match_transformers() {
    let mut checked = 0;
    for name in NAMES {
        let tokenizer = load(name);
        let cases = cases(name);
        for case in &cases.encode {
            assert_eq!(
                tokenizer.encode(&case.text, true).unwrap(),
                case.ids_with_special,
                "{name} encode {:?} with special tokens",
                case.text
            );
            assert_eq!(
                tokenizer.encode(&case.text, false).unwrap(),
                case.ids,
                "{name} encode {:?}",
                case.text
            );
            checked += 2;
        }
        for case in &cases.decode {
            assert_eq!(
                tokenizer.decode(&case.ids, false).unwrap(),
                case.text,
                "{name} decode {:?}",
                case.ids
            );
            assert_eq!(
                tokenizer.decode(&case.ids, true).unwrap(),
                case.text_skip_special,
                "{name} decode {:?} skipping special tokens",
                case.ids
            );
            checked += 2;
        }
        for case in &cases.chat {
            let what = format!(
                "{name} chat {:?} {}",
                case.messages, case.add_generation_prompt
            );
            let text = tokenizer.apply_chat_template(&case.messages, case.add_generation_prompt);
            let ids = tokenizer.encode_chat(&case.messages, case.add_generation_prompt);
            if let Some(message) = &case.error {
                for err in [text.unwrap_err(), ids.unwrap_err()] {
                    assert!(matches!(err, TextError::Template(_)), "{what}: {err:?}");
                    assert!(err.to_string().contains(message), "{what}: {err}");
                }
            } else {
                assert_eq!(&text.unwrap(), case.text.as_ref().unwrap(), "{what}");
                assert_eq!(&ids.unwrap(), case.ids.as_ref().unwrap(), "{what}");
            }
            checked += 1;
        }
    }
    // 11 encode cases (x2), 11 decode cases (x2), 6 chats, for each of the two tokenizers.
    assert_eq!(checked, 2 * (11 * 2 + 11 * 2 + 6));
}

#[test]
fn special_tokens_and_sizes() {
    let llama = load("llama3_style");
    assert_eq!(llama.vocab_size(), 312);
    assert_eq!(llama.bos_token(), Some("<|begin_of_text|>"));
    assert_eq!(llama.eos_token(), Some("<|eot_id|>"));
    assert_eq!(llama.eos_token_id(), Some(4));
    assert_eq!(llama.token_to_id("<|start_header_id|>"), Some(2));
    assert!(llama.has_chat_template());

    let chatml = load("chatml_style");
    assert_eq!(chatml.vocab_size(), 316);
    assert_eq!(chatml.bos_token(), None);
    assert_eq!(chatml.eos_token_id(), Some(2));
    assert!(chatml.has_chat_template());

    fn shareable<T: Send + Sync + Clone + std::fmt::Debug>(_: &T) {}
    shareable(&llama);
    assert!(format!("{llama:?}").contains("eos_token_id: Some(4)"));
}

#[test]
fn template_raise_exception_message_reaches_the_error() {
    let tokenizer = load("chatml_style");
    let messages = [
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("tool", "{\"x\": 1}"),
    ];
    let err = tokenizer.apply_chat_template(&messages, true).unwrap_err();
    assert!(matches!(err, TextError::Template(_)), "{err:?}");
    assert!(err.to_string().contains("unknown role tool"), "{err}");
    let err = tokenizer.encode_chat(&messages, false).unwrap_err();
    assert!(err.to_string().contains("unknown role tool"), "{err}");
}

#[test]
fn stream_matches_decode_on_every_case() {
    for name in NAMES {
        let tokenizer = load(name);
        let cases = cases(name);
        let mut all = Vec::new();
        for case in &cases.encode {
            for skip in [false, true] {
                check_stream(&tokenizer, &case.ids_with_special, skip);
                check_stream(&tokenizer, &case.ids, skip);
            }
            all.extend_from_slice(&case.ids_with_special);
        }
        for case in &cases.chat {
            if let Some(ids) = &case.ids {
                check_stream(&tokenizer, ids, false);
                check_stream(&tokenizer, ids, true);
            }
        }
        // Every case back to back, as one long generation.
        check_stream(&tokenizer, &all, false);
        check_stream(&tokenizer, &all, true);
    }
}

#[test]
fn stream_split_characters_come_out_whole() {
    for name in NAMES {
        let tokenizer = load(name);
        for text in [
            "日本語のテキスト",
            "🚀 rockets 👍🏽",
            "Le café coûte 3,50 €",
            "한국어 😀!",
        ] {
            let ids = tokenizer.encode(text, false).unwrap();
            let split = ids
                .iter()
                .any(|&id| tokenizer.decode(&[id], true).unwrap().contains('\u{FFFD}'));
            assert!(
                split,
                "{name}: no character of {text:?} is split over tokens"
            );
            let pieces = check_stream(&tokenizer, &ids, true);
            assert_eq!(pieces.concat(), text);
            assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{pieces:?}");
        }
    }
}

#[test]
fn ids_past_the_vocabulary_decode_to_nothing() {
    for name in NAMES {
        let tokenizer = load(name);
        let vocab = tokenizer.vocab_size() as u32;
        let text = "日本 🚀 ok";
        let ids = tokenizer.encode(text, false).unwrap();
        // Past-vocab ids (what a model with a larger embedding can emit) everywhere, including
        // between the bytes of one character.
        let mut mixed = vec![vocab, 319];
        for &id in &ids {
            mixed.push(id);
            mixed.push(vocab + (id % 7));
        }
        mixed.push(u32::MAX);
        assert_eq!(tokenizer.decode(&mixed, false).unwrap(), text);
        assert_eq!(tokenizer.decode(&mixed, true).unwrap(), text);
        assert_eq!(
            tokenizer.decode(&[vocab, 319, u32::MAX], false).unwrap(),
            ""
        );
        for skip in [false, true] {
            let pieces = check_stream(&tokenizer, &mixed, skip);
            assert_eq!(pieces.concat(), text);
        }
        let mut stream = tokenizer.decode_stream(false);
        assert_eq!(stream.step(vocab).unwrap(), None);
        assert_eq!(stream.finish().unwrap(), None);
    }
}

#[test]
fn stream_invalid_bytes_match_decode() {
    for name in NAMES {
        let tokenizer = load(name);
        // Byte-level tokens that are not UTF-8 alone (continuation and lead bytes).
        let lone: Vec<u32> = (0..tokenizer.vocab_size() as u32)
            .filter(|&id| tokenizer.decode(&[id], false).unwrap() == "\u{FFFD}")
            .collect();
        assert!(lone.len() > 10, "{name}: {} lone-byte tokens", lone.len());
        let a = tokenizer.encode("a", false).unwrap();
        let word = tokenizer.encode(" word", false).unwrap();
        for &byte in lone.iter().take(40) {
            // Mid-text: the U+FFFD comes out with the next character, as decode has it.
            let ids: Vec<u32> = [a.clone(), vec![byte], word.clone()].concat();
            check_stream(&tokenizer, &ids, false);
            // At the end: finish() returns it.
            let ids: Vec<u32> = [a.clone(), vec![byte]].concat();
            let mut stream = tokenizer.decode_stream(false);
            assert_eq!(stream.step(a[0]).unwrap().as_deref(), Some("a"));
            assert_eq!(stream.step(byte).unwrap(), None);
            assert_eq!(stream.finish().unwrap().as_deref(), Some("\u{FFFD}"));
            check_stream(&tokenizer, &ids, true);
        }
    }
}

#[test]
fn stream_keeps_special_tokens_unless_skipped() {
    let tokenizer = load("llama3_style");
    let ids = tokenizer
        .encode_chat(&[ChatMessage::new("user", "Hi there!")], true)
        .unwrap();
    let pieces = check_stream(&tokenizer, &ids, false);
    assert_eq!(pieces[0], "<|begin_of_text|>");
    assert!(pieces.iter().any(|p| p == "<|eot_id|>"), "{pieces:?}");
    let pieces = check_stream(&tokenizer, &ids, true);
    assert_eq!(pieces.concat(), "user\n\nHi there!assistant\n\n");
}

/// A SentencePiece-like `tokenizer.json` (Llama 2 / Mistral style): BPE over `▁`-joined words
/// with byte fallback, `<s>` added by the post-processor.
fn sentencepiece_bpe_json() -> serde_json::Value {
    let mut vocab = serde_json::Map::new();
    for (i, t) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
        vocab.insert(t.to_string(), json!(i));
    }
    for b in 0..=255u32 {
        vocab.insert(format!("<0x{b:02X}>"), json!(3 + b));
    }
    let mut merges = Vec::new();
    let add = |piece: &str, vocab: &mut serde_json::Map<String, serde_json::Value>| {
        if !vocab.contains_key(piece) {
            let id = vocab.len();
            vocab.insert(piece.to_string(), json!(id));
        }
    };
    for c in [
        "▁", "H", "e", "l", "o", "w", "r", "d", "c", "a", "f", "t", "s", "!",
    ] {
        add(c, &mut vocab);
    }
    for word in ["▁Hello", "▁world", "▁cafe", "▁test"] {
        let chars: Vec<char> = word.chars().collect();
        let mut left = chars[0].to_string();
        for c in &chars[1..] {
            merges.push(format!("{left} {c}"));
            left.push(*c);
            add(&left, &mut vocab);
        }
    }
    let special = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
        ]},
        "pre_tokenizer": null,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}
        },
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}
        ]},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": "<unk>",
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
            "vocab": vocab, "merges": merges
        }
    })
}

/// A SentencePiece-like Unigram `tokenizer.json` with the `Metaspace` pre-tokenizer and decoder
/// (`prepend_scheme: first`) and byte fallback.
fn metaspace_unigram_json() -> serde_json::Value {
    let mut vocab = vec![
        json!(["<unk>", 0.0]),
        json!(["<s>", 0.0]),
        json!(["</s>", 0.0]),
    ];
    for b in 0..=255u32 {
        vocab.push(json!([format!("<0x{b:02X}>"), 0.0]));
    }
    for (piece, score) in [
        ("▁Hello", -2.0),
        ("▁world", -2.0),
        ("▁", -3.0),
        ("!", -3.0),
        ("▁the", -2.5),
        ("re", -4.0),
    ] {
        vocab.push(json!([piece, score]));
    }
    for c in "abcdefghijklmnopqrstuvwxyzHW".chars() {
        vocab.push(json!([c.to_string(), -5.0]));
    }
    let special = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let metaspace = json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                           "split": true});
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
        "normalizer": null,
        "pre_tokenizer": metaspace,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace]},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": true}
    })
}

#[test]
fn sentencepiece_like_tokenizers_stream_with_spaces_intact() {
    for (tag, json) in [
        ("sp-bpe", sentencepiece_bpe_json()),
        ("sp-unigram", metaspace_unigram_json()),
    ] {
        let dir = TempDir::new(tag);
        dir.write("tokenizer.json", json.to_string());
        dir.write(
            "tokenizer_config.json",
            json!({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})
                .to_string(),
        );
        let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
        assert_eq!(tokenizer.eos_token_id(), Some(2));
        assert_eq!(tokenizer.bos_token(), Some("<s>"));
        assert!(!tokenizer.has_chat_template());

        let text = "Hello world! café 🚀 test there";
        let ids = tokenizer.encode(text, false).unwrap();
        let hello = tokenizer.token_to_id("▁Hello").unwrap();
        let world = tokenizer.token_to_id("▁world").unwrap();
        assert_eq!(&ids[..2], &[hello, world], "{tag}: {ids:?}");
        // Byte fallback: é and 🚀 are bytes.
        assert!(
            ids.contains(&tokenizer.token_to_id("<0xF0>").unwrap()),
            "{tag}"
        );
        assert_eq!(tokenizer.decode(&ids, false).unwrap(), text, "{tag}");

        let pieces = check_stream(&tokenizer, &ids, false);
        assert_eq!(pieces.concat(), text, "{tag}");
        assert_eq!(pieces[0], "Hello", "{tag}");
        assert_eq!(pieces[1], " world", "{tag}: the space of `▁world` is kept");
        assert!(pieces.contains(&"🚀".to_string()), "{tag}: {pieces:?}");
        assert!(pieces.iter().all(|p| !p.contains('\u{FFFD}')), "{tag}");

        // With the bos (skipped or shown), eos and past-vocab ids around.
        let vocab = tokenizer.vocab_size() as u32;
        let mut framed = vec![1];
        framed.extend(ids.iter().flat_map(|&id| [id, vocab + 3]));
        framed.push(2);
        let pieces = check_stream(&tokenizer, &framed, true);
        assert_eq!(pieces.concat(), text, "{tag}");
        let pieces = check_stream(&tokenizer, &framed, false);
        assert_eq!(
            pieces.concat(),
            tokenizer.decode(&framed, false).unwrap(),
            "{tag}"
        );
        assert_eq!(pieces.first().map(String::as_str), Some("<s>"), "{tag}");
    }
}

#[test]
fn hostile_folders_and_files_are_clear_errors() {
    // A missing folder.
    let missing = std::env::temp_dir().join("burn-rope-pool-text-no-such-folder");
    let err = Tokenizer::from_dir(&missing).unwrap_err();
    assert!(matches!(err, TextError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-folder"), "{err}");

    // A folder without tokenizer.json.
    let dir = TempDir::new("empty");
    let err = Tokenizer::from_dir(&dir.0).unwrap_err();
    assert!(matches!(err, TextError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");

    // A file given instead of a folder.
    dir.write("tokenizer.json", "{}");
    let err = Tokenizer::from_dir(dir.0.join("tokenizer.json")).unwrap_err();
    assert!(matches!(err, TextError::Io { .. }), "{err:?}");

    // Corrupt tokenizer.json: not JSON, truncated, the wrong shape, binary.
    let good = std::fs::read_to_string(reference_dir("llama3_style").join("tokenizer.json"));
    let good = good.unwrap();
    for (what, bytes) in [
        ("garbage", b"not json at all".to_vec()),
        ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
        ("empty object", b"{}".to_vec()),
        (
            "wrong model",
            good.replace("\"BPE\"", "\"NoSuchModel\"").into_bytes(),
        ),
        ("binary", vec![0xff, 0xfe, 0x00, 0x9f]),
        ("empty", Vec::new()),
    ] {
        dir.write("tokenizer.json", bytes);
        let err = Tokenizer::from_dir(&dir.0).unwrap_err();
        assert!(matches!(err, TextError::Tokenizer(_)), "{what}: {err:?}");
        assert!(err.to_string().contains("tokenizer.json"), "{what}: {err}");
    }

    // Malformed tokenizer_config.json.
    dir.write("tokenizer.json", &good);
    for (what, config) in [
        ("not JSON", "{\"eos_token\": "),
        ("not an object", "[1, 2]"),
        ("eos a number", "{\"eos_token\": 5}"),
        (
            "bos without content",
            "{\"bos_token\": {\"text\": \"<s>\"}}",
        ),
        ("template a number", "{\"chat_template\": 3}"),
        (
            "template list entry",
            "{\"chat_template\": [{\"name\": 1}]}",
        ),
        ("not UTF-8", "\u{0}\u{0}"),
    ] {
        let bytes: Vec<u8> = if what == "not UTF-8" {
            vec![b'{', 0xff, b'}']
        } else {
            config.as_bytes().to_vec()
        };
        dir.write("tokenizer_config.json", bytes);
        let err = Tokenizer::from_dir(&dir.0).unwrap_err();
        assert!(matches!(err, TextError::Config(_)), "{what}: {err:?}");
        assert!(
            err.to_string().contains("tokenizer_config.json"),
            "{what}: {err}"
        );
    }

    // No chat template: the tokenizer works, chats are refused.
    dir.write("tokenizer_config.json", "{\"eos_token\": \"<|eot_id|>\"}");
    let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
    assert!(!tokenizer.has_chat_template());
    assert_eq!(tokenizer.bos_token(), None);
    assert_eq!(tokenizer.eos_token_id(), Some(4));
    let messages = [ChatMessage::new("user", "Hi")];
    let err = tokenizer.apply_chat_template(&messages, true).unwrap_err();
    assert!(matches!(err, TextError::NoChatTemplate), "{err:?}");
    assert!(err.to_string().contains("no chat template"), "{err}");
    assert!(matches!(
        tokenizer.encode_chat(&messages, true),
        Err(TextError::NoChatTemplate)
    ));
    // No tokenizer_config.json at all: the same, and no eos.
    std::fs::remove_file(dir.0.join("tokenizer_config.json")).unwrap();
    let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
    assert_eq!(tokenizer.eos_token_id(), None);
    assert!(!tokenizer.has_chat_template());
    // An eos that is not in the vocabulary has no id.
    dir.write("tokenizer_config.json", "{\"eos_token\": \"</nope>\"}");
    assert_eq!(Tokenizer::from_dir(&dir.0).unwrap().eos_token_id(), None);

    // A template that does not compile: the tokenizer loads, the chat says why.
    dir.write(
        "tokenizer_config.json",
        "{\"chat_template\": \"{% for m in messages %}\"}",
    );
    let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
    assert!(tokenizer.has_chat_template());
    assert_eq!(tokenizer.encode("a", false).unwrap(), vec![69]);
    let err = tokenizer.apply_chat_template(&messages, true).unwrap_err();
    assert!(matches!(err, TextError::Template(_)), "{err:?}");
    // A list of named templates without `default`.
    dir.write(
        "tokenizer_config.json",
        "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}]}",
    );
    let err = Tokenizer::from_dir(&dir.0)
        .unwrap()
        .apply_chat_template(&messages, true)
        .unwrap_err();
    assert!(err.to_string().contains("tool_use"), "{err}");
}

fn render(template: &str, messages: &[ChatMessage]) -> Result<String, TextError> {
    let dir = TempDir::with_config(
        "template",
        json!({"chat_template": template, "bos_token": "<|begin_of_text|>",
               "eos_token": {"content": "<|eot_id|>", "special": true}}),
    );
    Tokenizer::from_dir(&dir.0)
        .unwrap()
        .apply_chat_template(messages, true)
}

#[test]
fn templates_render_as_in_transformers() {
    let chat = [
        ChatMessage::new("system", "  Be brief.  "),
        ChatMessage::new("user", "héllo \"world\" <b>"),
    ];
    // trim_blocks and lstrip_blocks.
    let out = render(
        "{% for m in messages %}\n  {% if loop.first %}\n[{{ m.role }}]\n  {% endif %}\n{% endfor %}",
        &chat,
    );
    assert_eq!(out.unwrap(), "[system]\n");
    // Python string methods, loop controls, loop variables, special tokens.
    let out = render(
        "{{ bos_token }}{% for m in messages %}{% if m['role'].startswith('u') %}{% break %}\
         {% endif %}{{ loop.index0 }}:{{ m['content'].strip().upper() }}|\
         {{ m.content.split()|length }}|{{ m.role.title() }}{% endfor %}{{ eos_token }}\
         {{ add_generation_prompt }}{{ tools is none }}",
        &chat,
    );
    assert_eq!(
        out.unwrap(),
        "<|begin_of_text|>0:BE BRIEF.|2|System<|eot_id|>TrueTrue"
    );
    // `{{ value }}` prints as Python's `str`.
    let out = render(
        "{{ none }}|{{ [1, 'a', none, false, {'k': 2.0, \"it's\": 1e20}] }}",
        &chat,
    );
    assert_eq!(
        out.unwrap(),
        "None|[1, 'a', None, False, {'k': 2.0, \"it's\": 1e+20}]"
    );
    // `namespace`, `in`, string concatenation, dict methods.
    let out = render(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role in ['user'] %}\
         {% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.n ~ '/' + 'x' }}\
         {% for k, v in messages[0].items() %}{{ k }}={{ v|trim }};{% endfor %}",
        &chat,
    );
    assert_eq!(out.unwrap(), "1/xrole=system;content=Be brief.;");
    // tojson: json.dumps with ensure_ascii=False, insertion order, no HTML escaping.
    let out = render("{{ messages[1]|tojson }}", &chat);
    assert_eq!(
        out.unwrap(),
        r#"{"role": "user", "content": "héllo \"world\" <b>"}"#
    );
    let out = render(
        "{{ {'b': [1, 2.5, none, true], 'a': {}}|tojson(indent=2, sort_keys=true) }}",
        &chat,
    );
    assert_eq!(
        out.unwrap(),
        "{\n  \"a\": {},\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}"
    );
    let out = render(
        "{{ ['é', 1.0, 1e20, 'a\\nb']|tojson(ensure_ascii=true, separators=[',', ':']) }}",
        &chat,
    );
    assert_eq!(out.unwrap(), "[\"\\u00e9\",1.0,1e+20,\"a\\nb\"]");
    // raise_exception with a computed message.
    let err = render(
        "{{ raise_exception('no way: ' + messages[0].role) }}",
        &chat,
    )
    .unwrap_err();
    assert!(matches!(err, TextError::Template(_)), "{err:?}");
    assert!(err.to_string().contains("no way: system"), "{err}");
    // An undefined variable renders empty, as in Jinja2; an undefined method is an error.
    assert_eq!(render("[{{ nothing }}]", &chat).unwrap(), "[]");
    assert!(render("{{ messages[0].role.no_such_method() }}", &chat).is_err());
}

#[test]
fn strftime_now_is_the_current_utc_date() {
    let today = || {
        std::process::Command::new("date")
            .args(["-u", "+%d %b %Y|%Y-%m-%d %j %a %A %B"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(before) = today() else {
        eprintln!("no `date` command: strftime_now not compared");
        return;
    };
    let out = render(
        "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %j %a %A %B') }}",
        &[],
    )
    .unwrap();
    let after = today().unwrap();
    assert!(out == before || out == after, "{out} vs {before}");
}

#[test]
fn chat_template_jinja_wins_over_the_config() {
    let dir = TempDir::with_config(
        "jinja-file",
        json!({"chat_template": "from config", "eos_token": "<|eot_id|>"}),
    );
    let messages = [ChatMessage::new("user", "Hi")];
    let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
    assert_eq!(
        tokenizer.apply_chat_template(&messages, false).unwrap(),
        "from config"
    );
    dir.write(
        "chat_template.jinja",
        "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}\n",
    );
    let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
    assert_eq!(
        tokenizer.apply_chat_template(&messages, false).unwrap(),
        "<|start_header_id|>user<|end_header_id|>"
    );
    assert_eq!(
        tokenizer.encode_chat(&messages, false).unwrap(),
        [vec![2], tokenizer.encode("user", false).unwrap(), vec![3]].concat()
    );
    // The older list form, with a `default`.
    dir.write(
        "tokenizer_config.json",
        json!({"chat_template": [{"name": "tool_use", "template": "tools"},
                                 {"name": "default", "template": "plain"}]})
        .to_string(),
    );
    std::fs::remove_file(dir.0.join("chat_template.jinja")).unwrap();
    let tokenizer = Tokenizer::from_dir(&dir.0).unwrap();
    assert_eq!(
        tokenizer.apply_chat_template(&messages, false).unwrap(),
        "plain"
    );
}

/// Not a test of correctness: encode throughput on 256 KB, printed (`--nocapture`; meaningful in
/// release).
#[test]
fn encode_throughput() {
    let tokenizer = load("llama3_style");
    let cases = cases("llama3_style");
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 1 << 18 {
        text.push_str(&cases.encode[i % cases.encode.len()].text);
        text.push_str(if i % 3 == 0 { "\n" } else { " " });
        i += 1;
    }
    let start = std::time::Instant::now();
    let ids = tokenizer.encode(&text, false).unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(!ids.is_empty());
    eprintln!(
        "text: encoded {:.1} MB into {} tokens in {:.3} s: {:.1} MB/s",
        text.len() as f64 / 1e6,
        ids.len(),
        secs,
        text.len() as f64 / 1e6 / secs
    );
}
