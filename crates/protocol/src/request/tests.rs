use super::*;
use crate::error::{reason, ErrorCode, QuestionErrorKind};
use serde_json::{json, Value};

/// The byte-level count a large body is refused by agrees with the full parse.
#[test]
fn the_count_agrees_with_the_full_parse() {
    let mut questions = serde_json::Map::new();
    for i in 0..=crate::MAX_QUESTIONS {
        questions.insert(
            format!("q{i}"),
            serde_json::json!({"type": "noul", "instructions": "?"}),
        );
    }
    let body = serde_json::json!({"state": "s", "questions": questions});
    let bytes = serde_json::to_vec(&body).unwrap();
    assert_eq!(
        crate::precount::top_level_questions(&bytes),
        Some(crate::MAX_QUESTIONS + 1)
    );
    let e = parse_decision_body(&body, crate::Schema::V5).unwrap_err();
    assert_eq!(
        e,
        crate::precount::too_many_questions(crate::MAX_QUESTIONS + 1)
    );
}

#[test]
fn a_pii_preset_is_a_span_question_and_labels_may_be_a_list_of_names() {
    let q = parse_question(&json!({"preset": "pii"}), Schema::V5).expect("valid");
    assert_eq!(q.kind.type_name(), "span");
    assert!(matches!(&q.kind, QuestionKind::Span { labels, .. } if labels.is_empty()));
    assert_eq!(q.preset.as_deref(), Some("pii"));
    let q = parse_question(
        &json!({"type": "span", "criteria": ["PERSON", "EMAIL_ADDRESS"]}),
        Schema::V5,
    )
    .expect("valid");
    let QuestionKind::Span { labels, .. } = &q.kind else {
        panic!("a span")
    };
    let names: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["PERSON", "EMAIL_ADDRESS"]);
    // Without a preset a span needs labels; a name twice, or a type from another preset,
    // is refused.
    for bad in [
        json!({"type": "span"}),
        json!({"type": "span", "criteria": ["A", "A"]}),
        json!({"preset": "sentiment"}),
        json!({"type": "span", "criteria": [""]}),
    ] {
        assert!(parse_question(&bad, Schema::V5).is_err(), "{bad}");
    }
}

fn single(v: Value, schema: Schema) -> DecisionRequest {
    match parse_decision_body(&v, schema).expect("valid") {
        DecisionBody::Single(r) => r,
        DecisionBody::Batch { .. } => panic!("not a batch"),
    }
}

#[test]
fn standard_request_decodes_with_every_state_form() {
    for state in [json!("text"), json!({"a": "b"}), json!(["x", "y"])] {
        let r = single(
            json!({"model": "m", "state": state, "questions": {"q": {"type": "noul", "instructions": "?"}}}),
            Schema::V5,
        );
        assert_eq!(r.questions.len(), 1);
        assert!(r.questions[0].question.is_ok());
    }
}

#[test]
fn unknown_top_level_member_is_refused_naming_it() {
    let e = parse_decision_body(
        &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}, "seed": 7}),
        Schema::V5,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    assert!(e.message.contains("\"seed\""), "{}", e.message);
    assert!(!e.validation);
}

#[test]
fn removed_forms_name_their_replacement_under_v5_only() {
    let q = json!({"type": "choice", "choices": [{"key": "a"}, {"key": "b"}]});
    let body = json!({"state": "s", "questions": {"q": q}});
    let e = parse_decision_body(&body, Schema::V5).unwrap_err();
    assert!(e.message.contains("criteria"));
    assert_eq!(e.reason, Some(reason::REMOVED_FORM));
    let r = single(body, Schema::V4);
    assert!(r.questions[0].question.is_ok());
    for (k, v, word) in [
        ("images", json!([]), "assets"),
        ("states", json!({}), "batch"),
    ] {
        let mut body =
            json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}});
        body[k] = v;
        let e = parse_decision_body(&body, Schema::V5).unwrap_err();
        assert!(e.message.contains(word), "{}", e.message);
    }
    let e = parse_decision_body(
        &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}}, "options": {"long_context": true}}),
        Schema::V5,
    )
    .unwrap_err();
    assert!(e.message.contains("TypeSafe-Danger-Zone-Long-Context"));
}

#[test]
fn questions_fail_in_place_with_fixed_reasons() {
    let r = single(
        json!({"state": "s", "questions": {
            "ok": {"type": "noul", "instructions": "?"},
            "bad": {"type": "set", "instructions": "?", "criteria": {"a": null}, "colour": 1},
            "none": {"type": "boolean"},
            "one": {"type": "choice", "criteria": {"a": null}},
            "map": {"type": "score", "criteria": {"0": "a", "1": "b"}},
        }}),
        Schema::V5,
    );
    assert!(r.questions[0].question.is_ok());
    let bad = r.questions[1].question.as_ref().unwrap_err();
    assert_eq!(bad.reason, reason::QUESTION_MALFORMED);
    assert_eq!(bad.message, "set questions do not take ['colour']");
    for slot in &r.questions[2..] {
        assert!(slot.question.is_err(), "{}", slot.id);
    }
}

