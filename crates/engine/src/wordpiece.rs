//! BERT uncased WordPiece for ASCII text without allocation per character: the same pieces as
//! the `tokenizers` pipeline (BertNormalizer with lowercasing, BertPreTokenizer, WordPiece with
//! `##` continuations) that reads every other text; the backends that use it check that
//! against their own pipeline (`backend-sparrow`'s tests, `backend-candle` at load). Short
//! texts are most of a decision model's work (instructions, option names), and the general
//! pipeline's alignment bookkeeping costs several times the forward on them; on a long state
//! it costs milliseconds an n-gram head does not.

use std::collections::HashMap;

pub struct AsciiWordPiece {
    vocab: HashMap<String, u32>,
    /// Each id's piece.
    pieces: Vec<String>,
    unk: u32,
    /// Characters of a word longer than this read as one unknown token.
    max_word_chars: usize,
}

fn is_punct(b: u8) -> bool {
    matches!(b, 33..=47 | 58..=64 | 91..=96 | 123..=126)
}

impl AsciiWordPiece {
    /// The pieces of `vocab`, `[UNK]` for unknown words, words of more than 100 characters
    /// unknown (`max_input_chars_per_word`'s usual value; [`AsciiWordPiece::max_word_chars`]).
    pub fn new(vocab: HashMap<String, u32>) -> Option<AsciiWordPiece> {
        Self::with_unknown(vocab, "[UNK]")
    }

    /// The pieces of `vocab` with `unk` for unknown words.
    pub fn with_unknown(vocab: HashMap<String, u32>, unk: &str) -> Option<AsciiWordPiece> {
        let unk = *vocab.get(unk)?;
        let mut pieces = vec![String::new(); vocab.values().max().map_or(0, |m| *m as usize + 1)];
        for (p, &id) in &vocab {
            pieces[id as usize] = p.clone();
        }
        Some(AsciiWordPiece {
            vocab,
            pieces,
            unk,
            max_word_chars: 100,
        })
    }

    /// Words of more than `chars` characters read as one unknown token.
    pub fn max_word_chars(mut self, chars: usize) -> AsciiWordPiece {
        self.max_word_chars = chars;
        self
    }

    /// A token's text without its continuation mark.
    pub fn piece(&self, id: u32) -> &str {
        let p = self.pieces.get(id as usize).map_or("", String::as_str);
        p.strip_prefix("##").unwrap_or(p)
    }

    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// The tokens of `text`, or `None` when it is not ASCII (the general pipeline reads it).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        if !text.is_ascii() {
            return None;
        }
        let mut out = Vec::with_capacity(text.len() / 4 + 1);
        let mut word = String::with_capacity(32);
        let mut piece = String::with_capacity(34);
        for &b in text.as_bytes() {
            // Control characters are dropped; whitespace ends a word; punctuation is a word.
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.word(&word, &mut piece, &mut out);
                word.clear();
            } else if b < 0x20 || b == 0x7f {
                continue;
            } else if is_punct(b) {
                self.word(&word, &mut piece, &mut out);
                word.clear();
                word.push(b as char);
                self.word(&word, &mut piece, &mut out);
                word.clear();
            } else {
                word.push(b.to_ascii_lowercase() as char);
            }
        }
        self.word(&word, &mut piece, &mut out);
        Some(out)
    }

    /// Greedy longest-match-first pieces of one word (`##` before every piece but the first).
    fn word(&self, word: &str, piece: &mut String, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if word.len() > self.max_word_chars {
            out.push(self.unk);
            return;
        }
        let first = out.len();
        let mut start = 0;
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[start..end]);
                if let Some(&id) = self.vocab.get(piece.as_str()) {
                    found = Some(id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(first);
                    out.push(self.unk);
                    return;
                }
            }
        }
    }
}
