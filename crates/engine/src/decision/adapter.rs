//! Decision adapters: small heads a package trained on labelled questions of its own
//! (`vllm-srun adapt`), each answering one question from the backbone's state at the answer
//! position, read in the same forward as the base readout's label logits.
//!
//! A head's features are the answer position's logits of a fixed spread of vocabulary tokens,
//! twice as many as the hidden state is wide ([`feature_tokens`]). A causal LM's logits are
//! its output matrix times the final hidden state, so these are a linear image of that state
//! (of full rank unless the chosen rows are degenerate): a linear head on them is a linear head
//! on the hidden state. They ride as extra candidates of the question's first read, so they
//! cost no extra decode and the prefix cache keeps them. (llama.cpp's embeddings mode would
//! return the hidden state itself, but it makes every token of every decode an output, for
//! every request the context serves.)
//!
//! A package keeps them in `decision_adapters.json`. A head is found by the question it was
//! trained on: its type, instructions and options (a choice's in key order, with their
//! descriptions), which is all the prompt shows; ids do not matter. A question asks for one
//! with `decision_adapter: true`, or by the package's `default`; a question no head matches
//! is answered by the base readout.

use std::collections::HashMap;
use std::sync::Arc;

use protocol::request::parse_question;
use protocol::{Question, QuestionKind, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::lexical::Lexical;
use crate::backend::Token;
use crate::encode::tagger::{entity_types, merge, Word};
use crate::span::may_hold;

/// The key a question is known by where its answer depends only on what the prompt shows:
/// its type, instructions and options (a choice's sorted, as the prompt shows them). Content-
/// free answers are remembered, and decision adapters found, by it; `None` for types other
/// than choice, noul and score.
pub fn question_key(q: &Question) -> Option<String> {
    let options = match &q.kind {
        QuestionKind::Choice { options } => {
            let mut sorted: Vec<_> = options.iter().collect();
            sorted.sort();
            format!("{sorted:?}")
        }
        QuestionKind::Score { levels } => format!("{levels:?}"),
        QuestionKind::Noul {
            when_false,
            when_true,
        } => format!("{when_false:?}{when_true:?}"),
        _ => return None,
    };
    Some(format!(
        "{}\u{1f}{:?}\u{1f}{options}",
        q.kind.type_name(),
        q.instructions
    ))
}

/// `decision_adapters.json`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterFile {
    /// Vocabulary size of the model the heads were trained on.
    pub vocab_size: usize,
    /// How many feature tokens every head reads ([`feature_tokens`]).
    pub features: usize,
    /// Whether a question that does not say (`decision_adapter` absent) is answered by its
    /// adapter where one matches.
    #[serde(default)]
    pub default: bool,
    pub adapters: Vec<Head>,
    /// A span head: one row of tag probabilities per word (`classes` are BIO tags, `O`,
    /// `B-LABEL`, `I-LABEL`), read from the backbone's word features; its `question` is the
    /// span question it answers (a preset, or labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spans: Option<Head>,
}

/// One question's head: standardised features, then a softmax layer over its classes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Head {
    /// The question as a 5.0 request asks it (`type`, `instructions`, `criteria`).
    pub question: Value,
    /// The answer each row of `weights` scores: a choice's option keys, `yes` and `no` for a
    /// noul, level indices (`0`, `1`, ...) for a score.
    pub classes: Vec<String>,
    pub mean: Vec<f32>,
    pub scale: Vec<f32>,
    /// One row of `features` per class.
    pub weights: Vec<Vec<f32>>,
    pub bias: Vec<f32>,
    /// A hidden layer between the standardised features and the softmax (ReLU units); the
    /// softmax's rows then read its units. A span head has one; question heads are linear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<Layer>,
    /// Present where the head reads the state's character n-grams ([`Lexical`]) instead of
    /// the backbone's vector; its features are then as many as its buckets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lexical: Option<Lexical>,
    /// How it was fitted and what cross-validation measured (for people; not read).
    #[serde(default)]
    pub fit: Value,
}

