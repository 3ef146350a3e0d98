//! Reading answers: probability groups from each root's logits, windows combined, spans
//! replayed from growth steps, and the response assembled.

use std::sync::Arc;

use protocol::answer::{
    AnswerEntry, ChoiceAnswer, DecisionResponse, NoulAnswer, ScoreAnswer, SetResult, SpanFound,
};
use protocol::confidence::{argmax, choice_confidence, expected_level, score_confidence};
use protocol::error::{reason, QuestionErrorKind, QuestionFailure};
use protocol::{Answer, Ordered, Usage};

use super::model::{DecisionModel, Plan, Prepared, Reading, Readout, Tree};
use crate::backend::RootLogits;
use crate::labels::Trie;
use crate::span::CopySteer;

impl DecisionModel {
    /// Read one plan's probability groups from one root's logits: one distribution for a
    /// choice, noul or score question, one yes/no pair per label of a set.
    pub(super) fn read_groups<'a>(
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
                // Each turn read at temperature 1 and tempered as a whole (as a score is):
                // an answer corrected by its empty-state answer is then exactly what the
                // corrected labels give, however many steps a label's path takes.
                Some(vec![read_views(
                    trie,
                    reads,
                    keys.len(),
                    shown,
                    *temperature,
                )?])
            }
            (Plan::Noul { temperature, .. }, _) => {
                // Read at temperature 1, lowered by the bias, then tempered as a pair: the
                // temperature acts on yes against no, whatever spellings each sums (as
                // tools/lodo.py fits it), so a content-free division cancels exactly.
                let mut p = t.yes_no.probabilities(reads, 2, 1.0)?;
                super::calibrate::lower_yes(&mut p, self.config.noul_bias, 1.0);
                super::calibrate::temper(&mut p, *temperature);
                Some(vec![p])
            }
            (
                Plan::Score {
                    legend,
                    shown,
                    temperature,
                    ..
                },
                Some(trie),
            ) => {
                // Each view read at temperature 1 and tempered over the levels, so that
                // content-free division cancels exactly even where a level's name takes
                // several steps; the views mapped back to the levels and combined.
                Some(vec![read_views(
                    trie,
                    reads,
                    legend.len(),
                    shown,
                    *temperature,
                )?])
            }
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

    /// Read one request's answers from its roots' logits: each question's probability groups
    /// and each span question's spans, every label's (overlapping places not yet settled).
    pub(super) fn read<'p>(
        &self,
        t: &Tree,
        p: &'p Prepared,
        logits: Vec<Option<&RootLogits>>,
    ) -> Reading<'p> {
        let mut per_root: Vec<std::slice::Iter<'_, Vec<f32>>> = logits
            .into_iter()
            .map(|l| l.map(|l| l.iter()).unwrap_or_default())
            .collect();
        let mut groups = Vec::with_capacity(p.plans.len());
        let mut features = Vec::with_capacity(p.plans.len());
        let mut usage = p.usage;
        for (roots, plan, trie) in &p.plans {
            if matches!(plan, Plan::Span { .. }) {
                groups.push((plan, None));
                features.push(None);
                continue;
            }
            // Every root (window) the question read, then the windows combined.
            let mut per_window = Vec::with_capacity(roots.len());
            let mut kept = None;
            let readout = plan.readout();
            let d = t.features.len();
            for (w, &at) in roots.iter().enumerate() {
                let mut none = [].iter();
                let reads = per_root.get_mut(at).unwrap_or(&mut none);
                // The adapter features ride after the first read's label logits.
                let mine = match readout {
                    Some(r) if r.reads_features() && d > 0 => reads
                        .clone()
                        .next()
                        .and_then(|e| e.get(e.len().checked_sub(d)?..))
                        .map(<[f32]>::to_vec),
                    _ => None,
                };
                let mut read = self.read_groups(t, plan, trie.as_ref(), reads);
                if let Some(Readout::Adapter(head)) = readout {
                    read = mine
                        .as_deref()
                        .and_then(|h| head.answer(h, &plan.classes()))
                        .map(|p| vec![p]);
                }
                if w == 0 {
                    kept = mine;
                }
                per_window.push(read);
            }
            features.push(kept);
            let read: Option<Vec<Vec<f64>>> = per_window
                .into_iter()
                .collect::<Option<Vec<_>>>()
                .and_then(|w| combine_windows(plan, w));
            groups.push((plan, read));
        }
        // A root's growth steps follow all its fixed reads, branch by branch in the order the
        // span questions were placed.
        let mut spans = Vec::new();
        for (roots, plan, _) in &p.plans {
            if let Plan::Span {
                labels,
                text,
                reads,
                asked,
                ..
            } = plan
            {
                spans.push(read_spans(
                    roots,
                    labels,
                    text,
                    reads,
                    asked,
                    &mut per_root,
                    &mut usage,
                ));
            }
        }
        Reading {
            groups,
            features,
            spans,
            usage,
        }
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
                        Some(probs) => choice_answer(&probs, keys),
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
                        Some(probs) => score_answer(&probs, legend),
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

