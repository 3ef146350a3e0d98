//! The router's own refusals, as the `errors` crate's [`ApiError`]s.

use ::body::BodyError;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use errors::{ApiError, Code};
use serde_json::Value;

pub use errors::Shape;

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

impl RouterError {
    /// This refusal as the errors crate renders it.
    pub fn api(&self) -> ApiError {
        let message = self.to_string();
        match self {
            RouterError::BadRequest { param, reason, .. } => {
                let mut e = ApiError::new(Code::InvalidRequest, message);
                e.param = param.clone();
                e.reason = *reason;
                e
            }
            RouterError::ModelNotFound(_) => {
                let mut e = ApiError::new(Code::ModelNotFound, message);
                e.param = Some("model".into());
                e
            }
            RouterError::Overloaded => ApiError::new(Code::Overloaded, message),
            RouterError::NotReady => ApiError::new(Code::NotReady, message),
            RouterError::DeadlineExceeded(_) => {
                ApiError::new(Code::SystemoneDeadlineExceeded, message)
            }
            RouterError::Blocked { .. } => ApiError::new(Code::RequestBlocked, message),
            RouterError::BackendUnavailable => ApiError::new(Code::ModelUnavailable, message),
            RouterError::Body(e) => ApiError::from(e.clone()),
            RouterError::Malformed(m) => ApiError::malformed(m.clone()),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.api().status()
    }

    pub fn body(&self, shape: Shape) -> Value {
        self.api().body(shape)
    }

    pub fn response(&self, shape: Shape) -> Response<Body> {
        self.api().response(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_codes_and_retry_after() {
        let r = RouterError::Overloaded.response(Shape::One);
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["retry-after"], "1");
        let r = RouterError::NotReady.response(Shape::Internal);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["retry-after"], "5");
        let b = RouterError::DeadlineExceeded(30_000).body(Shape::One);
        assert_eq!(b["code"], "systemone_deadline_exceeded");
        assert!(b["message"]
            .as_str()
            .unwrap()
            .contains("options.deadline_ms"));
        let b = RouterError::ModelNotFound("x".into()).body(Shape::OpenAi);
        assert_eq!(b["error"]["code"], "model_not_found");
        assert_eq!(b["error"]["param"], "model");
        let big = RouterError::Body(BodyError::TooLarge {
            limit: 10,
            what: "as sent",
        });
        assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(big.body(Shape::Internal)["error"]["limit"], 10);
        assert_eq!(big.body(Shape::One)["reason"], "body_too_large");
        // A body that is not JSON reads as the worker's validation failure on vllm-sr/5.0.
        let bad = RouterError::Malformed("the body is not valid JSON".into());
        let r = bad.response(Shape::One);
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let v = bad.body(Shape::One);
        assert_eq!(v["detail"][0]["loc"], json!(["body"]));
        assert_eq!(v["detail"][0]["type"], "body_malformed");
        assert_eq!(
            bad.response(Shape::Internal).status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            bad.body(Shape::Internal)["error"]["reason"],
            "body_malformed"
        );
        let coded = RouterError::Body(BodyError::Unsupported("br".into()));
        assert_eq!(coded.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            coded.body(Shape::OpenAi)["error"]["code"],
            "encoding_unsupported"
        );
    }
}
