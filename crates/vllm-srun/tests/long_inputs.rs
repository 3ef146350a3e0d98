//! Long inputs: budgets, overflow (reject, truncate, window), scan budgets, usage lower
//! bounds, require_full_input and long context, against the real server and tokenizer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{json, Value};

fn noul(instructions: &str) -> Value {
    json!({"type": "noul", "instructions": instructions})
}

fn with(q: Value, extra: Value) -> Value {
    let mut q = q;
    for (k, v) in extra.as_object().unwrap() {
        q[k] = v.clone();
    }
    q
}

/// A long ticket thread: about 30 tokens per repetition.
fn thread(reps: usize) -> String {
    "Customer: my refund for order 4471 has still not arrived, please check it again. ".repeat(reps)
}

/// A server whose questions read at most ~510 tokens, with a 2,000-token scan budget.
fn small() -> TestServer {
    let mut o = options();
    o.context_tokens = 512;
    o.max_scan_tokens = Some(2000);
    start(o)
}

#[tokio::test]
async fn overflow_decides_how_a_state_over_budget_is_read() {
    let s = small();
    let q = noul("Is the customer waiting for a refund?");
    let body = json!({"state": thread(40), "questions": {
        "reject": q,
        "truncate": with(q.clone(), json!({"overflow": "truncate"})),
        "window": with(q.clone(), json!({"overflow": "window"})),
        "window_full": with(q.clone(), json!({"overflow": "window", "require_full_input": true})),
        "truncate_full": with(q.clone(), json!({"overflow": "truncate", "require_full_input": true})),
    }});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let a = &v["answers"];
    assert_eq!(a["reject"]["error"], "max_length_exceeded", "{a}");
    assert_eq!(a["reject"]["reason"], "question_tokens");
    assert!(a["reject"]["limit"].as_u64().unwrap() <= 512);
    assert_eq!(a["truncate"]["type"], "noul");
    assert!(a["truncate"]["noul"].is_number(), "{a}");
    assert!(a["truncate"].get("input_coverage").is_none());
    assert!(a["window"]["noul"].is_number(), "{a}");
    assert_eq!(a["window_full"]["input_coverage"], "complete", "{a}");
    assert_eq!(a["truncate_full"]["error"], "max_length_exceeded");
    assert_eq!(a["truncate_full"]["reason"], "input_incomplete");
    // The whole state was read (windows), so the count is not a lower bound.
    assert!(v["usage"].get("tokens_lower_bound").is_none(), "{v}");
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 700, "{v}");

    // Without a windowed question, a state far over budget is read in part: the count is
    // the tokens read, a lower bound.
    let body = json!({"state": thread(400), "questions": {"t": with(q.clone(), json!({"overflow": "truncate"}))}});
    let (_, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(v["usage"]["tokens_lower_bound"], true, "{v}");
    // /v1/systemone fails the request by the first failed question: 400 for
    // max_length_exceeded.
    let body = json!({"state": thread(40), "questions": {"q": q}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["question_error"], "max_length_exceeded");
    assert_eq!(v["reason"], "question_tokens");
}

#[tokio::test]
async fn a_windowed_state_over_the_scan_budget_is_not_read() {
    let s = small();
    let q = with(
        noul("Is a refund asked for?"),
        json!({"overflow": "window"}),
    );
    // Over the process's 2,000-token scan budget.
    let body = json!({"state": thread(200), "questions": {"q": q.clone(), "ok": with(q.clone(), json!({"overflow": "truncate"}))}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["q"]["error"], "scan_budget_exceeded");
    assert_eq!(v["answers"]["q"]["reason"], "scan_budget");
    assert_eq!(v["answers"]["q"]["limit"], 2000);
    // options.max_tokens sets another scan budget.
    let body =
        json!({"state": thread(40), "questions": {"q": q.clone()}, "options": {"max_tokens": 600}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["question_error"], "scan_budget_exceeded");
    assert_eq!(v["limit"], 600);
}

#[tokio::test]
async fn max_tokens_budgets_a_state_under_reject() {
    let s = shared();
    let q = noul("Is a refund asked for?");
    let body = json!({"state": thread(10), "questions": {"q": q}, "options": {"max_tokens": 100}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 400, "no valid question: {v}");
    assert_eq!(v["error"]["reason"], "question_tokens");
    assert_eq!(v["error"]["limit"], 100);
    let body = json!({"state": thread(2), "questions": {"q": noul("Is a refund asked for?")}, "options": {"max_tokens": 100}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn a_truncated_huge_text_answers_as_its_prefix_does() {
    let s = shared();
    let q = with(
        noul("Is the customer waiting for a refund?"),
        json!({"overflow": "truncate"}),
    );
    let budget = json!({"max_tokens": 256});
    let huge = thread(40_000); // ~3.3 MB
    let head: String = huge.chars().take(20_000).collect();
    let (s1, _, big) = post(
        &s.url("/v1/decisions"),
        &json!({"state": huge, "questions": {"q": q}, "options": budget}),
    )
    .await;
    let (s2, _, small) = post(
        &s.url("/v1/decisions"),
        &json!({"state": head, "questions": {"q": q}, "options": budget}),
    )
    .await;
    assert_eq!((s1, s2), (200, 200), "{big} {small}");
    assert_eq!(
        big["answers"]["q"], small["answers"]["q"],
        "the same first 256 tokens"
    );
    assert_eq!(big["usage"]["tokens_lower_bound"], true);
}

#[tokio::test]
async fn validated_length_by_default_max_input_with_long_context() {
    let cached = hub::resolve(&test_model(), true).expect("the test model is cached");
    let dir = std::env::temp_dir()
        .join(format!("vllm-srun-long-{}", std::process::id()))
        .join("validated-decider");
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::os::unix::fs::symlink(&cached.weights, dir.join("weights.gguf"));
    std::fs::write(
        dir.join("decision_config.json"),
        json!({"validated_input_tokens": 200}).to_string(),
    )
    .unwrap();
    let mut o = options();
    o.models = vec![dir.to_string_lossy().into_owned()];
    let s = start(o);
    let (_, m) = get(&s.url("/v1/models")).await;
    assert_eq!(
        m["models"][0]["card"]["limits"]["validated_input_tokens"], 200,
        "{m}"
    );
    let body = json!({"state": thread(10), "questions": {"q": noul("Is a refund asked for?")}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["reason"], "question_tokens");
    assert_eq!(v["limit"], 200);
    let (status, _, v) = post_raw(
        &s.url("/v1/systemone"),
        body.to_string().into_bytes(),
        &[("TypeSafe-Danger-Zone-Long-Context", "true")],
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let mut legacy = body.clone();
    legacy["options"] = json!({"long_context": true});
    let (status, _, v) = post(&s.url("/v1/decisions"), &legacy).await;
    assert_eq!(status, 200, "{v}");
}
