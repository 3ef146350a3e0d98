//! The router's own refusals, and the one place they become status codes and bodies.

use ::body::BodyError;
use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RouterError {
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
        reason: Option<&'static str>,
    },
    #[error("model {0:?} is not served here")]
    ModelNotFound(String),
    #[error("every worker of the model is busy; retry shortly")]
    Overloaded,
    #[error("no worker of the model is ready")]
    NotReady,
    #[error("the model did not answer within {0} ms; a longer wait can be asked with options.deadline_ms")]
    DeadlineExceeded(u64),
    #[error("{message}")]
    Blocked { decision: String, message: String },
    #[error("no backend of the chosen models answered")]
    BackendUnavailable,
    /// The body could not be read (limit, coding, multipart, deadline).
    #[error("{0}")]
    Body(BodyError),
    /// The body is not a JSON object: a validation failure of the body, which vllm-sr/5.0
    /// answers 422 with a `detail` list, as the worker does.
    #[error("{0}")]
    Malformed(String),
}

/// The body shape of the API that answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `{"error": {message, type, param, code}}`.
    OpenAi,
    /// vllm-sr/5.0's detail with the flat fields (POST /v1/systemone).
    V5,
    /// `{"error": {code, message}}` (POST /v1/decisions and the worker endpoints).
    Internal,
}

impl RouterError {
    pub fn status(&self) -> StatusCode {
        match self {
            RouterError::BadRequest { .. } | RouterError::Malformed(_) => StatusCode::BAD_REQUEST,
            RouterError::ModelNotFound(_) => StatusCode::NOT_FOUND,
            RouterError::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            RouterError::NotReady | RouterError::BackendUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            RouterError::DeadlineExceeded(_) => StatusCode::GATEWAY_TIMEOUT,
            RouterError::Blocked { .. } => StatusCode::FORBIDDEN,
            RouterError::Body(e) => e.status(),
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            RouterError::BadRequest { .. } | RouterError::Malformed(_) => "invalid_request",
            RouterError::ModelNotFound(_) => "model_not_found",
            RouterError::Overloaded => "overloaded",
            RouterError::NotReady => "not_ready",
            RouterError::DeadlineExceeded(_) => "systemone_deadline_exceeded",
            RouterError::Blocked { .. } => "request_blocked",
            RouterError::BackendUnavailable => "model_unavailable",
            RouterError::Body(e) => e.code(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            RouterError::Overloaded => Some(1),
            RouterError::NotReady | RouterError::BackendUnavailable => Some(5),
            _ => None,
        }
    }

    /// The code in `flavor`'s body: on the published System One API (vllm-sr/5.0) a model
    /// with no ready worker is `model_unavailable` (system-duo-api.txt); the runtime's own
    /// shape keeps the worker's `not_ready`.
    fn code_in(&self, flavor: Flavor) -> &'static str {
        match (self, flavor) {
            (RouterError::NotReady, Flavor::V5) => "model_unavailable",
            _ => self.code(),
        }
    }

    pub fn body(&self, flavor: Flavor) -> Value {
        let message = self.to_string();
        let reason = match self {
            RouterError::BadRequest { reason, .. } => *reason,
            RouterError::Malformed(_) => Some("body_malformed"),
            RouterError::Body(e) => Some(e.reason()),
            _ => None,
        };
        let limit = match self {
            RouterError::Body(e) => e.limit(),
            _ => None,
        };
        match flavor {
            Flavor::OpenAi => {
                let kind = match self.status().as_u16() {
                    429 => "rate_limit_error",
                    s if s >= 500 => "server_error",
                    _ => "invalid_request_error",
                };
                let param = match self {
                    RouterError::BadRequest { param, .. } => param.clone(),
                    RouterError::ModelNotFound(_) => Some("model".into()),
                    _ => None,
                };
                json!({"error": {"message": message, "type": kind, "param": param, "code": reason.unwrap_or(self.code())}})
            }
            Flavor::V5 | Flavor::Internal => {
                let mut flat = Map::new();
                flat.insert("code".into(), json!(self.code_in(flavor)));
                if let Some(r) = reason {
                    flat.insert("reason".into(), json!(r));
                }
                if let Some(l) = limit {
                    flat.insert("limit".into(), json!(l));
                }
                if flavor == Flavor::Internal {
                    flat.insert("message".into(), json!(message));
                    return json!({ "error": flat });
                }
                let detail = match self {
                    RouterError::Malformed(_) => {
                        json!([{"loc": ["body"], "msg": message, "type": "body_malformed"}])
                    }
                    _ => json!({"error_type": self.code_in(flavor), "message": message}),
                };
                flat.insert("detail".into(), detail);
                flat.insert("message".into(), json!(message));
                Value::Object(flat)
            }
        }
    }

    /// The status in `flavor`: a malformed body is a validation failure (422) on vllm-sr/5.0.
    pub fn status_in(&self, flavor: Flavor) -> StatusCode {
        match (self, flavor) {
            (RouterError::Malformed(_), Flavor::V5) => StatusCode::UNPROCESSABLE_ENTITY,
            _ => self.status(),
        }
    }

    pub fn response(&self, flavor: Flavor) -> Response<Body> {
        let body = serde_json::to_vec(&self.body(flavor)).unwrap_or_default();
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = self.status_in(flavor);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_codes_and_retry_after() {
        let r = RouterError::Overloaded.response(Flavor::V5);
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "1");
        let r = RouterError::NotReady.response(Flavor::Internal);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["retry-after"], "5");
        let b = RouterError::DeadlineExceeded(30_000).body(Flavor::V5);
        assert_eq!(b["code"], "systemone_deadline_exceeded");
        assert!(b["message"]
            .as_str()
            .unwrap()
            .contains("options.deadline_ms"));
        let b = RouterError::ModelNotFound("x".into()).body(Flavor::OpenAi);
        assert_eq!(b["error"]["code"], "model_not_found");
        assert_eq!(b["error"]["param"], "model");
        let big = RouterError::Body(BodyError::TooLarge {
            limit: 10,
            what: "as sent",
        });
        assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(big.body(Flavor::Internal)["error"]["limit"], 10);
        assert_eq!(big.body(Flavor::V5)["reason"], "body_too_large");
        // A body that is not JSON reads as the worker's validation failure on vllm-sr/5.0.
        let bad = RouterError::Malformed("the body is not valid JSON".into());
        let r = bad.response(Flavor::V5);
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let v = bad.body(Flavor::V5);
        assert_eq!(v["detail"][0]["loc"], json!(["body"]));
        assert_eq!(v["detail"][0]["type"], "body_malformed");
        assert_eq!(
            bad.response(Flavor::Internal).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            bad.body(Flavor::Internal)["error"]["reason"],
            "body_malformed"
        );
        let coded = RouterError::Body(BodyError::Unsupported("br".into()));
        assert_eq!(coded.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            coded.body(Flavor::OpenAi)["error"]["code"],
            "encoding_unsupported"
        );
    }
}
