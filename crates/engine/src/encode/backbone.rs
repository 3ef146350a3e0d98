//! An encoder as the backbone of trained decision heads: a [`DirectBackend`] that reads no
//! question itself and gives, for each read of a state (one window), the encoder's pooled
//! vector. A package `vllm-srun adapt` trained on it (`decision_adapters.json`) answers each
//! choice, noul or score question it has a head for from that vector; any other question is
//! refused. A span head reads each word's features ([`Backbone::word_rows`]): the mean of its
//! tokens' last hidden states, each token read from the window that gives it the most
//! context, and the shape of the word and its neighbours as written (the tokenizer may fold
//! case and drop spacing, which names and numbers are told by).

use std::borrow::Cow;
use std::sync::Arc;

use crate::backend::Vocab;
use crate::backend::{BackendError, BackendInfo, DirectBackend, DirectQuestion, Token, WordRows};
use crate::budget::windows;

use super::tagger::{best_window, words};
use super::{Encoder, TagOverflow};

/// Shape features of one word ([`shape`]).
pub const SHAPE: usize = 24;

/// An encoder read for its state vectors.
pub struct Backbone {
    encoder: Arc<dyn Encoder>,
    info: BackendInfo,
}

impl Backbone {
    /// `max_sequences`: how many inputs' worth of tokens one request may read (its windows).
    pub fn new(encoder: Arc<dyn Encoder>, threads: usize, max_sequences: usize) -> Backbone {
        let e = encoder.info();
        let (head, tail) = encoder.special();
        let own = e.max_tokens.saturating_sub(head.len() + tail.len()).max(1);
        let info = BackendInfo {
            engine: e.engine.clone(),
            device: e.device.clone(),
            dtype: e.dtype.clone(),
            context_tokens: own,
            max_sequences,
            trained_context: own,
            threads,
            flash_attention: None,
            micro_batch_tokens: None,
            flash_attention_probe: None,
            prefix_cache_bytes: None,
            hidden_size: Some(e.dims),
        };
        Backbone { encoder, info }
    }

    /// The state's text as the heads read it: a text state as it is (trimmed), an object
    /// state as one `key: value` line per member in its order (text values as they are).
    pub fn render(state: &serde_json::Value) -> Cow<'_, str> {
        match state {
            serde_json::Value::String(s) => Cow::Borrowed(s.trim()),
            serde_json::Value::Null => Cow::Borrowed(""),
            serde_json::Value::Object(map) => Cow::Owned(
                map.iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => format!("{k}: {}", s.trim()),
                        v => format!("{k}: {v}"),
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            v => Cow::Owned(v.to_string()),
        }
    }

    /// The vectors of several reads at once (each a window of state tokens, no special
    /// tokens), in one batch of the encoder.
    pub fn vectors(&self, reads: &[&[Token]]) -> Result<Vec<Vec<f32>>, BackendError> {
        let (head, tail) = self.encoder.special();
        let room = self.info.trained_context;
        let batch: Vec<Vec<Token>> = reads
            .iter()
            .map(|t| {
                let own = &t[..t.len().min(room)];
                let mut v = Vec::with_capacity(head.len() + own.len() + tail.len());
                v.extend_from_slice(&head);
                v.extend_from_slice(own);
                v.extend_from_slice(&tail);
                v
            })
            .collect();
        self.encoder.embed(&batch)
    }
}

impl Backbone {
    /// How many features a span head reads per word: the hidden states of the word, the word
    /// before it and the word after it (zeros at the text's ends), then their shapes.
    pub fn word_width(&self) -> usize {
        3 * (self.encoder.info().dims + SHAPE)
    }

