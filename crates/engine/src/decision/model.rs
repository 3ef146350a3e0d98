//! The decision model and the data its steps share: the loaded model (a token tree on a
//! worker, or a direct backend), its limits, a prepared request, what was read of its logits,
//! and the answer. The steps (`plan`, `views`, `prepare`, `readout`, `calibrate`, `contest`,
//! `decide`, `direct`) build on these types; this module imports none of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::answer::{AnswerEntry, BatchResponse, DecisionResponse};
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionBody, DecisionRequest};
use protocol::{Answer, Ordered, ProtocolError, Usage};

use super::adapter::{Adapters, Head};
use crate::backend::{Backend, BackendInfo, Detector, DirectBackend, Node, RootLogits, Token};
use crate::budget::Cutter;
use crate::error::EngineError;
use crate::labels::Trie;
use crate::package::{DecisionConfig, ModelMeta};
use crate::scheduler::Worker;
use crate::span::{CopySteer, SpanVocab};

/// Token limits of a decision model (its card's `limits`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Limits {
    /// Most tokens one question reads (system prompt, state and question).
    pub max_input_tokens: usize,
    /// Most tokens one request reads: the state once and every question's own tokens
    /// (the system prompt excluded).
    pub max_request_tokens: usize,
    pub max_options: usize,
    pub max_levels: usize,
    /// The length each question was validated at; without long context a question reads at
    /// most this many tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validated_input_tokens: Option<usize>,
    /// Most tokens of a state read in windows (`overflow: window`), unless
    /// `options.max_tokens` sets another.
    pub max_scan_tokens: usize,
    /// Tokens of a state an `overflow: truncate` question reads.
    pub truncate_tokens: usize,
}

impl Limits {
    /// The limits of a model whose one input holds `max_input_tokens` and whose requests hold
    /// what its sequences hold together; the package config may set the scan and truncation
    /// budgets (default: four inputs on a CPU, and one input).
    pub fn new(max_input_tokens: usize, info: &BackendInfo, config: &DecisionConfig) -> Limits {
        Limits {
            max_input_tokens,
            max_request_tokens: info.context_tokens * info.max_sequences,
            max_options: protocol::MAX_OPTIONS,
            max_levels: protocol::MAX_LEVELS,
            validated_input_tokens: config.validated_input_tokens,
            max_scan_tokens: config.max_scan_tokens.unwrap_or(4 * max_input_tokens),
            truncate_tokens: config
                .truncate_tokens
                .unwrap_or(max_input_tokens)
                .min(max_input_tokens),
        }
    }
}

/// Time spent in each phase of a request, for Server-Timing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    pub tokenize: Duration,
    pub queue: Duration,
    pub forward: Duration,
    pub post: Duration,
    /// Requests and tokens of the forward this request shared (0 when none ran).
    pub batch_jobs: usize,
    pub batch_tokens: usize,
    /// Tokens of this request not evaluated: the prefix cache answered them, or they repeat a
    /// branch of the same forward (a question asked twice is evaluated once).
    pub cached_tokens: usize,
}

/// The answer to a decision body.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Single(DecisionResponse),
    Batch(BatchResponse),
}

/// How a choice, noul or score question's answer is read.
#[derive(Debug, Clone, Default)]
pub(crate) enum Readout {
    /// From its label logits (and the package's corrections).
    #[default]
    Base,
    /// By the package's decision adapter for it, from features read at the answer position;
    /// no correction applies (the head's training calibrated it).
    Adapter(Arc<Head>),
    /// From its label logits, the adapter features kept beside them (to train an adapter on).
    Recorded,
}

impl Readout {
    /// Whether the question's first read also reads the adapter features.
    pub(crate) fn reads_features(&self) -> bool {
        !matches!(self, Readout::Base)
    }
}

