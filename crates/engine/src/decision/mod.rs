//! Decision models: render a request into a tree of token sequences (system prompt once, the
//! state once, then one branch per question), queue it, and read typed answers from the logits
//! of each question's option labels.
//!
//! The steps, one module each, so each can be read and tested without HTTP:
//! - `load`: the label vocabulary, the worker with the system prompt, the exactness self-check;
//! - `plan`: one question's type checked, its block rendered and tokenized, its label trie;
//! - `views` and `prepare`: the state's views read within budget, each question placed on its
//!   roots (whole, truncated or in windows), the request's token limits;
//! - `readout`: answers read from the logits, windows combined, spans replayed, the response;
//! - `calibrate`: label-bias corrections a package asks for (empty-state division, noul bias);
//! - `contest`: places several labels of a span question claim, settled by a short second job.

mod calibrate;
mod contest;
mod load;
mod plan;
mod prepare;
mod readout;
mod views;

use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::answer::{AnswerEntry, BatchResponse, DecisionResponse};
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionBody, DecisionRequest};
use protocol::{Answer, Ordered, ProtocolError, Usage};

use crate::backend::{Backend, BackendInfo, DirectBackend, Node, RootLogits, Token};
use crate::budget::Cutter;
use crate::error::EngineError;
use crate::labels::Trie;
use crate::package::{DecisionConfig, ModelMeta};
use crate::scheduler::{JobError, Worker};
use crate::span::{CopySteer, SpanVocab};

pub(crate) use readout::combine_windows;
pub(crate) use views::{over_keys, view_index, RootKey, Views};

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
        /// Each label with its description.
        labels: Vec<(String, Option<String>)>,
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

/// What was read of one request's logits: each question's probability groups, and each span
/// question's spans (every label's, in plan order) before the places several labels claim
/// are settled.
pub(super) struct Reading<'p> {
    groups: Vec<(&'p Plan, Option<Vec<Vec<f64>>>)>,
    spans: Vec<Option<Vec<protocol::SpanFound>>>,
    usage: Usage,
}

