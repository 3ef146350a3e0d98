//! Sparrow static decision models served end to end over HTTP: answers equal the package's
//! own forward, are right on unambiguous cases, independent of other questions and requests,
//! and every decision surface that fits serves them; span, box and set are refused with their
//! reasons; long states follow overflow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};
use vllm_srun::Classifier;

fn server() -> &'static TestServer {
    static S: OnceLock<TestServer> = OnceLock::new();
    S.get_or_init(|| {
        let mut o = options();
        o.models = vec!["sparrow-nano".into(), "sparrow-nano-robot".into()];
        o.classifiers = vec![Classifier {
            name: "intent".into(),
            backbone: "sparrow-nano".into(),
            labels: vec!["billing".into(), "bug".into(), "shipping".into()],
            multi_label: false,
            instructions: Some("Primary intent?".into()),
            ..Classifier::default()
        }];
        start(o)
    })
}

fn intent() -> Value {
    json!({"type": "choice", "instructions": "Primary intent?",
        "criteria": {"billing": "charges, invoices, refunds", "bug": "a broken feature",
            "shipping": "delivery of a parcel"}})
}

fn refund() -> Value {
    json!({"type": "noul", "instructions": "Is the user asking for money back?"})
}

fn urgency() -> Value {
    json!({"type": "score", "instructions": "How urgent?", "criteria": ["not urgent", "soon", "now"]})
}

const CHARGED: &str = "I was charged twice for my subscription and I want my money back now!";
const CRASH: &str = "The app crashes every time I open the settings page.";