/// A layer of ReLU units: one row of weights per unit, and its bias.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    pub weights: Vec<Vec<f32>>,
    pub bias: Vec<f32>,
}

/// `rows · x + bias`, each row a unit.
fn affine(rows: &[Vec<f32>], bias: &[f32], x: &[f64]) -> Vec<f64> {
    rows.iter()
        .zip(bias)
        .map(|(w, b)| f64::from(*b) + w.iter().zip(x).map(|(w, x)| f64::from(*w) * x).sum::<f64>())
        .collect()
}

impl Head {
    /// How many inputs the softmax rows read: the hidden units, or the features.
    fn softmax_inputs(&self) -> usize {
        self.hidden
            .as_ref()
            .map_or(self.mean.len(), |h| h.bias.len())
    }

    /// Whether every part has the width the others say.
    fn well_shaped(&self) -> bool {
        let d = self.mean.len();
        let hidden = self.hidden.as_ref().is_none_or(|h| {
            h.weights.len() == h.bias.len() && h.weights.iter().all(|w| w.len() == d)
        });
        hidden
            && self.scale.len() == d
            && self.scale.iter().all(|s| s.is_finite() && *s > 0.0)
            && self.weights.len() == self.classes.len()
            && self
                .weights
                .iter()
                .all(|w| w.len() == self.softmax_inputs())
            && self.bias.len() == self.classes.len()
    }

    /// Class probabilities from a question's features, in the order `classes` lists them.
    pub fn probabilities(&self, features: &[f32]) -> Option<Vec<f64>> {
        if features.len() != self.mean.len() {
            return None;
        }
        let x: Vec<f64> = features
            .iter()
            .zip(self.mean.iter().zip(&self.scale))
            .map(|(h, (m, s))| (f64::from(*h) - f64::from(*m)) / f64::from(*s))
            .collect();
        let x = match &self.hidden {
            Some(h) => affine(&h.weights, &h.bias, &x)
                .into_iter()
                .map(|v| v.max(0.0))
                .collect(),
            None => x,
        };
        let z = affine(&self.weights, &self.bias, &x);
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        Some(e.into_iter().map(|v| v / sum).collect())
    }

    /// The probabilities in the order a plan answers: a choice's `keys` as the request lists
    /// them; a noul's yes then no; a score's levels in order.
    pub(crate) fn answer(&self, features: &[f32], keys: &[String]) -> Option<Vec<f64>> {
        let p = self.probabilities(features)?;
        keys.iter()
            .map(|k| self.classes.iter().position(|c| c == k).map(|i| p[i]))
            .collect()
    }
}

/// The classes a question's head scores, in the order `Head::answer` is asked for them.
pub fn classes_of(q: &Question) -> Option<Vec<String>> {
    match &q.kind {
        QuestionKind::Choice { options } => Some(options.iter().map(|(k, _)| k.clone()).collect()),
        QuestionKind::Noul { .. } => Some(vec!["yes".into(), "no".into()]),
        QuestionKind::Score { levels } => Some((0..levels.len()).map(|i| i.to_string()).collect()),
        _ => None,
    }
}

/// The tokens whose logits at a question's answer position a head reads: `2 × hidden` of
/// them (at most the vocabulary), spread evenly over the vocabulary's ids.
pub fn feature_tokens(vocab_size: usize, hidden_size: usize) -> Vec<Token> {
    let k = (2 * hidden_size).min(vocab_size);
    (0..k)
        .filter_map(|i| Token::try_from(i * vocab_size / k).ok())
        .collect()
}

/// A package's adapters, found by question.
#[derive(Debug, Default)]
pub struct Adapters {
    pub vocab_size: usize,
    pub features: usize,
    pub default: bool,
    heads: HashMap<String, Arc<Head>>,
    span: Option<Arc<SpanHead>>,
}

