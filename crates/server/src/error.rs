//! The worker's errors as [`ApiError`]s: engine and encoder failures, and which family each
//! path answers in. Statuses, reason words and body shapes are the `errors` crate's.

use engine::EngineError;
use protocol::error::ErrorCode;

pub use errors::{ApiError, Shape};

/// The family a path answers errors in: the one path → family mapping, used by the routes
/// and by the transport layer for answers given before a handler runs.
pub fn shape_of_path(path: &str, schema: protocol::Schema) -> Shape {
    if path.starts_with("/v1/systemone") {
        match schema {
            protocol::Schema::V4 => Shape::V4,
            _ => Shape::V5,
        }
    } else if [
        "/v1/encode/",
        "/v1/score/",
        "/v1/extract/",
        "/v1/generate/",
        "/v1/models/",
    ]
    .iter()
    .any(|p| path.starts_with(p))
    {
        Shape::Sie
    } else if path == "/v1/chat/completions" || path == "/v1/completions" {
        Shape::OpenAi
    } else {
        Shape::Internal
    }
}

/// An engine failure, with the served models named where the model was not found.
pub fn from_engine(e: EngineError, served: &[String]) -> ApiError {
    match e {
        EngineError::Request(p) => p.into(),
        EngineError::ModelNotFound(name) => ApiError::new(
            ErrorCode::ModelNotFound,
            format!(
                "model {name:?} is not served; served models: {}",
                served.join(", ")
            ),
        ),
        EngineError::NotReady(name) | EngineError::NotLoaded(name) => ApiError::new(
            ErrorCode::NotReady,
            format!("model {name:?} is not ready yet"),
        )
        .with_reason(protocol::reason::MODEL_LOADING),
        EngineError::LoadFailed(name, why) => ApiError::new(
            ErrorCode::NotReady,
            format!("model {name:?} failed to load: {why}"),
        )
        .with_reason(protocol::reason::MODEL_LOAD_FAILED),
        EngineError::UnsupportedSurface(name, kind) => ApiError::new(
            ErrorCode::UnsupportedSurface,
            format!("model {name:?} is {kind} model and does not serve this endpoint"),
        ),
        EngineError::NoModelOfKind(kind) => ApiError::new(
            ErrorCode::ModelNotFound,
            format!(
                "this process serves no {kind} model; served models: {}",
                served.join(", ")
            ),
        ),
        EngineError::Overloaded => ApiError::new(
            ErrorCode::Overloaded,
            "the model's queue is full; retry after the Retry-After delay",
        )
        .with_reason(protocol::reason::QUEUE_FULL),
        EngineError::OutOfMemory { shared: false } => ApiError::new(
            ErrorCode::RequestTooLarge,
            "the request does not fit the model's memory in one forward",
        )
        .with_reason(protocol::reason::FORWARD_OUT_OF_MEMORY),
        EngineError::OutOfMemory { shared: true } => ApiError::new(
            ErrorCode::Overloaded,
            "the forward this request shared ran out of memory; retry",
        )
        .with_reason(protocol::reason::FORWARD_OUT_OF_MEMORY),
        EngineError::Unavailable => {
            ApiError::new(ErrorCode::NotReady, "the model's worker is not running")
                .with_reason(protocol::reason::MODEL_UNAVAILABLE)
        }
        other => ApiError::new(ErrorCode::InternalError, other.to_string()),
    }
}

/// An encoder failure (embeddings, classification, tagging, SIE).
pub fn from_encode(e: engine::EncodeError) -> ApiError {
    use engine::EncodeError as E;
    let message = e.to_string();
    match e.root() {
        E::TooLong { limit, .. } => {
            let mut a = ApiError::new(ErrorCode::InvalidRequest, message)
                .with_reason(protocol::reason::INPUT_TOO_LONG);
            a.limit = Some(*limit as u64);
            a
        }
        E::ScanBudget { limit, .. } => {
            let mut a = ApiError::new(ErrorCode::InvalidRequest, message)
                .with_reason(protocol::reason::SCAN_BUDGET);
            a.limit = Some(*limit as u64);
            a
        }
        E::Invalid(_) | E::Item { .. } => ApiError::new(ErrorCode::InvalidRequest, message)
            .with_reason(protocol::reason::INPUT_MALFORMED),
        E::Overloaded => {
            ApiError::new(ErrorCode::Overloaded, message).with_reason(protocol::reason::QUEUE_FULL)
        }
        E::Unavailable => ApiError::new(ErrorCode::NotReady, message)
            .with_reason(protocol::reason::MODEL_UNAVAILABLE),
        E::Inference(_) => ApiError::new(ErrorCode::InternalError, message)
            .with_reason(protocol::reason::INFERENCE_ERROR),
    }
}

// Constructors for the worker's hand-checked bodies (encoders, bundle, SIE).

pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message).with_reason(protocol::reason::BODY_MALFORMED)
}

pub(crate) fn unsupported_param(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
        .with_reason(protocol::reason::PARAMETER_UNSUPPORTED)
}
