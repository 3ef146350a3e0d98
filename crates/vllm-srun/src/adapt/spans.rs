//! Span heads on an encoder backbone. Each word of a case's text (as
//! `Backbone::word_rows` reads it) is tagged `O`, `B-LABEL` or `I-LABEL` from the case's
//! truths; a softmax layer over the word rows is fitted with its L2 weight and temperature
//! chosen by k-fold cross-validation over cases (never splitting a text), and the out-of-fold
//! spans, merged from the tags as the served head merges them, are scored against the truths.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use engine::adapter::{span_labels, Head, Layer};
use engine::encode::backbone::Backbone;
use engine::encode::tagger::{merge, Word};
use protocol::request::parse_question;
use protocol::Schema;
use serde_json::{json, Value};

use super::fit::{best_temperature, progress, scores, shuffled, standardiser, temper};

/// Hidden units of a span head.
const UNITS: usize = 256;
/// Words one optimiser step reads.
const BATCH: usize = 1024;
/// Passes over the words of the cases a head is fitted on.
const EPOCHS: usize = 8;
/// Weight decay of the optimiser.
const DECAY: f64 = 1e-4;
/// Every how-many-th case is held out to choose the temperature and measure the head.
const HOLD_OUT: usize = 5;

/// One labelled span question of a case.
#[derive(Clone)]
pub(super) struct SpanCase {
    at: String,
    text: String,
    /// The question as a 5.0 request asks it (without its truths).
    question: Value,
    /// Each truth: its label and code-point range.
    truths: Vec<(String, usize, usize)>,
}

/// What cross-validation measured of a span head, by label: precision, recall and F1 of
/// exact spans (label, start and end all right).
pub struct SpanFitted {
    pub cases: usize,
    pub words: usize,
    pub temperature: f64,
    pub labels: BTreeMap<String, (f64, f64, f64)>,
}

/// A span question of a manifest with its truths: `ground_truth` a list of `{label, start,
/// end}` (code points of the state, a text), each label one the question asks.
pub(super) fn read_span(
    at: &str,
    qid: &str,
    q: &Value,
    state: &Value,
) -> anyhow::Result<Option<SpanCase>> {
    let mut question = q.clone();
    let Some(truth) = question
        .as_object_mut()
        .and_then(|o| o.remove("ground_truth"))
    else {
        return Ok(None);
    };
    let parsed = parse_question(&question, Schema::V5)
        .map_err(|f| anyhow::anyhow!("{at}: question {qid:?}: {}", f.message))?;
    let protocol::QuestionKind::Span { labels, .. } = &parsed.kind else {
        return Ok(None);
    };
    let labels = span_labels(labels, parsed.preset.as_deref())
        .map_err(|f| anyhow::anyhow!("{at}: question {qid:?}: {}", f.message))?;
    let Some(text) = state.as_str() else {
        return Err(anyhow::anyhow!(
            "{at}: question {qid:?}: a span case's state is a text"
        ));
    };
    let chars = text.chars().count();
    let bad = |why: String| Err(anyhow::anyhow!("{at}: question {qid:?}: {why}"));
    let Some(list) = truth.as_array() else {
        return bad("ground_truth is a list of {label, start, end}".into());
    };
    let mut truths = Vec::with_capacity(list.len());
    for t in list {
        let label = t.get("label").and_then(Value::as_str).unwrap_or_default();
        let start = t.get("start").and_then(Value::as_u64).map(|v| v as usize);
        let end = t.get("end").and_then(Value::as_u64).map(|v| v as usize);
        let (Some(start), Some(end)) = (start, end) else {
            return bad(format!("the span {t} has no start and end"));
        };
        if !labels.iter().any(|(k, _)| k == label) {
            return bad(format!(
                "the span {t} has a label the question does not ask"
            ));
        }
        if start >= end || end > chars {
            return bad(format!(
                "the span {t} is not within the state's {chars} characters"
            ));
        }
        truths.push((label.to_string(), start, end));
    }
    Ok(Some(SpanCase {
        at: at.to_string(),
        text: text.to_string(),
        question,
        truths,
    }))
}

