//! [`Tokenizer`]: a checkpoint folder's `tokenizer.json`, its special tokens and chat template.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::stream::DecodeStream;
use super::template::{ChatTemplate, SpecialTokens};
use super::{ChatMessage, TextError};

/// A HuggingFace tokenizer with its chat template: encode, decode, stream and render chats as
/// `transformers` does.
///
/// `Send + Sync`: threads can share one (behind an `Arc`); each [`DecodeStream`] borrows it.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
    eos_token_id: Option<u32>,
    /// `None`: no template in the folder; `Some(Err)`: one that cannot be used (the reason).
    chat: Option<Result<ChatTemplate, String>>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_token", &self.special.bos)
            .field("eos_token", &self.special.eos)
            .field("eos_token_id", &self.eos_token_id)
            .field("has_chat_template", &self.has_chat_template())
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// Loads `tokenizer.json` from the folder `dir`, plus, when present,
    /// `tokenizer_config.json` (`chat_template`, `bos_token`, `eos_token`, `pad_token`,
    /// `unk_token`; each token a string or a `{"content": …}` object) and
    /// `chat_template.jinja` (which, as in `transformers`, wins over the config's template).
    ///
    /// Errors: [`TextError::Io`] for a missing folder or `tokenizer.json` (or any unreadable
    /// file), [`TextError::Tokenizer`] for a `tokenizer.json` the `tokenizers` crate refuses,
    /// [`TextError::Config`] for a malformed `tokenizer_config.json`. A chat template with a
    /// syntax error does not stop the load: [`Tokenizer::apply_chat_template`] reports it.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, TextError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(TextError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "not a folder (a tokenizer is loaded from a checkpoint folder)",
                ),
            });
        }
        let path = dir.join("tokenizer.json");
        let bytes = std::fs::read(&path).map_err(|source| TextError::Io {
            path: path.clone(),
            source,
        })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| TextError::Tokenizer(format!("{}: {e}", path.display())))?;

        let config_path = dir.join("tokenizer_config.json");
        let config = match read_optional(&config_path)? {
            Some(text) => Config::parse(&text)
                .map_err(|e| TextError::Config(format!("{}: {e}", config_path.display())))?,
            None => Config::default(),
        };
        let jinja_path = dir.join("chat_template.jinja");
        let source = match read_optional(&jinja_path)? {
            Some(text) => Some(Ok(text)),
            None => config.chat_template,
        };
        let chat = source
            .map(|source| source.and_then(|s| ChatTemplate::new(s).map_err(|e| e.to_string())));
        let eos_token_id = config
            .special
            .eos
            .as_deref()
            .and_then(|token| inner.token_to_id(token));
        Ok(Self {
            inner,
            special: config.special,
            eos_token_id,
            chat,
        })
    }

    /// `tokenizer(text, add_special_tokens=…)["input_ids"]`: the ids of `text`, with the
    /// post-processor's special tokens (a `<|begin_of_text|>`, say) when `add_special_tokens`.
    /// Special tokens written in `text` are recognized as such.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TextError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(|e| TextError::Tokenizer(e.to_string()))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// `tokenizer.decode(ids, skip_special_tokens=…)`. Ids past the tokenizer's vocabulary
    /// decode to nothing (as in `transformers`); bytes that are not valid UTF-8 decode to
    /// U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TextError> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| TextError::Tokenizer(e.to_string()))
    }

    /// The chat rendered by the chat template (`apply_chat_template(messages, tokenize=False,
    /// add_generation_prompt=…)`): the template sees `messages`, `add_generation_prompt`,
    /// `bos_token`, `eos_token` (and `pad_token`, `unk_token` where configured), `tools` and
    /// `documents` as `none`.
    ///
    /// Errors: [`TextError::NoChatTemplate`]; [`TextError::Template`] for a template that does
    /// not compile or fails, with the message of its `raise_exception(…)`.
    pub fn apply_chat_template(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TextError> {
        match &self.chat {
            None => Err(TextError::NoChatTemplate),
            Some(Err(reason)) => Err(TextError::Template(reason.clone())),
            Some(Ok(template)) => template.render(messages, add_generation_prompt, &self.special),
        }
    }

    /// `apply_chat_template(messages, tokenize=True, add_generation_prompt=…)`: the rendered
    /// chat encoded without adding special tokens (the template writes its own).
    pub fn encode_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, TextError> {
        let text = self.apply_chat_template(messages, add_generation_prompt)?;
        self.encode(&text, false)
    }

    /// The id of `tokenizer_config.json`'s `eos_token`, if configured and in the vocabulary.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.eos_token_id
    }

    /// `tokenizer_config.json`'s `bos_token`, if any.
    pub fn bos_token(&self) -> Option<&str> {
        self.special.bos.as_deref()
    }

    /// `tokenizer_config.json`'s `eos_token`, if any.
    pub fn eos_token(&self) -> Option<&str> {
        self.special.eos.as_deref()
    }

    /// The number of tokens, added tokens included (`len(tokenizer)`).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `token` (a vocabulary entry or an added token), if it has one.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Whether the folder had a chat template (one that may still fail to compile).
    pub fn has_chat_template(&self) -> bool {
        self.chat.is_some()
    }

    /// Incremental decoding of ids as they are generated; see [`DecodeStream`].
    pub fn decode_stream(&self, skip_special_tokens: bool) -> DecodeStream<'_> {
        DecodeStream::new(self, skip_special_tokens)
    }

    /// The `tokenizers` crate's tokenizer underneath.
    pub(crate) fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

