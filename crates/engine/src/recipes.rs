//! Recipes: the decision questions that endpoints other than the decision endpoints ask a
//! decision backbone, and how their answers are read back. Rerank and SIE score ask one
//! relevance noul per document; classify and SIE extract ask one choice, set or span question
//! per input. The HTTP crate parses its bodies and shapes its answers; the wording of the
//! questions and the reading of their answers live here, testable without HTTP.

use protocol::answer::{BatchResponse, DecisionResponse, SpanFound};
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{
    DecisionBody, DecisionRequest, Options, Overflow, Question, QuestionKind, Roles, Window,
};
use protocol::{Answer, Ordered, ProtocolError};
use serde_json::{json, Value};

/// The question asked of each (query, document) pair.
pub const RELEVANCE: &str =
    "Is the document relevant to the query: does it answer it or help answer it?";
/// A classification's question when its entry names none: one label.
pub const CHOOSE_LABEL: &str = "Which label describes the text best?";
/// A multi-label classification's question when its entry names none.
pub const APPLY_LABELS: &str = "Which labels apply to the text?";

/// The id of the one question each recipe asks per state.
const ASKED: &str = "label";
const RELEVANT: &str = "relevant";

/// The batch that asks the relevance of each document to `query`, one state per document
/// (`{query, document}`), each read in part when it is too long rather than refused.
pub fn relevance_batch(query: &str, documents: &[String]) -> Result<DecisionBody, ProtocolError> {
    let relevant = Question::asked(
        QuestionKind::Noul {
            when_false: None,
            when_true: None,
        },
        Some(RELEVANCE),
        None,
        Overflow::Truncate,
    );
    let entries = documents
        .iter()
        .map(|d| {
            let state = json!({"query": query, "document": d});
            let asked = vec![(RELEVANT.to_string(), Ok(relevant.clone()))];
            DecisionRequest::asked(state, Roles::Absent, asked)
        })
        .collect();
    DecisionBody::batch_of(entries, Options::default())
}

/// Each document's probability of relevance, in document order; the first document whose
/// question failed fails them all.
pub fn relevance_scores(b: &BatchResponse) -> Result<Vec<f64>, QuestionFailure> {
    b.states
        .iter()
        .map(|(_, r)| match r.answers.get(RELEVANT).map(|a| &a.answer) {
            Some(Answer::Noul(n)) => Ok(n.noul),
            Some(Answer::Failed { failure, .. }) => Err(failure.clone()),
            _ => Err(no_answer("a document has no relevance answer")),
        })
        .collect()
}

/// What a classification asks of each input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ask<'a> {
    /// The one label that fits best (a choice question: probabilities over the labels).
    Choice {
        labels: &'a [String],
        instructions: Option<&'a str>,
    },
    /// Every label that applies (a set question: each label scored on its own).
    Set {
        labels: &'a [String],
        instructions: Option<&'a str>,
    },
    /// The spans of each label (a span question), or of the preset's labels when none are
    /// given.
    Spans {
        labels: &'a [String],
        preset: Option<&'a str>,
        instructions: Option<&'a str>,
    },
}

/// What was read of one input.
#[derive(Debug, Clone, PartialEq)]
pub enum Read {
    /// Label probabilities, highest first; a set's selected labels (in label order).
    Labels {
        ranked: Vec<(String, f64)>,
        selected: Option<Vec<String>>,
    },
    /// The spans found (those at or over the question's threshold).
    Spans(Vec<SpanFound>),
    /// The question failed (or, with no failure given, nothing was read).
    Failed(QuestionFailure),
}