fn robot() -> Value {
    json!({"next": {"type": "choice", "instructions": "What should the robot do next?",
            "criteria": {"continue": null, "slow": null, "stop": null, "dock": null, "replan": null}},
        "low": {"type": "noul", "instructions": "Is the battery low?"}})
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_equal_the_package_forward_over_http() {
    let s = server();
    let fixtures: Value = serde_json::from_str(include_str!(
        "../../backend-sparrow/tests/fixtures/sparrow.json"
    ))
    .expect("fixtures");
    let mut checked = 0;
    // Every eighth recorded case of both models, through /v1/systemone.
    for case in fixtures["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .step_by(8)
    {
        let body = json!({"model": case["model"], "state": case["state"],
            "questions": {"q": case["question"]}});
        let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
        assert_eq!(status, 200, "{case}: {v}");
        let a = &v["answers"]["q"];
        let got: Vec<f64> = match a["type"].as_str() {
            Some("noul") => {
                let p = a["noul"].as_f64().expect("noul");
                vec![1.0 - p, p]
            }
            _ => a["probabilities"]
                .as_object()
                .expect("probabilities")
                .values()
                .map(|p| p.as_f64().expect("number"))
                .collect(),
        };
        let want: Vec<f64> = case["probabilities"]
            .as_array()
            .expect("probabilities")
            .iter()
            .map(|p| p.as_f64().expect("number"))
            .collect();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-4, "{case}: {v}");
        }
        checked += 1;
    }
    assert!(checked >= 50, "{checked}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unambiguous_cases_are_answered_right() {
    let s = server();
    let ask = |state: &str, model: &str, questions: Value| json!({"model": model, "state": state, "questions": questions});
    let (status, _, v) = post(
        &s.url("/v1/systemone"),
        &ask(
            CHARGED,
            "sparrow-nano",
            json!({"intent": intent(), "urgency": urgency()}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["intent"]["choice"], "billing", "{v}");
    assert!(
        v["answers"]["urgency"]["probabilities"]["2"]
            .as_f64()
            .unwrap()
            > 0.5
    );
    let (_, _, v) = post(
        &s.url("/v1/systemone"),
        &ask(CRASH, "sparrow-nano", json!({"intent": intent()})),
    )
    .await;
    assert_eq!(v["answers"]["intent"]["choice"], "bug", "{v}");

    let (_, _, low) = post(
        &s.url("/v1/systemone"),
        &ask(
            "battery: 6%\nfront_obstacle_m: 7.0\npath: clear",
            "sparrow-nano-robot",
            robot(),
        ),
    )
    .await;
    let (_, _, full) = post(
        &s.url("/v1/systemone"),
        &ask(
            "battery: 95%\nfront_obstacle_m: 7.0\npath: clear",
            "sparrow-nano-robot",
            robot(),
        ),
    )
    .await;
    assert_eq!(low["answers"]["next"]["choice"], "dock", "{low}");
    assert_eq!(full["answers"]["next"]["choice"], "continue", "{full}");
    assert!(
        low["answers"]["low"]["noul"].as_f64().unwrap() > 0.5,
        "{low}"
    );
    assert!(
        full["answers"]["low"]["noul"].as_f64().unwrap() < 0.5,
        "{full}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_do_not_depend_on_other_questions_or_requests() {
    let s = server();
    let alone = json!({"model": "sparrow-nano", "state": CHARGED, "questions": {"r": refund()}});
    let (status, _, a) = post(&s.url("/v1/decisions"), &alone).await;
    assert_eq!(status, 200, "{a}");
    let together = json!({"model": "sparrow-nano", "state": CHARGED,
        "questions": {"i": intent(), "renamed": refund(), "u": urgency()}});
    let (status, _, b) = post(&s.url("/v1/decisions"), &together).await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(a["answers"]["r"], b["answers"]["renamed"]);
    // A states batch answers each entry as its own request would.
    let batch = json!({"model": "sparrow-nano", "states": {
        "one": {"state": CRASH, "questions": {"i": intent()}},
        "two": {"state": CHARGED, "questions": {"r": refund()}}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &batch).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["states"]["two"]["answers"]["r"], a["answers"]["r"]);
    let (_, _, crash) = post(
        &s.url("/v1/decisions"),
        &json!({"model": "sparrow-nano", "state": CRASH, "questions": {"i": intent()}}),
    )
    .await;
    assert_eq!(v["states"]["one"]["answers"]["i"], crash["answers"]["i"]);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn span_box_and_set_are_refused_with_their_reasons() {
    let s = server();
    let body = json!({"model": "sparrow-nano", "state": CHARGED, "questions": {
        "r": refund(),
        "s": {"type": "set", "instructions": "Which apply?", "criteria": {"billing": null, "angry": null}},
        "p": {"type": "span", "criteria": {"amount": "a sum of money"}},
    }});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["s"]["reason"], "set_unsupported", "{v}");
    assert_eq!(v["answers"]["p"]["reason"], "span_unsupported", "{v}");
    assert!(v["answers"]["r"]["noul"].is_number());
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 422, "{v}");
}

/// A model's entry in `GET /v1/models`.
async fn listed(s: &TestServer, name: &str) -> Value {
    let (_, m) = get(&s.url("/v1/models")).await;
    m["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed: {m}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_card_says_what_the_model_answers() {
    let s = server();
    let nano = listed(s, "sparrow-nano").await;
    let card = &nano["card"];
    assert_eq!(card["question_types"], json!(["choice", "noul", "score"]));
    assert_eq!(card["limits"]["max_input_tokens"], 512);
    assert_eq!(card["engine"], "sparrow");
    assert_eq!(card["dtype"], "int8");
    assert_eq!(card["numerics"], "exact");
    assert_eq!(card["engine_args"]["execution"], "inline");
    assert_eq!(
        card["sha256"],
        "d1d3ee04cdfa58f325bb7f06b701df92bc29a3debea59743bf14a7a6215ef2e3"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn long_states_follow_overflow() {
    let s = server();
    let long = format!("{CHARGED} ").repeat(100);
    let ask = |overflow: Option<&str>| {
        let mut q = refund();
        if let Some(o) = overflow {
            q["overflow"] = json!(o);
        }
        json!({"model": "sparrow-nano", "state": long, "questions": {"r": q}})
    };
    let (status, _, v) = post(&s.url("/v1/decisions"), &ask(None)).await;
    assert_eq!(status, 400, "{v}");
    let mut truncated = intent();
    truncated["overflow"] = json!("truncate");
    let (_, _, v) = post(
        &s.url("/v1/decisions"),
        &json!({"model": "sparrow-nano", "state": long, "questions": {"r": refund(), "i": truncated}}),
    )
    .await;
    assert_eq!(v["answers"]["i"]["choice"], "billing", "{v}");
    assert_eq!(v["answers"]["r"]["error"], "max_length_exceeded", "{v}");
    assert_eq!(v["answers"]["r"]["limit"], 512, "{v}");
    let (status, _, t) = post(&s.url("/v1/decisions"), &ask(Some("truncate"))).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["usage"]["tokens_lower_bound"], true, "{t}");
    let (status, _, w) = post(&s.url("/v1/decisions"), &ask(Some("window"))).await;
    assert_eq!(status, 200, "{w}");
    assert!(
        w["usage"]["input_tokens"].as_u64().unwrap() > 512 * 2,
        "read whole in windows: {w}"
    );
    // The same text repeated: every window is the same reading, so the max over windows
    // is within rounding of the truncated answer.
    let (pt, pw) = (
        t["answers"]["r"]["noul"].as_f64().unwrap(),
        w["answers"]["r"]["noul"].as_f64().unwrap(),
    );
    assert!(pw >= pt - 0.05, "{pt} {pw}");
}

#[tokio::test(flavor = "multi_thread")]
async fn classify_and_sie_extract_read_a_sparrow_backbone() {
    let s = server();
    let (status, _, v) = post(
        &s.url("/v1/classify"),
        &json!({"model": "intent", "input": [CHARGED, CRASH]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["data"][0]["label"], "billing", "{v}");
    assert_eq!(v["data"][1]["label"], "bug", "{v}");
    let resp = client()
        .post(s.url("/v1/extract/sparrow-nano"))
        .header("accept", "application/json")
        .json(&json!({"items": [{"id": "c", "text": CRASH}],
            "params": {"labels": ["billing", "bug", "shipping"]}}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let v: Value = resp.json().await.expect("json");
    let c = v["items"][0]["classifications"]
        .as_array()
        .expect("classifications");
    assert_eq!(c.len(), 3, "{v}");
}

#[test]
fn a_sparrow_file_and_a_directory_serve_the_same_answers() {
    let file = hub::resolve("sparrow-nano", true).expect("cached").weights;
    let dir = std::env::temp_dir().join(format!("sparrow-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let status = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])",
        ])
        .arg(&file)
        .arg(&dir)
        .status()
        .expect("python3 runs");
    assert!(status.success());
    let mut o = options();
    o.models = vec![file.display().to_string(), dir.display().to_string()];
    o.aliases = vec![
        ("from-file".into(), file.display().to_string()),
        ("from-dir".into(), dir.display().to_string()),
    ];
    let s = start(o);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let answers: Vec<Value> = ["from-file", "from-dir"]
        .iter()
        .map(|m| {
            let body =
                json!({"model": m, "state": CHARGED, "questions": {"i": intent(), "r": refund()}});
            let (status, _, v) = rt.block_on(post(&s.url("/v1/decisions"), &body));
            assert_eq!(status, 200, "{v}");
            v["answers"].clone()
        })
        .collect();
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0]["i"]["choice"], "billing");
    std::fs::remove_dir_all(&dir).ok();
}

/// A question whose id is one of the package's router signals is asked as the package words it
/// (system-duo-api.txt, "Router signals"), whatever the request says: its answer is the one the
/// package's own wording gets, with the package's options; the card lists the signals.
#[tokio::test(flavor = "multi_thread")]
async fn router_signals_are_answered_in_the_packages_words() {
    let s = server();
    let url = s.url("/v1/decisions");
    let state = "Solve 3x + 5 = 20 for x.";
    let own = json!({"type": "choice", "instructions": "What kind of request is this?",
        "criteria": {"stem": "Mathematics, science, programming or another technical problem to solve",
            "writing": "Writing, editing, summarising or translating a text",
            "chat": "Small talk, greetings, opinions or an everyday question"}});
    let (st, _, plain) = post(
        &url,
        &json!({"model": "sparrow-nano", "state": state, "questions": {"mine": own}}),
    )
    .await;
    assert_eq!(st, 200, "{plain}");
    // Asked by the signal's id in other words, other options, even another type.
    let other = json!({"type": "noul", "instructions": "Is this about cooking?"});
    let (st, _, v) = post(
        &url,
        &json!({"model": "sparrow-nano", "state": state,
            "questions": {"vsr_task": other, "mine": refund()}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["answers"]["vsr_task"]["type"], "choice", "{v}");
    assert_eq!(
        v["answers"]["vsr_task"]["probabilities"], plain["answers"]["mine"]["probabilities"],
        "{v}"
    );
    assert_eq!(v["answers"]["vsr_task"]["choice"], "stem", "{v}");
    // Any other id keeps its own words.
    assert_eq!(v["answers"]["mine"]["type"], "noul");
    let card = listed(s, "sparrow-nano").await["card"].clone();
    assert_eq!(
        card["router_questions"]["vsr_task"]["instructions"],
        "What kind of request is this?"
    );
}
