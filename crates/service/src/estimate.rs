//! The conservative input-token estimate the limits count (System Duo, Limits): per
//! question, the NFC UTF-8 bytes of its state plus the bytes of the question's JSON, plus
//! 1,650 per image, 3,200 per video and 40. A state-once model counts the state once.

use protocol::member;
use serde_json::{Map, Value};
use unicode_normalization::UnicodeNormalization;

pub const PER_IMAGE: u64 = 1_650;
pub const PER_VIDEO: u64 = 3_200;
pub const PER_QUESTION: u64 = 40;

/// NFC UTF-8 bytes of a state: a string as it is, an object state as its JSON text.
fn state_bytes(state: Option<&Value>) -> u64 {
    match state {
        None | Some(Value::Null) => 0,
        Some(Value::String(s)) => s.nfc().map(char::len_utf8).sum::<usize>() as u64,
        Some(v) => {
            let text = v.to_string();
            text.nfc().map(char::len_utf8).sum::<usize>() as u64
        }
    }
}

fn count(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_array).map_or(0, |a| a.len() as u64)
}

/// The questions of one standard request, as a list or an object of ids to questions.
fn questions(e: &Map<String, Value>) -> Vec<&Value> {
    match e.get(member::QUESTIONS) {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(Value::Object(m)) => m.values().collect(),
        _ => Vec::new(),
    }
}

/// The estimate of one standard request (a state, its media and its questions).
fn entry(e: &Map<String, Value>, extra_images: u64, state_once: bool) -> u64 {
    let state = state_bytes(e.get(member::STATE));
    let media = (count(e.get(member::IMAGES)) + extra_images) * PER_IMAGE
        + count(e.get(member::VIDEOS)) * PER_VIDEO;
    let questions = questions(e);
    let own: u64 = questions
        .iter()
        .map(|q| q.to_string().len() as u64 + PER_QUESTION)
        .sum();
    if state_once {
        state + media + own
    } else {
        (state + media) * questions.len() as u64 + own
    }
}

/// The estimate of a System One request body (a standard request, a batch in `states`, or a
/// `/v1/systemone/batch` body whose `requests` are each a whole request).
/// Top-level image assets count as images of every entry.
pub fn input_tokens(body: &Map<String, Value>, state_once: bool) -> u64 {
    if let Some(requests) = body.get(member::REQUESTS).and_then(Value::as_object) {
        return requests
            .values()
            .filter_map(Value::as_object)
            .map(|r| input_tokens(r, state_once))
            .sum();
    }
    let assets = body
        .get(member::ASSETS)
        .and_then(Value::as_object)
        .map_or(0, |a| {
            a.values()
                .filter(|v| v.get(member::TYPE).and_then(Value::as_str) == Some("image"))
                .count() as u64
        });
    match body.get(member::STATES).and_then(Value::as_object) {
        Some(states) => states
            .values()
            .filter_map(Value::as_object)
            .map(|e| entry(e, assets, state_once))
            .sum(),
        None => entry(body, assets, state_once),
    }
}

/// Whether a System One body asks a box or track question (in any of its requests).
pub fn asks_boxes(body: &Map<String, Value>) -> bool {
    let asks = |e: &Map<String, Value>| {
        questions(e).iter().any(|q| {
            matches!(
                q.get(member::TYPE).and_then(Value::as_str),
                Some("box" | "track")
            )
        })
    };
    let nested = |k: &str| {
        body.get(k)
            .and_then(Value::as_object)
            .is_some_and(|m| m.values().filter_map(Value::as_object).any(asks_boxes))
    };
    asks(body) || nested("states") || nested("requests")
}

/// A System Two estimate: the bytes of the messages' JSON (tokens are never more than
/// bytes), plus `max_tokens` when asked for.
pub fn chat_tokens(body: &Map<String, Value>) -> u64 {
    let messages = body
        .get(member::MESSAGES)
        .map_or(0, |m| m.to_string().len() as u64);
    let out = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64))
        .unwrap_or(0);
    messages + out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn per_question_state_media_and_forty() {
        let q = json!({"id": "a", "type": "noul", "instructions": "Is it?"});
        let qlen = q.to_string().len() as u64;
        let body = obj(
            json!({"model": "m", "state": "héllo", "images": ["x"], "questions": [q.clone(), q.clone()]}),
        );
        // "héllo" is 6 UTF-8 bytes.
        assert_eq!(input_tokens(&body, false), 2 * (6 + 1_650 + qlen + 40));
        assert_eq!(input_tokens(&body, true), 6 + 1_650 + 2 * (qlen + 40));
        // NFC: "e" + combining acute is counted as "é" (2 bytes, not 3).
        let body = obj(json!({"state": "he\u{301}", "questions": []}));
        assert_eq!(input_tokens(&body, true), 3);
    }

    #[test]
    fn a_batch_of_requests_adds_each_request() {
        let one = json!({"state": "abcd", "questions": {"q": {"type": "noul"}}});
        let alone = input_tokens(&obj(one.clone()), true);
        let batch = obj(json!({"model": "m", "requests": {"a": one.clone(), "b": one}}));
        assert_eq!(input_tokens(&batch, true), 2 * alone);
    }

    #[test]
    fn box_questions_are_found_in_every_form() {
        let b = json!({"type": "box", "instructions": "the dog"});
        let n = json!({"type": "noul", "instructions": "?"});
        assert!(asks_boxes(&obj(json!({"questions": {"w": b}}))));
        assert!(asks_boxes(&obj(json!({"questions": [n, b]}))));
        assert!(asks_boxes(&obj(
            json!({"states": {"a": {"questions": {"w": b}}}})
        )));
        assert!(asks_boxes(&obj(
            json!({"requests": {"a": {"questions": {"w": {"type": "track"}}}}})
        )));
        assert!(!asks_boxes(&obj(json!({"questions": {"n": n}}))));
    }

    #[test]
    fn batches_add_their_entries() {
        let q = json!({"id": "a", "type": "noul", "instructions": "x"});
        let qlen = q.to_string().len() as u64;
        let body = obj(json!({"states": {
            "one": {"state": "ab", "questions": [q.clone()]},
            "two": {"state": "abcd", "videos": ["v"], "questions": [q.clone()]},
        }}));
        assert_eq!(
            input_tokens(&body, true),
            (2 + qlen + 40) + (4 + 3_200 + qlen + 40)
        );
    }
}
