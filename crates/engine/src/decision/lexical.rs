//! A text's character n-grams as a head's features: what a trained head reads where the
//! words themselves tell the answer (a jailbreak's persona and rule-breaking vocabulary),
//! over the whole text at once, with no backbone forward.
//!
//! The text is lowercased and split at white space; each word, with a space on either side,
//! gives its n-grams of 3, 4 and 5 characters (a word shorter than that gives itself once).
//! Each n-gram is hashed (64-bit FNV-1a of its UTF-8 bytes) into one of the head's buckets;
//! a bucket's value is `(1 + ln count) · idf`, and the vector is scaled to unit length. The
//! inverse document frequencies are the training texts' (`ln((1 + n) / (1 + df)) + 1`) and
//! travel with the head; their count is the number of buckets.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The n-gram sizes read.
const SIZES: std::ops::RangeInclusive<usize> = 3..=5;

/// What a lexical head reads besides its weights: each bucket's inverse document frequency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lexical {
    pub idf: Vec<f32>,
}

impl Lexical {
    /// The inverse document frequencies of `buckets` buckets over `texts`.
    pub fn fit<'a>(texts: impl IntoIterator<Item = &'a str>, buckets: usize) -> Lexical {
        let mut df = vec![0u32; buckets];
        let mut n = 0u32;
        for text in texts {
            n += 1;
            for b in counts(text, buckets).into_keys() {
                df[b] += 1;
            }
        }
        let idf = df
            .iter()
            .map(|&d| ((1.0 + f64::from(n)) / (1.0 + f64::from(d))).ln() as f32 + 1.0)
            .collect();
        Lexical { idf }
    }

    /// `text`'s features: one value per bucket, of unit length (all zeros for a text with no
    /// characters but white space).
    pub fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.idf.len()];
        for (b, c) in counts(text, self.idf.len()) {
            v[b] = (1.0 + (c as f32).ln()) * self.idf[b];
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }
}

/// How often each bucket's n-grams occur in `text`.
fn counts(text: &str, buckets: usize) -> HashMap<usize, u32> {
    let mut out = HashMap::new();
    if buckets == 0 {
        return out;
    }
    let lower = text.to_lowercase();
    let mut word = Vec::new();
    for w in lower.split_whitespace() {
        word.clear();
        word.push(' ');
        word.extend(w.chars());
        word.push(' ');
        for n in SIZES {
            if word.len() <= n {
                *out.entry(bucket(&word, buckets)).or_insert(0) += 1;
                break;
            }
            for gram in word.windows(n) {
                *out.entry(bucket(gram, buckets)).or_insert(0) += 1;
            }
        }
    }
    out
}

/// The bucket of one n-gram: FNV-1a over its UTF-8 bytes.
fn bucket(gram: &[char], buckets: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut utf8 = [0u8; 4];
    for c in gram {
        for byte in c.encode_utf8(&mut utf8).bytes() {
            h ^= u64::from(byte);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    (h % buckets as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_gives_its_padded_ngrams() {
        let grams = |text: &str| counts(text, 1 << 20).values().sum::<u32>();
        // " dan " (5 characters): three 3-grams, two 4-grams, one 5-gram.
        assert_eq!(grams("DAN"), 6);
        // " a " is shorter than every size but the first: itself, once.
        assert_eq!(grams("a"), 1);
        // Case and runs of white space do not matter.
        assert_eq!(
            counts("Stay  in\ncharacter", 4096),
            counts("stay in character", 4096)
        );
    }

    #[test]
    fn vectors_are_unit_length_and_weighted_by_rarity() {
        let lex = Lexical::fit(["ignore your rules", "ignore the noise", "ignore it"], 256);
        let v = lex.vector("ignore your rules");
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        assert!(lex.vector("   ").iter().all(|x| *x == 0.0));
        // " ig" is in every text, " yo" in one: the rarer n-gram weighs more.
        let common = bucket(&[' ', 'i', 'g'], 256);
        let rare = bucket(&[' ', 'y', 'o'], 256);
        assert!(lex.idf[rare] > lex.idf[common]);
    }
}
