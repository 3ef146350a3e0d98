//! Property test: no JSON value, however odd, makes decoding panic; every refusal names a
//! reason word or is a schema failure, and every question slot keeps its id.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use protocol::{parse_decision_body, DecisionBody, Schema};
use serde_json::{json, Map, Value};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-z ]{0,8}".prop_map(Value::String),
        prop_oneof![
            Just("choice"),
            Just("noul"),
            Just("score"),
            Just("set"),
            Just("span"),
            Just("box"),
            Just("track"),
            Just("true"),
            Just("false"),
            Just("type"),
            Just("criteria")
        ]
        .prop_map(|s| Value::String(s.into())),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("model"),
        Just("state"),
        Just("questions"),
        Just("options"),
        Just("roles"),
        Just("assets"),
        Just("images"),
        Just("states"),
        Just("type"),
        Just("instructions"),
        Just("criteria"),
        Just("choices"),
        Just("levels"),
        Just("labels"),
        Just("threshold"),
        Just("deadline_ms"),
        Just("return_meta"),
        Just("long_context"),
        Just("true"),
        Just("false"),
        Just("q"),
        Just("key"),
        Just("description"),
        Just("")
    ]
    .prop_map(String::from)
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decoding_never_panics(v in value()) {
        for schema in [Schema::V5, Schema::V4, Schema::Internal] {
            match parse_decision_body(&v, schema) {
                Ok(DecisionBody::Single(r)) => {
                    let ids: Vec<&String> = v["questions"].as_object().unwrap().keys().collect();
                    let got: Vec<&String> = r.questions.iter().map(|s| &s.id).collect();
                    prop_assert_eq!(ids, got);
                }
                Ok(DecisionBody::Batch { entries, .. }) => prop_assert!(!entries.is_empty()),
                Err(e) => prop_assert!(e.reason.is_some() || e.validation),
            }
        }
    }

    #[test]
    fn questions_inside_a_valid_request_never_panic(q in value()) {
        let body = json!({"state": "s", "questions": {"q": q}});
        let r = parse_decision_body(&body, Schema::Internal);
        prop_assert!(r.is_ok());
    }
}