#[test]
fn noul_criteria_may_be_absent_null_or_one_sided() {
    for crit in [
        json!(null),
        json!({"true": "yes"}),
        json!({"false": "no"}),
        json!({"false": "n", "true": "y"}),
    ] {
        let q = parse_question(
            &json!({"type": "noul", "instructions": "?", "criteria": crit}),
            Schema::V5,
        );
        assert!(q.is_ok(), "{crit}");
    }
    let q = parse_question(
        &json!({"type": "noul", "criteria": {"maybe": "x"}}),
        Schema::V5,
    );
    assert!(q.is_err());
}

#[test]
fn option_names_round_trip_and_descriptions_render() {
    let q = parse_question(
        &json!({"type": "choice", "criteria": {"환불 요청": {"owns": ["a"]}, "🙂 기타": null}}),
        Schema::V5,
    )
    .unwrap();
    match q.kind {
        QuestionKind::Choice { options } => {
            assert_eq!(options[0].0, "환불 요청");
            assert_eq!(options[0].1.as_deref(), Some("owns:\n  - a"));
            assert_eq!(options[1], ("🙂 기타".to_string(), None));
        }
        _ => panic!("choice"),
    }
}

#[test]
fn batch_form_and_mixing() {
    let body = json!({"model": "m", "states": {
        "a": {"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}},
        "b": {"state": "y", "questions": {"q": {"type": "noul", "instructions": "?"}}}}});
    match parse_decision_body(&body, Schema::Internal).unwrap() {
        DecisionBody::Batch { entries, model, .. } => {
            assert_eq!(entries.len(), 2);
            assert_eq!(model.as_deref(), Some("m"));
        }
        _ => panic!("batch"),
    }
    let mut mixed = body.clone();
    mixed["state"] = json!("z");
    let e = parse_decision_body(&mixed, Schema::Internal).unwrap_err();
    assert_eq!(e.reason, Some(reason::FORMS_MIXED));
}

#[test]
fn a_refused_entry_of_a_batch_fails_only_its_own_questions() {
    let entry = |image: &str| {
        json!({"state": "x", "images": [image],
               "questions": {"q": {"type": "noul", "instructions": "?"}, "r": {"type": "noul", "instructions": "?"}}})
    };
    let link = "https://example.com/a.png";
    let body = json!({"states": {
        "bad": entry(link),
        "good": {"state": "y", "questions": {"q": {"type": "noul", "instructions": "?"}}}}});
    match parse_decision_body(&body, Schema::Internal).unwrap() {
        DecisionBody::Batch { entries, .. } => {
            let bad = &entries[0].1;
            assert_eq!(bad.questions.len(), 2);
            for slot in &bad.questions {
                let f = slot.question.as_ref().unwrap_err();
                assert_eq!(f.kind, QuestionErrorKind::InvalidInput);
                assert_eq!(f.reason, reason::INPUT_MALFORMED);
                assert!(f.message.contains("images[0]"), "{}", f.message);
            }
            assert!(entries[1].1.questions[0].question.is_ok());
        }
        _ => panic!("batch"),
    }
    // Every entry refused: the first refusal answers the body.
    let all = json!({"states": {"a": entry(link), "b": entry(link)}});
    let e = parse_decision_body(&all, Schema::Internal).unwrap_err();
    assert_eq!(e.reason, Some(reason::ENCODING_MALFORMED));
    // A single request is refused whole, as before.
    let e = parse_decision_body(&entry(link), Schema::Internal).unwrap_err();
    assert_eq!(e.reason, Some(reason::ENCODING_MALFORMED));
}

/// `options.window` is an internal option: endpoints that take a window set it; a V5 body
/// cannot. Its overlap may be left to the engine.
#[test]
fn a_window_is_internal_and_its_overlap_optional() {
    let with = |window: Value| {
        json!({"state": "x", "options": {"window": window},
            "questions": {"q": {"type": "noul", "instructions": "?"}}})
    };
    let window =
        |w: Value, schema| parse_decision_body(&with(w), schema).map(|b| b.options().window);
    assert_eq!(
        window(json!({"tokens": 64}), Schema::Internal),
        Ok(Some(Window {
            tokens: 64,
            overlap: None
        }))
    );
    assert_eq!(
        window(json!({"tokens": 64, "overlap": 8}), Schema::Internal),
        Ok(Some(Window {
            tokens: 64,
            overlap: Some(8)
        }))
    );
    for bad in [
        json!({"tokens": 64, "overlap": 64}),
        json!({"tokens": 0}),
        json!({"overlap": 8}),
        json!({"tokens": 64, "stride": 8}),
    ] {
        assert!(window(bad.clone(), Schema::Internal).is_err(), "{bad}");
    }
    assert!(window(json!({"tokens": 64}), Schema::V5).is_err());
}

#[test]
fn schema_errors_are_validation_failures() {
    for body in [
        json!([]),
        json!({"questions": {}}),
        json!({"state": "s"}),
        json!({"state": "s", "questions": {}}),
        json!({"state": null, "questions": {"q": {"type": "noul", "instructions": "?"}}}),
    ] {
        let e = parse_decision_body(&body, Schema::V5).unwrap_err();
        assert!(e.validation, "{body}");
        assert_eq!(e.loc[0], "body");
    }
}