/// What one question asks, as its answer is built from its probabilities (shared by every
/// engine; a causal LM keeps the label trie of a choice or score beside it).
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    Failed {
        id: String,
        type_word: String,
        failure: QuestionFailure,
    },
    Choice {
        id: String,
        keys: Vec<String>,
        /// One entry per branch the choice was asked in: the option each label the readout
        /// reads stands for (by name, the option itself; by letter, the option shown there).
        shown: Vec<Vec<usize>>,
        temperature: f64,
        complete: bool,
        readout: Readout,
    },
    Noul {
        id: String,
        temperature: f64,
        complete: bool,
        readout: Readout,
    },
    Score {
        id: String,
        legend: Vec<String>,
        /// Per view of the levels (in order, then reversed), the level each label it reads
        /// stands for (by name, the level itself; by number, the level shown there).
        shown: Vec<Vec<usize>>,
        temperature: f64,
        complete: bool,
        readout: Readout,
    },
    Set {
        id: String,
        labels: Vec<String>,
        threshold: f64,
        temperature: f64,
        complete: bool,
    },
    /// One growing branch per label on each root; spans are read from their growth.
    Span {
        id: String,
        /// Each label with its description.
        labels: Vec<(String, Option<String>)>,
        threshold: f64,
        complete: bool,
        /// The text the question read (offsets count into it).
        text: String,
        /// Per root: the copy constraint the branches grew under, and where the bytes that
        /// root read start in `text`.
        reads: Vec<(Arc<CopySteer>, usize)>,
        /// Per root: whether each label was asked there (see [`crate::span::may_hold`]); a
        /// label not asked has no branch on that root.
        asked: Vec<Vec<bool>>,
    },
}

impl Plan {
    /// The question's id.
    pub(crate) fn id(&self) -> &str {
        match self {
            Plan::Failed { id, .. }
            | Plan::Choice { id, .. }
            | Plan::Noul { id, .. }
            | Plan::Score { id, .. }
            | Plan::Set { id, .. }
            | Plan::Span { id, .. } => id,
        }
    }

    /// How a choice, noul or score question is read (`None` for other types).
    pub(crate) fn readout(&self) -> Option<&Readout> {
        match self {
            Plan::Choice { readout, .. }
            | Plan::Noul { readout, .. }
            | Plan::Score { readout, .. } => Some(readout),
            _ => None,
        }
    }

    /// The classes of its probability group, in order: a choice's keys as the request lists
    /// them, `yes` and `no`, a score's level indices (as [`super::adapter::classes_of`]).
    pub(crate) fn classes(&self) -> Vec<String> {
        match self {
            Plan::Choice { keys, .. } => keys.clone(),
            Plan::Noul { .. } => vec!["yes".into(), "no".into()],
            Plan::Score { legend, .. } => (0..legend.len()).map(|i| i.to_string()).collect(),
            _ => Vec::new(),
        }
    }
}

/// One request, rendered and tokenized, ready for the queue.
#[derive(Debug)]
pub(super) struct Prepared {
    /// Root 0 reads the whole state; each further root reads the keys some questions name
    /// with `over`, or the part a span question reads.
    pub(super) roots: Vec<Node>,
    /// Each question's plan and the roots its branch hangs from (several when it reads its
    /// state in windows; none when it failed).
    pub(super) plans: Vec<(Vec<usize>, Plan, Option<Trie>)>,
    pub(super) usage: Usage,
}

/// What was read of one request's logits: each question's probability groups, and each span
/// question's spans (every label's, in plan order) before the places several labels claim
/// are settled.
pub(super) struct Reading<'p> {
    pub(super) groups: Vec<(&'p Plan, Option<Vec<Vec<f64>>>)>,
    /// Per plan: the adapter features at its answer position (its first root's), where they
    /// were read.
    pub(super) features: Vec<Option<Vec<f32>>>,
    pub(super) spans: Vec<Option<Vec<protocol::SpanFound>>>,
    pub(super) usage: Usage,
}

/// The logits of each root of `p` that had questions to evaluate, taken in turn from the
/// job's logits.
pub(super) fn per_root<'a>(
    p: &Prepared,
    logits: &mut impl Iterator<Item = &'a RootLogits>,
) -> Vec<Option<&'a RootLogits>> {
    p.roots
        .iter()
        .map(|root| {
            if root.children.is_empty() {
                None
            } else {
                logits.next()
            }
        })
        .collect()
}

/// A loaded decision model: a causal LM read through a token tree, or a direct backend.
pub struct DecisionModel {
    pub meta: ModelMeta,
    pub config: DecisionConfig,
    pub limits: Limits,
    /// `exact` when the load-time self-check found a question's logits bit-identical alone
    /// and sharing a forward with other questions and requests, else `approximate`.
    pub numerics: &'static str,
    /// Where long texts may be cut for this tokenizer.
    pub cutter: Cutter,
    pub(crate) engine: Engine,
    /// The object detector that answers box questions (`decision::locate`), when attached.
    pub(crate) detector: Option<Arc<dyn Detector>>,
    /// The package's decision adapters, when it has any.
    pub(crate) adapters: Option<Adapters>,
    /// Whether every choice, noul and score question keeps its adapter features (`adapt`).
    pub(crate) record_features: bool,
}