/// Read one span question's spans from the growth steps of its branches (one per label `asked`
/// on each root it read), adding the tokens the growth fed back to `usage`; `None` when the
/// steps do not fit. Every label's spans, in label order, less those without their preset
/// label's form (`span::may_hold`): places several labels claim are settled after (see
/// `contest`).
pub(super) fn read_spans(
    roots: &[usize],
    labels: &[(String, Option<String>)],
    text: &str,
    reads: &[(Arc<CopySteer>, usize)],
    asked: &[Vec<bool>],
    per_root: &mut [std::slice::Iter<'_, Vec<f32>>],
    usage: &mut Usage,
) -> Option<Vec<SpanFound>> {
    let mut per_label: Vec<Vec<(usize, usize, Vec<crate::span::Copied>)>> =
        vec![Vec::new(); labels.len()];
    for ((&at, (steer, offset)), mine) in roots.iter().zip(reads).zip(asked) {
        let steps = per_root.get_mut(at)?;
        for (found, _) in per_label.iter_mut().zip(mine).filter(|(_, &a)| a) {
            let (copies, picked) = crate::span::replay(steer, steps)?;
            // Every picked token but the last was fed back and read.
            usage.input_tokens += picked.saturating_sub(1) as u64;
            found.push((*offset, steer.text_len(), copies));
        }
    }
    Some(
        labels
            .iter()
            .zip(per_label)
            .flat_map(|((label, description), found)| {
                // A place without the form every part of a preset label has is not one.
                crate::span::locate(label, text, &found)
                    .into_iter()
                    .filter(|s| {
                        crate::span::may_hold(label, description.as_deref(), s.text.as_bytes())
                    })
            })
            .collect(),
    )
}

/// The normalised geometric mean of distributions over the same options: a bias that
/// multiplies each place's probability cancels when every place is visited once.
pub(super) fn geometric_mean(ps: &[Vec<f64>]) -> Option<Vec<f64>> {
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

/// A question asked in several views (a choice's order turns, a score's reversed levels): each
/// view read at temperature 1 and tempered, mapped back through `shown` (the option each read
/// label stands for), and the views combined by their normalised geometric mean.
fn read_views<'a>(
    trie: &Trie,
    reads: &mut impl Iterator<Item = &'a Vec<f32>>,
    n: usize,
    shown: &[Vec<usize>],
    temperature: f64,
) -> Option<Vec<f64>> {
    let mut views = Vec::with_capacity(shown.len());
    for options in shown {
        let mut read = trie.probabilities(reads, n, 1.0)?;
        super::calibrate::temper(&mut read, temperature);
        let mut p = vec![0.0; n];
        for (label, &option) in options.iter().enumerate() {
            *p.get_mut(option)? = *read.get(label)?;
        }
        views.push(p);
    }
    geometric_mean(&views)
}

/// A choice's answer from its options' probabilities (in `keys` order).
pub(crate) fn choice_answer(probs: &[f64], keys: &[String]) -> Answer {
    Answer::Choice(ChoiceAnswer {
        choice: keys.get(argmax(probs)).cloned().unwrap_or_default(),
        confidence: choice_confidence(probs),
        probabilities: Ordered(keys.iter().cloned().zip(probs.iter().copied()).collect()),
    })
}

/// A score's answer from its levels' probabilities (in level order) and their words.
pub(crate) fn score_answer(probs: &[f64], legend: &[String]) -> Answer {
    Answer::Score(ScoreAnswer {
        score: expected_level(probs),
        confidence: score_confidence(probs),
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
    })
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
