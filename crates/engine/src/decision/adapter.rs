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

use crate::backend::Token;

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
    /// How it was fitted and what cross-validation measured (for people; not read).
    #[serde(default)]
    pub fit: Value,
}

impl Head {
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
        let z: Vec<f64> = self
            .weights
            .iter()
            .zip(&self.bias)
            .map(|(w, b)| {
                f64::from(*b)
                    + w.iter()
                        .zip(&x)
                        .map(|(w, x)| f64::from(*w) * x)
                        .sum::<f64>()
            })
            .collect();
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
}

impl Adapters {
    /// Check a file's heads (shapes, classes against their questions) and index them.
    pub fn new(file: AdapterFile) -> Result<Adapters, String> {
        let mut heads = HashMap::new();
        for (i, h) in file.adapters.into_iter().enumerate() {
            let q = parse_question(&h.question, Schema::V5)
                .map_err(|f| format!("decision_adapters.json: adapter {i}: {}", f.message))?;
            let key = question_key(&q).ok_or_else(|| {
                format!("decision_adapters.json: adapter {i}: only choice, noul and score questions have adapters")
            })?;
            let mut want = classes_of(&q).unwrap_or_default();
            let mut have = h.classes.clone();
            want.sort();
            have.sort();
            let d = file.features;
            let shapes = h.mean.len() == d
                && h.scale.len() == d
                && h.scale.iter().all(|s| s.is_finite() && *s > 0.0)
                && h.weights.len() == h.classes.len()
                && h.weights.iter().all(|w| w.len() == d)
                && h.bias.len() == h.classes.len();
            if want != have || !shapes {
                return Err(format!(
                    "decision_adapters.json: adapter {i} does not fit its question or {d} features"
                ));
            }
            heads.insert(key, Arc::new(h));
        }
        Ok(Adapters {
            vocab_size: file.vocab_size,
            features: file.features,
            default: file.default,
            heads,
        })
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
        };
        assert!(Adapters::new(bad_classes).is_err());
        let bad_width = AdapterFile {
            vocab_size: 10,
            features: 3,
            default: false,
            adapters: vec![head(q, &["yes", "no"], 2)],
        };
        assert!(Adapters::new(bad_width).is_err());
    }
}
