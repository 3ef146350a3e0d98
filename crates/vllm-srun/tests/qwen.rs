//! Answers that need a real decision backbone: `qwen2.5-1.5b` (1.1 GB; fetch it with
//! `vllm-srun models pull qwen2.5-1.5b`). Ignored by default because CI fetches only the small
//! plumbing model; run with `cargo test -p vllm-srun --test qwen -- --ignored`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use serde_json::json;

#[tokio::test]
#[ignore = "needs the qwen2.5-1.5b package (1.1 GB)"]
async fn the_worker_api_example_is_answered_domain_code() {
    let mut o = common::options();
    o.models = vec!["qwen2.5-1.5b".into()];
    let s = common::start(o);
    let body = json!({
        "model": "qwen2.5-1.5b",
        "state": "Write a Python function that merges two sorted lists and explain its running time.",
        "questions": {
            "domain": {"type": "choice", "instructions": "Which domain does this request belong to?",
                "choices": [{"key": "code", "description": "Programming"}, {"key": "math", "description": "Mathematics"}, {"key": "other"}]},
            "reasoning": {"type": "noul", "instructions": "Does answering this request need multi-step reasoning?"},
            "difficulty": {"type": "score", "instructions": "How difficult is this request?", "levels": ["Trivial", "Moderate", "Hard"]}
        }
    });
    let (status, _, v) = common::post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let p = &v["answers"]["domain"]["probabilities"];
    assert_eq!(v["answers"]["domain"]["choice"], "code", "{v}");
    assert!(p["code"].as_f64().unwrap() > p["math"].as_f64().unwrap());
    assert!(p["code"].as_f64().unwrap() > p["other"].as_f64().unwrap());
}