impl Ask<'_> {
    /// The question asked of each input, read as `overflow` says; a label list the question
    /// cannot take fails it in place, as a body's would.
    pub fn question(&self, overflow: Overflow) -> Result<Question, QuestionFailure> {
        let names = |labels: &[String]| labels.iter().map(|l| (l.clone(), None)).collect();
        let (kind, instructions, preset) = match *self {
            Ask::Choice {
                labels,
                instructions,
            } => (
                QuestionKind::choice(names(labels))?,
                Some(instructions.unwrap_or(CHOOSE_LABEL)),
                None,
            ),
            Ask::Set {
                labels,
                instructions,
            } => (
                QuestionKind::set(names(labels))?,
                Some(instructions.unwrap_or(APPLY_LABELS)),
                None,
            ),
            Ask::Spans {
                labels,
                preset,
                instructions,
            } => {
                // A preset stands for its labels only when none are given.
                let preset = preset.filter(|_| labels.is_empty());
                (
                    QuestionKind::span(names(labels), preset.is_some())?,
                    instructions,
                    preset,
                )
            }
        };
        Ok(Question::asked(kind, instructions, preset, overflow))
    }

    /// One batch entry: `state` (with its `roles`) asked this question.
    pub fn entry(&self, state: Value, roles: Roles, overflow: Overflow) -> DecisionRequest {
        DecisionRequest::asked(state, roles, vec![(ASKED.into(), self.question(overflow))])
    }

    /// Read one input's answer.
    pub fn read(&self, r: &DecisionResponse) -> Read {
        let answer = r.answers.get(ASKED).map(|a| &a.answer);
        let failed = |missing: &str| {
            Read::Failed(
                r.answers
                    .iter()
                    .find_map(|(_, a)| a.answer.failure())
                    .cloned()
                    .unwrap_or_else(|| no_answer(missing)),
            )
        };
        let ranked = |probabilities: &Ordered<f64>| {
            let mut v = probabilities.0.clone();
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            v
        };
        match self {
            Ask::Spans { .. } => match answer {
                // A span question's noul is the best span's probability; its spans sit apart.
                Some(Answer::Noul(_)) => {
                    Read::Spans(r.spans.get(ASKED).cloned().unwrap_or_default())
                }
                _ => failed("no spans were read"),
            },
            Ask::Choice { .. } => match answer {
                Some(Answer::Choice(c)) if !c.probabilities.is_empty() => Read::Labels {
                    ranked: ranked(&c.probabilities),
                    selected: None,
                },
                _ => failed("no labels were read"),
            },
            Ask::Set { .. } => match r.sets.get(ASKED) {
                Some(s) if !s.probabilities.is_empty() => Read::Labels {
                    ranked: ranked(&s.probabilities),
                    selected: Some(s.selected.clone()),
                },
                _ => failed("no labels were read"),
            },
        }
    }
}

/// The batch of `entries` (from [`Ask::entry`]), keyed by their index, with a deadline and the
/// windows questions with `overflow: window` read.
pub fn batch(
    entries: Vec<DecisionRequest>,
    deadline_ms: Option<u64>,
    window: Option<Window>,
) -> Result<DecisionBody, ProtocolError> {
    let options = Options {
        deadline_ms,
        window,
        ..Options::default()
    };
    DecisionBody::batch_of(entries, options)
}

fn no_answer(message: &str) -> QuestionFailure {
    QuestionFailure::new(
        QuestionErrorKind::InvalidModelOutput,
        reason::MODEL_OUTPUT,
        message,
    )
}

#[cfg(test)]
mod tests {
    use protocol::answer::{AnswerEntry, ChoiceAnswer, NoulAnswer, SetResult};
    use protocol::Usage;

    use super::*;

    fn response(
        answers: Vec<(&str, Answer)>,
        sets: Vec<(&str, SetResult)>,
        spans: Vec<(&str, Vec<SpanFound>)>,
    ) -> DecisionResponse {
        DecisionResponse {
            model: "m".into(),
            answers: Ordered(
                answers
                    .into_iter()
                    .map(|(k, answer)| {
                        (
                            k.to_string(),
                            AnswerEntry {
                                answer,
                                input_complete: true,
                            },
                        )
                    })
                    .collect(),
            ),
            sets: Ordered(sets.into_iter().map(|(k, s)| (k.to_string(), s)).collect()),
            spans: Ordered(spans.into_iter().map(|(k, s)| (k.to_string(), s)).collect()),
            thresholds: Ordered::new(),
            usage: Usage::default(),
            meta: None,
        }
    }

    fn single(body: &DecisionBody) -> Vec<(String, String)> {
        let DecisionBody::Batch { entries, .. } = body else {
            panic!("not a batch")
        };
        entries
            .iter()
            .map(|(k, r)| {
                let q = r.questions[0].question.as_ref().expect("a valid question");
                (
                    k.clone(),
                    format!("{} {:?}", r.questions[0].id, q.kind.type_name()),
                )
            })
            .collect()
    }

