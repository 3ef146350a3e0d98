//! HTTP errors: every layer's error becomes an [`ApiError`] here, and each API family renders
//! it in its own body shape. This is the one place that maps errors to status codes.

use axum::http::StatusCode;
use engine::EngineError;
use protocol::error::{ErrorCode, ProtocolError, QuestionErrorKind, QuestionFailure};
use serde_json::{json, Map, Value};

/// Which body shape an endpoint answers errors in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// `{"error": {code, message, ...}}`: /v1/decisions and the other worker endpoints.
    Internal,
    /// The standard detail with flat fields (vllm-sr/5.0 on /v1/systemone).
    V5,
    /// vllm-sr/4.0: `error`, plus `detail` and the flat fields beside it.
    V4,
    /// The SIE face: `{"detail": {"code": "MODEL_NOT_FOUND", "message": ...}}`.
    Sie,
    /// OpenAI's: `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
}

impl Flavor {
    /// The family a path answers errors in: the one path → family mapping, used by the
    /// routes and by the transport layer for answers given before a handler runs.
    pub fn of_path(path: &str, schema: protocol::Schema) -> Flavor {
        if path.starts_with("/v1/systemone") {
            match schema {
                protocol::Schema::V4 => Flavor::V4,
                _ => Flavor::V5,
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
            Flavor::Sie
        } else if path == "/v1/chat/completions" || path == "/v1/completions" {
            Flavor::OpenAi
        } else {
            Flavor::Internal
        }
    }
}

/// An error answer before it is rendered.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub reason: Option<&'static str>,
    pub limit: Option<u64>,
    /// question_failed: the deciding question, its error word, and every failed question.
    pub question: Option<String>,
    pub question_error: Option<&'static str>,
    pub state: Option<String>,
    pub failed: Vec<(String, &'static str, String)>,
    pub loc: Vec<String>,
    pub validation: bool,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code: code.as_str(),
            message: message.into(),
            reason: None,
            limit: None,
            question: None,
            question_error: None,
            state: None,
            failed: Vec::new(),
            loc: vec!["body".into()],
            validation: false,
            retry_after: None,
        }
    }

    pub fn with_reason(mut self, reason: &'static str) -> ApiError {
        self.reason = Some(reason);
        self
    }

    /// The same error with `prefix` in front of its message (e.g. which input failed).
    pub fn prefixed(mut self, prefix: &str) -> ApiError {
        self.message = format!("{prefix}{}", self.message);
        self
    }

    /// The body did not decode as JSON.
    pub fn bad_json(err: &serde_json::Error) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            format!("the body is not valid JSON: {err}"),
        )
        .with_reason(protocol::reason::BODY_MALFORMED);
        e.validation = true;
        e
    }

    /// A question failure that fails a whole /v1/systemone request.
    pub fn question_failed(
        failures: &[(&str, &QuestionFailure)],
        state: Option<&str>,
    ) -> Option<ApiError> {
        let (first_id, first) = failures.first()?;
        let status = match first.kind {
            QuestionErrorKind::InvalidQuestion => StatusCode::UNPROCESSABLE_ENTITY,
            QuestionErrorKind::MaxLengthExceeded
            | QuestionErrorKind::ScanBudgetExceeded
            | QuestionErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
            QuestionErrorKind::InvalidModelOutput => StatusCode::INTERNAL_SERVER_ERROR,
            QuestionErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            QuestionErrorKind::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        };
        let listed: Vec<String> = failures
            .iter()
            .map(|(id, f)| format!("{id:?}: {} ({}): {}", f.kind.as_str(), f.reason, f.message))
            .collect();
        let mut e = ApiError::new(
            status,
            ErrorCode::QuestionFailed,
            format!(
                "{} question(s) failed: {}",
                failures.len(),
                listed.join("; ")
            ),
        )
        .with_reason(first.reason);
        e.question = Some(first_id.to_string());
        e.question_error = Some(first.kind.as_str());
        e.limit = first.limit;
        e.state = state.map(String::from);
        e.failed = failures
            .iter()
            .map(|(id, f)| (id.to_string(), f.kind.as_str(), f.message.clone()))
            .collect();
        e.validation = status == StatusCode::UNPROCESSABLE_ENTITY;
        Some(e)
    }

    /// /v1/decisions: a request in which no question is valid is 400 invalid_request, with each
    /// question's reason in the message and the first one's reason and question.
    pub fn no_valid_question(
        failures: &[(&str, &QuestionFailure)],
        answers: usize,
    ) -> Option<ApiError> {
        let rejected = |f: &QuestionFailure| {
            matches!(
                f.kind,
                QuestionErrorKind::InvalidQuestion
                    | QuestionErrorKind::InvalidInput
                    | QuestionErrorKind::MaxLengthExceeded
                    | QuestionErrorKind::ScanBudgetExceeded
            )
        };
        if answers == 0 || failures.len() != answers || !failures.iter().all(|(_, f)| rejected(f)) {
            return None;
        }
        let (first_id, first) = failures.first()?;
        let listed: Vec<String> = failures
            .iter()
            .map(|(id, f)| format!("{id:?}: {} ({})", f.reason, f.message))
            .collect();
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidRequest,
            format!("no question of the request is valid: {}", listed.join("; ")),
        )
        .with_reason(first.reason);
        e.question = Some(first_id.to_string());
        e.limit = first.limit;
        Some(e)
    }

    /// Render in an API family's shape.
    pub fn body(&self, flavor: Flavor) -> Value {
        let mut flat = Map::new();
        flat.insert("code".into(), json!(self.code));
        if let Some(q) = &self.question {
            flat.insert("question".into(), json!(q));
        }
        if let Some(qe) = self.question_error {
            flat.insert("question_error".into(), json!(qe));
        }
        if let Some(s) = &self.state {
            flat.insert("state".into(), json!(s));
        }
        if let Some(r) = self.reason {
            flat.insert("reason".into(), json!(r));
        }
        if let Some(l) = self.limit {
            flat.insert("limit".into(), json!(l));
        }
        let detail = if self.status == StatusCode::UNPROCESSABLE_ENTITY {
            let items: Vec<Value> = if self.failed.is_empty() {
                vec![
                    json!({"loc": self.loc, "msg": self.message, "type": self.reason.unwrap_or(self.code)}),
                ]
            } else {
                self.failed
                    .iter()
                    .map(|(id, kind, msg)| {
                        let mut loc = vec![json!("body"), json!("questions")];
                        if let Some(s) = &self.state {
                            loc = vec![
                                json!("body"),
                                json!("requests"),
                                json!(s),
                                json!("questions"),
                            ];
                        }
                        loc.push(json!(id));
                        json!({"loc": loc, "msg": msg, "type": kind})
                    })
                    .collect()
            };
            Value::Array(items)
        } else {
            json!({"error_type": self.code, "message": self.message})
        };
        let mut error = flat.clone();
        error.insert("message".into(), json!(self.message));
        match flavor {
            Flavor::Sie => json!({"detail": {"code": self.sie_code(), "message": self.message}}),
            Flavor::OpenAi => {
                let kind = match self.status.as_u16() {
                    429 => "rate_limit_error",
                    s if s >= 500 => "server_error",
                    _ => "invalid_request_error",
                };
                let param = (self.loc.len() > 1).then(|| self.loc[1..].join("."));
                let code = match self.code {
                    "model_not_found" => "model_not_found",
                    _ => self.reason.unwrap_or(self.code),
                };
                json!({"error": {"message": self.message, "type": kind, "param": param, "code": code}})
            }
            Flavor::Internal => json!({ "error": Value::Object(error) }),
            Flavor::V5 => {
                let mut body = flat;
                body.insert("detail".into(), detail);
                body.insert("message".into(), json!(self.message));
                Value::Object(body)
            }
            Flavor::V4 => {
                let mut body = flat;
                body.insert("error".into(), Value::Object(error));
                body.insert("detail".into(), detail);
                Value::Object(body)
            }
        }
    }
}

