//! Answers that must be right, on real weights (`qwen2.5-0.5b`, which CI fetches): plain
//! cases of every decision type, each asked both ways, so that a readout that swapped Yes and
//! No, mixed up options or reversed score levels fails here. Shapes and sums are checked
//! elsewhere; this file checks the answers themselves.
//!
//! Choice and set answers must pick the right option. Noul and score answers must order the
//! two states the right way round; their absolute values are not asked yet: this small
//! model's yes/no answers lean to one side for every state (its label bias, issue 10).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

const MODEL: &str = "qwen2.5-0.5b";

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| start(deciding(MODEL)))
}

/// The whole answer to one request (a set's result is under `sets`, the rest under `answers`).
async fn decide(state: &str, questions: Value) -> Value {
    let body = json!({"model": MODEL, "state": state, "questions": questions});
    let s = tokio::task::spawn_blocking(server).await.expect("server");
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    v
}

async fn answers(state: &str, questions: Value) -> Value {
    decide(state, questions).await["answers"].clone()
}

/// A yes/no question that is yes for one state and no for the other: the yes state must get
/// the higher probability of yes (a swapped Yes/No reverses it).
async fn noul_both_ways(question: &str, yes_state: &str, no_state: &str) {
    let q = json!({"q": {"type": "noul", "instructions": question}});
    let yes = answers(yes_state, q.clone()).await["q"]["noul"]
        .as_f64()
        .expect("noul");
    let no = answers(no_state, q).await["q"]["noul"]
        .as_f64()
        .expect("noul");
    assert!(
        yes > no,
        "{question}: p(yes) {yes:.3} for {yes_state:?}, {no:.3} for {no_state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noul_answers_yes_and_no_where_they_belong() {
    noul_both_ways(
        "Is it raining?",
        "It is raining heavily and everyone outside is getting soaked.",
        "The sky is clear and the sun is shining; the streets are dry.",
    )
    .await;
    noul_both_ways(
        "Is the customer happy?",
        "I love this blender! It works perfectly and I am very happy with it.",
        "This is the worst blender I have ever bought. I am furious and want my money back.",
    )
    .await;
}

/// Each state's right option sits at a different place, so a shifted option fails. The keys are
/// word-like, so the model answers with their names. (Keys read by letter are checked on a
/// scripted backend in `engine`: on this model, with keys `sports & games`, `cooking &
/// recipes` and `money & markets`, the letter readout gave the finance text to sports — 0.41
/// against 0.28 — which is why word-like options are read by name.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choice_picks_the_right_option_whatever_its_place() {
    let cases = [
        (
            "The striker scored twice and her team won the championship final.",
            0,
        ),
        (
            "Mix the flour, sugar and eggs, then bake the cake for thirty minutes.",
            1,
        ),
        (
            "The stock market fell three percent as investors sold bank shares.",
            2,
        ),
    ];
    let keys = ["sports", "cooking", "finance"];
    let criteria = json!({
        keys[0]: "Sports and games",
        keys[1]: "Cooking and recipes",
        keys[2]: "Money, banks and markets"
    });
    for (state, want) in cases {
        let a = answers(
            state,
            json!({"topic": {"type": "choice", "instructions": "What is the text about?",
                             "criteria": criteria}}),
        )
        .await;
        assert_eq!(a["topic"]["choice"], keys[want], "{state}: {}", a["topic"]);
    }
}

