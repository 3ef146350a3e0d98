//! The service's refusals, as the `errors` crate's [`ApiError`]s: system-duo-api's
//! `{"error": {message, type, param, code}}`, with Retry-After on every 429.

use ::body::BodyError;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use errors::{ApiError, Code, Shape};

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
    BadRequest { message: String, code: Code },
    #[error("the storage failed")]
    Store(#[from] StoreError),
    /// The body could not be read (limit, coding, multipart).
    #[error("{0}")]
    Body(BodyError),
}

impl ServiceError {
    /// This refusal as the errors crate renders it (system-duo-api.txt's shape).
    pub fn api(&self) -> ApiError {
        let message = self.to_string();
        match self {
            ServiceError::InvalidApiKey => ApiError::new(Code::InvalidApiKey, message),
            ServiceError::RateLimited(s) => {
                ApiError::new(Code::RateLimitExceeded, message).retry_in(*s)
            }
            ServiceError::KeyCreationLimited(s) => {
                ApiError::new(Code::KeyCreationLimited, message).retry_in(*s)
            }
            ServiceError::Overloaded(s) => {
                ApiError::new(Code::ServerOverloaded, message).retry_in(*s)
            }
            ServiceError::ConcurrencyLimit(s) => {
                ApiError::new(Code::ConcurrencyLimit, message).retry_in(*s)
            }
            ServiceError::RequestTooLong { .. } => ApiError::new(Code::RequestTooLong, message),
            ServiceError::Timeout(_) => ApiError::new(Code::Timeout, message),
            ServiceError::BadRequest { code, .. } => ApiError::new(*code, message),
            ServiceError::Store(_) => ApiError::new(Code::InternalError, message),
            ServiceError::Body(e) => ApiError::from(e.clone()),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.api().status()
    }

    pub fn code(&self) -> &'static str {
        self.api().code.as_str()
    }

    pub fn response(&self) -> Response<Body> {
        if let ServiceError::Store(e) = self {
            tracing::error!(error = %e, "service storage");
        }
        self.api().response(Shape::Duo)
    }
}

impl axum::response::IntoResponse for ServiceError {
    fn into_response(self) -> axum::response::Response {
        self.response()
    }
}
