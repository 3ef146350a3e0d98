//! `--model` with a local package directory: weights plus `decision_config.json` and
//! `card.json`, as a user keeps one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn a_package_directory_is_served_with_its_config_and_card() {
    let cached = hub::resolve(&test_model(), true).expect("the test model is cached");
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-pkg-{}", std::process::id()))
        .join("my-decider");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&cached.weights, dir.join("weights.gguf")).unwrap();
    std::fs::write(
        dir.join("decision_config.json"),
        json!({"system_prompt": "You answer questions about support tickets.", "temperature": {"choice": 2.0},
               "question_types": ["choice", "noul", "score"]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("card.json"),
        json!({"description": "A local decider", "release_date": "2026-11-29", "aliases": ["local-decider"], "license": "apache-2.0"}).to_string(),
    )
    .unwrap();
    let mut o = options();
    o.models = vec![dir.to_string_lossy().into_owned()];
    let s = start(o);
    let (_, m) = get(&s.url("/v1/models")).await;
    let entry = &m["models"][0];
    assert_eq!(entry["name"], "my-decider");
    assert_eq!(entry["description"], "A local decider");
    assert_eq!(entry["release_date"], "2026-11-29");
    assert_eq!(entry["features"], json!(["choice", "noul", "score"]));
    assert!(
        entry["card"]["sha256"].as_str().unwrap().len() == 64,
        "digest computed for local weights"
    );
    let body = json!({"model": "local-decider", "state": TICKET, "questions": {
        "s": {"type": "set", "instructions": "?", "criteria": {"a": null}},
        "q": {"type": "noul", "instructions": "Refund?"}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["model"], "my-decider");
    assert_eq!(
        v["answers"]["s"]["error"], "invalid_question",
        "set is not in this package's question_types"
    );
    assert_eq!(v["answers"]["q"]["type"], "noul");
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A package directory of the test model with this `decision_config.json`.
fn package(name: &str, config: serde_json::Value) -> std::path::PathBuf {
    let cached = hub::resolve(&test_model(), true).expect("the test model is cached");
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-pkg-{}-{name}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&cached.weights, dir.join("weights.gguf")).unwrap();
    std::fs::write(dir.join("decision_config.json"), config.to_string()).unwrap();
    std::fs::write(dir.join("card.json"), "{}").unwrap();
    dir
}

/// The package's choice temperature acts: the same question on the same weights, read at
/// temperature 2 instead of 1, gives exactly the square-root-flattened distribution.
#[tokio::test]
async fn a_package_temperature_changes_the_answer_as_it_says() {
    let plain = package("plain", json!({"question_types": ["choice", "noul"]}));
    let warm = package(
        "warm",
        json!({"question_types": ["choice", "noul"], "temperature": {"choice": 2.0}}),
    );
    let mut o = options();
    o.models = vec![
        plain.to_string_lossy().into_owned(),
        warm.to_string_lossy().into_owned(),
    ];
    let s = start(o);
    let q = json!({"team": {"type": "choice", "instructions": "Which team should handle this ticket?",
        "criteria": {"billing": "Payments and refunds", "engineering": "Outages and bugs", "sales": "New contracts"}}});
    let mut probs = Vec::new();
    for m in ["plain", "warm"] {
        let (st, _, v) = post(
            &s.url("/v1/systemone"),
            &json!({"model": m, "state": TICKET, "questions": q}),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        probs.push(v["answers"]["team"]["probabilities"].clone());
    }
    let keys = ["billing", "engineering", "sales"];
    let p1: Vec<f64> = keys.iter().map(|k| probs[0][k].as_f64().unwrap()).collect();
    let p2: Vec<f64> = keys.iter().map(|k| probs[1][k].as_f64().unwrap()).collect();
    let z: f64 = p1.iter().map(|p| p.sqrt()).sum();
    for (a, b) in p1.iter().zip(&p2) {
        assert!((a.sqrt() / z - b).abs() < 1e-6, "T=1 {p1:?} vs T=2 {p2:?}");
    }
    assert!(p1 != p2, "the temperature changed nothing");
    for d in [plain, warm] {
        std::fs::remove_dir_all(d.parent().unwrap()).unwrap();
    }
}

/// A config the engine cannot honour fails the load, and says why.
#[tokio::test]
async fn a_package_config_that_cannot_act_fails_the_load() {
    let bad = package("bad", json!({"temperature": {"noul": 0.0}}));
    let mut o = options();
    o.models = vec![bad.to_string_lossy().into_owned()];
    let s = start_unready(o);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (_, h) = get(&s.url("/health")).await;
        if h["status"] == "failed" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{h}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (_, m) = get(&s.url("/v1/models")).await;
    let err = m["models"][0]["last_error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(err.contains("temperature.noul"), "{m}");
    std::fs::remove_dir_all(bad.parent().unwrap()).unwrap();
}
