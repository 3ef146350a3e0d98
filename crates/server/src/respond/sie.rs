//! SIE's answers: msgpack (`Content-Type: application/msgpack`) unless the client sends
//! `Accept: application/json`; errors as `{"detail": {"code", "message"}}` with SIE's codes;
//! `X-Trace-ID` from the caller's `traceparent`.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::error::{invalid, ApiError, Shape};

pub(crate) const MSGPACK: &str = "application/msgpack";

fn is_msgpack(v: Option<&HeaderValue>) -> bool {
    v.and_then(|v| v.to_str().ok())
        .is_some_and(|s| s.contains("msgpack"))
}

/// Whether the answer is JSON: only when the client asks for it.
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/json") && !a.contains("msgpack"))
}

pub(crate) fn decode(headers: &HeaderMap, bytes: &[u8]) -> Result<Value, ApiError> {
    if is_msgpack(headers.get(header::CONTENT_TYPE)) {
        rmp_serde::from_slice(bytes)
            .map_err(|e| invalid(format!("the msgpack body does not decode: {e}")))
    } else {
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_json(&e))
    }
}

pub(crate) fn encode(headers: &HeaderMap, status: StatusCode, v: &Value) -> Response {
    let (ct, body) = if wants_json(headers) {
        (
            "application/json",
            serde_json::to_vec(v).unwrap_or_default(),
        )
    } else {
        (MSGPACK, rmp_serde::to_vec_named(v).unwrap_or_default())
    };
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

/// An error in the SIE family, in msgpack or JSON as the caller asked, with Retry-After.
pub(crate) fn error_response(headers: &HeaderMap, e: ApiError) -> Response {
    let mut r = encode(headers, e.status_in(Shape::Sie), &e.body(Shape::Sie));
    if let Some(s) = e.retry_after_in(Shape::Sie) {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

pub(crate) fn ms(d: std::time::Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

/// The error answers every SIE endpoint documents: `{"detail": {"code", "message"}}` in
/// msgpack or JSON, by status.
pub(crate) struct SieErrors;

impl utoipa::IntoResponses for SieErrors {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
        let body = || {
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("SieErrorDoc")))
                .build()
        };
        [
            ("400", "INVALID_INPUT or INPUT_TOO_LONG"),
            ("404", "MODEL_NOT_FOUND"),
            ("413", "INVALID_INPUT: body over --max-request-bytes"),
            ("415", "INVALID_INPUT: content coding not read"),
            ("500", "INFERENCE_ERROR, INTERNAL_ERROR"),
            ("502", "MODEL_LOAD_FAILED"),
            ("503", "MODEL_NOT_LOADED, MODEL_LOADING, QUEUE_FULL"),
        ]
        .into_iter()
        .map(|(status, description)| {
            let r = ResponseBuilder::new()
                .description(description)
                .content(MSGPACK, body())
                .content("application/json", body())
                .build();
            (status.to_string(), r.into())
        })
        .collect()
    }
}

/// `X-Trace-ID` on an SIE answer: the trace id of the caller's W3C `traceparent` when it sent
/// a valid one (so the answer joins the caller's trace), else a new random one, in the same
/// form (32 lowercase hex digits).
pub(crate) fn set_trace_id(request: &HeaderMap, response: &mut HeaderMap) {
    let sent = request
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.split('-').nth(1))
        .filter(|id| {
            id.len() == 32
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && id.bytes().any(|b| b != b'0')
        })
        .map(str::to_string);
    let id = sent.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.insert("x-trace-id", v);
    }
}
