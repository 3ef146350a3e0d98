//! Decision models: render a request into a tree of token sequences (system prompt once, the
//! state once, then one branch per question), queue it, and read typed answers from the logits
//! of each question's option labels.

use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::answer::{
    AnswerEntry, BatchResponse, ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer, SetResult,
};
use protocol::confidence::{argmax, choice_confidence, expected_level, score_confidence};
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionBody, DecisionRequest, Question, QuestionKind, Role, Roles};
use protocol::{text, Answer, Ordered, ProtocolError, Usage};

use crate::backend::{Backend, BackendInfo, Node, RootLogits, Token};
use crate::error::EngineError;
use crate::labels::{option_code, Trie};
use crate::package::{DecisionConfig, ModelMeta};
use crate::scheduler::{JobError, SchedulerConfig, Worker};

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

/// How to read one question from its branch's logits.
#[derive(Debug, Clone)]
enum Plan {
    Failed {
        id: String,
        type_word: String,
        failure: QuestionFailure,
    },
    Choice {
        id: String,
        keys: Vec<String>,
        trie: Trie,
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
        trie: Trie,
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
}

/// One request, rendered and tokenized, ready for the queue.
#[derive(Debug)]
struct Prepared {
    /// Root 0 reads the whole state; each further root reads the keys some questions name
    /// with `over`.
    roots: Vec<Node>,
    /// Each question's plan and the root its branch hangs from.
    plans: Vec<(usize, Plan)>,
    usage: Usage,
}

/// Whether `keys` name every key of an object state (then the question reads the whole state).
fn covers_state(state: &serde_json::Value, keys: &[String]) -> bool {
    state
        .as_object()
        .is_some_and(|m| m.len() == keys.len() && m.keys().all(|k| keys.contains(k)))
}

/// A loaded decision model with its worker.
pub struct DecisionModel {
    pub meta: ModelMeta,
    pub config: DecisionConfig,
    pub limits: Limits,
    /// `exact` when the load-time self-check found a question's logits bit-identical alone
    /// and sharing a forward with other questions and requests, else `approximate`.
    pub numerics: &'static str,
    backend: Arc<dyn Backend>,
    worker: Worker,
    prefix: Vec<Token>,
    yes_no: Trie,
    letters: Vec<Vec<Token>>,
    codes: Vec<Vec<Token>>,
    digits: Vec<Vec<Token>>,
    turn_end: Vec<Token>,
}

fn label_paths(backend: &dyn Backend, labels: &[String]) -> Result<Vec<Vec<Token>>, EngineError> {
    labels
        .iter()
        .map(|l| backend.tokenize(l, false).map_err(EngineError::from))
        .collect()
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
        let yes_no = Trie::build(&label_paths(&*backend, &["Yes".into(), "No".into()])?)
            .map_err(|e| EngineError::Labels(e.to_string()))?;
        for paths in [&letters, &codes, &digits] {
            Trie::build(paths).map_err(|e| EngineError::Labels(e.to_string()))?;
        }
        let info = backend.info().clone();
        // A question's path (system prompt, state, question, two label steps) must fit one
        // sequence; a request's tokens are bounded by what the sequences hold together.
        let limits = Limits {
            max_input_tokens: info
                .trained_context
                .min(info.context_tokens)
                .saturating_sub(2),
            max_request_tokens: info.context_tokens * info.max_sequences,
            max_options: protocol::MAX_OPTIONS,
            max_levels: protocol::MAX_LEVELS,
        };
        let worker = Worker::start(&meta.name, backend.clone(), prefix.clone(), scheduler)?;
        let mut model = DecisionModel {
            meta,
            config,
            limits,
            numerics: "approximate",
            backend,
            worker,
            prefix,
            yes_no,
            letters,
            codes,
            digits,
            turn_end,
        };
        model.numerics = model.measure_numerics()?;
        Ok(model)
    }

