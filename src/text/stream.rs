//! [`DecodeStream`]: incremental decoding of generated ids.

use super::{TextError, Tokenizer};

/// Incremental decoding: feed ids as they are generated, get the new text as soon as it is
/// whole UTF-8 text (a character split over several tokens comes out once, whole).
/// Concatenating every piece gives [`Tokenizer::decode`] of all the ids (with
/// [`DecodeStream::finish`]'s rest, which is only ever non-empty when the ids end inside a
/// character, where `decode` writes U+FFFD).
///
/// This is the approach of HuggingFace's text-generation-inference and of mistral.rs: decode a
/// window of the ids already shown plus the new ones, and emit what the window's text has past
/// the text of the ids already shown, once it does not end in U+FFFD. Decoding with context
/// keeps what a token means in context: a SentencePiece `▁word` keeps its space, a byte-level
/// or byte-fallback character split over tokens is only shown once complete.
///
/// Ids past the vocabulary, and special tokens when skipping them, decode to nothing (they are
/// not kept: `decode` drops them before its decoder runs).
#[derive(Debug)]
pub struct DecodeStream<'a> {
    tokenizer: &'a Tokenizer,
    skip_special_tokens: bool,
    /// The window: `ids[..read]` were shown (their text is `shown`), `ids[read..]` not yet.
    ids: Vec<u32>,
    read: usize,
    /// `decode(ids[..read])`.
    shown: String,
}

impl<'a> DecodeStream<'a> {
    pub(crate) fn new(tokenizer: &'a Tokenizer, skip_special_tokens: bool) -> Self {
        Self {
            tokenizer,
            skip_special_tokens,
            ids: Vec::new(),
            read: 0,
            shown: String::new(),
        }
    }

    /// Adds the next id; returns the new text, if any is complete yet.
    pub fn step(&mut self, id: u32) -> Result<Option<String>, TextError> {
        let inner = self.tokenizer.inner();
        let Some(token) = inner.id_to_token(id) else {
            return Ok(None); // past the vocabulary
        };
        if self.skip_special_tokens && inner.get_added_vocabulary().is_special_token(&token) {
            return Ok(None);
        }
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        if text.len() <= self.shown.len() || text.ends_with('\u{FFFD}') {
            return Ok(None);
        }
        self.emit(text).map(Some)
    }

    /// What is left once the ids end: the text of trailing ids that do not complete a character
    /// (U+FFFD, as in [`Tokenizer::decode`]), or `None`. The stream is then empty, as if new.
    pub fn finish(&mut self) -> Result<Option<String>, TextError> {
        let text = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        let piece = if text.len() > self.shown.len() {
            Some(self.emit(text)?)
        } else {
            None
        };
        self.ids.clear();
        self.read = 0;
        self.shown.clear();
        Ok(piece)
    }

    /// Returns `text` (the window's text) past what was shown, and slides the window: the ids
    /// shown before are dropped, those just shown become the context of the next ones.
    fn emit(&mut self, text: String) -> Result<String, TextError> {
        let start = if text.starts_with(self.shown.as_str()) {
            self.shown.len()
        } else {
            // No decoder of the `tokenizers` crate rewrites earlier text, but never panic on
            // one that does: take the text past the longest common prefix.
            common_prefix(&self.shown, &text)
        };
        let piece = text[start..].to_string();
        self.ids.drain(..self.read);
        self.read = self.ids.len();
        self.shown = self.tokenizer.decode(&self.ids, self.skip_special_tokens)?;
        Ok(piece)
    }
}

/// The length of the longest common prefix of `a` and `b`, at a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}
