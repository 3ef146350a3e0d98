//! The service's refusals and the one place they become status codes and OpenAI-shaped
//! bodies (`{"error": {message, type, param, code}}`), with Retry-After on every 429.

use ::body::BodyError;
use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Value};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(
        "a valid API key is needed: send it as `Authorization: Bearer sk-vsr-...` or `X-API-Key`"
    )]
    InvalidApiKey,
    #[error("too many requests; retry after {0} s")]
    RateLimited(u64),
    #[error("this address has created its keys for now; retry after {0} s")]
    KeyCreationLimited(u64),
    #[error("the model is busy; retry after {0} s with backoff")]
    Overloaded(u64),
    #[error("this key already has a box request in progress on this model; retry after {0} s, when it has finished")]
    ConcurrencyLimit(u64),
    #[error("the request's estimated input ({estimate} tokens) is over the model's limit of {limit}: send fewer questions or a shorter state")]
    RequestTooLong { estimate: u64, limit: u64 },
    #[error("the request took longer than the model's limit of {0} s")]
    Timeout(u64),
    #[error("{message}")]
    BadRequest { message: String, code: &'static str },
    #[error("the storage failed")]
    Store(#[from] StoreError),
    /// The body could not be read (limit, coding, multipart).
    #[error("{0}")]
    Body(BodyError),
}

impl ServiceError {
    pub fn status(&self) -> StatusCode {
        match self {
            ServiceError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ServiceError::RateLimited(_)
            | ServiceError::KeyCreationLimited(_)
            | ServiceError::Overloaded(_)
            | ServiceError::ConcurrencyLimit(_) => StatusCode::TOO_MANY_REQUESTS,
            ServiceError::RequestTooLong { .. } | ServiceError::BadRequest { .. } => {
                StatusCode::BAD_REQUEST
            }
            ServiceError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ServiceError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ServiceError::Body(e) => e.status(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::InvalidApiKey => "invalid_api_key",
            ServiceError::RateLimited(_) => "rate_limit_exceeded",
            ServiceError::KeyCreationLimited(_) => "key_creation_limited",
            ServiceError::Overloaded(_) => "server_overloaded",
            ServiceError::ConcurrencyLimit(_) => "concurrency_limit",
            ServiceError::RequestTooLong { .. } => "request_too_long",
            ServiceError::Timeout(_) => "timeout",
            ServiceError::BadRequest { code, .. } => code,
            ServiceError::Store(_) => "internal_error",
            ServiceError::Body(e) => e.code(),
        }
    }

    /// The fixed reason word beside the code, where the spec gives one.
    fn reason(&self) -> Option<&'static str> {
        match self {
            ServiceError::Body(e) => Some(e.reason()),
            _ => None,
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            ServiceError::RateLimited(s)
            | ServiceError::KeyCreationLimited(s)
            | ServiceError::Overloaded(s)
            | ServiceError::ConcurrencyLimit(s) => Some((*s).max(1)),
            _ => None,
        }
    }

    pub fn response(&self) -> Response<Body> {
        if let ServiceError::Store(e) = self {
            tracing::error!(error = %e, "service storage");
        }
        let kind = kind_of(self.status().as_u16());
        let mut body = json!({"error": {"message": self.to_string(), "type": kind, "param": null, "code": self.code()}});
        if let Some(r) = self.reason() {
            body["error"]["reason"] = json!(r);
        }
        if let Some(limit) = match self {
            ServiceError::Body(e) => e.limit(),
            _ => None,
        } {
            body["error"]["limit"] = json!(limit);
        }
        let mut r = Response::new(Body::from(body.to_string()));
        *r.status_mut() = self.status();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.retry_after() {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

impl axum::response::IntoResponse for ServiceError {
    fn into_response(self) -> axum::response::Response {
        self.response()
    }
}

/// OpenAI's error `type` for a status.
fn kind_of(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// The members an error keeps in both shapes, in the order the spec names them.
const CARRIED: [&str; 6] = [
    "reason",
    "question",
    "question_error",
    "state",
    "limit",
    "param",
];

/// One System One error body, as a client of either document reads it: system-duo-api's
/// `{"error": {type, code, message}}` (the service's refusals are built that way; a
/// worker's vllm-sr/5.0 body, flat `code`/`message`/`detail`, gains it), and, where
/// `flat` (POST /v1/systemone and its batch, whose worker-api shape is vllm-sr/5.0), the
/// flat `code`, `message`, `detail` and fixed fields beside it (a service refusal gains
/// them). Only members are added; a body that is not a JSON object is left as it is.
pub fn both_shapes(v: &mut Value, status: u16, flat: bool) {
    let Some(body) = v.as_object_mut() else {
        return;
    };
    let detail = body.get("detail");
    let word = |k: &str| {
        detail
            .and_then(|d| d.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let code = body
        .get("code")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| word("error_type"));
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| word("message"));
    if !body.get("error").is_some_and(Value::is_object) {
        let mut error = serde_json::Map::new();
        error.insert("type".into(), json!(kind_of(status)));
        error.insert("code".into(), json!(code.clone().unwrap_or_default()));
        error.insert("message".into(), json!(message.clone().unwrap_or_default()));
        for k in CARRIED {
            if let Some(x) = body.get(k) {
                error.insert(k.into(), x.clone());
            }
        }
        body.insert("error".into(), Value::Object(error));
    }
    let error = body
        .get_mut("error")
        .and_then(Value::as_object_mut)
        .map(|e| {
            e.entry("type").or_insert_with(|| json!(kind_of(status)));
            e.clone()
        })
        .unwrap_or_default();
    if !flat || body.contains_key("code") {
        return;
    }
    let code = error.get("code").cloned().unwrap_or(json!(""));
    let message = error.get("message").cloned().unwrap_or(json!(""));
    for k in CARRIED {
        if let Some(x) = error.get(k).filter(|x| !x.is_null()) {
            body.entry(k).or_insert_with(|| x.clone());
        }
    }
    body.insert("code".into(), code.clone());
    body.insert("message".into(), message.clone());
    body.entry("detail")
        .or_insert_with(|| json!({"error_type": code, "message": message}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v5_body_gains_the_openai_error_and_keeps_its_own() {
        let mut v = json!({"code": "model_unavailable", "message": "no worker",
            "detail": {"error_type": "model_unavailable", "message": "no worker"}});
        both_shapes(&mut v, 503, true);
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(v["error"]["code"], "model_unavailable");
        assert_eq!(v["error"]["message"], "no worker");
        assert_eq!(v["code"], "model_unavailable");
        assert_eq!(v["detail"]["error_type"], "model_unavailable");
    }

    #[test]
    fn a_422_detail_list_keeps_its_flat_words() {
        let mut v = json!({"code": "question_failed", "question": "q", "reason": "question_malformed",
            "message": "set questions do not take ['colour']",
            "detail": [{"loc": ["body", "questions", "q"], "msg": "m", "type": "invalid_question"}]});
        both_shapes(&mut v, 422, true);
        assert_eq!(v["error"]["code"], "question_failed");
        assert_eq!(v["error"]["question"], "q");
        assert_eq!(v["error"]["reason"], "question_malformed");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["detail"].is_array());
    }

    #[test]
    fn a_service_refusal_gains_the_flat_fields_only_where_v5_is_spoken() {
        let base = json!({"error": {"message": "too many", "type": "rate_limit_error", "param": null, "code": "rate_limit_exceeded"}});
        let mut v = base.clone();
        both_shapes(&mut v, 429, true);
        assert_eq!(v["code"], "rate_limit_exceeded");
        assert_eq!(v["message"], "too many");
        assert_eq!(v["detail"]["error_type"], "rate_limit_exceeded");
        assert!(v.get("param").is_none());
        let mut v = base.clone();
        both_shapes(&mut v, 429, false);
        assert_eq!(v, base);
        // The internal shape (/v1/decisions) gains its type.
        let mut v = json!({"error": {"code": "invalid_request", "message": "m"}});
        both_shapes(&mut v, 400, false);
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
}