/// Whether a span found under a label has the form every such part has: a preset label's
/// ([`crate::span::may_hold`]), and a name or a place holds a letter (a span of one without
/// is a number the head misread).
fn has_form(label: &str, description: Option<&str>, text: &str) -> bool {
    let named = ["PERSON", "LOCATION"].contains(&label);
    may_hold(label, description, text.as_bytes())
        && (!named || text.chars().any(char::is_alphabetic))
}

/// Preset labels whose parts are written without spaces (an address, a number): a span of
/// one covers the whole chunk it stands in.
const WRITTEN_WHOLE: [&str; 5] = ["EMAIL_ADDRESS", "URL", "IP_ADDRESS", "IBAN", "PHONE_NUMBER"];

/// Spans as written: a span of a [`WRITTEN_WHOLE`] label reaches over the chunk of
/// characters between spaces it stands in (its closing marks left out), and takes the
/// place of any other span there; any span's trailing comma, stop or colon is left out.
fn written_whole(spans: Vec<protocol::SpanFound>, chars: &[char]) -> Vec<protocol::SpanFound> {
    let closing = |c: char| matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | ')' | '"' | '\'');
    let mut out: Vec<protocol::SpanFound> = Vec::with_capacity(spans.len());
    for mut s in spans {
        if WRITTEN_WHOLE.contains(&s.label.as_str()) {
            let (mut a, mut b) = (s.start.min(chars.len()), s.end.min(chars.len()));
            while a > 0 && !chars[a - 1].is_whitespace() {
                a -= 1;
            }
            while b < chars.len() && !chars[b].is_whitespace() {
                b += 1;
            }
            // An opening bracket stays (a telephone's area code); closing marks go.
            while b > s.end && closing(chars[b - 1]) {
                b -= 1;
            }
            (s.start, s.end) = (a, b);
            out.retain(|o| o.end <= a || o.start >= b);
        } else if out.iter().any(|o| {
            WRITTEN_WHOLE.contains(&o.label.as_str()) && o.start < s.end && s.start < o.end
        }) {
            continue;
        }
        while s.end > s.start + 1 && closing(chars[s.end - 1]) && chars[s.end - 1] != ')' {
            s.end -= 1;
        }
        s.text = chars[s.start..s.end].iter().collect();
        out.push(s);
    }
    out
}

/// `spans` (in text order) with each one joined to the one before it where `joins` gives the
/// joined span's label from the two and the characters between them; a joined span's
/// probability is the mean of its two.
fn joined(
    spans: Vec<protocol::SpanFound>,
    chars: &[char],
    joins: impl Fn(&protocol::SpanFound, &protocol::SpanFound, &[char]) -> Option<String>,
) -> Vec<protocol::SpanFound> {
    let mut out: Vec<protocol::SpanFound> = Vec::with_capacity(spans.len());
    for s in spans {
        if let Some(last) = out.last_mut() {
            let between = chars.get(last.end..s.start).unwrap_or_default();
            if let Some(label) = joins(last, &s, between) {
                last.label = label;
                last.probability = (last.probability + s.probability) / 2.0;
                last.end = s.end;
                last.text = chars[last.start..last.end].iter().collect();
                continue;
            }
        }
        out.push(s);
    }
    out
}

/// Names and places the head read in pieces, made whole: a place, a comma and a place are one
/// place ("Graystad, Oman": an address names one place); a name and a place with one space
/// between are one name (the head reads a surname it has not seen as a town: "William
/// Sharp"). Spans are in text order.
fn names_and_places(spans: Vec<protocol::SpanFound>, chars: &[char]) -> Vec<protocol::SpanFound> {
    joined(spans, chars, |last, s, between| {
        match (last.label.as_str(), s.label.as_str()) {
            ("LOCATION", "LOCATION") if between == [',', ' '] => Some("LOCATION".into()),
            ("PERSON", "LOCATION") | ("LOCATION", "PERSON") if between == [' '] => {
                Some("PERSON".into())
            }
            _ => None,
        }
    })
}

/// Titles written before a name, which belong to the name ("Mr. Aaron Hernandez").
const TITLES: [&str; 9] = ["Mr", "Mrs", "Ms", "Miss", "Dr", "Prof", "Mx", "Sir", "Dame"];