impl From<ProtocolError> for ApiError {
    fn from(e: ProtocolError) -> ApiError {
        // A body that does not fit the schema is 422 under the standard (V5 flavor decides in
        // `for_flavor`); refusals the extension set names are 400.
        let status = match e.code {
            ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorCode::ModelNotFound => StatusCode::NOT_FOUND,
            ErrorCode::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedSurface | ErrorCode::QuestionFailed => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ErrorCode::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::NotReady => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        };
        let mut a = ApiError::new(status, e.code, e.message);
        a.reason = e.reason;
        a.limit = e.limit;
        a.loc = e.loc;
        a.validation = e.validation;
        a
    }
}

impl ApiError {
    /// Adjust status to an API family: under the standard (V5) a schema validation failure is
    /// a 422 with a detail list, and an overloaded process answers 529.
    /// The SIE error code of this error.
    pub fn sie_code(&self) -> &'static str {
        use protocol::reason as r;
        match (self.code, self.reason) {
            ("model_not_found", _) => "MODEL_NOT_FOUND",
            // Not in sie-api's table, which names no timeout: the worker API's 504.
            ("deadline_exceeded", _) => "DEADLINE_EXCEEDED",
            (_, Some(r::INPUT_TOO_LONG)) => "INPUT_TOO_LONG",
            ("not_ready", Some(r::MODEL_LOAD_FAILED)) => "MODEL_LOAD_FAILED",
            ("not_ready", Some(r::MODEL_LOADING)) => "MODEL_LOADING",
            ("not_ready", _) => "MODEL_NOT_LOADED",
            ("overloaded", Some(r::FORWARD_OUT_OF_MEMORY)) => "RESOURCE_EXHAUSTED",
            ("overloaded", _) => "QUEUE_FULL",
            ("internal_error", Some(r::INFERENCE_ERROR)) => "INFERENCE_ERROR",
            ("internal_error", _) => "INTERNAL_ERROR",
            _ => "INVALID_INPUT",
        }
    }

    pub fn for_flavor(mut self, flavor: Flavor) -> ApiError {
        if flavor == Flavor::Sie {
            self.status = match self.sie_code() {
                "MODEL_NOT_FOUND" => StatusCode::NOT_FOUND,
                "DEADLINE_EXCEEDED" => StatusCode::GATEWAY_TIMEOUT,
                "INVALID_INPUT" | "INPUT_TOO_LONG" => match self.status {
                    StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                        self.status
                    }
                    _ => StatusCode::BAD_REQUEST,
                },
                // Terminal: SIE clients must not retry it.
                "MODEL_LOAD_FAILED" => {
                    self.retry_after = None;
                    StatusCode::BAD_GATEWAY
                }
                "MODEL_NOT_LOADED" | "MODEL_LOADING" | "QUEUE_FULL" | "RESOURCE_EXHAUSTED" => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            return self;
        }
        if flavor == Flavor::OpenAi && self.status == StatusCode::UNPROCESSABLE_ENTITY {
            // OpenAI answers every request it cannot serve as sent with 400.
            self.status = StatusCode::BAD_REQUEST;
        }
        if flavor == Flavor::V5 {
            if self.validation && self.status == StatusCode::BAD_REQUEST {
                self.status = StatusCode::UNPROCESSABLE_ENTITY;
            }
            if self.status == StatusCode::TOO_MANY_REQUESTS {
                self.status = StatusCode::from_u16(529).unwrap_or(StatusCode::TOO_MANY_REQUESTS);
            }
        }
        self
    }

    pub fn from_engine(e: EngineError, served: &[String]) -> ApiError {
        match e {
            EngineError::Request(p) => p.into(),
            EngineError::ModelNotFound(name) => ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::ModelNotFound,
                format!(
                    "model {name:?} is not served; served models: {}",
                    served.join(", ")
                ),
            ),
            EngineError::NotReady(name) | EngineError::NotLoaded(name) => {
                let mut a = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::NotReady,
                    format!("model {name:?} is not ready yet"),
                )
                .with_reason(protocol::reason::MODEL_LOADING);
                a.retry_after = Some(5);
                a
            }
            EngineError::LoadFailed(name, why) => {
                let mut a = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::NotReady,
                    format!("model {name:?} failed to load: {why}"),
                )
                .with_reason(protocol::reason::MODEL_LOAD_FAILED);
                a.retry_after = Some(5);
                a
            }
            EngineError::UnsupportedSurface(name, kind) => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::UnsupportedSurface,
                format!("model {name:?} is {kind} model and does not serve this endpoint"),
            ),
            EngineError::NoModelOfKind(kind) => ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::ModelNotFound,
                format!(
                    "this process serves no {kind} model; served models: {}",
                    served.join(", ")
                ),
            ),
            EngineError::Overloaded => {
                let mut a = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::Overloaded,
                    "the model's queue is full; retry after the Retry-After delay",
                )
                .with_reason(protocol::reason::QUEUE_FULL);
                a.retry_after = Some(1);
                a
            }
            EngineError::OutOfMemory { shared: false } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::RequestTooLarge,
                "the request does not fit the model's memory in one forward",
            )
            .with_reason(protocol::reason::FORWARD_OUT_OF_MEMORY),
            EngineError::OutOfMemory { shared: true } => {
                let mut a = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::Overloaded,
                    "the forward this request shared ran out of memory; retry",
                )
                .with_reason(protocol::reason::FORWARD_OUT_OF_MEMORY);
                a.retry_after = Some(1);
                a
            }
            EngineError::Unavailable => {
                let mut a = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::NotReady,
                    "the model's worker is not running",
                )
                .with_reason(protocol::reason::MODEL_UNAVAILABLE);
                a.retry_after = Some(5);
                a
            }
            other => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::InternalError,
                other.to_string(),
            ),
        }
    }
}

