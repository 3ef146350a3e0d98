//! Decision models over a [`DirectBackend`]: each question is answered from its parts (the
//! state's tokens, the instructions' tokens, each option's tokens) in one call, with no token
//! tree, worker thread or queue. The state is read once per view (or per window) and every
//! question about it shares that read; long states go through the same budgets and
//! `overflow` as a causal LM's.
//!
//! The work is a few microseconds a question, so it runs on the request's own thread; a body
//! large enough to hold that thread for long tells a multi-threaded runtime so first
//! (`block_in_place`), and the other connections keep being served.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::confidence::softmax;
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::request::{DecisionBody, DecisionRequest, Question, QuestionKind};
use protocol::{ProtocolError, Usage};

use super::adapter::Head;
use super::model::{
    entries, refusal, Decision, DecisionModel, Engine, Limits, Plan, Readout, Timings,
};
use super::readout::combine_windows;
use super::views::{over_keys, view_index, RootKey, Views};
use crate::backend::{DirectBackend, DirectKind, DirectQuestion, Token};
use crate::budget::Cutter;
use crate::error::EngineError;
use crate::package::{DecisionConfig, ModelMeta};

/// Options a body may hold before its work moves off the async runtime's core.
const INLINE_OPTIONS: usize = 512;
/// State bytes a body may hold before its work moves off the async runtime's core.
const INLINE_STATE_BYTES: usize = 256 * 1024;

impl DecisionModel {
    /// Load a direct model. One input holds the backend's `trained_context` tokens of state;
    /// a request reads at most `context_tokens x max_sequences` (state reads, windows and
    /// every question's tokens).
    pub fn start_direct(
        meta: ModelMeta,
        config: DecisionConfig,
        backend: Arc<dyn DirectBackend>,
    ) -> Result<DecisionModel, EngineError> {
        let info = backend.info().clone();
        let limits = Limits::new(info.trained_context, &info, &config);
        let cutter = Cutter::calibrate(&*backend)?;
        let mut model = DecisionModel {
            meta,
            config,
            limits,
            numerics: "approximate",
            cutter,
            engine: Engine::Direct(backend.clone()),
            detector: None,
            adapters: None,
            record_features: false,
        };
        model.numerics = measure_numerics(&*backend)?;
        Ok(model)
    }
}

/// Self-check at load: a question's logits alone and beside another question must be
/// bit-identical for `exact` numerics.
fn measure_numerics(backend: &dyn DirectBackend) -> Result<&'static str, EngineError> {
    let tokens =
        backend.tokenize_text("The parcel arrived two days late and the box was crushed.")?;
    if !backend.reads_questions() {
        // Only trained heads answer, each from one read of the state alone: the state's vector
        // read twice must be the same bits.
        let bits =
            |v: Option<Vec<f32>>| v.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
        let once = bits(backend.features(&tokens)?);
        return Ok(
            if once.is_some() && once == bits(backend.features(&tokens)?) {
                "exact"
            } else {
                "approximate"
            },
        );
    }
    let ask = |kind, instructions: &str, options: &[&str]| -> Result<DirectQuestion, EngineError> {
        Ok(DirectQuestion {
            kind,
            instructions: backend.tokenize_text(instructions)?,
            options: options
                .iter()
                .map(|o| backend.tokenize_text(o))
                .collect::<Result<_, _>>()?,
        })
    };
    let probe = ask(
        DirectKind::Noul,
        "Is the customer unhappy?",
        &["true", "false"],
    )?;
    let other = ask(
        DirectKind::Choice,
        "What happened?",
        &["late delivery", "damage", "refund"],
    )?;
    let text = "";
    let alone = backend.answer(text, &tokens, &[&probe])?;
    let shared = backend.answer(text, &tokens, &[&other, &probe])?;
    let bits = |v: Option<&Vec<f32>>| v.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    Ok(
        if bits(alone.first()).is_some() && bits(alone.first()) == bits(shared.get(1)) {
            "exact"
        } else {
            "approximate"
        },
    )
}

/// Answer a decision body on this thread.
pub(crate) fn decide(
    model: &DecisionModel,
    backend: &dyn DirectBackend,
    body: &DecisionBody,
    started: Instant,
) -> Result<(Decision, Timings), EngineError> {
    let requests = entries(body);
    let options: usize = requests
        .iter()
        .flat_map(|(_, r)| &r.questions)
        .filter_map(|slot| slot.question.as_ref().ok())
        .map(|q| match &q.kind {
            QuestionKind::Choice { options } => options.len(),
            QuestionKind::Score { levels } => levels.len(),
            _ => 2,
        })
        .sum();
    let state_bytes: usize = requests
        .iter()
        .map(|(_, r)| r.state.as_str().map_or(0, str::len))
        .sum();
    let heavy = options > INLINE_OPTIONS || state_bytes > INLINE_STATE_BYTES;
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let run = || answer_body(model, backend, body, &requests, started);
    if heavy && multi_thread {
        tokio::task::block_in_place(run)
    } else {
        run()
    }
}

