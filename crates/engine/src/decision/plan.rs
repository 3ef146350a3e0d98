//! Planning one question: its type checked, its block rendered and tokenized, and the
//! label trie its answer is read through.

use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{meaning, Question, QuestionKind};

use super::adapter::{span_labels, Labels};
use super::model::{DecisionModel, Plan, Readout, Tree};
use crate::backend::{Node, Token};
use crate::labels::{option_code, Trie};

/// The trie of a question's label paths; labels the vocabulary cannot tell apart are a
/// model-output failure of that question.
pub(super) fn label_trie(paths: &[Vec<Token>]) -> Result<Trie, QuestionFailure> {
    Trie::build(paths).map_err(|e| {
        QuestionFailure::new(
            QuestionErrorKind::InvalidModelOutput,
            reason::MODEL_OUTPUT,
            e.to_string(),
        )
    })
}

impl DecisionModel {
    /// A question block's tokens, read no further than what `cap` (the most a question reads
    /// with its state) leaves beside the frame: a longer block could never be evaluated, so
    /// it fails as too long a question does, without being tokenized whole.
    pub(super) fn question_tokens(
        &self,
        t: &Tree,
        block: &str,
        limit: usize,
    ) -> Result<Vec<Token>, QuestionFailure> {
        let frame = t.prefix.len() + t.header.len() + t.sep.len() + t.turn_end.len();
        let own = limit.saturating_sub(frame);
        let read = self.read_text(&*t.backend, block, own).map_err(|e| {
            QuestionFailure::new(
                QuestionErrorKind::InvalidInput,
                reason::INPUT_MALFORMED,
                e.message,
            )
        })?;
        if !read.complete || read.tokens.len() > own {
            return Err(QuestionFailure::new(
                QuestionErrorKind::MaxLengthExceeded,
                reason::QUESTION_TOKENS,
                format!(
                    "the question alone reads more than {limit} tokens, the most a question reads with its state"
                ),
            )
            .with_limit(limit as u64));
        }
        let mut tokens = read.tokens;
        tokens.extend_from_slice(&t.turn_end);
        Ok(tokens)
    }

