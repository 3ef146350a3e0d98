//! Places several labels claim. Each label of a span question copies what it names on a branch
//! of its own, so a small model asked for a label the text lacks copies the text's most
//! salient words, and two labels may claim one place (a phone number as a phone number and as
//! a date). Each place goes to one label, as a tagger gives each word one tag.
//!
//! A place claimed by more than one label is a contest. One short second forward settles every
//! contest of a body: the model reads the part of the text the claims were copied from and is
//! asked what the place is, a choice among the claiming labels (shown in every order turn, as
//! any choice). Each claim weighs its span's probability by that choice's probability of its
//! label; the heaviest claim's label keeps the place. A body with no contest costs nothing
//! more. Places left unsettled (the check could not be asked, its deadline passed or the
//! queue was full) go to the most probable span, as do the places the check left to several
//! spans of one label.

use std::sync::Arc;

use protocol::request::{
    Asked, DecisionBody, DecisionRequest, Overflow, Question, QuestionKind, Roles,
};
use protocol::{Answer, DecisionResponse, SpanFound};
use serde_json::Value;

use crate::span::CopySteer;

/// A place two or more labels of one span question claim.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Contest {
    /// The request of the body, and the span question among the request's span questions.
    pub request: usize,
    pub question: usize,
    /// The text the check reads: the part of the question's text the claims were copied from.
    pub state: String,
    /// The place's text (its longest claim).
    pub place: String,
    /// The claiming labels with their descriptions, in the question's label order.
    pub labels: Vec<(String, Option<String>)>,
    /// The claims, as indices into the question's spans.
    pub claims: Vec<usize>,
}

/// The contests among one span question's `spans` (every label's, as read): spans that
/// overlap, directly or through others, claimed by more than one label. `text` is the text the
/// question read and `reads` where each root's bytes start in it (and, by its steer, how long
/// they are).
pub(super) fn find(
    request: usize,
    question: usize,
    spans: &[SpanFound],
    labels: &[(String, Option<String>)],
    text: &str,
    reads: &[(Arc<CopySteer>, usize)],
) -> Vec<Contest> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].start, std::cmp::Reverse(spans[i].end)));
    let mut groups: Vec<(Vec<usize>, usize)> = Vec::new();
    for i in order {
        match groups.last_mut() {
            Some((members, end)) if spans[i].start < *end => {
                members.push(i);
                *end = (*end).max(spans[i].end);
            }
            _ => groups.push((vec![i], spans[i].end)),
        }
    }
    // Code point -> byte offsets of the text.
    let bytes_at: Vec<usize> = text
        .char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(text.len()))
        .collect();
    let mut out = Vec::new();
    for (claims, _) in groups {
        let claiming: Vec<(String, Option<String>)> = labels
            .iter()
            .filter(|(l, _)| claims.iter().any(|&i| spans[i].label == *l))
            .cloned()
            .collect();
        if claiming.len() < 2 {
            continue;
        }
        let Some(&longest) = claims
            .iter()
            .max_by_key(|&&i| (spans[i].end - spans[i].start, std::cmp::Reverse(i)))
        else {
            continue;
        };
        let first = claims.iter().map(|&i| spans[i].start).min().unwrap_or(0);
        let last = claims.iter().map(|&i| spans[i].end).max().unwrap_or(0);
        let (Some(&from), Some(&to)) = (bytes_at.get(first), bytes_at.get(last)) else {
            continue;
        };
        // The first part a root read that holds the whole place; the whole text otherwise.
        let state = reads
            .iter()
            .map(|(steer, offset)| (*offset, offset + steer.text_len()))
            .find(|&(s, e)| s <= from && to <= e)
            .and_then(|(s, e)| text.get(s..e))
            .unwrap_or(text);
        out.push(Contest {
            request,
            question,
            state: state.to_string(),
            place: spans[longest].text.clone(),
            labels: claiming,
            claims,
        });
    }
    out
}