    #[test]
    fn relevance_asks_one_noul_per_document_and_reads_them_in_order() {
        let docs = vec!["a".to_string(), "b".to_string()];
        let body = relevance_batch("q?", &docs).expect("a valid batch");
        assert_eq!(
            single(&body),
            vec![
                ("0".into(), "relevant \"noul\"".into()),
                ("1".into(), "relevant \"noul\"".into())
            ]
        );
        let noul = |p| {
            response(
                vec![("relevant", Answer::Noul(NoulAnswer { noul: p }))],
                vec![],
                vec![],
            )
        };
        let b = BatchResponse {
            model: "m".into(),
            states: Ordered(vec![("0".into(), noul(0.25)), ("1".into(), noul(0.75))]),
            usage: Usage::default(),
            meta: None,
        };
        assert_eq!(relevance_scores(&b), Ok(vec![0.25, 0.75]));
        let mut broken = b.clone();
        broken.states.0[1].1 = response(vec![], vec![], vec![]);
        assert_eq!(
            relevance_scores(&broken).map_err(|f| f.reason),
            Err(reason::MODEL_OUTPUT)
        );
    }

    #[test]
    fn each_ask_is_the_question_type_it_names_and_reads_its_own_answer() {
        let labels = vec!["pos".to_string(), "neg".to_string()];
        let choice = Ask::Choice {
            labels: &labels,
            instructions: None,
        };
        let set = Ask::Set {
            labels: &labels,
            instructions: Some("Which apply?"),
        };
        let spans = Ask::Spans {
            labels: &[],
            preset: Some("pii"),
            instructions: None,
        };
        let entries = vec![
            choice.entry(json!("t"), Roles::Absent, Overflow::Window),
            set.entry(json!("t"), Roles::Absent, Overflow::Reject),
            spans.entry(
                json!({"user": "t"}),
                Roles::Map(vec![("user".into(), protocol::request::Role::User)]),
                Overflow::Reject,
            ),
        ];
        let window = Window {
            tokens: 64,
            overlap: Some(8),
        };
        let body = batch(entries, Some(500), Some(window)).expect("a valid batch");
        assert_eq!(
            single(&body),
            vec![
                ("0".into(), "label \"choice\"".into()),
                ("1".into(), "label \"set\"".into()),
                ("2".into(), "label \"span\"".into())
            ]
        );
        assert_eq!(body.options().deadline_ms, Some(500));
        assert_eq!(body.options().window, Some(window));
        let q = choice.question(Overflow::Window).expect("a valid choice");
        assert_eq!(q.instructions.as_deref(), Some(CHOOSE_LABEL));
        assert_eq!(q.overflow, Overflow::Window);
        let q = spans
            .question(Overflow::Reject)
            .expect("a valid span question");
        assert_eq!(q.preset.as_deref(), Some("pii"));
        // Labels a question cannot take fail it in place, as in a body.
        let one = vec!["only".to_string()];
        let lone = Ask::Choice {
            labels: &one,
            instructions: None,
        };
        assert!(lone.question(Overflow::Reject).is_err());

        // A choice reads its probabilities highest first.
        let probs = Ordered(vec![("pos".into(), 0.2), ("neg".into(), 0.8)]);
        let r = response(
            vec![(
                "label",
                Answer::Choice(ChoiceAnswer {
                    choice: "neg".into(),
                    confidence: 0.6,
                    probabilities: probs.clone(),
                }),
            )],
            vec![],
            vec![],
        );
        assert_eq!(
            choice.read(&r),
            Read::Labels {
                ranked: vec![("neg".into(), 0.8), ("pos".into(), 0.2)],
                selected: None
            }
        );
        // A set reads its result, with what it selected.
        let r = response(
            vec![],
            vec![(
                "label",
                SetResult {
                    selected: vec!["neg".into()],
                    probabilities: probs,
                },
            )],
            vec![],
        );
        assert!(matches!(set.read(&r), Read::Labels { selected: Some(s), .. } if s == ["neg"]));
        // Nothing read is a model-output failure; a question's own failure is passed on.
        assert!(matches!(choice.read(&r), Read::Failed(f) if f.reason == reason::MODEL_OUTPUT));
        let failure = QuestionFailure::malformed("bad");
        let r = response(
            vec![(
                "label",
                Answer::Failed {
                    type_word: "span".into(),
                    failure: failure.clone(),
                },
            )],
            vec![],
            vec![],
        );
        assert_eq!(spans.read(&r), Read::Failed(failure));
    }
}