/// An option is read by its meaning (its description, or its key where it has none): the same
/// meanings under word keys, letters, digits or random ids give the same probabilities, and the
/// right option wins under every spelling (issue 61: ids used to answer near the prior).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_option_is_read_by_its_meaning_whatever_its_key() {
    let cases = [
        (
            "The hotel room was dirty and the staff ignored our complaints for two days.",
            "What is the review about?",
            ["Hotel", "Restaurant", "Airline"],
        ),
        (
            "Je voudrais réserver une table pour deux personnes ce soir, s'il vous plaît.",
            "In which language is the text written?",
            ["French", "German", "Japanese"],
        ),
    ];
    for (state, question, meanings) in cases {
        let spellings = [
            json!({meanings[0]: null, meanings[1]: null, meanings[2]: null}),
            json!({"a": meanings[0], "b": meanings[1], "c": meanings[2]}),
            json!({"1": meanings[0], "2": meanings[1], "3": meanings[2]}),
            json!({"q7f2": meanings[0], "k09x": meanings[1], "b3": meanings[2]}),
        ];
        let mut seen: Vec<Vec<f64>> = Vec::new();
        for criteria in spellings {
            let keys: Vec<String> = criteria.as_object().unwrap().keys().cloned().collect();
            let a = answers(
                state,
                json!({"q": {"type": "choice", "instructions": question, "criteria": criteria}}),
            )
            .await;
            let p: Vec<f64> = keys
                .iter()
                .map(|k| a["q"]["probabilities"][k].as_f64().expect("p"))
                .collect();
            assert_eq!(a["q"]["choice"], keys[0], "{state} {keys:?}: {}", a["q"]);
            if let Some(first) = seen.first() {
                for (x, y) in p.iter().zip(first) {
                    assert!(
                        (x - y).abs() <= 0.02,
                        "{state} {keys:?}: {p:?} against {first:?}"
                    );
                }
            }
            seen.push(p);
        }
    }
}

/// A low and a high case, so reversed levels fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn score_orders_its_levels() {
    let q = json!({"u": {"type": "score", "instructions": "How urgent is this message?",
                         "criteria": ["Not urgent at all", "Somewhat urgent", "Extremely urgent"]}});
    let high = answers(
        "URGENT!!! The production server is down right now and every customer is affected. Fix it immediately!",
        q.clone(),
    )
    .await["u"]["score"]
        .as_f64()
        .expect("score");
    let low = answers(
        "No rush at all. Whenever you have a free moment next month, could you glance at this?",
        q,
    )
    .await["u"]["score"]
        .as_f64()
        .expect("score");
    assert!(high > low, "urgent {high:.3}, not urgent {low:.3}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_labels_apply_where_the_text_says_so() {
    let v = decide(
        "The stock market fell three percent as investors sold bank shares.",
        json!({"s": {"type": "set", "instructions": "Which topics does the text mention?",
                     "labels": [{"key": "finance", "description": "Money, banks or markets"},
                                {"key": "cooking", "description": "Cooking or recipes"}]}}),
    )
    .await;
    let p = &v["sets"]["s"]["probabilities"];
    let (fin, cook) = (p["finance"].as_f64(), p["cooking"].as_f64());
    assert!(matches!((fin, cook), (Some(f), Some(c)) if f > c), "{v}");
}

/// Each question is evaluated in llama.cpp micro-batches of its own, so on this quantized model
/// (whose kernels round differently with a batch's shape) its answer is the same bit for bit
/// alone, beside nine other questions, and when the same request is asked again after other
/// work; the other tests of this file send requests to the same server meanwhile, which may
/// be batched into the same forwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_the_same_alone_beside_others_and_asked_again() {
    let asked = [
        ("damaged", "noul", "Was the item damaged?"),
        ("route", "choice", "Which team should handle this ticket?"),
    ];
    let question = |kind: &str, text: &str| {
        if kind == "choice" {
            json!({"type": "choice", "instructions": text,
                   "criteria": {"billing": "Payments and invoices", "shipping": "Deliveries", "technical": "Product faults"}})
        } else {
            json!({"type": kind, "instructions": text})
        }
    };
    let others = [
        "Does the customer mention an order number?",
        "Is the customer angry?",
        "Did the customer contact support before?",
        "Does the customer want a refund?",
        "Is a phone call mentioned?",
        "Is a bank mentioned?",
        "Is this about a subscription?",
        "Does the customer threaten to leave?",
    ];
    let mut all = serde_json::Map::new();
    for (id, kind, text) in asked {
        all.insert(id.into(), question(kind, text));
    }
    for (i, text) in others.iter().enumerate() {
        all.insert(format!("other{i}"), question("noul", text));
    }
    let beside = answers(TICKET, Value::Object(all.clone())).await;
    for (id, kind, text) in asked {
        let alone = answers(TICKET, json!({ id: question(kind, text) })).await;
        assert_eq!(alone[id], beside[id], "{id} alone and beside nine others");
    }
    let again = answers(TICKET, Value::Object(all)).await;
    assert_eq!(beside, again, "the same request asked again");
}