/// The id of contest `i` among its entry's questions.
fn check_id(i: usize) -> String {
    format!("c{i}")
}

/// The body that asks every contest's check: one state per (request, text read), one choice
/// question per contest on it. The entry and question each contest went to, beside it.
pub(super) fn checks(
    contests: &[Contest],
) -> Result<(DecisionBody, Vec<(usize, String)>), protocol::ProtocolError> {
    let mut entries: Vec<(usize, &str, Vec<Asked>)> = Vec::new();
    let mut asked = Vec::with_capacity(contests.len());
    for c in contests {
        let at = match entries
            .iter()
            .position(|(r, s, _)| *r == c.request && *s == c.state)
        {
            Some(at) => at,
            None => {
                entries.push((c.request, &c.state, Vec::new()));
                entries.len() - 1
            }
        };
        let questions = &mut entries[at].2;
        let id = check_id(questions.len());
        let instructions = format!("What is \"{}\" in the text?", c.place);
        let q = QuestionKind::choice(c.labels.clone())
            .map(|kind| Question::asked(kind, Some(&instructions), None, Overflow::Reject));
        questions.push((id.clone(), q));
        asked.push((at, id));
    }
    let entries = entries
        .into_iter()
        .map(|(_, state, questions)| {
            DecisionRequest::asked(Value::String(state.to_string()), Roles::Absent, questions)
        })
        .collect();
    let body = crate::recipes::batch(entries, None, None)?;
    Ok((body, asked))
}

/// The label a check's answer gives the place: the claim whose span probability times the
/// check's probability of its label is highest (the earlier claim on a tie); `None` when the
/// check has no probabilities.
pub(super) fn winner(
    c: &Contest,
    spans: &[SpanFound],
    answer: &DecisionResponse,
    id: &str,
) -> Option<String> {
    let Some(Answer::Choice(choice)) = answer.answers.get(id).map(|a| &a.answer) else {
        return None;
    };
    let mut best: Option<(f64, &str)> = None;
    for &i in &c.claims {
        let span = spans.get(i)?;
        let p = choice
            .probabilities
            .get(&span.label)
            .copied()
            .unwrap_or(0.0);
        let weight = span.probability * p;
        if best.is_none_or(|(w, _)| weight > w) {
            best = Some((weight, &span.label));
        }
    }
    best.map(|(_, l)| l.to_string())
}

/// One span question's answer from every label's spans: each settled contest keeps only its
/// winner's claims, then each place goes to one label by probability (see
/// [`crate::span::one_label_per_place`]).
pub(super) fn settle<'c>(
    spans: Vec<SpanFound>,
    contests: impl Iterator<Item = &'c (Contest, Option<String>)>,
) -> Vec<SpanFound> {
    let mut lost = vec![false; spans.len()];
    for (c, won) in contests {
        let Some(won) = won else { continue };
        for &i in &c.claims {
            if let Some(s) = spans.get(i) {
                lost[i] |= s.label != *won;
            }
        }
    }
    let kept = spans
        .into_iter()
        .zip(lost)
        .filter(|(_, l)| !l)
        .map(|(s, _)| s)
        .collect();
    crate::span::one_label_per_place(kept)
}

#[cfg(test)]
mod tests {
    use protocol::answer::{AnswerEntry, ChoiceAnswer};
    use protocol::{Ordered, Usage};

    use super::*;

    fn span(label: &str, start: usize, end: usize, text: &str, p: f64) -> SpanFound {
        SpanFound {
            label: label.into(),
            start,
            end,
            text: text.into(),
            probability: p,
        }
    }

    fn labels(names: &[&str]) -> Vec<(String, Option<String>)> {
        names
            .iter()
            .map(|n| (n.to_string(), Some(format!("a {n}"))))
            .collect()
    }

    const TEXT: &str = "Ann Lee, call 555-0134 x12 on 5 May";

