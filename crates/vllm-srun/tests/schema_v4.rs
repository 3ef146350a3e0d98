//! A worker started with `--systemone-schema vllm-sr/4.0`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn v4_reads_the_earlier_forms_and_answers_errors_with_error_and_detail() {
    let mut o = options();
    o.schema = protocol::Schema::V4;
    let s = start(o);
    let body = json!({"state": TICKET, "options": {"long_context": true}, "questions": {
        "team": {"type": "choice", "instructions": "Which team?", "choices": [{"key": "billing"}, {"key": "tech", "description": "Bugs"}]},
        "anger": {"type": "score", "instructions": "How angry?", "levels": ["Calm", "Angry"]}}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answers"]["team"]["type"], "choice");
    assert_eq!(v["answers"]["anger"]["legend"]["1"], "Angry");
    let bad = json!({"state": TICKET, "questions": {"w": {"type": "box", "instructions": "logo"}}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &bad).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["error"]["code"], "question_failed");
    assert_eq!(v["error"]["reason"], "box_unsupported");
    assert_eq!(v["code"], "question_failed");
    assert!(v["detail"].is_array());
    let (status, m) = get(&s.url("/v1/models")).await;
    assert_eq!(status, 200);
    assert!(m["data"].is_array(), "4.0 keeps the OpenAI data list");
}