/// The tags of a question's labels: `O`, then `B-` and `I-` of each label in its order.
fn tags_of(question: &Value) -> anyhow::Result<Vec<String>> {
    let q = parse_question(question, Schema::V5).map_err(|f| anyhow::anyhow!(f.message))?;
    let protocol::QuestionKind::Span { labels, .. } = &q.kind else {
        return Err(anyhow::anyhow!("a span head answers a span question"));
    };
    let labels =
        span_labels(labels, q.preset.as_deref()).map_err(|f| anyhow::anyhow!(f.message))?;
    let mut tags = vec!["O".to_string()];
    for (k, _) in labels {
        tags.push(format!("B-{k}"));
        tags.push(format!("I-{k}"));
    }
    Ok(tags)
}

/// Each word's tag: the label of a truth it overlaps, `B` on the truth's first word.
fn tag_words(
    ranges: &[(usize, usize)],
    truths: &[(String, usize, usize)],
    tags: &[String],
) -> Vec<usize> {
    let mut seen = vec![false; truths.len()];
    ranges
        .iter()
        .map(|&(ws, we)| {
            let Some(t) = truths.iter().position(|(_, s, e)| ws < *e && we > *s) else {
                return 0;
            };
            let prefix = if seen[t] { "I" } else { "B" };
            seen[t] = true;
            let want = format!("{prefix}-{}", truths[t].0);
            tags.iter().position(|g| *g == want).unwrap_or(0)
        })
        .collect()
}

/// One case's words as read: their ranges and rows.
struct Read {
    ranges: Vec<(usize, usize)>,
    rows: Vec<Vec<f32>>,
}

/// Train the span head of the cases' span question (one question for every case); `None`
/// when there are no span cases.
pub(super) fn train_spans(
    backbone: &Backbone,
    cases: &[SpanCase],
) -> anyhow::Result<Option<(Head, SpanFitted)>> {
    let Some(first) = cases.first() else {
        return Ok(None);
    };
    if let Some(other) = cases.iter().find(|c| c.question != first.question) {
        return Err(anyhow::anyhow!(
            "{}: a package has one span head; this span question differs from {}'s",
            other.at,
            first.at
        ));
    }
    let tags = tags_of(&first.question)?;
    let budget = 8 * engine::DirectBackend::info(backbone).trained_context;
    let started = std::time::Instant::now();
    let bar = progress(cases.len());
    let mut reads = Vec::with_capacity(cases.len());
    for c in cases {
        let w = backbone
            .word_rows(&c.text, budget)
            .map_err(|e| anyhow::anyhow!("{}: {e}", c.at))?;
        reads.push(Read {
            ranges: w.ranges,
            rows: w.rows,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    eprintln!(
        "read {} span cases in {:.1} s",
        cases.len(),
        started.elapsed().as_secs_f64()
    );
    let y: Vec<Vec<usize>> = cases
        .iter()
        .zip(&reads)
        .map(|(c, r)| tag_words(&r.ranges, &c.truths, &tags))
        .collect();
    let k = tags.len();
    let started = std::time::Instant::now();
    // Fitted on four cases in five, the fifth answered: the temperature is chosen on those
    // answers, and they are what the report measures. Then fitted again on every case.
    let held = |i: &usize| i.is_multiple_of(HOLD_OUT);
    let rows_of = |keep: &dyn Fn(&usize) -> bool| {
        let (mut x, mut t) = (Vec::new(), Vec::new());
        for i in (0..cases.len()).filter(|i| keep(i)) {
            x.extend(reads[i].rows.iter().map(Vec::as_slice));
            t.extend(y[i].iter().copied());
        }
        (x, t)
    };
    let (x, t) = rows_of(&|i| !held(i));
    let head = fit_mlp(&x, &t, k)?;
    let out: Vec<Vec<Vec<f64>>> = (0..cases.len())
        .map(|i| match held(&i) {
            true => reads[i]
                .rows
                .iter()
                .map(|r| head.probabilities(r).unwrap_or_default())
                .collect(),
            false => Vec::new(),
        })
        .collect();
    let flat: Vec<Vec<f64>> = out.iter().flatten().cloned().collect();
    let truth: Vec<usize> = (0..cases.len())
        .filter(held)
        .flat_map(|i| y[i].iter().copied())
        .collect();
    let temperature = best_temperature(&flat, &truth);
    let (accuracy, nll, _) = scores(&temper(&flat, temperature), &truth);
    let held_cases: Vec<usize> = (0..cases.len()).filter(held).collect();
    let labels = span_scores(cases, &reads, &out, &held_cases, &tags, temperature);
    let (x, t) = rows_of(&|_| true);
    let words = x.len();
    let mut head = fit_mlp(&x, &t, k)?;
    let scale = (1.0 / temperature) as f32;
    for row in &mut head.weights {
        row.iter_mut().for_each(|w| *w *= scale);
    }
    head.bias.iter_mut().for_each(|b| *b *= scale);
    head.question = first.question.clone();
    head.classes = tags;
    let by_label: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(l, (p, r, f1))| (l.clone(), json!({"precision": p, "recall": r, "f1": f1})))
        .collect();
    head.fit = json!({"cases": cases.len(), "words": words, "units": UNITS, "epochs": EPOCHS,
        "decay": DECAY, "temperature": temperature,
        "held_out": {"cases": held_cases.len(), "tag_accuracy": accuracy, "tag_nll": nll,
                     "spans": by_label}});
    eprintln!(
        "fitted the span head in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(Some((
        head,
        SpanFitted {
            cases: cases.len(),
            words,
            temperature,
            labels,
        },
    )))
}