/// The logits of each root of `p` that had questions to evaluate, taken in turn from the
/// job's logits.
fn per_root<'a>(
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
    /// Empty-state answers of the questions content-free calibration corrects.
    remembered: calibrate::Remembered,
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
        let signals = self.with_router_signals(body);
        let body = signals.as_ref().unwrap_or(body);
        match &self.engine {
            Engine::Tree(t) => self.decide_tree(t, body, started).await,
            Engine::Direct(d) => crate::direct::decide(self, &**d, body, started),
        }
    }

    /// The body with every question whose id names one of the package's router signals
    /// asked as the package words it; `None` when no question does.
    fn with_router_signals(&self, body: &DecisionBody) -> Option<DecisionBody> {
        if self.config.router_questions.is_empty() {
            return None;
        }
        let rewrite = |r: &DecisionRequest| -> Option<DecisionRequest> {
            let mut changed = false;
            let questions = r
                .questions
                .iter()
                .map(|s| match self.config.as_router_signal(s) {
                    Some(signal) => {
                        changed = true;
                        signal
                    }
                    None => s.clone(),
                })
                .collect();
            changed.then(|| DecisionRequest {
                questions,
                ..r.clone()
            })
        };
        match body {
            DecisionBody::Single(r) => rewrite(r).map(DecisionBody::Single),
            DecisionBody::Batch {
                model,
                options,
                entries,
            } => {
                let mut changed = false;
                let entries = entries
                    .iter()
                    .map(|(name, r)| {
                        let signal = rewrite(r);
                        changed |= signal.is_some();
                        (name.clone(), signal.unwrap_or_else(|| r.clone()))
                    })
                    .collect();
                changed.then(|| DecisionBody::Batch {
                    model: model.clone(),
                    options: options.clone(),
                    entries,
                })
            }
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
        let mut prepared: Vec<Result<Prepared, ProtocolError>> =
            requests.iter().map(|(_, r)| self.prepare(t, r)).collect();
        refusal(batch, &prepared)?;
        // Empty-state answers not yet remembered ride in the same forward, read raw, as one
        // more request after the body's.
        let (corrected, mut content_free) = self.content_free(&requests, &t.remembered);
        let asked = content_free.request.take().and_then(|(request, keys)| {
            let mut p = self.prepare(t, &request).ok()?;
            for (_, plan, _) in &mut p.plans {
                plan.at_unit_temperature();
            }
            prepared.push(Ok(p));
            Some(keys)
        });
        let mut timings = Timings {
            tokenize: t0.elapsed(),
            ..Timings::default()
        };
        let deadline = body
            .options()
            .deadline_ms
            .map(|ms| started + Duration::from_millis(ms));
        let outcome = self.forward(t, &prepared, deadline, &mut timings).await?;
        let t_post = Instant::now();
        let mut logits = match &outcome {
            Ok(l) => l.iter(),
            Err(_) => [].iter(),
        };
        let mut readings: Vec<Result<Reading, ProtocolError>> = prepared
            .iter()
            .map(|p| match p {
                Ok(p) => Ok(self.read(t, p, per_root(p, &mut logits))),
                Err(e) => Err(e.clone()),
            })
            .collect();
        let failure = outcome.as_ref().err();
        if let Some(keys) = asked {
            if let Some(Ok(r)) = readings.pop() {
                self.remember(&t.remembered, &mut content_free.known, keys, &r);
            }
        }
        for (reading, keys) in readings.iter_mut().zip(&corrected) {
            if let Ok(r) = reading {
                self.correct(&content_free.known, keys, r);
            }
        }
        timings.post = t_post.elapsed();
        let contests = match failure {
            None => {
                self.contest(t, &mut readings, deadline, &mut timings)
                    .await?
            }
            Some(_) => Vec::new(),
        };
        let t_post = Instant::now();
        let mut responses = Vec::with_capacity(prepared.len());
        for (i, ((name, req), reading)) in requests.iter().zip(readings).enumerate() {
            let resp = match reading {
                Ok(mut r) => {
                    for (q, spans) in r.spans.iter_mut().enumerate() {
                        if let Some(all) = spans.take() {
                            let mine = contests
                                .iter()
                                .filter(|(c, _)| c.request == i && c.question == q);
                            *spans = Some(contest::settle(all, mine));
                        }
                    }
                    self.response(r.groups, r.spans, failure, r.usage)
                }
                Err(e) => self.refused(req, &e),
            };
            responses.push((name.to_string(), resp));
        }
        timings.post += t_post.elapsed();
        Ok((self.finish(batch, responses)?, timings))
    }

    /// Settle the places several labels of a span question claim (see `contest`): one more
    /// job asks the check of every contest of the body, and its tokens count in the usage of
    /// the request each check is for. A contest whose check could not be asked (refused, its
    /// deadline passed, or the queue full) is left unsettled.
    async fn contest(
        &self,
        t: &Tree,
        readings: &mut [Result<Reading<'_>, ProtocolError>],
        deadline: Option<Instant>,
        timings: &mut Timings,
    ) -> Result<Vec<(contest::Contest, Option<String>)>, EngineError> {
        let mut found = Vec::new();
        for (r, reading) in readings.iter().enumerate() {
            let Ok(reading) = reading else { continue };
            let plans = reading.groups.iter().filter_map(|(plan, _)| match plan {
                Plan::Span {
                    labels,
                    text,
                    reads,
                    ..
                } => Some((labels, text, reads)),
                _ => None,
            });
            for (q, ((labels, text, reads), spans)) in plans.zip(&reading.spans).enumerate() {
                if let Some(spans) = spans {
                    found.extend(contest::find(r, q, spans, labels, text, reads));
                }
            }
        }
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let unsettled =
            |found: Vec<contest::Contest>| found.into_iter().map(|c| (c, None)).collect();
        let Ok((body, asked)) = contest::checks(&found) else {
            return Ok(unsettled(found));
        };
        let prepared: Vec<Result<Prepared, ProtocolError>> = entries(&body)
            .iter()
            .map(|(_, r)| self.prepare(t, r))
            .collect();
        // The spans are read: a check that cannot run now leaves its contests to the
        // probability rule rather than fail the work done.
        let logits = match self.forward(t, &prepared, deadline, timings).await {
            Ok(Ok(logits)) => logits,
            Ok(Err(_)) | Err(EngineError::Overloaded) => return Ok(unsettled(found)),
            Err(e) => return Err(e),
        };
        let mut logits = logits.iter();
        let answers: Vec<Option<DecisionResponse>> = prepared
            .iter()
            .map(|p| {
                let p = p.as_ref().ok()?;
                let r = self.read(t, p, per_root(p, &mut logits));
                Some(self.response(r.groups, r.spans, None, r.usage))
            })
            .collect();
        // Each entry's tokens count once, in the usage of the request it checks.
        let mut counted = vec![false; answers.len()];
        let mut settled = Vec::with_capacity(found.len());
        for (c, (entry, id)) in found.into_iter().zip(asked) {
            let Some(Ok(reading)) = readings.get_mut(c.request) else {
                settled.push((c, None));
                continue;
            };
            let answer = answers.get(entry).and_then(Option::as_ref);
            if let (Some(a), Some(seen)) = (answer, counted.get_mut(entry)) {
                if !*seen {
                    reading.usage.add(&a.usage);
                    *seen = true;
                }
            }
            let spans = reading.spans.get(c.question).and_then(Option::as_ref);
            let won = match (answer, spans) {
                (Some(a), Some(spans)) => contest::winner(&c, spans, a, &id),
                _ => None,
            };
            settled.push((c, won));
        }
        Ok(settled)
    }

    /// Queue every root of `prepared` that has a question to evaluate, as one job; the logits
    /// of those roots in order, or the failure every question of the job shares.
    async fn forward(
        &self,
        t: &Tree,
        prepared: &[Result<Prepared, ProtocolError>],
        deadline: Option<Instant>,
        timings: &mut Timings,
    ) -> Result<Result<Vec<RootLogits>, QuestionFailure>, EngineError> {
        let roots: Vec<Node> = prepared
            .iter()
            .filter_map(|p| p.as_ref().ok())
            .flat_map(|p| p.roots.iter())
            .filter(|root| !root.children.is_empty())
            .cloned()
            .collect();
        if roots.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        match t.worker.submit(roots, deadline).await {
            Ok(out) => {
                timings.queue += out.queue;
                timings.forward += out.forward;
                timings.batch_jobs = timings.batch_jobs.max(out.batch_jobs);
                timings.batch_tokens += out.batch_tokens;
                Ok(Ok(out.logits))
            }
            Err(JobError::DeadlineExceeded) => Ok(Err(QuestionFailure::new(
                QuestionErrorKind::DeadlineExceeded,
                reason::DEADLINE,
                "options.deadline_ms passed before the model started this work",
            ))),
            Err(JobError::Overloaded) => Err(EngineError::Overloaded),
            Err(JobError::OutOfMemory { shared }) => Err(EngineError::OutOfMemory { shared }),
            Err(JobError::Unavailable) => Err(EngineError::Unavailable),
            Err(JobError::Forward(m)) => Err(EngineError::Forward(m)),
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
