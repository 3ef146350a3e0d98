use axum::http::StatusCode;
use body::BodyError;
use protocol::error::{reason, ErrorCode, ProtocolError, QuestionErrorKind, QuestionFailure};
use serde_json::json;

use crate::{ApiError, Code, Shape};

#[test]
fn a_code_names_its_status_and_retry_after_in_every_shape() {
    let busy = ApiError::new(Code::Overloaded, "busy").with_reason(reason::QUEUE_FULL);
    assert_eq!(
        busy.status_in(Shape::Internal),
        StatusCode::TOO_MANY_REQUESTS
    );
    // vllm-sr/5.0's overloaded process answers 529; the published face keeps 429.
    assert_eq!(busy.status_in(Shape::V5).as_u16(), 529);
    assert_eq!(busy.status_in(Shape::One), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.status_in(Shape::Sie), StatusCode::SERVICE_UNAVAILABLE);
    let r = busy.response(Shape::Internal);
    assert_eq!(r.headers()["retry-after"], "1");
    let r = ApiError::new(Code::NotReady, "loading").response(Shape::One);
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "5");
    // A rate limit names its own window.
    let r = ApiError::new(Code::RateLimitExceeded, "slow down")
        .retry_in(17)
        .response(Shape::Duo);
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "17");
    assert!(ApiError::new(Code::InvalidRequest, "x")
        .response(Shape::Internal)
        .headers()
        .get("retry-after")
        .is_none());
}

#[test]
fn a_failed_load_is_terminal_on_the_sie_face() {
    let e = ApiError::new(Code::NotReady, "failed").with_reason(reason::MODEL_LOAD_FAILED);
    assert_eq!(e.status_in(Shape::Sie), StatusCode::BAD_GATEWAY);
    assert_eq!(e.retry_after_in(Shape::Sie), None);
    assert_eq!(e.retry_after_in(Shape::Internal), Some(5));
    assert_eq!(e.body(Shape::Sie)["detail"]["code"], "MODEL_LOAD_FAILED");
}

#[test]
fn a_failed_question_takes_the_status_of_its_error() {
    let cases = [
        (QuestionErrorKind::InvalidQuestion, 422),
        (QuestionErrorKind::MaxLengthExceeded, 400),
        (QuestionErrorKind::InvalidModelOutput, 500),
        (QuestionErrorKind::Unavailable, 503),
        (QuestionErrorKind::DeadlineExceeded, 504),
    ];
    for (kind, status) in cases {
        let f = QuestionFailure::new(kind, reason::QUESTION_MALFORMED, "m");
        let e = ApiError::question_failed(&[("q", &f)], Some("s1")).unwrap();
        assert_eq!(e.status_in(Shape::V5).as_u16(), status, "{kind:?}");
        let b = e.body(Shape::V5);
        assert_eq!(b["code"], "question_failed");
        assert_eq!(b["question_error"], kind.as_str());
        if status == 422 {
            assert_eq!(
                b["detail"][0]["loc"],
                json!(["body", "requests", "s1", "questions", "q"])
            );
        } else {
            assert_eq!(b["detail"]["error_type"], "question_failed");
        }
    }
}

#[test]
fn a_schema_failure_is_422_under_v5_and_400_elsewhere() {
    let e: ApiError = ProtocolError::schema(&["questions"], "missing").into();
    assert_eq!(e.status_in(Shape::V5), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(e.status_in(Shape::Internal), StatusCode::BAD_REQUEST);
    assert_eq!(e.status_in(Shape::OpenAi), StatusCode::BAD_REQUEST);
    let v = e.body(Shape::V5);
    assert_eq!(v["detail"][0]["loc"], json!(["body", "questions"]));
    assert_eq!(v["detail"][0]["type"], "body_malformed");
    let o = e.body(Shape::OpenAi);
    assert_eq!(o["error"]["type"], "invalid_request_error");
    assert_eq!(o["error"]["param"], "questions");
    assert_eq!(o["error"]["code"], "body_malformed");
    let bad = ApiError::malformed("the body is not valid JSON");
    assert_eq!(bad.status_in(Shape::One), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        bad.body(Shape::Internal)["error"]["reason"],
        "body_malformed"
    );
}

#[test]
fn body_refusals_carry_their_reason_and_limit() {
    let cases = [
        (
            BodyError::TooLarge {
                limit: 10,
                what: "as sent",
            },
            413,
            "request_too_large",
            "body_too_large",
        ),
        (
            BodyError::Unsupported("br".into()),
            415,
            "unsupported_media_type",
            "encoding_unsupported",
        ),
        (
            BodyError::Malformed("x".into()),
            400,
            "invalid_request",
            "encoding_malformed",
        ),
        (
            BodyError::Multipart("x".into()),
            400,
            "invalid_request",
            "multipart_malformed",
        ),
        (
            BodyError::TimedOut(50),
            408,
            "invalid_request",
            "body_timeout",
        ),
    ];
    for (b, status, code, why) in cases {
        let e = ApiError::from(b);
        assert_eq!(e.status().as_u16(), status, "{why}");
        let v = e.body(Shape::Internal);
        assert_eq!(
            (v["error"]["code"].as_str(), v["error"]["reason"].as_str()),
            (Some(code), Some(why))
        );
        assert_eq!(e.body(Shape::OpenAi)["error"]["code"], why);
        assert_eq!(e.body(Shape::Duo)["error"]["code"], code);
        assert_eq!(e.body(Shape::Duo)["error"]["reason"], why);
    }
    let big = ApiError::from(BodyError::TooLarge {
        limit: 10,
        what: "as sent",
    });
    assert_eq!(big.body(Shape::One)["limit"], 10);
}

#[test]
fn the_published_face_calls_a_model_with_no_ready_worker_unavailable() {
    let e = ApiError::new(ErrorCode::NotReady, "no worker");
    assert_eq!(e.body(Shape::One)["code"], "model_unavailable");
    assert_eq!(e.body(Shape::V5)["code"], "not_ready");
    assert_eq!(e.body(Shape::Internal)["error"]["code"], "not_ready");
}

#[test]
fn openai_types_by_status() {
    let t = |c: Code| ApiError::new(c, "m").body(Shape::Duo)["error"]["type"].clone();
    assert_eq!(t(Code::InvalidApiKey), "authentication_error");
    assert_eq!(t(Code::ConcurrencyLimit), "rate_limit_error");
    assert_eq!(t(Code::Timeout), "server_error");
    assert_eq!(t(Code::RequestTooLong), "invalid_request_error");
    let nf = ApiError::new(Code::ModelNotFound, "m").body(Shape::OpenAi);
    assert_eq!(nf["error"]["code"], "model_not_found");
    assert_eq!(ApiError::no_route().status(), StatusCode::NOT_FOUND);
}
