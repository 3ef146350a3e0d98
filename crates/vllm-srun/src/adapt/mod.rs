//! `vllm-srun adapt`: decision adapters trained from labelled cases (sys1bench's manifest
//! format), written into a package directory that references the base model's GGUF.
//!
//! Each case is asked as one request with every question (as a served model would be asked)
//! on a model that keeps each question's adapter features (`engine::adapter`: logits at the
//! answer position, a linear image of the hidden state there). Per distinct question (type,
//! instructions, options) a softmax layer is fitted on the standardised features, its L2 weight
//! and a temperature chosen by k-fold cross-validation (the held-out folds' NLL); the
//! out-of-fold answers at that weight and temperature are what the report measures. The head
//! is then refitted on every case and its logits divided by the temperature. Fitting runs on
//! candle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::adapter::{classes_of, question_key, AdapterFile, Head};
use engine::encode::backbone::Backbone;
use engine::lexical::Lexical;
use engine::DecisionModel;
use protocol::request::parse_question;
use protocol::Schema;
use serde_json::{json, Value};

mod fit;
mod spans;

use fit::{best_temperature, fit, progress, scores, temper, STEPS};

/// The file a package keeps its adapters in.
pub const ADAPTERS_FILE: &str = "decision_adapters.json";
/// L2 weights cross-validation chooses from (on standardised features, per case).
const L2_GRID: &[f64] = &[1e-3, 1e-2, 3e-2, 1e-1, 3e-1];
/// The same for a head on n-grams: unit-length vectors of thousands of small values, not
/// standardised, want weights that large.
const LEXICAL_L2_GRID: &[f64] = &[1e-5, 3e-5, 1e-4, 3e-4, 1e-3];
/// Buckets of a lexical head's n-grams ([`Lexical`]).
const LEXICAL_BUCKETS: usize = 4096;
/// Fewest labelled cases a question needs to get an adapter.
pub const MIN_CASES: usize = 20;

/// What `adapt` is asked to do.
pub struct AdaptOptions {
    pub model: String,
    pub data: Vec<PathBuf>,
    pub out: PathBuf,
    pub folds: usize,
    pub threads: usize,
    /// Answer every question by its adapter unless it says otherwise (the card's default).
    pub default_on: bool,
    pub pull_missing: bool,
    /// Label the cases with this model's answers (soft labels) instead of their truths:
    /// distillation of a served model or package, its adapters included.
    pub teacher: Option<String>,
    /// Question ids whose heads read the state's character n-grams instead of the
    /// encoder's vector ([`Lexical`]): the whole text at once, for no forward.
    pub lexical: Vec<String>,
}

/// One question's labelled features.
struct Cases {
    question: Value,
    classes: Vec<String>,
    x: Vec<Vec<f32>>,
    /// Each case's target over `classes`: one-hot for a truth, a teacher's probabilities.
    t: Vec<Vec<f32>>,
    /// Each case's most probable class under its target.
    y: Vec<usize>,
    /// Where the head reads n-grams: their inverse document frequencies.
    lexical: Option<Lexical>,
}

/// One fitted head and what cross-validation measured.
pub struct Fitted {
    pub id: String,
    pub cases: usize,
    pub l2: f64,
    pub temperature: f64,
    pub accuracy: f64,
    pub nll: f64,
    pub ece: f64,
}

/// A manifest question as a 5.0 request asks it, and the index of its truth among the
/// classes its head scores (`None` when the truth is none of them).
fn wire(q: &Value) -> Option<(Value, Option<Value>)> {
    let kind = q.get("type")?.as_str()?;
    let instructions = q.get("instructions")?.clone();
    let truth = q.get("ground_truth").cloned();
    let out = match kind {
        "choice" => {
            let mut criteria = serde_json::Map::new();
            for c in q.get("criteria")?.as_array()? {
                let key = c.get("key")?.as_str()?;
                let desc = c
                    .get("description")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                    .unwrap_or(key);
                criteria.insert(key.into(), Value::String(desc.into()));
            }
            json!({"type": "choice", "instructions": instructions, "criteria": criteria})
        }
        "score" => {
            let mut levels: Vec<&Value> = q.get("criteria")?.as_array()?.iter().collect();
            levels.sort_by_key(|c| c.get("level").and_then(Value::as_i64).unwrap_or(0));
            let truth = truth.as_ref().and_then(Value::as_i64).and_then(|t| {
                levels
                    .iter()
                    .position(|c| c.get("level").and_then(Value::as_i64) == Some(t))
            });
            let criteria: Vec<Value> = levels
                .iter()
                .map(|c| c.get("description").cloned().unwrap_or(Value::Null))
                .collect();
            let q = json!({"type": "score", "instructions": instructions, "criteria": criteria});
            return Some((q, truth.map(|t| Value::String(t.to_string()))));
        }
        "noul" => json!({"type": "noul", "instructions": instructions}),
        _ => return None,
    };
    let truth = match (kind, truth) {
        ("noul", Some(Value::Bool(b))) => Some(Value::String(if b { "yes" } else { "no" }.into())),
        (_, Some(Value::String(s))) => Some(Value::String(s)),
        _ => None,
    };
    Some((out, truth))
}

