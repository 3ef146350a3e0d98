//! Request bodies as the worker reads them: the shared `body` crate decodes (limits, codings,
//! multipart); this module maps its errors to the worker's error shape.

use axum::body::Body;
use axum::http::HeaderMap;
use protocol::error::ErrorCode;

pub use ::body::{coding, raw, read, split, BodyError, BodyTimedOut, Coding};

use crate::error::ApiError;

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> ApiError {
        let code = match &e {
            BodyError::TooLarge { .. } => ErrorCode::RequestTooLarge,
            BodyError::Unsupported(_) => ErrorCode::UnsupportedMediaType,
            _ => ErrorCode::InvalidRequest,
        };
        let mut a = ApiError::new(e.status(), code, e.to_string()).with_reason(e.reason());
        a.limit = e.limit();
        a
    }
}

/// Read a body within the limits and decode it with `decode` (JSON, msgpack, ...); the body's
/// bytes are dropped once decoded.
pub async fn value(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    decode: impl FnOnce(&[u8]) -> Result<serde_json::Value, ApiError>,
) -> Result<serde_json::Value, ApiError> {
    let bytes = read(headers, body, limit).await.map_err(ApiError::from)?;
    decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use protocol::error::reason;

    #[test]
    fn each_body_error_has_its_status_and_reason() {
        let cases = [
            (
                BodyError::TooLarge {
                    limit: 10,
                    what: "as sent",
                },
                StatusCode::PAYLOAD_TOO_LARGE,
                reason::BODY_TOO_LARGE,
            ),
            (
                BodyError::Unsupported("br".into()),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                reason::ENCODING_UNSUPPORTED,
            ),
            (
                BodyError::Malformed("x".into()),
                StatusCode::BAD_REQUEST,
                reason::ENCODING_MALFORMED,
            ),
            (
                BodyError::Multipart("x".into()),
                StatusCode::BAD_REQUEST,
                reason::MULTIPART_MALFORMED,
            ),
            (
                BodyError::TimedOut(5),
                StatusCode::REQUEST_TIMEOUT,
                reason::BODY_TIMEOUT,
            ),
        ];
        for (e, status, why) in cases {
            let a = ApiError::from(e);
            assert_eq!((a.status, a.reason), (status, Some(why)));
        }
    }
}
