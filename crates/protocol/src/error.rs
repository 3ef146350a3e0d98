//! Error codes and fixed reason words. Reason words never carry request data; messages may.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// Fixed reason words, as the spec names them.
pub mod reason {
    pub const QUESTION_MALFORMED: &str = "question_malformed";
    pub const SPAN_UNSUPPORTED: &str = "span_unsupported";
    pub const BOX_UNSUPPORTED: &str = "box_unsupported";
    pub const TRACK_UNSUPPORTED: &str = "track_unsupported";
    pub const SET_UNSUPPORTED: &str = "set_unsupported";
    pub const BOX_NEEDS_IMAGE: &str = "box_needs_image";
    pub const BOX_VIDEO_TOO_LONG: &str = "box_video_too_long";
    pub const BOX_TARGET_AMBIGUOUS: &str = "box_target_ambiguous";
    pub const QUESTION_IMAGES_UNSUPPORTED: &str = "question_images_unsupported";
    pub const DECISION_ADAPTER_UNSUPPORTED: &str = "decision_adapter_unsupported";
    pub const QUESTION_TOKENS: &str = "question_tokens";
    pub const REQUEST_TOKENS: &str = "request_tokens";
    pub const TOO_MANY_QUESTIONS: &str = "too_many_questions";
    pub const TOO_MANY_STATES: &str = "too_many_states";
    pub const TOO_MANY_IMAGES: &str = "too_many_images";
    pub const TOO_MANY_VIDEOS: &str = "too_many_videos";
    pub const STATE_TOO_LONG: &str = "state_too_long";
    pub const INPUT_MALFORMED: &str = "input_malformed";
    pub const INPUT_INCOMPLETE: &str = "input_incomplete";
    pub const SCAN_BUDGET: &str = "scan_budget";
    pub const BODY_MALFORMED: &str = "body_malformed";
    pub const UNKNOWN_MEMBER: &str = "unknown_member";
    pub const REMOVED_FORM: &str = "removed_form";
    pub const FORMS_MIXED: &str = "forms_mixed";
    pub const NO_VALID_QUESTION: &str = "no_valid_question";
    pub const MODALITY_UNSUPPORTED: &str = "modality_unsupported";
    pub const QUESTION_NOT_GROUNDED: &str = "question_not_grounded";
    pub const IMAGE_TOO_LARGE: &str = "image_too_large";
    pub const VIDEO_TOO_LARGE: &str = "video_too_large";
    pub const VIDEO_TOO_LONG: &str = "video_too_long";
    pub const INVALID_MEDIA: &str = "invalid_media";
    pub const IMAGE_FORMAT_UNSUPPORTED: &str = "image_format_unsupported";
    pub const IMAGE_MALFORMED: &str = "image_malformed";
    pub const IMAGE_ANIMATED: &str = "image_animated";
    pub const IMAGE_ASPECT_RATIO: &str = "image_aspect_ratio";
    pub const ENCODING_MALFORMED: &str = "encoding_malformed";
    pub const ENCODING_UNSUPPORTED: &str = "encoding_unsupported";
    pub const BODY_TOO_LARGE: &str = "body_too_large";
    pub const BODY_TIMEOUT: &str = "body_timeout";
    pub const MULTIPART_MALFORMED: &str = "multipart_malformed";
    pub const ASSET_REFERENCE_INVALID: &str = "asset_reference_invalid";
    pub const ASSET_PART_MISSING: &str = "asset_part_missing";
    pub const ASSET_UNREFERENCED: &str = "asset_unreferenced";
    pub const PART_CLAIMED_TWICE: &str = "part_claimed_twice";
    pub const PART_UNCLAIMED: &str = "part_unclaimed";
    pub const QUEUE_FULL: &str = "queue_full";
    pub const DEADLINE: &str = "deadline";
    pub const MODEL_OUTPUT: &str = "model_output";
    pub const MODEL_UNAVAILABLE: &str = "model_unavailable";
    pub const MODEL_LOADING: &str = "model_loading";
    pub const MODEL_LOAD_FAILED: &str = "model_load_failed";
    pub const INPUT_TOO_LONG: &str = "input_too_long";
    pub const INFERENCE_ERROR: &str = "inference_error";
    pub const PARAMETER_UNSUPPORTED: &str = "parameter_unsupported";
    pub const BUNDLE_TASKS: &str = "bundle_tasks";
    pub const FORWARD_OUT_OF_MEMORY: &str = "forward_out_of_memory";
    pub const PARAMETER_INVALID: &str = "parameter_invalid";
    pub const CHAT_TEMPLATE: &str = "chat_template";
    pub const CONTEXT_LENGTH: &str = "context_length_exceeded";
    pub const RESPONSE_FORMAT: &str = "response_format";
    pub const MODEL_ID_SLASH: &str = "model_id_slash";
}