/// One labelled case of a manifest: where it stands (`file:line`), its state, and each
/// question it labels as a 5.0 request asks it, with its truth.
struct Case {
    at: String,
    state: Value,
    questions: Vec<(String, Value, Value)>,
    /// Its labelled span questions.
    spans: Vec<spans::SpanCase>,
}

impl Case {
    /// Its questions as one 5.0 request about its state.
    fn request(&self) -> anyhow::Result<protocol::request::DecisionBody> {
        let questions: serde_json::Map<String, Value> = self
            .questions
            .iter()
            .map(|(qid, w, _)| (qid.clone(), w.clone()))
            .collect();
        let body = json!({"model": "m", "state": self.state, "questions": questions});
        protocol::request::parse_decision_body(&body, Schema::V5)
            .map_err(|e| anyhow::anyhow!("{}: {}", self.at, e.message))
    }

    /// Each question's request form and truth, by its id.
    fn truths(&self) -> BTreeMap<String, (Value, Value)> {
        self.questions
            .iter()
            .map(|(qid, w, t)| (qid.clone(), (w.clone(), t.clone())))
            .collect()
    }
}

/// Read and check every manifest before anything is asked or written: each line a JSON
/// object with a `state` and `questions`; each choice, noul or score question a valid
/// question whose truth is one of its answers; no state asked the same question twice with
/// different truths. Questions of other types are not trained on. An error names the file and
/// line.
fn read_cases(data: &[PathBuf], unlabelled: bool) -> anyhow::Result<Vec<Case>> {
    let mut cases = Vec::new();
    // (state, question key) -> (where first labelled, its truth)
    let mut seen: BTreeMap<(String, String), (String, Value)> = BTreeMap::new();
    for path in data {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("{}:{}", path.display(), n + 1);
            let item: Value =
                serde_json::from_str(line).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
            let (Some(state), Some(asked)) = (
                item.get("state"),
                item.get("questions").and_then(Value::as_object),
            ) else {
                return Err(anyhow::anyhow!(
                    "{at}: a case is an object with a state and its questions"
                ));
            };
            let mut questions = Vec::new();
            let mut span_cases = Vec::new();
            for (qid, q) in asked {
                if q.get("type").and_then(Value::as_str) == Some("span") {
                    // A teacher labels no spans.
                    if !unlabelled {
                        span_cases.extend(spans::read_span(&at, qid, q, state)?);
                    }
                    continue;
                }
                let Some((w, truth)) = wire(q) else {
                    continue;
                };
                let truth = match (truth, q.get("ground_truth")) {
                    // A teacher labels every case.
                    _ if unlabelled => Value::Null,
                    (Some(t), _) => t,
                    // Unlabelled: nothing to train on.
                    (None, None | Some(Value::Null)) => continue,
                    (None, Some(t)) => {
                        return Err(anyhow::anyhow!(
                            "{at}: question {qid:?}: ground_truth {t} is none of its answers"
                        ))
                    }
                };
                let parsed = parse_question(&w, Schema::V5)
                    .map_err(|f| anyhow::anyhow!("{at}: question {qid:?}: {}", f.message))?;
                let classes = classes_of(&parsed).unwrap_or_default();
                if !unlabelled && !classes.iter().any(|c| Some(c.as_str()) == truth.as_str()) {
                    return Err(anyhow::anyhow!(
                        "{at}: question {qid:?}: ground_truth {truth} is none of its answers ({})",
                        classes.join(", ")
                    ));
                }
                let key = question_key(&parsed).unwrap_or_default();
                let state_key = state.to_string();
                match seen.get(&(state_key.clone(), key.clone())) {
                    _ if unlabelled => {}
                    Some((first, t)) if *t != truth => {
                        return Err(anyhow::anyhow!(
                            "{at}: question {qid:?} contradicts {first}: the same state and \
                             question answered {truth} there and {t} here"
                        ));
                    }
                    Some(_) => {}
                    None => {
                        seen.insert((state_key, key), (at.clone(), truth.clone()));
                    }
                }
                questions.push((qid.clone(), w, truth));
            }
            cases.push(Case {
                at,
                state: state.clone(),
                questions,
                spans: span_cases,
            });
        }
    }
    Ok(cases)
}

