//! Span questions on a causal LM (`qwen2.5-1.5b`, which CI fetches for them: the 0.5B model
//! answers `None` for every label, so nothing here could fail on it): the spans come back with
//! code-point offsets that hold exactly their text, never outside it; the question's noul is
//! the best span's probability; thresholds filter and come back; the `pii` preset, the label
//! list form and refusals; a place two labels claim goes to the label the model names for it;
//! a span question beside others changes none of their answers; and a preset label the
//! text has no form for is not asked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

const MODEL: &str = "qwen2.5-1.5b";

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = deciding(MODEL);
        o.classifiers = vec![vllm_srun::Classifier {
            name: "contacts".into(),
            backbone: MODEL.into(),
            labels: vec!["EMAIL_ADDRESS".into()],
            spans: true,
            ..Default::default()
        }];
        start(o)
    })
}

async fn decide(body: Value) -> Value {
    let s = tokio::task::spawn_blocking(server).await.expect("server");
    decide_on(s, body).await
}

async fn decide_on(s: &TestServer, body: Value) -> Value {
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// A server of one test's own, for answers compared bit for bit: on qwen2.5-1.5b a job batched
/// with another request's into one forward can move answers in the last digits (see
/// ARCHITECTURE.md, Invariants), and the other tests here send requests at the same time.
async fn own_server() -> TestServer {
    tokio::task::spawn_blocking(|| start(deciding(MODEL)))
        .await
        .expect("server")
}

/// Every span lies inside `state` and holds exactly the text between its code-point offsets.
fn check_offsets(state: &str, spans: &Value) -> Vec<(String, String)> {
    let chars: Vec<char> = state.chars().collect();
    let mut out = Vec::new();
    for s in spans.as_array().expect("spans") {
        let (start, end) = (
            s["start"].as_u64().expect("start") as usize,
            s["end"].as_u64().expect("end") as usize,
        );
        assert!(start < end && end <= chars.len(), "outside the text: {s}");
        let text: String = chars[start..end].iter().collect();
        assert_eq!(s["text"], json!(text), "offsets do not hold the text: {s}");
        let p = s["probability"].as_f64().expect("probability");
        assert!((0.0..=1.0).contains(&p), "{s}");
        out.push((s["label"].as_str().expect("label").to_string(), text));
    }
    out
}

const STATE: &str =
    "😀🚀 東京オフィスより: please reply to jane.doe@example.com — Jane Doe, phone 415-555-0134.";

#[tokio::test]
async fn spans_after_emoji_and_cjk_hold_their_text_at_code_point_offsets() {
    let v = decide(json!({"model": MODEL, "state": STATE, "questions": {
        "contacts": {"type": "span", "threshold": 0.0, "labels": [
            {"key": "EMAIL_ADDRESS", "description": "an email address"},
            {"key": "PHONE_NUMBER", "description": "a telephone number"},
            {"key": "PERSON", "description": "the name of a person"}
        ]}
    }}))
    .await;
    let found = check_offsets(STATE, &v["spans"]["contacts"]);
    // The email is found where it is: after 2 emoji, 7 CJK characters and ASCII.
    let email: Vec<&Value> = v["spans"]["contacts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["label"] == "EMAIL_ADDRESS")
        .collect();
    assert!(
        email.iter().any(|s| s["text"] == "jane.doe@example.com"),
        "{found:?}"
    );
    let at = STATE.chars().take_while(|c| *c != 'j').count();
    assert!(email
        .iter()
        .any(|s| s["start"] == json!(at) && s["end"] == json!(at + 20)));
    // The phone number and the name too, each under its own label.
    for (label, text) in [("PHONE_NUMBER", "415-555-0134"), ("PERSON", "Jane Doe")] {
        assert!(
            found.iter().any(|(l, t)| l == label && t == text),
            "{label} {text}: {found:?}"
        );
    }
    // The noul is the best span's probability; the threshold applied comes back.
    let best = v["spans"]["contacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["probability"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(v["answers"]["contacts"]["type"], "noul");
    assert!((v["answers"]["contacts"]["noul"].as_f64().unwrap() - best).abs() < 1e-12);
    assert_eq!(v["thresholds"]["contacts"], json!(0.0));
}

#[tokio::test]
async fn a_threshold_filters_spans_but_not_the_noul() {
    let q = |t: f64| {
        json!({"model": MODEL, "state": STATE, "questions": {
            "e": {"type": "span", "criteria": {"EMAIL_ADDRESS": "an email address"}, "threshold": t}
        }})
    };
    let all = decide(q(0.0)).await;
    let none = decide(q(1.0)).await;
    let spans = all["spans"]["e"].as_array().unwrap();
    assert!(!spans.is_empty(), "{all}");
    // Above every probability: no span listed, the same noul (a span never reaches exactly 1).
    assert!(spans
        .iter()
        .all(|s| s["probability"].as_f64().unwrap() < 1.0));
    assert_eq!(none["spans"]["e"], json!([]), "{none}");
    assert_eq!(none["answers"]["e"], all["answers"]["e"]);
    assert_eq!(none["thresholds"]["e"], json!(1.0));
    // The model's default threshold is 0.5.
    let default = decide(json!({"model": MODEL, "state": STATE, "questions": {
        "e": {"type": "span", "criteria": {"EMAIL_ADDRESS": "an email address"}}
    }}))
    .await;
    assert_eq!(default["thresholds"]["e"], json!(0.5));
    for s in default["spans"]["e"].as_array().unwrap() {
        assert!(s["probability"].as_f64().unwrap() >= 0.5, "{s}");
    }
}

/// A place two labels claim goes to the label the model names when asked what it is, not to
/// the label whose branch copied it with the higher probability: asked on its own, the date
/// label copies this phone number more surely than the phone label does (on the machines CI
/// ran on until stop 47). llama.cpp's numerics differ between CPUs: on an AVX2-only EPYC the
/// date label copies the date instead, nothing is contested, and the test checks the labels
/// and the phone's probability only.
#[tokio::test]
async fn a_place_two_labels_claim_goes_to_the_label_the_model_names_for_it() {
    const REMINDER: &str =
        "😀 Reminder: dentist on 19 June 1970. Call 993.340.8306x50847 to cancel.";
    let phone = (
        "PHONE_NUMBER",
        "a telephone number, with its extension if it has one",
    );
    let date = ("DATE_TIME", "a date or a time");
    let span = |labels: &[(&str, &str)]| {
        let criteria: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, d)| (k.to_string(), json!(d)))
            .collect();
        json!({"type": "span", "criteria": criteria, "threshold": 0.0})
    };
    let apart = decide(json!({"model": MODEL, "state": REMINDER, "questions": {
        "phone": span(&[phone]), "date": span(&[date])}}))
    .await;
    let copied = |v: &Value, id: &str, label: &str| -> f64 {
        v["spans"][id]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["label"] == label && s["text"] == "993.340.8306x50847")
            .map(|s| s["probability"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    let (as_phone, as_date) = (
        copied(&apart, "phone", "PHONE_NUMBER"),
        copied(&apart, "date", "DATE_TIME"),
    );
    assert!(as_phone > 0.0, "{apart}");
    // The date label copied the phone number too: a place two labels claim.
    let contested = as_date > 0.0;
    eprintln!(
        "the date label copies the phone number with {as_date}, the phone label with {as_phone}"
    );
    let together = decide(json!({"model": MODEL, "state": REMINDER, "questions": {
        "pii": span(&[phone, date])}}))
    .await;
    let found = check_offsets(REMINDER, &together["spans"]["pii"]);
    let want = |label: &str, text: &str| (label.to_string(), text.to_string());
    assert_eq!(
        found,
        [
            want("DATE_TIME", "19 June 1970"),
            want("PHONE_NUMBER", "993.340.8306x50847")
        ],
        "{together}"
    );
    // The phone keeps the probability its own branch gave it.
    assert_eq!(copied(&together, "pii", "PHONE_NUMBER"), as_phone);
    // The check read the text again: usage counts it.
    let read = |v: &Value| v["usage"]["input_tokens"].as_u64().unwrap();
    if contested {
        assert!(read(&together) > read(&apart), "{together} {apart}");
    }
}

#[tokio::test]
async fn the_pii_preset_and_the_label_list_form_are_answered() {
    let v = decide(json!({"model": MODEL, "state": STATE, "questions": {
        "pii": {"preset": "pii", "threshold": 0.0},
        "who": {"type": "span", "criteria": ["PERSON", "EMAIL_ADDRESS"], "threshold": 0.0},
        "odd": {"type": "span", "preset": "bank_secrets"}
    }}))
    .await;
    check_offsets(STATE, &v["spans"]["pii"]);
    check_offsets(STATE, &v["spans"]["who"]);
    let labels: Vec<&str> = protocol::PII_LABELS.iter().map(|(k, _)| *k).collect();
    for s in v["spans"]["pii"].as_array().unwrap() {
        assert!(labels.contains(&s["label"].as_str().unwrap()), "{s}");
    }
    for s in v["spans"]["who"].as_array().unwrap() {
        assert!(["PERSON", "EMAIL_ADDRESS"].contains(&s["label"].as_str().unwrap()));
    }
    assert_eq!(v["answers"]["odd"]["error"], "invalid_question", "{v}");
    assert_eq!(v["answers"]["odd"]["reason"], "question_malformed");
    // The card lists the preset.
    let s = tokio::task::spawn_blocking(server).await.expect("server");
    let (_, models) = get(&s.url("/v1/models")).await;
    let card = &models["models"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == MODEL))
        .expect("the model is listed")["card"];
    assert!(
        card["presets"].as_array().unwrap().contains(&json!("pii")),
        "{card}"
    );
    assert!(
        card["question_types"]
            .as_array()
            .unwrap()
            .contains(&json!("span")),
        "{card}"
    );
}

/// In an object state a span question reads one string part, as it was sent, and its offsets
/// count into that string: the part `over` names, else the answer part, else the user part,
/// else the only part. What names no single string part is refused, and only that question.
#[tokio::test]
async fn a_span_question_over_an_object_state_counts_offsets_into_the_part_it_read() {
    let email = || json!({"type": "span", "criteria": {"EMAIL_ADDRESS": "an email address"}});
    let over = |keys: Value| {
        let mut q = email();
        q["over"] = keys;
        q
    };
    let at = STATE.chars().take_while(|c| *c != 'j').count();
    let found_at = |v: &Value, id: &str| {
        check_offsets(STATE, &v["spans"][id]);
        v["spans"][id]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["start"] == json!(at) && s["text"] == "jane.doe@example.com")
    };
    let v = decide(json!({"model": MODEL,
        "state": {"user": "Who wrote this?", "answer": STATE},
        "questions": {"default": email(), "named": over(json!("answer"))}}))
    .await;
    assert!(found_at(&v, "default"), "{v}");
    assert!(found_at(&v, "named"), "{v}");
    let v = decide(json!({"model": MODEL, "state": {"text": STATE, "n": 3},
        "questions": {"named": over(json!("text")), "both": over(json!(["text", "n"])),
                      "number": over(json!("n")), "unnamed": email()}}))
    .await;
    assert!(found_at(&v, "named"), "{v}");
    for id in ["both", "number", "unnamed"] {
        assert_eq!(v["answers"][id]["error"], "invalid_question", "{id}: {v}");
        assert_eq!(
            v["answers"][id]["reason"], "question_malformed",
            "{id}: {v}"
        );
    }
}

/// On a server of its own (`own_server`).
#[tokio::test]
async fn a_span_question_beside_others_changes_none_of_their_answers() {
    let s = own_server().await;
    let decide = |body: Value| decide_on(&s, body);
    let questions = json!({
        "lang": {"type": "choice", "instructions": "Which language is the greeting in?",
                 "criteria": {"japanese": null, "french": null, "english": null}},
        "polite": {"type": "noul", "instructions": "Is the message polite?"}
    });
    let alone = decide(json!({"model": MODEL, "state": STATE, "questions": questions})).await;
    let mut with = questions.clone();
    with["contacts"] = json!({"type": "span", "criteria": {"EMAIL_ADDRESS": "an email address"}});
    let beside = decide(json!({"model": MODEL, "state": STATE, "questions": with})).await;
    assert_eq!(alone["answers"]["lang"], beside["answers"]["lang"]);
    assert_eq!(alone["answers"]["polite"], beside["answers"]["polite"]);
    // The span pass is counted: its question and every token it fed back.
    let tokens = |v: &Value| v["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        tokens(&beside) > tokens(&alone) + 20,
        "{} {}",
        tokens(&alone),
        tokens(&beside)
    );
}

/// A preset label is asked only of a text that has its form (`span::may_hold`): on a text with
/// an email address, a name and a telephone number, the preset asks 5 of its 9 labels (no
/// card, IP address, IBAN, or web address outside the email's domain), and answers exactly as
/// those 5 labels asked alone, tokens included. A label the client describes is always asked.
/// On a server of its own (`own_server`).
#[tokio::test]
async fn a_preset_label_the_text_has_no_form_for_is_not_asked() {
    let s = own_server().await;
    let decide = |question: Value| {
        decide_on(
            &s,
            json!({"model": MODEL, "state": STATE, "questions": {"pii": question}}),
        )
    };
    let described = |keys: &[&str]| -> Value {
        let labels: serde_json::Map<String, Value> = protocol::PII_LABELS
            .iter()
            .filter(|(k, _)| keys.contains(k))
            .map(|(k, d)| (k.to_string(), json!(d)))
            .collect();
        json!({"type": "span", "criteria": labels, "threshold": 0.0})
    };
    let tokens = |v: &Value| v["usage"]["input_tokens"].as_u64().unwrap();
    let places = |v: &Value| -> Vec<(String, u64, u64, f64)> {
        v["spans"]["pii"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["label"].as_str().unwrap().to_string(),
                    s["start"].as_u64().unwrap(),
                    s["end"].as_u64().unwrap(),
                    s["probability"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let preset = decide(json!({"preset": "pii", "threshold": 0.0})).await;
    let asked = decide(described(&[
        "PERSON",
        "EMAIL_ADDRESS",
        "PHONE_NUMBER",
        "LOCATION",
        "DATE_TIME",
    ]))
    .await;
    assert_eq!(places(&preset), places(&asked), "{preset} {asked}");
    assert_eq!(tokens(&preset), tokens(&asked), "{preset} {asked}");
    let found: Vec<String> = places(&preset).into_iter().map(|p| p.0).collect();
    assert!(found.contains(&"EMAIL_ADDRESS".to_string()), "{preset}");
    // The four the text has no form for: no branch, no span, only the state read.
    let none = decide(described(&["CREDIT_CARD", "IP_ADDRESS", "IBAN", "URL"])).await;
    assert_eq!(none["spans"]["pii"], json!([]), "{none}");
    // The same key described by the client is its label: asked, at a branch's cost.
    let own = decide(json!({"type": "span", "threshold": 0.0,
        "criteria": {"URL": "a web address or a domain name"}}))
    .await;
    assert!(tokens(&own) > tokens(&none) + 20, "{own} {none}");
}

#[tokio::test]
async fn a_span_question_over_a_long_state_reads_it_in_windows_with_offsets_into_the_whole() {
    let s = tokio::task::spawn_blocking(|| {
        let mut o = deciding(MODEL);
        o.context_tokens = 512;
        o.max_scan_tokens = Some(4000);
        start(o)
    })
    .await
    .expect("server");
    let filler = "The parcel was late again and the box was dented. ".repeat(60);
    let state = format!("{filler}Please write to jane.doe@example.com about it.");
    let q = |overflow: &str| {
        json!({"model": MODEL, "state": state, "questions": {
            "e": {"type": "span", "criteria": {"EMAIL_ADDRESS": "an email address"},
                  "threshold": 0.0, "overflow": overflow}
        }})
    };
    // Read whole, the state is over the question's budget.
    let (status, _, v) = post(&s.url("/v1/decisions"), &q("reject")).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["reason"], "question_tokens", "{v}");
    let (status, _, v) = post(&s.url("/v1/decisions"), &q("window")).await;
    assert_eq!(status, 200, "{v}");
    let found = check_offsets(&state, &v["spans"]["e"]);
    let at = state.chars().count() - "jane.doe@example.com about it.".chars().count();
    assert!(
        v["spans"]["e"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["start"] == json!(at) && s["text"] == "jane.doe@example.com"),
        "{found:?}"
    );
}

#[tokio::test]
async fn a_span_classifier_answers_classify_with_spans() {
    let s = tokio::task::spawn_blocking(server).await.expect("server");
    let body = json!({"model": "contacts", "input": [STATE, "Nothing to see."]});
    let (status, h, v) = post(&s.url("/v1/classify"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    let found = check_offsets(STATE, &v["data"][0]["spans"]);
    assert!(
        found
            .iter()
            .any(|(l, t)| l == "EMAIL_ADDRESS" && t == "jane.doe@example.com"),
        "{v}"
    );
    assert_eq!(check_offsets("Nothing to see.", &v["data"][1]["spans"]), []);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
}
