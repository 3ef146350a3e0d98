//! The body shape each API family answers errors in, and how each adjusts the status.

use axum::http::StatusCode;
use protocol::error::reason as r;
use serde_json::{json, Map, Value};

use crate::code::openai_type;
use crate::{ApiError, Code};

/// Which family's shape an error is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `{"error": {code, message, ...}}`: /v1/decisions and the other worker endpoints.
    Internal,
    /// The worker's vllm-sr/5.0 (/v1/systemone): the standard detail (a list on a 422) with
    /// the flat fields; an overloaded process answers 529.
    V5,
    /// vllm-sr/4.0: `error`, plus `detail` and the flat fields beside it.
    V4,
    /// The published System One face (system-duo-api.txt): vllm-sr/5.0's body, where a busy
    /// model is 429 and a model with no ready worker `model_unavailable`.
    One,
    /// The SIE face: `{"detail": {"code": "MODEL_NOT_FOUND", "message": ...}}`.
    Sie,
    /// OpenAI's: `{"error": {"message", "type", "param", "code"}}`, the reason word as code.
    OpenAi,
    /// The keys service's (system-duo-api.txt): OpenAI's, with the code as code and the
    /// reason and limit beside it.
    Duo,
}

impl Shape {
    pub(crate) fn status(self, e: &ApiError) -> StatusCode {
        let status = e.status();
        match self {
            Shape::Sie => match e.sie_code() {
                "MODEL_NOT_FOUND" => StatusCode::NOT_FOUND,
                "DEADLINE_EXCEEDED" => StatusCode::GATEWAY_TIMEOUT,
                "INVALID_INPUT" | "INPUT_TOO_LONG" => match status {
                    StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE => status,
                    _ => StatusCode::BAD_REQUEST,
                },
                // Terminal: SIE clients must not retry it.
                "MODEL_LOAD_FAILED" => StatusCode::BAD_GATEWAY,
                "MODEL_NOT_LOADED" | "MODEL_LOADING" | "QUEUE_FULL" | "RESOURCE_EXHAUSTED" => {
                    StatusCode::SERVICE_UNAVAILABLE
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            // OpenAI answers every request it cannot serve as sent with 400.
            Shape::OpenAi if status == StatusCode::UNPROCESSABLE_ENTITY => StatusCode::BAD_REQUEST,
            Shape::V5 | Shape::One if e.validation && status == StatusCode::BAD_REQUEST => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Shape::V5 if status == StatusCode::TOO_MANY_REQUESTS => {
                StatusCode::from_u16(529).unwrap_or(status)
            }
            _ => status,
        }
    }

    pub(crate) fn retry_after(self, e: &ApiError) -> Option<u64> {
        if self == Shape::Sie && e.sie_code() == "MODEL_LOAD_FAILED" {
            return None;
        }
        e.retry_after.or(e.code.retry_after())
    }

    /// The code as this family spells it.
    fn code(self, e: &ApiError) -> &'static str {
        match (self, e.code) {
            (Shape::One, Code::NotReady) => Code::ModelUnavailable.as_str(),
            (_, c) => c.as_str(),
        }
    }
}

impl ApiError {
    /// The SIE error code of this error.
    pub fn sie_code(&self) -> &'static str {
        match (self.code, self.reason) {
            (Code::ModelNotFound, _) => "MODEL_NOT_FOUND",
            // Not in sie-api's table, which names no timeout: the worker API's 504.
            (Code::DeadlineExceeded, _) => "DEADLINE_EXCEEDED",
            (_, Some(r::INPUT_TOO_LONG)) => "INPUT_TOO_LONG",
            (Code::NotReady, Some(r::MODEL_LOAD_FAILED)) => "MODEL_LOAD_FAILED",
            (Code::NotReady, Some(r::MODEL_LOADING)) => "MODEL_LOADING",
            (Code::NotReady, _) => "MODEL_NOT_LOADED",
            (Code::Overloaded, Some(r::FORWARD_OUT_OF_MEMORY)) => "RESOURCE_EXHAUSTED",
            (Code::Overloaded, _) => "QUEUE_FULL",
            (Code::InternalError, Some(r::INFERENCE_ERROR)) => "INFERENCE_ERROR",
            (Code::InternalError, _) => "INTERNAL_ERROR",
            _ => "INVALID_INPUT",
        }
    }

    /// The body in `shape`'s family.
    pub fn body(&self, shape: Shape) -> Value {
        let status = self.status_in(shape);
        let code = shape.code(self);
        let mut flat = Map::new();
        flat.insert("code".into(), json!(code));
        if let Some(q) = &self.question {
            flat.insert("question".into(), json!(q));
        }
        if let Some(qe) = self.question_error {
            flat.insert("question_error".into(), json!(qe.as_str()));
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
        let mut error = flat.clone();
        error.insert("message".into(), json!(self.message));
        match shape {
            Shape::Sie => json!({"detail": {"code": self.sie_code(), "message": self.message}}),
            Shape::OpenAi => {
                let param = self
                    .param
                    .clone()
                    .or_else(|| (self.loc.len() > 1).then(|| self.loc[1..].join(".")));
                let code = match self.code {
                    Code::ModelNotFound => code,
                    _ => self.reason.unwrap_or(code),
                };
                json!({"error": {"message": self.message, "type": openai_type(status), "param": param, "code": code}})
            }
            Shape::Duo => {
                let mut e = json!({"message": self.message, "type": openai_type(status), "param": self.param, "code": code});
                if let Some(r) = self.reason {
                    e["reason"] = json!(r);
                }
                if let Some(l) = self.limit {
                    e["limit"] = json!(l);
                }
                json!({ "error": e })
            }
            Shape::Internal => json!({ "error": Value::Object(error) }),
            Shape::V5 | Shape::One => {
                let mut body = flat;
                body.insert("detail".into(), self.detail(status, code));
                body.insert("message".into(), json!(self.message));
                Value::Object(body)
            }
            Shape::V4 => {
                let mut body = flat;
                body.insert("error".into(), Value::Object(error));
                body.insert("detail".into(), self.detail(status, code));
                Value::Object(body)
            }
        }
    }

    /// The standard's `detail`: on a 422 the list of `{loc, msg, type}`, otherwise the error's
    /// type and message.
    fn detail(&self, status: StatusCode, code: &str) -> Value {
        if status != StatusCode::UNPROCESSABLE_ENTITY {
            return json!({"error_type": code, "message": self.message});
        }
        if self.failed.is_empty() {
            return json!([{"loc": self.loc, "msg": self.message, "type": self.reason.unwrap_or(code)}]);
        }
        let items = self
            .failed
            .iter()
            .map(|(id, kind, msg)| {
                let mut loc = match &self.state {
                    Some(s) => vec![
                        json!("body"),
                        json!("requests"),
                        json!(s),
                        json!("questions"),
                    ],
                    None => vec![json!("body"), json!("questions")],
                };
                loc.push(json!(id));
                json!({"loc": loc, "msg": msg, "type": kind})
            })
            .collect();
        Value::Array(items)
    }
}
