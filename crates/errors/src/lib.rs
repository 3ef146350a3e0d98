//! Every refusal of every face of the service, and the one place it becomes an HTTP status,
//! a code, a reason word, a `Retry-After` and a body.
//!
//! A refusal is an [`ApiError`]: a [`Code`], a message and the spec's fixed fields (reason,
//! limit, question, state). Nothing outside this crate picks a status: [`Code`] names it,
//! refined by the reason word or the failed question's error where the spec gives those their
//! own status, and the API family that answers ([`Shape`]) adjusts it as its document says
//! (vllm-sr/5.0's 422 and 529, the SIE face's table, OpenAI's 400). The worker, the router and
//! the keys service build their errors here and render them with [`ApiError::response`].

mod code;
mod duo;
mod shape;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use body::BodyError;
use protocol::error::{reason, ProtocolError, QuestionErrorKind, QuestionFailure};

pub use code::{openai_type, probe, Code, ROUTE_NOT_FOUND};
pub use duo::both_shapes;
pub use shape::Shape;

/// An error answer before it is rendered in a family's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub reason: Option<&'static str>,
    pub limit: Option<u64>,
    /// question_failed: the deciding question and its error, and every failed question.
    pub question: Option<String>,
    pub question_error: Option<QuestionErrorKind>,
    pub state: Option<String>,
    pub failed: Vec<(String, &'static str, String)>,
    pub loc: Vec<String>,
    /// OpenAI's `param`, where it is not the body location.
    pub param: Option<String>,
    /// A failure of the body's schema: a 422 with a detail list under vllm-sr/5.0.
    pub validation: bool,
    /// The delay the refusal names itself (a rate limit's window); otherwise the code's.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> ApiError {
        ApiError {
            code: code.into(),
            message: message.into(),
            reason: None,
            limit: None,
            question: None,
            question_error: None,
            state: None,
            failed: Vec::new(),
            loc: vec!["body".into()],
            param: None,
            validation: false,
            retry_after: None,
        }
    }

    pub fn with_reason(mut self, reason: &'static str) -> ApiError {
        self.reason = Some(reason);
        self
    }

    pub fn with_limit(mut self, limit: u64) -> ApiError {
        self.limit = Some(limit);
        self
    }

    /// A refusal that names its own delay (seconds; at least 1).
    pub fn retry_in(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds.max(1));
        self
    }

    /// The same error with `prefix` in front of its message (e.g. which input failed).
    pub fn prefixed(mut self, prefix: &str) -> ApiError {
        self.message = format!("{prefix}{}", self.message);
        self
    }

    /// A body that is not JSON (or not the object the endpoint reads): a schema failure.
    pub fn malformed(message: impl Into<String>) -> ApiError {
        let mut e =
            ApiError::new(Code::InvalidRequest, message).with_reason(reason::BODY_MALFORMED);
        e.validation = true;
        e
    }

    /// The body did not decode as JSON.
    pub fn bad_json(err: &serde_json::Error) -> ApiError {
        ApiError::malformed(format!("the body is not valid JSON: {err}"))
    }

    /// A path no route serves.
    pub fn no_route() -> ApiError {
        ApiError::new(Code::InvalidRequest, "no such route").with_reason(ROUTE_NOT_FOUND)
    }

    /// The status before a family adjusts it.
    pub fn status(&self) -> StatusCode {
        self.code.status(self.reason, self.question_error)
    }

    /// The status `shape`'s family answers with.
    pub fn status_in(&self, shape: Shape) -> StatusCode {
        shape.status(self)
    }

    /// The `Retry-After` seconds `shape`'s family sends, if any.
    pub fn retry_after_in(&self, shape: Shape) -> Option<u64> {
        shape.retry_after(self)
    }

    /// The JSON response in `shape`'s family: status, body, Content-Type and Retry-After.
    pub fn response(&self, shape: Shape) -> Response<Body> {
        let body = serde_json::to_vec(&self.body(shape)).unwrap_or_default();
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = self.status_in(shape);
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.retry_after_in(shape) {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }

    /// A question failure that fails a whole /v1/systemone request.
    pub fn question_failed(
        failures: &[(&str, &QuestionFailure)],
        state: Option<&str>,
    ) -> Option<ApiError> {
        let (first_id, first) = failures.first()?;
        let listed: Vec<String> = failures
            .iter()
            .map(|(id, f)| format!("{id:?}: {} ({}): {}", f.kind.as_str(), f.reason, f.message))
            .collect();
        let mut e = ApiError::new(
            Code::QuestionFailed,
            format!(
                "{} question(s) failed: {}",
                failures.len(),
                listed.join("; ")
            ),
        )
        .with_reason(first.reason);
        e.question = Some(first_id.to_string());
        e.question_error = Some(first.kind);
        e.limit = first.limit;
        e.state = state.map(String::from);
        e.failed = failures
            .iter()
            .map(|(id, f)| (id.to_string(), f.kind.as_str(), f.message.clone()))
            .collect();
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
            Code::InvalidRequest,
            format!("no question of the request is valid: {}", listed.join("; ")),
        )
        .with_reason(first.reason);
        e.question = Some(first_id.to_string());
        e.limit = first.limit;
        Some(e)
    }
}

impl From<ProtocolError> for ApiError {
    fn from(e: ProtocolError) -> ApiError {
        let mut a = ApiError::new(e.code, e.message);
        a.reason = e.reason;
        a.limit = e.limit;
        a.loc = e.loc;
        a.validation = e.validation;
        a
    }
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> ApiError {
        let (code, why) = match &e {
            BodyError::TooLarge { .. } => (Code::RequestTooLarge, reason::BODY_TOO_LARGE),
            BodyError::Unsupported(_) => (Code::UnsupportedMediaType, reason::ENCODING_UNSUPPORTED),
            BodyError::Malformed(_) => (Code::InvalidRequest, reason::ENCODING_MALFORMED),
            BodyError::Multipart(_) => (Code::InvalidRequest, reason::MULTIPART_MALFORMED),
            BodyError::TimedOut(_) => (Code::InvalidRequest, reason::BODY_TIMEOUT),
        };
        let mut a = ApiError::new(code, e.to_string()).with_reason(why);
        a.limit = e.limit();
        a
    }
}

#[cfg(test)]
mod tests;