/// A request-level error code (`error.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
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
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::ModelNotFound => "model_not_found",
            ErrorCode::RequestTooLarge => "request_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::UnsupportedSurface => "unsupported_surface",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::QuestionFailed => "question_failed",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
        }
    }
}

/// A request that cannot be served at all.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ProtocolError {
    pub code: ErrorCode,
    pub message: String,
    pub reason: Option<&'static str>,
    pub limit: Option<u64>,
    /// Where in the body the problem is (`["body", "questions", "q"]`), for validation details.
    pub loc: Vec<String>,
    /// A schema validation failure of the body (a 422 with a detail list under vllm-sr/5.0),
    /// as opposed to a refusal the extension set names (400).
    pub validation: bool,
}

impl ProtocolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ProtocolError {
            code,
            message: message.into(),
            reason: None,
            limit: None,
            loc: vec!["body".into()],
            validation: false,
        }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }
    /// A body that does not match the request schema (missing or mistyped members).
    pub fn schema(loc: &[&str], message: impl Into<String>) -> Self {
        let mut e = Self::invalid(message).with_reason(reason::BODY_MALFORMED);
        e.validation = true;
        e.loc = std::iter::once("body")
            .chain(loc.iter().copied())
            .map(String::from)
            .collect();
        e
    }
    pub fn with_reason(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// Why a question has no answer (`answers.<id>.error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionErrorKind {
    InvalidQuestion,
    InvalidInput,
    MaxLengthExceeded,
    ScanBudgetExceeded,
    InvalidModelOutput,
    DeadlineExceeded,
    Unavailable,
}

impl QuestionErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionErrorKind::InvalidQuestion => "invalid_question",
            QuestionErrorKind::InvalidInput => "invalid_input",
            QuestionErrorKind::MaxLengthExceeded => "max_length_exceeded",
            QuestionErrorKind::ScanBudgetExceeded => "scan_budget_exceeded",
            QuestionErrorKind::InvalidModelOutput => "invalid_model_output",
            QuestionErrorKind::DeadlineExceeded => "deadline_exceeded",
            QuestionErrorKind::Unavailable => "unavailable",
        }
    }
}

/// A failed question: its error, fixed reason and message.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionFailure {
    pub kind: QuestionErrorKind,
    pub reason: &'static str,
    pub message: String,
    pub limit: Option<u64>,
}

impl QuestionFailure {
    pub fn new(kind: QuestionErrorKind, reason: &'static str, message: impl Into<String>) -> Self {
        QuestionFailure {
            kind,
            reason,
            message: message.into(),
            limit: None,
        }
    }
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(
            QuestionErrorKind::InvalidQuestion,
            reason::QUESTION_MALFORMED,
            message,
        )
    }
}

// What this module's endpoints answer, for the OpenAPI document (the bodies are written by
// hand, in the order the spec shows).

/// An error body. Under vllm-sr/5.0 on /v1/systemone: the standard `detail` (a list on a 422)
/// with flat `code`, `reason`, `question`, `state`, `limit`; elsewhere `{"error": {...}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorDoc {
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// An object, or on a 422 a list of `{loc, msg, type}`.
    pub detail: Option<Value>,
    pub code: Option<String>,
    pub message: Option<String>,
    pub reason: Option<String>,
    pub question: Option<String>,
    pub state: Option<String>,
    pub limit: Option<u64>,
}