    /// `text`'s words with their features, reading at most `budget` of its tokens, in windows
    /// of one input overlapping as a token head's do; every window in one encoder batch.
    pub fn word_rows(&self, text: &str, budget: usize) -> Result<WordRows, BackendError> {
        let w = self.encoder.words(text)?;
        let truncated = w.tokens.len() > budget;
        let n = w.tokens.len().min(budget);
        let room = self.info.trained_context;
        let spans = windows(n, room, TagOverflow::overlap(room));
        let (head, tail) = self.encoder.special();
        let batch: Vec<Vec<Token>> = spans
            .iter()
            .map(|&(s, e)| [&head[..], &w.tokens[s..e], &tail[..]].concat())
            .collect();
        let states = if n == 0 {
            Vec::new()
        } else {
            self.encoder.token_states(&batch)?
        };
        let pick = best_window(n, &spans);
        let mut rows: Vec<&[f32]> = Vec::with_capacity(n);
        for (i, &win) in pick.iter().enumerate() {
            let row = states
                .get(win)
                .and_then(|st| st.get(head.len() + i - spans[win].0))
                .ok_or_else(|| BackendError::Forward("the encoder gave too few states".into()))?;
            rows.push(row);
        }
        let found = words(&w.offsets[..n], &w.words[..n], &rows);
        let ranges: Vec<(usize, usize)> = found.iter().map(|w| (w.start, w.end)).collect();
        let chars: Vec<char> = text.chars().collect();
        let shapes: Vec<[f32; SHAPE]> = (0..ranges.len())
            .map(|i| shape(&chars, &ranges, i))
            .collect();
        let none = [0.0; SHAPE];
        let dims = self.encoder.info().dims;
        let zeros = vec![0.0; dims];
        let hidden = |i: Option<usize>| i.and_then(|i| found.get(i)).map_or(&zeros, |w| &w.probs);
        let shaped = |i: Option<usize>| i.and_then(|i| shapes.get(i)).unwrap_or(&none);
        let rows = (0..found.len())
            .map(|i| {
                let around = [i.checked_sub(1), Some(i), Some(i + 1)];
                let mut row = Vec::with_capacity(3 * (dims + SHAPE));
                for at in around {
                    row.extend_from_slice(hidden(at));
                }
                for at in around {
                    row.extend_from_slice(shaped(at));
                }
                row
            })
            .collect();
        Ok(WordRows {
            ranges,
            rows,
            tokens: n + spans.len() * (head.len() + tail.len()),
            truncated,
        })
    }
}

/// The shape of word `i` as written: case, digits, the symbols personal data is written
/// with, its length, whether it is glued to the words beside it (an address, a number in
/// parts) or starts a line, and the form of the chunk it stands in ([`chunk`]).
fn shape(chars: &[char], ranges: &[(usize, usize)], i: usize) -> [f32; SHAPE] {
    let (s, e) = ranges[i];
    let word = &chars[s.min(chars.len())..e.min(chars.len())];
    let first = word.first().copied().unwrap_or(' ');
    let letters = word.iter().filter(|c| c.is_alphabetic()).count();
    let digits = word.iter().filter(|c| c.is_numeric()).count();
    let upper = word.iter().filter(|c| c.is_uppercase()).count();
    let is = |c: char| f32::from(u8::from(word.len() == 1 && first == c));
    let between = |a: usize, b: usize| &chars[a.min(chars.len())..b.min(chars.len())];
    let glued_before = i > 0 && between(ranges[i - 1].1, s).is_empty();
    let glued_after = ranges
        .get(i + 1)
        .is_some_and(|n| between(e, n.0).is_empty());
    let line_start = i == 0 || between(ranges[i - 1].1, s).contains(&'\n');
    let flag = |b: bool| f32::from(u8::from(b));
    let c = chunk(chars, s, e);
    [
        flag(first.is_uppercase()),
        flag(letters > 1 && upper == letters),
        flag(digits > 0),
        flag(!word.is_empty() && digits == word.len()),
        flag(letters + digits == 0),
        flag(glued_before),
        flag(glued_after),
        flag(line_start),
        is('@'),
        is('.'),
        is(':'),
        is('/'),
        is('-'),
        is('+'),
        (word.len() as f32 / 10.0).min(1.0),
        (digits as f32 / 16.0).min(1.0),
        c.ipv4,
        c.ipv6,
        c.email,
        c.url,
        c.iban_start,
        c.mixed,
        c.digits,
        c.length,
    ]
}