fn answer_body(
    model: &DecisionModel,
    backend: &dyn DirectBackend,
    body: &DecisionBody,
    requests: &[(&str, &DecisionRequest)],
    started: Instant,
) -> Result<(Decision, Timings), EngineError> {
    let t0 = Instant::now();
    let batch = matches!(body, DecisionBody::Batch { .. });
    let prepared: Vec<Result<Prepared, ProtocolError>> = requests
        .iter()
        .map(|(_, r)| prepare(model, backend, r))
        .collect();
    refusal(batch, &prepared)?;
    let mut timings = Timings {
        tokenize: t0.elapsed(),
        batch_jobs: 1,
        ..Timings::default()
    };
    // Nothing waits in a queue, so a deadline can only have passed before the body was read.
    let late = body
        .options()
        .deadline_ms
        .is_some_and(|ms| started.elapsed() > Duration::from_millis(ms));
    let deadline = QuestionFailure::new(
        QuestionErrorKind::DeadlineExceeded,
        reason::DEADLINE,
        "options.deadline_ms passed before the model answered",
    );
    let t_forward = Instant::now();
    let mut evaluated = Vec::with_capacity(prepared.len());
    for p in prepared {
        evaluated.push(match p {
            Ok(p) if late => Ok((p, None, Vec::new())),
            Ok(mut p) => {
                let groups = evaluate(backend, &p)?;
                let spans = find_spans(model, backend, &mut p)?;
                Ok((p, Some(groups), spans))
            }
            Err(e) => Err(e),
        });
    }
    timings.forward = t_forward.elapsed();
    let t_post = Instant::now();
    let mut responses = Vec::with_capacity(evaluated.len());
    for ((name, r), e) in requests.iter().zip(evaluated) {
        let resp = match e {
            Ok((p, groups, spans)) => {
                timings.batch_tokens += p.usage.input_tokens as usize;
                let failure = groups.is_none().then_some(&deadline);
                let mut groups = groups.unwrap_or_default().into_iter();
                let read = p
                    .plans
                    .iter()
                    .map(|(_, plan, _)| (plan, groups.next().flatten()))
                    .collect();
                model.response(read, spans, failure, p.usage)
            }
            Err(e) => model.refused(r, &e),
        };
        responses.push((name.to_string(), resp));
    }
    timings.post = t_post.elapsed();
    Ok((model.finish(batch, responses)?, timings))
}

/// One request, read and tokenized: its state views, the roots each question reads, and the
/// question as the backend reads it.
struct Prepared<'r> {
    views: Views<'r>,
    keys: Vec<RootKey>,
    /// Each question's root key (an index into `keys`; none when it failed), its plan, and
    /// what the backend reads.
    plans: Vec<(Option<usize>, Plan, Option<DirectQuestion>)>,
    usage: Usage,
    /// The most tokens of its text a span question reads.
    span_budget: usize,
}

/// A valid question: the view it reads, the question, its plan and what the backend reads.
type Asked<'q> = (usize, &'q Question, Plan, DirectQuestion);

/// A valid question, as it is answered.
enum Ask<'q> {
    /// Read by the backend, or by a head on a read of the state.
    Read(Asked<'q>),
    /// A span question the package's span head answers from the words of its text.
    Spans(Plan),
}

