//! Decision models: render a request into a tree of token sequences (system prompt once, the
//! state once, then one branch per question), queue it, and read typed answers from the logits
//! of each question's option labels.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::answer::{
    AnswerEntry, BatchResponse, ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer, SetResult,
    SpanFound,
};
use protocol::confidence::{argmax, choice_confidence, expected_level, score_confidence};
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{
    DecisionBody, DecisionRequest, Overflow, Question, QuestionKind, Role, Roles,
};
use protocol::{text, Answer, Ordered, ProtocolError, Usage};

use crate::backend::{Backend, BackendInfo, DirectBackend, Grow, Node, RootLogits, Token};
use crate::budget::{self, Cutter};
use crate::error::EngineError;
use crate::labels::{option_code, Trie};
use crate::package::{DecisionConfig, ModelMeta};
use crate::scheduler::{JobError, SchedulerConfig, Worker};
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
}

/// The answer to a decision body.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Single(DecisionResponse),
    Batch(BatchResponse),
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
    },
    Noul {
        id: String,
        temperature: f64,
        complete: bool,
    },
    Score {
        id: String,
        legend: Vec<String>,
        temperature: f64,
        complete: bool,
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
        labels: Vec<String>,
        threshold: f64,
        complete: bool,
        /// The text the question read (offsets count into it).
        text: String,
        /// Per root: the copy constraint the branches grew under, and where the bytes that
        /// root read start in `text`.
        reads: Vec<(Arc<CopySteer>, usize)>,
    },
}

/// One request, rendered and tokenized, ready for the queue.
#[derive(Debug)]
struct Prepared {
    /// Root 0 reads the whole state; each further root reads the keys some questions name
    /// with `over`, or the part a span question reads.
    roots: Vec<Node>,
    /// Each question's plan and the roots its branch hangs from (several when it reads its
    /// state in windows; none when it failed).
    plans: Vec<(Vec<usize>, Plan, Option<Trie>)>,
    usage: Usage,
}

/// Whether `keys` name every key of an object state (then the question reads the whole state).
pub(crate) fn covers_state(state: &serde_json::Value, keys: &[String]) -> bool {
    state
        .as_object()
        .is_some_and(|m| m.len() == keys.len() && m.keys().all(|k| keys.contains(k)))
}

/// Where a question reads its view of the state from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RootKey {
    /// The whole view, in one root.
    Whole(usize),
    /// The first tokens of the view.
    Truncated(usize, usize),
    /// The whole view in windows of this many tokens.
    Windows(usize, usize),
}

/// The views of a request's state (the whole state, or the keys an `over` names), each read
/// once as far as its questions need, and scanned whole when a question reads it in windows.
pub(crate) struct Views<'a> {
    pub texts: Vec<Cow<'a, str>>,
    pub reads: Vec<budget::Read>,
    /// Per view: not scanned, scanned whole, or over the scan budget (`Some(None)`).
    pub scans: Vec<Option<Option<budget::Read>>>,
    pub read_in_part: Vec<bool>,
    pub used: Vec<bool>,
}

impl Views<'_> {
    /// The token slices of the roots a key stands for.
    pub fn roots(&self, key: RootKey) -> Vec<&[Token]> {
        match key {
            RootKey::Whole(v) => vec![&self.reads[v].tokens[..]],
            RootKey::Truncated(v, n) => {
                let n = n.min(self.reads[v].tokens.len());
                vec![&self.reads[v].tokens[..n]]
            }
            RootKey::Windows(v, w) => {
                let tokens = self.scanned(v).unwrap_or(&[]);
                windows(tokens.len(), w)
                    .into_iter()
                    .map(|(a, b)| &tokens[a..b])
                    .collect()
            }
        }
    }

    /// Per root of `key`: where the bytes it reads start in the view's text, and those bytes.
    pub fn root_bytes(&self, vocab: &dyn budget::Vocab, key: RootKey) -> Vec<(usize, Vec<u8>)> {
        let bytes = |tokens: &[Token]| -> Vec<u8> {
            tokens.iter().flat_map(|t| vocab.token_bytes(*t)).collect()
        };
        match key {
            RootKey::Whole(_) | RootKey::Truncated(..) => self
                .roots(key)
                .into_iter()
                .map(|ts| (0, bytes(ts)))
                .collect(),
            RootKey::Windows(v, w) => {
                let tokens = self.scanned(v).unwrap_or(&[]);
                let mut offset = 0;
                let mut done = 0;
                let mut out = Vec::new();
                for (a, b) in windows(tokens.len(), w) {
                    offset += bytes(&tokens[done..a]).len();
                    done = a;
                    out.push((offset, bytes(&tokens[a..b])));
                }
                out
            }
        }
    }

    fn scanned(&self, v: usize) -> Option<&[Token]> {
        match &self.scans[v] {
            Some(Some(scan)) => Some(&scan.tokens),
            _ => None,
        }
    }

    /// Add the tokens read of each view used (the whole view once, or the part read, plus
    /// `framing` tokens around it) to `usage`, and mark a state read in part.
    pub fn count(&self, usage: &mut Usage, framing: usize) {
        for v in 0..self.texts.len() {
            if !self.used[v] {
                continue;
            }
            let scanned = self.scanned(v);
            let n = scanned.map_or(self.reads[v].tokens.len(), <[Token]>::len);
            usage.input_tokens += (n + framing) as u64;
            if self.read_in_part[v] && scanned.is_none() {
                usage.tokens_lower_bound = true;
            }
        }
    }
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
    backend: Arc<dyn Backend>,
    worker: Worker,
    prefix: Vec<Token>,
    yes_no: Trie,
    letters: Vec<Vec<Token>>,
    codes: Vec<Vec<Token>>,
    digits: Vec<Vec<Token>>,
    turn_end: Vec<Token>,
    /// The state block's header (`Text:`) and separator tokens.
    header: Vec<Token>,
    sep: Vec<Token>,
    /// What span branches may copy from (`None` when the vocabulary cannot steer them).
    spans: Option<Arc<SpanVocab>>,
}

/// The keys of the state question `q` reads with `over`, or `None` when it reads the whole
/// state (no `over`, or one that names every key).
pub(crate) fn over_keys<'a>(r: &DecisionRequest, q: &'a Question) -> Option<&'a [String]> {
    q.over
        .as_deref()
        .filter(|keys| !covers_state(&r.state, keys))
}

/// The index of view `key` in `views`, added when new.
pub(crate) fn view_index<K: PartialEq>(views: &mut Vec<K>, key: K) -> usize {
    match views.iter().position(|v| *v == key) {
        Some(v) => v,
        None => {
            views.push(key);
            views.len() - 1
        }
    }
}

