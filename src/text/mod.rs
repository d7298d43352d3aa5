//! Text in, text out: HuggingFace tokenizers and chat templates.
//!
//! [`Tokenizer::from_dir`] loads a checkpoint folder's `tokenizer.json` (any model the
//! HuggingFace `tokenizers` crate reads: byte-level BPE as in Llama 3 and Qwen, SentencePiece-like
//! BPE or Unigram with byte fallback as in Llama 2 and Mistral) and, when present, its
//! `tokenizer_config.json` (`chat_template`, `bos_token`, `eos_token`) or `chat_template.jinja`.
//! It then does what `transformers`' tokenizer does:
//!
//! - [`Tokenizer::encode`] / [`Tokenizer::decode`]: `tokenizer(text, add_special_tokens=…)` and
//!   `tokenizer.decode(ids, skip_special_tokens=…)`; ids past the vocabulary decode to nothing.
//! - [`Tokenizer::apply_chat_template`] / [`Tokenizer::encode_chat`]: the chat template rendered
//!   with the Jinja settings of `transformers` (`trim_blocks`, `lstrip_blocks`, loop controls,
//!   `raise_exception`, `strftime_now`, its `tojson`, Python string methods).
//! - [`Tokenizer::decode_stream`]: incremental decoding for streaming output; each piece is whole
//!   UTF-8 text and the pieces add up to [`Tokenizer::decode`] of all the ids.
//!
//! ```no_run
//! use burn_rope_pool::text::{ChatMessage, Tokenizer};
//!
//! let tokenizer = Tokenizer::from_dir("path/to/checkpoint")?;
//! let prompt = tokenizer.encode_chat(&[ChatMessage::new("user", "Hi!")], true)?;
//! let mut stream = tokenizer.decode_stream(true);
//! for id in prompt {
//!     if let Some(piece) = stream.step(id)? {
//!         print!("{piece}");
//!     }
//! }
//! # Ok::<(), burn_rope_pool::text::TextError>(())
//! ```

mod stream;
mod template;
mod tokenizer;

use std::path::PathBuf;

pub use stream::DecodeStream;
pub use tokenizer::Tokenizer;

/// One message of a chat, as the chat template sees it (`message['role']`,
/// `message['content']`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct ChatMessage {
    /// Who speaks: `system`, `user`, `assistant` or whatever else the template accepts.
    pub role: String,
    /// What they say.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Why loading a tokenizer, encoding, decoding or rendering a chat failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// A file could not be read (a missing folder or `tokenizer.json`, for one).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The `tokenizers` crate refused: a corrupt `tokenizer.json`, or an encode or decode error.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// `tokenizer_config.json` (or `chat_template.jinja`) is malformed.
    #[error("tokenizer config: {0}")]
    Config(String),
    /// A chat was asked of a tokenizer whose folder has no chat template.
    #[error(
        "the tokenizer has no chat template (no `chat_template` in tokenizer_config.json and no \
         chat_template.jinja)"
    )]
    NoChatTemplate,
    /// The chat template failed to compile or render; a template's own `raise_exception(msg)`
    /// puts `msg` here.
    #[error("chat template: {0}")]
    Template(String),
}
