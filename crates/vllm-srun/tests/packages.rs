//! `--model` with a local package directory: weights plus `decision_config.json` and
//! `card.json`, as a user keeps one.

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