/// A name's span reaches back over the title written before it ("Dr." or "Dr"), and a span
/// that is only a title goes (the head reads "Mr." apart from the name after it).
fn with_titles(spans: Vec<protocol::SpanFound>, chars: &[char]) -> Vec<protocol::SpanFound> {
    let text = |a: usize, b: usize| chars[a..b].iter().collect::<String>();
    let title = |t: &str| TITLES.contains(&t.trim_end_matches('.'));
    let mut out: Vec<protocol::SpanFound> = Vec::with_capacity(spans.len());
    for mut s in spans {
        if s.label != "PERSON" {
            out.push(s);
            continue;
        }
        if title(&s.text) {
            continue;
        }
        // The word before the name, with the spaces after it.
        let mut b = s.start.min(chars.len());
        while b > 0 && chars[b - 1] == ' ' {
            b -= 1;
        }
        let mut a = b;
        while a > 0 && !chars[a - 1].is_whitespace() {
            a -= 1;
        }
        if a < b && b < s.start && title(&text(a, b)) {
            out.retain(|o| o.end <= a || o.start >= s.start);
            s.start = a;
            s.text = text(a, s.end);
        }
        out.push(s);
    }
    out
}

/// The preset's card label, which a number's form decides as surely as a head.
const CARD: &str = "CREDIT_CARD";

/// How surely a number with a card's form ([`crate::span::card_numbers`]) is a card number:
/// on the 300 development texts of `tools/pii/dev-seed5`, all 52 such numbers were cards
/// (and all 52 cards such numbers): (52 + 1) / (52 + 2).
const CARD_FORM: f64 = 0.98;

/// `spans` with every number of a card's form as a card span (at least [`CARD_FORM`] sure),
/// in place of the spans it overlaps: the head reads a card number by the words around it,
/// and missed those after words it had not seen before one ("the card ending in").
fn with_card_numbers(
    mut spans: Vec<protocol::SpanFound>,
    text: &str,
    chars: &[char],
) -> Vec<protocol::SpanFound> {
    for (start, end) in crate::span::card_numbers(text) {
        let head = spans
            .iter()
            .filter(|s| s.label == CARD && s.start == start && s.end == end)
            .map(|s| s.probability)
            .fold(0.0, f64::max);
        spans.retain(|s| s.end <= start || s.start >= end);
        spans.push(protocol::SpanFound {
            label: CARD.to_string(),
            start,
            end,
            text: chars[start..end].iter().collect(),
            probability: head.max(CARD_FORM),
        });
    }
    spans.sort_by_key(|s| (s.start, s.end));
    spans
}

/// A trained span head and the labels its tags name.
#[derive(Debug)]
pub struct SpanHead {
    pub head: Head,
    /// The labels its tags name, in the order they first appear.
    pub labels: Vec<String>,
}

impl SpanHead {
    /// The spans of `text` from its words' features (`ranges` their code-point ranges), of
    /// the `wanted` labels (with their descriptions) only. Two spans of one label with
    /// nothing but glued words between them are one (an address or number whose middle word
    /// was read apart); a span of a preset label without that label's form is dropped, as
    /// the prompted path drops a copy without it ([`has_form`]).
    pub fn spans(
        &self,
        text: &str,
        ranges: &[(usize, usize)],
        rows: &[Vec<f32>],
        wanted: &[(String, Option<String>)],
    ) -> Option<Vec<protocol::SpanFound>> {
        let words = ranges
            .iter()
            .zip(rows)
            .map(|(&(start, end), row)| {
                let probs = self.head.probabilities(row)?;
                Some(Word {
                    start,
                    end,
                    probs: probs.into_iter().map(|p| p as f32).collect(),
                })
            })
            .collect::<Option<Vec<Word>>>()?;
        let chars: Vec<char> = text.chars().collect();
        // Two spans of one label with only glued words between them are one.
        let glued = joined(
            merge(&self.head.classes, &words, text),
            &chars,
            |last, s, between| {
                (last.label == s.label && !between.iter().any(|c| c.is_whitespace()))
                    .then(|| s.label.clone())
            },
        );
        let mut spans = with_titles(
            names_and_places(written_whole(glued, &chars), &chars),
            &chars,
        );
        if wanted
            .iter()
            .any(|(k, d)| k == CARD && crate::span::as_preset_describes(k, d.as_deref()))
        {
            spans = with_card_numbers(spans, text, &chars);
        }
        Some(
            spans
                .into_iter()
                .filter(|s| {
                    wanted
                        .iter()
                        .any(|(k, d)| *k == s.label && has_form(k, d.as_deref(), &s.text))
                })
                .collect(),
        )
    }