    /// Self-check at load: the same question alone, then beside another question and another
    /// request in one forward. Bit-identical logits mean `exact` numerics.
    fn measure_numerics(&self) -> Result<&'static str, EngineError> {
        let root = |state: &str, questions: serde_json::Value| -> Result<Node, EngineError> {
            let body = serde_json::json!({"state": state, "questions": questions});
            match protocol::parse_decision_body(&body, protocol::Schema::Internal) {
                Ok(DecisionBody::Single(r)) => self
                    .prepare(&r)
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
            rt.block_on(self.worker.submit(roots, None))
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
        self.backend.info()
    }

    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// Tokens of the system prompt, evaluated once per load.
    pub fn prefix_tokens(&self) -> usize {
        self.prefix.len()
    }

    /// The whole token sequence each valid question of `r` is read from (system prompt, state,
    /// question block), as a runtime without shared prefixes would evaluate it. For benchmarks
    /// that compare against plain llama.cpp.
    pub fn question_sequences(&self, r: &DecisionRequest) -> Result<Vec<Vec<Token>>, EngineError> {
        let p = self.prepare(r).map_err(EngineError::Request)?;
        Ok(p.roots
            .iter()
            .flat_map(|root| {
                root.children.iter().map(|q| {
                    let mut seq = self.prefix.clone();
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
        let t0 = Instant::now();
        let requests: Vec<(&str, &DecisionRequest)> = match body {
            DecisionBody::Single(r) => vec![("", r)],
            DecisionBody::Batch { entries, .. } => {
                entries.iter().map(|(n, r)| (n.as_str(), r)).collect()
            }
        };
        let batch = matches!(body, DecisionBody::Batch { .. });
        let mut prepared: Vec<Result<Prepared, ProtocolError>> = Vec::with_capacity(requests.len());
        for (_, r) in &requests {
            prepared.push(self.prepare(r));
        }
        if !batch || prepared.iter().all(Result::is_err) {
            if let Some(Err(e)) = prepared.iter().find(|p| p.is_err()) {
                return Err(EngineError::Request(e.clone()));
            }
        }
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
            match self.worker.submit(roots, deadline).await {
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
                    self.assemble(&p, root_logits, failure)
                }
                Err(e) => self.refused(req, &e),
            };
            responses.push((name.to_string(), resp));
        }
        timings.post = t_post.elapsed();
        let decision = if batch {
            let mut usage = Usage::default();
            let mut states = Ordered::new();
            for (name, r) in responses {
                usage.add(&r.usage);
                states.push(name, r);
            }
            Decision::Batch(BatchResponse {
                model: self.meta.name.clone(),
                states,
                usage,
                meta: None,
            })
        } else {
            let (_, r) = responses
                .pop()
                .ok_or_else(|| EngineError::Forward("no response assembled".into()))?;
            Decision::Single(r)
        };
        Ok((decision, timings))
    }

    /// A batch entry that was refused: each of its questions fails with invalid_input.
    fn refused(&self, req: &DecisionRequest, e: &ProtocolError) -> DecisionResponse {
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
            thresholds: Ordered::new(),
            usage: Usage::default(),
            meta: None,
        }
    }

    fn temperature(&self, kind: &str, n_questions: usize) -> f64 {
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
            (serde_json::Value::Object(map), Roles::Map(roles)) => {
                let mut out = String::new();
                for (k, v) in map {
                    let role = roles.iter().find(|(rk, _)| rk == k).map(|(_, r)| *r);
                    let tag = match role {
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

    fn prepare(&self, r: &DecisionRequest) -> Result<Prepared, ProtocolError> {
        if r.images > 0 || r.videos > 0 {
            return Err(ProtocolError::invalid(format!(
                "model {} reads text only: it has no image or video modality",
                self.meta.name
            ))
            .with_reason(reason::MODALITY_UNSUPPORTED));
        }
        let state_tokens = self.state_tokens(r, None)?;
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
        let mut roots = vec![Node {
            tokens: state_tokens,
            reads: Vec::new(),
            children: Vec::new(),
        }];
        // The key sets of roots 1.. (questions with `over`).
        let mut subsets: Vec<&[String]> = Vec::new();
        let mut plans = Vec::with_capacity(r.questions.len());
        let mut usage = Usage {
            input_tokens: (self.prefix.len() + roots[0].tokens.len()) as u64,
            ..Usage::default()
        };
        for slot in &r.questions {
            let failed = |failure: QuestionFailure| {
                (
                    0,
                    Plan::Failed {
                        id: slot.id.clone(),
                        type_word: slot.type_word.clone(),
                        failure,
                    },
                )
            };
            let q = match &slot.question {
                Ok(q) => q,
                Err(f) => {
                    plans.push(failed(f.clone()));
                    continue;
                }
            };
            if let Err(f) = self.image_check(q, slot.images, r.images) {
                plans.push(failed(f));
                continue;
            }
            let at = match q.over.as_deref() {
                Some(keys) if !covers_state(&r.state, keys) => {
                    match subsets.iter().position(|s| *s == keys) {
                        Some(i) => i + 1,
                        None => {
                            let tokens = self.state_tokens(r, Some(keys))?;
                            usage.input_tokens += tokens.len() as u64;
                            roots.push(Node {
                                tokens,
                                reads: Vec::new(),
                                children: Vec::new(),
                            });
                            subsets.push(keys);
                            roots.len() - 1
                        }
                    }
                }
                _ => 0,
            };
            let base = self.prefix.len() + roots[at].tokens.len();
            match self.plan(&slot.id, q, n_decisions) {
                Ok((plan, nodes)) => {
                    let own: usize = nodes.iter().map(|n| n.tokens.len()).sum();
                    let longest = nodes.iter().map(|n| n.tokens.len()).max().unwrap_or(0);
                    if base + longest > self.limits.max_input_tokens {
                        let mut f = QuestionFailure::new(
                            QuestionErrorKind::MaxLengthExceeded,
                            reason::QUESTION_TOKENS,
                            format!(
                                "question {:?} reads {} tokens with its state; the model reads at most {}",
                                slot.id,
                                base + longest,
                                self.limits.max_input_tokens
                            ),
                        );
                        f.limit = Some(self.limits.max_input_tokens as u64);
                        plans.push(failed(f));
                        continue;
                    }
                    usage.input_tokens += own as u64;
                    roots[at].children.extend(nodes);
                    plans.push((at, plan));
                }
                Err(f) => plans.push(failed(f)),
            }
        }
        let total: usize = roots
            .iter()
            .filter(|root| !root.children.is_empty())
            .map(Node::total_tokens)
            .sum();
        if total > self.limits.max_request_tokens {
            return Err(ProtocolError::invalid(format!(
                "the request reads {total} tokens (its state once and every question); model {} reads at most {} per request",
                self.meta.name, self.limits.max_request_tokens
            ))
            .with_reason(reason::REQUEST_TOKENS)
            .with_limit(self.limits.max_request_tokens as u64));
        }
        Ok(Prepared {
            roots,
            plans,
            usage,
        })
    }

    fn state_tokens(
        &self,
        r: &DecisionRequest,
        over: Option<&[String]>,
    ) -> Result<Vec<Token>, ProtocolError> {
        // With `over`, the question reads only the keys it names, in state order, rendered
        // exactly as a state holding only them.
        let subset;
        let state = match (over, &r.state) {
            (Some(keys), serde_json::Value::Object(map)) => {
                subset = serde_json::Value::Object(
                    map.iter()
                        .filter(|(k, _)| keys.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                );
                &subset
            }
            _ => &r.state,
        };
        let state_text = format!("Text:\n{}\n\n", Self::render_state(state, &r.roles));
        self.backend
            .tokenize(&state_text, false)
            .map_err(|e| ProtocolError::invalid(e.to_string()).with_reason(reason::INPUT_MALFORMED))
    }

    /// Images a question references: a box question's target, else refused on this model (it
    /// reads no images in questions; moving them into the state would change other answers).
    fn image_check(
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

    fn question_tokens(&self, block: &str) -> Result<Vec<Token>, QuestionFailure> {
        let mut tokens = self.backend.tokenize(block, false).map_err(|e| {
            QuestionFailure::new(
                QuestionErrorKind::InvalidInput,
                reason::INPUT_MALFORMED,
                e.to_string(),
            )
        })?;
        tokens.extend_from_slice(&self.turn_end);
        Ok(tokens)
    }

    /// Render and tokenize one question; return how to read it and its branch nodes.
    fn plan(
        &self,
        id: &str,
        q: &Question,
        n_decisions: usize,
    ) -> Result<(Plan, Vec<Node>), QuestionFailure> {
        let type_name = q.kind.type_name();
        if !self.config.answers(type_name) {
            let (r, what) = match &q.kind {
                QuestionKind::Span { .. } => (reason::SPAN_UNSUPPORTED, "span"),
                QuestionKind::Box => (reason::BOX_UNSUPPORTED, "box"),
                QuestionKind::Track => (reason::TRACK_UNSUPPORTED, "track"),
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
        let complete = q.require_full_input;
        let temperature = self.temperature(type_name, n_decisions);
        let instr = q.instructions.as_deref();
        let id = id.to_string();
        match &q.kind {
            QuestionKind::Choice { options } => {
                let n = options.len();
                let paths = if n <= 26 {
                    &self.letters[..n]
                } else {
                    &self.codes[..n]
                };
                let trie = label_trie(paths)?;
                let mut block = format!(
                    "Question: {}\nOptions:\n",
                    instr.unwrap_or("Which option describes the text best?")
                );
                for (i, (key, desc)) in options.iter().enumerate() {
                    match desc {
                        Some(d) => {
                            block.push_str(&format!("{}. {}: {}\n", option_code(i, n), key, d))
                        }
                        None => block.push_str(&format!("{}. {}\n", option_code(i, n), key)),
                    }
                }
                block.push_str(if n <= 26 {
                    "Answer with the letter of the best option."
                } else {
                    "Answer with the code of the best option."
                });
                let node = trie.node(self.question_tokens(&block)?);
                Ok((
                    Plan::Choice {
                        id,
                        keys: options.iter().map(|(k, _)| k.clone()).collect(),
                        trie,
                        temperature,
                        complete,
                    },
                    vec![node],
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
                if let Some(t) = when_true {
                    block.push_str(&format!("Yes means: {t}\n"));
                }
                if let Some(f) = when_false {
                    block.push_str(&format!("No means: {f}\n"));
                }
                block.push_str("Answer Yes or No.");
                let node = self.yes_no.node(self.question_tokens(&block)?);
                Ok((
                    Plan::Noul {
                        id,
                        temperature,
                        complete,
                    },
                    vec![node],
                ))
            }
            QuestionKind::Score { levels } => {
                let n = levels.len();
                let trie = label_trie(&self.digits[..n])?;
                let mut block = format!(
                    "Question: {}\nLevels:\n",
                    instr.unwrap_or("Which level describes the text best?")
                );
                for (i, l) in levels.iter().enumerate() {
                    block.push_str(&format!("{i}. {l}\n"));
                }
                block.push_str("Answer with the number of the level.");
                let node = trie.node(self.question_tokens(&block)?);
                Ok((
                    Plan::Score {
                        id,
                        legend: levels.clone(),
                        trie,
                        temperature,
                        complete,
                    },
                    vec![node],
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
                    nodes.push(self.yes_no.node(self.question_tokens(&block)?));
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
                ))
            }
            // Span, box and track are refused above unless a package declares them, and no
            // text backend here reads them.
            QuestionKind::Span { .. } | QuestionKind::Box | QuestionKind::Track => {
                Err(QuestionFailure::new(
                    QuestionErrorKind::InvalidQuestion,
                    reason::SPAN_UNSUPPORTED,
                    format!("model {} cannot read {type_name} questions", self.meta.name),
                ))
            }
        }
    }

    fn assemble(
        &self,
        p: &Prepared,
        logits: Vec<Option<&RootLogits>>,
        failure: Option<&QuestionFailure>,
    ) -> DecisionResponse {
        let mut per_root: Vec<std::slice::Iter<'_, Vec<f32>>> = logits
            .into_iter()
            .map(|l| l.map(|l| l.iter()).unwrap_or_default())
            .collect();
        let mut none = [].iter();
        let mut answers = Ordered::new();
        let mut sets = Ordered::new();
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
        for (at, plan) in &p.plans {
            let reads = per_root.get_mut(*at).unwrap_or(&mut none);
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
                    id,
                    keys,
                    trie,
                    temperature,
                    complete,
                } => {
                    let answer = match trie.probabilities(reads, keys.len(), *temperature) {
                        Some(probs) => Answer::Choice(ChoiceAnswer {
                            choice: keys[argmax(&probs)].clone(),
                            confidence: choice_confidence(&probs),
                            probabilities: Ordered(keys.iter().cloned().zip(probs).collect()),
                        }),
                        None => broken("choice"),
                    };
                    answers.push(id.clone(), entry(answer, *complete));
                }
                Plan::Noul {
                    id,
                    temperature,
                    complete,
                } => {
                    let answer = match self.yes_no.probabilities(reads, 2, *temperature) {
                        Some(p) => Answer::Noul(NoulAnswer { noul: p[0] }),
                        None => broken("noul"),
                    };
                    answers.push(id.clone(), entry(answer, *complete));
                }
                Plan::Score {
                    id,
                    legend,
                    trie,
                    temperature,
                    complete,
                } => {
                    let answer = match trie.probabilities(reads, legend.len(), *temperature) {
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
                    temperature,
                    complete,
                } => {
                    let mut probs = Ordered::new();
                    let mut selected = Vec::new();
                    let mut ok = true;
                    for label in labels {
                        let key = format!("{id}.{label}");
                        match self.yes_no.probabilities(reads, 2, *temperature) {
                            Some(p) => {
                                if p[0] >= *threshold {
                                    selected.push(label.clone());
                                }
                                probs.push(label.clone(), p[0]);
                                answers.push(
                                    key,
                                    entry(Answer::Noul(NoulAnswer { noul: p[0] }), *complete),
                                );
                            }
                            None => {
                                ok = false;
                                answers.push(key, entry(broken("noul"), false));
                            }
                        }
                    }
                    if ok {
                        sets.push(
                            id.clone(),
                            SetResult {
                                selected,
                                probabilities: probs,
                            },
                        );
                        thresholds.push(id.clone(), *threshold);
                    }
                }
            }
        }
        DecisionResponse {
            model: self.meta.name.clone(),
            answers,
            sets,
            thresholds,
            usage: p.usage,
            meta: None,
        }
    }
}
