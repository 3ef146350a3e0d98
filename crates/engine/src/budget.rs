//! Budgeted tokenization: read at most a budget's worth of a long text, so that the memory
//! and time an input costs follow its budget, not its length.
//!
//! A text longer than `budget x (most bytes one token covers)` holds more than `budget`
//! tokens, so only a prefix of it needs tokenizing. The prefix is cut where the tokenizer's
//! pieces cannot merge across the cut: before a word boundary (whitespace, punctuation, a
//! symbol, or a CJK character) that follows a letter or digit. In a run with no boundary
//! (base64, hex, unspaced CJK) it is cut before a letter or digit, and only the tokens that
//! end [`RUN_MARGIN`] bytes before the cut are kept. Each kind of cut is checked on probe
//! texts when a tokenizer is first used ([`Cutter::calibrate`]); a kind that fails the check
//! is never used, and texts that would need it are read whole.

use crate::backend::{BackendError, Token};

pub use crate::backend::Vocab;

/// Where each window starts and ends (own tokens, end exclusive): windows of `size` tokens,
/// each starting `size - overlap` after the last, until the input is covered. An input of
/// no tokens has one empty window.
pub fn windows(tokens: usize, size: usize, overlap: usize) -> Vec<(usize, usize)> {
    let size = size.max(1);
    let stride = size.saturating_sub(overlap).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    loop {
        let end = (start + size).min(tokens);
        out.push((start, end));
        if end >= tokens {
            return out;
        }
        start += stride;
    }
}

/// Bytes before a cut inside a run whose tokens are not kept.
pub const RUN_MARGIN: usize = 1024;

/// Bytes per token of ordinary text, for the first try at a prefix.
const TYPICAL_TOKEN_BYTES: usize = 8;

/// How far past the least prefix length a boundary is looked for before a run cut.
const BOUNDARY_SEARCH: usize = 4096;

/// A kind of cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutKind {
    Whitespace,
    Punctuation,
    Symbol,
    Cjk,
    /// Inside a run with no boundary, keeping tokens that end [`RUN_MARGIN`] bytes earlier.
    Run,
}

impl CutKind {
    pub const ALL: [CutKind; 5] = [
        CutKind::Whitespace,
        CutKind::Punctuation,
        CutKind::Symbol,
        CutKind::Cjk,
        CutKind::Run,
    ];
    pub fn name(self) -> &'static str {
        match self {
            CutKind::Whitespace => "whitespace",
            CutKind::Punctuation => "punctuation",
            CutKind::Symbol => "symbol",
            CutKind::Cjk => "cjk",
            CutKind::Run => "run",
        }
    }
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F)
}

/// The kind of boundary `c` is, if any.
fn boundary(c: char) -> Option<CutKind> {
    if c.is_whitespace() {
        Some(CutKind::Whitespace)
    } else if is_cjk(c) {
        Some(CutKind::Cjk)
    } else if c.is_ascii_punctuation() {
        if matches!(
            c,
            '+' | '='
                | '<'
                | '>'
                | '|'
                | '~'
                | '^'
                | '$'
                | '%'
                | '&'
                | '*'
                | '#'
                | '@'
                | '\\'
                | '/'
        ) {
            Some(CutKind::Symbol)
        } else {
            Some(CutKind::Punctuation)
        }
    } else if c.is_alphanumeric() {
        None
    } else {
        Some(CutKind::Symbol)
    }
}

/// What a budgeted read gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// A prefix of the whole text's tokens: all of them when `complete`, else more than the
    /// budget.
    pub tokens: Vec<Token>,
    pub complete: bool,
    /// The cut used, when the text was read in part.
    pub cut: Option<CutKind>,
}

/// A tokenizer's cut rules: which kinds passed the check, and the most bytes one token covers.
#[derive(Debug, Clone, PartialEq)]
pub struct Cutter {
    pub max_token_bytes: usize,
    pub enabled: Vec<CutKind>,
    /// The tokenizer covers every byte of a text (see [`Vocab::covers_text`]).
    pub covers_text: bool,
}

