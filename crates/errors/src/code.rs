//! Every error code a face answers, and the HTTP status each stands for.

use axum::http::StatusCode;
use protocol::error::{reason, ErrorCode, QuestionErrorKind};

/// An error code (`error.code`): worker-api.txt's list, the router's own and the keys
/// service's (system-duo-api.txt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    InvalidRequest,
    ModelNotFound,
    RequestTooLarge,
    UnsupportedMediaType,
    UnsupportedSurface,
    Overloaded,
    NotReady,
    QuestionFailed,
    InternalError,
    DeadlineExceeded,
    /// The router's guard refused the request.
    RequestBlocked,
    /// No worker of the model answers (the published System One word for not ready).
    ModelUnavailable,
    /// The router's budget for a model call ran out.
    SystemoneDeadlineExceeded,
    InvalidApiKey,
    RateLimitExceeded,
    KeyCreationLimited,
    ServerOverloaded,
    ConcurrencyLimit,
    RequestTooLong,
    Timeout,
    /// Key creation: the terms were not accepted, the challenge or its proof does not hold.
    TermsNotAccepted,
    InvalidChallenge,
    InvalidProof,
    /// A page's data the keys service could not fetch from the router.
    StatusUnavailable,
    NotFound,
}

impl From<ErrorCode> for Code {
    fn from(c: ErrorCode) -> Code {
        match c {
            ErrorCode::InvalidRequest => Code::InvalidRequest,
            ErrorCode::ModelNotFound => Code::ModelNotFound,
            ErrorCode::RequestTooLarge => Code::RequestTooLarge,
            ErrorCode::UnsupportedMediaType => Code::UnsupportedMediaType,
            ErrorCode::UnsupportedSurface => Code::UnsupportedSurface,
            ErrorCode::Overloaded => Code::Overloaded,
            ErrorCode::NotReady => Code::NotReady,
            ErrorCode::QuestionFailed => Code::QuestionFailed,
            ErrorCode::InternalError => Code::InternalError,
            ErrorCode::DeadlineExceeded => Code::DeadlineExceeded,
        }
    }
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidRequest => "invalid_request",
            Code::ModelNotFound => "model_not_found",
            Code::RequestTooLarge => "request_too_large",
            Code::UnsupportedMediaType => "unsupported_media_type",
            Code::UnsupportedSurface => "unsupported_surface",
            Code::Overloaded => "overloaded",
            Code::NotReady => "not_ready",
            Code::QuestionFailed => "question_failed",
            Code::InternalError => "internal_error",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::RequestBlocked => "request_blocked",
            Code::ModelUnavailable => "model_unavailable",
            Code::SystemoneDeadlineExceeded => "systemone_deadline_exceeded",
            Code::InvalidApiKey => "invalid_api_key",
            Code::RateLimitExceeded => "rate_limit_exceeded",
            Code::KeyCreationLimited => "key_creation_limited",
            Code::ServerOverloaded => "server_overloaded",
            Code::ConcurrencyLimit => "concurrency_limit",
            Code::RequestTooLong => "request_too_long",
            Code::Timeout => "timeout",
            Code::TermsNotAccepted => "terms_not_accepted",
            Code::InvalidChallenge => "invalid_challenge",
            Code::InvalidProof => "invalid_proof",
            Code::StatusUnavailable => "status_unavailable",
            Code::NotFound => "not_found",
        }
    }

    /// The status of this code alone.
    pub fn http_status(self) -> StatusCode {
        self.status(None, None)
    }

    /// The status of this code; a reason word or the failed question's error refines it
    /// where the spec gives that word its own status.
    pub(crate) fn status(
        self,
        reason: Option<&str>,
        question: Option<QuestionErrorKind>,
    ) -> StatusCode {
        match self {
            Code::InvalidRequest => match reason {
                Some(ROUTE_NOT_FOUND) => StatusCode::NOT_FOUND,
                Some(reason::BODY_TIMEOUT) => StatusCode::REQUEST_TIMEOUT,
                _ => StatusCode::BAD_REQUEST,
            },
            Code::RequestTooLong
            | Code::TermsNotAccepted
            | Code::InvalidChallenge
            | Code::InvalidProof => StatusCode::BAD_REQUEST,
            Code::ModelNotFound | Code::NotFound => StatusCode::NOT_FOUND,
            Code::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Code::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::UnsupportedSurface => StatusCode::UNPROCESSABLE_ENTITY,
            Code::QuestionFailed => match question {
                Some(
                    QuestionErrorKind::MaxLengthExceeded
                    | QuestionErrorKind::ScanBudgetExceeded
                    | QuestionErrorKind::InvalidInput,
                ) => StatusCode::BAD_REQUEST,
                Some(QuestionErrorKind::InvalidModelOutput) => StatusCode::INTERNAL_SERVER_ERROR,
                Some(QuestionErrorKind::Unavailable) => StatusCode::SERVICE_UNAVAILABLE,
                Some(QuestionErrorKind::DeadlineExceeded) => StatusCode::GATEWAY_TIMEOUT,
                Some(QuestionErrorKind::InvalidQuestion) | None => StatusCode::UNPROCESSABLE_ENTITY,
            },
            Code::Overloaded
            | Code::RateLimitExceeded
            | Code::KeyCreationLimited
            | Code::ServerOverloaded
            | Code::ConcurrencyLimit => StatusCode::TOO_MANY_REQUESTS,
            Code::NotReady | Code::ModelUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            Code::StatusUnavailable => StatusCode::BAD_GATEWAY,
            Code::DeadlineExceeded | Code::SystemoneDeadlineExceeded | Code::Timeout => {
                StatusCode::GATEWAY_TIMEOUT
            }
            Code::RequestBlocked => StatusCode::FORBIDDEN,
            Code::InvalidApiKey => StatusCode::UNAUTHORIZED,
        }
    }

    /// The Retry-After a client is told when the refusal names no delay of its own.
    pub(crate) fn retry_after(self) -> Option<u64> {
        match self {
            Code::Overloaded => Some(1),
            Code::NotReady | Code::ModelUnavailable => Some(5),
            _ => None,
        }
    }
}

/// The reason word of a path no route serves.
pub const ROUTE_NOT_FOUND: &str = "route_not_found";

/// OpenAI's error `type` for a status: the one table (the worker's OpenAI endpoints, the
/// router's chat and the keys service all answer in it).
pub fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

/// The status of a health or readiness probe.
pub fn probe(ready: bool) -> StatusCode {
    if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}
