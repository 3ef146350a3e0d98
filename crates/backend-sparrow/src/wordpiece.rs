//! BERT uncased WordPiece for ASCII text without allocation per character: the same pieces as
//! the `tokenizers` pipeline (BertNormalizer, BertPreTokenizer, WordPiece) that reads every
//! other text, checked against it in the tests. Short texts are most of a decision model's
//! work (instructions, option names), and the general pipeline's alignment bookkeeping costs
//! several times the forward on them.

use std::collections::HashMap;

/// Characters of a word longer than this read as one unknown token.
const MAX_WORD_CHARS: usize = 100;

pub(crate) struct AsciiWordPiece {
    vocab: HashMap<String, u32>,
    /// Each id's piece.
    pieces: Vec<String>,
    unk: u32,
}

fn is_punct(b: u8) -> bool {
    matches!(b, 33..=47 | 58..=64 | 91..=96 | 123..=126)
}

impl AsciiWordPiece {
    pub fn new(vocab: HashMap<String, u32>) -> Option<AsciiWordPiece> {
        let unk = *vocab.get("[UNK]")?;
        let mut pieces = vec![String::new(); vocab.values().max().map_or(0, |m| *m as usize + 1)];
        for (p, &id) in &vocab {
            pieces[id as usize] = p.clone();
        }
        Some(AsciiWordPiece { vocab, pieces, unk })
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
        if word.len() > MAX_WORD_CHARS {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The same tokens as the general `tokenizers` pipeline on random ASCII texts (letters,
    /// digits, punctuation, every control character, long words).
    #[test]
    fn ascii_pieces_equal_the_general_pipeline() {
        let pieces = [
            "[PAD]", "[UNK]", "the", "cat", "##s", "sat", "on", "mat", "un", "##believ", "##able",
            "a", "##b", "b", "c", "1", "2", "##3", "!", ",", ".", "'", "-", "(", ")", "#", "@",
            "x", "##x", "hello", "world", "##ing", "go",
        ];
        let vocab: HashMap<String, u32> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.to_string(), i as u32))
            .collect();
        let general = crate::wordpiece_pipeline(
            std::path::Path::new("test"),
            &serde_json::to_value(&vocab).unwrap(),
        )
        .unwrap();
        let fast = AsciiWordPiece::new(vocab).unwrap();
        let alphabet: Vec<u8> = (0u8..128).collect();
        let words = [
            "the",
            "cats",
            "unbelievable",
            "going",
            "hello",
            "World",
            "ab",
            "xxx",
            "123",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..3000 {
            let mut text = String::new();
            for _ in 0..(next() % 24) {
                match next() % 4 {
                    0 => text.push(alphabet[(next() % 128) as usize] as char),
                    1 => text.push(' '),
                    _ => text.push_str(words[(next() % words.len() as u64) as usize]),
                }
            }
            if i % 100 == 0 {
                text.push_str(&"x".repeat(95 + (i / 100) % 10));
            }
            let want = general
                .encode(text.as_str(), false)
                .unwrap()
                .get_ids()
                .to_vec();
            assert_eq!(fast.encode(&text), Some(want), "{text:?}");
        }
        assert_eq!(fast.encode("caf\u{e9}"), None);
    }
}