    /// How many features a word row holds.
    pub fn width(&self) -> usize {
        self.head.mean.len()
    }
}

/// Why a package's `decision_adapters.json` cannot be served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdapterError {
    /// The file's head at this index does not answer its own question.
    #[error("decision_adapters.json: adapter {index}: {why}")]
    Head { index: usize, why: String },
    /// The span head is not a span question's BIO head.
    #[error("decision_adapters.json: the span head {0}")]
    Span(String),
}

impl Adapters {
    /// Check a file's heads (shapes, classes against their questions) and index them.
    pub fn new(file: AdapterFile) -> Result<Adapters, AdapterError> {
        let mut heads = HashMap::new();
        for (i, h) in file.adapters.into_iter().enumerate() {
            let bad = |why: String| AdapterError::Head { index: i, why };
            let q = parse_question(&h.question, Schema::V5).map_err(|f| bad(f.message))?;
            let key = question_key(&q)
                .ok_or_else(|| bad("only choice, noul and score questions have adapters".into()))?;
            let mut want = classes_of(&q).unwrap_or_default();
            let mut have = h.classes.clone();
            want.sort();
            have.sort();
            let d = h.lexical.as_ref().map_or(file.features, |l| l.idf.len());
            if want != have || h.mean.len() != d || !h.well_shaped() {
                return Err(bad(format!("does not fit its question or {d} features")));
            }
            heads.insert(key, Arc::new(h));
        }
        let span = file.spans.map(span_head).transpose()?.map(Arc::new);
        Ok(Adapters {
            vocab_size: file.vocab_size,
            features: file.features,
            default: file.default,
            heads,
            span,
        })
    }

    /// Whether a head reads the text's n-grams ([`Head::lexical`]).
    pub fn reads_text(&self) -> bool {
        self.heads.values().any(|h| h.lexical.is_some())
    }

    /// The span head, when the package has one.
    pub fn span_head(&self) -> Option<&Arc<SpanHead>> {
        self.span.as_ref()
    }

    /// The head trained on this question, if any.
    pub fn find(&self, q: &Question) -> Option<Arc<Head>> {
        self.heads.get(&question_key(q)?).cloned()
    }

    /// The questions the heads were trained on (as the file words them), in key order.
    pub fn questions(&self) -> Vec<&Value> {
        let mut heads: Vec<_> = self.heads.iter().collect();
        heads.sort_by_key(|(k, _)| *k);
        heads.into_iter().map(|(_, h)| &h.question).collect()
    }
}

/// A span question's labels, each with its description.
pub type Labels = Vec<(String, Option<String>)>;

/// A span question's labels: its own, or with none, those of the preset it names.
pub fn span_labels(
    labels: &[(String, Option<String>)],
    preset: Option<&str>,
) -> Result<Labels, protocol::error::QuestionFailure> {
    if !labels.is_empty() {
        return Ok(labels.to_vec());
    }
    match preset {
        Some(protocol::PII_PRESET) => Ok(protocol::PII_LABELS
            .iter()
            .map(|(k, d)| (k.to_string(), Some(d.to_string())))
            .collect()),
        Some(other) => Err(protocol::error::QuestionFailure::malformed(format!(
            "preset {other:?} is not one this model answers (it answers pii); name the labels in criteria"
        ))),
        None => Err(protocol::error::QuestionFailure::malformed("a span takes 1 or more labels in criteria")),
    }
}