impl From<engine::EncodeError> for ApiError {
    fn from(e: engine::EncodeError) -> ApiError {
        use engine::EncodeError as E;
        let message = e.to_string();
        match e.root() {
            E::TooLong { limit, .. } => {
                let mut a =
                    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                        .with_reason(protocol::reason::INPUT_TOO_LONG);
                a.limit = Some(*limit as u64);
                a
            }
            E::ScanBudget { limit, .. } => {
                let mut a =
                    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                        .with_reason(protocol::reason::SCAN_BUDGET);
                a.limit = Some(*limit as u64);
                a
            }
            E::Invalid(_) | E::Item { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                    .with_reason(protocol::reason::INPUT_MALFORMED)
            }
            E::Overloaded => {
                let mut a = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    ErrorCode::Overloaded,
                    message,
                )
                .with_reason(protocol::reason::QUEUE_FULL);
                a.retry_after = Some(1);
                a
            }
            E::Unavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::NotReady,
                message,
            )
            .with_reason(protocol::reason::MODEL_UNAVAILABLE),
            E::Inference(_) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::InternalError,
                message,
            )
            .with_reason(protocol::reason::INFERENCE_ERROR),
        }
    }
}

// Constructors for the worker's hand-checked bodies (encoders, bundle, SIE).

pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
        .with_reason(protocol::reason::BODY_MALFORMED)
}

pub(crate) fn unsupported_param(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
        .with_reason(protocol::reason::PARAMETER_UNSUPPORTED)
}