impl Cutter {
    /// Measure the vocabulary and check each kind of cut on probe texts.
    pub fn calibrate(backend: &dyn Vocab) -> Result<Cutter, BackendError> {
        let max_token_bytes = (0..backend.vocab_size() as Token)
            .map(|t| backend.token_bytes(t).len())
            .max()
            .unwrap_or(1)
            .max(1);
        let mut cutter = Cutter {
            max_token_bytes,
            enabled: Vec::new(),
            covers_text: backend.covers_text(),
        };
        for kind in CutKind::ALL {
            let probe = probe_text(kind, max_token_bytes);
            let trial = Cutter {
                max_token_bytes,
                enabled: vec![kind],
                covers_text: false,
            };
            // Several budgets, so the cuts land at several places of the probe.
            let whole = backend.tokenize_text(&probe)?;
            let mut ok = true;
            for budget in [24, 27, 31, 36] {
                let read = trial.read(backend, &probe, budget)?;
                ok &= read.cut == Some(kind)
                    && read.tokens.len() > budget
                    && whole.len() >= read.tokens.len()
                    && whole[..read.tokens.len()] == read.tokens[..];
            }
            if ok {
                cutter.enabled.push(kind);
            }
        }
        Ok(cutter)
    }

    /// The fewest tokens a text of `bytes` bytes has, known without tokenizing it.
    pub fn least_tokens(&self, bytes: usize) -> usize {
        if self.covers_text {
            bytes / self.max_token_bytes
        } else {
            0
        }
    }

    /// The least number of bytes that surely holds more than `budget` tokens.
    pub fn bytes_for(&self, budget: usize) -> usize {
        budget
            .saturating_add(1)
            .saturating_mul(self.max_token_bytes)
    }

    /// Tokenize `text` far enough to know its first `budget` tokens (all of them if it has no
    /// more). The tokens are a prefix of the whole text's tokens.
    pub fn read(
        &self,
        backend: &dyn Vocab,
        text: &str,
        budget: usize,
    ) -> Result<Read, BackendError> {
        // Try a prefix of typical token length first, then the bound that holds more than the
        // budget when every token covers at most `max_token_bytes`. A tokenizer whose unknown
        // token covers a whole long word can break that bound, so keep doubling until the
        // prefix holds more than the budget or is the whole text.
        let bound = self.bytes_for(budget);
        let mut least = budget
            .saturating_add(1)
            .saturating_mul(TYPICAL_TOKEN_BYTES)
            .min(bound);
        loop {
            let read = self.read_from(backend, text, least)?;
            if read.complete || read.tokens.len() > budget {
                return Ok(read);
            }
            least = if least < bound {
                bound
            } else {
                least.saturating_mul(2)
            };
        }
    }

