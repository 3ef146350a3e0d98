//! Request bodies as the worker reads them: the shared `body` crate decodes (limits, codings,
//! multipart); this module maps its errors to the worker's error shape.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use protocol::error::{reason, ErrorCode};

pub use ::body::{coding, raw, read, split, BodyError, BodyTimedOut, Coding};

use crate::error::ApiError;

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> ApiError {
        let message = e.to_string();
        match e {
            BodyError::TooLarge { limit, .. } => {
                let mut a = ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::RequestTooLarge,
                    message,
                )
                .with_reason(reason::BODY_TOO_LARGE);
                a.limit = Some(limit as u64);
                a
            }
            BodyError::Unsupported(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ErrorCode::UnsupportedMediaType,
                message,
            )
            .with_reason(reason::ENCODING_UNSUPPORTED),
            BodyError::Malformed(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                    .with_reason(reason::ENCODING_MALFORMED)
            }
            BodyError::Multipart(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
                    .with_reason(reason::MULTIPART_MALFORMED)
            }
            BodyError::TimedOut(ms) => {
                let mut a = ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    ErrorCode::InvalidRequest,
                    message,
                )
                .with_reason(reason::BODY_TIMEOUT);
                a.limit = Some(ms);
                a
            }
        }
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

    #[test]
    fn each_body_error_has_its_status_and_reason() {
        let cases = [
            (
                BodyError::TooLarge {
                    limit: 10,
                    what: "as sent",
                },
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
            ),
            (
                BodyError::Unsupported("br".into()),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "encoding_unsupported",
            ),
            (
                BodyError::Malformed("x".into()),
                StatusCode::BAD_REQUEST,
                "encoding_malformed",
            ),
            (
                BodyError::Multipart("x".into()),
                StatusCode::BAD_REQUEST,
                "multipart_malformed",
            ),
            (
                BodyError::TimedOut(5),
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
            ),
        ];
        for (e, status, why) in cases {
            let a = ApiError::from(e);
            assert_eq!((a.status, a.reason), (status, Some(why)));
        }
    }
}