    fn spans() -> Vec<SpanFound> {
        vec![
            span("PERSON", 0, 7, "Ann Lee", 0.9),
            span("DATE_TIME", 14, 22, "555-0134", 0.8),
            span("PHONE_NUMBER", 14, 26, "555-0134 x12", 0.6),
            span("DATE_TIME", 30, 35, "5 May", 0.7),
        ]
    }

    fn contests() -> Vec<Contest> {
        let names = labels(&["PERSON", "PHONE_NUMBER", "DATE_TIME"]);
        find(0, 0, &spans(), &names, TEXT, &[])
    }

    #[test]
    fn only_places_two_labels_claim_are_contests() {
        let found = contests();
        assert_eq!(found.len(), 1);
        let c = &found[0];
        // The claiming labels in the question's order, the longest claim as the place.
        let names: Vec<&str> = c.labels.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(names, ["PHONE_NUMBER", "DATE_TIME"]);
        assert_eq!(c.place, "555-0134 x12");
        assert_eq!(c.state, TEXT);
        let mut claims = c.claims.clone();
        claims.sort_unstable();
        assert_eq!(claims, [1, 2]);
    }

    fn checked(probs: &[(&str, f64)]) -> DecisionResponse {
        let choice = ChoiceAnswer {
            choice: probs[0].0.into(),
            confidence: 0.0,
            probabilities: Ordered(probs.iter().map(|(k, p)| (k.to_string(), *p)).collect()),
        };
        DecisionResponse {
            model: "m".into(),
            answers: Ordered(vec![(
                "c0".into(),
                AnswerEntry {
                    answer: Answer::Choice(choice),
                    input_complete: true,
                },
            )]),
            sets: Ordered::new(),
            spans: Ordered::new(),
            thresholds: Ordered::new(),
            usage: Usage::default(),
            meta: None,
        }
    }

    #[test]
    fn the_check_moves_a_place_to_a_less_probable_span() {
        let c = contests().remove(0);
        // 0.6 x 0.9 for the phone outweighs 0.8 x 0.1 for the date.
        let answer = checked(&[("PHONE_NUMBER", 0.9), ("DATE_TIME", 0.1)]);
        let won = winner(&c, &spans(), &answer, "c0");
        assert_eq!(won.as_deref(), Some("PHONE_NUMBER"));
        let kept = settle(spans(), [(c.clone(), won)].iter());
        let got: Vec<(&str, &str)> = kept
            .iter()
            .map(|s| (s.label.as_str(), s.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("PERSON", "Ann Lee"),
                ("PHONE_NUMBER", "555-0134 x12"),
                ("DATE_TIME", "5 May")
            ]
        );
        // A check that barely favours the phone leaves the place to the more probable span.
        let answer = checked(&[("PHONE_NUMBER", 0.55), ("DATE_TIME", 0.45)]);
        assert_eq!(
            winner(&c, &spans(), &answer, "c0").as_deref(),
            Some("DATE_TIME")
        );
        // A missing answer settles nothing.
        assert_eq!(winner(&c, &spans(), &answer, "c1"), None);
    }

    #[test]
    fn an_unsettled_contest_goes_to_the_more_probable_span() {
        let c = contests().remove(0);
        let kept = settle(spans(), [(c, None)].iter());
        let labels: Vec<&str> = kept.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["PERSON", "DATE_TIME", "DATE_TIME"]);
    }

    #[test]
    fn checks_share_a_state_per_request_and_text() {
        let mut found = contests();
        let mut other = found[0].clone();
        other.place = "5 May".into();
        found.push(other.clone());
        other.request = 1;
        found.push(other);
        let (body, asked) = checks(&found).expect("the checks parse");
        assert_eq!(
            asked,
            [(0, "c0".into()), (0, "c1".into()), (1, "c0".into())]
        );
        let DecisionBody::Batch { entries, .. } = body else {
            panic!("the checks are a batch");
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].1.questions.len(), 2);
    }
}