/// Place one case's features for each question among its head's cases; a question id in
/// `ngrams` gives its head the n-gram weights its features were made with.
fn record(
    by_question: &mut BTreeMap<String, Cases>,
    features: impl IntoIterator<Item = (String, Option<Vec<f32>>)>,
    truths: &BTreeMap<String, (Value, Value)>,
    ngrams: &BTreeMap<String, Lexical>,
) -> anyhow::Result<()> {
    for (qid, h) in features {
        let (Some(h), Some((w, truth))) = (h, truths.get(&qid)) else {
            continue;
        };
        let q = parse_question(w, Schema::V5).map_err(|f| anyhow::anyhow!(f.message))?;
        // One head per question, whatever order a case lists a choice's options in: the
        // classes are the first case's, and each truth is placed among them.
        let Some(key) = question_key(&q) else {
            continue;
        };
        let cases = by_question.entry(key).or_insert_with(|| Cases {
            question: w.clone(),
            classes: classes_of(&q).unwrap_or_default(),
            x: Vec::new(),
            t: Vec::new(),
            y: Vec::new(),
            lexical: None,
        });
        if cases.lexical.is_none() {
            cases.lexical = ngrams.get(&qid).cloned();
        }
        // A truth names its class; a teacher's answer gives each class its probability.
        let t: Vec<f32> = match truth {
            Value::Object(p) => cases
                .classes
                .iter()
                .map(|c| p.get(c).and_then(Value::as_f64).unwrap_or(0.0) as f32)
                .collect(),
            truth => cases
                .classes
                .iter()
                .map(|c| f32::from(u8::from(Some(c.as_str()) == truth.as_str())))
                .collect(),
        };
        let total: f32 = t.iter().sum();
        if total <= 0.0 {
            continue;
        }
        let y = t
            .iter()
            .enumerate()
            .fold(0, |b, (i, v)| if *v > t[b] { i } else { b });
        cases.x.push(h);
        cases.t.push(t.iter().map(|v| v / total).collect());
        cases.y.push(y);
    }
    Ok(())
}

