//! Errors of the engine layer. The server maps each to an HTTP status in one place.

use protocol::ProtocolError;

use crate::backend::BackendError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request cannot be served as sent (token limits, modality, …).
    #[error("{0}")]
    Request(ProtocolError),
    #[error("model {0:?} is not served")]
    ModelNotFound(String),
    #[error("model {0:?} is not ready")]
    NotReady(String),
    #[error("model {0:?} has not started loading")]
    NotLoaded(String),
    #[error("model {0:?} failed to load: {1}")]
    LoadFailed(String, String),
    /// The named model is of the other kind (`{1}`) and does not serve this endpoint.
    #[error("model {0:?} is of kind {1} and does not serve this endpoint")]
    UnsupportedSurface(String, &'static str),
    #[error("no {0} model is served")]
    NoModelOfKind(&'static str),
    #[error("the model is overloaded")]
    Overloaded,
    /// The forward ran out of memory; `shared` when other requests were in it.
    #[error("the forward ran out of memory")]
    OutOfMemory { shared: bool },
    #[error("the model's worker is not running")]
    Unavailable,
    #[error("forward failed: {0}")]
    Forward(String),
    #[error("the model's vocabulary cannot read option labels: {0}")]
    Labels(String),
    /// The model's chat template cannot render the conversation.
    #[error("the chat template cannot render these messages: {0}")]
    Template(String),
    #[error(transparent)]
    Backend(#[from] BackendError),
}
