//! Corrections of label bias, from `decision_config.json`:
//!
//! - **content-free calibration** (`content_free`): a choice, score or noul answer is divided
//!   by the same question's answer about an empty state, so a label the model favours whatever the
//!   state says loses that favour. The empty-state answer depends on the question alone, so
//!   it is evaluated once per distinct question (in the forward of the first request that
//!   asks it) and remembered;
//! - **noul bias** (`noul_bias`): a noul's yes-against-no log-odds are lowered by a constant
//!   fitted on labelled development data.
//!
//! Both act on probabilities the readout has read at the question's temperature, and give
//! what reading the corrected logits at that temperature would: answers stay independent of
//! ids, question order and sibling questions.

use std::collections::HashMap;

use protocol::request::{DecisionRequest, Options, Question, QuestionKind, QuestionSlot, Roles};

use super::adapter::question_key;
use super::model::{DecisionModel, Plan, Reading, Readout, Remembered};

/// The empty-state answers one body uses: those remembered when it was planned, and the
/// request that asks the rest (by key, in order).
pub(super) struct ContentFree {
    pub known: HashMap<String, Vec<f64>>,
    pub request: Option<(DecisionRequest, Vec<String>)>,
}

/// `p_i ∝ p_i / q_i^(a/T)`: for a one-step label read at temperature `T` this is the softmax
/// of `(logit_i − a · empty-state logit_i) / T`, with `a` the type's `content_free_weight`
/// (1: the empty state divided out whole). A label the empty state gives no mass keeps its
/// share unchanged rather than divide by zero.
pub(crate) fn divide(p: &mut [f64], q: &[f64], weight: f64, temperature: f64) {
    if p.len() != q.len() {
        return;
    }
    for (x, &c) in p.iter_mut().zip(q) {
        if c > 0.0 {
            *x /= c.powf(weight / temperature);
        }
    }
    // Summed smallest first, so the total (and so each share) does not depend on the order
    // a request lists the labels in.
    let mut terms = p.to_vec();
    terms.sort_by(f64::total_cmp);
    let z: f64 = terms.iter().sum();
    if z > 0.0 && z.is_finite() {
        p.iter_mut().for_each(|x| *x /= z);
    }
}

