//! The service's refusals and the one place they become status codes and OpenAI-shaped
//! bodies (`{"error": {message, type, param, code}}`), with Retry-After on every 429.

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use serde_json::json;

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
    #[error("the request's estimated input ({estimate} tokens) is over the model's limit of {limit}: send fewer questions or a shorter state")]
    RequestTooLong { estimate: u64, limit: u64 },
    #[error("the request took longer than the model's limit of {0} s")]
    Timeout(u64),
    #[error("{message}")]
    BadRequest { message: String, code: &'static str },
    #[error("the storage failed")]
    Store(#[from] StoreError),
}

impl ServiceError {
    pub fn status(&self) -> StatusCode {
        match self {
            ServiceError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ServiceError::RateLimited(_)
            | ServiceError::KeyCreationLimited(_)
            | ServiceError::Overloaded(_) => StatusCode::TOO_MANY_REQUESTS,
            ServiceError::RequestTooLong { .. } | ServiceError::BadRequest { .. } => {
                StatusCode::BAD_REQUEST
            }
            ServiceError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ServiceError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ServiceError::InvalidApiKey => "invalid_api_key",
            ServiceError::RateLimited(_) => "rate_limit_exceeded",
            ServiceError::KeyCreationLimited(_) => "key_creation_limited",
            ServiceError::Overloaded(_) => "server_overloaded",
            ServiceError::RequestTooLong { .. } => "request_too_long",
            ServiceError::Timeout(_) => "timeout",
            ServiceError::BadRequest { code, .. } => code,
            ServiceError::Store(_) => "internal_error",
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            ServiceError::RateLimited(s)
            | ServiceError::KeyCreationLimited(s)
            | ServiceError::Overloaded(s) => Some((*s).max(1)),
            _ => None,
        }
    }

    pub fn response(&self) -> Response<Body> {
        if let ServiceError::Store(e) = self {
            tracing::error!(error = %e, "service storage");
        }
        let kind = match self.status().as_u16() {
            401 => "authentication_error",
            429 => "rate_limit_error",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        let body = json!({"error": {"message": self.to_string(), "type": kind, "param": null, "code": self.code()}});
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