    /// Tokenize a prefix of at least `least` bytes cut at a safe place (or the whole text).
    fn read_from(
        &self,
        backend: &dyn Vocab,
        text: &str,
        least: usize,
    ) -> Result<Read, BackendError> {
        let whole = |backend: &dyn Vocab| -> Result<Read, BackendError> {
            Ok(Read {
                tokens: backend.tokenize_text(text)?,
                complete: true,
                cut: None,
            })
        };
        if text.len() <= least {
            return whole(backend);
        }
        // A boundary after a letter or digit, at or after `least`.
        let mut prev_alnum = false;
        let start = floor_char_boundary(text, least.saturating_sub(8));
        let search_end = least.saturating_add(BOUNDARY_SEARCH);
        for (i, c) in text[start..].char_indices() {
            let at = start + i;
            if at > search_end {
                break;
            }
            if at >= least {
                if let Some(kind) = boundary(c) {
                    // Pieces may merge a word with what follows it only where the boundary
                    // follows a letter or digit; a CJK character is its own boundary.
                    if (prev_alnum || kind == CutKind::Cjk) && self.enabled.contains(&kind) {
                        return Ok(Read {
                            tokens: backend.tokenize_text(&text[..at])?,
                            complete: false,
                            cut: Some(kind),
                        });
                    }
                }
            }
            prev_alnum = c.is_alphanumeric() && !is_cjk(c);
        }
        // No usable boundary near: cut inside the run.
        if !self.enabled.contains(&CutKind::Run) {
            return whole(backend);
        }
        let mut cut = least.saturating_add(RUN_MARGIN);
        if cut >= text.len() {
            return whole(backend);
        }
        cut = floor_char_boundary(text, cut);
        let tokens = backend.tokenize_text(&text[..cut])?;
        let keep_until = cut - RUN_MARGIN;
        let mut end = 0usize;
        let mut kept = 0;
        for &t in &tokens {
            end += backend.token_bytes(t).len();
            if end > keep_until {
                break;
            }
            kept += 1;
        }
        let mut tokens = tokens;
        tokens.truncate(kept);
        Ok(Read {
            tokens,
            complete: false,
            cut: Some(CutKind::Run),
        })
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A text long enough to be cut with a budget of 24 tokens, whose only cuts are of `kind`.
pub fn probe_text(kind: CutKind, max_token_bytes: usize) -> String {
    let want = (40 * max_token_bytes + BOUNDARY_SEARCH + 2 * RUN_MARGIN).max(16384);
    let unit: String = match kind {
        CutKind::Whitespace => {
            "The quick brown fox jumps over the lazy dog again and again\n".into()
        }
        CutKind::Punctuation => "alpha,beta;gamma.delta:epsilon!zeta?eta,theta;".into(),
        CutKind::Symbol => "a1+b2=c3<d4>e5|f6~g7^h8&i9*j0#k1@l2\\m3/n4%o5$".into(),
        CutKind::Cjk => {
            "今天的天气很好我们一起去公园散步然后在湖边喝茶東京の桜は春に咲きます".into()
        }
        CutKind::Run => {
            // Base64-like and hex-like runs: letters and digits only.
            let mut s = String::new();
            let mut x: u32 = 0x2545_F491;
            let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
            for _ in 0..256 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                s.push(alphabet[(x % alphabet.len() as u32) as usize] as char);
            }
            s
        }
    };
    let mut s = String::with_capacity(want + unit.len());
    while s.len() < want {
        s.push_str(&unit);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_input_with_the_overlap() {
        assert_eq!(windows(0, 4, 1), vec![(0, 0)]);
        assert_eq!(windows(3, 4, 1), vec![(0, 3)]);
        assert_eq!(windows(10, 4, 1), vec![(0, 4), (3, 7), (6, 10)]);
        assert_eq!(windows(5, 4, 0), vec![(0, 4), (4, 5)]);
        // An overlap as large as the window still moves on.
        assert_eq!(windows(3, 2, 5), vec![(0, 2), (1, 3)]);
    }

    #[test]
    fn boundaries_by_kind() {
        assert_eq!(boundary(' '), Some(CutKind::Whitespace));
        assert_eq!(boundary(','), Some(CutKind::Punctuation));
        assert_eq!(boundary('='), Some(CutKind::Symbol));
        assert_eq!(boundary('€'), Some(CutKind::Symbol));
        assert_eq!(boundary('中'), Some(CutKind::Cjk));
        assert_eq!(boundary('の'), Some(CutKind::Cjk));
        assert_eq!(boundary('a'), None);
        assert_eq!(boundary('7'), None);
    }

    #[test]
    fn probes_hold_only_their_kind() {
        for kind in [CutKind::Punctuation, CutKind::Symbol, CutKind::Run] {
            let p = probe_text(kind, 64);
            for c in p.chars() {
                let b = boundary(c);
                assert!(b.is_none() || b == Some(kind), "{kind:?}: {c:?}");
            }
        }
    }
}