/// `p_i ∝ p_i^(1/T)`: a distribution read at temperature 1, at temperature `T` over its
/// outcomes (a noul's yes and no, whatever spellings each sums; a choice's options or a
/// score's levels, whatever steps each label's path takes). An outcome with no mass keeps none.
pub(crate) fn temper(p: &mut [f64], temperature: f64) {
    if temperature == 1.0 || !p.iter().any(|x| *x > 0.0) {
        return;
    }
    let logs: Vec<f64> = p
        .iter()
        .map(|&x| {
            if x > 0.0 {
                x.ln() / temperature
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // Summed smallest first, so the total does not depend on the order labels are listed in.
    let mut terms: Vec<f64> = logs.iter().map(|l| (l - top).exp()).collect();
    terms.sort_by(f64::total_cmp);
    let z: f64 = terms.iter().sum();
    for (x, l) in p.iter_mut().zip(&logs) {
        *x = (l - top).exp() / z;
    }
}

/// A yes/no pair read at temperature `T` with its log-odds lowered by `bias / T`: what the
/// logits lowered by `bias` give at `T`.
pub(crate) fn lower_yes(p: &mut [f64], bias: f64, temperature: f64) {
    if bias == 0.0 || p.len() != 2 || p[0] <= 0.0 || p[1] <= 0.0 {
        return;
    }
    let z = (p[0] / p[1]).ln() - bias / temperature;
    p[0] = 1.0 / (1.0 + (-z).exp());
    p[1] = 1.0 - p[0];
}

impl DecisionModel {
    /// The key of a question whose answer content-free calibration corrects (see
    /// [`question_key`]): none for a type the package does not correct, a question about
    /// images, or one its decision adapter answers.
    fn content_free_key(&self, q: &Question, images: usize) -> Option<String> {
        let type_name = q.kind.type_name();
        if images > 0 || !self.config.content_free.iter().any(|t| t == type_name) {
            return None;
        }
        if matches!(self.readout_for(q), Ok(Readout::Adapter(_))) {
            return None;
        }
        question_key(q)
    }

    /// Each request's questions' keys (`None` where no correction applies), and the
    /// empty-state answers they need: remembered ones, and a request about an empty state
    /// asking the distinct questions not yet remembered.
    pub(super) fn content_free(
        &self,
        requests: &[(&str, &DecisionRequest)],
        remembered: &Remembered,
    ) -> (Vec<Vec<Option<String>>>, ContentFree) {
        let mut keys = Vec::with_capacity(requests.len());
        let mut known = HashMap::new();
        let mut asked: Vec<String> = Vec::new();
        let mut slots: Vec<QuestionSlot> = Vec::new();
        for (_, r) in requests {
            let mine: Vec<Option<String>> = r
                .questions
                .iter()
                .map(|s| {
                    let q = s.question.as_ref().ok()?;
                    let key = self.content_free_key(q, s.images.len())?;
                    if known.contains_key(&key) || asked.contains(&key) {
                        return Some(key);
                    }
                    if let Some(p) = remembered.get(&key) {
                        known.insert(key.clone(), p);
                    } else {
                        // Asked with a choice's options in key order, so that the answer
                        // remembered is in that order whatever order a request lists them in.
                        let mut kind = q.kind.clone();
                        if let QuestionKind::Choice { options } = &mut kind {
                            options.sort();
                        }
                        slots.push(QuestionSlot {
                            id: format!("q{}", slots.len()),
                            type_word: s.type_word.clone(),
                            images: Vec::new(),
                            videos: 0,
                            question: Ok(Question {
                                kind,
                                over: None,
                                preset: None,
                                ..q.clone()
                            }),
                        });
                        asked.push(key.clone());
                    }
                    Some(key)
                })
                .collect();
            keys.push(mine);
        }
        let request = (!slots.is_empty()).then(|| {
            let r = DecisionRequest {
                model: None,
                state: serde_json::Value::String(String::new()),
                roles: Roles::Absent,
                questions: slots,
                options: Options::default(),
                images: Vec::new(),
                videos: Vec::new(),
            };
            (r, asked)
        });
        (keys, ContentFree { known, request })
    }

    /// Keep the empty-state answers read for `keys` (those that were answered), for this
    /// body and in `remembered`.
    pub(super) fn remember(
        &self,
        remembered: &Remembered,
        known: &mut HashMap<String, Vec<f64>>,
        keys: Vec<String>,
        r: &Reading<'_>,
    ) {
        for (key, (_, groups)) in keys.into_iter().zip(&r.groups) {
            if let Some(p) = groups.as_ref().and_then(|g| g.first()) {
                remembered.insert(key.clone(), p.clone());
                known.insert(key, p.clone());
            }
        }
    }

    /// Divide each corrected question's answer by its empty-state answer.
    pub(super) fn correct(
        &self,
        known: &HashMap<String, Vec<f64>>,
        keys: &[Option<String>],
        r: &mut Reading<'_>,
    ) {
        let weight = &self.config.content_free_weight;
        for (key, (plan, groups)) in keys.iter().zip(r.groups.iter_mut()) {
            let (Some(key), Some(p)) = (key, groups.as_mut().and_then(|g| g.first_mut())) else {
                continue;
            };
            let Some(q) = known.get(key) else { continue };
            match plan {
                Plan::Choice {
                    keys, temperature, ..
                } => {
                    // The empty-state answer is in key order; this request's in its own.
                    let mut sorted: Vec<&String> = keys.iter().collect();
                    sorted.sort();
                    let mine: Option<Vec<f64>> = keys
                        .iter()
                        .map(|k| sorted.iter().position(|s| *s == k).and_then(|i| q.get(i)))
                        .map(|x| x.copied())
                        .collect();
                    if let Some(mine) = mine {
                        divide(p, &mine, weight.choice, *temperature);
                    }
                }
                Plan::Score { temperature, .. } => divide(p, q, weight.score, *temperature),
                // The empty-state yes/no was read with the noul bias too, which the division
                // cancels in the share it divides by: lowered by that share again, the bias
                // acts once.
                Plan::Noul { temperature, .. } => {
                    divide(p, q, weight.noul, *temperature);
                    lower_yes(p, weight.noul * self.config.noul_bias, *temperature);
                }
                _ => {}
            }
        }
    }
}

impl Plan {
    /// Read the plan at temperature 1 (an empty-state answer is remembered raw; the question
    /// it corrects applies its own temperature).
    pub(super) fn at_unit_temperature(&mut self) {
        match self {
            Plan::Choice { temperature, .. }
            | Plan::Noul { temperature, .. }
            | Plan::Score { temperature, .. }
            | Plan::Set { temperature, .. } => *temperature = 1.0,
            Plan::Failed { .. } | Plan::Span { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dividing_out_the_empty_state_is_subtracting_its_logits() {
        // Logits l and empty-state logits c, both read at T = 2.
        let (l, c, t) = ([2.0f64, 0.5, -1.0], [1.5f64, 0.0, 0.2], 2.0);
        let soft = |x: &[f64], t: f64| {
            let z: f64 = x.iter().map(|v| (v / t).exp()).sum();
            x.iter().map(|v| (v / t).exp() / z).collect::<Vec<_>>()
        };
        for weight in [1.0, 0.75, 0.0] {
            let mut p = soft(&l, t);
            divide(&mut p, &soft(&c, 1.0), weight, t);
            let diff: Vec<f64> = l.iter().zip(&c).map(|(a, b)| a - weight * b).collect();
            for (a, b) in p.iter().zip(soft(&diff, t)) {
                assert!((a - b).abs() < 1e-12, "weight {weight}: {p:?}");
            }
        }
    }

    #[test]
    fn a_noul_bias_lowers_yes_as_lowered_logits_would() {
        let (yes, no, bias, t) = (1.2f64, 0.3f64, 0.7, 0.5);
        let z = ((yes - no) / t).exp();
        let mut p = [z / (1.0 + z), 1.0 / (1.0 + z)];
        lower_yes(&mut p, bias, t);
        let want = 1.0 / (1.0 + (-((yes - bias - no) / t)).exp());
        assert!((p[0] - want).abs() < 1e-12 && (p[0] + p[1] - 1.0).abs() < 1e-12);
        let mut same = [0.3, 0.7];
        lower_yes(&mut same, 0.0, 1.0);
        assert_eq!(same, [0.3, 0.7]);
    }
}