    /// A question of a type the model does not answer, or one that asks for an adapter it
    /// lacks, fails with its reason word; otherwise, how its answer is read.
    pub(crate) fn check_type(&self, q: &Question) -> Result<Readout, QuestionFailure> {
        let type_name = q.kind.type_name();
        if !self.config.answers(type_name) {
            let (r, what) = match &q.kind {
                QuestionKind::Span { .. } => (reason::SPAN_UNSUPPORTED, "span"),
                QuestionKind::Box { .. } => (reason::BOX_UNSUPPORTED, "box"),
                QuestionKind::Track { .. } => (reason::TRACK_UNSUPPORTED, "track"),
                QuestionKind::Set { .. } => (reason::SET_UNSUPPORTED, "set"),
                _ => (reason::QUESTION_MALFORMED, type_name),
            };
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                r,
                format!("model {} does not answer {what} questions", self.meta.name),
            ));
        }
        self.readout_for(q)
    }

    /// The labels a span question asks of the package's span head, where it has one (`None`
    /// where it has none, or the question is not a span). A label the head was not trained
    /// on is refused, not guessed.
    pub(crate) fn span_head_for(&self, q: &Question) -> Result<Option<Labels>, QuestionFailure> {
        let QuestionKind::Span { labels, .. } = &q.kind else {
            return Ok(None);
        };
        let Some(head) = self.adapters.as_ref().and_then(|a| a.span_head()) else {
            return Ok(None);
        };
        let labels = span_labels(labels, q.preset.as_deref())?;
        if let Some((missing, _)) = labels.iter().find(|(k, _)| !head.labels.contains(k)) {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                reason::DECISION_ADAPTER_UNSUPPORTED,
                format!(
                    "model {} finds only the labels its span head was trained on ({}); {missing:?} is not one",
                    self.meta.name,
                    head.labels.join(", ")
                ),
            ));
        }
        Ok(Some(labels))
    }

    /// How a question's answer is read. A question that asks for a decision adapter
    /// (`decision_adapter: true`, or the package's default when it does not say) is answered
    /// by the head trained on it, where the package has one; a package with no adapters at
    /// all refuses an explicit ask, and any other question is read from its label logits.
    pub(crate) fn readout_for(&self, q: &Question) -> Result<Readout, QuestionFailure> {
        let Some(adapters) = &self.adapters else {
            if q.decision_adapter == Some(true) {
                return Err(QuestionFailure::new(
                    QuestionErrorKind::InvalidQuestion,
                    reason::DECISION_ADAPTER_UNSUPPORTED,
                    format!(
                        "decision_adapter: model {} has no decision adapter",
                        self.meta.name
                    ),
                ));
            }
            return Ok(if self.record_features {
                Readout::Recorded
            } else {
                Readout::Base
            });
        };
        let wants = q.decision_adapter.unwrap_or(adapters.default);
        Ok(match adapters.find(q) {
            Some(head) if wants => Readout::Adapter(head),
            _ => Readout::Base,
        })
    }

    /// Render and tokenize one question; return how to read it and its branch nodes.
    pub(super) fn plan(
        &self,
        t: &Tree,
        id: &str,
        q: &Question,
        n_decisions: usize,
        limit: usize,
    ) -> Result<(Plan, Vec<Node>, Option<Trie>), QuestionFailure> {
        let readout = self.check_type(q)?;
        let type_name = q.kind.type_name();
        let complete = q.require_full_input;
        let temperature = self.temperature(type_name, n_decisions);
        let instr = q.instructions.as_deref();
        let id = id.to_string();
        match &q.kind {
            QuestionKind::Choice { options } => {
                let n = options.len();
                let question = instr.unwrap_or("Which option describes the text best?");
                // What the model reads and answers with is each option's meaning (its
                // description, or its key where it has none), never the key itself: a key is
                // the client's id for the option, and an id the model must echo (`a`, `1`,
                // `o3`) means nothing to it. So renaming keys cannot move the answer.
                let meanings: Vec<&str> = options.iter().map(|(k, d)| meaning(k, d)).collect();
                // The model answers with the meaning itself where the meanings can be read
                // apart (a small model maps meaning to words far better than to a letter);
                // otherwise with a letter or code.
                let named = self.named_options(t, &meanings);
                let by_name = named.is_some();
                let (trie, ask) = match named {
                    Some(trie) => (trie, "Answer with the name of the best option."),
                    None if n <= 26 => (
                        label_trie(&t.letters[..n])?,
                        "Answer with the letter of the best option.",
                    ),
                    None => (
                        label_trie(&t.codes[..n])?,
                        "Answer with the code of the best option.",
                    ),
                };
                // The options are shown in one order, sorted by meaning, whatever order the
                // client listed them in, so that order cannot move the answer; and in
                // `choice_orders` turns of it, so that no option keeps a place the model
                // favours. The answer is the geometric mean of the turns' distributions.
                let canonical = canonical_order(options, &meanings);
                let turns = self.config.choice_orders.clamp(1, n.max(1));
                let mut nodes = Vec::with_capacity(turns);
                let mut shown = Vec::with_capacity(turns);
                for turn in 0..turns {
                    let shift = turn * n / turns;
                    let order: Vec<usize> = (0..n).map(|i| canonical[(i + shift) % n]).collect();
                    let mut block = format!("Question: {question}\nOptions:\n");
                    for (place, &i) in order.iter().enumerate() {
                        let mark = if by_name {
                            "-".to_string()
                        } else {
                            format!("{}.", option_code(place, n))
                        };
                        block.push_str(&format!("{mark} {}\n", meanings[i]));
                    }
                    block.push_str(ask);
                    nodes.push(trie.node(self.question_tokens(t, &block, limit)?));
                    shown.push(if by_name { (0..n).collect() } else { order });
                }
                read_features(&mut nodes, &readout, &t.features);
                Ok((
                    Plan::Choice {
                        id,
                        keys: options.iter().map(|(k, _)| k.clone()).collect(),
                        shown,
                        temperature,
                        complete,
                        readout,
                    },
                    nodes,
                    Some(trie),
                ))
            }
            QuestionKind::Noul {
                when_false,
                when_true,
            } => {
                let mut block = format!(
                    "Question: {}\n",
                    instr.unwrap_or("Which of these describes the text?")
                );
                if let Some(d) = when_true {
                    block.push_str(&format!("Yes means: {d}\n"));
                }
                if let Some(f) = when_false {
                    block.push_str(&format!("No means: {f}\n"));
                }
                block.push_str("Answer Yes or No.");
                let mut nodes = vec![t.yes_no.node(self.question_tokens(t, &block, limit)?)];
                read_features(&mut nodes, &readout, &t.features);
                Ok((
                    Plan::Noul {
                        id,
                        temperature,
                        complete,
                        readout,
                    },
                    nodes,
                    None,
                ))
            }
            QuestionKind::Score { levels } => {
                let n = levels.len();
                // Levels are read by what they say, as a choice's options are, where their
                // texts can be read apart; otherwise by their number. They are shown in their
                // order either way.
                let said: Vec<&str> = levels.iter().map(|l| l.trim()).collect();
                let named = self.named_options(t, &said);
                let by_name = named.is_some();
                let trie = match named {
                    Some(trie) => trie,
                    None => label_trie(&t.digits[..n])?,
                };
                // With `score_orders` 2, also in reverse order, so that neither end keeps the
                // place a model favours; the answer is the geometric mean of both views.
                let views = self.config.score_orders.clamp(1, 2);
                let mut nodes = Vec::with_capacity(views);
                let mut shown = Vec::with_capacity(views);
                for view in 0..views {
                    let order: Vec<usize> = if view == 0 {
                        (0..n).collect()
                    } else {
                        (0..n).rev().collect()
                    };
                    let mut block = format!(
                        "Question: {}\nLevels:\n",
                        instr.unwrap_or("Which level describes the text best?")
                    );
                    for (place, &i) in order.iter().enumerate() {
                        if by_name {
                            block.push_str(&format!("- {}\n", said[i]));
                        } else {
                            block.push_str(&format!("{place}. {}\n", said[i]));
                        }
                    }
                    block.push_str(if by_name {
                        "Answer with the best level, as it is written."
                    } else {
                        "Answer with the number of the level."
                    });
                    nodes.push(trie.node(self.question_tokens(t, &block, limit)?));
                    shown.push(if by_name { (0..n).collect() } else { order });
                }
                read_features(&mut nodes, &readout, &t.features);
                Ok((
                    Plan::Score {
                        id,
                        legend: levels.clone(),
                        shown,
                        temperature,
                        complete,
                        readout,
                    },
                    nodes,
                    Some(trie),
                ))
            }
            QuestionKind::Set { labels, threshold } => {
                let mut nodes = Vec::with_capacity(labels.len());
                for (key, desc) in labels {
                    let label = meaning(key, desc);
                    let block = format!(
                        "Question: {}\nLabel: {label}\nDoes this label apply to the text? Answer Yes or No.",
                        instr.unwrap_or("Which labels apply to the text?")
                    );
                    nodes.push(t.yes_no.node(self.question_tokens(t, &block, limit)?));
                }
                Ok((
                    Plan::Set {
                        id,
                        labels: labels.iter().map(|(k, _)| k.clone()).collect(),
                        threshold: threshold.unwrap_or(self.config.set_threshold),
                        temperature: self.temperature("noul", n_decisions),
                        complete,
                    },
                    nodes,
                    None,
                ))
            }
            QuestionKind::Span { labels, threshold } if t.spans.is_some() => {
                let labels = span_labels(labels, q.preset.as_deref())?;
                let question = instr.unwrap_or("Find the parts of the text that the label names.");
                let mut nodes = Vec::with_capacity(labels.len());
                for (key, desc) in &labels {
                    let (label, what) = match desc {
                        Some(d) => (format!("{key}: {d}"), d.as_str()),
                        None => (key.clone(), key.as_str()),
                    };
                    let block = format!(
                        "Question: {question}\nLabel: {label}\nDoes the text contain {what}? If it does, copy each one exactly as it is written, one per line. If it does not, answer None."
                    );
                    nodes.push(Node {
                        tokens: self.question_tokens(t, &block, limit)?,
                        ..Node::default()
                    });
                }
                Ok((
                    Plan::Span {
                        id,
                        labels,
                        threshold: threshold.unwrap_or(self.config.span_threshold),
                        complete,
                        text: String::new(),
                        reads: Vec::new(),
                        asked: Vec::new(),
                    },
                    nodes,
                    None,
                ))
            }
            // Box and track are refused above unless the model declares them; no text backend
            // reads them: a box question fails here with a stand-in that `locate` replaces
            // with its answer.
            QuestionKind::Span { .. } | QuestionKind::Box { .. } | QuestionKind::Track { .. } => {
                let why = match &q.kind {
                    QuestionKind::Box { .. } => reason::BOX_UNSUPPORTED,
                    QuestionKind::Track { .. } => reason::TRACK_UNSUPPORTED,
                    _ => reason::SPAN_UNSUPPORTED,
                };
                Err(QuestionFailure::new(
                    QuestionErrorKind::InvalidQuestion,
                    why,
                    format!("model {} cannot read {type_name} questions", self.meta.name),
                ))
            }
        }
    }

    /// The trie of a choice's option meanings, when the model can answer with them: every
    /// meaning one short line (at most [`NAME_BYTES`] bytes and [`NAME_TOKENS`] tokens) with a
    /// letter or digit in it, and no meaning's tokens a prefix of another's.
    pub(super) fn named_options(&self, t: &Tree, meanings: &[&str]) -> Option<Trie> {
        let name_like = |m: &str| {
            !m.is_empty()
                && m.len() <= NAME_BYTES
                && m.chars().any(char::is_alphanumeric)
                && !m.chars().any(char::is_control)
        };
        if meanings.len() > 64 || !meanings.iter().all(|m| name_like(m)) {
            return None;
        }
        let mut paths = Vec::with_capacity(meanings.len());
        for m in meanings {
            let p = t.backend.tokenize(m, false).ok()?;
            if p.is_empty() || p.len() > NAME_TOKENS {
                return None;
            }
            paths.push(p);
        }
        Trie::build(&paths).ok()
    }
}

/// The longest option meaning, in bytes, a choice is answered with by name.
const NAME_BYTES: usize = 100;
/// The longest option meaning, in tokens, a choice is answered with by name.
const NAME_TOKENS: usize = 24;

/// The order a choice's options are shown in: by meaning (keys only part options that mean
/// the same), so neither the client's order nor the keys' spelling moves it.
fn canonical_order(options: &[(String, Option<String>)], meanings: &[&str]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..options.len()).collect();
    order.sort_by(|&a, &b| {
        meanings[a]
            .cmp(meanings[b])
            .then_with(|| options[a].0.cmp(&options[b].0))
    });
    order
}

/// Read the adapter features at a question's answer position (its first branch's first
/// read), after its labels' candidates, when its readout needs them.
fn read_features(nodes: &mut [Node], readout: &Readout, features: &[Token]) {
    if !readout.reads_features() {
        return;
    }
    if let Some(read) = nodes.first_mut().and_then(|n| n.reads.first_mut()) {
        read.candidates.extend_from_slice(features);
    }
}