/// A view of the state that questions read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum ViewKey<'a> {
    /// The whole state, or the keys an `over` names, rendered.
    State(Option<&'a [String]>),
    /// The text of one string part of an object state, exactly as it was sent: what a span
    /// question reads, so that its offsets count into a string the client has.
    Part(&'a str),
}

/// The text of the string part of an object state that span question `q` reads: the one key
/// its `over` names, else the answer part, else the user part, else the state's only part
/// (`None` for a text state). A span question's offsets must count into a string the client
/// sent, so anything else (several parts, a part that is not a string) is refused.
fn span_part<'a>(r: &'a DecisionRequest, q: &Question) -> Result<Option<&'a str>, QuestionFailure> {
    let Some(map) = r.state.as_object() else {
        return Ok(None);
    };
    // The part's text, when its value is a string.
    let text_part = |k: &str| {
        map.get(k)
            .and_then(serde_json::Value::as_str)
            .map(Some)
            .ok_or_else(|| {
                QuestionFailure::malformed(format!(
                    "a span question reads one text part of the state, and {k:?} is not a string"
                ))
            })
    };
    if let Some(keys) = &q.over {
        return match keys.as_slice() {
            [k] => text_part(k),
            _ => Err(QuestionFailure::malformed(
                "a span question reads one text part of the state: over must name one key",
            )),
        };
    }
    let role_of = |k: &str| match (&r.roles, k) {
        (Roles::Absent, "answer") => Some(Role::Answer),
        (Roles::Absent, "user") => Some(Role::User),
        (roles, _) => roles.given(k),
    };
    let with_role = |want: Role| map.keys().find(|k| role_of(k) == Some(want));
    let part = match (with_role(Role::Answer), with_role(Role::User)) {
        (Some(k), _) | (None, Some(k)) => Some(k),
        (None, None) if map.len() == 1 => map.keys().next(),
        (None, None) => None,
    };
    match part {
        Some(k) => text_part(k),
        None => Err(QuestionFailure::malformed(
            "a span question reads one text part of the state: name it with over",
        )),
    }
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

/// Windows of `w` tokens over `len` tokens, overlapping by an eighth of a window.
pub(crate) fn windows(len: usize, w: usize) -> Vec<(usize, usize)> {
    let w = w.max(1);
    let step = (w - w / 8).max(1);
    let mut out = Vec::new();
    let mut a = 0;
    loop {
        let b = (a + w).min(len);
        out.push((a, b));
        if b >= len {
            return out;
        }
        a += step;
    }
}

fn label_paths(backend: &dyn Backend, labels: &[String]) -> Result<Vec<Vec<Token>>, EngineError> {
    labels
        .iter()
        .map(|l| backend.tokenize(l, false).map_err(EngineError::from))
        .collect()
}

/// Yes and No as the model may write them first: the prompt asks for `Yes` or `No`, and each
/// answer's probability adds up its one-token spellings (`Yes`, `yes`, `YES`, with a leading
/// space too), so mass the model puts on another spelling of the same word is not lost.
fn yes_no_trie(backend: &dyn Backend) -> Result<Trie, EngineError> {
    const SPELLINGS: [[&str; 5]; 2] = [
        ["Yes", "yes", "YES", " Yes", " yes"],
        ["No", "no", "NO", " No", " no"],
    ];
    // The first spelling of each always counts (in as many tokens as it takes); another only
    // where it is one token that starts no path kept before, so none is a prefix of another.
    let mut paths: Vec<(Vec<Token>, usize)> = Vec::new();
    for (label, words) in SPELLINGS.iter().enumerate() {
        paths.push((backend.tokenize(words[0], false)?, label));
    }
    for (label, words) in SPELLINGS.iter().enumerate() {
        for w in &words[1..] {
            let p = backend.tokenize(w, false)?;
            if p.len() == 1 && !paths.iter().any(|(q, _)| q.first() == p.first()) {
                paths.push((p, label));
            }
        }
    }
    let labelled: Vec<(&[Token], usize)> = paths.iter().map(|(p, l)| (p.as_slice(), *l)).collect();
    Trie::build_spellings(&labelled).map_err(|e| EngineError::Labels(e.to_string()))
}

/// The trie of a question's label paths; labels the vocabulary cannot tell apart are a
/// model-output failure of that question.
fn label_trie(paths: &[Vec<Token>]) -> Result<Trie, QuestionFailure> {
    Trie::build(paths).map_err(|e| {
        QuestionFailure::new(
            QuestionErrorKind::InvalidModelOutput,
            reason::MODEL_OUTPUT,
            e.to_string(),
        )
    })
}

impl DecisionModel {
    /// Load: check the label vocabulary, start the worker and evaluate the system prompt once.
    pub fn start(
        meta: ModelMeta,
        config: DecisionConfig,
        backend: Arc<dyn Backend>,
        scheduler: SchedulerConfig,
    ) -> Result<DecisionModel, EngineError> {
        let t = &config.template;
        let prefix_text = format!(
            "{}{}{}{}",
            t.system_start, config.system_prompt, t.system_end, t.user_start
        );
        let prefix = backend.tokenize(&prefix_text, true)?;
        let turn_end = backend.tokenize(&format!("{}{}", t.user_end, t.assistant_start), true)?;
        let letters = label_paths(
            &*backend,
            &(0..26).map(|i| option_code(i, 26)).collect::<Vec<_>>(),
        )?;
        let codes = label_paths(
            &*backend,
            &(0..260).map(|i| option_code(i, 260)).collect::<Vec<_>>(),
        )?;
        let digits = label_paths(
            &*backend,
            &(0..10).map(|i| i.to_string()).collect::<Vec<_>>(),
        )?;
        let yes_no = yes_no_trie(&*backend)?;
        for paths in [&letters, &codes, &digits] {
            Trie::build(paths).map_err(|e| EngineError::Labels(e.to_string()))?;
        }
        let info = backend.info().clone();
        // A question's path (system prompt, state, question, two label steps) must fit one
        // sequence; a request's tokens are bounded by what the sequences hold together.
        let max_input_tokens = info
            .trained_context
            .min(info.context_tokens)
            .saturating_sub(2);
        let limits = Limits::new(max_input_tokens, &info, &config);
        let header = backend.tokenize("Text:\n", false)?;
        let sep = backend.tokenize("\n\n", false)?;
        let cutter = Cutter::calibrate(&*backend)?;
        // A vocabulary that cannot steer a copy (no one-token newline, no `None`) serves no
        // span questions, and its card says so.
        let spans = if config.answers("span") {
            SpanVocab::build(&*backend, &t.user_end).ok().map(Arc::new)
        } else {
            None
        };
        let mut config = config;
        match spans {
            Some(_) if !config.presets.iter().any(|p| p == protocol::PII_PRESET) => {
                config.presets.push(protocol::PII_PRESET.into());
            }
            Some(_) => {}
            None => config.question_types.retain(|t| t != "span"),
        }
        let worker = Worker::start(&meta.name, backend.clone(), prefix.clone(), scheduler)?;
        let tree = Tree {
            backend,
            worker,
            prefix,
            yes_no,
            letters,
            codes,
            digits,
            turn_end,
            header,
            sep,
            spans,
        };
        let mut model = DecisionModel {
            meta,
            config,
            limits,
            numerics: "approximate",
            cutter,
            engine: Engine::Tree(Box::new(tree)),
        };
        if let Engine::Tree(t) = &model.engine {
            let numerics = model.measure_numerics(t)?;
            model.numerics = numerics;
        }
        Ok(model)
    }