/// Precision, recall and F1 by label of the spans merged from the tag rows of the cases
/// `held` (`out`, by case).
fn span_scores(
    cases: &[SpanCase],
    reads: &[Read],
    out: &[Vec<Vec<f64>>],
    held: &[usize],
    tags: &[String],
    temperature: f64,
) -> BTreeMap<String, (f64, f64, f64)> {
    // label -> (found right, found, truths)
    let mut counts: BTreeMap<String, (f64, f64, f64)> = BTreeMap::new();
    for &i in held {
        let (c, r, rows) = (&cases[i], &reads[i], &out[i]);
        let words: Vec<Word> = r
            .ranges
            .iter()
            .zip(temper(rows, temperature))
            .map(|(&(start, end), p)| Word {
                start,
                end,
                probs: p.into_iter().map(|v| v as f32).collect(),
            })
            .collect();
        let found = merge(tags, &words, &c.text);
        for s in &found {
            let e = counts.entry(s.label.clone()).or_default();
            e.1 += 1.0;
            if c.truths
                .iter()
                .any(|(l, a, b)| *l == s.label && *a == s.start && *b == s.end)
            {
                e.0 += 1.0;
            }
        }
        for (l, ..) in &c.truths {
            counts.entry(l.clone()).or_default().2 += 1.0;
        }
    }
    counts
        .into_iter()
        .map(|(l, (right, found, truths))| {
            let p = right / found.max(1.0);
            let r = right / truths.max(1.0);
            let f1 = if p + r > 0.0 {
                2.0 * p * r / (p + r)
            } else {
                0.0
            };
            (l, (p, r, f1))
        })
        .collect()
}

