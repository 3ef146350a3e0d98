//! End-to-end tests of the decision endpoints against a real model over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

fn noul(instructions: &str) -> Value {
    json!({"type": "noul", "instructions": instructions})
}

fn team() -> Value {
    json!({"type": "choice", "instructions": "Which team should handle this ticket?",
           "criteria": {"Billing": "Payments, invoices, refunds", "Technical": "Bugs and outages", "Sales": "Pricing"}})
}

fn anger() -> Value {
    json!({"type": "score", "instructions": "How frustrated is the customer?", "criteria": ["Calm", "Frustrated", "Very angry"]})
}

fn assert_choice(a: &Value, keys: &[&str]) {
    assert_eq!(a["type"], "choice", "{a}");
    let probs = a["probabilities"].as_object().expect("probabilities");
    let got: Vec<&str> = probs.keys().map(String::as_str).collect();
    assert_eq!(got, keys);
    assert!((sum(&a["probabilities"]) - 1.0).abs() < 1e-6);
    let ps: Vec<f64> = probs.values().map(|v| v.as_f64().unwrap()).collect();
    let max = ps.iter().cloned().fold(0.0, f64::max);
    assert_eq!(probs[a["choice"].as_str().unwrap()].as_f64().unwrap(), max);
    let n = ps.len() as f64;
    let conf = (max - 1.0 / n) / (1.0 - 1.0 / n);
    assert!((a["confidence"].as_f64().unwrap() - conf).abs() < 1e-9);
}

fn assert_score(a: &Value, levels: &[&str]) {
    assert_eq!(a["type"], "score", "{a}");
    let n = levels.len();
    let probs: Vec<f64> = (0..n)
        .map(|i| a["probabilities"][i.to_string()].as_f64().unwrap())
        .collect();
    assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-6);
    let expected: f64 = probs.iter().enumerate().map(|(i, p)| i as f64 * p).sum();
    assert!((a["score"].as_f64().unwrap() - expected).abs() < 1e-9);
    for (i, l) in levels.iter().enumerate() {
        assert_eq!(a["legend"][i.to_string()], *l);
    }
    // Confidence: max(0, 1 - sum p_i |i - m| / MAD_unif), m the most likely level.
    let m = (0..n).fold(0, |b, i| if probs[i] > probs[b] { i } else { b });
    let c = (n as f64 - 1.0) / 2.0;
    let mad = (0..n).map(|i| (i as f64 - c).abs()).sum::<f64>() / n as f64;
    let spread: f64 = probs
        .iter()
        .enumerate()
        .map(|(i, p)| p * (i as f64 - m as f64).abs())
        .sum();
    let conf = (1.0 - spread / mad).max(0.0);
    assert!((a["confidence"].as_f64().unwrap() - conf).abs() < 1e-9);
}

#[tokio::test]
async fn systemone_answers_every_decision_type_with_usage_and_headers() {
    let s = shared();
    let body = json!({"model": test_model(), "state": TICKET,
        "questions": {"refund": noul("Is the customer asking for money back?"), "team": team(), "anger": anger()}});
    let (status, headers, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], test_model());
    let keys: Vec<&String> = v["answers"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["refund", "team", "anger"]);
    let p = v["answers"]["refund"]["noul"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&p));
    assert_eq!(
        v["answers"]["refund"].as_object().unwrap().len(),
        2,
        "a noul has no confidence"
    );
    assert_choice(&v["answers"]["team"], &["Billing", "Technical", "Sales"]);
    assert_score(
        &v["answers"]["anger"],
        &["Calm", "Frustrated", "Very angry"],
    );
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 50);
    assert_eq!(v["usage"]["output_tokens"], 0);
    let timing = headers["server-timing"].to_str().unwrap();
    for phase in [
        "parse",
        "tokenize",
        "queue",
        "forward",
        "post",
        "serialize",
        "total",
    ] {
        assert!(timing.contains(&format!("{phase};dur=")), "{timing}");
    }
    assert!(!headers["x-request-id"].is_empty());
    let top: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        top,
        ["model", "answers", "usage"],
        "no unprefixed extras on a plain request"
    );
}