/// How a decision model evaluates.
pub(crate) enum Engine {
    /// A causal LM: token trees on the model's worker thread.
    Tree(Box<Tree>),
    /// A model that answers each question from its parts in one call, on the request's thread.
    Direct(Arc<dyn DirectBackend>),
}

/// The parts of a causal-LM decision model: its worker, system prompt and label vocabulary.
pub(crate) struct Tree {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) worker: Worker,
    pub(super) prefix: Vec<Token>,
    pub(super) yes_no: Trie,
    pub(super) letters: Vec<Vec<Token>>,
    pub(super) codes: Vec<Vec<Token>>,
    pub(super) digits: Vec<Vec<Token>>,
    pub(super) turn_end: Vec<Token>,
    /// The state block's header (`Text:`) and separator tokens.
    pub(super) header: Vec<Token>,
    pub(super) sep: Vec<Token>,
    /// What span branches may copy from (`None` when the vocabulary cannot steer them).
    pub(super) spans: Option<Arc<SpanVocab>>,
    /// Empty-state answers of the questions content-free calibration corrects.
    pub(super) remembered: Remembered,
    /// The tokens whose logits a decision adapter reads (`adapter::feature_tokens`).
    pub(super) features: Vec<Token>,
}

/// The requests of a body with their names (a single request's is empty).
pub(crate) fn entries(body: &DecisionBody) -> Vec<(&str, &DecisionRequest)> {
    match body {
        DecisionBody::Single(r) => vec![("", r)],
        DecisionBody::Batch { entries, .. } => {
            entries.iter().map(|(n, r)| (n.as_str(), r)).collect()
        }
    }
}

/// A single request that was refused, or a batch whose every entry was, is an error (the
/// first refusal); a batch answers its other entries and fails the refused ones in place.
pub(crate) fn refusal<T>(
    batch: bool,
    prepared: &[Result<T, ProtocolError>],
) -> Result<(), EngineError> {
    if !batch || prepared.iter().all(Result::is_err) {
        if let Some(Err(e)) = prepared.iter().find(|p| p.is_err()) {
            return Err(EngineError::Request(e.clone()));
        }
    }
    Ok(())
}

impl DecisionModel {
    /// Attach an object detector: the model then answers box questions about images (and
    /// reads images for them alone).
    pub fn with_detector(mut self, detector: Arc<dyn Detector>) -> DecisionModel {
        for t in ["box", "track"] {
            if !self.config.answers(t) {
                self.config.question_types.push(t.into());
            }
        }
        self.detector = Some(detector);
        self
    }

    /// How many features a decision adapter reads on this model: a causal LM's feature
    /// tokens, a direct model's state vector where it gives one.
    fn features(&self) -> usize {
        match &self.engine {
            Engine::Tree(t) => t.features.len(),
            // A direct model that gives a state vector says how wide it is.
            Engine::Direct(d) => d.info().hidden_size.unwrap_or(0),
        }
    }

    /// Attach the package's decision adapters, trained on this model's vocabulary and
    /// features.
    pub fn with_adapters(mut self, adapters: Adapters) -> Result<DecisionModel, EngineError> {
        let vocab = match &self.engine {
            Engine::Tree(t) => t.backend.vocab_size(),
            Engine::Direct(d) => d.vocab_size(),
        };
        if self.features() == 0
            || self.features() != adapters.features
            || vocab != adapters.vocab_size
        {
            return Err(EngineError::LoadFailed(
                self.meta.name.clone(),
                format!(
                    "decision adapters read {} features of a {}-token vocabulary; this model \
                     gives {} of {vocab}",
                    adapters.features,
                    adapters.vocab_size,
                    self.features()
                ),
            ));
        }
        if matches!(self.engine, Engine::Tree(_)) && adapters.reads_text() {
            return Err(EngineError::LoadFailed(
                self.meta.name.clone(),
                "heads that read the text's n-grams are served on an encoder backbone".into(),
            ));
        }
        if let Some(span) = adapters.span_head() {
            // The head must read the rows this backbone gives its words.
            let width = match &self.engine {
                Engine::Direct(d) => d
                    .word_rows("Ann Lee called +1 415 555 0199.", 64)?
                    .and_then(|w| w.rows.first().map(Vec::len)),
                Engine::Tree(_) => None,
            };
            if width != Some(span.width()) {
                return Err(EngineError::LoadFailed(
                    self.meta.name.clone(),
                    format!(
                        "the span head reads {} features a word; this model gives {}",
                        span.width(),
                        width.map_or("none".to_string(), |w| w.to_string())
                    ),
                ));
            }
        }
        self.adapters = Some(adapters);
        Ok(self)
    }