/// A file's text, `None` if it does not exist.
fn read_optional(path: &PathBuf) -> Result<Option<String>, TextError> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| TextError::Config(format!("{}: not UTF-8 text", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TextError::Io {
            path: path.clone(),
            source,
        }),
    }
}

/// What is read of `tokenizer_config.json`.
#[derive(Default)]
struct Config {
    special: SpecialTokens,
    /// `Err`: a template entry that cannot be used, with the reason.
    chat_template: Option<Result<String, String>>,
}

impl Config {
    fn parse(text: &str) -> Result<Self, String> {
        let json: Json = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let Json::Object(map) = json else {
            return Err("not a JSON object".into());
        };
        let token = |name: &str| -> Result<Option<String>, String> {
            match map.get(name) {
                None | Some(Json::Null) => Ok(None),
                Some(Json::String(s)) => Ok(Some(s.clone())),
                Some(Json::Object(o)) => match o.get("content") {
                    Some(Json::String(s)) => Ok(Some(s.clone())),
                    _ => Err(format!("`{name}` has no string `content`")),
                },
                Some(other) => Err(format!(
                    "`{name}` must be a string or an object with `content`, not {}",
                    kind(other)
                )),
            }
        };
        let special = SpecialTokens {
            bos: token("bos_token")?,
            eos: token("eos_token")?,
            pad: token("pad_token")?,
            unk: token("unk_token")?,
        };
        let chat_template = match map.get("chat_template") {
            None | Some(Json::Null) => None,
            Some(Json::String(s)) => Some(Ok(s.clone())),
            // The older form: a list of named templates; `transformers` uses `default`.
            Some(Json::Array(list)) => {
                let mut default = None;
                let mut names = Vec::new();
                for entry in list {
                    match (entry.get("name"), entry.get("template")) {
                        (Some(Json::String(name)), Some(Json::String(template))) => {
                            if name == "default" {
                                default = Some(template.clone());
                            }
                            names.push(name.clone());
                        }
                        _ => {
                            return Err(
                                "`chat_template` list entries must be {\"name\", \"template\"} \
                                 strings"
                                    .into(),
                            );
                        }
                    }
                }
                Some(default.ok_or_else(|| {
                    format!("the config lists chat templates {names:?} but none named `default`")
                }))
            }
            Some(other) => {
                return Err(format!(
                    "`chat_template` must be a string or a list of named templates, not {}",
                    kind(other)
                ));
            }
        };
        Ok(Self {
            special,
            chat_template,
        })
    }
}

/// A JSON value's type, for error messages.
fn kind(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}
