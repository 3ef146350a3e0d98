//! Token-classification heads as span heads: windows over a long input, one probability row
//! per token chosen from the window that gives it the most context, word-level tags, and
//! spans merged from BIO (or BIOES) tags with code-point offsets.
//!
//! Pure functions: the encoder worker produces the rows, [`super::EncoderModel::tag`]
//! wires them together.

use protocol::SpanFound;

/// For each token, the window whose row to use: the one where the token is farthest from
/// an edge (most context on its nearer side); the earlier window on a tie.
pub fn best_window(tokens: usize, windows: &[(usize, usize)]) -> Vec<usize> {
    (0..tokens)
        .map(|i| {
            let mut best = (0, None);
            for (w, &(s, e)) in windows.iter().enumerate() {
                if i < s || i >= e {
                    continue;
                }
                let room = (i - s).min(e - 1 - i);
                if best.1.is_none() || room > best.0 {
                    best = (room, Some(w));
                }
            }
            best.1.unwrap_or(0)
        })
        .collect()
}

/// A tag's kind and the entity type it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag<'a> {
    Outside,
    Begin(&'a str),
    Inside(&'a str),
    End(&'a str),
    Single(&'a str),
}

fn parse_tag(label: &str) -> Tag<'_> {
    if label == "O" {
        return Tag::Outside;
    }
    let split = |p: char| {
        label
            .strip_prefix(p)
            .and_then(|r| r.strip_prefix(['-', '_']))
    };
    if let Some(t) = split('B') {
        Tag::Begin(t)
    } else if let Some(t) = split('I') {
        Tag::Inside(t)
    } else if let Some(t) = split('E').or_else(|| split('L')) {
        Tag::End(t)
    } else if let Some(t) = split('S').or_else(|| split('U')) {
        Tag::Single(t)
    } else {
        // A label without a prefix: consecutive words of it are one span.
        Tag::Inside(label)
    }
}

/// One word of the input: its code-point range and its label probabilities (the mean of its
/// tokens' rows).
#[derive(Debug, Clone, PartialEq)]
pub struct Word {
    pub start: usize,
    pub end: usize,
    pub probs: Vec<f32>,
}

/// Group tokens into words (tokens of one word id that follow each other; a token without a
/// word id, or with an empty range, is left out) and average their rows.
pub fn words(offsets: &[(usize, usize)], word_ids: &[Option<u32>], rows: &[&[f32]]) -> Vec<Word> {
    let mut out: Vec<(Word, usize, Option<u32>)> = Vec::new();
    for ((&(s, e), &w), row) in offsets.iter().zip(word_ids).zip(rows) {
        if w.is_none() || e <= s {
            continue;
        }
        match out.last_mut() {
            Some((word, n, id)) if *id == w => {
                word.end = word.end.max(e);
                for (a, b) in word.probs.iter_mut().zip(row.iter()) {
                    *a += b;
                }
                *n += 1;
            }
            _ => out.push((
                Word {
                    start: s,
                    end: e,
                    probs: row.to_vec(),
                },
                1,
                w,
            )),
        }
    }
    out.into_iter()
        .map(|(mut word, n, _)| {
            for p in &mut word.probs {
                *p /= n as f32;
            }
            word
        })
        .collect()
}

/// Spans from word tags: each word takes its most probable tag (the first on a tie); `B`
/// (and `S`) start a span, `I` (and `E`) continue one of the same type or start one, `O`
/// ends it, `E` and `S` end it after their word. A span reaches from its first word's start
/// to its last word's end; its probability is the mean of its words' tag probabilities.
pub fn merge(labels: &[String], words: &[Word], text: &str) -> Vec<SpanFound> {
    struct Open<'a> {
        kind: &'a str,
        start: usize,
        end: usize,
        sum: f64,
        n: usize,
    }
    let chars: Vec<char> = text.chars().collect();
    let mut spans = Vec::new();
    let mut open: Option<Open> = None;
    let close = |o: Open, spans: &mut Vec<SpanFound>| {
        let end = o.end.min(chars.len());
        let start = o.start.min(end);
        spans.push(SpanFound {
            label: o.kind.to_string(),
            start,
            end,
            text: chars[start..end].iter().collect(),
            probability: o.sum / o.n as f64,
        });
    };
    for w in words {
        let Some((best, p)) =
            w.probs
                .iter()
                .enumerate()
                .fold(None, |acc: Option<(usize, f32)>, (i, &p)| match acc {
                    Some((_, q)) if q >= p => acc,
                    _ => Some((i, p)),
                })
        else {
            continue;
        };
        let tag = labels.get(best).map_or(Tag::Outside, |l| parse_tag(l));
        let (kind, starts, ends) = match tag {
            Tag::Outside => {
                if let Some(o) = open.take() {
                    close(o, &mut spans);
                }
                continue;
            }
            Tag::Begin(k) => (k, true, false),
            Tag::Inside(k) => (k, false, false),
            Tag::End(k) => (k, false, true),
            Tag::Single(k) => (k, true, true),
        };
        let continues = !starts && open.as_ref().is_some_and(|o| o.kind == kind);
        if continues {
            if let Some(o) = open.as_mut() {
                o.end = w.end;
                o.sum += f64::from(p);
                o.n += 1;
            }
        } else {
            if let Some(o) = open.take() {
                close(o, &mut spans);
            }
            open = Some(Open {
                kind,
                start: w.start,
                end: w.end,
                sum: f64::from(p),
                n: 1,
            });
        }
        if ends {
            if let Some(o) = open.take() {
                close(o, &mut spans);
            }
        }
    }
    if let Some(o) = open.take() {
        close(o, &mut spans);
    }
    spans
}

/// The entity types a head's tags name, in the order they first appear.
pub fn entity_types(labels: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in labels {
        let kind = match parse_tag(l) {
            Tag::Outside => continue,
            Tag::Begin(k) | Tag::Inside(k) | Tag::End(k) | Tag::Single(k) => k,
        };
        if !out.iter().any(|o| o == kind) {
            out.push(kind.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::windows;

    fn labels(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    fn word(start: usize, end: usize, probs: &[f32]) -> Word {
        Word {
            start,
            end,
            probs: probs.to_vec(),
        }
    }

    #[test]
    fn each_token_reads_the_window_that_centres_it() {
        let w = windows(10, 4, 2); // (0,4) (2,6) (4,8) (6,10)
        assert_eq!(best_window(10, &w), vec![0, 0, 0, 1, 1, 2, 2, 3, 3, 3]);
    }

    #[test]
    fn words_average_their_tokens() {
        let rows: Vec<&[f32]> = vec![&[1.0, 0.0], &[0.0, 1.0], &[0.5, 0.5], &[0.2, 0.8]];
        let w = words(
            &[(0, 0), (0, 3), (3, 5), (6, 8)],
            &[None, Some(0), Some(0), Some(1)],
            &rows,
        );
        assert_eq!(w, vec![word(0, 5, &[0.25, 0.75]), word(6, 8, &[0.2, 0.8])]);
    }

    #[test]
    fn bio_tags_merge_into_spans_with_code_point_offsets() {
        let l = labels(&["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]);
        let text = "🙂 東京 Tom Baker met Ann in Oslo";
        let o = [0.9, 0.0, 0.0, 0.0, 0.0];
        let ws = vec![
            word(0, 1, &o),
            word(2, 4, &[0.1, 0.0, 0.0, 0.6, 0.3]), // 東京: B-LOC
            word(5, 8, &[0.0, 0.8, 0.2, 0.0, 0.0]), // Tom: B-PER
            word(9, 14, &[0.0, 0.4, 0.6, 0.0, 0.0]), // Baker: I-PER
            word(15, 18, &o),
            word(19, 22, &[0.0, 0.0, 0.7, 0.0, 0.3]), // Ann: I-PER without B starts one
            word(23, 25, &o),
            word(26, 30, &[0.0, 0.0, 0.0, 0.0, 1.0]), // Oslo: I-LOC
        ];
        let spans = merge(&l, &ws, text);
        let got: Vec<(&str, usize, usize, &str)> = spans
            .iter()
            .map(|s| (s.label.as_str(), s.start, s.end, s.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("LOC", 2, 4, "東京"),
                ("PER", 5, 14, "Tom Baker"),
                ("PER", 19, 22, "Ann"),
                ("LOC", 26, 30, "Oslo")
            ]
        );
        assert!((spans[1].probability - 0.7).abs() < 1e-6);
        for s in &spans {
            let cut: String = text.chars().skip(s.start).take(s.end - s.start).collect();
            assert_eq!(cut, s.text);
        }
    }

    #[test]
    fn b_after_b_splits_and_another_type_splits() {
        let l = labels(&["O", "B-A", "I-A", "B-B", "I-B"]);
        let ws = vec![
            word(0, 1, &[0.0, 1.0, 0.0, 0.0, 0.0]),
            word(2, 3, &[0.0, 1.0, 0.0, 0.0, 0.0]),
            word(4, 5, &[0.0, 0.0, 0.0, 0.0, 1.0]),
        ];
        let spans = merge(&l, &ws, "a b c");
        let got: Vec<(&str, usize, usize)> = spans
            .iter()
            .map(|s| (s.label.as_str(), s.start, s.end))
            .collect();
        assert_eq!(got, vec![("A", 0, 1), ("A", 2, 3), ("B", 4, 5)]);
    }

    #[test]
    fn bioes_and_plain_labels() {
        let l = labels(&["O", "S-X", "E-X", "Y"]);
        let ws = vec![
            word(0, 1, &[0.0, 1.0, 0.0, 0.0]), // S-X alone
            word(2, 3, &[0.0, 0.0, 1.0, 0.0]), // E-X: starts and ends one
            word(4, 5, &[0.0, 0.0, 0.0, 1.0]), // Y
            word(6, 7, &[0.0, 0.0, 0.0, 1.0]), // Y continues
        ];
        let got: Vec<(String, usize, usize)> = merge(&l, &ws, "a b c d")
            .into_iter()
            .map(|s| (s.label, s.start, s.end))
            .collect();
        assert_eq!(
            got,
            vec![("X".into(), 0, 1), ("X".into(), 2, 3), ("Y".into(), 4, 7)]
        );
        assert_eq!(
            entity_types(&labels(&["O", "B-PER", "I-PER", "B-LOC", "Y"])),
            labels(&["PER", "LOC", "Y"])
        );
    }

    #[test]
    fn offsets_past_the_text_are_clamped() {
        let l = labels(&["O", "B-A"]);
        let spans = merge(&l, &[word(2, 9, &[0.0, 1.0])], "abcd");
        assert_eq!(
            (spans[0].start, spans[0].end, spans[0].text.as_str()),
            (2, 4, "cd")
        );
    }
}