    /// Self-check at load: the same question alone, then beside another question and another
    /// request in one forward. Bit-identical logits mean `exact` numerics.
    fn measure_numerics(&self, t: &Tree) -> Result<&'static str, EngineError> {
        let root = |state: &str, questions: serde_json::Value| -> Result<Node, EngineError> {
            let body = serde_json::json!({"state": state, "questions": questions});
            match protocol::parse_decision_body(&body, protocol::Schema::Internal) {
                Ok(DecisionBody::Single(r)) => self
                    .prepare(t, &r)
                    .map_err(EngineError::Request)?
                    .roots
                    .into_iter()
                    .next()
                    .ok_or_else(|| EngineError::Labels("the self-check has no state".into())),
                _ => Err(EngineError::Labels(
                    "the self-check request does not decode".into(),
                )),
            }
        };
        let probe = serde_json::json!({"type": "noul", "instructions": "Is the customer unhappy?"});
        let other =
            serde_json::json!({"type": "noul", "instructions": "Does the text mention a date?"});
        let state = "The parcel arrived two days late and the box was crushed.";
        let alone = root(state, serde_json::json!({ "q": probe }))?;
        let shared = root(state, serde_json::json!({ "q": probe, "x": other }))?;
        let neighbour = root(
            "Please reset my password.",
            serde_json::json!({ "x": other }),
        )?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| EngineError::Forward(e.to_string()))?;
        let run = |roots: Vec<Node>| {
            rt.block_on(t.worker.submit(roots, None))
                .map_err(|e| EngineError::Forward(e.to_string()))
        };
        let a = run(vec![alone])?;
        let b = run(vec![neighbour, shared])?;
        let first =
            |logits: &[RootLogits], i: usize| logits.get(i).and_then(|r| r.first()).cloned();
        let same = match (first(&a.logits, 0), first(&b.logits, 1)) {
            (Some(x), Some(y)) => {
                x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()) && x.len() == y.len()
            }
            _ => false,
        };
        Ok(if same { "exact" } else { "approximate" })
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

    /// The whole token sequence each valid question of `r` is read from (system prompt, state,
    /// question block), as a runtime without shared prefixes would evaluate it. For benchmarks
    /// that compare against plain llama.cpp; a direct model has no such sequences.
    pub fn question_sequences(&self, r: &DecisionRequest) -> Result<Vec<Vec<Token>>, EngineError> {
        let Engine::Tree(t) = &self.engine else {
            return Ok(Vec::new());
        };
        let p = self.prepare(t, r).map_err(EngineError::Request)?;
        Ok(p.roots
            .iter()
            .flat_map(|root| {
                root.children.iter().map(|q| {
                    let mut seq = t.prefix.clone();
                    seq.extend_from_slice(&root.tokens);
                    seq.extend_from_slice(&q.tokens);
                    seq
                })
            })
            .collect())
    }

    /// Answer a decision body. Request-level failures are errors; question-level failures
    /// are answered in place.
    pub async fn decide(
        &self,
        body: &DecisionBody,
        started: Instant,
    ) -> Result<(Decision, Timings), EngineError> {
        match &self.engine {
            Engine::Tree(t) => self.decide_tree(t, body, started).await,
            Engine::Direct(d) => crate::direct::decide(self, &**d, body, started),
        }
    }

    async fn decide_tree(
        &self,
        t: &Tree,
        body: &DecisionBody,
        started: Instant,
    ) -> Result<(Decision, Timings), EngineError> {
        let t0 = Instant::now();
        let requests = entries(body);
        let batch = matches!(body, DecisionBody::Batch { .. });
        let prepared: Vec<Result<Prepared, ProtocolError>> =
            requests.iter().map(|(_, r)| self.prepare(t, r)).collect();
        refusal(batch, &prepared)?;
        let mut timings = Timings {
            tokenize: t0.elapsed(),
            ..Timings::default()
        };
        let deadline = body
            .options()
            .deadline_ms
            .map(|ms| started + Duration::from_millis(ms));
        // Queue every root that has a question to evaluate.
        let roots: Vec<Node> = prepared
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .flat_map(|p| p.roots.iter())
            .filter(|root| !root.children.is_empty())
            .cloned()
            .collect();
        let outcome = if roots.is_empty() {
            Ok(Vec::new())
        } else {
            match t.worker.submit(roots, deadline).await {
                Ok(out) => {
                    timings.queue = out.queue;
                    timings.forward = out.forward;
                    timings.batch_jobs = out.batch_jobs;
                    timings.batch_tokens = out.batch_tokens;
                    Ok(out.logits)
                }
                Err(JobError::DeadlineExceeded) => Err(QuestionFailure::new(
                    QuestionErrorKind::DeadlineExceeded,
                    reason::DEADLINE,
                    "options.deadline_ms passed before the model started this work",
                )),
                Err(JobError::Overloaded) => return Err(EngineError::Overloaded),
                Err(JobError::OutOfMemory { shared }) => {
                    return Err(EngineError::OutOfMemory { shared })
                }
                Err(JobError::Unavailable) => return Err(EngineError::Unavailable),
                Err(JobError::Forward(m)) => return Err(EngineError::Forward(m)),
            }
        };
        let t_post = Instant::now();
        let mut logits = match &outcome {
            Ok(l) => l.iter(),
            Err(_) => [].iter(),
        };
        let mut responses = Vec::with_capacity(prepared.len());
        for ((name, req), p) in requests.iter().zip(prepared) {
            let resp = match p {
                Ok(p) => {
                    let root_logits: Vec<Option<&RootLogits>> = p
                        .roots
                        .iter()
                        .map(|root| {
                            if root.children.is_empty() {
                                None
                            } else {
                                logits.next()
                            }
                        })
                        .collect();
                    let failure = outcome.as_ref().err();
                    self.assemble(t, &p, root_logits, failure)
                }
                Err(e) => self.refused(req, &e),
            };
            responses.push((name.to_string(), resp));
        }
        timings.post = t_post.elapsed();
        Ok((self.finish(batch, responses)?, timings))
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

    fn render_state(state: &serde_json::Value, roles: &Roles) -> String {
        match (state, roles) {
            (serde_json::Value::Object(map), Roles::Map(_)) => {
                let mut out = String::new();
                for (k, v) in map {
                    let tag = match roles.given(k) {
                        Some(Role::User) => " (user's content)",
                        Some(Role::Context) => " (context)",
                        Some(Role::Answer) => " (answer under check)",
                        None => "",
                    };
                    let body = text::render(v);
                    if body.contains('\n') {
                        out.push_str(&format!("{k}{tag}:\n{body}\n"));
                    } else {
                        out.push_str(&format!("{k}{tag}: {body}\n"));
                    }
                }
                out
            }
            (v, _) => text::render(v),
        }
    }

    /// The most tokens one question reads (system prompt, state and question): the validated
    /// length by default, `max_input_tokens` with long context.
    pub(crate) fn question_cap(&self, long_context: bool) -> usize {
        match self.limits.validated_input_tokens {
            Some(v) if !long_context => v.min(self.limits.max_input_tokens),
            _ => self.limits.max_input_tokens,
        }
    }

    /// The text of a view: the state rendered, or with `over` only the keys it names (in state
    /// order) exactly as a state holding only them; a part as it was sent.
    fn view_text<'a>(r: &'a DecisionRequest, view: ViewKey<'a>) -> Cow<'a, str> {
        match (view, &r.state) {
            // A plain text state, or a part, is read as it is, without a copy.
            (ViewKey::State(None), serde_json::Value::String(s)) => {
                Cow::Borrowed(s.trim_end_matches('\n'))
            }
            (ViewKey::Part(text), _) => Cow::Borrowed(text.trim_end_matches('\n')),
            (ViewKey::State(Some(keys)), serde_json::Value::Object(map)) => {
                let subset = serde_json::Value::Object(
                    map.iter()
                        .filter(|(k, _)| keys.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                );
                Cow::Owned(Self::render_state(&subset, &r.roles))
            }
            _ => Cow::Owned(Self::render_state(&r.state, &r.roles)),
        }
    }

    pub(crate) fn read_text(
        &self,
        vocab: &dyn budget::Vocab,
        text: &str,
        budget: usize,
    ) -> Result<budget::Read, ProtocolError> {
        self.cutter
            .read(vocab, text, budget)
            .map_err(|e| ProtocolError::invalid(e.to_string()).with_reason(reason::INPUT_MALFORMED))
    }

    /// A root: the state header, `tokens`, the separator.
    fn state_root(&self, t: &Tree, tokens: &[Token]) -> Node {
        let mut all = Vec::with_capacity(t.header.len() + tokens.len() + t.sep.len());
        all.extend_from_slice(&t.header);
        all.extend_from_slice(tokens);
        all.extend_from_slice(&t.sep);
        Node {
            tokens: all,
            ..Node::default()
        }
    }

    /// Render, read within budget and tokenize a request into roots and per-question plans.
    ///
    /// Each view of the state (the whole state, or the keys a question's `over` names) is read
    /// only as far as its questions' budgets need. A question whose budget holds the view reads
    /// it in the shared root; otherwise its `overflow` decides: reject (max_length_exceeded),
    /// truncate (a root of the first `truncate_tokens`), or window (the view read whole up to
    /// the scan budget, in overlapping windows whose answers are combined).
    fn prepare(&self, t: &Tree, r: &DecisionRequest) -> Result<Prepared, ProtocolError> {
        self.text_only(r)?;
        let n_decisions = r
            .questions
            .iter()
            .filter(|s| {
                matches!(
                    s.question.as_ref().map(|q| &q.kind),
                    Ok(QuestionKind::Choice { .. }
                        | QuestionKind::Noul { .. }
                        | QuestionKind::Score { .. })
                )
            })
            .count();
        let cap = self.question_cap(r.options.long_context);
        let fixed = t.prefix.len() + t.header.len() + t.sep.len();
        let max_tokens = r.options.max_tokens.map(|t| t as usize);

        // 1. Plan every question; note the view it reads.
        struct Planned<'a> {
            index: usize,
            view: usize,
            q: &'a Question,
            plan: Plan,
            trie: Option<Trie>,
            nodes: Vec<Node>,
            /// Tokens the state may have for this question (cap minus everything else).
            room: usize,
        }
        let mut views: Vec<ViewKey> = Vec::new();
        let mut planned: Vec<Result<Planned, (usize, QuestionFailure)>> = Vec::new();
        // Every question is read at least once: when their texts alone surely pass the
        // request's token limit, none of them is tokenized.
        let least: usize = r
            .questions
            .iter()
            .filter_map(|s| s.question.as_ref().ok())
            .map(|q| {
                let own = q.instructions.as_ref().map_or(0, String::len) + q.kind.text_bytes();
                self.cutter.least_tokens(own)
            })
            .sum();
        if least > self.limits.max_request_tokens {
            return Err(self.over_request_tokens());
        }
        let mut asked = 0usize;
        for (i, slot) in r.questions.iter().enumerate() {
            let q = match &slot.question {
                Ok(q) => q,
                Err(f) => {
                    planned.push(Err((i, f.clone())));
                    continue;
                }
            };
            if let Err(f) = self.image_check(q, slot.images, r.images) {
                planned.push(Err((i, f)));
                continue;
            }
            // A span question reads one part, where the model can answer spans at all (else
            // it fails as unsupported in its plan).
            let key = match &q.kind {
                QuestionKind::Span { .. } if t.spans.is_some() => match span_part(r, q) {
                    Ok(part) => part.map_or(ViewKey::State(None), ViewKey::Part),
                    Err(f) => {
                        planned.push(Err((i, f)));
                        continue;
                    }
                },
                _ => ViewKey::State(over_keys(r, q)),
            };
            let view = view_index(&mut views, key);
            let plan = self.plan(t, &slot.id, q, n_decisions, cap);
            // Every question is read at least once (and a block found too long was tokenized
            // up to the cap): once that work passes the request's limit, the rest need not be
            // tokenized to refuse it.
            asked += match &plan {
                Ok((_, nodes, _)) => nodes.iter().map(|n| n.tokens.len()).sum(),
                Err(f) if f.reason == reason::QUESTION_TOKENS => cap,
                Err(_) => 0,
            };
            if asked > self.limits.max_request_tokens {
                return Err(self.over_request_tokens());
            }
            match plan {
                Ok((plan, nodes, trie)) => {
                    // A span branch grows its answer in the same sequence.
                    let grows = if matches!(plan, Plan::Span { .. }) {
                        crate::span::MAX_SPAN_TOKENS
                    } else {
                        0
                    };
                    let longest = nodes.iter().map(|n| n.tokens.len()).max().unwrap_or(0) + grows;
                    planned.push(Ok(Planned {
                        index: i,
                        view,
                        q,
                        plan,
                        trie,
                        nodes,
                        room: cap.saturating_sub(fixed + longest),
                    }));
                }
                Err(f) => planned.push(Err((i, f))),
            }
        }

        // 2. Read each view as far as its roomiest question needs.
        let texts: Vec<Cow<'_, str>> = views.iter().map(|v| Self::view_text(r, *v)).collect();
        let needs: Vec<(usize, usize)> = planned
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .map(|p| (p.view, p.room))
            .collect();
        let mut views = self.read_views(&*t.backend, texts, &needs, max_tokens)?;

        // 3. Place each question on its roots.
        let mut roots: Vec<Node> = Vec::new();
        let mut keyed: Vec<(RootKey, Vec<usize>)> = Vec::new();
        let mut steers: std::collections::HashMap<usize, Arc<CopySteer>> =
            std::collections::HashMap::new();
        let mut plans: Vec<(Vec<usize>, Plan, Option<Trie>)> =
            Vec::with_capacity(r.questions.len());
        let mut usage = Usage {
            input_tokens: t.prefix.len() as u64,
            ..Usage::default()
        };
        let failed = |i: usize, failure: QuestionFailure| -> (Vec<usize>, Plan, Option<Trie>) {
            let slot = &r.questions[i];
            (
                Vec::new(),
                Plan::Failed {
                    id: slot.id.clone(),
                    type_word: slot.type_word.clone(),
                    failure,
                },
                None,
            )
        };
        for p in planned {
            let p = match p {
                Ok(p) => p,
                Err((i, f)) => {
                    plans.push(failed(i, f));
                    continue;
                }
            };
            let id = &r.questions[p.index].id;
            let key = match self.place(
                &*t.backend,
                &mut views,
                p.view,
                id,
                p.q,
                p.room,
                cap,
                max_tokens,
            )? {
                Ok(key) => key,
                Err(f) => {
                    plans.push(failed(p.index, f));
                    continue;
                }
            };
            let at = match keyed.iter().position(|(k, _)| *k == key) {
                Some(k) => keyed[k].1.clone(),
                None => {
                    let first = roots.len();
                    for tokens in views.roots(key) {
                        roots.push(self.state_root(t, tokens));
                    }
                    let at: Vec<usize> = (first..roots.len()).collect();
                    keyed.push((key, at.clone()));
                    at
                }
            };
            let own: usize = p.nodes.iter().map(|n| n.tokens.len()).sum();
            usage.input_tokens += (own * at.len()) as u64;
            let mut plan = p.plan;
            match (&mut plan, &t.spans) {
                (Plan::Span { text, reads, .. }, Some(vocab)) => {
                    // Each root's span branches copy from the bytes that root read.
                    *text = views.texts[p.view].to_string();
                    for (&root, (offset, bytes)) in
                        at.iter().zip(views.root_bytes(&*t.backend, key))
                    {
                        let steer = steers
                            .entry(root)
                            .or_insert_with(|| {
                                Arc::new(CopySteer::new(vocab.clone(), t.backend.clone(), bytes))
                            })
                            .clone();
                        reads.push((steer.clone(), offset));
                        for node in &p.nodes {
                            let mut node = node.clone();
                            node.grow = Some(Grow(steer.clone()));
                            roots[root].children.push(node);
                        }
                    }
                }
                _ => {
                    for &root in &at {
                        roots[root].children.extend(p.nodes.iter().cloned());
                    }
                }
            }
            plans.push((at, plan, p.trie));
        }
        views.count(&mut usage, t.header.len() + t.sep.len());
        let total: usize = roots
            .iter()
            .filter(|root| !root.children.is_empty())
            .map(Node::total_tokens)
            .sum();
        self.request_tokens(total)?;
        Ok(Prepared {
            roots,
            plans,
            usage,
        })
    }

    /// Read each view as far as its roomiest question needs; `needs` holds each valid
    /// question's view and room.
    pub(crate) fn read_views<'a>(
        &self,
        vocab: &dyn budget::Vocab,
        texts: Vec<Cow<'a, str>>,
        needs: &[(usize, usize)],
        max_tokens: Option<usize>,
    ) -> Result<Views<'a>, ProtocolError> {
        let mut reads = Vec::with_capacity(texts.len());
        for (v, text) in texts.iter().enumerate() {
            let need = needs
                .iter()
                .filter(|(view, _)| *view == v)
                .map(|(_, room)| max_tokens.map_or(*room, |m| m.min(*room)))
                .max()
                .unwrap_or(0);
            reads.push(self.read_text(vocab, text, need)?);
        }
        let n = texts.len();
        Ok(Views {
            texts,
            reads,
            scans: vec![None; n],
            read_in_part: vec![false; n],
            used: vec![false; n],
        })
    }

    /// How question `id` reads its view: whole when its budget holds it, else as its
    /// `overflow` says (a failure when it rejects, wants the full input, or the view is over
    /// the scan budget).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn place(
        &self,
        vocab: &dyn budget::Vocab,
        views: &mut Views<'_>,
        view: usize,
        id: &str,
        q: &Question,
        room: usize,
        cap: usize,
        max_tokens: Option<usize>,
    ) -> Result<Result<RootKey, QuestionFailure>, ProtocolError> {
        let read = &views.reads[view];
        views.used[view] = true;
        let budget = max_tokens.map_or(room, |m| m.min(room));
        if read.complete && read.tokens.len() <= budget {
            return Ok(Ok(RootKey::Whole(view)));
        }
        views.read_in_part[view] |= !read.complete;
        Ok(match q.overflow {
            Overflow::Reject => {
                let (limit, why) = match max_tokens {
                    Some(m) if m < room => (m, "options.max_tokens"),
                    _ => (cap, "the model"),
                };
                Err(QuestionFailure::new(
                    QuestionErrorKind::MaxLengthExceeded,
                    reason::QUESTION_TOKENS,
                    format!(
                        "question {id:?} reads more than {limit} tokens with its state, the most {why} allows; send overflow: truncate or window to read it in part or in windows"
                    ),
                )
                .with_limit(limit as u64))
            }
            Overflow::Truncate => {
                let first = budget.min(self.limits.truncate_tokens);
                if q.require_full_input {
                    Err(QuestionFailure::new(
                        QuestionErrorKind::MaxLengthExceeded,
                        reason::INPUT_INCOMPLETE,
                        format!(
                            "require_full_input: question {id:?} would read only the first {first} tokens of its state"
                        ),
                    ))
                } else {
                    Ok(RootKey::Truncated(view, first))
                }
            }
            Overflow::Window => {
                let scan_budget = max_tokens.unwrap_or(self.limits.max_scan_tokens);
                // Windows hold at least every token scanned, so a scan past the request's
                // token limit could only be refused: read no further than that limit.
                let reads = scan_budget.min(self.limits.max_request_tokens);
                if views.scans[view].is_none() {
                    let text = &views.texts[view];
                    // A text surely over the budget by its length alone is not tokenized.
                    let scan = if self.cutter.least_tokens(text.len()) > reads {
                        None
                    } else {
                        Some(self.read_text(vocab, text, reads)?)
                    };
                    let whole = scan.filter(|s| s.complete && s.tokens.len() <= reads);
                    if whole.is_none() && reads < scan_budget {
                        return Err(self.over_request_tokens());
                    }
                    views.scans[view] = Some(whole);
                }
                if matches!(views.scans[view], Some(Some(_))) {
                    Ok(RootKey::Windows(view, room.max(1)))
                } else {
                    Err(QuestionFailure::new(
                        QuestionErrorKind::ScanBudgetExceeded,
                        reason::SCAN_BUDGET,
                        format!(
                            "question {id:?}: its state has more than {scan_budget} tokens, the scan budget; none of it was read"
                        ),
                    )
                    .with_limit(scan_budget as u64))
                }
            }
        })
    }

    /// A request that reads more tokens than the model reads per request is refused.
    pub(crate) fn request_tokens(&self, total: usize) -> Result<(), ProtocolError> {
        if total > self.limits.max_request_tokens {
            return Err(ProtocolError::invalid(format!(
                "the request reads {total} tokens (its state once and every question); model {} reads at most {} per request",
                self.meta.name, self.limits.max_request_tokens
            ))
            .with_reason(reason::REQUEST_TOKENS)
            .with_limit(self.limits.max_request_tokens as u64));
        }
        Ok(())
    }

    /// The refusal of a request found to read more than `max_request_tokens` before reading
    /// all of it.
    pub(crate) fn over_request_tokens(&self) -> ProtocolError {
        let max = self.limits.max_request_tokens;
        ProtocolError::invalid(format!(
            "the request reads more than {max} tokens (its state once and every question); model {} reads at most {max} per request",
            self.meta.name
        ))
        .with_reason(reason::REQUEST_TOKENS)
        .with_limit(self.limits.max_request_tokens as u64)
    }

    /// A model with no image or video modality refuses a request that sends either.
    pub(crate) fn text_only(&self, r: &DecisionRequest) -> Result<(), ProtocolError> {
        if r.images > 0 || r.videos > 0 {
            return Err(ProtocolError::invalid(format!(
                "model {} reads text only: it has no image or video modality",
                self.meta.name
            ))
            .with_reason(reason::MODALITY_UNSUPPORTED));
        }
        Ok(())
    }

    /// Images a question references: a box question's target, else refused on this model (it
    /// reads no images in questions; moving them into the state would change other answers).
    pub(crate) fn image_check(
        &self,
        q: &Question,
        question_images: usize,
        state_images: usize,
    ) -> Result<(), QuestionFailure> {
        // A model without box questions answers box_unsupported first (in `plan`).
        if matches!(q.kind, QuestionKind::Box | QuestionKind::Track) {
            if !self.config.answers(q.kind.type_name()) {
                return Ok(());
            }
            if matches!(q.kind, QuestionKind::Box) {
                return protocol::assets::box_target(question_images, state_images).map(|_| ());
            }
        }
        if question_images > 0 {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                reason::QUESTION_IMAGES_UNSUPPORTED,
                format!(
                    "model {} reads no images in a question's instructions or options; put the image in the state",
                    self.meta.name
                ),
            ));
        }
        Ok(())
    }

    /// A question block's tokens, read no further than what `cap` (the most a question reads
    /// with its state) leaves beside the frame: a longer block could never be evaluated, so
    /// it fails as too long a question does, without being tokenized whole.
    fn question_tokens(
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
    /// lacks, fails with its reason word.
    pub(crate) fn check_type(&self, q: &Question) -> Result<(), QuestionFailure> {
        let type_name = q.kind.type_name();
        if !self.config.answers(type_name) {
            let (r, what) = match &q.kind {
                QuestionKind::Span { .. } => (reason::SPAN_UNSUPPORTED, "span"),
                QuestionKind::Box => (reason::BOX_UNSUPPORTED, "box"),
                QuestionKind::Track => (reason::TRACK_UNSUPPORTED, "track"),
                QuestionKind::Set { .. } => (reason::SET_UNSUPPORTED, "set"),
                _ => (reason::QUESTION_MALFORMED, type_name),
            };
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                r,
                format!("model {} does not answer {what} questions", self.meta.name),
            ));
        }
        if q.decision_adapter {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                reason::DECISION_ADAPTER_UNSUPPORTED,
                format!(
                    "decision_adapter: model {} has no decision adapter",
                    self.meta.name
                ),
            ));
        }
        Ok(())
    }

    /// Render and tokenize one question; return how to read it and its branch nodes.
    fn plan(
        &self,
        t: &Tree,
        id: &str,
        q: &Question,
        n_decisions: usize,
        limit: usize,
    ) -> Result<(Plan, Vec<Node>, Option<Trie>), QuestionFailure> {
        self.check_type(q)?;
        let type_name = q.kind.type_name();
        let complete = q.require_full_input;
        let temperature = self.temperature(type_name, n_decisions);
        let instr = q.instructions.as_deref();
        let id = id.to_string();
        match &q.kind {
            QuestionKind::Choice { options } => {
                let n = options.len();
                let question = instr.unwrap_or("Which option describes the text best?");
                // The model answers with an option's own name where the names can be read
                // apart (a small model maps meaning to a word far better than to a letter);
                // otherwise with its letter or code.
                let named = self.named_options(t, options);
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
                // The options are shown in one order, sorted by name, whatever order the
                // client listed them in, so that order cannot move the answer; and in
                // `choice_orders` turns of it, so that no option keeps a place the model
                // favours. The answer is the geometric mean of the turns' distributions.
                let mut canonical: Vec<usize> = (0..n).collect();
                canonical.sort_by(|&a, &b| options[a].0.cmp(&options[b].0));
                let turns = self.config.choice_orders.clamp(1, n.max(1));
                let mut nodes = Vec::with_capacity(turns);
                let mut shown = Vec::with_capacity(turns);
                for turn in 0..turns {
                    let shift = turn * n / turns;
                    let order: Vec<usize> = (0..n).map(|i| canonical[(i + shift) % n]).collect();
                    let mut block = format!("Question: {question}\nOptions:\n");
                    for (place, &i) in order.iter().enumerate() {
                        let (key, desc) = &options[i];
                        let mark = if by_name {
                            "-".to_string()
                        } else {
                            format!("{}.", option_code(place, n))
                        };
                        match desc {
                            Some(d) => block.push_str(&format!("{mark} {key}: {d}\n")),
                            None => block.push_str(&format!("{mark} {key}\n")),
                        }
                    }
                    block.push_str(ask);
                    nodes.push(trie.node(self.question_tokens(t, &block, limit)?));
                    shown.push(if by_name { (0..n).collect() } else { order });
                }
                Ok((
                    Plan::Choice {
                        id,
                        keys: options.iter().map(|(k, _)| k.clone()).collect(),
                        shown,
                        temperature,
                        complete,
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
                let node = t.yes_no.node(self.question_tokens(t, &block, limit)?);
                Ok((
                    Plan::Noul {
                        id,
                        temperature,
                        complete,
                    },
                    vec![node],
                    None,
                ))
            }
            QuestionKind::Score { levels } => {
                let n = levels.len();
                let trie = label_trie(&t.digits[..n])?;
                let mut block = format!(
                    "Question: {}\nLevels:\n",
                    instr.unwrap_or("Which level describes the text best?")
                );
                for (i, l) in levels.iter().enumerate() {
                    block.push_str(&format!("{i}. {l}\n"));
                }
                block.push_str("Answer with the number of the level.");
                let node = trie.node(self.question_tokens(t, &block, limit)?);
                Ok((
                    Plan::Score {
                        id,
                        legend: levels.clone(),
                        temperature,
                        complete,
                    },
                    vec![node],
                    Some(trie),
                ))
            }
            QuestionKind::Set { labels, threshold } => {
                let mut nodes = Vec::with_capacity(labels.len());
                for (key, desc) in labels {
                    let label = match desc {
                        Some(d) => format!("{key}: {d}"),
                        None => key.clone(),
                    };
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
                        labels: labels.into_iter().map(|(k, _)| k).collect(),
                        threshold: threshold.unwrap_or(self.config.span_threshold),
                        complete,
                        text: String::new(),
                        reads: Vec::new(),
                    },
                    nodes,
                    None,
                ))
            }
            // Box and track are refused above unless a package declares them, and no text
            // backend here reads them.
            QuestionKind::Span { .. } | QuestionKind::Box | QuestionKind::Track => {
                Err(QuestionFailure::new(
                    QuestionErrorKind::InvalidQuestion,
                    reason::SPAN_UNSUPPORTED,
                    format!("model {} cannot read {type_name} questions", self.meta.name),
                ))
            }
        }
    }

    /// The trie of a choice's option names, when the model can answer with them: every name
    /// a short word-like key (letters, digits, `_`, `-`, spaces; at most 32 bytes and 8
    /// tokens), and no name's tokens a prefix of another's.
    fn named_options(&self, t: &Tree, options: &[(String, Option<String>)]) -> Option<Trie> {
        let word_like = |k: &str| {
            !k.is_empty()
                && k.len() <= 32
                && k.trim() == k
                && k.chars().any(char::is_alphabetic)
                && k.chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        };
        if options.len() > 64 || !options.iter().all(|(k, _)| word_like(k)) {
            return None;
        }
        let mut paths = Vec::with_capacity(options.len());
        for (k, _) in options {
            let p = t.backend.tokenize(k, false).ok()?;
            if p.is_empty() || p.len() > 8 {
                return None;
            }
            paths.push(p);
        }
        Trie::build(&paths).ok()
    }

    /// Read one plan's probability groups from one root's logits: one distribution for a
    /// choice, noul or score question, one yes/no pair per label of a set.
    fn read_groups<'a>(
        &self,
        t: &Tree,
        plan: &Plan,
        trie: Option<&Trie>,
        reads: &mut impl Iterator<Item = &'a Vec<f32>>,
    ) -> Option<Vec<Vec<f64>>> {
        match (plan, trie) {
            (Plan::Failed { .. }, _) => Some(Vec::new()),
            (
                Plan::Choice {
                    keys,
                    shown,
                    temperature,
                    ..
                },
                Some(trie),
            ) => {
                let mut turns = Vec::with_capacity(shown.len());
                for options in shown {
                    let read = trie.probabilities(reads, keys.len(), *temperature)?;
                    let mut p = vec![0.0; keys.len()];
                    for (label, &option) in options.iter().enumerate() {
                        *p.get_mut(option)? = *read.get(label)?;
                    }
                    turns.push(p);
                }
                Some(vec![geometric_mean(&turns)?])
            }
            (Plan::Noul { temperature, .. }, _) => {
                Some(vec![t.yes_no.probabilities(reads, 2, *temperature)?])
            }
            (
                Plan::Score {
                    legend,
                    temperature,
                    ..
                },
                Some(trie),
            ) => Some(vec![trie.probabilities(
                reads,
                legend.len(),
                *temperature,
            )?]),
            (
                Plan::Set {
                    labels,
                    temperature,
                    ..
                },
                _,
            ) => labels
                .iter()
                .map(|_| t.yes_no.probabilities(reads, 2, *temperature))
                .collect(),
            (Plan::Choice { .. } | Plan::Score { .. }, None) => None,
            // Spans are read from growth steps (`read_spans`), not from fixed reads.
            (Plan::Span { .. }, _) => None,
        }
    }

    fn assemble(
        &self,
        t: &Tree,
        p: &Prepared,
        logits: Vec<Option<&RootLogits>>,
        failure: Option<&QuestionFailure>,
    ) -> DecisionResponse {
        let mut per_root: Vec<std::slice::Iter<'_, Vec<f32>>> = logits
            .into_iter()
            .map(|l| l.map(|l| l.iter()).unwrap_or_default())
            .collect();
        let mut read = Vec::with_capacity(p.plans.len());
        let mut usage = p.usage;
        for (roots, plan, trie) in &p.plans {
            if matches!(plan, Plan::Span { .. }) {
                read.push((plan, None));
                continue;
            }
            // Every root (window) the question read, then the windows combined.
            let mut per_window = Vec::with_capacity(roots.len());
            for &at in roots {
                let mut none = [].iter();
                let reads = per_root.get_mut(at).unwrap_or(&mut none);
                per_window.push(self.read_groups(t, plan, trie.as_ref(), reads));
            }
            let groups: Option<Vec<Vec<f64>>> = per_window
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .and_then(|w| combine_windows(plan, w));
            read.push((plan, groups));
        }
        // A root's growth steps follow all its fixed reads, branch by branch in the order the
        // span questions were placed.
        let mut spans = Vec::new();
        for (roots, plan, _) in &p.plans {
            if let Plan::Span {
                labels,
                text,
                reads,
                ..
            } = plan
            {
                spans.push(read_spans(
                    roots,
                    labels,
                    text,
                    reads,
                    &mut per_root,
                    &mut usage,
                ));
            }
        }
        self.response(read, spans, failure, usage)
    }

    /// The response to one request from each question's plan and probability groups (`None`
    /// when its forward failed with `failure`, or gave too few logits).
    pub(crate) fn response(
        &self,
        read: Vec<(&Plan, Option<Vec<Vec<f64>>>)>,
        spans: Vec<Option<Vec<SpanFound>>>,
        failure: Option<&QuestionFailure>,
        usage: Usage,
    ) -> DecisionResponse {
        let mut spans = spans.into_iter();
        let mut answers = Ordered::new();
        let mut sets = Ordered::new();
        let mut found = Ordered::new();
        let mut thresholds = Ordered::new();
        let broken = |type_word: &str| Answer::Failed {
            type_word: type_word.to_string(),
            failure: failure.cloned().unwrap_or_else(|| {
                QuestionFailure::new(
                    QuestionErrorKind::InvalidModelOutput,
                    reason::MODEL_OUTPUT,
                    "the model returned too few logits for this question",
                )
            }),
        };
        let entry = |answer: Answer, complete: bool| AnswerEntry {
            input_complete: complete && answer.failure().is_none(),
            answer,
        };
        for (plan, groups) in read {
            match plan {
                Plan::Failed {
                    id,
                    type_word,
                    failure,
                } => {
                    answers.push(
                        id.clone(),
                        entry(
                            Answer::Failed {
                                type_word: type_word.clone(),
                                failure: failure.clone(),
                            },
                            false,
                        ),
                    );
                }
                Plan::Choice {
                    id, keys, complete, ..
                } => {
                    let answer = match groups.and_then(|g| g.into_iter().next()) {
                        Some(probs) => Answer::Choice(ChoiceAnswer {
                            choice: keys[argmax(&probs)].clone(),
                            confidence: choice_confidence(&probs),
                            probabilities: Ordered(keys.iter().cloned().zip(probs).collect()),
                        }),
                        None => broken("choice"),
                    };
                    answers.push(id.clone(), entry(answer, *complete));
                }
                Plan::Noul { id, complete, .. } => {
                    let answer = match groups.and_then(|g| g.into_iter().next()) {
                        Some(p) => Answer::Noul(NoulAnswer { noul: p[0] }),
                        None => broken("noul"),
                    };
                    answers.push(id.clone(), entry(answer, *complete));
                }
                Plan::Score {
                    id,
                    legend,
                    complete,
                    ..
                } => {
                    let answer = match groups.and_then(|g| g.into_iter().next()) {
                        Some(probs) => Answer::Score(ScoreAnswer {
                            score: expected_level(&probs),
                            confidence: score_confidence(&probs),
                            legend: Ordered(
                                legend
                                    .iter()
                                    .enumerate()
                                    .map(|(i, l)| (i.to_string(), l.clone()))
                                    .collect(),
                            ),
                            probabilities: Ordered(
                                probs
                                    .iter()
                                    .enumerate()
                                    .map(|(i, p)| (i.to_string(), *p))
                                    .collect(),
                            ),
                        }),
                        None => broken("score"),
                    };
                    answers.push(id.clone(), entry(answer, *complete));
                }
                Plan::Set {
                    id,
                    labels,
                    threshold,
                    complete,
                    ..
                } => match groups {
                    Some(groups) => {
                        let mut probs = Ordered::new();
                        let mut selected = Vec::new();
                        for (label, p) in labels.iter().zip(groups) {
                            if p[0] >= *threshold {
                                selected.push(label.clone());
                            }
                            probs.push(label.clone(), p[0]);
                            answers.push(
                                format!("{id}.{label}"),
                                entry(Answer::Noul(NoulAnswer { noul: p[0] }), *complete),
                            );
                        }
                        sets.push(
                            id.clone(),
                            SetResult {
                                selected,
                                probabilities: probs,
                            },
                        );
                        thresholds.push(id.clone(), *threshold);
                    }
                    None => {
                        for label in labels {
                            answers.push(format!("{id}.{label}"), entry(broken("noul"), false));
                        }
                    }
                },
                Plan::Span {
                    id,
                    threshold,
                    complete,
                    ..
                } => match spans.next().flatten().filter(|_| failure.is_none()) {
                    Some(all) => {
                        let best = all.iter().map(|s| s.probability).fold(0.0, f64::max);
                        answers.push(
                            id.clone(),
                            entry(Answer::Noul(NoulAnswer { noul: best }), *complete),
                        );
                        found.push(
                            id.clone(),
                            all.into_iter()
                                .filter(|s| s.probability >= *threshold)
                                .collect(),
                        );
                        thresholds.push(id.clone(), *threshold);
                    }
                    None => answers.push(id.clone(), entry(broken("span"), false)),
                },
            }
        }
        DecisionResponse {
            model: self.meta.name.clone(),
            answers,
            sets,
            spans: found,
            thresholds,
            usage,
            meta: None,
        }
    }
}