/// A head of one hidden layer of ReLU units fitted on word rows `x` against tags `y`:
/// standardised features, cross-entropy, AdamW over shuffled batches of words.
fn fit_mlp(x: &[&[f32]], y: &[usize], k: usize) -> candle_core::Result<Head> {
    let (mean, scale) = standardiser(x);
    let (n, d) = (x.len(), mean.len());
    let dev = Device::Cpu;
    let order = shuffled(n);
    let flat: Vec<f32> = order
        .iter()
        .flat_map(|&i| {
            x[i].iter()
                .zip(mean.iter().zip(&scale))
                .map(|(v, (m, s))| (v - m) / s)
        })
        .collect();
    let xs = Tensor::from_vec(flat, (n, d), &dev)?;
    let ts = Tensor::from_vec(
        order
            .iter()
            .flat_map(|&i| (0..k).map(move |c| f32::from(u8::from(c == y[i]))))
            .collect::<Vec<_>>(),
        (n, k),
        &dev,
    )?;
    let w1 = Var::from_tensor(&glorot(d, UNITS, 1, &dev)?)?;
    let b1 = Var::zeros(UNITS, DType::F32, &dev)?;
    let w2 = Var::from_tensor(&glorot(UNITS, k, 2, &dev)?)?;
    let b2 = Var::zeros(k, DType::F32, &dev)?;
    let mut opt = AdamW::new(
        vec![w1.clone(), b1.clone(), w2.clone(), b2.clone()],
        ParamsAdamW {
            lr: 2e-3,
            weight_decay: DECAY,
            ..Default::default()
        },
    )?;
    let batch = n.min(BATCH);
    let steps = (EPOCHS * n).div_ceil(batch.max(1));
    for step in 0..steps {
        let start = ((step * batch) % n).min(n - batch);
        let (xb, tb) = (xs.narrow(0, start, batch)?, ts.narrow(0, start, batch)?);
        let h = xb
            .matmul(w1.as_tensor())?
            .broadcast_add(b1.as_tensor())?
            .relu()?;
        let logits = h.matmul(w2.as_tensor())?.broadcast_add(b2.as_tensor())?;
        let logp = candle_nn::ops::log_softmax(&logits, 1)?;
        let loss = ((tb * logp)?.sum_all()? * (-1.0 / batch as f64))?;
        opt.backward_step(&loss)?;
    }
    Ok(Head {
        question: Value::Null,
        classes: Vec::new(),
        mean,
        scale,
        weights: w2.as_tensor().t()?.to_vec2::<f32>()?,
        bias: b2.as_tensor().to_vec1::<f32>()?,
        hidden: Some(Layer {
            weights: w1.as_tensor().t()?.to_vec2::<f32>()?,
            bias: b1.as_tensor().to_vec1::<f32>()?,
        }),
        lexical: None,
        fit: Value::Null,
    })
}

/// A `rows × cols` matrix drawn uniformly within Glorot's bound, from a fixed seed.
fn glorot(rows: usize, cols: usize, seed: u64, dev: &Device) -> candle_core::Result<Tensor> {
    let bound = (6.0 / (rows + cols) as f64).sqrt();
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let values: Vec<f32> = (0..rows * cols)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let u = (state >> 11) as f64 / (1u64 << 53) as f64;
            ((2.0 * u - 1.0) * bound) as f32
        })
        .collect();
    Tensor::from_vec(values, (rows, cols), dev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truths_first_word_begins_it_and_the_rest_are_inside() {
        let tags: Vec<String> = [
            "O",
            "B-PERSON",
            "I-PERSON",
            "B-PHONE_NUMBER",
            "I-PHONE_NUMBER",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // "Ann Lee: +1 415" — words Ann, Lee, :, +, 1, 415
        let ranges = [(0, 3), (4, 7), (7, 8), (9, 10), (10, 11), (12, 15)];
        let truths = vec![
            ("PERSON".to_string(), 0, 7),
            ("PHONE_NUMBER".to_string(), 9, 15),
        ];
        assert_eq!(tag_words(&ranges, &truths, &tags), vec![1, 2, 0, 3, 4, 4]);
    }

    /// A span truth is checked against its question and state, and an error names the case.
    #[test]
    fn a_span_truth_outside_its_state_or_question_is_refused() {
        let q = |truth: Value| json!({"type": "span", "preset": "pii", "ground_truth": truth});
        let state = json!("Call Zoë on +1 415 555 0199.");
        let ok = q(json!([{"label": "PHONE_NUMBER", "start": 12, "end": 27}]));
        let case = read_span("a.jsonl:3", "pii", &ok, &state).unwrap().unwrap();
        assert_eq!(case.truths, vec![("PHONE_NUMBER".to_string(), 12, 27)]);
        assert!(case.question.get("ground_truth").is_none());
        for bad in [
            q(json!([{"label": "PHONE_NUMBER", "start": 12, "end": 99}])),
            q(json!([{"label": "PRODUCT", "start": 0, "end": 4}])),
            q(json!([{"label": "PERSON", "start": 5}])),
            q(json!({"label": "PERSON"})),
        ] {
            let e = read_span("a.jsonl:3", "pii", &bad, &state)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with("a.jsonl:3: question \"pii\""), "{e}");
        }
        let e = read_span("a.jsonl:4", "pii", &ok, &json!({"text": "x"})).err();
        assert!(e.is_some_and(|e| e.to_string().contains("a text")));
        // Without truths it is not a labelled case.
        let none = json!({"type": "span", "preset": "pii"});
        assert!(read_span("a.jsonl:5", "pii", &none, &state)
            .unwrap()
            .is_none());
    }
}