/// The form of the written chunk (the run of characters between spaces, its closing marks
/// left out) that a word stands in: what an address or a number is told by as a whole.
struct Chunk {
    ipv4: f32,
    ipv6: f32,
    email: f32,
    url: f32,
    /// Two letters then two digits, as an IBAN starts.
    iban_start: f32,
    /// Letters and digits both.
    mixed: f32,
    /// Its digits, out of 20.
    digits: f32,
    /// Its characters, out of 30.
    length: f32,
}

fn chunk(chars: &[char], s: usize, e: usize) -> Chunk {
    let mut a = s.min(chars.len());
    while a > 0 && !chars[a - 1].is_whitespace() {
        a -= 1;
    }
    let mut b = e.min(chars.len()).max(a);
    while b < chars.len() && !chars[b].is_whitespace() {
        b += 1;
    }
    while b > a && matches!(chars[b - 1], '.' | ',' | ';' | ')' | '!' | '?' | '"' | '\'') {
        b -= 1;
    }
    let c = &chars[a..b];
    let text: String = c.iter().collect();
    let digits = c.iter().filter(|x| x.is_ascii_digit()).count();
    let letters = c.iter().filter(|x| x.is_alphabetic()).count();
    let parts: Vec<&str> = text.split('.').collect();
    let ipv4 = parts.len() == 4
        && parts
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.chars().all(|x| x.is_ascii_digit()));
    let ipv6 =
        text.matches(':').count() >= 2 && c.iter().all(|x| x.is_ascii_hexdigit() || *x == ':');
    let email = text
        .split_once('@')
        .is_some_and(|(user, host)| !user.is_empty() && host.contains('.'));
    let url = text.contains("://") || text.starts_with("www.");
    let iban_start = c.len() >= 4
        && c[..2].iter().all(|x| x.is_ascii_alphabetic())
        && c[2..4].iter().all(|x| x.is_ascii_digit());
    let flag = |b: bool| f32::from(u8::from(b));
    Chunk {
        ipv4: flag(ipv4),
        ipv6: flag(ipv6),
        email: flag(email),
        url: flag(url),
        iban_start: flag(iban_start),
        mixed: flag(letters > 0 && digits > 0),
        digits: (digits as f32 / 20.0).min(1.0),
        length: (c.len() as f32 / 30.0).min(1.0),
    }
}

impl Vocab for Backbone {
    fn tokenize_text(&self, text: &str) -> Result<Vec<Token>, BackendError> {
        self.encoder.tokenize_text(text)
    }

    fn token_bytes(&self, token: Token) -> Vec<u8> {
        self.encoder.token_bytes(token)
    }

    fn vocab_size(&self) -> usize {
        self.encoder.vocab_size()
    }
}

impl DirectBackend for Backbone {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn render_state<'a>(&self, state: &'a serde_json::Value) -> Cow<'a, str> {
        Backbone::render(state)
    }

    fn noul_outcomes(&self) -> (&str, &str) {
        ("yes", "no")
    }

    fn answer(
        &self,
        _text: &str,
        _tokens: &[Token],
        _questions: &[&DirectQuestion],
    ) -> Result<Vec<Vec<f32>>, BackendError> {
        Err(BackendError::Forward(
            "a backbone answers only through its trained heads".into(),
        ))
    }

    fn reads_questions(&self) -> bool {
        false
    }

    fn features(&self, tokens: &[Token]) -> Result<Option<Vec<f32>>, BackendError> {
        Ok(self.vectors(&[tokens])?.into_iter().next())
    }

    fn word_rows(&self, text: &str, budget: usize) -> Result<Option<WordRows>, BackendError> {
        Backbone::word_rows(self, text, budget).map(Some)
    }
}