/// Read one span question's spans from the growth steps of its branches (one per label on each
/// root it read), adding the tokens the growth fed back to `usage`; `None` when the steps do
/// not fit.
fn read_spans(
    roots: &[usize],
    labels: &[String],
    text: &str,
    reads: &[(Arc<CopySteer>, usize)],
    per_root: &mut [std::slice::Iter<'_, Vec<f32>>],
    usage: &mut Usage,
) -> Option<Vec<SpanFound>> {
    let mut per_label: Vec<Vec<(usize, usize, Vec<crate::span::Copied>)>> =
        vec![Vec::new(); labels.len()];
    for (&at, (steer, offset)) in roots.iter().zip(reads) {
        let steps = per_root.get_mut(at)?;
        for found in per_label.iter_mut() {
            let (copies, picked) = crate::span::replay(steer, steps)?;
            // Every picked token but the last was fed back and read.
            usage.input_tokens += picked.saturating_sub(1) as u64;
            found.push((*offset, steer.text_len(), copies));
        }
    }
    let all: Vec<SpanFound> = labels
        .iter()
        .zip(per_label)
        .flat_map(|(label, found)| crate::span::locate(label, text, &found))
        .collect();
    Some(crate::span::one_label_per_place(all))
}

/// A span question's labels: its own, or with none, those of the preset it names.
fn span_labels(
    labels: &[(String, Option<String>)],
    preset: Option<&str>,
) -> Result<Vec<(String, Option<String>)>, QuestionFailure> {
    if !labels.is_empty() {
        return Ok(labels.to_vec());
    }
    match preset {
        Some(protocol::PII_PRESET) => Ok(protocol::PII_LABELS
            .iter()
            .map(|(k, d)| (k.to_string(), Some(d.to_string())))
            .collect()),
        Some(other) => Err(QuestionFailure::malformed(format!(
            "preset {other:?} is not one this model answers (it answers pii); name the labels in criteria"
        ))),
        None => Err(QuestionFailure::malformed("a span takes 1 or more labels in criteria")),
    }
}

/// The normalised geometric mean of distributions over the same options: a bias that
/// multiplies each place's probability cancels when every place is visited once.
fn geometric_mean(ps: &[Vec<f64>]) -> Option<Vec<f64>> {
    if let [one] = ps {
        return Some(one.clone());
    }
    let n = ps.first()?.len();
    let k = ps.len() as f64;
    let logs: Vec<f64> = (0..n)
        .map(|i| {
            ps.iter()
                .map(|p| p.get(i).copied().unwrap_or(0.0).max(1e-300).ln())
                .sum::<f64>()
                / k
        })
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = logs.iter().map(|l| (l - top).exp()).collect();
    let z: f64 = w.iter().sum();
    Some(w.into_iter().map(|x| x / z).collect())
}

/// Combine the answers of a question read in windows. A noul (and each label of a set) takes
/// the highest probability any window gave it: the text says yes if any part of it does. A
/// choice or score takes the mean of the windows' distributions: each window is one equal
/// reading of the text. One window is its own answer.
pub(crate) fn combine_windows(plan: &Plan, windows: Vec<Vec<Vec<f64>>>) -> Option<Vec<Vec<f64>>> {
    let mut it = windows.into_iter();
    let first = it.next()?;
    let rest: Vec<Vec<Vec<f64>>> = it.collect();
    if rest.is_empty() {
        return Some(first);
    }
    let n = (rest.len() + 1) as f64;
    let max = matches!(plan, Plan::Noul { .. } | Plan::Set { .. });
    let mut out = first;
    for w in &rest {
        for (g, wg) in out.iter_mut().zip(w) {
            if max {
                if wg[0] > g[0] {
                    g.clone_from(wg);
                }
            } else {
                for (x, y) in g.iter_mut().zip(wg) {
                    *x += y;
                }
            }
        }
    }
    if !max {
        for g in &mut out {
            for x in g.iter_mut() {
                *x /= n;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use protocol::request::{parse_decision_body, DecisionBody, Schema};
    use serde_json::{json, Value};

    use super::span_part;

    /// The text of the part the request's one span question reads, or its refusal's message.
    /// Each test state's parts hold distinct texts, so the text names the part.
    fn part(
        state: Value,
        roles: Option<Value>,
        over: Option<Value>,
    ) -> Result<Option<String>, String> {
        let mut q = json!({"type": "span", "criteria": ["EMAIL_ADDRESS"]});
        if let Some(over) = over {
            q["over"] = over;
        }
        let mut body = json!({"model": "m", "state": state, "questions": {"q": q}});
        if let Some(roles) = roles {
            body["roles"] = roles;
        }
        let Ok(DecisionBody::Single(r)) = parse_decision_body(&body, Schema::Internal) else {
            panic!("{body}")
        };
        let q = r.questions[0].question.as_ref().expect("a valid question");
        span_part(&r, q)
            .map(|k| k.map(str::to_string))
            .map_err(|f| f.message)
    }

    #[test]
    fn a_span_reads_one_string_part_in_the_order_the_extension_reference_gives() {
        let ok = |text: &str| Ok(Some(text.to_string()));
        assert_eq!(part(json!("plain text"), None, None), Ok(None));
        // over, else answer, else user, else the only key.
        let qa = json!({"user": "Who?", "answer": "Jane", "context": "notes"});
        assert_eq!(part(qa.clone(), None, None), ok("Jane"));
        assert_eq!(part(qa.clone(), None, Some(json!("context"))), ok("notes"));
        assert_eq!(
            part(json!({"user": "Hi", "context": "c"}), None, None),
            ok("Hi")
        );
        assert_eq!(part(json!({"text": "Only"}), None, None), ok("Only"));
        // Roles name the parts when given; null roles name none.
        let roles = json!({"q": "user", "a": "answer"});
        assert_eq!(
            part(json!({"q": "Who?", "a": "Jane"}), Some(roles), None),
            ok("Jane")
        );
        assert!(part(qa, Some(Value::Null), None).is_err());
        // What names no single string part is refused.
        for (state, over) in [
            (json!({"a": "x", "b": "y"}), None),
            (json!({"a": "x", "b": "y"}), Some(json!(["a", "b"]))),
            (json!({"a": "x", "n": 3}), Some(json!("n"))),
            (json!({"answer": {"nested": "x"}}), None),
        ] {
            assert!(
                part(state.clone(), None, over.clone()).is_err(),
                "{state} {over:?}"
            );
        }
    }
}