#[tokio::test]
async fn usage_counts_the_state_once() {
    let s = shared();
    let one = json!({"state": TICKET, "questions": {"a": noul("Is this about money?")}});
    let two = json!({"state": TICKET, "questions": {"a": noul("Is this about money?"), "b": noul("Is this about money?")}});
    let (_, _, v1) = post(&s.url("/v1/systemone"), &one).await;
    let (_, _, v2) = post(&s.url("/v1/systemone"), &two).await;
    let (u1, u2) = (
        v1["usage"]["input_tokens"].as_u64().unwrap(),
        v2["usage"]["input_tokens"].as_u64().unwrap(),
    );
    let question = u2 - u1;
    assert!(
        question > 0 && question < u1 / 2,
        "second question adds only its own tokens: {u1} {u2}"
    );
}

#[tokio::test]
async fn jev_latest_and_absent_model_name_the_default() {
    let s = shared();
    for model in [json!("jev-latest"), Value::Null] {
        let mut body =
            json!({"state": "Hello there.", "questions": {"q": noul("Is this a greeting?")}});
        if !model.is_null() {
            body["model"] = model;
        }
        let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["model"], test_model());
    }
}

#[tokio::test]
async fn unknown_model_is_404_naming_the_served_models() {
    let s = shared();
    let body = json!({"model": "no-such-model", "state": "x", "questions": {"q": noul("?")}});
    let (status, h, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 404);
    assert_eq!(v["error"]["code"], "model_not_found");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains(&test_model()));
    assert!(
        h.contains_key("server-timing"),
        "errors carry Server-Timing too"
    );
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 404);
    assert_eq!(v["code"], "model_not_found");
    assert_eq!(v["detail"]["error_type"], "model_not_found");
}