fn prepare<'r>(
    model: &DecisionModel,
    backend: &dyn DirectBackend,
    r: &'r DecisionRequest,
) -> Result<Prepared<'r>, ProtocolError> {
    model.text_only(r)?;
    let n_decisions = r.questions.iter().filter(|s| s.question.is_ok()).count();
    let cap = model.question_cap(r.options.long_context);
    let max_tokens = r.options.max_tokens.map(|t| t as usize);

    // 1. Each question as the backend reads it, and the view of the state it reads.
    let mut views: Vec<Option<&[String]>> = Vec::new();
    let mut asked: Vec<Result<Ask, QuestionFailure>> = Vec::with_capacity(r.questions.len());
    let mut own_tokens = 0usize;
    for slot in &r.questions {
        let q = match &slot.question {
            Ok(q) => q,
            Err(f) => {
                asked.push(Err(f.clone()));
                continue;
            }
        };
        let checked = model
            .image_check(q, slot, r)
            .and_then(|()| model.check_type(q))
            .and_then(|_| model.span_head_for(q));
        let question = match checked {
            Ok(Some(labels)) => {
                asked.push(Ok(Ask::Spans(Plan::Span {
                    id: slot.id.clone(),
                    labels,
                    threshold: match &q.kind {
                        QuestionKind::Span { threshold, .. } => *threshold,
                        _ => None,
                    }
                    .unwrap_or(model.config.span_threshold),
                    complete: q.require_full_input,
                    text: span_text(backend, r).into_owned(),
                    reads: Vec::new(),
                    asked: Vec::new(),
                })));
                continue;
            }
            Ok(None) => direct_question(model, backend, &slot.id, q, n_decisions),
            Err(f) => Err(f),
        };
        let (plan, question) = match question {
            Ok(pq) => pq,
            Err(f) => {
                asked.push(Err(f));
                continue;
            }
        };
        // Every question is read at least once: once they alone pass the request's limit,
        // the rest need not be tokenized to refuse it.
        own_tokens +=
            question.instructions.len() + question.options.iter().map(Vec::len).sum::<usize>();
        if own_tokens > model.limits.max_request_tokens {
            return Err(model.over_request_tokens());
        }
        let view = view_index(&mut views, over_keys(r, q));
        asked.push(Ok(Ask::Read((view, q, plan, question))));
    }

    // 2. Read each view within its questions' budgets.
    let texts: Vec<Cow<'r, str>> = views.iter().map(|v| view_text(backend, r, *v)).collect();
    let needs: Vec<(usize, usize)> = asked
        .iter()
        .filter_map(|a| match a {
            Ok(Ask::Read((view, ..))) => Some((*view, cap)),
            _ => None,
        })
        .collect();
    let mut views = model.read_views(backend, texts, &needs, max_tokens)?;

    // 3. Place each question on its roots.
    let mut keys: Vec<RootKey> = Vec::new();
    let mut plans = Vec::with_capacity(asked.len());
    let mut usage = Usage::default();
    let mut total = 0;
    for (slot, a) in r.questions.iter().zip(asked) {
        let failed = |failure| Plan::Failed {
            id: slot.id.clone(),
            type_word: slot.type_word.clone(),
            failure,
        };
        let (view, q, plan, question) = match a {
            Ok(Ask::Read(a)) => a,
            Ok(Ask::Spans(plan)) => {
                plans.push((None, plan, None));
                continue;
            }
            Err(f) => {
                plans.push((None, failed(f), None));
                continue;
            }
        };
        let key = match model.place(
            backend,
            &mut views,
            view,
            &slot.id,
            q,
            cap,
            cap,
            max_tokens,
            r.options.window,
        )? {
            Ok(key) => key,
            Err(f) => {
                plans.push((None, failed(f), None));
                continue;
            }
        };
        let k = match keys.iter().position(|k| *k == key) {
            Some(k) => k,
            None => {
                keys.push(key);
                total += views.roots(key).iter().map(|t| t.len()).sum::<usize>();
                keys.len() - 1
            }
        };
        let own =
            question.instructions.len() + question.options.iter().map(Vec::len).sum::<usize>();
        let reads = views.roots(key).len();
        usage.input_tokens += (own * reads) as u64;
        total += own * reads;
        plans.push((Some(k), plan, Some(question)));
    }
    views.count(&mut usage, 0);
    model.request_tokens(total)?;
    Ok(Prepared {
        views,
        keys,
        plans,
        usage,
        span_budget: cap,
    })
}

/// The text a span head reads: a text state as it is (offsets count into it), another
/// state as the backend renders it.
fn span_text<'r>(backend: &dyn DirectBackend, r: &'r DecisionRequest) -> Cow<'r, str> {
    match &r.state {
        serde_json::Value::String(s) => Cow::Borrowed(s.as_str()),
        state => backend.render_state(state),
    }
}

/// Each span plan's spans, in plan order, from the package's span head; the tokens read are
/// added to `usage`, and a plan whose text was read only in part is not complete.
fn find_spans(
    model: &DecisionModel,
    backend: &dyn DirectBackend,
    p: &mut Prepared<'_>,
) -> Result<Vec<Option<Vec<protocol::SpanFound>>>, EngineError> {
    let head = model.adapters().and_then(|a| a.span_head());
    let mut out = Vec::new();
    for (_, plan, _) in &mut p.plans {
        let Plan::Span {
            labels,
            text,
            complete,
            ..
        } = plan
        else {
            continue;
        };
        let (Some(head), Some(words)) = (head, backend.word_rows(text, p.span_budget)?) else {
            out.push(None);
            continue;
        };
        p.usage.input_tokens += words.tokens as u64;
        *complete &= !words.truncated;
        out.push(head.spans(text, &words.ranges, &words.rows, labels));
    }
    Ok(out)
}