    /// Keep the adapter features of every choice, noul and score question
    /// ([`DecisionModel::adapter_features`]), to train adapters on.
    pub fn recording_features(mut self) -> Result<DecisionModel, EngineError> {
        if self.features() == 0 {
            return Err(EngineError::LoadFailed(
                self.meta.name.clone(),
                "this model has no hidden width to read adapter features by".into(),
            ));
        }
        self.record_features = true;
        Ok(self)
    }

    /// The package's decision adapters, when it has any (the card lists their questions and
    /// whether they answer by default).
    pub fn adapters(&self) -> Option<&Adapters> {
        self.adapters.as_ref()
    }

    /// The attached object detector, if any.
    pub fn detector(&self) -> Option<&dyn Detector> {
        self.detector.as_deref()
    }

    pub fn info(&self) -> &BackendInfo {
        match &self.engine {
            Engine::Tree(t) => t.backend.info(),
            Engine::Direct(d) => d.info(),
        }
    }

    /// The model's worker thread; a direct model has none (it answers on the request's thread).
    pub fn worker(&self) -> Option<&Worker> {
        match &self.engine {
            Engine::Tree(t) => Some(&t.worker),
            Engine::Direct(_) => None,
        }
    }

    /// Tokens of the system prompt, evaluated once per load (none on a direct model).
    pub fn prefix_tokens(&self) -> usize {
        match &self.engine {
            Engine::Tree(t) => t.prefix.len(),
            Engine::Direct(_) => 0,
        }
    }

    /// The answer to a body from each request's response, in order.
    pub(crate) fn finish(
        &self,
        batch: bool,
        mut responses: Vec<(String, DecisionResponse)>,
    ) -> Result<Decision, EngineError> {
        if !batch {
            let (_, r) = responses
                .pop()
                .ok_or_else(|| EngineError::Forward("no response assembled".into()))?;
            return Ok(Decision::Single(r));
        }
        let mut usage = Usage::default();
        let mut states = Ordered::new();
        for (name, r) in responses {
            usage.add(&r.usage);
            states.push(name, r);
        }
        Ok(Decision::Batch(BatchResponse {
            model: self.meta.name.clone(),
            states,
            usage,
            meta: None,
        }))
    }

    /// A batch entry that was refused: each of its questions fails with invalid_input.
    pub(crate) fn refused(&self, req: &DecisionRequest, e: &ProtocolError) -> DecisionResponse {
        let mut answers = Ordered::new();
        for slot in &req.questions {
            answers.push(
                slot.id.clone(),
                AnswerEntry {
                    answer: Answer::Failed {
                        type_word: slot.type_word.clone(),
                        failure: QuestionFailure {
                            kind: QuestionErrorKind::InvalidInput,
                            reason: reason::INPUT_MALFORMED,
                            message: e.message.clone(),
                            limit: e.limit,
                        },
                    },
                    input_complete: false,
                },
            );
        }
        DecisionResponse {
            model: self.meta.name.clone(),
            answers,
            sets: Ordered::new(),
            spans: Ordered::new(),
            thresholds: Ordered::new(),
            usage: Usage::default(),
            meta: None,
        }
    }

    pub(crate) fn temperature(&self, kind: &str, n_questions: usize) -> f64 {
        if let Some(t) = self
            .config
            .temperature_by_questions
            .as_ref()
            .and_then(|t| t.for_count(n_questions))
        {
            return t;
        }
        match kind {
            "choice" => self.config.temperature.choice,
            "score" => self.config.temperature.score,
            _ => self.config.temperature.noul,
        }
    }
}

/// How many distinct questions' empty-state answers a model remembers (then it starts over).
const REMEMBERED: usize = 4096;

/// Empty-state answers by question.
#[derive(Default)]
pub(crate) struct Remembered(Mutex<HashMap<String, Vec<f64>>>);

impl Remembered {
    pub(crate) fn get(&self, key: &str) -> Option<Vec<f64>> {
        self.0.lock().ok()?.get(key).cloned()
    }

    pub(crate) fn insert(&self, key: String, p: Vec<f64>) {
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= REMEMBERED {
                m.clear();
            }
            m.insert(key, p);
        }
    }
}