#[tokio::test]
async fn state_forms_structured_text_ids_and_unicode_round_trip() {
    let s = shared();
    for state in [
        json!(TICKET),
        json!({"subject": "Charged twice", "customer": {"plan": "pro"}}),
        json!(["one", "two"]),
    ] {
        let body = json!({"state": state, "questions": {"ticket-1": noul("Refund?"), "q.2": noul("Refund?"),
            "with space": noul("Refund?"), "질문": noul("Refund?"), "🎯": noul("Refund?")}});
        let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["answers"].as_object().unwrap().len(), 5);
    }
    let q = json!({"type": "choice", "instructions": ["이 문의는 어떤 유형인가요?", "하나만"],
        "criteria": {"환불 요청": {"owns": ["refunds"]}, "배송 문의": null, "🙂 기타": ["그 외"]}});
    let (status, _, v) = post(
        &s.url("/v1/systemone"),
        &json!({"state": "배송이 안 와요 😡", "questions": {"kind": q}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_choice(
        &v["answers"]["kind"],
        &["환불 요청", "배송 문의", "🙂 기타"],
    );
    let structured = json!({"type": "score", "instructions": {"scale": "frustration"},
        "criteria": [{"label": "Calm"}, {"label": "Frustrated"}]});
    let (status, _, v) = post(
        &s.url("/v1/systemone"),
        &json!({"state": TICKET, "questions": {"s": structured}}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["s"]["legend"]["0"], "label: Calm");
}

#[tokio::test]
async fn noul_criteria_forms_are_answered() {
    let s = shared();
    for crit in [
        json!(null),
        json!({"true": "Wants a refund"}),
        json!({"false": "Only asks"}),
        json!({"true": "Wants a refund", "false": "Anything else"}),
    ] {
        let body = json!({"state": TICKET, "questions": {"r": {"type": "noul", "instructions": "Refund?", "criteria": crit}}});
        let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
        assert_eq!(status, 200, "{crit}: {v}");
        assert_eq!(v["answers"]["r"]["type"], "noul");
    }
    let body = json!({"state": TICKET, "questions": {"r": {"type": "noul", "criteria": {"true": "Threatens a chargeback"}}}});
    let (status, _, _) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(
        status, 200,
        "a noul whose criteria describe an outcome needs no instructions"
    );
}

#[tokio::test]
async fn choice_with_255_options_and_score_with_10_levels() {
    let s = shared();
    // Options without a description (null) but the first: the question reads about 1,700
    // tokens rather than the 4,800 of 255 described ones (the limit under test is the number
    // of options, not their length).
    let mut criteria = serde_json::Map::new();
    criteria.insert("Billing".into(), json!("Payments, invoices, refunds"));
    for i in 1..255 {
        criteria.insert(format!("Queue {i:03}"), Value::Null);
    }
    let keys: Vec<String> = criteria.keys().cloned().collect();
    let body = json!({"state": TICKET, "questions": {
        "queue": {"type": "choice", "instructions": "Which queue?", "criteria": criteria},
        "level": {"type": "score", "instructions": "How angry?", "criteria": (0..10).map(|i| format!("Level {i}")).collect::<Vec<_>>()}}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 200, "{v}");
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_choice(&v["answers"]["queue"], &key_refs);
    let levels: Vec<String> = (0..10).map(|i| format!("Level {i}")).collect();
    let level_refs: Vec<&str> = levels.iter().map(String::as_str).collect();
    assert_score(&v["answers"]["level"], &level_refs);
}

#[tokio::test]
async fn answers_do_not_depend_on_ids_order_or_other_questions() {
    let s = shared();
    let alone = json!({"state": TICKET, "questions": {"team": team()}});
    let renamed = json!({"state": TICKET, "questions": {"zz-renamed.1": team()}});
    let crowded = json!({"state": TICKET, "questions": {"a": anger(), "b": noul("Urgent?"), "team": team(), "c": noul("Polite?")}});
    let (sa, _, a) = post(&s.url("/v1/systemone"), &alone).await;
    let (sb, _, b) = post(&s.url("/v1/systemone"), &renamed).await;
    let (sc, _, c) = post(&s.url("/v1/systemone"), &crowded).await;
    // Two failures would compare equal: every answer is a 200 with probabilities.
    assert_eq!((sa, sb, sc), (200, 200, 200), "{a} {b} {c}");
    // numerics: exact -- the same bits alone, renamed, or beside other questions.
    let pa = &a["answers"]["team"];
    assert!(
        pa["probabilities"].is_object() && pa["choice"].is_string(),
        "{a}"
    );
    assert_eq!(pa, &b["answers"]["zz-renamed.1"]);
    assert_eq!(pa, &c["answers"]["team"]);
    // And beside other requests sharing the worker at the same time.
    let url = s.url("/v1/systemone");
    let (x, y, z) = tokio::join!(
        post(&url, &alone),
        post(&url, &crowded),
        post(&url, &renamed)
    );
    assert_eq!((x.0, y.0, z.0), (200, 200, 200));
    assert_eq!(&x.2["answers"]["team"], pa);
    assert_eq!(&y.2["answers"]["team"], pa);
    assert_eq!(&z.2["answers"]["zz-renamed.1"], pa);
}

#[tokio::test]
async fn decisions_answers_failed_questions_in_place_with_fixed_reasons() {
    let s = shared();
    let body = json!({"state": TICKET, "questions": {
        "ok": noul("Refund?"),
        "span": {"type": "span", "instructions": "Find emails", "criteria": {"EMAIL": "An email"}},
        "box": {"type": "box", "instructions": "the logo"},
        "track": {"type": "track", "instructions": "the car"},
        "bad": {"type": "set", "instructions": "?", "criteria": {"a": null}, "colour": "red"},
        "adapter": {"type": "noul", "instructions": "?", "decision_adapter": true},
    }});
    let (status, h, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(h.contains_key("server-timing"));
    let a = &v["answers"];
    assert_eq!(a["ok"]["type"], "noul");
    // A causal LM answers span questions (tests/spans.rs): a noul beside its spans.
    assert_eq!(a["span"]["type"], "noul", "{}", a["span"]);
    assert!(v["spans"]["span"].is_array(), "{v}");
    for (id, ty, reason) in [
        ("box", "box", "box_unsupported"),
        ("track", "track", "track_unsupported"),
        ("bad", "set", "question_malformed"),
        ("adapter", "noul", "decision_adapter_unsupported"),
    ] {
        assert_eq!(a[id]["type"], ty, "{id}: {}", a[id]);
        assert_eq!(a[id]["error"], "invalid_question", "{id}");
        assert_eq!(a[id]["reason"], reason, "{id}");
        assert!(a[id]["message"].is_string());
    }
    assert_eq!(a["bad"]["message"], "set questions do not take ['colour']");
}

#[tokio::test]
async fn decisions_with_no_valid_question_is_400() {
    let s = shared();
    let body = json!({"state": "x", "questions": {"a": {"type": "boolean"}, "b": {"type": "box", "instructions": "x"}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_request");
    assert_eq!(v["error"]["question"], "a");
    assert_eq!(v["error"]["reason"], "question_malformed");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("box_unsupported"));
}

#[tokio::test]
async fn systemone_fails_the_request_on_a_failed_question() {
    let s = shared();
    let body = json!({"state": TICKET, "questions": {"ok": noul("Refund?"), "where": {"type": "box", "instructions": "logo"},
        "bad": {"type": "choice", "criteria": {"only": null}}}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["code"], "question_failed");
    assert_eq!(v["question"], "where");
    assert_eq!(v["reason"], "box_unsupported");
    let detail = v["detail"].as_array().unwrap();
    assert_eq!(detail.len(), 2, "every failed question is listed");
    assert_eq!(detail[0]["loc"], json!(["body", "questions", "where"]));
    assert!(v["message"].as_str().unwrap().contains("bad"));
}

#[tokio::test]
async fn set_questions_answer_nouls_sets_and_thresholds() {
    let s = shared();
    let body = json!({"state": "My card was charged twice and the parcel never arrived.", "questions": {"problems": {
        "type": "set", "instructions": "Which problems does the customer report?", "threshold": 0.3,
        "labels": [{"key": "billing", "description": "A payment problem"}, {"key": "shipping", "description": "A delivery problem"}]}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    for l in ["billing", "shipping"] {
        assert_eq!(v["answers"][format!("problems.{l}")]["type"], "noul");
        let p = v["answers"][format!("problems.{l}")]["noul"]
            .as_f64()
            .unwrap();
        assert_eq!(
            v["sets"]["problems"]["probabilities"][l].as_f64().unwrap(),
            p
        );
        let selected = v["sets"]["problems"]["selected"]
            .as_array()
            .unwrap()
            .contains(&json!(l));
        assert_eq!(selected, p >= 0.3);
    }
    assert_eq!(v["thresholds"]["problems"], 0.3);
}

#[tokio::test]
async fn batch_states_answer_each_entry_with_total_usage() {
    let s = shared();
    let q = json!({"relevance": noul("Does the candidate passage help answer the request?")});
    let body = json!({"states": {
        "doc_1": {"state": {"request": "How long is the refund window?", "candidate": "Refunds within 30 days."}, "questions": q},
        "doc_2": {"state": {"request": "How long is the refund window?", "candidate": "Offices close on holidays."}, "questions": q}},
        "roles": {"request": "user", "candidate": "context"}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let u1 = v["states"]["doc_1"]["usage"]["input_tokens"]
        .as_u64()
        .unwrap();
    let u2 = v["states"]["doc_2"]["usage"]["input_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(v["usage"]["input_tokens"].as_u64().unwrap(), u1 + u2);
    assert_eq!(v["states"]["doc_2"]["answers"]["relevance"]["type"], "noul");
    assert!(v.get("answers").is_none());
    let mixed = json!({"state": "x", "states": {"a": {"state": "y", "questions": q}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &mixed).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_request");
}

#[tokio::test]
async fn systemone_batch_answers_each_request_as_alone() {
    let s = shared();
    let body = json!({"model": test_model(), "requests": {
        "first": {"state": TICKET, "questions": {"r": noul("Refund?")}},
        "second": {"state": TICKET, "questions": {"w": {"type": "box", "instructions": "logo"}}}}});
    let (status, _, v) = post(&s.url("/v1/systemone/batch"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["responses"]["first"]["answers"]["r"]["type"], "noul");
    assert_eq!(v["responses"]["second"]["status"], 422);
    assert_eq!(v["responses"]["second"]["code"], "question_failed");
    assert_eq!(v["responses"]["second"]["state"], "second");
}

#[tokio::test]
async fn strict_decoding_refuses_unknown_members_and_removed_forms() {
    let s = shared();
    let base = json!({"state": "x", "questions": {"q": noul("?")}});
    let mut unknown = base.clone();
    unknown["seed"] = json!(7);
    let (status, _, v) = post(&s.url("/v1/systemone"), &unknown).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("\"seed\""));
    for (field, value, replacement) in [
        ("images", json!([]), "assets"),
        ("videos", json!([]), "assets"),
        ("states", json!({}), "/v1/systemone/batch"),
        (
            "options",
            json!({"long_context": true}),
            "TypeSafe-Danger-Zone-Long-Context",
        ),
    ] {
        let mut b = base.clone();
        b[field] = value;
        let (status, _, v) = post(&s.url("/v1/systemone"), &b).await;
        assert_eq!(status, 400, "{field}: {v}");
        assert_eq!(v["reason"], "removed_form");
        assert!(v["message"].as_str().unwrap().contains(replacement), "{v}");
    }
    for (form, value) in [
        ("choices", json!([{"key": "a"}, {"key": "b"}])),
        ("levels", json!(["a", "b"])),
        ("labels", json!([{"key": "a"}])),
    ] {
        let ty = match form {
            "choices" => "choice",
            "levels" => "score",
            _ => "set",
        };
        let b = json!({"state": "x", "questions": {"q": {"type": ty, form: value}}});
        let (status, _, v) = post(&s.url("/v1/systemone"), &b).await;
        assert_eq!(status, 400, "{form}: {v}");
        assert!(v["message"].as_str().unwrap().contains("criteria"));
    }
}

#[tokio::test]
async fn malformed_bodies_are_refused_not_crashed() {
    let s = shared();
    let (status, _, v) = post_raw(&s.url("/v1/decisions"), b"{\"state\": ".to_vec(), &[]).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_request");
    let (status, _, v) = post_raw(&s.url("/v1/systemone"), b"not json".to_vec(), &[]).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["detail"][0]["loc"][0], "body");
    for body in [
        json!({"questions": {"q": noul("?")}}),
        json!({"state": "x"}),
        json!({"state": "x", "questions": {}}),
        json!([1]),
    ] {
        let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
        assert_eq!(status, 422, "{body}: {v}");
        assert!(v["detail"].is_array());
    }
    let (status, _, v) = post_raw(
        &s.url("/v1/decisions"),
        b"{}".to_vec(),
        &[("content-encoding", "br")],
    )
    .await;
    assert_eq!(status, 415, "{v}");
    assert_eq!(v["error"]["code"], "unsupported_media_type");
}

#[tokio::test]
async fn return_meta_adds_identity_and_timings() {
    let s = shared();
    let body =
        json!({"state": "x", "questions": {"q": noul("?")}, "options": {"return_meta": true}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let meta = &v["meta"];
    assert_eq!(meta["engine"], "llama.cpp");
    assert_eq!(meta["numerics"], "exact");
    assert!(meta["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(meta["timings"]["forward_ms"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn deadline_passed_before_the_work_started_is_deadline_exceeded() {
    let s = shared();
    let body = json!({"state": TICKET, "questions": {"q": noul("?"), "bad": {"type": "boolean"}}, "options": {"deadline_ms": 0}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["q"]["error"], "deadline_exceeded");
    assert_eq!(v["answers"]["q"]["reason"], "deadline");
    assert_eq!(v["answers"]["bad"]["error"], "invalid_question");
    let body =
        json!({"state": TICKET, "questions": {"q": noul("?")}, "options": {"deadline_ms": 0}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 504, "{v}");
    assert_eq!(v["question_error"], "deadline_exceeded");
}

#[tokio::test]
async fn models_health_and_metrics() {
    let s = shared();
    let (status, v) = get(&s.url("/v1/models")).await;
    assert_eq!(status, 200);
    assert_eq!(v["api_version"], "5.0.0");
    let m = &v["models"][0];
    for k in ["name", "description", "release_date"] {
        assert!(m[k].is_string(), "{k}: {m}");
    }
    assert_eq!(m["version"], "5.0");
    assert!(m["features"].as_array().unwrap().contains(&json!("choice")));
    assert_eq!(m["card"]["usage"], "state_once");
    assert_eq!(
        m["card"]["numerics"], "exact",
        "measured by the load-time self-check"
    );
    assert!(m["card"]["limits"]["max_request_tokens"].as_u64().unwrap() > 0);
    // The attention path and micro-batch the answers are computed with; flash attention was
    // measured at load and kept on only where it is faster and reads the same logits.
    let args = &m["card"]["engine_args"];
    assert_eq!(args["micro_batch_tokens"], 512, "{m}");
    let probe = &args["flash_attention_probe"];
    let (off, on) = (
        probe["off_ms"].as_f64().unwrap(),
        probe["on_ms"].as_f64().unwrap(),
    );
    assert!(off > 0.0 && on > 0.0, "{probe}");
    assert!(probe["tokens"].as_u64().unwrap() >= 64, "{probe}");
    let kept = probe["same_argmax"] == true
        && probe["max_logit_difference"].as_f64().unwrap() <= 1.0
        && on < off * 0.97;
    assert_eq!(args["flash_attention"], kept, "{probe}");
    assert!(m["card"]["aliases"]
        .as_array()
        .unwrap()
        .contains(&json!("jev-latest")));
    let (status, v2) = get(&s.url("/v1/systemone/models")).await;
    assert_eq!(status, 200);
    assert_eq!(v2["models"][0]["name"], m["name"]);
    let (status, h) = get(&s.url("/health")).await;
    assert_eq!(status, 200);
    assert_eq!(h["status"], "ready");
    assert_eq!(h["api_version"], "5.0.0");
    assert_eq!(h["version"], "5.0", "the extension set version: {h}");
    let (status, l) = get(&s.url("/health/live")).await;
    assert_eq!(status, 200);
    assert_eq!(l["status"], "alive");
    let _ = post(
        &s.url("/v1/decisions"),
        &json!({"state": "x", "questions": {"q": noul("?")}}),
    )
    .await;
    let text = get_text(&s.url("/metrics")).await;
    assert!(text.contains("vllm_srun_requests_total"), "{text}");
    for name in [
        "vllm_srun_phase_seconds",
        "vllm_srun_input_tokens_total",
        "vllm_srun_batch_tokens",
        "vllm_srun_queue_jobs",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test]
async fn gzip_and_zstd_bodies_are_read() {
    use std::io::Write;
    let s = shared();
    let body =
        serde_json::to_vec(&json!({"state": TICKET, "questions": {"q": noul("Refund?")}})).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&body).unwrap();
    let (status, _, v) = post_raw(
        &s.url("/v1/decisions"),
        gz.finish().unwrap(),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let z = zstd::encode_all(&body[..], 3).unwrap();
    let (status, _, v) =
        post_raw(&s.url("/v1/systemone"), z, &[("content-encoding", "zstd")]).await;
    assert_eq!(status, 200, "{v}");
    let (status, _, v) = post_raw(
        &s.url("/v1/decisions"),
        body,
        &[("content-encoding", "gzip, zstd")],
    )
    .await;
    assert_eq!(status, 415, "{v}");
}

#[tokio::test]
async fn arbitrary_bodies_never_get_a_5xx() {
    let s = shared();
    // A small deterministic generator: random bytes, truncated JSON and odd-but-valid JSON.
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    let valid = serde_json::to_vec(&json!({"state": "x", "questions": {"q": noul("?")}})).unwrap();
    let odd = [
        json!(null),
        json!(1),
        json!("s"),
        json!({"state": {}, "questions": {"q": {}}}),
        json!({"state": [], "questions": {"q": {"type": "choice", "criteria": []}}}),
        json!({"state": "x", "questions": {"q": {"type": "score", "criteria": [null, null]}}}),
        json!({"states": {"a": {"state": 1, "questions": {}}}}),
        json!({"requests": {"a": 1}}),
        json!({"requests": {}}),
        json!({"state": "x", "questions": {"q": {"type": "set", "criteria": {"a": 1}, "threshold": 7}}}),
    ];
    for path in ["/v1/decisions", "/v1/systemone", "/v1/systemone/batch"] {
        for _ in 0..25 {
            let n = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            let (status, _, _) = post_raw(&s.url(path), bytes, &[]).await;
            assert!(status < 500, "{path}: random bytes got {status}");
            let cut = (next() as usize) % valid.len();
            let (status, _, _) = post_raw(&s.url(path), valid[..cut].to_vec(), &[]).await;
            assert!(status < 500, "{path}: truncated JSON got {status}");
        }
        for v in &odd {
            let (status, _, body) = post(&s.url(path), v).await;
            assert!(status < 500, "{path}: {v} got {status}: {body}");
        }
    }
}

/// Flash attention forced on and forced off: each path passes the load-time self-check
/// (`numerics: exact`), gives a question the same bits beside other questions, and both read
/// nearly the same probabilities.
#[tokio::test]
async fn both_attention_paths_are_exact_and_agree() {
    let mut answers = Vec::new();
    for flash in [true, false] {
        let mut o = options();
        o.flash_attention = Some(flash);
        let s = start(o);
        let (status, v) = get(&s.url("/v1/models")).await;
        assert_eq!(status, 200);
        let card = &v["models"][0]["card"];
        assert_eq!(card["engine_args"]["flash_attention"], flash, "{card}");
        assert!(card["engine_args"]["flash_attention_probe"].is_null());
        assert_eq!(card["numerics"], "exact", "flash attention {flash}");
        let alone = json!({"state": TICKET, "questions": {"team": team()}});
        let crowded = json!({"state": TICKET, "questions": {"a": anger(), "team": team(), "c": noul("Polite?")}});
        let (sa, _, a) = post(&s.url("/v1/systemone"), &alone).await;
        let (sc, _, c) = post(&s.url("/v1/systemone"), &crowded).await;
        assert_eq!((sa, sc), (200, 200), "{a} {c}");
        assert!(a["answers"]["team"]["probabilities"].is_object(), "{a}");
        assert_eq!(
            a["answers"]["team"], c["answers"]["team"],
            "flash attention {flash}"
        );
        answers.push(a["answers"]["team"]["probabilities"].clone());
    }
    let keys: Vec<&String> = answers[0].as_object().unwrap().keys().collect();
    for k in keys {
        let (x, y) = (
            answers[0][k].as_f64().unwrap(),
            answers[1][k].as_f64().unwrap(),
        );
        assert!(
            (x - y).abs() < 0.05,
            "{k}: {x} with flash attention, {y} without"
        );
    }
}

/// The `cached;desc=N` entry of a Server-Timing header: tokens the prefix cache answered.
fn cached_tokens(headers: &reqwest::header::HeaderMap) -> u64 {
    let timing = headers["server-timing"].to_str().unwrap();
    timing
        .split(", ")
        .find_map(|e| e.strip_prefix("cached;desc="))
        .unwrap_or_else(|| panic!("no cached entry in {timing}"))
        .parse()
        .unwrap()
}

/// A question asked twice in one request (under two ids) is one branch of the forward: each
/// answer has the bits the question gets asked once, and Server-Timing counts the copies'
/// tokens as not evaluated.
#[tokio::test]
async fn a_question_asked_twice_is_evaluated_once() {
    let mut o = options();
    o.prefix_cache_tokens = 0;
    let s = start(o);
    let once = json!({"state": TICKET, "questions": {"team": team(), "refund": noul("Refund?")}});
    let twice = json!({"state": TICKET, "questions": {
        "team": team(), "refund": noul("Refund?"), "team-2": team(), "refund-2": noul("Refund?")}});
    let (s1, h1, v1) = post(&s.url("/v1/decisions"), &once).await;
    let (s2, h2, v2) = post(&s.url("/v1/decisions"), &twice).await;
    assert_eq!((s1, s2), (200, 200), "{v1} {v2}");
    assert!(v1["answers"]["team"]["probabilities"].is_object(), "{v1}");
    for (id, copy) in [("team", "team-2"), ("refund", "refund-2")] {
        assert_eq!(v2["answers"][id], v1["answers"][id], "{id}");
        assert_eq!(v2["answers"][copy], v1["answers"][id], "{copy}");
    }
    assert_eq!(cached_tokens(&h1), 0, "no cache, no copy: all evaluated");
    let copies = v2["usage"]["input_tokens"].as_u64().unwrap()
        - v1["usage"]["input_tokens"].as_u64().unwrap();
    assert!(copies > 10, "{v1} {v2}");
    assert_eq!(cached_tokens(&h2), copies, "the copies are not evaluated");
}

/// The prefix cache keeps a state's cells across requests, exact by construction: the same
/// body answered by a server without the cache (cold), twice by one with it (the second
/// warm: its state comes from the cache), and inside a `states` batch gives the same bits; a
/// new question about a cached state evaluates only the question; Server-Timing and /metrics
/// say how many tokens the cache answered; the cache stays within the budget the card states.
#[tokio::test]
async fn answers_are_the_same_bits_cold_warm_and_batched() {
    let mut o = options();
    o.prefix_cache_tokens = 0;
    let cold = start(o);
    let mut o = options();
    o.prefix_cache_tokens = 8192;
    let warm = start(o);
    let state =
        "Order 5521 arrived with a cracked screen. I want my money back, not a replacement.";
    let questions = json!({"team": team(), "anger": anger(), "refund": noul("Refund?")});
    let body = json!({"state": state, "questions": questions});
    let (s0, h0, v0) = post(&cold.url("/v1/decisions"), &body).await;
    let (s1, h1, v1) = post(&warm.url("/v1/decisions"), &body).await;
    let (s2, h2, v2) = post(&warm.url("/v1/decisions"), &body).await;
    assert_eq!((s0, s1, s2), (200, 200, 200), "{v0} {v1} {v2}");
    assert!(v0["answers"]["team"]["probabilities"].is_object(), "{v0}");
    assert_eq!(cached_tokens(&h0), 0, "no cache: nothing cached");
    assert_eq!(
        cached_tokens(&h1),
        0,
        "the first request finds an empty cache"
    );
    // The second finds its state and every question (a repeated body costs no forward).
    let all_tokens = cached_tokens(&h2);
    assert!(all_tokens > 10, "{all_tokens}");
    assert_eq!(v0["answers"], v1["answers"], "cold and first");
    assert_eq!(v0["answers"], v2["answers"], "cold and warm");
    // In a batch, beside another state.
    let batch = json!({"states": {
        "other": {"state": "Where is my parcel?", "questions": questions},
        "same": {"state": state, "questions": questions}}});
    let (sb, hb, vb) = post(&warm.url("/v1/decisions"), &batch).await;
    assert_eq!(sb, 200, "{vb}");
    assert_eq!(vb["states"]["same"]["answers"], v0["answers"], "batched");
    assert!(cached_tokens(&hb) >= all_tokens);
    // Another question about the same state: only the question is evaluated.
    let other = json!({"state": state, "questions": {"polite": noul("Is the customer polite?")}});
    let (so, ho, vo) = post(&warm.url("/v1/decisions"), &other).await;
    let (sc, _, vc) = post(&cold.url("/v1/decisions"), &other).await;
    assert_eq!((so, sc), (200, 200), "{vo} {vc}");
    let state_tokens = cached_tokens(&ho);
    let input = vo["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        state_tokens > 10 && state_tokens < input,
        "{state_tokens} of {input}"
    );
    assert_eq!(vo["answers"], vc["answers"]);
    // A state that continues a cached one (a conversation with one more message) starts from
    // its cells for every whole micro-batch they share, and evaluates the rest into the same
    // bits as a cold forward.
    let (_, cards) = get(&warm.url("/v1/models")).await;
    let block = cards["models"][0]["card"]["engine_args"]["micro_batch_tokens"]
        .as_u64()
        .unwrap();
    // Each line is more than ten tokens: the state is more than a micro-batch.
    let long: String = (0..block / 10 + 4)
        .map(|i| format!("user: Message {i} about order 5521 and its cracked screen.\n"))
        .collect();
    let longer = format!("{long}assistant: Sorry to hear that.\nuser: So, a refund?");
    let ask = |state: &str| json!({"state": state, "questions": {"team": team(), "refund": noul("Refund?")}});
    let (s1, _, v1) = post(&warm.url("/v1/decisions"), &ask(&long)).await;
    let (s2, h2, v2) = post(&warm.url("/v1/decisions"), &ask(&longer)).await;
    let (s3, _, v3) = post(&cold.url("/v1/decisions"), &ask(&longer)).await;
    assert_eq!((s1, s2, s3), (200, 200, 200), "{v1} {v2} {v3}");
    let shared = cached_tokens(&h2);
    assert!(
        shared >= block && shared.is_multiple_of(block),
        "{shared} of blocks of {block}"
    );
    assert_eq!(
        v2["answers"], v3["answers"],
        "a continued state, warm and cold"
    );
    // The budget, in the card and in /metrics.
    let (_, cards) = get(&warm.url("/v1/models")).await;
    let budget = cards["models"][0]["card"]["engine_args"]["prefix_cache_bytes"]
        .as_u64()
        .unwrap();
    assert!(budget > 0, "{cards}");
    let (_, cards) = get(&cold.url("/v1/models")).await;
    assert_eq!(
        cards["models"][0]["card"]["engine_args"]["prefix_cache_bytes"],
        0
    );
    let text = get_text(&warm.url("/metrics")).await;
    let gauge = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    let held = gauge("vllm_srun_prefix_cache_bytes");
    assert!(held > 0.0 && held <= budget as f64, "{held} of {budget}");
    assert!(gauge("vllm_srun_prefix_cache_hit_tokens") >= (2 * all_tokens + state_tokens) as f64);
}