/// Check a span head: a span question, BIO tags naming its labels, rows of one width.
fn span_head(h: Head) -> Result<SpanHead, AdapterError> {
    let bad = |why: &str| Err(AdapterError::Span(why.to_string()));
    let q = parse_question(&h.question, Schema::V5)
        .map_err(|f| AdapterError::Span(format!("reads a question that fails: {}", f.message)))?;
    if !matches!(q.kind, QuestionKind::Span { .. }) {
        return bad("answers a span question");
    }
    if h.mean.is_empty() || !h.well_shaped() {
        return bad("has rows of different widths");
    }
    let labels = entity_types(&h.classes);
    if labels.is_empty() || !h.classes.iter().any(|c| c == "O") {
        return bad("names no label, or has no O tag");
    }
    Ok(SpanHead { head: h, labels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn head(question: Value, classes: &[&str], d: usize) -> Head {
        Head {
            question,
            classes: classes.iter().map(|c| c.to_string()).collect(),
            mean: vec![0.0; d],
            scale: vec![1.0; d],
            weights: (0..classes.len())
                .map(|c| (0..d).map(|i| if i == c { 1.0 } else { 0.0 }).collect())
                .collect(),
            bias: vec![0.0; classes.len()],
            hidden: None,
            lexical: None,
            fit: Value::Null,
        }
    }

    #[test]
    fn a_head_is_found_by_its_question_whatever_the_option_order() {
        let q = json!({"type": "choice", "instructions": "Which queue?",
                       "criteria": {"billing": "Money", "account": "Login"}});
        let file = AdapterFile {
            vocab_size: 10,
            features: 3,
            default: false,
            adapters: vec![head(q, &["billing", "account"], 3)],
            spans: None,
        };
        let a = Adapters::new(file).unwrap();
        let asked = parse_question(
            &json!({"type": "choice", "instructions": "Which queue?",
                    "criteria": {"account": "Login", "billing": "Money"}}),
            Schema::V5,
        )
        .unwrap();
        let h = a.find(&asked).unwrap();
        // Features pointing at class 1 (account): the request lists account first.
        let p = h
            .answer(&[0.0, 4.0, 0.0], &["account".into(), "billing".into()])
            .unwrap();
        assert!(p[0] > 0.9 && (p[0] + p[1] - 1.0).abs() < 1e-12, "{p:?}");
        let other = parse_question(
            &json!({"type": "choice", "instructions": "Which queue?",
                    "criteria": {"account": "Login", "billing": "Charges"}}),
            Schema::V5,
        )
        .unwrap();
        assert!(
            a.find(&other).is_none(),
            "another option text is another question"
        );
    }

    #[test]
    fn feature_tokens_spread_over_the_vocabulary() {
        let f = feature_tokens(1000, 64);
        assert_eq!(f.len(), 128);
        assert_eq!((f[0], f[1], f[127]), (0, 7, 992));
        assert_eq!(feature_tokens(10, 64).len(), 10, "at most the vocabulary");
    }

    #[test]
    fn heads_that_do_not_fit_are_refused() {
        let q = json!({"type": "noul", "instructions": "Is it urgent?"});
        let bad_classes = AdapterFile {
            vocab_size: 10,
            features: 2,
            default: false,
            adapters: vec![head(q.clone(), &["yes", "maybe"], 2)],
            spans: None,
        };
        assert!(Adapters::new(bad_classes).is_err());
        let bad_width = AdapterFile {
            vocab_size: 10,
            features: 3,
            default: false,
            adapters: vec![head(q, &["yes", "no"], 2)],
            spans: None,
        };
        assert!(Adapters::new(bad_width).is_err());
    }

    fn found(label: &str, start: usize, end: usize) -> protocol::SpanFound {
        protocol::SpanFound {
            label: label.into(),
            start,
            end,
            text: String::new(),
            probability: 0.9,
        }
    }

    /// An address or number written without spaces is found whole, over any other label read
    /// inside it; a name's trailing comma is left out.
    #[test]
    fn a_chunk_written_without_spaces_is_one_span() {
        let text = "Mail umueller@example.org, call (480)599-3261x100. Ann Lee, Oslo";
        let chars: Vec<char> = text.chars().collect();
        let spans = vec![
            found("LOCATION", 5, 13),       // umueller
            found("EMAIL_ADDRESS", 13, 25), // @example.org
            found("PHONE_NUMBER", 33, 49),  // 480)599-3261x100
            found("PERSON", 51, 59),        // Ann Lee,
        ];
        assert_eq!(
            read(written_whole(spans, &chars), &chars),
            [
                "EMAIL_ADDRESS umueller@example.org",
                "PHONE_NUMBER (480)599-3261x100",
                "PERSON Ann Lee",
            ]
        );
    }

    /// Each span as its label and the text between its offsets.
    fn read(spans: Vec<protocol::SpanFound>, chars: &[char]) -> Vec<String> {
        spans
            .into_iter()
            .map(|s| {
                format!(
                    "{} {}",
                    s.label,
                    chars[s.start..s.end].iter().collect::<String>()
                )
            })
            .collect()
    }

    /// A place, a comma and a place are one place; a name and a place one space apart are
    /// one name; a place after a name and a word is a place.
    #[test]
    fn names_and_places_read_in_pieces_are_made_whole() {
        let text = "Ship to Graystad, Oman for William Sharp from Jo Lee in Oslo, said Ann";
        let chars: Vec<char> = text.chars().collect();
        let at = |t: &str, n: usize| (text.find(t).unwrap(), text.find(t).unwrap() + n);
        let span = |label: &str, (a, b): (usize, usize)| found(label, a, b);
        let spans = vec![
            span("LOCATION", at("Graystad", 8)),
            span("LOCATION", at("Oman", 4)),
            span("PERSON", at("William", 7)),
            span("LOCATION", at("Sharp", 5)),
            span("PERSON", at("Jo Lee", 6)),
            span("LOCATION", at("Oslo", 4)),
            span("PERSON", at("Ann", 3)),
        ];
        assert_eq!(
            read(names_and_places(spans, &chars), &chars),
            [
                "LOCATION Graystad, Oman",
                "PERSON William Sharp",
                "PERSON Jo Lee",
                "LOCATION Oslo",
                "PERSON Ann",
            ]
        );
    }

    /// A title before a name is part of the name; a title alone is no name.
    #[test]
    fn a_name_takes_its_title() {
        let text = "Meeting with Mr. Bradley Zamora and Dr Ann Lee, not Drake Mr.";
        let chars: Vec<char> = text.chars().collect();
        let at = |t: &str| text.find(t).unwrap();
        let spans = vec![
            found("PERSON", at("Mr."), at("Mr.") + 2),
            found("PERSON", at("Bradley"), at("Bradley") + 14),
            found("PERSON", at("Ann"), at("Ann") + 7),
            found("PERSON", at("Drake"), at("Drake") + 5),
            found("PERSON", at("Drake") + 6, at("Drake") + 9),
        ];
        let got: Vec<String> = with_titles(written_whole(spans, &chars), &chars)
            .into_iter()
            .map(|s| s.text)
            .collect();
        assert_eq!(got, ["Mr. Bradley Zamora", "Dr Ann Lee", "Drake"]);
    }

    /// A number of a card's form is a card span, in place of what the head read there; a
    /// head surer of it keeps its probability.
    #[test]
    fn a_card_number_is_found_by_its_form() {
        let text = "charged the card ending in 5555 5555 5555 4444 and 4220033224538329 today";
        let chars: Vec<char> = text.chars().collect();
        let mut sure = found("CREDIT_CARD", 51, 67);
        sure.probability = 0.995;
        let spans = vec![found("PHONE_NUMBER", 27, 46), sure];
        let got: Vec<(String, usize, usize, f64)> = with_card_numbers(spans, text, &chars)
            .into_iter()
            .map(|s| (s.label, s.start, s.end, s.probability))
            .collect();
        assert_eq!(
            got,
            [
                ("CREDIT_CARD".to_string(), 27, 46, CARD_FORM),
                ("CREDIT_CARD".to_string(), 51, 67, 0.995)
            ]
        );
    }

    fn span_file(question: Value, tags: &[&str], d: usize) -> AdapterFile {
        AdapterFile {
            vocab_size: 10,
            features: 3,
            default: true,
            adapters: Vec::new(),
            spans: Some(head(question, tags, d)),
        }
    }

    /// A span head's tags name its labels; its words' rows merge into spans of the labels
    /// asked, with code-point offsets; spans of a label glued together are one, and a span
    /// without its label's form is dropped.
    #[test]
    fn a_span_head_tags_words_and_merges_them() {
        let tags = [
            "O",
            "B-PERSON",
            "I-PERSON",
            "B-PHONE_NUMBER",
            "I-PHONE_NUMBER",
            "B-URL",
            "I-URL",
            "B-IP_ADDRESS",
            "I-IP_ADDRESS",
        ];
        let q = json!({"type": "span", "preset": "pii"});
        let a = Adapters::new(span_file(q.clone(), &tags, 9)).unwrap();
        let h = a.span_head().unwrap();
        assert_eq!(
            h.labels,
            vec!["PERSON", "PHONE_NUMBER", "URL", "IP_ADDRESS"]
        );
        let row =
            |t: usize| -> Vec<f32> { (0..9).map(|i| if i == t { 9.0 } else { 0.0 }).collect() };
        // Zoë Lee: +1 415 555 0199, see http://banks.com/ hi
        let text = "Zoë Lee: +1 415 555 0199, see http://banks.com/ hi";
        let words = [
            ((0, 3), 1),
            ((4, 7), 2),
            ((7, 8), 0), // Zoë Lee :
            ((9, 10), 3),
            ((10, 11), 4),
            ((12, 15), 4),
            ((16, 19), 4),
            ((20, 24), 4), // +1 415 555 0199
            ((24, 25), 0),
            ((26, 29), 0), // , see
            ((30, 34), 5),
            ((34, 35), 6),
            ((35, 36), 6),
            ((36, 37), 6), // http : / /
            ((37, 42), 0),
            ((42, 43), 6),
            ((43, 46), 6),
            ((46, 47), 6), // banks read apart, . com /
            ((48, 50), 7), // hi: not an address
        ];
        let ranges: Vec<(usize, usize)> = words.iter().map(|(r, _)| *r).collect();
        let rows: Vec<Vec<f32>> = words.iter().map(|(_, t)| row(*t)).collect();
        let wanted: Vec<(String, Option<String>)> =
            h.labels.iter().map(|l| (l.clone(), None)).collect();
        let spans = h.spans(text, &ranges, &rows, &wanted).unwrap();
        let got: Vec<(&str, usize, usize, &str)> = spans
            .iter()
            .map(|s| (s.label.as_str(), s.start, s.end, s.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("PERSON", 0, 7, "Zoë Lee"),
                ("PHONE_NUMBER", 9, 24, "+1 415 555 0199"),
                ("URL", 30, 47, "http://banks.com/"),
            ]
        );
        // Only the labels asked are answered.
        let phone = h.spans(text, &ranges, &rows, &wanted[1..2]).unwrap();
        assert_eq!(phone.len(), 1);
        // A head whose tags name no label, or that is not a span question's, is refused.
        assert!(Adapters::new(span_file(q, &["O", "X"], 5)).is_ok());
        let q = json!({"type": "span", "preset": "pii"});
        assert!(Adapters::new(span_file(q, &["B-A", "I-A"], 5)).is_err());
        let noul = json!({"type": "noul", "instructions": "Is it urgent?"});
        assert!(Adapters::new(span_file(noul, &tags, 5)).is_err());
    }
}