/// The state, or with `over` only the keys it names (in state order), as the model reads it.
fn view_text<'r>(
    backend: &dyn DirectBackend,
    r: &'r DecisionRequest,
    over: Option<&[String]>,
) -> Cow<'r, str> {
    match (over, &r.state) {
        (Some(keys), serde_json::Value::Object(map)) => {
            let subset = serde_json::Value::Object(
                map.iter()
                    .filter(|(k, _)| keys.contains(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            Cow::Owned(backend.render_state(&subset).into_owned())
        }
        _ => backend.render_state(&r.state),
    }
}

/// A choice, noul or score question as the backend reads it, with its plan.
fn direct_question(
    model: &DecisionModel,
    backend: &dyn DirectBackend,
    id: &str,
    q: &Question,
    n_decisions: usize,
) -> Result<(Plan, DirectQuestion), QuestionFailure> {
    let tokenize = |text: &str| {
        backend.tokenize_text(text.trim()).map_err(|e| {
            QuestionFailure::new(
                QuestionErrorKind::InvalidInput,
                reason::INPUT_MALFORMED,
                e.to_string(),
            )
        })
    };
    let option =
        |name: &str, desc: Option<&str>| tokenize(&format!("{name} {}", desc.unwrap_or("")));
    let id = id.to_string();
    let complete = q.require_full_input;
    let type_name = q.kind.type_name();
    let temperature = model.temperature(type_name, n_decisions);
    let readout = match (&q.kind, model.readout_for(q)?) {
        (
            QuestionKind::Choice { .. } | QuestionKind::Noul { .. } | QuestionKind::Score { .. },
            Readout::Base,
        ) if !backend.reads_questions() => {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                reason::DECISION_ADAPTER_UNSUPPORTED,
                format!(
                    "model {} answers only the questions its heads were trained on \
                     (its card's decision_adapters lists them); this {type_name} question is not one",
                    model.meta.name
                ),
            ));
        }
        (_, r) => r,
    };
    let (kind, plan, options) = match &q.kind {
        QuestionKind::Choice { options } => (
            DirectKind::Choice,
            Plan::Choice {
                id,
                keys: options.iter().map(|(k, _)| k.clone()).collect(),
                shown: vec![(0..options.len()).collect()],
                temperature,
                complete,
                readout: readout.clone(),
            },
            // Read as the model's package defines its forward, key and description (the
            // static vectors were trained that way; `tests/package_forward.rs`), unlike a
            // causal LM's options, which are read by their meaning alone.
            options
                .iter()
                .map(|(k, d)| option(k, d.as_deref()))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        QuestionKind::Noul {
            when_false,
            when_true,
        } => {
            let (yes, no) = backend.noul_outcomes();
            (
                DirectKind::Noul,
                Plan::Noul {
                    id,
                    temperature,
                    complete,
                    readout: readout.clone(),
                },
                vec![
                    option("true", Some(when_true.as_deref().unwrap_or(yes)))?,
                    option("false", Some(when_false.as_deref().unwrap_or(no)))?,
                ],
            )
        }
        QuestionKind::Score { levels } => (
            DirectKind::Score,
            Plan::Score {
                id,
                legend: levels.clone(),
                shown: vec![(0..levels.len()).collect()],
                temperature,
                complete,
                readout,
            },
            levels
                .iter()
                .enumerate()
                .map(|(i, l)| option(&i.to_string(), Some(l)))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        _ => {
            return Err(QuestionFailure::new(
                QuestionErrorKind::InvalidQuestion,
                match &q.kind {
                    QuestionKind::Span { .. } => reason::SPAN_UNSUPPORTED,
                    QuestionKind::Box { .. } => reason::BOX_UNSUPPORTED,
                    QuestionKind::Track { .. } => reason::TRACK_UNSUPPORTED,
                    _ => reason::SET_UNSUPPORTED,
                },
                format!(
                    "model {} does not answer {type_name} questions",
                    model.meta.name
                ),
            ))
        }
    };
    let instructions = tokenize(q.instructions.as_deref().unwrap_or(""))?;
    Ok((
        plan,
        DirectQuestion {
            kind,
            instructions,
            options,
        },
    ))
}

/// Each question's probability groups (`None` for a failed question): the backend asked once
/// per root (every question on it together), the windows of a question combined.
fn evaluate(
    backend: &dyn DirectBackend,
    p: &Prepared<'_>,
) -> Result<Vec<Option<Vec<Vec<f64>>>>, EngineError> {
    let mut per_question: Vec<Vec<Vec<Vec<f64>>>> = vec![Vec::new(); p.plans.len()];
    for (k, key) in p.keys.iter().enumerate() {
        let on: Vec<(usize, &DirectQuestion, f64)> = p
            .plans
            .iter()
            .enumerate()
            .filter(|(_, (at, ..))| *at == Some(k))
            .filter_map(|(i, (_, plan, q))| Some((i, q.as_ref()?, temperature(plan))))
            .collect();
        let questions: Vec<&DirectQuestion> = on.iter().map(|(_, q, _)| *q).collect();
        let view = match key {
            RootKey::Whole(v) | RootKey::Truncated(v, _) | RootKey::Windows(v, ..) => *v,
        };
        let text = &p.views.texts[view];
        let heads: Vec<Option<&Arc<Head>>> = on
            .iter()
            .map(|(i, ..)| trained_head(&p.plans[*i].1))
            .collect();
        // Heads that read the text's n-grams read the whole view once, not a root each.
        let lexical: Vec<Option<Vec<f64>>> = on
            .iter()
            .zip(&heads)
            .map(|((i, ..), h)| {
                let head = (*h)?;
                let lex = head.lexical.as_ref()?;
                head.answer(&lex.vector(text), &p.plans[*i].1.classes())
            })
            .collect();
        for (r, tokens) in p.views.roots(*key).into_iter().enumerate() {
            // Questions a trained head answers read the state's vector, once per root; the
            // others are asked of the backend together.
            let features = match heads.iter().any(|h| h.is_some_and(|h| h.lexical.is_none())) {
                true => backend.features(tokens)?,
                false => None,
            };
            let asked: Vec<&DirectQuestion> = questions
                .iter()
                .zip(&heads)
                .filter(|(_, h)| h.is_none())
                .map(|(q, _)| *q)
                .collect();
            let mut logits = match asked.is_empty() {
                true => Vec::new(),
                false => read_root(backend, text, tokens, &asked)?,
            }
            .into_iter();
            for (((i, _, t), head), lexical) in on.iter().zip(&heads).zip(&lexical) {
                let read = match head {
                    Some(h) if h.lexical.is_some() => match (r, lexical) {
                        (0, Some(read)) => read.clone(),
                        (0, None) => {
                            return Err(EngineError::Forward(
                                "a lexical head read none of its classes".into(),
                            ))
                        }
                        _ => continue,
                    },
                    Some(head) => features
                        .as_deref()
                        .and_then(|f| head.answer(f, &p.plans[*i].1.classes()))
                        .ok_or_else(|| {
                            EngineError::Forward(
                                "the backbone gave no state vector its heads read".into(),
                            )
                        })?,
                    None => match logits.next() {
                        Some(l) => softmax(&l, *t),
                        None => {
                            return Err(EngineError::Forward(
                                "the backend answered fewer questions than it was asked".into(),
                            ))
                        }
                    },
                };
                per_question[*i].push(vec![read]);
            }
        }
    }
    Ok(p.plans
        .iter()
        .zip(per_question)
        .map(|((at, plan, _), windows)| at.and_then(|_| combine_windows(plan, windows)))
        .collect())
}

fn read_root(
    backend: &dyn DirectBackend,
    text: &str,
    tokens: &[Token],
    questions: &[&DirectQuestion],
) -> Result<Vec<Vec<f32>>, EngineError> {
    let logits = backend.answer(text, tokens, questions)?;
    let shaped = logits.len() == questions.len()
        && logits
            .iter()
            .zip(questions)
            .all(|(l, q)| l.len() == q.options.len());
    if !shaped {
        return Err(EngineError::Forward(
            "the backend answered a different number of questions or options".into(),
        ));
    }
    Ok(logits)
}

/// The head a plan is answered by, where a trained head answers it.
fn trained_head(plan: &Plan) -> Option<&Arc<Head>> {
    match plan.readout() {
        Some(Readout::Adapter(head)) => Some(head),
        _ => None,
    }
}

fn temperature(plan: &Plan) -> f64 {
    match plan {
        Plan::Choice { temperature, .. }
        | Plan::Noul { temperature, .. }
        | Plan::Score { temperature, .. }
        | Plan::Set { temperature, .. } => *temperature,
        Plan::Failed { .. } | Plan::Span { .. } => 1.0,
    }
}
