//! Request-level refusals by reason word, on both error shapes (the internal form's
//! `{"error": {...}}` and vllm-sr/5.0's flat fields with the standard detail).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{post, post_raw, shared, TICKET};
use serde_json::json;

#[tokio::test]
async fn schema_failures_are_422_with_a_detail_list_under_5_0_and_400_internally() {
    let s = shared();
    let body = json!({"state": 7, "questions": {"q": {"type": "noul", "instructions": "?"}}});
    let (status, _, v) = post(&s.url("/v1/systemone"), &body).await;
    assert_eq!(status, 422, "{v}");
    assert_eq!(v["reason"], "body_malformed");
    assert_eq!(v["detail"][0]["loc"], json!(["body", "state"]));
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["reason"], "body_malformed");
}

#[tokio::test]
async fn unknown_members_and_mixed_forms_are_400_with_their_reason() {
    let s = shared();
    let q = json!({"q": {"type": "noul", "instructions": "?"}});
    let (status, _, v) = post(
        &s.url("/v1/systemone"),
        &json!({"state": "x", "questions": q, "temperature": 0}),
    )
    .await;
    assert_eq!(
        (status, v["reason"].as_str()),
        (400, Some("unknown_member")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("temperature"));
    let mixed =
        json!({"state": "x", "questions": q, "states": {"a": {"state": "y", "questions": q}}});
    let (status, _, v) = post(&s.url("/v1/decisions"), &mixed).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["reason"], "forms_mixed");
}

#[tokio::test]
async fn other_content_codings_are_415() {
    let s = shared();
    let body = br#"{"state": "x", "questions": {"q": {"type": "noul"}}}"#.to_vec();
    for enc in ["br", "gzip, gzip", "compress"] {
        let (status, h, v) = post_raw(
            &s.url("/v1/systemone"),
            body.clone(),
            &[("content-encoding", enc)],
        )
        .await;
        assert_eq!(status, 415, "{enc}: {v}");
        assert_eq!(v["code"], "unsupported_media_type");
        assert_eq!(v["reason"], "encoding_unsupported");
        assert!(h.contains_key("server-timing") && h.contains_key("x-request-id"));
    }
    let (status, _, v) = post_raw(
        &s.url("/v1/decisions"),
        b"not gzip at all".to_vec(),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["reason"], "encoding_malformed");
}

#[tokio::test]
async fn a_refused_batch_entry_fails_its_questions_with_input_malformed() {
    let s = shared();
    let q = json!({"q": {"type": "noul", "instructions": "Is a refund asked for?"}});
    let body = json!({"states": {
        "good": {"state": TICKET, "questions": q},
        "bad": {"state": "x", "images": ["data:image/png;base64,iVBORw0KGgo="], "questions": q},
    }});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    // worker-api.txt: an entry whose images are refused fails each of its questions with
    // invalid_input (input_malformed) and the refusal's message; the others are answered.
    assert_eq!(status, 200, "a refused image fails only its entry: {v}");
    let bad = &v["states"]["bad"]["answers"]["q"];
    assert_eq!(bad["error"], "invalid_input", "{v}");
    assert_eq!(bad["reason"], "input_malformed", "{v}");
    assert!(
        bad["message"].as_str().unwrap().contains("images[0]"),
        "{v}"
    );
    assert!(
        v["states"]["good"]["answers"]["q"]["noul"].is_number(),
        "{v}"
    );
    // Every entry refused: the first refusal answers the body.
    let all = json!({"states": {
        "bad": {"state": "x", "images": ["data:image/png;base64,iVBORw0KGgo="], "questions": q},
    }});
    let (status, _, v) = post(&s.url("/v1/decisions"), &all).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["reason"], "image_malformed");
    // A refusal found while reading the entry for the model (here: its modality) fails only
    // that entry's questions.
    let png = {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend(4u32.to_be_bytes());
        b.extend(4u32.to_be_bytes());
        b.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        b
    };
    use base64::Engine as _;
    let url = format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(png)
    );
    let body = json!({"states": {
        "good": {"state": TICKET, "questions": q},
        "bad": {"state": "x", "images": [url], "questions": q},
    }});
    let (status, _, v) = post(&s.url("/v1/decisions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["states"]["good"]["answers"]["q"]["type"], "noul");
    let bad = &v["states"]["bad"]["answers"]["q"];
    assert_eq!(bad["error"], "invalid_input", "{bad}");
    assert_eq!(bad["reason"], "input_malformed");
    assert!(bad["message"].as_str().unwrap().contains("image"));
}