/// Ask every case of a causal LM, and group its features by question.
async fn collect(
    model: Arc<DecisionModel>,
    items: &[Case],
) -> anyhow::Result<BTreeMap<String, Cases>> {
    let mut by_question: BTreeMap<String, Cases> = BTreeMap::new();
    let bar = progress(items.len());
    // A few requests at a time: the model's worker batches them into shared forwards.
    for chunk in items.chunks(8) {
        let mut tasks = tokio::task::JoinSet::new();
        for (at, item) in chunk.iter().enumerate() {
            if item.questions.is_empty() {
                continue;
            }
            let (body, truths) = (item.request()?, item.truths());
            let model = model.clone();
            let whence = item.at.clone();
            tasks.spawn(async move {
                let protocol::request::DecisionBody::Single(r) = body else {
                    return Err(anyhow::anyhow!("{whence}: a case is one request"));
                };
                let features = model
                    .adapter_features(&r)
                    .await
                    .map_err(|e| anyhow::anyhow!("{whence}: {e}"))?;
                Ok::<_, anyhow::Error>((at, features, truths))
            });
        }
        // In the manifest's order, not as the answers come back: the folds, the classes'
        // order and every sum of the fit follow the cases' order, so the same data trains
        // the same heads.
        let mut answered = Vec::with_capacity(chunk.len());
        while let Some(done) = tasks.join_next().await {
            answered.push(done??);
        }
        answered.sort_by_key(|(at, _, _)| *at);
        for (_, features, truths) in answered {
            record(&mut by_question, features, &truths, &BTreeMap::new())?;
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(by_question)
}

/// Read every case's state on an encoder backbone (its first window, as the worker's first
/// read of it), and group the vectors by question. Cases go to the encoder in batches; the
/// questions named in `lexical` read the state's n-grams instead (inverse document frequencies
/// from the texts of the cases that ask them), and a batch none of whose questions reads the
/// encoder is not read by it.
fn collect_encoded(
    backbone: &Backbone,
    items: &[Case],
    lexical: &[String],
) -> anyhow::Result<BTreeMap<String, Cases>> {
    let items: Vec<&Case> = items.iter().filter(|c| !c.questions.is_empty()).collect();
    let ngrams = lexical_questions(&items, lexical)?;
    let mut by_question: BTreeMap<String, Cases> = BTreeMap::new();
    let bar = progress(items.len());
    let room = engine::DirectBackend::info(backbone).trained_context;
    for chunk in items.chunks(16) {
        let texts: Vec<_> = chunk.iter().map(|c| Backbone::render(&c.state)).collect();
        let reads_encoder = chunk.iter().any(|c| {
            c.questions
                .iter()
                .any(|(qid, ..)| !ngrams.contains_key(qid))
        });
        let vectors = match reads_encoder {
            true => {
                let tokens = chunk
                    .iter()
                    .zip(&texts)
                    .map(|(c, text)| {
                        engine::backend::Vocab::tokenize_text(backbone, text)
                            .map_err(|e| anyhow::anyhow!("{}: {e}", c.at))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let reads: Vec<&[engine::Token]> =
                    tokens.iter().map(|t| &t[..t.len().min(room)]).collect();
                backbone.vectors(&reads)?
            }
            false => vec![Vec::new(); chunk.len()],
        };
        for ((case, v), text) in chunk.iter().zip(vectors).zip(&texts) {
            let truths = case.truths();
            let features = case.questions.iter().map(|(qid, ..)| {
                let x = match ngrams.get(qid) {
                    Some(lex) => lex.vector(text),
                    None => v.clone(),
                };
                (qid.clone(), Some(x))
            });
            record(&mut by_question, features, &truths, &ngrams)?;
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(by_question)
}

/// The n-gram weights of each question id named in `lexical`, from the texts of the cases
/// asking it; an id no case asks is an error.
fn lexical_questions(
    items: &[&Case],
    lexical: &[String],
) -> anyhow::Result<BTreeMap<String, Lexical>> {
    let mut out = BTreeMap::new();
    for qid in lexical {
        let texts: Vec<_> = items
            .iter()
            .filter(|c| c.questions.iter().any(|(q, ..)| q == qid))
            .map(|c| Backbone::render(&c.state))
            .collect();
        if texts.is_empty() {
            return Err(anyhow::anyhow!(
                "--lexical {qid}: no case asks a question {qid:?}"
            ));
        }
        let lex = Lexical::fit(texts.iter().map(|t| t.as_ref()), LEXICAL_BUCKETS);
        out.insert(qid.clone(), lex);
    }
    Ok(out)
}

/// A noul head's out-of-fold answers at thresholds on P(yes): the share of "yes" cases at or
/// above it (caught) and of "no" cases at or above it (flagged), what a router guard's
/// threshold is chosen from. `None` for other heads.
fn operating_points(classes: &[String], p: &[Vec<f64>], y: &[usize]) -> Option<Value> {
    let yes = classes.iter().position(|c| c == "yes")?;
    if classes.len() != 2 {
        return None;
    }
    // P(yes) of the "yes" cases and of the others, each read once.
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    for (pi, &yi) in p.iter().zip(y) {
        let v = pi.get(yes).copied().unwrap_or(0.0);
        if yi == yes {
            pos.push(v);
        } else {
            neg.push(v);
        }
    }
    let share =
        |of: &[f64], t: f64| of.iter().filter(|v| **v >= t).count() as f64 / of.len().max(1) as f64;
    let points = (1..10)
        .map(|i| {
            let t = f64::from(i) / 10.0;
            json!({"threshold": t, "caught": share(&pos, t), "flagged": share(&neg, t)})
        })
        .collect();
    Some(Value::Array(points))
}

/// Fit one question's head: the L2 weight and the temperature by k-fold cross-validation,
/// then the weights on every case, divided by the temperature.
fn train(id: &str, c: &Cases, folds: usize) -> anyhow::Result<(Head, Fitted)> {
    let n = c.y.len();
    let k = c.classes.len();
    let folds = folds.clamp(2, n);
    let fold_of = |i: usize| i % folds;
    // (l2, temperature, held-out NLL, held-out answers at that temperature)
    let mut best: Option<(f64, f64, f64, Vec<Vec<f64>>)> = None;
    let standardise = c.lexical.is_none();
    let grid = if standardise {
        L2_GRID
    } else {
        LEXICAL_L2_GRID
    };
    for &l2 in grid {
        let mut out = vec![Vec::new(); n];
        for f in 0..folds {
            let train: Vec<usize> = (0..n).filter(|&i| fold_of(i) != f).collect();
            let x: Vec<Vec<f32>> = train.iter().map(|&i| c.x[i].clone()).collect();
            let t: Vec<Vec<f32>> = train.iter().map(|&i| c.t[i].clone()).collect();
            let head = fit(&x, &t, k, l2, standardise)?;
            for i in (0..n).filter(|&i| fold_of(i) == f) {
                out[i] = head.probabilities(&c.x[i]).unwrap_or_default();
            }
        }
        let t = best_temperature(&out, &c.y);
        let out = temper(&out, t);
        let (_, nll, _) = scores(&out, &c.y);
        if best.as_ref().is_none_or(|(_, _, b, _)| nll < *b) {
            best = Some((l2, t, nll, out));
        }
    }
    let (l2, temperature, _, out) = best.ok_or_else(|| anyhow::anyhow!("no L2 weight to try"))?;
    let (accuracy, nll, ece) = scores(&out, &c.y);
    let mut head = fit(&c.x, &c.t, k, l2, standardise)?;
    let scale = (1.0 / temperature) as f32;
    for row in &mut head.weights {
        row.iter_mut().for_each(|w| *w *= scale);
    }
    head.bias.iter_mut().for_each(|b| *b *= scale);
    head.question = c.question.clone();
    head.classes = c.classes.clone();
    head.lexical = c.lexical.clone();
    head.fit = json!({
        "cases": n, "folds": folds, "l2": l2, "temperature": temperature, "steps": STEPS,
        "cross_validated": {"accuracy": accuracy, "nll": nll, "ece": ece},
    });
    if let Some(points) = operating_points(&c.classes, &out, &c.y) {
        head.fit["cross_validated"]["thresholds"] = points;
    }
    Ok((
        head,
        Fitted {
            id: id.to_string(),
            cases: n,
            l2,
            temperature,
            accuracy,
            nll,
            ece,
        },
    ))
}

/// Train adapters for every question of the manifests with enough cases, and write the
/// package: `decision_adapters.json`, the base's `decision_config.json`, a card naming the
/// base, and `model.gguf` as a link to the base's weights (not a copy).
pub fn adapt(o: &AdaptOptions) -> anyhow::Result<Vec<Fitted>> {
    let mut cases = read_cases(&o.data, o.teacher.is_some())?;
    let threads = match o.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    if let Some(teacher) = &o.teacher {
        teach(o, teacher, threads, &mut cases)?;
    }
    let resolved = hub::resolve(&o.model, o.pull_missing)?;
    match resolved.kind {
        hub::Kind::Gguf if !o.lexical.is_empty() => Err(anyhow::anyhow!(
            "{}: heads on n-grams (--lexical) are trained beside an encoder backbone",
            o.model
        )),
        hub::Kind::Gguf => adapt_llm(o, &resolved, &cases),
        hub::Kind::Encoder => adapt_encoder(o, &resolved, threads, &cases),
        _ => Err(anyhow::anyhow!(
            "{}: heads are trained on a GGUF decision model or an encoder",
            o.model
        )),
    }
}

/// Label every question of every case with the teacher's answer: its probability of each
/// class (a choice's keys, `yes` and `no`, a score's level indices), asked as a served model
/// is asked, the teacher's adapters and corrections included.
fn teach(
    o: &AdaptOptions,
    teacher: &str,
    threads: usize,
    cases: &mut [Case],
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let serve = super::ServeOptions {
            models: vec![teacher.to_string()],
            port: 0,
            generate: None,
            threads,
            pull_missing: o.pull_missing,
            pages: false,
            ..super::ServeOptions::default()
        };
        let bound = super::bind(serve).await?;
        let model = loop {
            match bound.registry.ready(None) {
                Ok(m) => break m,
                Err(e @ engine::EngineError::LoadFailed(..)) => {
                    return Err(anyhow::anyhow!("teacher {teacher}: {e}"))
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        };
        let started = std::time::Instant::now();
        let bar = progress(cases.len());
        for chunk in cases.chunks_mut(8) {
            let mut tasks = tokio::task::JoinSet::new();
            for (at, case) in chunk.iter().enumerate() {
                let body = case.request()?;
                let (model, whence) = (model.clone(), case.at.clone());
                tasks.spawn(async move {
                    let (decision, _) = model
                        .decide(&body, std::time::Instant::now())
                        .await
                        .map_err(|e| anyhow::anyhow!("{whence}: the teacher: {e}"))?;
                    let engine::Decision::Single(answer) = decision else {
                        return Err(anyhow::anyhow!("{whence}: a case is one request"));
                    };
                    let answers = serde_json::to_value(&answer.answers)?;
                    Ok::<_, anyhow::Error>((at, answers))
                });
            }
            while let Some(done) = tasks.join_next().await {
                let (at, answers) = done??;
                let Some(case) = chunk.get_mut(at) else {
                    continue;
                };
                for (qid, w, truth) in &mut case.questions {
                    *truth = soft_label(w, &answers[qid.as_str()]).unwrap_or(Value::Null);
                }
            }
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        eprintln!(
            "the teacher labelled {} cases in {:.1} s",
            cases.len(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    })
}

/// A teacher's answer to a question as a target over the head's classes; `None` for an
/// answer that failed.
fn soft_label(question: &Value, answer: &Value) -> Option<Value> {
    let mut out = serde_json::Map::new();
    match question.get("type")?.as_str()? {
        "noul" => {
            let p = answer.get("noul")?.as_f64()?;
            out.insert("yes".into(), json!(p));
            out.insert("no".into(), json!(1.0 - p));
        }
        _ => {
            for (k, v) in answer.get("probabilities")?.as_object()? {
                out.insert(k.clone(), json!(v.as_f64()?));
            }
        }
    }
    Some(Value::Object(out))
}

/// Fit a head for every question with enough cases.
fn train_all(
    by_question: &BTreeMap<String, Cases>,
    folds: usize,
) -> anyhow::Result<(Vec<Head>, Vec<Fitted>)> {
    let started = std::time::Instant::now();
    let mut heads = Vec::new();
    let mut report = Vec::new();
    for c in by_question.values() {
        let id = c
            .question
            .get("instructions")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        let seen = {
            let mut s = c.y.clone();
            s.sort_unstable();
            s.dedup();
            s.len()
        };
        if c.y.len() < MIN_CASES || seen < 2 {
            eprintln!(
                "skipped {id:?}: {} cases, {seen} answers seen (a head needs {MIN_CASES} and 2)",
                c.y.len()
            );
            continue;
        }
        let (head, fitted) = train(&id, c, folds)?;
        heads.push(head);
        report.push(fitted);
    }
    eprintln!(
        "fitted {} heads in {:.1} s",
        heads.len(),
        started.elapsed().as_secs_f64()
    );
    Ok((heads, report))
}

/// Adapters of a causal LM: features read at each question's answer position.
fn adapt_llm(
    o: &AdaptOptions,
    resolved: &hub::Resolved,
    cases: &[Case],
) -> anyhow::Result<Vec<Fitted>> {
    let config = super::package_config(&o.model, resolved)?;
    let backend = backend_llama::LlamaBackend::load(
        &resolved.weights,
        backend_llama::LlamaConfig {
            threads: o.threads,
            probe_cache: Some(hub::cache_dir().join("flash-attention-probes.json")),
            ..Default::default()
        },
    )?;
    let backend: Arc<dyn engine::Backend> = Arc::new(backend);
    if let Some(c) = cases.iter().find(|c| !c.spans.is_empty()) {
        return Err(anyhow::anyhow!(
            "{}: span heads are trained on an encoder backbone (e.g. --model minilm-l6)",
            c.at
        ));
    }
    let vocab_size = backend.vocab_size();
    let features =
        engine::adapter::feature_tokens(vocab_size, backend.info().hidden_size.unwrap_or(0)).len();
    let meta = super::plan_meta(&o.model, false, &[]);
    let base_name = meta.name.clone();
    let base_sha = meta.sha256.clone();
    let model = DecisionModel::start(meta, config.clone(), backend, Default::default())
        .and_then(DecisionModel::recording_features)?;
    let model = Arc::new(model);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = std::time::Instant::now();
    let by_question = rt.block_on(collect(model, cases))?;
    eprintln!(
        "asked the cases in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (heads, report) = train_all(&by_question, o.folds)?;
    write_package(
        o,
        &resolved.weights,
        &config,
        base_name,
        base_sha,
        AdapterFile {
            vocab_size,
            features,
            default: o.default_on,
            adapters: heads,
            spans: None,
        },
    )?;
    Ok(report)
}

/// Heads on an encoder backbone: features are the encoder's vector of the state. The package
/// links the encoder's files and answers only the questions it has heads for, by default.
fn adapt_encoder(
    o: &AdaptOptions,
    resolved: &hub::Resolved,
    threads: usize,
    cases: &[Case],
) -> anyhow::Result<Vec<Fitted>> {
    let dir = resolved
        .dir
        .clone()
        .ok_or_else(|| anyhow::anyhow!("{}: an encoder is a directory", o.model))?;
    let encoder = super::load_encoder(&dir, None, threads, super::ENCODER_PATH)?;
    let backbone = Backbone::new(encoder, threads, 64);
    let vocab_size = engine::backend::Vocab::vocab_size(&backbone);
    let features = engine::DirectBackend::info(&backbone)
        .hidden_size
        .unwrap_or(0);
    let started = std::time::Instant::now();
    let by_question = collect_encoded(&backbone, cases, &o.lexical)?;
    let took = started.elapsed().as_secs_f64();
    eprintln!(
        "read {} cases in {took:.1} s ({:.1} ms a case)",
        cases.len(),
        1e3 * took / cases.len().max(1) as f64
    );
    let (heads, report) = train_all(&by_question, o.folds)?;
    let span_cases: Vec<spans::SpanCase> =
        cases.iter().flat_map(|c| c.spans.iter().cloned()).collect();
    let span = spans::train_spans(&backbone, &span_cases)?;
    if let Some((_, f)) = &span {
        eprintln!(
            "span head: {} cases, {} words, temperature {:.2}; exact spans of the held-out fifth:",
            f.cases, f.words, f.temperature
        );
        for (label, (p, r, f1)) in &f.labels {
            eprintln!("  {label:<16} precision {p:.3}  recall {r:.3}  F1 {f1:.3}");
        }
    }
    let meta = super::plan_meta(&o.model, false, &[]);
    write_encoder_package(
        o,
        &dir,
        &meta.name,
        AdapterFile {
            vocab_size,
            features,
            default: true,
            adapters: heads,
            spans: span.map(|(h, _)| h),
        },
    )?;
    Ok(report)
}

/// `link` made (or remade) a symbolic link to where `target` really is.
fn link_to(target: &Path, link: &Path) -> std::io::Result<()> {
    let target = std::fs::canonicalize(target)?;
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link)?;
    }
    std::os::unix::fs::symlink(&target, link)
}

/// Write `v` as `dir/name`, pretty-printed (through a JSON value, as the packages always
/// were written).
fn write_json(dir: &Path, name: &str, v: &impl serde::Serialize) -> anyhow::Result<()> {
    let v = serde_json::to_value(v)?;
    let text = serde_json::to_string_pretty(&v)?;
    std::fs::write(dir.join(name), text + "\n")
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))
}

/// An encoder heads package: each file of the encoder's directory linked (not copied), the
/// heads, and a card naming the base.
fn write_encoder_package(
    o: &AdaptOptions,
    base_dir: &Path,
    base: &str,
    file: AdapterFile,
) -> anyhow::Result<()> {
    let io = |e: std::io::Error| anyhow::anyhow!("{}: {e}", o.out.display());
    std::fs::create_dir_all(&o.out).map_err(io)?;
    for entry in std::fs::read_dir(base_dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if name == ADAPTERS_FILE || name == "card.json" || name == "decision_config.json" {
            continue;
        }
        link_to(&entry.path(), &o.out.join(&name)).map_err(io)?;
    }
    let n = file.adapters.len();
    let and_spans = if file.spans.is_some() {
        " and a span head"
    } else {
        ""
    };
    write_json(&o.out, ADAPTERS_FILE, &file)?;
    write_json(
        &o.out,
        "card.json",
        &json!({
            "description": format!("{n} decision heads{and_spans} on {base}, trained by vllm-srun adapt"),
            "revision": format!("{base}+heads"),
            "base": base,
            "decision_adapter_default": true,
        }),
    )
}

fn write_package(
    o: &AdaptOptions,
    weights: &Path,
    config: &engine::DecisionConfig,
    base: String,
    base_sha256: Option<String>,
    file: AdapterFile,
) -> anyhow::Result<()> {
    let io = |e: std::io::Error| anyhow::anyhow!("{}: {e}", o.out.display());
    std::fs::create_dir_all(&o.out).map_err(io)?;
    link_to(weights, &o.out.join("model.gguf")).map_err(io)?;
    let target = std::fs::canonicalize(weights).map_err(io)?;
    let n = file.adapters.len();
    write_json(&o.out, ADAPTERS_FILE, &file)?;
    write_json(&o.out, "decision_config.json", config)?;
    write_json(
        &o.out,
        "card.json",
        &json!({
            "description": format!("{base} with {n} decision adapters trained by vllm-srun adapt"),
            "revision": format!("{base}+adapters"),
            "base": base,
            "base_sha256": base_sha256,
            "weights": target.display().to_string(),
            "decision_adapter_default": o.default_on,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At each threshold, the shares of "yes" cases caught and of the others flagged.
    #[test]
    fn operating_points_count_caught_and_flagged_at_each_threshold() {
        let classes = vec!["no".to_string(), "yes".to_string()];
        let p = |yes: f64| vec![1.0 - yes, yes];
        let probs = [p(0.95), p(0.55), p(0.05), p(0.35), p(0.65), p(0.15)];
        let truth = [1, 1, 1, 0, 0, 0];
        let points = operating_points(&classes, &probs, &truth).unwrap_or_default();
        let at = |t: usize| &points[t - 1];
        assert_eq!(at(1)["caught"], json!(2.0 / 3.0));
        assert_eq!(at(1)["flagged"], json!(1.0));
        assert_eq!(at(5)["caught"], json!(2.0 / 3.0));
        assert_eq!(at(5)["flagged"], json!(1.0 / 3.0));
        assert_eq!(at(9)["caught"], json!(1.0 / 3.0));
        assert_eq!(at(9)["flagged"], json!(0.0));
        assert_eq!(at(9)["threshold"], json!(0.9));
        // Only a yes/no head has operating points.
        let three = vec!["a".to_string(), "b".to_string(), "yes".to_string()];
        assert!(operating_points(&three, &[], &[]).is_none());
    }

    /// Answers right 60% of the time at 0.99 read too sure: the temperature chosen for them
    /// flattens them (lower NLL and ECE, the same top answers); answers that are always right
    /// are neither flattened nor made surer.
    #[test]
    fn the_temperature_flattens_answers_surer_than_they_are_right() {
        let p: Vec<Vec<f64>> = (0..50).map(|_| vec![0.99, 0.01]).collect();
        let y: Vec<usize> = (0..50).map(|i| usize::from(i % 5 >= 3)).collect();
        let t = best_temperature(&p, &y);
        assert!(t > 2.0, "temperature {t}");
        let (acc0, nll0, ece0) = scores(&p, &y);
        let (acc1, nll1, ece1) = scores(&temper(&p, t), &y);
        assert_eq!(acc0, acc1);
        assert!(
            nll1 < nll0 && ece1 < ece0 / 4.0,
            "{nll0} {nll1} {ece0} {ece1}"
        );
        let right: Vec<usize> = vec![0; 50];
        assert_eq!(best_temperature(&p, &right), 1.0);
        // Tempering is a softmax of scaled logits: 1 leaves answers as they are.
        let q = temper(&[vec![0.7, 0.2, 0.1]], 1.0);
        assert!((q[0][0] - 0.7).abs() < 1e-12 && (q[0][2] - 0.1).abs() < 1e-12);
    }
}
